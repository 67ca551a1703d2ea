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
from typing import Any

import pytest
from conftest import build_db, rose, write_items
from servers import ENGINES, HOSTILE_DB, hostile_fixture  # noqa: F401  (the hostile_on fixture)

from rose_sql.config import Config
from rose_sql.engines import Database, Source
from rose_sql.engines.base import known_batch
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
    """What the clock holds is what the published script's driver sends and reads: on PostgreSQL nothing
    before the clock, then ``BEGIN`` with the cursor's declaration in one round trip and every row in the
    next (psycopg2's ``BEGIN`` and statement); on MySQL/MariaDB and DuckDB the transaction opened before
    the clock (PyMySQL sends none). A result seen before is read in one batch (one row more than it held,
    so the batch ends it, as the published script's one read does) and kept nowhere."""
    import psycopg
    import pymysql.cursors

    import rose_sql.engines.base as base
    import rose_sql.engines.postgres as postgres

    db = _db(kind, hostile_on)
    sql = "SELECT a, b FROM t ORDER BY a"
    events: list[object] = []
    with Executor(Config(), watch=Watch()) as ex:
        engine = ex.engine(db.kind)
        before = ex.run(db, sql)
        real_begin, real_clock = engine._begin, time.perf_counter  # type: ignore[attr-defined]
        real_pipelined, real_stream = postgres._pipelined, psycopg.Cursor.stream
        real_fetchmany, real_statement = pymysql.cursors.SSCursor.fetchmany, engine._statement  # type: ignore[attr-defined]

        def begin(c: object) -> None:
            events.append("begin")
            real_begin(c)

        def pipelined(c: object, *statements: str) -> object:
            events.append(statements)
            return real_pipelined(c, *statements)  # type: ignore[arg-type]

        def stream(self: object, query: str, *args: object, size: int = 1, **kw: object) -> object:
            rows = list(real_stream(self, query, *args, size=size, **kw))  # type: ignore[arg-type]
            events.append(("stream", query, size, rows))
            return iter(rows)

        def fetchmany(self: object, size: int | None = None) -> object:
            rows = real_fetchmany(self, size)  # type: ignore[arg-type]
            events.append(("fetchmany", size, tuple(rows)))
            return rows

        def statement(c: object, text: str, until: float, **options: object) -> object:
            got = real_statement(c, text, until, **options)
            events.append((options, got[0].rows))
            return got

        def clock() -> float:
            events.append("clock")
            return real_clock()

        monkeypatch.setattr(engine, "_begin", begin)
        monkeypatch.setattr(engine, "_statement", statement)
        monkeypatch.setattr(postgres, "_pipelined", pipelined)
        monkeypatch.setattr(psycopg.Cursor, "stream", stream)
        monkeypatch.setattr(pymysql.cursors.SSCursor, "fetchmany", fetchmany)
        monkeypatch.setattr(base.time, "perf_counter", clock)
        timed = ex.time_pass(db, (sql,), 1)
        monkeypatch.undo()
    assert before.result is not None and len(before.result.rows) == 3
    assert timed.error is None and len(timed.times) == 1
    rows = len(before.result.rows) + 1  # one more than it held: the batch ends the result
    read = {
        "postgresql": [
            ("BEGIN READ ONLY", f"DECLARE {postgres.CURSOR} NO SCROLL CURSOR FOR {sql}"),
            ("stream", f"FETCH FORWARD ALL FROM {postgres.CURSOR}", rows, [(1, "x"), (2, "y"), (3, "z")]),
        ],
        "mysql": [("fetchmany", rows, ((1, "x"), (2, "y"), (3, "z")))],
        "duckdb": [({"begun": True, "rows": rows}, before.result.rows)],
    }[kind]
    assert events == ["begin", "clock", *read, "clock"]


@pytest.mark.parametrize("kind", ("postgresql", "mysql", "sqlite"))
def test_the_timed_execution_reads_a_result_past_the_caps_to_its_end(
    kind: str,
    hostile_on: Callable[[str], tuple[str, str, Path]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The row cap bounds what a reading keeps, not what the timed pass reads: the published script reads a
    result of any size, so a prediction past the cap is timed over every row, read in batches no larger
    than the batch bound at its widest kept row and kept nowhere (the rows counted here as the driver
    hands them over)."""
    import psycopg
    import pymysql.cursors

    if kind == "sqlite":
        db = Source.parse(str(build_db(tmp_path / "h" / "h.sqlite", HOSTILE_DB).parent.parent)).locate("h")
    else:
        db = _db(kind, hostile_on)
    big = "SELECT x.a, y.b FROM t x, t y, t z, t w"  # 81 rows
    handed: list[int] = []
    with Executor(Config(max_rows=5), watch=Watch()) as ex:
        engine = ex.engine(db.kind)
        before = ex.run(db, big)
        assert before.result is not None and before.result.truncated and before.result.row_count == 81
        real_stream, real_fetchmany = psycopg.Cursor.stream, pymysql.cursors.SSCursor.fetchmany
        real_drain = engine._drain  # type: ignore[attr-defined]

        def stream(self: object, query: str, *args: object, size: int = 1, **kw: object) -> object:
            for row in real_stream(self, query, *args, size=size, **kw):  # type: ignore[arg-type]
                handed.append(size)
                yield row

        def fetchmany(self: object, size: int | None = None) -> object:
            rows = real_fetchmany(self, size)  # type: ignore[arg-type]
            handed.extend([size or 0] * len(rows))
            return rows

        def drain(c: Any, sql: str, until: float, rows: int | None) -> None:
            def counted(_cursor: object, row: tuple[object, ...]) -> tuple[object, ...]:
                handed.append(rows or 0)
                return row

            if kind == "sqlite":  # the C cursor's fetchmany cannot be wrapped: its row factory can
                c.conn.row_factory = counted
            real_drain(c, sql, until, rows)

        monkeypatch.setattr(psycopg.Cursor, "stream", stream)
        monkeypatch.setattr(pymysql.cursors.SSCursor, "fetchmany", fetchmany)
        monkeypatch.setattr(engine, "_drain", drain)
        timed = ex.time_pass(db, (big,), 3)
        monkeypatch.undo()
    assert timed.error is None and len(timed.times) == 3
    assert len(handed) == 3 * 81  # every row, three times
    assert set(handed) == {known_batch(before.result, Config().limits)} and 81 < handed[0] <= 5_000


def test_before_libpq_17_the_timed_execution_fetches_the_result_in_batches_to_its_end(
    hostile_on: Callable[[str], tuple[str, str, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A libpq without chunked rows (before 17; psycopg's binary wheel brings 18) reads the declared cursor
    with ``FETCH`` in batches of the same size, to the end, keeping none."""
    import psycopg

    db = _db("postgresql", hostile_on)
    big = "SELECT x.a, y.b FROM t x, t y, t z, t w"  # 81 rows
    fetched: list[tuple[str, int]] = []
    with Executor(Config(max_rows=5), watch=Watch()) as ex:
        before = ex.run(db, big)
        assert before.result is not None and before.result.truncated
        real_execute, real_fetchall = psycopg.Connection.execute, psycopg.Cursor.fetchall
        sent: list[str] = []

        def execute(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
            sent.append(query if isinstance(query, str) else "")
            return real_execute(self, query, *args, **kw)

        def fetchall(self: Any) -> Any:
            rows = real_fetchall(self)
            if sent and sent[-1].startswith("FETCH"):
                fetched.append((sent[-1], len(rows)))
            return rows

        monkeypatch.setattr(psycopg.pq, "version", lambda: 160000)
        monkeypatch.setattr(psycopg.Connection, "execute", execute)
        monkeypatch.setattr(psycopg.Cursor, "fetchall", fetchall)
        monkeypatch.setattr(psycopg.Cursor, "stream", None)  # not reached before libpq 17
        timed = ex.time_pass(db, (big,), 2)
        monkeypatch.undo()
    size = known_batch(before.result, Config().limits)
    assert timed.error is None and len(timed.times) == 2
    assert fetched == [(f"FETCH FORWARD {size} FROM rose_query", 81)] * 2


def test_a_known_result_is_fetched_at_once_within_the_batch_bound() -> None:
    from rose_sql.results import ResultSet

    limits = Config().limits
    small = ResultSet(("a",), ((1,), (2,), (3,)), 3)
    assert known_batch(small, limits) == 4
    assert known_batch(None, limits) is None
    past = ResultSet(("a",), ((1,),), 5, truncated=True)
    assert known_batch(past, limits) == 5_000  # past the caps: the batch bound at the widest row kept
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
