"""Worker processes with a hard wall-time guard: the one engine under ``rose run`` and the reward scorer.

Each worker process runs its own loop: it builds its state once (``init(arg, watch)``: a sandbox, its
execution cache, an evidence finder, a reward scorer) and then applies the functions it is sent to
units of work with that state. No module keeps per-process state in a global.

Untrusted SQL can call a function that SQLite cannot interrupt (``instr`` or ``LIKE`` over strings of
megabytes run for minutes): the only bound on such a call is to stop the process. So every statement
that may run untrusted SQL *arms* its worker's :class:`Watch` with a wall-clock deadline and a key
naming the statement. A supervising thread in the parent kills a worker whose armed deadline passed,
starts a fresh one, and sends the unit again with the statement's key *poisoned*: the sandbox then
never runs that statement in the worker again (it confirms it alone in a fresh process,
:mod:`rose_sql.engines.alone`). Nothing else of the unit is lost, and the item whose statement it was
says so on its record. A worker that dies for any other
reason (killed, out of memory) has its unit sent again once; a second death of the same unit is
reported as such.

Workers start by ``fork`` while the parent has a single thread (they begin with everything imported).
Otherwise, and for every replacement (the supervising thread exists by then), they are forked from
multiprocessing's fork server: a clean, single-threaded process started once (at the first worker that
needs it) with ROSE-SQL's worker modules imported, so a worker starts in a few hundredths of a second,
not the second a ``spawn`` takes to import everything again. Such a worker takes the parent's current
environment variables, working folder and ``sys.path``, and runs the caller's main module again as
``spawn`` would: a script must keep its work under ``if __name__ == "__main__":``, as multiprocessing
requires. One that does not is stopped with a :class:`~rose_sql.errors.UsageError` saying so as soon as
the worker's run of it reaches ROSE-SQL (a pool or a reward scorer), not left to run its work twice.
Workers leave when the parent dies (forked from the fork server, they watch the parent's end of the
pipe they were started through, and the fork server, which leaves when the parent does).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import hashlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Generic, TypeVar

from rose_sql.errors import Lost, UsageError

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")

KEY_BYTES = 16
SLOTS_PER_WORKER = 16
"""Threads of one worker that may arm the watch at once (the reward scorer's query threads)."""
_TICK_S = 0.05
_IN_FLIGHT = 2
"""Units sent to a worker at once: the next one waits in the pipe while the first runs."""
GC_YOUNG = 5000
"""Container allocations between two collections of a worker's youngest generation (Python's default is 700):
a worker makes a tuple per result row and keeps thousands of results in its execution cache and its parse
memos, and at the default the full collections that follow walked all of them (on the 9 Spider files, 0.17 to
0.27 s of each worker's 1.5 to 1.9 s of CPU went to the collector; 0.07 s at this threshold, no full collection
in that run). The older generations keep their thresholds; cyclic garbage is still collected, later."""


def statement_key(*parts: str) -> bytes:
    """The key that names a statement to the watch (and to the poison set): a digest of its parts."""
    h = hashlib.blake2b(digest_size=KEY_BYTES)
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.digest()


class Watch:
    """A worker's side of the guard: arm before a statement that may run away, disarm after.

    Each thread of the worker takes its own slot (up to :data:`SLOTS_PER_WORKER`); in a process that
    is not a worker (the library called directly) the watch does nothing.
    """

    def __init__(self, deadlines: Any = None, keys: Any = None, worker: int = 0) -> None:
        self._deadlines = deadlines
        self._keys = keys
        self._base = worker * SLOTS_PER_WORKER
        self._local = threading.local()
        self._next = 0
        self._lock = threading.Lock()
        self.poisoned: frozenset[bytes] = frozenset()
        """Keys of statements that overran their guard in an earlier attempt: answered, never run."""

    def _slot(self) -> int:
        slot: int | None = getattr(self._local, "slot", None)
        if slot is None:
            with self._lock:
                slot = self._base + self._next % SLOTS_PER_WORKER
                self._next += 1
            self._local.slot = slot
        return slot

    def arm(self, key: bytes, seconds: float) -> None:
        """This thread starts a statement named ``key``; the worker may be stopped ``seconds`` from now."""
        if self._deadlines is None:
            return
        slot = self._slot()
        self._keys[slot * KEY_BYTES : (slot + 1) * KEY_BYTES] = key
        self._deadlines[slot] = time.monotonic() + seconds

    def disarm(self) -> None:
        """This thread's statement is over."""
        if self._deadlines is not None:
            self._deadlines[self._slot()] = 0.0


def _loop(
    conn: Connection,
    init: Callable[[Any, Watch], Any],
    arg: Any,
    deadlines: Any,
    keys: Any,
    index: int,
    env: dict[str, str] | None = None,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops the workers
    if env is not None:  # forked from the fork server: the parent's environment now, not the server's at its start
        os.environ.clear()
        os.environ.update(env)
    parent = os.getppid()
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    watch = Watch(deadlines, keys, index)
    state = init(arg, watch)
    gc.freeze()  # what the worker inherited and just built lives as long as it does: out of the collector's scans
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
    try:
        _serve(conn, state, watch)
    finally:
        close = getattr(state, "close", None)
        if callable(close):  # what the state holds outside the process (a scratch database) goes with it
            with contextlib.suppress(Exception):
                close()


def _serve(conn: Connection, state: Any, watch: Watch) -> None:
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        unit, fn, items, poisoned = msg
        watch.poisoned = poisoned
        out: tuple[bool, Any]
        try:
            out = (True, [fn(state, x) for x in items])
        except Exception as e:  # a bug of ours in this unit: its items say so, the worker goes on
            out = (False, f"{type(e).__name__}: {e}")
        conn.send((unit, *out))


def _exit_with(parent: int) -> None:
    """Leave when the process that started this worker is gone (kill -9 included): no orphans. Forked by
    the fork server, the worker's parent is that server; the pool's process is watched through its end of
    the pipe the worker was started through (closed when it dies)."""
    starter = multiprocessing.parent_process()
    while True:
        time.sleep(0.5)
        if os.getppid() != parent or (starter is not None and not starter.is_alive()):
            os._exit(0)


CODE_BYTES = 128 * 2**20
"""What of a worker's resident memory is not its data: the code of the interpreter and the libraries
mapped from their files (65 MB with SQLite, DuckDB and the drivers loaded) and the main thread's stack."""


def limit_memory(limit: int) -> None:
    """Hold this process's resident memory to ``limit`` bytes, where the system allows it: its data (every
    allocation, SQLite's heap and the interpreter's alike, and the threads' stacks: ``RLIMIT_DATA``) to
    ``limit`` less :data:`CODE_BYTES`. An allocation past it fails (SQLite's: the statement is stopped as
    out of memory, the outcome of its heap limit) and the machine is never at risk."""
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        data = max(limit - CODE_BYTES, CODE_BYTES)
        resource.setrlimit(resource.RLIMIT_DATA, (data if hard < 0 else min(data, hard), hard))
    except (ImportError, ValueError, OSError):  # not on this platform, or not allowed: SQLite's heap limit holds
        pass


def can_bound_files() -> bool:
    """Whether :func:`bounded_files` can hold files to a size here (a platform with ``RLIMIT_FSIZE``)."""
    try:
        import resource
    except ImportError:
        return False
    return hasattr(resource, "RLIMIT_FSIZE") and hasattr(signal, "SIGXFSZ") and hasattr(signal, "pthread_sigmask")


@contextlib.contextmanager
def bounded_files(limit: int) -> Iterator[Callable[[], bool]]:
    """Within: no file this process writes grows past ``limit`` bytes (``RLIMIT_FSIZE``, the process's own,
    so it is for a worker that does nothing else meanwhile: a timed pass). A write past it fails (``EFBIG``:
    SQLite's ``disk I/O error``) instead of the kernel's ``SIGXFSZ`` ending the process: the signal is
    blocked in this thread and left pending, so the function yielded says, by that signal, whether a write
    met the bound (proof that the failure was the bound's, not the disk's). On leaving, the limit before
    is back and a pending signal taken. Requires :func:`can_bound_files`."""
    import resource

    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGXFSZ})
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    try:
        yield lambda: signal.SIGXFSZ in signal.sigpending()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        if signal.SIGXFSZ in signal.sigpending():
            signal.sigwait({signal.SIGXFSZ})
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def can_fork() -> bool:
    """Whether forking workers is safe here: Linux (macOS frameworks are not fork-safe), one thread."""
    return sys.platform == "linux" and threading.active_count() == 1


_PRELOAD = {"rose_sql.engines.execute", "rose_sql.engines.sqlite"}
"""Modules the fork server imports before it forks any worker (each pool's ``init`` module joins them)."""
_preload_lock = threading.Lock()


def preload(*modules: str) -> None:
    """Have the fork server import ``modules`` too, once, before it forks a worker: what the caller's main
    module imports, which each worker forked from it runs again (as ``spawn`` does), so that the worker finds
    them imported (``rose`` preloads its command-line package, the test suite pytest: 0.2 s a worker). Takes
    effect when the fork server starts, at the first worker that needs it. A module must import without a
    thread or an error other than ImportError (which is ignored)."""
    with _preload_lock:
        _PRELOAD.update(modules)


def _clean_start() -> str:
    """The start method of a worker forked from a clean process: the fork server (started at the first call,
    with :data:`_PRELOAD` imported), or ``spawn`` where there is none (Windows)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    from multiprocessing import forkserver

    with _preload_lock:  # its modules are set before it starts; started here, not from the pool's thread
        forkserver.set_forkserver_preload(sorted(_PRELOAD))  # not __main__: a worker runs it as spawn does
        forkserver.ensure_running()
    return "forkserver"


def refuse_unguarded_main() -> None:
    """Raise :class:`UsageError` in a spawned process that is still importing its parent's main module:
    the caller's script has no ``if __name__ == "__main__":`` guard, and is being run again here."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise UsageError(
            "ROSE-SQL runs queries in worker processes, and a worker started by spawn runs the caller's script "
            'again: keep the script\'s work under `if __name__ == "__main__":` (multiprocessing requires it)'
        )


@dataclass
class _Unit(Generic[R]):
    fn: Callable[[Any, Any], R]
    items: Sequence[Any]
    future: Future[list[R]]
    poisoned: frozenset[bytes] = frozenset()
    deaths: int = 0


@dataclass
class _Worker:
    process: Any
    conn: Connection
    units: deque[int] = field(default_factory=deque)
    """Units sent and not yet answered, in order: the first is running, the next waits in the pipe."""


@dataclass
class Stats:
    """What the guard did during a pool's life."""

    guard_kills: int = 0
    """Workers stopped because a statement overran its wall-clock guard."""
    deaths: int = 0
    """Workers that died for another reason."""
    poisoned: list[bytes] = field(default_factory=list)
    """Keys of the statements stopped by the guard."""


def _settle(future: Future[Any], value: Any = None, *, error: BaseException | None = None) -> None:
    """Give a unit's future its outcome, unless its caller cancelled it (Ctrl-C cancels the tasks waiting on
    it): nobody waits for it then, and setting it would raise in the supervising thread."""
    with contextlib.suppress(InvalidStateError):
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)


class Pool(Generic[S]):
    """Worker processes that each own a state made by ``init(arg, watch)`` in the worker.

    :meth:`submit` sends a unit (a function of the state and an item, and the items) to the next idle
    worker and returns a future of the results in order. Thread-safe; use as a context manager.
    """

    def __init__(self, size: int, init: Callable[[Any, Watch], S], arg: Any) -> None:
        self.size = max(1, size)
        self._init, self._arg = init, arg
        self._deadlines = multiprocessing.RawArray(ctypes.c_double, self.size * SLOTS_PER_WORKER)
        self._keys = multiprocessing.RawArray(ctypes.c_char, self.size * SLOTS_PER_WORKER * KEY_BYTES)
        self._lock = threading.Lock()
        self._queue: deque[int] = deque()
        self._units: dict[int, _Unit[Any]] = {}
        self._next_unit = 0
        self._closed = False
        self.stats = Stats()
        refuse_unguarded_main()
        if init.__module__.startswith("rose_sql."):
            _PRELOAD.add(init.__module__)
        self._workers = [self._start(i, "fork" if can_fork() else _clean_start()) for i in range(self.size)]
        self._wake_r, self._wake_w = multiprocessing.Pipe(duplex=False)
        self._supervisor = threading.Thread(target=self._supervise, name="rose-workers", daemon=True)
        self._supervisor.start()

    # ------------------------------------------------------------------ public

    def submit(self, fn: Callable[[S, T], R], items: Sequence[T]) -> Future[list[R]]:
        """Apply ``fn(state, item)`` to every item in one worker; the future holds the results in order.

        ``fn`` must be a module-level function (it is sent to the worker by reference). An exception in
        ``fn`` fails the future with :class:`RuntimeError`; a unit whose worker kept dying fails with
        :class:`Lost`.
        """
        future: Future[list[R]] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is closed")
            uid = self._next_unit
            self._next_unit += 1
            self._units[uid] = _Unit(fn, list(items), future)
            self._queue.append(uid)
        self._wake_w.send_bytes(b"")
        return future

    def close(self, *, now: bool = False) -> None:
        """Stop every worker (units not started are cancelled); ``now``: without waiting for running ones."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake_w.send_bytes(b"")
        self._supervisor.join()
        for w in self._workers:
            with contextlib.suppress(OSError):
                w.conn.send(None)
        for w in self._workers:
            w.process.join(timeout=0 if now else 2)
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
        for u in self._units.values():
            u.future.cancel()

    def __enter__(self) -> Pool[S]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ supervision

    def _start(self, index: int, method: str) -> _Worker:
        ctx: Any = multiprocessing.get_context(method)
        parent, child = ctx.Pipe()
        env = None if method == "fork" else dict(os.environ)
        args = (child, self._init, self._arg, self._deadlines, self._keys, index, env)
        process = ctx.Process(target=_loop, args=args, name=f"rose-worker-{index}", daemon=True)
        process.start()
        child.close()
        for s in range(index * SLOTS_PER_WORKER, (index + 1) * SLOTS_PER_WORKER):
            self._deadlines[s] = 0.0
        return _Worker(process, parent)

    def _supervise(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                self._dispatch()
            watched = [self._wake_r, *(w.conn for w in self._workers), *(w.process.sentinel for w in self._workers)]
            ready = wait(watched, _TICK_S)
            if self._wake_r in ready:
                while self._wake_r.poll():
                    self._wake_r.recv_bytes()
            for i, w in enumerate(self._workers):
                if w.conn in ready:
                    self._receive(i)
                elif w.process.sentinel in ready and not w.process.is_alive():
                    self._died(i)
            self._check_guards()

    def _dispatch(self) -> None:
        for depth in range(_IN_FLIGHT):  # one unit to every idle worker first, then one more each
            for w in self._workers:
                if len(w.units) == depth and (uid := self._take()) is not None:
                    u = self._units[uid]
                    w.units.append(uid)
                    with contextlib.suppress(OSError, ValueError):  # a worker gone: its sentinel says so
                        w.conn.send((uid, u.fn, u.items, u.poisoned))

    def _take(self) -> int | None:
        """The next queued unit whose caller still waits for it (a cancelled one is dropped, never sent)."""
        while self._queue:
            uid = self._queue.popleft()
            if not self._units[uid].future.cancelled():
                return uid
            del self._units[uid]
        return None

    def _receive(self, i: int) -> None:
        w = self._workers[i]
        try:
            uid, ok, value = w.conn.recv()
        except (EOFError, OSError):
            self._died(i)
            return
        except Exception as e:  # a reply that does not unpickle here: the unit at its front fails, the pool goes on
            with self._lock:
                front = w.units.popleft() if w.units else None
                u = self._units.pop(front, None) if front is not None else None
            if u is not None:
                _settle(u.future, error=RuntimeError(f"a worker's reply could not be read: {type(e).__name__}: {e}"))
            return
        with self._lock:
            if w.units and w.units[0] == uid:
                w.units.popleft()
            u = self._units.pop(uid, None)
        if u is None:
            return
        if ok:
            _settle(u.future, value)
        else:
            _settle(u.future, error=RuntimeError(value))

    def _check_guards(self) -> None:
        now = time.monotonic()
        for i in range(len(self._workers)):
            base = i * SLOTS_PER_WORKER
            for s in range(base, base + SLOTS_PER_WORKER):
                deadline = self._deadlines[s]
                if deadline and now > deadline:
                    key: bytes = self._keys.raw[s * KEY_BYTES : (s + 1) * KEY_BYTES]
                    self.stats.guard_kills += 1
                    self.stats.poisoned.append(key)
                    self._replace(i, poison=key)
                    break

    def _died(self, i: int) -> None:
        self.stats.deaths += 1
        process = self._workers[i].process
        process.join(timeout=5)  # its exit status (a fork server reports it a moment after the pipe closes)
        self._replace(i, death=f"the worker process died (exit code {process.exitcode})")

    def _replace(self, i: int, *, poison: bytes | None = None, death: str | None = None) -> None:
        """Stop worker ``i``, start a fresh one, and send its unit again (poisoned, or counted as a death)."""
        w = self._workers[i]
        if w.process.is_alive():
            w.process.kill()
        w.process.join()
        w.conn.close()
        with self._lock:
            self._workers[i] = self._start(i, _clean_start())
            pending = [uid for uid in w.units if uid in self._units]
            if not pending:
                return
            running = self._units[pending[0]]
            if poison is not None:
                running.poisoned = running.poisoned | {poison}
            else:
                running.deaths += 1
                if running.deaths > 1:
                    del self._units[pending[0]]
                    _settle(running.future, error=Lost(f"{death}, twice on the same work"))
                    pending = pending[1:]
            self._queue.extendleft(reversed(pending))  # sent again first, in their order
