"""The review app's state: one SQLite file (WAL) holding projects, items, annotators and every label.

Durability is the point: a label is committed (``synchronous=FULL``) before the page is told it was
saved, so a server killed at any moment restarts with every acknowledged label. Labels are
append-only rows, one per submission: two annotators labelling the same item at the same moment
write two rows and both keep their label; an annotator who changes their mind adds a row, and their
current label is their latest (every row is exported, with its time).

Each thread has its own connection (the web server answers requests on a thread pool); writes take
SQLite's write lock at once (``BEGIN IMMEDIATE``) and wait for it up to :data:`BUSY_TIMEOUT_MS`.
"""

from __future__ import annotations

import math
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

from rose_sql.errors import UsageError
from rose_sql.review.work import ImportedLabel, WorkItem, item_dict

Chooser = Callable[[list["Label"], dict[str, set[str]]], str | None]
"""Picks an item from a project's labels and current claims (see :meth:`Store.assign`)."""
SCHEMA_VERSION = 1
"""Layout of the state file; a newer one is refused."""
BUSY_TIMEOUT_MS = 30_000
"""How long a write waits for another's lock."""
PROJECT_NAME = re.compile(r"^[\w.-]{1,64}$")
"""A project name: letters, digits, ``_``, ``.``, ``-`` (it names the export files)."""
MAX_NAME = 64
"""Longest annotator name."""
MAX_REASON = 10_000
"""Longest reason kept."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS projects (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, source TEXT NOT NULL, db_root TEXT, created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    project INTEGER NOT NULL REFERENCES projects(id), key TEXT NOT NULL, position INTEGER NOT NULL,
    db_id TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (project, key));
CREATE INDEX IF NOT EXISTS items_order ON items (project, position);
CREATE TABLE IF NOT EXISTS annotators (name TEXT PRIMARY KEY, created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    token TEXT PRIMARY KEY, annotator TEXT NOT NULL REFERENCES annotators(name), created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS labels (
    id INTEGER PRIMARY KEY, project INTEGER NOT NULL REFERENCES projects(id), key TEXT NOT NULL,
    annotator TEXT NOT NULL, correct INTEGER NOT NULL, goldx INTEGER NOT NULL, ambq INTEGER NOT NULL,
    ambs INTEGER NOT NULL, reason TEXT NOT NULL, created TEXT NOT NULL, seconds REAL, source TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS labels_item ON labels (project, key, annotator);
CREATE TABLE IF NOT EXISTS claims (
    project INTEGER NOT NULL, key TEXT NOT NULL, annotator TEXT NOT NULL, until REAL NOT NULL,
    PRIMARY KEY (project, key, annotator));
"""


@dataclass(frozen=True, slots=True)
class Project:
    """A named set of items under review."""

    name: str
    """Its name (in URLs and export file names)."""
    source: str
    """What its items were loaded from."""
    db_root: Path | None
    """Where its databases are (``<db_root>/<db_id>/<db_id>.sqlite``), for the page's executions."""
    created: str
    """When it was created (UTC, ISO 8601)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What an annotator says about an item."""

    correct: bool
    """The prediction answers the question."""
    goldx: bool = False
    """The gold SQL is wrong."""
    ambq: bool = False
    """The question is ambiguous."""
    ambs: bool = False
    """The schema is ambiguous."""
    reason: str = ""
    """Why, in their words."""


@dataclass(frozen=True, slots=True)
class Label:
    """One label as stored: a verdict, who gave it, when and how."""

    id: int
    """Its row: later labels have larger ids."""
    key: str
    """The item's id."""
    annotator: str
    """Who gave it."""
    verdict: Verdict
    """What they said."""
    created: str
    """When it was committed (UTC, ISO 8601, milliseconds)."""
    seconds: float | None
    """Seconds the annotator spent on the item page before labelling (None when imported)."""
    source: str
    """``web``, or ``import:<file>`` for a label imported from a per-annotator file."""


def now_iso() -> str:
    """The current time, UTC, ISO 8601 with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def check_project_name(name: str) -> str:
    """The name, or :class:`UsageError` when it is not a usable project name."""
    if not PROJECT_NAME.match(name):
        raise UsageError(f"project name {name!r}: use 1-64 letters, digits, '_', '.' or '-'")
    return name


def check_text(text: str, what: str) -> str:
    """The text, or :class:`UsageError` when it cannot be stored: a lone surrogate (``"\\ud800"`` in JSON) is
    not a character UTF-8 can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        where = f"U+{ord(text[e.start]):04X} at {e.start}"
        raise UsageError(f"{what} holds a lone surrogate ({where}), which is not text") from None
    return text


def check_seconds(seconds: float | None) -> float | None:
    """Seconds spent on an item, or :class:`UsageError` when not a finite number of at least 0 (None: not measured)."""
    if seconds is not None and not (math.isfinite(seconds) and seconds >= 0):
        raise UsageError(f"'seconds' must be a finite number of at least 0, not {seconds!r}")
    return seconds


def check_annotator_name(name: str) -> str:
    """The name without surrounding blanks; :class:`UsageError` when empty, too long or with control characters."""
    name = name.strip()
    if not name or len(name) > MAX_NAME or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise UsageError(f"an annotator name has 1-{MAX_NAME} printable characters")
    return name


class Store:
    """The state file, opened by every thread that asks (one connection per thread)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns: list[sqlite3.Connection] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = self._conn()
        conn.executescript(_SCHEMA)
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is None:
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) > SCHEMA_VERSION:
            raise UsageError(f"{path} was written by a newer rose-sql (layout {row[0]}); upgrade")
        self._items = lru_cache(maxsize=4096)(self._read_item)

    # ------------------------------------------------------------------ connections

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False
            )  # used by its own thread only; closed by whichever thread closes the store
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")  # a label acknowledged is a label on disk
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA foreign_keys = ON")
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        """Close every thread's connection."""
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            c.close()
        self._local = threading.local()

    # ------------------------------------------------------------------ projects and items

    def projects(self) -> list[Project]:
        """Every project, oldest first."""
        rows = self._conn().execute("SELECT name, source, db_root, created FROM projects ORDER BY id").fetchall()
        return [Project(n, s, Path(d) if d else None, c) for n, s, d, c in rows]

    def project(self, name: str) -> Project | None:
        """The project of that name, or None."""
        return next((p for p in self.projects() if p.name == name), None)

    def _project_id(self, name: str) -> int:
        row = self._conn().execute("SELECT id FROM projects WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise UsageError(f"no project named {name!r} in {self.path}")
        return int(row[0])

    def add_items(self, name: str, source: str, items: Sequence[WorkItem], db_root: Path | None = None) -> int:
        """Add items to a project (created when new); returns how many were new.

        An item already there with the same text is kept as is; one with the same id but other text
        is refused (:class:`UsageError`), so a project never mixes two versions of an item.
        """
        check_project_name(name)
        with self._write() as c:
            c.execute(
                "INSERT OR IGNORE INTO projects (name, source, db_root, created) VALUES (?, ?, ?, ?)",
                (name, source, str(db_root) if db_root else None, now_iso()),
            )
            pid = int(c.execute("SELECT id FROM projects WHERE name = ?", (name,)).fetchone()[0])
            if db_root is not None:
                c.execute("UPDATE projects SET db_root = ? WHERE id = ?", (str(db_root), pid))
            existing = {k: d for k, d in c.execute("SELECT key, data FROM items WHERE project = ?", (pid,))}
            position = int(c.execute("SELECT COUNT(*) FROM items WHERE project = ?", (pid,)).fetchone()[0])
            added = 0
            for it in items:
                if it.key in existing:
                    if item_dict(WorkItem.from_json(existing[it.key])) != item_dict(it):
                        raise UsageError(
                            f"project {name}: item {it.key} is already there with other text "
                            f"(from {WorkItem.from_json(existing[it.key]).item.source}; now {it.item.source})"
                        )
                    continue
                c.execute(
                    "INSERT INTO items (project, key, position, db_id, data) VALUES (?, ?, ?, ?, ?)",
                    (pid, it.key, position, it.item.db_id, it.to_json()),
                )
                existing[it.key] = ""
                position += 1
                added += 1
        return added

    def set_db_root(self, name: str, db_root: Path) -> None:
        """Where the project's databases are."""
        with self._write() as c:
            c.execute("UPDATE projects SET db_root = ? WHERE id = ?", (str(db_root), self._project_id(name)))

    def keys(self, name: str) -> list[str]:
        """The project's item ids, in order."""
        pid = self._project_id(name)
        return [k for (k,) in self._conn().execute("SELECT key FROM items WHERE project = ? ORDER BY position", (pid,))]

    def databases(self, name: str) -> list[tuple[str, str]]:
        """The project's item ids with their db_id, in order."""
        pid = self._project_id(name)
        rows = self._conn().execute("SELECT key, db_id FROM items WHERE project = ? ORDER BY position", (pid,))
        return [(str(k), str(d)) for k, d in rows]

    def item(self, name: str, key: str) -> WorkItem | None:
        """One item of the project, or None (read once, then kept in memory: items never change)."""
        return self._items(name, key)

    def _read_item(self, name: str, key: str) -> WorkItem | None:
        row = (
            self._conn()
            .execute(
                "SELECT data FROM items WHERE project = (SELECT id FROM projects WHERE name = ?) AND key = ?",
                (name, key),
            )
            .fetchone()
        )
        return WorkItem.from_json(row[0]) if row else None

    # ------------------------------------------------------------------ annotators

    def sign_in(self, name: str) -> str:
        """A new session token for the annotator of that name (created on first sign-in)."""
        name = check_annotator_name(name)
        token = secrets.token_urlsafe(24)
        with self._write() as c:
            c.execute("INSERT OR IGNORE INTO annotators VALUES (?, ?)", (name, now_iso()))
            c.execute("INSERT INTO sessions VALUES (?, ?, ?)", (token, name, now_iso()))
        return token

    def annotator(self, token: str) -> str | None:
        """Who holds this session token, or None."""
        row = self._conn().execute("SELECT annotator FROM sessions WHERE token = ?", (token,)).fetchone()
        return str(row[0]) if row else None

    def sign_out(self, token: str) -> None:
        with self._write() as c:
            c.execute("DELETE FROM sessions WHERE token = ?", (token,))

    # ------------------------------------------------------------------ labels

    def add_label(self, name: str, key: str, annotator: str, verdict: Verdict, seconds: float | None = None) -> Label:
        """Store a label and commit it before returning: once this returns, the label survives any crash.

        Raises :class:`UsageError` for an unknown item, a reason that is not text (a lone surrogate) and
        seconds that are not a finite number of at least 0."""
        check_text(verdict.reason, "'reason'")
        check_seconds(seconds)
        pid = self._project_id(name)
        if self.item(name, key) is None:
            raise UsageError(f"project {name} has no item {key!r}")
        created = now_iso()
        reason = verdict.reason[:MAX_REASON]
        with self._write() as c:
            label_id = _insert(c, pid, key, annotator, replace(verdict, reason=reason), created, seconds, "web")
            c.execute("DELETE FROM claims WHERE project = ? AND key = ? AND annotator = ?", (pid, key, annotator))
        return Label(label_id, key, annotator, replace(verdict, reason=reason), created, seconds, "web")

    def import_labels(self, name: str, annotator: str, labels: Sequence[ImportedLabel], source: str) -> tuple[int, int]:
        """Import one annotator's labels in one transaction: (added, already there).

        A label is already there when that annotator has a label on the item, so importing a file
        twice adds nothing.
        """
        annotator = check_annotator_name(annotator)
        pid = self._project_id(name)
        added = kept = 0
        with self._write() as c:
            c.execute("INSERT OR IGNORE INTO annotators VALUES (?, ?)", (annotator, now_iso()))
            have = {
                k for (k,) in c.execute("SELECT key FROM labels WHERE project = ? AND annotator = ?", (pid, annotator))
            }
            created = now_iso()
            for lab in labels:
                if lab.item.key in have:
                    kept += 1
                    continue
                v = Verdict(lab.correct, lab.goldx, lab.ambq, lab.ambs, lab.reason[:MAX_REASON])
                _insert(c, pid, lab.item.key, annotator, v, created, None, f"import:{source}")
                have.add(lab.item.key)
                added += 1
        return added, kept

    def labels(self, name: str) -> list[Label]:
        """Every label of the project, in the order they were given (changed labels included)."""
        return self._labels(self._conn(), self._project_id(name))

    @staticmethod
    def _labels(c: sqlite3.Connection, pid: int) -> list[Label]:
        rows = c.execute(
            "SELECT id, key, annotator, correct, goldx, ambq, ambs, reason, created, seconds, source "
            "FROM labels WHERE project = ? ORDER BY id",
            (pid,),
        ).fetchall()
        return [
            Label(i, k, a, Verdict(bool(c), bool(g), bool(q), bool(s), r), t, sec, src)
            for i, k, a, c, g, q, s, r, t, sec, src in rows
        ]

    # ------------------------------------------------------------------ claims

    def claim(self, name: str, key: str, annotator: str, minutes: float) -> None:
        """Hold an item for an annotator who opened it and owes it a label."""
        pid = self._project_id(name)
        with self._write() as c:
            c.execute(
                "INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?)", (pid, key, annotator, time.time() + 60 * minutes)
            )

    def claims(self, name: str) -> dict[str, set[str]]:
        """Who holds which items now."""
        return self._claims(self._conn(), self._project_id(name))

    @staticmethod
    def _claims(c: sqlite3.Connection, pid: int) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for k, a in c.execute("SELECT key, annotator FROM claims WHERE project = ? AND until > ?", (pid, time.time())):
            out.setdefault(k, set()).add(a)
        return out

    def assign(self, name: str, annotator: str, choose: Chooser, minutes: float) -> str | None:
        """The item ``choose`` picks for the annotator from the project's labels and claims, claimed for them
        in the same transaction: annotators asking at the same moment are given items one after the other,
        each seeing the claims of those before (None when nothing is left for them)."""
        pid = self._project_id(name)
        with self._write() as c:
            key = choose(self._labels(c, pid), self._claims(c, pid))
            if key is not None:
                c.execute(
                    "INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?)",
                    (pid, key, annotator, time.time() + 60 * minutes),
                )
        return key


def _insert(
    c: sqlite3.Connection,
    pid: int,
    key: str,
    annotator: str,
    v: Verdict,
    created: str,
    seconds: float | None,
    source: str,
) -> int:
    cur = c.execute(
        "INSERT INTO labels (project, key, annotator, correct, goldx, ambq, ambs, reason, created, seconds, source) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (pid, key, annotator, v.correct, v.goldx, v.ambq, v.ambs, v.reason, created, seconds, source),
    )
    return int(cur.lastrowid or 0)
