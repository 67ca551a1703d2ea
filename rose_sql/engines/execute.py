"""What every engine shares when it runs untrusted SQL: the cache, in-flight de-duplication, one engine per kind.

:class:`Executor` is the sandbox every stage runs SQL through: it opens one engine of each kind it is
asked about (:func:`rose_sql.engines.open_engine`, with the run's :attr:`~rose_sql.config.Config.limits`),
caches executions by (the database's identity, SQL) within a bound of cells and bytes, runs a query that
several threads ask for at once only once, and arms the worker's wall-time guard
(:mod:`rose_sql.engines.workers`) around each statement: a statement that overran it is not run again in
the worker when its unit is sent again. It attributes what a statement caused before it counts: a
statement a wall clock stopped (the worker's guard, or the engine's own clock) runs again alone in a
fresh process with its guard doubled (:mod:`rose_sql.engines.alone`), and is a runaway only if it is
stopped again; a prediction's failure that reads as the database's is its own unless the gold, run
again on a fresh connection, fails the same way (:meth:`Executor.attribute`). What a statement may do,
and how each engine's failures become an :class:`~rose_sql.results.Execution`, is the engines'
(:mod:`rose_sql.engines`).

An executor made without a watch (the library's, from Python) keeps the CLI's guarantee: it runs its
statements in a guarded worker process of its own (:class:`rose_sql.engines.workers.Pool`, started at its first
statement), where an executor with that worker's watch runs them, so a call the engine cannot interrupt
is stopped with its worker and answered ``guard``. The catalogue's reads for the judges and the manifest
(:meth:`Executor.describe`, :meth:`~Executor.fingerprint`, ...) run in the calling process. From Python,
:func:`run_query` runs one statement in a fresh sandbox, guarded alike.

What the official scripts do with an item's database besides running a statement runs here too, in the
worker, under the same guard, on the engines that offer it: Spider's reading of the schema
(:meth:`Executor.catalogue`) and the exact count of a statement's steps (:meth:`~Executor.count_steps`)
on those the scripts read through Python's ``sqlite3`` (:class:`~rose_sql.engines.base.Scripted`), and
BIRD's published timed pass (:meth:`~Executor.time_pass`) on every engine that times an execution
(:class:`~rose_sql.engines.base.TimedEngine`), whose executions are each bounded as any statement is and
whose whole is bounded by :meth:`~rose_sql.config.Config.time_pass_s`. No statement of an item runs on a
connection opened anywhere else.
"""

from __future__ import annotations

import pickle
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, cast

from rose_sql.config import INTERPRETER_BYTES, Config
from rose_sql.engines import Database, Engine, Kind, TableInfo, open_engine
from rose_sql.engines.alone import call_alone
from rose_sql.engines.base import (
    CELL_BYTES,
    CONTRACT,
    GUARD_STOPPED,
    UNREADABLE,
    Catalogue,
    Counted,
    DbKey,
    Fingerprint,
    Scripted,
    Timed,
    TimedEngine,
    known_batch,
)
from rose_sql.engines.workers import Pool, Watch, limit_memory, statement_key
from rose_sql.results import Execution, ResultSet

_CATALOGUES = 256
"""Catalogues an executor keeps (by the database's identity), least recently read dropped beyond it."""
CACHE_BYTES = INTERPRETER_BYTES // 4
"""The most memory the execution cache of one process holds, reckoned as the interpreter holds it
(:func:`resident_bytes`): a part of what a worker's memory bound keeps beside the engine's heap
(:data:`~rose_sql.config.INTERPRETER_BYTES`), so that the results other items left in the cache never
take memory a statement may use, and a statement's outcome never depends on what else ran in its worker."""
ROW_OBJECT_BYTES = 48
"""What the interpreter holds for a row beside its cells: the tuple's header and its slot among the rows."""
CELL_OBJECT_BYTES = 56
"""What the interpreter holds for a cell at most beside its text: its slot in the row and the value's
object (a string's header is 49 bytes, an integer's 28 to 32, a float's 24)."""


class Executor:
    """Runs SQL in the sandbox, caching executions by (database identity, SQL).

    Thread-safe: each engine keeps one connection per thread, database and role, and a query that
    several threads ask for at once runs once.

    ``watch``: the guard of the worker process this executor lives in (``rose run``'s, the reward
    scorer's): statements run in this process under it (a no-op ``Watch()`` runs them here unguarded,
    for code that is stopped some other way, and tests). Without one, statements run one at a time in a
    guarded worker process of this executor's own (see the module docstring).
    """

    def __init__(self, config: Config | None = None, *, watch: Watch | None = None, confirm: bool = True) -> None:
        self.config = config or Config()
        self.watch = watch or Watch()
        """The worker's guard (a no-op outside worker processes)."""
        self.guarded = watch is None
        """Whether statements run in this executor's own guarded worker process (no watch was given)."""
        self.confirm = confirm
        """Whether a statement a wall clock stopped is run again alone, with its guard doubled, before its
        outcome counts (:mod:`rose_sql.engines.alone`); off in that second run itself, at the review
        console (whose answers decide no score), and where a test looks at one run's outcome."""
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

    def run(self, db: Database, sql: str, *, role: str = "pred", fresh: bool = False) -> Execution:
        """Execute ``sql`` on ``db`` on the connection of ``role``. Never raises on bad SQL.

        ``fresh``: on a new connection of ``role`` (the one kept is closed first), never from the cache
        and without remembering the outcome (:meth:`attribute` asks it of the gold).

        Guarded (no watch given): a statement whose worker kept dying raises
        :class:`~rose_sql.errors.Lost`, as ``rose run`` reports its items."""
        if self.guarded:
            return cast("Execution", self._in_worker("run", db, sql, role=role, fresh=fresh))
        engine = self.engine(db.kind)
        try:
            dbk = engine.identity(db)
        except OSError as e:
            return Execution("unreadable", 0.0, error=f"{UNREADABLE}: {e.strerror or e}")
        if fresh:
            engine.drop(db, role)
            with self._lock:
                self.executed += 1
            return self._execute(engine, db, dbk, sql, role)[0]
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

    def attribute(self, db: Database, pred: Execution, gold_sql: str | None) -> Execution:
        """The prediction's execution as the outcome contract attributes it: a failure that says the
        database cannot be read (a login, a permission, the network, a corrupt file) is the database's
        only if the gold, run again on a fresh connection right after, fails the same way; otherwise it
        is the prediction's own error (``error``, with the engine's message and why). Any other
        execution is returned as it is. ``gold_sql``: a gold that ran (None: without a gold, or when the
        gold itself failed, ``SELECT 1`` is what runs again)."""
        if pred.status != "unreadable":
            return pred
        again = self.run(db, gold_sql if gold_sql is not None else "SELECT 1", role="gold", fresh=True)
        if again.status == "unreadable":
            return pred
        message = (pred.error or "").removeprefix(f"{UNREADABLE}: ")
        why = "the gold, run again on a fresh connection right after, read the database"
        if gold_sql is None:
            why = "a statement run again on a fresh connection right after read the database"
        return replace(pred, status="error", error=f"{message} (the statement's own error: {why})")

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
            return Counted(None, f"{UNREADABLE}: {e.strerror or e}", status="unreadable")
        key = statement_key("steps", dbk[0], sql)
        if key in self.watch.poisoned:
            return self._confirmed_count(engine, db, sql, Counted(None, GUARD_STOPPED, "process", status="guard"))
        self.watch.arm(key, engine.guard_s + self.config.guard_margin_s)
        try:
            counted = engine.count_steps(db, sql)
        finally:
            self.watch.disarm()
        if counted.limit == "wall":
            return self._confirmed_count(engine, db, sql, counted)
        return counted

    def time_pass(self, db: Database, statements: Sequence[str], iterations: int, *, first_row: bool = False) -> Timed:
        """BIRD's timed pass (``evaluation_ves.py``): ``iterations`` times, each statement in turn, each
        execution timed on a connection of its own (:meth:`TimedEngine.timed
        <rose_sql.engines.base.TimedEngine.timed>`, as mini-dev's script times it: on every engine whose
        :attr:`KindInfo.timed <rose_sql.engines.kinds.KindInfo.timed>` is set; with ``first_row``,
        :meth:`Scripted.timed_first <rose_sql.engines.base.Scripted.timed_first>`, as BIRD dev's script
        times it, on SQLite), in the worker.

        Each execution is bounded as any statement is (the step budget, the row and byte caps, the wall
        clock of ``--timeout``, the worker's guard armed for it), and the pass as a whole by
        :meth:`Config.time_pass_s <rose_sql.config.Config.time_pass_s>` from its start: past it, the
        execution running is stopped, and the pass with it. The first execution that does not run to its
        end stops the pass: what ran is kept, with why and where it stopped. A pass whose worker the guard
        stopped is answered with why when its unit is sent again, never run twice."""
        if self.guarded:
            return cast("Timed", self._in_worker("time_pass", db, tuple(statements), iterations, first_row=first_row))
        engine = self._scripted(db) if first_row else self._timing(db)
        try:
            dbk = engine.identity(db)
        except OSError as e:
            return Timed((), f"{UNREADABLE}: {e.strerror or e}", status="unreadable")
        key = statement_key("time-first" if first_row else "time", dbk[0], *statements)
        if key in self.watch.poisoned:
            return Timed((), GUARD_STOPPED, status="guard")
        known = [known_batch(self._cached_result(dbk, sql), self.limits) for sql in statements]
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
                        return Timed(tuple(times), past, (i, j), "timeout")
                    self.watch.arm(key, min(engine.guard_s, left) + self.config.guard_margin_s)
                    timing = (
                        cast("Scripted", engine).timed_first(db, sql, deadline)
                        if first_row
                        else engine.timed(db, sql, deadline, known[j])
                    )
                    failure = timing.failure
                    if failure is not None:
                        bound = failure.limit == "wall" and time.monotonic() >= deadline  # the pass's, not its own
                        why = past if bound else failure.error or failure.status
                        return Timed(tuple(times), why, (i, j), "timeout" if bound else failure.status)
                    row.append(timing.seconds)
                times.append(tuple(row))
        finally:
            self.watch.disarm()
        return Timed(tuple(times))

    def _cached_result(self, dbk: DbKey, sql: str) -> ResultSet | None:
        """``sql``'s result on the database of ``dbk`` when the execution cache holds it (None otherwise)."""
        with self._lock:
            hit = self._cache.get((dbk, sql))
        return hit[0].result if hit is not None else None

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

    def _timing(self, db: Database) -> TimedEngine:
        """The engine of ``db``, which must be one that times an execution as BIRD's ``evaluation_ves.py``
        does (:attr:`KindInfo.timed <rose_sql.engines.kinds.KindInfo.timed>`)."""
        if not db.info.timed:
            raise ValueError(f"{db.info.name} offers no timed execution")
        return cast("TimedEngine", self.engine(db.kind))

    def _execute(self, engine: Engine, db: Database, dbk: DbKey, sql: str, role: str) -> tuple[Execution, int]:
        key = statement_key(dbk[0], sql)
        if key in self.watch.poisoned:
            process = CONTRACT["process"]
            first = Execution(process.status, 0.0, error=GUARD_STOPPED, limit=process.limit)
            return self._confirmed(engine, db, sql, role, first, 0)
        self.watch.arm(key, engine.guard_s + self.config.guard_margin_s)
        try:
            execution, nbytes = engine.run(db, sql, role)
        finally:
            self.watch.disarm()
        if execution.status == "guard":
            return self._confirmed(engine, db, sql, role, execution, nbytes)
        return execution, nbytes

    def _confirmed(
        self, engine: Engine, db: Database, sql: str, role: str, first: Execution, nbytes: int
    ) -> tuple[Execution, int]:
        """A statement a wall clock stopped (``first``), confirmed: run again alone in a fresh process with
        its guard doubled (:func:`~rose_sql.engines.alone.call_alone`). Stopped again, it is a runaway: a
        ``timeout`` (the statement's own outcome, as the official scripts count a timeout); otherwise it is
        recorded as that second run ended, saying why it ran twice. When the second run cannot be made
        (the process would not start), ``first`` stands: unconfirmed, never a score."""
        if not self.confirm:
            return first, nbytes
        bound = 2 * engine.guard_s + self.config.guard_margin_s
        done = call_alone("rose_sql.engines.execute:again", (self._plain_config, "_once", (db, sql, role)), bound)
        if done.outcome == "failed":
            return replace(first, error=f"{first.error} (not confirmed: {done.why})"), nbytes
        if done.outcome == "past":
            second = f"its process was stopped {bound:g} s after it started"
            return runaway(first, second, "process", done.seconds), 0
        execution, size = cast("tuple[Execution, int]", done.value)
        if execution.status == "guard":
            return runaway(first, execution.error or "stopped again", execution.limit, done.seconds), 0
        return replace(execution, rerun=first.error), size

    def _confirmed_count(self, engine: Engine, db: Database, sql: str, first: Counted) -> Counted:
        """A count a wall clock stopped, confirmed as :meth:`_confirmed` confirms a statement."""
        if not self.confirm:
            return first
        bound = 2 * engine.guard_s + self.config.guard_margin_s
        done = call_alone("rose_sql.engines.execute:again", (self._plain_config, "count_steps", (db, sql)), bound)
        if done.outcome == "failed":
            return replace(first, error=f"{first.error} (not confirmed: {done.why})")
        if done.outcome == "past":
            second = f"its process was stopped {bound:g} s after it started"
            return Counted(None, ran_away(first.error, second), "process", first.random, "timeout")
        counted = cast("Counted", done.value)
        if counted.limit == "wall":
            return Counted(
                None, ran_away(first.error, counted.error or "stopped again"), "wall", counted.random, "timeout"
            )
        return counted

    @property
    def _plain_config(self) -> Config:
        """The configuration a second run is sent (its statements' limits; no judge)."""
        return self.config.with_(judge=None)

    def _once(self, db: Database, sql: str, role: str) -> tuple[Execution, int]:
        """One run of a statement, neither cached nor confirmed (the second run of a confirmation)."""
        engine = self.engine(db.kind)
        try:
            dbk = engine.identity(db)
        except OSError as e:
            return Execution("unreadable", 0.0, error=f"{UNREADABLE}: {e.strerror or e}"), 0
        return self._execute(engine, db, dbk, sql, role)

    def _remember(self, key: tuple[DbKey, str], execution: Execution, nbytes: int) -> None:
        """Keep ``execution`` within the cache's bounds of cells and of memory (:data:`CACHE_BYTES`, or four
        results' byte caps where that is less), the least recently used dropped beyond them; one that
        alone would take a quarter of a bound is not kept."""
        res = execution.result
        cells = 1 + (len(res.rows) * max(1, len(res.columns)) if res else 0)
        held = resident_bytes(execution, nbytes)
        max_bytes = min(4 * self.config.max_result_bytes, CACHE_BYTES)
        if cells > self.config.cache_cells // 4 or held > max_bytes // 4:
            return
        self._cache[key] = (execution.as_cached(), cells, held)  # as every hit returns it
        self._cache_cells += cells
        self._cache_bytes += held
        while (self._cache_cells > self.config.cache_cells or self._cache_bytes > max_bytes) and self._cache:
            _, (_, old_cells, old_bytes) = self._cache.popitem(last=False)
            self._cache_cells -= old_cells
            self._cache_bytes -= old_bytes


def resident_bytes(execution: Execution, nbytes: int) -> int:
    """The memory the interpreter holds for ``execution``'s result, reckoned from above: ``nbytes`` (the
    engine's reckoning of its rows against the byte cap: :data:`~rose_sql.engines.base.CELL_BYTES` a cell
    and the text) with each row's and each cell's objects, and the distinct rows kept past the row cap
    alike (those the rows share reckoned again)."""
    res = execution.result
    if res is None:
        return 1024
    width = max(1, len(res.columns))
    extra = CELL_OBJECT_BYTES - CELL_BYTES
    held = 1024 + nbytes + len(res.rows) * (ROW_OBJECT_BYTES + width * extra)
    if res.distinct is not None:
        held += len(res.distinct) * (ROW_OBJECT_BYTES + width * CELL_OBJECT_BYTES)
        held += sum(len(v) for row in res.distinct for v in row if type(v) is str or type(v) is bytes)
    return held


def run_query(db: Database, sql: str, config: Config | None = None) -> Execution:
    """Execute one query in a fresh sandbox, in a guarded worker process (convenience for scripts and tests)."""
    with Executor(config) as ex:
        return ex.run(db, sql)


def ran_away(first: str | None, second: str) -> str:
    """Why a confirmed runaway is the statement's own: how both runs were stopped."""
    return f"a runaway, stopped twice: {first}; run again alone in a fresh process with its guard doubled, {second}"


def runaway(first: Execution, second: str, limit: Any, seconds: float) -> Execution:
    """The execution of a confirmed runaway: a ``timeout`` whose limit is the wall clock or the guard
    that stopped its second run (the outcome contract's ``wall`` and ``process`` rows, confirmed)."""
    return Execution("timeout", seconds, error=ran_away(first.error, second), limit=limit or "wall")


def again(request: tuple[Config, str, tuple[Any, ...]]) -> Any:
    """The second run of a confirmation, in its fresh process: an executor of the doubled limits, under
    no watch (the parent's deadline is its guard), that confirms nothing, makes one call."""
    config, method, args = request
    limit_memory(config.worker_memory_bytes)
    doubled = config.with_(
        timeout_s=2 * config.timeout_s,
        server_timeout_s=None if config.server_timeout_s is None else 2 * config.server_timeout_s,
        efficiency_budget_s=None,
        judge=None,
        workers=1,
    )
    with Executor(doubled, watch=Watch(), confirm=False) as ex:
        return getattr(ex, method)(*args)


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
