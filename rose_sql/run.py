"""Evaluate items: one item (:func:`evaluate_item`) and whole prediction files (:func:`run`).

Items of every prediction file go through one thread pool and one execution cache, so a gold
query runs once however many systems are evaluated. Each record is appended to its system's
``records.jsonl`` as soon as it is finished; ``resume=True`` skips items already recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from rose_sql.compare import Comparison, compare
from rose_sql.config import Config
from rose_sql.decide import Decision, decide
from rose_sql.errors import UsageError
from rose_sql.execute import Execution, Executor, ResultSet
from rose_sql.items import Item, Loaded
from rose_sql.readings import (
    Readings,
    bird_ex,
    soft_f1,
    ts_equal,
    ts_gold_sql,
    ts_order_matters,
    ts_pred_sql,
)
from rose_sql.record import ExecutionInfo, Record, RecordWriter, comparison_dict, id_key, read_records
from rose_sql.report import Summary, summarize, write_summary
from rose_sql.sql import has_top_level_order_by


_EMPTY_SQL = ("empty SQL", "SQL is only comments")  # the gate's reasons for SQL with no statement


def db_path(db_root: Path, db_id: str) -> Path:
    """Where a database lives: ``<db_root>/<db_id>/<db_id>.sqlite``."""
    return db_root / db_id / f"{db_id}.sqlite"


def evaluate_item(item: Item, db_root: Path, executor: Executor) -> Record:
    """Execute, compare and decide one item. Never raises: a failure is data on the record."""
    try:
        return _evaluate(item, db_root, executor)
    except Exception as e:  # a bug of ours must not take the other items down
        why = f"internal error while evaluating: {type(e).__name__}: {e}"
        return _record(item, Decision(None, "internal_error", None, why), Readings(), None, None, None)


def _evaluate(item: Item, db_root: Path, executor: Executor) -> Record:
    db = db_path(db_root, item.db_id)
    if not db.is_file():
        return _record(item, decide(db_found=False, gold=None, pred=None), Readings(), None, None, None)
    gold = executor.run(db, item.gold_sql, role="gold") if item.gold_sql is not None else None
    pred = executor.run(db, item.pred_sql, role="pred")
    comparison = None
    if gold is not None and gold.result is not None and pred.result is not None:
        comparison = compare(
            pred.result,
            gold.result,
            ordered=has_top_level_order_by(item.gold_sql or ""),
            digits=executor.config.float_digits,
        )
    readings = _readings(item, db, gold, pred, executor) if gold is not None and gold.ok else Readings()
    return _record(item, decide(db_found=True, gold=gold, pred=pred), readings, comparison, gold, pred)


def _readings(item: Item, db: Path, gold: Execution, pred: Execution, executor: Executor) -> Readings:
    g, p = gold.result, pred.result
    assert g is not None and item.gold_sql is not None
    if p is None and pred.status == "rejected" and pred.error in _EMPTY_SQL:
        p = ResultSet((), (), 0)  # Python's sqlite3 runs an empty or comment-only string as "no rows"
    if p is None:
        b, f1 = 0, 0.0
    elif g.truncated or p.truncated:
        b, f1 = None, None
    elif g.decode_errors or p.decode_errors:
        b, f1 = 0, 0.0  # BIRD's default text decoding raises on such text: the query "fails"
    else:
        b, f1 = bird_ex(p.rows, g.rows), soft_f1(p.rows, g.rows)
    return Readings(
        bird_ex=b,
        soft_f1=f1,
        ts_ex=_ts(item, db, gold, pred, executor, False),
        ts_ex_keep_distinct=_ts(item, db, gold, pred, executor, True),
    )


def _ts(item: Item, db: Path, gold: Execution, pred: Execution, executor: Executor, keep: bool) -> int | None:
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
    return int(ts_equal(g.result.rows, p.result.rows, ts_order_matters(g_sql)))


def _record(
    item: Item,
    d: Decision,
    readings: Readings,
    comparison: Comparison | None,
    gold: Execution | None,
    pred: Execution | None,
) -> Record:
    return Record(
        id=item.id,
        db_id=item.db_id,
        score=d.score,
        unscored_reason=d.unscored_reason,
        decided_by=d.decided_by,
        why=d.why,
        readings=readings,
        comparison=comparison_dict(comparison),
        pred=ExecutionInfo.of(pred),
        gold=ExecutionInfo.of(gold),
        difficulty=item.difficulty,
        question=item.question,
        pred_sql=item.pred_sql,
        gold_sql=item.gold_sql,
        source=item.source,
    )


# --------------------------------------------------------------------------- many files


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


Progress = Callable[[str, Record], None]


def run(systems: Sequence[SystemRun], db_root: Path, config: Config, progress: Progress | None = None) -> list[Summary]:
    """Evaluate every pending item of every system, appending records as they finish."""
    writers = {s.name: RecordWriter(s.out_dir / "records.jsonl") for s in systems}
    try:
        with Executor(config) as executor, ThreadPoolExecutor(config.workers) as pool:
            pending: dict[Future[Record], str] = {}
            queue = [(s.name, it) for s in systems for it in s.todo]
            queue.reverse()
            window = config.workers * 4  # bounded in-flight work: records stream out in submit order
            while queue or pending:
                while queue and len(pending) < window:
                    name, it = queue.pop()
                    pending[pool.submit(evaluate_item, it, db_root, executor)] = name
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    name = pending.pop(fut)
                    record = fut.result()
                    writers[name].write(record)
                    if progress:
                        progress(name, record)
    finally:
        for w in writers.values():
            w.close()
    summaries = []
    for s in systems:
        summary = summarize(s.out_dir / "records.jsonl", s.loaded)
        write_summary(summary, s.out_dir / "summary.json")
        summaries.append(summary)
    return summaries
