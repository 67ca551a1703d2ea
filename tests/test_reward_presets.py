"""The reward presets against the values the published rewards computed on the same completions
(``tests/data/reward_presets_expected.json``, written by ``bench/reward_presets_expected.py`` from the
published code), through the scorer's worker processes, the verl and TRL adapters, and the config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rose_sql import Database
from rose_sql.config import RewardConfig
from rose_sql.reward import RewardItem, RewardScorer, compute_score_batch, trl_reward
from rose_sql.reward.presets import qatch_cp_cr_tc, read, suite_equal

DATA = Path(__file__).parent / "data" / "reward_presets_expected.json"
PRESETS = ("sql-r1", "arctic", "skyrl-sql", "verl-text2sql", "think2sql")


def _items() -> list[dict[str, object]]:
    items: list[dict[str, object]] = json.loads(DATA.read_text())["items"]
    return items


@pytest.fixture(scope="module")
def scored(shared: Path) -> dict[str, list[float | None]]:
    """Every preset's rewards on the expected file's completions, one scorer (two worker processes) each."""
    items = _items()
    batch = [RewardItem(str(it["completion"]), str(it["gold"]), Database.file(shared / str(it["db"]))) for it in items]
    out = {}
    for preset in PRESETS:
        with RewardScorer(RewardConfig(preset=preset, processes=2)) as scorer:  # type: ignore[arg-type]
            out[preset] = [r.total for r in scorer.score_batch(batch)]
    return out


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_equals_the_published_reward(preset: str, scored: dict[str, list[float | None]]) -> None:
    items = _items()
    wrong = [
        (i, it["completion"], it["expected"][preset], got)  # type: ignore[index]
        for i, (it, got) in enumerate(zip(items, scored[preset], strict=True))
        if got is None or abs(got - it["expected"][preset]) > 1e-9  # type: ignore[index, operator]
    ]
    assert not wrong, f"{len(wrong)} of {len(items)} differ, first: {wrong[:3]}"


def test_the_expected_values_cover_every_outcome() -> None:
    """The published values reach every value each recipe gives (so the test above checks each branch)."""
    values = {p: {it["expected"][p] for it in _items()} for p in PRESETS}  # type: ignore[index]
    assert {-1.0, 0.0} < values["sql-r1"] and any(v > 6 for v in values["sql-r1"])
    assert values["arctic"] == {0.0, 0.1, 1.0}
    assert values["skyrl-sql"] == values["verl-text2sql"] == {-1.0, 0.0, 1.0}
    assert any(0 < v < 1 for v in values["think2sql"]) and {0.0, 1.0} <= values["think2sql"]


def test_adapters_and_config_select_a_preset(shared: Path) -> None:
    root = str(shared / "spider" / "database")
    gold = "SELECT count(*) FROM singer"
    done = f"<think>\ncount\n</think>\n<solution>\n{gold}\n</solution>"
    out = compute_score_batch(
        ["spider"] * 3,
        [done, "SELECT count(*) FROM singer", "<think>x</think><solution>SELECT 1</solution>"],
        [gold] * 3,
        [{"db_id": "concert_singer"}] * 3,
        db_root=root,
        preset="skyrl-sql",
        processes=1,
    )
    assert [r["score"] for r in out] == [1.0, -1.0, 0.0]
    assert [r["status"] for r in out] == ["match", "error", "wrong"]
    reward = trl_reward(root, RewardConfig(preset="think2sql", processes=1))
    got = reward(
        completions=[f"<answer>{gold}</answer>", "SELECT count(*) FROM stadium"],
        gold_sql=[gold] * 2,
        db_id=["concert_singer"] * 2,
    )
    assert got[0] == 1.0 and got[1] is not None and 0 <= got[1] < 1
    with pytest.raises(ValueError, match="unknown reward preset 'sql_r1'"):
        RewardConfig(preset="sql_r1")  # type: ignore[arg-type]


def test_a_failing_gold_is_unscored_under_every_preset(tmp_path: Path) -> None:
    """Where a recipe gives a number to a gold that fails (SQL-R1 a match, through its ``==`` typo; the
    others 0), a preset leaves the item unscored."""
    import sqlite3

    db = tmp_path / "t.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (a)")
    text = "<think>\nx\n</think>\n<answer>\n```sql\nSELECT a FROM t\n```\n</answer>"
    for preset in PRESETS:
        with RewardScorer(RewardConfig(preset=preset, processes=1)) as scorer:  # type: ignore[arg-type]
            r = scorer.score(RewardItem(text, "SELECT nope FROM t", Database.file(db)))
        assert (r.total, r.status) == (None, "gold_error"), preset


def test_the_pieces() -> None:
    assert suite_equal([(1, "a"), (2, "b")], [("a", 1), ("b", 2)], ordered=True)  # columns in another order
    assert not suite_equal([(1, "a"), (2, "b")], [("b", 2), ("a", 1)], ordered=True)  # rows too
    assert suite_equal([(1,), (1,), (2,)], [(2,), (1,), (1,)], ordered=False)
    assert not suite_equal([(1,), (1,), (2,)], [(2,), (2,), (1,)], ordered=False)
    assert qatch_cp_cr_tc([(1, "a")], [(1, "a"), (2, "b")]) == round((1 + 0.5 + 0.5) / 3, 3)
    assert qatch_cp_cr_tc([], []) == 1.0 and qatch_cp_cr_tc([(1,)], []) == 0.0
    r = read("sql-r1", "Assistant: <think>a</think><answer>```sql\nSELECT\n  1\n```</answer>")
    assert r.formatted and r.sql == "SELECT 1"
    assert not read("sql-r1", "<think>a</think><answer>SELECT 1</answer>").formatted  # no sql block


def test_the_server_serves_a_preset(shared: Path) -> None:
    import urllib.request

    from rose_sql.config import ServeConfig
    from rose_sql.engines import Source
    from rose_sql.reward.server import serve_in_thread

    reward = RewardConfig(preset="verl-text2sql", processes=1)
    srv, _ = serve_in_thread(ServeConfig(Source.folder(shared / "spider" / "database"), port=0, reward=reward))
    try:
        label = "SELECT count(*) FROM singer\tconcert_singer"
        body = {"query": ["<answer>SELECT count(*) FROM singer</answer>", "SELECT 1"], "labels": [label] * 2}
        request = urllib.request.Request(srv.url, json.dumps(body).encode(), {"Content-Type": "application/json"})
        answer = json.loads(urllib.request.urlopen(request, timeout=60).read())
    finally:
        srv.close()
    assert answer["rewards"] == [1.0, -1.0] and answer["status"] == ["match", "error"]
