"""Hostile SQL against the PostgreSQL, MySQL/MariaDB and DuckDB sandboxes, each with its own attacks.

The SQLite suite's kinds (``tests/test_hostile.py``): ``write`` (a write or a side effect: rejected or an
error), ``bomb`` (stopped at the time limit: ``guard``, or rejected / an error), ``capped`` (cut by the
caps or the limit: any status, a bounded result), ``bounded`` (the engine's own bound may end it first:
any status, within the limit), ``inert`` (runs as the plain SELECT it is), ``secret`` (reads the server's
settings: refused, whatever the role; the pooled session's are read beside the sandbox). Every case
runs through the sandbox as the read-only role; around the whole set, on each engine: the tables'
checksums are unchanged, no file named by an attack exists on the server, no setting is left changed
(the server's, and the pooled session's), no advisory or named lock is held, every query returned
within its limit (plus a margin), and the whole set then goes through a real ``rose run``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from servers import hostile_fixture  # noqa: F401  (the hostile_on fixture)

from rose_sql.config import Config
from rose_sql.engines import Database, Source
from rose_sql.engines.execute import Executor

TIMEOUT_S = 1.0
MARGIN_S = 10.0
CONFIG = Config(timeout_s=TIMEOUT_S, max_rows=1000, max_result_bytes=4 * 2**20, workers=1)
EVIL = "/tmp/rose-evil"

COMMON = [
    ("insert", "INSERT INTO t (a, b) VALUES (99, 'evil')", "write"),
    ("update", "UPDATE t SET b = 'evil'", "write"),
    ("delete", "DELETE FROM t", "write"),
    ("drop", "DROP TABLE u", "write"),
    ("create", "CREATE TABLE evil (x INT)", "write"),
    ("two_statements", "SELECT 1; DROP TABLE t", "write"),
    ("into_table", "SELECT * INTO evil FROM t", "write"),
    ("for_update", "SELECT * FROM t FOR UPDATE", "write"),
    ("set", "SET autocommit = 1", "write"),
    ("begin", "BEGIN", "write"),
    ("commit", "COMMIT", "write"),
    ("plain", "SELECT a, b FROM t ORDER BY a", "inert"),
    ("like_percent", "SELECT b FROM t WHERE b LIKE '%x%'", "inert"),
    ("comment_with_drop", "SELECT 1 -- ; DROP TABLE t", "inert"),
    ("string_with_drop", "SELECT 'DROP TABLE t; DELETE FROM u'", "inert"),
]
ENGINE_CASES: dict[str, list[tuple[str, str, str]]] = {
    "postgresql": [
        ("advisory_lock", "SELECT pg_advisory_lock(42)", "write"),
        ("advisory_lock_qualified", "SELECT pg_catalog.pg_advisory_lock(42)", "write"),
        ("advisory_lock_quoted", 'SELECT "pg_advisory_lock"(42)', "write"),
        ("advisory_try", "SELECT pg_try_advisory_lock(42)", "write"),
        ("set_config", "SELECT set_config('statement_timeout', '0', false)", "write"),
        ("set_config_search_path", "SELECT set_config('search_path', 'evil', false)", "write"),
        ("nextval", "SELECT nextval('rose_evil_seq')", "write"),
        ("lo_export", f"SELECT lo_export(lo_from_bytea(0, 'x'), '{EVIL}-lo')", "write"),
        ("lo_create", "SELECT lo_create(0)", "write"),
        ("read_file", "SELECT pg_read_file('/etc/passwd')", "write"),
        ("ls_dir", "SELECT pg_ls_dir('.')", "write"),
        ("sleep", "SELECT pg_sleep(1000)", "write"),
        ("terminate", "SELECT pg_terminate_backend(pg_backend_pid())", "write"),
        ("notify", "SELECT pg_notify('rose', 'x')", "write"),
        ("query_to_xml", "SELECT query_to_xml('SELECT pg_advisory_lock(42)', true, true, '')", "write"),
        ("dblink", "SELECT dblink('dbname=postgres', 'CREATE TABLE evil (x int)')", "write"),
        ("stat_reset", "SELECT pg_stat_reset()", "write"),
        ("reload_conf", "SELECT pg_reload_conf()", "write"),
        ("data_modifying_cte", "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", "write"),
        ("copy_to_file", f"COPY t TO '{EVIL}-copy'", "write"),
        ("copy_to_program", f"COPY t TO PROGRAM 'touch {EVIL}-program'", "write"),
        ("do_block", "DO $$ BEGIN CREATE TABLE evil (x int); END $$", "write"),
        ("prepare", "PREPARE p AS SELECT 1", "write"),
        ("listen", "LISTEN rose", "write"),
        ("lock_table", "LOCK TABLE t", "write"),
        ("dollar_quoted_semicolon", "SELECT $$;DROP TABLE t;$$", "inert"),
        ("unbounded_count", "SELECT count(*) FROM generate_series(1, 100000000000)", "bomb"),
        ("cross_join", "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b", "bomb"),
        (
            "recursive_forever",
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c",
            "bomb",
        ),
        ("million_rows", "SELECT * FROM generate_series(1, 1000000)", "capped"),
        ("huge_values", "SELECT repeat('x', 50000000) FROM generate_series(1, 20)", "capped"),
        ("settings_read", "SELECT current_setting('default_transaction_read_only')", "secret"),
    ],
    "mysql": [
        ("get_lock", "SELECT GET_LOCK('rose', 0)", "write"),
        ("user_variable", "SELECT @rose := 1", "write"),
        ("into_variable", "SELECT 1 INTO @rose", "write"),
        ("into_outfile", f"SELECT * FROM t INTO OUTFILE '{EVIL}-outfile'", "write"),
        ("into_dumpfile", f"SELECT b FROM t LIMIT 1 INTO DUMPFILE '{EVIL}-dumpfile'", "write"),
        ("executable_comment", f"SELECT 1 /*!50000 INTO OUTFILE '{EVIL}-comment' */", "write"),
        ("mariadb_executable_comment", "SELECT 1 /*M! , GET_LOCK('rose', 0) */", "write"),
        ("load_file", "SELECT LOAD_FILE('/etc/passwd')", "write"),
        ("sleep", "SELECT SLEEP(1000)", "write"),
        ("benchmark", "SELECT BENCHMARK(100000000000, MD5('x'))", "write"),
        ("last_insert_id", "SELECT LAST_INSERT_ID(42)", "write"),
        ("nextval", "SELECT NEXTVAL(rose_evil_seq)", "write"),
        ("share_mode", "SELECT * FROM t LOCK IN SHARE MODE", "write"),
        ("set_statement", "SET STATEMENT max_statement_time = 0 FOR SELECT 1", "write"),
        ("handler", "HANDLER t OPEN", "write"),
        ("lock_tables", "LOCK TABLES t READ", "write"),
        ("load_data", f"LOAD DATA INFILE '{EVIL}' INTO TABLE t", "write"),
        ("hash_comment", "SELECT 1 # ; DROP TABLE t", "inert"),
        (
            "cross_join",
            "SELECT count(*) FROM t a, t b, t c, t d, t e, t f, t g, t h, t i, t j, t k, t l, t m, t n, t o, t p, "
            "t q, t r, t s, t v, t w, t x, t y",
            "bomb",
        ),
        (
            "recursive_forever",
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000000) SELECT max(x) FROM c",
            "bounded",
        ),
        (
            "million_rows",
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000) SELECT x FROM c",
            "capped",
        ),
        ("settings_read", "SELECT @@max_statement_time, @@sql_mode", "secret"),
    ],
    "duckdb": [
        ("read_csv", "SELECT * FROM read_csv('/etc/passwd')", "write"),
        ("read_text", "SELECT * FROM read_text('/etc/passwd')", "write"),
        ("glob", "SELECT * FROM glob('/etc/*')", "write"),
        ("query_function", "SELECT * FROM query('DROP TABLE t')", "write"),
        ("getenv", "SELECT getenv('HOME')", "write"),
        ("setseed", "SELECT setseed(0.5)", "write"),
        ("nextval", "SELECT nextval('rose_evil_seq')", "write"),
        ("copy_to", f"COPY t TO '{EVIL}-duckdb.csv'", "write"),
        ("attach", f"ATTACH '{EVIL}-attach.db'", "write"),
        ("install", "INSTALL httpfs", "write"),
        ("load", "LOAD httpfs", "write"),
        ("set_threads", "SET threads = 4", "write"),
        ("pragma", "PRAGMA threads = 4", "write"),
        ("checkpoint", "CHECKPOINT", "write"),
        ("unbounded_count", "SELECT count(*) FROM range(100000000000)", "bomb"),
        ("million_rows", "SELECT * FROM range(1000000)", "capped"),
        ("huge_values", "SELECT repeat('x', 50000000) FROM range(20)", "capped"),
        ("struct_and_list", "SELECT list(a), {'x': 1} FROM t", "inert"),
        ("settings_read", "SELECT current_setting('threads')", "secret"),
    ],
}
STATUSES = {
    "write": {"rejected", "error"},
    "bomb": {"guard", "rejected", "error"},
    "capped": {"ok", "guard", "error", "timeout"},  # timeout: stopped at the worker memory bound
    "inert": {"ok"},
    "secret": {"rejected"},  # the server's settings, files, credentials, other sessions: refused to every role
    "bounded": {"ok", "guard", "error"},
}


def _checksums(kind: str, admin: str) -> dict[str, Any]:
    """What must not change: every table's contents (a DuckDB file's bytes), and the server's settings."""
    if kind == "duckdb":
        path = Path(Source.parse(admin).locate("x").target)
        sides = sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name))
        return {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "files": sides}
    if kind == "postgresql":
        import psycopg

        with psycopg.connect(admin, autocommit=True) as c:
            tables = {
                t: c.execute(
                    f"SELECT md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM {t} x"
                ).fetchone()
                for t in ("t", "u")
            }
            settings = c.execute("SELECT name, setting FROM pg_settings ORDER BY name").fetchall()
            locks = c.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()
            names = c.execute("SELECT count(*) FROM pg_class WHERE relname LIKE 'evil%'").fetchone()
        return {"tables": tables, "settings": settings, "advisory_locks": locks, "evil_tables": names}
    import pymysql

    from rose_sql.engines.mysql import connect_args

    with pymysql.connect(**connect_args(admin)) as c, c.cursor() as cur:
        cur.execute("CHECKSUM TABLE t, u EXTENDED")
        tables = cur.fetchall()
        cur.execute("SHOW GLOBAL VARIABLES")
        settings = [r for r in cur.fetchall() if r[0] not in ("gtid_binlog_pos", "gtid_current_pos")]
        cur.execute("SELECT IS_USED_LOCK('rose')")
        lock = cur.fetchone()
        cur.execute("SHOW TABLES LIKE 'evil%'")
        evil = cur.fetchall()
    return {"tables": tables, "settings": settings, "lock": lock, "evil_tables": evil}


def _session(ex: Executor, db: Database) -> Any:
    """The pooled session's own settings, as a statement sees them."""
    probe = {
        "postgresql": "SELECT current_setting('statement_timeout'), current_setting('default_transaction_read_only'), "
        "current_setting('max_parallel_workers_per_gather'), current_setting('search_path'), current_user",
        "mysql": "SELECT @@max_statement_time, @@sql_mode, @@autocommit, @@tx_read_only, @rose, CURRENT_USER()",
        "duckdb": "SELECT current_setting('threads'), current_setting('enable_external_access'), "
        "current_setting('lock_configuration')",
    }[db.kind]
    conn: Any = ex.engine(db.kind).conn(db, "pred").conn  # type: ignore[attr-defined]
    # on the pooled connection itself: the policy refuses these reads of settings to every statement
    if db.kind == "mysql":
        with conn.cursor() as cur:
            cur.execute(probe)
            return tuple(cur.fetchall())
    return tuple(tuple(r) for r in conn.execute(probe).fetchall())


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["postgresql", "mysql", "duckdb"])
def test_hostile_sql_on_each_engine(
    kind: str, hostile_on: Callable[[str], tuple[str, str, Path]], tmp_path: Path
) -> None:
    admin, reader, _ = hostile_on(kind)
    for old in Path("/tmp").glob("rose-evil*"):
        old.unlink()
    before = _checksums(kind, admin)
    source = Source.parse(reader)
    db = source.locate("rose_test_hostile")
    cases = COMMON + ENGINE_CASES[kind]
    failures = []
    with Executor(CONFIG) as ex:
        session = _session(ex, db)
        for name, sql, expect in cases:
            start = time.monotonic()
            e = ex.run(db, sql)
            took = time.monotonic() - start
            if e.status not in STATUSES[expect]:
                failures.append(f"{name}: {e.status} ({e.error}), expected {sorted(STATUSES[expect])}")
            if took > TIMEOUT_S + MARGIN_S:
                failures.append(f"{name}: took {took:.1f} s")
            if e.result is not None:
                assert len(e.result.rows) <= CONFIG.max_rows
            if expect == "capped" and e.ok:
                assert e.result is not None and e.result.truncated, name
        assert _session(ex, db) == session, "a statement changed the pooled session"
    assert not failures, "\n".join(failures)
    assert _checksums(kind, admin) == before
    assert not list(Path("/tmp").glob("rose-evil*")), "a file was written"
    if kind == "duckdb":
        assert session[0][:2] == (1, False)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["postgresql", "mysql", "duckdb"])
def test_the_hostile_set_through_rose_run(
    kind: str, hostile_on: Callable[[str], tuple[str, str, Path]], tmp_path: Path
) -> None:
    admin, reader, _ = hostile_on(kind)
    before = _checksums(kind, admin)
    cases = COMMON + ENGINE_CASES[kind]
    items = tmp_path / "hostile.jsonl"
    rows = [{"id": n, "db_id": "rose_test_hostile", "gold_sql": "SELECT a FROM t", "pred_sql": s} for n, s, _ in cases]
    items.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rose_sql", "run", str(items), "--db", reader, "--out", str(out)]
    done = subprocess.run(
        [*cmd, "--timeout", str(TIMEOUT_S), "--workers", "2"], capture_output=True, text=True, timeout=600
    )
    records = [json.loads(line) for line in (out / "hostile" / "records.jsonl").read_text().splitlines()]
    guarded = sum(r["unscored_reason"] == "wall_guard" for r in records)  # under load, a time limit may fire
    assert done.returncode == (3 if guarded else 0), done.stderr
    assert not guarded or f"({guarded} wall_guard)" in done.stderr
    assert len(records) == len(cases)
    assert all(r["gold"]["status"] == "ok" for r in records)
    assert _checksums(kind, admin) == before
    assert not list(Path("/tmp").glob("rose-evil*"))
