"""Step 1: the SQL a model completion answers with (a string, one chat message, or a list of them).

Completions are untrusted text of any size: every step here is linear in it. No pattern can
backtrack over a run of the text more than once (each one's note says why), and comments are
stripped (sqlglot's tokenizer, about a second a megabyte) only from SQL of at most
:data:`MAX_STRIPPED_CHARS`; longer SQL is left as it is, for the sandbox to refuse as too long.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rose_sql.judges.reasoning import REASONING_TAGS, strip_reasoning
from rose_sql.sql import strip_comments

Completion = str | Mapping[str, Any] | Sequence[Mapping[str, Any]]
"""A completion: text, one chat message, or a list of chat messages (``{"role", "content"}``)."""

_TAG = re.compile(r"<(answer|sql|solution|final_answer|final)>(.*?)(?:</\1>|\Z)", re.S | re.I)
"""A tag and its content. The lazy body ends at its closing tag or at the end, so a match never fails
once its opening tag matched: no backtracking, and the next search starts where it ended."""
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n`]*\n?(.*?)(?:```|\Z)", re.S)
"""A fenced block: the greedy runs of its opening line may overlap, but the lazy body always ends
(at a fence or at the end), so they are never backtracked into."""
_SPECIAL = re.compile(r"<\|[\w.-]{1,40}\|>|</?s>|<eos>|<pad>")
"""Special tokens: at most 40 characters are read from each ``<|``."""
_SQL_LANGS = {"", "sql", "sqlite", "mysql", "postgresql", "postgres", "sqlite3", "plsql"}
_SELECT = re.compile(r"\bSELECT\b", re.I)
_BLANK_LINE = re.compile(r"\n[^\S\n]*+\n")
"""A blank line: a newline, blanks other than newlines (possessive: never given back), a newline.
(``\\n\\s*\\n`` backtracks over every run of blanks that holds no second newline.)"""
_BARE_QUERY = re.compile(r"\s*+(VALUES\b|\()", re.I)
"""A bare VALUES (or parenthesised) query; the possessive ``\\s*+`` never gives back what it read."""
MAX_STRIPPED_CHARS = 200_000
"""Comments are stripped from SQL up to this long (ten times the reward's ``max_sql_chars``)."""
_CTE = re.compile(r"\bWITH\s+(?:RECURSIVE\s+)?[\w\"`\[\]]+(?:\s*\([^()]*\)\s+|\s+)AS\s*\(", re.I)
"""``WITH name [(columns)] AS (``; written so that no two adjacent ``\\s`` runs can trade spaces (``\\s*\\s+``
backtracks quadratically: eight seconds on ``WITH x`` and 40,000 spaces)."""


def completion_text(completion: Completion, prompt: str | None = None) -> str:
    """The text of a completion: the string itself, or the last assistant message's content, without
    a leading ``prompt`` (OpenRLHF sends prompt + response as one query)."""
    if isinstance(completion, str):
        text = completion
    elif isinstance(completion, Mapping):
        text = _content(completion.get("content"))
    elif isinstance(completion, Sequence):
        messages = [m for m in completion if isinstance(m, Mapping)]
        chosen = [m for m in messages if m.get("role") == "assistant"] or messages
        text = _content(chosen[-1].get("content")) if chosen else ""
    else:  # not a completion at all (None, a number): no SQL
        return ""
    if isinstance(prompt, str) and prompt and text.startswith(prompt):
        return text[len(prompt) :]
    return text


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):  # OpenAI-style parts: [{"type": "text", "text": ...}]
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


def extract_sql(completion: Completion, prompt: str | None = None) -> str | None:
    """The SQL a completion answers with, comments stripped; None when there is none.

    Order: drop ``<think>`` blocks and special tokens; if an ``<answer>``, ``<sql>``, ``<solution>``
    or ``<final_answer>`` tag exists, keep the last one's content (an unclosed last tag runs to the
    end); if fenced code blocks exist there, the last SQL (or unlabelled) block wins; otherwise, in
    untagged prose, the text from its first SELECT (or the WITH that opens a CTE before it) up to
    the first blank line, and nothing when there is no SELECT.
    """
    text = _SPECIAL.sub("", completion_text(completion, prompt))
    text = strip_reasoning(text, tags=REASONING_TAGS, drop_unclosed=True)  # no final answer inside
    tag = _last(_TAG.finditer(text))
    if tag is not None:
        text = tag.group(2)
    last_fence = last_sql = None
    for m in _FENCE.finditer(text):
        last_fence = m
        if m.group(1).lower() in _SQL_LANGS:
            last_sql = m
    if last_fence is not None:
        text = (last_sql or last_fence).group(2)
    elif tag is None:
        text = _from_prose(text)
    return _clean(text)


def _last(matches: Iterator[re.Match[str]]) -> re.Match[str] | None:
    """The last of ``matches`` (the others are not kept: a hostile text may hold a million)."""
    last = deque(matches, maxlen=1)
    return last[0] if last else None


def _from_prose(text: str) -> str:
    m = _SELECT.search(text)
    if m is None:  # no SELECT anywhere: SQL only if the text is a bare VALUES (or parenthesised) query
        return text if _BARE_QUERY.match(text) else ""
    cte = _CTE.search(text, 0, m.start())
    start = cte.start() if cte else m.start()
    end = _BLANK_LINE.search(text, start)
    return text[start : end.start() if end else len(text)]


def _clean(sql: str) -> str | None:
    if ("--" in sql or "/*" in sql) and len(sql) <= MAX_STRIPPED_CHARS:
        sql = strip_comments(sql)
    sql = sql.strip()
    while sql.endswith(";"):
        sql = sql[:-1].rstrip()
    return sql or None
