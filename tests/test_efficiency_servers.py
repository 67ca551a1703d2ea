"""BIRD's wall-time efficiency pass on PostgreSQL, MySQL/MariaDB and DuckDB, as on SQLite
(``tests/test_efficiency.py``): each execution timed on a sandbox connection of the engine's own, opened
before the clock starts; a correct prediction gets a ratio, and a runaway or a failing prediction stops the
pass with its reason, within the pass's bound (measured here, with the clock).

Small tables (the hostile-SQL database, three rows), few iterations where the API takes a number."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import rose, write_items
from servers import ENGINES, hostile_fixture  # noqa: F401  (the hostile_on fixture)

from rose_sql.config import Config
from rose_sql.engines import Database, Source
from rose_sql.engines.execute import Executor
from rose_sql.engines.workers import Watch
from rose_sql.readings.efficiency import TIME_ITERATIONS, measure, timed_ratios

GOLD = "SELECT b FROM t WHERE a = 1"
PRED = "SELECT b FROM t WHERE a + 0 = 1"
"""A correct prediction: the same row, found by a scan instead of the key."""
RUNAWAY = (
    "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000) "
    "SELECT count(*) FROM c a, c b, c d, c e"
)
"""10^12 rows counted: no engine ends it within minutes (MariaDB's recursion stops at 1,000 by default, so
the recursion itself stays finite everywhere)."""
NAMES = {"postgresql": "PostgreSQL", "mysql": "MySQL", "duckdb": "DuckDB"}
SLACK_S = 3.0
"""How much later than its bound a stopped pass may end on a loaded machine (a connection closed, a cancel
request sent)."""


def _db(kind: str, hostile_on: Callable[[str], tuple[str, str, Path]]) -> Database:
    _, reader, _ = hostile_on(kind)
    return Source.parse(reader).locate("rose_test_hostile")


@pytest.mark.parametrize("kind", ENGINES)
def test_a_correct_prediction_gets_a_time_ratio_and_its_kept_count(
    kind: str, hostile_on: Callable[[str], tuple[str, str, Path]]
) -> None:
    """The pass runs on the server: five timed iterations give five ratios, and the published 100 give a
    ratio and the number the 3-sigma rule kept; the step base stays SQLite's (null here)."""
    db = _db(kind, hostile_on)
    with Executor(Config(), watch=Watch()) as ex:
        ratios, why, ours = timed_ratios(ex, db, GOLD, PRED, 5)
        e = measure(ex, db, GOLD, PRED, True, "both")
        wrong = measure(ex, db, GOLD, "SELECT b FROM t WHERE a = 2", False, "time")
    assert ratios is not None and len(ratios) == 5 and all(r > 0 for r in ratios) and (why, ours) == (None, False)
    assert e is not None and e.steps_ratio is None and e.time_reason is None
    assert e.time_ratio is not None and e.time_ratio > 0
    assert e.time_kept is not None and 0 < e.time_kept <= TIME_ITERATIONS
    assert wrong is not None and (wrong.time_ratio, wrong.time_kept) == (0.0, 0)  # incorrect: 0, as published


@pytest.mark.parametrize("kind", ENGINES)
def test_a_runaway_prediction_stops_the_pass_at_its_bound_with_why(
    kind: str, hostile_on: Callable[[str], tuple[str, str, Path]]
) -> None:
    """A prediction that runs away in the pass is stopped there: at the pass's own bound when it comes first
    (the engine's limit far away), at the engine's time limit (``--timeout``) otherwise; either way its
    ratio is 0, as the published script scores a pass past its bound, and the record says where and why.
    The time each took is measured."""
    db = _db(kind, hostile_on)
    for config, want in (
        (Config(timeout_s=60, efficiency_budget_s=1.0), "the timed pass ran past its bound of 1 s"),
        (Config(timeout_s=1), f"stopped by the {NAMES[kind]} time limit after 1 s (--timeout)"),
    ):
        with Executor(config, watch=Watch()) as ex:
            started = time.monotonic()
            e = measure(ex, db, GOLD, RUNAWAY, True, "time")
            seconds = time.monotonic() - started
        assert e is not None and (e.time_ratio, e.time_kept) == (0.0, 0)
        assert e.time_reason == f"iteration 1 of {TIME_ITERATIONS}, the prediction: {want}"
        assert 1.0 <= seconds < 1.0 + SLACK_S, seconds  # stopped at its bound, not by the worker's guard
        with Executor(config, watch=Watch()) as ex:  # the server is free again: the statement was stopped there
            assert ex.run(db, GOLD).ok


@pytest.mark.parametrize("kind", ENGINES)
def test_a_failing_or_refused_prediction_stops_the_pass_with_the_engines_reason(
    kind: str, hostile_on: Callable[[str], tuple[str, str, Path]]
) -> None:
    """What the sandbox refuses or the engine fails, the pass stops at: where, and the engine's message."""
    db = _db(kind, hostile_on)
    with Executor(Config(), watch=Watch()) as ex:
        failing = ex.time_pass(db, (GOLD, "SELECT nope FROM t"), 3)
        refused = ex.time_pass(db, ("DELETE FROM t",), 3)
        e = measure(ex, db, GOLD, "SELECT nope FROM t", True, "time")
    assert (failing.at, failing.status, len(failing.times)) == ((1, 1), "error", 0)
    assert failing.error is not None and "nope" in failing.error
    assert (refused.at, refused.status) == ((1, 0), "rejected")
    assert e is not None and (e.time_ratio, e.time_kept) == (0.0, 0)
    assert e.time_reason is not None and e.time_reason.startswith(f"iteration 1 of {TIME_ITERATIONS}, the prediction: ")
    with Executor(Config(), watch=Watch()) as ex:
        assert ex.run(db, "SELECT count(*) FROM t").result.rows == ((3,),)  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ENGINES)
def test_rose_run_shows_wall_time_r_ves_on_the_server(
    kind: str, hostile_on: Callable[[str], tuple[str, str, Path]], tmp_path: Path
) -> None:
    """``rose run --efficiency both`` on a server: the records carry the time ratio, the summary's time base
    counts every item (the step base leaves them out as not_sqlite), and the terminal says the figure is
    machine- and load-dependent, as on SQLite."""
    _, reader, _ = hostile_on(kind)
    rows = [
        {"id": "same", "db_id": "rose_test_hostile", "difficulty": "simple", "gold_sql": GOLD, "pred_sql": PRED},
        {"id": "wrong", "db_id": "rose_test_hostile", "difficulty": "moderate", "gold_sql": GOLD,
         "pred_sql": "SELECT b FROM t WHERE a = 2"},
    ]  # fmt: skip
    items = write_items(tmp_path / "items.jsonl", rows)
    out = rose("run", items, "--db", reader, "--out", tmp_path / "o", "--workers", "1", "--efficiency", "both")
    summary = json.loads((tmp_path / "o" / "items" / "summary.json").read_text(encoding="utf-8"))
    records = {
        r["id"]: r
        for r in map(json.loads, (tmp_path / "o" / "items" / "records.jsonl").read_text(encoding="utf-8").splitlines())
    }
    same, wrong = records["same"]["efficiency"], records["wrong"]["efficiency"]
    assert same["time_ratio"] > 0 and 0 < same["time_kept"] <= TIME_ITERATIONS and same["steps_ratio"] is None
    assert (wrong["time_ratio"], wrong["time_kept"]) == (0.0, 0)
    table = summary["efficiency"]
    assert table["time"]["all"]["n"] == 2 and table["time"]["all"]["left_out"] == {}
    assert table["time"]["moderate"]["r_ves"] == 0.0
    assert table["steps"]["all"]["left_out"] == {"not_sqlite": 2}
    assert "R-VES (mini-dev) by wall time x100, machine- and load-dependent: all " in out.output


@pytest.mark.parametrize("kind", ENGINES)
def test_the_timed_execution_runs_what_the_published_script_times(
    kind: str, hostile_on: Callable[[str], tuple[str, str, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its transaction is opened as the published script's driver opens one: before the clock starts where
    its statement opens none (PyMySQL, DuckDB), after it in a round trip of its own where the driver sends
    BEGIN first (psycopg2); and a result the statement returned before is fetched in one batch (the
    published script reads it in one round trip), with the same rows as any run of it."""
    import rose_sql.engines.base as base

    db = _db(kind, hostile_on)
    sql = "SELECT a, b FROM t ORDER BY a"
    events: list[object] = []
    with Executor(Config(), watch=Watch()) as ex:
        engine = ex.engine(db.kind)
        before = ex.run(db, sql)
        real_begin, real_statement, real_clock = engine._begin, engine._statement, time.perf_counter  # type: ignore[attr-defined]

        def begin(c: object) -> None:
            events.append("begin")
            real_begin(c)

        def statement(c: object, text: str, until: float, **options: object) -> object:
            got = real_statement(c, text, until, **options)
            events.append((options, got[0].rows))
            return got

        def clock() -> float:
            events.append("clock")
            return real_clock()

        monkeypatch.setattr(engine, "_begin", begin)
        monkeypatch.setattr(engine, "_statement", statement)
        monkeypatch.setattr(base.time, "perf_counter", clock)
        timed = ex.time_pass(db, (sql,), 1)
        monkeypatch.undo()
    assert before.result is not None and len(before.result.rows) == 3
    assert timed.error is None and len(timed.times) == 1
    rows = len(before.result.rows) + 1  # one more than it held: the batch ends the result
    opened = ["clock", "begin"] if engine.begin_timed else ["begin", "clock"]  # PostgreSQL: as psycopg2 does
    assert events == [*opened, ({"begun": True, "rows": rows}, before.result.rows), "clock"]
    assert engine.begin_timed == (kind == "postgresql")


def test_a_known_result_is_fetched_at_once_within_the_batch_bound() -> None:
    from rose_sql.engines.base import known_batch
    from rose_sql.results import ResultSet

    limits = Config().limits
    small = ResultSet(("a",), ((1,), (2,), (3,)), 3)
    assert known_batch(small, limits) == 4
    assert known_batch(None, limits) is None
    assert known_batch(ResultSet(("a",), ((1,),), 5, truncated=True), limits) is None
    wide = ResultSet(("a",), tuple(("x" * (limits.max_bytes // 16),) for _ in range(3)), 3)
    assert known_batch(wide, limits) == 3  # a quarter of the byte cap at the widest row: not the 4 asked
    many = ResultSet(("a",), tuple((i,) for i in range(9_000)), 9_000)
    assert known_batch(many, limits) == 5_000


def test_mysql_times_on_a_connection_opened_with_the_drivers_own_tls_default(
    hostile_on: Callable[[str], tuple[str, str, Path]],
) -> None:
    """The published script connects with PyMySQL's defaults (TLS preferred: a context prepared, used where
    the server offers TLS); the timed pass's connection is opened so too, every other one without TLS
    unless the URL asks for it (preparing a context costs tens of milliseconds)."""
    db = _db("mysql", hostile_on)
    with Executor(Config(), watch=Watch()) as ex:
        engine = ex.engine(db.kind)
        timed, plain = engine._connect_timed(db), engine._connect(db)  # type: ignore[attr-defined]
        try:
            assert timed.conn.ssl is True and plain.conn.ssl is False
        finally:
            timed.conn.close()
            plain.conn.close()
