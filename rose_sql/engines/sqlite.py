"""SQLite: every opening of a user's database file, read-only, and what a query on it may do.

:func:`connect_read_only` is the only way the package opens a user's database (the sandbox, the
judges' schema reader, the evidence workspace's copy). It opens ``mode=ro`` and, unless a
``-wal`` or ``-journal`` file sits beside the database, ``immutable=1``: no locks, no change
detection and above all no ``-wal``/``-shm`` files created beside a WAL-mode database, which
``mode=ro`` alone creates. A file that changes under an open connection is not seen by it (the
sandbox reopens when a file's size or time changes); with a ``-wal`` or ``-journal`` present,
SQLite must read it, so the connection is plain ``mode=ro``.

:func:`authorize` is the authorizer for untrusted queries: reading only, and no function that
reaches outside the database.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from pathlib import Path
from typing import Literal

IsolationLevel = Literal["DEFERRED", "EXCLUSIVE", "IMMEDIATE"] | None
"""``sqlite3.connect``'s transaction control (None: autocommit), passed through."""

READ_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})
"""What an untrusted query may do: select, read columns, recurse in a CTE."""
DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "sqlite_dbpage"})
"""Functions that load code or touch files (in the shell's builds) or expose raw pages."""


def read_only_uri(path: Path) -> str:
    """The ``file:`` URI that opens ``path`` read-only, ``immutable=1`` unless a -wal/-journal is beside it."""
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
    if not any(path.with_name(path.name + s).exists() for s in ("-wal", "-journal")):
        uri += "&immutable=1"
    return uri


def connect_read_only(
    path: Path, *, check_same_thread: bool = True, isolation_level: IsolationLevel = "DEFERRED"
) -> sqlite3.Connection:
    """A connection to the database file ``path`` that can neither write it nor create files beside it."""
    return sqlite3.connect(
        read_only_uri(path), uri=True, check_same_thread=check_same_thread, isolation_level=isolation_level
    )


def authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
    """SQLite authorizer for untrusted SQL: reads and harmless functions pass, everything else is denied."""
    if action in READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (arg2 or "").lower() in DENIED_FUNCTIONS else sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY
