"""Sharded runs for any scheduler: ``rose run --shard I/N`` and ``rose merge`` (no Ray needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import rose, write_items

from rose_sql.errors import UsageError
from rose_sql.provenance import read_manifest
from rose_sql.record import Record, comparable, read_records
from rose_sql.run.shard import Shard, shard_of
from rose_sql.summary import Summary

PREDS = [
    "SELECT name FROM player WHERE age > 25",
    "SELECT name FROM player WHERE age >= 25",
    "SELECT name, age FROM player WHERE age > 25",
    "SELECT count(*) FROM player",
    "SELECT nme FROM player",
    "SELECT name FROM team",
]


@pytest.fixture
def league_run(league: Path, tmp_path: Path) -> tuple[Path, Path]:
    """Forty items on the league database: (the items file, the database folder)."""
    items = tmp_path / "items.jsonl"
    rows = [
        {"id": i, "db_id": "league", "question": f"q{i}", "gold_sql": "SELECT name FROM player WHERE age > 25",
         "pred_sql": PREDS[i % len(PREDS)]}
        for i in range(40)
    ]  # fmt: skip
    return write_items(items, rows), league


def _records(folder: Path) -> dict[str, Record]:
    return {r.id_key: r for r in read_records(folder / "records.jsonl")}


def _same(a: dict[str, Record], b: dict[str, Record]) -> bool:
    return a.keys() == b.keys() and all(comparable(a[k]) == comparable(b[k]) for k in a)


def _shards(items: Path, db_root: Path, out: Path, n: int, *extra: Any, which: range | None = None) -> list[Path]:
    folders = []
    for i in which if which is not None else range(n):
        res = rose("run", items, "--db-root", db_root, "--out", out / f"shard-{i}", "--shard", f"{i}/{n}", *extra)
        assert res.exit_code == 0, res.output
        folders.append(out / f"shard-{i}")
    return folders


# --------------------------------------------------------------------------- the split


def test_the_split_is_pinned_and_the_same_in_every_interpreter() -> None:
    ids: list[int | str] = [0, 1, 2, 42, 1033, "137@487", "é", "Q-9"]
    assert [shard_of(i, 4) for i in ids] == [0, 1, 2, 1, 3, 1, 0, 0]
    assert [shard_of(i, 7) for i in ids] == [3, 2, 3, 2, 4, 2, 6, 4]
    code = f"from rose_sql.run.shard import shard_of; print([shard_of(i, 7) for i in {ids!r}])"
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "123"}
    )
    assert other.stdout.strip() == "[3, 2, 3, 2, 4, 2, 6, 4]"


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_every_item_is_in_exactly_one_shard(n: int) -> None:
    ids = [*range(500), *(f"{i}@{i + 7}" for i in range(100))]
    held = [[i for i in ids if Shard(k, n).holds(i)] for k in range(n)]
    assert sorted(str(i) for h in held for i in h) == sorted(map(str, ids))
    assert n == 1 or min(len(h) for h in held) > len(ids) / n / 2  # a hash spreads them


@pytest.mark.parametrize("text", ["4/4", "-1/4", "a/b", "1/0", "2"])
def test_a_bad_shard_is_refused_by_name(text: str, league_run: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--shard"):
        Shard.parse(text)
    items, db_root = league_run
    res = rose("run", items, "--db-root", db_root, "--out", tmp_path / "out", "--shard", text)
    assert res.exit_code == 2 and "--shard" in res.output


def test_a_shard_records_its_share_and_resume_keeps_to_it(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    items, db_root = league_run
    (folder,) = _shards(items, db_root, tmp_path, 3, which=range(1, 2))
    manifest = read_manifest(folder / "items/manifest.json")
    assert manifest is not None and manifest.complete and manifest.shard is not None
    share = [i for i in range(40) if shard_of(i, 3) == 1]
    assert (manifest.shard.index, manifest.shard.count, manifest.shard.items, manifest.shard.total) == (
        1, 3, len(share), 40,
    )  # fmt: skip
    assert sorted(int(k) for k in _records(folder / "items")) == share
    res = rose("run", items, "--db-root", db_root, "--out", tmp_path / "shard-1", "--shard", "2/3", "--resume")
    assert res.exit_code == 2 and "the share of the input differs (shard 1/3 then, shard 2/3 now)" in res.output
    res = rose("run", items, "--db-root", db_root, "--out", tmp_path / "shard-1", "--resume")
    assert res.exit_code == 2 and "shard 1/3 then, the whole input now" in res.output


# --------------------------------------------------------------------------- merging


def test_merged_shards_are_the_local_run(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    items, db_root = league_run
    assert rose("run", items, "--db-root", db_root, "--out", tmp_path / "local").exit_code == 0
    shards = _shards(items, db_root, tmp_path, 4)
    res = rose("merge", *shards, "--out", tmp_path / "merged")
    assert res.exit_code == 0, res.output
    assert "4 shard folders merged" in res.output and "(complete)" in res.output
    merged = tmp_path / "merged/items"
    assert _same(_records(merged), _records(tmp_path / "local/items"))
    assert [r.id for r in read_records(merged / "records.jsonl")] == list(range(40))  # the input's order
    manifest = read_manifest(merged / "manifest.json")
    assert manifest is not None and manifest.complete and manifest.shard is None and manifest.merged is not None
    assert sorted(m.index for m in manifest.merged) == [0, 1, 2, 3] and sum(m.records for m in manifest.merged) == 40
    assert all(m.complete and m.command[m.command.index("--shard") + 1] == f"{m.index}/4" for m in manifest.merged)
    local = Summary.from_dict(json.loads((tmp_path / "local/items/summary.json").read_text()))
    joined = Summary.from_dict(json.loads((merged / "summary.json").read_text()))
    assert (joined.n, joined.bird_ex, joined.spider_ex, joined.unscored) == (local.n, local.bird_ex, local.spider_ex,
                                                                          local.unscored)  # fmt: skip
    view = rose("compare", tmp_path / "merged")  # every command reads it as a run
    assert view.exit_code == 0 and "complete" in view.output


def test_a_missing_shard_is_refused_then_merged_partial_and_resumed(
    league_run: tuple[Path, Path], tmp_path: Path
) -> None:
    items, db_root = league_run
    assert rose("run", items, "--db-root", db_root, "--out", tmp_path / "local").exit_code == 0
    shards = _shards(items, db_root, tmp_path, 4, which=range(3))  # shard 3/4 never ran
    res = rose("merge", *shards, "--out", tmp_path / "merged")
    missing = [i for i in range(40) if shard_of(i, 4) == 3]
    assert res.exit_code == 2, res.output
    assert f"{len(missing)} of 40 items have no record" in res.output
    assert "shard 3/4 is missing; make it" in res.output and "--shard 3/4" in res.output
    assert not (tmp_path / "merged").exists()  # nothing written
    res = rose("merge", *shards, "--out", tmp_path / "merged", "--allow-partial")
    assert res.exit_code == 0 and "(partial)" in res.output
    manifest = read_manifest(tmp_path / "merged/items/manifest.json")
    assert manifest is not None and not manifest.complete
    res = rose("run", items, "--db-root", db_root, "--out", tmp_path / "merged", "--resume")
    assert res.exit_code == 0 and f"{40 - len(missing)} items kept" in res.output
    lines = (tmp_path / "merged/items/records.jsonl").read_text().splitlines()
    assert len(lines) == 40 and _same(_records(tmp_path / "merged/items"), _records(tmp_path / "local/items"))
    manifest = read_manifest(tmp_path / "merged/items/manifest.json")
    assert manifest is not None and manifest.complete


def test_duplicated_items_are_kept_once_or_refused(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    items, db_root = league_run
    shards = _shards(items, db_root, tmp_path, 2)
    again = _shards(items, db_root, tmp_path / "again", 2, which=range(1))  # shard 0/2 run twice
    res = rose("merge", *shards, *again, "--out", tmp_path / "merged")
    assert res.exit_code == 0, res.output
    assert "recorded alike by two folders, kept once" in res.output and "shard 0/2 in" in res.output
    assert len((tmp_path / "merged/items/records.jsonl").read_text().splitlines()) == 40
    # the second run of shard 0 disagrees about one item: refused, nothing written
    path = again[0] / "items/records.jsonl"
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    first["why"] = "edited"
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    res = rose("merge", *shards, *again, "--out", tmp_path / "merged-2")
    assert res.exit_code == 2 and f"item {first['id']!r} is recorded differently" in res.output
    assert not (tmp_path / "merged-2").exists()


def test_shards_of_other_options_or_inputs_are_refused(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    items, db_root = league_run
    a = _shards(items, db_root, tmp_path / "a", 2, which=range(1))
    b = _shards(items, db_root, tmp_path / "b", 2, "--max-rows", "10", which=range(1, 2))
    res = rose("merge", *a, *b, "--out", tmp_path / "merged")
    assert res.exit_code == 2 and "other inputs or options" in res.output and "option max_rows differs" in res.output
    c = _shards(items, db_root, tmp_path / "c", 3, which=range(1, 2))
    res = rose("merge", *a, *c, "--out", tmp_path / "merged")
    assert res.exit_code == 2 and "shards of one run share their N" in res.output
    assert rose("run", items, "--db-root", db_root, "--out", tmp_path / "whole").exit_code == 0
    res = rose("merge", *a, tmp_path / "whole", "--out", tmp_path / "merged")
    assert res.exit_code == 2 and "is not a shard" in res.output
    items.write_text(items.read_text().replace("q1", "q1?"))
    d = _shards(items, db_root, tmp_path / "d", 2, which=range(1, 2))
    res = rose("merge", *a, *d, "--out", tmp_path / "merged")
    assert res.exit_code == 2 and "the prediction file differs" in res.output
    assert not (tmp_path / "merged").exists()


def test_a_record_in_the_wrong_shard_is_refused(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    items, db_root = league_run
    s0, s1 = _shards(items, db_root, tmp_path, 2)
    stray = (s1 / "items/records.jsonl").read_text().splitlines()[0]
    with (s0 / "items/records.jsonl").open("a") as f:
        f.write(stray + "\n")
    res = rose("merge", s0, s1, "--out", tmp_path / "merged")
    assert res.exit_code == 2 and "which belongs to shard 1/2" in res.output


def test_merge_never_overwrites_a_run(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    items, db_root = league_run
    shards = _shards(items, db_root, tmp_path, 2)
    assert rose("merge", *shards, "--out", tmp_path / "merged").exit_code == 0
    res = rose("merge", *shards, "--out", tmp_path / "merged")
    assert res.exit_code == 2 and "already exists" in res.output
    res = rose("merge", tmp_path / "nowhere", "--out", tmp_path / "m2")
    assert res.exit_code == 2 and "is not a folder" in res.output


def test_a_merge_whose_items_a_judge_left_unscored_exits_3(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    """As rose run would: the merged run is complete, but not every item is scored, and the status says so."""
    from rose_sql.testing import MockOpenAI, Reply

    items, db_root = league_run
    env = {"OPENAI_API_KEY": "t"}
    with MockOpenAI(lambda request, index: Reply(status=503, error="overloaded")) as srv:
        judge = ["--judge-model", "m", "--judge-base-url", srv.base_url, "--no-cache", "--max-retries", "0"]
        folders = []
        for i in range(2):
            folder = tmp_path / f"shard-{i}"
            res = rose("run", items, "--db-root", db_root, "--out", folder, "--shard", f"{i}/2", *judge, env=env)
            assert res.exit_code == 3, res.output
            folders.append(folder)
    res = rose("merge", *folders, "--out", tmp_path / "merged")
    assert res.exit_code == 3 and "judge_error" in res.output and "--resume' with --out" in res.output
    summary = Summary.from_dict(json.loads((tmp_path / "merged" / "items" / "summary.json").read_text()))
    assert summary.n == 40 and summary.unscored["judge_error"] > 0
