"""The ROSE paper's re-evaluation imported without labels: checked against the benchmark, its figures
reproduced over its own entries, the 433 items all 19 systems kept; and every method folder read by its shape."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rose_sql.analysis.labels import load_labels
from rose_sql.analysis.reeval import benchmark_frame, entries_of, load_benchmark, with_checks
from rose_sql.analysis.rose_import import Imported, import_outputs, write_run
from rose_sql.analysis.runs import Run, load_run
from rose_sql.analysis.systems import common_items, leaderboard, rank_moves, restricted
from rose_sql.cli import main
from rose_sql.record import SCHEMA_VERSION, ImportedScores, Record

SYSTEMS = [
    "alpha",
    "c3",
    "chatgpt+cot",
    "chessv1",
    "codes-15b",
    "csc",
    "dail",
    "deepseek-v3",
    "gpt-3.5",
    "gpt-4",
    "gpt-4o",
    "gpt-5",
    "omni-32b",
    "opensearch-ds",
    "resd-3B",
    "rsl-ds",
    "rsl-gpt4o",
    "super",
    "ta",
]
PAPER = {  # the paper's Table 3 as their outputs give it: ROSE over each system's own entries (entries, mean)
    "gpt-5": (488, 88.93),
    "alpha": (460, 81.09),
    "dail": (455, 55.60),
}


def _import(shared: Path, system: str, **kw: Any) -> Imported:
    bench = load_benchmark([shared / "bird"])
    outputs = shared / "rose-reeval" / system / f"o3-{system}-eval"
    return with_checks(import_outputs(outputs, benchmark_frame(bench, outputs, **kw)), bench)


@pytest.fixture(scope="module")
def reeval(shared: Path) -> dict[str, Run]:
    """The 19 systems imported against mini-dev (in memory: the import is file reading)."""
    if not (shared / "rose-reeval").is_dir():
        pytest.skip("rose-reeval/ is not in the shared data")
    return {s: Run(s, Path(s), _import(shared, s).records) for s in SYSTEMS}


def _mean(records: list[Record]) -> tuple[int, float]:
    scored = [r.score for r in records if r.score is not None]
    return len(scored), round(100 * sum(scored) / len(scored), 2)


@pytest.mark.parametrize("system", sorted(PAPER))
def test_each_system_s_rose_is_the_paper_s_over_its_own_entries(shared: Path, system: str) -> None:
    preds = shared / "preds" / "bird-minidev" / f"{system}-result.json"
    imp = _import(shared, system, predictions=preds)
    assert not [w for w in imp.warnings if "their score" in w]  # every item decided as they did, by our table
    assert _mean(imp.records) == PAPER[system]
    theirs = [r.imported.score for r in imp.records if r.imported is not None and r.imported.score is not None]
    assert (len(theirs), round(100 * sum(theirs) / len(theirs), 2)) == PAPER[system]
    assert all(r.readings.bird_ex is None for r in imp.records)  # their EX is never our BIRD EX
    e = entries_of(imp.records)
    assert e is not None and e.entries == PAPER[system][0] and e.benchmark_ids == 498
    note = imp.notes[-1]
    assert f"over {PAPER[system][0]} entries: {e.inside} of mini_dev_sqlite.json's 498 ids" in note
    reasons = {r.unscored_reason for r in imp.records if r.imported is None}
    assert reasons <= {"failed_in_their_run", "absent_from_outputs"}
    silent = [r for r in imp.records if r.unscored_reason == "absent_from_outputs"]
    # the items their run dropped without a word are exactly those the system's file has no prediction for
    assert all("has no prediction for it" in r.why for r in silent) and len(silent) in (0, 16)


def test_gpt_5_reads_as_the_issue_says(shared: Path) -> None:
    imp = _import(shared, "gpt-5")
    e = entries_of(imp.records)
    assert e is not None and (e.entries, e.inside, e.outside) == (488, 486, ["119", "120"])
    assert e.missing == {"failed_in_their_run": 12}
    outside = {r.id: r for r in imp.records if r.id in (119, 120)}
    assert {r.db_id for r in outside.values()} == {"financial"}  # from BIRD dev, the ids mini-dev lacks
    assert {r.imported.benchmark for r in outside.values() if r.imported} == {"dev.json"}
    gold = next(w for w in imp.warnings if w.startswith("their gold_sql"))
    assert "on 25 of 488 entries" in gold and "12 equal dev.json's" in gold
    assert any("repeats question ids 137, 138" in w for w in imp.warnings)
    ex = [r.imported.ex for r in imp.records if r.imported is not None and r.imported.ex is not None]
    assert (len(ex), round(100 * sum(ex) / len(ex), 2)) == (488, 55.74)


def test_the_433_items_all_19_systems_kept_and_the_ranks_that_move(reeval: dict[str, Run]) -> None:
    runs = list(reeval.values())
    entries = {s: entries_of(r.records) for s, r in reeval.items()}
    assert min(e.entries for e in entries.values() if e) == 455 and max(e.entries for e in entries.values() if e) == 493
    keys = common_items(runs)
    assert len(keys) == 433
    own, common = leaderboard(runs, "their_ex"), leaderboard(restricted(runs, keys), "their_ex")
    assert all(r.headline.figures.rose.n == 433 and r.ex.n == 433 for r in common)
    moves = {m.system: m.rose_move for m in rank_moves(own, common)}
    assert {s: m for s, m in moves.items() if m} == {"gpt-4o": 1, "rsl-ds": -1, "super": 1, "chessv1": -1}
    assert [r.system for r in common][:3] == ["gpt-5", "rsl-gpt4o", "alpha"]
    gpt5 = common[0]
    assert (gpt5.headline.figures.rose.percent, gpt5.ex.percent) == (88.68, 58.2)


def test_compare_common_through_the_cli(shared: Path, tmp_path: Path) -> None:
    """Three imported systems: --common takes the items all three kept, and the JSON says how ranks move."""
    for s in ("gpt-5", "alpha", "dail"):
        write_run(_import(shared, s), tmp_path / "reeval" / s)
    out = tmp_path / "t.json"
    args = ["compare", str(tmp_path / "reeval"), "--common", "--bootstrap", "50", "--json", str(out)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "all 3 runs have (--common)" in " ".join(res.output.split())
    data = json.loads(out.read_text())
    n = data["common_items"]
    assert data["reading"] == "their_ex" and all(s["ex"]["n"] == n for s in data["systems"])
    assert [p["a"] for p in data["pairs"]] == ["alpha", "alpha", "dail"]  # every pair of three, A before B as given
    assert {m["system"]: m["ranks"]["rose_own"] for m in data["ranks"]} == {"gpt-5": 1, "alpha": 2, "dail": 3}


# --------------------------------------------------------------------------- synthetic layouts


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _bench_item(qid: int, db: str = "db1", sql: str = "SELECT 1") -> dict[str, Any]:
    return {"question_id": qid, "db_id": db, "question": f"q{qid}", "evidence": "", "SQL": sql, "difficulty": "simple"}


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A system's re-evaluation folder (o3, EX, problem ids) and a benchmark folder with mini-dev and dev."""
    bird = tmp_path / "bird"
    mini = [_bench_item(i) for i in (1, 2, 3, 4, 5)] + [_bench_item(5)]  # 5 repeated, as mini-dev repeats 137
    _write(bird / "mini_dev_sqlite.json", mini)
    _write(bird / "dev.json", [_bench_item(i, sql="SELECT 0" if i == 2 else "SELECT 1") for i in (1, 2, 9)])
    system = tmp_path / "rose-reeval" / "s1"
    entries = [
        {**_bench_item(1), "gold_sql": "SELECT 1", "predicted_sql": "p1", "score": 1.0, "prover_result": None},
        {**_bench_item(2), "gold_sql": "SELECT 0", "predicted_sql": "p2", "score": 0.0, "prover_result": False},
        {**_bench_item(9, db="other"), "gold_sql": "SELECT 1", "predicted_sql": "p9", "score": 0.0},
    ]
    for e in entries:
        e.pop("SQL"), e.pop("db_id")  # their outputs carry no db_id
        e.setdefault("prover_result", None)
        e["refuter_result"] = False if e["question_id"] == 1 else None
    _write(system / "o3-s1-eval" / "eval_results.json", entries)
    _write(system / "o3-s1-eval" / "prover_output.json", [{"question_id": 2, "result": {"verdict": False}}])
    refuter = {"verdict": False, "judgement": "ok", "ambiguity": "na", "gold_correct": True}
    _write(system / "o3-s1-eval" / "refuter_output.json", [{"question_id": 1, "result": refuter}])
    _write(system / "EX-s1-eval" / "eval_results.json", [{"question_id": i, "score": 1.0} for i in (1, 2, 9)])
    _write(system / "problem_question_ids.json", ["3", "7"])
    preds = tmp_path / "s1.json"
    _write(preds, [{"question_id": i} for i in (1, 2, 3, 9)])
    return system / "o3-s1-eval", preds


def test_a_reevaluation_folder_without_labels(layout: tuple[Path, Path], tmp_path: Path) -> None:
    outputs, preds = layout
    bench = load_benchmark([tmp_path / "bird"])
    imp = with_checks(import_outputs(outputs, benchmark_frame(bench, outputs, preds)), bench)
    assert (imp.kind, imp.model, imp.method) == ("rose", "o3", "ROSE")
    recs = {r.id: r for r in imp.records}
    assert sorted(recs) == [1, 2, 3, 4, 5, 9]  # entries, then the benchmark's ids without one (5 once)
    assert (recs[1].score, recs[1].decided_by, recs[2].score, recs[2].decided_by) == (1, "refuter", 0, "prover")
    assert recs[9].db_id == "db1" and recs[9].imported is not None and recs[9].imported.benchmark == "dev.json"
    assert recs[2].imported is not None and recs[2].imported.differs == ["gold_sql"]
    assert [recs[i].imported.ex for i in (1, 2, 9)] == [1, 1, 1]  # type: ignore[union-attr]
    assert recs[3].unscored_reason == "failed_in_their_run" and "problem_question_ids.json" in recs[3].why
    assert recs[4].unscored_reason == "absent_from_outputs" and "has no prediction for it" in recs[4].why
    assert recs[4].db_id == "db1" and recs[4].question == "q4"
    gold = next(w for w in imp.warnings if w.startswith("their gold_sql"))
    assert "on 1 of 3 entries (ids 2)" in gold and "1 equal dev.json's" in gold
    assert any("repeats question ids 5" in w for w in imp.warnings)
    assert imp.notes[-1].endswith(
        "over 3 entries: 2 of mini_dev_sqlite.json's 5 ids and 1 outside it (9); "
        "2 absent_from_outputs, 1 failed_in_their_run without an entry"
    )
    summary = write_run(imp, tmp_path / "run")
    assert summary.unscored == {"absent_from_outputs": 2, "failed_in_their_run": 1}
    back = {r.id: r for r in load_run(tmp_path / "run").records}
    assert back[2].imported == recs[2].imported and back[1].schema == SCHEMA_VERSION


def test_import_rose_cli_needs_labels_or_a_benchmark(layout: tuple[Path, Path], tmp_path: Path) -> None:
    outputs, _ = layout
    res = CliRunner().invoke(main, ["import-rose", str(outputs), "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "--benchmark" in res.output
    ok = CliRunner().invoke(
        main, ["import-rose", str(outputs), "--benchmark", str(tmp_path / "bird"), "--out", str(tmp_path / "x")]
    )
    assert ok.exit_code == 0, ok.output
    assert "over 3 entries: 2 of mini_dev_sqlite.json's 5 ids" in " ".join(ok.output.split())


def test_a_record_of_layout_6_reads_and_imported_round_trips() -> None:
    old = {
        "schema": 6,
        "id": 1,
        "db_id": "d",
        "score": None,
        "unscored_reason": "absent_from_outputs",
        "decided_by": None,
        "why": "",
        "readings": {},
        "comparison": None,
        "pred": {"status": "skipped", "seconds": 0.0},
        "gold": {"status": "skipped", "seconds": 0.0},
    }
    rec = Record.from_dict(old)
    assert rec.schema == SCHEMA_VERSION == 7 and rec.imported is None and "imported" not in rec.to_dict()
    theirs = ImportedScores("FLEX", score=None, ex=1, error="Connection error.", benchmark="b.json", differs=["x"])
    data = {**rec.to_dict(), "imported": {"method": "FLEX", "ex": 1, "error": "Connection error."}}
    assert Record.from_dict(data).imported == ImportedScores("FLEX", ex=1, error="Connection error.")
    again = Record.from_dict(json.loads(Record.from_dict({**data, "imported": asdict(theirs)}).to_json()))
    assert again.imported == theirs


# --------------------------------------------------------------------------- method folders by shape


def _labels(tmp_path: Path, ids: list[int]) -> Path:
    path = tmp_path / "labels.json"
    rows = [{"question_id": i, "db_id": "d", "question": "q", "predicted_sql": "p", "label": True} for i in ids]
    _write(path, rows)
    return path


def test_prover_only_folders_are_decided_by_the_prover(tmp_path: Path) -> None:
    folder = tmp_path / "part" / "judge-x" / "ProverOnly"
    entries = [
        {"question_id": 1, "question": "q", "score": 1.0, "prover_result": True, "refuter_result": None},
        {"question_id": 2, "question": "q", "score": 0.0, "prover_result": False, "refuter_result": None},
    ]
    _write(folder / "eval_results.json", entries)
    _write(folder / "prover_output.json", [{"question_id": i, "result": {"verdict": i == 1}} for i in (1, 2)])
    imp = import_outputs(folder, load_labels(_labels(tmp_path, [1, 2])))
    assert (imp.kind, imp.model, imp.method) == ("prover-only", "judge-x", "ProverOnly")
    assert [(r.score, r.decided_by) for r in imp.records] == [(1, "prover"), (0, "prover")]
    assert all([c.stage for c in r.judges] == ["prover"] for r in imp.records) and not imp.warnings
    assert all(r.comparison is not None and r.comparison.equal is None for r in imp.records)
    with pytest.raises(Exception, match="Prover-only run"):
        import_outputs(folder, load_labels(_labels(tmp_path, [1, 2])), variant="never")


def test_a_failed_call_is_an_error_not_a_zero(tmp_path: Path) -> None:
    folder = tmp_path / "part" / "judge-x" / "llmsolver"
    entries = [
        {"question_id": 1, "score": 1.0},
        {"question_id": 2, "score": 0.0, "error": "Connection error."},
        {"question_id": 3, "score": 0.0, "error": "Expecting value: line 201 column 1 (char 1100)"},
    ]
    _write(folder / "eval_results.json", entries)
    imp = import_outputs(folder, load_labels(_labels(tmp_path, [1, 2, 3])))
    assert (imp.kind, imp.model) == ("scores", "judge-x")
    got = [(r.score, r.unscored_reason) for r in imp.records]
    assert got == [(1, None), (None, "judge_error"), (None, "judge_invalid")]
    assert imp.records[1].imported is not None and imp.records[1].imported.error == "Connection error."


def test_every_published_method_folder_reads_by_its_shape(shared: Path) -> None:
    ref = shared / "rose-vec" / "reference_outputs" / "rose-vec-bird"
    labels = load_labels(shared / "rose-vec" / "rose-vec-bird.json")
    kinds = {}
    for folder in sorted(p for p in ref.glob("*/*") if (p / "eval_results.json").is_file()):
        imp = import_outputs(folder, labels)
        kinds[f"{folder.parent.name}/{folder.name}"] = imp.kind
        assert not [w for w in imp.warnings if "their score" in w], folder  # decided as they scored it
        assert len(imp.records) == 322 and all(r.db_id for r in imp.records)
    assert kinds["o3/ProverOnly"] == "prover-only" and kinds["o3/ROSE-thread-4"] == "rose"
    assert kinds["qwen3-30b/FLEX"] == kinds["decisive/EX"] == "scores"
    solver = import_outputs(ref / "deepseek-r1" / "llmsolver", labels)
    errors = [r for r in solver.records if r.imported is not None and r.imported.error]
    assert len(errors) == 24 and all(r.score is None and r.unscored_reason == "judge_error" for r in errors)
    assert sum(r.imported.error == "Connection error." for r in errors if r.imported) == 2
