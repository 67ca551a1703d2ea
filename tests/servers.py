"""Fixtures for the engines' tests: the machine's PostgreSQL and MariaDB (skipped, naming the server, when
one cannot be reached), DuckDB files, the superhero database copied into each with ``rose db copy``, and
a read-only role on each server that the tests run under.

The admin URLs default to this machine's local servers (``postgres`` / ``root``, superusers) and can be
changed with ``ROSE_TEST_POSTGRESQL`` and ``ROSE_TEST_MYSQL``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from conftest import SHARED, build_db

from rose_sql.engines import Source

PG_ADMIN = os.environ.get("ROSE_TEST_POSTGRESQL", "postgresql://postgres@127.0.0.1:5432/postgres")
MYSQL_ADMIN = os.environ.get("ROSE_TEST_MYSQL", "mysql://root@127.0.0.1:3306/test")
READER = "rose_test_reader"
SUPERHERO = SHARED / "bird" / "superhero" / "superhero.sqlite"
HOSTILE_DB = """
CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT, c REAL);
CREATE TABLE u (id INTEGER PRIMARY KEY, t_a INTEGER REFERENCES t (a), name TEXT);
INSERT INTO t VALUES (1, 'x', 1.5), (2, 'y', 2.5), (3, 'z', NULL);
INSERT INTO u VALUES (10, 1, 'one'), (11, 2, 'two'), (12, NULL, 'none');
"""


def with_database(url: str, database: str, user: str | None = None) -> str:
    """``url`` naming another database (and user)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        netloc = f"{user}@{netloc.rpartition('@')[2]}"
    return urlunsplit(parts._replace(netloc=netloc, path=f"/{database}"))


def reachable(kind: str) -> str | None:
    """Why the test server of ``kind`` cannot be used (None when it can)."""
    try:
        if kind == "postgresql":
            import psycopg

            psycopg.connect(PG_ADMIN, connect_timeout=3).close()
        else:
            import pymysql

            from rose_sql.engines.mysql import connect_args

            pymysql.connect(**connect_args(MYSQL_ADMIN), connect_timeout=3).close()
    except ImportError as e:
        return f"the {kind} client library is not installed ({e.name}): pip install 'rose-sql[engines]'"
    except Exception as e:
        admin = PG_ADMIN if kind == "postgresql" else MYSQL_ADMIN
        return f"no {kind} server at {admin} ({type(e).__name__}: {e})"
    return None


def need(kind: str) -> None:
    why = reachable(kind)
    if why is not None:
        pytest.skip(why)


def _admin(kind: str) -> str:
    return PG_ADMIN if kind == "postgresql" else MYSQL_ADMIN


def load(kind: str, sqlite_file: Path, database: str, tmp: Path) -> tuple[str, str]:
    """Copy ``sqlite_file`` into ``database`` on ``kind`` (a file under ``tmp`` for DuckDB) with ``rose db
    copy``'s function, and make the read-only role: (the admin URL, the reader's URL) of the copy."""
    from rose_sql.engines.admin.copy import copy_sqlite

    if kind == "duckdb":
        pytest.importorskip("duckdb", reason="DuckDB is not installed: pip install 'rose-sql[duckdb]'")
        url = f"duckdb://{tmp / (database + '.duckdb')}"
        copy_sqlite(sqlite_file, Source("duckdb", url), database, replace=True)
        return url, url
    need(kind)
    from rose_sql.engines.admin.reader import create_reader

    admin = with_database(_admin(kind), database)
    source = Source(kind, admin)  # type: ignore[arg-type]
    copy_sqlite(sqlite_file, source, database, replace=True)
    create_reader(source.locate(database), READER, None)
    return admin, with_database(admin, database, READER)


ENGINES = ("postgresql", "mysql", "duckdb")


@pytest.fixture(scope="session", name="superhero_on")
def superhero_fixture(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[str, str]]:
    """``superhero_on(kind)``: superhero copied into ``kind`` once per session: (admin URL, reader URL)."""
    if not SUPERHERO.is_file():
        pytest.skip(f"shared data not found at {SUPERHERO}")
    made: dict[str, tuple[str, str]] = {}
    tmp = tmp_path_factory.mktemp("engines")

    def get(kind: str) -> tuple[str, str]:
        if kind not in made:
            made[kind] = load(kind, SUPERHERO, "rose_test_superhero", tmp)
        return made[kind]

    return get


@pytest.fixture(scope="session", name="hostile_on")
def hostile_fixture(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[str, str, Path]]:
    """``hostile_on(kind)``: a small database copied into ``kind``: (admin URL, reader URL, SQLite file)."""
    tmp = tmp_path_factory.mktemp("hostile-engines")
    sqlite_file = build_db(tmp / "rose_test_hostile" / "rose_test_hostile.sqlite", HOSTILE_DB)
    made: dict[str, tuple[str, str, Path]] = {}

    def get(kind: str) -> tuple[str, str, Path]:
        if kind not in made:
            admin, reader = load(kind, sqlite_file, "rose_test_hostile", tmp)
            made[kind] = (admin, reader, sqlite_file)
        return made[kind]

    return get
