"""The decision table, row by row: every path of the cascade, including the judges' failures."""

from __future__ import annotations

from typing import Any

import pytest

from rose_sql.decide import Decision, Facts, decide
from rose_sql.engines import CONTRACT
from rose_sql.results import Execution, ResultSet
from rose_sql.verdicts import ProverReply, RefuterReply

OK = Execution("ok", 0.01, result=ResultSet(("x",), ((1,),), 1))
ERROR = Execution("error", 0.01, error="no such column: y")
REJECTED = Execution("rejected", 0.0, error="not a SELECT statement")
TIMEOUT = Execution("timeout", 30.0, error="timed out after 30 s")
PASS = ProverReply(expected_answer="e", sql_behaviour="b", reasoning="r", answers_question=True)
FAIL = ProverReply(expected_answer="e", sql_behaviour="b", reasoning="r", answers_question=False)
UPHOLD = RefuterReply(reasoning="r", overturn=False, ambiguity="none", gold_correct=True)
OVERTURN = RefuterReply(reasoning="r", overturn=True, ambiguity="none", gold_correct=True, label="missing_filter")

# (facts, expected): expected is a step name or (score, unscored_reason, decided_by)
TABLE: list[tuple[str, Facts, Any]] = [
    ("db missing", Facts(False, None, None), (None, "db_missing", None)),
    ("pred error", Facts(True, OK, ERROR), (0, None, "execution")),
    ("pred rejected", Facts(True, OK, REJECTED, judge=True), (0, None, "execution")),
    ("pred timeout, gold ok", Facts(True, OK, TIMEOUT), (0, None, "execution")),
    ("gold error", Facts(True, ERROR, OK, judge=True), (None, "gold_error", None)),
    (
        "both time out: machine too slow, not the prediction's fault",
        Facts(True, TIMEOUT, TIMEOUT),
        (None, "gold_error", None),
    ),
    ("pred cannot run whatever the gold", Facts(True, ERROR, ERROR), (0, None, "execution")),
    ("no judge", Facts(True, OK, OK, equal=True), (None, "awaiting_judge", None)),
    ("no gold, no judge", Facts(True, None, OK), (None, "no_gold", None)),
    ("no gold, pred fails", Facts(True, None, ERROR), (0, None, "execution")),
    # results match
    ("match, paper: refuter", Facts(True, OK, OK, equal=True, judge=True, matched_refuter="always"), "refuter_matched"),
    ("match, never", Facts(True, OK, OK, equal=True, judge=True, matched_refuter="never"), (1, None, "execution")),
    (
        "match, evidence, none",
        Facts(True, OK, OK, equal=True, judge=True, matched_refuter="evidence"),
        (1, None, "execution"),
    ),
    (
        "match, evidence, doubt",
        Facts(True, OK, OK, equal=True, judge=True, matched_refuter="evidence", evidence_questions_match=True),
        "refuter_matched",
    ),
    ("match, overturned", Facts(True, OK, OK, equal=True, judge=True, refuter=OVERTURN), (0, None, "refuter")),
    ("match, upheld", Facts(True, OK, OK, equal=True, judge=True, refuter=UPHOLD), (1, None, "refuter")),
    # results differ
    ("differ: prover first", Facts(True, OK, OK, equal=False, judge=True), "prover"),
    ("undecidable: prover first", Facts(True, OK, OK, equal=None, judge=True), "prover"),
    ("prover false", Facts(True, OK, OK, equal=False, judge=True, prover=FAIL), (0, None, "prover")),
    ("prover true: refuter", Facts(True, OK, OK, equal=False, judge=True, prover=PASS), "refuter"),
    (
        "refuter overturns",
        Facts(True, OK, OK, equal=False, judge=True, prover=PASS, refuter=OVERTURN),
        (0, None, "refuter"),
    ),
    (
        "refuter upholds",
        Facts(True, OK, OK, equal=False, judge=True, prover=PASS, refuter=UPHOLD),
        (1, None, "refuter"),
    ),
    ("no gold: prover alone", Facts(True, None, OK, judge=True), "prover"),
    ("no gold: prover pass stands", Facts(True, None, OK, judge=True, prover=PASS), (1, None, "prover")),
    # judges failing
    ("prover invalid", Facts(True, OK, OK, equal=False, judge=True, prover="failed"), (None, "judge_error", None)),
    (
        "refuter invalid",
        Facts(True, OK, OK, equal=False, judge=True, prover=PASS, refuter="failed"),
        (None, "judge_error", None),
    ),
    ("budget gone", Facts(True, OK, OK, equal=False, judge=True, prover="no_budget"), (None, "budget_exhausted", None)),
    ("votes split", Facts(True, OK, OK, equal=False, judge=True, prover="split"), (None, "judges_split", None)),
    (
        "refuter votes split",
        Facts(True, OK, OK, equal=True, judge=True, matched_refuter="always", refuter="split"),
        (None, "judges_split", None),
    ),
]


@pytest.mark.parametrize(("facts", "expected"), [(f, e) for _, f, e in TABLE], ids=[n for n, _, _ in TABLE])
def test_decision_table(facts: Facts, expected: Any) -> None:
    got = decide(facts)
    if isinstance(expected, str):
        assert got == expected
    else:
        assert isinstance(got, Decision)
        assert (got.score, got.unscored_reason, got.decided_by) == expected
        assert got.why


# --------------------------------------------------------------------------- the outcome contract


@pytest.mark.parametrize("failure", sorted(CONTRACT))
def test_the_table_reads_every_row_of_the_outcome_contract_as_written(failure: str) -> None:
    """What an engine's failure makes of an item is written once (rose_sql.engines.base.CONTRACT): the
    decision table must read each row so, whichever engine produced it, on the gold's side and on the
    prediction's (the other side ran)."""
    row = CONTRACT[failure]  # type: ignore[index]
    failed = Execution(row.status, 0.1, error=f"a {failure} failure", limit=row.limit)
    gold_side = decide(Facts(True, failed, OK, judge=True))
    assert isinstance(gold_side, Decision) and gold_side.score is None and gold_side.unscored_reason == row.gold
    pred_side = decide(Facts(True, OK, failed, judge=True))
    assert isinstance(pred_side, Decision)
    if row.prediction == "0":
        assert (pred_side.score, pred_side.decided_by) == (0, "execution")
    else:
        assert pred_side.score is None and pred_side.unscored_reason == row.prediction
    if row.attributed is not None:  # what the sandbox records once the statement is proven to have caused it
        assert row.attribution
        proven = Execution(row.attributed, 0.1, error=f"a {failure} failure, proven", limit=row.limit)
        pred_side = decide(Facts(True, OK, proven, judge=True))
        assert isinstance(pred_side, Decision) and (pred_side.score, pred_side.decided_by) == (0, "execution")
        if "gold_error" in row.attribution:
            gold_side = decide(Facts(True, proven, OK, judge=True))
            assert isinstance(gold_side, Decision) and gold_side.unscored_reason == "gold_error"


def test_a_gold_reading_what_is_not_there_is_decided_before_the_predictions_own_error() -> None:
    missing = Execution("missing", 0.0, error="no such table: races")
    decision = decide(Facts(True, missing, ERROR, judge=True))
    assert isinstance(decision, Decision) and decision.unscored_reason == "db_missing"
    assert "no such table: races" in decision.why
