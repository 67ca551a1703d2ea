"""Scripted judges that write the call's nonce in their verdict, as the prompt asks an honest judge to.

Every judge call ends with its nonce (:mod:`rose_sql.judges.keys`), and only a verdict object that carries
it is read. A test scripts a judge's verdict (``Reply(content=json.dumps(verdict))``); the doubles
(:class:`~rose_sql.testing.ScriptedOpenAI`, :class:`~rose_sql.testing.fake.FakeLLM`) then write the call's
nonce into it before answering, as an honest judge does (:func:`sign`), unless told not to (``sign=False``:
a judge that forgets it, or a test that writes the nonce itself). Only the scripted judge's own verdicts are
signed: an object that validates as a Prover's or a Refuter's verdict, carries no nonce, and is not a copy of
text the prompt holds (what a responder quotes of a prediction stays as the prediction has it, unsigned).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from rose_sql.judges.keys import nonce_asked
from rose_sql.verdicts import ProverReply, RefuterReply

__all__ = ["call_nonce", "prompt_text", "sign"]

_DECODER = json.JSONDecoder()
_OPENING = re.compile(r'\{\s*"')
"""Where a verdict object may begin (a brace, then its first key): a failed decode costs the text up to it."""


def call_nonce(messages: Sequence[Mapping[str, Any]], schema: Mapping[str, Any] | None = None) -> str | None:
    """The nonce a call asks for: pinned by its reply's schema (a one-value enum), else named at the end of its
    last message; None for a call that asks for none."""
    if schema is not None:
        prop = schema.get("properties", {}).get("nonce") if isinstance(schema.get("properties"), Mapping) else None
        if isinstance(prop, Mapping) and isinstance(prop.get("enum"), list) and len(prop["enum"]) == 1:
            return str(prop["enum"][0])
    last = [dict(m) for m in messages[-1:]]
    return nonce_asked(last) if last else None


def prompt_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text the judge was given (system and user messages): what a reply may copy."""
    return "\n".join(str(m.get("content", "")) for m in messages if m.get("role") in ("system", "user"))


def _verdict(obj: dict[str, Any]) -> bool:
    for kind in (ProverReply, RefuterReply):
        try:
            kind.model_validate(obj)
            return True
        except ValidationError:
            continue
    return False


def sign(text: str | None, nonce: str, prompt: str) -> str | None:
    """``text`` with ``"nonce": nonce`` written first into each verdict object of the scripted judge's own (see
    the module's text); the other objects, and the text around them, as they are."""
    if not text:
        return text
    out: list[str] = []
    done = 0
    m = _OPENING.search(text)
    while m is not None:
        i = m.start()
        try:
            obj, end = _DECODER.raw_decode(text, i)
        except (ValueError, RecursionError):
            m = _OPENING.search(text, i + 1)
            continue
        if "nonce" not in obj and _verdict(obj) and text[i:end] not in prompt:
            out.append(text[done : i + 1] + json.dumps({"nonce": nonce})[1:-1] + ", ")
            done = i + 1
        m = _OPENING.search(text, end)
    out.append(text[done:])
    return "".join(out)
