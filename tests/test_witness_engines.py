"""The witness search on DuckDB (an in-memory copy) and on PostgreSQL and MariaDB (a scratch database
that rose creates and drops): it finds the witness the SQLite search finds on the same data, leaves the
user's database as it was, drops its scratch database, and without ``--evidence-scratch`` says why it did
not search. Tests that need a server skip, naming it, when it cannot be reached."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from servers import MYSQL_ADMIN, PG_ADMIN, SUPERHERO, hostile_fixture, need, superhero_fixture  # noqa: F401

from rose_sql.cli.main import main
from rose_sql.comparison.comparator import compare
from rose_sql.config import Config
from rose_sql.engines import Database, Source
from rose_sql.engines.execute import Executor
from rose_sql.evidence import Evidence
from rose_sql.evidence.finder import Finder
from rose_sql.sql import has_top_level_order_by

MARVEL = (
    "FROM superhero AS T1 JOIN publisher AS T2 ON T1.publisher_id = T2.id WHERE T2.publisher_name = 'Marvel Comics'"
)
GOLD = f"SELECT COUNT(*) {MARVEL}"
PRED = f"SELECT COUNT(T1.gender_id) {MARVEL}"
"""Equal today (no Marvel hero lacks a gender) by coincidence: a NULL gender_id tells them apart."""
SCRATCH = {"postgresql": PG_ADMIN, "mysql": MYSQL_ADMIN}


def gather(db: Any, config: Config) -> Evidence:
    with Executor(config) as ex:
        g, p = ex.run(db, GOLD), ex.run(db, PRED)
    assert g.result is not None and p.result is not None, (g.error, p.error)
    cmp = compare(p.result, g.result, ordered=has_top_level_order_by(GOLD))
    assert cmp.equal is True
    finder = Finder(config)
    try:
        return finder.gather(db, GOLD, PRED, g, p, cmp)
    finally:
        finder.close()


def checksums(kind: str, admin: str) -> dict[str, Any]:
    """Every table of the user's database (a DuckDB file's bytes)."""
    if kind == "duckdb":
        path = Path(Source.parse(admin).locate("superhero").target)
        return {"sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    if kind == "postgresql":
        import psycopg

        with psycopg.connect(admin, autocommit=True) as c:
            names = [r[0] for r in c.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()]
            return {
                t: c.execute(
                    f"SELECT md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM \"{t}\" x"
                ).fetchone()
                for t in sorted(names)
            }
    import pymysql

    from rose_sql.engines.mysql import connect_args

    c = pymysql.connect(**connect_args(admin))
    try:
        with c.cursor() as cur:
            cur.execute("SHOW TABLES")
            names = sorted(r[0] for r in cur.fetchall())
            out = {}
            for t in names:
                cur.execute(f"CHECKSUM TABLE `{t}` EXTENDED")
                out[t] = cur.fetchone()
            return out
    finally:
        c.close()


def scratch_databases(kind: str) -> list[str]:
    from rose_sql.engines.spaces.scratch import leftovers

    return leftovers(SCRATCH[kind])


@pytest.fixture(scope="module")
def sqlite_witness() -> Evidence:
    if not SUPERHERO.is_file():
        pytest.skip(f"shared data not found at {SUPERHERO}")
    ev = gather(Database.file(SUPERHERO), Config(workers=1))
    assert ev.witness is not None
    return ev


@pytest.mark.parametrize("kind", ["duckdb", "postgresql", "mysql"])
def test_the_witness_search_finds_on_each_engine_what_it_finds_on_sqlite(
    kind: str, superhero_on: Callable[[str], tuple[str, str]], sqlite_witness: Evidence
) -> None:
    admin, reader = superhero_on(kind)
    before = checksums(kind, admin)
    left_before = scratch_databases(kind) if kind != "duckdb" else []
    source = Source.parse(reader)
    config = Config(workers=1, evidence_scratch=SCRATCH.get(kind))
    ev = gather(source.locate("superhero"), config)
    assert ev.skipped is None and ev.guard is None, (ev.skipped, ev.guard)
    w, lite = ev.witness, sqlite_witness.witness
    assert w is not None and lite is not None
    assert w.kind == lite.kind == "null"
    change, lite_change = w.changes[0], lite.changes[0]
    assert (
        (change.op, change.table.lower(), change.column, change.new)
        == (
            lite_change.op,
            lite_change.table,
            lite_change.column,
            lite_change.new,
        )
        == ("update", "superhero", "gender_id", None)
    )
    assert (w.gold_result.rows, w.pred_result.rows) == (lite.gold_result.rows, lite.pred_result.rows)
    assert ev.search is not None and ev.search.stopped == "found"
    assert checksums(kind, admin) == before  # the user's database is as it was
    if kind != "duckdb":
        assert scratch_databases(kind) == left_before  # the scratch database is gone


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_without_a_scratch_url_the_reason_is_recorded(
    kind: str, superhero_on: Callable[[str], tuple[str, str]]
) -> None:
    source = Source.parse(superhero_on(kind)[1])
    ev = gather(source.locate("superhero"), Config(workers=1))
    assert ev.witness is None and ev.search is None
    assert ev.skipped is not None and "--evidence-scratch" in ev.skipped and kind in ev.skipped


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_rose_run_drops_its_scratch_database(
    kind: str, superhero_on: Callable[[str], tuple[str, str]], tmp_path: Path
) -> None:
    admin, reader = superhero_on(kind)
    before, left_before = checksums(kind, admin), scratch_databases(kind)
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": 1, "db_id": "superhero", "gold_sql": GOLD, "pred_sql": PRED}) + "\n")
    out = tmp_path / "out"
    args = ["run", str(items), "--db", reader, "--out", str(out), "--workers", "1", "--evidence"]
    result = CliRunner().invoke(main, [*args, "--evidence-scratch", SCRATCH[kind]])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "items" / "records.jsonl").read_text())
    assert record["evidence"]["witness"]["kind"] == "null", record["evidence"]
    assert scratch_databases(kind) == left_before
    assert checksums(kind, admin) == before


def test_a_database_too_large_to_copy_is_skipped_with_its_reason(
    superhero_on: Callable[[str], tuple[str, str]],
) -> None:
    source = Source.parse(superhero_on("duckdb")[1])
    ev = gather(source.locate("superhero"), Config(workers=1, evidence_max_db_bytes=1000))
    assert ev.witness is None and ev.skipped is not None and "larger than" in ev.skipped
    pg = Source.parse(superhero_on("postgresql")[1])
    left = scratch_databases("postgresql")
    ev = gather(pg.locate("superhero"), Config(workers=1, evidence_max_db_bytes=1000, evidence_scratch=PG_ADMIN))
    assert ev.witness is None and ev.skipped is not None and "more than 0 MiB" in ev.skipped
    assert scratch_databases("postgresql") == left


def test_a_scratch_database_left_by_a_dead_process_is_dropped(superhero_on: Callable[[str], tuple[str, str]]) -> None:
    from rose_sql.engines.spaces.scratch import PREFIX, host_tag, server

    superhero_on("postgresql")
    dead = f"{PREFIX}{host_tag()}_999999999_deadbeef"
    server(PG_ADMIN).create(dead)
    assert dead in scratch_databases("postgresql")
    result = CliRunner().invoke(main, ["db", "scratch", PG_ADMIN, "--drop"])
    assert result.exit_code == 0, result.output
    assert dead in result.output and dead not in scratch_databases("postgresql")


def test_a_search_stopped_by_the_wall_clock_is_a_guard_never_a_finding(
    superhero_on: Callable[[str], tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from rose_sql.engines.spaces.shared import EngineSpace

    start = EngineSpace.start
    monkeypatch.setattr(EngineSpace, "start", lambda self, deadline: start(self, time.monotonic() - 1))
    source = Source.parse(superhero_on("duckdb")[1])
    ev = gather(source.locate("superhero"), Config(workers=1))
    assert ev.witness is None and ev.search is not None and ev.search.stopped == "budget"
    assert ev.guard is not None and "wall-time guard" in ev.guard


def test_the_manifest_says_whether_a_scratch_server_searched_never_its_url(
    superhero_on: Callable[[str], tuple[str, str]],
) -> None:
    from rose_sql.provenance import _databases

    source = Source.parse(superhero_on("postgresql")[1])
    without = _databases(source, ["superhero"], Config(workers=1))["options"]
    scratch = Config(workers=1, evidence_scratch="postgresql://u:secret@h/p")
    with_ = _databases(source, ["superhero"], scratch)["options"]
    assert "evidence_scratch" not in without and with_["evidence_scratch"] is True  # older manifests still resume
    assert "secret" not in json.dumps(with_)


ATTACKS = {
    "duckdb": ["SELECT * FROM read_csv('/etc/passwd')", "SELECT setseed(0.1)", "SELECT * FROM query('SELECT 1')"],
    "postgresql": [
        "SELECT pg_advisory_lock(1)",
        "SELECT set_config('work_mem', '1MB', false)",
        "WITH x AS (DELETE FROM superhero RETURNING 1) SELECT count(*) FROM x",
        "SELECT pg_read_file('/etc/passwd')",
    ],
    "mysql": ["SELECT GET_LOCK('rose', 0)", "SELECT SLEEP(5)", "SELECT 1 INTO OUTFILE '/tmp/rose-witness-x'"],
}


@pytest.mark.parametrize("kind", ["duckdb", "postgresql", "mysql"])
def test_the_copy_runs_queries_under_the_engines_sandbox_rules(
    kind: str, superhero_on: Callable[[str], tuple[str, str]]
) -> None:
    from rose_sql.engines.spaces import open_space

    source = Source.parse(superhero_on(kind)[1])
    space = open_space(source.locate("superhero"), Config(workers=1, evidence_scratch=SCRATCH.get(kind)))
    assert not isinstance(space, str), space
    try:
        space.start(0, float("inf"))
        copy = space.copy(["superhero"])
        assert not isinstance(copy, str), copy
        for attack in ATTACKS[kind]:
            assert copy.run(attack) is None, attack
            assert space.run(attack) is None, attack  # the user's database, read through the engine
        count = copy.run("SELECT COUNT(*) FROM superhero")
        assert count is not None and count.rows == ((750,),)
        assert not copy.guard_fired
    finally:
        space.close()
    assert not Path("/tmp/rose-witness-x").exists()


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_a_candidates_first_query_reads_the_copy_with_its_changes(
    kind: str, hostile_on: Callable[[str], tuple[str, str, Path]]
) -> None:
    """A query under test is checked by the engine's policy the first time the copy is asked it, and the
    policy reads the server's catalogue of functions: read inside a candidate's transaction, that ended it
    on PostgreSQL, so the first candidate of whichever item came first was tried on the copy without its
    changes (an item found alone another witness than after an item before it). Something that ends a
    candidate's transaction is an error, never a candidate tried on the copy as it was."""
    from rose_sql.engines.spaces import open_space
    from rose_sql.engines.spaces.shared import EngineSpace

    source = Source.parse(hostile_on(kind)[1])
    space = open_space(source.locate("rose_test_hostile"), Config(workers=1, evidence_scratch=SCRATCH[kind]))
    assert not isinstance(space, str), space
    try:
        space.start(0, float("inf"))
        copy = space.copy(["t"])
        assert isinstance(copy, EngineSpace), copy
        copy.begin()
        try:
            copy.insert_copy("t", copy.sample_rowids("t", 1)[0])
            count = copy.run("SELECT COUNT(*) FROM t")  # never asked before: the policy checks it now
            assert count is not None and count.rows == ((4,),)
        finally:
            copy.rollback()
        count = copy.run("SELECT COUNT(*) FROM t")
        assert count is not None and count.rows == ((3,),)
        copy.begin()
        copy._execute("ROLLBACK", timeout=10)  # something ends the candidate's transaction
        with pytest.raises(RuntimeError, match="transaction ended"):
            copy.run("SELECT COUNT(b) FROM t")
        copy.rollback()
    finally:
        space.close()


@pytest.mark.servers
@pytest.mark.slow
def test_the_policys_catalogue_read_leaves_the_callers_transaction_open() -> None:
    """``read_functions`` inside a transaction of the caller's reads in it and leaves it open (what it
    changed stays); one it opened itself (a connection without autocommit) it rolls back."""
    need("postgresql")
    import psycopg

    from rose_sql.engines.postgres import read_functions

    idle, in_transaction = psycopg.pq.TransactionStatus.IDLE, psycopg.pq.TransactionStatus.INTRANS
    with psycopg.connect(PG_ADMIN, autocommit=True) as c:
        c.execute("BEGIN")
        c.execute("CREATE TEMPORARY TABLE rose_kept (a int) ON COMMIT DROP")
        assert read_functions(c).names
        assert c.info.transaction_status == in_transaction
        assert c.execute("SELECT COUNT(*) FROM rose_kept").fetchone() == (0,)  # the transaction's table is there
        c.execute("ROLLBACK")
    with psycopg.connect(PG_ADMIN) as c:
        read_functions(c)
        assert c.info.transaction_status == idle


def test_a_scratch_connection_lost_is_recorded_and_the_next_item_gets_a_new_copy(
    superhero_on: Callable[[str], tuple[str, str]],
) -> None:
    import psycopg

    source = Source.parse(superhero_on("postgresql")[1])
    db = source.locate("superhero")
    config = Config(workers=1, evidence_scratch=PG_ADMIN)
    left = scratch_databases("postgresql")
    with Executor(config) as ex:
        g, p = ex.run(db, GOLD), ex.run(db, PRED)
    assert g.result is not None and p.result is not None
    cmp = compare(p.result, g.result, ordered=False)
    finder = Finder(config)
    try:
        assert finder.gather(db, GOLD, PRED, g, p, cmp).witness is not None
        with psycopg.connect(PG_ADMIN, autocommit=True) as c:  # the server drops the scratch session
            c.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'rose-sql-scratch'"
            )
        lost = finder.gather(db, GOLD, PRED, g, p, cmp)
        assert lost.witness is None and lost.skipped is not None
        assert "the copy was lost" in lost.skipped or "the evidence search failed" in lost.skipped
        again = finder.gather(db, GOLD, PRED, g, p, cmp)
        assert again.witness is not None and again.skipped is None
    finally:
        finder.close()
    assert scratch_databases("postgresql") == left


def test_the_witness_search_on_a_small_duckdb_copy_finds_what_it_finds_on_sqlite(league: Path, tmp_path: Path) -> None:
    """DuckDB's witness space without a server or the shared data (the inner loop's): COUNT(*) and COUNT(age)
    agree on the league's players, and on the DuckDB copy as on the SQLite file a NULL age tells them apart."""
    pytest.importorskip("duckdb", reason="DuckDB is not installed: pip install 'rose-sql[duckdb]'")
    from rose_sql.engines.admin.copy import copy_sqlite

    sqlite_file = league / "league" / "league.sqlite"
    source = Source.parse(f"duckdb://{tmp_path / 'league.duckdb'}")
    copy_sqlite(sqlite_file, source, "league")
    before = hashlib.sha256(Path(source.locate("league").target).read_bytes()).hexdigest()
    found = {}
    for name, db in (("sqlite", Database.file(sqlite_file)), ("duckdb", source.locate("league"))):
        config = Config(workers=1)
        gold, pred = "SELECT COUNT(*) FROM player", "SELECT COUNT(age) FROM player"
        with Executor(config) as ex:
            g, p = ex.run(db, gold), ex.run(db, pred)
        assert g.result is not None and p.result is not None, (g.error, p.error)
        cmp = compare(p.result, g.result, ordered=False)
        assert cmp.equal is True
        finder = Finder(config)
        try:
            found[name] = finder.gather(db, gold, pred, g, p, cmp)
        finally:
            finder.close()
    for name, ev in found.items():
        w = ev.witness
        assert ev.skipped is None and ev.guard is None and w is not None, (name, ev.skipped, ev.guard)
        change = w.changes[0]
        assert (w.kind, change.op, change.table.lower(), change.column, change.new) == (
            "null",
            "update",
            "player",
            "age",
            None,
        ), name
    assert found["duckdb"].witness.gold_result.rows == found["sqlite"].witness.gold_result.rows  # type: ignore[union-attr]
    assert found["duckdb"].witness.pred_result.rows == found["sqlite"].witness.pred_result.rows  # type: ignore[union-attr]
    assert hashlib.sha256(Path(source.locate("league").target).read_bytes()).hexdigest() == before  # untouched
