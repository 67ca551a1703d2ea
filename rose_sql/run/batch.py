"""``rose run --batch``: the run's judge calls sent through the Batch API, in rounds as the cascade needs them.

:class:`BatchBackend` is a :class:`~rose_sql.run.runner.Backend`. It runs the deterministic stages of every item
first (in :class:`~rose_sql.run.runner.Stage1`'s worker processes), then, round after round:

1. polls the batches still open (a resumed run's first) and takes their replies into the LLM cache;
2. walks each waiting item's decision table with a :class:`~rose_sql.judges.batch.BatchLLM`, whose calls
   the cache answers or that are noted for the next batch: an item whose walk ends is recorded;
3. sends the noted calls as the next round's batches.

Round 1 asks the Provers and the Refuters of matching results; later rounds the Refuters that read a
Prover's verdict, the re-asks of invalid replies, and the requests that failed. The state between rounds
is the cache and ``batches.jsonl`` in the output folder (:class:`~rose_sql.judges.batch.Log`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rose_sql.config import Config
from rose_sql.engines import Source
from rose_sql.engines.execute import Executor
from rose_sql.errors import Pending, UsageError
from rose_sql.items.load import Item
from rose_sql.record import Record, id_key
from rose_sql.run.evaluate import Executed, failed_record, judge_item, to_record
from rose_sql.run.runner import Flush, Stage1, Write, _batches
from rose_sql.summary import Brief

if TYPE_CHECKING:
    from rose_sql.judges.batch import BatchLLM, BatchOptions, Status
    from rose_sql.judges.judges import Judges
    from rose_sql.judges.llm import Ledger

STATE_FILE = "batches.jsonl"
"""The batches of a run, in its ``--out`` folder."""

Waiting = tuple[str, Item, Executed]


class BatchBackend:
    """Evaluates a run with the judges' calls batched (see the module's text); only for runs with a judge."""

    def __init__(
        self, config: Config, out: Path, options: BatchOptions | None = None, status: Status | None = None
    ) -> None:
        if config.judge is None:
            raise UsageError("--batch sends the judges' calls as batches: it needs --judge-model")
        if config.judge.cache_dir is None:
            raise UsageError("--batch keeps the batches' replies in the LLM cache: drop --no-cache")
        if config.judge.votes:
            raise UsageError("--batch asks one reply per judge stage: drop --samples, --panel and --escalate-to")
        from rose_sql.judges.batch import BatchOptions

        self.config = config
        self.state = out / STATE_FILE
        self.options = options or BatchOptions()
        self.status: Status = status or (lambda _text: None)
        """Shown the state of the batch being polled (the CLI sets it to its progress line)."""
        self.stage1 = Stage1(config)  # first, while this process may have a single thread (workers are forked)
        self._llm: BatchLLM | None = None
        self._catalogue = Executor(config)
        """This process's engines, for the judges' schemas (the queries run in the workers)."""
        self.rounds = 0
        """Rounds that sent at least one request."""

    @property
    def ledger(self) -> Ledger | None:
        return self._llm.ledger if self._llm is not None else None

    async def evaluate(self, queue: list[tuple[str, Item]], db_root: Source, write: Write, flush: Flush) -> None:
        from rose_sql.judges.batch import BatchLLM, Log
        from rose_sql.judges.judges import Judges

        assert self.config.judge is not None
        llm = self._llm = BatchLLM(self.config.judge, Log(self.state), self.options)
        judges = Judges(self.config.judge, self._catalogue, llm=llm)  # votes are refused with --batch
        try:
            waiting = await self._execute(queue, db_root, write, flush)
            await llm.recover()
            while True:
                await llm.collect(self.status)
                waiting = await self._walk(waiting, judges, write)
                flush({name for name, _ in queue})
                if not waiting:
                    break
                sent, refused = await llm.submit()
                self.rounds += sent > 0
                if not sent and not refused:  # nothing can move these items on: a bug of ours, said on each
                    for name, item, _ex in waiting:
                        record = failed_record(item, "the Batch API round had no request to send")
                        write(name, record.to_json(), Brief.of(record))
                    break
        finally:
            await judges.aclose()

    async def _execute(
        self, queue: list[tuple[str, Item]], db_root: Source, write: Write, flush: Flush
    ) -> list[Waiting]:
        """The deterministic stages of every item: those to judge, in the order of the queue."""
        window = asyncio.Semaphore(self.config.workers * 2)
        done: dict[tuple[str, str], Executed] = {}

        async def one(batch: list[tuple[str, Item]]) -> None:
            async with window:
                try:
                    outs = await self.stage1([it for _, it in batch], db_root, False)
                except Exception as e:
                    outs = [f"{type(e).__name__}: {e}"] * len(batch)
            for (name, item), ex in zip(batch, outs, strict=True):
                if isinstance(ex, Executed):
                    done[(name, id_key(item.id))] = ex
                else:  # a bug of ours (or a worker lost): the item says so
                    record = failed_record(item, ex if isinstance(ex, str) else "decided without its judge")
                    write(name, record.to_json(), Brief.of(record))
            flush({name for name, _ in batch})

        await asyncio.gather(*(one(b) for b in _batches(queue)))
        return [(n, it, done[(n, id_key(it.id))]) for n, it in queue if (n, id_key(it.id)) in done]

    async def _walk(self, waiting: Sequence[Waiting], judges: Judges, write: Write) -> list[Waiting]:
        """Walk each item's decision table as far as the replies in hand go: record those that end."""
        from rose_sql.judges.batch import for_item

        async def one(entry: Waiting) -> Record | None:
            name, item, ex = entry
            for_item(f"{name}\0{id_key(item.id)}")
            try:
                return to_record(ex, await judge_item(ex, judges))
            except Pending:
                return None
            except Exception as e:  # a bug of ours: the item is unscored, the run goes on
                return failed_record(item, e)

        records = await asyncio.gather(*(one(entry) for entry in waiting))
        still = []
        for entry, record in zip(waiting, records, strict=True):
            if record is None:
                still.append(entry)
            else:
                write(entry[0], record.to_json(), Brief.of(record))
        return still

    def report(self) -> str:
        """One line on the batches of this run, for the terminal."""
        llm = self._llm
        if llm is None:
            return ""
        n = llm.requests_failed
        failed = f", {n} requests failed (sent again, or given up after {self.options.max_attempts})" if n else ""
        return (
            f"Batch API: {llm.batches_sent} batches sent in {self.rounds} rounds{failed}; the judges' costs are at "
            f"the batch price ({llm.discount:.0%} off); the batches: {self.state}"
        )

    def close(self, *, now: bool = False) -> None:
        self.stage1.close(now=now)
        self._catalogue.close()
