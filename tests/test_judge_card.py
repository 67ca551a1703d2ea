"""Judge cards (ROSE_<model>-<yyyymm>) and the upgrade rule: better on kappa, accuracy, MCC and F1 at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import make_record, write_records

from rose_sql.analysis.judge_card import JudgeCard, card_name, upgrade
from rose_sql.cli import main
from rose_sql.errors import UsageError

OLD = {"kappa": 80.0, "accuracy": 90.0, "mcc": 81.0, "f1": 94.0}


def _card(name: str, set_sha: str = "abc", **metrics: float) -> JudgeCard:
    return JudgeCard.from_dict(
        {
            "name": name,
            "validation_set": {"name": "ROSE-VEC", "sha256": set_sha},
            "agreement": {**OLD, **metrics, "ci95": {"kappa": [75.0, 85.0]}},
        }
    )


# (changes to the new card's metrics, upgrade?, the metrics named as not better)
RULE: list[tuple[dict[str, float], bool, str]] = [
    ({"kappa": 81.0, "accuracy": 90.5, "mcc": 81.5, "f1": 94.1}, True, ""),
    ({"kappa": 90.0, "accuracy": 95.0, "mcc": 90.0}, False, "f1"),  # equal F1 is not better
    ({"kappa": 90.0, "accuracy": 89.9, "mcc": 90.0, "f1": 99.0}, False, "accuracy"),
    ({"kappa": 79.0, "accuracy": 89.0, "mcc": 80.0, "f1": 93.0}, False, "kappa, accuracy, mcc, f1"),
    ({}, False, "kappa, accuracy, mcc, f1"),  # the same judge again
]


@pytest.mark.parametrize(("changes", "expected", "not_better"), RULE)
def test_upgrade_rule(changes: dict[str, float], expected: bool, not_better: str) -> None:
    verdict = upgrade(_card("ROSE_a-202501"), _card("ROSE_b-202506", **changes))
    assert verdict.upgrade is expected
    assert len(verdict.reasons) == 5
    if expected:
        assert verdict.reasons[-1] == "upgrade: ROSE_b-202506 beats ROSE_a-202501 on all four metrics"
    else:
        assert verdict.reasons[-1] == f"keep ROSE_a-202501: ROSE_b-202506 is not better on {not_better}"


def test_reasons_show_the_difference_and_the_old_interval() -> None:
    verdict = upgrade(_card("old"), _card("new", kappa=81.0))
    assert verdict.reasons[0] == "kappa: 81.00 vs 80.00 (+1.00) better (inside the old judge's 95% interval)"
    assert verdict.reasons[1] == "accuracy: 90.00 vs 90.00 (+0.00) equal"


def test_cards_on_different_validation_sets_are_not_compared() -> None:
    with pytest.raises(UsageError, match="different validation sets"):
        upgrade(_card("old"), _card("new", set_sha="zzz", kappa=99.0))


def test_card_names() -> None:
    assert card_name("o3", "2025-06") == "ROSE_o3-202506"
    assert card_name("deepseek/deepseek-r1:free", "2026-01") == "ROSE_deepseek-deepseek-r1-free-202601"


def _run(folder: Path, model: str, scores: dict[int, int]) -> Path:
    records = [make_record({"id": i, "score": s}) for i, s in scores.items()]
    judge = {
        "model": model,
        "base_url": "https://api.example.com/v1",
        "temperature": 0.0,
        "seed": 7,
        "max_tokens": None,
        "policy": "rose",
        "matched_refuter": "evidence",
        "reask": 1,
        "prompts": {"prover": "aaaa", "refuter": "bbbb", "refuter_matched": "cccc"},
    }
    return write_records(folder, records, {"n": len(records), "judge": judge})


def test_cli_card_and_compare(tmp_path: Path) -> None:
    labels = tmp_path / "vec.json"
    labels.write_text(json.dumps({str(i): i % 2 == 0 for i in range(1, 21)}))
    truth = {i: int(i % 2 == 0) for i in range(1, 21)}
    old = _run(tmp_path / "old", "judge-a", {**truth, 1: 1, 2: 0, 3: 1})  # three mistakes
    new = _run(tmp_path / "new", "judge-b", {**truth, 1: 1})  # one mistake
    runner = CliRunner()
    for run, date in ((old, "2025-06"), (new, "2026-01")):
        res = runner.invoke(
            main,
            [
                "judge-card",
                str(run),
                "--labels",
                str(labels),
                "--validation-set",
                "tiny",
                "--date",
                date,
                "--out",
                str(tmp_path / f"{run.name}.json"),
                "--bootstrap",
                "100",
            ],
        )
        assert res.exit_code == 0, res.output
    card = json.loads((tmp_path / "new.json").read_text())
    assert card["name"] == "ROSE_judge-b-202601" and card["model"] == "judge-b" and card["date"] == "2026-01"
    assert card["provider"] == "api.example.com" and card["prompts"]["prover"] == "aaaa"
    assert card["parameters"] == {
        "temperature": 0.0,
        "seed": 7,
        "max_tokens": None,
        "policy": "rose",
        "matched_refuter": "evidence",
        "reask": 1,
    }
    assert card["validation_set"]["name"] == "tiny" and card["validation_set"]["subsets"][0]["items"] == 20
    assert card["agreement"]["accuracy"] == 95.0 and len(card["agreement"]["ci95"]["kappa"]) == 2
    res = runner.invoke(main, ["judge-compare", str(tmp_path / "old.json"), str(tmp_path / "new.json")])
    assert res.exit_code == 0 and "upgrade: ROSE_judge-b-202601 beats ROSE_judge-a-202506" in res.stdout
    res = runner.invoke(main, ["judge-compare", str(tmp_path / "new.json"), str(tmp_path / "old.json"), "--json"])
    assert res.exit_code == 1 and json.loads(res.stdout)["upgrade"] is False
    res = runner.invoke(main, ["judge-compare", str(tmp_path / "old.json"), str(labels)])
    assert res.exit_code == 2 and "not a judge card" in res.output
    bad = runner.invoke(
        main,
        [
            "judge-card",
            str(old),
            "--labels",
            str(labels),
            "--validation-set",
            "tiny",
            "--date",
            "2025-13",
            "--out",
            str(tmp_path / "x.json"),
        ],
    )
    assert bad.exit_code == 2 and "not a month" in bad.output


def test_a_run_without_a_judge_has_no_card(tmp_path: Path) -> None:
    run = write_records(tmp_path / "plain", [make_record({"id": 1, "score": 1})])
    labels = tmp_path / "l.json"
    labels.write_text(json.dumps({"1": True}))
    res = CliRunner().invoke(
        main,
        ["judge-card", str(run), "--labels", str(labels), "--validation-set", "v", "--out", str(tmp_path / "c.json")],
    )
    assert res.exit_code == 2 and "no judge configuration" in res.output


def test_card_shows_reply_format_reasoning_effort_and_options_when_recorded() -> None:
    from rose_sql.analysis.judge_card import _parameters
    from rose_sql.provenance import JudgeInfo

    judge = JudgeInfo(model="m", structured="auto", settings={"reasoning_effort": "high", "options": {"top_k": 20}})
    shown = _parameters(judge)
    assert (shown["structured"], shown["reasoning_effort"], shown["options"]) == ("auto", "high", {"top_k": 20})
    assert "options" not in _parameters(JudgeInfo(model="m"))


def test_card_names_a_local_judge_by_its_gguf_hash() -> None:
    """A run of --judge-gguf: the card's provider is the file's SHA-256 and runtime, its parameters the server's
    pinned settings; runs of two files under one model name are refused."""
    from rose_sql.analysis.judge_card import _judge, _local_provider, _parameters
    from rose_sql.provenance import JudgeInfo

    local = {"sha256": "b179" * 16, "runtime": "xllamacpp 2026.10.11549", "sampling": {"temperature": 0.0}}
    judge = JudgeInfo(model="smol", local=local)
    assert _local_provider(local) == f"gguf sha256:{'b179' * 16} (xllamacpp 2026.10.11549)"
    assert _parameters(judge)["local"] == local
    assert "local" not in _parameters(JudgeInfo(model="m"))

    class R:
        def __init__(self, j: JudgeInfo) -> None:
            self.path, self.summary = Path("r"), type("S", (), {"judge": j})()

    other = JudgeInfo(model="smol", local={**local, "sha256": "0" * 64})
    assert _judge([R(judge), R(judge)]) == judge  # type: ignore[list-item]
    with pytest.raises(UsageError, match="different GGUF files"):
        _judge([R(judge), R(other)])  # type: ignore[list-item]
