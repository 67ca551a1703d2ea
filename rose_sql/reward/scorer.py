"""Batches: cut into chunks a question's completions together, sent fairly to worker processes that
execute, compare and score each distinct completion once (:mod:`rose_sql.reward.worker`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from rose_sql.config import RewardConfig
from rose_sql.engines import Database
from rose_sql.engines.workers import Pool, Stats, refuse_unguarded_main
from rose_sql.errors import Lost
from rose_sql.reward.extract import Completion, completion_text
from rose_sql.reward.lanes import CHUNKS_PER_PROCESS, FairQueue, balanced
from rose_sql.reward.schedule import Reward, finish
from rose_sql.reward.syntax import UNPARSED
from rose_sql.reward.worker import LATE, Job, Outcome, Packed, Worker, pack, score_chunk, start_worker


@dataclass(frozen=True, slots=True)
class RewardItem:
    """One completion to score against one gold query on one database."""

    completion: Completion
    """The model's output."""
    gold_sql: str
    """The reference SQL."""
    db: Database
    """The database (:meth:`rose_sql.engines.Database.file` for a SQLite file)."""
    prompt: str | None = None
    """When given and ``completion`` is text that starts with it, the prompt is cut off first."""


@dataclass(frozen=True, slots=True)
class _Unit:
    """A chunk of a batch: its distinct jobs, and for each of its items the future and the job."""

    jobs: list[Job]
    targets: list[tuple[Future[Reward], int]]
    step: int | None
    deadline: float | None
    """No query of the unit starts after it (``time.monotonic()``)."""
    budget_s: float | None
    """Nor more than this after the unit is sent: half its batch's time, so that it holds its worker
    for at most that long, and a batch that comes later waits for a worker at most that long."""

    def sent(self) -> tuple[Packed, float | None]:
        """What the worker is sent: the jobs (packed) and when to stop starting queries."""
        deadline = self.deadline
        if deadline is not None and self.budget_s is not None:
            deadline = min(deadline, time.monotonic() + self.budget_s)
        return pack(self.jobs), deadline


class RewardScorer:
    """Scores completions against gold queries in worker processes, computing everything once.

    Every query runs in one of ``processes`` worker processes (:class:`rose_sql.engines.workers.Pool`), never
    in the caller's: a call SQLite cannot interrupt is stopped by stopping its worker, which is
    replaced, and the query runs again alone with its guard doubled: stopped again, it gets the
    ``timeout`` reward; the other items are scored as usual. A batch goes to the workers in chunks
    balanced by size (``4 * processes`` at most), a question's completions together (its gold runs
    once), and concurrent batches share the workers fairly (:class:`~rose_sql.reward.lanes.FairQueue`).
    Each worker extracts, executes, compares and scores its chunk in two phases with caches of its own
    (:class:`~rose_sql.reward.worker.Worker`); this process only cuts batches and weighs outcomes.

    Thread-safe. The workers start at the first batch (or :meth:`start`); use as a context manager or
    call :meth:`close`.
    """

    def __init__(self, config: RewardConfig | None = None) -> None:
        refuse_unguarded_main()  # a spawned worker running an unguarded trainer script again stops here
        self.config = config or RewardConfig()
        self._lock = threading.Lock()
        self._pool: Pool[Worker] | None = None
        self._queue: FairQueue[_Unit, list[list[Outcome]]] | None = None
        self._closed = False

    def start(self) -> None:
        """Start the worker processes now rather than at the first batch (they fork while this process
        has a single thread, else they are spawned)."""
        self._running()

    def score(self, item: RewardItem, step: int | None = None) -> Reward:
        """Score one completion."""
        return self.score_batch([item], step)[0]

    def score_batch(self, items: Sequence[RewardItem], step: int | None = None) -> list[Reward]:
        """Score many completions; identical (SQL, gold, database) triples are scored once."""
        return [f.result() for f in self.submit(items, step)]

    def submit(
        self, items: Sequence[RewardItem], step: int | None = None, *, deadline: float | None = None
    ) -> list[Future[Reward]]:
        """Queue ``items``; each future holds one item's reward, set as soon as its chunk is back.

        Past ``deadline`` (``time.monotonic()``) no query of the batch starts, and no chunk of it
        starts queries for more than half the time the batch had when it came: the items whose
        queries had not finished are unscored ``wall_guard``, the others scored as usual.
        """
        futures: list[Future[Reward]] = [Future() for _ in items]
        if not items:
            return futures
        budget = None if deadline is None else max(0.0, deadline - time.monotonic()) / 2
        groups: dict[tuple[str, Database], list[int]] = {}
        for i, it in enumerate(items):
            groups.setdefault((it.gold_sql, it.db), []).append(i)
        units = []
        for chunk in balanced(list(groups.values()), CHUNKS_PER_PROCESS * self.config.processes):
            jobs = [
                (completion_text(items[i].completion, items[i].prompt), items[i].gold_sql, items[i].db) for i in chunk
            ]
            index = {job: k for k, job in enumerate(dict.fromkeys(jobs))}
            targets = [(futures[i], index[job]) for i, job in zip(chunk, jobs, strict=True)]
            units.append(_Unit(list(index), targets, step, deadline, budget))
        self._running().add(units, deadline, self._unit_done)
        return futures

    @property
    def stats(self) -> Stats | None:
        """What the wall-time guard did (workers stopped and replaced); None before the workers start."""
        return self._pool.stats if self._pool is not None else None

    def close(self) -> None:
        """Stop the worker processes; items not scored yet fail with :class:`RuntimeError`."""
        with self._lock:
            self._closed = True
            queue, pool = self._queue, self._pool
        if queue is not None:
            queue.close()
        if pool is not None:
            pool.close()

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _running(self) -> FairQueue[_Unit, list[list[Outcome]]]:
        with self._lock:
            if self._closed:
                raise RuntimeError("the reward scorer is closed")
            if self._queue is None:
                pool = self._pool = Pool(self.config.processes, start_worker, self.config)
                self._queue = FairQueue(self.config.processes, lambda unit: pool.submit(score_chunk, [unit.sent()]))
            return self._queue

    def _unit_done(self, unit: _Unit, future: Future[list[list[Outcome]]] | None) -> None:
        """Weigh a chunk's outcomes into its items' rewards (``future`` None: the deadline passed first)."""
        if future is None:
            outcomes = [Outcome("wall_guard", f"the query was {LATE}", None, UNPARSED)] * len(unit.jobs)
        else:
            error = future.exception() if not future.cancelled() else RuntimeError("the reward scorer was closed")
            if error is None:
                (outcomes,) = future.result()
            elif isinstance(error, Lost):  # the chunk's worker kept dying: its completions say so, unscored
                outcomes = [Outcome("invalid", str(error), None, UNPARSED)] * len(unit.jobs)
            else:  # a bug of ours, or closed: whoever waits hears of it
                for f, _ in unit.targets:
                    if not f.done():
                        f.set_exception(error)
                return
        rewards = [self._finish(o, unit.step) for o in outcomes]
        for f, k in unit.targets:
            if not f.done():
                f.set_result(rewards[k])

    def _finish(self, o: Outcome, step: int | None) -> Reward:
        return finish(o.status, o.detail, o.sql, o.structure, self.config, step, o.value)
