"""The execution sandbox on real SQLite databases: results, errors, caps, timeouts, cache, threads."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import peak_rss_growth

from rose_sql.config import Config
from rose_sql.engines import Database
from rose_sql.engines.execute import Executor, run_query
from rose_sql.engines.sqlite import db_key
from rose_sql.engines.workers import Watch
from rose_sql.results import Execution, ResultSet

SCRIPT = """
CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, score REAL);
INSERT INTO t VALUES (1, 'a', 1.5), (2, 'b', NULL), (3, 'c', 3.0);
"""
COUNT_FOREVER = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
ROWS_FOREVER = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c"
HANG_GUARD_S = 10.0  # only catches a hang; not a performance assertion


def rows_to(n: int, select: str = "x") -> str:
    return f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n}) SELECT {select} FROM c"


def result(e: Execution) -> ResultSet:
    assert e.status == "ok" and e.result is not None, (e.status, e.error)
    return e.result


# --------------------------------------------------------------------------- results and errors


def test_ok_result_has_columns_rows_and_count(make_db: Callable[..., Path]) -> None:
    db = make_db(SCRIPT)
    r = result(run_query(Database.file(db), "SELECT id, name AS n, score FROM t ORDER BY id DESC"))
    assert r.columns == ("id", "n", "score")
    assert r.rows == ((3, "c", 3.0), (2, "b", None), (1, "a", 1.5))
    assert (r.row_count, r.truncated, r.count_exact, r.decode_errors) == (3, False, True, False)


def test_empty_result_keeps_columns(make_db: Callable[..., Path]) -> None:
    r = result(run_query(Database.file(make_db(SCRIPT)), "SELECT id, name FROM t WHERE id > 99"))
    assert (r.columns, r.rows, r.row_count, r.truncated) == (("id", "name"), (), 0, False)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT nope FROM t", "no such column: nope"),
        ("SELECT 1 +", "incomplete input"),
        ("SELECT abs(1, 2)", "wrong number of arguments to function abs()"),
    ],
)
def test_bad_sql_is_an_error_with_sqlites_message(make_db: Callable[..., Path], sql: str, message: str) -> None:
    e = run_query(Database.file(make_db(SCRIPT)), sql)
    assert e.status == "error" and not e.ok and e.result is None
    assert e.error is not None and message in e.error


def test_a_table_that_does_not_exist_is_missing(make_db: Callable[..., Path]) -> None:
    """The outcome contract: a relation the statement reads that is not there is ``missing`` (the item is
    ``db_missing`` when the gold meets it), not the statement's own error."""
    e = run_query(Database.file(make_db(SCRIPT)), "SELECT * FROM missing")
    assert e.status == "missing" and e.result is None
    assert e.error is not None and "no such table: missing" in e.error


def test_missing_or_broken_database_is_unreadable_not_an_exception(tmp_path: Path) -> None:
    with Executor() as ex:
        missing = ex.run(Database.file(tmp_path / "nope.sqlite"), "SELECT 1")
        assert missing.status == "unreadable" and "cannot be read" in (missing.error or "")
        junk = tmp_path / "junk.sqlite"
        junk.write_bytes(b"this is not a database" * 100)
        broken = ex.run(Database.file(junk), "SELECT 1 FROM sqlite_master")
        assert broken.status == "unreadable" and "not a database" in (broken.error or "")
        fine = tmp_path / "fine.sqlite"
        sqlite3.connect(fine).execute("CREATE TABLE t (a)").connection.close()
        assert (
            ex.run(Database.file(fine), "SELECT nope FROM t").status == "error"
        )  # the query's own failure stays an error
    assert not (tmp_path / "nope.sqlite").exists()


# --------------------------------------------------------------------------- caps


def test_row_cap_truncates_and_counts_every_row(make_db: Callable[..., Path]) -> None:
    r = result(run_query(Database.file(make_db(SCRIPT)), rows_to(25), Config(max_rows=10)))
    assert r.rows == tuple((i,) for i in range(1, 11))
    assert (r.row_count, r.truncated, r.count_exact) == (25, True, True)


def test_exactly_max_rows_is_not_truncated(make_db: Callable[..., Path]) -> None:
    r = result(run_query(Database.file(make_db(SCRIPT)), rows_to(10), Config(max_rows=10)))
    assert (len(r.rows), r.row_count, r.truncated) == (10, 10, False)


def test_counting_past_the_cap_stops_at_its_step_budget(make_db: Callable[..., Path]) -> None:
    start = time.monotonic()
    cfg = Config(max_rows=10, count_past_cap_steps=3_000_000, timeout_s=60)
    e = run_query(Database.file(make_db(SCRIPT)), ROWS_FOREVER, cfg)
    elapsed = time.monotonic() - start
    r = result(e)
    assert len(r.rows) == 10 and r.truncated and not r.count_exact and r.row_count > 10
    assert elapsed < HANG_GUARD_S
    again = result(run_query(Database.file(make_db(SCRIPT, db_id="u")), ROWS_FOREVER, cfg))
    assert again.row_count == r.row_count  # counted by steps: the same lower bound every time


def test_byte_cap_keeps_no_more_than_max_result_bytes(make_db: Callable[..., Path]) -> None:
    cfg = Config(max_result_bytes=10_000)
    r = result(run_query(Database.file(make_db(SCRIPT)), rows_to(100, "x, printf('%.1000c', 'x')"), cfg))
    assert r.truncated and r.count_exact and r.row_count == 100
    assert 1 <= len(r.rows) < 10
    assert sum(len(row[1]) for row in r.rows) <= cfg.max_result_bytes
    assert [row[0] for row in r.rows] == list(range(1, len(r.rows) + 1))


@pytest.mark.slow
def test_huge_rows_are_not_fetched_in_a_batch(make_db: Callable[..., Path]) -> None:
    """3000 rows of 250 kB (near the value limit): only about max_result_bytes (64 MB) may be held, never a
    batch of gigabytes."""
    db = make_db(SCRIPT)
    with Executor(watch=Watch()) as ex, peak_rss_growth() as growth:
        r = result(ex.run(Database.file(db), rows_to(3000, "zeroblob(250000)")))
        assert r.truncated and r.count_exact and r.row_count == 3000
        assert len(r.rows) * 250_000 <= ex.config.max_result_bytes
        del r
    assert growth[0] < 500, f"peak RSS grew by {growth[0]} MB"


# --------------------------------------------------------------------------- timeouts


def test_the_step_budget_stops_a_query_inside_sqlite_deterministically(make_db: Callable[..., Path]) -> None:
    db = make_db(SCRIPT)
    with Executor(Config(max_steps=20_000_000, timeout_s=60)) as ex:
        start = time.monotonic()
        e = ex.run(Database.file(db), COUNT_FOREVER)
        elapsed = time.monotonic() - start
        assert e.status == "timeout" and e.result is None and e.limit == "steps"
        assert "stopped after 20,000,000 steps (the --max-steps budget)" in (e.error or "")
        assert elapsed < HANG_GUARD_S
        # the connection is usable again, with a fresh budget
        assert result(ex.run(Database.file(db), "SELECT count(*) FROM t")).rows == ((3,),)
    # the same budget allows the same work on every run: a query just under it always completes
    counted = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000) SELECT count(*) FROM c"
    assert all(run_query(Database.file(db), counted, Config(max_steps=20_000_000)).ok for _ in range(3))


def test_a_wall_guard_stop_counts_only_once_confirmed(make_db: Callable[..., Path]) -> None:
    """A query still running at the wall-clock guard is stopped, then run again alone in a fresh process
    with the guard doubled: stopped again, it is a runaway, the statement's own (a timeout whose limit is
    the wall clock: a prediction scores 0). Without confirmation it stays a guard (never a score)."""
    db = make_db(SCRIPT)
    start = time.monotonic()
    e = run_query(Database.file(db), COUNT_FOREVER, Config(timeout_s=0.5))
    assert (e.status, e.limit, e.rerun) == ("timeout", "wall", None)
    assert e.error is not None and e.error.startswith("a runaway, stopped twice: ")
    assert "wall-time guard after 0.5 s" in e.error
    assert "guard doubled, stopped by the wall-time guard after 1 s" in e.error
    assert time.monotonic() - start < HANG_GUARD_S
    with Executor(Config(timeout_s=0.5), watch=Watch(), confirm=False) as ex:
        e = ex.run(Database.file(db), COUNT_FOREVER)
    assert e.status == "guard" and e.limit == "wall" and "wall-time guard after 0.5 s" in (e.error or "")


def test_a_stop_the_second_run_does_not_repeat_is_recorded_as_the_second_run(make_db: Callable[..., Path]) -> None:
    """A statement whose first run the worker's guard stopped (its key poisoned, as the pool sends the unit
    again) runs again alone: it finishes this time, so it is recorded as that run ended, with why it ran
    twice kept apart (``rerun``, in record.EXEMPT)."""
    from rose_sql.engines.base import GUARD_STOPPED
    from rose_sql.engines.workers import statement_key

    db = Database.file(make_db(SCRIPT))
    sql = "SELECT count(*) FROM t"
    watch = Watch()
    watch.poisoned = frozenset({statement_key(str(db.path.resolve()), sql)})
    with Executor(Config(), watch=watch) as ex:
        e = ex.run(db, sql)
        assert result(e).rows == ((3,),) and e.rerun == GUARD_STOPPED
        assert ex.run(db, sql).cached  # the second run's outcome is the statement's: kept like any other


def test_step_budget_while_rows_stream(make_db: Callable[..., Path]) -> None:
    """A query that returns rows slowly is stopped between rows too."""
    slow_rows = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c WHERE x % 50000000 = 0"
    start = time.monotonic()
    e = run_query(Database.file(make_db(SCRIPT)), slow_rows, Config(max_steps=30_000_000))
    assert e.status == "timeout"
    assert time.monotonic() - start < HANG_GUARD_S


# --------------------------------------------------------------------------- cache


def test_same_db_and_sql_run_once(make_db: Callable[..., Path]) -> None:
    db = make_db(SCRIPT)
    with Executor() as ex:
        first = ex.run(Database.file(db), "SELECT name FROM t ORDER BY id")
        second = ex.run(Database.file(db), "SELECT name FROM t ORDER BY id", role="gold")
        assert ex.executed == 1
        assert not first.cached and second.cached and second.result == first.result
        ex.run(Database.file(db), "SELECT name FROM t ORDER BY id DESC")
        assert ex.executed == 2


def test_a_db_modified_in_place_is_not_served_stale(make_db: Callable[..., Path]) -> None:
    db = make_db(SCRIPT)
    with Executor() as ex:
        assert result(ex.run(Database.file(db), "SELECT count(*) FROM t")).rows == ((3,),)
        before = db_key(db)
        with sqlite3.connect(db) as conn:
            conn.execute("INSERT INTO t VALUES (4, 'd', 4.0)")
        conn.close()
        assert db_key(db) != before  # precondition: the file's identity changed
        assert result(ex.run(Database.file(db), "SELECT count(*) FROM t")).rows == ((4,),)
        assert ex.executed == 2


def test_a_replaced_db_is_not_served_stale(make_db: Callable[..., Path]) -> None:
    """A rebuilt file is a new inode: a connection kept open on the old one would read old data."""
    db = make_db(SCRIPT)
    with Executor() as ex:
        assert result(ex.run(Database.file(db), "SELECT name FROM t WHERE id = 1")).rows == (("a",),)
        os.unlink(db)
        make_db(SCRIPT.replace("'a'", "'z'"))
        assert result(ex.run(Database.file(db), "SELECT name FROM t WHERE id = 1")).rows == (("z",),)


def test_concurrent_identical_requests_run_once(make_db: Callable[..., Path]) -> None:
    db = make_db(SCRIPT)
    sql = rows_to(400_000, "count(*)").replace("SELECT count(*) FROM c", "SELECT count(*) FROM c")
    sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 400000) SELECT count(*) FROM c"
    n = 8
    barrier = threading.Barrier(n)
    out: list[Execution] = []
    lock = threading.Lock()
    with Executor(watch=Watch()) as ex:

        def worker() -> None:
            barrier.wait()
            e = ex.run(Database.file(db), sql)
            with lock:
                out.append(e)

        threads = [threading.Thread(target=worker) for _ in range(n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(HANG_GUARD_S)
        assert len(out) == n
        assert ex.executed == 1
        assert sum(not e.cached for e in out) == 1
        assert {result(e).rows for e in out} == {((400_000,),)}


# --------------------------------------------------------------------------- text, roles, files


def test_invalid_utf8_text_is_decoded_with_a_flag(make_db: Callable[..., Path]) -> None:
    db = make_db("CREATE TABLE s (id INTEGER, v TEXT); INSERT INTO s VALUES (1, CAST(x'61ff62' AS TEXT)), (2, 'ok');")
    with Executor() as ex:
        bad = result(ex.run(Database.file(db), "SELECT v FROM s ORDER BY id"))
        assert bad.rows == (("ab",), ("ok",)) and bad.decode_errors
        clean = result(
            ex.run(Database.file(db), "SELECT v FROM s WHERE id = 2")
        )  # same connection: the flag is per query
        assert clean.rows == (("ok",),) and not clean.decode_errors
        later = result(ex.run(Database.file(db), "SELECT v, id FROM s ORDER BY id DESC"))  # found after a good row
        assert later.rows == (("ok", 2), ("ab", 1)) and later.decode_errors
        capped = result(Executor(Config(max_rows=1)).run(Database.file(db), "SELECT v FROM s ORDER BY id DESC"))
        assert capped.rows == (("ok",),) and capped.row_count == 2 and capped.truncated  # counted past the cap


def test_gold_and_pred_use_different_connections(make_db: Callable[..., Path]) -> None:
    db = make_db(SCRIPT)
    with Executor(watch=Watch()) as ex:
        assert result(ex.run(Database.file(db), "SELECT 1", role="gold")).rows == ((1,),)
        assert result(ex.run(Database.file(db), "SELECT 2", role="pred")).rows == ((2,),)
        engine = ex.engine("sqlite")
        conns = engine._local.conns  # type: ignore[attr-defined]
        gold, pred = conns[(db_key(db)[0], "gold")], conns[(db_key(db)[0], "pred")]
        assert gold.conn is not pred.conn
        assert len(engine._all) == 2  # type: ignore[attr-defined]


def test_open_connections_per_thread_are_bounded(make_db: Callable[..., Path]) -> None:
    dbs = [make_db(SCRIPT, db_id=f"d{i}") for i in range(40)]
    with Executor(watch=Watch()) as ex:
        for db in dbs:
            assert result(ex.run(Database.file(db), "SELECT count(*) FROM t")).rows == ((3,),)
        assert len(ex.engine("sqlite")._all) <= 16  # type: ignore[attr-defined]


def test_executor_reopens_connections_after_close(make_db: Callable[..., Path]) -> None:
    db = make_db(SCRIPT)
    ex = Executor(watch=Watch())
    assert result(ex.run(Database.file(db), "SELECT 1")).rows == ((1,),)
    ex.close()
    assert result(ex.run(Database.file(db), "SELECT 2")).rows == ((2,),)
    ex.close()


def test_wal_database_gets_no_side_files(make_db: Callable[..., Path]) -> None:
    db = make_db("PRAGMA journal_mode = wal;" + SCRIPT)
    assert db.read_bytes()[18:20] == b"\x02\x02"  # precondition: a WAL-mode database
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name]
    before = db.read_bytes()
    with Executor() as ex:
        assert result(ex.run(Database.file(db), "SELECT count(*) FROM t")).rows == ((3,),)
        assert result(ex.run(Database.file(db), "SELECT name FROM t ORDER BY id", role="gold")).rows == (
            ("a",),
            ("b",),
            ("c",),
        )
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name]
    assert db.read_bytes() == before
