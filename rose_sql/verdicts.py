"""What a judge said: the Prover's and the Refuter's verdicts, typed (a shared noun below the stages).

The judges (:mod:`rose_sql.judges.replies`) read replies into these models; the decision table
(:mod:`rose_sql.decide`) walks over them and records (:mod:`rose_sql.record`) keep them. pydantic is
loaded with this module: the record and the table import it only where they validate or type a verdict.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictStr

ReplyFormat = Literal["json_schema", "text"]
"""How a reply was asked for: with its JSON schema sent to the endpoint (``response_format``, or an option
carrying ``$schema``), or as plain text that is parsed tolerantly."""


def _stated(value: object) -> float | None:
    """A confidence the reply states of its verdict: a number in [0, 1], anything else as unstated (never
    an invalid reply: the prompts do not ask for it, and a verdict stands without it)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        return None
    return float(value)


Stated = Annotated[float | None, BeforeValidator(_stated)]


class Reply(BaseModel):
    """What every verdict may carry besides its fields."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    confidence: Stated = Field(default=None, exclude=True)
    """How sure the judge says it is of its verdict (0-1), when it says; the cheap-first policy escalates
    below ``--escalate-below``. Kept out of dumps, so records and the prompts that quote a reply are
    unchanged; the raw reply keeps it."""


class ProverReply(Reply):
    """The SQL Prover's verdict on the prediction alone (it never sees the gold)."""

    expected_answer: StrictStr
    """What a correct answer to the question looks like."""
    sql_behaviour: StrictStr
    """What the predicted SQL actually computes."""
    checks: dict[str, StrictStr] = Field(default_factory=dict)
    """The checklist it filled before deciding (DISTINCT, NULLs, units, ties, ...)."""
    reasoning: StrictStr
    """Why the result does or does not answer the question."""
    answers_question: StrictBool
    """True when the prediction answers the question under a reasonable reading."""


class RefuterReply(Reply):
    """The Adversarial Refuter's decision on a Prover's pass (or on a matching result)."""

    reasoning: StrictStr
    """The hard evidence for overturning, or why the prediction stands."""
    overturn: StrictBool
    """True: the prediction misses a requirement of the question or misuses the schema."""
    ambiguity: Literal["none", "question", "schema"]
    """Whether gold and prediction differ because the question or the schema admits several readings."""
    gold_correct: StrictBool
    """False when the gold SQL itself contradicts the question (a GoldX flag)."""
    gold_confidence: float | None = Field(default=None, ge=0, le=1)
    """How sure it is about ``gold_correct`` (0-1), when it says."""
    label: StrictStr | None = None
    """A short diagnostic label (e.g. ``missing_filter``, ``wrong_granularity``, ``harmless_format``)."""
