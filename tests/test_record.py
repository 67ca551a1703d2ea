"""The record as a round-trip seam: what is written is read back equal, older layouts migrate, bad lines are named;
and replay decides every policy ``rose run`` has, the default ``evidence`` included, as the run did."""

from __future__ import annotations

import json
import typing
from dataclasses import replace
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import LEAGUE, write_items
from rich.console import Console

from rose_sql import Config, JudgeConfig, Record, evaluate_items, load_items
from rose_sql.analysis.replay import VARIANTS, replay
from rose_sql.analysis.runs import load_run
from rose_sql.cli import main
from rose_sql.decide import UNSCORED, Unscored
from rose_sql.demo import run_demo
from rose_sql.engines import Source
from rose_sql.errors import InputError
from rose_sql.record import SCHEMA_VERSION, id_key, read_records
from rose_sql.summary import Summary
from rose_sql.testing import MockOpenAI, Reply, by_content
from rose_sql.verdicts import ProverReply, RefuterReply

V1 = Path(__file__).parent / "data" / "v1"

EVE = "INSERT INTO player VALUES (5, 'Eve', 3, NULL);"
"""A fifth player, of no age, added to the league database (conftest's LEAGUE)."""
# Eve's NULL age (in a team the items do not count) makes a NULL age plausible here: only a plausible
# witness questions a match (docs/witness-grades.md)

ITEMS = [
    # the same SQL: nothing questions the match
    (1, "SELECT name FROM player WHERE age > 25", "SELECT name FROM player WHERE age > 25", "q1"),
    # the same rows today, but COUNT(age) skips a NULL age: a witness questions the match
    (2, "SELECT COUNT(age) FROM player WHERE team_id = 1", "SELECT COUNT(*) FROM player WHERE team_id = 1", "q2"),
    (3, "SELECT COUNT(age) FROM player WHERE team_id = 2", "SELECT COUNT(*) FROM player WHERE team_id = 2", "q3 [x]"),
    # both empty: a cheap doubt
    (4, "SELECT name FROM player WHERE age > 90", "SELECT name FROM team WHERE city = 'Paris'", "q4 [x]"),
    # differing results: the Prover, then the Refuter
    (5, "SELECT name, age FROM player WHERE age > 25", "SELECT name FROM player WHERE age > 25", "q5"),
    (6, "SELECT name FROM player", "SELECT name FROM player WHERE age > 25", "q6 [no]"),
    (7, "SELECT nam FROM player", "SELECT name FROM player", "q7"),
]


def verdict(text: str) -> Reply:
    """Judges whose verdicts the question carries: ``[x]`` overturns, ``[no]`` fails the Prover."""
    if "Reference SQL" in text:
        body: dict[str, Any] = {
            "reasoning": "checked",
            "overturn": "[x]" in text,
            "ambiguity": "question" if "q5" in text else "none",
            "gold_correct": "q5" not in text,
            "gold_confidence": 0.8,
            "label": "missing_filter" if "[x]" in text else None,
        }
    else:
        no = "[no]" in text
        body = {"expected_answer": "e", "sql_behaviour": "b", "reasoning": "p", "answers_question": not no}
    return Reply(content="```json\n" + json.dumps(body) + "\n```", prompt_tokens=900, completion_tokens=100)


@pytest.fixture
def league_run(make_db: Any, tmp_path: Path) -> tuple[Path, Path]:
    """ITEMS on the league database with Eve: (the items file, the database folder)."""
    db_root = make_db(LEAGUE + EVE, db_id="league").parent.parent
    rows = [{"id": i, "db_id": "league", "question": q, "pred_sql": p, "gold_sql": g} for i, p, g, q in ITEMS]
    return write_items(tmp_path / "items.jsonl", rows), db_root


def _judged(srv: MockOpenAI, tmp: Path, policy: str) -> JudgeConfig:
    return JudgeConfig(
        model="gpt-4o-mini", base_url=srv.base_url, api_key="t", cache_dir=tmp / "cache", matched_refuter=policy
    )  # type: ignore[arg-type]


def test_records_made_in_process_read_back_equal(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    items, db_root = league_run
    with MockOpenAI(by_content(verdict)) as srv:
        config = Config(workers=1, judge=_judged(srv, tmp_path, "always"))
        records = evaluate_items(load_items(items).items, Source.folder(db_root), config)
    assert {r.id: r.score for r in records} == {1: 1, 2: 1, 3: 0, 4: 0, 5: 1, 6: 0, 7: 0}
    assert records[1].evidence is not None and records[1].evidence.witness is not None
    assert isinstance(records[4].judges[0].reply, ProverReply) and isinstance(records[4].judges[1].reply, RefuterReply)
    assert records[4].labels.goldx is True and records[4].labels.ambq is True
    for r in records:
        back = Record.from_dict(json.loads(r.to_json()))
        assert back == r, r.id


def test_every_line_rose_run_writes_reads_back_to_the_same_line(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    items, db_root = league_run
    with MockOpenAI(by_content(verdict)) as srv:
        args = ["run", str(items), "--db-root", str(db_root), "--out", str(tmp_path / "out"), "--workers", "2"]
        args += ["--judge-model", "m", "--judge-base-url", srv.base_url, "--cache-dir", str(tmp_path / "c")]
        res = CliRunner().invoke(main, args, env={"OPENAI_API_KEY": "t"})
        assert res.exit_code == 0, res.output
    folder = tmp_path / "out" / "items"
    _same_lines(folder / "records.jsonl")
    summary = json.loads((folder / "summary.json").read_text())
    assert Summary.from_dict(summary).to_dict() == summary
    assert load_run(folder).summary == Summary.from_dict(summary)


def test_the_demo_records_read_back_to_the_same_lines(tmp_path: Path) -> None:
    run_demo(tmp_path / "demo", Console(file=StringIO()))
    _same_lines(tmp_path / "demo" / "runs" / "items" / "records.jsonl")


def _same_lines(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines
    for line in lines:
        assert Record.from_dict(json.loads(line)).to_json() == line


@pytest.mark.parametrize("name", ["judged", "demo"])
def test_records_of_the_first_layout_are_migrated(name: str) -> None:
    path = V1 / f"{name}-records.jsonl"
    old = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["schema"] for r in old} == {1}
    new = list(read_records(path))
    assert len(new) == len(old) and all(r.schema == SCHEMA_VERSION for r in new)
    for o, n in zip(old, new, strict=True):
        data = n.to_dict()
        assert data["doubts"] is None  # not recorded then
        # nothing else changed meaning: every old field reads back as it was written (new fields may join),
        # but for layout 5's one rename: the one-database reading ts_ex is spider_ex, and ts_ex undefined
        readings = dict(o["readings"])
        assert {"ts_ex", "ts_ex_keep_distinct"} <= set(readings)
        assert data["readings"]["spider_ex"] == readings.pop("ts_ex")
        assert data["readings"]["spider_ex_keep_distinct"] == readings.pop("ts_ex_keep_distinct")
        assert data["readings"]["ts_ex"] is None and data["readings"]["ts_databases"] is None
        for key, value in {**o, "readings": readings}.items():
            if key != "schema":
                assert _old_keys(data[key], value) == value, (o["id"], key)
    raw = json.loads((V1 / f"{name}-summary.json").read_text())
    summary = Summary.from_dict(raw)
    assert summary.n == len(old) and summary.schema == SCHEMA_VERSION
    assert summary.spider_ex == raw["ts_ex"] and summary.ts_ex is None
    assert summary.figures.spider_ex.n == raw["readings_n"]["ts_ex"] and summary.figures.ts_ex.n == 0


def _old_keys(new: Any, old: Any) -> Any:
    """``new`` with only the keys ``old`` has, at every depth."""
    if isinstance(new, dict) and isinstance(old, dict):
        return {k: _old_keys(new[k], old[k]) for k in old if k in new}
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        return [_old_keys(n, o) for n, o in zip(new, old, strict=True)]
    return new


def test_migrated_records_keep_typed_evidence_and_replies() -> None:
    records = list(read_records(V1 / "judged-records.jsonl"))
    witnesses = [r.evidence.witness for r in records if r.evidence is not None and r.evidence.witness is not None]
    assert len(witnesses) == 5 and all(w.changes and w.gold_result.columns for w in witnesses)
    replies = [c.reply for r in records for c in r.judges]
    assert replies and all(isinstance(x, ProverReply | RefuterReply) for x in replies)
    assert all(r.labels.ambiguity in ("none", "question", "schema") for r in records if r.labels.goldx is not None)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"id": 1, "score": "yes"}', r"records\.jsonl:2: not a valid record: "),
        ('{"schema": 99, "id": 1}', r"records\.jsonl:2: record layout 99 is newer"),
        ("[1, 2]", r"records\.jsonl:2: not a valid record: not a JSON object"),
    ],
)
def test_a_bad_line_is_named_by_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    good = (V1 / "demo-records.jsonl").read_text().splitlines()[0]
    path = tmp_path / "records.jsonl"
    path.write_text(good + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=message):
        list(read_records(path))


def test_one_vocabulary_of_unscored_reasons() -> None:
    assert set(typing.get_args(Unscored)) == set(UNSCORED)
    assert all(reason.means and reason.fix for reason in UNSCORED.values())


def test_replay_decides_every_policy_as_rose_run_did(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    items, db_root = league_run
    loaded = load_items(items).items
    ran: dict[str, list[Record]] = {}
    with MockOpenAI(by_content(verdict)) as srv:
        for policy in ("always", "evidence", "never"):
            config = Config(workers=1, judge=_judged(srv, tmp_path, policy))
            ran[policy] = evaluate_items(loaded, Source.folder(db_root), config)
    scores = {p: [r.score for r in recs] for p, recs in ran.items()}
    # the default policy asks the Refuter where evidence or a cheap doubt questions a match (2, 3, 4), not on 1
    assert scores["evidence"] == [1, 1, 0, 0, 1, 0, 0] and scores["never"] == [1, 1, 1, 1, 1, 0, 0]
    assert [len(r.doubts or []) for r in ran["evidence"]] == [0, 0, 0, 2, 0, 0, 0]  # empty, and other tables
    # replaying the run that asked every judge gives each policy's own run, item for item
    for policy in ("always", "evidence", "never"):
        assert [replay(r, policy).score for r in ran["always"]] == scores[policy], policy  # type: ignore[arg-type]
        assert [replay(r, policy).score for r in ran[policy]] == scores[policy], policy  # type: ignore[arg-type]
    assert "evidence" in VARIANTS


def test_replay_keeps_what_no_judge_could_decide(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    """An item without a question and one whose judge never answered validly replay as they ran."""
    items, db_root = league_run
    loaded = load_items(items).items
    loaded[4] = replace(loaded[4], question="q5 [bad]")  # differing results: the Prover is asked
    loaded[5] = replace(loaded[5], question="  ")

    def unusable(text: str) -> Reply:
        return Reply(content="I would rather not say.") if "[bad]" in text else verdict(text)

    with MockOpenAI(by_content(unusable)) as srv:
        records = evaluate_items(
            loaded, Source.folder(db_root), Config(workers=1, judge=_judged(srv, tmp_path, "always"))
        )
    assert [records[4].unscored_reason, records[5].unscored_reason] == ["judge_invalid", "no_question"]
    assert records[4].judges and not records[5].judges  # asked and kept; never asked
    for policy in VARIANTS:
        replayed = [replay(r, policy) for r in records]
        assert [d.unscored_reason for d in replayed[4:6]] == ["judge_invalid", "no_question"], policy


@pytest.mark.parametrize(
    "item_id",
    [0, 7, -3, 10**30, "5", "", "q 1", 'say "hi"', "back\\slash", "tab\there", "naïve", "日本", "\x7f", True, None],
)
def test_an_ids_key_is_its_json_text(item_id: Any) -> None:
    """The fast path of ``id_key`` writes the common ids itself: it must give the encoder's text for every id."""
    assert id_key(item_id) == json.dumps(item_id)
    assert id_key(json.loads(json.dumps(item_id))) == id_key(item_id)
