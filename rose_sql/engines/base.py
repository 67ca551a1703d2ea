"""The protocol of an engine other than SQLite, and what the three share: pooled connections, the
function policy, capped fetching and values made comparable.

An :class:`Engine` opens read-only connections to a :class:`~rose_sql.engines.source.Remote` database
(pooled: one per database, role and thread), runs one statement with limits and gives back the same
:class:`~rose_sql.execute.Execution` the SQLite sandbox gives, cancels what runs, and describes the
schema. :class:`Pooled` implements the parts they share; each engine's module says how it connects,
what its policy allows and how it ends a statement (rolled back, the session reset).

What every engine does with an untrusted statement, in order:

1. the gate (:func:`rose_sql.sql.gate` in the engine's dialect): exactly one SELECT / WITH / VALUES;
2. the policy (:func:`policy`): sqlglot must read it in the engine's dialect; no ``INTO``, no write
   anywhere in it (a data-modifying CTE), no row locks, no MySQL user-variable assignment; every
   function it calls must be one the engine's catalogue says has no side effect (see each engine);
3. a read-only transaction with the engine's own time limit, rows fetched against the row and byte caps;
4. a rollback and a reset of the session, so nothing a statement did outlives it.

Values: Decimal, float, date and time, bool stay as the driver gives them (the official mini-dev script
compares them so, with Python's ``==``); lists become tuples and mappings their JSON text, so that
results can be hashed (``ResultSet.unhashable`` says so: the official script's ``set()`` raises there).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from datetime import time as dtime
from decimal import Decimal
from typing import Any, Generic, Protocol, TypeVar
from uuid import UUID

from sqlglot import exp

from rose_sql.config import Config
from rose_sql.engines.source import Kind, Remote, Source
from rose_sql.execute import UNREADABLE, Execution, ResultSet, Row, engine_timeout
from rose_sql.sql import gate, query

C = TypeVar("C")
_CELL_BYTES = 16
_PLAIN = frozenset({int, float, str, bytes, bool, Decimal, date, datetime, dtime, timedelta, UUID, type(None)})
WRITES = (exp.Into, exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.Create, exp.Drop, exp.Command, exp.Set)
"""Nodes that write or change the session, wherever they sit in a statement."""
DENIED_NODES = (*WRITES, exp.Lock, exp.PropertyEQ, exp.NextValueFor, exp.ReadCSV, exp.ReadParquet, exp.ToFile)
"""Writes, row locks (``FOR UPDATE``), ``@v := x`` (MySQL's; elsewhere sqlglot also reads a struct's fields
so), sequences and file access by sqlglot's name for them."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one statement may take on an engine (from :class:`~rose_sql.config.Config`)."""

    timeout_s: float
    """The engine's own wall-clock limit (``statement_timeout``, ``max_statement_time``, an interrupt)."""
    max_rows: int
    """Rows kept; past them the result is truncated (and the rest counted)."""
    max_bytes: int
    """Approximate bytes of cell data kept."""
    max_sql_chars: int
    """Longer SQL is rejected before it reaches a parser."""

    @classmethod
    def of(cls, config: Config) -> Limits:
        return cls(engine_timeout(config), config.max_rows, config.max_result_bytes, config.max_sql_chars)


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    """A column as an engine's catalogue describes it."""

    name: str
    type: str
    notnull: bool = False


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A table as the judges and the evidence see it, read from the engine."""

    name: str
    columns: tuple[ColumnInfo, ...]
    primary_key: tuple[str, ...] = ()
    foreign_keys: tuple[tuple[str, str, str], ...] = ()
    """(column, referenced table, referenced column)."""
    examples: dict[str, list[Any]] = field(default_factory=dict)
    """Distinct short values among each column's first 50 non-NULL values, in order."""

    def ddl(self, quote: Callable[[str], str]) -> str:
        """A CREATE TABLE statement for this table, in the engine's quoting."""
        lines = [f"    {quote(c.name)} {c.type}{' NOT NULL' if c.notnull else ''}" for c in self.columns]
        if self.primary_key:
            lines.append(f"    PRIMARY KEY ({', '.join(quote(c) for c in self.primary_key)})")
        for col, table, ref in self.foreign_keys:
            lines.append(f"    FOREIGN KEY ({quote(col)}) REFERENCES {quote(table)} ({quote(ref)})")
        return f"CREATE TABLE {quote(self.name)} (\n" + ",\n".join(lines) + "\n)"


class Engine(Protocol):
    """What the sandbox, the judges' schema reader and the evidence stage need of a database engine."""

    @property
    def kind(self) -> Kind:
        """``postgresql``, ``mysql`` (MySQL and MariaDB) or ``duckdb``."""
        ...

    @property
    def dialect(self) -> str:
        """sqlglot's name of its SQL dialect (``postgres``, ``mysql``, ``duckdb``)."""
        ...

    def version(self, db: Remote) -> str:
        """The server's (or library's) name and version, as recorded on items and in the manifest."""
        ...

    def exists(self, db: Remote) -> bool:
        """Whether the database exists (False only when the engine says so; an unreachable server is
        True here and ``unreadable`` when a statement runs)."""
        ...

    def run(self, db: Remote, sql: str, role: str) -> tuple[Execution, int]:
        """Run one untrusted statement on the pooled connection of ``role``, within the limits:
        the execution and the bytes its result holds. Never raises for the statement's problems."""
        ...

    def cancel(self) -> None:
        """Stop every statement this engine is running (from any thread)."""
        ...

    def describe(self, db: Remote) -> list[TableInfo]:
        """The tables of the database (or, in a shared one, every table), with example values."""
        ...

    def can_write(self, db: Remote) -> str | None:
        """Why the URL's role could change the database (None when it cannot), for a warning."""
        ...

    def close(self) -> None:
        """Close every connection."""
        ...


# --------------------------------------------------------------------------- the function policy


def policy(sql: str, dialect: str, allowed: Callable[[str], str | None]) -> str | None:
    """Why ``sql`` may not run on this engine (None: it may). ``allowed(name)`` says why a function
    called by name may not be called (None: it may)."""
    tree = query(sql, dialect).parsed
    if tree.error is not None:
        return f"it cannot be read as {dialect} SQL, so its functions cannot be checked: {tree.error}"
    for statement in tree.statements:
        if statement is None:
            continue
        for node in statement.walk():
            if isinstance(node, DENIED_NODES) and (dialect == "mysql" or not isinstance(node, exp.PropertyEQ)):
                return f"{_node_name(node)} is not allowed"
            if isinstance(node, exp.Anonymous):
                why = allowed(node.name.lower())
                if why is not None:
                    return f"function {node.name}: {why}"
    return None


def _node_name(node: exp.Expr) -> str:
    names = {
        exp.Into: "INTO",
        exp.Lock: "a row lock (FOR UPDATE / FOR SHARE)",
        exp.PropertyEQ: "assigning a variable (:=)",
        exp.NextValueFor: "advancing a sequence",
    }
    for cls, name in names.items():
        if isinstance(node, cls):
            return name
    return type(node).__name__.upper()


def examples(values: Iterable[Any]) -> list[Any]:
    """The distinct values among a column's sample, in order, long text cut (the judges' examples)."""
    seen: list[Any] = []
    for v in values:
        v = v[:60] + "…" if isinstance(v, str) and len(v) > 60 else v
        if v not in seen:
            seen.append(v)
    return seen


# --------------------------------------------------------------------------- results


def plain(value: Any) -> tuple[Any, bool]:
    """A hashable value equal to ``value`` by our rules, and whether it had to be changed to be hashable."""
    if isinstance(value, list | tuple):
        return tuple(plain(v)[0] for v in value), True
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False), True
    if isinstance(value, memoryview | bytearray):
        return bytes(value), False
    try:
        hash(value)
    except TypeError:
        return str(value), True
    return value, False


def batches(fetchmany: Callable[[int], Sequence[Sequence[Any]]], size: int) -> Iterator[Sequence[Sequence[Any]]]:
    """A DB-API cursor's rows, ``size`` at a time, until it has no more."""
    while batch := fetchmany(size):
        yield batch


def collect(batches: Iterable[Sequence[Sequence[Any]]], limits: Limits) -> Collected:
    """Rows from the driver's batches, up to the row and byte caps."""
    rows: list[Row] = []
    nbytes, unhashable = 0, False
    for batch in batches:
        for i, raw in enumerate(batch):
            row = tuple(raw)
            size = _CELL_BYTES * len(row)
            fixed = False
            for v in row:
                t = type(v)
                if t is str or t is bytes:
                    size += len(v)
                elif t not in _PLAIN:
                    fixed = True
            if fixed:
                cells = [plain(v) for v in row]
                row = tuple(c for c, _ in cells)
                unhashable = unhashable or any(u for _, u in cells)
                size += sum(len(c) for c in row if isinstance(c, str | bytes))
            if len(rows) >= limits.max_rows or nbytes + size > limits.max_bytes:
                return Collected(rows, nbytes, True, unhashable, len(batch) - i)
            rows.append(row)
            nbytes += size
    return Collected(rows, nbytes, False, unhashable, 0)


@dataclass(frozen=True, slots=True)
class Collected:
    """What :func:`collect` kept."""

    rows: list[Row]
    nbytes: int
    truncated: bool
    unhashable: bool
    past: int
    """Rows already fetched past the cap (the first row that did not fit, and the rest of its batch)."""

    def result(self, columns: tuple[str, ...], rest: int | None) -> ResultSet:
        """The result set, with ``rest`` rows counted past the fetched ones (None: the count stopped)."""
        count = len(self.rows) + self.past + (rest or 0)
        return ResultSet(columns, tuple(self.rows), count, self.truncated, rest is not None, unhashable=self.unhashable)


# --------------------------------------------------------------------------- pooled connections


@dataclass
class Failure:
    """How an engine classifies an exception raised while a statement ran."""

    status: str
    """``error`` (the statement's fault), ``guard`` (the engine's time limit), ``unreadable`` (the
    database or server's fault: gone away, refused, missing)."""
    message: str
    broken: bool = False
    """Whether the connection must be dropped (it is reopened for the next statement)."""


class Pooled(Generic[C]):
    """Connections kept per (database, role, thread), and the run skeleton the engines share.

    Subclasses implement :meth:`_connect`, :meth:`_statement`, :meth:`_end`, :meth:`_close_conn`,
    :meth:`_classify`, :meth:`_allowed` and :meth:`_interrupt`.
    """

    kind: Kind
    dialect: str

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: dict[int, C] = {}
        self._running: dict[int, C] = {}
        self._versions: dict[str, str] = {}

    # ------------------------------------------------------------------ to implement

    def _connect(self, db: Remote) -> C:
        raise NotImplementedError

    def _statement(self, conn: C, sql: str) -> tuple[ResultSet, int]:
        """Run ``sql`` (already gated and checked) in a read-only transaction and fetch it capped."""
        raise NotImplementedError

    def _end(self, conn: C) -> None:
        """Roll back and reset the session after a statement (raises when the connection is broken)."""
        raise NotImplementedError

    def _close_conn(self, conn: C) -> None:
        raise NotImplementedError

    def _classify(self, e: BaseException) -> Failure:
        raise NotImplementedError

    def _allowed(self, conn: C, name: str) -> str | None:
        """Why the function ``name`` may not be called on this connection's database (None: it may)."""
        raise NotImplementedError

    def _interrupt(self, conn: C) -> None:
        """Stop the statement running on ``conn`` (called from another thread)."""
        raise NotImplementedError

    def _version(self, conn: C) -> str:
        raise NotImplementedError

    # ------------------------------------------------------------------ shared

    def conn(self, db: Remote, role: str = "pred") -> C:
        """This thread's open connection to ``db`` for ``role`` (opened on first use)."""
        conns: dict[tuple[str, str], C] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        key = (db.target, role)
        c = conns.get(key)
        if c is None:
            c = conns[key] = self._connect(db)
            with self._lock:
                self._all[id(c)] = c
        return c

    def drop(self, db: Remote, role: str) -> None:
        """Forget (and close) this thread's connection to ``db`` for ``role``."""
        conns: dict[tuple[str, str], C] = getattr(self._local, "conns", {})
        c = conns.pop((db.target, role), None)
        if c is not None:
            with self._lock:
                self._all.pop(id(c), None)
            with contextlib.suppress(Exception):  # a broken connection may fail to close: it is gone either way
                self._close_conn(c)

    def version(self, db: Remote) -> str:
        with self._lock:
            known = self._versions.get(db.target)
        if known is None:
            known = self._version(self.conn(db))
            with self._lock:
                self._versions[db.target] = known
        return known

    def run(self, db: Remote, sql: str, role: str) -> tuple[Execution, int]:
        start = time.monotonic()
        reason = gate(sql, max_chars=self.limits.max_sql_chars, dialect=self.dialect)
        if reason is not None:
            return Execution("rejected", 0.0, error=reason), 0
        try:
            c = self.conn(db, role)
        except Exception as e:
            failure = self._classify(e)
            return Execution("unreadable", time.monotonic() - start, error=f"{UNREADABLE}: {failure.message}"), 0
        why = policy(sql, self.dialect, lambda name: self._allowed(c, name))
        if why is not None:
            return Execution("rejected", time.monotonic() - start, error=f"{why} (only reading is allowed)"), 0
        me = threading.get_ident()
        with self._lock:
            self._running[me] = c
        try:
            result, nbytes = self._statement(c, sql)
            outcome = Execution("ok", time.monotonic() - start, result=result)
        except Exception as e:
            failure = self._classify(e)
            outcome, nbytes = self._failed(failure, start), 0
            if failure.broken:
                self.drop(db, role)
                return outcome, 0
        finally:
            with self._lock:
                self._running.pop(me, None)
        try:
            self._end(c)
        except Exception as e:  # the session could not be reset: never reuse it
            self.drop(db, role)
            if outcome.ok:
                failure = self._classify(e)
                return self._failed(Failure("unreadable", failure.message), start), 0
        return outcome, nbytes

    def _failed(self, failure: Failure, start: float) -> Execution:
        elapsed = time.monotonic() - start
        if failure.status == "guard":
            text = (
                f"stopped by the {self.kind} time limit after {self.limits.timeout_s:g} s (--timeout; wall-clock: "
                "servers have no step counter, so wall time never decides a score)"
            )
            return Execution("guard", elapsed, error=text, limit="wall")
        if failure.status == "unreadable":
            return Execution("unreadable", elapsed, error=f"{UNREADABLE}: {failure.message}")
        if failure.status == "rejected":
            return Execution("rejected", elapsed, error=f"{failure.message} (only reading is allowed)")
        return Execution("error", elapsed, error=failure.message)

    def cancel(self) -> None:
        with self._lock:
            running = list(self._running.values())
        for c in running:
            with contextlib.suppress(Exception):  # best effort: the engine's own time limit still holds
                self._interrupt(c)

    def close(self) -> None:
        self.cancel()
        with self._lock:
            conns, self._all = list(self._all.values()), {}
        for c in conns:
            with contextlib.suppress(Exception):
                self._close_conn(c)
        self._local = threading.local()


def engine_for(kind: Kind, config: Config) -> Engine:
    """A new engine of ``kind`` with the limits of ``config``; raises UsageError naming the extra to
    install when the engine's client library is missing."""
    from rose_sql.engines.source import EXTRAS
    from rose_sql.errors import UsageError

    module, extra = EXTRAS[kind]
    try:
        __import__(module)
    except ImportError:
        raise UsageError(f"{kind} needs the {module} client library: pip install 'rose-sql[{extra}]'") from None
    limits = Limits.of(config)
    if kind == "postgresql":
        from rose_sql.engines.postgres import PostgreSQL

        return PostgreSQL(limits)
    if kind == "mysql":
        from rose_sql.engines.mysql import MySQL

        return MySQL(limits)
    from rose_sql.engines.duckdb import DuckDB

    return DuckDB(limits)


def writable_warning(source: Source, db_id: str, config: Config) -> str | None:
    """A warning when the URL's role could change its database, with the command that makes a read-only
    role (None when it cannot write, or the server cannot be asked now)."""
    engine = engine_for(source.kind, config)
    try:
        why = engine.can_write(source.locate(db_id))
    except Exception:  # unreachable now: every statement will say so
        return None
    finally:
        engine.close()
    if why is None:
        return None
    return (
        f"{source.shown}: {why}. Queries run read-only and rolled back, but a role that cannot write is the "
        f"safer guard; create one with: rose db reader {source.shown} --name rose_reader "
        "(then put rose_reader in the URL)"
    )
