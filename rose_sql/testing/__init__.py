"""Test support shipped with ROSE-SQL: a scripted OpenAI-compatible server for the LLM judge stages."""

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
    default_responder,
    estimate_tokens,
    latency,
    request_cap,
    request_key,
    script,
    user_text,
    with_faults,
)

__all__ = [
    "DEFAULT_FAULT_KINDS",
    "FaultInjector",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ScriptedOpenAI",
    "at_cap",
    "by_content",
    "by_model",
    "default_responder",
    "estimate_tokens",
    "latency",
    "request_cap",
    "request_key",
    "script",
    "user_text",
    "with_faults",
]
