"""Votes, panels and the cheap-first policy end to end: the real openai client against a scripted
endpoint whose answers depend on the model asked and the seed of the sample, so votes split. The endpoint
is served under the client's transport (:class:`~rose_sql.testing.MockOpenAI`): what is tested is what is
asked and how the votes are counted, not the wire."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import rose, write_items

from rose_sql.cli import main
from rose_sql.engines import Source
from rose_sql.record import read_records
from rose_sql.testing import MockOpenAI, Reply, by_model
from rose_sql.testing.openai_server import RecordedRequest
from rose_sql.verdicts import ProverReply

GOLD = "SELECT name FROM player WHERE age > 25"
SEED = 20260101
PROVER = {"expected_answer": "e", "sql_behaviour": "b", "reasoning": "r", "answers_question": True}
REFUTER = {"reasoning": "r", "overturn": False, "ambiguity": "none", "gold_correct": True}


def item(i: int, pred: str, tags: str = "", gold: str = GOLD) -> dict[str, Any]:
    question = f"Question {i} {tags}"
    return {"id": i, "db_id": "league", "question": question, "evidence": "", "gold_sql": gold, "pred_sql": pred}


def judges(text: str, model: str, seed: int | None) -> Reply:
    """Scripted judges. Tags in the question decide; ``sample`` is the seed's offset from the base seed.

    - ``[split]``: the cheap Prover's sample 1 fails the prediction, samples 0 and 2 pass it (2 of 3);
    - ``[panel-split]``: the Prover of model ``judge-c`` fails it, the others pass it;
    - ``[unsure]``: the cheap model's Prover passes it but says it is 0.5 sure;
    - ``[overturn]``: the cheap model's Refuter overturns (the strong one, gpt-4o, upholds);
    - ``[goldx]``: the cheap model's Refuter flags the gold (the strong one too, surer).
    """
    sample = (seed or SEED) - SEED
    strong = model == "gpt-4o"
    if "Reference SQL" in text:  # the Refuter
        body: dict[str, Any] = dict(REFUTER)
        if "[overturn]" in text and not strong:
            body.update(overturn=True, label="missing_filter")
        if "[goldx]" in text:
            body.update(gold_correct=False, gold_confidence=0.9 if strong else 0.6)
        return Reply(content=json.dumps(body), prompt_tokens=1000, completion_tokens=100)
    body = dict(PROVER)
    if "[split]" in text and sample == 1 and not strong:
        body["answers_question"] = False
    if "[panel-split]" in text and model == "judge-c":
        body["answers_question"] = False
    if "[unsure]" in text and not strong:
        body["confidence"] = 0.5
    return Reply(content=json.dumps(body), prompt_tokens=1000, completion_tokens=100)


def run(tmp: Path, league: Path, srv: MockOpenAI, items: list[dict[str, Any]], *opts: str) -> Any:
    path = write_items(tmp / "items.jsonl", items)
    args = ["run", str(path), "--db-root", str(league), "--out", str(tmp / "out")]
    args += ["--judge-base-url", srv.base_url, "--cache-dir", str(tmp / "cache"), "--judge-timeout", "5", *opts]
    return rose(*args, code=0)


def records(tmp: Path) -> dict[Any, dict[str, Any]]:
    lines = (tmp / "out" / "items" / "records.jsonl").read_text().splitlines()
    return {r["id"]: r for r in map(json.loads, lines)}


def asked(requests: list[RecordedRequest]) -> Counter[tuple[int, str, str]]:
    """Requests per (item, stage, model), read from the server's log."""
    out: Counter[tuple[int, str, str]] = Counter()
    for r in requests:
        text = r.user_text
        i = int(text.split("Question ", 1)[1].split()[0])
        out[(i, "refuter" if "Reference SQL" in text else "prover", r.model)] += 1
    return out


def replay(tmp: Path, labels: dict[int, bool], *opts: str) -> list[dict[str, Any]]:
    path = tmp / "labels.json"
    path.write_text(json.dumps({str(k): v for k, v in labels.items()}))
    out = rose("replay", str(tmp / "out" / "items"), "--labels", str(path), "--json", *opts, code=0)
    rows: list[dict[str, Any]] = json.loads(out.output)
    return rows


DIFFERS = "SELECT name, age FROM player WHERE age > 25"  # another result: the Prover, then the Refuter


def test_three_samples_vote_and_replay_under_other_rules(tmp_path: Path, league: Path) -> None:
    items = [item(1, DIFFERS), item(2, DIFFERS, "[split]")]
    with MockOpenAI(by_model(judges)) as srv:
        run(tmp_path, league, srv, items, "--judge-model", "gpt-4o-mini", "--samples", "3")
        requests = srv.requests
    # each stage asked three samples at temperature 0.7, seeds base+0, base+1, base+2
    prover_params = sorted((r.body["seed"], r.body["temperature"]) for r in requests if "Question 2" in r.user_text)
    assert prover_params == sorted([(SEED + i, 0.7) for i in range(3)] * 2)
    assert asked(requests) == {(i, s, "gpt-4o-mini"): 3 for i in (1, 2) for s in ("prover", "refuter")}
    r = records(tmp_path)
    assert r[1]["score"] == 1 and r[2]["score"] == 1  # 2 of 3 pass: the majority passes
    prover = r[2]["votes"][0]
    assert (prover["stage"], prover["rule"], prover["verdict"], prover["votes"], prover["passes"]) == (
        "prover",
        "majority",
        "pass",
        3,
        2,
    )
    assert prover["agreement"] == prover["confidence"] == pytest.approx(2 / 3, abs=1e-3)
    assert r[1]["votes"][0]["agreement"] == 1.0
    calls = [c for c in r[2]["judges"] if c["stage"] == "prover"]
    assert sorted(c["sample"] for c in calls) == [0, 1, 2] and {c["tier"] for c in calls} == {"first"}
    assert {c["sample"]: c["reply"]["answers_question"] for c in calls} == {0: True, 1: False, 2: True}
    assert {c["params"]["seed"] - SEED for c in calls} == {0, 1, 2}
    assert r[2]["llm_calls"] == 6 and all(c["cost_usd"] for c in r[2]["judges"])
    # the records read back typed
    typed = {x.id: x for x in read_records(tmp_path / "out" / "items" / "records.jsonl")}
    assert typed[2].votes is not None and typed[2].votes[0].passes == 2 and typed[2].judges[1].sample is not None
    assert json.loads(typed[2].to_json()) == r[2]  # written, read back typed, written again: the same line
    summary = json.loads((tmp_path / "out" / "items" / "summary.json").read_text())
    assert summary["llm"]["calls_per_judged_item"] == 6.0 and summary["judge"]["votes"].startswith("samples=3")

    # replayed from the stored votes: no call; item 2 fails under any-fail, is unscored under unanimous
    rows = {
        row["policy"]: row
        for row in replay(tmp_path, {1: True, 2: False}, "--variants", "evidence", "--aggregate", "majority,any-fail")
    }
    assert rows["evidence + majority"]["accuracy"] == 50.0 and rows["evidence + any-fail"]["accuracy"] == 100.0
    assert rows["evidence + any-fail"]["unsupported"] == []
    from rose_sql.analysis.replay import replay_record

    assert replay_record(typed[2], "evidence", "unanimous").unscored_reason == "judges_split"
    assert replay_record(typed[2], "evidence", "any-fail").score == 0
    assert replay_record(typed[2], "evidence").score == 1  # the run's own rule
    strong = replay_record(typed[2], "evidence", "strong-only")
    assert strong.unscored_reason == "not_replayable" and "cannot support rule strong-only" in strong.why

    # a rerun is served from the cache: each sample is its own entry (its seed is in the key)
    with MockOpenAI(by_model(judges)) as srv:
        run(tmp_path, league, srv, items, "--judge-model", "gpt-4o-mini", "--samples", "3", "--resume")
        assert srv.calls == 0


def test_a_three_model_panel_records_each_model_and_replays(tmp_path: Path, league: Path) -> None:
    items = [item(1, DIFFERS), item(2, DIFFERS, "[panel-split]")]
    with MockOpenAI(by_model(judges)) as srv:
        run(tmp_path, league, srv, items, "--panel", "judge-a,judge-b,judge-c")
        requests = srv.requests
    models = ("judge-a", "judge-b", "judge-c")
    assert asked(requests) == {(i, s, m): 1 for i in (1, 2) for s in ("prover", "refuter") for m in models}
    assert {r.body["temperature"] for r in requests} == {0.0}  # one sample each: temperature 0, as ever
    r = records(tmp_path)
    prover = r[2]["votes"][0]
    assert prover["models"] == {"judge-a": "pass", "judge-b": "pass", "judge-c": "fail"}
    assert (prover["verdict"], prover["passes"], prover["votes"]) == ("pass", 2, 3) and r[2]["score"] == 1
    assert {c["model"] for c in r[2]["judges"]} == set(models)
    rows = {
        row["policy"]: row
        for row in replay(tmp_path, {1: True, 2: True}, "--variants", "evidence", "--aggregate", "unanimous,any-fail")
    }
    assert rows["evidence + unanimous"]["unscored_reasons"] == {"judges_split": 1}
    assert rows["evidence + any-fail"]["accuracy"] == 50.0


def test_cheap_first_escalates_only_the_unsure_items(tmp_path: Path, league: Path) -> None:
    items = [
        item(1, DIFFERS),  # confident cheap votes: one call per stage
        item(2, DIFFERS),
        item(3, DIFFERS, "[unsure]"),  # the cheap Prover says it is 0.5 sure: the Prover stage escalates
        item(4, DIFFERS, "[goldx]"),  # the cheap Refuter flags the gold: the Refuter stage escalates
        # results match, evidence doubts the match (both empty, other tables): the Refuter is asked;
        # the cheap one fails a matching result, so the strong one decides
        item(5, "SELECT name FROM player WHERE age > 99", "[overturn]", gold="SELECT name FROM team WHERE id > 99"),
    ]
    with MockOpenAI(by_model(judges)) as srv:
        out = run(tmp_path, league, srv, items, "--judge-model", "gpt-4o-mini", "--escalate-to", "gpt-4o")
        requests = srv.requests
    n = asked(requests)
    per_item = Counter[int]()
    for (i, _, _), k in n.items():
        per_item[i] += k
    assert {i: per_item[i] for i in range(1, 6)} == {1: 2, 2: 2, 3: 3, 4: 3, 5: 2}
    assert n[(1, "prover", "gpt-4o-mini")] == n[(1, "refuter", "gpt-4o-mini")] == 1 and not n[(1, "prover", "gpt-4o")]
    assert n[(3, "prover", "gpt-4o")] == 1 and not n[(3, "refuter", "gpt-4o")]
    assert n[(4, "refuter", "gpt-4o")] == 1 and not n[(4, "prover", "gpt-4o")]
    assert n[(5, "refuter", "gpt-4o")] == 1
    r = records(tmp_path)
    assert [v["escalated"] for v in r[1]["votes"]] == [False, False]
    assert "unsure: confidence 0.5 < 0.75" in r[3]["votes"][0]["escalation"]
    assert (r[3]["votes"][0]["stated"], r[3]["votes"][0]["confidence"]) == (None, 1.0)  # the strong model's vote counts
    assert any("GoldX" in why for why in r[4]["votes"][1]["escalation"])
    assert r[4]["labels"]["goldx_confidence"] == 0.9  # the strong model's reply decides, and labels
    assert r[5]["votes"][0]["escalation"] == ["it fails a prediction whose result matched the gold's"]
    assert r[5]["score"] == 1 and r[5]["votes"][0]["models"] == {"gpt-4o-mini": "fail", "gpt-4o": "pass"}
    escalated_calls = [c for c in r[5]["judges"] if c["tier"] == "escalated"]
    assert [c["model"] for c in escalated_calls] == ["gpt-4o"]
    summary = json.loads((tmp_path / "out" / "items" / "summary.json").read_text())
    assert summary["llm"]["escalated"] == 3 and summary["llm"]["calls_per_judged_item"] == pytest.approx(12 / 5)
    assert "3 items escalated" in out.output
    # strong-only replays the escalated items from the strong model's votes, and names the others
    rows = replay(tmp_path, {i: True for i in range(1, 6)}, "--variants", "evidence", "--aggregate", "strong-only")
    assert sorted(rows[1]["unsupported"]) == [1, 2, 3, 4]


def test_the_dry_run_bounds_every_vote_and_escalation(tmp_path: Path, league: Path) -> None:
    from rose_sql.config import Config, JudgeConfig
    from rose_sql.items.load import load_items
    from rose_sql.run.estimate import estimate

    items = [load_items(write_items(tmp_path / "items.jsonl", [item(1, DIFFERS), item(2, DIFFERS, "[unsure]")]))]
    one = JudgeConfig(model="gpt-4o-mini", cache_dir=tmp_path / "cache")
    votes = JudgeConfig(model="gpt-4o-mini", cache_dir=tmp_path / "cache", samples=3, escalate_to="gpt-4o")
    (single,) = estimate(items, Source.folder(league), Config(judge=one, workers=1))
    (voted,) = estimate(items, Source.folder(league), Config(judge=votes, workers=1))
    assert (voted.min_calls, voted.max_calls) == (3 * single.min_calls, 6 * single.max_calls)
    assert single.cost_max_usd is not None and voted.cost_max_usd is not None
    assert voted.cost_max_usd > 6 * single.cost_max_usd  # the strong model's calls at its (higher) price
    with MockOpenAI(by_model(judges)) as srv:
        run(
            tmp_path,
            league,
            srv,
            [item(1, DIFFERS), item(2, DIFFERS, "[unsure]")],
            "--judge-model",
            "gpt-4o-mini",
            "--samples",
            "3",
            "--escalate-to",
            "gpt-4o",
        )
        assert voted.min_calls <= srv.calls <= voted.max_calls
    with MockOpenAI(by_model(judges)) as srv:
        dry = run(
            tmp_path,
            league,
            srv,
            [item(1, DIFFERS)],
            "--judge-model",
            "gpt-4o-mini",
            "--panel",
            "gpt-4o",
            "--samples",
            "2",
            "--escalate-to",
            "o3",
            "--dry-run",
        )
        assert srv.calls == 0
    assert "the estimate counts 4 call(s) per stage" in dry.output and "the bound 6" in dry.output


def _v(passing: bool, tier: str = "first", model: str = "m") -> Any:
    from rose_sql.judges.votes import Vote

    return Vote(model, 0, tier, ProverReply.model_validate({**PROVER, "answers_question": passing}))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("votes", "rule", "verdict"),
    [
        ("++-", "majority", "pass"),
        ("+-", "majority", "fail"),  # a tie fails the prediction
        ("+--", "majority", "fail"),
        ("+++", "unanimous", "pass"),
        ("---", "unanimous", "fail"),
        ("++-", "unanimous", "split"),
        ("++-", "any-fail", "fail"),
        ("+++", "any-fail", "pass"),
        ("", "majority", None),
    ],
)
def test_aggregation_rules(votes: str, rule: Any, verdict: str | None) -> None:
    from rose_sql.judges.votes import aggregate

    assert aggregate([_v(c == "+") for c in votes], rule) == verdict


def test_an_escalated_stage_counts_the_strong_votes_and_strong_only_needs_them() -> None:
    from rose_sql.judges.votes import counted, outcome, tally

    cheap, strong = [_v(False), _v(True)], [_v(True, "escalated", "big")]
    assert counted(cheap + strong, "majority") == strong and counted(cheap, "strong-only") is None
    assert outcome(cheap, "strong-only") is None and outcome(cheap, "majority") == cheap[0].reply  # tie: fail
    t = tally("prover", cheap + strong, "majority", ["its votes split (1 of 2 pass)"])
    assert (t.verdict, t.votes, t.escalated, t.models) == ("pass", 1, True, {"m": "split", "big": "pass"})


@pytest.mark.parametrize(
    ("opts", "says"),
    [
        (["--judge-model", "gpt-4o-mini", "--aggregate", "strong-only"], "'strong-only' is not one of"),
        (["--escalate-to", "gpt-4o"], "--escalate-to needs --judge-model"),
        (["--judge-model", "gpt-4o-mini", "--samples", "3", "--ray"], "drop --samples"),
        (["--judge-model", "gpt-4o-mini", "--panel", "gpt-4o,,=http://h/v1"], "name a model in each"),
        (["--evidence-scratch", "notaurl"], "Invalid value for '--evidence-scratch'"),
    ],
)
def test_vote_options_that_cannot_work_are_refused(tmp_path: Path, league: Path, opts: list[str], says: str) -> None:
    path = write_items(tmp_path / "items.jsonl", [item(1, DIFFERS)])
    args = ["run", str(path), "--db-root", str(league), "--out", str(tmp_path / "out"), *opts]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and says in result.output, result.output
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_cheap_first_with_samples_escalates_the_split_stage_only(tmp_path: Path, league: Path) -> None:
    items = [item(1, DIFFERS), item(2, DIFFERS, "[split]")]
    with MockOpenAI(by_model(judges)) as srv:
        run(tmp_path, league, srv, items, "--judge-model", "gpt-4o-mini", "--samples", "3", "--escalate-to", "gpt-4o")
        n = asked(srv.requests)
    cheap, strong = "gpt-4o-mini", "gpt-4o"
    assert n == {
        (1, "prover", cheap): 3,
        (1, "refuter", cheap): 3,
        (2, "prover", cheap): 3,
        (2, "prover", strong): 3,  # the cheap samples split 2 to 1: the strong model's three samples decide
        (2, "refuter", cheap): 3,
    }
    r = records(tmp_path)
    prover = r[2]["votes"][0]
    assert prover["escalation"] == ["its votes split (2 of 3 pass)", "unsure: confidence 0.6667 < 0.75"]
    assert (prover["votes"], prover["passes"], prover["agreement"]) == (3, 3, 1.0)
    assert prover["models"] == {cheap: "pass", strong: "pass"} and r[2]["score"] == 1


def test_a_panel_model_can_have_its_own_endpoint(tmp_path: Path, league: Path) -> None:
    with MockOpenAI(by_model(judges)) as main_srv, MockOpenAI(by_model(judges)) as other:
        panel = f"judge-a,judge-b,judge-c={other.base_url}"
        run(tmp_path, league, main_srv, [item(1, DIFFERS, "[panel-split]")], "--panel", panel)
        assert {r.model for r in main_srv.requests} == {"judge-a", "judge-b"}
        assert {r.model for r in other.requests} == {"judge-c"} and other.calls == 2
    assert records(tmp_path)[1]["votes"][0]["models"]["judge-c"] == "fail"


def test_escalation_reasons() -> None:
    from rose_sql.judges.votes import Vote, escalation
    from rose_sql.verdicts import RefuterReply

    def refuter(**kw: Any) -> Vote:
        return Vote("m", 0, "first", RefuterReply.model_validate({**REFUTER, **kw}))

    assert escalation("refuter_matched", [refuter()], 0.75, witness=False) == []
    assert escalation("refuter_matched", [refuter()], 0.75, witness=True) == [
        "it passes a match that a witness database separates from the gold"
    ]
    assert escalation("refuter", [refuter(ambiguity="question")], 0.75, witness=False) == [
        "it flags the question as ambiguous (AmbQ)"
    ]
    assert escalation("refuter", [refuter(confidence=0.7)], 0.75, witness=False) == ["unsure: confidence 0.7 < 0.75"]
    assert escalation("prover", [Vote("m", 0, "first", None, "invalid")], 0.75, witness=False) == [
        "no valid vote from the first model"
    ]
    assert escalation("prover", [Vote("m", 0, "first", None, "failed")], 0.75, witness=False) == []
