"""BIRD's VES and mini-dev's R-VES by the published formulas, on hand-computed cases; SQLite VM steps as a
deterministic time base."""

from __future__ import annotations

import json
import math
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import make_record

from rose_sql.cli import main
from rose_sql.config import Config
from rose_sql.engines import Database
from rose_sql.engines.base import Counted, Timed
from rose_sql.engines.execute import Executor
from rose_sql.engines.workers import Watch
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
)
from rose_sql.readings.formulas import Readings
from rose_sql.readings.official import _efficiency
from rose_sql.record import EXEMPT, Record, comparable, read_records
from rose_sql.summary import Brief, efficiency_table

BOUND = 10**8


def vm_steps(db: Path, sql: str, max_steps: int) -> int | None:
    """The count of the sandbox's exact pass, in this process (a no-op watch)."""
    with Executor(Config(max_steps=max_steps), watch=Watch()) as ex:
        return ex.count_steps(Database.file(db), sql).steps


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


def test_off_sqlite_the_step_ratio_is_null_and_the_time_base_says_why(tmp_path: Path) -> None:
    """Off SQLite (plan costs depend on sampled statistics) the step ratio is null and the summary leaves
    the item out as not_sqlite on that base; the time base is measured on every engine that times
    (tests/test_efficiency_servers.py), and a record without its pass (made before the servers were timed,
    or on an engine that does not time) is left out as not_timed, never not_sqlite."""
    _db(tmp_path / "t.sqlite", 10)
    cfg = Config(efficiency="steps", workers=1)

    class _Server:
        config = cfg

    item = Item("1", "t", "SELECT 1", "SELECT 1")
    db = Database("duckdb", str(tmp_path / "t.duckdb"), "t")
    eff = _efficiency(item, db, Readings(bird_ex=1), _Server())  # type: ignore[arg-type]
    assert eff == Efficiency(None, base="steps")  # no pass run: the fake executor has none
    assert _efficiency(item, Database.file(tmp_path / "t.sqlite"), Readings(), _Server()) is None  # type: ignore[arg-type]
    assert measure(_Server(), db, "SELECT 1", "SELECT 1", True, "steps") == Efficiency(None, base="steps")  # type: ignore[arg-type]
    record = make_record(
        {"id": 1, "db_id": "t", "score": None, "readings": {"bird_ex": 1}, "dialect": "duckdb", "server": "DuckDB 1",
         "efficiency": {"steps_ratio": None, "base": "both"}, "difficulty": "simple"}
    )  # fmt: skip
    assert record.efficiency == Efficiency(None, base="both")
    table = efficiency_table([Brief.of(record)])
    assert table is not None
    assert table["steps"]["all"] == {"r_ves": None, "ves": None, "n": 0, "of": 1, "left_out": {"not_sqlite": 1}}
    assert table["time"]["simple"]["left_out"] == {"not_timed": 1}
    on_server = {"db_id": "t", "score": None, "readings": {"bird_ex": 1}, "dialect": "postgres", "server": "PG 15"}
    timed = make_record(
        {"id": 2, **on_server, "efficiency": {"steps_ratio": None, "base": "both", "time_ratio": 2.5, "time_kept": 99}}
    )
    stopped = make_record(
        {"id": 3, **on_server, "efficiency": {"steps_ratio": None, "base": "both", "time_reason": "unreadable"}}
    )
    table = efficiency_table([Brief.of(timed), Brief.of(stopped)])
    assert table is not None
    assert table["steps"]["all"]["left_out"] == {"not_sqlite": 2}
    assert table["time"]["all"] == {
        "r_ves": pytest.approx(100 * math.sqrt(1.25)), "ves": pytest.approx(100 * math.sqrt(2.5)), "n": 1, "of": 2,
        "left_out": {"no_count": 1},
    }  # fmt: skip


def test_on_sqlite_ves_takes_bird_devs_timing_to_the_first_row_and_r_ves_mini_devs(tmp_path: Path) -> None:
    """BIRD dev's ``evaluation_ves.py`` times ``cursor.execute`` alone (the statement to its first row, its
    rows never read), mini-dev's the fetch and the close too. On SQLite each has a pass of its own; the
    record keeps both ratios, the summary's VES takes BIRD dev's, its R-VES mini-dev's. Off SQLite there is
    no BIRD dev script: VES takes the published ratio."""
    db = Database.file(_db(tmp_path / "t.sqlite", 20_000))
    scan, one = "SELECT id, v FROM t", "SELECT v FROM t WHERE id = 3"
    with Executor(Config(), watch=_Recording()) as ex:
        done = ex.time_pass(db, (scan, one), 5, first_row=True)
        eff = measure(ex, db, one, one, True, "time")
        wrong = measure(ex, db, one, scan, False, "time")
        stopped = measure(ex, db, one, "SELECT abs(-9223372036854775807 - 1)", True, "time")  # fails at once
    assert len(done.times) == 5 and done.error is None
    second_row_fails = "SELECT CASE WHEN id > 0 THEN abs(-9223372036854775807 - 1) ELSE id END FROM t ORDER BY id"
    with Executor(Config(), watch=Watch()) as plain:  # the first-row pass never reads a second row
        assert plain.time_pass(db, (second_row_fails,), 2, first_row=True).error is None
        whole = plain.time_pass(db, (second_row_fails,), 2)
    assert whole.at == (1, 0) and whole.error is not None and "integer overflow" in whole.error
    assert len({key for key, _ in ex.watch.armed}) == 4  # the first-row pass is armed under a key of its own
    assert eff is not None and eff.time_ratio is not None and eff.dev_time_ratio is not None
    assert eff.dev_time_ratio > 0 and eff.dev_time_ratio != eff.time_ratio  # two passes, two ratios
    assert stopped is not None and (stopped.time_ratio, stopped.dev_time_ratio) == (0.0, 0.0)  # not run again
    assert stopped.time_reason is not None and "BIRD dev" not in stopped.time_reason
    assert wrong == Efficiency(None, base="time", time_ratio=0.0, time_kept=0, dev_time_ratio=0.0)

    class _Unreadable:  # mini-dev's pass ran; the database could not be read for BIRD dev's
        def time_pass(self, db: Database, statements: Any, iterations: int, *, first_row: bool = False) -> Timed:
            if first_row:
                return Timed((), "unreadable: the file went away", status="unreadable")
            return Timed(((1.0, 2.0),) * iterations)

    lost = measure(_Unreadable(), db, one, one, True, "time")  # type: ignore[arg-type]
    assert lost is not None and (lost.time_ratio, lost.dev_time_ratio) == (None, None)  # out of both figures
    assert lost.time_reason == "BIRD dev's timed pass: unreadable: the file went away"
    sqlite_item = {"db_id": "t", "score": None, "readings": {"bird_ex": 1}, "difficulty": "simple"}
    timed = {"steps_ratio": None, "base": "time", "time_ratio": 4.0, "time_kept": 99, "dev_time_ratio": 0.25}
    record = make_record({"id": 1, **sqlite_item, "efficiency": timed})
    assert record.efficiency is not None and record.efficiency.dev_time_ratio == 0.25
    assert "dev_time_ratio" not in json.dumps(make_record({"id": 2, **sqlite_item}).to_dict())  # only when set
    table = efficiency_table([Brief.of(record)])
    assert table is not None
    assert table["time"]["all"]["r_ves"] == pytest.approx(100 * math.sqrt(1.25))  # mini-dev: 4.0, bucket 1.25
    assert table["time"]["all"]["ves"] == pytest.approx(100 * math.sqrt(0.25))  # BIRD dev: 0.25


def test_resume_refuses_another_efficiency(tmp_path: Path) -> None:
    """The step ratio is a recorded reading: a resumed run never mixes records with and without it."""
    items, dbs = _items(tmp_path)
    _rose_run(items, dbs, tmp_path / "o", "--efficiency", "steps")
    args = ["run", str(items), "--db-root", str(dbs), "--out", str(tmp_path / "o"), "--workers", "1", "--resume"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0 and "option efficiency differs ('steps' then, 'off' now)" in result.output


# --------------------------------------------------------------------------- the passes run in the sandbox

RUNAWAY_AT = 20
"""The timed execution of the prediction that runs away (the run's own execution of it comes first)."""
PRED = (
    "SELECT v FROM t WHERE id = 3 AND (WITH RECURSIVE c(n) AS (SELECT random() UNION ALL SELECT n FROM c "
    f"WHERE n = {RUNAWAY_AT + 1}) SELECT count(*) FROM c) > 0"
)
"""A correct prediction whose cost depends on ``random()``, called once per execution: when it draws
``RUNAWAY_AT + 1``, its recursive CTE never ends."""


def _scripted_random(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every connection the sandbox opens in this process (and in the workers forked from it) gets a
    ``random()`` that counts its calls in the process: 1, 2, 3, ... So the run's execution of ``PRED``
    draws 1 and its timed executions 2, 3, ...: the ``RUNAWAY_AT``-th runs away."""
    from rose_sql.engines import sqlite as sqlite_engine
    from rose_sql.engines import workers as workers_module

    real = sqlite_engine.connect_read_only
    calls = [0]

    def draw() -> int:
        calls[0] += 1
        return calls[0]

    def scripted(path: Path, **kwargs: Any) -> sqlite3.Connection:
        conn = real(path, **kwargs)
        conn.create_function("random", 0, draw)
        return conn

    monkeypatch.setattr(sqlite_engine, "connect_read_only", scripted)
    monkeypatch.setattr(workers_module, "can_fork", lambda: True)  # the workers inherit the scripted random()


def test_a_prediction_that_runs_away_on_its_20th_timed_execution_ends_with_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timed pass runs in the worker's sandbox: its 20th execution of the prediction is stopped by the
    wall clock of one statement (``--timeout 1``), the pass stops there, and the record says where and why;
    the pass's ratio is 0, as the published script scores a pass that timed out (its reward 0, in the
    denominator); the item's other readings and its score stand."""
    _scripted_random(monkeypatch)
    (tmp_path / "dbs" / "t").mkdir(parents=True)
    _db(tmp_path / "dbs" / "t" / "t.sqlite", 100)
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": 1, "db_id": "t", "gold_sql": "SELECT v FROM t WHERE id = 3", "pred_sql": PRED}))
    started = time.monotonic()
    (record,), summary, _ = _rose_run(items, tmp_path / "dbs", tmp_path / "o", "--efficiency", "time", "--timeout", "1")
    seconds = time.monotonic() - started
    assert seconds < 30  # one statement's wall clock, not a pass that never ends (the guard: 1 s + 5 s)
    e = record.efficiency
    assert e is not None and (e.time_ratio, e.time_kept, e.steps_ratio) == (0.0, 0, None)
    assert e.time_reason == (
        f"iteration {RUNAWAY_AT} of 100, the prediction: stopped by the wall-time guard after 1 s (--timeout), "
        "before its step budget"
    )
    assert record.readings.bird_ex == 1 and record.pred.status == "ok"
    (plain,), _, _ = _rose_run(items, tmp_path / "dbs", tmp_path / "plain", "--timeout", "1")
    assert (record.readings, record.score, record.unscored_reason) == (
        plain.readings,
        plain.score,
        plain.unscored_reason,
    )
    assert record.to_dict()["efficiency"]["time_reason"] == e.time_reason
    assert "time_reason" in EXEMPT and "steps_reason" not in record.to_dict()["efficiency"]
    time_all = summary["efficiency"]["time"]["all"]
    assert (time_all["left_out"], time_all["n"], time_all["ves"], time_all["r_ves"]) == ({}, 1, 0.0, 0.0)


class _Recording(Watch):
    """A watch that records what it was armed with (and answers the statements ``poisoned`` names)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed: list[tuple[bytes, float]] = []

    def arm(self, key: bytes, seconds: float) -> None:
        self.armed.append((key, seconds))


ENDLESS = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT count(*) FROM c"


def test_the_timed_pass_is_bounded_as_a_whole_and_guarded_execution_by_execution(tmp_path: Path) -> None:
    """Each execution arms the worker's guard for at most what is left of the pass's bound (plus the
    guard's margin), and an execution still running at the bound is stopped there: the pass says so."""
    from rose_sql.config import GUARD_MARGIN_S

    db = Database.file(_db(tmp_path / "t.sqlite", 100))
    watch = _Recording()
    config = Config(timeout_s=60, efficiency_budget_s=0.3)
    with Executor(config, watch=watch) as ex:
        done = ex.time_pass(db, ("SELECT v FROM t WHERE id = 3", ENDLESS), 100)
    assert (done.times, done.at) == ((), (1, 1))
    assert done.error == "the timed pass ran past its bound of 0.3 s"
    assert len(watch.armed) == 2 and len({key for key, _ in watch.armed}) == 1  # one key: the pass's
    assert all(seconds <= 0.3 + GUARD_MARGIN_S for _, seconds in watch.armed)
    assert Config(timeout_s=2).time_pass_s(100) == 200  # by default: --timeout per iteration, as published
    with Executor(Config(max_steps=100_000), watch=Watch()) as ex:  # an execution's own step budget
        done = ex.time_pass(db, ("SELECT v FROM t WHERE id = 3", ENDLESS), 100)
    assert done.at == (1, 1) and done.error == "stopped after 100,000 steps (the --max-steps budget)"


def test_a_pass_its_guard_stopped_is_answered_never_run_again(tmp_path: Path) -> None:
    """The worker's guard stops a worker whose call SQLite cannot interrupt and sends its unit again with
    the statement's key poisoned: the timed pass, the count and the catalogue read are then answered with
    why, without running."""
    from rose_sql.engines.base import GUARD_STOPPED

    db = Database.file(_db(tmp_path / "t.sqlite", 10))
    watch = _Recording()
    statements = ("SELECT v FROM t WHERE id = 3", "SELECT v FROM t")
    with Executor(Config(), watch=watch) as ex:
        assert len(ex.time_pass(db, statements, 3).times) == 3
        assert ex.count_steps(db, statements[0]).steps is not None
        assert ex.catalogue(db) == (("t", ("id", "v")),)
    keys = [key for key, _ in watch.armed]
    assert len(set(keys)) == 3  # the pass, the count, the catalogue: each its own key
    watch.poisoned = frozenset(keys)
    watch.armed.clear()
    with Executor(Config(), watch=watch, confirm=False) as ex:
        assert ex.time_pass(db, statements, 3) == Timed((), GUARD_STOPPED, status="guard")
        assert ex.count_steps(db, statements[0]) == Counted(None, GUARD_STOPPED, "process", status="guard")
        assert ex.catalogue(db) is None
    assert watch.armed == []  # nothing ran
    with Executor(Config(), watch=watch) as ex:  # a count decides a reading: confirmed before it counts
        counted = ex.count_steps(db, statements[0])
    assert counted.steps is not None and counted.steps == vm_steps(db.path, statements[0], BOUND)
    assert watch.armed == []  # run again alone, in a process of its own: not under this worker's watch


def test_the_passes_use_the_sandbox_connection(tmp_path: Path) -> None:
    """What the sandbox refuses, the passes refuse: a write is not authorized there either."""
    db = Database.file(_db(tmp_path / "t.sqlite", 10))
    with Executor(Config(), watch=Watch()) as ex:
        counted = ex.count_steps(db, "DELETE FROM t")
        timed = ex.time_pass(db, ("DELETE FROM t",), 1)
    assert counted.steps is None and counted.error is not None and "not authorized" in counted.error
    assert timed.at == (1, 0) and timed.error is not None and "not authorized" in timed.error
    assert sqlite3.connect(db.path).execute("SELECT count(*) FROM t").fetchone() == (10,)


SPILLING_SORT = (
    "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c LIMIT 60000) "
    "SELECT printf('%0100d', n * 7919 % 60001) AS v FROM c ORDER BY v"
)
"""A 6 MB sort: past SQLite's default page cache (2 MB), so it writes its runs to a temporary file."""


def test_the_timed_pass_sorts_as_sqlite_does_by_default_its_temporary_files_held_to_the_disk_bound(
    tmp_path: Path,
) -> None:
    """The published script's connection keeps SQLite's temporary storage (files; in memory SQLite sorts
    another way, and a sort-heavy statement is timed longer). The timed pass does too, each temporary file
    held to ``engine_temp_bytes``: past it the statement stops as one past the memory limit, by the bound's
    proof, and the process's file-size limit is as it was after. Untimed, the statement sorts in memory."""
    import resource
    import signal

    db = Database.file(_db(tmp_path / "t.sqlite", 10))
    before = resource.getrlimit(resource.RLIMIT_FSIZE)
    with Executor(Config(engine_temp_bytes=2**20), watch=Watch()) as ex:
        assert ex.run(db, SPILLING_SORT).status == "ok"  # untimed: in memory, under the heap limit
        bounded = ex.time_pass(db, (SPILLING_SORT, "SELECT 1"), 3)
    assert (bounded.times, bounded.at, bounded.status) == ((), (1, 0), "timeout")
    assert bounded.error is not None and "disk I/O error" in bounded.error
    assert "a temporary file passed the bound on temporary disk (1,048,576 bytes" in bounded.error
    assert resource.getrlimit(resource.RLIMIT_FSIZE) == before
    assert signal.SIGXFSZ not in signal.sigpending()
    (tmp_path / "big").write_bytes(bytes(2 * 2**20))  # the bound is gone with the pass
    with Executor(Config(), watch=Watch()) as ex:  # 2 GiB by default: the sort runs, timed
        assert len(ex.time_pass(db, (SPILLING_SORT, "SELECT 1"), 3).times) == 3


RANDOM_PRED = (
    "SELECT v FROM t WHERE id = 3 AND (WITH RECURSIVE c(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM c "
    "WHERE abs(random()) % 500 <> 0) SELECT count(*) FROM c) >= 0"
)
"""A correct prediction whose work depends on ``random()``: a recursion of a random length (500 on average)."""


def test_a_prediction_whose_steps_depend_on_random_gives_one_step_ratio(tmp_path: Path) -> None:
    """Two identical step-based runs gave VES 44.8 and 160.1 for such a prediction: its steps were another
    count in each run. It is counted with random() drawn from a fixed seed, flagged, and two runs give the
    same step ratio, VES and R-VES; a prediction that calls no random() is counted as before."""
    (tmp_path / "dbs" / "t").mkdir(parents=True)
    _db(tmp_path / "dbs" / "t" / "t.sqlite", 100)
    items = tmp_path / "items.jsonl"
    rows = [
        {"id": "random", "db_id": "t", "gold_sql": "SELECT v FROM t WHERE id = 3", "pred_sql": RANDOM_PRED},
        {"id": "plain", "db_id": "t", "gold_sql": "SELECT v FROM t WHERE id = 3", "pred_sql": "SELECT 3"},
    ]
    items.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    runs = [_rose_run(items, tmp_path / "dbs", tmp_path / name, "--efficiency", "steps") for name in "ab"]
    (a, summary_a, _), (b, summary_b, _) = runs
    assert [comparable(r) for r in a] == [comparable(r) for r in b]
    assert summary_a["efficiency"] == summary_b["efficiency"]
    by_id = {r.id: r for r in a}
    random_a, plain = by_id["random"].efficiency, by_id["plain"].efficiency
    assert random_a is not None and random_a.steps_random is True and random_a.steps_ratio is not None
    assert plain is not None and plain.steps_random is None
    assert "steps_random" not in by_id["plain"].to_dict()["efficiency"]  # the layout as it always was
    with Executor(Config(), watch=Watch()) as ex:  # the seed, not the clock: the same count every time
        db = Database.file(tmp_path / "dbs" / "t" / "t.sqlite")
        counts = {ex.count_steps(db, RANDOM_PRED).steps for _ in range(3)}
    assert counts == {random_a.pred_steps}


def test_the_counting_pass_obeys_the_timeout_and_a_runaway_count_is_0(tmp_path: Path) -> None:
    """The exact count (a progress handler call per step) takes several times a statement's own time: it
    is stopped at --timeout, run again alone with the guard doubled, and a count that runs away again
    gives the item a step ratio of 0, with why (the published script scores a pass past its bound 0)."""
    db = Database.file(_db(tmp_path / "t.sqlite", 10))
    start = time.monotonic()
    with Executor(Config(timeout_s=0.5, max_steps=10**13), watch=Watch()) as ex:
        counted = ex.count_steps(db, ENDLESS)
        e = measure(ex, db, "SELECT v FROM t WHERE id = 3", ENDLESS, True, "steps")
    assert time.monotonic() - start < 60
    assert (counted.steps, counted.limit, counted.status) == (None, "wall", "timeout")
    assert counted.error is not None and counted.error.startswith("a runaway, stopped twice")
    assert e is not None and e.steps_ratio == 0.0 and e.gold_steps is not None and e.pred_steps is None
    assert e.steps_reason is not None and e.steps_reason.startswith("the prediction: a runaway")
