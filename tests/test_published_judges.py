"""Every judge the ROSE authors published on ROSE-VEC, carded: one configuration's run-to-run spread, and an
upgrade rule that does not take that spread for progress."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rose_sql.analysis.agree import agree, pair_runs
from rose_sql.analysis.judge_card import JudgeCard, build_repeated_card, upgrade
from rose_sql.analysis.labels import LabelSet, load_labels
from rose_sql.analysis.rose_import import import_outputs, write_run
from rose_sql.analysis.runs import Run, load_run
from rose_sql.cli import main

KAPPA = {  # the issue's figures, the authors' own runs on ROSE-VEC's BIRD part
    "o3/ROSE": 80.68,
    "o3/ROSE-thread-4": 79.15,
    "o3/ROSE-thread-8": 86.46,
    "qwen3-235b/ROSE": 65.11,
    "qwen3-30b/ROSE": 62.63,
    "deepseek-r1-distill-qwen-32b/ROSE": 56.86,
}


@pytest.fixture(scope="module")
def bird(shared: Path) -> LabelSet:
    return load_labels(shared / "rose-vec" / "rose-vec-bird.json")


@pytest.fixture(scope="module")
def runs(shared: Path, bird: LabelSet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """The BIRD part's ROSE runs above, imported as run folders (their summaries name the judge)."""
    ref, out = shared / "rose-vec" / "reference_outputs" / "rose-vec-bird", tmp_path_factory.mktemp("published")
    loaded = {}
    for name in KAPPA:
        folder = out / name.replace("/", "-")
        write_run(import_outputs(ref / name, bird), folder)
        loaded[name] = load_run(folder)
    return loaded


def _kappa(run: Run, labels: LabelSet) -> float | None:
    return agree(pair_runs([run], [labels]), resamples=0).merged.metrics.kappa


def test_each_published_run_reaches_its_kappa(runs: dict[str, Run], bird: LabelSet) -> None:
    assert {name: _kappa(run, bird) for name, run in runs.items()} == KAPPA


def _o3_card(runs: dict[str, Run], bird: LabelSet) -> JudgeCard:
    three = [runs[f"o3/{m}"] for m in ("ROSE", "ROSE-thread-4", "ROSE-thread-8")]
    reports = [agree(pair_runs([r], [bird]), resamples=200) for r in three]
    return build_repeated_card(three, bird, reports, validation_set="ROSE-VEC-BIRD", date="2025-06")


def test_a_card_of_three_runs_shows_their_spread(runs: dict[str, Run], bird: LabelSet) -> None:
    card = _o3_card(runs, bird)
    assert card.name == "ROSE_o3-202506" and card.method == "ROSE"
    assert [r.kappa for r in card.repeats] == [80.68, 79.15, 86.46]
    assert card.agreement.kappa == 80.68 and card.agreement.ci95["kappa"]  # the median run, with its interval
    assert card.spread["kappa"] == [79.15, 86.46] and card.spread_width("kappa") == 7.31
    assert JudgeCard.from_dict(card.to_dict()) == card


def test_the_upgrade_rule_refuses_a_margin_within_the_spread(runs: dict[str, Run], bird: LabelSet) -> None:
    """o3's third run alone beats the card of all three on every metric: under the paper's rule alone the same
    judge would replace itself. The spread says that is what running it again gives."""
    card = _o3_card(runs, bird)
    t8 = build_repeated_card(
        [runs["o3/ROSE-thread-8"], runs["o3/ROSE-thread-8"]],
        bird,
        [agree(pair_runs([runs["o3/ROSE-thread-8"]], [bird]), resamples=0)] * 2,
        validation_set="ROSE-VEC-BIRD",
        date="2025-06",
    )
    assert t8.agreement.kappa == 86.46 and t8.spread_width("kappa") == 0.0
    verdict = upgrade(card, t8)
    assert not verdict.upgrade
    assert verdict.reasons[0].startswith("kappa: 86.46 vs 80.68 (+5.78) better")
    assert "within the run-to-run spread of 7.31 points (ROSE_o3-202506's 3 runs: 79.15 to 86.46)" in verdict.reasons[0]


def _card(kappa: float, spread: float = 0.0) -> JudgeCard:
    metrics = {"kappa": kappa, "accuracy": kappa, "mcc": kappa, "f1": kappa}
    repeats = [{"run": "a", **metrics}, {"run": "b", **{m: v + spread for m, v in metrics.items()}}] if spread else []
    return JudgeCard.from_dict(
        {
            "name": f"ROSE_x{kappa}-202501",
            "validation_set": {"name": "V", "sha256": "s"},
            "agreement": metrics,
            "repeats": repeats,
            "spread": {m: [v, v + spread] for m, v in metrics.items()} if spread else {},
        }
    )


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (_card(80.0), _card(81.0), True),  # no spread known: the paper's rule
        (_card(80.0, spread=5.0), _card(84.0), False),  # +4 within the old card's 5-point spread
        (_card(80.0, spread=5.0), _card(85.5), True),  # beyond it
        (_card(80.0), _card(83.0, spread=4.0), False),  # the new card's own spread counts too
    ],
)
def test_the_spread_rule_on_hand_made_cards(old: JudgeCard, new: JudgeCard, expected: bool) -> None:
    assert upgrade(old, new).upgrade is expected


def test_a_version_1_card_reads_without_spread() -> None:
    card = JudgeCard.from_dict(
        {"name": "ROSE_o3-202501", "validation_set": {"name": "V", "sha256": "s"}, "agreement": {"kappa": 80.0}}
    )
    assert (card.method, card.repeats, card.spread, card.spread_width("kappa")) == ("ROSE", [], {}, 0.0)


def test_judge_card_cli_cards_other_methods_and_repeats(shared: Path, tmp_path: Path) -> None:
    ref = shared / "rose-vec" / "reference_outputs" / "rose-vec-bird"
    labels = str(shared / "rose-vec" / "rose-vec-bird.json")
    runner = CliRunner()
    for name in ("o3/llmsolver", "o3/ROSE", "o3/ROSE-thread-4"):
        res = runner.invoke(main, ["import-rose", str(ref / name), "--labels", labels, "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
    args = ["--labels", labels, "--validation-set", "ROSE-VEC-BIRD", "--date", "2025-06", "--bootstrap", "0"]
    solver = runner.invoke(main, ["judge-card", str(tmp_path / "o3/llmsolver"), *args, "--out", str(tmp_path / "s")])
    assert solver.exit_code == 0, solver.output
    assert "llmsolver_o3-202506: kappa 10.23" in solver.output and "(n=300)" in solver.output  # 22 errors left out
    two = [str(tmp_path / "o3/ROSE"), str(tmp_path / "o3/ROSE-thread-4")]
    res = runner.invoke(main, ["judge-card", *two, *args, "--out", str(tmp_path / "c.json")])
    assert res.exit_code == 0, res.output
    assert "2 runs of one configuration: kappa 80.68, 79.15; spread kappa 1.53" in " ".join(res.output.split())
    mixed = runner.invoke(main, ["judge-card", str(tmp_path / "o3/llmsolver"), *two, *args, "--out", "x.json"])
    assert mixed.exit_code == 2 and "different methods" in mixed.output
