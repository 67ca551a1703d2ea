"""Where a batch's work runs: the balanced chunks a batch is cut into, the fair queue that sends them
to the worker processes (:mod:`rose_sql.engines.workers`), and, inside a worker, query threads that join
only while queries are slow."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def run_in_lanes(
    threads: ThreadPoolExecutor,
    fn: Callable[[T], R],
    keys: Sequence[T],
    max_lanes: int,
    patience_s: float,
    *,
    deadline: float | None = None,
) -> list[R | None]:
    """``fn`` over ``keys`` on as few of ``threads`` as keep the work moving, results in order.

    One lane (a thread taking the keys in turn) starts; whenever every lane has spent
    ``patience_s`` on its current key, one more joins, up to ``max_lanes``. Fast queries thus run
    without threads contending for the GIL (which costs more CPU than it saves), and slow ones
    (timeouts, large scans: SQLite releases the GIL while it works) still overlap. An exception
    of ``fn`` is raised once every lane has stopped.

    With a ``deadline`` (``time.monotonic()``) no key starts after it and the call returns by then:
    the keys not done are None (one still running finishes on its thread, its result dropped).
    Without one, every result is set.
    """
    if deadline is None and len(keys) <= 1:
        return [fn(k) for k in keys]
    pending = deque(enumerate(keys))
    results: list[R | None] = [None] * len(keys)
    since: list[float] = []  # per lane: when its current key started (inf: between keys)

    def lane(slot: int) -> None:
        while deadline is None or time.monotonic() < deadline:
            try:
                i, key = pending.popleft()
            except IndexError:
                return
            since[slot] = time.monotonic()
            results[i] = fn(key)
            since[slot] = math.inf

    lanes: list[Future[None]] = []
    while True:
        if len(lanes) < max_lanes and pending and all(time.monotonic() - t >= patience_s for t in since):
            since.append(time.monotonic())  # counts as busy from now, so lanes are added one at a time
            lanes.append(threads.submit(lane, len(lanes)))
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if len(lanes) == max_lanes or not pending:  # no lane will be added: wait for the last ones
            wait(lanes, timeout=left)
            break
        if left == 0.0 or not wait(lanes, timeout=patience_s if left is None else min(patience_s, left)).not_done:
            break
    for f in lanes:
        if f.done():  # past the deadline, a lane still running is left to finish alone
            f.result()
    return list(results)


CHUNKS_PER_PROCESS = 4
"""A batch goes to the worker processes in this many chunks per process (dynamic load balancing)."""


def balanced(groups: list[list[int]], n: int) -> list[list[int]]:
    """At most ``n`` chunks of whole groups, each group into the smallest chunk so far, largest
    group first; the largest chunk comes first (so it starts first)."""
    chunks: list[list[int]] = [[] for _ in range(min(n, len(groups)))]
    for group in sorted(groups, key=len, reverse=True):
        min(chunks, key=len).extend(group)
    return sorted(chunks, key=len, reverse=True)


U = TypeVar("U")


@dataclass(eq=False)
class _Batch(Generic[U, R]):
    units: deque[U]
    deadline: float | None
    done: Callable[[U, Future[R] | None], None]
    order: int
    out: int = 0
    last_sent: int = 0


class FairQueue(Generic[U, R]):
    """The units of concurrent batches, sent to worker processes so that every batch gets its turn.

    At most ``slots`` units are out at once (one per worker process: none waits in a busy worker's
    pipe). A freed slot goes to the batch with the fewest units out and, among those, the one served
    least recently (a new batch first): the batches take turns, so a batch of many or slow units
    holds a later one back by the unit it is running, never by its whole length.

    ``send(unit)`` sends a unit and returns its future; when it is done, ``done(unit, future)`` is
    called, and ``done(unit, None)`` for a unit not sent by its batch's deadline. Both are called on
    the queue's own thread, never from a pool's callback (which may hold the pool's lock).
    """

    def __init__(self, slots: int, send: Callable[[U], Future[R]]) -> None:
        self._slots = slots
        self._send = send
        self._cond = threading.Condition()
        self._batches: list[_Batch[U, R]] = []
        self._finished: deque[tuple[_Batch[U, R], U, Future[R]]] = deque()
        self._out = 0
        self._order = 0
        self._sent = 0
        self._closed = False
        self._thread = threading.Thread(target=self._dispatch, name="rose-reward-queue", daemon=True)
        self._thread.start()

    def add(self, units: Sequence[U], deadline: float | None, done: Callable[[U, Future[R] | None], None]) -> None:
        """Queue a batch's units (sent in order, taking turns with the other batches')."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the reward scorer is closed")
            self._order += 1
            self._batches.append(_Batch(deque(units), deadline, done, self._order))
            self._cond.notify()

    def close(self) -> None:
        """Stop sending: units not sent are done with a failed future; units out finish as they come."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()

    def _dispatch(self) -> None:
        while True:
            with self._cond:
                while True:
                    finished = list(self._finished)
                    self._finished.clear()
                    if self._closed:
                        dropped, sends = self._take_all(), []
                        break
                    dropped, sends = self._take_expired(), self._take_sendable()
                    if finished or dropped or sends:
                        break
                    self._cond.wait(self._until_next_deadline())
            for batch, unit, future in finished:
                batch.done(unit, future)
            for batch, unit, gone in dropped:
                batch.done(unit, gone)
            for batch, unit in sends:
                try:
                    future = self._send(unit)
                except Exception as e:  # a closed or broken pool: the unit says so
                    future = Future()
                    future.set_exception(e)
                future.add_done_callback(partial(self._returned, batch, unit))
            if self._closed and not sends:
                return

    def _returned(self, batch: _Batch[U, R], unit: U, future: Future[R]) -> None:
        """A unit is back (called by the pool's thread): its slot is free; ``done`` runs on ours."""
        with self._cond:
            self._out -= 1
            batch.out -= 1
            if not self._closed:
                self._finished.append((batch, unit, future))
                self._cond.notify()
                return
        batch.done(unit, future)  # the queue's thread is gone

    def _take_sendable(self) -> list[tuple[_Batch[U, R], U]]:
        sends = []
        while self._out < self._slots:
            waiting = [b for b in self._batches if b.units]
            if not waiting:
                break
            batch = min(waiting, key=lambda b: (b.out, b.last_sent, b.order))
            sends.append((batch, batch.units.popleft()))
            self._sent += 1
            batch.out += 1
            batch.last_sent = self._sent
            self._out += 1
        self._batches = [b for b in self._batches if b.units or b.out]
        return sends

    def _take_expired(self) -> list[tuple[_Batch[U, R], U, Future[R] | None]]:
        now = time.monotonic()
        dropped: list[tuple[_Batch[U, R], U, Future[R] | None]] = []
        for b in self._batches:
            if b.deadline is not None and now >= b.deadline:
                dropped += [(b, u, None) for u in b.units]
                b.units.clear()
        return dropped

    def _take_all(self) -> list[tuple[_Batch[U, R], U, Future[R] | None]]:
        closed: Future[R] = Future()
        closed.set_exception(RuntimeError("the reward scorer was closed"))
        dropped: list[tuple[_Batch[U, R], U, Future[R] | None]] = [
            (b, u, closed) for b in self._batches for u in b.units
        ]
        for b in self._batches:
            b.units.clear()
        return dropped

    def _until_next_deadline(self) -> float | None:
        deadlines = [b.deadline for b in self._batches if b.units and b.deadline is not None]
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
