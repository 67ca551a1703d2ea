"""An inspect_ai scorer for text-to-SQL: ROSE's execution stage, evidence and judge cascade.

A sample is a question with its gold SQL (the convention :func:`sql_sample` builds): ``input`` is the
question (or ``metadata["question"]`` when the input is a whole prompt), ``target`` the gold SQL,
``metadata["db_id"]`` the database (``<db_root>/<db_id>/<db_id>.sqlite``, or a database of the
``--db`` URL's engine) and ``metadata["evidence"]`` BIRD's external knowledge, if any. The model's
answer is the predicted SQL (the last fenced ``sql`` block of the completion, else all of it).

The score is inspect's ``CORRECT`` or ``INCORRECT`` as ROSE decides; an item ROSE leaves unscored (a gold
that fails, a judge that never answered validly, a database that is missing...) is
:meth:`Score.unscored <inspect_ai.scorer.Score.unscored>`: NaN, which inspect's metrics skip, with
``reason`` our unscored reason. ``metadata["rose"]`` holds the decision (``score``,
``decided_by``: the stage that decided, ``unscored_reason``, ``why``), the GoldX / AmbQ labels, the
official readings, the comparison, the witness and gold smells, each judge call's verdict, and what
produced the score (``rose_sql_version``, the hashes of the judges' ``prompts``);
``metadata["rose_record"]`` the whole record as ``rose run`` writes it.

As in every view of ROSE-SQL, the headline states its denominator: inspect's ``accuracy`` is over the
scored samples, and its log's score says how many it was over and left out (``scored_samples``,
``unscored_samples``); each unscored sample's ``reason`` says why.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any

from inspect_ai.dataset import Sample
from inspect_ai.model import Model, get_model
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Scorer, Target, accuracy, scorer, stderr
from inspect_ai.solver import TaskState

from rose_sql.__version__ import __version__
from rose_sql.config import Config, JudgeConfig
from rose_sql.engines import Source
from rose_sql.engines.execute import Executor
from rose_sql.engines.workers import Pool
from rose_sql.inspect.judge import InspectLLM, judge_config
from rose_sql.items.load import Item
from rose_sql.judges.ask import prompt_hashes
from rose_sql.record import JudgeCall, Record
from rose_sql.run.evaluate import Worker, execute_in_worker, failed_record, init_worker, judge_item, to_record

GRADER_ROLE = "grader"
"""The inspect model role the judges are taken from (inspect's convention for model-graded scorers)."""
_FENCED_SQL = re.compile(r"```(?:sql|sqlite)?[ \t]*\n(.*?)```", re.IGNORECASE | re.DOTALL)


def extract_sql(completion: str) -> str:
    """The predicted SQL in a model's answer: its last fenced code block, else the whole answer."""
    blocks = _FENCED_SQL.findall(completion)
    return (blocks[-1] if blocks else completion).strip()


def sql_sample(
    question: str,
    gold_sql: str,
    db_id: str,
    *,
    evidence: str | None = None,
    id: int | str | None = None,
    input: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Sample:
    """A text-to-SQL sample as :func:`rose_scorer` reads it (``input``: a whole prompt, when not the question)."""
    meta = {**(metadata or {}), "db_id": db_id, "question": question}
    if evidence:
        meta["evidence"] = evidence
    return Sample(input=input if input is not None else question, target=gold_sql, id=id, metadata=meta)


def record_score(record: Record) -> Score:
    """Our record as an inspect score (see the module's docstring)."""
    data = json.loads(record.to_json())  # JSON values only, as inspect's log needs them
    ev = data.get("evidence") or {}
    rose = {
        "score": record.score,
        "decided_by": record.decided_by,
        "unscored_reason": record.unscored_reason,
        "why": record.why,
        "labels": data.get("labels"),
        "readings": data.get("readings"),
        "comparison": data.get("comparison"),
        "witness": ev.get("witness"),
        "gold_smells": ev.get("gold_smells", []),
        "judges": [_verdict(c) for c in record.judges],
        "llm_calls": record.llm_calls,
        "rose_sql_version": __version__,
        "prompts": prompt_hashes(),
    }
    metadata = {"rose": rose, "rose_record": data}
    explanation = _explanation(record)
    if record.score is None:
        return Score.unscored(
            reason=record.unscored_reason, answer=record.pred_sql, explanation=explanation, metadata=metadata
        )
    value = CORRECT if record.score == 1 else INCORRECT
    return Score(value=value, answer=record.pred_sql, explanation=explanation, metadata=metadata)


def _verdict(call: JudgeCall) -> dict[str, object]:
    reply = call.reply
    keys = ("answers_question", "overturn", "ambiguity", "gold_correct", "gold_confidence", "label")
    shown = {k: getattr(reply, k) for k in keys if reply is not None and hasattr(reply, k)}
    return {"stage": call.stage, "model": call.model, "error": call.error, **shown}


def _explanation(record: Record) -> str:
    lines = [f"{record.decided_by or 'unscored'}: {record.why}"]
    for call in record.judges:
        if call.reply is not None and call.reply.reasoning:
            lines.append(f"{call.stage}: {call.reply.reasoning}")
        elif call.error:
            lines.append(f"{call.stage}: {call.error}")
    return "\n".join(lines)


@scorer(metrics=[accuracy(), stderr()])
def rose_scorer(
    db_root: str | Path,
    *,
    model: str | Model | None = None,
    role: str = GRADER_ROLE,
    config: Config | None = None,
    judge: JudgeConfig | None = None,
    evidence: bool = True,
) -> Scorer:
    """Score text-to-SQL answers with ROSE: execute, compare, gather evidence, ask the Prover and Refuter.

    Args:
        db_root: A folder of ``<db_id>/<db_id>.sqlite`` files, or an engine's URL as ``rose run --db`` takes.
        model: The judges' model; default: the model bound to ``role``, else the model under evaluation.
        role: The model role the judges come from (``grader``).
        config: Execution limits (``rose run``'s defaults otherwise).
        judge: Judge parameters: matched-results policy, re-asks, completion cap, temperature, seed,
            prompt sizes (its ``model``, endpoint, cache and budget are inspect's business and ignored).
        evidence: Search witnesses, distinguishing rows and gold smells for the judges (as ``rose run``).
    """
    root = Source.parse(str(db_root))
    cfg = (config or Config()).with_(evidence=evidence)
    from rose_sql.judges.judges import Judges

    catalogue = Executor(cfg)  # the judges read the schema through the scorer's own engines
    judges = Judges(replace(judge or JudgeConfig(model=""), cache_dir=None), catalogue, asks=False)
    """The schemas, read once per database for every sample, and the fences (each sample asks its grader)."""
    pools: list[Pool[Worker]] = []
    lock = threading.Lock()

    def pool() -> Pool[Worker]:
        """The scorer's guarded worker processes (made at its first sample), where the queries and the
        evidence run as under ``rose run``: a call the engine cannot interrupt is stopped with its worker."""
        with lock:
            if not pools:
                pools.append(Pool(cfg.workers, init_worker, cfg))
                weakref.finalize(score, pools[0].close, now=True)
            return pools[0]

    async def score(state: TaskState, target: Target) -> Score:
        meta = state.metadata or {}
        item = Item(
            id=state.sample_id if state.sample_id is not None else "",
            db_id=str(meta.get("db_id", "")),
            question=str(meta.get("question") or state.input_text),
            evidence=meta.get("evidence"),
            gold_sql=target.text,
            pred_sql=extract_sql(state.output.completion),
            source=f"inspect:{state.sample_id}",
        )
        grader = get_model(model) if model is not None else get_model(role=role)
        grading = judges.asking(InspectLLM(grader, judge_config(grader, judge)))
        try:
            (ex,) = await asyncio.wrap_future(pool().submit(execute_in_worker, [(item, root, True)]))
            record = to_record(ex, await judge_item(ex, grading))
        except Exception as e:  # a bug of ours: this sample says so, inspect goes on
            record = failed_record(item, e)
        return record_score(record)

    return score
