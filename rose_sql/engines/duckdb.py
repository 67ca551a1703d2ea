"""DuckDB files: opened read-only, one thread, no access outside the database, interrupted at the limit.

A database file is opened ``read_only`` with ``threads = 1`` (a parallel float sum differs between
runs), ``enable_external_access = false`` (no file, URL or extension is read or written: ``COPY``,
``read_csv``, ``ATTACH``, ``INSTALL`` fail inside DuckDB), no extension autoloading, the memory limit of
the run (``Limits.memory_bytes``, SQLite's heap limit too) and no temporary directory (nothing spills to
disk: a query past the memory limit fails as on SQLite, where DuckDB's default would spill into a
``.tmp`` folder beside the file), and then ``lock_configuration = true`` so no statement can change any
of that.

Errors map into the outcome contract (:data:`rose_sql.engines.base.CONTRACT`): a table that does not
exist, or no file, is ``missing``; an I/O error ``unreadable``; the interrupt at the time limit the wall
clock; ``OutOfMemoryException`` the memory limit.
Each thread has its own cursor of one connection per file. A statement runs inside ``BEGIN
TRANSACTION READ ONLY`` with a watchdog thread that calls ``interrupt()`` at the limit, is read through a
window against the caps (:func:`fetch`: DuckDB computes 2,048 rows at a time, their strings outside its
``memory_limit``), and is rolled back.

The policy reads the text as DuckDB does (:func:`rose_sql.engines.lexical.duckdb`: PostgreSQL's lexical
rules, ``\\v`` a space, after DuckDB's replacing of Unicode spaces) and refuses what sqlglot reads
otherwise. The function policy:
scalar and aggregate functions without side effects (``duckdb_functions()``'s
``has_side_effects``), plus :data:`ALLOWED`; table functions only from :data:`TABLES`; never
:data:`DENIED` (``query()`` runs SQL text, ``setseed`` changes the session, sequences advance), nor
:data:`SECRET_FUNCTIONS` and :data:`SECRET_VIEWS` (the settings and the logs, behind built-in views).

BIRD's timed efficiency pass (``rose run --efficiency time``) runs each statement as above, on a
connection opened for each execution before its clock starts and closed within it
(:meth:`Pooled.timed <rose_sql.engines.base.Pooled.timed>`).
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from rose_sql.engines import lexical
from rose_sql.engines.base import (
    SECRETS,
    Classified,
    ColumnInfo,
    Fingerprint,
    Pooled,
    TableInfo,
    batches,
    collect,
    examples,
    file_fingerprint,
    row_bytes,
)
from rose_sql.engines.kinds import Database, Kind
from rose_sql.engines.lexical import Span
from rose_sql.results import Limits, ResultSet
from rose_sql.sql import enclosable

ALLOWED = frozenset({"random", "uuid", "gen_random_uuid", "uuidv4"})
"""Functions DuckDB marks as having side effects that have none outside the statement."""
DENIED = frozenset({"query", "query_table", "setseed", "nextval", "currval", "getenv", "read_text", "read_blob"})
SECRET_FUNCTIONS = frozenset({"current_setting", "which_secret"})
"""Functions that read the configuration or the secrets (``which_secret`` is a table function, refused as
every one outside :data:`TABLES` is)."""
SECRET_VIEWS = frozenset({"pg_settings", "duckdb_logs", "duckdb_logs_parsed", "pg_prepared_statements"})
"""Built-in views over the settings and the logs: a view is a relation, its table function unseen by the
policy (``SELECT * FROM pg_settings`` reads ``duckdb_settings()``)."""
TABLES = frozenset({"range", "generate_series", "unnest", "json_each", "json_tree", "repeat", "repeat_row"})
"""Table functions a query may read from (every other one reads files or metadata)."""
_NO_TABLE = "Table with name"
"""How DuckDB's catalogue error names a table that does not exist (a function's is worded otherwise)."""
NOTES = (
    "integer / integer is a double (5 / 2 = 2.5; // truncates); NULLs sort last ascending and descending; "
    "= and LIKE are case-sensitive (ILIKE is not)"
)
"""What the judges must know of DuckDB's semantics where they differ from SQLite's."""


class _Conn:
    """One thread's cursor on a DuckDB file, and what its catalogue says of functions."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, functions: dict[str, bool]) -> None:
        self.conn = conn
        self.functions = functions


class _Watchdog:
    """One thread that interrupts the statements whose deadline passed (a timer thread per statement
    costs milliseconds to start while DuckDB holds a core)."""

    def __init__(self) -> None:
        self._deadlines: dict[int, tuple[float, _Conn]] = {}
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None

    def arm(self, conn: _Conn, seconds: float) -> None:
        with self._cv:
            self._deadlines[id(conn)] = (time.monotonic() + seconds, conn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="rose-duckdb-watchdog", daemon=True)
                self._thread.start()
            self._cv.notify()

    def disarm(self, conn: _Conn) -> None:
        with self._cv:
            self._deadlines.pop(id(conn), None)

    def _loop(self) -> None:
        with self._cv:
            while True:
                now = time.monotonic()
                for key, (deadline, conn) in list(self._deadlines.items()):
                    if deadline <= now:
                        del self._deadlines[key]
                        conn.conn.interrupt()
                soonest = min((d for d, _ in self._deadlines.values()), default=None)
                self._cv.wait(None if soonest is None else max(0.0, soonest - now))


class DuckDB(Pooled[_Conn]):
    """The DuckDB engine (see the module docstring)."""

    kind: Kind = "duckdb"
    dialect = "duckdb"
    name = "DuckDB"
    notes = NOTES

    def __init__(self, limits: Limits) -> None:
        super().__init__(limits)
        self._files: dict[str, duckdb.DuckDBPyConnection] = {}
        self._functions: dict[str, dict[str, bool]] = {}
        self._watchdog = _Watchdog()

    def _root(self, path: str) -> tuple[duckdb.DuckDBPyConnection, dict[str, bool]]:
        with self._lock:
            root = self._files.get(path)
            if root is None:
                if not Path(path).is_file():
                    raise FileNotFoundError(f"no DuckDB database at {path}")
                root = open_read_only(path, self.limits.memory_bytes)
                self._files[path], self._functions[path] = root, functions_of(root)
            return root, self._functions[path]

    def _connect(self, db: Database) -> _Conn:
        root, functions = self._root(db.target)
        return _Conn(root.cursor(), functions)

    def _close_conn(self, conn: _Conn) -> None:
        conn.conn.close()

    def _version(self, conn: _Conn) -> str:
        return f"DuckDB {duckdb.__version__}"

    def exists(self, db: Database) -> bool:
        return db.path.is_file()

    def fingerprint(self, db: Database) -> Fingerprint:
        return file_fingerprint(db.path)

    def quote(self, name: str) -> str:
        return quote(name)

    def _begin(self, conn: _Conn) -> None:
        conn.conn.execute("BEGIN TRANSACTION READ ONLY")

    def _drain(self, conn: _Conn, sql: str, until: float, rows: int | None) -> None:
        """As every statement runs (:meth:`_statement`: fetched against the caps; the published script does
        not run on DuckDB), in the transaction :meth:`_begin` opened before the clock."""
        self._statement(conn, sql, until, begun=True, rows=rows)

    def _statement(
        self, conn: _Conn, sql: str, until: float = math.inf, *, begun: bool = False, rows: int | None = None
    ) -> tuple[ResultSet, int, str | None]:
        c = conn.conn
        if not begun:
            self._begin(conn)
        self._watchdog.arm(conn, self.limits.engine_timeout_s)  # the timed pass's bound: Pooled.timed's stop
        try:
            result, nbytes = fetch(c, sql, self.limits)
            return result, nbytes, None
        finally:
            self._watchdog.disarm(conn)

    def _end(self, conn: _Conn) -> None:
        with contextlib.suppress(duckdb.TransactionException):  # no transaction left open
            conn.conn.execute("ROLLBACK")

    def _classify(self, e: BaseException) -> Classified:
        message = f"{type(e).__name__}: {e}"
        if isinstance(e, duckdb.InterruptException):
            return Classified("wall", message)
        if isinstance(e, FileNotFoundError) or (isinstance(e, duckdb.CatalogException) and _NO_TABLE in str(e)):
            return Classified("missing", message, broken=isinstance(e, FileNotFoundError))
        if isinstance(e, duckdb.IOException):
            return Classified("unreadable", message, broken=True)
        if isinstance(e, duckdb.PermissionException):
            return Classified("rejected", message)
        if isinstance(e, duckdb.OutOfMemoryException | MemoryError):
            return Classified("memory", message)
        return Classified("error", message)

    def _lexer(self, conn: _Conn) -> tuple[str, Callable[[str], list[Span]]]:
        return "DuckDB", lexical.duckdb

    def _catalog(self, schema: str, name: str) -> bool:
        return schema in ("", "main", "pg_catalog") and name in SECRET_VIEWS

    def _allowed(self, conn: _Conn, name: str) -> str | None:
        if name in DENIED:
            return "it runs SQL text, reads outside the database or changes the session"
        if name in SECRET_FUNCTIONS:
            return SECRETS
        if name in ALLOWED or name in TABLES:
            return None
        safe = conn.functions.get(name)
        if safe is None:
            return "not a DuckDB function this database knows"
        return None if safe else "it may have side effects"

    def _interrupt(self, conn: _Conn) -> None:
        conn.conn.interrupt()

    def close(self) -> None:
        super().close()
        with self._lock:
            files, self._files = list(self._files.values()), {}
        for f in files:
            f.close()

    # ------------------------------------------------------------------ metadata

    def describe(self, db: Database) -> list[TableInfo]:
        c = self.conn(db).conn
        out = []
        tables = [r[0] for r in c.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall()]
        for t in tables:
            cols = c.execute(
                "SELECT column_name, data_type, NOT is_nullable FROM duckdb_columns() WHERE table_name = ? "
                "ORDER BY column_index",
                [t],
            ).fetchall()
            constraints = c.execute(
                "SELECT constraint_type, constraint_column_names, referenced_table, referenced_column_names "
                "FROM duckdb_constraints() WHERE table_name = ?",
                [t],
            ).fetchall()
            pk: tuple[str, ...] = ()
            fks: list[tuple[str, str, str]] = []
            for kind, names, ref_table, ref_cols in constraints:
                if kind == "PRIMARY KEY":
                    pk = tuple(names)
                elif kind == "FOREIGN KEY" and ref_table:
                    fks += [(a, ref_table, b) for a, b in zip(names, ref_cols or [], strict=False)]
            samples = {}
            for name, *_ in cols:
                q = f"SELECT {quote(name)} FROM {quote(t)} WHERE {quote(name)} IS NOT NULL LIMIT 50"
                samples[name] = examples(v for (v,) in c.execute(q).fetchall())
            out.append(TableInfo(t, tuple(ColumnInfo(n, ty, bool(nn)) for n, ty, nn in cols), pk, tuple(fks), samples))
        return out

    def privileges(self, db: Database) -> str | None:
        return None  # always opened read-only

    def unbounded_disk(self, db: Database) -> str | None:
        return None  # nothing spills to disk: sorts and temporary tables live under the memory limit


VECTOR_ROWS = 2048
"""The rows DuckDB computes at a time (its vector size): a projection makes the strings of all of them before
the first is fetched, outside ``memory_limit``."""
FIRST_ROWS = 2
"""The rows of the first window (most results are one row: it is then the whole result)."""
_RENAMED = re.compile(r"_[0-9]+$")


def fetch(c: duckdb.DuckDBPyConnection, sql: str, limits: Limits) -> tuple[ResultSet, int]:
    """Run ``sql`` on ``c`` and fetch its rows against the row and byte caps: the result and its bytes.

    DuckDB computes 2,048 rows at a time, and the strings a projection makes are outside its
    ``memory_limit``: 2,048 rows of a few megabytes each are gigabytes before the first row is fetched.
    So the statement is first read through a window, ``SELECT * FROM (statement) LIMIT 2`` (DuckDB pushes
    the limit below the projection, so no more rows are made than the window returns). A result of fewer
    rows is whole. When its rows are narrow (a vector of them within the byte cap), the statement itself
    then runs and is fetched in batches against the caps, the rows past them counted, as on the other
    engines. When they are wide, the window grows (doubled, or to the rows the byte cap holds at the
    widest row seen) until the result ends within it or passes a cap; the rows past the cap are then
    counted with ``count(*)`` over the statement, which makes none of their values.
    """
    body = enclosable(sql, "duckdb")
    if body is None:  # sqlglot reads no balanced query (DuckDB will say why): as it is
        return _stream(c, sql, limits)
    size = FIRST_ROWS
    while True:
        c.execute(f"SELECT * FROM (\n{body}\n) AS rose_window LIMIT {size}")
        named = tuple(d[0] for d in c.description or ())
        got = collect(batches(c.fetchmany, limits), limits)
        columns = _columns(c, body, named)
        if got.truncated:
            assert got.distinct is not None
            got.distinct.give_up()  # the rows past the window are counted, never made: their values are not known
            return got.result(columns, _rest(c, body, len(got.rows) + got.past)), got.nbytes
        if len(got.rows) < size:
            return got.result(columns, 0), got.nbytes
        widest = max(row_bytes(r) for r in got.rows)
        if size == FIRST_ROWS and widest * VECTOR_ROWS <= limits.max_bytes:
            return _stream(c, sql, limits)
        size = min(limits.max_rows + 1, max(2 * size, limits.max_bytes // widest + 1))


def _stream(c: duckdb.DuckDBPyConnection, sql: str, limits: Limits) -> tuple[ResultSet, int]:
    """The statement itself, fetched in batches against the caps, the rows past them counted."""
    c.execute(sql)
    columns = tuple(d[0] for d in c.description or ())
    got = collect(batches(c.fetchmany, limits), limits)
    rest: int | None = 0
    if got.truncated:
        assert got.distinct is not None
        try:
            rest = sum(got.distinct.add_batch(b) for b in batches(c.fetchmany, limits))
        except duckdb.InterruptException:  # the time limit met the count: a lower bound
            rest = None
    return got.result(columns, rest), got.nbytes


def _rest(c: duckdb.DuckDBPyConnection, body: str, seen: int) -> int | None:
    """The rows past the ``seen`` ones (None: the time limit or the memory met the count)."""
    try:
        (total,) = c.execute(f"SELECT count(*) FROM (\n{body}\n) AS rose_window").fetchone() or (seen,)
    except (duckdb.InterruptException, duckdb.OutOfMemoryException, MemoryError):
        return None
    return max(0, int(total) - seen)


def _columns(c: duckdb.DuckDBPyConnection, body: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """The statement's column names, from the window's ``names`` (a window renames a repeated one, ``a`` to
    ``a_1``: DESCRIBE does not)."""
    if not any(_RENAMED.search(n) for n in names):
        return names
    return tuple(str(r[0]) for r in c.execute(f"DESCRIBE (\n{body}\n)").fetchall())


def open_read_only(path: str, memory_bytes: int) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to the file ``path`` that can neither write it nor reach outside it."""
    conn = duckdb.connect(
        path,
        read_only=True,
        config={
            "threads": 1,
            "enable_external_access": False,
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "memory_limit": memory_limit(memory_bytes),
            "temp_directory": "",
        },
    )
    (locked,) = conn.execute("SELECT current_setting('lock_configuration')").fetchone() or (False,)
    if not locked:  # another engine of this process opened the same file (DuckDB shares it): locked already
        conn.execute("SET lock_configuration = true")
    return conn


def functions_of(conn: duckdb.DuckDBPyConnection) -> dict[str, bool]:
    """Each function the catalogue knows, and whether a query may call it (no side effects, not a table
    function)."""
    functions: dict[str, bool] = {}
    for name, kind, side in conn.execute(
        "SELECT function_name, function_type, bool_or(coalesce(has_side_effects, false)) "
        "FROM duckdb_functions() GROUP BY ALL"
    ).fetchall():
        safe = not side and kind in ("scalar", "aggregate", "macro")
        functions[name.lower()] = functions.get(name.lower(), True) and safe
    return functions


def quote(name: str) -> str:
    """A DuckDB identifier in double quotes."""
    return '"' + name.replace('"', '""') + '"'


def memory_limit(memory_bytes: int) -> str:
    """DuckDB's ``memory_limit`` setting for a number of bytes."""
    return f"{max(1, memory_bytes // 2**20)}MiB"


ENGINE = DuckDB
"""The engine of this module (:func:`rose_sql.engines.open_engine`)."""
