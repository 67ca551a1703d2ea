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
is stopped with its worker and answered ``guard``. The catalogue's reads for the judges and the manifest
(:meth:`Executor.describe`, :meth:`~Executor.fingerprint`, ...) run in the calling process. From Python,
:func:`run_query` runs one statement in a fresh sandbox, guarded alike.

What the official scripts do with an item's database besides running a statement runs here too, in the
worker, under the same guard, on the engines that offer it (:class:`~rose_sql.engines.base.Scripted`:
those the scripts read through Python's ``sqlite3``): Spider's reading of the schema
(:meth:`Executor.catalogue`), and BIRD's efficiency passes, the exact count of a statement's steps
(:meth:`~Executor.count_steps`) and the published timed pass (:meth:`~Executor.time_pass`), whose
executions are each bounded as any statement is and whose whole is bounded by
:meth:`~rose_sql.config.Config.time_pass_s`. No statement of an item runs on a connection opened anywhere
else.
"""

from __future__ import annotations

import pickle
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, cast

from rose_sql.config import Config
from rose_sql.engines import Database, Engine, Kind, TableInfo, open_engine
from rose_sql.engines.base import (
    CONTRACT,
    GUARD_STOPPED,
    UNREADABLE,
    Catalogue,
    Counted,
    DbKey,
    Fingerprint,
    Scripted,
    Timed,
)
from rose_sql.engines.workers import Pool, Watch, limit_memory, statement_key
from rose_sql.results import Execution

_CATALOGUES = 256
"""Catalogues an executor keeps (by the database's identity), least recently read dropped beyond it."""


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
        self._catalogues: OrderedDict[DbKey, Catalogue | None] = OrderedDict()
        self.executed = 0
        """Number of executions that actually ran (cache misses)."""

    # ------------------------------------------------------------------ public

    def run(self, db: Database, sql: str, *, role: str = "pred") -> Execution:
        """Execute ``sql`` on ``db`` on the connection of ``role``. Never raises on bad SQL.

        Guarded (no watch given): a statement whose worker kept dying raises
        :class:`~rose_sql.errors.Lost`, as ``rose run`` reports its items."""
        if self.guarded:
            return cast("Execution", self._in_worker("run", db, sql, role=role))
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

    def catalogue(self, db: Database) -> Catalogue | None:
        """Every table of ``db``'s catalogue with its columns' names, as Spider's ``get_schema`` reads them
        (:meth:`Scripted.catalogue <rose_sql.engines.base.Scripted.catalogue>`), read in the worker under
        its guard and kept by the database's identity; None when it cannot be read."""
        if self.guarded:
            return cast("Catalogue | None", self._in_worker("catalogue", db))
        engine = self._scripted(db)
        try:
            dbk = engine.identity(db)
        except OSError:
            return None
        with self._lock:
            if dbk in self._catalogues:
                self._catalogues.move_to_end(dbk)
                return self._catalogues[dbk]
        key = statement_key("catalogue", dbk[0])
        if key in self.watch.poisoned:
            return None
        self.watch.arm(key, engine.guard_s + self.config.guard_margin_s)
        try:
            found = engine.catalogue(db)
        finally:
            self.watch.disarm()
        with self._lock:
            self._catalogues[dbk] = found
            while len(self._catalogues) > _CATALOGUES:
                self._catalogues.popitem(last=False)
        return found

    def count_steps(self, db: Database, sql: str) -> Counted:
        """The exact virtual-machine steps of ``sql`` on ``db`` (:meth:`Scripted.count_steps
        <rose_sql.engines.base.Scripted.count_steps>`: the step budget and wall clock of one statement), in
        the worker under its guard; a count its guard stopped is answered with why when its unit is sent
        again, never run twice."""
        if self.guarded:
            return cast("Counted", self._in_worker("count_steps", db, sql))
        engine = self._scripted(db)
        try:
            dbk = engine.identity(db)
        except OSError as e:
            return Counted(None, f"{UNREADABLE}: {e.strerror or e}")
        key = statement_key("steps", dbk[0], sql)
        if key in self.watch.poisoned:
            return Counted(None, GUARD_STOPPED)
        self.watch.arm(key, engine.guard_s + self.config.guard_margin_s)
        try:
            return engine.count_steps(db, sql)
        finally:
            self.watch.disarm()

    def time_pass(self, db: Database, statements: Sequence[str], iterations: int) -> Timed:
        """BIRD's timed pass (``evaluation_ves.py``): ``iterations`` times, each statement in turn, each
        execution timed on a connection of its own (:meth:`Scripted.timed
        <rose_sql.engines.base.Scripted.timed>`), in the worker.

        Each execution is bounded as any statement is (the step budget, the row and byte caps, the wall
        clock of ``--timeout``, the worker's guard armed for it), and the pass as a whole by
        :meth:`Config.time_pass_s <rose_sql.config.Config.time_pass_s>` from its start: past it, the
        execution running is stopped, and the pass with it. The first execution that does not run to its
        end stops the pass: what ran is kept, with why and where it stopped. A pass whose worker the guard
        stopped is answered with why when its unit is sent again, never run twice."""
        if self.guarded:
            return cast("Timed", self._in_worker("time_pass", db, tuple(statements), iterations))
        engine = self._scripted(db)
        try:
            dbk = engine.identity(db)
        except OSError as e:
            return Timed((), f"{UNREADABLE}: {e.strerror or e}")
        key = statement_key("time", dbk[0], *statements)
        if key in self.watch.poisoned:
            return Timed((), GUARD_STOPPED)
        budget = self.config.time_pass_s(iterations)
        deadline = time.monotonic() + budget
        past = f"the timed pass ran past its bound of {budget:g} s"
        times: list[tuple[float, ...]] = []
        try:
            for i in range(1, iterations + 1):
                row: list[float] = []
                for j, sql in enumerate(statements):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return Timed(tuple(times), past, (i, j))
                    self.watch.arm(key, min(engine.guard_s, left) + self.config.guard_margin_s)
                    timing = engine.timed(db, sql, deadline)
                    failure = timing.failure
                    if failure is not None:
                        bound = failure.limit == "wall" and time.monotonic() >= deadline  # the pass's, not its own
                        return Timed(tuple(times), past if bound else failure.error or failure.status, (i, j))
                    row.append(timing.seconds)
                times.append(tuple(row))
        finally:
            self.watch.disarm()
        return Timed(tuple(times))

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

    def _in_worker(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """This executor's ``method`` called in its guarded worker process (started at the first call)."""
        with self._lock:
            if self._pool is None:
                self._pool = Pool(1, _sandbox, self.config)
                weakref.finalize(self, self._pool.close, now=True)  # an executor never closed: at its end
            pool = self._pool
        ((out, ran),) = pool.submit(_call_in_worker, [(method, args, kwargs)]).result()
        if isinstance(out, BaseException):  # raised in the worker: raised here, as an unguarded call would
            raise out
        with self._lock:
            self.executed += ran
        return out

    def _scripted(self, db: Database) -> Scripted:
        """The engine of ``db``, which must be one that offers what the official scripts do
        (:attr:`KindInfo.python_sqlite3 <rose_sql.engines.kinds.KindInfo.python_sqlite3>`)."""
        if not db.info.python_sqlite3:
            raise ValueError(f"{db.info.name} offers no reading of the official SQLite scripts")
        return cast("Scripted", self.engine(db.kind))

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


def _call_in_worker(ex: Executor, job: tuple[str, tuple[Any, ...], dict[str, Any]]) -> tuple[Any, int]:
    """One call of a guarded executor, in its worker: what it returned (or raised), and the statements it ran."""
    method, args, kwargs = job
    before = ex.executed
    try:
        return getattr(ex, method)(*args, **kwargs), ex.executed - before
    except Exception as e:  # raised again in the caller, its type kept where it crosses processes
        try:
            pickle.loads(pickle.dumps(e))
        except Exception:
            e = RuntimeError(f"{type(e).__name__}: {e}")
        return e, ex.executed - before
