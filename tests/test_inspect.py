"""The inspect_ai scorer: inspect's mockllm writes the SQL and plays the Prover and Refuter, end to end."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("inspect_ai", reason="the optional extra rose-sql[inspect] is not installed")

from inspect_ai import Task, eval
from inspect_ai.dataset import MemoryDataset
from inspect_ai.log import EvalLog
from inspect_ai.model import ChatMessage, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import CORRECT, INCORRECT, Score
from inspect_ai.solver import generate

from rose_sql.demo import DB_ID, load_demo_items
from rose_sql.errors import EndpointError
from rose_sql.inspect import InspectLLM, extract_sql, rose_scorer, sql_sample
from rose_sql.inspect.demo import SYSTEM_PROMPT, demo_database, rose_demo
from rose_sql.judges.keys import nonce_asked

ITEMS = {it.question: it for it in load_demo_items()}
PROVER = {"expected_answer": "e", "sql_behaviour": "b", "reasoning": "it answers", "answers_question": True}
REFUTER = {"reasoning": "no hard evidence", "overturn": False, "ambiguity": "none", "gold_correct": True}
Outputs = Callable[..., ModelOutput]


def output(text: str) -> ModelOutput:
    """A mockllm reply with its usage set (else mockllm counts tokens with tiktoken, which downloads)."""
    out = ModelOutput.from_content("mockllm/model", text)
    out.usage = ModelUsage(input_tokens=1000, output_tokens=50, total_tokens=1050)
    return out


def item_of(messages: list[ChatMessage]) -> Any:
    return next((it for q, it in ITEMS.items() if q in messages[-1].text), None)


def is_solver(messages: list[ChatMessage]) -> bool:
    return messages[0].text.startswith(SYSTEM_PROMPT.split("\n")[0])


def judge(messages: list[ChatMessage]) -> ModelOutput:
    """The expert's verdict as the judges' replies, with the call's nonce; the Refuter flags the wrong golds."""
    it = item_of(messages)
    ok = it.expert != "incorrect"
    nonce = {"nonce": nonce_asked([{"content": messages[-1].text}])}
    if "Reference SQL" in messages[-1].text:
        return output(json.dumps({**nonce, **REFUTER, "overturn": not ok, "gold_correct": it.kind != "wrong_gold"}))
    return output("<think>weighing it</think>" + json.dumps({**nonce, **PROVER, "answers_question": ok}))


def everything(messages: list[ChatMessage], *_: Any) -> ModelOutput:
    """One mockllm for all: the demo's predictions as the answers, the expert's verdicts as the judgements."""
    if is_solver(messages):
        return output(f"Here it is:\n```sql\n{item_of(messages).pred_sql}\n```")
    return judge(messages)


def scores(log: EvalLog) -> dict[Any, Score]:
    assert log.status == "success", log.error
    assert log.samples is not None
    return {s.id: s.scores["rose_scorer"] for s in log.samples if s.scores}


def test_demo_task_end_to_end(tmp_path: Path) -> None:
    """inspect_ai.eval(task, model="mockllm/model"): the model under evaluation is also the grader."""
    logs = eval(
        rose_demo(db_root=str(tmp_path / "db")),
        model="mockllm/model",
        model_args={"custom_outputs": everything},
        display="none",
        log_dir=str(tmp_path / "logs"),
    )
    got = scores(logs[0])
    assert len(got) == 40
    by_id = {it.id: it for it in ITEMS.values()}
    by_kind = {it.kind: it.id for it in reversed(by_id.values())}  # the first item of each kind
    # a failing prediction: INCORRECT from execution, no judge asked
    fails = got[by_kind["fails"]]
    assert fails.value == INCORRECT and fails.metadata is not None
    assert fails.metadata["rose"]["decided_by"] == "execution" and fails.metadata["rose"]["judges"] == []
    # a plainly wrong prediction: the Prover's no
    wrong = got[by_kind["wrong"]].metadata
    assert wrong is not None and wrong["rose"]["decided_by"] == "prover"
    assert [j["answers_question"] for j in wrong["rose"]["judges"]] == [False]
    # a wrong gold: the Prover passes, the Refuter upholds and flags the gold
    gold = got[by_kind["wrong_gold"]]
    assert gold.value == CORRECT and gold.metadata is not None
    assert [j["stage"] for j in gold.metadata["rose"]["judges"]] == ["prover", "refuter"]
    assert gold.metadata["rose"]["labels"]["goldx"] is True
    assert "refuter: no hard evidence" in (gold.explanation or "")
    assert gold.answer == by_id[by_kind["wrong_gold"]].pred_sql
    # a gold that fails: unscored as inspect does (NaN, skipped by the metrics), with our reason
    unscored = got[by_kind["gold_fails"]]
    assert isinstance(unscored.value, float) and math.isnan(unscored.value)
    assert unscored.metadata is not None and unscored.metadata["rose"]["unscored_reason"] == "gold_error"
    assert unscored.reason == "gold_error"
    # the whole record rides along, with the witness slot of the evidence
    assert "witness" in got[by_kind["coincidence"]].metadata["rose"]  # type: ignore[index]
    assert got[1].metadata["rose_record"]["id"] == 1  # type: ignore[index]
    assert set(got[1].metadata["rose"]["prompts"]) == {"prover", "refuter", "refuter_matched"}  # type: ignore[index]
    # the metric skips the unscored sample
    scored = [s for s in got.values() if s.value in (CORRECT, INCORRECT)]
    assert len(scored) == 39
    score = logs[0].results.scores[0]  # type: ignore[union-attr]
    assert score.metrics["accuracy"].value == pytest.approx(sum(s.value == CORRECT for s in scored) / 39)
    # and the log says what it is over, and what it left out
    assert (score.scored_samples, score.unscored_samples) == (39, len(got) - 39) == (39, 1)


def test_grader_role_judges(tmp_path: Path) -> None:
    """The judges come from the grader role, never from the model under evaluation."""
    asked: list[str] = []

    def answers(messages: list[ChatMessage], *_: Any) -> ModelOutput:
        assert is_solver(messages), "the model under evaluation was asked to judge"
        return output(item_of(messages).pred_sql)

    def grader(messages: list[ChatMessage], *_: Any) -> ModelOutput:
        asked.append("refuter" if "Reference SQL" in messages[-1].text else "prover")
        return judge(messages)

    logs = eval(
        rose_demo(db_root=str(tmp_path / "db"), evidence=False),
        model=get_model("mockllm/model", custom_outputs=answers, memoize=False),
        model_roles={"grader": get_model("mockllm/model", custom_outputs=grader, memoize=False)},
        sample_id=[3, 6, 14],
        display="none",
        log_dir=str(tmp_path / "logs"),
    )
    got = scores(logs[0])
    assert {k: s.value for k, s in got.items()} == {3: INCORRECT, 6: CORRECT, 14: CORRECT}
    assert sorted(asked) == ["prover", "prover", "prover", "refuter", "refuter"]


def test_invalid_reply_is_unscored(tmp_path: Path) -> None:
    """A judge that never replies validly: re-asked once, then the sample is unscored judge_invalid."""
    demo_database(tmp_path / "db")
    it = next(i for i in ITEMS.values() if i.kind == "wrong")
    replies: list[str] = []

    def grader(messages: list[ChatMessage], *_: Any) -> ModelOutput:
        replies.append(messages[-1].text)
        return output('{"answers_question": "yes"}')

    task = Task(
        dataset=MemoryDataset([sql_sample(it.question, it.gold_sql, DB_ID, id="q")]),
        solver=generate(),
        scorer=rose_scorer(tmp_path / "db", model=get_model("mockllm/model", custom_outputs=grader, memoize=False)),
    )
    model = get_model("mockllm/model", custom_outputs=lambda *_: output(it.pred_sql), memoize=False)
    got = scores(eval(task, model=model, display="none", log_dir=str(tmp_path / "logs"))[0])["q"]
    assert isinstance(got.value, float) and math.isnan(got.value)
    assert got.reason == "judge_invalid" and len(replies) == 2
    assert "could not be used" in replies[1]
    calls = got.metadata["rose_record"]["judges"]  # type: ignore[index]
    assert [c["raw"] for c in calls] == ['{"answers_question": "yes"}'] * 2
    assert {c["reply_format"] for c in calls} == {"json_schema"}  # asked of inspect as its response_schema


def test_adapter_reply_and_failure() -> None:
    """InspectLLM turns inspect's output into our ChatReply, and a model error into an EndpointError."""
    seen: list[list[str]] = []

    def reply(messages: list[ChatMessage], *_: Any) -> ModelOutput:
        seen.append([m.role for m in messages])
        return output("hello")

    llm = InspectLLM(get_model("mockllm/model", custom_outputs=reply, memoize=False))
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "again"},
    ]
    got = asyncio.run(llm.complete(msgs))  # type: ignore[arg-type]
    assert (got.content, got.prompt_tokens, got.completion_tokens, got.cached) == ("hello", 1000, 50, False)
    assert got.params == {"temperature": 0.0, "seed": 20260101, "max_tokens": 8192}
    assert seen == [["system", "user", "assistant", "user"]]
    assert llm.cfg.model == "mockllm/model" and llm.cfg.cache_dir is None

    def broken(*_: Any) -> ModelOutput:
        raise RuntimeError("provider down")

    cached = output("hello")  # inspect's usage counts a provider's cache reads and writes apart from input_tokens
    cached.usage = ModelUsage(
        input_tokens=150, output_tokens=5, total_tokens=1055, input_tokens_cache_read=800, input_tokens_cache_write=100
    )
    hit = InspectLLM(get_model("mockllm/model", custom_outputs=lambda *_: cached, memoize=False))
    got = asyncio.run(hit.complete(msgs))  # type: ignore[arg-type]
    assert (got.prompt_tokens, got.cached_tokens) == (1050, 800)  # our prompt tokens include them, as OpenAI's do

    bad = InspectLLM(get_model("mockllm/model", custom_outputs=broken, memoize=False))
    with pytest.raises(EndpointError, match="provider down"):
        asyncio.run(bad.complete(msgs[:2]))  # type: ignore[arg-type]


def test_extract_sql() -> None:
    assert extract_sql("SELECT 1") == "SELECT 1"
    assert extract_sql("first\n```sql\nSELECT 1\n```\nthen\n```SQL\nSELECT 2;\n```") == "SELECT 2;"
    assert extract_sql("```\nSELECT 3\n```") == "SELECT 3"


def test_inspect_llm_implements_the_llm_protocol_on_its_own() -> None:
    from rose_sql.judges.llm import LLM

    assert InspectLLM.__mro__ == (InspectLLM, object)  # no state inherited from the live client
    for member in ("reply_format", "complete", "aclose"):
        assert member in LLM.__dict__ and callable(getattr(InspectLLM, member))
    llm = InspectLLM(get_model("mockllm/model"))
    assert (llm.reply_format(("r", {})), llm.reply_format(None)) == ("json_schema", "text")
    assert llm.ledger.calls == 0 and llm.cfg.model == "mockllm/model"
