"""Runs a researcher can trust: each symptom found by trying rose as a new user, asserted as it now behaves.

Infrastructure failures are never scores; provenance makes --resume honest; interruptions and
mistakes get help (exit statuses: 0 done, 2 unusable input or options, 130 interrupted). The judges are
scripted under the client's transport (:class:`~rose_sql.testing.MockOpenAI`), but on the scripted
server's wire for the runs made as processes of their own (an idle and a saturated machine).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import LEAGUE, rose, write_items

from rose_sql.record import read_records
from rose_sql.summary import Summary
from rose_sql.testing import MockOpenAI, Reply, ScriptedOpenAI, by_content


def superhero_items(shared: Path, tmp: Path, n: int = 30, name: str = "alpha") -> Path:
    items = [
        x for x in json.loads((shared / "preds/bird-dev/alpha-result.json").read_text()) if x["db_id"] == "superhero"
    ]
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(items[:n]))
    return path


# --------------------------------------------------------------------------- infrastructure failures


@pytest.mark.parametrize("damage", ["text", "truncated"])
def test_a_broken_database_is_never_a_score(shared: Path, tmp_path: Path, damage: str) -> None:
    real = (shared / "bird/superhero/superhero.sqlite").read_bytes()
    root = tmp_path / "dbs"
    (root / "superhero").mkdir(parents=True)
    broken = root / "superhero/superhero.sqlite"
    broken.write_bytes(b"this is not a database\n" * 100 if damage == "text" else real[: len(real) // 3])
    res = rose("run", superhero_items(shared, tmp_path), "--db-root", root, "--out", tmp_path / "out")
    records = list(read_records(tmp_path / "out/alpha/records.jsonl"))
    assert len(records) == 30
    unreadable = [r for r in records if r.unscored_reason == "db_unreadable"]
    # no prediction is blamed for the database: nothing "does not execute" because of it
    assert not [r for r in records if r.score == 0 and "malformed" in r.why + str(r.pred.error)]
    assert len(unreadable) == 30 and all(str(broken) in r.why for r in unreadable)
    assert all(("not a database" if damage == "text" else "malformed") in r.why for r in unreadable)
    assert res.exit_code == 2 and "no item could be evaluated" in res.output and str(broken) in res.output


def test_a_wrong_db_root_exits_2_naming_the_paths_tried(shared: Path, tmp_path: Path) -> None:
    res = rose(
        "run", shared / "preds/spider/c3sql.txt", "--gold", shared / "spider/dev.json",
        "--db-root", shared / "spider", "--out", tmp_path / "out",
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "no item could be evaluated" in res.output and str(shared / "spider/concert_singer") in res.output
    record = next(read_records(tmp_path / "out/c3sql/records.jsonl"))
    assert record.unscored_reason == "db_missing" and str(shared / "spider") in record.why


def test_the_paths_tried_are_named_as_given_through_a_symlink(tmp_path: Path) -> None:
    # the manifest resolves its paths; the message names them under the --db-root the user typed
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    items = tmp_path / "items.jsonl"
    _write_items(items, ["SELECT 1"])
    res = rose("run", items, "--db-root", tmp_path / "link", "--out", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert str(tmp_path / "link/league/league.sqlite") in res.output, res.output


# --------------------------------------------------------------------------- provenance and resume


@pytest.fixture
def league_run(league: Path, tmp_path: Path) -> tuple[Path, Path]:
    """Six items on the league database: (the items file, the database folder)."""
    items = tmp_path / "items.jsonl"
    _write_items(items, ["SELECT name FROM player WHERE age > 25"] * 6)
    return items, league


def _write_items(path: Path, preds: list[str]) -> None:
    rows = [
        {"id": i, "db_id": "league", "question": f"q{i}", "gold_sql": "SELECT name FROM player WHERE age > 25",
         "pred_sql": p}
        for i, p in enumerate(preds)
    ]  # fmt: skip
    write_items(path, rows)


def test_the_manifest_names_inputs_options_and_versions(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    items, db_root = league_run
    assert rose("run", items, "--db-root", db_root, "--out", tmp_path / "out").exit_code == 0
    manifest = json.loads((tmp_path / "out/items/manifest.json").read_text())
    summary = Summary.from_dict(json.loads((tmp_path / "out/items/summary.json").read_text()))
    assert summary.manifest is not None and summary.manifest.to_dict() == manifest
    assert manifest["complete"] is True and manifest["finished"] and manifest["sqlite"]
    assert manifest["predictions"]["path"] == str(items.resolve()) and len(manifest["predictions"]["sha256"]) == 64
    (db,) = manifest["databases"]
    assert db["db_id"] == "league" and db["found"] and db["fingerprint"]
    assert manifest["options"]["max_rows"] == 100_000 and manifest["command"]


def test_resume_refuses_other_predictions(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    items, db_root = league_run
    out = tmp_path / "out"
    assert rose("run", items, "--db-root", db_root, "--out", out).exit_code == 0
    before = (out / "items/records.jsonl").read_bytes()
    _write_items(items, ["SELECT name FROM player"] * 6)
    res = rose("run", items, "--db-root", db_root, "--out", out, "--resume")
    assert res.exit_code == 2 and "the prediction file differs" in res.output
    res = rose("run", items, "--db-root", db_root, "--out", out, "--resume", "--max-rows", "10")
    assert res.exit_code == 2 and "option max_rows differs (100000 then, 10 now)" in res.output
    assert (out / "items/records.jsonl").read_bytes() == before


def verdict(text: str) -> Reply:
    if "Reference SQL" in text:
        body: dict[str, Any] = {"reasoning": "r", "overturn": False, "ambiguity": "none", "gold_correct": True}
    else:
        body = {"expected_answer": "e", "sql_behaviour": "b", "reasoning": "p", "answers_question": True}
    return Reply(content=json.dumps(body), prompt_tokens=1000, completion_tokens=100)


def _judged(srv: ScriptedOpenAI | MockOpenAI, tmp: Path, *extra: Any) -> list[Any]:
    return ["--judge-model", "gpt-4o-mini", "--judge-base-url", srv.base_url, "--cache-dir", tmp / "cache", *extra]


def test_resume_refuses_a_judged_run_without_its_judge_and_warns_of_another_endpoint(
    league_run: tuple[Path, Path], tmp_path: Path
) -> None:
    items, db_root = league_run
    _write_items(items, ["SELECT name, age FROM player WHERE age > 25"] * 6)
    out = tmp_path / "out"
    env = {"OPENAI_API_KEY": "t"}
    with MockOpenAI(by_content(verdict)) as srv:
        assert rose("run", items, "--db-root", db_root, "--out", out, *_judged(srv, tmp_path), env=env).exit_code == 0
    res = rose("run", items, "--db-root", db_root, "--out", out, "--resume")
    assert res.exit_code == 2 and "the run had a judge, this resumption has no judge" in res.output
    with MockOpenAI(by_content(verdict)) as other:
        res = rose("run", items, "--db-root", db_root, "--out", out, "--resume", *_judged(other, tmp_path), env=env)
        assert res.exit_code == 0 and "judge endpoint differs" in res.output
        res = rose(
            "run", items, "--db-root", db_root, "--out", out, "--resume",
            *_judged(other, tmp_path, "--judge-model", "gpt-4o"), env=env,
        )  # fmt: skip
        assert res.exit_code == 2 and "judge model differs ('gpt-4o-mini' then, 'gpt-4o' now)" in res.output
        res = rose(
            "run", items, "--db-root", db_root, "--out", out, "--resume",
            *_judged(other, tmp_path, "--judge-max-tokens", "100"), env=env,
        )  # fmt: skip
        assert res.exit_code == 2 and res.output.count("judge max_tokens differs (8192 then, 100 now)") == 1
        # a manifest written when each judge setting was a field of its own resumes as it did
        manifest = out / "items/manifest.json"
        data = json.loads(manifest.read_text())
        settings = data["judge"].pop("settings")
        data["judge"] |= {**settings, "options": settings["options"] or None}
        manifest.write_text(json.dumps(data))
        res = rose("run", items, "--db-root", db_root, "--out", out, "--resume", *_judged(other, tmp_path), env=env)
        assert res.exit_code == 0 and "differs" not in res.output.replace("judge endpoint differs", ""), res.output


def test_resume_retries_items_whose_endpoint_was_down(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    items, db_root = league_run
    _write_items(items, ["SELECT name, age FROM player WHERE age > 25"] * 6)
    out, env = tmp_path / "out", {"OPENAI_API_KEY": "t"}
    with MockOpenAI(lambda request, index: Reply(status=503, error="overloaded")) as failing:
        down = ["--judge-model", "m", "--judge-base-url", failing.base_url, "--max-retries", "0"]
        down += ["--judge-timeout", "2", "--cache-dir", tmp_path / "cache"]
        res = rose("run", items, "--db-root", db_root, "--out", out, *down, env=env)
        assert res.exit_code == 3 and "6 judge_error" in res.output  # never a score: unscored, and said so
    assert {r.unscored_reason for r in read_records(out / "items/records.jsonl")} == {"judge_error"}
    with MockOpenAI(by_content(verdict)) as srv:
        up = ["--judge-model", "m", "--judge-base-url", srv.base_url, "--cache-dir", tmp_path / "cache"]
        res = rose("run", items, "--db-root", db_root, "--out", out, "--resume", *up, env=env)
        assert res.exit_code == 0, res.output
        assert "6 left unscored for a transient reason evaluated again" in res.output
        assert srv.calls == 12  # Prover and Refuter for each item
    records = list(read_records(out / "items/records.jsonl"))
    assert len(records) == 6 and {r.score for r in records} == {1}


def test_keep_unscored_keeps_them(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    items, db_root = league_run
    _write_items(items, ["SELECT name, age FROM player WHERE age > 25"] * 6)
    out, env = tmp_path / "out", {"OPENAI_API_KEY": "t"}
    with MockOpenAI(lambda request, index: Reply(status=503, error="overloaded")) as failing:
        down = ["--judge-model", "m", "--judge-base-url", failing.base_url, "--max-retries", "0", "--no-cache"]
        assert rose("run", items, "--db-root", db_root, "--out", out, *down, env=env).exit_code == 3
        res = rose("run", items, "--db-root", db_root, "--out", out, "--resume", "--keep-unscored", *down, env=env)
        assert failing.calls == 6  # the Prover of each item once: the kept items were not asked again
    assert res.exit_code == 3 and "0 to go" in res.output  # kept as they were: still unscored, still said


# --------------------------------------------------------------------------- interruptions and mistakes


@pytest.mark.slow  # interrupts a rose run as a process of its own, mid-run
def test_ctrl_c_stops_saves_and_says_how_to_resume(make_db: Any, tmp_path: Path) -> None:
    db_root = make_db(LEAGUE, db_id="league").parent.parent
    slow = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) SELECT count(*) + {} FROM c"
    )
    items = tmp_path / "items.jsonl"
    rows = [{"id": i, "db_id": "league", "gold_sql": "SELECT 1", "pred_sql": slow.format(i)} for i in range(300)]
    items.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rose_sql", "run", str(items), "--db-root", str(db_root), "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    records = out / "items/records.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not records.exists() or records.stat().st_size == 0):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    start = time.monotonic()
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - start < 10  # stops within seconds, whatever the workers were doing
    assert proc.returncode == 130, stderr
    assert "interrupted:" in stderr and "--resume" in stderr
    summary = Summary.from_dict(json.loads((out / "items/summary.json").read_text()))
    assert summary.manifest is not None and summary.manifest.complete is False and 0 < summary.n < 300
    resume = shlex.split(stderr.split("To continue:")[1].strip())
    assert resume[0] == "rose" and resume[-1] == "--resume"
    done = subprocess.run([sys.executable, "-m", "rose_sql", *resume[1:]], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len(list(read_records(records))) == 300
    assert Summary.from_dict(json.loads((out / "items/summary.json").read_text())).manifest.complete  # type: ignore[union-attr]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_an_unwritable_out_is_exit_2(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    items, db_root = league_run
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    res = rose("run", items, "--db-root", db_root, "--out", locked / "out")
    assert res.exit_code == 2 and "cannot be written" in res.output


def test_an_out_that_is_a_file_is_exit_2(league_run: tuple[Path, Path], tmp_path: Path) -> None:
    items, db_root = league_run
    (tmp_path / "file").write_text("x")
    res = rose("run", items, "--db-root", db_root, "--out", tmp_path / "file")
    assert res.exit_code == 2 and "--out" in res.output and "cannot be written" in res.output


@pytest.mark.parametrize(
    ("option", "value"),
    [("--timeout", "0"), ("--max-rows", "0"), ("--concurrency", "0"), ("--budget", "-1"), ("--workers", "0")],
)
def test_options_are_validated_by_name(league_run: tuple[Path, Path], tmp_path: Path, option: str, value: str) -> None:
    items, db_root = league_run
    res = rose("run", items, "--db-root", db_root, "--out", tmp_path / "out", option, value)
    assert res.exit_code == 2 and option in res.output


# --------------------------------------------------------------------------- machine-independent results


def hashed_verdict(text: str) -> Reply:
    """A deterministic judge: its verdicts follow a hash of what it reads, so any change in the prompt shows."""
    import hashlib

    h = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    if "Reference SQL" in text:
        body: dict[str, Any] = {"reasoning": f"r{h % 97}", "overturn": h % 5 == 0, "ambiguity": "none",
                                "gold_correct": h % 7 != 0}  # fmt: skip
    else:
        body = {"expected_answer": "e", "sql_behaviour": "b", "reasoning": f"p{h % 89}", "answers_question": h % 3 != 0}
    return Reply(content=json.dumps(body), prompt_tokens=1000, completion_tokens=100)


def _busy(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` processes that keep a core each busy."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


@pytest.mark.slow
def test_the_same_records_on_an_idle_and_a_saturated_machine(shared: Path, tmp_path: Path) -> None:
    from rose_sql.record import comparable

    n = 20  # items of each system: a bounded sample of a load test (40 each before: 69 s, the suite's third longest)
    files = [superhero_items(shared, tmp_path, n, "alpha")]
    c3 = [x for x in json.loads((shared / "preds/bird-dev/c3-result.json").read_text()) if x["db_id"] == "superhero"]
    (tmp_path / "c3.json").write_text(json.dumps(c3[:n]))
    files.append(tmp_path / "c3.json")
    runs = {}
    for name in ("idle", "loaded"):  # one fence secret: the two runs must build the very same prompts
        (tmp_path / f"cache-{name}").mkdir()
        (tmp_path / f"cache-{name}" / "fence.key").write_text("5e" * 32)
    with ScriptedOpenAI(by_content(hashed_verdict)) as srv:
        for name, load in (("idle", 0), ("loaded", os.cpu_count() or 2)):
            busy = _busy(load)
            try:
                out = tmp_path / name
                args = [sys.executable, "-m", "rose_sql", "run", *map(str, files), "--db-root", str(shared / "bird")]
                args += ["--out", str(out), "--judge-model", "m", "--judge-base-url", srv.base_url]
                args += ["--cache-dir", str(tmp_path / f"cache-{name}")]  # each run asks the judges itself
                done = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "OPENAI_API_KEY": "t"})
                assert done.returncode == 0, done.stderr
            finally:
                for p in busy:
                    p.kill()
            runs[name] = {f"{f.stem}/{r.id}": r for f in files for r in read_records(out / f.stem / "records.jsonl")}
    idle, loaded = runs["idle"], runs["loaded"]
    assert idle.keys() == loaded.keys() and len(idle) == 2 * n
    assert not [k for k, r in {**idle, **loaded}.items() if r.unscored_reason in ("internal_error", "wall_guard")]
    assert sum(1 for r in idle.values() if r.evidence is not None and r.evidence.witness is not None) > 0
    assert sum(1 for r in idle.values() if r.judges) > n // 2
    different = [k for k in idle if comparable(idle[k]) != comparable(loaded[k])]
    assert different == []
