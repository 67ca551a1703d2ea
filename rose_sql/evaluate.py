"""One item, start to finish: execute, compare, read the official metrics, ask the judges, decide.

:func:`execute_item` is the deterministic part (runs in a worker thread); :func:`judge_item` walks
the decision table, asking the Prover and the Refuter as :func:`rose_sql.decide.decide` requires;
:func:`evaluate_item` is the synchronous, judge-free path for scripts and tests.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rose_sql.compare import Comparison, compare
from rose_sql.config import MatchedRefuter
from rose_sql.decide import Decision, Facts, JudgeOutcome, decide
from rose_sql.execute import Execution, Executor, ResultSet
from rose_sql.items import Item, db_file
from rose_sql.readings import Readings, bird_ex, soft_f1, ts_equal, ts_gold_sql, ts_order_matters, ts_pred_sql
from rose_sql.record import ExecutionInfo, Record, comparison_dict
from rose_sql.sql import NO_STATEMENT, has_top_level_order_by, tables_read

if TYPE_CHECKING:  # loaded when evidence or a judge is configured: a judge-free run starts faster
    from rose_sql.evidence import Evidence, Finder
    from rose_sql.judges.ask import Call
    from rose_sql.judges.context import Schemas
    from rose_sql.judges.llm import LLM


@dataclass(frozen=True, slots=True)
class Executed:
    """An item after the deterministic stages."""

    item: Item
    db: Path
    db_found: bool
    gold: Execution | None = None
    pred: Execution | None = None
    comparison: Comparison | None = None
    readings: Readings = field(default_factory=Readings)
    evidence: Evidence | None = None

    def for_item(self, item: Item) -> Executed:
        """These stages' outcome for another item with the same database, gold and prediction (one
        question that several systems answered alike): the same results, the executions now cached."""
        gold = replace(self.gold, cached=True) if self.gold is not None else None
        pred = replace(self.pred, cached=True) if self.pred is not None else None
        return replace(self, item=item, gold=gold, pred=pred)

    def facts(self, *, judge: bool = False, matched_refuter: MatchedRefuter = "always") -> Facts:
        return Facts(
            db_found=self.db_found,
            gold=self.gold,
            pred=self.pred,
            equal=self.comparison.equal if self.comparison else None,
            judge=judge,
            matched_refuter=matched_refuter,
            evidence_questions_match=judge
            and (bool(self.evidence and self.evidence.questions_match) or bool(self.doubts())),
        )

    def evidence_text(self) -> str | None:
        """Everything deterministic the judges should see, rendered."""
        parts = [*self.doubts(), self.evidence.render() if self.evidence else ""]
        return "\n\n".join(p for p in parts if p) or None

    def doubts(self) -> list[str]:
        """Cheap, deterministic reasons to doubt a match (the Refuter is asked about these)."""
        if self.comparison is None or self.comparison.equal is not True:
            return []
        out = []
        if self.gold is not None and self.gold.result is not None and self.gold.result.row_count == 0:
            out.append("Both results are empty: any query that selects nothing would match.")
        if tables_read(self.item.pred_sql) != tables_read(self.item.gold_sql):
            out.append("The two queries read different tables, yet return the same result on this database.")
        return out


def execute_item(item: Item, db_root: Path, executor: Executor, finder: Finder | None = None) -> Executed:
    """Run gold and prediction, compare them, compute the official readings and gather evidence."""
    db = db_file(db_root, item.db_id)
    if not db.is_file():
        return Executed(item, db, db_found=False)
    gold = executor.run(db, item.gold_sql, role="gold") if item.gold_sql is not None else None
    pred = executor.run(db, item.pred_sql, role="pred")
    comparison = None
    if gold is not None and gold.result is not None and pred.result is not None:
        ordered = has_top_level_order_by(item.gold_sql or "")
        comparison = compare(pred.result, gold.result, ordered=ordered, digits=executor.config.float_digits)
    readings = _readings(item, db, gold, pred, executor) if gold is not None and gold.ok else Readings()
    evidence = None
    if finder is not None and gold is not None and gold.ok and pred.ok and item.gold_sql is not None:
        evidence = finder.gather(db, item.gold_sql, item.pred_sql, gold, pred, comparison)
    return Executed(item, db, True, gold, pred, comparison, readings, evidence)


def _readings(item: Item, db: Path, gold: Execution, pred: Execution, executor: Executor) -> Readings:
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
    ts = _ts(item, db, gold, pred, executor, False)
    same_sql = ts_gold_sql(item.gold_sql) == ts_gold_sql(item.gold_sql, keep_distinct=True) and ts_pred_sql(
        item.pred_sql
    ) == ts_pred_sql(item.pred_sql, keep_distinct=True)
    keep = ts if same_sql else _ts(item, db, gold, pred, executor, True)
    return Readings(bird_ex=b, soft_f1=f1, ts_ex=ts, ts_ex_keep_distinct=keep)


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


# --------------------------------------------------------------------------- judging


@dataclass(frozen=True, slots=True)
class Judged:
    """The judges' part of a record."""

    decision: Decision
    calls: list[Call] = field(default_factory=list)
    labels: dict[str, Any] = field(default_factory=lambda: {"goldx": None, "ambq": None})


async def judge_item(ex: Executed, llm: LLM | None, schemas: Schemas, *, matched_refuter: MatchedRefuter) -> Judged:
    """Walk the decision table, asking each judge it calls for, and return the decision with the calls."""
    from rose_sql.errors import BudgetExhausted, JudgeFailed
    from rose_sql.judges.ask import Case, ask, prover_messages, refuter_messages
    from rose_sql.judges.replies import ProverReply, RefuterReply

    facts = ex.facts(judge=llm is not None, matched_refuter=matched_refuter)
    calls: list[Call] = []
    while True:
        step = decide(facts)
        if isinstance(step, Decision):
            return Judged(step, calls, _labels(facts.refuter))
        assert llm is not None and ex.pred is not None
        schema = await asyncio.to_thread(schemas.get, ex.db)
        case = Case(ex.item, ex.db, ex.gold, ex.pred, ex.comparison, evidence=ex.evidence_text())
        try:
            if step == "prover":
                prover, made = await ask(llm, step, prover_messages(case, schema, llm.cfg), ProverReply)
                facts = replace(facts, prover=prover)
            else:
                passed = facts.prover if isinstance(facts.prover, ProverReply) else None
                msgs = refuter_messages(case, schema, passed, llm.cfg, matched=step == "refuter_matched")
                refuter, made = await ask(llm, step, msgs, RefuterReply)
                facts = replace(facts, refuter=refuter)
        except (JudgeFailed, BudgetExhausted) as e:
            made = e.calls
            outcome: JudgeOutcome = "failed" if isinstance(e, JudgeFailed) else "no_budget"
            facts = replace(facts, prover=outcome) if step == "prover" else replace(facts, refuter=outcome)
        calls.extend(made)


def _labels(refuter: object) -> dict[str, Any]:
    from rose_sql.judges.replies import RefuterReply

    if not isinstance(refuter, RefuterReply):
        return {"goldx": None, "ambq": None}
    return {
        "goldx": not refuter.gold_correct,
        "goldx_confidence": refuter.gold_confidence,
        "ambq": refuter.ambiguity == "question",  # the paper's AmbQ; schema ambiguity is kept apart
        "ambiguity": refuter.ambiguity,
        "diagnostic": refuter.label,
    }


# --------------------------------------------------------------------------- records


def to_record(ex: Executed, judged: Judged) -> Record:
    """The on-disk record of an item."""
    it, d = ex.item, judged.decision
    calls = [_call_dict(c) for c in judged.calls]
    return Record(
        id=it.id,
        db_id=it.db_id,
        score=d.score,
        unscored_reason=d.unscored_reason,
        decided_by=d.decided_by,
        why=d.why,
        readings=ex.readings,
        comparison=comparison_dict(ex.comparison),
        pred=ExecutionInfo.of(ex.pred),
        gold=ExecutionInfo.of(ex.gold),
        difficulty=it.difficulty,
        question=it.question,
        pred_sql=it.pred_sql,
        gold_sql=it.gold_sql,
        source=it.source,
        labels=judged.labels,
        judges=calls,
        evidence=ex.evidence.to_dict() if ex.evidence else None,
        llm_calls=sum(1 for c in judged.calls if not c.cached),
        cost_usd=round(sum(c.cost_usd or 0.0 for c in judged.calls if not c.cached), 8),
    )


def _call_dict(c: Call) -> dict[str, Any]:
    return {
        "stage": c.stage,
        "model": c.model,
        "reply": c.reply,
        "raw": c.raw,
        "reasoning": c.reasoning,
        "cached": c.cached,
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": c.completion_tokens,
        "reasoning_tokens": c.reasoning_tokens,
        "cost_usd": c.cost_usd,
        "seconds": c.seconds,
        "prompt_sha256": c.prompt_sha256,
        "params": c.params,
        "error": c.error,
    }


def failed_record(item: Item, error: BaseException) -> Record:
    """The record of an item whose evaluation hit a bug of ours: unscored, and the run goes on."""
    why = f"internal error while evaluating: {type(error).__name__}: {error}"
    ex = Executed(item, Path(), db_found=True)
    return to_record(ex, Judged(Decision(None, "internal_error", None, why)))


def unjudged_record(ex: Executed) -> Record:
    """The record of an item that no judge will see: what execution settles, and nothing more."""
    decision = decide(ex.facts())
    assert isinstance(decision, Decision)  # without a judge the table never asks for one
    return to_record(ex, Judged(decision))


def evaluate_item(item: Item, db_root: Path, executor: Executor) -> Record:
    """Execute, compare and decide one item without judges. Never raises: a failure is data on the record."""
    try:
        return unjudged_record(execute_item(item, db_root, executor))
    except Exception as e:  # a bug of ours must not take the other items down
        return failed_record(item, e)
