"""One item, start to finish: execute, compare, read the official metrics, find evidence, judge, decide.

:func:`execute_item` is the deterministic part (it runs in the worker processes); :func:`judge_item`
hands the executed item to the run's :class:`~rose_sql.judges.judges.Judges`, which walk the decision
table (:func:`rose_sql.decide.walk`), asking the Prover and the Refuter as it requires;
:func:`to_record` makes the record. :func:`evaluate_item` is the synchronous, judge-free path for scripts
and tests, and :func:`evaluate_items` the whole path, judges included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rose_sql.comparison.comparator import Comparison, compare
from rose_sql.config import Config, MatchedRefuter
from rose_sql.decide import Decision, Facts, decide
from rose_sql.engines import Database, Source
from rose_sql.engines.execute import Executor
from rose_sql.engines.kinds import as_source
from rose_sql.engines.workers import Pool, Watch, limit_memory
from rose_sql.errors import EndpointUnreachable
from rose_sql.evidence.findings import Evidence, questions_match, render
from rose_sql.items.load import Item
from rose_sql.readings.efficiency import Efficiency
from rose_sql.readings.formulas import Readings
from rose_sql.readings.official import read_official
from rose_sql.record import ComparisonInfo, ExecutionInfo, Judged, Record
from rose_sql.results import Execution
from rose_sql.run.checks import check_config
from rose_sql.sql import has_top_level_order_by

if TYPE_CHECKING:  # loaded when evidence or a judge is configured: a judge-free run starts faster
    from rose_sql.evidence.finder import Finder
    from rose_sql.judges.context import Case
    from rose_sql.judges.judges import Judges


@dataclass(frozen=True, slots=True)
class Executed:
    """An item after the deterministic stages."""

    item: Item
    """The item."""
    db: Database
    """Its database."""
    db_found: bool
    """Whether the database exists."""
    gold: Execution | None = None
    """The gold's execution (None without gold SQL)."""
    pred: Execution | None = None
    """The prediction's execution."""
    comparison: Comparison | None = None
    """Our comparator's outcome, when both ran."""
    readings: Readings = field(default_factory=Readings)
    """The official readings."""
    evidence: Evidence | None = None
    """What the evidence stage found, when it ran."""
    doubts: list[str] | None = None
    """Cheap reasons to doubt a match; computed when a judge is configured."""
    server: str | None = None
    """The engine and its version, on engines other than SQLite (None on SQLite)."""
    hardness: str | None = None
    """The gold's official Spider hardness, where the match reading is defined
    (:mod:`rose_sql.readings.spider_match`)."""
    efficiency: Efficiency | None = None
    """BIRD's efficiency ratios, when asked (``Config.efficiency``) and BIRD EX is defined."""

    @property
    def dialect(self) -> str | None:
        """sqlglot's dialect of the engine, on engines other than SQLite (None on SQLite, as records keep it)."""
        return None if self.db.info.python_sqlite3 else self.db.dialect

    def for_item(self, item: Item) -> Executed:
        """These stages' outcome for another item with the same database, gold and prediction (one
        question that several systems answered alike): the same results, the executions now cached."""
        gold = self.gold.as_cached() if self.gold is not None else None
        pred = self.pred.as_cached() if self.pred is not None else None
        return replace(self, item=item, gold=gold, pred=pred)

    def facts(self, *, judge: bool = False, matched_refuter: MatchedRefuter = "always") -> Facts:
        """What the decision table starts from (no judge answered yet)."""
        return Facts(
            db_found=self.db_found,
            db=str(self.db),
            gold=self.gold,
            pred=self.pred,
            equal=self.comparison.equal if self.comparison else None,
            undecided=self.comparison is not None and self.comparison.reason == "undecided",
            judge=judge,
            matched_refuter=matched_refuter,
            evidence_questions_match=judge and questions_match(self.doubts, self.evidence),
            evidence_guard=self.evidence.guard if self.evidence is not None else None,
            question=bool((self.item.question or "").strip()),
            predicted=self.item.pred_sql is not None,
        )

    def evidence_text(self) -> str | None:
        """Everything deterministic the judges should see, rendered."""
        return render(self.doubts, self.evidence)


def execute_item(
    item: Item, source: Source, executor: Executor, finder: Finder | None = None, *, doubts: bool = False
) -> Executed:
    """Run gold and prediction, compare them, compute the official readings and gather evidence.

    ``source``: where the databases are (a folder of SQLite files, or another engine's URL:
    :class:`~rose_sql.engines.Source`). The gold runs first: when a relation it reads (or the database)
    does not exist, the item is ``db_missing`` and the prediction is not run, so that no prediction is
    scored against an environment that lacks the gold's tables (nor when the database cannot be read).
    A prediction that fails as if the database could not be read is attributed
    (:meth:`Executor.attribute <rose_sql.engines.execute.Executor.attribute>`): its own error unless the
    gold, run again on a fresh connection, fails the same way. A statement a wall clock stopped was
    confirmed by the sandbox before it counts (:mod:`rose_sql.engines.alone`).
    ``doubts``: also note the cheap reasons to doubt a match (a judge will read them)."""
    db = source.locate(item.db_id)
    if not _a_name(item.db_id) or not executor.exists(db):  # a db_id is a name, never a path out of the source
        return Executed(item, db, db_found=False)
    server = executor.version(db)
    gold = executor.run(db, item.gold_sql, role="gold") if item.gold_sql is not None else None
    if gold is not None and gold.status in ("missing", "unreadable"):  # the item is db_missing / db_unreadable
        return Executed(item, db, True, gold, server=server)
    pred = executor.run(db, item.pred_sql, role="pred") if item.pred_sql is not None else None
    if pred is not None:  # the database's fault only if the gold, run again, fails the same way
        pred = executor.attribute(db, pred, item.gold_sql if gold is not None and gold.ok else None)
    official = read_official(item, db, gold, pred, executor)
    comparison = None
    if gold is not None and gold.result is not None and pred is not None and pred.result is not None:
        ordered = has_top_level_order_by(item.gold_sql or "")
        comparison = compare(pred.result, gold.result, ordered=ordered, digits=executor.config.float_digits)
    if pred is None or item.pred_sql is None:  # a question of the gold file without a prediction
        return Executed(item, db, True, gold, server=server, **official.fields())
    evidence = None
    if finder is not None and gold is not None and gold.ok and pred.ok and item.gold_sql is not None:
        evidence = finder.gather(db, item.gold_sql, item.pred_sql, gold, pred, comparison)
    found_doubts = None
    if doubts:
        from rose_sql.evidence.doubts import match_doubts

        found_doubts = match_doubts(item.pred_sql, item.gold_sql, gold, comparison)
    return Executed(
        item,
        db,
        True,
        gold,
        pred,
        comparison,
        evidence=evidence,
        doubts=found_doubts,
        server=server,
        **official.fields(),
    )


def _a_name(db_id: str) -> bool:
    return bool(db_id) and db_id not in (".", "..") and Path(db_id).name == db_id and "\\" not in db_id


# --------------------------------------------------------------------------- judging


def case_of(ex: Executed) -> Case:
    """What the judges may be shown of an executed item."""
    from rose_sql.judges.context import Case

    assert ex.pred is not None  # the decision table asks no judge for an item without a prediction
    # only a plausible witness doubts a match (an implausible one is a fragility note)
    witness = ex.evidence is not None and ex.evidence.witness is not None and ex.evidence.witness.plausible
    return Case(ex.item, ex.db, ex.gold, ex.pred, ex.comparison, evidence=ex.evidence_text(), witness=witness)


async def judge_item(ex: Executed, judges: Judges | None) -> Judged:
    """An executed item judged (:meth:`Judges.judge <rose_sql.judges.judges.Judges.judge>`), or decided
    without judges when there are none."""
    facts = ex.facts(judge=judges is not None, matched_refuter=judges.policy if judges else "always")
    if judges is None or ex.pred is None:  # no judge, or nothing one could read: the table decides alone
        decision = decide(facts)
        assert isinstance(decision, Decision)  # the table asks no judge here
        return Judged(decision)
    return await judges.judge(case_of(ex), facts)


# --------------------------------------------------------------------------- records


def to_record(ex: Executed, judged: Judged) -> Record:
    """The on-disk record of an item."""
    it, d = ex.item, judged.decision
    made = [c for c in judged.calls if not c.cached]
    return Record(
        id=it.id,
        db_id=it.db_id,
        score=d.score,
        unscored_reason=d.unscored_reason,
        decided_by=d.decided_by,
        why=d.why,
        readings=ex.readings,
        comparison=ComparisonInfo.of(ex.comparison),
        pred=ExecutionInfo.of(ex.pred),
        gold=ExecutionInfo.of(ex.gold),
        difficulty=it.difficulty or ex.hardness,
        question=it.question,
        pred_sql=it.pred_sql,
        gold_sql=it.gold_sql,
        source=it.source,
        labels=d.labels,
        judges=list(judged.calls),
        evidence=ex.evidence,
        doubts=ex.doubts,
        dialect=ex.dialect,
        server=ex.server,
        votes=judged.votes,
        efficiency=ex.efficiency,
        llm_calls=len(made),
        cost_usd=round(sum((c.cost_usd or 0.0 for c in made), 0.0), 8),
    )


def record_for(record: Record, item: Item) -> Record:
    """The record of ``item``, when ``record`` is that of another item with the same database, gold and
    prediction and no judge decided either (one question that several systems answered alike): the same
    outcome, the item's own fields, the executions served from the cache."""
    return replace(
        record,
        id=item.id,
        question=item.question,
        difficulty=item.difficulty or record.difficulty,
        source=item.source,
        pred=record.pred.as_cached(),
        gold=record.gold.as_cached(),
    )


def record_data_for(data: dict[str, Any], item: Item) -> dict[str, Any]:
    """``record_for(record, item).to_dict()`` from ``data``, ``record.to_dict()`` (the record of another item
    with the same database, gold and prediction, decided by no judge): its values but the item's own and the
    executions' ``cached``, without building the record again (thousands of items repeat another system's
    prediction)."""
    return {
        **data,
        "id": item.id,
        "difficulty": item.difficulty or data["difficulty"],
        "question": item.question,
        "source": item.source,
        "pred": _as_cached(data["pred"]),
        "gold": _as_cached(data["gold"]),
    }


def _as_cached(execution: dict[str, Any]) -> dict[str, Any]:
    """An execution's data as :meth:`ExecutionInfo.as_cached <rose_sql.record.ExecutionInfo.as_cached>` makes it."""
    return execution if execution["status"] == "skipped" else {**execution, "cached": True}


def failed_record(item: Item, error: BaseException | str) -> Record:
    """The record of an item whose evaluation hit a bug of ours: unscored, and the run goes on."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    ex = Executed(item, Database.file(Path(), item.db_id), db_found=True)
    return to_record(ex, Judged(Decision(None, "internal_error", None, f"internal error while evaluating: {text}")))


def unjudged_record(ex: Executed) -> Record:
    """The record of an item that no judge will see: what execution settles, and nothing more."""
    facts = ex.facts()
    decision = decide(facts)
    assert isinstance(decision, Decision)  # without a judge the table never asks for one
    return to_record(ex, Judged(decision))


def evaluate_item(item: Item, source: Source, executor: Executor) -> Record:
    """Execute, compare and decide one item without judges. Never raises for the item: a failure is data on
    the record (a ``source`` that is not a :class:`~rose_sql.engines.Source` is the caller's mistake)."""
    as_source(source)
    try:
        return unjudged_record(execute_item(item, source, executor))
    except Exception as e:  # a bug of ours must not take the other items down
        return failed_record(item, e)


T = TypeVar("T")


async def gather_or_stop(work: Sequence[Coroutine[Any, Any, T]]) -> list[T]:
    """The results of ``work`` run concurrently, in order; the first :class:`EndpointUnreachable` cancels
    the rest and is raised (each coroutine turns every other failure into data on its items)."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(w) for w in work]
    except* EndpointUnreachable as stopped:
        raise stopped.exceptions[0] from None
    return [t.result() for t in tasks]


def evaluate_items(items: Sequence[Item], source: Source, config: Config | None = None) -> list[Record]:
    """Evaluate items, judges and evidence as ``config`` says: the records, in order.

    The library's whole path for scripts and notebooks (``rose run`` adds resume and the files). The
    deterministic stages run in guarded worker processes as under ``rose run`` (``config.workers`` of
    them, at most one per item), so a query that runs away inside one engine call is stopped with its
    worker, then run again alone with its guard doubled: a runaway confirmed so is a ``timeout`` (a
    prediction scores 0). Never raises for an item's problem: each one's failure is
    data on its record. Raises :class:`~rose_sql.errors.EndpointUnreachable` when a judge is configured
    and its endpoint cannot be reached at the first call the cache cannot answer (no item is then scored
    ``judge_error`` for it).
    """
    as_source(source)
    config = config or Config()
    check_config(config, items)  # the cross-option rules rose run keeps, with its messages
    with Pool(max(1, min(config.workers, len(items))), init_worker, config) as pool:  # forked while one thread
        return asyncio.run(_evaluate_items(items, source, config, pool))


@dataclass(frozen=True, slots=True)
class Worker:
    """What one worker process keeps for its life (``rose run``'s, :func:`evaluate_items`'s): its sandbox
    and execution cache, its finder."""

    executor: Executor
    finder: Finder | None

    def close(self) -> None:
        """At the worker's end: drop the finder's scratch databases (the witness search on a server)."""
        if self.finder is not None:
            self.finder.close()


def init_worker(config: Config, watch: Watch) -> Worker:
    """A worker process's state: its memory bound, a sandbox under its watch, and its finder."""
    limit_memory(config.worker_memory_bytes)
    share = config.with_(cache_cells=max(1_000_000, config.cache_cells // max(1, config.workers)))
    return Worker(Executor(share, watch=watch), _finder(share, watch))


def _finder(config: Config, watch: Watch) -> Finder | None:
    if not config.evidence:
        return None
    from rose_sql.evidence.finder import Finder

    return Finder(config, watch=watch)


def execute_in_worker(worker: Worker, job: tuple[Item, Source, bool]) -> Executed:
    """The deterministic stages of one item, in a worker process of :func:`evaluate_items`."""
    item, source, doubts = job
    return execute_item(item, source, worker.executor, worker.finder, doubts=doubts)


async def _evaluate_items(items: Sequence[Item], source: Source, config: Config, pool: Pool[Worker]) -> list[Record]:
    judges: Judges | None = None
    try:
        with Executor(config) as catalogue:  # this process's engines, for the judges' schemas
            if config.judge is not None:
                from rose_sql.judges.judges import Judges

                judges = Judges(config.judge, catalogue)

            async def one(item: Item) -> Record:
                try:
                    job = (item, source, judges is not None)
                    (ex,) = await asyncio.wrap_future(pool.submit(execute_in_worker, [job]))
                    if judges is None:
                        return unjudged_record(ex)
                    return to_record(ex, await judge_item(ex, judges))
                except EndpointUnreachable:
                    raise  # the endpoint, not the item: the run stops
                except Exception as e:  # a bug of ours, or a worker that kept dying: the item says so
                    return failed_record(item, e)

            return await gather_or_stop([one(it) for it in items])
    finally:
        if judges is not None:
            await judges.aclose()
