"""Our run beside their import (rose join): every EX disagreement with its cause, our evidence on their
matches, their verdicts under our policies. A few real items end to end; the rest by hand-made records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import make_record, write_records

from rose_sql.analysis.join import OURS_DIFFER, join, joined_record
from rose_sql.analysis.runs import Run, load_run
from rose_sql.cli import main
from rose_sql.evidence.doubts import EMPTY


def _invoke(*args: str) -> str:
    res = CliRunner().invoke(main, list(args))
    assert res.exit_code == 0, res.output
    return res.output


@pytest.mark.parametrize(
    ("system", "ids", "causes"),
    [
        ("gpt-5", ["736", "1389", "1390"], {"736": ["gold_differs"], "1389": ["gold_differs"]}),
        ("codes-15b", ["263", "212"], {"263": ["database_differs"]}),
    ],
)
def test_real_items_joined_with_their_causes(
    shared: Path, tmp_path: Path, system: str, ids: list[str], causes: dict[str, list[str]]
) -> None:
    """gpt-5's 736 and 1389 were judged against a gold that is not mini-dev's; codes-15b's 263 agrees with
    the gold on mini-dev's edited toxicology and not on BIRD dev's, which is the one here."""
    (tmp_path / "ids.txt").write_text("\n".join(ids))
    preds = tmp_path / "preds" / f"{system}.json"
    preds.parent.mkdir()
    preds.symlink_to(shared / "preds" / "bird-minidev" / f"{system}-result.json")
    bird = shared / "bird"
    _invoke(
        "run",
        str(preds),
        "--gold",
        str(bird / "mini_dev_sqlite.json"),
        "--db-root",
        str(bird),
        "--out",
        str(tmp_path / "ours"),
        "--ids",
        str(tmp_path / "ids.txt"),
        "--workers",
        "1",
        "--no-evidence",
    )
    outputs = shared / "rose-reeval" / system / f"o3-{system}-eval"
    _invoke("import-rose", str(outputs), "--benchmark", str(bird), "--out", str(tmp_path / "theirs" / system))
    out = _invoke("join", str(tmp_path / "ours"), str(tmp_path / "theirs"), "--json", str(tmp_path / "j.json"))
    assert "Every disagreement, with its cause" in out
    [result] = json.loads((tmp_path / "j.json").read_text())
    assert result["joined"] == len(ids)
    assert {d["id"]: d["causes"] for d in result["disagreements"]} == causes
    assert result["ex_agree"] == len(ids) - len(causes)


def _ours(i: int, ex: int, equal: bool, **extra: Any) -> dict[str, Any]:
    return {
        "id": i,
        "db_id": "d",
        "score": None,
        "unscored_reason": "awaiting_judge",
        "readings": {"bird_ex": ex},
        "comparison": {"equal": equal, "reason": "same" if equal else "values", "detail": "rows differ"},
        "pred": {"status": "ok", "seconds": 0.0, "row_count": 1},
        "gold": {"status": "ok", "seconds": 0.0, "row_count": 0 if i == 3 else 1},
        "gold_sql": "SELECT a FROM t",
        "pred_sql": "SELECT a FROM t",
        "question": "q",
        **extra,
    }


def _theirs(i: int, ex: int, equal: bool, overturn: bool | None, score: int, **extra: Any) -> dict[str, Any]:
    judges: list[dict[str, Any]] = [] if equal else [{"stage": "prover", "reply": {"answers_question": False}}]
    if overturn is not None:
        judges.append({"stage": "refuter", "reply": {"overturn": overturn}})
    return {
        "id": i,
        "db_id": "d",
        "score": score,
        "decided_by": "refuter" if judges else "prover",
        "readings": {},
        "comparison": {"equal": equal, "reason": "imported", "detail": "theirs"},
        "pred": {"status": "ok", "seconds": 0.0},
        "gold": {"status": "ok", "seconds": 0.0},
        "gold_sql": "SELECT a FROM t",
        "pred_sql": "SELECT a FROM t",
        "question": "q",
        "judges": judges,
        "imported": {"method": "ROSE", "score": score, "ex": ex},
        **extra,
    }


def test_join_by_hand() -> None:
    ours = Run(
        "s",
        Path("s"),
        [
            make_record(_ours(1, 1, True)),
            make_record(_ours(2, 1, True)),  # their Refuter overturned a match our evidence does not question
            make_record(_ours(3, 1, True)),  # both results empty: a cheap doubt
            make_record(_ours(4, 0, False)),  # their comparator matched, ours did not
            make_record(_ours(5, 1, True, gold_sql="SELECT b FROM t")),  # we ran another gold
            make_record(_ours(6, 1, True)),  # their run has no entry for it
        ],
    )
    theirs = Run(
        "s",
        Path("t"),
        [
            make_record(_theirs(1, 1, True, False, 1)),
            make_record(_theirs(2, 1, True, True, 0)),
            make_record(_theirs(3, 1, True, True, 0)),
            make_record(_theirs(4, 1, True, False, 1)),
            make_record(_theirs(5, 0, False, None, 0)),
            make_record({"id": 6, "score": None, "unscored_reason": "failed_in_their_run"}),
        ],
    )
    result, joined = join(ours, theirs, ["always", "evidence", "never"])
    assert (result.joined, result.ours_only, result.ex_agree) == (5, 1, 3)
    causes = {d.id: d.causes for d in result.disagreements}
    assert causes == {"4": ["unexplained"], "5": ["gold_differs"]}
    m = result.matched
    assert (m.matched, m.ours_equal, m.ours_differ, m.doubts, m.questioned) == (4, 3, 1, 1, 2)
    assert (m.overturned, m.overturned_questioned) == (2, 1)
    assert joined[2].doubts == [EMPTY] and joined[3].doubts[0].startswith(OURS_DIFFER)  # type: ignore[index]
    assert joined[0].readings.bird_ex == 1 and joined[0].imported is not None  # ours beside theirs
    assert len(joined) == 6 and joined[5] == theirs.records[5]  # their items ours lacks stay as they were
    # recorded and always: 1, 4 pass (2, 3 overturned, 5 rejected); evidence asks the Refuter on 3 and 4 only,
    # so 2's overturn is dropped; never drops every overturn
    assert result.policies == {"recorded": (2, 5), "always": (2, 5), "evidence": (3, 5), "never": (4, 5)}


def test_joined_record_keeps_theirs_and_adds_ours() -> None:
    o, t = make_record(_ours(3, 1, True)), make_record(_theirs(3, 1, True, True, 0))
    j = joined_record(o, t)
    assert (j.score, j.judges, j.imported, j.comparison) == (t.score, t.judges, t.imported, t.comparison)
    assert (j.readings, j.evidence, j.doubts) == (o.readings, o.evidence, [EMPTY])


def test_join_cli_refuses_our_own_runs_as_theirs(tmp_path: Path) -> None:
    write_records(tmp_path / "a" / "s", [make_record(_ours(1, 1, True))])
    res = CliRunner().invoke(main, ["join", str(tmp_path / "a"), str(tmp_path / "a")])
    assert res.exit_code == 2 and "not an import" in res.output
    write_records(tmp_path / "a" / "s2", [make_record(_ours(1, 1, True))])
    write_records(tmp_path / "b" / "other", [make_record(_theirs(1, 1, True, False, 1))])
    res = CliRunner().invoke(main, ["join", str(tmp_path / "a"), str(tmp_path / "b")])
    assert res.exit_code == 2 and "no system name is on both sides" in res.output
    assert load_run(tmp_path / "b" / "other").records[0].imported is not None


def test_rows_duplicated_differently_are_named_as_the_cause() -> None:
    """BIRD EX compares sets of rows: a prediction that repeats rows the gold has once is 1 there; an EX that
    counts duplicates says 0 (ROSE-VEC 275, which the authors' EX scores 0)."""
    comparison = {"equal": False, "reason": "multiplicity", "detail": "the same distinct rows, duplicated differently"}
    ours = Run("s", Path("s"), [make_record(_ours(1, 1, False, comparison=comparison))])
    theirs = Run("s", Path("t"), [make_record(_theirs(1, 0, False, None, 0))])
    result, _ = join(ours, theirs, [])
    [d] = result.disagreements
    assert d.causes == ["duplicates"] and d.detail.startswith("the same distinct rows, duplicated differently")
