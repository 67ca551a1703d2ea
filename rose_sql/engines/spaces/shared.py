"""What the spaces of PostgreSQL, MySQL/MariaDB and DuckDB share: reading the database through its engine,
and a private copy changed with SQL.

:class:`EngineReader` is their :class:`~rose_sql.engines.spaces.Space`: the gold smells read the user's
database through the engine's own sandbox (its gate, function policy and caps; they only read, so no copy
is needed), with our probes written in SQLite's syntax and rendered in the engine's dialect by sqlglot.
It cannot reverse the order of unordered rows, so the ``order_dependent`` smell is not looked for there.
For the witness search it makes, once per database, the engine's :class:`EngineSpace`: each candidate is
made inside a transaction that is rolled back, and the two queries under test run inside it through the
engine's gate and function policy with its row and byte caps. What the policy reads of the server's catalogue
is read when the copy opens, outside every candidate; a candidate whose transaction something ended before
its queries ran is the item's error, never a candidate tried on the copy without its changes.

There is no step counter on these engines: every statement has a wall-clock limit, the smaller of the
engine's ``--timeout`` and what is left of the item's evidence budget, and a statement stopped by it sets
``guard_fired`` (the evidence then says the search was stopped, and never decides a score). The
``reverse_unordered_selects`` replay of SQLite has no equivalent: the replay runs the queries again.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import sqlglot
from sqlglot import exp

from rose_sql.config import EVIDENCE_MAX_ROWS, Config
from rose_sql.engines import open_engine
from rose_sql.engines.base import Engine, TableInfo, batches, collect, policy
from rose_sql.engines.kinds import Database
from rose_sql.engines.spaces import Change, Column, Copy, Table
from rose_sql.results import Limits, ResultSet
from rose_sql.sql import gate, quote_identifier

UNBOUNDED = 2**40
"""``steps_left`` while the item's time lasts (these engines count no steps)."""


def evidence_limits(config: Config) -> Limits:
    """What one statement of the evidence may take on these engines: no statement outlasts the item's budget."""
    base = config.limits
    return replace(base, engine_timeout_s=min(base.engine_timeout_s, config.evidence_budget_s))


class EngineReader:
    """The database read through its engine, for the gold smells; the witness search's copy made on demand."""

    def __init__(self, db: Database, config: Config, make_copy: Callable[[], EngineSpace | str]) -> None:
        self.db = db
        self.dialect = db.dialect
        self.engine: Engine = open_engine(db.kind, evidence_limits(config))
        self._make_copy = make_copy
        self._copy: EngineSpace | str | None = None
        self.budget_s = config.evidence_budget_s
        self.hard_deadline = float("inf")
        self.guard_fired = False
        self.tables = {
            t.name: Table(
                t.name, {c.name: Column(c.name, c.type, c.notnull, c.name in t.primary_key) for c in t.columns}, True
            )
            for t in self.engine.describe(db)
        }

    @property
    def guard_s(self) -> float:
        return 3 * self.budget_s  # the smells, a first copy, then the search

    def prepare(self, tables: Iterable[str]) -> None:
        """Nothing: these engines count no steps, and the copy's profiles are read with the search's clock."""

    def start(self, steps: int, deadline: float) -> None:
        self.hard_deadline = deadline
        self.guard_fired = False

    def stop(self) -> None:
        self.hard_deadline = float("inf")
        if isinstance(self._copy, EngineSpace):
            self._copy.stop()
            self.guard_fired = self.guard_fired or self._copy.guard_fired
            if not self._copy.alive():  # what it found then is not the search's: the next item makes a new copy
                self._forget()

    def run(self, sql: str, steps: int | None = None) -> ResultSet | None:
        """A query in the engine's dialect, through its sandbox; None when it fails or is cut at a cap."""
        e, _ = self.engine.run(self.db, sql, "evidence")
        if e.status == "guard":
            self.guard_fired = True
        return e.result if e.result is not None and not e.result.truncated else None

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]] | None:
        """One of our probes (SQLite's syntax, ``?`` parameters), rendered in the engine's dialect."""
        rendered = render(sql, params, self.dialect)
        result = self.run(rendered) if rendered is not None else None
        return list(result.rows) if result is not None else None

    def stored(self, table: str, column: str, limit: int) -> list[tuple[str, Any]]:
        c, t = quote_identifier(column), quote_identifier(table)
        sample = self.query(f"SELECT {c} FROM {t} WHERE {c} IS NOT NULL LIMIT {int(limit)}") or []
        return [("text" if isinstance(v, str) else "other", v) for (v,) in sample]  # a column has one type here

    def reversed_run(self, sql: str) -> ResultSet | None:
        return None

    def copy(self, tables: Iterable[str]) -> Copy | str:
        if self._copy is None:
            self._copy = self._make_copy()  # why not, when not: kept for later items
        if isinstance(self._copy, str):
            return self._copy
        why = self._copy.need(tables)
        if why is not None:
            return why
        self._copy.start(min(self.hard_deadline, time.monotonic() + self.budget_s))  # its own budget, after a copy
        return self._copy

    def _forget(self) -> None:
        copy, self._copy = self._copy, None
        if isinstance(copy, EngineSpace):
            with contextlib.suppress(Exception):  # best effort: `rose db scratch --drop` cleans up
                copy.close()

    def close(self) -> None:
        self._forget()
        self.engine.close()


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
    """A private copy on an engine other than SQLite, changed with SQL that every engine reads alike;
    subclasses say how to connect, quote, name rows, time-limit a statement and open a transaction."""

    dialect: str
    errors: tuple[type[BaseException], ...]
    mark = "%s"
    """The driver's parameter marker."""
    locator = "rowid"
    """The SQL expression that names a row of the copy."""

    def __init__(
        self,
        limits: Limits,
        allowed: Callable[[str], str | None],
        *,
        max_rows: int = EVIDENCE_MAX_ROWS,
        catalog: Callable[[str, str], bool] = lambda schema, name: False,
        check: Callable[[str], str | None] | None = None,
    ) -> None:
        self.limits = limits
        self.allowed = allowed
        """Why the function of that name may not be called (the engine's policy)."""
        self.catalog = catalog
        """Whether a relation is a catalog view the engine's policy refuses (files, settings, credentials)."""
        self.check = check
        """Why a query under test may not run, as the engine's own check says on the copy's connection (the
        server must read it as sqlglot does, then the policy); None: the policy with ``allowed`` and
        ``catalog``."""
        self.max_rows = max_rows
        self.tables: dict[str, Table] = {}
        self.hard_deadline = float("inf")
        self.guard_fired = False
        self._verdicts: dict[str, str | None] = {}  # why a query under test may not run (None: it may)
        self._candidate = False  # inside a candidate's transaction (between begin and rollback)

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

    def _in_transaction(self) -> bool | None:
        """Whether the connection is inside a transaction (None: the driver does not say)."""
        return None

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

    def identity(self, sql: str) -> Hashable | None:
        """None: a wall clock bounds these engines' statements, so no answer is reproducible."""
        return None

    def need(self, tables: Iterable[str]) -> str | None:
        """Make sure the copy holds ``tables`` (names as the queries write them); why it cannot (None: it does)."""
        return None

    # ------------------------------------------------------------------ budget

    def start(self, deadline: float) -> None:
        """Begin an item: its statements stop at ``deadline`` (these engines count no steps)."""
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
        return min(self.limits.engine_timeout_s, left)

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
                verdict = gate(sql, max_chars=self.limits.max_sql_chars, dialect=self.dialect) or (
                    self.check(sql) if self.check is not None else policy(sql, self.dialect, self.allowed, self.catalog)
                )
            except self._failures:
                return None
            self._verdicts[sql] = verdict
        if self._verdicts[sql] is not None:
            return None
        if self._candidate and self._in_transaction() is False:
            # something ended the candidate's transaction (and undid its changes): its queries would read
            # the copy without them, and the search would depend on whatever did it, never a finding
            raise RuntimeError("the candidate's transaction ended before its queries ran")
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
        self._execute(self._begin_sql(), (), timeout=self.limits.engine_timeout_s)
        self._candidate = True

    def rollback(self) -> None:
        self._candidate = False
        self._execute("ROLLBACK", (), timeout=self.limits.engine_timeout_s)

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
    capped = replace(limits, max_rows=min(max_rows, limits.max_rows))
    got = collect(batches(fetchmany, capped), capped)
    return got.result(columns, 0)


def render(sql: str, params: tuple[Any, ...], dialect: str) -> str | None:
    """One of our probes, written in SQLite's syntax with ``?`` parameters, in ``dialect`` with the values
    as literals; None when sqlglot cannot read it."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.ParseError:
        return None
    values = iter(params)
    return tree.transform(lambda n: literal(next(values)) if isinstance(n, exp.Placeholder) else n).sql(dialect=dialect)


def literal(value: Any) -> exp.Expr:
    """A Python value as a SQL literal (our probes' parameters, rendered in any dialect)."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool | int | float):
        return exp.Literal.number(value)
    return exp.Literal.string(str(value))
