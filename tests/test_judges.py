"""The judge cascade end to end, through the real openai client, against a scripted endpoint served under its
transport (:class:`~rose_sql.testing.MockOpenAI`). The scripted server on loopback stays where the wire is
the point: a ``rose run`` killed as a process of its own and resumed, which only a real port can serve.

Where HTTP is not the point (the policies, re-asks, what a judge is shown), the cascade is tested on the LLM
protocol's fake instead: ``test_judges_cascade.py``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import rose, write_items

from rose_sql.testing import MockOpenAI, Reply, ScriptedOpenAI, by_content, with_faults
from rose_sql.testing.openai_server import request_key

PROVER_OK = {"expected_answer": "e", "sql_behaviour": "b", "reasoning": "fine", "answers_question": True}
PROVER_NO = {**PROVER_OK, "answers_question": False, "reasoning": "misses the filter"}
REFUTER_UPHOLD = {"reasoning": "no hard evidence", "overturn": False, "ambiguity": "none", "gold_correct": True}
REFUTER_GOLDX = {**REFUTER_UPHOLD, "gold_correct": False, "gold_confidence": 0.8, "ambiguity": "question"}


def item(i: int, pred: str, gold: str = "SELECT name FROM player WHERE age > 25", question: str = "") -> dict[str, Any]:
    return {
        "id": i,
        "db_id": "league",
        "question": question or f"Question {i}: players older than 25?",
        "evidence": "",
        "gold_sql": gold,
        "pred_sql": pred,
    }


def is_refuter(text: str) -> bool:
    return "Reference SQL" in text


def verdicts(text: str) -> Reply:
    """Deterministic judges: the question text carries the scripted verdict."""
    if is_refuter(text):
        body = REFUTER_GOLDX if "[goldx]" in text else REFUTER_UPHOLD
        if "[overturn]" in text:
            body = {**REFUTER_UPHOLD, "overturn": True, "label": "missing_filter"}
        return Reply(content="```json\n" + json.dumps(body) + "\n```", prompt_tokens=1200, completion_tokens=300)
    if "[malformed]" in text:
        return Reply(content='{"answers_question": "yes"}')
    body = PROVER_NO if "[no]" in text else PROVER_OK
    return Reply(content="<think>weighing it</think>\n" + json.dumps(body), prompt_tokens=1000, completion_tokens=200)


def records(out: Path, name: str = "items") -> dict[Any, dict[str, Any]]:
    lines = (out / name / "records.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    assert len({json.dumps(r["id"]) for r in recs}) == len(recs), "an item was recorded twice"
    return {r["id"]: r for r in recs}


def judge_args(srv: ScriptedOpenAI | MockOpenAI, tmp: Path, *extra: str) -> list[str]:
    return [
        "--judge-model",
        "gpt-4o-mini",
        "--judge-base-url",
        srv.base_url,
        "--cache-dir",
        str(tmp / "cache"),
        "--max-retries",
        "4",
        "--judge-timeout",
        "5",
        *extra,
    ]


MIXED = [
    item(1, "SELECT name FROM player WHERE age > 25"),  # same result: matched
    item(2, "SELECT name, age FROM player WHERE age > 25"),  # differs: prover then refuter
    item(3, "SELECT name FROM player", question="Question 3 [no]"),  # prover rejects
    item(4, "SELECT name FROM player WHERE age >= 27", question="Question 4 [overturn]"),
    item(5, "SELECT nam FROM player"),  # fails to execute: no call
    item(6, "SELECT name FROM player WHERE age > 20", question="Question 6 [goldx]"),
]


def test_paper_policy_cascade(tmp_path: Path, league: Path) -> None:
    items = write_items(tmp_path / "items.jsonl", MIXED)
    with MockOpenAI(by_content(verdicts)) as srv:
        rose(
            "run",
            str(items),
            "--db-root",
            str(league),
            "--out",
            str(tmp_path / "out"),
            *judge_args(srv, tmp_path, "--policy", "paper"),
            code=0,
        )
        calls = srv.calls
    r = records(tmp_path / "out")
    assert (r[1]["score"], r[1]["decided_by"], [c["stage"] for c in r[1]["judges"]]) == (1, "refuter", ["refuter"])
    assert (r[2]["score"], r[2]["decided_by"], [c["stage"] for c in r[2]["judges"]]) == (
        1,
        "refuter",
        ["prover", "refuter"],
    )
    assert (r[3]["score"], r[3]["decided_by"], len(r[3]["judges"])) == (0, "prover", 1)
    assert (r[4]["score"], r[4]["decided_by"], r[4]["labels"]["diagnostic"]) == (0, "refuter", "missing_filter")
    assert (r[5]["score"], r[5]["decided_by"], r[5]["judges"]) == (0, "execution", [])
    assert r[6]["labels"]["goldx"] is True and r[6]["labels"]["ambq"] is True and r[6]["score"] == 1
    assert r[3]["labels"] == {k: None for k in ("goldx", "goldx_confidence", "ambq", "ambiguity", "diagnostic")}
    call = r[2]["judges"][0]
    assert call["reply"]["answers_question"] is True and "<think>" in call["raw"]
    assert call["model"] == "gpt-4o-mini" and call["cached"] is False
    assert (call["prompt_tokens"], call["completion_tokens"]) == (1000, 200)
    assert call["cost_usd"] == pytest.approx((1000 * 0.15 + 200 * 0.6) / 1e6)
    assert call["params"] == {"temperature": 0.0, "seed": 20260101, "max_tokens": 8192}
    assert calls == sum(len(x["judges"]) for x in r.values()) == 7
    summary = json.loads((tmp_path / "out" / "items" / "summary.json").read_text())
    assert summary["llm"]["calls"] == 7 and summary["llm"]["by_stage"]["prover"]["calls"] == 3
    assert summary["judge"]["model"] == "gpt-4o-mini" and summary["judge"]["matched_refuter"] == "always"
    assert summary["coverage"] == 1.0


def test_rerun_makes_no_call_and_writes_the_same_records(tmp_path: Path, league: Path) -> None:
    """Identical records apart from what measures this run: timings and whether a call was cached."""
    items = write_items(tmp_path / "items.jsonl", MIXED)
    with MockOpenAI(by_content(verdicts)) as srv:
        for out in ("a", "b"):
            rose(
                "run",
                str(items),
                "--db-root",
                str(league),
                "--out",
                str(tmp_path / out),
                *judge_args(srv, tmp_path, "--policy", "paper"),
                code=0,
            )
            if out == "a":
                first = srv.calls
        assert srv.calls == first  # the second run was served entirely from the cache

    def stable(rec: dict[str, Any]) -> dict[str, Any]:
        rec = json.loads(json.dumps(rec))
        for side in ("pred", "gold"):
            rec[side].pop("seconds"), rec[side].pop("cached")
        for c in rec["judges"]:
            c.pop("cached"), c.pop("seconds")
        rec.pop("llm_calls"), rec.pop("cost_usd")
        if rec["evidence"]:
            rec["evidence"].pop("seconds")
            if rec["evidence"]["search"]:
                rec["evidence"]["search"].pop("seconds")
        return rec

    a, b = records(tmp_path / "a"), records(tmp_path / "b")
    assert {k: stable(v) for k, v in a.items()} == {k: stable(v) for k, v in b.items()}
    assert all(c["cached"] for v in b.values() for c in v["judges"])
    assert sum(v["llm_calls"] for v in b.values()) == 0


def test_transient_faults_still_score_every_item(tmp_path: Path, league: Path) -> None:
    rows = [item(i, f"SELECT name FROM player WHERE age > {20 + i % 10}") for i in range(40)]
    items = write_items(tmp_path / "items.jsonl", rows)
    faulty = with_faults(by_content(verdicts), rate=0.3, seed=7, kinds=("429", "500", "drop"), max_faults=2)
    with MockOpenAI(faulty) as srv:
        rose(
            "run",
            str(items),
            "--db-root",
            str(league),
            "--out",
            str(tmp_path / "out"),
            "--concurrency",
            "8",
            *judge_args(srv, tmp_path, "--policy", "paper"),
            code=0,
        )
        assert faulty.injected > 0
    r = records(tmp_path / "out")
    assert len(r) == 40 and all(v["score"] in (0, 1) for v in r.values())


def test_reasoning_content_only_and_refused_temperature(tmp_path: Path, league: Path) -> None:
    state = {"refused": 0}

    def responder(request: dict[str, Any], index: int) -> Reply:
        if "temperature" in request:
            state["refused"] += 1
            return Reply(status=400, error="Unsupported parameter: 'temperature' is not supported with this model.")
        text = " ".join(str(m.get("content")) for m in request["messages"])
        body = REFUTER_UPHOLD if is_refuter(text) else PROVER_OK
        return Reply(content="", reasoning_content="Let me think. " + json.dumps(body))

    items = write_items(tmp_path / "items.jsonl", [MIXED[1]])
    with MockOpenAI(responder) as srv:
        rose(
            "run",
            str(items),
            "--db-root",
            str(league),
            "--out",
            str(tmp_path / "out"),
            *judge_args(srv, tmp_path),
            code=0,
        )
    r = records(tmp_path / "out")[2]
    assert r["score"] == 1 and state["refused"] == 1
    assert all(c["params"] == {"seed": 20260101, "max_tokens": 8192} for c in r["judges"])
    assert r["judges"][0]["reasoning"].startswith("Let me think")


def test_budget_stops_new_calls(tmp_path: Path, league: Path) -> None:
    rows = [item(i, f"SELECT name, {i} FROM player") for i in range(30)]
    items = write_items(tmp_path / "items.jsonl", rows)
    with MockOpenAI(by_content(verdicts)) as srv:
        rose(
            "run",
            str(items),
            "--db-root",
            str(league),
            "--out",
            str(tmp_path / "out"),
            "--concurrency",
            "1",
            *judge_args(srv, tmp_path, "--budget", "0.002"),
            code=3,
        )
    r = records(tmp_path / "out")
    assert len(r) == 30
    spent = sum(v["cost_usd"] for v in r.values())
    exhausted = [v for v in r.values() if v["unscored_reason"] == "budget_exhausted"]
    assert exhausted and spent < 0.002 + 0.001  # at most the call in flight past the line


def test_dry_run_calls_nothing_and_writes_nothing(tmp_path: Path, league: Path) -> None:
    items = write_items(tmp_path / "items.jsonl", MIXED)
    with MockOpenAI(by_content(verdicts)) as srv:
        result = rose(
            "run",
            str(items),
            "--db-root",
            str(league),
            "--out",
            str(tmp_path / "out"),
            *judge_args(srv, tmp_path, "--dry-run", "--policy", "paper"),
            code=0,
        )
        assert srv.calls == 0
    assert not (tmp_path / "out").exists()
    assert "Dry run" in result.output and "6" in result.output


@pytest.mark.slow
def test_kill_then_resume_repeats_no_finished_call(tmp_path: Path, league: Path) -> None:
    rows = [item(i, f"SELECT name, {i} FROM player") for i in range(60)]
    items = write_items(tmp_path / "items.jsonl", rows)
    from rose_sql.testing import latency

    with ScriptedOpenAI(latency(by_content(verdicts), 0.15)) as srv:
        args = [
            sys.executable,
            "-m",
            "rose_sql",
            "run",
            str(items),
            "--db-root",
            str(league),
            "--out",
            str(tmp_path / "out"),
            *judge_args(srv, tmp_path, "--concurrency", "4"),
        ]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rec_file = tmp_path / "out" / "items" / "records.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if rec_file.exists() and len(rec_file.read_text().splitlines()) >= 10:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        before = len(rec_file.read_text().splitlines())
        assert 10 <= before < 60
        n_before = len(srv.requests)
        cached_at_kill = len(list((tmp_path / "cache").rglob("*.json")))
        subprocess.run([*args, "--resume"], check=True, stdout=subprocess.DEVNULL)
        keys = [request_key(r.body) for r in srv.requests]
    r = records(tmp_path / "out")
    assert sorted(r) == list(range(60))
    assert all(v["score"] in (0, 1) for v in r.values())
    # finished calls (cached when they returned) are not made again; only calls in flight at the kill are
    assert len(keys) - n_before == len(set(keys)) - cached_at_kill
    assert len(keys) - len(set(keys)) <= 4  # at most the calls that were in flight (--concurrency 4)
