"""Dataset audit export: every GoldX / AmbQ / gold-smell item, with evidence and reasoning, as JSONL and CSV."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from conftest import make_record, write_records

from rose_sql.analysis.audit import CSV_COLUMNS, audit_rows, reasons
from rose_sql.analysis.runs import load_run
from rose_sql.cli import main
from rose_sql.record import UNGRADED, Record


def _rec(i: int, labels: dict[str, Any] | None = None, smells: list[Any] | None = None) -> Record:
    return make_record(
        {
            "id": i,
            "db_id": "shop",
            "score": 1,
            "unscored_reason": None,
            "why": "the Refuter found no hard evidence against the prediction",
            "question": f"question {i}, with a comma",
            "pred_sql": "SELECT name FROM t",
            "gold_sql": "SELECT name FROM t LIMIT 1",
            "readings": {"bird_ex": 0},
            "labels": labels or {},
            "judges": [
                {"stage": "prover", "reply": {"reasoning": f"prover says {i}", "answers_question": True}},
                {"stage": "refuter", "reply": {"reasoning": f"refuter says {i}\non two lines", "overturn": False}},
            ],
            "evidence": None if smells is None else {"gold_smells": smells, "witness": WITNESS},
        }
    )


WITNESS = {
    "kind": "tie",
    "reason": "ties",
    "label": "+1 row",
    "changes": [{"op": "delete", "table": "t", "rowid": 1, "row": {"name": "a"}}],
    "pred_result": {"columns": ["name"], "row_count": 0, "rows": []},
    "gold_result": {"columns": ["name"], "row_count": 1, "rows": [["b"]]},
    "comparison": "values: 0 predicted vs 1 gold rows; the rows differ",
}

RECORDS = [
    _rec(1),  # nothing to audit
    _rec(2, {"goldx": True, "goldx_confidence": 0.9, "ambq": False, "ambiguity": "none"}),
    _rec(3, {"goldx": False, "ambq": True, "ambiguity": "question"}),
    _rec(4, smells=[{"name": "limit_tie", "detail": "LIMIT 1 cuts through 3 tied rows"}]),
    _rec(5, {"goldx": False, "ambq": False}, smells=[]),  # judged, nothing flagged
]


def test_reasons() -> None:
    assert [reasons(r) for r in RECORDS] == [[], ["goldx"], ["ambq"], ["smell:limit_tie"], []]


def test_cli_audit_writes_jsonl_and_csv(tmp_path: Path) -> None:
    run = tmp_path / "sys"
    run.mkdir()
    write_records(run, RECORDS)
    res = CliRunner().invoke(main, ["audit", str(run), "--out", str(tmp_path / "audit")])
    assert res.exit_code == 0, res.output
    assert "3 flagged items" in res.stdout
    lines = [json.loads(x) for x in (tmp_path / "audit" / "audit.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == [2, 3, 4]
    gx = lines[0]
    assert (gx["system"], gx["goldx"], gx["goldx_confidence"], gx["reasons"]) == ("sys", True, 0.9, ["goldx"])
    assert gx["refuter_reasoning"] == "refuter says 2\non two lines" and gx["prover_reasoning"] == "prover says 2"
    assert gx["gold_sql"] == "SELECT name FROM t LIMIT 1" and gx["bird_ex"] == 0
    assert lines[2]["gold_smells"][0]["name"] == "limit_tie" and lines[2]["witness"]["reason"] == "ties"
    with (tmp_path / "audit" / "audit.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(CSV_COLUMNS) and len(rows) == 3
    assert rows[1]["reasons"] == "ambq" and rows[1]["ambiguity"] == "question"
    assert rows[2]["gold_smells"] == "limit_tie: LIMIT 1 cuts through 3 tied rows"
    assert rows[0]["question"] == "question 2, with a comma" and rows[0]["refuter_reasoning"].endswith("two lines")
    # a witness written without a grade (an older layout) reads as ungraded, and plausible as it counted
    assert json.loads(rows[2]["witness"]) == {**WITNESS, "caveats": [], "plausible": True, "plausibility": UNGRADED}


def test_several_runs(tmp_path: Path) -> None:
    odd = _rec(9, smells=[{"name": "nulls_first", "detail": "NULL first"}])
    for name, recs in (("a", RECORDS), ("b", [odd])):
        write_records(tmp_path / name, recs)
    rows = audit_rows([load_run(tmp_path / "a"), load_run(tmp_path / "b")])
    assert [(r.system, r.record.id) for r in rows] == [("a", 2), ("a", 3), ("a", 4), ("b", 9)]
    assert rows[-1].reasons == ["smell:nulls_first"]
