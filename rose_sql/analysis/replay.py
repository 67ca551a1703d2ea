"""Re-decide recorded items under another policy from their stored judgements, without calling a model.

Each record keeps what execution established and every judge reply, so :func:`rose_sql.decide.decide`
can be walked again with another matched-results policy. Variants:

- ``always``: the paper's flow (the Refuter also checks matching results);
- ``never``: matching results are accepted without the Refuter (its stored reply is ignored);
- ``no-refuter``: the Refuter is never consulted; the Prover's pass stands on differing results.

``evidence`` (ask the Refuter on a match only when deterministic evidence doubts it) is not offered:
whether evidence doubted a match is not stored on the record. A variant that needs a reply the
original run never asked for (``always`` on a run made with ``never``) leaves the item unscored with
reason ``not_replayable``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

from pydantic import ValidationError

from rose_sql.decide import Decision, Facts, JudgeOutcome, decide
from rose_sql.execute import Execution
from rose_sql.judges.replies import ProverReply, RefuterReply

Variant = Literal["always", "never", "no-refuter"]
VARIANTS: tuple[Variant, ...] = ("always", "never", "no-refuter")
_STATUSES = ("ok", "error", "timeout", "rejected")
R = TypeVar("R", ProverReply, RefuterReply)


@dataclass(frozen=True, slots=True)
class Replayed:
    """The decision a variant reaches on one record."""

    score: int | None
    """1, 0, or None when unscored."""
    unscored_reason: str | None
    """Why there is no score (``not_replayable`` when a needed reply is not stored)."""
    decided_by: str | None
    """The stage that settled the score."""
    why: str
    """One line a person can read."""


def _execution(info: dict[str, Any] | None) -> Execution | None:
    if not info or info.get("status") not in _STATUSES:
        return None
    return Execution(info["status"], float(info.get("seconds") or 0.0), error=info.get("error"))


def stored_reply(record: dict[str, Any], stage: str, kind: type[R]) -> R | JudgeOutcome | None:
    """The last valid reply of a stage in the record; ``failed`` when the stage was asked but never answered."""
    calls = [c for c in record.get("judges") or [] if c.get("stage") == stage]
    for c in reversed(calls):
        if c.get("reply") is not None:
            try:
                return kind.model_validate(c["reply"])
            except ValidationError:
                continue
    return "failed" if calls else None


def facts_of(record: dict[str, Any], variant: Variant) -> Facts:
    """The facts execution established for a record, with no judge reply yet."""
    comparison = record.get("comparison") or {}
    return Facts(
        db_found=record.get("unscored_reason") != "db_missing",
        gold=_execution(record.get("gold")),
        pred=_execution(record.get("pred")),
        equal=comparison.get("equal"),
        judge=True,
        matched_refuter="always" if variant == "always" else "never",
    )


def replay(record: dict[str, Any], variant: Variant) -> Replayed:
    """Walk the decision table for one record under a variant, feeding it the stored replies."""
    if record.get("unscored_reason") in ("internal_error", "no_score", "absent_from_outputs"):
        return Replayed(None, record["unscored_reason"], None, record.get("why") or "unscored in the original run")
    facts = facts_of(record, variant)
    while True:
        step = decide(facts)
        if isinstance(step, Decision):
            return Replayed(step.score, step.unscored_reason, step.decided_by, step.why)
        if step == "refuter" and variant == "no-refuter":
            return Replayed(1, None, "prover", "the Prover's pass stands (the Refuter is not consulted)")
        if step == "prover":
            prover = stored_reply(record, "prover", ProverReply)
            if prover is None:
                return _not_replayable("Prover")
            facts = replace(facts, prover=prover)
        else:
            refuter = stored_reply(record, "refuter", RefuterReply)
            if refuter is None:
                return _not_replayable("Refuter")
            facts = replace(facts, refuter=refuter)


def _not_replayable(stage: str) -> Replayed:
    return Replayed(
        None, "not_replayable", None, f"the original run never asked the {stage} here; this policy needs it"
    )


def replay_record(record: dict[str, Any], variant: Variant) -> dict[str, Any]:
    """A copy of the record decided under the variant (``replay`` names it)."""
    r = replay(record, variant)
    return {
        **record,
        "score": r.score,
        "unscored_reason": r.unscored_reason,
        "decided_by": r.decided_by,
        "why": r.why,
        "replay": variant,
    }
