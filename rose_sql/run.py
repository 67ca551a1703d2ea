"""Evaluate whole prediction files: one process, shared executions, records streamed to disk.

Items of every prediction file share one thread pool for executions, one execution cache (a gold
query runs once however many systems are evaluated) and, when a judge is configured, one LLM
client with its concurrency limit, cache and ledger. Each record is appended to its system's
``records.jsonl`` as soon as it is finished; ``resume=True`` skips items already recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rose_sql.config import Config
from rose_sql.errors import UsageError
from rose_sql.evaluate import Executed, execute_item, failed_record, judge_item, to_record
from rose_sql.evidence import Finder
from rose_sql.execute import Executor
from rose_sql.items import Item, Loaded
from rose_sql.judges.context import Schemas
from rose_sql.judges.llm import LLM, Ledger
from rose_sql.record import Record, RecordWriter, id_key, read_records
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


Progress = Callable[[str, Record, Ledger | None], None]


def run(systems: Sequence[SystemRun], db_root: Path, config: Config, progress: Progress | None = None) -> list[Summary]:
    """Evaluate every pending item of every system, appending records as they finish; summarise each."""
    ledger = asyncio.run(_run(systems, db_root, config, progress))
    summaries = []
    for s in systems:
        summary = summarize(s.out_dir / "records.jsonl", s.loaded, config)
        write_summary(summary, s.out_dir / "summary.json")
        summaries.append(summary)
    if ledger is not None:
        for s in systems:
            (s.out_dir / "ledger.json").write_text(_json(ledger.totals()), encoding="utf-8")
    return summaries


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj, indent=2) + "\n"


async def _run(systems: Sequence[SystemRun], db_root: Path, config: Config, progress: Progress | None) -> Ledger | None:
    writers = {s.name: RecordWriter(s.out_dir / "records.jsonl") for s in systems}
    llm = LLM(config.judge) if config.judge is not None else None
    policy = config.judge.effective_matched_refuter if config.judge else "always"
    schemas = Schemas()
    finder = Finder(config) if config.evidence else None
    window = asyncio.Semaphore(config.workers * 2 + (config.judge.concurrency * 2 if config.judge else 0))
    loop = asyncio.get_running_loop()
    try:
        with Executor(config) as executor, ThreadPoolExecutor(config.workers) as pool:

            async def one(name: str, item: Item) -> None:
                async with window:
                    try:
                        ex: Executed = await loop.run_in_executor(pool, execute_item, item, db_root, executor, finder)
                        judged = await judge_item(ex, llm, schemas, matched_refuter=policy)
                        record = to_record(ex, judged)
                    except Exception as e:  # a bug of ours: the item is unscored, the run goes on
                        record = failed_record(item, e)
                    writers[name].write(record)
                    if progress:
                        progress(name, record, llm.ledger if llm else None)

            await asyncio.gather(*(one(s.name, it) for s in systems for it in s.todo))
    finally:
        for w in writers.values():
            w.close()
        if llm is not None:
            await llm.aclose()
    return llm.ledger if llm else None
