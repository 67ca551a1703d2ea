"""``rose run``'s options reach the config, the manifest and provenance by name: pinned for a few
combinations of options (the values below were read from the command before its options were declared
on the config fields, so a refactor of the option plumbing that changes what a run records fails here)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import rose_sql.cli.run as cli_run
from rose_sql.cli import main
from rose_sql.config import Config
from rose_sql.engines import Source
from rose_sql.provenance import _databases, judge_info


class _Planned(Exception):
    """Raised in place of planning the run: the config the command built is all a case looks at."""

    def __init__(self, config: Config) -> None:
        self.config = config


def _capture(*args: Any, **kw: Any) -> Any:
    raise _Planned(kw["config"])


def _items(tmp_path: Path) -> Path:
    path = tmp_path / "items.jsonl"
    rows = [{"id": "1", "db_id": "t", "question": "How many rows?", "pred_sql": "SELECT 1", "gold_sql": "SELECT 1"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _config_of(tmp_path: Path, db_root: Path, args: list[str], monkeypatch: pytest.MonkeyPatch) -> Config:
    monkeypatch.setenv("ROSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cli_run, "plan", _capture)
    cmd = ["run", str(_items(tmp_path)), "--db", str(db_root), "--out", str(tmp_path / "out"), "--workers", "3"]
    result = CliRunner().invoke(main, [*cmd, *args])
    assert isinstance(result.exception, _Planned), result.output
    return result.exception.config


def _provenance(config: Config, db_root: Path, tmp_path: Path) -> dict[str, Any]:
    """What a run of ``config`` records about its options: the config whole, the manifest's score-changing
    options and its judge (the paths and the fence's random key put aside)."""
    whole = asdict(config)
    judge = judge_info(config)
    if whole["judge"] is not None:
        assert whole["judge"]["cache_dir"] in (None, tmp_path / "cache", tmp_path / "mine")
        whole["judge"]["cache_dir"] = str(whole["judge"]["cache_dir"]).replace(str(tmp_path), "TMP")
    info = None if judge is None else {k: v for k, v in asdict(judge).items() if k not in ("prompts", "fence")}
    options = _databases(Source.parse(str(db_root)), ["t"], config)["options"]
    return {"config": whole, "options": list(options.items()), "judge": info}


DEFAULT_OPTIONS = [
    ["max_steps", 1000000000],
    ["count_past_cap_steps", 100000000],
    ["evidence_max_steps", 200000000],
    ["max_rows", 100000],
    ["max_result_bytes", 67108864],
    ["max_value_bytes", 16777216],
    ["max_sql_chars", 200000],
    ["float_digits", 12],
    ["evidence", False],
    ["evidence_max_candidates", 80],
    ["evidence_max_db_bytes", 268435456],
]

CASES = {
    "defaults": [],
    "limits": ["--max-steps", "5000", "--timeout", "3", "--max-rows", "7", "--evidence", "--evidence-steps", "4000"],
    "judged": [
        "--judge-model",
        "gpt-4o",
        "--policy",
        "paper",
        "--judge-max-tokens",
        "100",
        "--judge-option",
        "top_k=20",
        "--judge-option",
        'chat_template_kwargs={"enable_thinking": false}',
        "--reasoning-effort",
        "low",
        "--judge-structured",
        "off",
        "--concurrency",
        "4",
        "--judge-timeout",
        "9",
        "--max-retries",
        "2",
        "--retry-invalid",
        "--cache-dir",
        "MINE",
    ],
    "votes": [
        "--judge-model",
        "a=http://h/v1",
        "--panel",
        "b,c=http://c/v1",
        "--samples",
        "3",
        "--samples-temperature",
        "0.5",
        "--escalate-to",
        "big",
        "--escalate-below",
        "0.5",
        "--aggregate",
        "unanimous",
        "--no-evidence",
        "--no-cache",
        "--judge-base-url",
        "http://base/v1",
        "--matched-refuter",
        "never",
    ],
    "evidence": ["--judge-model", "m", "--evidence-budget", "9", "--evidence-steps", "3000", "--max-rows", "10"],
}
PINNED = Path(__file__).parent / "data" / "run_options_provenance.json"


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_options_of_a_run_reach_its_config_manifest_and_judge_as_before(
    case: str, tmp_path: Path, make_db: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    db_root = make_db("CREATE TABLE x (a INT); INSERT INTO x VALUES (1);").parent.parent
    args = [str(tmp_path / "mine") if a == "MINE" else a for a in CASES[case]]
    got = _provenance(_config_of(tmp_path, db_root, args, monkeypatch), db_root, tmp_path)
    assert json.loads(json.dumps(got, default=str)) == json.loads(PINNED.read_text(encoding="utf-8"))[case]


def test_the_default_options_are_the_manifests_in_its_order(
    tmp_path: Path, make_db: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real run's manifest.json, key order included: what resumption compares and people read."""
    db_root = make_db("CREATE TABLE x (a INT); INSERT INTO x VALUES (1);").parent.parent
    monkeypatch.setenv("ROSE_CACHE_DIR", str(tmp_path / "cache"))
    cmd = ["run", str(_items(tmp_path)), "--db", str(db_root), "--out", str(tmp_path / "out"), "--workers", "1"]
    result = CliRunner().invoke(main, cmd)
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "out" / "items" / "manifest.json").read_text(encoding="utf-8"))
    assert [list(kv) for kv in manifest["options"].items()] == DEFAULT_OPTIONS
    assert manifest["judge"] is None
