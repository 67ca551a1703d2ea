"""rose report --systems: the ROSE-EX gap per system and difficulty grouped by a column the user supplies, and
over release dates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import make_record, write_records

from rose_sql.analysis.html.groups import UNKNOWN, group_charts, load_systems
from rose_sql.analysis.runs import Run
from rose_sql.analysis.systems import system_row
from rose_sql.cli import main
from rose_sql.errors import InputError, UsageError


def _run(name: str, pairs: list[tuple[int, int, str]]) -> Run:
    records = [
        make_record({"id": i, "score": s, "readings": {"bird_ex": e}, "difficulty": d})
        for i, (e, s, d) in enumerate(pairs)
    ]
    return Run(name, Path(name), records)


RUNS = [
    _run("a", [(0, 1, "simple"), (1, 1, "moderate")]),  # gap +50
    _run("b", [(1, 1, "simple"), (1, 0, "moderate")]),  # gap -50
    _run("c", [(0, 1, "simple"), (0, 1, "simple")]),  # gap +100, simple only
]


def _systems(tmp_path: Path, text: str, name: str = "systems.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_gap_charts_by_group_and_date(tmp_path: Path) -> None:
    systems = load_systems(_systems(tmp_path, "system,type,release_date\na,prompting,2024-05\nb,fine-tuned,2023-01\n"))
    charts = {c[0]: c for c in group_charts([system_row(r) for r in RUNS], systems, "type")}
    assert list(charts) == ["gap-systems", "gap-groups", "gap-dates"]
    groups = charts["gap-groups"][3]
    # pooled over each group's items: prompting (a) +50 over 2 items; fine-tuned (b) -50; c is in no row
    assert "all: fine-tuned -50, prompting 50, (not in the systems file) 100" in groups
    assert "simple: fine-tuned 0, prompting 100" in groups
    dates = charts["gap-dates"]
    assert "1 systems without a date left out" in dates[2]
    assert re.search(r"2023-01 b.*2024-05 a", dates[3], re.DOTALL)  # in date order


def test_a_systems_file_as_json_and_its_errors(tmp_path: Path) -> None:
    data = '{"a": {"type": "prompting"}, "b": {"type": null}}'
    systems = load_systems(_systems(tmp_path, data, "s.json"))
    assert systems.value("a", "type") == "prompting" and systems.value("b", "type") == UNKNOWN
    assert systems.date_column is None
    with pytest.raises(InputError, match="not YYYY-MM"):
        load_systems(_systems(tmp_path, "system,release_date\na,May 2024\n"))
    with pytest.raises(InputError, match="named twice"):
        load_systems(_systems(tmp_path, "system,type\na,x\na,y\n"))
    with pytest.raises(UsageError, match="no such column"):
        group_charts([system_row(r) for r in RUNS], systems, "base_model")


def test_report_cli_with_a_systems_file(tmp_path: Path) -> None:
    for run in RUNS:
        write_records(tmp_path / "runs" / run.name, run.records)
    systems = _systems(tmp_path, "system,type\na,prompting\nb,fine-tuned\nc,prompting\n")
    out = tmp_path / "r.html"
    args = ["report", str(tmp_path / "runs"), "--systems", str(systems), "--group-by", "type", "--out", str(out)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert 'id="chart-gap-systems"' in page and 'id="chart-gap-groups"' in page and "chart-gap-dates" not in page
    res = CliRunner().invoke(main, ["report", str(tmp_path / "runs"), "--group-by", "type"])
    assert res.exit_code == 2 and "--systems" in res.output
