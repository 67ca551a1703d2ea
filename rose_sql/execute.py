"""The sandbox for untrusted SQL: read-only SQLite, real timeouts, capped results, a cache.

Every query runs on a connection that is opened ``mode=ro`` with ``PRAGMA query_only``, an
authorizer that allows only reads (no ATTACH, PRAGMA, writes, DDL, ``load_extension``), SQLite
limits on value length and attached databases, and a progress handler that interrupts the query
inside SQLite at its deadline (a thread-based timeout cannot stop a running query). Gold and
prediction run on separate connections. A database file is never opened for writing.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import urllib.parse
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from rose_sql.config import Config
from rose_sql.sql import gate

Status = Literal["ok", "error", "timeout", "rejected"]
Row = tuple[Any, ...]

_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE}
_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "sqlite_dbpage"}
_PROGRESS_OPS = 2000


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


@dataclass(frozen=True, slots=True)
class Execution:
    """What happened when one SQL ran on one database."""

    status: Status
    """``ok``, ``error`` (SQLite raised), ``timeout`` (interrupted at the deadline) or ``rejected``."""
    seconds: float
    """Wall time of the execution (of the original one, when served from cache)."""
    result: ResultSet | None = None
    """The result, when ``status`` is ``ok``."""
    error: str | None = None
    """SQLite's message or the gate's reason, when not ``ok``."""
    cached: bool = False
    """True when this execution was served from the cache."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
    if action in _READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (arg2 or "").lower() in _DENIED_FUNCTIONS else sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


class _Conn:
    """A locked-down read-only connection with a settable deadline."""

    def __init__(self, path: Path, config: Config) -> None:
        uri = "file:" + urllib.parse.quote(str(path)) + "?mode=ro"
        self.deadline = float("inf")
        self.conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA query_only = ON")
        self.conn.execute(f"PRAGMA hard_heap_limit = {int(config.sqlite_heap_bytes)}")
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, config.max_value_bytes)
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        self.conn.set_authorizer(_authorize)
        self.conn.set_progress_handler(self._expired, _PROGRESS_OPS)

    def _expired(self) -> bool:
        return time.monotonic() > self.deadline


def _decode_ignoring(raw: bytes) -> str:
    return raw.decode("utf-8", errors="ignore")


DbKey = tuple[str, int, int]


def db_key(path: Path) -> DbKey:
    """Identity of a database file for caching: resolved path, size and modification time."""
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


class Executor:
    """Runs SQL in the sandbox, caching executions by (database identity, SQL).

    Thread-safe: each thread gets its own connections (one per database and role), and a query
    that several threads ask for at once runs once.
    """

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config()
        self._local = threading.local()
        self._all: list[_Conn] = []
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[DbKey, str], Execution] = OrderedDict()
        self._cache_cells = 0
        self._inflight: dict[tuple[DbKey, str], Future[Execution]] = {}
        self.executed = 0
        """Number of executions that actually ran (cache misses)."""

    # ------------------------------------------------------------------ public

    def run(self, db: Path, sql: str, *, role: str = "pred") -> Execution:
        """Execute ``sql`` on database file ``db`` (must exist) on the connection of ``role``."""
        key = (db_key(db), sql)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return replace(hit, cached=True)
            fut = self._inflight.get(key)
            owner = fut is None
            if fut is None:
                fut = self._inflight[key] = Future()
        if not owner:
            return replace(fut.result(), cached=True)
        try:
            execution = self._execute(db, sql, role)
        except BaseException as e:  # never leave waiters hanging
            fut.set_exception(e)
            with self._lock:
                self._inflight.pop(key, None)
            raise
        with self._lock:
            self.executed += 1
            self._remember(key, execution)
            self._inflight.pop(key, None)
        fut.set_result(execution)
        return execution

    def close(self) -> None:
        """Close every connection this executor opened."""
        with self._lock:
            conns, self._all = self._all, []
        for c in conns:
            c.conn.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _remember(self, key: tuple[DbKey, str], execution: Execution) -> None:
        res = execution.result
        cells = 1 + (len(res.rows) * max(1, len(res.columns)) if res else 0)
        if cells > self.config.cache_cells // 4:
            return
        self._cache[key] = execution
        self._cache_cells += cells
        while self._cache_cells > self.config.cache_cells and self._cache:
            _, old = self._cache.popitem(last=False)
            r = old.result
            self._cache_cells -= 1 + (len(r.rows) * max(1, len(r.columns)) if r else 0)

    def _conn(self, db: Path, role: str) -> _Conn:
        conns: dict[tuple[str, str], _Conn] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        k = (str(db), role)
        c = conns.get(k)
        if c is None:
            c = conns[k] = _Conn(db, self.config)
            with self._lock:
                self._all.append(c)
        return c

    def _execute(self, db: Path, sql: str, role: str) -> Execution:
        start = time.monotonic()
        reason = gate(sql, max_chars=self.config.max_sql_chars)
        if reason is not None:
            return Execution("rejected", 0.0, error=reason)
        try:
            c = self._conn(db, role)
        except sqlite3.Error as e:
            return Execution("error", time.monotonic() - start, error=f"cannot open database: {e}")
        try:
            result = self._fetch(c, sql, start)
        except sqlite3.OperationalError as e:
            if "decode" in str(e).lower() and "utf-8" in str(e).lower():
                c.conn.text_factory = _decode_ignoring
                try:
                    result = replace(self._fetch(c, sql, time.monotonic()), decode_errors=True)
                except Exception as e2:
                    return self._failure(c, e2, start)
                finally:
                    c.conn.text_factory = str
            else:
                return self._failure(c, e, start)
        except Exception as e:  # sqlite3.Error, MemoryError, OverflowError, ValueError from the driver
            return self._failure(c, e, start)
        finally:
            c.deadline = float("inf")
        return Execution("ok", time.monotonic() - start, result=result)

    def _failure(self, c: _Conn, e: Exception, start: float) -> Execution:
        elapsed = time.monotonic() - start
        message = str(e) or type(e).__name__
        if isinstance(e, sqlite3.OperationalError) and message == "interrupted" and elapsed >= self.config.timeout_s:
            return Execution("timeout", elapsed, error=f"timed out after {self.config.timeout_s:g} s")
        if "not authorized" in message:
            return Execution("rejected", elapsed, error=f"{message} (only reading is allowed)")
        return Execution("error", elapsed, error=f"{type(e).__name__}: {message}")

    def _fetch(self, c: _Conn, sql: str, start: float) -> ResultSet:
        cfg = self.config
        c.deadline = start + cfg.timeout_s
        cur = c.conn.execute(sql)
        try:
            columns = tuple(d[0] for d in cur.description) if cur.description else ()
            rows: list[Row] = []
            nbytes, past_cap, truncated = 0, 0, False
            while True:
                batch = cur.fetchmany(1024)
                if not batch:
                    break
                nbytes += _size(batch)
                room = cfg.max_rows - len(rows)
                if len(batch) > room or nbytes > cfg.max_result_bytes:
                    kept = max(0, min(room, len(batch)))
                    rows.extend(batch[:kept])
                    past_cap, truncated = len(batch) - kept, True
                    break
                rows.extend(batch)
            count, exact = len(rows), True
            if truncated:
                count, exact = self._count_rest(c, cur, len(rows) + past_cap)
            return ResultSet(columns, tuple(rows), count, truncated, exact)
        finally:
            cur.close()

    def _count_rest(self, c: _Conn, cur: sqlite3.Cursor, counted: int) -> tuple[int, bool]:
        """Step through the rows past the cap without keeping them, within a time limit."""
        c.deadline = min(c.deadline, time.monotonic() + self.config.count_past_cap_s)
        try:
            while True:
                batch = cur.fetchmany(4096)
                if not batch:
                    return counted, True
                counted += len(batch)
        except sqlite3.Error:
            return counted, False


def _size(batch: list[Row]) -> int:
    n = 16 * len(batch) * (len(batch[0]) if batch else 0)
    for row in batch:
        for v in row:
            if isinstance(v, str | bytes):
                n += len(v)
    return n


def run_query(db: Path, sql: str, config: Config | None = None) -> Execution:
    """Execute one query in a fresh sandbox (convenience for scripts and tests)."""
    with Executor(config) as ex:
        return ex.run(db, sql)
