"""One set of cases run on SQLite, DuckDB, PostgreSQL and MariaDB: every engine maps its failures into the
one outcome contract, and agrees on the results, or the case says where and why it differs.

The cases are data (``tests/cases/conformance.json``). Each engine's database is built here with that
engine's own DDL and types (not with ``rose db copy``, whose ``utf8mb4_bin`` would hide MySQL's
case-insensitive default collation): SQLite and DuckDB as files, PostgreSQL and MariaDB as one shared
database read by a role that can read it and nothing else (and not its ``secret`` table). A case added
to the file runs on all four. Servers that cannot be reached skip, naming themselves (CI has them).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from servers import MYSQL_ADMIN, PG_ADMIN, need, with_database

from rose_sql.config import Config
from rose_sql.engines import CONTRACT, Source
from rose_sql.engines.execute import Executor
from rose_sql.items.load import Item
from rose_sql.record import Record
from rose_sql.run.evaluate import evaluate_item

DATA = json.loads((Path(__file__).parent / "cases" / "conformance.json").read_text())
CASES: list[dict[str, Any]] = DATA["cases"]
ENGINES = ("sqlite", "duckdb", "postgresql", "mysql")
DATABASE = "rose_conformance"
READER = "rose_conformance_reader"
RESTRICTED = "rose_conformance_some"
"""A MySQL user granted SELECT on some tables only (MySQL cannot revoke one table of a database-wide grant)."""
DB_ID = "league"
NOT_A_CASE = {"process": "a worker stopped by the wall-time guard: tests/test_bounds.py (it needs a worker process)"}
"""Rows of the contract no conformance case can reach, and where they are tested."""


@dataclass(frozen=True)
class Built:
    """An engine's conformance database: where it is, one that does not exist, one that cannot be read, and
    the database read by a role granted some of its tables only (on the servers)."""

    shared: Source
    absent: Source
    unreadable: Source
    restricted: Source


# --------------------------------------------------------------------------- native DDL


TYPES = {
    "sqlite": {},
    "duckdb": {"VARCHAR(40)": "VARCHAR"},
    "postgresql": {},
    "mysql": {},
}
"""The neutral column types in each engine's own spelling (a type not listed is written as it is)."""


def create_table(kind: str, table: dict[str, Any], quote: Callable[[str], str]) -> str:
    cols = [
        f"{quote(name)} {TYPES[kind].get(ty, ty)}{' NOT NULL' if notnull else ''}"
        for name, ty, notnull in table["columns"]
    ]
    cols.append(f"PRIMARY KEY ({', '.join(quote(c) for c in table['primary_key'])})")
    for col, parent, ref in table.get("foreign_keys", []):
        cols.append(f"FOREIGN KEY ({quote(col)}) REFERENCES {quote(parent)} ({quote(ref)})")
    return f"CREATE TABLE {quote(table['name'])} ({', '.join(cols)})"


def _double(name: str) -> str:
    return '"' + name + '"'


def _backtick(name: str) -> str:
    return "`" + name + "`"


def build_sqlite(tmp: Path) -> Built:
    folder = tmp / "sqlite"
    path = folder / DB_ID / f"{DB_ID}.sqlite"
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    for t in DATA["database"]["tables"]:
        conn.execute(create_table("sqlite", t, _double))
        marks = ", ".join("?" * len(t["columns"]))
        conn.executemany(f"INSERT INTO {_double(t['name'])} VALUES ({marks})", [tuple(r) for r in t["rows"]])
    conn.commit()
    conn.close()
    junk = tmp / "sqlite-junk"
    (junk / DB_ID).mkdir(parents=True)
    (junk / DB_ID / f"{DB_ID}.sqlite").write_bytes(b"not a database " * 1000)
    return Built(Source.folder(folder), Source.folder(tmp / "nowhere"), Source.folder(junk), Source.folder(folder))


def build_duckdb(tmp: Path) -> Built:
    duckdb = pytest.importorskip("duckdb", reason="DuckDB is not installed: pip install 'rose-sql[duckdb]'")
    tmp.mkdir(parents=True)
    path = tmp / "conformance.duckdb"
    conn = duckdb.connect(str(path))
    for t in DATA["database"]["tables"]:
        conn.execute(create_table("duckdb", t, _double))
        marks = ", ".join("?" * len(t["columns"]))
        conn.executemany(f"INSERT INTO {_double(t['name'])} VALUES ({marks})", [list(r) for r in t["rows"]])
    conn.close()
    junk = tmp / "junk.duckdb"
    junk.write_bytes(b"not a database " * 1000)
    shared = Source.parse(f"duckdb://{path}")
    return Built(
        shared, Source.parse(f"duckdb://{tmp / 'nowhere'}/{{db_id}}.duckdb"), Source.parse(f"duckdb://{junk}"), shared
    )


def build_postgresql(tmp: Path) -> Built:
    need("postgresql")
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DATABASE}")
        if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (READER,)).fetchone():
            admin.execute(f"CREATE ROLE {READER} LOGIN")
    url = with_database(PG_ADMIN, DATABASE)
    with psycopg.connect(url, autocommit=True) as conn:
        for t in DATA["database"]["tables"]:
            conn.execute(create_table("postgresql", t, _double))
            marks = ", ".join(["%s"] * len(t["columns"]))
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {_double(t['name'])} VALUES ({marks})", [tuple(r) for r in t["rows"]])
            if not t.get("reader_may_not_read"):
                conn.execute(f"GRANT SELECT ON {_double(t['name'])} TO {READER}")
    reader = Source.parse(with_database(PG_ADMIN, DATABASE, READER))
    return Built(
        reader,
        Source.parse(with_database(PG_ADMIN, "{db_id}", READER)),
        Source.parse(with_database(PG_ADMIN, DATABASE, "rose_no_such_user")),
        reader,  # the reader is granted every table but secret
    )


def build_mysql(tmp: Path) -> Built:
    need("mysql")
    import pymysql

    from rose_sql.engines.mysql import connect_args

    args = connect_args(MYSQL_ADMIN)
    args.pop("database", None)
    with pymysql.connect(**args, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        cur.execute(f"CREATE DATABASE {DATABASE}")  # the server's default character set and collation
        cur.execute(f"USE {DATABASE}")
        for host in ("%", "localhost"):
            for user in (READER, RESTRICTED):
                cur.execute("CREATE USER IF NOT EXISTS %s@%s", (user, host))
            cur.execute(f"GRANT SELECT ON {DATABASE}.* TO %s@%s", (READER, host))  # as rose db reader grants
        for t in DATA["database"]["tables"]:
            cur.execute(create_table("mysql", t, _backtick))
            marks = ", ".join(["%s"] * len(t["columns"]))
            cur.executemany(f"INSERT INTO {_backtick(t['name'])} VALUES ({marks})", [tuple(r) for r in t["rows"]])
            if not t.get("reader_may_not_read"):  # MySQL revokes no table of a database-wide grant: grant each
                for host in ("%", "localhost"):
                    cur.execute(f"GRANT SELECT ON {DATABASE}.{_backtick(t['name'])} TO %s@%s", (RESTRICTED, host))
    return Built(
        Source.parse(with_database(MYSQL_ADMIN, DATABASE, READER)),
        Source.parse(with_database(MYSQL_ADMIN, "{db_id}", READER)),
        Source.parse(with_database(MYSQL_ADMIN, DATABASE, "rose_no_such_user")),
        Source.parse(with_database(MYSQL_ADMIN, DATABASE, RESTRICTED)),
    )


BUILDERS: dict[str, Callable[[Path], Built]] = {
    "sqlite": build_sqlite,
    "duckdb": build_duckdb,
    "postgresql": build_postgresql,
    "mysql": build_mysql,
}


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Built]]:
    made: dict[str, Built] = {}
    tmp = tmp_path_factory.mktemp("conformance")

    def get(kind: str) -> Built:
        if kind not in made:
            made[kind] = BUILDERS[kind](tmp / kind)
        return made[kind]

    yield get


# --------------------------------------------------------------------------- the cases


def expected(case: dict[str, Any], kind: str) -> dict[str, Any]:
    """The case's outcome on ``kind``: the common one, with the engine's documented difference over it."""
    differs = case.get("engines", {}).get(kind, {})
    if "skip" in differs:
        pytest.skip(f"{case['name']} on {kind}: {differs['skip']}")
    return {**case["expect"], **differs.get("expect", {})}


def outcome(record: Record, keys: set[str]) -> dict[str, Any]:
    """What the record says, for the keys a case expects."""
    r = record
    found: dict[str, Any] = {
        "unscored_reason": r.unscored_reason,
        "score": r.score,
        "decided_by": r.decided_by,
        "gold": r.gold.status,
        "pred": r.pred.status,
        "bird_ex": r.readings.bird_ex,
        "soft_f1": r.readings.soft_f1,
        "spider_ex": r.readings.spider_ex,
        "equal": r.comparison.equal if r.comparison is not None else None,
        "truncated": r.pred.truncated,
        "row_count": r.pred.row_count,
        "kept": len(r.pred.preview or []),  # the rows kept, while fewer than a record previews
        "limit": r.pred.limit,
        "gold_note": r.gold.note,
        "why_contains": r.why,
    }
    return {k: found[k] for k in keys}


def check(got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    wrong = []
    for key, value in want.items():
        if key == "why_contains":
            ok = value in (got[key] or "")
        elif key == "gold_note":
            ok = got[key] is None if value is None else value in (got[key] or "")
        else:
            ok = got[key] == value
        if not ok:
            wrong.append(f"{key}: expected {value!r}, got {got[key]!r}")
    return wrong


WAITED_OUT = ("wall", "memory")
"""Contracts whose cases wait out a guard or fill a memory limit: slow by nature, out of the inner loop."""


@pytest.mark.parametrize("kind", ENGINES)
@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c["name"], marks=[pytest.mark.slow] if c.get("contract") in WAITED_OUT else []) for c in CASES],
)
def test_case(case: dict[str, Any], kind: str, built: Callable[[str], Built]) -> None:
    want = expected(case, kind)
    databases = built(kind)
    where = case.get("where", "shared")
    source = {
        "shared": databases.shared,
        "absent": databases.absent,
        "unreadable": databases.unreadable,
        "restricted": databases.restricted,
    }[where]
    sql = {**case, **case.get("sql", {}).get(kind, {})}
    config = Config(workers=1, evidence=False).with_(**case.get("config", {}))
    item = Item(case["name"], case.get("db_id", DB_ID), sql["pred"], sql["gold"])
    with Executor(config) as ex:
        record = evaluate_item(item, source, ex)
    got = outcome(record, set(want))
    wrong = check(got, want)
    assert not wrong, (
        f"{case['name']} on {kind}: " + "; ".join(wrong) + f" (pred: {record.pred.error}, gold: {record.gold.error})"
    )


def test_every_row_of_the_contract_has_a_case() -> None:
    covered = {c["contract"] for c in CASES}
    assert set(CONTRACT) - covered == set(NOT_A_CASE)
    assert covered - set(CONTRACT) <= {"ok", "truncated"}


def test_every_difference_says_why() -> None:
    for case in CASES:
        for kind, differs in case.get("engines", {}).items():
            assert kind in ENGINES, case["name"]
            assert differs.get("why") or differs.get("skip"), f"{case['name']} on {kind} differs without saying why"
            assert set(differs.get("expect", {})) <= set(case["expect"]) | {"gold", "why_contains"}, case["name"]
