"""The decision table, row by row."""

from __future__ import annotations

import pytest

from rose_sql.decide import decide
from rose_sql.execute import Execution, ResultSet

OK = Execution("ok", 0.01, result=ResultSet(("x",), ((1,),), 1))
ERROR = Execution("error", 0.01, error="no such column: y")
REJECTED = Execution("rejected", 0.0, error="not a SELECT statement")
TIMEOUT = Execution("timeout", 30.0, error="timed out after 30 s")

TABLE = [
    # db found, gold, pred -> score, unscored_reason, decided_by
    (False, None, None, None, "db_missing", None),
    (True, OK, ERROR, 0, None, "execution"),
    (True, OK, REJECTED, 0, None, "execution"),
    (True, OK, TIMEOUT, 0, None, "execution"),
    (True, ERROR, OK, None, "gold_error", None),
    (True, TIMEOUT, OK, None, "gold_error", None),
    (True, TIMEOUT, TIMEOUT, None, "gold_error", None),  # a slow machine must not punish the prediction
    (True, ERROR, ERROR, 0, None, "execution"),  # a prediction that cannot run is wrong whatever the gold
    (True, OK, OK, None, "awaiting_judge", None),
    (True, None, OK, None, "no_gold", None),
    (True, None, ERROR, 0, None, "execution"),
]


@pytest.mark.parametrize(("db_found", "gold", "pred", "score", "unscored", "decided_by"), TABLE)
def test_decision_table(
    db_found: bool,
    gold: Execution | None,
    pred: Execution | None,
    score: int | None,
    unscored: str | None,
    decided_by: str | None,
) -> None:
    d = decide(db_found=db_found, gold=gold, pred=pred)
    assert (d.score, d.unscored_reason, d.decided_by) == (score, unscored, decided_by)
    assert d.why
