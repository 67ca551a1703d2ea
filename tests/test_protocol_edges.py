"""Small protocol edges of the third hardening pass (issue 22, finding 7): each answered as the docs say.

A judge's reply without a choice is ``judge_error`` on the live and the Batch API path alike (on the
scripted server's wire: its Batch API is served there only); the reward
server answers a field of the wrong type with 400 and a message; ``rose merge``'s hint for a missing shard
is a command that works when run as printed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import rose, write_items
from test_judges import item, judge_args, records, verdicts

from rose_sql.testing import ScriptedOpenAI
from rose_sql.testing.bodies import Reply, user_text

NO_CHOICE = {
    "empty choices": json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "choices": []}),
    "no choices": json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "usage": None}),
}


def _no_choice_for_item_2(body: str) -> Callable[[dict[str, Any], int], Reply]:
    def respond(request: dict[str, Any], index: int) -> Reply:
        text = user_text(request)
        return Reply(body=body) if "Question 2:" in text else verdicts(text)

    return respond


@pytest.mark.parametrize("fault", list(NO_CHOICE))
@pytest.mark.parametrize("batch", [False, True], ids=["live", "batch"])
def test_a_reply_without_a_choice_is_judge_error_never_an_invalid_verdict(
    tmp_path: Path, league: Path, fault: str, batch: bool
) -> None:
    """A 200 with ``"choices": []`` was read as an empty reply: re-asked, then judge_invalid (a model's
    fault, retried with --retry-invalid) where docs/judges.md says replies outside the protocol are judge_error."""
    rows = [item(1, "SELECT name FROM player WHERE age > 25"), item(2, "SELECT name, age FROM player WHERE age > 25")]
    items = write_items(tmp_path / "items.jsonl", rows)
    extra = ["--policy", "paper", "--max-retries", "0"] + (["--batch", "--batch-poll", "0.01"] if batch else [])
    with ScriptedOpenAI(_no_choice_for_item_2(NO_CHOICE[fault])) as srv:  # the Batch API too: the wire
        args = ["run", str(items), "--db-root", str(league), "--out", str(tmp_path / "out")]
        result = rose(*args, *judge_args(srv, tmp_path / "cache", *extra), code=3)
    assert "1 judge_error" in result.output, result.output
    r = records(tmp_path / "out")
    assert (r[1]["score"], r[1]["unscored_reason"]) == (1, None)  # the other item is judged as usual
    assert (r[2]["score"], r[2]["unscored_reason"]) == (None, "judge_error")
    (call,) = r[2]["judges"]  # asked once (its failure, not a re-ask for an invalid verdict)
    assert call["reply"] is None and "no choices[0]" in call["error"], call


# --------------------------------------------------------------------------- 7b. the reward server's field types

WRONG_TYPES = {
    "labels a string": ({"query": ["SELECT 1"], "labels": "x"}, '"labels" must be a list', "a string"),
    "labels an object": ({"query": ["SELECT 1"], "labels": {"gold_sql": "x"}}, '"labels" must be a list', "an object"),
    "query a string": ({"query": "SELECT 1", "labels": ["SELECT 1\tmusic"]}, '"query" must be a list', "a string"),
    "queries a string": ({"queries": "SELECT 1", "labels": ["x"]}, '"query" must be a list', "a string"),
    "no query": ({"labels": []}, '"query" must be a list', "missing"),
    "prompts a string": ({"query": ["SELECT 1"], "labels": ["x"], "prompts": "p"}, '"prompts" must be a list', ""),
    "prompt a number": ({"query": ["SELECT 1"], "labels": ["x"], "prompts": [5]}, "prompts[0] is a number", ""),
    "prompt null": ({"query": ["SELECT 1"], "labels": ["x"], "prompts": [None]}, '"prompts" must hold text', ""),
}  # fmt: skip


@pytest.fixture(scope="module")
def reward_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from conftest import build_db
    from test_reward_server import SCRIPT as MUSIC

    from rose_sql.config import RewardConfig, ServeConfig
    from rose_sql.engines import Source
    from rose_sql.reward.server import serve_in_thread

    root = tmp_path_factory.mktemp("dbs")
    build_db(root / "music" / "music.sqlite", MUSIC)
    srv, _ = serve_in_thread(ServeConfig(Source.folder(root), port=0, reward=RewardConfig(processes=1)))
    yield srv
    srv.close()


@pytest.mark.parametrize("case", list(WRONG_TYPES))
def test_a_field_of_the_wrong_type_is_a_400_naming_it(reward_server: Any, case: str) -> None:
    """``"labels": "x"`` was taken for one label and answered 200 with status invalid; a lone string query
    likewise for a list of one. docs/rewards.md says wrong types get 400: every field's type is checked."""
    from test_reward_server import label, post

    body, says, kind = WRONG_TYPES[case]
    status, answer = post(reward_server.url, body)
    assert status == 400 and answer["rewards"] == [] and says in answer["error"], (status, answer)
    assert kind in answer["error"]
    good = post(reward_server.url, {"query": ["SELECT 1"], "labels": [label()], "prompts": [""]})
    assert good[0] == 200 and good[1]["status"] == ["wrong"], good  # still serving; a right-typed request scores


# --------------------------------------------------------------------------- 7c. rose merge's hint, run as printed


def test_the_hint_for_a_missing_shard_runs_as_printed_and_the_merge_then_completes(
    tmp_path: Path, league: Path
) -> None:
    """The hint named the existing shard's folder as --out: run as printed, it was refused (that folder
    holds shard 0's run). It now names a folder of its own, and merging both folders completes the run."""
    import os
    import re
    import shlex
    import subprocess
    import sys

    rows = [item(i, f"SELECT name FROM player WHERE age > {20 + i}") for i in range(12)]
    write_items(tmp_path / "items.jsonl", rows)
    (tmp_path / "runs").mkdir()

    def rose_in(cwd: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
        if argv[0] == "rose":  # the entry point as the hint prints it
            argv = [sys.executable, "-m", "rose_sql", *argv[1:]]
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, env=dict(os.environ))

    db = os.path.relpath(league, tmp_path)
    shard0 = ["rose", "run", "items.jsonl", "--db-root", db, "--out", "runs/s0", "--shard", "0/2"]
    assert rose_in(tmp_path, shard0).returncode == 0
    refused = rose_in(tmp_path, ["rose", "merge", "runs/s0", "--out", "runs/all"])
    assert refused.returncode == 2, refused.stderr
    hint = re.search(r"shard 1/2 is missing; make it with: (.+)", refused.stderr)
    assert hint is not None, refused.stderr
    made = rose_in(tmp_path, shlex.split(hint.group(1)))
    assert made.returncode == 0, (hint.group(1), made.stderr)  # was 2: "runs/s0 ... another shard"
    out = shlex.split(hint.group(1))[shlex.split(hint.group(1)).index("--out") + 1]
    assert out != "runs/s0" and (tmp_path / out / "items" / "manifest.json").is_file()
    merged = rose_in(tmp_path, ["rose", "merge", "runs/s0", out, "--out", "runs/all"])
    assert merged.returncode == 0 and "(complete)" in merged.stdout, merged.stderr
    assert len((tmp_path / "runs/all/items/records.jsonl").read_text().splitlines()) == len(rows)
