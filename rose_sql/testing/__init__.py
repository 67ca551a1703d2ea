"""Test support shipped with ROSE-SQL for the LLM judge stages: a scripted OpenAI-compatible server (the wire),
the same responders under the real client without a socket (:class:`MockOpenAI`), and a fake of the LLM
protocol (:mod:`rose_sql.testing.fake`)."""

from __future__ import annotations

from rose_sql.testing.openai_server import (
    DEFAULT_FAULT_KINDS,
    FaultInjector,
    RecordedRequest,
    Reply,
    Responder,
    ScriptedOpenAI,
    at_cap,
    by_content,
    by_model,
    conform,
    default_responder,
    enforce_schema,
    estimate_tokens,
    latency,
    refuse_params,
    refuse_schema,
    request_cap,
    request_key,
    request_schema,
    script,
    user_text,
    with_faults,
    with_reasoning,
)
from rose_sql.testing.transport import MockOpenAI

__all__ = [
    "DEFAULT_FAULT_KINDS",
    "FaultInjector",
    "MockOpenAI",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ScriptedOpenAI",
    "at_cap",
    "by_content",
    "by_model",
    "conform",
    "default_responder",
    "enforce_schema",
    "estimate_tokens",
    "latency",
    "refuse_params",
    "refuse_schema",
    "request_cap",
    "request_key",
    "request_schema",
    "script",
    "user_text",
    "with_faults",
    "with_reasoning",
]
