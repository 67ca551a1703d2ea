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


def test_an_actor_with_nothing_left_waits_for_the_batches_in_flight_and_redoes_a_dead_ones() -> None:
    """The race a SIGKILL made under load: actor 1 has finished its own work while actor 0's batch is out;
    actor 0 dies and does not come back. Actor 1 must still be there to redo the batch."""
    import asyncio

    from rose_sql.distributed.cluster import Placement, _Batch

    async def scenario() -> list[str]:
        placement = Placement([_Batch([], "a"), _Batch([], "b")], actors=2)
        done: list[str] = []
        out = await placement.next(0)  # actor 0 takes its batch, then dies
        assert out is not None and out.db_id == "a"
        own = await placement.next(1)
        assert own is not None and own.db_id == "b"
        await placement.finished()
        done.append(own.db_id)
        waiting = asyncio.create_task(placement.next(1))  # nothing queued, one batch out: actor 1 waits
        await asyncio.sleep(0)
        assert not waiting.done()
        await placement.redo(out)  # actor 0 died: its batch comes back, and actor 0 gets no more work
        again = await waiting
        assert again is out and placement.stats.redone == 1
        await placement.finished()
        done.append(again.db_id)
        assert await placement.next(1) is None and placement.left() == 0  # nothing out, nothing queued: done
        return done

    assert asyncio.run(scenario()) == ["b", "a"]


def test_a_timed_run_on_ray_hands_out_single_items_and_other_runs_batches_of_one_database() -> None:
    """The cluster's batches: one database each, at most 16 items (an idle actor steals whole batches), and
    single items when the run times them, as the local pool and the published script's pool hand them."""
    from rose_sql.config import Config
    from rose_sql.distributed.cluster import batches_by_database
    from rose_sql.items.load import Item

    queue = [("s", Item(i, "ab"[i % 2], f"SELECT {i}", f"SELECT {i}")) for i in range(40)]
    untimed = batches_by_database(queue, Config())
    assert [(b.db_id, len(b.entries)) for b in untimed] == [("a", 16), ("a", 4), ("b", 16), ("b", 4)]
    timed = batches_by_database(queue, Config(efficiency="time"))
    assert len(timed) == 40 and {len(b.entries) for b in timed} == {1}
    assert sorted(e[1].id for b in timed for e in b.entries) == list(range(40))
