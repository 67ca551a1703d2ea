"""Evaluate whole prediction files: the items of every file in one run, records streamed to disk.

The deterministic stages run in worker processes on all cores (forked at the start of
:func:`run` when that is safe, so they begin with everything imported; spawned otherwise), on
batches that keep a question's items together: each worker process has its own execution cache,
so a gold query runs once however many systems are evaluated, and items of several systems with
the same gold and prediction share one outcome. Without a judge the workers also decide and
serialise the records; with one, the judge cascade runs here with one LLM client (its
concurrency limit, cache and ledger). Each record is appended to its system's ``records.jsonl``
as its batch finishes; ``resume=True`` skips items already recorded, and the summary counts
every record once, old and new alike.

Where the batches run is a :class:`Backend`: this machine's worker processes by default, or a Ray
cluster (:class:`rose_sql.distributed.cluster.RayBackend`, ``rose run --ray``), whose actors each run
an :class:`Evaluator` as this process does. Either way only this process writes the records, the
manifest and the summaries. ``shard`` (``--shard I/N``) restricts a run to a stable share of each
file's items (:mod:`rose_sql.run.shard`), recorded in its manifest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from rose_sql.config import Config, Subset
from rose_sql.decide import UNSCORED
from rose_sql.engines import Source
from rose_sql.engines.execute import Executor
from rose_sql.engines.workers import Pool
from rose_sql.errors import EndpointUnreachable, Lost, UsageError
from rose_sql.items.load import Item, Loaded
from rose_sql.items.subset import read_ids, restrict, select
from rose_sql.provenance import (
    FileId,
    Manifest,
    ShardInfo,
    SubsetInfo,
    build,
    command_line,
    differences,
    read_manifest,
    write_manifest,
)
from rose_sql.record import Record, RecordWriter, dumps, id_key, read_records
from rose_sql.run.evaluate import (
    Executed,
    Worker,
    execute_item,
    failed_record,
    gather_or_stop,
    init_worker,
    judge_item,
    record_data_for,
    to_record,
    unjudged_record,
)
from rose_sql.run.releases import mismatches
from rose_sql.run.shard import Shard
from rose_sql.summary import Brief, Summary, summarize_briefs, write_summary

if TYPE_CHECKING:  # evidence and judges are loaded only when configured: a judge-free run starts faster
    from rose_sql.judges.judges import Judges
    from rose_sql.judges.keys import RunKey
    from rose_sql.judges.llm import LLM, Ledger


@dataclass
class SystemRun:
    """One prediction file being evaluated into its own output folder."""

    loaded: Loaded
    """The items and warnings of the file."""
    out_dir: Path
    """Where its records.jsonl, manifest.json and summary.json go."""
    manifest: Manifest
    """What produces its records (checked against the earlier run's when resuming)."""
    todo: list[Item] = field(default_factory=list)
    """Items still to evaluate (all of them unless resuming)."""
    resumed: int = 0
    """Items already recorded by an earlier, interrupted run, and kept."""
    retried: int = 0
    """Items an earlier run left unscored for a transient reason, evaluated again."""
    warnings: list[str] = field(default_factory=list)
    """What a resumption differs in without changing scores (another endpoint, another version)."""
    briefs: list[Brief] = field(default_factory=list)
    """What the summary needs of every record written (read back for resumed items)."""

    @property
    def name(self) -> str:
        return self.out_dir.name


def plan(
    loaded: Sequence[Loaded],
    out: Path,
    *,
    db_root: Source,
    config: Config,
    gold: Path | None = None,
    resume: bool = False,
    retry_unscored: bool = True,
    command: list[str] | None = None,
    shard: Shard | None = None,
    subset: Subset | None = None,
) -> list[SystemRun]:
    """Decide each file's output folder, its manifest, and which of its items still need evaluating.

    With ``subset`` (``--limit``, ``--ids``), each file's items are first restricted to it
    (:func:`rose_sql.items.subset.select`), the manifest saying so: the items outside it are not part of the run.

    With ``shard``, each file's items are restricted to that shard's share (the manifest, still of the
    whole input, says which share: ``rose merge`` checks the shards against each other).

    A file's items of a BIRD benchmark whose SQLite databases are of another BIRD release get a warning
    naming both (:func:`rose_sql.run.releases.mismatches`; each database hashed at most once for all files).

    Resuming checks the earlier run's manifest (:func:`rose_sql.provenance.differences`): other inputs or
    score-changing options are refused with :class:`UsageError` naming them. Items the earlier run left
    unscored for a transient reason (:data:`rose_sql.decide.UNSCORED`) are evaluated again unless
    ``retry_unscored`` is false; their old lines are dropped from ``records.jsonl`` first, so every item
    keeps one line.
    """
    names = [lf.path.stem for lf in loaded]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise UsageError(f"two prediction files are both named {dup!r}; their output folders would collide")
    runs = []
    digests: dict[tuple[str, int], str] = {}  # a database is hashed once, however many files name it
    ids = read_ids(subset.ids) if subset is not None and subset.ids is not None else None
    for lf in loaded:
        if subset is not None:  # before anything is built: an id of no item is refused first
            chosen = select(lf, subset, ids)
            ids_file = FileId.of(subset.ids) if subset.ids is not None else None
            part = SubsetInfo(subset.limit, ids_file, len(chosen), len(lf.items))
            lf = restrict(lf, chosen)
        manifest = build(lf, gold, db_root, config, command=command or command_line())
        if subset is not None:
            manifest = replace(manifest, subset=part)
        if db_root.folder_path is not None:  # SQLite files: their release can be told (a server's cannot)
            lf = replace(lf, warnings=[*lf.warnings, *mismatches(lf, manifest, digests)])
        if shard is not None:
            share = [it for it in lf.items if shard.holds(it.id)]
            info = ShardInfo(shard.index, shard.count, len(share), len(lf.items))
            manifest, lf = replace(manifest, shard=info), replace(lf, items=share)
        out_dir = out / lf.path.stem
        records = out_dir / "records.jsonl"
        system = SystemRun(lf, out_dir, manifest)
        if records.exists() and records.stat().st_size > 0:
            if not resume:
                raise UsageError(
                    f"{records} already exists; pass --resume to continue that run, or choose another --out"
                )
            system.warnings += _check_resume(out_dir, manifest)
            kept, system.retried = _kept_records(records, retry_unscored)
            system.briefs = [Brief.of(r) for r in kept]
        done = {id_key(b.id) for b in system.briefs}
        system.todo = [it for it in lf.items if id_key(it.id) not in done]
        system.resumed = len(lf.items) - len(system.todo)
        runs.append(system)
    return runs


def _check_resume(out_dir: Path, manifest: Manifest) -> list[str]:
    try:
        old = read_manifest(out_dir / "manifest.json")
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot check what {out_dir} was made from: {out_dir / 'manifest.json'}: {e}") from None
    if old is None:
        return [f"{out_dir} has no manifest.json (made by an older rose-sql): its inputs could not be checked"]
    refuse, warn = differences(old, manifest)
    if refuse:
        items = "\n  - ".join(refuse)
        raise UsageError(
            f"--resume: {out_dir} was made from other inputs or options:\n  - {items}\n"
            "Resume with the same inputs and options, or choose another --out."
        )
    return warn


def _kept_records(records: Path, retry_unscored: bool) -> tuple[list[Record], int]:
    """The earlier run's records to keep, and how many are dropped to be evaluated again (their lines
    are removed from the file, atomically)."""
    found = list(read_records(records))
    kept = [r for r in found if not (retry_unscored and _transient(r))]
    if len(kept) < len(found):
        RecordWriter.rewrite(records, kept)
    return kept, len({r.id_key for r in found}) - len({r.id_key for r in kept})


def _transient(r: Record) -> bool:
    return r.score is None and r.unscored_reason is not None and UNSCORED[r.unscored_reason].transient


Progress = Callable[[str, "Ledger | None"], None]
"""Called once per finished item with its system's name and the LLM ledger (None without a judge)."""


Write = Callable[[str, str, Brief], None]
"""Appends one finished record: its system's name, its JSON line, what the summary needs of it."""
Flush = Callable[[Iterable[str]], None]
"""Flushes the records files of these systems (called once a batch's records are all written)."""


class Backend(Protocol):
    """Where a run's items are evaluated: this machine's worker processes (the default), or a Ray
    cluster (:class:`rose_sql.distributed.cluster.RayBackend`). Only the driver writes records."""

    @property
    def ledger(self) -> Ledger | None:
        """The LLM calls and cost so far, for the progress bar (None without a judge)."""

    async def evaluate(self, queue: list[tuple[str, Item]], db_root: Source, write: Write, flush: Flush) -> None:
        """Evaluate every (system name, item) of ``queue``: ``write`` each finished record, and ``flush``
        a batch's systems once its records are written."""

    def close(self, *, now: bool = False) -> None:
        """Release the workers (``now``: without waiting for running work)."""


def run(
    systems: Sequence[SystemRun],
    db_root: Source,
    config: Config,
    progress: Progress | None = None,
    *,
    backend: Backend | None = None,
) -> list[Summary]:
    """Evaluate every pending item of every system, appending records as they finish; summarise each.

    The manifest is written first and again at the end (``complete`` when every item of the input has
    a record). Interrupted (Ctrl-C), the summaries of what was recorded are written, marked incomplete,
    and the interruption goes on up. ``backend``: where the items are evaluated (default: worker
    processes on this machine); it is closed when the run ends.
    """
    for s in systems:
        s.out_dir.mkdir(parents=True, exist_ok=True)
        write_manifest(s.manifest, s.out_dir / "manifest.json")
    # first, while this process may have a single thread (workers are then forked)
    where = backend if backend is not None else Local(config)
    interrupted = False
    try:
        asyncio.run(_run(systems, db_root, where, progress))
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        where.close(now=interrupted)
        summaries = [_finish(s, config, interrupted) for s in systems]
    return summaries


def _finish(s: SystemRun, config: Config, interrupted: bool) -> Summary:
    recorded = {id_key(b.id) for b in s.briefs}
    complete = not interrupted and all(id_key(it.id) in recorded for it in s.loaded.items)
    manifest = s.manifest.finish(complete=complete)
    write_manifest(manifest, s.out_dir / "manifest.json")
    summary = summarize_briefs(s.briefs, s.name, s.loaded, config, manifest=manifest)
    write_summary(summary, s.out_dir / "summary.json")
    return summary


BATCH = 16
"""Items per task sent to a worker process (amortises the inter-process round trip) when a judge follows:
its items reach the judges as their batch finishes."""
BATCH_FINAL = 64
"""Items per task without a judge, where the worker finishes each record: fewer round trips, fewer tasks in
this process (on the 9 Spider files, 168 tasks instead of 1,003: 0.15 s less CPU here and as much in the
workers, measured back to back)."""


def task_size(config: Config) -> int:
    """Items per task sent to a worker process by :class:`Local`: :data:`BATCH` when a judge follows,
    :data:`BATCH_FINAL` without one, and 1 when the run times its items (``--efficiency time`` or ``both``).

    A timed pass is 200 executions timed on the wall clock, and what else the machine runs meanwhile
    moves its ratio: the published script's pool hands each free process the next item, so every process
    times until the last item, and so does a run of single-item tasks. With 64-item tasks one process
    could time a third of the run alone, on an idle machine (PostgreSQL, mini-dev GPT-3.5, 2 workers: 24 %
    of the CPU idle over the run, against 6 % with single items and 4 % in the published pool).
    The task's round trip is nothing beside 200 executions."""
    if config.efficiency in ("time", "both"):
        return 1
    return BATCH if config.judge is not None else BATCH_FINAL


def _batches(queue: list[tuple[str, Item]], size: int = BATCH) -> list[list[tuple[str, Item]]]:
    """Batches of at most ``size`` items in which the items sharing a question (database and gold) stay
    together where they fit: a worker process then runs that gold, and the predictions several
    systems share, once for all of them."""
    groups: dict[tuple[str, str], list[tuple[str, Item]]] = {}
    for entry in sorted(queue, key=lambda e: e[1].pred_sql or ""):  # alike predictions side by side
        it = entry[1]
        groups.setdefault((it.db_id, it.gold_sql or ""), []).append(entry)
    batches: list[list[tuple[str, Item]]] = [[]]
    for key in sorted(groups):
        group = groups[key]
        if len(batches[-1]) + len(group) > size:
            batches.append([])
        for i in range(0, len(group), size):  # a question asked more often than a batch holds is split
            if len(batches[-1]) == size:
                batches.append([])
            batches[-1].extend(group[i : i + size])
    return [b for b in batches if b]


class _Line(NamedTuple):
    """A finished record, already serialised (no judge: the worker decides and writes it out).

    A named tuple: thousands cross from the workers, and tuples pickle several times faster."""

    json: str
    brief: Brief


Outcome = Executed | _Line | str
"""What the deterministic stages give back for one item: its stages, its finished record, or an error."""


class _Decided(NamedTuple):
    """The record of an item decided in the worker, as its data and what the summary needs of it."""

    data: dict[str, Any]
    brief: Brief


def _execute_batch(worker: Worker, batch: tuple[list[Item], Source, bool]) -> list[Outcome]:
    """The deterministic stages for a batch, in a worker; ``final``: no judge will follow, so decide here.

    Items of several systems with the same database, gold and prediction share one outcome: their
    executions (cached), their evidence, and without a judge their decision, which is the first one's
    record with the item's own fields (:func:`rose_sql.run.evaluate.record_for`, made from the first one's
    data: :func:`rose_sql.run.evaluate.record_data_for`)."""
    items, db_root, final = batch
    out: list[Outcome] = []
    alike: dict[tuple[str, str | None, str | None], Executed | _Decided] = {}  # systems that predicted the same SQL
    for it in items:
        try:
            key = (it.db_id, it.gold_sql, it.pred_sql)
            earlier = alike.get(key)
            if isinstance(earlier, _Decided):
                data = record_data_for(earlier.data, it)
                brief = earlier.brief._replace(id=it.id, difficulty=data["difficulty"])
                out.append(_Line(dumps(data), brief))
                continue
            ex = earlier.for_item(it) if earlier is not None else None
            if ex is None:
                ex = execute_item(it, db_root, worker.executor, worker.finder, doubts=not final)
            if final:
                record = unjudged_record(ex)
                decided = alike[key] = _Decided(record.to_dict(), Brief.of(record))
                out.append(_Line(dumps(decided.data), decided.brief))
            else:
                alike[key] = ex
                out.append(ex)
        except Exception as e:  # a bug of ours: reported on the item, the batch goes on
            out.append(f"{type(e).__name__}: {e}")
    return out


class Stage1:
    """Runs the deterministic stages on batches, in worker processes (see :mod:`rose_sql.engines.workers`)."""

    def __init__(self, config: Config) -> None:
        self.pool = Pool(config.workers, init_worker, config)

    async def __call__(self, items: list[Item], db_root: Source, final: bool) -> list[Outcome]:
        try:
            (done,) = await asyncio.wrap_future(self.pool.submit(_execute_batch, [(items, db_root, final)]))
        except Lost as e:  # the batch's worker kept dying: these items say so
            return [f"{e}"] * len(items)
        return done

    def close(self, *, now: bool = False) -> None:
        self.pool.close(now=now)


class Evaluator:
    """Turns batches into finished records: the deterministic stages in :class:`Stage1`'s worker
    processes, then the judge cascade here with one :class:`~rose_sql.judges.judges.Judges` (one LLM client:
    its concurrency limit, cache, ledger).

    One per run on this machine; one per actor on a Ray cluster, whose ``llm`` then forwards every call
    to the one actor that owns the client (and ``key``, the run key, is that actor's). Call :meth:`aclose` in
    the loop that used it."""

    def __init__(self, config: Config, stage1: Stage1, llm: LLM | None = None, key: RunKey | None = None) -> None:
        self.stage1 = stage1
        self.judges: Judges | None = None
        self.catalogue: Executor | None = None
        """This process's engines, for the judges' schemas (the queries run in the workers)."""
        if config.judge is not None:
            from rose_sql.judges.judges import Judges

            self.catalogue = Executor(config)
            self.judges = Judges(config.judge, self.catalogue, llm=llm, key=key)

    async def batch(self, batch: list[tuple[str, Item]], db_root: Source, write: Write) -> None:
        """Evaluate a batch, calling ``write`` for each record as it is finished (never raises for an item)."""
        items = [it for _, it in batch]
        done: list[Outcome]
        try:
            done = await self.stage1(items, db_root, self.judges is None)
        except Exception as e:
            done = [f"{type(e).__name__}: {e}"] * len(items)
        judged = []
        for (name, it), ex in zip(batch, done, strict=True):
            if isinstance(ex, _Line):  # finished in the worker: written here, no task per item
                write(name, ex.json, ex.brief)
            else:
                judged.append(self._finish(name, it, ex, write))
        await gather_or_stop(judged)

    async def _finish(self, name: str, item: Item, ex: Outcome, write: Write) -> None:
        try:
            if isinstance(ex, str):
                raise RuntimeError(ex)
            assert not isinstance(ex, _Line) and self.judges is not None  # a judge is configured
            judged = await judge_item(ex, self.judges)
            record = to_record(ex, judged)
        except EndpointUnreachable:
            raise  # the endpoint, not the item: the run stops, nothing recorded for it
        except Exception as e:  # a bug of ours: the item is unscored, the run goes on
            record = failed_record(item, e)
        write(name, record.to_json(), Brief.of(record))

    async def aclose(self) -> None:
        if self.judges is not None:
            await self.judges.aclose()
        if self.catalogue is not None:
            self.catalogue.close()


class Local:
    """The default :class:`Backend`: the worker processes of this machine, the judges in this process."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.stage1 = Stage1(config)
        self._evaluator: Evaluator | None = None

    @property
    def ledger(self) -> Ledger | None:
        judges = self._evaluator.judges if self._evaluator is not None else None
        return judges.ledger if judges is not None else None

    async def evaluate(self, queue: list[tuple[str, Item]], db_root: Source, write: Write, flush: Flush) -> None:
        evaluator = self._evaluator = Evaluator(self.config, self.stage1)
        judge = self.config.judge
        window = asyncio.Semaphore(self.config.workers * 2 + (judge.concurrency if judge else 0))

        async def one(batch: list[tuple[str, Item]]) -> None:
            async with window:
                await evaluator.batch(batch, db_root, write)
                flush({name for name, _ in batch})

        try:
            await gather_or_stop([one(b) for b in _batches(queue, task_size(self.config))])
        finally:
            await evaluator.aclose()

    def close(self, *, now: bool = False) -> None:
        self.stage1.close(now=now)


async def _run(systems: Sequence[SystemRun], db_root: Source, backend: Backend, progress: Progress | None) -> None:
    by_name = {s.name: s for s in systems}
    writers = {s.name: RecordWriter(s.out_dir / "records.jsonl") for s in systems}

    def write(name: str, line: str, summary_fields: Brief) -> None:
        writers[name].write_line(line)
        by_name[name].briefs.append(summary_fields)
        if progress:
            progress(name, backend.ledger)

    def flush(names: Iterable[str]) -> None:
        for name in names:
            writers[name].flush()  # a crash loses at most the unflushed part of one batch, redone on resume

    try:
        await backend.evaluate([(s.name, it) for s in systems for it in s.todo], db_root, write, flush)
    finally:
        for w in writers.values():
            w.close()
