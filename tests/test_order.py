"""The record of an item is a function of the item, its database and the options: never of the items run
before it, of which worker process ran it, nor of that process's hash seed.

Each test evaluates the same items in several orders (the input, its reverse, seeded shuffles), and on the
servers each item alone too, through ``rose run`` and its worker processes, and compares the records item
for item without what legitimately differs (``seconds``, ``cached``, ``source``). The databases provoke
what carried over before: the witness search's random edits drew a column's literals in the order of a set
of strings, which is the process's hash seed's (BIRD superhero item 801 tried 27 candidates in one run and
24 in the next), so each ``rose run`` here runs in a process of its own under another ``PYTHONHASHSEED``;
and on PostgreSQL and MariaDB the scratch database kept the tables, and the bytes, of the items before.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from itertools import permutations
from pathlib import Path
from typing import Any

import pytest
from conftest import build_db
from servers import MYSQL_ADMIN, PG_ADMIN, load

from rose_sql.config import Config
from rose_sql.engines import Source
from rose_sql.items.load import load_items
from rose_sql.run.runner import plan, run

OPTIONS = ("--evidence", "--workers", "2")
"""The witness search on, and worker processes: which items share one depends on the order."""
Row = dict[str, Any]
Records = dict[Any, Any]

EXEMPT = frozenset({"seconds", "cached", "source"})
"""What differs between two evaluations of the same item: times, cache hits, the input's line."""

GENDERS = {"Male": 1, "Female": 2, "N/A": 3}
CITIES = ["Paris", "Rome", "Oslo", "Lima", "Kyiv"]
HEROES = """
CREATE TABLE gender (id INTEGER PRIMARY KEY, gender TEXT);
CREATE TABLE hero (id INTEGER PRIMARY KEY, name TEXT NOT NULL, gender_id INTEGER REFERENCES gender (id),
    city TEXT, weight INTEGER);
INSERT INTO gender VALUES (1, 'Male'), (2, 'Female'), (3, 'N/A');
""" + "".join(
    f"INSERT INTO hero VALUES ({i}, 'hero {i}', {1 + i % 3}, '{CITIES[i % 5]}', {50 + i});\n" for i in range(1, 41)
)


def hero_rows() -> list[Row]:
    """Questions on the heroes whose witness search goes on to the random edits, where the literals the
    queries compare a column with are drawn from (BIRD superhero item 801 is the first of them)."""
    pairs: list[tuple[str, str]] = []
    for a, b in permutations(GENDERS, 2):
        ratio = (
            f"SELECT CAST(COUNT(CASE WHEN T2.gender = '{a}' THEN T1.id ELSE NULL END) AS REAL) / "
            f"COUNT(CASE WHEN T2.gender = '{b}' THEN T1.id ELSE NULL END) FROM hero AS T1 "
            "JOIN gender AS T2 ON T1.gender_id = T2.id"
        )
        by_id = (
            f"SELECT CAST(SUM(CASE WHEN gender_id = {GENDERS[a]} THEN 1 ELSE 0 END) AS REAL) / "
            f"SUM(CASE WHEN gender_id = {GENDERS[b]} THEN 1 ELSE 0 END) FROM hero"
        )
        pairs.append((ratio, by_id))
        either = f"JOIN gender AS g ON h.gender_id = g.id WHERE g.gender = '{a}' OR g.gender = '{b}'"
        other = next(i for g, i in GENDERS.items() if g not in (a, b))
        pairs.append(
            (f"SELECT COUNT(*) FROM hero AS h {either}", f"SELECT COUNT(*) FROM hero WHERE gender_id <> {other}")
        )
    for n in range(5):
        three, rest = [CITIES[(n + k) % 5] for k in range(3)], [CITIES[(n + k) % 5] for k in (3, 4)]
        where = " OR ".join(f"city = '{c}'" for c in three)
        pairs.append(
            (
                f"SELECT COUNT(*) FROM hero WHERE {where}",
                "SELECT COUNT(*) FROM hero WHERE " + " AND ".join(f"city <> '{c}'" for c in rest),
            )
        )
        pairs.append((f"SELECT name FROM hero WHERE {where}", f"SELECT name FROM hero WHERE city IN {tuple(three)}"))
    return [{"id": i, "db_id": "heroes", "gold_sql": g, "pred_sql": p} for i, (g, p) in enumerate(pairs, 1)]


def orders(rows: list[Row], shuffles: int) -> Iterator[tuple[str, list[Row]]]:
    """The input, its reverse and ``shuffles`` seeded shuffles."""
    yield "input", rows
    yield "reversed", rows[::-1]
    for k in range(shuffles):
        shuffled = rows[:]
        random.Random(k).shuffle(shuffled)
        yield f"shuffle {k}", shuffled


def without_exempt(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_exempt(v) for k, v in value.items() if k not in EXEMPT}
    if isinstance(value, list):
        return [without_exempt(v) for v in value]
    return value


def records_of(out: Path) -> Records:
    lines = (out / "items" / "records.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["id"]: without_exempt(r) for r in map(json.loads, lines)}


def write_items(folder: Path, rows: list[Row]) -> Path:
    folder.mkdir(parents=True)
    path = folder / "items.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def rose_run(rows: list[Row], db: str, folder: Path, seed: int) -> Records:
    """``rose run`` on ``rows`` with two worker processes, in a process of its own whose hash seed is ``seed``."""
    items = write_items(folder, rows)
    done = subprocess.run(
        [sys.executable, "-m", "rose_sql", "run", str(items), "--db", db, "--out", str(folder / "out"), *OPTIONS],
        env={**os.environ, "PYTHONHASHSEED": str(seed)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return records_of(folder / "out")


def assert_same(runs: dict[str, Records]) -> None:
    """Every run holds the records of the first for the items it holds, item for item (the first that
    differs named); the first holds them all."""
    (first, expected), *others = runs.items()
    for name, found in others:
        assert found.keys() <= expected.keys(), name
        for key, record in found.items():
            assert record == expected[key], f"item {key}: {name} differs from {first}"


@pytest.mark.slow  # runs rose in processes of their own, once per hash seed
def test_the_records_are_the_same_whatever_the_order_and_the_process(
    make_db: Callable[..., Path], tmp_path: Path
) -> None:
    db_root = make_db(HEROES, db_id="heroes").parent.parent
    rows = hero_rows()
    runs: dict[str, Records] = {}
    seed = 0
    for attempt in range(2):  # every run a process of its own, each with another hash seed
        for name, ordered in orders(rows, shuffles=3):
            runs[f"{name} #{attempt} (PYTHONHASHSEED={seed})"] = rose_run(
                ordered, str(db_root), tmp_path / f"r{seed}", seed
            )
            seed += 1
    assert all(len(found) == len(rows) for found in runs.values())
    assert_same(runs)
    found = next(iter(runs.values()))
    searches = [r["evidence"]["search"] for r in found.values() if r["evidence"] and r["evidence"]["search"]]
    # what the test is about: searches that drew random edits (seeded by the item, never by the order), and
    # searches that found a witness; since the search prefers plausible witnesses and tries added rows first,
    # the random draws of these items end at the candidate budget
    assert any(s["tried"].get("random") for s in searches), searches
    assert any(s["stopped"] == "found" for s in searches), searches


def test_superhero_item_801_finds_the_same_whatever_the_order(shared: Path, tmp_path: Path) -> None:
    """The user's report: DAIL-SQL's BIRD superhero items forward and reversed gave item 801 a search of
    27 and of 24 candidates."""
    every = json.loads((shared / "preds" / "bird-dev" / "dail-result.json").read_text(encoding="utf-8"))
    rows = [x for x in every if x["db_id"] == "superhero" and 795 <= x["question_id"] <= 810]
    assert 801 in {x["question_id"] for x in rows}
    runs = {
        f"{name} (PYTHONHASHSEED={seed})": rose_run(ordered, str(shared / "bird"), tmp_path / f"r{seed}", seed)
        for seed, (name, ordered) in enumerate(orders(rows, shuffles=1))
    }
    assert_same(runs)
    search = next(iter(runs.values()))[801]["evidence"]["search"]
    assert search["stopped"] == "found", search


# --------------------------------------------------------------------------- the scratch database on a server

FAMILY = """
CREATE TABLE p (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE c (id INTEGER PRIMARY KEY, p_id INTEGER NOT NULL REFERENCES p (id), x INTEGER NOT NULL);
CREATE TABLE x (id INTEGER PRIMARY KEY, v TEXT NOT NULL, n INTEGER);
CREATE TABLE y (id INTEGER PRIMARY KEY, v TEXT NOT NULL, n INTEGER);
INSERT INTO p VALUES (1, 'a'), (2, 'b'), (3, 'c');
INSERT INTO c VALUES (10, 1, 5), (11, 2, 6);
""" + "".join(
    f"INSERT INTO x VALUES ({i}, '{'v' * 200}', {i}); INSERT INTO y VALUES ({i}, '{'v' * 200}', {i});\n"
    for i in range(1, 51)
)
"""``c`` refers to ``p``; ``x`` and ``y`` hold about 10 KB of rows each on both servers."""
SERVER_DB = "rose_test_order"
SERVER_ROWS = [
    {"id": i, "db_id": SERVER_DB, "gold_sql": gold, "pred_sql": pred}
    for i, (gold, pred) in enumerate(
        [
            # item 1 copies c (and its parent p)
            ("SELECT COUNT(*) FROM c JOIN p ON c.p_id = p.id", "SELECT 2"),
            # item 2 reads p alone: a row added to p tells them apart, on a copy of p alone
            ("SELECT MAX(id) FROM p WHERE id <= 3", "SELECT COUNT(*) FROM p"),
            # items 3 and 4 read x and y: each fits the bound of 15 KB alone, not both
            ("SELECT COUNT(*) FROM x", "SELECT COUNT(n) FROM x"),
            ("SELECT COUNT(*) FROM y", "SELECT COUNT(n) FROM y"),
        ],
        1,
    )
]
SCRATCH = {"postgresql": PG_ADMIN, "mysql": MYSQL_ADMIN}


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_on_a_server_an_item_finds_what_it_finds_alone(kind: str, tmp_path: Path) -> None:
    from rose_sql.engines.spaces.scratch import leftovers

    sqlite_file = build_db(tmp_path / SERVER_DB / f"{SERVER_DB}.sqlite", FAMILY)
    _, reader = load(kind, sqlite_file, SERVER_DB, tmp_path)
    source = Source.parse(reader)
    config = Config(workers=1, evidence=True, evidence_scratch=SCRATCH[kind], evidence_max_db_bytes=15_000)
    left = leftovers(SCRATCH[kind])

    def rose_run_here(rows: list[Row], folder: Path) -> Records:
        """``rose run``'s functions, one worker process: it runs the items one after the other."""
        loaded = load_items(write_items(folder, rows))
        out = folder / "out"
        run(plan([loaded], out, db_root=source, config=config), source, config)
        return records_of(out)

    runs = {name: rose_run_here(rows, tmp_path / name) for name, rows in orders(SERVER_ROWS, shuffles=1)}
    for row in SERVER_ROWS:
        runs[f"item {row['id']} alone"] = rose_run_here([row], tmp_path / f"alone {row['id']}")
    assert_same(runs)
    found = runs["input"]
    # item 2 is told apart on its copy of p alone (a copy of p's row 3 under a fresh key: COUNT moves, MAX does not)
    assert found[2]["evidence"]["witness"]["changes"] == [
        {
            "op": "insert",
            "table": "p",
            "rowid": None,
            "copy_of": 3,
            "values": {"id": 1003},
            "row": {"id": 1003, "name": "c"},
        }
    ], found[2]["evidence"]
    assert found[4]["evidence"]["skipped"] is None and found[4]["evidence"]["witness"] is not None, found[4]
    assert leftovers(SCRATCH[kind]) == left  # every run dropped its scratch database
