"""Import of the ROSE authors' outputs: the paper's figures reproduced exactly, replies kept, policies replayed."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from rose_sql.analysis.labels import load_labels
from rose_sql.analysis.replay import NO_EVIDENCE, replay, replay_table
from rose_sql.analysis.rose_import import import_outputs, write_run
from rose_sql.analysis.runs import load_run
from rose_sql.cli import main

PAPER = {  # ROSE paper, ROSE-VEC (o3): kappa, accuracy, MCC, F1
    "merged": {"kappa": 80.43, "accuracy": 91.79, "mcc": 81.04, "f1": 94.16, "n": 585},
    "rose-vec-bird": {"kappa": 80.68, "n": 322},
    "rose-vec-spider": {"kappa": 78.61, "n": 263},
}


def _invoke(*args: str) -> str:
    res = CliRunner().invoke(main, list(args))
    assert res.exit_code == 0, res.output
    return res.stdout


@pytest.fixture(scope="module")
def imported(shared: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The four reference folders imported through the CLI: {bird,spider} x {o3,ex}."""
    rv, out = shared / "rose-vec", tmp_path_factory.mktemp("imported")
    runs = {}
    for part in ("bird", "spider"):
        labels = str(rv / f"rose-vec-{part}.json")
        for name, folder in (("o3", "o3/ROSE"), ("ex", "decisive/EX")):
            target = out / f"{part}-{name}"
            _invoke(
                "import-rose",
                str(rv / "reference_outputs" / f"rose-vec-{part}" / folder),
                "--labels",
                labels,
                "--out",
                str(target),
            )
            runs[f"{part}-{name}"] = target
    return runs


def _agree(shared: Path, *pairs: tuple[Path, str]) -> dict[str, Any]:
    runs = [str(p) for p, _ in pairs]
    labels = [str(shared / "rose-vec" / f"rose-vec-{part}.json") for _, part in pairs]
    result: dict[str, Any] = json.loads(_invoke("agree", *runs, "--labels", *labels, "--json", "--bootstrap", "200"))
    return result


@pytest.mark.slow
def test_paper_figures_reproduced_exactly(shared: Path, imported: dict[str, Path]) -> None:
    merged = _agree(shared, (imported["bird-o3"], "bird"), (imported["spider-o3"], "spider"))
    assert {k: merged[k] for k in PAPER["merged"]} == PAPER["merged"]
    assert merged["unscored"] == 0 and merged["unreviewed"] == 50  # the 50 'ex' items count, as labelled true
    assert merged["confusion"] == {"tp": 387, "fp": 9, "fn": 39, "tn": 150}
    for part in ("bird", "spider"):
        sub = merged["subsets"][f"rose-vec-{part}"]
        assert {k: sub[k] for k in PAPER[f"rose-vec-{part}"]} == PAPER[f"rose-vec-{part}"]
        alone = _agree(shared, (imported[f"{part}-o3"], part))
        assert alone["kappa"] == PAPER[f"rose-vec-{part}"]["kappa"]
    ex = _agree(shared, (imported["bird-ex"], "bird"), (imported["spider-ex"], "spider"))
    assert (ex["kappa"], ex["n"], ex["unscored"]) == (25.56, 585, 0)


@pytest.mark.slow
def test_records_keep_their_replies_and_flags(imported: dict[str, Path]) -> None:
    run = load_run(imported["bird-o3"])
    by_id = {r.id: r for r in run.records}
    assert len(by_id) == 322 and all(r.db_id for r in run.records)
    first = by_id[41]  # Prover said false: one call, decided by the Prover
    assert [c.stage for c in first.judges] == ["prover"] and first.decided_by == "prover"
    assert first.judges[0].model == "o3" and json.loads(first.judges[0].raw)["verdict"] is False
    calls = sum(len(r.judges) for r in run.records)
    assert calls == 235 + 233 and run.summary is not None and run.summary.llm.calls_per_item == 1.4534
    assert sum(r.labels.goldx is True for r in run.records) == 35  # gold_correct false
    assert sum(r.labels.ambq is True for r in run.records) == 16  # "ambiguous question" only
    # their EX, found beside the run, is theirs: never our BIRD EX reading
    assert all(r.imported is not None and r.imported.ex is not None for r in run.records)
    assert all(r.readings.bird_ex is None for r in run.records)
    assert run.summary.judge.model == "o3" and run.summary.judge.matched_refuter == "always"


@pytest.mark.slow
def test_replay_table(shared: Path, imported: dict[str, Path]) -> None:
    runs = [load_run(imported["bird-o3"]), load_run(imported["spider-o3"])]
    sets = [load_labels(shared / "rose-vec" / f"rose-vec-{p}.json") for p in ("bird", "spider")]
    table = {row.policy: row for row in replay_table(runs, sets, ["always", "never", "no-refuter"], "exclude")}
    assert table["recorded"].kappa == table["always"].kappa == 80.43
    # the 6 Refuter overturns on matching results were all wrong: skipping it there helps
    assert (table["never"].kappa, table["never"].subsets) == (82.68, {"rose-vec-bird": 83.82, "rose-vec-spider": 79.6})
    assert table["no-refuter"].kappa == 65.06
    assert all(row.unscored == 0 for row in table.values())


@pytest.mark.slow
def test_import_with_replay_writes_the_variant(shared: Path, tmp_path: Path) -> None:
    rv = shared / "rose-vec"
    out = tmp_path / "never"
    _invoke(
        "import-rose",
        str(rv / "reference_outputs/rose-vec-spider/o3/ROSE"),
        "--labels",
        str(rv / "rose-vec-spider.json"),
        "--out",
        str(out),
        "--replay",
        "never",
    )
    result = _agree(shared, (out, "spider"))
    assert result["kappa"] == 79.6
    again = CliRunner().invoke(
        main,
        [
            "import-rose",
            str(rv / "reference_outputs/rose-vec-spider/o3/ROSE"),
            "--labels",
            str(rv / "rose-vec-spider.json"),
            "--out",
            str(out),
        ],
    )
    assert again.exit_code == 2 and "--force" in again.output


# --------------------------------------------------------------------------- offline, synthetic outputs


def _item(qid: int, score: float, pv: bool | None, rv: bool | None) -> dict[str, Any]:
    return {
        "question_id": qid,
        "question": f"q{qid}",
        "evidence": "",
        "gold_sql": "SELECT 1",
        "predicted_sql": "SELECT 1",
        "score": score,
        "prover_result": pv,
        "refuter_result": rv,
        "label": True,
    }


def _prover(qid: int, verdict: bool) -> dict[str, Any]:
    return {
        "question_id": qid,
        "result": {"expected_answer": "e", "sql_description": "d", "reason": f"r{qid}", "verdict": verdict},
    }


def _refuter(qid: int, verdict: bool, ambiguity: str = "na", gold: bool = True) -> dict[str, Any]:
    return {
        "question_id": qid,
        "result": {"judgement": f"j{qid}", "verdict": verdict, "ambiguity": ambiguity, "gold_correct": gold},
    }


@pytest.fixture
def outputs(tmp_path: Path) -> tuple[Path, Path]:
    """A tiny ROSE output folder laid out like the reference one, with its labels."""
    root = tmp_path / "ref" / "part" / "m1" / "ROSE"
    root.mkdir(parents=True)
    items = [
        _item(1, 1.0, None, False),  # match, Refuter upholds
        _item(2, 0.0, None, True),  # match, Refuter overturns
        _item(3, 0.0, False, None),  # differ, Prover rejects (it said true once, then false on retry)
        _item(4, 1.0, True, False),  # differ, Prover passes, Refuter upholds
        _item(5, 0.0, None, None),  # the prediction did not execute
    ]
    (root / "eval_results.json").write_text(json.dumps(items))
    provers = [_prover(3, True), _prover(3, False), _prover(4, True)]
    (root / "prover_output.json").write_text(json.dumps(provers))
    refuters = [
        _refuter(1, False, "ambiguous question"),
        _refuter(2, True, gold=False),
        _refuter(3, True),
        _refuter(4, False, "ambiguous schema"),
    ]
    (root / "refuter_output.json").write_text(json.dumps(refuters))
    ex = root.parent.parent / "decisive" / "EX"
    ex.mkdir(parents=True)
    (ex / "eval_results.json").write_text(json.dumps([{"question_id": i, "score": float(i < 3)} for i in range(1, 6)]))
    labels = tmp_path / "labels.json"
    labels.write_text(
        json.dumps(
            [
                {
                    "question_id": i,
                    "db_id": "db",
                    "question": "q",
                    "predicted_sql": "p",
                    "gold_sql": "g",
                    "label": i != 2,
                }
                for i in range(1, 7)
            ]
        )
    )
    return root, labels


def test_synthetic_import_recovers_the_flow(outputs: tuple[Path, Path], tmp_path: Path) -> None:
    root, labels = outputs
    imp = import_outputs(root, load_labels(labels))
    assert imp.kind == "rose" and imp.model == "m1" and not [w for w in imp.warnings if "their score" in w]
    assert imp.variant == "always"
    recs = {r.id: r for r in imp.records}
    assert [recs[i].score for i in range(1, 7)] == [1, 0, 0, 1, 0, None]
    assert [recs[i].decided_by for i in range(1, 6)] == ["refuter", "refuter", "prover", "refuter", "execution"]
    assert recs[6].unscored_reason == "absent_from_outputs"  # labelled but missing: unscored, not dropped
    assert [c.stage for c in recs[3].judges] == ["prover"]  # the retry's Refuter reply is not this score's
    assert recs[3].judges[0].reply.answers_question is False
    assert (recs[1].labels.ambq, recs[2].labels.goldx, recs[4].labels.ambq) == (True, True, False)
    assert recs[4].labels.ambiguity == "schema" and recs[5].labels.goldx is None
    assert [recs[i].imported.ex for i in range(1, 6)] == [1, 1, 0, 0, 0]  # type: ignore[union-attr]
    assert all(r.readings.bird_ex is None for r in recs.values())
    summary = write_run(imp, tmp_path / "run")
    assert (summary.n, summary.scored, summary.unscored) == (6, 5, {"absent_from_outputs": 1})


def test_replay_variants_on_synthetic_records(outputs: tuple[Path, Path], tmp_path: Path) -> None:
    root, labels = outputs
    write_run(import_outputs(root, load_labels(labels)), tmp_path / "run")
    recs = {r.id: r for r in load_run(tmp_path / "run").records}
    assert replay(recs[2], "never").score == 1  # the matched overturn is not asked for
    assert replay(recs[2], "never").decided_by == "execution"
    assert replay(recs[4], "no-refuter").decided_by == "prover"
    assert replay(recs[5], "never").score == 0
    assert replay(recs[6], "always").unscored_reason == "absent_from_outputs"
    no_refuter_reply = replace(recs[1], judges=[])
    assert replay(no_refuter_reply, "always").unscored_reason == "not_replayable"
    assert replay(no_refuter_reply, "never").score == 1


def test_replay_of_imported_records_says_they_carry_no_evidence(outputs: tuple[Path, Path], tmp_path: Path) -> None:
    """Imported records keep no doubts and no evidence: their ``evidence`` row equals ``never``, and says why."""
    root, labels = outputs
    write_run(import_outputs(root, load_labels(labels)), tmp_path / "run")
    verdicts = tmp_path / "verdicts.json"  # id -> bool: the synthetic predictions are not the labels' texts
    verdicts.write_text(json.dumps({str(i): i != 2 for i in range(1, 7)}))
    args = ["replay", str(tmp_path / "run"), "--labels", str(verdicts), "--variants", "evidence,never"]
    text = " ".join(_invoke(*args).split())
    assert f"evidence: {NO_EVIDENCE}" in text
    assert "never: the records" not in text
    rows = {row["policy"]: row for row in json.loads(_invoke(*args, "--json"))}
    assert rows["evidence"]["note"] == NO_EVIDENCE and rows["never"]["note"] is None
    assert {k: v for k, v in rows["evidence"].items() if k not in ("policy", "note")} == {
        k: v for k, v in rows["never"].items() if k not in ("policy", "note")
    }


def test_a_score_contradicting_the_replies_is_reported(outputs: tuple[Path, Path]) -> None:
    root, labels = outputs
    items = json.loads((root / "eval_results.json").read_text())
    items[0]["score"] = 0.0
    (root / "eval_results.json").write_text(json.dumps(items))
    imp = import_outputs(root, load_labels(labels))
    assert any("question 1: their score 0.0, although their stored replies give 1" in w for w in imp.warnings)
    first = next(r for r in imp.records if r.id == 1)
    assert (first.score, first.decided_by) == (0, "imported")  # what they published stands, and says why
    never = next(r for r in import_outputs(root, load_labels(labels), variant="never").records if r.id == 1)
    assert (never.score, never.decided_by) == (1, "execution")


def test_scores_only_folders_import_as_scores(outputs: tuple[Path, Path]) -> None:
    root, labels = outputs
    imp = import_outputs(root.parent.parent / "decisive" / "EX", load_labels(labels))
    assert imp.kind == "scores" and (imp.model, imp.method) == (None, "EX")  # a deterministic method: no judge
    assert [r.score for r in imp.records][:5] == [1, 1, 0, 0, 0] and imp.records[0].readings.bird_ex is None
    assert imp.records[0].imported is not None and imp.records[0].imported.ex == 1


# --------------------------------------------------------------------------- replaying our own judged runs


def test_replay_and_card_of_a_judged_run(tmp_path: Path, make_db: Any) -> None:
    """A run judged under the paper's policy (scripted endpoint) replays to the same scores, and to others."""
    from rose_sql.testing import MockOpenAI, Reply, by_content

    db = make_db("CREATE TABLE p (name TEXT, age INT); INSERT INTO p VALUES ('a', 20), ('b', 30), ('c', 40);", "t")
    gold = "SELECT name FROM p WHERE age > 25"
    preds = {
        1: gold,
        2: "SELECT name, age FROM p WHERE age > 25",
        3: "SELECT name FROM p",
        4: gold,
        5: "SELECT nam FROM p",
    }
    notes = {3: "[no]", 4: "[overturn]"}
    items = tmp_path / "items.jsonl"
    items.write_text(
        "".join(
            json.dumps({"id": i, "db_id": "t", "question": f"Q{i} {notes.get(i, '')}", "gold_sql": gold, "pred_sql": p})
            + "\n"
            for i, p in preds.items()
        )
    )

    def judge(text: str) -> Reply:
        if "Reference SQL" in text:
            body = {"reasoning": "r", "overturn": "[overturn]" in text, "ambiguity": "none", "gold_correct": True}
        else:
            body = {
                "expected_answer": "e",
                "sql_behaviour": "b",
                "reasoning": "r",
                "answers_question": "[no]" not in text,
            }
        return Reply(content=json.dumps(body))

    with MockOpenAI(by_content(judge)) as srv:
        args = [
            "run",
            str(items),
            "--db-root",
            str(db.parent.parent),
            "--out",
            str(tmp_path / "out"),
            "--judge-model",
            "judge-m",
            "--judge-base-url",
            srv.base_url,
            "--no-cache",
            "--policy",
            "paper",
        ]
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "out" / "items")
    recorded = {r.id: r.score for r in run.records}
    assert recorded == {1: 1, 2: 1, 3: 0, 4: 0, 5: 0}
    assert {r.id: replay(r, "always").score for r in run.records} == recorded
    assert {r.id: replay(r, "never").score for r in run.records} == {**recorded, 4: 1}  # matched: no Refuter
    by_id = {r.id: r for r in run.records}  # records are in the order items finished
    assert replay(by_id[2], "no-refuter").decided_by == "prover"
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"1": True, "2": True, "3": False, "4": True, "5": False}))
    sets = [load_labels(labels)]
    table = {row.policy: row for row in replay_table([run], sets, ["always", "never", "evidence"], "exclude")}
    assert table["evidence"].note is None  # the run kept its doubts: the evidence policy is its own
    assert (table["recorded"].accuracy, table["always"].accuracy, table["never"].accuracy) == (
        80.0,
        80.0,
        100.0,
    )
    card_path = tmp_path / "card.json"
    res = CliRunner().invoke(
        main,
        [
            "judge-card",
            str(tmp_path / "out" / "items"),
            "--labels",
            str(labels),
            "--validation-set",
            "tiny",
            "--date",
            "2026-02",
            "--out",
            str(card_path),
        ],
    )
    assert res.exit_code == 0, res.output
    card = json.loads(card_path.read_text())
    assert card["name"] == "ROSE_judge-m-202602" and card["provider"] == urlsplit(srv.base_url).hostname  # its host
    assert set(card["prompts"]) == {"prover", "refuter", "refuter_matched"}
    assert card["parameters"]["matched_refuter"] == "always" and card["parameters"]["temperature"] == 0.0
