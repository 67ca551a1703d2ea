"""Every opening of a user's SQLite file is read-only and leaves the file and its folder as they were."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from rose_sql.engines.sqlite import connect_read_only, read_only_uri, readable_path
from rose_sql.evidence.workspace import Workspace
from rose_sql.execute import Executor
from rose_sql.judges.context import read_schema

SCRIPT = "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO t VALUES (1, 'a'), (2, 'b');"


def test_a_wal_database_is_read_without_side_files_by_every_reader(make_db: Callable[..., Path]) -> None:
    db = make_db("PRAGMA journal_mode = wal;" + SCRIPT)  # closed cleanly: no -wal file remains
    assert db.read_bytes()[18:20] == b"\x02\x02"  # precondition: a WAL-mode database
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name]
    before = db.read_bytes()
    assert "t" in read_schema(db).tables
    ws = Workspace(db)
    try:
        counted = ws.run("SELECT count(*) FROM t")
        assert counted is not None and counted.rows == ((2,),)
    finally:
        ws.close()
    with Executor() as ex:
        assert ex.run(db, "SELECT count(*) FROM t").ok
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name]
    assert db.read_bytes() == before


def test_a_database_with_a_journal_beside_it_is_read_from_a_private_copy(make_db: Callable[..., Path]) -> None:
    db = make_db(SCRIPT)
    assert readable_path(db) == db and read_only_uri(db).endswith("?mode=ro&immutable=1")
    db.with_name(db.name + "-wal").write_bytes(b"")
    copy = readable_path(db)
    assert copy != db and copy.name == db.name and copy.parent.name.startswith("rose-sqlite-")
    assert readable_path(db) == copy  # made once while the files stay as they are


def test_the_read_only_connection_cannot_write(make_db: Callable[..., Path]) -> None:
    db = make_db(SCRIPT)
    conn = connect_read_only(db)
    try:
        try:
            conn.execute("DELETE FROM t")
        except sqlite3.OperationalError as e:
            assert "readonly" in str(e) or "read-only" in str(e)
        else:
            raise AssertionError("a write went through")
    finally:
        conn.close()
