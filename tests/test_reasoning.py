"""One reasoning stripper for the judges and the reward: both of their old behaviours kept, linear time."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

from rose_sql.errors import ReplyError
from rose_sql.judges.reasoning import REASONING_TAGS, strip_reasoning
from rose_sql.judges.replies import parse_reply
from rose_sql.reward import extract_sql
from rose_sql.verdicts import ProverReply

JUDGES_BEFORE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
"""What judges/replies.py stripped before: closed blocks only (an oracle here; quadratic on hostile input)."""
REWARD_BEFORE = re.compile(r"<(think|thinking|reasoning)>.*?(?:</\1>|\Z)", re.S | re.I)
"""What reward/extract.py stripped before: three tags, an unclosed block to the end."""

PIECES = ["<think>", "</think>", "<THINK>", "</Think>", "<thinking>", "</thinking>", "<reasoning>", "</REASONING>"]
PIECES += ["<think", "think>", "</", "<", ">", "a", "SELECT 1", " ", "\n", "{}"]


def judges(text: str) -> str:
    return strip_reasoning(text, drop_unclosed=False)


def reward(text: str) -> str:
    return strip_reasoning(text, tags=REASONING_TAGS, drop_unclosed=True)


def test_same_output_as_both_old_patterns_on_random_tag_soup() -> None:
    rng = random.Random(7)
    for _ in range(5000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12)))
        assert judges(text) == JUDGES_BEFORE.sub("", text), text
        assert reward(text) == REWARD_BEFORE.sub("", text), text


@pytest.mark.parametrize(
    ("text", "for_judges", "for_reward"),
    [
        ("<think>a</think>b", "b", "b"),
        ("x<think>unclosed {json}", "x<think>unclosed {json}", "x"),  # the judges keep what may hold the verdict
        ("<think>a</think>b<think>c", "b<think>c", "b"),
        ("<thinking>a</thinking>b<reasoning>c</reasoning>d", "<thinking>a</thinking>b<reasoning>c</reasoning>d", "bd"),
        ("<THINK>a</think>b", "b", "b"),
        ("<think>a<think>b</think>c</think>d", "c</think>d", "c</think>d"),  # blocks do not nest
        ("<thinking>a</think>b", "<thinking>a</think>b", ""),  # a block ends at its own closing tag only
    ],
)
def test_closed_blocks_go_unclosed_ones_as_each_caller_chose(text: str, for_judges: str, for_reward: str) -> None:
    assert judges(text) == for_judges and reward(text) == for_reward


def test_callers_keep_their_outputs() -> None:
    verdict = {"expected_answer": "e", "sql_behaviour": "b", "reasoning": "r", "answers_question": True}
    reply = parse_reply(ProverReply, "<think>draft {}</think>\n" + json.dumps(verdict))
    assert reply.answers_question is True
    # an unclosed <think> keeps the verdict after it reachable for the judges
    assert parse_reply(ProverReply, "<think>hmm " + json.dumps(verdict)).reasoning == "r"
    with pytest.raises(ReplyError, match="no JSON object"):
        parse_reply(ProverReply, "<think>" + json.dumps(verdict) + "</think> no verdict")
    assert extract_sql("<reasoning>SELECT 2</reasoning>SELECT 1") == "SELECT 1"
    assert extract_sql("SELECT 1\n\n<thinking>SELECT 2") == "SELECT 1"
    assert extract_sql("<thinking>SELECT 2") is None


@pytest.mark.parametrize(
    ("text", "for_judges", "for_reward"),
    [
        ("<think>" * 20_000, "<think>" * 20_000, ""),
        ("<think>" + " " * 40_000, "<think>" + " " * 40_000, ""),
        (" " * 40_000, " " * 40_000, " " * 40_000),
        ("<think></think>" * 20_000 + "x", "x", "x"),
        ("<reasoning>" * 20_000 + "</reasoning>x", "<reasoning>" * 20_000 + "</reasoning>x", "x"),
        ("<think" * 20_000, "<think" * 20_000, "<think" * 20_000),
    ],
    ids=["opening tags", "unclosed then spaces", "spaces", "closed blocks", "one long block", "half tags"],
)
def test_hostile_input_is_read_in_one_pass(text: str, for_judges: str, for_reward: str) -> None:
    # Each of these took seconds to minutes with the old lazy patterns (quadratic); the
    # suite's time is the guard, the assertions pin the result.
    assert judges(text) == for_judges
    assert reward(text) == for_reward


@pytest.mark.parametrize(
    "unit", ["```{", '{"a":', "{", '{"a":"', "```json\n{", "{}{", '"{', "\\{"], ids=lambda u: repr(u)
)
def test_reply_parsing_is_linear_on_hostile_replies(unit: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fence pattern and the JSON scan used to rescan to the end from every fence and every brace:
    quadratic on '```{' * 5000, and a RecursionError (an internal error) on '{"a":' * 2000. The work is
    counted, not timed: the characters handed to the JSON decoder, which a rescan multiplies."""
    from rose_sql.judges import replies

    decoded = 0
    load = replies._load

    def counting(text: str) -> dict[str, Any] | None:
        nonlocal decoded
        decoded += len(text)
        return load(text)

    monkeypatch.setattr(replies, "_load", counting)
    decode = replies._decoded

    def counting_at(text: str, start: int) -> tuple[dict[str, Any], str] | None:
        nonlocal decoded
        decoded += len(text) - start  # what the decoder may read from there
        return decode(text, start)

    monkeypatch.setattr(replies, "_decoded", counting_at)

    def work(n: int) -> int:
        nonlocal decoded
        decoded = 0
        with pytest.raises(ReplyError):
            parse_reply(ProverReply, unit * n)
        return decoded

    n = 20_000
    small, large = work(n), work(4 * n)
    length = len(unit) * 4 * n
    bound = replies._MAX_NESTING + 1 + replies._LINE_OBJECTS  # each character lies in a bounded number of candidates
    assert large <= bound * length
    assert large <= 4 * small + 8 * length // 100 + 64  # 4x the input: about 4x the work, never 16x


def test_the_verdict_is_found_after_prose_braces_and_inside_fences() -> None:
    body = {"expected_answer": "e", "sql_behaviour": "b", "reasoning": "a } in a string", "answers_question": False}
    for text in (
        "I wonder {whether. " + json.dumps(body),
        "```sql\nSELECT 1\n```\n```json\n" + json.dumps(body) + "\n```",
        '{"draft": 1} then the answer: ' + json.dumps(body),
    ):
        assert parse_reply(ProverReply, text).answers_question is False
