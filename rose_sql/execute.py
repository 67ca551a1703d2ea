"""The sandbox for untrusted SQL: read-only SQLite, real timeouts, capped results, a cache.

Every query runs on a connection that is opened read-only (:mod:`rose_sql.engines.sqlite`: ``mode=ro``
and ``immutable=1`` unless a ``-wal`` or ``-journal`` file sits beside the database) with ``PRAGMA
query_only``, an authorizer that allows only reads (no ATTACH, PRAGMA, writes, DDL,
``load_extension``), SQLite limits on value length and attached databases, and a progress handler
that interrupts the query inside SQLite at its deadline (a thread-based timeout cannot stop a
running query). Gold and prediction run on separate connections. A database file is never opened
for writing.

Results are fetched one row at a time against a row cap and a byte cap, so a result of huge rows
cannot be pulled into memory in one batch; rows past the cap are counted without being kept.

Known limit: SQLite checks the progress handler between virtual-machine steps, so one call of a
built-in function cannot be interrupted. A few builtins take time out of proportion to their
arguments (``printf('%.*c', 2000000000, 'x')`` loops two billion times; ``trim(x, y)`` is
O(len(x) * len(y))), so a query can overrun its deadline by as long as one such call takes. Only
running queries in a killable child process would bound that.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rose_sql.config import Config
from rose_sql.engines.source import Remote, Source
from rose_sql.engines.sqlite import Authorizer, connect_read_only, sidecars
from rose_sql.sql import gate
from rose_sql.workers import Watch, statement_key

if TYPE_CHECKING:  # the other engines are loaded when a URL names one
    from rose_sql.engines.base import Engine

Status = Literal["ok", "error", "timeout", "rejected", "guard", "unreadable"]
Limit = Literal["steps", "memory", "wall", "process"]
Row = tuple[Any, ...]

STEP_GRAIN = 1000
"""Virtual-machine steps between two calls of the progress handler (which counts them)."""
_CELL_BYTES = 16
"""Bytes a cell is reckoned to take besides its text or blob (for the byte cap)."""
_NOT_UTF8 = "Could not decode to UTF-8"
"""How Python's sqlite3 reports text it cannot decode with the default text_factory."""
GUARD_MARGIN_S = 5.0
"""Seconds past a statement's own limits after which its worker process is stopped."""
GUARD_STOPPED = "stopped by the wall-time guard: it ran far past its time limit inside one call SQLite cannot interrupt"
UNREADABLE = "the database cannot be read"
_DATABASE_FAILURES = {
    sqlite3.SQLITE_PERM,
    sqlite3.SQLITE_BUSY,
    sqlite3.SQLITE_LOCKED,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_CORRUPT,
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_PROTOCOL,
    sqlite3.SQLITE_NOTADB,
}
"""SQLite's primary result codes that say the database, not the query, is at fault."""
_CONNS_PER_THREAD = 16
"""Open connections kept per thread (least recently used closed beyond it): bounds file handles."""


@dataclass(frozen=True, slots=True)
class ResultSet:
    """The rows a query returned, as Python values (int, float, str, bytes, None)."""

    columns: tuple[str, ...]
    """Column names as SQLite reports them."""
    rows: tuple[Row, ...]
    """The rows kept, in the order SQLite returned them (at most ``Config.max_rows``)."""
    row_count: int
    """Total rows the query produced (a lower bound when ``count_exact`` is false)."""
    truncated: bool = False
    """True when rows were dropped by the row or byte cap."""
    count_exact: bool = True
    """False when counting the rows past the cap ran out of time."""
    decode_errors: bool = False
    """True when some text was not valid UTF-8 and was decoded ignoring the bad bytes."""
    unhashable: bool = False
    """True when an engine other than SQLite returned a list or a mapping (kept as a tuple or JSON text):
    the official scripts' ``set()`` of rows raises on such a result."""


@dataclass(frozen=True, slots=True)
class Execution:
    """What happened when one SQL ran on one database."""

    status: Status
    """``ok``, ``error`` (SQLite raised), ``timeout`` (interrupted at the deadline), ``rejected``, or
    ``guard``: the wall-time guard stopped it where SQLite could not (see :mod:`rose_sql.workers`), or
    ``unreadable``: the database itself could not be read (not a database, corrupt, locked, an I/O
    error), whatever the query."""
    seconds: float
    """Wall time of the execution (of the original one, when served from cache)."""
    result: ResultSet | None = None
    """The result, when ``status`` is ``ok``."""
    error: str | None = None
    """SQLite's message or the gate's reason, when not ``ok``."""
    cached: bool = False
    """True when this execution was served from the cache."""
    limit: Limit | None = None
    """Which limit stopped it, when one did: ``steps`` (the step budget), ``memory`` (SQLite's heap limit),
    ``wall`` (the wall-clock guard inside SQLite), ``process`` (its worker was stopped)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


DbKey = tuple[str, int, int]


@lru_cache(maxsize=4096)
def _resolved(path: str) -> str:
    return str(Path(path).resolve())


def db_key(path: Path) -> DbKey:
    """Identity of a database file for caching: resolved path, size and modification time (with those of a
    pending ``-wal`` or ``-journal``, whose changes a reader sees)."""
    st = os.stat(path)
    size, mtime = st.st_size, st.st_mtime_ns
    for side in sidecars(path):
        sst = side.stat()
        size, mtime = size * 1_000_003 + sst.st_size, max(mtime, sst.st_mtime_ns)
    return (_resolved(str(path)), size, mtime)


class _Conn:
    """A locked-down read-only connection that stops a statement past its step budget or deadline."""

    def __init__(self, path: Path, key: DbKey, config: Config) -> None:
        self.key = key
        self.ticks = 0
        self.tick_limit = 0
        self.deadline = float("inf")
        self.stopped: str | None = None
        """Why the running statement was stopped: ``steps`` (deterministic) or ``wall`` (the guard)."""
        self.decode_errors = False
        self.closed = False
        self.conn = connect_read_only(path, check_same_thread=False, isolation_level=None)
        try:
            # The pragmas must come before the authorizer, which denies every PRAGMA.
            self.conn.execute(f"PRAGMA hard_heap_limit = {int(config.sqlite_heap_bytes)}")
            self.conn.execute("PRAGMA query_only = ON")
            self.conn.execute("PRAGMA temp_store = MEMORY")  # sorts and temp b-trees never spill to disk
            self.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, config.max_value_bytes)
            self.conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            self.auth = Authorizer()
            self.conn.set_authorizer(self.auth)
            self.conn.set_progress_handler(self._progress, STEP_GRAIN)
            # text_factory stays str (decoded in C); a result with text that is not UTF-8 is
            # fetched again with self._text (see Executor._fetch)
        except BaseException:
            self.conn.close()
            raise

    def limit(self, steps: int, deadline: float) -> None:
        """The next statement may take ``steps`` virtual-machine steps and run until ``deadline``."""
        self.ticks, self.tick_limit, self.deadline, self.stopped = 0, steps // STEP_GRAIN, deadline, None

    def _progress(self) -> bool:
        self.ticks += 1
        if self.ticks > self.tick_limit:
            self.stopped = "steps"
            return True
        if time.monotonic() > self.deadline:
            self.stopped = "wall"
            return True
        return False

    def _text(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.decode_errors = True
            return raw.decode("utf-8", errors="ignore")

    def close(self) -> None:
        self.closed = True
        self.conn.close()


class Executor:
    """Runs SQL in the sandbox, caching executions by (database identity, SQL).

    Thread-safe: each thread gets its own connections (one per database and role), and a query
    that several threads ask for at once runs once.
    """

    def __init__(self, config: Config | None = None, *, watch: Watch | None = None) -> None:
        self.config = config or Config()
        self.watch = watch or Watch()
        """The worker's guard (a no-op outside worker processes)."""
        self._local = threading.local()
        self._all: set[_Conn] = set()
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[DbKey, str], tuple[Execution, int, int]] = OrderedDict()
        self._cache_cells = 0
        self._cache_bytes = 0
        self._inflight: dict[tuple[DbKey, str], Future[Execution]] = {}
        self._engines: dict[Source, Engine] = {}
        self.executed = 0
        """Number of executions that actually ran (cache misses)."""

    # ------------------------------------------------------------------ public

    def run(self, db: Path | Remote, sql: str, *, role: str = "pred") -> Execution:
        """Execute ``sql`` on database ``db`` (a SQLite file, or a database of another engine) on the
        connection of ``role``. Never raises on bad SQL."""
        try:
            dbk = db_key(db) if isinstance(db, Path) else db.key
        except OSError as e:
            return Execution("unreadable", 0.0, error=f"{UNREADABLE}: {e.strerror or e}")
        key = (dbk, sql)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit[0]
            fut = self._inflight.get(key)
            owner = fut is None
            if fut is None:
                fut = self._inflight[key] = Future()
        if not owner:
            return replace(fut.result(), cached=True)
        try:
            if isinstance(db, Path):
                execution, nbytes = self._execute(db, dbk, sql, role)
            else:
                execution, nbytes = self._execute_on(db, sql, role)
        except BaseException as e:  # never leave waiters hanging
            with self._lock:
                self._inflight.pop(key, None)
            fut.set_exception(e)
            raise
        with self._lock:
            self.executed += 1
            if execution.status not in ("unreadable", "guard"):  # not the query's doing: never remembered
                self._remember(key, execution, nbytes)
            self._inflight.pop(key, None)
        fut.set_result(execution)
        return execution

    def close(self) -> None:
        """Close every connection this executor opened."""
        with self._lock:
            conns, self._all = self._all, set()
            engines, self._engines = list(self._engines.values()), {}
        for c in conns:
            c.close()
        for engine in engines:
            engine.close()

    def engine(self, source: Source) -> Engine:
        """This executor's engine for a URL's databases (made on first use, with this executor's limits)."""
        with self._lock:
            engine = self._engines.get(source)
            if engine is None:
                from rose_sql.engines.base import engine_for

                engine = self._engines[source] = engine_for(source.kind, self.config)
            return engine

    def exists(self, db: Remote) -> bool:
        """Whether a database of another engine exists (an unreachable server counts as existing: its
        statements are then ``unreadable``, a transient reason)."""
        try:
            return self.engine(db.source).exists(db)
        except Exception:
            return True

    def server(self, db: Remote) -> str | None:
        """The name and version of the engine serving ``db`` (None when it cannot be reached)."""
        try:
            return self.engine(db.source).version(db)
        except Exception:
            return None

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _remember(self, key: tuple[DbKey, str], execution: Execution, nbytes: int) -> None:
        res = execution.result
        cells = 1 + (len(res.rows) * max(1, len(res.columns)) if res else 0)
        max_bytes = 4 * self.config.max_result_bytes
        if cells > self.config.cache_cells // 4 or nbytes > max_bytes // 4:
            return
        self._cache[key] = (replace(execution, cached=True), cells, nbytes)  # as every hit returns it
        self._cache_cells += cells
        self._cache_bytes += nbytes
        while (self._cache_cells > self.config.cache_cells or self._cache_bytes > max_bytes) and self._cache:
            _, (_, old_cells, old_bytes) = self._cache.popitem(last=False)
            self._cache_cells -= old_cells
            self._cache_bytes -= old_bytes

    def _conn(self, db: Path, dbk: DbKey, role: str) -> _Conn:
        conns: OrderedDict[tuple[str, str], _Conn] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = OrderedDict()
        k = (dbk[0], role)
        c = conns.get(k)
        if c is not None and (c.key != dbk or c.closed):
            # The file changed (or was replaced: an open connection would still read the old inode),
            # or the executor was closed: never serve from a stale connection.
            self._drop(conns.pop(k))
            c = None
        if c is None:
            c = conns[k] = _Conn(db, dbk, self.config)
            with self._lock:
                self._all.add(c)
            while len(conns) > _CONNS_PER_THREAD:
                self._drop(conns.popitem(last=False)[1])
        conns.move_to_end(k)
        return c

    def _drop(self, c: _Conn) -> None:
        with self._lock:
            self._all.discard(c)
        c.close()

    def _execute(self, db: Path, dbk: DbKey, sql: str, role: str) -> tuple[Execution, int]:
        start = time.monotonic()
        reason = gate(sql, max_chars=self.config.max_sql_chars)
        if reason is not None:
            return Execution("rejected", 0.0, error=reason), 0
        key = statement_key(dbk[0], sql)
        if key in self.watch.poisoned:
            return Execution("guard", 0.0, error=GUARD_STOPPED, limit="process"), 0
        try:
            c = self._conn(db, dbk, role)
        except sqlite3.Error as e:
            return Execution("unreadable", time.monotonic() - start, error=f"{UNREADABLE}: {e}"), 0
        self.watch.arm(key, self.config.timeout_s + GUARD_MARGIN_S)
        try:
            try:
                result, nbytes = self._fetch(c, sql, start)
            except sqlite3.OperationalError as e:
                if not str(e).startswith(_NOT_UTF8):
                    raise
                c.conn.text_factory = c._text  # again, decoding what can be decoded, with a flag
                try:
                    result, nbytes = self._fetch(c, sql, start)
                finally:
                    c.conn.text_factory = str
        except Exception as e:  # sqlite3.Error, MemoryError, OverflowError, ValueError, UnicodeError
            return self._failure(e, start, c.stopped), 0
        finally:
            self.watch.disarm()
            stopped = c.stopped
            c.limit(0, float("inf"))
        if stopped == "wall":  # the count past the cap met the guard: what it found depends on the machine
            return Execution("guard", time.monotonic() - start, error=self._guard_text(), limit="wall"), 0
        return Execution("ok", time.monotonic() - start, result=result), nbytes

    def _execute_on(self, db: Remote, sql: str, role: str) -> tuple[Execution, int]:
        """A statement on another engine's database, under the worker's guard (see :mod:`rose_sql.engines`)."""
        key = statement_key(db.key[0], sql)
        if key in self.watch.poisoned:
            return Execution("guard", 0.0, error=GUARD_STOPPED, limit="process"), 0
        engine = self.engine(db.source)
        self.watch.arm(key, engine_timeout(self.config) + GUARD_MARGIN_S)
        try:
            return engine.run(db, sql, role)
        finally:
            self.watch.disarm()

    def _guard_text(self) -> str:
        return f"stopped by the wall-time guard after {self.config.timeout_s:g} s (--timeout), before its step budget"

    def _failure(self, e: Exception, start: float, stopped: str | None) -> Execution:
        elapsed = time.monotonic() - start
        message = str(e) or type(e).__name__
        if isinstance(e, sqlite3.Error) and (getattr(e, "sqlite_errorcode", None) or 0) & 0xFF in _DATABASE_FAILURES:
            return Execution("unreadable", elapsed, error=f"{UNREADABLE}: {message}")
        if isinstance(e, sqlite3.OperationalError) and message == "interrupted" and stopped == "steps":
            steps = f"{self.config.max_steps:,}"
            error = f"stopped after {steps} steps (the --max-steps budget)"
            return Execution("timeout", elapsed, error=error, limit="steps")
        if isinstance(e, sqlite3.OperationalError) and message == "interrupted" and stopped == "wall":
            return Execution("guard", elapsed, error=self._guard_text(), limit="wall")
        if isinstance(e, MemoryError) or (isinstance(e, sqlite3.Error) and "out of memory" in message):
            limit = f"{self.config.sqlite_heap_bytes / 2**30:g} GiB"
            error = f"stopped: it needs more than the {limit} memory limit"
            return Execution("timeout", elapsed, error=error, limit="memory")
        if "not authorized" in message or "authorization denied" in message:
            return Execution("rejected", elapsed, error=f"{message} (only reading is allowed)")
        return Execution("error", elapsed, error=f"{type(e).__name__}: {message}")

    def _fetch(self, c: _Conn, sql: str, start: float) -> tuple[ResultSet, int]:
        cfg = self.config
        c.limit(cfg.max_steps, start + cfg.timeout_s)
        c.decode_errors = False
        c.auth.begin()
        cur = c.conn.execute(sql)
        try:
            columns = tuple(d[0] for d in cur.description) if cur.description else ()
            rows: list[Row] = []
            keep = rows.append
            nbytes, truncated = 0, False
            max_rows, max_bytes = cfg.max_rows, cfg.max_result_bytes
            # One row at a time: a batch of rows holding 16 MB values each would be gigabytes.
            # (the size is computed inline: this loop runs once per result row)
            for row in cur:
                size = _CELL_BYTES * len(row)
                for v in row:
                    if type(v) is str or type(v) is bytes:
                        size += len(v)
                if len(rows) >= max_rows or nbytes + size > max_bytes:
                    truncated = True
                    break
                keep(row)
                nbytes += size
            count, exact = len(rows), True
            if truncated:
                del row  # the first row past the cap is counted, not kept
                count, exact = self._count_rest(c, cur, len(rows) + 1)
            return ResultSet(columns, tuple(rows), count, truncated, exact, c.decode_errors), nbytes
        finally:
            cur.close()

    def _count_rest(self, c: _Conn, cur: sqlite3.Cursor, counted: int) -> tuple[int, bool]:
        """Step through the rows past the cap without keeping them, within a step budget of their own."""
        c.ticks, c.tick_limit = 0, self.config.count_past_cap_steps // STEP_GRAIN
        factory, c.conn.text_factory = c.conn.text_factory, bytes  # text we drop: not decoded, cannot fail
        try:
            for _ in cur:
                counted += 1
            return counted, True
        except Exception:  # out of steps (or memory): the count is a lower bound
            return counted, False
        finally:
            c.conn.text_factory = factory


def engine_timeout(config: Config) -> float:
    """The wall-clock limit other engines enforce themselves."""
    return config.server_timeout_s if config.server_timeout_s is not None else config.timeout_s


def run_query(db: Path, sql: str, config: Config | None = None) -> Execution:
    """Execute one query in a fresh sandbox (convenience for scripts and tests)."""
    with Executor(config) as ex:
        return ex.run(db, sql)
