"""A private in-memory copy of a database to mutate, and the three mutations that keep its schema.

The user's file is opened read-only and copied page by page into ``:memory:``; every candidate
change is made inside a SAVEPOINT and rolled back. Mutations are valid by construction (fresh
primary-key and UNIQUE values for copies, children deleted with their parent) and the engine
polices the rest with ``PRAGMA foreign_keys=ON``, NOT NULL, UNIQUE and CHECK. The queries under
test run with the sandbox's read-only authorizer and a deadline, exactly as in the real run.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rose_sql.engines.sqlite import authorize, connect_read_only
from rose_sql.execute import ResultSet
from rose_sql.sql import quote_identifier as _q

Change = dict[str, Any]


@dataclass
class Column:
    """A column with what the database says and what its data shows."""

    name: str
    type: str
    notnull: bool
    pk: bool
    unique: bool = False
    has_nulls: bool = False
    has_duplicates: bool = False
    pool: list[Any] = field(default_factory=list)
    """A few distinct values of the column (its own data first)."""


@dataclass
class Table:
    """A table: its columns, keys and the foreign keys pointing at it."""

    name: str
    columns: dict[str, Column]
    rowid: bool
    children: list[tuple[str, str, str]] = field(default_factory=list)
    """(child table, child column, parent column) for each FK referencing this table."""
    parents: list[tuple[str, str, str]] = field(default_factory=list)
    """(child column, parent table, parent column) for each FK this table declares."""
    rows: int = 0


class Workspace:
    """An in-memory copy of a database, its schema and column profiles."""

    def __init__(self, db: Path, *, timeout_s: float = 1.0, max_rows: int = 10_000) -> None:
        src = connect_read_only(db)
        self.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        try:
            src.backup(self.conn)
        finally:
            src.close()
        self.conn.text_factory = lambda b: b.decode("utf-8", errors="replace")
        self.conn.execute("PRAGMA foreign_keys = ON")
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self.deadline = float("inf")
        self.hard_deadline = float("inf")
        """No statement of ours or of the queries may run past this (the item's evidence budget)."""
        self.conn.set_progress_handler(lambda: time.monotonic() > min(self.deadline, self.hard_deadline), 1000)
        self.tables = self._read_schema()

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

    def profile(self, table: str) -> bool:
        """Fill the columns' data facts (NULLs, duplicates, value pool) for one table, once.

        False when the budget ran out first: nothing is recorded, and a later item tries again.
        """
        t = self.tables[table]
        if t.rows:
            return True
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

    def run(self, sql: str) -> ResultSet | None:
        """Run an untrusted query read-only with a deadline; None when it fails or times out."""
        self.conn.set_authorizer(authorize)
        self.deadline = time.monotonic() + self.timeout_s
        try:
            cur = self.conn.execute(sql)
            cols = tuple(d[0] for d in cur.description or ())
            rows = cur.fetchmany(self.max_rows + 1)
            if len(rows) > self.max_rows:
                return None  # too large to compare soundly here
            return ResultSet(cols, tuple(rows), len(rows))
        except (sqlite3.Error, ValueError, OverflowError, MemoryError):
            return None
        finally:
            self.deadline = float("inf")
            self.conn.set_authorizer(None)

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]] | None:
        """A trusted query of ours (profiles, probes) under the same deadlines; None if it fails."""
        self.deadline = time.monotonic() + self.timeout_s
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.Error:
            return None
        finally:
            self.deadline = float("inf")

    def set_reverse_order(self, on: bool) -> None:
        self.conn.execute(f"PRAGMA reverse_unordered_selects = {int(on)}")

    # ------------------------------------------------------------------ mutations

    def begin(self) -> None:
        self.conn.execute("SAVEPOINT candidate")

    def rollback(self) -> None:
        """Undo the candidate; never interrupted, so the copy always returns to the real data."""
        saved, self.hard_deadline, self.deadline = self.hard_deadline, float("inf"), float("inf")
        try:
            self.conn.execute("ROLLBACK TO candidate")
            self.conn.execute("RELEASE candidate")
        finally:
            self.hard_deadline = saved

    def sample_rowids(self, table: str, limit: int) -> list[int]:
        t = self.tables[table]
        if not t.rowid:
            return []
        return [r[0] for r in self.conn.execute(f"SELECT rowid FROM {_q(table)} LIMIT ?", (limit,))]

    def row(self, table: str, rowid: int) -> dict[str, Any]:
        cur = self.conn.execute(f"SELECT * FROM {_q(table)} WHERE rowid = ?", (rowid,))
        values = cur.fetchone()
        return dict(zip([d[0] for d in cur.description], values, strict=True)) if values else {}

    def fresh(self, table: str, column: Column, like: Any) -> Any:
        """A value not yet in a unique column, of the same kind as ``like``."""
        col = _q(column.name)
        if isinstance(like, int) or like is None:
            top = self.conn.execute(f"SELECT MAX({col}) FROM {_q(table)}").fetchone()[0]
            return (top if isinstance(top, int) else 0) + 1000
        base = str(like)
        for i in range(1, 50):
            candidate = f"{base}~{i}"
            if self.conn.execute(f"SELECT 1 FROM {_q(table)} WHERE {col} = ?", (candidate,)).fetchone() is None:
                return candidate
        return f"{base}~{time.monotonic_ns()}"

    def update(self, table: str, rowid: int, column: str, value: Any) -> Change:
        """Set one non-key cell; raises sqlite3.Error when a constraint forbids it."""
        old = self.row(table, rowid).get(column)
        self.conn.execute(f"UPDATE {_q(table)} SET {_q(column)} = ? WHERE rowid = ?", (value, rowid))
        return {"op": "update", "table": table, "rowid": rowid, "column": column, "old": old, "new": value}

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
        cur = self.conn.execute(
            f"INSERT INTO {_q(table)} ({', '.join(_q(n) for n in names)}) VALUES ({', '.join('?' * len(names))})",
            [new[n] for n in names],
        )
        return {
            "op": "insert",
            "table": table,
            "rowid": cur.lastrowid,
            "copy_of": rowid,
            "values": {k: v for k, v in new.items() if values.get(k) != v or k in (overrides or {})},
            "row": new,
        }

    def delete(self, table: str, rowid: int) -> list[Change]:
        """Delete a row and, first, the rows of child tables that reference it."""
        changes: list[Change] = []
        row = self.row(table, rowid)
        for child, ccol, pcol in self.tables[table].children:
            if child == table:
                continue
            kids = (
                [
                    r[0]
                    for r in self.conn.execute(f"SELECT rowid FROM {_q(child)} WHERE {_q(ccol)} = ?", (row.get(pcol),))
                ]
                if self.tables[child].rowid
                else []
            )
            for kid in kids[:50]:
                changes += self.delete(child, kid)
        self.conn.execute(f"DELETE FROM {_q(table)} WHERE rowid = ?", (rowid,))
        changes.append({"op": "delete", "table": table, "rowid": rowid, "row": row})
        return changes

    def close(self) -> None:
        self.conn.close()
