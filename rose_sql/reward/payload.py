"""What the reward server reads and answers: OpenRLHF's request and response, read within bounds.

A body is measured before it is decoded (:func:`count_values`, linear), decoded strictly (UTF-8,
JSON without NaN or Infinity, bounded nesting and integers) and checked for its shape: every
malformed body raises :class:`~rose_sql.errors.BadRequest` (400, or 413 past a bound). What is
wrong with one item only (its label, its database, a query that is neither text nor messages) is
that item's answer, never the request's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from http import HTTPStatus
from typing import Any

from rose_sql.config import RewardConfig, ServeConfig
from rose_sql.engines import Source
from rose_sql.errors import BadRequest, LabelError
from rose_sql.reward.execution import UNSCORED
from rose_sql.reward.gold import Gold, parse_label
from rose_sql.reward.schedule import Reward
from rose_sql.reward.scorer import RewardItem

MAX_STEP = 10**15
"""The largest training step a request may name."""
_RUN = re.compile(rb'(?:"(?:[^"\\]++|\\.)*+"?|[^"\[{,:]++)++', re.S)
"""A run of JSON strings (an unclosed one runs to the end) and of anything but ``"[{,:``. Possessive
throughout, its two branches told apart by their first byte: nothing is ever read twice."""
_SLICE = 64 * 2**10
"""Bytes measured at once: each slice is one C call holding the GIL, a few milliseconds."""


def count_values(body: bytes | bytearray, limit: int | None = None) -> int:
    """At least the number of JSON values (strings, numbers, arrays, objects) ``body`` decodes to, or
    a number over ``limit`` as soon as there are more.

    Outside strings every value but the first of an array or object follows a comma or a colon, so
    commas, colons and opening brackets outside strings bound them. Linear in the body and measured
    slice by slice (the event loop beside it keeps answering): whether a slice ends inside a string
    is the parity of its unescaped quotes, escaped backslashes taken out first.
    """
    count, inside, pos, n = 1, False, 0, len(body)
    while pos < n and (limit is None or count <= limit):
        end = min(pos + _SLICE, n)
        while end < n and body[end - 1] == 0x5C:  # never cut a backslash from what it escapes
            end += 1
        chunk = bytes(body[pos:end])
        if inside:
            chunk = b'"' + chunk
        count += len(_RUN.sub(b"", chunk))  # what is left: the commas, colons and brackets outside strings
        bare = chunk.replace(b"\\\\", b"")
        inside = (bare.count(b'"') - bare.count(b'\\"')) % 2 == 1
        pos = end
    return count


@dataclass(frozen=True, slots=True)
class Request:
    """A request in OpenRLHF's shape, its lists of equal length."""

    queries: list[Any]
    """What to score: texts (prompt + response) or lists of chat messages."""
    prompts: list[Any]
    """Each query's prompt (cut off the front of its text), or empty."""
    labels: list[Any]
    """What each query is checked against."""
    step: int | None
    """The training step (the schedule's), or None for its end."""


def read_request(body: bytes | bytearray, config: ServeConfig) -> Request:
    """The request a body holds; raises :class:`BadRequest` naming what is wrong with it."""
    if count_values(body, config.max_json_values) > config.max_json_values:
        raise _refused(f"the body holds more than {config.max_json_values:,} JSON values", too_large=True)
    try:
        payload = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as e:
        raise _refused(f"the body is not UTF-8: {e}") from None
    except RecursionError:
        raise _refused("the body is nested too deeply") from None
    except ValueError as e:  # not JSON, NaN or Infinity, an integer of more than 4,300 digits
        raise _refused(f"the body is not valid JSON: {e}") from None
    return _shape(payload, config)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _refused(message: str, *, too_large: bool = False) -> BadRequest:
    return BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE if too_large else HTTPStatus.BAD_REQUEST, message)


def _shape(payload: Any, config: ServeConfig) -> Request:
    """The request's fields, each of its type (else 400): lists, never a lone value taken for one."""
    if not isinstance(payload, dict):
        raise _refused('the body must be a JSON object {"query": [...], "labels": [...]}')
    queries = payload.get("query", payload.get("queries"))
    if not isinstance(queries, list):
        raise _refused(f'"query" must be a list of completions, not {_kind(queries)}')
    if len(queries) > config.max_items:
        raise _refused(f"{len(queries):,} queries: a request may hold {config.max_items:,} at most", too_large=True)
    labels = payload.get("labels")
    if not isinstance(labels, list):
        raise _refused(f'"labels" must be a list holding one label per query, not {_kind(labels)}')
    if len(labels) != len(queries):
        raise _refused(f'{len(queries)} queries but {len(labels)} labels: "labels" needs one label per query')
    prompts = payload.get("prompts")
    prompts = [] if prompts is None else prompts
    if not isinstance(prompts, list) or (prompts and len(prompts) != len(queries)):
        raise _refused(f'"prompts" must be a list of one prompt per query ({len(queries)}), or left out')
    wrong = next((i for i, p in enumerate(prompts) if not isinstance(p, str)), None)
    if wrong is not None:
        raise _refused(f'"prompts" must hold text: prompts[{wrong}] is {_kind(prompts[wrong])}')
    step = payload.get("step")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= MAX_STEP):
        raise _refused(f'"step" must be a training step: an integer from 0 to {MAX_STEP:,}')
    return Request(queries, prompts, labels, step)


def _kind(value: Any) -> str:
    """What a JSON value is, for a message."""
    if value is None:
        return "missing (or null)"
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", dict: "an object"}
    return names.get(type(value), "a list")


def items_of(request: Request, db_root: Source) -> list[RewardItem | str]:
    """Each query as an item to score, or the reason it cannot be (its own problem)."""
    out: list[RewardItem | str] = []
    for i, query in enumerate(request.queries):
        prompt = request.prompts[i] if request.prompts else None
        label = request.labels[i]
        if not isinstance(query, str | list | dict):
            out.append("query must be text or a list of chat messages")
            continue
        gold = _gold(label, db_root) if isinstance(label, str) else _gold_uncached(label, db_root)
        if isinstance(gold, str):
            out.append(gold)
        else:
            out.append(RewardItem(query, gold.sql, gold.db, prompt))
    return out


@lru_cache(maxsize=4096)
def _gold(label: str, db_root: Source) -> Gold | str:
    """A label's gold, or why it has none (labels repeat: one per completion of a prompt)."""
    return _gold_uncached(label, db_root)


def _gold_uncached(label: Any, db_root: Source) -> Gold | str:
    if label is None:
        return "no label for this query"
    try:
        return parse_label(label, db_root, confine=True)
    except LabelError as e:
        return str(e)


def response(rewards: list[Reward], cfg: RewardConfig) -> dict[str, Any]:
    """The answer: totals, 0/1 scores, per-item parts and statuses, and why each item failed or is unscored."""

    def num(x: float | None) -> float:
        return cfg.unscored if x is None else x

    return {
        "rewards": [num(r.total) for r in rewards],
        "scores": [1.0 if r.status == "match" else 0.0 for r in rewards],
        "extra_logs": {
            "execution": [num(r.execution) for r in rewards],
            "syntax": [r.syntax for r in rewards],
            "clause": [r.clause_part for r in rewards],
            "scored": [0.0 if r.total is None else 1.0 for r in rewards],
        },
        "status": [r.status for r in rewards],
        "errors": [r.detail if r.status in UNSCORED or r.status in _FAILED else None for r in rewards],
    }


_FAILED = frozenset({"error", "timeout"})
"""Scored statuses whose detail is an error (the query failed, was refused, or ran out of steps)."""
