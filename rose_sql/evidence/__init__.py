"""Evidence instead of opinion: witnesses, distinguishing rows and gold smells for one item.

:mod:`~rose_sql.evidence.findings` holds what is found (the typed part of a record);
:mod:`~rose_sql.evidence.finder` finds it, on the engine's space (:mod:`rose_sql.engines.spaces`: a private
copy where data is changed), with :mod:`~rose_sql.evidence.witness` (the witness search),
:mod:`~rose_sql.evidence.distinguish` (distinguishing rows), :mod:`~rose_sql.evidence.smells` (gold smells) and
:mod:`~rose_sql.evidence.features` (what the queries read). Only the findings are imported here, so that
code reading finished runs does not load the search.
"""

from rose_sql.engines.spaces import Change
from rose_sql.evidence.findings import Diff, Evidence, ResultSample, SearchInfo, Smell, Witness

__all__ = ["Change", "Diff", "Evidence", "ResultSample", "SearchInfo", "Smell", "Witness"]
