"""Private copies for the witness search on DuckDB, PostgreSQL and MySQL/MariaDB.

The candidates of :mod:`rose_sql.evidence.witness` are the same as on SQLite; only where they are
applied differs. :class:`EngineSpace` offers what :class:`~rose_sql.evidence.workspace.Space` asks:
each candidate is made inside a transaction that is rolled back, the two queries under test run inside it
through the engine's own gate and function policy with its row and byte caps, and the copy is never the
user's database:

- DuckDB (:class:`DuckSpace`): the file is attached read-only to an in-memory database, its tables copied
  into it and detached; then external access is turned off and the configuration locked, as on the
  engine's own connections. Rows are named by DuckDB's ``rowid``.
- PostgreSQL and MySQL/MariaDB (:mod:`rose_sql.evidence.scratch`): a scratch database that rose creates
  and drops, into which the tables the queries read (and their foreign-key parents) are copied.

There is no step counter on these engines: every statement has a wall-clock limit, the smaller of the
engine's ``--timeout`` and what is left of the item's evidence budget, and a statement stopped by it sets
``guard_fired`` (the evidence then says the search was stopped, and never decides a score). The
``reverse_unordered_selects`` replay of SQLite has no equivalent: the replay runs the queries again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from rose_sql.config import Config
from rose_sql.engines.base import ColumnInfo, Limits, TableInfo, batches, collect, policy
from rose_sql.engines.source import Remote
from rose_sql.evidence.findings import Change
from rose_sql.evidence.probe import render
from rose_sql.evidence.workspace import Column, Table
from rose_sql.execute import ResultSet
from rose_sql.sql import gate

UNBOUNDED = 2**40
"""``steps_left`` while the item's time lasts (these engines count no steps)."""


class _Skip(Exception):
    """This module's signal: the copy cannot be made (too large, too slow); :func:`open_space` returns why."""


def open_space(db: Remote, config: Config) -> EngineSpace | str:
    """A private copy of ``db`` for the witness search, or why there is none (recorded on the item)."""
    base = Limits.of(config)  # no statement of the search may outlast the item's budget
    limits = Limits(min(base.timeout_s, config.evidence_budget_s), base.max_rows, base.max_bytes, base.max_sql_chars)
    if db.kind == "duckdb":
        try:
            return DuckSpace(
                db.target, limits, max_bytes=config.evidence_max_db_bytes, copy_seconds=config.evidence_budget_s
            )
        except _Skip as e:
            return str(e)
        except Exception as e:  # unreadable now: the item says so
            return f"the database could not be copied: {type(e).__name__}: {e}"
    if config.evidence_scratch is None:
        return (
            f"it changes a private copy of the database, and on {db.kind} that copy lives in a scratch database: "
            "give --evidence-scratch URL (a server and role where rose may create and drop databases)"
        )
    from rose_sql.evidence.scratch import server_space

    return server_space(db, config.evidence_scratch, config, limits)


def tables_of(infos: Sequence[TableInfo], unique: Iterable[tuple[str, str]] = ()) -> dict[str, Table]:
    """The witness search's view of tables read from an engine's catalogue; ``unique``: (table, column) of
    each single-column UNIQUE constraint."""
    tables: dict[str, Table] = {}
    uniques = set(unique)
    for info in infos:
        pk = set(info.primary_key)
        cols = {c.name: Column(c.name, c.type.upper(), c.notnull, c.name in pk) for c in info.columns}
        if len(pk) == 1 and next(iter(pk)) in cols:
            cols[next(iter(pk))].unique = True
        for c in cols.values():
            c.unique = c.unique or (info.name, c.name) in uniques
        tables[info.name] = Table(info.name, cols, rowid=True)
    by_lower = {n.lower(): n for n in tables}
    for info in infos:
        for col, parent_name, pcol in info.foreign_keys:
            parent = by_lower.get(parent_name.lower())
            if parent is None or col not in tables[info.name].columns:
                continue
            tables[info.name].parents.append((col, parent, pcol))
            tables[parent].children.append((info.name, col, pcol))
    return tables


class EngineSpace:
    """A private copy on an engine other than SQLite (see the module docstring); subclasses say how to
    connect, quote, name rows, time-limit a statement and open a transaction."""

    dialect: str
    errors: tuple[type[BaseException], ...]
    mark = "%s"
    """The driver's parameter marker."""
    locator = "rowid"
    """The SQL expression that names a row of the copy."""

    def __init__(self, limits: Limits, allowed: Callable[[str], str | None], *, max_rows: int = 10_000) -> None:
        self.limits = limits
        self.allowed = allowed
        """Why the function of that name may not be called (the engine's policy)."""
        self.max_rows = max_rows
        self.tables: dict[str, Table] = {}
        self.hard_deadline = float("inf")
        self.guard_fired = False
        self._verdicts: dict[str, str | None] = {}  # why a query under test may not run (None: it may)

    # ------------------------------------------------------------------ to implement

    def _execute(self, sql: str, params: Sequence[Any] = (), *, timeout: float) -> tuple[list[str], list[Any]]:
        """Run a statement of ours: its column names and rows (none for a write)."""
        raise NotImplementedError

    def _untrusted(self, sql: str, timeout: float) -> ResultSet:
        """Run a query under test (already gated and checked) with the caps; raises on failure."""
        raise NotImplementedError

    def _is_timeout(self, e: BaseException) -> bool:
        raise NotImplementedError

    def _begin_sql(self) -> str:
        return "BEGIN"

    def _rid(self, native: Any) -> int:
        return int(native)

    def _native(self, rid: int) -> Any:
        return rid

    def quote(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def close(self) -> None:
        raise NotImplementedError

    def alive(self) -> bool:
        """Whether the copy can still be used (a server's connection can be lost)."""
        return True

    def need(self, tables: Iterable[str]) -> str | None:
        """Make sure the copy holds ``tables`` (names as the queries write them); why it cannot (None: it does)."""
        return None

    # ------------------------------------------------------------------ budget

    def start(self, deadline: float) -> None:
        """Begin an item: its statements stop at ``deadline`` (the wall-clock guard)."""
        self.hard_deadline = deadline
        self.guard_fired = False

    def stop(self) -> None:
        self.hard_deadline = float("inf")

    @property
    def steps_left(self) -> int:
        if time.monotonic() >= self.hard_deadline:
            self.guard_fired = True
            return 0
        return UNBOUNDED

    def _timeout(self) -> float:
        left = self.hard_deadline - time.monotonic()
        if left <= 0:
            self.guard_fired = True
            raise TimeoutError("the evidence budget is spent")
        return min(self.limits.timeout_s, left)

    def _ours(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[str], list[Any]]:
        try:
            return self._execute(sql, params, timeout=self._timeout())
        except self.errors as e:
            if self._is_timeout(e):
                self.guard_fired = True
            raise

    @property
    def _failures(self) -> tuple[type[BaseException], ...]:
        return (*self.errors, ValueError, OverflowError, MemoryError, TimeoutError)

    # ------------------------------------------------------------------ reading

    def table_of(self, name: str) -> Table | None:
        return next((t for n, t in self.tables.items() if n.lower() == name.lower()), None)

    def profile(self, table: str) -> bool:
        t = self.tables[table]
        if t.rows:
            return True
        facts = []
        for c in t.columns.values():
            col, tab = self.quote(c.name), self.quote(table)
            nulls = self._plain(f"SELECT 1 FROM {tab} WHERE {col} IS NULL LIMIT 1")
            dups = self._plain(
                f"SELECT 1 FROM {tab} WHERE {col} IS NOT NULL GROUP BY {col} HAVING COUNT(*) > 1 LIMIT 1"
            )
            # in the order the values first occur, as SQLite's DISTINCT gives them (the same candidates)
            pool = self._plain(
                f"SELECT {col} FROM {tab} WHERE {col} IS NOT NULL GROUP BY {col} ORDER BY MIN({self.locator}) LIMIT 8"
            ) or self._plain(f"SELECT DISTINCT {col} FROM {tab} WHERE {col} IS NOT NULL ORDER BY 1 LIMIT 8")
            if nulls is None or dups is None or pool is None:
                return False
            facts.append((c, bool(nulls), bool(dups), [r[0] for r in pool]))
        count = self._plain(f"SELECT COUNT(*) FROM {self.quote(table)}")
        if count is None:
            return False
        for c, nulls_, dups_, pool_ in facts:
            c.has_nulls, c.has_duplicates, c.pool = nulls_, dups_, pool_
        t.rows = count[0][0] or 1
        return True

    def _plain(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]] | None:
        try:
            return [tuple(r) for r in self._ours(sql, params)[1]]
        except self._failures:
            return None

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]] | None:
        """One of our probes, written in SQLite's syntax with ``?`` parameters (values become literals)."""
        rendered = render(sql, params, self.dialect)
        return self._plain(rendered) if rendered is not None else None

    def run(self, sql: str, steps: int | None = None) -> ResultSet | None:
        """A query under test, through the engine's gate and function policy, within the caps and the time
        left; None when it is refused, fails, is stopped or is too large to compare soundly."""
        if sql not in self._verdicts:
            if len(self._verdicts) > 1000:  # an item's two queries are asked for many times, then never again
                self._verdicts.clear()
            try:  # the policy may read the catalogue: in a failed transaction it cannot, and we ask again later
                verdict = gate(sql, max_chars=self.limits.max_sql_chars, dialect=self.dialect) or policy(
                    sql, self.dialect, self.allowed
                )
            except self._failures:
                return None
            self._verdicts[sql] = verdict
        if self._verdicts[sql] is not None:
            return None
        try:
            result = self._untrusted(sql, self._timeout())
        except TimeoutError:
            return None
        except self._failures as e:
            if self._is_timeout(e):
                self.guard_fired = True
            return None
        return None if result.truncated else result

    def set_reverse_order(self, on: bool) -> None:
        """No engine here can return unordered rows reversed: the replay runs the queries again."""

    # ------------------------------------------------------------------ mutations

    def begin(self) -> None:
        self._execute(self._begin_sql(), (), timeout=self.limits.timeout_s)

    def rollback(self) -> None:
        self._execute("ROLLBACK", (), timeout=self.limits.timeout_s)

    def _where(self) -> str:
        return f"{self.locator} = {self.mark}"

    def sample_rowids(self, table: str, limit: int) -> list[int]:
        rows = self._ours(f"SELECT {self.locator} FROM {self.quote(table)} LIMIT {int(limit)}")[1]
        return [self._rid(r[0]) for r in rows]

    def rowids_where(self, table: str, column: str, values: list[Any], limit: int) -> list[int]:
        if not values:
            return []
        marks = ", ".join([self.mark] * len(values))
        where = f"{self.quote(column)} IN ({marks})"
        sql = f"SELECT {self.locator} FROM {self.quote(table)} WHERE {where} LIMIT {int(limit)}"
        try:
            rows = self._ours(sql, values)[1]
        except self.errors:
            # a value of another type than the column's (a text compared with a number): try them one by one
            rows = []
            for v in values:
                one = f"SELECT {self.locator} FROM {self.quote(table)} WHERE {self.quote(column)} = {self.mark} LIMIT 1"
                try:
                    rows += self._ours(one, (v,))[1]
                except self.errors:
                    continue
        return [self._rid(r[0]) for r in rows][:limit]

    def row(self, table: str, rowid: int) -> dict[str, Any]:
        cols, rows = self._ours(f"SELECT * FROM {self.quote(table)} WHERE {self._where()}", (self._native(rowid),))
        return dict(zip(cols, rows[0], strict=True)) if rows else {}

    def fresh(self, table: str, column: Column, like: Any) -> Any:
        col, tab = self.quote(column.name), self.quote(table)
        if isinstance(like, int) or like is None:
            top = self._ours(f"SELECT MAX({col}) FROM {tab}")[1][0][0]
            return (top if isinstance(top, int) else 0) + 1000
        base = str(like)
        for i in range(1, 50):
            candidate = f"{base}~{i}"
            if not self._ours(f"SELECT 1 FROM {tab} WHERE {col} = {self.mark}", (candidate,))[1]:
                return candidate
        return f"{base}~{len(base)}~fresh"

    def update(self, table: str, rowid: int, column: str, value: Any) -> Change:
        old = self.row(table, rowid).get(column)
        self._ours(
            f"UPDATE {self.quote(table)} SET {self.quote(column)} = {self.mark} WHERE {self._where()}",
            (value, self._native(rowid)),
        )
        return Change("update", table, rowid, column=column, old=old, new=value)

    def insert_copy(self, table: str, rowid: int, overrides: dict[str, Any] | None = None) -> Change:
        t = self.tables[table]
        values = self.row(table, rowid)
        if not values:
            raise KeyError(f"{table} has no row {rowid}")
        new = dict(values)
        for c in t.columns.values():
            if c.unique or (c.pk and sum(x.pk for x in t.columns.values()) == 1):
                new[c.name] = self.fresh(table, c, values.get(c.name))
        new.update(overrides or {})
        names = list(new)
        self._ours(
            f"INSERT INTO {self.quote(table)} ({', '.join(self.quote(n) for n in names)}) "
            f"VALUES ({', '.join([self.mark] * len(names))})",
            [new[n] for n in names],
        )
        changed = {k: v for k, v in new.items() if values.get(k) != v or k in (overrides or {})}
        return Change("insert", table, None, copy_of=rowid, values=changed, row=new)

    def delete(self, table: str, rowid: int) -> list[Change]:
        changes: list[Change] = []
        row = self.row(table, rowid)
        for child, ccol, pcol in self.tables[table].children:
            if child == table:
                continue
            sql = f"SELECT {self.locator} FROM {self.quote(child)} WHERE {self.quote(ccol)} = {self.mark} LIMIT 50"
            for (kid,) in self._ours(sql, (row.get(pcol),))[1]:
                if kid is None:  # a copy inserted by this candidate (no name): a constraint will say
                    continue
                changes += self.delete(child, self._rid(kid))
        self._ours(f"DELETE FROM {self.quote(table)} WHERE {self._where()}", (self._native(rowid),))
        changes.append(Change("delete", table, rowid, row=row))
        return changes


def fetch_capped(
    fetchmany: Callable[[int], Sequence[Sequence[Any]]], columns: tuple[str, ...], limits: Limits, max_rows: int
) -> ResultSet:
    """A result fetched in batches up to the caps (truncated past them: too large to compare here)."""
    capped = Limits(limits.timeout_s, min(max_rows, limits.max_rows), limits.max_bytes, limits.max_sql_chars)
    got = collect(batches(fetchmany, 1000), capped)
    return got.result(columns, 0)


class DuckSpace(EngineSpace):
    """An in-memory DuckDB copy of a DuckDB file (see the module docstring).

    The copy's tables keep their columns' types, NOT NULL, primary keys, UNIQUE and CHECK constraints,
    but not their foreign keys: DuckDB refuses to update any row another table references inside a
    transaction (its documented foreign-key limitations), which would forbid most candidates. The
    foreign keys are checked here instead (:meth:`_check`): a change that leaves a child without its
    parent fails, as the engine would make it fail.
    """

    dialect = "duckdb"
    mark = "?"
    locator = "rowid"

    def __init__(self, path: str, limits: Limits, *, max_bytes: int, copy_seconds: float) -> None:
        import duckdb

        from rose_sql.engines.duckdb import MEMORY_LIMIT, DuckDB, _Conn, _Watchdog, functions_of, quote

        self.errors = (duckdb.Error,)
        size = Path(path).stat().st_size
        if size > max_bytes:
            raise _Skip(f"database larger than {max_bytes // 2**20} MiB")
        conn = duckdb.connect(
            ":memory:",
            config={
                "threads": 1,
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
                "memory_limit": MEMORY_LIMIT,
                "temp_directory": "",
            },
        )
        self._watchdog = _Watchdog()
        self._conn = _Conn(conn, {})
        unique: list[tuple[str, str]] = []
        try:
            conn.execute("ATTACH '" + path.replace("'", "''") + "' AS rose_source (READ_ONLY)")
            infos = self._describe(unique)
            self._watchdog.arm(self._conn, copy_seconds)
            try:
                for info, ddl in infos:
                    conn.execute(ddl)
                    conn.execute(f"INSERT INTO {quote(info.name)} SELECT * FROM rose_source.main.{quote(info.name)}")
            except duckdb.InterruptException:
                raise _Skip(f"copying the database took longer than {copy_seconds:g} s") from None
            finally:
                self._watchdog.disarm(self._conn)
            conn.execute("DETACH rose_source")
            conn.execute("SET enable_external_access = false")
            conn.execute("SET lock_configuration = true")
            self._conn.functions = functions_of(conn)
        except BaseException:
            conn.close()
            raise
        engine = DuckDB(limits)
        super().__init__(limits, lambda name: engine._allowed(self._conn, name))
        self.tables = tables_of([info for info, _ in infos], unique)

    def _describe(self, unique: list[tuple[str, str]]) -> list[tuple[TableInfo, str]]:
        """The source's tables, and the DDL of each one's copy (its constraints but the foreign keys)."""
        from rose_sql.engines.duckdb import quote

        c = self._conn.conn
        out = []
        for (t,) in c.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'rose_source' AND schema_name = 'main' "
            "ORDER BY table_name"
        ).fetchall():
            cols = c.execute(
                "SELECT column_name, data_type, NOT is_nullable FROM duckdb_columns() WHERE database_name = "
                "'rose_source' AND schema_name = 'main' AND table_name = ? ORDER BY column_index",
                [t],
            ).fetchall()
            pk: tuple[str, ...] = ()
            fks: list[tuple[str, str, str]] = []
            parts = [f"{quote(n)} {ty}{' NOT NULL' if nn else ''}" for n, ty, nn in cols]
            for kind, text, names, ref_table, ref_cols in c.execute(
                "SELECT constraint_type, constraint_text, constraint_column_names, referenced_table, "
                "referenced_column_names FROM duckdb_constraints() WHERE database_name = 'rose_source' "
                "AND schema_name = 'main' AND table_name = ? ORDER BY constraint_index",
                [t],
            ).fetchall():
                if kind in ("PRIMARY KEY", "UNIQUE", "CHECK"):
                    parts.append(text)
                if kind == "PRIMARY KEY":
                    pk = tuple(names)
                elif kind == "UNIQUE" and len(names) == 1:
                    unique.append((t, names[0]))
                elif kind == "FOREIGN KEY" and ref_table and len(names) == 1:
                    fks += [(names[0], ref_table, (ref_cols or [names[0]])[0])]
            info = TableInfo(t, tuple(ColumnInfo(n, ty, bool(nn)) for n, ty, nn in cols), pk, tuple(fks))
            out.append((info, f"CREATE TABLE {quote(t)} ({', '.join(parts)})"))
        return out

    def _check(self, change: Change) -> None:
        """Raise ValueError when ``change`` leaves a child row without its parent (the foreign keys)."""
        t = self.tables[change.table]
        cells: dict[str, Any] = {}
        if change.op == "update" and change.column is not None:
            cells = {change.column: change.new}
        elif change.op == "insert":
            cells = dict(change.row or {})
        for col, parent, pcol in t.parents:
            v = cells.get(col)
            if col in cells and v is not None:
                sql = f"SELECT 1 FROM {self.quote(parent)} WHERE {self.quote(pcol)} = ? LIMIT 1"
                if not self._ours(sql, (v,))[1]:
                    raise ValueError(f"foreign key {change.table}.{col}: no {parent} row has {pcol} = {v!r}")
        gone: dict[str, Any] = {}
        if change.op == "update" and change.column is not None:
            gone = {change.column: change.old}
        elif change.op == "delete":
            gone = dict(change.row or {})
        for child, ccol, pcol in t.children:
            v = gone.get(pcol)
            if pcol not in gone or v is None:
                continue
            still = f"SELECT 1 FROM {self.quote(t.name)} WHERE {self.quote(pcol)} = ? LIMIT 1"
            if self._ours(still, (v,))[1]:
                continue  # another parent row holds the value
            sql = f"SELECT 1 FROM {self.quote(child)} WHERE {self.quote(ccol)} = ? LIMIT 1"
            if self._ours(sql, (v,))[1]:
                raise ValueError(f"foreign key {child}.{ccol}: a row still refers to {t.name}.{pcol} = {v!r}")

    def update(self, table: str, rowid: int, column: str, value: Any) -> Change:
        change = super().update(table, rowid, column, value)
        self._check(change)
        return change

    def insert_copy(self, table: str, rowid: int, overrides: dict[str, Any] | None = None) -> Change:
        change = super().insert_copy(table, rowid, overrides)
        self._check(change)
        return change

    def delete(self, table: str, rowid: int) -> list[Change]:
        changes = super().delete(table, rowid)
        self._check(changes[-1])
        return changes

    def _execute(self, sql: str, params: Sequence[Any] = (), *, timeout: float) -> tuple[list[str], list[Any]]:
        c = self._conn.conn
        self._watchdog.arm(self._conn, timeout)
        try:
            c.execute(sql, list(params) if params else None)
            cols = [d[0] for d in c.description or ()]
            return cols, c.fetchall() if c.description else []
        finally:
            self._watchdog.disarm(self._conn)

    def _untrusted(self, sql: str, timeout: float) -> ResultSet:
        c = self._conn.conn
        self._watchdog.arm(self._conn, timeout)
        try:
            c.execute(sql)
            return fetch_capped(c.fetchmany, tuple(d[0] for d in c.description or ()), self.limits, self.max_rows)
        finally:
            self._watchdog.disarm(self._conn)

    def _is_timeout(self, e: BaseException) -> bool:
        import duckdb

        return isinstance(e, duckdb.InterruptException)

    def _begin_sql(self) -> str:
        return "BEGIN TRANSACTION"

    def close(self) -> None:
        self._conn.conn.close()
