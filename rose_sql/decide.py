"""The decision table: from what the stages established to a score and who decided it.

A pure function, tested as a table. Until a judge has looked at an item, only what execution
settles is decided: a prediction that fails scores 0; a missing database or a failing gold leaves
the item unscored (never a 0 or a 1 for the prediction); everything else awaits a judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rose_sql.execute import Execution

Unscored = Literal["db_missing", "no_gold", "gold_error", "awaiting_judge", "internal_error"]
DecidedBy = Literal["execution"]


@dataclass(frozen=True, slots=True)
class Decision:
    """The score of one item and why."""

    score: int | None
    """1, 0, or None when unscored."""
    unscored_reason: Unscored | None
    """Why there is no score (None when scored)."""
    decided_by: DecidedBy | None
    """Which stage settled the score (None when unscored)."""
    why: str
    """One line a person can read."""


def decide(*, db_found: bool, gold: Execution | None, pred: Execution | None) -> Decision:
    """Decide an item from its executions (``gold`` is None when the item has no gold SQL)."""
    if not db_found:
        return Decision(None, "db_missing", None, "the database file does not exist")
    failed = f"the prediction does not execute ({pred.status}): {pred.error}" if pred and not pred.ok else ""
    if pred is not None and pred.status in ("error", "rejected"):
        return Decision(0, None, "execution", failed)  # wrong whatever the gold says
    if gold is not None and not gold.ok:
        return Decision(None, "gold_error", None, f"the gold SQL does not execute ({gold.status}): {gold.error}")
    if pred is not None and pred.status == "timeout":
        return Decision(0, None, "execution", failed)  # the gold ran within the same limit
    if gold is None:
        return Decision(None, "no_gold", None, "the item has no gold SQL; a judge must decide without one")
    return Decision(None, "awaiting_judge", None, "executions done; whether it answers the question needs a judge")
