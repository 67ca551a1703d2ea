"""SQL extraction on hostile completions: linear on a megabyte, and no completion makes it (or an
adapter) raise (a seeded fuzz test)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import build_db

from rose_sql.reward import RewardConfig, compute_score_batch, extract_sql, trl_reward

MB = 1_000_000
BOUND_S = 5.0
"""Each hostile megabyte is read in about 0.1 s; a quadratic pattern would take hours."""

HOSTILE: list[tuple[str, str, str | None]] = [
    ("runs of spaces", " " * MB, None),
    ("spaces after SELECT", "SELECT" + " " * MB, "SELECT"),
    ("a newline, then blanks without a second one", "SELECT 1\n" + " \t" * (MB // 2) + "x", None),
    ("blank-ish runs between lines", "SELECT 1" + ("\n" + " " * 999 + "x") * 1000, None),
    ("spaces after a CTE name", "WITH x" + " " * MB + "SELECT 1", "SELECT 1"),
    ("an unclosed column list", "WITH x (" + " " * MB + "SELECT 1", "SELECT 1"),
    ("many CTE openings", "WITH x (" * (MB // 8) + "SELECT 1", "SELECT 1"),
    ("unclosed answer tags", "<answer>" * (MB // 8), "<answer>" * (MB // 8 - 1)),
    ("unclosed sql tags", "<sql>" * (MB // 5), "<sql>" * (MB // 5 - 1)),
    ("closed tags", "<sql>a</sql>" * (MB // 12), "a"),
    ("closing tags without an opening", "</answer>" * (MB // 9) + "SELECT 1", "SELECT 1"),
    ("unclosed reasoning tags", "<think>" * (MB // 7) + "SELECT 1", None),
    ("reasoning tags of every kind", "<thinking><reasoning><think>" * (MB // 28) + "SELECT 1", None),
    ("unclosed fences", "```" * (MB // 3), None),
    ("an opening fence, then spaces", "```" + " " * MB, None),
    ("a fence language a megabyte long", "```" + "a" * MB, None),
    ("fence openings", "```sql\n" * (MB // 7), None),
    ("special token openings", "<|" + "a" * MB, None),
    ("near-special tokens", "<|" + "a" * 41 * (MB // 43), None),
    ("angle brackets", "<" * MB, None),
    ("backticks", "`" * MB, "`"),
    ("a megabyte of SQL with a comment", "SELECT " + "a, " * (MB // 3) + "1 -- x", None),
]


@pytest.mark.parametrize(("text", "expected"), [(t, e) for _, t, e in HOSTILE], ids=[n for n, _, _ in HOSTILE])
def test_hostile_megabytes_are_read_in_linear_time(text: str, expected: str | None) -> None:
    start = time.monotonic()
    got = extract_sql(text)
    elapsed = time.monotonic() - start
    assert elapsed < BOUND_S, f"{elapsed:.2f} s"
    if text.startswith("SELECT a, a"):  # longer than comments are stripped from: kept whole, for the sandbox
        assert got is not None and got.endswith("-- x")
    elif text.startswith("SELECT 1\n"):
        assert got == "SELECT 1\n" + text[9:].rstrip()
    elif text.startswith("SELECT 1\n" + " " * 999):
        assert got is not None and got.startswith("SELECT 1\n")
    else:
        assert got == expected


# --------------------------------------------------------------------------- fuzz

PIECES = [
    "<answer>", "</answer>", "<sql>", "</sql>", "<ANSWER>", "<final_answer>", "<think>", "</think>",
    "<reasoning>", "```", "```sql\n", "```python\n", "\n", "\n\n", " ", "\t", "SELECT", "select", "WITH x AS (",
    "WITH RECURSIVE", "FROM t", "(", ")", "--", "/*", "*/", "'", '"', ";", "<|im_end|>", "<|", "|>", "</s>",
    "\x00", "\ud800", "é", "😀", "VALUES (1)", "SELECT 1", "SELECT a FROM t WHERE b = 'x'",
]  # fmt: skip
"""What completions are made of, hostile pieces included (lone surrogates, NUL, unclosed everything)."""


def _text(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randrange(200)))
    parts = [rng.choice(PIECES) for _ in range(rng.randrange(1, 40))]
    if rng.random() < 0.2:  # a long run of one piece
        parts.insert(rng.randrange(len(parts) + 1), rng.choice(PIECES) * rng.randrange(100, 3000))
    return "".join(parts)


def _completion(rng: random.Random) -> Any:
    """A completion of any shape TRL, verl or OpenRLHF could hand over, well-formed or not."""
    shape = rng.randrange(8)
    if shape < 4:
        return _text(rng)
    if shape == 4:
        return {"role": "assistant", "content": _text(rng)}
    if shape == 5:
        content: Any = rng.choice([None, 3, [{"type": "text", "text": _text(rng)}, {"text": 5}, "part"], _text(rng)])
        return [{"role": rng.choice(["user", "assistant", None]), "content": content}, "not a message", 7]
    if shape == 6:
        return []
    return rng.choice([None, 42, 3.5, b"SELECT 1", object()])


@pytest.mark.slow  # fuzzes for a fixed few seconds
def test_no_completion_makes_extraction_raise() -> None:
    rng = random.Random(20260101)
    start, n = time.monotonic(), 0
    while time.monotonic() - start < 3.0:
        completion = _completion(rng)
        got = extract_sql(completion, rng.choice([None, "", "SELECT", _text(rng)]))
        assert got is None or (isinstance(got, str) and got == got.strip() and got)
        n += 1
    assert n > 1000


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fuzz")
    build_db(folder / "t" / "t.sqlite", "CREATE TABLE t (a INTEGER, b TEXT); INSERT INTO t VALUES (1, 'x'), (2, 'y');")
    return folder


@pytest.mark.slow  # fuzzes for a fixed few seconds
def test_no_completion_makes_an_adapter_raise(root: Path) -> None:
    rng = random.Random(7)
    cfg = RewardConfig(processes=1, max_steps=1_000_000)
    trl: Callable[..., list[float | None]] = trl_reward(root, cfg)
    start, batches = time.monotonic(), 0
    while time.monotonic() - start < 4.0:
        n = rng.randrange(1, 12)
        completions = [_completion(rng) for _ in range(n)]
        golds = [rng.choice(["SELECT a FROM t", "SELECT b FROM t WHERE a = 1", _text(rng)]) for _ in range(n)]
        truths = [rng.choice([g, f"{g}\tt", '{"gold_sql": "SELECT 1", "db_id": "t"}', "{broken", 5]) for g in golds]
        texts = [c if isinstance(c, str) else str(c) for c in completions]
        verl = compute_score_batch(["x"] * n, texts, truths, [{"db_id": "t"}] * n, db_root=str(root), config=cfg)
        assert len(verl) == n and all(isinstance(r["score"], float) and isinstance(r["error"], str) for r in verl)
        out = trl(prompts=None, completions=completions, gold_sql=golds, db_id=["t"] * n)
        assert len(out) == n and all(x is None or isinstance(x, float) for x in out)
        batches += 1
    assert batches > 5
