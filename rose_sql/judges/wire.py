"""Chat completions as they come over the wire and out of the cache, checked before anything uses them.

An endpoint (or a proxy in front of it) may answer 200 with a body that is not JSON, usage counts
of the wrong type or below zero, or megabytes of text. Nothing of it may crash an item or bend the
accounting: such a reply is an :class:`~rose_sql.errors.EndpointError` that keeps the beginning of
the raw text for the record (the item is unscored ``judge_error``, retried by ``--resume``). A cache
entry is checked the same way on every read, so a damaged one is a miss, never a failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from rose_sql.errors import EndpointError

RAW_KEPT_CHARS = 65_536
"""Characters of an unusable body kept on the call (the record, never the cache)."""


@dataclass(frozen=True, slots=True)
class Completion:
    """What one chat completion said, checked."""

    content: str
    """The reply text (may be empty)."""
    reasoning: str | None
    """``reasoning_content`` (DeepSeek, vLLM) or ``reasoning`` where the provider returns one."""
    prompt_tokens: int | None
    """Input tokens the provider counted (None: it reported no usage)."""
    completion_tokens: int | None
    """Output tokens the provider counted, reasoning included (None: no usage)."""
    reasoning_tokens: int | None
    """Reasoning tokens, where reported."""
    cached_tokens: int = 0
    """Of the prompt tokens, those the provider read from its prefix cache (0 where it reports none)."""
    finish_reason: str | None = None
    """Why the model stopped, as the provider says (``stop``; ``length`` at the completion cap); None if unsaid."""


def _count(value: object, where: str, raw: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EndpointError(
            f"the endpoint's reply has {where} = {value!r}, not a count of tokens", raw[:RAW_KEPT_CHARS]
        )
    return value


def read_completion(body: bytes, *, limit: int, cut: bool) -> Completion:
    """A chat-completion body, checked: :class:`EndpointError` (with the raw text) when it cannot be used.

    ``cut``: the body went on past ``limit`` bytes and was not read further.
    """
    raw = body.decode("utf-8", errors="replace")
    if cut:
        raise EndpointError(
            f"the endpoint's reply is larger than {limit} bytes and was not read past them "
            f"(its first {min(len(raw), RAW_KEPT_CHARS)} characters are kept)",
            raw[:RAW_KEPT_CHARS],
        )
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise EndpointError("the endpoint's reply is not JSON", raw[:RAW_KEPT_CHARS]) from None
    if not isinstance(data, dict):
        raise EndpointError("the endpoint's reply is not a JSON object", raw[:RAW_KEPT_CHARS])
    choices = data.get("choices")
    if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
        # no choice at all (``"choices": []`` or none) is outside the protocol, not an empty verdict
        raise EndpointError("the endpoint's reply has no choices[0] object", raw[:RAW_KEPT_CHARS])
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise EndpointError("the endpoint's reply has no choices[0].message object", raw[:RAW_KEPT_CHARS])
    content = message.get("content")
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    finish = choices[0].get("finish_reason")
    finish = finish[:64] if isinstance(finish, str) else None
    if not isinstance(content, str | None) or not isinstance(reasoning, str | None):
        raise EndpointError("the endpoint's reply has a message that is not text", raw[:RAW_KEPT_CHARS])
    usage = data.get("usage")
    if usage is None:
        return Completion(content or "", reasoning, None, None, None, finish_reason=finish)
    if not isinstance(usage, dict):
        raise EndpointError(f"the endpoint's reply has usage = {usage!r}, not an object", raw[:RAW_KEPT_CHARS])
    counts = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
    details = usage.get("completion_tokens_details")
    counts.append(details.get("reasoning_tokens") if isinstance(details, dict) else None)
    prompt_details = usage.get("prompt_tokens_details")
    counts.append(prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else None)
    names = (
        "usage.prompt_tokens",
        "usage.completion_tokens",
        "usage.completion_tokens_details.reasoning_tokens",
        "usage.prompt_tokens_details.cached_tokens",
    )
    checked = [None if v is None else _count(v, name, raw) for v, name in zip(counts, names, strict=True)]
    prompt, completion, thought, cached = checked
    if prompt is None or completion is None:  # half a usage is no usage: the call is charged its worst case
        return Completion(content or "", reasoning, None, None, thought, finish_reason=finish)
    if cached is not None and cached > prompt:
        raise EndpointError(
            f"the endpoint's reply has {cached} cached prompt tokens of {prompt}", raw[:RAW_KEPT_CHARS]
        )  # else a cached rate would price tokens that were never sent
    return Completion(content or "", reasoning, prompt, completion, thought, cached or 0, finish)


# --------------------------------------------------------------------------- cache entries

_ENTRY_TYPES: dict[str, tuple[type, ...]] = {
    "content": (str,),
    "reasoning": (str, type(None)),
    "prompt_tokens": (int,),
    "completion_tokens": (int,),
    "reasoning_tokens": (int, type(None)),
    "cost_usd": (int, float, type(None)),
    "params": (dict,),
}
_OPTIONAL_ENTRY_TYPES: dict[str, tuple[type, ...]] = {
    "cached_tokens": (int,),
    "reply_format": (str,),
    "finish_reason": (str, type(None)),
}
"""Fields entries written before them lack (read as 0, "text" and None)."""


def valid_entry(entry: object) -> bool:
    """Whether a cache entry has the shape :func:`rose_sql.judges.llm.LLM` writes (counts and cost not negative)."""
    if not isinstance(entry, dict):
        return False
    optional = {name: types for name, types in _OPTIONAL_ENTRY_TYPES.items() if name in entry}
    for name, types in (_ENTRY_TYPES | optional).items():
        value = entry.get(name)
        if isinstance(value, bool) or not isinstance(value, types):
            return False
        if isinstance(value, int | float) and not value >= 0:  # negative, or NaN
            return False
    return True
