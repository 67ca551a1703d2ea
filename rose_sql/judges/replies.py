"""The judges' structured replies: parsed tolerantly, validated strictly.

Tolerant: the JSON object may sit in a code fence, after ``<think>`` blocks or reasoning prose, or
only in the provider's ``reasoning_content``. Strict: a bool must be a JSON ``true``/``false`` (the
string ``"false"`` is an error, never a pass), required fields must be present, unknown extra
fields are ignored.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from rose_sql.errors import ReplyError
from rose_sql.reasoning import strip_reasoning


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ProverReply(_Reply):
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


class RefuterReply(_Reply):
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


R = TypeVar("R", bound=_Reply)


_FENCE = re.compile(r"```(?:json|JSON)?\s*(\{.*?\})\s*```", re.DOTALL)


def _candidates(text: str) -> list[dict[str, Any]]:
    """JSON objects found in text, most likely first (fenced blocks, then the last top-level object)."""
    text = strip_reasoning(text, drop_unclosed=False)  # the verdict may follow an unclosed <think>
    found: list[dict[str, Any]] = []
    for m in _FENCE.finditer(text):
        try:
            obj = json.loads(m.group(1))
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            found.append(obj)
    decoder = json.JSONDecoder()
    loose: list[dict[str, Any]] = []
    i = text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            loose.append(obj)
        i = text.find("{", end)
    return found + loose[::-1]  # the final answer usually comes last


def parse_reply(kind: type[R], content: str, reasoning: str | None = None) -> R:
    """The first JSON object in the reply that validates as ``kind``; :class:`ReplyError` otherwise."""
    errors: list[str] = []
    for text in (content, reasoning or ""):
        for obj in _candidates(text):
            try:
                return kind.model_validate(obj)
            except ValidationError as e:
                errors.append("; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()))
    if not content.strip() and not (reasoning or "").strip():
        raise ReplyError("the reply is empty")
    if errors:
        raise ReplyError(f"the JSON object is invalid: {errors[0]}")
    raise ReplyError("the reply contains no JSON object")
