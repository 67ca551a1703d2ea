"""The scripted server's wire format: the reply it is told to give, and the bodies it sends.

Shared by the chat-completions endpoint (:mod:`rose_sql.testing.openai_server`) and the Batch API's
(:mod:`rose_sql.testing.batches`), which both answer with these bodies.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Reply:
    """What the server answers to one chat-completions request.

    A 2xx ``status`` answers a ``chat.completion`` carrying ``content`` (and
    ``message.reasoning_content`` when ``reasoning_content`` is set, as DeepSeek and vLLM do).
    Any other status answers an OpenAI-style ``{"error": {...}}`` body with ``error`` as its
    message. ``delay_s`` waits before answering; ``drop`` closes the connection without
    answering (after the delay). Token counts left as ``None`` are estimated from the text
    (about 4 characters a token), so accounting tests see plausible, non-zero numbers.

    Faults of the protocol itself: ``body`` is sent verbatim instead of the JSON the other fields
    make (a 200 that is not JSON, a cut body; a Batch API output line carries its JSON, or its
    text); ``usage`` is sent as the usage object as it is (wrong types, negative counts), the token
    fields then unused; ``trickle_s`` sends the body
    ``trickle_bytes`` at a time, that many seconds apart (every read returns soon, the whole
    reply late).
    """

    content: str | None = ""
    reasoning_content: str | None = None
    status: int = 200
    error: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    drop: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    """Reported as ``usage.prompt_tokens_details.cached_tokens`` (None: the server's prompt cache decides)."""
    finish_reason: str = "stop"
    body: str | bytes | None = None
    usage: Mapping[str, Any] | None = None
    trickle_s: float = 0.0
    trickle_bytes: int = 16

    def __post_init__(self) -> None:
        if not 200 <= self.status <= 599:
            raise ValueError(f"Reply.status must be an HTTP status in 200..599, got {self.status}")
        if self.ok and self.error is not None:
            raise ValueError("Reply.error is only for non-2xx statuses")
        if self.delay_s < 0 or self.trickle_s < 0:
            raise ValueError(f"Reply.delay_s and trickle_s must be >= 0, got {self.delay_s}, {self.trickle_s}")
        if self.trickle_bytes < 1:
            raise ValueError(f"Reply.trickle_bytes must be >= 1, got {self.trickle_bytes}")
        for name in ("prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_tokens"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"Reply.{name} must be >= 0, got {value}")

    @property
    def ok(self) -> bool:
        """Whether this reply is a successful (2xx) completion."""
        return 200 <= self.status < 300


# --------------------------------------------------------------------------- request helpers


def content_text(content: object) -> str:
    """Text of a message's ``content``: a string, or a list of parts with ``text``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def messages_of(request: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    messages = request.get("messages")
    if not isinstance(messages, list):
        return []
    return [m for m in messages if isinstance(m, Mapping)]


def user_text(request: Mapping[str, Any]) -> str:
    """The text of the request's user messages, joined by newlines."""
    return "\n".join(content_text(m.get("content")) for m in messages_of(request) if m.get("role") == "user")


def all_text(request: Mapping[str, Any]) -> str:
    return "\n".join(content_text(m.get("content")) for m in messages_of(request))


def estimate_tokens(text: str) -> int:
    """A rough token count: one token per 4 characters, rounded up."""
    return (len(text) + 3) // 4


# --------------------------------------------------------------------------- response bodies


def error_body(status: int, message: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error body; ``type`` and a default ``code`` follow the status."""
    if status == 429:
        kind, default_code = "requests", "rate_limit_exceeded"
    elif status == 401:
        kind, default_code = "invalid_request_error", "invalid_api_key"
    elif status >= 500:
        kind, default_code = "server_error", None
    else:
        kind, default_code = "invalid_request_error", None
    return {"error": {"message": message, "type": kind, "param": param, "code": code or default_code}}


def usage_of(reply: Reply, request: Mapping[str, Any], cached: int = 0) -> dict[str, Any]:
    prompt = reply.prompt_tokens if reply.prompt_tokens is not None else estimate_tokens(all_text(request))
    reasoning = reply.reasoning_tokens
    if reasoning is None and reply.reasoning_content:
        reasoning = estimate_tokens(reply.reasoning_content)
    completion = reply.completion_tokens
    if completion is None:
        completion = estimate_tokens(reply.content or "") + (reasoning or 0)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    cached = reply.cached_tokens if reply.cached_tokens is not None else min(cached, prompt)
    if cached:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def completion_body(reply: Reply, request: Mapping[str, Any], fingerprint: str, cached: int = 0) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
    if reply.reasoning_content is not None:
        message["reasoning_content"] = reply.reasoning_content
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model"),
        "system_fingerprint": fingerprint,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}],
        "usage": dict(reply.usage) if reply.usage is not None else usage_of(reply, request, cached),
    }


class BadRequest(Exception):
    """A request the server refuses with an OpenAI-style error."""

    def __init__(
        self, message: str, *, status: int = 400, param: str | None = None, code: str | None = None, close: bool = False
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = error_body(status, message, param=param, code=code)
        self.close = close
