"""``rose run``'s options reach the config, the manifest and provenance by name: pinned for a few
combinations of options (the values below were read from the command before its options were declared
on the config fields, so a refactor of the option plumbing that changes what a run records fails here)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import rose_sql.cli.run as cli_run
from rose_sql import Config, JudgeConfig, Source, UsageError, evaluate_items, load_items
from rose_sql.cli import main
from rose_sql.cli.options import ordered, run_options, values_of
from rose_sql.config import RETRY_BACKOFF_ENV, option, score_fields, scores
from rose_sql.provenance import (
    JUDGE_OPTIONS,
    JUDGE_SETTINGS,
    SCORE_OPTIONS,
    JudgeInfo,
    _databases,
    judge_info,
    lift_judge,
)


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
    monkeypatch.delenv(RETRY_BACKOFF_ENV, raising=False)  # the default, not the tests' 0,0
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
    info = None if judge is None else {k: v for k, v in asdict(judge).items() if k not in ("prompts", "fence", "key")}
    options = _databases(Source.parse(str(db_root)), ["t"], config)["options"]
    return {"config": whole, "options": list(options.items()), "judge": info}


DEFAULT_OPTIONS = [
    ["max_steps", 1000000000],
    ["count_past_cap_steps", 100000000],
    ["evidence_max_steps", 200000000],
    ["timeout_s", 60.0],
    ["server_timeout_s", None],
    ["max_rows", 100000],
    ["max_result_bytes", 67108864],
    ["max_value_bytes", 262144],
    ["max_pattern_bytes", 1000],
    ["max_sql_chars", 200000],
    ["float_digits", 12],
    ["evidence", False],
    ["evidence_max_candidates", 80],
    ["evidence_max_db_bytes", 268435456],
    ["efficiency", "off"],
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
    "efficiency": ["--efficiency", "both"],
}
PINNED = Path(__file__).parent / "data" / "run_options_provenance.json"


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_options_of_a_run_reach_its_config_manifest_and_judge_as_before(
    case: str, tmp_path: Path, make_db: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    db_root = make_db("CREATE TABLE x (a INT); INSERT INTO x VALUES (1);").parent.parent
    args = [str(tmp_path / "mine") if a == "MINE" else a for a in CASES[case]]
    got = _provenance(_config_of(tmp_path, db_root, args, monkeypatch), db_root, tmp_path)
    pinned = json.loads(PINNED.read_text(encoding="utf-8"))[case]
    # pinned when each judge setting was a field of its own: lifted, it is what a run records today
    assert json.loads(json.dumps(got, default=str)) == {**pinned, "judge": lift_judge(pinned["judge"])}


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


def _run(tmp_path: Path, db_root: Path, items: Path, *args: str) -> Any:
    cmd = ["run", str(items), "--db", str(db_root), "--out", str(tmp_path / "out"), "--workers", "1", *args]
    return CliRunner().invoke(main, cmd)


def _no_question(tmp_path: Path) -> Path:
    path = tmp_path / "bare.jsonl"
    path.write_text(json.dumps({"id": "1", "db_id": "t", "pred_sql": "SELECT 1", "gold_sql": "SELECT 1"}) + "\n")
    return path


def test_a_budget_without_a_price_is_refused_by_the_command_and_by_the_library_alike(
    tmp_path: Path, make_db: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROSE_CACHE_DIR", str(tmp_path / "cache"))
    db_root = make_db("CREATE TABLE x (a INT);").parent.parent
    says = "--budget needs the price of 'unpriced-model', which the price table lacks"
    result = _run(tmp_path, db_root, _items(tmp_path), "--judge-model", "unpriced-model", "--budget", "1")
    assert result.exit_code == 2 and says in result.output, result.output
    items = load_items(_items(tmp_path)).items
    judge = JudgeConfig(model="gpt-4o", panel=("gpt-4o", "unpriced-model"), budget_usd=1.0)
    with pytest.raises(UsageError, match="--budget needs the price of 'unpriced-model'"):  # a voting model, too
        evaluate_items(items, Source.folder(db_root), Config(workers=1, judge=judge))
    with pytest.raises(UsageError, match=says):
        evaluate_items(
            items, Source.folder(db_root), Config(workers=1, judge=replace(judge, panel=(), model="unpriced-model"))
        )


def test_judging_items_none_of_which_has_a_question_is_refused_by_the_command_and_by_the_library(
    tmp_path: Path, make_db: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROSE_CACHE_DIR", str(tmp_path / "cache"))
    db_root = make_db("CREATE TABLE x (a INT);").parent.parent
    result = _run(tmp_path, db_root, _no_question(tmp_path), "--judge-model", "gpt-4o")
    assert result.exit_code == 2, result.output
    assert "the judges decide whether SQL answers the question, and no item of" in result.output
    items = load_items(_no_question(tmp_path)).items
    with pytest.raises(UsageError, match="the judges decide whether SQL answers the question: no item given has one"):
        evaluate_items(items, Source.folder(db_root), Config(workers=1, judge=JudgeConfig(model="gpt-4o")))
    (record,) = evaluate_items(items, Source.folder(db_root), Config(workers=1))  # without a judge: no question needed
    assert record.id == "1"


def test_a_judge_config_refuses_what_its_options_refuse() -> None:
    with pytest.raises(UsageError, match="name a model in each entry"):
        JudgeConfig(model="a", panel=("a", "=http://h/v1"))
    with pytest.raises(UsageError, match="samples must be at least 1"):
        JudgeConfig(model="a", samples=0)
    with pytest.raises(UsageError, match="escalate_below between 0 and 1"):
        JudgeConfig(model="a", escalate_to="b", escalate_below=1.5)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Settings:
    """A dataclass of the kind a new config field goes into."""

    depth: int = option(3, score=True, flags="--depth", min=1, help="How deep to look.")
    label: str | None = option(None, flags="--label", metavar="NAME", help="A name for the run.")
    quiet: bool = option(False, flags="--quiet", help="Say less.")
    cached: int = scores(7)


def test_a_field_declares_its_option_once_and_the_command_reads_it_back_by_name() -> None:
    """One declaration gives the option (type, range, default shown, help), the value back on the field, and the
    score mark; an option not placed in the order comes last in --help."""
    seen: list[_Settings] = []

    @click.command("probe", params=ordered(run_options(_Settings), ("quiet",)))
    def probe(**values: Any) -> None:
        seen.append(_Settings(**values_of(_Settings, values)))

    result = CliRunner().invoke(probe, ["--help"], terminal_width=120)
    assert result.exit_code == 0, result.output
    listed = [line.split()[0] for line in result.output.splitlines() if line.strip().startswith("--")]
    assert listed == ["--quiet", "--depth", "--label", "--help"]
    assert "How deep to look.  [default: 3; x>=1]" in result.output and "--label NAME" in result.output
    assert CliRunner().invoke(probe, ["--depth", "0"]).exit_code == 2  # the range, from the declaration
    assert CliRunner().invoke(probe, ["--depth", "5", "--quiet"]).exit_code == 0
    assert CliRunner().invoke(probe, []).exit_code == 0
    assert seen == [_Settings(depth=5, quiet=True), _Settings()]
    assert score_fields(_Settings) == ("depth", "cached")


def test_the_manifest_and_the_resume_check_read_the_score_marks() -> None:
    """SCORE_OPTIONS and JUDGE_OPTIONS are the marked fields, and every option of rose run that changes a score
    is one of them (a field marked later joins the manifest with no list to edit)."""
    assert score_fields(Config) == SCORE_OPTIONS
    assert {"max_steps", "timeout_s", "server_timeout_s"} <= set(SCORE_OPTIONS)
    assert "evidence_budget_s" not in SCORE_OPTIONS  # a guard whose stop is recorded, never a score
    assert score_fields(JudgeInfo) == JUDGE_OPTIONS and {"model", "settings", "prompts", "votes"} <= set(JUDGE_OPTIONS)
    # a judge option that changes a score is one JudgeConfig field: its mark puts it in the manifest's settings
    assert score_fields(JudgeConfig) == JUDGE_SETTINGS
    assert {"temperature", "max_tokens", "options"} <= set(JUDGE_SETTINGS)
    info = judge_info(Config(judge=JudgeConfig(model="m", cache_dir=None, result_rows=7)))
    assert info is not None and list(info.settings) == list(JUDGE_SETTINGS) and info.settings["result_rows"] == 7
    assert "base_url" not in JUDGE_OPTIONS  # another endpoint for the same model is warned, not refused


def test_the_options_that_need_a_judge_are_the_judges_fields_in_help_order() -> None:
    """Given without --judge-model they are refused as idle, named in this order (as before they were derived
    from the fields): a new JudgeConfig field joins them with no list to edit."""
    before = (
        *("samples", "samples_temperature", "escalate_to", "escalate_below", "aggregate", "judge_base_url"),
        *("judge_gguf_ctx", "judge_gguf_threads"),  # --judge-gguf's server; --judge-gguf itself names the judge
        *("concurrency", "policy", "matched_refuter", "budget", "prices", "no_cache", "cache_dir", "run_key"),
        *("judge_timeout", "judge_max_tokens", "retry_invalid", "max_retries", "judge_structured", "judge_options"),
        *("reasoning_effort", "batch", "batch_poll", "batch_max_requests"),
    )
    judge_only = cli_run._JUDGE_ONLY
    assert judge_only == before
