"""The decision table: from what the stages established to a score, or to the next judge to ask.

A pure function, tested as a table. :func:`decide` is called again after every judge reply until it
returns a :class:`Decision`:

- the database is missing -> unscored ``db_missing``;
- the prediction does not execute (error, rejected) -> 0, decided by execution;
- the gold does not execute -> unscored ``gold_error`` (never a 0 or a 1 for the prediction);
- the prediction times out while the gold ran -> 0;
- no judge configured -> unscored ``awaiting_judge`` (or ``no_gold``);
- results match -> the matched-results policy: ``never`` accepts (1, by execution); ``evidence``
  asks the Refuter only when deterministic evidence questions the match; ``always`` (the paper)
  always asks it; the Refuter's overturn gives 0, otherwise 1;
- results differ -> the Prover; false gives 0; true -> the Refuter decides (without a gold, the
  Prover's pass stands);
- a judge that gives no valid reply -> unscored ``judge_error``; the budget is spent ->
  unscored ``budget_exhausted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rose_sql.config import MatchedRefuter
from rose_sql.execute import Execution

if TYPE_CHECKING:  # the replies' pydantic models are loaded only where a judge is configured
    from rose_sql.judges.replies import ProverReply, RefuterReply

Unscored = Literal[
    "db_missing", "no_gold", "gold_error", "awaiting_judge", "judge_error", "budget_exhausted", "internal_error"
]
DecidedBy = Literal["execution", "prover", "refuter"]
Step = Literal["prover", "refuter", "refuter_matched"]
JudgeOutcome = Literal["failed", "no_budget"]


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


@dataclass(frozen=True, slots=True)
class Facts:
    """What is known about an item so far."""

    db_found: bool
    gold: Execution | None
    pred: Execution | None
    equal: bool | None = None
    """Our comparator: True when the results match, False when they differ, None when undecidable."""
    judge: bool = False
    """Whether an LLM judge is configured."""
    matched_refuter: MatchedRefuter = "always"
    evidence_questions_match: bool = False
    """Deterministic evidence (a witness, a gold smell) casts doubt on a match."""
    prover: ProverReply | JudgeOutcome | None = None
    refuter: RefuterReply | JudgeOutcome | None = None


def _judge_problem(value: object, stage: str) -> Decision | None:
    if value == "failed":
        return Decision(None, "judge_error", None, f"the {stage} gave no valid reply")
    if value == "no_budget":
        return Decision(None, "budget_exhausted", None, f"the budget ran out before the {stage} could be asked")
    return None


def decide(f: Facts) -> Decision | Step:
    """The decision for an item, or the judge to ask next."""
    if not f.db_found:
        return Decision(None, "db_missing", None, "the database file does not exist")
    pred, gold = f.pred, f.gold
    failed = f"the prediction does not execute ({pred.status}): {pred.error}" if pred and not pred.ok else ""
    if pred is not None and pred.status in ("error", "rejected"):
        return Decision(0, None, "execution", failed)  # wrong whatever the gold says
    if gold is not None and not gold.ok:
        return Decision(None, "gold_error", None, f"the gold SQL does not execute ({gold.status}): {gold.error}")
    if pred is not None and pred.status == "timeout":
        return Decision(0, None, "execution", failed)  # the gold ran within the same limit
    if not f.judge:
        if gold is None:
            return Decision(None, "no_gold", None, "the item has no gold SQL and no judge is configured")
        return Decision(None, "awaiting_judge", None, "executions done; whether it answers the question needs a judge")
    for value, stage in ((f.prover, "Prover"), (f.refuter, "Refuter")):
        if (problem := _judge_problem(value, stage)) is not None:
            return problem
    if f.equal is True and gold is not None:
        if f.matched_refuter == "never" or (f.matched_refuter == "evidence" and not f.evidence_questions_match):
            return Decision(1, None, "execution", "the result equals the gold's and no evidence questions the match")
        if f.refuter is None:
            return "refuter_matched"
        return _refuted(f.refuter)
    if f.prover is None:
        return "prover"
    assert not isinstance(f.prover, str)  # a reply: the judge problems returned above
    if not f.prover.answers_question:
        return Decision(0, None, "prover", "the Prover found that the result does not answer the question")
    if gold is None:
        return Decision(1, None, "prover", "the Prover found that the result answers the question (no gold)")
    if f.refuter is None:
        return "refuter"
    return _refuted(f.refuter)


def _refuted(r: RefuterReply | JudgeOutcome) -> Decision:
    assert not isinstance(r, str)  # a reply: the judge problems were returned before
    if r.overturn:
        return Decision(0, None, "refuter", f"the Refuter overturned the pass ({r.label or 'no label'})")
    return Decision(1, None, "refuter", "the Refuter found no hard evidence against the prediction")
