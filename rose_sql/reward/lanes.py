"""Where a batch's work runs: query threads that join only while queries are slow, and the balanced
chunks a batch is cut into for worker processes (:mod:`rose_sql.workers`)."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar, cast

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
