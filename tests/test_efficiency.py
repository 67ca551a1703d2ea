"""BIRD's VES and mini-dev's R-VES by the published formulas, on hand-computed cases; SQLite VM steps as a
deterministic time base."""

from __future__ import annotations

import json
import math
import random
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import make_record

from rose_sql.cli import main
from rose_sql.config import Config
from rose_sql.engines import Database
from rose_sql.items.load import Item
from rose_sql.readings.efficiency import (
    Efficiency,
    by_difficulty,
    clean_abnormal,
    measure,
    published_ratio,
    r_ves,
    reward,
    step_ratio,
    ves,
    vm_steps,
)
from rose_sql.readings.formulas import Readings
from rose_sql.readings.official import _efficiency
from rose_sql.record import EXEMPT, Record, comparable, read_records
from rose_sql.summary import Brief, efficiency_table

BOUND = 10**8


@pytest.mark.parametrize(
    ("ratio", "bucket"),
    [(0, 0), (0.1, 0.25), (0.2499, 0.25), (0.25, 0.5), (0.4999, 0.5), (0.5, 0.75), (0.999, 0.75), (1, 1),
     (1.999, 1), (2, 1.25), (50, 1.25)],
)  # fmt: skip
def test_reward_buckets(ratio: float, bucket: float) -> None:
    assert reward(ratio) == bucket


def test_formulas_by_hand() -> None:
    # rewards 0, 1, 1.25, 0.5: R-VES = 100 * (0 + 1 + sqrt(1.25) + sqrt(0.5)) / 4
    assert r_ves([0, 1.5, 3.0, 0.3]) == pytest.approx(100 * (1 + math.sqrt(1.25) + math.sqrt(0.5)) / 4)
    assert ves([0, 4, 1]) == pytest.approx(100.0)  # 100 * (0 + 2 + 1) / 3
    assert r_ves([]) is None and ves([]) is None
    assert r_ves([1.0] * 7) == 100.0 and ves([1.0] * 7) == 100.0  # as fast as the gold everywhere


def test_clean_abnormal_equals_numpy() -> None:
    rng = random.Random(1)
    for _ in range(50):
        xs = [rng.lognormvariate(0, 0.3) for _ in range(100)] + [rng.uniform(5, 50) for _ in range(rng.randint(0, 3))]
        a = np.asarray(xs)
        mean, std = np.mean(a), np.std(a)
        want = [x for x in xs if mean - 3 * std < x < mean + 3 * std]
        assert clean_abnormal(xs) == pytest.approx(want)
    assert len(clean_abnormal([1.0] * 99 + [100.0])) == 99  # the outlier is gone


def test_identical_ratios_keep_none_and_score_0() -> None:
    """The published rule keeps values strictly inside mean ± 3 sigma: with sigma 0 it keeps none."""
    assert clean_abnormal([1.5] * 100) == []
    assert published_ratio([1.5] * 100) == 0.0
    assert published_ratio([1.0, 2.0, 3.0]) == 2.0


def _db(path: Path, rows: int) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, i % 7) for i in range(rows)])
    conn.commit()
    conn.close()
    return path


def test_vm_steps_are_exact_and_deterministic(tmp_path: Path) -> None:
    small, big = _db(tmp_path / "s.sqlite", 100), _db(tmp_path / "b.sqlite", 1000)
    sql = "SELECT v FROM t WHERE v = 3"
    s1, s2, b = vm_steps(small, sql, BOUND), vm_steps(small, sql, BOUND), vm_steps(big, sql, BOUND)
    assert s1 is not None and s1 == s2  # the same count every time: no clock
    assert b is not None and 9 * s1 < b < 11 * s1  # a scan: steps grow with the rows
    by_key = vm_steps(big, "SELECT v FROM t WHERE id = 3", BOUND)
    assert by_key is not None and by_key * 50 < b  # a primary-key lookup is far cheaper than the scan
    assert step_ratio(b, by_key, True) == b / by_key  # the gold scans, the prediction looks up: faster
    assert vm_steps(small, "SELECT nope FROM t", BOUND) is None
    assert vm_steps(big, sql, 100) is None  # past the bound: no count, never a made-up one
    assert step_ratio(None, 5, True) is None and step_ratio(None, None, False) == 0.0


def test_by_difficulty_states_denominators() -> None:
    items = [("simple", 1.0), ("simple", 0.0), ("moderate", 3.0), ("moderate", None), (None, 0.3)]
    out = by_difficulty(items, r_ves)
    assert out["simple"] == (50.0, 2, 0)
    assert out["moderate"] == (pytest.approx(100 * math.sqrt(1.25)), 1, 1)
    assert out["all"][1:] == (4, 1)
    assert out["all"][0] == pytest.approx(100 * (1 + 0 + math.sqrt(1.25) + math.sqrt(0.5)) / 4)


# --------------------------------------------------------------------------- rose run --efficiency


def _items(tmp_path: Path) -> tuple[Path, Path]:
    """A tiny database and five items: a faster correct prediction (a key lookup for a scan), a slower
    one, an equal one, a wrong one and an unanswered question; its gold ran, so BIRD EX is defined on each."""
    _db_dir = tmp_path / "dbs" / "t"
    _db_dir.mkdir(parents=True)
    _db(_db_dir / "t.sqlite", 2000)
    rows = [
        ("fast", "simple", "SELECT v FROM t WHERE id + 0 = 3", "SELECT v FROM t WHERE id = 3"),
        ("slow", "simple", "SELECT v FROM t WHERE id = 3", "SELECT v FROM t WHERE id + 0 = 3"),
        ("same", "moderate", "SELECT COUNT(*) FROM t", "SELECT COUNT(*) FROM t"),
        ("wrong", "moderate", "SELECT COUNT(*) FROM t", "SELECT COUNT(*) + 1 FROM t"),
        ("none", "challenging", "SELECT MAX(v) FROM t", None),
    ]
    items = tmp_path / "items.jsonl"
    items.write_text(
        "".join(
            json.dumps({"id": i, "db_id": "t", "question": i, "difficulty": d, "gold_sql": g, "pred_sql": p}) + "\n"
            for i, d, g, p in rows
        ),
        encoding="utf-8",
    )
    return items, tmp_path / "dbs"


def _rose_run(items: Path, dbs: Path, out: Path, *extra: str) -> tuple[list[Record], dict[str, Any], str]:
    args = ["run", str(items), "--db-root", str(dbs), "--out", str(out), "--workers", "1", *extra]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    folder = out / items.stem
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    return list(read_records(folder / "records.jsonl")), summary, result.output


def test_run_steps_figure_is_deterministic_and_load_independent(tmp_path: Path) -> None:
    """The step ratio is the same in two runs and under any step budget large enough to count the queries
    (a budget is a count, never a clock): the whole record is then equal, field for field."""
    items, dbs = _items(tmp_path)
    runs = [
        _rose_run(items, dbs, tmp_path / name, "--efficiency", "steps", *extra)
        for name, extra in (("a", ()), ("b", ()), ("c", ("--max-steps", "5000000")), ("d", ("--timeout", "600")))
    ]
    first = {r.id: r for r in runs[0][0]}
    e = {k: r.efficiency for k, r in first.items()}
    assert all(x is not None and x.base == "steps" and x.time_ratio is None for x in e.values())
    fast, slow = e["fast"], e["slow"]
    assert fast is not None and slow is not None and fast.gold_steps is not None and fast.pred_steps is not None
    assert fast.steps_ratio == fast.gold_steps / fast.pred_steps and fast.steps_ratio is not None
    assert fast.steps_ratio > 2 and slow.steps_ratio is not None and slow.steps_ratio < 0.25
    assert fast.gold_steps == vm_steps(dbs / "t" / "t.sqlite", "SELECT v FROM t WHERE id + 0 = 3", BOUND)
    assert [x.steps_ratio if x else None for x in (e["same"], e["wrong"], e["none"])] == [1.0, 0.0, 0.0]
    for records, summary, _ in runs[1:]:
        assert [comparable(r) for r in records] == [comparable(r) for r in runs[0][0]]
        assert summary["efficiency"] == runs[0][1]["efficiency"]


def test_run_summary_gives_r_ves_and_ves_with_denominators(tmp_path: Path) -> None:
    items, dbs = _items(tmp_path)
    records, summary, output = _rose_run(items, dbs, tmp_path / "o", "--efficiency", "steps")
    ratios = {r.id: r.efficiency.steps_ratio for r in records if r.efficiency is not None}
    table = summary["efficiency"]
    assert set(table) == {"steps"}  # the wall-time base was not asked
    assert list(table["steps"]) == ["all", "simple", "moderate", "challenging"]  # in order, whatever the records' order
    steps = table["steps"]
    want = [ratios[k] for k in ("fast", "slow", "same", "wrong", "none")]
    assert steps["all"]["n"] == 5 and steps["all"]["of"] == 5 and steps["all"]["left_out"] == {}
    assert steps["all"]["r_ves"] == pytest.approx(r_ves(want), abs=1e-4)  # type: ignore[arg-type]
    assert steps["all"]["ves"] == pytest.approx(ves(want), abs=1e-4)  # type: ignore[arg-type]
    # rewards 1.25 and 0.25 (simple: ratios above 2 and below 0.25), 1 and 0 (moderate), 0 (challenging)
    assert steps["simple"]["r_ves"] == pytest.approx(100 * (math.sqrt(1.25) + math.sqrt(0.25)) / 2, abs=1e-4)
    assert steps["moderate"]["r_ves"] == 50.0 and steps["moderate"]["n"] == 2
    assert steps["challenging"] == {"r_ves": 0.0, "ves": 0.0, "n": 1, "of": 1, "left_out": {}}
    assert "R-VES (mini-dev) by VM steps: all " in output and "(5 of 5)" in output
    assert "VES (BIRD dev) by VM steps: " in output
    manifest = json.loads((tmp_path / "o" / "items" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["options"]["efficiency"] == "steps"
    plain, summary_off, _ = _rose_run(items, dbs, tmp_path / "off")
    assert summary_off["efficiency"] is None and all(r.efficiency is None for r in plain)
    assert all("efficiency" not in r.to_dict() for r in plain)  # the layout as it always was


def test_run_time_base_is_exempt_and_decides_nothing(tmp_path: Path) -> None:
    """The published wall-time ratio: 100 iterations, 3-sigma rule; its fields are in EXEMPT, so two runs
    compare equal whatever the clock said, and it changes no score."""
    assert {"time_ratio", "time_kept"} <= EXEMPT
    items, dbs = _items(tmp_path)
    a, sa, out = _rose_run(items, dbs, tmp_path / "a", "--efficiency", "both")
    b, _, _ = _rose_run(items, dbs, tmp_path / "b", "--efficiency", "both")
    steps_only, _, _ = _rose_run(items, dbs, tmp_path / "s", "--efficiency", "steps")
    assert [comparable(r) for r in a] == [comparable(r) for r in b]
    assert [r.score for r in a] == [r.score for r in steps_only]
    assert [r.readings for r in a] == [r.readings for r in steps_only]
    e = {r.id: r.efficiency for r in a}
    fast = e["fast"]
    assert fast is not None and fast.time_ratio is not None and fast.time_kept is not None
    assert 0 < fast.time_kept <= 100 and fast.time_ratio > 0
    wrong = e["wrong"]
    assert wrong is not None and (wrong.time_ratio, wrong.time_kept) == (0.0, 0)
    assert set(sa["efficiency"]) == {"steps", "time"} and sa["efficiency"]["time"]["all"]["n"] == 5
    assert "by wall time x100, machine- and load-dependent" in out
    time_only, st, _ = _rose_run(items, dbs, tmp_path / "t", "--efficiency", "time")
    assert all(r.efficiency is not None and r.efficiency.steps_ratio is None for r in time_only)
    assert set(st["efficiency"]) == {"time"}


def test_off_sqlite_the_ratios_are_null(tmp_path: Path) -> None:
    """Off SQLite (plan costs depend on sampled statistics) the record says so with null ratios, and the
    summary leaves the item out as not_sqlite."""
    _db(tmp_path / "t.sqlite", 10)
    cfg = Config(efficiency="both", workers=1)

    class _Server:
        config = cfg

    item = Item("1", "t", "SELECT 1", "SELECT 1")
    db = Database("duckdb", str(tmp_path / "t.duckdb"), "t")
    eff = _efficiency(item, db, Readings(bird_ex=1), _Server())  # type: ignore[arg-type]
    assert eff == Efficiency(None, base="both")
    assert _efficiency(item, Database.file(tmp_path / "t.sqlite"), Readings(), _Server()) is None  # type: ignore[arg-type]
    assert measure(None, "SELECT 1", "SELECT 1", True, "steps", BOUND) == Efficiency(None, base="steps")
    record = make_record(
        {"id": 1, "db_id": "t", "score": None, "readings": {"bird_ex": 1}, "dialect": "duckdb", "server": "DuckDB 1",
         "efficiency": {"steps_ratio": None, "base": "both"}, "difficulty": "simple"}
    )  # fmt: skip
    assert record.efficiency == Efficiency(None, base="both")
    table = efficiency_table([Brief.of(record)])
    assert table is not None
    assert table["steps"]["all"] == {"r_ves": None, "ves": None, "n": 0, "of": 1, "left_out": {"not_sqlite": 1}}
    assert table["time"]["simple"]["left_out"] == {"not_sqlite": 1}


def test_resume_refuses_another_efficiency(tmp_path: Path) -> None:
    """The step ratio is a recorded reading: a resumed run never mixes records with and without it."""
    items, dbs = _items(tmp_path)
    _rose_run(items, dbs, tmp_path / "o", "--efficiency", "steps")
    args = ["run", str(items), "--db-root", str(dbs), "--out", str(tmp_path / "o"), "--workers", "1", "--resume"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0 and "option efficiency differs ('steps' then, 'off' now)" in result.output
