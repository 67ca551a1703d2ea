"""Cheap reasons to doubt a match, found without the witness search.

Two results that match can still both be wrong, or match by coincidence. Two signs of that cost
nothing to see: both results are empty (any query that selects nothing would match), and the two
queries read different tables yet agree. They are recorded as ``record.doubts`` whenever a judge is
configured; with the evidence's witness and gold smells they decide whether the matched-results policy
``evidence`` asks the Refuter (:func:`rose_sql.evidence.findings.questions_match`).
"""

from __future__ import annotations

from rose_sql.comparison.comparator import Comparison
from rose_sql.results import Execution
from rose_sql.sql import tables_read

EMPTY = "Both results are empty: any query that selects nothing would match."
OTHER_TABLES = "The two queries read different tables, yet return the same result on this database."


def match_doubts(
    pred_sql: str, gold_sql: str | None, gold: Execution | None, comparison: Comparison | None
) -> list[str]:
    """The doubts about a match (none when the results do not match)."""
    rows = gold.result.row_count if gold is not None and gold.result is not None else None
    return doubts_of(pred_sql, gold_sql, comparison is not None and comparison.equal is True, rows)


def doubts_of(pred_sql: str | None, gold_sql: str | None, equal: bool, gold_rows: int | None) -> list[str]:
    """The doubts about a match from what a record keeps (the queries, whether the results matched, the
    gold's row count): a run without a judge does not note them, and a reader finds them as it would have."""
    if not equal:
        return []
    out = []
    if gold_rows == 0:
        out.append(EMPTY)
    if tables_read(pred_sql) != tables_read(gold_sql):
        out.append(OTHER_TABLES)
    return out
