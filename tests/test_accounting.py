"""Every figure states its denominator: the accounting seam, missing predictions, the exit status, the endpoint
check, and options that would do nothing.

Each symptom a new user met is run again as written and pinned here; a property test over generated runs
checks that summary.json, ``rose compare --json`` and the report's data give every figure exactly as it is
recomputed from records.jsonl, with the same denominator and what it left out.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import WIDE_LOG, make_record, write_records
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rose_sql.accounting import FIGURES, READINGS, figures
from rose_sql.cli import main
from rose_sql.record import Record, read_records
from rose_sql.summary import Brief, summarize
from rose_sql.testing import MockOpenAI, Reply, by_content

_PROVER = {"expected_answer": "one number", "sql_behaviour": "counts", "reasoning": "as asked"}
PROVER_NO = json.dumps({**_PROVER, "answers_question": False})
PROVER_YES = json.dumps({**_PROVER, "answers_question": True})
REFUTER_KEEP = json.dumps({"reasoning": "fine", "overturn": False, "ambiguity": "none", "gold_correct": True})


def _invoke(*args: Any, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(
        main, [str(a) for a in args], env={"COLUMNS": str(WIDE_LOG), **(env or {"OPENAI_API_KEY": "test"})}
    )


def _league(make_db: Any, tmp_path: Path) -> tuple[Path, Path]:
    """A database and 8 items: 3 predictions that match their gold, 3 that differ, 2 that fail."""
    db = make_db("CREATE TABLE t (a INT, b TEXT); INSERT INTO t VALUES (1, 'x'), (2, 'y'), (3, 'z');", "league")
    rows = []
    for i in range(8):
        pred = ("SELECT a FROM t WHERE a = 1", "SELECT a FROM t WHERE a = 2", "SELECT nope FROM t")[i % 3]
        gold = "SELECT a FROM t WHERE a = 1"
        rows.append({"id": i, "db_id": "league", "question": f"question {i}?", "gold_sql": gold, "pred_sql": pred,
                     "difficulty": ("simple", "moderate")[i % 2]})  # fmt: skip
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return items, db.parent.parent


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- the endpoint


def test_an_endpoint_that_is_down_stops_the_run_rather_than_scoring_every_item_judge_error(
    make_db: Any, tmp_path: Path
) -> None:
    """The symptom: a dead endpoint once printed ROSE 90.11 (91) with exit 0, 38 items judge_error left out."""
    items, root = _league(make_db, tmp_path)
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    res = _invoke("run", items, "--db", root, "--out", tmp_path / "out", "--judge-model", "m", "--judge-base-url", url,
                  "--no-cache")  # fmt: skip
    assert res.exit_code == 2, res.output
    assert f"the judge's endpoint {url} cannot be reached" in res.output and "no item was sent to it" in res.output
    assert "--resume" in res.output
    recorded = list(read_records(tmp_path / "out" / "items" / "records.jsonl"))
    assert not any(r.unscored_reason == "judge_error" for r in recorded)  # never a score, nor a left-out item


def test_a_refused_key_stops_the_run_with_the_servers_message(make_db: Any, tmp_path: Path) -> None:
    items, root = _league(make_db, tmp_path)
    with MockOpenAI(api_key="the-right-key") as srv:
        res = _invoke("run", items, "--db", root, "--out", tmp_path / "out", "--judge-model", "m",
                      "--judge-base-url", srv.base_url, "--no-cache", env={"OPENAI_API_KEY": "wrong"})  # fmt: skip
        assert srv.calls == 0  # the check is no judge call
    assert res.exit_code == 2
    assert "refuses the API key (HTTP 401" in res.output and "Incorrect API key provided" in res.output


def busy(request: dict[str, Any], index: int) -> Reply:
    """Every chat completion answered 503: the server is reachable, and of no use."""
    return Reply(status=503, error="overloaded")


def test_any_http_answer_counts_as_reachable_and_judge_errors_exit_3(make_db: Any, tmp_path: Path) -> None:
    """A 503 is an answer: the run goes on, its items are judge_error, and it exits 3 saying what continues."""
    items, root = _league(make_db, tmp_path)
    with MockOpenAI(busy) as srv:
        res = _invoke("run", items, "--db", root, "--out", tmp_path / "out", "--judge-model", "m",
                      "--judge-base-url", srv.base_url, "--no-cache", "--max-retries", "0")  # fmt: skip
    assert res.exit_code == 3, res.output
    summary = json.loads((tmp_path / "out" / "items" / "summary.json").read_text())
    # the 3 predictions that differ needed the Prover; the 3 matches and the 2 failures did not
    assert summary["unscored"] == {"judge_error": 3} and summary["figures"]["rose"]["left_out"] == {"judge_error": 3}
    assert "3 of 8 items are unscored (3 judge_error)" in res.output
    assert "--resume" in res.output.split("exit 3:")[1]
    assert "ROSE leaves out 3 judge_error" in res.output  # beside the table, never a bare number
    line = next(x for x in res.output.splitlines() if x.split()[:1] == ["items"])
    assert "60.00 (5/8)" in line  # 3 matches of 5 scored, over 5 of 8


def test_a_fully_cached_rerun_never_checks_the_endpoint(make_db: Any, tmp_path: Path) -> None:
    items, root = _league(make_db, tmp_path)
    cache = tmp_path / "cache"
    with MockOpenAI(
        by_content(lambda text: Reply(content=REFUTER_KEEP if "Reference SQL" in text else PROVER_YES))
    ) as srv:
        first = _invoke("run", items, "--db", root, "--out", tmp_path / "a", "--judge-model", "m",
                        "--judge-base-url", srv.base_url, "--cache-dir", cache)  # fmt: skip
        url = srv.base_url
    assert first.exit_code == 0, first.output
    again = _invoke("run", items, "--db", root, "--out", tmp_path / "b", "--judge-model", "m",
                    "--judge-base-url", url, "--cache-dir", cache)  # fmt: skip
    assert again.exit_code == 0, again.output  # the server is gone: every reply came from the cache


def test_a_spent_budget_exits_3(make_db: Any, tmp_path: Path) -> None:
    """The symptom: a spent --budget once read ROSE 87.50 (72) with exit 0."""
    items, root = _league(make_db, tmp_path)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"m": {"input": 1000.0, "output": 1000.0}}))
    with MockOpenAI(by_content(lambda text: Reply(content=PROVER_NO))) as srv:
        res = _invoke("run", items, "--db", root, "--out", tmp_path / "out", "--judge-model", "m",
                      "--judge-base-url", srv.base_url, "--no-cache", "--budget", "0.0001",
                      "--prices", prices)  # fmt: skip
    assert res.exit_code == 3, res.output
    summary = json.loads((tmp_path / "out" / "items" / "summary.json").read_text())
    assert summary["unscored"] == {"budget_exhausted": 3}
    assert "3 of 8 items are unscored (3 budget_exhausted)" in res.output


# --------------------------------------------------------------------------- exit status without a judge


def test_a_judge_free_run_exits_0_and_rose_is_null(make_db: Any, tmp_path: Path) -> None:
    """The symptom: summary.json held "rose": 0.0 while the terminal said ROSE is no number yet."""
    items, root = _league(make_db, tmp_path)
    res = _invoke("run", items, "--db", root, "--out", tmp_path / "out")
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "out" / "items" / "summary.json").read_text())
    assert summary["rose"] is None and summary["figures"]["rose"]["value"] is None
    assert summary["figures"]["rose"]["left_out"] == {"awaiting_judge": 6}
    # each reading has its own denominator per difficulty
    simple = summary["by_difficulty"]["simple"]
    assert simple["items"] == 4 and simple["bird_ex"]["n"] == 4 and simple["rose"]["n"] == 1


def test_strict_counts_every_unscored_reason(make_db: Any, tmp_path: Path) -> None:
    items, root = _league(make_db, tmp_path)
    lines = items.read_text().splitlines()
    lines.append(json.dumps({"id": 99, "db_id": "absent", "gold_sql": "SELECT 1", "pred_sql": "SELECT 1"}))
    items.write_text("\n".join(lines) + "\n")
    plain = _invoke("run", items, "--db", root, "--out", tmp_path / "a")
    assert plain.exit_code == 0, plain.output  # db_missing is the data's, not the run's: named, not an error
    assert "ROSE, BIRD EX, Spider EX, Spider EX keep-distinct and Soft-F1 leave out 1 db_missing" in plain.output
    # no variant databases: test-suite accuracy is not defined, and says why
    assert "TS EX and TS EX keep-distinct leave out 1 db_missing and 8 no_variants" in plain.output
    strict = _invoke("run", items, "--db", root, "--out", tmp_path / "b", "--strict")
    assert strict.exit_code == 3 and "1 of 9 items are unscored (1 db_missing)" in strict.output
    assert "--strict counts every unscored reason" in strict.output


# --------------------------------------------------------------------------- options that would do nothing


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "1"], "--budget configures the judges: give --judge-model too"),
        (["--samples", "3"], "--samples configures the judges"),
        (["--policy", "paper"], "--policy configures the judges"),
        (["--matched-refuter", "never"], "--matched-refuter configures the judges"),
        (["--evidence", "--evidence-scratch", "postgresql://x@127.0.0.1/db"], "on SQLite it copies the file"),
        (["--evidence-steps", "100000"], "--evidence-steps configures the evidence search, which is off"),
        (["--keep-unscored"], "--keep-unscored says what --resume keeps"),
    ],
)
def test_options_that_would_do_nothing_are_refused(make_db: Any, tmp_path: Path, args: list[str], message: str) -> None:
    items, root = _league(make_db, tmp_path)
    res = _invoke("run", items, "--db", root, "--out", tmp_path / "out", *args)
    assert res.exit_code == 2 and message in res.output, res.output
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_no_evidence_with_the_default_policy_says_how_matches_are_decided(make_db: Any, tmp_path: Path) -> None:
    items, root = _league(make_db, tmp_path)
    with MockOpenAI(by_content(lambda text: Reply(content=PROVER_NO))) as srv:
        res = _invoke("run", items, "--db", root, "--out", tmp_path / "out", "--judge-model", "m",
                      "--judge-base-url", srv.base_url, "--no-cache", "--no-evidence")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "every other match passes without a judge" in res.output and "--matched-refuter always" in res.output


# --------------------------------------------------------------------------- missing predictions


def test_a_bird_file_with_questions_removed_counts_them_wrong(shared: Path, tmp_path: Path) -> None:
    """The symptom: 48 dev questions removed from a prediction file ran as complete, EX over what was left."""
    bird = shared / "bird"
    gold = json.loads((bird / "dev.json").read_text(encoding="utf-8"))
    hero = [i for i, g in enumerate(gold) if g["db_id"] == "superhero"]
    full = json.loads((shared / "preds" / "bird-dev-official-format" / "ta-sql.json").read_text(encoding="utf-8"))
    removed = set(hero[:48])
    preds = tmp_path / "ta-sql.json"
    preds.write_text(json.dumps({k: v for k, v in full.items() if int(k) not in removed}))
    res = _invoke("run", preds, "--gold", bird / "dev.json", "--db", bird, "--out", tmp_path / "out")
    assert "48 of 1534 questions in dev.json have no prediction" in res.output
    recorded = {r.id_key: r for r in read_records(tmp_path / "out" / "ta-sql" / "records.jsonl")}
    absent = [recorded[str(gold[i]["question_id"])] for i in sorted(removed)]
    assert all(r.pred_sql is None and r.score == 0 and r.readings.bird_ex == 0 for r in absent)
    summary = json.loads((tmp_path / "out" / "ta-sql" / "summary.json").read_text())
    ex = summary["figures"]["bird_ex"]
    defined = [r.readings.bird_ex for r in recorded.values() if r.readings.bird_ex is not None]
    assert (ex["n"], ex["of"], ex["no_prediction"], summary["no_prediction"]) == (len(defined), 1534, 48, 48)
    assert ex["percent"] == round(100 * sum(defined) / len(defined), 2)  # the 48 in the denominator, as 0s
    assert ex["left_out"] == {"db_missing": 1534 - len(defined)}  # the databases not here: named, not 0
    assert "48 questions without a prediction are counted 0 (no_prediction)" in res.output


def test_a_sqlexam_file_with_questions_removed_warns_and_counts_them(shared: Path, tmp_path: Path) -> None:
    bird = shared / "bird"
    rows = json.loads((shared / "preds" / "bird-dev" / "dail-result.json").read_text(encoding="utf-8"))
    hero = [r for r in rows if r["db_id"] == "superhero"]
    kept = tmp_path / "dail.json"
    kept.write_text(json.dumps([r for r in rows if r not in hero[:48]]))
    res = _invoke("run", kept, "--gold", bird / "dev.json", "--db", bird, "--out", tmp_path / "out")
    assert res.exit_code == 0, res.output
    assert "48 of 1534 questions in dev.json have no prediction" in res.output  # the sqlexam format said nothing
    summary = json.loads((tmp_path / "out" / "dail" / "summary.json").read_text())
    assert summary["no_prediction"] == 48 and summary["n"] == 1534


# --------------------------------------------------------------------------- every view, one accounting

REASONS = ("db_missing", "gold_error", "judge_error", "budget_exhausted", "wall_guard", "awaiting_judge")


@st.composite
def _records(draw: st.DrawFn) -> list[Record]:
    out = []
    for i in range(draw(st.integers(min_value=0, max_value=30))):
        predicted = draw(st.booleans()) or draw(st.booleans())
        reason = None if draw(st.booleans()) else draw(st.sampled_from(REASONS))
        score = None if reason is not None else (0 if not predicted else draw(st.sampled_from([0, 1])))
        gold_ran = reason not in ("db_missing", "gold_error")
        readings: dict[str, Any] = {}
        if gold_ran:
            for name in READINGS:
                if draw(st.integers(0, 4)) == 0:
                    continue  # this reading undefined here
                readings[name] = draw(st.floats(0, 1)) if name == "soft_f1" else draw(st.sampled_from([0, 1]))
        out.append(
            make_record(
                {
                    "id": i,
                    "score": score,
                    "unscored_reason": reason,
                    "decided_by": "execution" if score is not None else None,
                    "readings": readings,
                    "difficulty": draw(st.sampled_from(["simple", "moderate", None])),
                    "pred_sql": "SELECT 1" if predicted else None,
                    "gold_sql": "SELECT 1",
                    "gold": {"status": "ok" if gold_ran else "error", "seconds": 0.0},
                    "pred": {"status": "ok", "seconds": 0.0},
                }
            )
        )
    return out


def _expected(records: list[Record]) -> dict[str, tuple[float | None, int, int]]:
    """Each figure recomputed from the records alone: (percent, n, of)."""
    out = {}
    scored = [r.score for r in records if r.score is not None]
    awaiting = any(r.unscored_reason == "awaiting_judge" for r in records)
    rose = None if awaiting or not scored else round(100 * sum(scored) / len(scored), 2)
    out["rose"] = (rose, len(scored), len(records))
    for name in READINGS:
        values = [v for r in records if (v := getattr(r.readings, name)) is not None]
        out[name] = (round(100 * sum(values) / len(values), 2) if values else None, len(values), len(records))
    return out


def _seen(figs: dict[str, Any]) -> dict[str, tuple[float | None, int, int]]:
    for name in FIGURES:
        f = figs[name]
        assert sum(f["left_out"].values()) == f["of"] - f["n"], name  # what is left out is named, all of it
    return {name: (figs[name]["percent"], figs[name]["n"], figs[name]["of"]) for name in FIGURES}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(systems=st.lists(_records(), min_size=1, max_size=3))
def test_every_view_gives_every_figure_as_the_records_do(systems: list[list[Record]], tmp_path_factory: Any) -> None:
    root = tmp_path_factory.mktemp("runs")
    for i, records in enumerate(systems):
        folder = write_records(root / f"sys{i}", records)
        summary = summarize(folder / "records.jsonl")
        (folder / "summary.json").write_text(json.dumps(summary.to_dict()))
    compare = root / "compare.json"
    res = _invoke("compare", root, "--json", compare)
    assert res.exit_code == 0, res.output
    by_system = {s["system"]: s for s in json.loads(compare.read_text())["systems"]}
    _invoke("report", root, "--out", root / "report.html")
    page = (root / "report.html").read_text(encoding="utf-8")
    island = json.loads(re.search(r'id="rose-data">(.*?)</script>', page, re.DOTALL).group(1))  # type: ignore[union-attr]
    for i, records in enumerate(systems):
        name, expected = f"sys{i}", _expected(records)
        summary = json.loads((root / name / "summary.json").read_text())
        assert _seen(summary["figures"]) == expected
        assert summary["rose"] == (None if expected["rose"][0] is None else summary["figures"]["rose"]["value"])
        assert _seen(by_system[name]["headline"]["figures"]) == expected
        assert _seen(island["figures"][name]) == expected
        assert summary["no_prediction"] == sum(r.pred_sql is None for r in records)
        for d, block in summary["by_difficulty"].items():
            assert _seen(block) == _expected([r for r in records if r.difficulty == d])


def test_left_out_reasons_are_the_records_reasons() -> None:
    records = [
        make_record({"id": 1, "score": None, "unscored_reason": "db_missing"}),
        make_record({"id": 2, "score": 1, "gold_sql": "SELECT 1", "readings": {"bird_ex": 1},
                     "gold": {"status": "ok", "seconds": 0.0}, "pred": {"status": "ok", "seconds": 0.0}}),
        make_record({"id": 3, "score": None, "unscored_reason": "judge_error", "gold_sql": "SELECT 1",
                     "readings": {"bird_ex": 0}, "gold": {"status": "ok", "seconds": 0.0},
                     "pred": {"status": "ok", "seconds": 0.0, "truncated": False}}),
        make_record({"id": 4, "score": 0, "gold_sql": "SELECT 1", "gold": {"status": "ok", "seconds": 0.0},
                     "pred": {"status": "ok", "seconds": 0.0, "truncated": True}}),
    ]  # fmt: skip
    figs = figures(Brief.of(r) for r in records)
    assert figs.rose.left_out == {"db_missing": 1, "judge_error": 1} and figs.rose.shown() == (
        "50.00 over 2 of 4 (1 db_missing, 1 judge_error)"
    )
    assert figs.bird_ex.left_out == {"db_missing": 1, "truncated": 1}
    assert figs.spider_ex.left_out == {"db_missing": 1, "truncated": 1, "ts_undefined": 2}
    assert figs.ts_ex.left_out == {"db_missing": 1, "no_variants": 3}  # no variant databases: not test-suite accuracy


def test_official_readings_count_a_failing_gold_and_a_refused_prediction_0_with_the_stricter_figure_beside(
    make_db: Any, tmp_path: Path
) -> None:
    """Issue 36, symptom 2 as a user meets it: a gold that fails is counted 0 under BIRD EX and Soft-F1, as
    BIRD's scripts count it, and a prediction the policy refuses is 0 as a failing one; both are named
    beneath the figure, and the stricter figure (the items with a working gold) stands beside it, labelled,
    in summary.json, the terminal, ``rose compare`` and the report. The test suite's readings, whose script
    stops at a failing gold, say so by name."""
    db = make_db("CREATE TABLE t (a INT); INSERT INTO t VALUES (1), (2), (3);", "league")
    rows = [
        {"id": 1, "gold_sql": "SELECT a FROM t WHERE a = 1", "pred_sql": "SELECT a FROM t WHERE a = 1"},
        {"id": 2, "gold_sql": "SELECT a FROM t WHERE a = 2", "pred_sql": "SELECT a FROM t WHERE a = 2"},
        {"id": 3, "gold_sql": "SELECT a FROM t WHERE a = 3", "pred_sql": "SELECT a FROM t WHERE a = 1"},
        {"id": 4, "gold_sql": "SELECT nope FROM t", "pred_sql": "SELECT a FROM t"},
        {"id": 5, "gold_sql": "SELECT a FROM t", "pred_sql": "DELETE FROM t"},
    ]
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({**r, "db_id": "league", "question": "q?"}) + "\n" for r in rows))
    res = _invoke("run", items, "--db", db.parent.parent, "--out", tmp_path / "out")
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    summary = json.loads((tmp_path / "out" / "items" / "summary.json").read_text())
    bird = summary["figures"]["bird_ex"]
    assert (bird["percent"], bird["n"], bird["of"]) == (40.0, 5, 5)  # the official script's 2 of 5
    assert bird["counted_0"] == {"gold_error": 1, "policy_refused": 1} and bird["left_out"] == {}
    assert bird["stricter"] == {
        "value": 0.5, "percent": 50.0, "n": 4, "left_out": {"gold_error": 1}, "label": "with a working gold"
    }  # fmt: skip
    assert summary["bird_ex"] == 0.4 and summary["figures"]["soft_f1"]["counted_0"]["gold_error"] == 1
    assert summary["figures"]["spider_ex"]["left_out"] == {"official_aborts": 1}
    assert "40.00 (official, 5); 50.00 (4 with a working gold)" in out
    assert "count 1 gold_error and 1 policy_refused 0, as the official scripts do" in out
    assert "over the 4 items with a working gold: BIRD EX 50.00 and Soft-F1 50.00" in out
    res = _invoke("compare", tmp_path / "out", "--json", tmp_path / "c.json")
    assert res.exit_code == 0, res.output
    assert "40.00 (official, 5); 50.00 (4 with a working gold)" in " ".join(res.output.split())
    compared = json.loads((tmp_path / "c.json").read_text())["systems"][0]["headline"]["figures"]["bird_ex"]
    assert compared["stricter"]["n"] == 4 and compared["counted_0"] == bird["counted_0"]
    res = _invoke("report", tmp_path / "out", "--out", tmp_path / "r.html")
    assert res.exit_code == 0, res.output
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "40.00 (official, 5); 50.00 (4 with a working gold)" in page
    assert "1 gold_error and 1 policy_refused 0, as the official scripts do" in page
