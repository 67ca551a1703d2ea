"""``rose demo``: the demo builds its database, evaluates its items and shows what EX gets wrong."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from rose_sql.cli import main
from rose_sql.config import DEMO_MAX_STEPS as MAX_STEPS
from rose_sql.demo import KINDS, DemoPaths, load_demo_items, run_demo
from rose_sql.demo.build import build_database
from rose_sql.demo.show import cohen_kappa
from rose_sql.errors import UsageError
from rose_sql.items.load import load_items
from rose_sql.record import Record, read_records

# What BIRD EX says for each kind of item, and what our comparator says where it compares.
EXPECTED_EX = {
    "correct": 1,
    "wrong": 0,
    "column_order": 0,
    "extra_column": 0,
    "ratio_percentage": 0,
    "int_float": 1,
    "text_number": 0,
    "multiplicity": 1,
    "order": 1,
    "tie": 0,
    "coincidence": 1,
    "both_empty": 1,
    "wrong_gold": 0,
    "gold_copied": 1,
    "ambiguous": 0,
    "fails": 0,
    "timeout": 0,
    "gold_fails": 0,  # BIRD's script counts a failing gold 0 (the item itself is unscored: gold_error)
}
EXPECTED_REASON = {
    "correct": "same",
    "column_order": "same",
    "extra_column": "extra_columns",
    "ratio_percentage": "values",
    "int_float": "same",
    "text_number": "type",
    "multiplicity": "multiplicity",
    "order": "order",
    "tie": "values",
    "coincidence": "same",
    "both_empty": "same",
    "gold_copied": "same",
    "wrong_gold": "values",
    "ambiguous": "values",
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoPaths, str, str]:
    """One demo run through the API; the paths, the printed text and the database's hash after it."""
    paths = DemoPaths(tmp_path_factory.mktemp("demo") / "out")
    buffer = io.StringIO()
    run_demo(paths.out, Console(file=buffer, width=100, color_system=None))
    return paths, buffer.getvalue(), _sha(paths.db)


@pytest.fixture(scope="module")
def records(demo: tuple[DemoPaths, str, str]) -> dict[int, Record]:
    """The records of the demo run by item id."""
    paths, _, _ = demo
    return {r.id: r for r in read_records(paths.run_dir / "records.jsonl")}


def _of_kind(records: dict[int, Record], kind: str) -> list[Record]:
    ids = [it.id for it in load_demo_items() if it.kind == kind]
    assert ids, f"the demo has no {kind} item"
    return [records[i] for i in ids]


# --------------------------------------------------------------------------- the demo's own data


def test_items_cover_every_kind_with_verdicts() -> None:
    items = load_demo_items()
    assert 25 <= len(items) <= 40
    assert [it.id for it in items] == list(range(1, len(items) + 1))
    assert {it.kind for it in items} == set(KINDS) == set(EXPECTED_EX)
    plain = [it for it in items if it.kind in ("correct", "wrong")]
    assert len(plain) > len(items) / 2, "most items should be plainly correct or plainly wrong"
    assert all(it.note and it.expert in ("correct", "incorrect", "ambiguous") for it in items)


def test_database_is_small_and_consistent(tmp_path: Path) -> None:
    import sqlite3

    db = build_database(tmp_path / "demo.sqlite")
    conn = sqlite3.connect(db)
    try:
        sizes = {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("teams", "riders", "races")}
        total = sum(sizes.values()) + conn.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        assert total <= 300
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        names = conn.execute("SELECT name FROM riders GROUP BY name HAVING COUNT(*) > 1").fetchall()
        assert names, "the demo needs a duplicate rider name"
        assert conn.execute("SELECT COUNT(*) FROM riders WHERE team_id IS NULL").fetchone()[0] > 0
    finally:
        conn.close()


def test_cohen_kappa() -> None:
    assert cohen_kappa([(True, True), (False, False)]) == 1.0
    assert cohen_kappa([(True, False), (False, True)]) == -1.0
    assert cohen_kappa([(True, True), (True, True)]) is None
    assert cohen_kappa([]) is None


# --------------------------------------------------------------------------- one run through the API


def test_writes_generic_items_and_one_record_per_item(
    demo: tuple[DemoPaths, str, str], records: dict[int, Record]
) -> None:
    paths, _, _ = demo
    items = load_demo_items()
    loaded = load_items(paths.items)
    assert loaded.format == "generic"
    assert [it.id for it in loaded.items] == [it.id for it in items]
    assert len(paths.run_dir.joinpath("records.jsonl").read_text().splitlines()) == len(items)
    assert sorted(records) == [it.id for it in items]
    summary = json.loads((paths.run_dir / "summary.json").read_text())
    assert summary["n"] == len(items)


@pytest.mark.parametrize("kind", sorted(EXPECTED_EX))
def test_bird_ex_and_comparison_per_kind(records: dict[int, Record], kind: str) -> None:
    for r in _of_kind(records, kind):
        assert r.readings.bird_ex == EXPECTED_EX[kind], r.id
        if kind in EXPECTED_REASON:
            assert r.comparison.reason == EXPECTED_REASON[kind], r.id


def test_failing_predictions_score_zero_by_execution(records: dict[int, Record]) -> None:
    for r in _of_kind(records, "fails"):
        assert r.pred.status == "error"
        assert (r.score, r.decided_by) == (0, "execution")


def test_slow_prediction_times_out_at_the_short_timeout(records: dict[int, Record]) -> None:
    (r,) = _of_kind(records, "timeout")
    assert r.pred.status == "timeout"
    assert f"stopped after {MAX_STEPS:,} steps" in (r.pred.error or "")
    assert (r.score, r.decided_by) == (0, "execution")
    assert r.gold.status == "ok"


def test_column_order_is_the_same_result_but_ex_zero(records: dict[int, Record]) -> None:
    (r,) = _of_kind(records, "column_order")
    assert r.comparison.equal is True
    assert r.comparison.reason == "same"
    assert "columns in another order" in r.comparison.notes
    assert r.readings.bird_ex == 0


def test_coincidental_match_fools_ex(records: dict[int, Record]) -> None:
    (item,) = [it for it in load_demo_items() if it.kind == "coincidence"]
    r = records[item.id]
    assert item.expert == "incorrect"
    assert r.readings.bird_ex == 1
    assert r.comparison.equal is True


def test_without_a_judge_nothing_else_is_scored(records: dict[int, Record]) -> None:
    unscored = {r.unscored_reason for r in records.values() if r.score is None}
    assert unscored == {"awaiting_judge", "gold_error"}
    assert {r.score for r in records.values()} == {None, 0}
    (gold_fails,) = _of_kind(records, "gold_fails")
    assert gold_fails.unscored_reason == "gold_error"
    assert all(r.judges == [] for r in records.values())


def test_prints_table_totals_and_where_records_are(demo: tuple[DemoPaths, str, str]) -> None:
    paths, text, _ = demo
    # fits the console's 100 columns, but for a line naming a path, which is never cut (its length is the
    # temporary folder's: under xdist a worker's is longer)
    assert all(len(line) <= 100 or str(paths.out) in line for line in text.splitlines())
    assert "awaiting judge · same up to column order" in text
    assert "No judge is configured" in text
    assert "BIRD EX against the expert" in text
    assert str(paths.run_dir / "records.jsonl") in text.replace("\n", "")


def test_evaluation_leaves_the_database_as_built(demo: tuple[DemoPaths, str, str], tmp_path: Path) -> None:
    _, _, sha = demo
    assert _sha(build_database(tmp_path / "fresh.sqlite")) == sha


# --------------------------------------------------------------------------- the command


def test_cli_reruns_into_the_same_folder(demo: tuple[DemoPaths, str, str]) -> None:
    paths, _, sha = demo
    result = CliRunner().invoke(main, ["demo", "--out", str(paths.out)])
    assert result.exit_code == 0, result.output
    assert "No judge is configured" in result.output
    assert _sha(paths.db) == sha
    lines = paths.run_dir.joinpath("records.jsonl").read_text().splitlines()
    assert len(lines) == len(load_demo_items())


def test_cli_refuses_a_folder_it_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "items.jsonl").write_text("{}\n")
    result = CliRunner().invoke(main, ["demo", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert (tmp_path / "items.jsonl").read_text() == "{}\n"
    with pytest.raises(UsageError):
        DemoPaths(tmp_path).prepare()


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("columns", [80, 120, 250])
def test_summary_lines_wrap_and_are_never_cut(tmp_path: Path, columns: int) -> None:
    """On a console like the command's own (soft wrap), every sentence of the intro and the totals is printed
    whole, wrapped to the terminal (at most 80 columns where it is that narrow), never cut."""
    from rose_sql.demo.show import _ex_lines, _judge_line, _rose_lines, tally
    from rose_sql.summary import Summary

    paths = DemoPaths(tmp_path / "out")
    buffer = io.StringIO()
    run_demo(paths.out, Console(file=buffer, width=columns, soft_wrap=True, color_system=None))
    text = buffer.getvalue()
    records = {r.id: r for r in read_records(paths.run_dir / "records.jsonl")}
    summary = Summary.from_dict(json.loads((paths.run_dir / "summary.json").read_text()))
    t = tally(load_demo_items(), records)
    sentences = [str(getattr(line, "renderable", line)) for line in [*_ex_lines(t, summary), *_rose_lines(t, summary)]]
    sentences += [str(_judge_line(t)), f"run with a budget of {MAX_STEPS:,} SQLite steps per query and no judge."]
    printed = _words(text)
    for sentence in sentences:
        assert _words(sentence) in printed, f"cut at {columns} columns: {sentence}"
    too_long = [line for line in text.splitlines() if len(line) > min(columns, 100) and str(tmp_path) not in line]
    assert not too_long, too_long  # only lines naming a file (whole paths, on one line) may be longer
    assert "…" not in text  # the questions too are wrapped in their column, never cut short
    words = set(printed.split())
    for item in load_demo_items():
        missing = [w for w in item.question.split() if w not in words]
        assert not missing, f"item {item.id}'s question lost {missing} at {columns} columns"
