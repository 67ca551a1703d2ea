"""SQLite's space: a private in-memory copy of the database file, where the evidence reads and changes data.

The user's file is opened read-only and copied page by page into ``:memory:``; every candidate change is
made inside a SAVEPOINT and rolled back. Mutations are valid by construction (fresh primary-key and UNIQUE
values for copies, children deleted with their parent) and the engine polices the rest with ``PRAGMA
foreign_keys=ON``, NOT NULL, UNIQUE and CHECK. The queries under test run with the sandbox's read-only
authorizer, its value-length limit and temp storage in memory.

Every statement is bounded by work, not time, so the search finds the same evidence on any machine at
any load: each statement by its own step budget, and all of an item's statements together by the item's
budget (:meth:`Workspace.start`); until the witness search asks for its copy (:meth:`Workspace.copy`: the
workspace itself), each statement of the gold smells may take at most a quarter of the item's budget.
The columns' profiles, kept for the items that follow, are computed before an item's clock and budget
start (:meth:`Workspace.prepare`), each table's under a budget of its own
(:data:`~rose_sql.config.EVIDENCE_PROFILE_STEPS`) and under no clock, so what an item finds never depends
on the items before it or on which worker ran it. The wall clock is only a guard: when the item's
deadline passes, every statement stops and ``guard_fired`` says that what was found depends on the
machine.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rose_sql.config import (
    EVIDENCE_MAX_ROWS,
    EVIDENCE_PROFILE_STEPS,
    EVIDENCE_STATEMENT_STEPS,
    MAX_PATTERN_BYTES,
    Config,
)
from rose_sql.engines.kinds import Database
from rose_sql.engines.spaces import Change, Column, Copy, Table
from rose_sql.engines.sqlite import STEP_GRAIN, Authorizer, connect_read_only
from rose_sql.results import ResultSet
from rose_sql.sql import quote_identifier as _q


def open_space(db: Database, config: Config) -> Workspace | str:
    """An in-memory copy of the file for the evidence, or why there is none."""
    if db.path.stat().st_size > config.evidence_max_db_bytes:
        return f"database larger than {config.evidence_max_db_bytes // 2**20} MiB"
    return Workspace(
        db.path,
        statement_steps=min(config.max_steps, EVIDENCE_STATEMENT_STEPS),
        max_bytes=config.max_result_bytes,
        max_value_bytes=config.max_value_bytes,
        max_pattern_bytes=config.max_pattern_bytes,
        guard_s=config.evidence_budget_s,
    )


class Workspace:
    """An in-memory copy of a database, its schema and column profiles: the space and its own copy."""

    dialect = "sqlite"
    """The SQL dialect of the copy (the gold smells write their probes in it)."""
    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)

    def __init__(
        self,
        db: Path,
        *,
        statement_steps: int,
        max_bytes: int,
        max_value_bytes: int,
        guard_s: float,
        max_pattern_bytes: int = MAX_PATTERN_BYTES,
        max_rows: int = EVIDENCE_MAX_ROWS,
    ) -> None:
        src = connect_read_only(db)
        # no statement cache: SQLite counts a cached statement's steps on from its earlier runs, so the progress
        # handler would tick at other points, and an item's budget would depend on the items before it
        self.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False, cached_statements=0)
        try:
            src.backup(self.conn)
        finally:
            src.close()
        self.conn.text_factory = lambda b: b.decode("utf-8", errors="replace")
        self.conn.execute("PRAGMA foreign_keys = ON")
        self.conn.execute("PRAGMA temp_store = MEMORY")
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)  # no zeroblob(800000000)
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, max_pattern_bytes)  # as the sandbox
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        self.statement_steps = statement_steps
        """Steps one statement may take (a query under test may be given less)."""
        self.search_steps = statement_steps
        """Steps one statement of the witness search may take (the gold smells take less: :meth:`start`)."""
        self.guard_s = guard_s
        """Seconds an item's evidence may take before the worker's guard may stop it."""
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.hard_deadline = float("inf")
        """The wall-clock guard of the current item: past it, every statement stops."""
        self.guard_fired = False
        """Whether the guard stopped a statement of the current item."""
        self._item_ticks = float("inf")  # the current item's steps left, in ticks
        self._ticks = 0  # ticks of the current statement
        self._limit = 0  # its limit
        self._charged = True  # whether its ticks count against the item's budget
        self._free = False  # our own undo statements: never stopped
        self._profile_ticks: int | None = None  # while a table is profiled: its own budget left, no clock
        self._auth = Authorizer()
        self.conn.set_progress_handler(self._progress, STEP_GRAIN)
        self._free = True  # reading the schema is ours and bounded by it
        try:
            self.tables = self._read_schema()
        finally:
            self._free = False

    # ------------------------------------------------------------------ budgets

    def start(self, steps: int, deadline: float) -> None:
        """Begin an item: all its statements together may take ``steps``; the guard is at ``deadline``.
        Until :meth:`copy`, each statement (the gold smells') may take a quarter of ``steps``."""
        self._item_ticks = steps // STEP_GRAIN
        self.hard_deadline = deadline
        self.guard_fired = False
        self.statement_steps = min(self.search_steps, steps // 4)

    def stop(self) -> None:
        """End the item's budget."""
        self._item_ticks = float("inf")
        self.hard_deadline = float("inf")
        self.statement_steps = self.search_steps

    def copy(self, tables: Iterable[str]) -> Copy | str:
        """The workspace itself, its statements given the witness search's budget."""
        self.statement_steps = self.search_steps
        return self

    def alive(self) -> bool:
        return True

    def stored(self, table: str, column: str, limit: int) -> list[tuple[str, Any]]:
        c, t = _q(column), _q(table)
        rows = self.query(f"SELECT typeof({c}), {c} FROM {t} WHERE {c} IS NOT NULL LIMIT {int(limit)}")
        return [(str(kind), value) for kind, value in rows or []]

    def reversed_run(self, sql: str) -> ResultSet | None:
        self.set_reverse_order(True)
        try:
            return self.run(sql)
        finally:
            self.set_reverse_order(False)

    @property
    def steps_left(self) -> int:
        """Steps the current item may still take."""
        return int(min(self._item_ticks, 2**62 // STEP_GRAIN)) * STEP_GRAIN

    def _progress(self) -> bool:
        if self._free:
            return False
        if self._profile_ticks is not None:  # the table's budget, never the item's, under no clock
            self._profile_ticks -= 1
            return self._profile_ticks < 0
        self._ticks += 1
        if self._charged:
            self._item_ticks -= 1
            if self._item_ticks < 0:
                return True
        if self._ticks > self._limit:
            return True
        if time.monotonic() > self.hard_deadline:
            self.guard_fired = True
            return True
        return False

    def _begin(self, steps: int | None = None) -> None:
        self._ticks = 0
        self._limit = min(steps or self.statement_steps, self.statement_steps) // STEP_GRAIN

    def _do(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        """A statement of ours (a mutation, a probe), under the statement and item budgets."""
        self._begin()
        return self.conn.execute(sql, params)

    # ------------------------------------------------------------------ schema

    def _read_schema(self) -> dict[str, Table]:
        tables: dict[str, Table] = {}
        names = [
            r[0]
            for r in self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        for name in names:
            info = self.conn.execute(f"PRAGMA table_info({_q(name)})").fetchall()
            cols = {r[1]: Column(r[1], (r[2] or "").upper(), bool(r[3]), bool(r[5])) for r in info}
            sql = self.conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0] or ""
            t = Table(name, cols, rowid="WITHOUT ROWID" not in sql.upper())
            for idx in self.conn.execute(f"PRAGMA index_list({_q(name)})").fetchall():
                if idx[2]:  # unique
                    idx_cols = [r[2] for r in self.conn.execute(f"PRAGMA index_info({_q(idx[1])})")]
                    if len(idx_cols) == 1 and idx_cols[0] in cols:
                        cols[idx_cols[0]].unique = True
            pks = [c for c in cols.values() if c.pk]
            if len(pks) == 1:
                pks[0].unique = True
            tables[name] = t
        for t in tables.values():
            for r in self.conn.execute(f"PRAGMA foreign_key_list({_q(t.name)})").fetchall():
                parent = next((n for n in tables if n.lower() == str(r[2]).lower()), None)
                if parent is None:
                    continue
                pcol = r[4] or next((c.name for c in tables[parent].columns.values() if c.pk), None)
                if pcol is None:
                    continue
                t.parents.append((r[3], parent, pcol))
                tables[parent].children.append((t.name, r[3], pcol))
        return tables

    def prepare(self, tables: Iterable[str]) -> None:
        """Profile the tables the queries read (names as they write them), before the item starts."""
        for name in sorted(tables):
            t = self.table_of(name)
            if t is not None and t.rowid:
                self.profile(t.name)

    def profile(self, table: str) -> bool:
        """Fill the columns' data facts (NULLs, duplicates, value pool) for one table, once: under the table's
        own budget (:data:`~rose_sql.config.EVIDENCE_PROFILE_STEPS` in all) and no clock, never the item's.

        False when that budget ran out first: nothing is recorded, the same on every worker, and the table
        is not profiled again. Time it takes inside an item (:meth:`prepare` was not asked) is added to the
        item's deadline.
        """
        t = self.tables[table]
        if t.profiled:
            return t.rows > 0
        started = time.monotonic()
        self._profile_ticks = EVIDENCE_PROFILE_STEPS // STEP_GRAIN
        try:
            return self._profile(t)
        finally:
            self._profile_ticks = None
            t.profiled = True
            self.hard_deadline += time.monotonic() - started  # the table's time, not the item's

    def _profile(self, t: Table) -> bool:
        table = t.name
        facts = []
        for c in t.columns.values():
            col, tab = _q(c.name), _q(table)
            nulls = self.query(f"SELECT 1 FROM {tab} WHERE {col} IS NULL LIMIT 1")
            dups = self.query(f"SELECT 1 FROM {tab} WHERE {col} IS NOT NULL GROUP BY {col} HAVING COUNT(*) > 1 LIMIT 1")
            pool = self.query(f"SELECT DISTINCT {col} FROM {tab} WHERE {col} IS NOT NULL LIMIT 8")
            if nulls is None or dups is None or pool is None:
                return False
            facts.append((c, bool(nulls), bool(dups), [r[0] for r in pool]))
        count = self.query(f"SELECT COUNT(*) FROM {_q(table)}")
        if count is None:
            return False
        for c, nulls_, dups_, pool_ in facts:
            c.has_nulls, c.has_duplicates, c.pool = nulls_, dups_, pool_
        t.rows = count[0][0] or 1
        return True

    def table_of(self, name: str) -> Table | None:
        return next((t for n, t in self.tables.items() if n.lower() == name.lower()), None)

    # ------------------------------------------------------------------ queries under test

    def run(self, sql: str, steps: int | None = None) -> ResultSet | None:
        """Run an untrusted query read-only within ``steps`` (at most the statement budget); None when it
        fails, runs out, or returns more rows or bytes than can be compared soundly here."""
        self.conn.set_authorizer(self._auth)
        self._auth.begin()
        self._begin(steps)
        try:
            cur = self.conn.execute(sql)
            cols = tuple(d[0] for d in cur.description or ())
            rows: list[tuple[Any, ...]] = []
            nbytes = 0
            for row in cur:
                nbytes += sum(len(v) for v in row if isinstance(v, str | bytes)) + 16 * len(row)
                if len(rows) >= self.max_rows or nbytes > self.max_bytes:
                    return None  # too large to compare soundly here
                rows.append(row)
            return ResultSet(cols, tuple(rows), len(rows))
        except (sqlite3.Error, ValueError, OverflowError, MemoryError):
            return None
        finally:
            self.conn.set_authorizer(None)

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]] | None:
        """A trusted query of ours (profiles, probes) under the same budgets; None if it fails or runs out."""
        try:
            return self._do(sql, params).fetchall()
        except sqlite3.Error:
            return None

    def set_reverse_order(self, on: bool) -> None:
        self._free = True
        try:
            self.conn.execute(f"PRAGMA reverse_unordered_selects = {int(on)}")
        finally:
            self._free = False

    # ------------------------------------------------------------------ mutations

    def begin(self) -> None:
        """Open a candidate's savepoint; never interrupted (an interrupted SAVEPOINT leaves none to undo)."""
        self._free = True
        try:
            self.conn.execute("SAVEPOINT candidate")
        finally:
            self._free = False

    def rollback(self) -> None:
        """Undo the candidate; never interrupted, so the copy always returns to the real data."""
        self._free = True
        try:
            self.conn.execute("ROLLBACK TO candidate")
            self.conn.execute("RELEASE candidate")
        finally:
            self._free = False

    def rowids_where(self, table: str, column: str, values: list[Any], limit: int) -> list[int]:
        """Rowids of up to ``limit`` rows whose ``column`` holds one of ``values``."""
        if not self.tables[table].rowid or not values:
            return []
        marks = ",".join("?" * len(values))
        sql = f"SELECT rowid FROM {_q(table)} WHERE {_q(column)} IN ({marks}) LIMIT ?"
        return [r[0] for r in self.query(sql, (*values, limit)) or []]

    def sample_rowids(self, table: str, limit: int) -> list[int]:
        t = self.tables[table]
        if not t.rowid:
            return []
        return [r[0] for r in self._do(f"SELECT rowid FROM {_q(table)} LIMIT ?", (limit,))]

    def row(self, table: str, rowid: int) -> dict[str, Any]:
        cur = self._do(f"SELECT * FROM {_q(table)} WHERE rowid = ?", (rowid,))
        values = cur.fetchone()
        return dict(zip([d[0] for d in cur.description], values, strict=True)) if values else {}

    def fresh(self, table: str, column: Column, like: Any) -> Any:
        """A value not yet in a unique column, of the same kind as ``like``."""
        col = _q(column.name)
        if isinstance(like, int) or like is None:
            top = self._do(f"SELECT MAX({col}) FROM {_q(table)}").fetchone()[0]
            return (top if isinstance(top, int) else 0) + 1000
        base = str(like)
        for i in range(1, 50):
            candidate = f"{base}~{i}"
            if self._do(f"SELECT 1 FROM {_q(table)} WHERE {col} = ?", (candidate,)).fetchone() is None:
                return candidate
        return f"{base}~{len(base)}~fresh"  # deterministic; a clash makes the insert fail, and the candidate go

    def update(self, table: str, rowid: int, column: str, value: Any) -> Change:
        """Set one non-key cell; raises sqlite3.Error when a constraint forbids it."""
        old = self.row(table, rowid).get(column)
        self._do(f"UPDATE {_q(table)} SET {_q(column)} = ? WHERE rowid = ?", (value, rowid))
        return Change("update", table, rowid, column=column, old=old, new=value)

    def insert_copy(self, table: str, rowid: int, overrides: dict[str, Any] | None = None) -> Change:
        """Insert a copy of a row with fresh key and UNIQUE values (and optional changed cells)."""
        t = self.tables[table]
        values = self.row(table, rowid)
        new = dict(values)
        for c in t.columns.values():
            if c.unique or (c.pk and sum(x.pk for x in t.columns.values()) == 1):
                new[c.name] = self.fresh(table, c, values.get(c.name))
        new.update(overrides or {})
        names = list(new)
        cur = self._do(
            f"INSERT INTO {_q(table)} ({', '.join(_q(n) for n in names)}) VALUES ({', '.join('?' * len(names))})",
            [new[n] for n in names],
        )
        changed = {k: v for k, v in new.items() if values.get(k) != v or k in (overrides or {})}
        return Change("insert", table, cur.lastrowid, copy_of=rowid, values=changed, row=new)

    def delete(self, table: str, rowid: int) -> list[Change]:
        """Delete a row and, first, the rows of child tables that reference it."""
        changes: list[Change] = []
        row = self.row(table, rowid)
        for child, ccol, pcol in self.tables[table].children:
            if child == table:
                continue
            kids = (
                [r[0] for r in self._do(f"SELECT rowid FROM {_q(child)} WHERE {_q(ccol)} = ?", (row.get(pcol),))]
                if self.tables[child].rowid
                else []
            )
            for kid in kids[:50]:
                changes += self.delete(child, kid)
        self._do(f"DELETE FROM {_q(table)} WHERE rowid = ?", (rowid,))
        changes.append(Change("delete", table, rowid, row=row))
        return changes

    def close(self) -> None:
        self.conn.close()
