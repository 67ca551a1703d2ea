"""One item, start to finish: execute, compare, read the official metrics, find evidence, judge, decide.

:func:`execute_item` is the deterministic part (it runs in the worker processes); :func:`judge_item`
hands the executed item to the run's :class:`~rose_sql.judges.judges.Judges`, which walk the decision
table (:func:`rose_sql.decide.walk`), asking the Prover and the Refuter as it requires;
:func:`to_record` makes the record. :func:`evaluate_item` is the synchronous, judge-free path for scripts
and tests, and :func:`evaluate_items` the whole path, judges included.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rose_sql.checks import check_config
from rose_sql.compare import Comparison, compare
from rose_sql.config import Config, MatchedRefuter
from rose_sql.decide import Decision, Facts, decide
from rose_sql.efficiency import Efficiency, measure
from rose_sql.engines import Database, Source
from rose_sql.engines.kinds import as_source
from rose_sql.errors import EndpointUnreachable
from rose_sql.evidence.findings import Evidence, questions_match, render
from rose_sql.execute import Executor
from rose_sql.items import Item
from rose_sql.readings import Readings, bird_ex, soft_f1, ts_equal, ts_gold_sql, ts_order_matters, ts_pred_sql
from rose_sql.record import ComparisonInfo, ExecutionInfo, Judged, Record
from rose_sql.results import Execution, ResultSet
from rose_sql.sql import NO_STATEMENT, has_top_level_order_by
from rose_sql.workers import Pool, Watch, limit_memory

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
    """The gold's official Spider hardness, where the match reading is defined (:mod:`rose_sql.spider_match`)."""
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
    ``doubts``: also note the cheap reasons to doubt a match (a judge will read them)."""
    db = source.locate(item.db_id)
    if not _a_name(item.db_id) or not executor.exists(db):  # a db_id is a name, never a path out of the source
        return Executed(item, db, db_found=False)
    server = executor.version(db)
    gold = executor.run(db, item.gold_sql, role="gold") if item.gold_sql is not None else None
    if gold is not None and gold.status in ("missing", "unreadable"):  # the item is db_missing / db_unreadable
        return Executed(item, db, True, gold, server=server)
    em, hardness = _spider_match(item, db, executor.config.max_sql_chars)
    if item.pred_sql is None:  # a question of the gold file without a prediction: wrong, as leaderboards count it
        readings = replace(_no_prediction(db, gold), spider_em=em)
        eff = _efficiency(item, db, readings, executor)
        return Executed(item, db, True, gold, readings=readings, server=server, hardness=hardness, efficiency=eff)
    pred = executor.run(db, item.pred_sql, role="pred")
    comparison = None
    if gold is not None and gold.result is not None and pred.result is not None:
        ordered = has_top_level_order_by(item.gold_sql or "")
        comparison = compare(pred.result, gold.result, ordered=ordered, digits=executor.config.float_digits)
    readings = Readings()
    if gold is not None and gold.ok and pred.status != "unreadable":
        readings = official_readings(item, db, gold, pred, executor)
    evidence = None
    if finder is not None and gold is not None and gold.ok and pred.ok and item.gold_sql is not None:
        evidence = finder.gather(db, item.gold_sql, item.pred_sql, gold, pred, comparison)
    found_doubts = None
    if doubts:
        from rose_sql.evidence.doubts import match_doubts

        found_doubts = match_doubts(item.pred_sql, item.gold_sql, gold, comparison)
    readings = replace(readings, spider_em=em)
    eff = _efficiency(item, db, readings, executor)
    return Executed(item, db, True, gold, pred, comparison, readings, evidence, found_doubts, server, hardness, eff)


def _efficiency(item: Item, db: Database, readings: Readings, executor: Executor) -> Efficiency | None:
    """The item's efficiency ratios when asked and its BIRD EX is defined (null ratios off SQLite)."""
    base = executor.config.efficiency
    if base == "off" or readings.bird_ex is None or item.gold_sql is None:
        return None
    path = db.path if db.info.python_sqlite3 else None
    return measure(path, item.gold_sql, item.pred_sql, readings.bird_ex == 1, base, executor.config.max_steps)


def _spider_match(item: Item, db: Database, max_chars: int) -> tuple[int | None, str | None]:
    """Spider's exact-set match and the gold's hardness, where Spider's ``tables.json`` is found."""
    if db.kind != "sqlite" or item.gold_sql is None:
        return None, None
    from rose_sql.spider_match import for_database, spider_match

    found = for_database(db.target, item.db_id)
    if found is None:
        return None, None
    m = spider_match(item.pred_sql or "", item.gold_sql, *found, max_chars=max_chars)
    return m.em, m.hardness


def _no_prediction(db: Database, gold: Execution | None) -> Readings:
    """The readings of a question without a prediction whose gold ran: 0, as a prediction that fails (the
    test suite's where it runs)."""
    if gold is None or not gold.ok:
        return Readings()
    if db.info.python_sqlite3:
        n = len(ts_databases(db))
        ts = 0 if n > 1 else None
        return Readings(
            bird_ex=0,
            soft_f1=0.0,
            spider_ex=0,
            spider_ex_keep_distinct=0,
            ts_ex=ts,
            ts_ex_keep_distinct=ts,
            ts_databases=n if n > 1 else None,
        )
    return Readings(bird_ex=0, soft_f1=0.0)


def official_readings(item: Item, db: Database, gold: Execution, pred: Execution, executor: Executor) -> Readings:
    """The official readings of an item whose gold ran, as the official scripts compute them on its engine:
    all four where they run the engine through Python's ``sqlite3``, else BIRD EX and Soft-F1 as mini-dev's
    script computes them on a server (the test suite's are not defined there)."""
    if db.info.python_sqlite3:
        return _readings(item, db, gold, pred, executor)
    return _bird_readings(gold, pred)


def _bird_readings(gold: Execution, pred: Execution) -> Readings:
    """``bird_ex`` and Soft-F1 as mini-dev's script computes them on a server: the prediction and the
    gold fetched, ``set()`` of rows compared with Python's ``==`` (a failure, or a result ``set()``
    cannot hash, is 0)."""
    g, p = gold.result, pred.result
    assert g is not None
    if p is None:
        return Readings(bird_ex=0, soft_f1=0.0)
    if g.truncated or p.truncated:
        return Readings()
    if g.unhashable or p.unhashable:
        return Readings(bird_ex=0, soft_f1=0.0)
    return Readings(bird_ex=bird_ex(p.rows, g.rows), soft_f1=soft_f1(p.rows, g.rows))


def _a_name(db_id: str) -> bool:
    return bool(db_id) and db_id not in (".", "..") and Path(db_id).name == db_id and "\\" not in db_id


def _readings(item: Item, db: Database, gold: Execution, pred: Execution, executor: Executor) -> Readings:
    g, p = gold.result, pred.result
    assert g is not None and item.gold_sql is not None
    if p is None and pred.status == "rejected" and pred.error in NO_STATEMENT:
        p = ResultSet((), (), 0)  # Python's sqlite3 runs an empty or comment-only string as "no rows"
    b: int | None
    f1: float | None
    if p is None:
        b, f1 = 0, 0.0
    elif g.truncated or p.truncated:
        b, f1 = None, None
    elif g.decode_errors or p.decode_errors:
        b, f1 = 0, 0.0  # BIRD's default text decoding raises on such text: the query "fails"
    else:
        b, f1 = bird_ex(p.rows, g.rows), soft_f1(p.rows, g.rows)
    one = _ts(item, db, gold, pred, executor, False)
    same_sql = ts_gold_sql(item.gold_sql) == ts_gold_sql(item.gold_sql, keep_distinct=True) and ts_pred_sql(
        item.pred_sql
    ) == ts_pred_sql(item.pred_sql, keep_distinct=True)
    one_keep = one if same_sql else _ts(item, db, gold, pred, executor, True)
    files = ts_databases(db)
    if len(files) < 2:  # the original alone: test-suite accuracy is not defined, its one-database reading is
        return Readings(bird_ex=b, soft_f1=f1, spider_ex=one, spider_ex_keep_distinct=one_keep)
    variants = [Database.file(f, db.db_id) for f in files if f != db.target]
    ts = _on_variants(item, variants, executor, False, one)
    keep = ts if same_sql else _on_variants(item, variants, executor, True, one_keep)
    return Readings(
        bird_ex=b,
        soft_f1=f1,
        spider_ex=one,
        spider_ex_keep_distinct=one_keep,
        ts_ex=ts,
        ts_ex_keep_distinct=keep,
        ts_databases=len(files),
    )


def ts_databases(db: Database) -> list[str]:
    """The databases the test suite compares an item on: every file of the database's folder whose name
    contains ``.sqlite`` (``exec_eval.eval_exec_match``'s rule, journal files included), sorted; only
    for SQLite files."""
    if not db.info.python_sqlite3:
        return []
    return _sqlite_files(os.path.dirname(db.target) or ".")


@lru_cache(maxsize=4096)
def _sqlite_files(folder: str) -> list[str]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(os.path.join(folder, n) for n in names if ".sqlite" in n)


def _on_variants(
    item: Item, variants: Sequence[Database], executor: Executor, keep: bool, first: int | None
) -> int | None:
    """Test-suite accuracy from the original's reading ``first`` and the variants: 1 iff every one
    matches; None where the gold fails on one (the official script aborts), is cut, or the column search
    gives up, unless a database already showed a mismatch (the official loop stops at the first)."""
    if first != 1:
        return first
    assert item.gold_sql is not None
    g_sql = ts_gold_sql(item.gold_sql, keep_distinct=keep)
    p_sql = ts_pred_sql(item.pred_sql, keep_distinct=keep)
    for db in variants:
        g, p = executor.run(db, g_sql, role="gold"), executor.run(db, p_sql, role="pred")
        if g.result is None:
            return None
        if p.result is None:
            return 0
        if g.result.truncated or p.result.truncated:
            return None
        equal = ts_equal(g.result.rows, p.result.rows, ts_order_matters(g_sql))
        if equal is None:
            return None
        if not equal:
            return 0
    return 1


def _ts(item: Item, db: Database, gold: Execution, pred: Execution, executor: Executor, keep: bool) -> int | None:
    assert item.gold_sql is not None
    g_sql = ts_gold_sql(item.gold_sql, keep_distinct=keep)
    p_sql = ts_pred_sql(item.pred_sql, keep_distinct=keep)
    g = gold if g_sql == item.gold_sql else executor.run(db, g_sql, role="gold")
    p = pred if p_sql == item.pred_sql else executor.run(db, p_sql, role="pred")
    if g.result is None:
        return None  # the official script aborts the whole run here
    if p.result is None:
        return 0
    if g.result.truncated or p.result.truncated:
        return None
    equal = ts_equal(g.result.rows, p.result.rows, ts_order_matters(g_sql))
    return None if equal is None else int(equal)


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


def failed_record(item: Item, error: BaseException | str) -> Record:
    """The record of an item whose evaluation hit a bug of ours: unscored, and the run goes on."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    ex = Executed(item, Database.file(Path(), item.db_id), db_found=True)
    return to_record(ex, Judged(Decision(None, "internal_error", None, f"internal error while evaluating: {text}")))


def unjudged_record(ex: Executed) -> Record:
    """The record of an item that no judge will see: what execution settles, and nothing more."""
    decision = decide(ex.facts())
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
    worker: its item is unscored ``wall_guard``. Never raises for an item's problem: each one's failure is
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
