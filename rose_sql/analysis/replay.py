"""Re-decide recorded items under another policy from their stored judgements, without calling a model.

Each record keeps what execution established, whether deterministic evidence questioned a match
(``doubts`` and ``evidence``), and every judge reply, so the walk over the decision table
(:func:`rose_sql.decide.settle`) can be taken again under another policy. Policies, named as
``rose run --matched-refuter`` names them, plus one that only replay offers:

- ``always``: the Refuter also checks every matching result (the paper's flow, ``--policy paper``);
- ``evidence``: the Refuter checks a match only when deterministic evidence questions it (the default
  of ``rose run``);
- ``never``: matching results are accepted without the Refuter (its stored reply is ignored);
- ``no-refuter``: the Refuter is never consulted; the Prover's pass stands on differing results.

A policy that needs a reply the original run never asked for (``always`` on a run made with
``never``) leaves the item unscored with reason ``not_replayable``.

Runs whose stages voted (``rose run --samples``, ``--panel``, ``--escalate-to``) keep every vote, so
their stages can also be re-decided under another aggregation rule (``--aggregate``, see
:mod:`rose_sql.judges.votes`): ``majority``, ``unanimous``, ``any-fail``, ``strong-only``. Without one,
a stage is decided by the rule the run used. A rule the stored votes cannot support (``strong-only``
where the strong model was never asked) leaves the item ``not_replayable``, and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

from rose_sql.analysis.agree import UnscoredPolicy, agree, pair_runs
from rose_sql.analysis.labels import LabelSet
from rose_sql.analysis.runs import Run
from rose_sql.config import Aggregate
from rose_sql.decide import Decision, Facts, JudgeOutcome, Step, settle
from rose_sql.evidence.findings import questions_match
from rose_sql.items.load import ItemId
from rose_sql.judges.votes import Vote, outcome
from rose_sql.record import Record
from rose_sql.verdicts import ProverReply, RefuterReply

Variant = Literal["always", "evidence", "never", "no-refuter"]
VARIANTS: tuple[Variant, ...] = ("always", "evidence", "never", "no-refuter")
MEANING: dict[Variant, str] = {
    "always": "the Refuter also checks every matching result (the paper's flow)",
    "evidence": "the Refuter checks a match only when deterministic evidence questions it (rose run's default)",
    "never": "matching results are accepted without the Refuter",
    "no-refuter": "the Refuter is never consulted: the Prover's pass stands",
}
"""What each policy does, in the words of ``rose run --matched-refuter`` (which has the first three)."""
R = TypeVar("R", ProverReply, RefuterReply)
_KEEP = ("internal_error", "no_score", "absent_from_outputs", "failed_in_their_run", "db_missing", "db_unreadable")
"""Unscored reasons a replay keeps: there is nothing to re-decide."""


def stored_reply(record: Record, stage: str, kind: type[R]) -> R | JudgeOutcome | None:
    """The last valid reply of a stage in the record; when the stage was asked but never validly
    answered, how it failed (``invalid`` replies or a ``failed`` endpoint, as the record says)."""
    calls = [c for c in record.judges if c.stage == stage]
    for c in reversed(calls):
        if isinstance(c.reply, kind):
            return c.reply
    if not calls:
        return None
    return "invalid" if record.unscored_reason == "judge_invalid" else "failed"


def facts_of(record: Record, variant: Variant) -> Facts:
    """The facts execution established for a record, with no judge reply yet."""
    comparison = record.comparison
    return Facts(
        db_found=record.unscored_reason != "db_missing",
        gold=record.gold.execution(),
        pred=record.pred.execution(),
        equal=comparison.equal if comparison is not None else None,
        undecided=comparison is not None and comparison.reason == "undecided",
        judge=True,
        matched_refuter="never" if variant == "no-refuter" else variant,
        evidence_questions_match=questions_match(record.doubts, record.evidence),
        evidence_guard=record.evidence.guard if record.evidence is not None else None,
        consult_refuter=variant != "no-refuter",
        question=bool((record.question or "").strip()),
    )


NO_EVIDENCE = (
    "the records carry no deterministic evidence (no doubts, witness or gold smell were recorded; imported "
    "records have none), so no match is questioned and this policy decides as never does"
)
"""The note of the ``evidence`` rows when no record of the runs carries evidence."""


def carries_evidence(record: Record) -> bool:
    """Whether the run that made the record looked for deterministic evidence (``doubts`` or ``evidence`` kept)."""
    return record.doubts is not None or record.evidence is not None


UNSUPPORTED = "the stored votes cannot support rule"
"""How the ``why`` of an item whose stored votes cannot support an aggregation rule begins."""


def stored_votes(record: Record, stage: str, kind: type[R]) -> list[Vote]:
    """The votes a record keeps for a stage: the last valid reply of each (model, sample, tier), or
    how that sample failed. Calls of runs that did not vote are one sample of their model."""
    votes: dict[tuple[str, int, str], Vote] = {}
    for c in record.judges:
        if c.stage != stage:
            continue
        key = (c.model, c.sample or 0, c.tier or "first")
        tier = c.tier or "first"
        if isinstance(c.reply, kind):
            votes[key] = Vote(c.model, c.sample or 0, tier, c.reply)
        elif key not in votes or votes[key].reply is None:
            votes[key] = Vote(c.model, c.sample or 0, tier, None, "invalid" if c.raw else "failed")
    return list(votes.values())


def replay(record: Record, variant: Variant, rule: Aggregate | None = None) -> Decision:
    """Walk the decision table for one record under a variant, feeding it the stored replies; a stage
    that voted is decided by ``rule`` (None: the rule the run used)."""
    if record.unscored_reason in _KEEP:
        return Decision(None, record.unscored_reason, None, record.why or "unscored in the original run")
    rule = rule or (record.votes[0].rule if record.votes else None)
    unsupported: list[str] = []

    def answer(step: Step) -> ProverReply | RefuterReply | JudgeOutcome | None:
        stage = "prover" if step == "prover" else "refuter"
        if rule is None:
            if step == "prover":
                return stored_reply(record, "prover", ProverReply)
            return stored_reply(record, "refuter", RefuterReply)
        if step == "prover":
            votes = stored_votes(record, "prover", ProverReply)
        else:
            votes = stored_votes(record, "refuter", RefuterReply)
        if not votes:
            return None
        got = outcome(votes, rule)
        if got is None:
            unsupported.append(f"{UNSUPPORTED} {rule} at the {stage}: the strong model never voted there")
        return got

    d = settle(facts_of(record, variant), answer)
    return replace(d, why=unsupported[0]) if unsupported else d


def replay_record(record: Record, variant: Variant, rule: Aggregate | None = None) -> Record:
    """The record decided under the variant and rule (its ``why`` names them; its labels stay as recorded)."""
    d = replay(record, variant, rule)
    why = f"{d.why} (replayed under policy {variant}{f', rule {rule}' if rule else ''})"
    return replace(record, score=d.score, unscored_reason=d.unscored_reason, decided_by=d.decided_by, why=why)


def _replayed(run: Run, variant: Variant) -> Run:
    return replace(run, records=[replay_record(r, variant) for r in run.records])


def replay_table(
    runs: Sequence[Run],
    sets: Sequence[LabelSet],
    variants: Sequence[Variant],
    unscored: UnscoredPolicy,
    aggregates: Sequence[Aggregate] = (),
) -> list[ReplayRow]:
    """Agreement with the labels of the recorded scores and of each replayed policy (point estimates);
    with ``aggregates``, of each policy under each aggregation rule. Each row names the items whose
    stored votes cannot support its rule (``unsupported``)."""
    rows = []
    blind = not any(carries_evidence(x) for r in runs for x in r.records)
    combos: list[tuple[Variant | None, Aggregate | None]] = [(None, None)]
    rules: Sequence[Aggregate | None] = aggregates or [None]
    combos += [(v, a) for v in variants for a in rules]
    for policy, rule in combos:
        replayed = [
            r if policy is None else replace(r, records=[replay_record(x, policy, rule) for x in r.records])
            for r in runs
        ]
        result = agree(pair_runs(replayed, sets), unscored=unscored, resamples=0)
        merged = result.merged
        rows.append(
            ReplayRow(
                policy=(policy or "recorded") + (f" + {rule}" if rule else ""),
                n=merged.n,
                unscored=merged.unscored,
                kappa=merged.metrics.kappa,
                accuracy=merged.metrics.accuracy,
                mcc=merged.metrics.mcc,
                f1=merged.metrics.f1,
                unscored_reasons=merged.unscored_reasons,
                subsets={name: b.agreement.metrics.kappa for name, b in result.subsets.items()},
                unsupported=[x.id for r in replayed for x in r.records if x.why.startswith(UNSUPPORTED)],
                note=NO_EVIDENCE if policy == "evidence" and blind else None,
            )
        )
    return rows


@dataclass(frozen=True, slots=True)
class ReplayRow:
    """Agreement with the labels of one policy (and aggregation rule), merged over the runs."""

    policy: str
    """``recorded`` (the scores as the runs decided them), or the policy replayed (``+ rule``)."""
    n: int
    unscored: int
    kappa: float | None
    accuracy: float | None
    mcc: float | None
    f1: float | None
    unscored_reasons: dict[str, int]
    subsets: dict[str, float | None]
    """Kappa per labels file."""
    unsupported: list[ItemId]
    """Items whose stored votes cannot support the rule (left unscored ``not_replayable``)."""
    note: str | None = None
    """What the reader of the row must know: :data:`NO_EVIDENCE` on ``evidence`` rows of runs without evidence."""
