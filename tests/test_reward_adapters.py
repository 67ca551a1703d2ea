"""The verl and TRL adapters fail loudly when misconfigured: what makes every item unusable raises
at the first call, naming it; a problem of one item stays that item's, with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import build_db

from rose_sql.errors import UsageError
from rose_sql.reward import RewardConfig, compute_score, compute_score_batch, trl_reward

GOLD = "SELECT count(*) FROM t"
CFG = RewardConfig(processes=1)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("adapters")
    build_db(folder / "t" / "t.sqlite", "CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2);")
    return folder


@pytest.fixture(autouse=True)
def no_env_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROSE_DB_ROOT", raising=False)


# --------------------------------------------------------------------------- verl


def test_verl_without_a_db_root_raises_at_the_first_call() -> None:
    with pytest.raises(UsageError, match=r"item 0: db_id 't' needs a db_root.*reward_kwargs\.db_root"):
        compute_score("spider", GOLD, GOLD, {"db_id": "t"}, config=CFG)


def test_verl_with_a_db_root_that_does_not_exist_raises(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = str(root / "databse")
    with pytest.raises(UsageError, match=r"databse.*reward_kwargs\.db_root.*not a folder"):
        compute_score("spider", GOLD, GOLD, {"db_id": "t"}, db_root=missing, config=CFG)
    monkeypatch.setenv("ROSE_DB_ROOT", missing)
    with pytest.raises(UsageError, match=r"\$ROSE_DB_ROOT"):
        compute_score_batch(["spider"], [GOLD], [GOLD], [{"db_id": "t"}], config=CFG)


def test_verl_results_say_why_an_item_is_unscored_or_failed(root: Path) -> None:
    results = compute_score_batch(
        ["spider"] * 4,
        [GOLD, GOLD, "```sql\nDELETE FROM t\n```", GOLD],
        [GOLD, json.dumps({"gold_sql": GOLD}), GOLD, GOLD],
        [{"db_id": "t"}, {}, {"db_id": "t"}, {"db_id": "nope"}],
        db_root=str(root),
        config=CFG,
    )
    assert [r["status"] for r in results] == ["match", "invalid", "error", "invalid"]
    assert [set(r) for r in results] == [set(results[0])] * 4  # verl stacks every key per item
    assert results[0]["error"] == ""
    assert results[1]["error"].startswith("invalid, unscored") and "db_id" in results[1]["error"]
    assert results[2]["error"].startswith("error: ") and "not a SELECT" in results[2]["error"]
    assert "database not found" in results[3]["error"]
    assert results[1]["scored"] is False and results[1]["score"] == CFG.unscored


def test_verl_takes_any_integer_step(root: Path) -> None:
    for step in (0, 10**4000, -5):
        r = compute_score("spider", GOLD, GOLD, {"db_id": "t", "step": step}, db_root=str(root), config=CFG)
        assert r["status"] == "match" and r["score"] == pytest.approx(1.0)


# --------------------------------------------------------------------------- TRL


def test_trl_with_a_misspelled_root_raises_when_made(root: Path) -> None:
    with pytest.raises(UsageError, match=r"databse.*trl_reward\(db_root\).*not a folder"):
        trl_reward(root / "databse", CFG)


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({}, r"needs a gold_sql column .* or a label column; it has \[\]"),
        ({"gold": [GOLD], "db_id": ["t"]}, r"needs a gold_sql column.*it has \['db_id', 'gold'\]"),
        ({"gold_sql": [GOLD]}, r"gold_sql but no db_id or db_path column"),
        ({"gold_sql": [GOLD, GOLD], "db_id": ["t"]}, r"'db_id' must hold one value per completion \(2\)"),
    ],
    ids=["no columns", "misspelled gold column", "no database column", "short column"],
)
def test_trl_without_usable_columns_raises_naming_them(root: Path, columns: dict[str, list[str]], message: str) -> None:
    reward = trl_reward(root, CFG)
    n = len(columns.get("gold_sql", [GOLD]))
    with pytest.raises(UsageError, match=message):
        reward(prompts=["q"] * n, completions=[GOLD] * n, **columns)


def test_trl_without_a_root_for_db_ids_raises() -> None:
    reward = trl_reward(None, CFG)
    with pytest.raises(UsageError, match=r"completion 0: db_id 't' needs a db_root.*trl_reward\(db_root=DIR\)"):
        reward(completions=[GOLD], gold_sql=[GOLD], db_id=["t"])


def test_trl_problems_of_one_item_stay_that_items(root: Path) -> None:
    reward = trl_reward(root, CFG)
    out = reward(completions=[GOLD, GOLD, GOLD], gold_sql=[GOLD, "", GOLD], db_id=["t", "t", "nope"])
    assert out[0] == pytest.approx(1.0) and out[1] is None and out[2] is None
    labels = reward(completions=[GOLD, GOLD], label=[f"{GOLD}\tt", "no tab, no json"])
    assert labels[0] == pytest.approx(1.0) and labels[1] is None
