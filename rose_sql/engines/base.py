"""The engine protocol, the outcome contract every engine maps its errors into, and what engines share.

An :class:`Engine` runs one untrusted statement on a :class:`~rose_sql.engines.kinds.Database` with the
:class:`~rose_sql.results.Limits` it was opened with and gives back an
:class:`~rose_sql.results.Execution`; it also says whether a database exists, what identifies it, its
version, and describes its schema for the judges and the evidence. :class:`Pooled` is the skeleton the
engines share (connections per database, role and thread; the gate, the policy, the statement, the
reset); each engine's module says how it connects, what its policy allows, how it ends a statement, and
how its errors map into the contract.

What every engine does with an untrusted statement, in order:

1. the gate (:func:`rose_sql.sql.gate` in the engine's dialect): exactly one SELECT / WITH / VALUES;
2. the policy (:func:`policy`; SQLite's authorizer does it there): sqlglot must read it in the engine's
   dialect, and the engine must read its text as sqlglot does (the same spaces, comments, strings and
   quoted names: :mod:`rose_sql.engines.lexical`); no ``INTO``, no write anywhere in it (a data-modifying
   CTE), no row locks, no MySQL user-variable assignment; every function it calls must be one the
   engine's catalogue says has no side effect (see each engine); no catalog view or function that
   exposes the server's files, settings, credentials or other sessions, whatever the role (:func:`policy`);
3. a read-only transaction with the engine's own limits, rows fetched against the row and byte caps
   while they arrive (:func:`collect`: never a batch of rows larger than what was seen allows);
4. a rollback and a reset of the session, so nothing a statement did outlives it.

Values: Decimal, float, date and time, bool stay as the driver gives them (the official mini-dev script
compares them so, with Python's ``==``); lists become tuples and mappings their JSON text, so that
results can be hashed (``ResultSet.unhashable`` says so: the official script's ``set()`` raises there).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from datetime import time as dtime
from decimal import Decimal
from pathlib import Path
from typing import Any, Generic, Literal, Protocol, TypeVar
from uuid import UUID

from sqlglot import exp

from rose_sql.engines.kinds import Database, Kind
from rose_sql.engines.lexical import Span, refusal
from rose_sql.results import Execution, Limit, Limits, ResultSet, Row, Status
from rose_sql.sql import gate, query

C = TypeVar("C")
CELL_BYTES = 16
"""Bytes a cell is reckoned to take besides its text or blob (for the byte cap)."""
_PLAIN = frozenset({int, float, str, bytes, bool, Decimal, date, datetime, dtime, timedelta, UUID, type(None)})
WRITES = (exp.Into, exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.Create, exp.Drop, exp.Command, exp.Set)
"""Nodes that write or change the session, wherever they sit in a statement."""
DENIED_NODES = (*WRITES, exp.Lock, exp.PropertyEQ, exp.NextValueFor, exp.ReadCSV, exp.ReadParquet, exp.ToFile)
"""Writes, row locks (``FOR UPDATE``), ``@v := x`` (MySQL's; elsewhere sqlglot also reads a struct's fields
so), sequences and file access by sqlglot's name for them."""
DbKey = tuple[str, int, int]
"""What identifies a database's state for the execution cache (a file's path, size and time)."""


# --------------------------------------------------------------------------- the outcome contract

Failure = Literal["missing", "unreadable", "error", "rejected", "steps", "memory", "wall", "process"]
"""The engine-neutral kinds of failure every engine maps its own errors into (see :data:`CONTRACT`)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """One row of the outcome contract: what a failure is recorded as, and what it makes of an item."""

    status: Status
    """The execution's status."""
    limit: Limit | None
    """The limit that stopped it, when a limit did."""
    means: str
    """What happened, in a sentence."""
    gold: str
    """What the decision table makes of the item when its gold meets this (an unscored reason)."""
    prediction: str
    """What the decision table makes of the item when its prediction meets this while the gold ran: ``0``
    or an unscored reason."""
    engines: str
    """The errors of each engine that map here."""
    attributed: Status | None = None
    """What the sandbox records instead, before the table reads it, once it has proven the statement
    caused it (an outcome leaves an item unscored only when the prediction provably did not cause it);
    None: recorded as it is."""
    attribution: str = ""
    """How the sandbox proves it (:class:`rose_sql.engines.execute.Executor`)."""


_CONFIRMED = (
    "either side's: run again alone, in a fresh process, with the guard doubled; stopped again, a runaway "
    "(timeout: a prediction scores 0, as the official scripts score a timeout; a gold is gold_error); "
    "otherwise recorded as the second run ended; wall_guard only when it cannot be run again"
)

CONTRACT: dict[Failure, Outcome] = {
    "missing": Outcome(
        "missing",
        None,
        "a relation (table, view) or the database the statement reads does not exist",
        "db_missing",
        "0",
        "SQLite 'no such table'; PostgreSQL 42P01, 3F000, 3D000; MySQL 1146, 1049; DuckDB a missing table or file",
    ),
    "unreadable": Outcome(
        "unreadable",
        None,
        "the database or its server cannot be read: a login, a permission, the network, a server gone away, a "
        "file that is not a database, corrupt or locked",
        "db_unreadable",
        "db_unreadable",
        "SQLite CANTOPEN, NOTADB, CORRUPT, IOERR, BUSY, LOCKED, PERM; PostgreSQL classes 08, 28, 57P and 42501; "
        "MySQL 1044, 1045, 1142, 1227, 2003, 2006, 2013; DuckDB I/O errors",
        "error",
        "a prediction's: its own error (0) unless the gold, run again on a fresh connection right after, fails "
        "the same way (then db_unreadable: the database or the login is at fault); a gold's stands",
    ),
    "error": Outcome(
        "error",
        None,
        "the statement failed on a present database: its syntax, a column, a type, a function that fails",
        "gold_error",
        "0",
        "every other error of the engine",
    ),
    "rejected": Outcome(
        "rejected",
        None,
        "the gate, the function policy or the authorizer refused it: not one read-only statement",
        "gold_error",
        "0",
        "rose-sql's gate and policy on every engine; SQLite's authorizer; read-only transaction errors",
    ),
    "steps": Outcome(
        "timeout",
        "steps",
        "SQLite's step budget (--max-steps) ran out: the same on every machine at any load",
        "gold_error",
        "0",
        "SQLite only (the other engines count no steps)",
    ),
    "memory": Outcome(
        "timeout",
        "memory",
        "the statement needs more memory (or temporary disk) than the engine may take",
        "gold_error",
        "0",
        "SQLite's heap limit and SQLITE_TOOBIG; PostgreSQL class 53 (53200, temp_file_limit 53400); MySQL 1038, "
        "1041, MariaDB's tmp_disk_table_size (1114); DuckDB's memory_limit; the worker's address-space limit on "
        "every engine",
    ),
    "wall": Outcome(
        "guard",
        "wall",
        "a wall clock stopped it (which may be the machine's load: confirmed before it counts)",
        "wall_guard",
        "wall_guard",
        "SQLite's wall-clock guard; PostgreSQL statement_timeout (57014); MySQL max_execution_time (3024), "
        "MariaDB max_statement_time (1969); DuckDB's interrupt",
        "timeout",
        _CONFIRMED,
    ),
    "process": Outcome(
        "guard",
        "process",
        "its worker process was stopped by the wall-time guard (a call the engine could not interrupt; "
        "confirmed before it counts)",
        "wall_guard",
        "wall_guard",
        "the worker's guard, on every engine (rose_sql.engines.workers)",
        "timeout",
        _CONFIRMED,
    ),
}
"""The outcome contract: every engine maps each of its errors into one of these rows, and the decision
table (:mod:`rose_sql.decide`) reads the status the same way for every engine. Rows cut at the row or
byte cap are no failure: the execution is ``ok`` with ``result.truncated``, and equality is undecidable.

Two rows are attributed by the sandbox (:class:`rose_sql.engines.execute.Executor`) before they count,
the same way on every engine: a prediction's ``unreadable`` is its own ``error`` unless the gold, run
again on a fresh connection right after, fails the same way (:meth:`~rose_sql.engines.execute.Executor.attribute`);
a ``wall`` or ``process`` stop is confirmed: the statement runs again alone, in a fresh process, with its
guard doubled (:mod:`rose_sql.engines.alone`); stopped again, it is a runaway, recorded as a
``timeout`` with that ``limit``; otherwise it is recorded as the second run ended (``rerun`` says why)."""
UNREADABLE = "the database cannot be read"
UNBOUNDED = "no limit of the sandbox bounds its work"
"""How a refusal that is a bound on work, not on writing, ends (SQLite's :func:`~rose_sql.engines.sqlite.refused`)."""
GUARD_STOPPED = (
    "stopped by the wall-time guard: it ran far past its time limit inside one call the engine cannot interrupt"
)


@dataclass(frozen=True, slots=True)
class Classified:
    """How an engine classifies an exception raised while a statement ran (a row of :data:`CONTRACT`)."""

    failure: Failure
    message: str
    """The engine's own message."""
    broken: bool = False
    """Whether the connection must be dropped (it is reopened for the next statement)."""
    disk: bool = False
    """For ``memory``: the limit met was on temporary disk (``temp_file_limit``, ``tmp_disk_table_size``)."""


def failed(c: Classified, elapsed: float, engine: str, limits: Limits) -> Execution:
    """The execution a classified failure is recorded as, its message worded alike on every engine."""
    row = CONTRACT[c.failure]
    if c.failure == "wall" and engine == "SQLite":
        text = f"stopped by the wall-time guard after {limits.timeout_s:g} s (--timeout), before its step budget"
    elif c.failure == "wall":
        text = f"stopped by the {engine} time limit after {limits.engine_timeout_s:g} s (--timeout)"
    elif c.failure == "unreadable":
        text = f"{UNREADABLE}: {c.message}"
    elif c.failure == "rejected":
        text = c.message if c.message.endswith(UNBOUNDED) else f"{c.message} (only reading is allowed)"
    elif c.failure == "steps":
        text = f"stopped after {limits.max_steps:,} steps (the --max-steps budget)"
    elif c.failure == "memory":
        size = limits.memory_bytes
        shown = f"{size / 2**30:g} GiB" if size >= 2**30 else f"{size / 2**20:g} MiB"
        plain = c.message in ("", "MemoryError", "out of memory")
        text = f"stopped: it needs more than the {shown} memory limit" + ("" if plain else f" ({c.message})")
        if c.disk:
            text = f"stopped: it needs more temporary disk than the {engine} limit allows ({c.message})"
    elif c.failure == "process":
        text = GUARD_STOPPED
    else:
        text = c.message
    return Execution(row.status, elapsed, error=text, limit=row.limit)


# --------------------------------------------------------------------------- the protocol


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
    source_ddl: str | None = None
    """The engine's own CREATE TABLE text, when it keeps one (SQLite)."""
    descriptions: dict[str, str] = field(default_factory=dict)
    """Column descriptions shipped beside the database (BIRD's ``database_description``)."""

    def ddl(self, quote: Callable[[str], str]) -> str:
        """The engine's CREATE TABLE text, else one made from the catalogue in the engine's quoting."""
        if self.source_ddl is not None:
            return self.source_ddl
        lines = [f"    {quote(c.name)} {c.type}{' NOT NULL' if c.notnull else ''}" for c in self.columns]
        if self.primary_key:
            lines.append(f"    PRIMARY KEY ({', '.join(quote(c) for c in self.primary_key)})")
        for col, table, ref in self.foreign_keys:
            lines.append(f"    FOREIGN KEY ({quote(col)}) REFERENCES {quote(table)} ({quote(ref)})")
        return f"CREATE TABLE {quote(self.name)} (\n" + ",\n".join(lines) + "\n)"


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What identifies a database in a manifest: where, whether it is there, and its content's digest."""

    where: str
    found: bool
    bytes: int | None = None
    digest: str | None = None
    """SHA-256 of a file's first and last MiB (SQLite's first page holds its change counter); None on a server."""


class Engine(Protocol):
    """What the sandbox, the judges' schema and the evidence need of a database engine."""

    @property
    def kind(self) -> Kind:
        """Which engine (:data:`~rose_sql.engines.kinds.KINDS`)."""
        ...

    @property
    def guard_s(self) -> float:
        """Seconds a statement may run before the worker's wall-time guard may stop it (plus a margin)."""
        ...

    def identity(self, db: Database) -> DbKey:
        """What identifies the database's current state for the execution cache (raises OSError when a
        file cannot be looked at)."""
        ...

    def exists(self, db: Database) -> bool:
        """Whether the database exists (False only when the engine says so: a server that cannot be
        reached counts as existing, and its statements are ``unreadable``)."""
        ...

    def version(self, db: Database) -> str | None:
        """The server's (or library's) name and version for records and manifests; None on SQLite, whose
        version the manifest records for every run."""
        ...

    def run(self, db: Database, sql: str, role: str) -> tuple[Execution, int]:
        """Run one untrusted statement on the pooled connection of ``role``, within the limits: the
        execution and the bytes its result holds. Never raises for the statement's problems."""
        ...

    def describe(self, db: Database) -> list[TableInfo]:
        """The tables of the database (or, in a shared one, every table), with example values."""
        ...

    def prompt_note(self, db: Database) -> str:
        """What the judges must know of the engine: its name, version and the semantics that differ from
        SQLite's ("" on SQLite, whose schema text is as it always was)."""
        ...

    def quote(self, name: str) -> str:
        """An identifier in the engine's quoting."""
        ...

    def fingerprint(self, db: Database) -> Fingerprint:
        """What identifies the database in a manifest."""
        ...

    def privileges(self, db: Database) -> str | None:
        """What the URL's role may do beyond reading its database (a superuser, a write grant, the server's
        files, settings or other sessions), for people; None when nothing (``rose run`` refuses such a
        login for ``--db`` unless told otherwise)."""
        ...

    def unbounded_disk(self, db: Database) -> str | None:
        """Why a statement's temporary files are not bounded on this database (None when they are), for a
        warning."""
        ...

    def refused_functions(self, db: Database) -> list[str]:
        """The database's own functions (and operators) the policy refuses to every statement, each with why,
        for people (``rose run`` and ``rose db reader`` say which they found)."""
        ...

    def drop(self, db: Database, role: str) -> None:
        """Close this thread's connection to ``db`` for ``role``: the next statement opens a fresh one."""
        ...

    def cancel(self) -> None:
        """Stop every statement this engine is running (from any thread)."""
        ...

    def close(self) -> None:
        """Close every connection."""
        ...


Catalogue = tuple[tuple[str, tuple[str, ...]], ...]
"""Every table a database's catalogue holds, the engine's own included, with its columns' names, in the
catalogue's order."""


@dataclass(frozen=True, slots=True)
class Counted:
    """A statement's virtual-machine steps, counted exactly, or why there is no count."""

    steps: int | None
    """The steps of executing the statement and stepping through every row (None: no count)."""
    error: str | None = None
    """Why there is no count: the statement failed, passed the step budget, or a wall clock stopped it."""
    limit: Limit | None = None
    """The limit that stopped the count, when one did (``wall``, ``process``: confirmed before it counts)."""
    random: bool = False
    """The statement called ``random()`` or ``randomblob()``: its steps may differ from one execution to the
    next, so they were counted with both drawn from a fixed seed (the same count in every run)."""
    status: Status | None = None
    """How the count's execution ended when there is no count (as an execution's status: ``unreadable``
    and an unconfirmed ``guard`` are the machine's, the others the statement's)."""


@dataclass(frozen=True, slots=True)
class Timing:
    """One timed execution, as BIRD's ``evaluation_ves.py`` times it."""

    seconds: float
    """Running the statement, fetching its rows and closing its connection (the opening is not timed), as
    mini-dev's ``evaluation_ves.py`` times it; or only running it to its first row, as BIRD dev's does
    (:meth:`Scripted.timed_first`)."""
    failure: Execution | None = None
    """How it ended when it did not run to its end (its seconds then mean nothing)."""


@dataclass(frozen=True, slots=True)
class Timed:
    """A timed pass: statements run one after the other, again and again, each execution timed."""

    times: tuple[tuple[float, ...], ...]
    """Each finished iteration's seconds, one per statement in the order given."""
    error: str | None = None
    """Why the pass stopped before its iterations were done (None: they were)."""
    at: tuple[int, int] | None = None
    """Where it stopped: the iteration (from 1) and the index of the statement (None: before any ran)."""
    status: Status | None = None
    """How the execution that stopped it ended (``timeout`` for the pass's own bound), when one did."""


class TimedEngine(Engine, Protocol):
    """An engine that times one execution as BIRD's ``evaluation_ves.py`` times it (:attr:`KindInfo.timed
    <rose_sql.engines.kinds.KindInfo.timed>`): what the wall-time efficiency pass runs
    (:meth:`rose_sql.engines.execute.Executor.time_pass`, under the worker's wall-time guard)."""

    def timed(self, db: Database, sql: str, until: float, rows: int | None = None) -> Timing:
        """One execution of ``sql`` timed as BIRD's ``evaluation_ves.py`` times it: a connection opened
        before the clock starts; running it, fetching its rows and closing the connection timed. The
        connection is the sandbox's own (read-only, the engine's limits, the row and byte caps, the wall
        clock of one statement, and ``until``: a ``time.monotonic()`` past which it is stopped).
        ``rows``: how many rows the engine may fetch at once, from what the statement returned when it
        ran before (:func:`known_batch`; None: not known), so that a result the published script reads in
        one round trip is read in one here too."""
        ...


class Scripted(TimedEngine, Protocol):
    """What the official scripts do with a database besides running a statement, offered by the engines
    they read through Python's ``sqlite3`` (:attr:`KindInfo.python_sqlite3
    <rose_sql.engines.kinds.KindInfo.python_sqlite3>`): Spider's reading of the schema, and BIRD's
    efficiency passes (the step count and BIRD dev's timing here; mini-dev's timed pass, which every
    :class:`TimedEngine` offers).
    Each is bounded as any statement is (a step budget, the wall clock of ``Limits.timeout_s``, a
    read-only connection), and :class:`rose_sql.engines.execute.Executor` runs it under the worker's
    wall-time guard."""

    def catalogue(self, db: Database) -> Catalogue | None:
        """Every table of the catalogue (its own too: SQLite's ``sqlite_sequence``), in the catalogue's
        order, with its columns' names: what Spider's ``get_schema`` reads. None when it cannot be read
        within ``Limits.schema_steps`` and the wall clock."""
        ...

    def count_steps(self, db: Database, sql: str) -> Counted:
        """The virtual-machine steps executing ``sql`` and stepping through every row take, counted one by
        one on a connection of its own (opened afresh, as the count includes reading the schema), within
        the step budget and the wall clock of one statement; no row is kept."""
        ...

    def timed_first(self, db: Database, sql: str, until: float) -> Timing:
        """One execution of ``sql`` timed as BIRD dev's ``evaluation_ves.py`` times it: a connection opened
        before the clock starts, ``cursor.execute`` alone timed (the statement run to its first row), its
        rows never fetched, the connection closed after the clock stops. Bounded as :meth:`timed` is."""
        ...


# --------------------------------------------------------------------------- the function policy


def policy(
    sql: str,
    dialect: str,
    allowed: Callable[[str], str | None],
    catalog: Callable[[str, str], bool] = lambda schema, name: False,
) -> str | None:
    """Why ``sql`` may not run on this engine (None: it may). ``allowed(name)`` says why a function
    called by name may not be called (None: it may); ``catalog(schema, name)`` whether a relation (its
    schema "" when unqualified, both lower-cased) is a catalog view that exposes the server's files,
    settings, credentials or other sessions, refused whatever the role."""
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
            if isinstance(node, exp.SessionParameter):  # MySQL's @@datadir, @@global.secure_file_priv...
                return f"@@{node.name}: a server variable ({SECRETS})"
            if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
                schema = node.text("db").lower()
                if catalog(schema, node.name.lower()):
                    shown = f"{schema}.{node.name}" if schema else node.name
                    return f"{shown}: {SECRETS}"
    return None


SECRETS = "it exposes the server's files, settings, credentials or other sessions"
"""Why the policy refuses a catalog view or function on every engine, whatever the role."""


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


def short(value: Any, limit: int = 60) -> Any:
    """A value as the judges' examples show it: long text cut, a blob by its size."""
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + "…"
    return value


def examples(values: Iterable[Any]) -> list[Any]:
    """The distinct values among a column's sample, in order, shortened (the judges' examples)."""
    seen: list[Any] = []
    for v in values:
        v = short(v)
        if v not in seen:
            seen.append(v)
    return seen


def file_fingerprint(path: Path, edge: int = 2**20) -> Fingerprint:
    """A database file's identity: its size and the SHA-256 of its first and last ``edge`` bytes."""
    if not path.is_file():
        return Fingerprint(str(path.resolve()), False)
    size = path.stat().st_size
    h = hashlib.sha256()
    with path.open("rb") as f:
        h.update(f.read(edge))
        if size > edge:
            f.seek(max(edge, size - edge))
            h.update(f.read(edge))
    return Fingerprint(str(path.resolve()), True, size, h.hexdigest())


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


def row_bytes(row: Sequence[Any]) -> int:
    """What a row is reckoned to take against the byte cap."""
    size = CELL_BYTES * len(row)
    for v in row:
        if type(v) is str or type(v) is bytes:
            size += len(v)
    return size


def batches(
    fetchmany: Callable[[int], Sequence[Sequence[Any]]],
    limits: Limits,
    *,
    first: Sequence[Sequence[Any]] | None = None,
    size: int = 1,
) -> Iterator[Sequence[Sequence[Any]]]:
    """A DB-API cursor's rows in batches sized by what the rows seen so far take: the first batch is
    ``size`` rows (``first``, when the caller fetched it already), and no later batch asks for more rows
    than a quarter of the byte cap holds at the widest row seen, so wide rows are never pulled in by the
    thousand before the cap is checked."""
    batch = first if first is not None else fetchmany(size)
    widest = 1
    while batch:
        yield batch
        if len(batch) < size:
            return
        widest = max(widest, max(row_bytes(r) for r in batch))
        size = _batch_rows(widest, limits)
        batch = fetchmany(size)


def _batch_rows(widest: int, limits: Limits) -> int:
    """The most rows a batch asks for when its widest row takes ``widest`` bytes: at most a quarter of the
    byte cap, at most 5,000."""
    return max(1, min(5000, limits.max_bytes // (4 * max(1, widest))))


DRAIN_ROWS = 100
"""Rows a timed execution reads at once when the statement's result was not seen before."""


def known_batch(result: ResultSet | None, limits: Limits) -> int | None:
    """How many rows a timed execution reads at once, from ``result`` (the statement's result when it ran
    before; None: not known): one more than it held, so the batch ends the result as the published
    script's single read does, within the bound :func:`batches` puts on a batch at its widest row (a
    result past the caps: that bound, at the widest row kept). The worker's memory limit holds whatever
    a batch takes."""
    if result is None:
        return None
    widest = max((row_bytes(r) for r in result.rows), default=1)
    bound = _batch_rows(widest, limits)
    return bound if result.truncated else min(len(result.rows) + 1, bound)


def collect(batched: Iterable[Sequence[Sequence[Any]]], limits: Limits) -> Collected:
    """Rows from the driver's batches (:func:`batches`), up to the row and byte caps; past them, the distinct
    rows of the batch that passed (:class:`Distinct`, fed the rest of the result by the caller)."""
    kept: list[Row] = []
    nbytes, unhashable = 0, False
    max_rows, max_bytes = limits.max_rows, limits.max_bytes
    for batch in batched:
        for i, raw in enumerate(batch):
            row = tuple(raw)
            size = CELL_BYTES * len(row)
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
            if len(kept) >= max_rows or nbytes + size > max_bytes:
                distinct = Distinct(kept, limits)
                distinct.add_batch(batch[i:])
                return Collected(kept, nbytes, True, unhashable, len(batch) - i, distinct)
            kept.append(row)
            nbytes += size
    return Collected(kept, nbytes, False, unhashable, 0)


class Distinct:
    """The distinct rows of a result past the row cap, in the order each first came, kept while they fit
    caps of their own (``Limits.max_rows`` distinct rows and ``Limits.max_bytes``): what BIRD's set
    readings need of a result too long to keep (:attr:`rose_sql.results.ResultSet.distinct`). Past its
    caps it keeps nothing more and gives None."""

    __slots__ = ("full", "max_bytes", "max_rows", "nbytes", "rows")

    def __init__(self, kept: Iterable[Row], limits: Limits) -> None:
        self.rows: dict[Row, None] = {}
        self.nbytes = 0
        self.max_rows, self.max_bytes = limits.max_rows, limits.max_bytes
        self.full = False
        for row in kept:
            self.add(row)

    def add(self, row: Row) -> None:
        """One more row of the result (as the result keeps its rows: :func:`plain` cells)."""
        if self.full or row in self.rows:
            return
        size = row_bytes(row)
        if len(self.rows) >= self.max_rows or self.nbytes + size > self.max_bytes:
            self.full, self.rows = True, {}
            return
        self.rows[row] = None
        self.nbytes += size

    def add_batch(self, batch: Iterable[Sequence[Any]]) -> int:
        """Rows as the driver gives them (made hashable as :func:`collect` makes them); how many there were."""
        n = 0
        for raw in batch:
            n += 1
            if not self.full:
                row = tuple(raw)
                if any(type(v) not in _PLAIN for v in row):
                    row = tuple(plain(v)[0] for v in row)
                self.add(row)
        return n

    def give_up(self) -> None:
        """The rest of the result cannot be read as the official script would read it: no distinct rows."""
        self.full, self.rows = True, {}

    def result(self) -> tuple[Row, ...] | None:
        """The distinct rows, or None past the caps."""
        return None if self.full else tuple(self.rows)


@dataclass(frozen=True, slots=True)
class Collected:
    """What :func:`collect` kept."""

    rows: list[Row]
    nbytes: int
    truncated: bool
    unhashable: bool
    past: int
    """Rows already fetched past the cap (the first row that did not fit, and the rest of its batch)."""
    distinct: Distinct | None = None
    """When truncated: the distinct rows so far (the caller feeds it the rows it counts past the cap)."""

    def result(self, columns: tuple[str, ...], rest: int | None) -> ResultSet:
        """The result set, with ``rest`` more rows counted past the ones read (None: the count stopped, and
        the distinct rows are not all known)."""
        count = len(self.rows) + self.past + (rest or 0)
        distinct = self.distinct.result() if self.distinct is not None and rest is not None else None
        exact, rows = rest is not None, tuple(self.rows)
        return ResultSet(columns, rows, count, self.truncated, exact, unhashable=self.unhashable, distinct=distinct)


# --------------------------------------------------------------------------- pooled connections


def _gone(kind: Classified) -> bool:
    """Whether a failure says the connection itself is gone (another one may well work)."""
    return kind.failure == "unreadable" and kind.broken


class Pooled(Generic[C]):
    """Connections kept per (database, role, thread), and the run skeleton the engines share.

    Subclasses implement :meth:`_connect`, :meth:`_statement`, :meth:`_end`, :meth:`_close_conn`,
    :meth:`_classify`, :meth:`_allowed`, :meth:`_interrupt` and the catalogue's methods.
    """

    kind: Kind
    dialect: str
    name: str
    """How people call the engine (in its messages)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: dict[int, C] = {}
        self._running: dict[int, C] = {}
        self._versions: dict[str, str] = {}

    @property
    def guard_s(self) -> float:
        return self.limits.engine_timeout_s

    # ------------------------------------------------------------------ to implement

    def _connect(self, db: Database) -> C:
        raise NotImplementedError

    def _connect_timed(self, db: Database) -> C:
        """The timed pass's connection (:meth:`timed`): the engine's own, opened as the published script's
        driver opens one where that changes what its clock then times."""
        return self._connect(db)

    def _statement(self, conn: C, sql: str) -> tuple[ResultSet, int, str | None]:
        """Run ``sql`` (already gated and checked) in a read-only transaction and fetch it capped: the
        result, its bytes, and a note when a documented engine difference applied."""
        raise NotImplementedError

    def _begin(self, conn: C) -> None:
        """Before the timed pass's clock starts (:meth:`timed`): open the read-only transaction
        :meth:`_drain` runs in, with what else the statement's limits need set, so that what the clock
        times is the statement (where the published script's driver sends its own ``BEGIN`` with each
        statement, :meth:`_drain` sends it, and this sets nothing)."""
        raise NotImplementedError

    def _drain(self, conn: C, sql: str, until: float, rows: int | None) -> None:
        """The timed pass's statement (:meth:`timed`, on the clock): run ``sql`` (already gated and checked)
        in the transaction :meth:`_begin` opened and read its result to the end, ``rows`` at a time
        (:func:`known_batch`), keeping none of it: the result was read and compared before, and the
        published script's ``fetchall()`` reads it all in the driver."""
        raise NotImplementedError

    def _end(self, conn: C) -> None:
        """Roll back and reset the session after a statement (raises when the connection is broken)."""
        raise NotImplementedError

    def _close_conn(self, conn: C) -> None:
        raise NotImplementedError

    def _classify(self, e: BaseException) -> Classified:
        raise NotImplementedError

    def _allowed(self, conn: C, name: str) -> str | None:
        """Why the function ``name`` may not be called on this connection's database (None: it may)."""
        raise NotImplementedError

    def _interrupt(self, conn: C) -> None:
        """Stop the statement running on ``conn`` (called from another thread)."""
        raise NotImplementedError

    def _version(self, conn: C) -> str:
        raise NotImplementedError

    def refused_functions(self, db: Database) -> list[str]:
        return []

    def _catalog(self, schema: str, name: str) -> bool:
        """Whether the relation ``schema.name`` (schema "" when unqualified, lower-cased) is a catalog view
        that exposes the server's files, settings, credentials or other sessions (see :func:`policy`)."""
        return False

    def _lexer(self, conn: C) -> tuple[str, Callable[[str], list[Span]]] | None:
        """The server's name and its lexer under this connection's session (:mod:`rose_sql.engines.lexical`),
        when it may read a text otherwise than sqlglot (None: the engine runs what sqlglot reads)."""
        return None

    def _check(self, conn: C, sql: str) -> str | None:
        """Why the statement may not run here (None: it may): the server must read the text as sqlglot
        does, then the function policy."""
        lexer = self._lexer(conn)
        if lexer is not None:
            why = refusal(sql, self.dialect, lexer[1], lexer[0])
            if why is not None:
                return why
        return policy(sql, self.dialect, lambda name: self._allowed(conn, name), self._catalog)

    # ------------------------------------------------------------------ shared

    def identity(self, db: Database) -> DbKey:
        """A database on a server: the database itself (a query means the same whatever db_id asked it)."""
        return (f"{self.kind}:{db.target}", 0, 0)

    def fingerprint(self, db: Database) -> Fingerprint:
        return Fingerprint(db.shown, self.exists(db))

    def exists(self, db: Database) -> bool:
        try:
            self.conn(db)
        except Exception as e:
            return self._classify(e).failure != "missing"
        return True

    def prompt_note(self, db: Database) -> str:
        version = self.version(db) or self.name
        return f"-- Engine: {version} (SQL dialect {self.dialect}). {self.notes}."

    notes = ""
    """Semantics of the engine that differ from SQLite's and change what a query returns (for the judges)."""

    def conn(self, db: Database, role: str = "pred") -> C:
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

    def drop(self, db: Database, role: str) -> None:
        """Forget (and close) this thread's connection to ``db`` for ``role``."""
        conns: dict[tuple[str, str], C] = getattr(self._local, "conns", {})
        c = conns.pop((db.target, role), None)
        if c is not None:
            with self._lock:
                self._all.pop(id(c), None)
            with contextlib.suppress(Exception):  # a broken connection may fail to close: it is gone either way
                self._close_conn(c)

    def version(self, db: Database) -> str | None:
        with self._lock:
            known = self._versions.get(db.target)
        if known is None:
            try:
                known = self._version(self.conn(db))
            except Exception:  # unreachable now: its statements will say so
                return None
            with self._lock:
                self._versions[db.target] = known
        return known

    def run(self, db: Database, sql: str, role: str) -> tuple[Execution, int]:
        start = time.monotonic()
        reason = gate(sql, max_chars=self.limits.max_sql_chars, dialect=self.dialect)
        if reason is not None:
            return Execution("rejected", 0.0, error=reason), 0
        pooled = self._pooled(db, role)
        outcome, nbytes, gone = self._run(db, sql, role, start)
        if gone and pooled:  # a kept connection the server closed since (a restart, an idle timeout): once more
            outcome, nbytes, _ = self._run(db, sql, role, start)
        return outcome, nbytes

    def _pooled(self, db: Database, role: str) -> bool:
        """Whether this thread keeps a connection to ``db`` for ``role`` already."""
        conns: dict[tuple[str, str], C] = getattr(self._local, "conns", {})
        return (db.target, role) in conns

    def _run(self, db: Database, sql: str, role: str, start: float) -> tuple[Execution, int, bool]:
        """One attempt: the execution, its bytes, and whether the connection turned out to be gone."""
        try:
            c = self.conn(db, role)
        except Exception as e:
            return failed(self._classify(e), time.monotonic() - start, self.name, self.limits), 0, False
        try:
            why = self._check(c, sql)
        except Exception as e:  # the catalogue could not be read: the database's fault, not the statement's
            self.drop(db, role)
            kind = self._classify(e)
            return failed(kind, time.monotonic() - start, self.name, self.limits), 0, _gone(kind)
        if why is not None:
            return failed(Classified("rejected", why), time.monotonic() - start, self.name, self.limits), 0, False
        me = threading.get_ident()
        with self._lock:
            self._running[me] = c
        try:
            result, nbytes, note = self._statement(c, sql)
            outcome = Execution("ok", time.monotonic() - start, result=result, note=note)
        except Exception as e:
            kind = self._classify(e)
            outcome, nbytes = failed(kind, time.monotonic() - start, self.name, self.limits), 0
            if kind.broken:
                self.drop(db, role)
                return outcome, 0, _gone(kind)
        finally:
            with self._lock:
                self._running.pop(me, None)
        try:
            self._end(c)
        except Exception as e:  # the session could not be reset: never reuse it
            self.drop(db, role)
            if outcome.ok:
                kind = self._classify(e)
                return (
                    failed(Classified("unreadable", kind.message), time.monotonic() - start, self.name, self.limits),
                    0,
                    False,
                )
        return outcome, nbytes, False

    def timed(self, db: Database, sql: str, until: float, rows: int | None = None) -> Timing:
        """One execution timed as BIRD's ``evaluation_ves.py`` times it (:meth:`TimedEngine.timed`), on the
        server engines: a connection of the engine's own opened for it (:meth:`_connect`: the URL's
        read-only role, the session's read-only default and time limit), the statement checked (the
        gate, the server's lexer, the function policy) and its read-only transaction opened
        (:meth:`_begin`, where the published script's driver does not send it with the statement), all
        before the clock starts, as the published script connects before its clock starts; then the
        statement run and its result read to the end, ``rows`` at a time and none of it kept
        (:meth:`_drain`), and the connection closed, timed with ``time.perf_counter``. Nothing
        is reset: the closed connection takes its transaction and session with it. Past ``until`` the
        statement is stopped as the engine stops one from another thread (:meth:`_interrupt`) and no more
        rows are fetched: a wall-clock failure."""
        start = time.monotonic()
        limits = self.limits

        def failure(kind: Classified) -> Timing:
            return Timing(0.0, failed(kind, time.monotonic() - start, self.name, limits))

        reason = gate(sql, max_chars=limits.max_sql_chars, dialect=self.dialect)
        if reason is not None:
            return Timing(0.0, Execution("rejected", 0.0, error=reason))
        try:
            c = self._connect_timed(db)
        except Exception as e:
            return failure(self._classify(e))
        try:
            why = self._check(c, sql)
        except Exception as e:  # the catalogue could not be read: the database's fault, not the statement's
            self._close_quietly(c)
            return failure(self._classify(e))
        if why is not None:
            self._close_quietly(c)
            return failure(Classified("rejected", why))
        try:
            self._begin(c)
        except Exception as e:
            self._close_quietly(c)
            return failure(self._classify(e))
        stop = _Stop(self, c, until)
        me = threading.get_ident()
        with self._lock:
            self._running[me] = c
        clock = time.perf_counter()
        try:
            self._drain(c, sql, until, rows)
            self._close_conn(c)
            seconds = time.perf_counter() - clock
        except Exception as e:
            self._close_quietly(c)
            kind = self._classify(e)
            if stop.fired:  # the pass's bound, whatever the driver made of the interruption
                kind = Classified("wall", kind.message)
            return failure(kind)
        finally:
            stop.cancel()
            with self._lock:
                self._running.pop(me, None)
        return Timing(seconds)

    def _close_quietly(self, conn: C) -> None:
        with contextlib.suppress(Exception):  # a broken connection may fail to close: it is gone either way
            self._close_conn(conn)

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


class _Stop:
    """Stops the statement running on ``conn`` at ``until`` (a ``time.monotonic()``), when that comes before
    the engine's own time limit would (otherwise the engine's limit stops it first, and no thread is started)."""

    def __init__(self, engine: Pooled[Any], conn: Any, until: float) -> None:
        self.fired = False
        self._timer: threading.Timer | None = None
        left = until - time.monotonic()
        if left < engine.limits.engine_timeout_s:
            self._engine, self._conn = engine, conn
            self._timer = threading.Timer(max(0.0, left), self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        with contextlib.suppress(Exception):  # best effort: the Python-side deadline and the engine's limit hold
            self._engine._interrupt(self._conn)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
