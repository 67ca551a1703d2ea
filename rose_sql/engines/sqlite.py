"""SQLite: every opening of a user's database file, read-only, and what a query on it may do.

:func:`connect_read_only` is the only way the package opens a user's database (the sandbox, the
judges' schema reader, the evidence workspace's copy). It opens ``mode=ro&immutable=1``: no locks,
no change detection and above all no ``-wal``/``-shm`` files created beside a WAL-mode database,
which ``mode=ro`` alone creates. A file that changes under an open connection is not seen by it (the
sandbox reopens when a file's size or time changes). A database with a pending ``-wal`` or ``-journal``
file is read from a private copy (:func:`readable_path`): ``immutable`` would ignore the WAL's
contents, and plain ``mode=ro`` would create files beside the user's database.

:class:`Authorizer` is the authorizer for untrusted queries: reading only, no function that reaches
outside the database, and the read-only table-valued functions ``json_each`` and ``json_tree``.
"""

from __future__ import annotations

import atexit
import shutil
import sqlite3
import tempfile
import threading
import urllib.parse
from pathlib import Path
from typing import Literal

IsolationLevel = Literal["DEFERRED", "EXCLUSIVE", "IMMEDIATE"] | None
"""``sqlite3.connect``'s transaction control (None: autocommit), passed through."""

READ_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})
"""What an untrusted query may do: select, read columns, recurse in a CTE."""
DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "sqlite_dbpage"})
"""Functions that load code or touch files (in the shell's builds) or expose raw pages."""


SIDECARS = ("-wal", "-journal")
"""Files beside a database that hold changes not yet in it."""
_COPIES: dict[tuple[str, tuple[tuple[int, int], ...]], Path] = {}
_COPIES_LOCK = threading.Lock()


def sidecars(path: Path) -> list[Path]:
    """The ``-wal`` / ``-journal`` files beside a database."""
    return [q for q in (path.with_name(path.name + s) for s in SIDECARS) if q.exists()]


def readable_path(path: Path) -> Path:
    """``path`` itself, or, when a ``-wal`` or ``-journal`` sits beside it, a private copy with the
    changes they hold applied (made once per process and state of the files, in a temporary folder)."""
    pending = sidecars(path)
    if not pending:
        return path
    state = tuple((st.st_size, st.st_mtime_ns) for st in (f.stat() for f in (path, *pending)))
    key = (str(path.resolve()), state)
    with _COPIES_LOCK:
        copy = _COPIES.get(key)
        if copy is None or not copy.exists():
            folder = Path(tempfile.mkdtemp(prefix="rose-sqlite-"))
            atexit.register(shutil.rmtree, folder, True)
            copy = folder / path.name
            for f in (path, *pending):
                shutil.copyfile(f, folder / f.name)
            recover = sqlite3.connect(copy)  # the copy is ours: SQLite applies the WAL or rolls the journal back
            try:
                recover.execute("SELECT count(*) FROM sqlite_master").fetchall()
                recover.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                recover.execute("PRAGMA journal_mode = DELETE")
            finally:
                recover.close()
            _COPIES[key] = copy
        return copy


def read_only_uri(path: Path) -> str:
    """The ``file:`` URI that opens ``path`` read-only and immutable (see :func:`readable_path` first)."""
    return "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"


def connect_read_only(
    path: Path, *, check_same_thread: bool = True, isolation_level: IsolationLevel = "DEFERRED"
) -> sqlite3.Connection:
    """A connection to the database file ``path`` that can neither write it nor create files beside it.

    Without a statement cache: SQLite counts a cached statement's steps on from its earlier runs, so the
    step budget of a query run again would depend on what ran before it on the connection."""
    return sqlite3.connect(
        read_only_uri(readable_path(path)),
        uri=True,
        check_same_thread=check_same_thread,
        isolation_level=isolation_level,
        cached_statements=0,
    )


TABLE_FUNCTIONS = frozenset({"json_each", "json_tree"})
"""Read-only table-valued functions a query may use: they read nothing but their arguments."""


class Authorizer:
    """SQLite authorizer for untrusted SQL: reads and harmless functions pass, everything else is denied.

    The read-only table-valued functions (:data:`TABLE_FUNCTIONS`) declare their virtual table when a
    statement first uses them, which SQLite reports as changes to ``sqlite_master``; those pass only
    inside a statement that began as a SELECT (:meth:`begin` marks a new statement). Nothing can be
    written anyway: the connection is read-only and ``query_only``.
    """

    def __init__(self) -> None:
        self._selecting = False

    def begin(self) -> None:
        """A new statement is about to be prepared."""
        self._selecting = False

    def __call__(self, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
        if action == sqlite3.SQLITE_SELECT:
            self._selecting = True
            return sqlite3.SQLITE_OK
        if action in READ_ACTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            return sqlite3.SQLITE_DENY if (arg2 or "").lower() in DENIED_FUNCTIONS else sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_UPDATE and self._selecting and arg1 == "sqlite_master" and source is None:
            return sqlite3.SQLITE_OK  # a table-valued function declaring its table (see the class docstring)
        return sqlite3.SQLITE_DENY
