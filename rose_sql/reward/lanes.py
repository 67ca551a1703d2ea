"""Where a batch's work runs: query threads that join only while queries are slow, and worker
processes that take balanced chunks of a batch."""

from __future__ import annotations

import gc
import math
import multiprocessing
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Protocol, TypeVar, cast

T = TypeVar("T")
R = TypeVar("R")


def run_in_lanes(
    threads: ThreadPoolExecutor, fn: Callable[[T], R], keys: Sequence[T], max_lanes: int, patience_s: float
) -> list[R]:
    """``fn`` over ``keys`` on as few of ``threads`` as keep the work moving, results in order.

    One lane (a thread taking the keys in turn) starts; whenever every lane has spent
    ``patience_s`` on its current key, one more joins, up to ``max_lanes``. Fast queries thus run
    without threads contending for the GIL (which costs more CPU than it saves), and slow ones
    (timeouts, large scans: SQLite releases the GIL while it works) still overlap. An exception
    of ``fn`` is raised once every lane has stopped.
    """
    if len(keys) <= 1:
        return [fn(k) for k in keys]
    pending = deque(enumerate(keys))
    results: list[R | None] = [None] * len(keys)
    since: list[float] = []  # per lane: when its current key started (inf: between keys)

    def lane(slot: int) -> None:
        while True:
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
        if len(lanes) == max_lanes or not pending:  # no lane will be added: wait for the last ones
            wait(lanes)
            break
        if not wait(lanes, timeout=patience_s).not_done:
            break
    for f in lanes:
        f.result()
    return cast(list[R], results)


CHUNKS_PER_PROCESS = 4
"""A batch goes to the worker processes in this many chunks per process (dynamic load balancing)."""


def balanced(groups: list[list[int]], n: int) -> list[list[int]]:
    """At most ``n`` chunks of whole groups, each group into the smallest chunk so far, largest
    group first; the largest chunk comes first (so it starts first)."""
    chunks: list[list[int]] = [[] for _ in range(min(n, len(groups)))]
    for group in sorted(groups, key=len, reverse=True):
        min(chunks, key=len).extend(group)
    return sorted(chunks, key=len, reverse=True)


class _Scorer(Protocol):
    def _score_keys(self, keys: Sequence[Any]) -> list[Any]: ...


_WORKER: _Scorer | None = None
"""The scorer of a worker process (set by its initializer; the parent never has one)."""


def worker_context(preload: str) -> multiprocessing.context.BaseContext:
    """forkserver where there is one: workers fork from a clean process that imported ``preload``
    once (forking the caller, which may hold threads or CUDA, is unsafe); spawn elsewhere."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([preload])
    return ctx


def start_worker(make: Callable[[Any], _Scorer], config: Any) -> None:
    """A worker process's initializer: its scorer, ``make(config)``."""
    global _WORKER
    _WORKER = make(config)
    gc.freeze()  # what the worker inherited and just built lives as long as it does: out of the collector's scans


def worker_outcomes(keys: list[Any]) -> list[Any]:
    """Score a chunk in a worker process, with that process's scorer."""
    assert _WORKER is not None, "not a reward worker process"
    return _WORKER._score_keys(keys)
