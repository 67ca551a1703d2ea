"""Reasoning blocks (``<think>..</think>`` and the like) cut out of a model's text, in linear time.

Shared by the judges' reply parser and the reward's SQL extractor, which differ in one choice:
what an unclosed block means. A judge's reply whose ``<think>`` never closes may still hold its
JSON verdict after it, so the judges keep such a block (``drop_unclosed=False``); a completion
whose reasoning never closes has given no final answer, so the reward drops it to the end
(``drop_unclosed=True``) and SQL drafted while thinking is never scored.

Tag names match case-insensitively (as ``re.IGNORECASE`` does), blocks do not nest (a block ends
at the first closing tag of its own name), and the text is scanned once: a regular expression with
a lazy ``.*?`` would rescan to the end for every unclosed tag, quadratic on ``'<think>' * 20000``.
"""

from __future__ import annotations

import re
from functools import lru_cache

THINK = ("think",)
"""The tag the judges strip."""
REASONING_TAGS = ("think", "thinking", "reasoning")
"""The tags the reward strips."""


@lru_cache(maxsize=16)
def _patterns(tags: tuple[str, ...]) -> tuple[re.Pattern[str], tuple[re.Pattern[str], ...]]:
    """A pattern for any opening tag (one group per tag) and, per tag, its closing tag."""
    opening = re.compile("<(?:" + "|".join(f"({re.escape(t)})" for t in tags) + ")>", re.IGNORECASE)
    closing = tuple(re.compile(f"</{re.escape(t)}>", re.IGNORECASE) for t in tags)
    return opening, closing


def strip_reasoning(text: str, *, tags: tuple[str, ...] = THINK, drop_unclosed: bool) -> str:
    """``text`` without its ``<tag>..</tag>`` blocks, for each of ``tags``.

    A block that never closes is dropped to the end of the text with ``drop_unclosed``; without it,
    it is kept, and so is everything after it.
    """
    opening, closing = _patterns(tags)
    kept: list[str] = []
    pos = 0
    while (start := opening.search(text, pos)) is not None:
        assert start.lastindex is not None  # one group per tag: the one that matched
        end = closing[start.lastindex - 1].search(text, start.end())
        if end is None:
            if drop_unclosed:
                kept.append(text[pos : start.start()])
                pos = len(text)
            break
        kept.append(text[pos : start.start()])
        pos = end.end()
    kept.append(text[pos:])
    return "".join(kept)
