"""``rose run --limit N`` and ``--ids FILE``: a subset of the items, recorded, never passed off as a full run."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rose_sql.cli import main
from rose_sql.demo import DemoPaths, load_demo_items
from rose_sql.demo.build import build_database, write_items
from rose_sql.record import read_records


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoPaths:
    """The demo's database and items file (what ``rose demo`` writes), not yet evaluated."""
    paths = DemoPaths(tmp_path_factory.mktemp("subsets") / "demo")
    paths.out.mkdir(parents=True)
    build_database(paths.db)
    write_items(load_demo_items(), paths.items)
    return paths


def _run(demo: DemoPaths, out: Path, *extra: str) -> Result:
    args = ["run", str(demo.items), "--db-root", str(demo.db_root), "--out", str(out), "--workers", "1"]
    args += ["--max-steps", "50000000", *extra]
    return CliRunner().invoke(main, args)


def _ids(out: Path) -> list[object]:
    return [r.id for r in read_records(out / "items" / "records.jsonl")]


def _summary(out: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((out / "items" / "summary.json").read_text(encoding="utf-8"))
    return data


def test_limit_takes_the_first_items_in_input_order(demo: DemoPaths, tmp_path: Path) -> None:
    all_ids = [it.id for it in load_demo_items()]
    result = _run(demo, tmp_path / "o", "--limit", "3")
    assert result.exit_code == 0, result.output
    assert sorted(map(str, _ids(tmp_path / "o"))) == sorted(map(str, all_ids[:3]))
    summary = _summary(tmp_path / "o")
    assert summary["n"] == 3
    assert summary["subset"] == {"limit": 3, "ids": None, "items": 3, "total": len(all_ids)}
    manifest = json.loads((tmp_path / "o" / "items" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["subset"]["items"] == 3 and manifest["complete"] is True
    figures = summary["figures"]
    assert isinstance(figures, dict) and figures["bird_ex"]["of"] == 3  # the denominator is the subset's
    # the headline says it is a subset, and of how many items
    assert f"subset 3 of {len(all_ids)}" in result.output
    assert f"3 of the input's {len(all_ids)} items" in result.output


def test_limit_larger_than_the_input_takes_every_item(demo: DemoPaths, tmp_path: Path) -> None:
    n = len(load_demo_items())
    result = _run(demo, tmp_path / "o", "--limit", str(n + 100))
    assert result.exit_code == 0, result.output
    assert len(_ids(tmp_path / "o")) == n
    assert _summary(tmp_path / "o")["subset"] == {"limit": n + 100, "ids": None, "items": n, "total": n}


def test_ids_keep_the_order_of_the_ids_file(demo: DemoPaths, tmp_path: Path) -> None:
    all_ids = [str(it.id) for it in load_demo_items()]
    chosen = [all_ids[4], all_ids[0], all_ids[2]]
    ids = tmp_path / "ids.txt"
    ids.write_text(f"# a comment\n{chosen[0]}\n\n  {chosen[1]}  \n{chosen[2]}\n", encoding="utf-8")
    result = _run(demo, tmp_path / "o", "--ids", str(ids))
    assert result.exit_code == 0, result.output
    assert sorted(map(str, _ids(tmp_path / "o"))) == sorted(chosen)
    subset = _summary(tmp_path / "o")["subset"]
    assert isinstance(subset, dict) and subset["items"] == 3 and subset["ids"]["path"] == str(ids.resolve())
    # the ids file's order is the subset's: --limit 2 with it keeps the file's first two
    result = _run(demo, tmp_path / "o2", "--ids", str(ids), "--limit", "2")
    assert result.exit_code == 0, result.output
    assert sorted(map(str, _ids(tmp_path / "o2"))) == sorted(chosen[:2])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1\nnot-an-id\n", ":2: id 'not-an-id' is not an item of"),
        ("1\n2\n1\n", ":3: id '1' is listed twice (first on line 1)"),
        ("\n# nothing\n", "lists no item id"),
        (b"\xff\xfe1\n", "not UTF-8 text"),
    ],
)
def test_bad_ids_files_are_refused_naming_the_file_and_line(
    demo: DemoPaths, tmp_path: Path, text: str | bytes, message: str
) -> None:
    ids = tmp_path / "ids.txt"
    ids.write_bytes(text if isinstance(text, bytes) else text.encode())
    result = _run(demo, tmp_path / "o", "--ids", str(ids))
    assert result.exit_code == 2, result.output
    flat = " ".join(result.output.split())
    assert str(ids) in flat.replace(" ", "") or str(ids) in flat
    assert message in flat
    assert not (tmp_path / "o" / "items" / "records.jsonl").exists()


def test_an_unreadable_ids_file_is_refused(demo: DemoPaths, tmp_path: Path) -> None:
    result = _run(demo, tmp_path / "o", "--ids", str(tmp_path / "missing.txt"))
    assert result.exit_code == 2, result.output
    assert "cannot read the ids file" in result.output and "missing.txt" in result.output


def test_resume_with_another_subset_is_refused(demo: DemoPaths, tmp_path: Path) -> None:
    assert _run(demo, tmp_path / "o", "--limit", "3").exit_code == 0
    for other in (["--limit", "4"], []):
        result = _run(demo, tmp_path / "o", "--resume", *other)
        assert result.exit_code == 2, result.output
        assert "the subset of the input differs" in " ".join(result.output.split())
    result = _run(demo, tmp_path / "o", "--resume", "--limit", "3")
    assert result.exit_code == 0, result.output
    assert len(_ids(tmp_path / "o")) == 3


def test_a_full_run_is_not_resumed_as_a_subset(demo: DemoPaths, tmp_path: Path) -> None:
    assert _run(demo, tmp_path / "o").exit_code == 0
    assert _summary(tmp_path / "o")["subset"] is None
    result = _run(demo, tmp_path / "o", "--resume", "--limit", "2")
    assert result.exit_code == 2 and "the subset of the input differs" in " ".join(result.output.split())


def test_items_outside_the_subset_are_not_missing_predictions(tmp_path: Path) -> None:
    """A BIRD gold of 4 questions, predictions for 2: the subset of the 2 predicted counts no
    no_prediction, the full run counts 2."""
    db_root = tmp_path / "dbs"
    (db_root / "a").mkdir(parents=True)
    with sqlite3.connect(db_root / "a" / "a.sqlite") as con:
        con.execute("CREATE TABLE t (x INTEGER)")
        con.executemany("INSERT INTO t VALUES (?)", [(1,), (2,)])
    gold = [
        {"question_id": i, "db_id": "a", "question": f"q{i}", "evidence": "", "SQL": "SELECT x FROM t"}
        for i in range(4)
    ]
    (tmp_path / "dev.json").write_text(json.dumps(gold), encoding="utf-8")
    preds = {str(i): "SELECT x FROM t\t----- bird -----\ta" for i in (0, 2)}
    (tmp_path / "p.json").write_text(json.dumps(preds), encoding="utf-8")
    (tmp_path / "ids.txt").write_text("2\n0\n", encoding="utf-8")
    base = ["run", str(tmp_path / "p.json"), "--gold", str(tmp_path / "dev.json"), "--db-root", str(db_root)]
    base += ["--workers", "1"]
    full = CliRunner().invoke(main, [*base, "--out", str(tmp_path / "full")])
    assert full.exit_code == 0, full.output
    assert json.loads((tmp_path / "full" / "p" / "summary.json").read_text())["no_prediction"] == 2
    part = CliRunner().invoke(main, [*base, "--out", str(tmp_path / "part"), "--ids", str(tmp_path / "ids.txt")])
    assert part.exit_code == 0, part.output
    summary = json.loads((tmp_path / "part" / "p" / "summary.json").read_text())
    assert summary["no_prediction"] == 0 and summary["n"] == 2
    assert summary["figures"]["bird_ex"] == {**summary["figures"]["bird_ex"], "n": 2, "of": 2, "no_prediction": 0}
    assert summary["figures"]["bird_ex"]["percent"] == 100.0
    assert "no_prediction" not in " ".join(part.output.split())
    assert "subset 2 of 4" in part.output
    # rose compare of the subset run says so too
    shown = CliRunner().invoke(main, ["compare", str(tmp_path / "part")])
    assert shown.exit_code == 0, shown.output
    assert "subset 2 of 4" in shown.output


def test_shards_of_a_subset_merge_into_a_subset_run(demo: DemoPaths, tmp_path: Path) -> None:
    n = len(load_demo_items())
    shards = []
    for i in range(2):
        out = tmp_path / f"shard-{i}"
        result = _run(demo, out, "--limit", "6", "--shard", f"{i}/2")
        assert result.exit_code == 0, result.output
        shards.append(str(out))
    merged = CliRunner().invoke(main, ["merge", *shards, "--out", str(tmp_path / "merged")])
    assert merged.exit_code == 0, merged.output
    summary = _summary(tmp_path / "merged")
    assert summary["n"] == 6 and summary["subset"] == {"limit": 6, "ids": None, "items": 6, "total": n}
    shown = CliRunner().invoke(main, ["compare", str(tmp_path / "merged")])
    assert f"subset 6 of {n}" in shown.output
    # shards of different subsets are not one run
    other = _run(demo, tmp_path / "other-1", "--limit", "5", "--shard", "1/2")
    assert other.exit_code == 0, other.output
    refused = CliRunner().invoke(main, ["merge", shards[0], str(tmp_path / "other-1"), "--out", str(tmp_path / "m2")])
    assert refused.exit_code == 2 and "subset" in refused.output
