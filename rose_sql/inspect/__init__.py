"""ROSE as an inspect_ai scorer: text-to-SQL answers judged by the cascade, with inspect's own models.

Needs the optional extra: ``pip install 'rose-sql[inspect]'``. :func:`rose_scorer` runs the
execution stage, the evidence and the Prover / Refuter cascade on each sample, asking the judges
through :class:`InspectLLM` (the model bound to the ``grader`` role, or the scorer's ``model``);
:func:`sql_sample` builds samples as the scorer reads them; :mod:`rose_sql.inspect.demo` is a task on
the bundled demo database::

    inspect eval rose_sql/inspect/demo.py --model openai/gpt-4o-mini --model-role grader=openai/o3
"""

from __future__ import annotations

try:
    import inspect_ai  # noqa: F401
except ImportError as e:  # pragma: no cover - the extra is installed wherever the tests run
    raise ImportError("rose_sql.inspect needs inspect_ai: pip install 'rose-sql[inspect]'") from e

from rose_sql.inspect.judge import InspectLLM, judge_config
from rose_sql.inspect.scorer import GRADER_ROLE, extract_sql, record_score, rose_scorer, sql_sample

__all__ = ["GRADER_ROLE", "InspectLLM", "extract_sql", "judge_config", "record_score", "rose_scorer", "sql_sample"]
