"""Ray is an optional extra: without it, ``--ray`` and the reward pool say how to get it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import rose

from rose_sql.errors import UsageError


@pytest.fixture
def items(make_db: Any, tmp_path: Path) -> tuple[Path, Path]:
    db_root = make_db("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);", db_id="t").parent.parent
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps({"id": 0, "db_id": "t", "gold_sql": "SELECT x FROM t", "pred_sql": "SELECT 1"}) + "\n")
    return path, db_root


def test_without_ray_the_options_say_how_to_get_it(
    items: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails, as where it is not installed
    path, db_root = items
    res = rose("run", path, "--db-root", db_root, "--out", tmp_path / "out", "--ray")
    assert res.exit_code == 2 and "--ray needs Ray, which is not installed: pip install 'rose-sql[ray]'" in res.output
    assert not (tmp_path / "out/items/records.jsonl").exists()  # refused before anything ran
    from rose_sql.distributed.pool import RewardPool

    with pytest.raises(UsageError, match=r"RewardPool needs Ray.*rose-sql\[ray\]"):
        RewardPool()
    help_text = "".join(rose("run", "--help").output.split())  # without the wrapping
    assert "--ray[ADDRESS]" in help_text and "pipinstall'rose-sql[ray]'" in help_text and "--shardI/N" in help_text


def test_an_address_that_is_a_file_name_is_explained(items: tuple[Path, Path], tmp_path: Path) -> None:
    path, db_root = items
    res = rose("run", "--ray", path, "--db-root", db_root, "--out", tmp_path / "out")
    assert res.exit_code == 2 and "put --ray after the prediction files" in res.output
