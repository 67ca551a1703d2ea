"""The re-evaluation table on tiny synthetic runs: EX vs ROSE, gap by difficulty, discordance and its sources."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from conftest import make_record, write_records

from rose_sql.analysis.runs import Run, load_run
from rose_sql.analysis.systems import (
    Discordance,
    Scores,
    leaderboard,
    ordered_difficulties,
    system_row,
    to_csv,
)
from rose_sql.cli import main
from rose_sql.record import Record


def _rec(i: int, ex: int | None, score: int | None, difficulty: str | None = None, **labels: Any) -> Record:
    return make_record(
        {
            "id": i,
            "score": score,
            "unscored_reason": None if score is not None else "judge_error",
            "readings": {"bird_ex": ex, "spider_ex": score},
            "difficulty": difficulty,
            "labels": labels,
        }
    )


A = [
    _rec(1, 1, 1, "simple"),
    _rec(2, 0, 1, "simple", goldx=True),  # EX misses a correct answer: the gold is wrong
    _rec(3, 0, 1, "moderate", ambq=True),  # ... the question admits another reading
    _rec(4, 1, 0, "moderate"),  # EX accepts an accidental match
    _rec(5, 0, 0, "challenging", goldx=True),
    _rec(6, None, 1, "simple"),  # no EX reading: out of the comparison, counted
    _rec(7, 1, None, "simple"),  # unscored: out of the comparison, counted
]
B = [_rec(1, 1, 1, "simple"), _rec(2, 0, 0, "moderate"), _rec(3, 1, 1, "moderate")]


def _write(folder: Path, records: list[Record]) -> Path:
    return write_records(folder, records)


def test_system_row_by_hand() -> None:
    row = system_row(Run("a", Path("a"), A))
    assert (row.headline.items, row.unscored, row.ex_undefined) == (7, 1, 1)
    rose, ex = row.headline.figures.rose, row.headline.figures.bird_ex
    assert (rose.percent, rose.n, rose.of, rose.left_out) == (66.67, 6, 7, {"judge_error": 1})
    assert (ex.percent, ex.n, ex.of, ex.left_out) == (50.0, 6, 7, {"no_gold": 1})  # item 6 has no reading
    assert rose.shown() == "66.67 over 6 of 7 (1 judge_error)"
    assert row.overall == Scores(n=5, ex=40.0, rose=60.0, gap=20.0)
    assert list(row.by_difficulty) == ["simple", "moderate", "challenging"]  # easiest first, not alphabetical
    assert row.by_difficulty["simple"] == Scores(2, 50.0, 100.0, 50.0)
    assert row.by_difficulty["moderate"] == Scores(2, 50.0, 50.0, 0.0)
    assert row.by_difficulty["challenging"] == Scores(1, 0.0, 0.0, 0.0)
    assert (row.discordant, row.ex_only, row.rose_only) == (3, 1, 2)
    assert row.subsets["goldx"] == Discordance(n=2, discordant=1, rate=50.0, share=33.33)
    assert row.subsets["ambq"] == Discordance(n=1, discordant=1, rate=100.0, share=33.33)
    assert row.subsets["goldx_or_ambq"] == Discordance(n=3, discordant=2, rate=66.67, share=66.67)


def test_no_discordance_has_no_share() -> None:
    row = system_row(Run("b", Path("b"), B))
    assert row.overall.gap == 0.0 and row.discordant == 0
    assert row.subsets["goldx"] == Discordance(0, 0, None, None)


def test_other_readings_and_ranking() -> None:
    runs = [Run("b", Path("b"), B), Run("a", Path("a"), A)]
    assert [r.system for r in leaderboard(runs)] == ["b", "a"]  # ROSE 66.67 > 60
    assert system_row(runs[1], "spider_ex").discordant == 0  # spider_ex equals the score in these records


def test_difficulty_order() -> None:
    assert ordered_difficulties(["hard", "extra", "easy", "medium", "zzz", "easy"]) == [
        "easy",
        "medium",
        "hard",
        "extra",
        "zzz",
    ]


def test_csv_flattens_difficulties_and_subsets() -> None:
    rows = leaderboard([Run("a", Path("a"), A), Run("b", Path("b"), B)])
    table = list(csv.DictReader(io.StringIO(to_csv(rows))))
    a = next(r for r in table if r["system"] == "a")
    assert (a["pair_ex"], a["pair_rose"], a["gap"], a["simple_gap"], a["goldx_share"]) == (
        "40.0",
        "60.0",
        "20.0",
        "50.0",
        "33.33",
    )
    assert (a["bird_ex"], a["bird_ex_n"], a["rose"], a["scored"], a["completeness"]) == (
        "50.0",
        "6",
        "66.67",
        "6",
        "unknown",
    )
    b = next(r for r in table if r["system"] == "b")
    assert b["challenging_pair_n"] == "0" and b["challenging_pair_ex"] == "" and b["goldx_share"] == ""
    assert (b["challenging_ex"], b["challenging_ex_n"]) == ("", "0")  # no item: left out, not 0


def test_cli_compare_writes_table_csv_and_json(tmp_path: Path) -> None:
    a, b = _write(tmp_path / "sysA", A), _write(tmp_path / "sysB", B)
    out_csv, out_json = tmp_path / "out" / "t.csv", tmp_path / "out" / "t.json"
    res = CliRunner().invoke(main, ["compare", str(a), str(b), "--csv", str(out_csv), "--json", str(out_json)])
    assert res.exit_code == 0, res.output
    assert "sysA" in res.stdout and "+20.00" in res.stdout and "By difficulty" in res.stdout
    data = json.loads(out_json.read_text())
    assert data["reading"] == "bird_ex" and [s["system"] for s in data["systems"]] == ["sysB", "sysA"]
    assert data["systems"][1]["subsets"]["goldx_or_ambq"]["share"] == 66.67
    assert out_csv.read_text().startswith("system,items,completeness,bird_ex,bird_ex_n")
    assert load_run(a).records[0].id == 1
    missing = CliRunner().invoke(main, ["compare", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no such file or folder" in missing.output
