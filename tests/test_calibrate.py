"""``rose calibrate``: ROSE-VEC's items whose databases are here (superhero, student_club, toxicology), judged
by scripted judges under the real openai client (:class:`~rose_sql.testing.MockOpenAI`: the wire is not what
is tested here); cards and the upgrade rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rose_sql.analysis.labelled import labelled_source, rose_vec_sources, select
from rose_sql.cli.calibrate import RUN_OPTIONS, calibrate_cmd
from rose_sql.cli.main import main
from rose_sql.cli.run import run_cmd
from rose_sql.engines import Source
from rose_sql.testing import MockOpenAI, Reply, by_content

ENV = {"OPENAI_API_KEY": "t"}
HERE = {"superhero", "student_club", "toxicology"}
"""The BIRD dev databases of the shared data."""
PROVER = {"expected_answer": "e", "sql_behaviour": "b", "reasoning": "r", "answers_question": True}
REFUTER = {"reasoning": "r", "overturn": False, "ambiguity": "none", "gold_correct": True}


@pytest.fixture(scope="module")
def present(shared: Path) -> list[dict[str, Any]]:
    """The ROSE-VEC BIRD items whose databases the shared data holds (77: superhero 23, student_club 24,
    toxicology 30)."""
    items = json.loads((shared / "rose-vec" / "rose-vec-bird.json").read_text())
    return [x for x in items if x["db_id"] in HERE]


def oracle(items: list[dict[str, Any]]) -> Any:
    """A judge that knows the experts' label of each item (found by its question in the prompt)."""
    labels = {x["question"]: bool(x["label"]) for x in items}

    def reply(text: str) -> Reply:
        correct = next(v for q, v in labels.items() if q in text)
        if "Reference SQL" in text:
            return Reply(content=json.dumps({**REFUTER, "overturn": not correct}))
        return Reply(content=json.dumps({**PROVER, "answers_question": correct}))

    return by_content(reply)


def always_pass(text: str) -> Reply:
    return Reply(content=json.dumps(REFUTER if "Reference SQL" in text else PROVER))


def calibrate(shared: Path, srv: MockOpenAI, out: Path, *extra: str) -> Any:
    args = [
        "calibrate",
        "--rose-vec",
        str(shared / "rose-vec"),
        "--db",
        str(shared / "bird"),
        "--out",
        str(out),
        "--judge-model",
        "gpt-4o-mini",
        "--judge-base-url",
        srv.base_url,
        "--no-cache",
        "--evidence-steps",
        "20000",
        "--bootstrap",
        "50",
        "--date",
        "2026-12",
        *extra,
    ]
    return CliRunner().invoke(main, args, env=ENV, catch_exceptions=False)


def test_reuses_run_options() -> None:
    """calibrate offers rose run's own option objects, with no name used twice."""
    names = [o for p in calibrate_cmd.params for o in p.opts]
    assert len(names) == len(set(names))
    assert all(any(p is q for q in run_cmd.params) for p in RUN_OPTIONS)
    assert {"--judge-model", "--judge-base-url", "--budget", "--dry-run", "--db"} <= set(names)


def test_select_keeps_items_whose_database_exists(shared: Path) -> None:
    bird, spider = (select(s, Source.folder(shared / "bird")) for s in rose_vec_sources(shared / "rose-vec"))
    assert (len(bird.kept), bird.total, bird.missing["card_games"]) == (77, 322, 49)
    assert {x["db_id"] for x in bird.kept} == HERE
    assert set(bird.source.tags) == {"goldx", "ambq"}
    assert (len(spider.kept), spider.skipped) == (0, 263)


def test_calibrate_cards_and_upgrade_rule(shared: Path, present: list[dict[str, Any]], tmp_path: Path) -> None:
    with MockOpenAI(oracle(present)) as srv:
        first = calibrate(shared, srv, tmp_path / "oracle")
        assert first.exit_code == 0, first.output
        assert srv.calls > 0
    assert (
        "rose-vec-bird: 77 of 322 items kept (databases present: student_club, superhero, toxicology); 245 skipped"
        in first.output
    )
    assert "rose-vec-spider: 0 of 263 items kept; 263 skipped" in first.output
    card_path = tmp_path / "oracle" / "ROSE_gpt-4o-mini-202612.json"
    card = json.loads(card_path.read_text())
    assert card["validation_set"]["name"] == "ROSE-VEC"
    assert card["validation_set"]["subsets"][0]["items"] == 77
    assert card["agreement"]["n"] == 77 and "ci95" in card["agreement"]
    # the tag lists were cut down to the kept items, so nothing is reported as outside the set
    assert "lacks" not in first.output

    # a judge that passes everything, compared with the oracle's card by the upgrade rule
    with MockOpenAI(by_content(always_pass)) as srv:
        second = calibrate(shared, srv, tmp_path / "pass", "--card", str(card_path))
        assert second.exit_code == 0, second.output
    assert "Keep using the current judge, ROSE_gpt-4o-mini-202612" in second.output
    assert "is not better on kappa, accuracy, MCC, F1" in second.output
    verdict = json.loads((tmp_path / "pass" / "verdict.json").read_text())
    assert verdict["upgrade"] is False
    new = json.loads((tmp_path / "pass" / "ROSE_gpt-4o-mini-202612.json").read_text())
    assert new["validation_set"]["sha256"] == card["validation_set"]["sha256"]
    assert new["agreement"]["kappa"] < card["agreement"]["kappa"]

    # the other way round the oracle replaces the always-pass judge
    pass_card = tmp_path / "pass" / "ROSE_gpt-4o-mini-202612.json"
    with MockOpenAI(oracle(present)) as srv:
        third = calibrate(shared, srv, tmp_path / "oracle-again", "--card", str(pass_card))
        assert third.exit_code == 0, third.output
    assert "Use the new judge, ROSE_gpt-4o-mini-202612" in third.output
    assert json.loads((tmp_path / "oracle-again" / "verdict.json").read_text())["upgrade"] is True
    assert CliRunner().invoke(main, ["judge-compare", str(pass_card), str(card_path)]).exit_code == 0


def test_dry_run_calls_nothing_and_writes_nothing(shared: Path, tmp_path: Path) -> None:
    with MockOpenAI(by_content(always_pass)) as srv:
        result = calibrate(shared, srv, tmp_path / "dry", "--dry-run")
        assert result.exit_code == 0, result.output
        assert srv.requests == [] and srv.http_requests == 0
    assert "Dry run: expected LLM usage (nothing was called)" in result.output
    assert "no run can cost more" in result.output
    assert "no judge was called, no card written" in result.output
    assert not (tmp_path / "dry").exists()


def test_labels_file_from_review_export(shared: Path, present: list[dict[str, Any]], tmp_path: Path) -> None:
    """A rose review export (ROSE-VEC format, id lists beside it) is read with its tags."""
    export = tmp_path / "validation" / "heroes"
    export.mkdir(parents=True)
    (export / "heroes.json").write_text(json.dumps(present[:6]))
    (export / "gold_false_ids.json").write_text(json.dumps([present[0]["question_id"]]))
    part = select(labelled_source(export / "heroes.json"), Source.folder(shared / "bird"))
    assert (len(part.kept), part.skipped, set(part.source.tags)) == (6, 0, {"goldx"})
    other = {"name": "ROSE_o3-202601", "validation_set": {"name": "ROSE-VEC", "sha256": "x"}}
    other["agreement"] = {"kappa": 80.0, "accuracy": 90.0, "mcc": 80.0, "f1": 90.0}
    (tmp_path / "old.json").write_text(json.dumps(other))
    with MockOpenAI(oracle(present)) as srv:
        args = ["calibrate", "--labels", str(export / "heroes.json"), "--db", str(shared / "bird")]
        args += ["--out", str(tmp_path / "c"), "--judge-model", "m", "--judge-base-url", srv.base_url, "--no-cache"]
        args += ["--card", str(tmp_path / "old.json")]
        result = CliRunner().invoke(main, [*args, "--bootstrap", "0", "--no-evidence"], env=ENV)
    assert result.exit_code == 0, result.output
    # a card measured on other items cannot be compared: said so, and the current judge stays
    assert "Cannot apply the upgrade rule" in result.output and "Keep using ROSE_o3-202601" in result.output
    card = json.loads(next((tmp_path / "c").glob("ROSE_m-*.json")).read_text())
    assert card["validation_set"]["name"] == "heroes" and card["agreement"]["n"] == 6


def test_a_judge_that_fails_leaves_a_card_of_what_was_scored_and_exit_3(
    shared: Path, present: list[dict[str, Any]], tmp_path: Path
) -> None:
    """Items the judge never answered are unscored in the agreement (counted), the card is written, and the
    command exits 3 as rose run does, rather than stopping before the card or passing as complete."""
    export = tmp_path / "heroes"
    export.mkdir()
    (export / "heroes.json").write_text(json.dumps(present[:6]))
    with MockOpenAI(lambda request, index: Reply(status=503, error="overloaded")) as srv:
        args = ["calibrate", "--labels", str(export / "heroes.json"), "--db", str(shared / "bird")]
        args += ["--out", str(tmp_path / "c"), "--judge-model", "m", "--judge-base-url", srv.base_url, "--no-cache"]
        result = CliRunner().invoke(main, [*args, "--bootstrap", "0", "--no-evidence", "--max-retries", "0"], env=ENV)
    assert result.exit_code == 3, result.output
    card = json.loads(next((tmp_path / "c").glob("ROSE_m-*.json")).read_text())
    assert card["agreement"]["unscored"] > 0 and card["agreement"]["n"] + card["agreement"]["unscored"] == 6
    assert "judge_error" in result.output


def test_refusals(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["calibrate", "--db", str(tmp_path), "--out", str(tmp_path / "o")], env=ENV)
    assert r.exit_code == 2 and "--rose-vec FOLDER or --labels FILE" in r.output
    args = ["calibrate", "--rose-vec", str(tmp_path), "--db", str(tmp_path), "--out", str(tmp_path / "o")]
    r = CliRunner().invoke(main, args, env=ENV)
    assert r.exit_code == 2 and "--judge-model" in r.output
