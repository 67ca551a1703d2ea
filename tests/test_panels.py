"""Panels of stored runs (majority, any-of, all-of) and the honest choice among them: chosen on other labels
than the figure is reported on."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import make_record

from rose_sql.analysis.agree import agree, pair_runs
from rose_sql.analysis.labels import LabelSet, load_labels
from rose_sql.analysis.panel import (
    Candidate,
    Member,
    Part,
    Pool,
    Tally,
    _combine,
    by_database,
    by_part,
    candidates,
    combine,
    count,
    vote,
)
from rose_sql.analysis.rose_import import import_outputs
from rose_sql.analysis.runs import Run
from rose_sql.cli import main
from rose_sql.errors import UsageError


def _bits(scores: list[int | None]) -> Tally:
    return Tally(
        sum(1 << i for i, s in enumerate(scores) if s == 1), sum(1 << i for i, s in enumerate(scores) if s == 0)
    )


@pytest.mark.parametrize("rule", ["majority", "any", "all"])
def test_bit_set_panels_equal_the_item_by_item_rule(rule: str) -> None:
    rng = random.Random(37)
    for _ in range(200):
        size = rng.randint(2, 5)
        items = rng.randint(1, 40)
        runs = [[rng.choice([0, 1, None]) for _ in range(items)] for _ in range(size)]
        got = _combine(rule, [_bits(r) for r in runs])  # type: ignore[arg-type]
        want = [vote(rule, [r[i] for r in runs]) for i in range(items)]  # type: ignore[arg-type]
        assert got == _bits(want), (rule, runs)


def test_vote_by_hand() -> None:
    assert vote("majority", [1, 1, 0]) == 1 and vote("majority", [1, 0, None]) is None  # a tie among two
    assert vote("majority", [1, None, None]) == 1 and vote("majority", [None, None]) is None
    assert vote("any", [0, 1, None]) == 1 and vote("any", [0, None]) == 0
    assert vote("all", [1, 1, None]) == 1 and vote("all", [1, 0]) == 0


def test_candidates_are_panels_of_distinct_configurations() -> None:
    members = [Member("a"), Member("a", "never"), Member("b"), Member("c")]
    names = [c.name for c in candidates(members, 3)]
    assert sorted(names[:4]) == ["a", "a@never", "b", "c"]
    assert "majority(a, b, c)" in names and "any(a@never, b)" in names
    assert not [n for n in names if n.startswith("majority(") and n.count(",") == 1]  # even majority: none
    assert not [n for n in names if "a, a@never" in n]  # one configuration once per panel
    assert len(names) == 4 + 5 * 2 + 2 * 3  # pairs: 5 of distinct configs x any/all; triples: 2 x 3 rules
    assert count(members, 3) == len(names) and count(members, 2, ["any"]) == 4 + 5


def test_select_refuses_a_choice_it_cannot_score_in_time() -> None:
    members = {Member(f"c{i}", p): Tally(0, 0) for i in range(60) for p in ("recorded", "never")}
    part = Part("p", ["1"], 0, 1, {"d": 1}, members)
    with pytest.raises(UsageError, match="candidates on p, more than"):
        by_database(part, Pool("all"), max_size=5)


def _part(name: str, labels: list[int], dbs: list[str], members: dict[str, list[int | None]]) -> Part:
    databases: dict[str, int] = {}
    for i, d in enumerate(dbs):
        databases[d] = databases.get(d, 0) | 1 << i
    return Part(
        name,
        [str(i) for i in range(len(labels))],
        sum(1 << i for i, y in enumerate(labels) if y),
        (1 << len(labels)) - 1,
        databases,
        {Member(k): _bits(v) for k, v in members.items()},
    )


def test_leave_one_database_out_reports_each_database_by_a_choice_made_without_it() -> None:
    """'lucky' matches the labels on database x only, 'steady' everywhere but one item of each database: the
    in-sample best is steady; with x held out, steady is chosen on y and z, and x is decided by it too."""
    labels = [1, 0, 1, 0, 1, 0]
    dbs = ["x", "x", "y", "y", "z", "z"]
    p = _part(
        "p",
        labels,
        dbs,
        {"lucky": [1, 0, 0, 1, 0, 1], "steady": [1, 1, 1, 0, 1, 0], "flat": [1, 1, 1, 1, 1, 1]},
    )
    got = by_database(p, Pool("all"), max_size=1)
    assert got is not None and got.chosen == {"steady": 3}
    assert got.held_out.n == 6 and got.held_out.accuracy == round(100 * 5 / 6, 2)
    assert got.in_sample[0] == "steady" and got.candidates == 3


def test_chosen_on_one_part_and_reported_on_the_other() -> None:
    a = _part("a", [1, 0, 1, 0], ["d"] * 4, {"j1": [1, 0, 1, 0], "j2": [1, 1, 1, 0]})
    b = _part("b", [1, 0, 1, 0], ["e"] * 4, {"j1": [1, 1, 0, 0], "j2": [1, 0, 1, 0], "only_b": [1, 0, 1, 0]})
    rows = by_part(a, b, Pool("all"), max_size=1)
    a_to_b = next(r for r in rows if r.chosen_on.startswith("a"))
    assert a_to_b.chosen == {"j1": 1} and a_to_b.held_out.kappa == 0.0  # best on a, a coin on b
    assert a_to_b.in_sample[0] == "j2" and a_to_b.candidates == 2  # only_b is not on a: not a candidate


def test_combine_writes_the_members_scores() -> None:
    runs = [
        Run(name, Path(name), [make_record({"id": i, "score": s}) for i, s in enumerate(scores)])
        for name, scores in (("r1", [1, 0, 1]), ("r2", [1, 1, 0]), ("r3", [0, 1, None]))
    ]
    panel = combine(runs, "majority", "p")
    assert [r.score for r in panel.records] == [1, 1, None]
    assert panel.records[2].unscored_reason == "judges_split" and panel.records[0].decided_by == "panel"
    assert panel.records[0].why == "majority of 3 runs: r1 1, r2 1, r3 0"
    assert Candidate("any", (Member("r1"), Member("r2", "never"))).name == "any(r1, r2@never)"


# --------------------------------------------------------------------------- the published runs


@pytest.fixture(scope="module")
def bird(shared: Path) -> LabelSet:
    return load_labels(shared / "rose-vec" / "rose-vec-bird.json")


def _run(shared: Path, bird: LabelSet, name: str) -> Run:
    folder = shared / "rose-vec" / "reference_outputs" / "rose-vec-bird" / name
    return Run(name.replace("/", "-"), folder, import_outputs(folder, bird).records)


@pytest.mark.parametrize(
    ("members", "kappa"),
    [
        (("o3/ROSE", "o3/ROSE-thread-4", "o3/ROSE-thread-8"), 83.11),  # self-consistency of o3
        (("qwen3-235b/ROSE", "qwen3-30b/ROSE", "deepseek-r1/ROSE"), 70.28),  # a panel of open judges
    ],
)
def test_majority_panels_of_the_published_runs(
    shared: Path, bird: LabelSet, members: tuple[str, ...], kappa: float
) -> None:
    panel = combine([_run(shared, bird, m) for m in members], "majority", "panel")
    assert agree(pair_runs([panel], [bird]), resamples=0).merged.metrics.kappa == kappa


def test_panel_and_select_through_the_cli(shared: Path, tmp_path: Path) -> None:
    """The three o3 runs: their majority as a run folder; and leave one database out among them."""
    ref = shared / "rose-vec" / "reference_outputs" / "rose-vec-bird"
    labels = str(shared / "rose-vec" / "rose-vec-bird.json")
    runner = CliRunner()
    folders = []
    for m in ("ROSE", "ROSE-thread-4", "ROSE-thread-8"):
        folders.append(str(tmp_path / "bird" / f"o3-{m}"))
        res = runner.invoke(main, ["import-rose", str(ref / "o3" / m), "--labels", labels, "--out", folders[-1]])
        assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["panel", *folders, "--out", str(tmp_path / "maj")])
    assert res.exit_code == 0, res.output
    agreed = runner.invoke(main, ["agree", str(tmp_path / "maj"), "--labels", labels, "--json", "--bootstrap", "0"])
    assert json.loads(agreed.stdout)["kappa"] == 83.11
    out = tmp_path / "sel.json"
    args = [
        "select",
        str(tmp_path / "bird"),
        "--labels",
        labels,
        "--policies",
        "recorded,never,evidence",
        "--json",
        str(out),
    ]
    res = runner.invoke(main, args)
    assert res.exit_code == 0, res.output
    [lodo] = json.loads(out.read_text())
    assert lodo["protocol"] == "database" and lodo["held_out"]["n"] == 322
    assert sum(lodo["chosen"].values()) == 11  # one choice per database held out
    assert lodo["candidates"] == 6 + 12 * 2 + 8 * 3  # 6 members; 12 pairs x 2 rules; 8 triples x 3 rules
    assert "o3-ROSE@evidence left out: its records carry no deterministic evidence" in " ".join(res.output.split())
