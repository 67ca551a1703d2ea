"""Step 1: the SQL a model completion answers with (a string, one chat message, or a list of them)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from rose_sql.reasoning import REASONING_TAGS, strip_reasoning
from rose_sql.sql import strip_comments

Completion = str | Mapping[str, Any] | Sequence[Mapping[str, Any]]
"""A completion: text, one chat message, or a list of chat messages (``{"role", "content"}``)."""

_TAG = re.compile(r"<(answer|sql|solution|final_answer|final)>(.*?)(?:</\1>|\Z)", re.S | re.I)
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n`]*\n?(.*?)(?:```|\Z)", re.S)
_SPECIAL = re.compile(r"<\|[\w.-]{1,40}\|>|</?s>|<eos>|<pad>")
_SQL_LANGS = {"", "sql", "sqlite", "mysql", "postgresql", "postgres", "sqlite3", "plsql"}
_SELECT = re.compile(r"\bSELECT\b", re.I)
_CTE = re.compile(r"\bWITH\s+(?:RECURSIVE\s+)?[\w\"`\[\]]+(?:\s*\([^()]*\)\s+|\s+)AS\s*\(", re.I)
"""``WITH name [(columns)] AS (``; written so that no two adjacent ``\\s`` runs can trade spaces (``\\s*\\s+``
backtracks quadratically: eight seconds on ``WITH x`` and 40,000 spaces)."""


def _completion_text(completion: Completion) -> str:
    """The text of a completion: the string itself, or the last assistant message's content."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return _content(completion.get("content"))
    messages = [m for m in completion if isinstance(m, Mapping)]
    chosen = [m for m in messages if m.get("role") == "assistant"] or messages
    return _content(chosen[-1].get("content")) if chosen else ""


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):  # OpenAI-style parts: [{"type": "text", "text": ...}]
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


def _strip_prompt(text: str, prompt: str | None) -> str:
    """``text`` without a leading ``prompt`` (OpenRLHF sends prompt + response as one query)."""
    if prompt and text.startswith(prompt):
        return text[len(prompt) :]
    return text


def extract_sql(completion: Completion, prompt: str | None = None) -> str | None:
    """The SQL a completion answers with, comments stripped; None when there is none.

    Order: drop ``<think>`` blocks and special tokens; if an ``<answer>``, ``<sql>``, ``<solution>``
    or ``<final_answer>`` tag exists, keep the last one's content (an unclosed last tag runs to the
    end); if fenced code blocks exist there, the last SQL (or unlabelled) block wins; otherwise, in
    untagged prose, the text from its first SELECT (or the WITH that opens a CTE before it) up to
    the first blank line, and nothing when there is no SELECT.
    """
    text = _SPECIAL.sub("", _strip_prompt(_completion_text(completion), prompt))
    text = strip_reasoning(text, tags=REASONING_TAGS, drop_unclosed=True)  # no final answer inside
    tags = list(_TAG.finditer(text))
    if tags:
        text = tags[-1].group(2)
    fences = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]
    if fences:
        sql_fences = [body for lang, body in fences if lang in _SQL_LANGS]
        text = sql_fences[-1] if sql_fences else fences[-1][1]
    elif not tags:
        text = _from_prose(text)
    return _clean(text)


def _from_prose(text: str) -> str:
    m = _SELECT.search(text)
    if m is None:  # no SELECT anywhere: SQL only if the text is a bare VALUES (or parenthesised) query
        return text if re.match(r"\s*(VALUES\b|\()", text, re.I) else ""
    cte = _CTE.search(text, 0, m.start())
    start = cte.start() if cte else m.start()
    return re.split(r"\n\s*\n", text[start:], maxsplit=1)[0]


def _clean(sql: str) -> str | None:
    if "--" in sql or "/*" in sql:
        sql = strip_comments(sql)
    sql = sql.strip()
    while sql.endswith(";"):
        sql = sql[:-1].rstrip()
    return sql or None
