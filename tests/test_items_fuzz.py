"""Fuzzing the loaders: random and mutated input files never raise anything but InputError/UsageError.

Valid files of every format (BIRD with its gold, Spider lines, SQLExam, DIN CSV, generic JSONL, CSV
and JSON) are mutated (truncation, byte flips, inserted quotes, NULs and brackets, huge fields, deep
nesting, NaN, a wrong extension...) and loaded for a few seconds. Case ``i`` is built from its own
``random.Random(f"{seed}:{i}")``, so a failure names the seed and index that rebuild it:
``ROSE_FUZZ_SEED=<seed> ROSE_FUZZ_SECONDS=<s> pytest tests/test_items_fuzz.py``; the file is also kept.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rose_sql.errors import InputError, UsageError
from rose_sql.items.load import FORMATS, ItemId, load_items

SEED = int(os.environ.get("ROSE_FUZZ_SEED", "20260101"))
SECONDS = float(os.environ.get("ROSE_FUZZ_SECONDS", "4"))
MIN_CASES = 200
"""Run at least this many cases however slow the machine, so every run covers every seed file."""

WHOLE_FILE = (
    "larger than the input limit",
    "no items",
    "items but",
    "no questions",
    "prediction lines but",
    "empty CSV",
)
"""Errors about the whole file, which have no line or key to name."""

DBS = ("concert_singer", "superhero", "california_schools")
SQLS = ("SELECT count(*) FROM singer", "SELECT name FROM t WHERE a = 'x, \"y\"'", "SELECT 1\nFROM t\tWHERE b > 2", "")


@dataclass(frozen=True)
class Seed:
    name: str
    pred: bytes
    gold_name: str | None
    gold: bytes | None


def _seeds(rng: random.Random) -> list[Seed]:
    n = 4
    questions = [
        {
            "question_id": 10 + i,
            "db_id": DBS[i % 3],
            "question": f"How many {i}?",
            "evidence": "",
            "SQL": SQLS[i % 3],
            "difficulty": "simple",
        }
        for i in range(n)
    ]
    questions.append({**questions[1]})  # a repeated question_id, as in BIRD mini-dev
    dev = json.dumps(questions, indent=2).encode()
    gold_lines = "".join(f"{q['SQL'].replace(chr(10), ' ')}\t{q['db_id']}\n" for q in questions).encode()
    bird = {str(i): f"{SQLS[(i + 1) % 4]}\t----- bird -----\t{q['db_id']}" for i, q in enumerate(questions)}
    sqlexam = [{**q, "predicted_sql": SQLS[i % 4], "gold_sql": q["SQL"]} for i, q in enumerate(questions[:n])]
    generic = [
        {"id": f"q{i}", "db_id": q["db_id"], "question": q["question"], "gold_sql": q["SQL"], "pred_sql": SQLS[i % 4]}
        for i, q in enumerate(questions)
    ]

    def csv(header: list[str], rows: list[list[str]]) -> bytes:
        def cell(v: str) -> str:
            return '"' + v.replace('"', '""') + '"' if any(c in v for c in ',"\n') else v

        return "".join(",".join(cell(v) for v in row) + "\n" for row in [header, *rows]).encode()

    din = csv(
        ["NLQ", "PREDICTED SQL", "GOLD SQL", "DATABASE"],
        [[q["question"], SQLS[i % 4], q["SQL"], q["db_id"]] for i, q in enumerate(questions)],
    )
    gen_csv = csv(["id", "db_id", "question", "gold_sql", "pred_sql"], [list(g.values()) for g in generic])
    spider = "".join(SQLS[i % 4].replace("\n", " ") + "\n" for i in range(len(questions))).encode()
    return [
        Seed("bird.json", json.dumps(bird, indent=rng.choice([None, 2])).encode(), "dev.json", dev),
        Seed("bird_lines.json", json.dumps(bird).encode(), "gold.sql", gold_lines),
        Seed("spider.txt", spider, "gold.sql", gold_lines),
        Seed("spider_dev.sql", spider, "dev.json", dev),
        Seed("sqlexam.json", json.dumps(sqlexam, indent=2).encode(), None, None),
        Seed("sqlexam_gold.json", json.dumps(sqlexam).encode(), "dev.json", dev),
        Seed("din.csv", din, None, None),
        Seed("din_gold.csv", din, "gold.sql", gold_lines),
        Seed("generic.jsonl", b"".join(json.dumps(g).encode() + b"\n" for g in generic), None, None),
        Seed("generic.csv", gen_csv, None, None),
        Seed("generic.json", json.dumps(generic).encode(), "dev.json", dev),
    ]


# --------------------------------------------------------------------------- mutations

INSERTS = (b'"', b"'", b"\x00", b"[", b"]", b"{", b"}", b",", b"\n", b"\r", b"\t", b"\\", b":", b'""', b"\xff")
VALUES = (b"NaN", b"-Infinity", b"Infinity", b"1e999", b"9" * 5000, b"null", b"true", b"[]", b"{}", b"1.5", b'""')


def _at(rng: random.Random, data: bytes) -> int:
    return rng.randrange(len(data) + 1)


def truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: _at(rng, data)]


def flip(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if out:
            out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def insert(rng: random.Random, data: bytes) -> bytes:
    for _ in range(rng.randint(1, 4)):
        i = _at(rng, data)
        data = data[:i] + rng.choice(INSERTS) + data[i:]
    return data


def value(rng: random.Random, data: bytes) -> bytes:
    """A JSON value replaced by a hostile one (NaN, a huge number, a list...)."""
    colons = [i for i, b in enumerate(data) if b == ord(":")] or [0]
    i = rng.choice(colons) + 1
    end = min((j for j in (data.find(b",", i), data.find(b"}", i)) if j > 0), default=len(data))
    return data[:i] + b" " + rng.choice(VALUES) + data[end:]


def huge(rng: random.Random, data: bytes) -> bytes:
    i = _at(rng, data)
    field = rng.choice([b"x" * 140_000, b'"' + b"y" * 140_000 + b'"', b"\xc3\xa9" * 70_000])
    return data[:i] + field + data[i:]


def deep(rng: random.Random, data: bytes) -> bytes:
    i, n = _at(rng, data), rng.choice([500, 5_000, 100_000])
    return data[:i] + b"[" * n + (b"]" * n if rng.random() < 0.5 else b"") + data[i:]


def shuffle_lines(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    rng.shuffle(lines)
    return b"\n".join(lines)


def drop_or_repeat(rng: random.Random, data: bytes) -> bytes:
    i, j = sorted((_at(rng, data), _at(rng, data)))
    return data[:i] + data[j:] if rng.random() < 0.5 else data[:j] + data[i:j] + data[j:]


def reencode(rng: random.Random, data: bytes) -> bytes:
    text = data.decode("utf-8", errors="replace")
    return rng.choice([b"\xef\xbb\xbf" + data, text.encode("utf-16"), text.encode("latin-1", errors="replace")])


def random_bytes(rng: random.Random, data: bytes) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))


MUTATIONS: list[Callable[[random.Random, bytes], bytes]] = [
    truncate,
    flip,
    insert,
    value,
    huge,
    deep,
    shuffle_lines,
    drop_or_repeat,
    reencode,
    random_bytes,
]
EXTENSIONS = (".json", ".jsonl", ".csv", ".txt", ".sql", "")


@dataclass(frozen=True)
class Case:
    pred: Path
    gold: Path | None
    fmt: str | None
    how: str


def make_case(seed: int, index: int, folder: Path) -> Case:
    rng = random.Random(f"{seed}:{index}")
    s = rng.choice(_seeds(rng))
    pred, gold, how = s.pred, s.gold, []
    target = "gold" if gold is not None and rng.random() < 0.2 else "pred"
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        mutation = rng.choice(MUTATIONS)
        how.append(f"{mutation.__name__}({target})")
        if target == "gold" and gold is not None:
            gold = mutation(rng, gold)
        else:
            pred = mutation(rng, pred)
    name = s.name
    if rng.random() < 0.1:
        name = Path(name).stem + rng.choice(EXTENSIONS)
        how.append(f"renamed {name}")
    fmt = rng.choice(FORMATS) if rng.random() < 0.15 else None
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(pred)
    gold_path = None
    if s.gold_name is not None and gold is not None:
        gold_path = folder / s.gold_name
        gold_path.write_bytes(gold)
    return Case(folder / name, gold_path, fmt, f"{s.name}: {', '.join(how)}" + (f", --format {fmt}" if fmt else ""))


def check(case: Case) -> str:
    """Load a case; the outcome, or an AssertionError saying what broke the contract."""
    try:
        loaded = load_items(case.pred, case.gold, case.fmt)
    except InputError as e:
        assert e.path in (str(case.pred), str(case.gold)), e
        assert str(e).startswith(e.path + ":"), e
        assert e.where is not None or any(m in str(e) for m in WHOLE_FILE), f"no line or key: {e}"
        return "InputError"
    except UsageError as e:
        assert str(case.pred) in str(e) or (case.fmt and case.fmt in str(e)), e
        return "UsageError"
    assert loaded.items, "loaded no items without saying so"
    ids: set[ItemId] = set()
    for it in loaded.items:
        assert isinstance(it.id, int | str) and not isinstance(it.id, bool), it
        assert it.id not in ids, it
        ids.add(it.id)
        assert isinstance(it.pred_sql, str | None) and isinstance(it.db_id, str) and it.db_id.strip() == it.db_id != ""
        assert it.pred_sql is not None or (case.gold is not None and it.source.startswith(case.gold.name))
        assert "/" not in it.db_id and "\x00" not in it.db_id
        json.dumps([it.id, it.db_id, it.question, it.evidence], ensure_ascii=False).encode()  # records can hold them
    return "loaded"


@pytest.mark.slow  # fuzzes every reader with mutated inputs
def test_mutated_inputs_never_crash(tmp_path: Path) -> None:
    outcomes: dict[str, int] = {}
    deadline = time.monotonic() + SECONDS
    index = 0
    while index < MIN_CASES or time.monotonic() < deadline:
        case = make_case(SEED, index, tmp_path / str(index % 50))
        try:
            outcome = check(case)
        except Exception as e:  # anything escaping, or a broken contract: keep the file and say how to rebuild it
            kept = tmp_path / "failed" / case.pred.name
            kept.parent.mkdir(exist_ok=True)
            kept.write_bytes(case.pred.read_bytes())
            raise AssertionError(
                f"fuzz case {index} (ROSE_FUZZ_SEED={SEED}): {case.how}: {type(e).__name__}: {e}; file kept at {kept}"
            ) from e
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        index += 1
    assert outcomes.get("InputError", 0) > index // 4, outcomes  # the mutations do break files
    assert outcomes.get("loaded", 0) > 0, outcomes  # and some still load: the loaders are not just refusing
