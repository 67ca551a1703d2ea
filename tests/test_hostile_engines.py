"""Hostile SQL against the PostgreSQL, MySQL/MariaDB and DuckDB sandboxes, each with its own attacks.

The SQLite suite's kinds (``tests/test_hostile.py``): ``write`` (a write or a side effect: rejected or an
error), ``bomb`` (stopped at the time limit twice, the second time alone with it doubled: a confirmed
runaway, ``timeout``; or rejected / an error), ``capped`` (cut by the
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

_CASES = json.loads((Path(__file__).parent / "cases" / "hostile_engines.json").read_text(encoding="utf-8"))
"""The attacks, in tests/cases/hostile_engines.json: those of every engine, and each engine's own; ``{evil}``
in a case is a path on the server that must never exist."""
COMMON = [(c["id"], c["sql"].replace("{evil}", EVIL), c["kind"]) for c in _CASES["common"]]
ENGINE_CASES: dict[str, list[tuple[str, str, str]]] = {
    kind: [(c["id"], c["sql"].replace("{evil}", EVIL), c["kind"]) for c in cases]
    for kind, cases in _CASES.items()
    if kind != "common"
}
STATUSES = {
    "write": {"rejected", "error"},
    "bomb": {"timeout", "rejected", "error"},  # timeout: stopped by the time limit twice, a confirmed runaway
    "capped": {"ok", "error", "timeout"},  # timeout: stopped at the worker memory bound, or a runaway
    "inert": {"ok"},
    "secret": {"rejected"},  # the server's settings, files, credentials, other sessions: refused to every role
    "bounded": {"ok", "timeout", "error"},
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
    guarded = sum(r["unscored_reason"] == "wall_guard" for r in records)
    assert done.returncode == 0 and guarded == 0, done.stderr  # a runaway is confirmed and scored, never left out
    assert len(records) == len(cases)
    assert all(r["gold"]["status"] == "ok" for r in records)
    assert _checksums(kind, admin) == before
    assert not list(Path("/tmp").glob("rose-evil*"))
