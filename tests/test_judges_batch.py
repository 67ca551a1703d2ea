"""``rose run --batch``: the judges' calls through the Batch API of the scripted server, end to end (the wire:
the Batch API's files and batches are served by the scripted server only, and a run is killed as a process).

The same scripted judges answer live calls and batched requests, so a batched run must score every item
as a live run does, at the batch price, with failed and expired requests sent again in the next round and
a run killed with kill -9 resumed without sending any request twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import rose, write_items
from test_judges import MIXED, item, judge_args, records, verdicts
from test_resume import ENV, rose_command

from rose_sql.cli import main
from rose_sql.engines import Source
from rose_sql.record import Record
from rose_sql.testing import ScriptedOpenAI, by_content
from rose_sql.testing.batches import BatchScript
from rose_sql.testing.openai_server import user_text

HANG_GUARD_S = 120.0
ITEMS = [*MIXED, item(7, "SELECT name FROM player WHERE age > 30", question="Question 7 [malformed]")]
"""Round 1: four Provers and two Refuters of matching results (items 1, 4); round 2: the Refuters after the
Provers' passes (items 2, 6) and the re-ask of item 7's invalid reply."""


def batch_args(srv: ScriptedOpenAI, tmp: Path, *extra: str) -> list[str]:
    return [*judge_args(srv, tmp, "--policy", "paper", "--batch", "--batch-poll", "0.01"), *extra]


def run_batch(items: Path, league: Path, out: Path, srv: ScriptedOpenAI, cache: Path, *extra: str) -> Any:
    """A batched run of ``items`` (the tests' ITEMS hold item 7, whose replies are never valid: each run ends
    with it judge_invalid, and exits 3 saying so)."""
    args = ["run", str(items), "--db-root", str(league), "--out", str(out), *batch_args(srv, cache, *extra)]
    return rose(*args, code=3)


def batch_log(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "batches.jsonl").read_text().splitlines()]


def outcome(r: dict[str, Any]) -> tuple[Any, ...]:
    """What a run decided about an item, and what each judge replied."""
    replies = [(c["stage"], c["reply"], c["error"] is None, c.get("reply_format"), c["params"]) for c in r["judges"]]
    return r["score"], r["unscored_reason"], r["decided_by"], r["labels"], replies


def test_batch_run_scores_like_live_run_at_half_price(tmp_path: Path, league: Path) -> None:
    items = write_items(tmp_path / "items.jsonl", ITEMS)
    with ScriptedOpenAI(by_content(verdicts)) as srv:
        rose("run", str(items), "--db-root", str(league), "--out", str(tmp_path / "live"),
              *judge_args(srv, tmp_path / "a", "--policy", "paper"), code=3)  # fmt: skip
        live_calls = srv.calls
        srv.reset()
        result = run_batch(items, league, tmp_path / "out", srv, tmp_path / "b")
        assert srv.calls == 0, "a batched run made a live call"
        batches = srv.batch.batches
        run_batch(items, league, tmp_path / "again", srv, tmp_path / "b")  # every reply is in the cache now
        assert srv.batch.batches == batches and srv.calls == 0, "the rerun sent something"
    live, batched = records(tmp_path / "live"), records(tmp_path / "out")
    assert live.keys() == batched.keys() and len(batched) == len(ITEMS)
    for k in live:
        assert outcome(batched[k]) == outcome(live[k]), k
    assert batched[7]["unscored_reason"] == "judge_invalid" and len(batched[7]["judges"]) == 2  # re-asked once
    assert [c["stage"] for c in batched[2]["judges"]] == ["prover", "refuter"]

    # two rounds: the Provers and the matched Refuter, then what depends on a reply of the first
    assert [b["status"] for b in batches] == ["completed", "completed"]
    assert [b["request_counts"]["total"] for b in batches] == [6, 3]
    assert sum(b["request_counts"]["total"] for b in batches) == live_calls
    log = batch_log(tmp_path / "out")
    assert [e["batch"] for e in log if e["event"] == "submitted"] == [b["id"] for b in batches]

    # every call made through a batch says which, and costs half the live price
    calls = [(k, i, c) for k, r in batched.items() for i, c in enumerate(r["judges"])]
    assert all(c["batch_id"] in {b["id"] for b in batches} and not c["cached"] for _, _, c in calls)
    for k, i, c in calls:
        assert c["cost_usd"] == pytest.approx(live[k]["judges"][i]["cost_usd"] / 2, abs=1e-8)
        assert "batch_id" not in live[k]["judges"][i]
    live_sum = json.loads((tmp_path / "live" / "items" / "summary.json").read_text())
    batch_sum = json.loads((tmp_path / "out" / "items" / "summary.json").read_text())
    assert live_sum["llm"]["cost_usd"] > 0
    assert batch_sum["llm"]["cost_usd"] == pytest.approx(live_sum["llm"]["cost_usd"] / 2, abs=1e-6)
    assert batch_sum["llm"]["calls"] == live_sum["llm"]["calls"] == live_calls
    assert batch_sum["rose"] == live_sum["rose"]
    assert Record.from_dict(batched[2]).judges[0].batch_id == batches[0]["id"]  # read back typed
    assert f"batch {batches[-1]['id']}: completed, 3/3 done, 0 failed" in result.stderr
    assert "Batch API: 2 batches sent in 2 rounds; the judges' costs are at the batch price (50% off)" in result.stdout

    again = records(tmp_path / "again")
    assert all(c["cached"] and c["cost_usd"] is not None for r in again.values() for c in r["judges"])
    assert {k: outcome(r) for k, r in again.items()} == {k: outcome(r) for k, r in batched.items()}


def test_failed_requests_are_sent_again_in_the_next_round(tmp_path: Path, league: Path) -> None:
    items = write_items(tmp_path / "items.jsonl", ITEMS)

    def fail(cid: str, body: dict[str, Any], attempt: int) -> str | None:
        text = user_text(body)
        if "Question 3 [no]" in text:
            return "the model is overloaded"  # every time: the item is judge_error after 3 attempts
        if "Question 2:" in text and attempt == 0:
            return "a transient failure"  # its Prover and its Refuter each fail once
        return None

    with ScriptedOpenAI(by_content(verdicts), batch=BatchScript(fail=fail)) as srv:
        result = run_batch(items, league, tmp_path / "out", srv, tmp_path)
        assert "5 requests failed (sent again, or given up after 3)" in result.stdout
        sent = srv.batch.submitted
        batches = srv.batch.batches
        first = records(tmp_path / "out")
        srv.batch.script.fail = None  # the provider recovered: --resume asks item 3's Prover again
        run_batch(items, league, tmp_path / "out", srv, tmp_path, "--resume")
        resent = srv.batch.submitted - sent
    assert (first[3]["score"], records(tmp_path / "out")[3]["score"]) == (None, 0)
    assert len(resent) == 1 and resent.total() == 1  # only that one request
    r = first
    assert (r[2]["score"], r[2]["decided_by"]) == (1, "refuter")
    assert [(c["stage"], c["error"]) for c in r[2]["judges"]] == [("prover", None), ("refuter", None)]
    assert (r[3]["score"], r[3]["unscored_reason"]) == (None, "judge_error")  # infrastructure, never a score
    assert "failed this request 3 times" in r[3]["judges"][0]["error"] and "overloaded" in r[3]["judges"][0]["error"]
    assert "batch_id" not in r[3]["judges"][0]  # no batch answered it
    assert (r[1]["score"], r[4]["score"], r[6]["score"]) == (1, 0, 1)
    log = batch_log(tmp_path / "out")
    by_key = {cid: key for e in log if e["event"] == "uploaded" for cid, key in e["requests"].items()}
    assert sorted(sent.values()) == [1] * (len(sent) - 3) + [2, 2, 3]
    assert len(by_key) == len(sent) == 9
    assert sum(b["request_counts"]["failed"] for b in batches) == 3 + 2


def test_expired_batch_sends_its_unfinished_requests_again(tmp_path: Path, league: Path) -> None:
    items = write_items(tmp_path / "items.jsonl", ITEMS)
    script = BatchScript(validating_polls=2, in_progress_polls=3, expire=lambda n: 2 if n == 0 else None)
    with ScriptedOpenAI(by_content(verdicts)) as live_srv:
        rose("run", str(items), "--db-root", str(league), "--out", str(tmp_path / "live"),
              *judge_args(live_srv, tmp_path / "a", "--policy", "paper"), code=3)  # fmt: skip
    with ScriptedOpenAI(by_content(verdicts), batch=script) as srv:
        run_batch(items, league, tmp_path / "out", srv, tmp_path / "b")
        batches = srv.batch.batches
        sent = srv.batch.submitted
    assert batches[0]["status"] == "expired"
    assert batches[0]["request_counts"] == {"total": 6, "completed": 2, "failed": 4}
    assert all(b["status"] == "completed" for b in batches[1:])
    assert sorted(sent.values()) == [1] * (len(sent) - 4) + [2] * 4  # the 4 unfinished, sent once more
    live, batched = records(tmp_path / "live"), records(tmp_path / "out")
    assert {k: outcome(r) for k, r in batched.items()} == {k: outcome(r) for k, r in live.items()}
    collected = [e for e in batch_log(tmp_path / "out") if e["event"] == "collected"]
    assert collected[0]["status"] == "expired" and len(collected[0]["ok"]) == 2
    assert all("batch was expired" in why for why in collected[0]["failed"].values())


def test_batches_are_split_at_the_request_limit(tmp_path: Path, league: Path) -> None:
    items = write_items(tmp_path / "items.jsonl", ITEMS)
    with ScriptedOpenAI(by_content(verdicts)) as srv:
        run_batch(items, league, tmp_path / "out", srv, tmp_path, "--batch-max-requests", "4")
        sizes = [b["request_counts"]["total"] for b in srv.batch.batches]
    assert sizes == [4, 2, 3]  # round 1: 6 requests in two batches; round 2: 3
    r = records(tmp_path / "out")
    assert [r[k]["score"] for k in sorted(r)] == [1, 1, 0, 0, 0, 1, None]
    assert (r[5]["decided_by"], r[7]["unscored_reason"]) == ("execution", "judge_invalid")


def test_batch_needs_a_judge_and_the_cache(tmp_path: Path, league: Path) -> None:
    items = write_items(tmp_path / "items.jsonl", ITEMS)
    base = ["run", str(items), "--db-root", str(league), "--out", str(tmp_path / "out"), "--batch"]
    result = CliRunner().invoke(main, base)
    assert result.exit_code == 2 and "--batch configures the judges: give --judge-model too" in result.output
    with ScriptedOpenAI(by_content(verdicts)) as srv:
        result = CliRunner().invoke(main, [*base, *judge_args(srv, tmp_path), "--no-cache"])
        assert srv.batch.batches == []
    assert result.exit_code == 2 and "drop --no-cache" in result.output
    with ScriptedOpenAI(by_content(verdicts)) as srv:  # votes ask several replies per stage: live only
        result = CliRunner().invoke(main, [*base, *judge_args(srv, tmp_path), "--samples", "3"])
        assert srv.batch.batches == [] and srv.requests == []
    assert result.exit_code == 2 and "drop --samples" in result.output


def submitted_ids(out: Path) -> list[str]:
    try:
        return [e["batch"] for e in batch_log(out) if e["event"] == "submitted"]
    except (FileNotFoundError, ValueError):
        return []


@pytest.mark.slow
@pytest.mark.parametrize("lost", [False, True], ids=["batch-recorded", "killed-before-recording-the-batch"])
def test_kill_9_while_polling_then_resume_sends_nothing_twice(tmp_path: Path, league: Path, lost: bool) -> None:
    """kill -9 while the first batch is in progress; --resume polls that batch, sends round 2, and no request
    reaches the server twice. ``lost``: the kill came between creating the batch and recording its id (the
    line is removed here), so the resumed run must find the batch among the provider's."""
    items = write_items(tmp_path / "items.jsonl", ITEMS)
    out = tmp_path / "out"
    hold = threading.Event()
    with ScriptedOpenAI(by_content(verdicts), batch=BatchScript(hold=hold)) as srv:
        args = [*rose_command(), "run", str(items), "--db-root", str(league), "--out", str(out), "--workers", "2"]
        args += batch_args(srv, tmp_path)
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
        try:
            deadline = time.monotonic() + HANG_GUARD_S
            while not submitted_ids(out) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(HANG_GUARD_S)
        assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
        (first,) = submitted_ids(out)
        assert [b["id"] for b in srv.batch.batches] == [first]
        assert srv.batch.batches[0]["status"] in ("validating", "in_progress")  # held: not done at the kill
        if lost:
            kept = [line for line in (out / "batches.jsonl").read_text().splitlines() if '"submitted"' not in line]
            (out / "batches.jsonl").write_text("".join(line + "\n" for line in kept))
        hold.set()
        resumed = subprocess.run([*args, "--resume"], capture_output=True, text=True, env=ENV, timeout=HANG_GUARD_S)
        assert resumed.returncode == 3, resumed.stderr[-3000:]  # item 7's replies are never valid
        assert "1 judge_invalid" in resumed.stderr
        sent = srv.batch.submitted
        batches = srv.batch.batches
        assert srv.calls == 0
    assert len(sent) == 9 and set(sent.values()) == {1}, "a request was sent twice"
    assert len(batches) == 2 and batches[0]["id"] == first
    assert submitted_ids(out) == [b["id"] for b in batches]
    r = records(out)
    assert sorted(r) == [it["id"] for it in ITEMS]  # every item once
    assert [r[k]["score"] for k in sorted(r)] == [1, 1, 0, 0, 0, 1, None]
    round1 = [c for k in (1, 3, 4) for c in r[k]["judges"]]
    assert {c["batch_id"] for c in round1} == {first} and not any(c["cached"] for c in round1)
    summary = json.loads((out / "items" / "summary.json").read_text())
    assert summary["n"] == len(ITEMS) and summary["llm"]["calls"] == 9
    assert summary["llm"]["cost_usd"] == pytest.approx(
        sum(c["cost_usd"] for x in r.values() for c in x["judges"]), abs=1e-6
    )


def test_budget_reserves_each_round_before_it_is_sent(tmp_path: Path, league: Path) -> None:
    """A budget that holds the worst case of a few requests only: each round sends what fits, the rest waits
    for the next round (once the replies settle at their real, far smaller cost), and every item is judged."""
    items = write_items(tmp_path / "items.jsonl", ITEMS)
    with ScriptedOpenAI(by_content(verdicts)) as srv:
        run_batch(items, league, tmp_path / "out", srv, tmp_path, "--judge-max-tokens", "4000", "--budget", "0.005")
        batches = srv.batch.batches
    # one call's worst case: 4000 completion tokens at 0.3 USD/Mtok (half of gpt-4o-mini's 0.6) plus its prompt
    assert all(b["request_counts"]["total"] * 4000 * 0.3e-6 <= 0.005 for b in batches)
    assert len(batches) > 2 and sum(b["request_counts"]["total"] for b in batches) == 9
    r = records(tmp_path / "out")
    assert [r[k]["score"] for k in sorted(r)] == [1, 1, 0, 0, 0, 1, None]
    assert sum(x["cost_usd"] for x in r.values()) <= 0.005


def test_budget_spent_leaves_items_unscored_without_sending_them(tmp_path: Path, league: Path) -> None:
    items = write_items(tmp_path / "items.jsonl", ITEMS)
    with ScriptedOpenAI(by_content(verdicts)) as srv:
        run_batch(items, league, tmp_path / "out", srv, tmp_path, "--budget", "0.0001")  # below any call's worst
        assert srv.batch.batches == [] and srv.calls == 0
    r = records(tmp_path / "out")
    assert {r[k]["unscored_reason"] for k in (1, 2, 3, 4, 6, 7)} == {"budget_exhausted"}
    assert r[5]["score"] == 0 and all(x["cost_usd"] == 0 for x in r.values())


def test_an_unreachable_batch_api_stops_the_run_and_keeps_the_batches(tmp_path: Path) -> None:
    import asyncio

    from rose_sql.config import JudgeConfig
    from rose_sql.errors import EndpointError
    from rose_sql.judges.batch import BatchLLM, Log

    with ScriptedOpenAI() as srv:
        dead = srv.base_url  # nothing listens here once it is stopped
    log = Log(tmp_path / "batches.jsonl")
    log.append({"event": "uploaded", "file": "file-1", "params": {}, "requests": {"rose-x": "k"}})
    log.append({"event": "submitted", "batch": "batch_1", "file": "file-1"})
    cfg = JudgeConfig(model="gpt-4o-mini", base_url=dead, cache_dir=tmp_path / "cache", max_retries=0, timeout_s=5)

    async def poll() -> None:
        llm = BatchLLM(cfg, log)
        try:
            await llm.collect(lambda _text: None)
        finally:
            await llm.aclose()

    with pytest.raises(EndpointError, match="while polling batch batch_1"):
        asyncio.run(poll())
    assert Log(tmp_path / "batches.jsonl").open() == ["batch_1"]  # still open: --resume polls it


def test_batches_are_split_at_the_byte_limit(tmp_path: Path, league: Path) -> None:
    import openai

    from rose_sql.config import Config, JudgeConfig
    from rose_sql.items.load import load_items
    from rose_sql.judges.batch import BatchOptions
    from rose_sql.run.batch import BatchBackend
    from rose_sql.run.runner import plan, run

    items = write_items(tmp_path / "items.jsonl", ITEMS)
    limit = 16_000
    with ScriptedOpenAI(by_content(verdicts)) as srv:
        judge = JudgeConfig(model="gpt-4o-mini", base_url=srv.base_url, cache_dir=tmp_path / "cache", policy="paper")
        config = Config(evidence=True, workers=1).with_(judge=judge)
        systems = plan([load_items(items)], tmp_path / "out", db_root=Source.folder(league), config=config)
        backend = BatchBackend(config, tmp_path / "out", BatchOptions(max_bytes=limit, poll_s=0.01))
        run(systems, Source.folder(league), config, backend=backend)
        client = openai.OpenAI(base_url=srv.base_url, api_key="test")
        sizes = [client.files.retrieve(b["input_file_id"]).bytes for b in srv.batch.batches]
        counts = [b["request_counts"]["total"] for b in srv.batch.batches]
    assert max(sizes) <= limit, sizes
    assert sum(counts) == 9 and len(counts) >= 4, counts  # each round in two files or more
    r = records(tmp_path / "out")
    assert [r[k]["score"] for k in sorted(r)] == [1, 1, 0, 0, 0, 1, None]


def test_the_scripted_batch_api_through_the_sdk() -> None:
    """The fake itself: status moves only when polled, a held batch waits, a cancelled one answers nothing."""
    import openai

    def lines(*cids: str) -> bytes:
        body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
        rows = [{"custom_id": c, "method": "POST", "url": "/v1/chat/completions", "body": body} for c in cids]
        return "".join(json.dumps(r) + "\n" for r in rows).encode()

    hold = threading.Event()
    with ScriptedOpenAI(by_content(verdicts), batch=BatchScript(hold=hold)) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=0)
        held = client.batches.create(
            input_file_id=client.files.create(file=("a.jsonl", lines("a", "b")), purpose="batch").id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
        )
        assert [client.batches.retrieve(held.id).status for _ in range(4)] == [
            "validating", "in_progress", "in_progress", "in_progress",
        ]  # fmt: skip
        hold.set()
        done = client.batches.retrieve(held.id)
        assert done.status == "completed" and done.request_counts is not None and done.request_counts.completed == 2
        assert done.output_file_id is not None and done.error_file_id is None
        out = [json.loads(x) for x in client.files.content(done.output_file_id).content.splitlines()]
        assert [(x["custom_id"], x["response"]["status_code"]) for x in out] == [("a", 200), ("b", 200)]
        assert "answers_question" in out[0]["response"]["body"]["choices"][0]["message"]["content"]

        cancelled = client.batches.create(
            input_file_id=client.files.create(file=("c.jsonl", lines("c")), purpose="batch").id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
        )
        assert client.batches.cancel(cancelled.id).status == "cancelling"
        gone = client.batches.retrieve(cancelled.id)
        assert gone.status == "cancelled" and gone.output_file_id is None and gone.error_file_id is not None
        (err,) = [json.loads(x) for x in client.files.content(gone.error_file_id).content.splitlines()]
        assert err["custom_id"] == "c" and err["error"]["code"] == "batch_cancelled"
        assert [b.id for b in client.batches.list()] == [cancelled.id, held.id]  # newest first
        assert srv.batch.submitted == {"a": 1, "b": 1, "c": 1} and srv.calls == 0
