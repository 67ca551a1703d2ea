"""What every engine shares when it runs untrusted SQL: the cache, in-flight de-duplication, one engine per kind.

:class:`Executor` is the sandbox every stage runs SQL through: it opens one engine of each kind it is
asked about (:func:`rose_sql.engines.open_engine`, with the run's :attr:`~rose_sql.config.Config.limits`),
caches executions by (the database's identity, SQL) within a bound of cells and bytes, runs a query that
several threads ask for at once only once, and arms the worker's wall-time guard
(:mod:`rose_sql.engines.workers`) around each statement: a statement that overran it is answered ``guard`` when
its unit is sent again, never run twice. What a statement may do, and how each engine's failures become
an :class:`~rose_sql.results.Execution`, is the engines' (:mod:`rose_sql.engines`).

An executor made without a watch (the library's, from Python) keeps the CLI's guarantee: it runs its
statements in a guarded worker process of its own (:class:`rose_sql.engines.workers.Pool`, started at its first
statement), where an executor with that worker's watch runs them, so a call the engine cannot interrupt
is stopped with its worker and answered ``guard``. The catalogue's reads (:meth:`Executor.describe`,
:meth:`~Executor.fingerprint`, ...) run in the calling process. From Python, :func:`run_query` runs one
statement in a fresh sandbox, guarded alike.
"""

from __future__ import annotations

import pickle
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import Future

from rose_sql.config import Config
from rose_sql.engines import Database, Engine, Kind, TableInfo, open_engine
from rose_sql.engines.base import CONTRACT, GUARD_STOPPED, UNREADABLE, DbKey, Fingerprint
from rose_sql.engines.workers import Pool, Watch, limit_memory, statement_key
from rose_sql.results import Execution


class Executor:
    """Runs SQL in the sandbox, caching executions by (database identity, SQL).

    Thread-safe: each engine keeps one connection per thread, database and role, and a query that
    several threads ask for at once runs once.

    ``watch``: the guard of the worker process this executor lives in (``rose run``'s, the reward
    scorer's): statements run in this process under it (a no-op ``Watch()`` runs them here unguarded,
    for code that is stopped some other way, and tests). Without one, statements run one at a time in a
    guarded worker process of this executor's own (see the module docstring).
    """

    def __init__(self, config: Config | None = None, *, watch: Watch | None = None) -> None:
        self.config = config or Config()
        self.watch = watch or Watch()
        """The worker's guard (a no-op outside worker processes)."""
        self.guarded = watch is None
        """Whether statements run in this executor's own guarded worker process (no watch was given)."""
        self._pool: Pool[Executor] | None = None
        self.limits = self.config.limits
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[DbKey, str], tuple[Execution, int, int]] = OrderedDict()
        self._cache_cells = 0
        self._cache_bytes = 0
        self._inflight: dict[tuple[DbKey, str], Future[Execution]] = {}
        self._engines: dict[Kind, Engine] = {}
        self.executed = 0
        """Number of executions that actually ran (cache misses)."""

    # ------------------------------------------------------------------ public

    def run(self, db: Database, sql: str, *, role: str = "pred") -> Execution:
        """Execute ``sql`` on ``db`` on the connection of ``role``. Never raises on bad SQL.

        Guarded (no watch given): a statement whose worker kept dying raises
        :class:`~rose_sql.errors.Lost`, as ``rose run`` reports its items."""
        if self.guarded:
            return self._run_guarded(db, sql, role)
        engine = self.engine(db.kind)
        try:
            dbk = engine.identity(db)
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
            return fut.result().as_cached()
        try:
            execution, nbytes = self._execute(engine, db, dbk, sql, role)
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

    def engine(self, kind: Kind) -> Engine:
        """This executor's engine of ``kind`` (made on first use, with this executor's limits)."""
        engine = self._engines.get(kind)  # every statement asks: no lock once it is made
        if engine is not None:
            return engine
        with self._lock:
            engine = self._engines.get(kind)
            if engine is None:
                engine = self._engines[kind] = open_engine(kind, self.limits)
            return engine

    def exists(self, db: Database) -> bool:
        """Whether the database exists (a server that cannot be reached counts as existing: its statements
        are then ``unreadable``, a transient reason)."""
        try:
            return self.engine(db.kind).exists(db)
        except Exception:
            return True

    def version(self, db: Database) -> str | None:
        """The name and version of the engine serving ``db`` (None on SQLite, or when it cannot be reached)."""
        try:
            return self.engine(db.kind).version(db)
        except Exception:
            return None

    def describe(self, db: Database) -> list[TableInfo]:
        """The database's tables, keys and example values, read through its engine."""
        return self.engine(db.kind).describe(db)

    def fingerprint(self, db: Database) -> Fingerprint:
        """What identifies ``db`` in a manifest."""
        return self.engine(db.kind).fingerprint(db)

    def close(self) -> None:
        """Close every connection this executor opened (and stop its worker process)."""
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
            pool, self._pool = self._pool, None
        for engine in engines:
            engine.close()
        if pool is not None:
            pool.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _run_guarded(self, db: Database, sql: str, role: str) -> Execution:
        with self._lock:
            if self._pool is None:
                self._pool = Pool(1, _sandbox, self.config)
                weakref.finalize(self, self._pool.close, now=True)  # an executor never closed: at its end
            pool = self._pool
        ((out, ran),) = pool.submit(_run_in_worker, [(db, sql, role)]).result()
        if isinstance(out, BaseException):  # raised in the worker: raised here, as an unguarded run would
            raise out
        with self._lock:
            self.executed += ran
        return out

    def _execute(self, engine: Engine, db: Database, dbk: DbKey, sql: str, role: str) -> tuple[Execution, int]:
        key = statement_key(dbk[0], sql)
        if key in self.watch.poisoned:
            process = CONTRACT["process"]
            return Execution(process.status, 0.0, error=GUARD_STOPPED, limit=process.limit), 0
        self.watch.arm(key, engine.guard_s + self.config.guard_margin_s)
        try:
            return engine.run(db, sql, role)
        finally:
            self.watch.disarm()

    def _remember(self, key: tuple[DbKey, str], execution: Execution, nbytes: int) -> None:
        res = execution.result
        cells = 1 + (len(res.rows) * max(1, len(res.columns)) if res else 0)
        max_bytes = 4 * self.config.max_result_bytes
        if cells > self.config.cache_cells // 4 or nbytes > max_bytes // 4:
            return
        self._cache[key] = (execution.as_cached(), cells, nbytes)  # as every hit returns it
        self._cache_cells += cells
        self._cache_bytes += nbytes
        while (self._cache_cells > self.config.cache_cells or self._cache_bytes > max_bytes) and self._cache:
            _, (_, old_cells, old_bytes) = self._cache.popitem(last=False)
            self._cache_cells -= old_cells
            self._cache_bytes -= old_bytes


def run_query(db: Database, sql: str, config: Config | None = None) -> Execution:
    """Execute one query in a fresh sandbox, in a guarded worker process (convenience for scripts and tests)."""
    with Executor(config) as ex:
        return ex.run(db, sql)


def _sandbox(config: Config, watch: Watch) -> Executor:
    """A guarded worker's state: its memory bound, and an executor under the worker's watch."""
    limit_memory(config.worker_memory_bytes)
    return Executor(config, watch=watch)


def _run_in_worker(ex: Executor, job: tuple[Database, str, str]) -> tuple[Execution | Exception, int]:
    """One statement of a guarded executor, in its worker: the execution (or what it raised), and whether it ran."""
    db, sql, role = job
    before = ex.executed
    try:
        return ex.run(db, sql, role=role), ex.executed - before
    except Exception as e:  # raised again in the caller, its type kept where it crosses processes
        try:
            pickle.loads(pickle.dumps(e))
        except Exception:
            e = RuntimeError(f"{type(e).__name__}: {e}")
        return e, ex.executed - before
