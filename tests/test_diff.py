"""rose diff: the items whose outcome differs between two runs, with both sides' score, stage, reason and SQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from conftest import make_record, write_records

from rose_sql.analysis.diff import diff_runs
from rose_sql.analysis.runs import Run
from rose_sql.cli import main
from rose_sql.record import Record


def _rec(i: int, ex: int | None, score: int | None, sql: str, **more: Any) -> Record:
    reason = more.pop("reason", None if score is not None else "awaiting_judge")
    return make_record(
        {
            "id": i,
            "db_id": "shop",
            "score": score,
            "unscored_reason": reason,
            "decided_by": "execution" if score == 0 else ("prover" if score else None),
            "why": f"why {i}",
            "readings": {"bird_ex": ex, "spider_ex": ex, "soft_f1": 0.25 if ex else 0.75},
            "comparison": {"equal": bool(ex), "reason": "same" if ex else "values", "detail": ""},
            "pred_sql": sql,
            "gold_sql": "SELECT 1",
            **more,
        }
    )


A = [
    _rec(1, 1, 1, "SELECT 1"),
    _rec(2, 0, 0, "SELECT 2"),  # EX and ROSE both change
    _rec(3, 1, 1, "SELECT 1"),  # the same in both
    _rec(4, 1, None, "SELECT 1", reason="judge_error"),  # ROSE only in B
    _rec(5, 0, 0, "SELECT 5"),  # only in A
]
B = [
    _rec(1, 1, 1, "SELECT 1 AS x"),  # other SQL, same outcome: not a difference
    _rec(2, 1, 1, "SELECT 1"),
    _rec(3, 1, 1, "SELECT 1"),
    _rec(4, 1, 0, "SELECT 1"),
    _rec(6, 0, 0, "SELECT 6"),  # only in B
    _rec(7, 1, None, "SELECT 7"),  # only in B
]


def test_diff_lists_what_changed_and_nothing_else() -> None:
    d = diff_runs(Run("a", Path("x/a"), A), Run("b", Path("x/b"), B))
    assert (d.a, d.b, d.shared) == ("a", "b", 4)
    assert [(i.id, i.changed) for i in d.items] == [("2", ["rose", "bird_ex", "spider_ex"]), ("4", ["rose"])]
    two = d.items[0]
    assert (two.a.score, two.a.decided_by, two.a.reason, two.a.pred_sql) == (0, "execution", "values", "SELECT 2")
    assert (two.b.score, two.b.decided_by, two.b.reason, two.b.pred_sql) == (1, "prover", "same", "SELECT 1")
    assert d.items[1].a.reason == "judge_error"  # an unscored item's own reason, not the comparator's
    assert (d.only_a, d.only_b) == (["5"], ["6", "7"])
    assert d.counts() == {"rose": 2, "bird_ex": 1, "spider_ex": 1}  # Soft-F1 is not a binary outcome


def test_two_runs_of_one_system_are_named_by_path() -> None:
    d = diff_runs(Run("c3", Path("old/c3"), A), Run("c3", Path("new/c3"), A[:3]))
    assert (d.a, d.b, d.items, d.only_a, d.only_b) == ("old/c3", "new/c3", [], ["4", "5"], [])


def test_cli_table_and_json(tmp_path: Path) -> None:
    a, b = write_records(tmp_path / "a", A), write_records(tmp_path / "b", B)
    out = tmp_path / "d.json"
    res = CliRunner().invoke(main, ["diff", str(a), str(b), "--json", str(out), "--tables", "wide"])  # one line a row
    assert res.exit_code == 0, res.output
    assert "ROSE 0→1, BIRD EX 0→1, Spider EX 0→1" in res.output and "ROSE –→0" in res.output
    assert "0 · execution · values" in res.output and "1 · prover · same" in res.output
    assert "SELECT 2" in res.output
    assert "2 of the 4 shared items differ between a and b" in res.output
    assert "not compared: 1 items only in a, 2 only in b" in res.output
    data = json.loads(out.read_text())
    assert [i["id"] for i in data["items"]] == ["2", "4"] and data["only_b"] == ["6", "7"]
    stdout = CliRunner().invoke(main, ["diff", str(a), str(b), "--json", "-"])
    assert json.loads(stdout.output) == data


def test_cli_refuses_a_folder_of_several_systems(tmp_path: Path) -> None:
    write_records(tmp_path / "runs" / "a", A)
    write_records(tmp_path / "runs" / "b", B)
    res = CliRunner().invoke(main, ["diff", str(tmp_path / "runs"), str(tmp_path / "runs" / "a")])
    assert res.exit_code == 2 and "holds 2 systems" in res.output
