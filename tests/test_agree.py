"""Agreement metrics on hand-computed tables, label formats, pairing (unscored never dropped), bootstrap, CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import make_record, write_records

from rose_sql.analysis.agree import Confusion, agree, block, kappa, metrics, pair, pair_runs, pairing_warnings
from rose_sql.analysis.labels import load_labels, reviewed_only, with_tags
from rose_sql.analysis.runs import Run, load_run
from rose_sql.cli import main
from rose_sql.errors import InputError, UsageError
from rose_sql.record import Record

# (tp, fp, fn, tn) -> kappa, accuracy, mcc, f1, precision, recall, all in percent, computed by hand:
# 20/5/10/15: po = 35/50, pe = (25*30 + 25*20)/2500 = .5, kappa = (.7-.5)/.5; MCC = 250/sqrt(25*30*20*25)
TABLES: list[tuple[tuple[int, int, int, int], dict[str, float | None]]] = [
    ((20, 5, 10, 15), {"kappa": 40.0, "accuracy": 70.0, "mcc": 40.82, "f1": 72.73, "precision": 80.0, "recall": 66.67}),
    ((3, 0, 0, 2), {"kappa": 100.0, "accuracy": 100.0, "mcc": 100.0, "f1": 100.0, "precision": 100.0, "recall": 100.0}),
    ((0, 2, 3, 0), {"kappa": -100.0 * 12 / 13, "accuracy": 0.0, "mcc": -100.0, "f1": 0.0, "precision": 0.0}),
    # a constant judge agreeing with constant experts: chance agreement is total, kappa undefined; MCC 0 by convention
    ((4, 0, 0, 0), {"kappa": None, "accuracy": 100.0, "mcc": 0.0, "f1": 100.0, "precision": 100.0, "recall": 100.0}),
    # the judge rejects everything: precision undefined, F1 0
    ((0, 0, 3, 2), {"kappa": 0.0, "accuracy": 40.0, "mcc": 0.0, "f1": 0.0, "precision": None, "recall": 0.0}),
    ((0, 0, 0, 0), {"kappa": None, "accuracy": None, "mcc": None, "f1": None, "precision": None, "recall": None}),
]


@pytest.mark.parametrize(("cells", "expected"), TABLES, ids=[str(t[0]) for t in TABLES])
def test_metrics_on_hand_computed_tables(cells: tuple[int, int, int, int], expected: dict[str, float | None]) -> None:
    tp, fp, fn, tn = cells
    got = metrics(Confusion(tp=tp, fp=fp, fn=fn, tn=tn))
    for name, value in expected.items():
        assert got[name] == (None if value is None else round(value, 2)), name


def test_kappa_is_cohens_on_an_asymmetric_table() -> None:
    # 45 agree yes, 15 agree no, 25 judge-yes/expert-no, 15 judge-no/expert-yes (n = 100)
    c = Confusion(tp=45, fp=25, fn=15, tn=15)
    po, pe = 0.6, (70 * 60 + 30 * 40) / 100**2
    assert kappa(c) == pytest.approx((po - pe) / (1 - pe))


def test_confusion_of_pairs() -> None:
    c = Confusion.of([(True, True), (True, False), (False, True), (False, False), (True, True)])
    assert (c.tp, c.fn, c.fp, c.tn, c.n) == (2, 1, 1, 1, 5)


# --------------------------------------------------------------------------- labels


def _write(path: Path, data: Any) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_rose_vec_labels_mark_unreviewed_items(tmp_path: Path) -> None:
    items = [
        {"question_id": 1, "db_id": "d", "question": "q", "predicted_sql": "p", "gold_sql": "g", "label": True},
        {
            "question_id": 2,
            "db_id": "d",
            "question": "q",
            "predicted_sql": "p",
            "gold_sql": "g",
            "label": True,
            "ex": 1.0,
        },
        {"question_id": 3, "db_id": "d", "question": "q", "predicted_sql": "p", "gold_sql": "g", "label": False},
    ]
    ls = load_labels(_write(tmp_path / "part.json", items))
    assert ls.format == "rose-vec" and ls.name == "part"
    assert [ls.labels[k].reviewed for k in ("1", "2", "3")] == [True, False, True]
    assert [ls.labels[k].correct for k in ("1", "2", "3")] == [True, True, False]
    assert set(reviewed_only(ls).labels) == {"1", "3"}


def test_generic_label_formats(tmp_path: Path) -> None:
    a = load_labels(_write(tmp_path / "a.json", {"x1": True, "x2": False}))
    b = load_labels(_write(tmp_path / "b.jsonl", '{"id": "x1", "label": true}\n{"id": "x2", "label": 0}\n'))
    c = load_labels(_write(tmp_path / "c.csv", "id,label,goldx,ambq\nx1,yes,,\nx2,false,1,no\n"))
    for ls in (a, b, c):
        assert ls.format == "generic"
        assert (ls.labels["x1"].correct, ls.labels["x2"].correct) == (True, False)
    assert (c.labels["x2"].goldx, c.labels["x2"].ambq, c.labels["x1"].goldx) == (True, False, None)


def test_demo_expert_verdicts(tmp_path: Path) -> None:
    rows = [{"id": 1, "expert": "correct"}, {"id": 2, "expert": "incorrect"}, {"id": 3, "expert": "ambiguous"}]
    ls = load_labels(_write(tmp_path / "labels.jsonl", "".join(json.dumps(r) + "\n" for r in rows)))
    assert [(h.correct, h.ambq) for h in ls.labels.values()] == [(True, False), (False, False), (True, True)]


def test_malformed_labels_name_the_file_and_entry(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"bad\.csv:3: label 'maybe' is not a boolean"):
        load_labels(_write(tmp_path / "bad.csv", "id,label\n1,true\n2,maybe\n"))
    with pytest.raises(InputError, match="labelled twice"):
        load_labels(_write(tmp_path / "dup.jsonl", '{"id": 1, "label": true}\n{"id": "1", "label": false}\n'))
    with pytest.raises(InputError, match=r"broken\.json.*not JSON"):
        load_labels(_write(tmp_path / "broken.json", "[{"))


def test_id_lists_tag_every_item_of_the_set(tmp_path: Path) -> None:
    ls = load_labels(_write(tmp_path / "l.json", {"1": True, "2": True, "3": False}))
    tagged = with_tags(ls, "goldx", _write(tmp_path / "gx.json", [2, 99]))
    assert [tagged.labels[k].goldx for k in ("1", "2", "3")] == [False, True, False]
    assert tagged.tags_outside == {"goldx": ["99"]} and tagged.sha256 != ls.sha256
    assert tagged.tagged("goldx") and not tagged.tagged("ambq")


# --------------------------------------------------------------------------- pairing


def _rec(item_id: Any, score: int | None, reason: str | None = None, **labels: Any) -> Record:
    return make_record({"id": item_id, "score": score, "unscored_reason": reason, "labels": labels})


def _run(records: list[Record], name: str = "sys") -> Run:
    return Run(name, Path(name), records)


def test_unscored_and_absent_items_are_counted_not_dropped(tmp_path: Path) -> None:
    ls = load_labels(_write(tmp_path / "l.json", {"1": True, "2": False, "3": True, "4": True, "5": False}))
    run = _run([_rec(1, 1), _rec(2, 0), _rec(3, None, "judge_error"), _rec(5, 1), _rec(77, 1)])
    p = pair(run, ls)
    out = block(p.items, unlabelled=p.unlabelled, resamples=0)
    assert out.n == 3 and out.unscored == 2
    assert out.unscored_reasons == {"absent_from_run": 1, "judge_error": 1}
    assert out.unlabelled == 1 and out.confusion == Confusion(tp=1, fp=1, fn=0, tn=1)
    wrong = block(p.items, unscored="wrong", resamples=0)
    assert wrong.n == 5 and wrong.confusion == Confusion(tp=1, fp=1, fn=2, tn=1)
    assert wrong.unscored == 2 and wrong.unscored_counted_as == "wrong"


def test_pairing_needs_half_of_the_labelled_items_and_checks_databases(tmp_path: Path) -> None:
    labels = [{"id": i, "label": True, "db_id": "shop"} for i in range(1, 5)]
    ls = load_labels(_write(tmp_path / "l.json", labels))
    extra = [_rec(i, 1) for i in range(100, 200)]  # records without a label: a whole benchmark's run, fine
    (half,) = pair_runs([_run([_rec(1, 1), _rec(2, 0), *extra])], [ls])
    assert half.with_record == 2 and half.unlabelled == 100
    with pytest.raises(UsageError, match=r"only 1 of the 4 labelled items have a record.*ids 2, 3, 4"):
        pair_runs([_run([_rec(1, 1), *extra])], [ls])
    other = make_record({"id": 2, "score": 1, "db_id": "zoo"})
    with pytest.raises(UsageError, match="id 2: zoo in the run, shop in the labels"):
        pair_runs([_run([_rec(1, 1), other])], [ls])
    (p,) = pair_runs([_run([_rec(1, 1), _rec(3, 1), other])], [ls])
    assert [x.unscored_reason for x in p.items] == [None, "db_mismatch", None, "absent_from_run"]
    assert "counted as absent (db_mismatch)" in pairing_warnings([p])[-1]


def test_a_label_pairs_with_the_prediction_it_is_about(tmp_path: Path) -> None:
    """ROSE-VEC labels one system's prediction per question: another system's SQL for it is not labelled."""
    rows = [
        {"id": 1, "label": True, "db_id": "shop", "predicted_sql": "SELECT name FROM t WHERE x = 'Ab';"},
        {"id": 2, "label": False, "db_id": "shop", "predicted_sql": "SELECT count(*)\nFROM t"},
        {"id": 3, "label": True, "db_id": "shop", "predicted_sql": "SELECT 1"},
        {"id": 4, "label": True, "db_id": "shop", "predicted_sql": "SELECT 2"},
    ]
    ls = load_labels(_write(tmp_path / "l.json", rows))
    run = _run(
        [
            # the same SQL as written otherwise (case, whitespace, trailing semicolon) pairs
            make_record({"id": 1, "score": 1, "db_id": "shop", "pred_sql": "select  name from T where X = 'Ab'"}),
            make_record({"id": 2, "score": 0, "db_id": "shop", "pred_sql": "SELECT COUNT(*) FROM t;"}),
            # a literal's case is data: other SQL
            make_record({"id": 3, "score": 1, "db_id": "shop", "pred_sql": "SELECT 1 WHERE 'a' = 'A'"}),
            make_record({"id": 4, "score": 1, "db_id": "shop", "pred_sql": "SELECT 2"}),
        ]
    )
    (p,) = pair_runs([run], [ls])
    assert [x.unscored_reason for x in p.items] == [None, None, "sql_mismatch", None]
    assert p.other_sql == ["3"] and p.with_record == 3
    out = block(p.items, resamples=0)
    assert out.n == 3 and out.unscored_reasons == {"sql_mismatch": 1}
    assert any("1 labels of l are about another prediction" in w and "sql_mismatch" in w for w in pairing_warnings([p]))
    # fewer than half about the run's SQL: refused, naming the system when the file does
    ls2 = load_labels(_write(tmp_path / "l2.json", [{**r, "system": "alpha"} for r in rows]))
    others = [make_record({"id": i, "score": 1, "db_id": "shop", "pred_sql": f"SELECT {i + 10}"}) for i in (1, 2, 3)]
    with pytest.raises(UsageError, match=r"3 are about another prediction .*labels are about alpha.*ids 1, 2, 3"):
        pair_runs([_run([*others, make_record({"id": 4, "score": 1, "db_id": "shop", "pred_sql": "SELECT 2"})])], [ls2])
    # records without SQL (a scores file) pair by id alone, and say so
    (q,) = pair_runs([_run([_rec(i, 1) for i in (1, 2, 3, 4)])], [ls])
    assert q.with_record == 4 and q.unchecked_sql == 4
    assert any("paired with l's labels by id alone" in w for w in pairing_warnings([q]))


def test_rose_vec_labels_are_refused_for_another_systems_predictions(shared: Path, tmp_path: Path) -> None:
    """The symptom: alpha-SQL's superhero run read against ROSE-VEC's superhero labels, which are about other
    systems' SQL for 18 of the 23 questions, once gave a kappa over all 23; now only the 5 pair and it is refused."""
    bird = shared / "bird"
    labels = json.loads((shared / "rose-vec" / "rose-vec-bird.json").read_text(encoding="utf-8"))
    hero = [x for x in labels if x["db_id"] == "superhero"]
    ls = load_labels(_write(tmp_path / "rose-vec-superhero.json", hero))
    preds = json.loads((shared / "preds" / "bird-dev" / "alpha-result.json").read_text(encoding="utf-8"))
    items = tmp_path / "alpha.json"
    _write(items, [x for x in preds if x["db_id"] == "superhero"])
    res = CliRunner().invoke(main, ["run", str(items), "--db", str(bird), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "out" / "alpha")
    p = pair(run, ls)
    assert (len(p.items), p.with_record, len(p.other_sql)) == (23, 5, 18)
    res = CliRunner().invoke(main, ["agree", str(tmp_path / "out" / "alpha"), "--labels", str(ls.path)])
    assert res.exit_code == 2
    assert "only 5 of the 23 labelled items" in res.output and "18 are about another prediction" in res.output


def test_flag_precision_and_recall_against_tags(tmp_path: Path) -> None:
    ls = load_labels(_write(tmp_path / "l.json", {str(i): True for i in range(1, 7)}))
    ls = with_tags(ls, "goldx", _write(tmp_path / "gx.json", [1, 2, 3]))
    run = _run(
        [
            _rec(1, 1, goldx=True),
            _rec(2, 1, goldx=True),
            _rec(3, 1),
            _rec(4, 1, goldx=True),
            _rec(5, 1),
            _rec(6, 1, goldx=False),
        ]
    )
    flags = block(pair(run, ls).items, resamples=0).flags
    assert "ambq" not in flags  # no human AmbQ tags: nothing to measure
    gx = flags["goldx"]
    assert (gx.tagged, gx.flagged, gx.both, gx.items) == (3, 3, 2, 6)
    assert (gx.precision, gx.recall) == (66.67, 66.67)


def test_merged_agreement_and_subsets(tmp_path: Path) -> None:
    a = load_labels(_write(tmp_path / "a.json", {"1": True, "2": False}))
    b = load_labels(_write(tmp_path / "b.json", {"1": True, "2": True}))  # ids overlap a's: kept apart
    result = agree([pair(_run([_rec(1, 1), _rec(2, 0)]), a), pair(_run([_rec(1, 1), _rec(2, 0)]), b)], resamples=0)
    assert result.subsets["a"].agreement.metrics.accuracy == 100.0
    assert result.subsets["b"].agreement.metrics.accuracy == 50.0
    merged = result.merged
    assert merged.n == 4 and merged.metrics.accuracy == 75.0 and merged.confusion.fn == 1


def test_bootstrap_is_seeded_and_brackets_the_estimate(tmp_path: Path) -> None:
    labels = {str(i): i % 3 != 0 for i in range(60)}
    ls = load_labels(_write(tmp_path / "l.json", labels))
    run = _run([_rec(i, int((i % 3 != 0) != (i % 7 == 0))) for i in range(60)])
    p = [pair(run, ls)]
    one, two = agree(p, resamples=300, seed=1).merged, agree(p, resamples=300, seed=1).merged
    other = agree(p, resamples=300, seed=2).merged
    assert one.ci95 == two.ci95 and one.ci95 != other.ci95
    for m in ("kappa", "accuracy", "mcc", "f1"):
        interval, value = one.ci95[m], one.metrics.get(m)
        assert interval is not None and value is not None
        assert interval[0] <= value <= interval[1], m


# --------------------------------------------------------------------------- files and CLI


def _records_dir(path: Path, records: list[Record]) -> Path:
    return write_records(path, records)


def test_scores_files_are_runs_too(tmp_path: Path) -> None:
    assert [r.score for r in load_run(_write(tmp_path / "s.json", {"1": 1, "2": 0, "3": None})).records] == [
        1,
        0,
        None,
    ]
    csv_run = load_run(_write(tmp_path / "s.csv", "id,score\n1,1\n2,\n"))
    assert [(r.id, r.score, r.unscored_reason) for r in csv_run.records] == [
        ("1", 1, None),
        ("2", None, "no_score"),
    ]
    with pytest.raises(InputError, match=r"s2\.csv:2: score '0.5'"):
        load_run(_write(tmp_path / "s2.csv", "id,score\n1,0.5\n"))
    with pytest.raises(InputError, match=r"no records\.jsonl"):
        load_run(tmp_path)


def test_cli_agree_json_and_several_labels_after_one_flag(tmp_path: Path) -> None:
    a = _records_dir(tmp_path / "runA", [_rec(1, 1), _rec(2, 0), _rec(3, None, "gold_error")])
    b = _records_dir(tmp_path / "runB", [_rec(1, 1), _rec(2, 1)])
    la = _write(tmp_path / "la.json", {"1": True, "2": False, "3": True})
    lb = _write(tmp_path / "lb.json", {"1": True, "2": False})
    res = CliRunner().invoke(
        main, ["agree", str(a), str(b), "--labels", str(la), str(lb), "--json", "--bootstrap", "50"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["n"], out["unscored"], out["accuracy"]) == (4, 1, 75.0)
    assert set(out["subsets"]) == {"la", "lb"} and out["subsets"]["la"]["unscored_reasons"] == {"gold_error": 1}
    for key in ("kappa", "accuracy", "mcc", "f1", "n", "unscored"):
        assert key in out
    table = CliRunner().invoke(main, ["agree", str(a), str(b), "--labels", str(la), "--labels", str(lb)])
    assert table.exit_code == 0 and "merged" in table.output and "1 unscored (1 gold_error)" in table.output
    bad = CliRunner().invoke(main, ["agree", str(a), str(b), "--labels", str(la)])
    assert bad.exit_code == 2 and "2 runs but 1 labels files" in bad.output
    ambiguous = CliRunner().invoke(
        main, ["agree", str(a), str(b), "--labels", str(la), str(lb), "--goldx-ids", str(la)]
    )
    assert ambiguous.exit_code == 2 and "SUBSET=FILE" in ambiguous.output
