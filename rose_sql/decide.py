"""The decision table, the one walk over it, and the vocabulary of decisions.

:func:`decide` is a pure function, tested as a table: from what the stages established it returns a
:class:`Decision`, or the judge to ask next. An execution's status means the same on every engine (the
outcome contract, :data:`rose_sql.engines.base.CONTRACT`); where both queries failed, the first rule that
applies decides:

- the database is missing -> unscored ``db_missing``; it cannot be read -> unscored ``db_unreadable``
  (by the gold; by the prediction only when the gold, run again on a fresh connection right after, failed
  the same way: otherwise the prediction's failure is its own ``error``, see
  :meth:`Executor.attribute <rose_sql.engines.execute.Executor.attribute>`); a relation the gold reads
  does not exist -> unscored ``db_missing`` (the prediction is never scored against an environment that
  lacks the gold's tables);
- the prediction does not execute on its own account (error, rejected, a relation it names does not
  exist) -> 0, decided by execution, whatever the gold did: a query that does not run answers nothing;
- a query was stopped by a wall clock and the stop could not be confirmed -> unscored ``wall_guard``
  (the sandbox confirms every such stop: the statement runs again alone, in a fresh process, with its
  guard doubled; stopped again, it is a ``timeout``, otherwise the second run is what is recorded);
- the gold does not execute (a runaway included) -> unscored ``gold_error`` (never a 0 or a 1 for a
  prediction that ran);
- the prediction ran out of its step budget or the engine's memory, or ran away (confirmed), while the
  gold ran -> 0 (the official scripts score a timeout 0);
- no judge configured -> unscored ``awaiting_judge`` (or ``no_gold``; or ``undecided`` when our
  comparator's bounded column search gave up, so that even a match is unknown);
- results match -> the matched-results policy: ``never`` accepts (1, by execution); ``evidence``
  asks the Refuter only when deterministic evidence questions the match; ``always`` (the paper)
  always asks it; the Refuter's overturn gives 0, otherwise 1;
- results differ, or whether they match is undecided (a truncated result, a column search that gave
  up) -> the Prover; false gives 0; true -> the Refuter decides (without a gold, or when
  the Refuter is not consulted, the Prover's pass stands);
- a judge would be asked but the item has no question text -> unscored ``no_question`` (the
  judges judge whether the SQL answers the question: without one they would guess);
- a judge that answers but never validly -> unscored ``judge_invalid``; an endpoint that gives no
  usable answer -> unscored ``judge_error``; the budget is spent -> unscored ``budget_exhausted``; a
  judge's votes split under a rule that needs them to agree -> unscored ``judges_split``.

:func:`walk` walks the table, asking for each judge's answer as the table calls for it: evaluation
answers with the LLM, replay and the import of the ROSE authors' outputs with stored replies, the dry
run with each possible reply. Every caller goes through it, so they cannot disagree.

:data:`UNSCORED` is the one vocabulary of reasons an item has no score, with what each means and what
to do about it; nothing else in the package invents a reason.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, cast

from rose_sql.config import MatchedRefuter
from rose_sql.results import Execution

if TYPE_CHECKING:  # the replies' pydantic models are loaded only where a judge is configured
    from rose_sql.verdicts import ProverReply, RefuterReply

Unscored = Literal[
    "db_missing",
    "db_unreadable",
    "no_gold",
    "gold_error",
    "awaiting_judge",
    "no_question",
    "judge_error",
    "judge_invalid",
    "judges_split",
    "budget_exhausted",
    "internal_error",
    "wall_guard",
    "no_score",
    "absent_from_outputs",
    "failed_in_their_run",
    "not_replayable",
    "undecided",
]
"""Why an item has no score. Each is described in :data:`UNSCORED`."""


@dataclass(frozen=True, slots=True)
class Reason:
    """What an unscored reason means, and what to do about it."""

    means: str
    """What happened, in a sentence."""
    fix: str
    """What the user can do."""
    transient: bool = False
    """Whether evaluating the item again can give a score (``--resume`` retries these)."""


UNSCORED: dict[Unscored, Reason] = {
    "db_missing": Reason(
        "the item's database, or a table its gold reads, does not exist where --db points",
        "check --db: a folder must hold <db_id>/<db_id>.sqlite; a shared server database must hold the tables "
        "of every db_id evaluated (rose db copy loads one)",
    ),
    "db_unreadable": Reason(
        "the item's database could not be read (not a database, corrupt, locked, or an I/O error; on a "
        "server: a login or a permission refused, unreachable, or gone away during the run): by the gold, or "
        "by the prediction and then by the gold run again on a fresh connection",
        "check the file or the server (the record's why names it and the engine's message), then --resume",
        transient=True,
    ),
    "no_gold": Reason("the item has no gold SQL and no judge is configured", "give --gold, or configure a judge"),
    "gold_error": Reason(
        "the gold SQL does not execute (or exceeded a limit)",
        "fix the gold SQL; `rose audit` lists such items for benchmark maintainers",
    ),
    "awaiting_judge": Reason(
        "execution cannot settle the item; whether it answers the question needs a judge",
        "rerun with --judge-model (and --resume to keep what is done)",
    ),
    "no_question": Reason(
        "the item has no question text, and the judges judge whether the SQL answers the question",
        "give the questions: --gold dev.json for Spider and BIRD, or a question field in the input",
    ),
    "judge_error": Reason(
        "the judge's endpoint gave no usable answer: it kept failing, timed out, or answered outside the protocol",
        "check the endpoint and model (the record's calls keep the error and what was received), then --resume",
        transient=True,
    ),
    "judge_invalid": Reason(
        "a judge answered, but no reply was a valid verdict, re-asks included (the raw replies are kept)",
        "--resume --retry-invalid asks again with fresh calls (a plain --resume reads the same replies from the "
        "cache); if it persists, try another model",
        transient=True,
    ),
    "judges_split": Reason(
        "the judges' votes split and the aggregation rule (unanimous) needs them to agree",
        "nothing: the votes are on the record; `rose replay --aggregate majority` decides them by majority",
    ),
    "budget_exhausted": Reason(
        "the --budget was spent before this item's judges could be asked",
        "--resume with a larger --budget",
        transient=True,
    ),
    "internal_error": Reason(
        "a bug in ROSE-SQL while evaluating this item",
        "report it (the record's why says where); --resume retries it",
        True,
    ),
    "wall_guard": Reason(
        "a wall clock stopped something whose outcome could not be confirmed: the evidence search past its "
        "--evidence-budget (when the judges would read it), a reward query past the server's --deadline, or a "
        "query stopped by --timeout whose run again alone (with the guard doubled) could not be made. A query "
        "confirmed to run away is never this: it is a timeout (a prediction scores 0)",
        "--resume retries it (on a less loaded machine, or with a larger --evidence-budget or --deadline)",
        transient=True,
    ),
    "undecided": Reason(
        "our comparator's column search gave up (its counted work bound, the same on every machine): too many "
        "columns of the two results look alike to tell whether the rows agree, so no match or mismatch is known",
        "configure a judge (--judge-model): the Prover decides such items; the record's comparison says which "
        "columns; running again gives the same outcome",
    ),
    "no_score": Reason("the scores file gives no score for this item", "nothing: imported as it was"),
    "absent_from_outputs": Reason(
        "the imported outputs have no entry for this item of the benchmark (or labels), and their run recorded no "
        "failure for it: it was dropped silently (the record's why says more when the predictions file is known)",
        "nothing: their run dropped it",
    ),
    "failed_in_their_run": Reason(
        "the imported outputs have no entry for this item, and their run recorded it as failed "
        "(problem_question_ids.json) and left it out",
        "nothing: their run failed on it",
    ),
    "not_replayable": Reason(
        "the policy replayed needs a judge reply that the original run never asked for",
        "rerun with that policy (stored replies are reused from the cache)",
    ),
}

NO_PREDICTION = "no prediction for this question of the gold file: counted wrong (no_prediction), as leaderboards do"
"""The decision's ``why`` for a question without a prediction."""

DecidedBy = Literal["execution", "prover", "refuter", "imported", "panel"]
"""The stage that settled a score (``imported``: taken as published from outputs we could not re-decide;
``panel``: several stored runs' scores combined by a rule, ``rose panel``)."""
Step = Literal["prover", "refuter", "refuter_matched"]
"""A judge the table asks for: the Prover, the Refuter on a Prover's pass, or the Refuter on a match."""
JudgeOutcome = Literal["failed", "invalid", "no_budget", "split"]
"""A judge that was asked but gave no usable answer: its endpoint failed, its replies were invalid, the
budget forbade the call, or its votes split under a rule that needs them to agree (``unanimous``)."""


@dataclass(frozen=True, slots=True)
class DatasetLabels:
    """What the Refuter said about the dataset item itself (``record.labels``): GoldX and AmbQ."""

    goldx: bool | None = None
    """The gold SQL is wrong (None: no Refuter looked)."""
    goldx_confidence: float | None = None
    """How sure the Refuter was that the gold is wrong or right (0-1), when it said."""
    ambq: bool | None = None
    """The question is ambiguous (the paper's AmbQ; None: no Refuter looked)."""
    ambiguity: str | None = None
    """The Refuter's ambiguity: ``none``, ``question`` or ``schema`` (schema ambiguity is not AmbQ)."""
    diagnostic: str | None = None
    """The Refuter's short diagnostic label (``missing_filter``, ``harmless_format``...)."""


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
    labels: DatasetLabels = field(default_factory=DatasetLabels)
    """GoldX / AmbQ, from the Refuter's reply when one was asked."""


@dataclass(frozen=True, slots=True)
class Facts:
    """What is known about an item so far."""

    db_found: bool
    """Whether the database exists."""
    gold: Execution | None
    pred: Execution | None
    equal: bool | None = None
    """Our comparator: True when the results match, False when they differ, None when undecidable."""
    undecided: bool = False
    """Our comparator's bounded column search gave up (``equal`` is None): reason ``undecided``."""
    judge: bool = False
    """Whether an LLM judge is configured."""
    matched_refuter: MatchedRefuter = "always"
    evidence_questions_match: bool = False
    """Deterministic evidence (a doubt, a witness, a gold smell) casts doubt on a match."""
    evidence_guard: str | None = None
    """Set when the wall-time guard stopped the evidence search (the judges would read machine-dependent evidence)."""
    consult_refuter: bool = True
    """Whether the Refuter is consulted on a Prover's pass (replay's ``no-refuter`` variant turns it off)."""
    question: bool = True
    """Whether the item has question text for the judges to read."""
    predicted: bool = True
    """False for a question of the gold file that the prediction file has no prediction for."""
    db: str = ""
    """The database (named in the reasons about it)."""
    prover: ProverReply | JudgeOutcome | None = None
    """The Prover's answer, once asked."""
    refuter: RefuterReply | JudgeOutcome | None = None
    """The Refuter's answer, once asked."""


def _judge_problem(value: object, stage: str) -> Decision | None:
    if value == "failed":
        return Decision(None, "judge_error", None, f"the {stage}'s endpoint gave no usable answer")
    if value == "invalid":
        return Decision(None, "judge_invalid", None, f"the {stage} gave no valid reply")
    if value == "no_budget":
        return Decision(None, "budget_exhausted", None, f"the budget ran out before the {stage} could be asked")
    if value == "split":
        return Decision(None, "judges_split", None, f"the {stage}'s votes split and the rule needs them to agree")
    return None


def decide(f: Facts) -> Decision | Step:
    """The decision for an item, or the judge to ask next."""
    step = _table(f)
    if isinstance(step, str) and not f.question:  # never ask a judge about a question it cannot read
        return Decision(None, "no_question", None, "the item has no question text for the judges to read")
    return step


def _table(f: Facts) -> Decision | Step:
    if not f.db_found:
        return Decision(None, "db_missing", None, f"the database does not exist: {f.db}")
    pred, gold = f.pred, f.gold
    for e in (gold, pred):
        if e is not None and e.status == "unreadable":  # the database's fault, whichever query met it
            return Decision(None, "db_unreadable", None, f"{e.error} ({f.db})")
    if gold is not None and gold.status == "missing":
        return Decision(None, "db_missing", None, f"the gold reads what {f.db} does not have: {gold.error}")
    failed = f"the prediction does not execute ({pred.status}): {pred.error}" if pred and not pred.ok else ""
    if pred is not None and pred.status in ("error", "rejected", "missing"):
        return Decision(0, None, "execution", failed)  # wrong whatever the gold says
    for side, e in (("prediction", pred), ("gold", gold)):
        if e is not None and e.status == "guard":  # a wall clock, not confirmed: never a score
            return Decision(None, "wall_guard", None, f"the {side} was {e.error}")
    if gold is not None and not gold.ok:
        return Decision(None, "gold_error", None, f"the gold SQL does not execute ({gold.status}): {gold.error}")
    if not f.predicted:
        return Decision(0, None, "execution", NO_PREDICTION)
    if pred is not None and pred.status == "timeout":  # a limit, or a confirmed runaway: the gold ran within it
        return Decision(0, None, "execution", failed)
    if f.judge and f.evidence_guard:
        return Decision(None, "wall_guard", None, f.evidence_guard)
    if not f.judge:
        if gold is None:
            return Decision(None, "no_gold", None, "the item has no gold SQL and no judge is configured")
        if f.undecided:
            why = "our comparator's bounded column search gave up (too many columns look alike); no judge is configured"
            return Decision(None, "undecided", None, why)
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
    if not f.consult_refuter:
        return Decision(1, None, "prover", "the Prover's pass stands (the Refuter is not consulted)")
    if f.refuter is None:
        return "refuter"
    return _refuted(f.refuter)


def _refuted(r: RefuterReply | JudgeOutcome) -> Decision:
    assert not isinstance(r, str)  # a reply: the judge problems were returned before
    if r.overturn:
        return Decision(0, None, "refuter", f"the Refuter overturned the pass ({r.label or 'no label'})")
    return Decision(1, None, "refuter", "the Refuter found no hard evidence against the prediction")


def walk(facts: Facts) -> Generator[Step, ProverReply | RefuterReply | JudgeOutcome, Decision]:
    """Walk the table: yields each judge it asks for, takes the answer sent back, returns the decision.

    The decision carries the dataset labels (GoldX, AmbQ) of the Refuter's reply, when there is one.
    Drive it with :func:`settle`, or by hand where answers come asynchronously::

        steps = walk(facts)
        try:
            step = next(steps)
            while True:
                step = steps.send(await ask(step))
        except StopIteration as done:
            decision = done.value
    """
    while True:
        step = decide(facts)
        if isinstance(step, Decision):
            return replace(step, labels=labels_of(facts.refuter))
        answer = yield step
        if step == "prover":  # the Prover's answer is a ProverReply (or an outcome), the Refuter's a RefuterReply
            facts = replace(facts, prover=cast("ProverReply | JudgeOutcome", answer))
        else:
            facts = replace(facts, refuter=cast("RefuterReply | JudgeOutcome", answer))


def settle(facts: Facts, answer: Callable[[Step], ProverReply | RefuterReply | JudgeOutcome | None]) -> Decision:
    """Walk the table with answers at hand (stored replies): ``answer(step)`` gives the judge's
    answer, or None when there is none, which leaves the item unscored ``not_replayable``."""
    steps = walk(facts)
    try:
        step = next(steps)
        while True:
            got = answer(step)
            if got is None:
                stage = "Prover" if step == "prover" else "Refuter"
                why = f"the original run never asked the {stage} here; this policy needs it"
                return Decision(None, "not_replayable", None, why)
            step = steps.send(got)
    except StopIteration as done:
        decision: Decision = done.value
        return decision


def labels_of(refuter: RefuterReply | JudgeOutcome | None) -> DatasetLabels:
    """GoldX / AmbQ as the paper reads a Refuter's reply (none without a reply)."""
    if refuter is None or isinstance(refuter, str):
        return DatasetLabels()
    return DatasetLabels(
        goldx=not refuter.gold_correct,
        goldx_confidence=refuter.gold_confidence,
        ambq=refuter.ambiguity == "question",  # the paper's AmbQ; schema ambiguity is kept apart
        ambiguity=refuter.ambiguity,
        diagnostic=refuter.label,
    )
