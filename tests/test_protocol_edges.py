"""Small protocol edges of the third hardening pass (issue 22, finding 7): each answered as the README says.

A judge's reply without a choice is ``judge_error`` on the live and the Batch API path alike; the reward
server answers a field of the wrong type with 400 and a message; ``rose merge``'s hint for a missing shard
is a command that works when run as printed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_judges import SCHEMA, item, judge_args, records, rose, verdicts, write_items

from rose_sql.testing import ScriptedOpenAI
from rose_sql.testing.wire import Reply, user_text

NO_CHOICE = {
    "empty choices": json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "choices": []}),
    "no choices": json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "usage": None}),
}


@pytest.fixture
def league(make_db: Callable[..., Path]) -> Path:
    return make_db(SCHEMA, db_id="league").parent.parent


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
    fault, retried with --retry-invalid) where the README says replies outside the protocol are judge_error."""
    rows = [item(1, "SELECT name FROM player WHERE age > 25"), item(2, "SELECT name, age FROM player WHERE age > 25")]
    items = write_items(tmp_path / "items.jsonl", rows)
    extra = ["--policy", "paper", "--max-retries", "0"] + (["--batch", "--batch-poll", "0.01"] if batch else [])
    with ScriptedOpenAI(_no_choice_for_item_2(NO_CHOICE[fault])) as srv:
        args = ["run", str(items), "--db-root", str(league), "--out", str(tmp_path / "out")]
        result = rose([*args, *judge_args(srv, tmp_path / "cache", *extra)], exit_code=3)
    assert "1 judge_error" in result.output, result.output
    r = records(tmp_path / "out")
    assert (r[1]["score"], r[1]["unscored_reason"]) == (1, None)  # the other item is judged as usual
    assert (r[2]["score"], r[2]["unscored_reason"]) == (None, "judge_error")
    (call,) = r[2]["judges"]  # asked once (its failure, not a re-ask for an invalid verdict)
    assert call["reply"] is None and "no choices[0]" in call["error"], call
