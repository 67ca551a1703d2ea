"""Evaluate whole prediction files: one process, shared executions, records streamed to disk.

Items of every prediction file share one thread pool for executions, one execution cache (a gold
query runs once however many systems are evaluated) and, when a judge is configured, one LLM
client with its concurrency limit, cache and ledger. Each record is appended to its system's
``records.jsonl`` as soon as it is finished; ``resume=True`` skips items already recorded.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from rose_sql.config import Config
from rose_sql.errors import UsageError
from rose_sql.evaluate import Executed, execute_item, failed_record, judge_item, to_record, unjudged_record
from rose_sql.evidence import Finder
from rose_sql.execute import Executor
from rose_sql.items import Item, Loaded
from rose_sql.judges.context import Schemas
from rose_sql.judges.llm import LLM, Ledger
from rose_sql.record import RecordWriter, id_key, read_records
from rose_sql.report import Summary, summarize, write_summary


@dataclass
class SystemRun:
    """One prediction file being evaluated into its own output folder."""

    loaded: Loaded
    """The items and warnings of the file."""
    out_dir: Path
    """Where its records.jsonl and summary.json go."""
    todo: list[Item] = field(default_factory=list)
    """Items still to evaluate (all of them unless resuming)."""
    resumed: int = 0
    """Items already recorded by an earlier, interrupted run."""

    @property
    def name(self) -> str:
        return self.out_dir.name


def plan(loaded: Sequence[Loaded], out: Path, *, resume: bool) -> list[SystemRun]:
    """Decide each file's output folder and which of its items still need evaluating."""
    names = [lf.path.stem for lf in loaded]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise UsageError(f"two prediction files are both named {dup!r}; their output folders would collide")
    runs = []
    for lf in loaded:
        out_dir = out / lf.path.stem
        records = out_dir / "records.jsonl"
        done: set[str] = set()
        if records.exists() and records.stat().st_size > 0:
            if not resume:
                raise UsageError(
                    f"{records} already exists; pass --resume to continue that run, or choose another --out"
                )
            done = {id_key(r["id"]) for r in read_records(records)}
        todo = [it for it in lf.items if id_key(it.id) not in done]
        runs.append(SystemRun(lf, out_dir, todo, resumed=len(lf.items) - len(todo)))
    return runs


Progress = Callable[[str, Ledger | None], None]
"""Called once per finished item with its system's name and the LLM ledger (None without a judge)."""


def run(systems: Sequence[SystemRun], db_root: Path, config: Config, progress: Progress | None = None) -> list[Summary]:
    """Evaluate every pending item of every system, appending records as they finish; summarise each."""
    asyncio.run(_run(systems, db_root, config, progress))
    summaries = []
    for s in systems:
        summary = summarize(s.out_dir / "records.jsonl", s.loaded, config)
        write_summary(summary, s.out_dir / "summary.json")
        summaries.append(summary)
    return summaries


BATCH = 32
"""Items per task sent to a worker process (amortises the inter-process round trip)."""

_worker: tuple[Executor, Finder | None] | None = None


def _init_worker(config: Config, parent: int) -> None:
    """In each worker process: its own sandbox and execution cache (and evidence finder)."""
    global _worker
    share = config.with_(cache_cells=max(1_000_000, config.cache_cells // max(1, config.workers)))
    _worker = (Executor(share), Finder(share) if share.evidence else None)
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()


def _exit_with(parent: int) -> None:
    """Leave when the run that started this worker is gone (kill -9 included): no orphans."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)


@dataclass(frozen=True, slots=True)
class _Line:
    """A finished record, already serialised (no judge: the worker decides and writes it out)."""

    json: str


Outcome = Executed | _Line | str
"""What the deterministic stages give back for one item: its stages, its finished record, or an error."""


def _execute_batch(items: list[Item], db_root: Path, final: bool) -> list[Outcome]:
    """The deterministic stages for a batch, in a worker; ``final``: no judge will follow, so decide here."""
    assert _worker is not None
    executor, finder = _worker
    out: list[Outcome] = []
    for it in items:
        try:
            ex = execute_item(it, db_root, executor, finder)
            if final:
                out.append(_Line(unjudged_record(ex).to_json()))
            else:
                out.append(ex)
        except Exception as e:  # a bug of ours: reported on the item, the batch goes on
            out.append(f"{type(e).__name__}: {e}")
    return out


class _Stage1:
    """Runs the deterministic stages on batches: in worker processes on all cores, or in one thread."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.pool: ProcessPoolExecutor | None = None
        self.local: tuple[Executor, Finder | None] | None = None
        if config.workers > 1:
            self._start()
        else:
            self.local = (Executor(config), Finder(config) if config.evidence else None)

    def _start(self) -> None:
        # spawn: workers are children of this process alone (nothing inherited from its threads)
        ctx = multiprocessing.get_context("spawn")
        self.pool = ProcessPoolExecutor(self.config.workers, ctx, _init_worker, (self.config, os.getpid()))

    async def __call__(self, items: list[Item], db_root: Path, final: bool) -> list[Outcome]:
        loop = asyncio.get_running_loop()
        if self.pool is None:
            assert self.local is not None
            executor, finder = self.local
            return await loop.run_in_executor(None, _local_batch, items, db_root, final, executor, finder)
        try:
            return await loop.run_in_executor(self.pool, _execute_batch, items, db_root, final)
        except BrokenProcessPool:  # a worker died (killed, out of memory): these items say so
            self.pool.shutdown(wait=False, cancel_futures=True)
            self._start()
            return ["a worker process died while evaluating this item"] * len(items)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        if self.local is not None:
            self.local[0].close()


def _local_batch(
    items: list[Item], db_root: Path, final: bool, executor: Executor, finder: Finder | None
) -> list[Outcome]:
    global _worker
    _worker = (executor, finder)
    return _execute_batch(items, db_root, final)


async def _run(systems: Sequence[SystemRun], db_root: Path, config: Config, progress: Progress | None) -> None:
    writers = {s.name: RecordWriter(s.out_dir / "records.jsonl") for s in systems}
    llm = LLM(config.judge) if config.judge is not None else None
    policy = config.judge.effective_matched_refuter if config.judge else "always"
    schemas = Schemas()
    window = asyncio.Semaphore(config.workers * 2 + (config.judge.concurrency if config.judge else 0))
    # items sharing a gold go to the same batch, so each worker process runs that gold once
    queue = sorted(((s.name, it) for s in systems for it in s.todo), key=lambda x: (x[1].db_id, x[1].gold_sql or ""))
    batches = [queue[i : i + BATCH] for i in range(0, len(queue), BATCH)]
    stage1 = _Stage1(config)

    async def finish(name: str, item: Item, ex: Outcome) -> None:
        try:
            if isinstance(ex, str):
                raise RuntimeError(ex)
            if isinstance(ex, _Line):
                writers[name].write_line(ex.json)
            else:
                writers[name].write(to_record(ex, await judge_item(ex, llm, schemas, matched_refuter=policy)))
        except Exception as e:  # a bug of ours: the item is unscored, the run goes on
            writers[name].write(failed_record(item, e))
        if progress:
            progress(name, llm.ledger if llm else None)

    async def one(batch: list[tuple[str, Item]]) -> None:
        async with window:
            items = [it for _, it in batch]
            done: list[Outcome]
            try:
                done = await stage1(items, db_root, llm is None)
            except Exception as e:
                done = [f"{type(e).__name__}: {e}"] * len(items)
            await asyncio.gather(*(finish(name, it, ex) for (name, it), ex in zip(batch, done, strict=True)))
            for name in {name for name, _ in batch}:
                writers[name].flush()  # a crash loses at most the unflushed part of one batch, redone on resume

    try:
        await asyncio.gather(*(one(b) for b in batches))
    finally:
        stage1.close()
        for w in writers.values():
            w.close()
        if llm is not None:
            await llm.aclose()
