"""Does A beat B? The paired bootstrap interval and McNemar's exact test, against hand-computed cases and
scipy (an independent implementation: item-level resampling, binomial tests), and in compare and report."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from conftest import make_record, rose, write_records
from scipy import stats

from rose_sql.analysis.html import build_report
from rose_sql.analysis.paired import (
    BINARY,
    bootstrap_difference,
    compare_pair,
    mcnemar_exact,
    paired_test,
)
from rose_sql.analysis.runs import Run
from rose_sql.record import Record


def _rec(i: int, ex: int | None, score: int | None = None, sx: int | None = None, **more: Any) -> Record:
    return make_record(
        {
            "id": i,
            "score": score,
            "unscored_reason": None if score is not None else more.pop("reason", "judge_error"),
            "readings": {"bird_ex": ex, "spider_ex": sx, "soft_f1": 0.5},
            **more,
        }
    )


def _pairs(a_only: int, b_only: int, both: int, neither: int) -> tuple[list[int], list[int]]:
    a = [1] * a_only + [0] * b_only + [1] * both + [0] * neither
    b = [0] * a_only + [1] * b_only + [1] * both + [0] * neither
    return a, b


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        (0, 0, 1.0),  # nothing discordant: no evidence either way
        (0, 5, 2 / 32),  # 2 * P(X <= 0), X ~ Bin(5, 1/2)
        (1, 9, 22 / 1024),  # 2 * (C(10,0) + C(10,1)) / 2^10
        (3, 3, 1.0),  # the doubled tail exceeds 1: capped
        (7, 2, 2 * (1 + 9 + 36) / 512),  # 2 * (C(9,0) + C(9,1) + C(9,2)) / 2^9
    ],
)
def test_mcnemar_by_hand(b: int, c: int, p: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(p, rel=1e-12)
    assert mcnemar_exact(c, b) == mcnemar_exact(b, c)


def test_mcnemar_equals_scipy_binomial_test() -> None:
    for b in range(0, 31):
        for c in range(0, 31):
            if b + c == 0:
                continue
            expected = stats.binomtest(b, b + c, 0.5, alternative="two-sided").pvalue
            assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-9, abs=1e-15), (b, c)
    # large counts stay exact (no float underflow in 2**m)
    assert mcnemar_exact(600, 700) == pytest.approx(stats.binomtest(600, 1300, 0.5).pvalue, rel=1e-6)


@pytest.mark.parametrize(("a_only", "b_only", "both", "neither"), [(40, 22, 150, 88), (5, 0, 60, 35), (12, 12, 70, 6)])
def test_bootstrap_interval_equals_scipy_paired_bootstrap(a_only: int, b_only: int, both: int, neither: int) -> None:
    a, b = _pairs(a_only, b_only, both, neither)
    n = len(a)
    ours = bootstrap_difference(n, a_only, b_only, 20000, 7)
    assert ours is not None
    ref = stats.bootstrap(
        (a, b),
        lambda x, y, axis=-1: 100 * (x.mean(axis=axis) - y.mean(axis=axis)),
        paired=True,
        vectorized=True,
        n_resamples=20000,
        method="percentile",
        confidence_level=0.95,
        random_state=3,
    ).confidence_interval
    # the two Monte Carlo estimates of the same percentiles: within one item's step (100/n) and a bit
    step = 100 / n
    assert ours[0] == pytest.approx(ref.low, abs=step + 0.35)
    assert ours[1] == pytest.approx(ref.high, abs=step + 0.35)


def test_bootstrap_equals_item_resampling() -> None:
    """Drawing a resample as counts of its pairs is drawing items: the same percentiles as resampling the
    items themselves (a plain loop, independent of the binomial inversion)."""
    a, b = _pairs(30, 18, 100, 52)
    n = len(a)
    rng = random.Random(11)
    diffs = []
    for _ in range(20000):
        idx = rng.choices(range(n), k=n)
        diffs.append(100 * sum(a[i] - b[i] for i in idx) / n)
    diffs.sort()
    lo, hi = diffs[int(0.025 * 19999)], diffs[int(0.975 * 19999) + 1]
    ours = bootstrap_difference(n, 30, 18, 20000, 5)
    assert ours is not None
    assert ours[0] == pytest.approx(lo, abs=0.51)
    assert ours[1] == pytest.approx(hi, abs=0.51)


def test_bootstrap_is_seeded_and_degenerate_cases() -> None:
    assert bootstrap_difference(300, 40, 22, 2000, 1) == bootstrap_difference(300, 40, 22, 2000, 1)
    assert bootstrap_difference(50, 0, 0, 500, 1) == (0.0, 0.0)  # no discordant item: no spread
    assert bootstrap_difference(10, 10, 0, 500, 1) == (100.0, 100.0)  # A right, B wrong, on every item
    assert bootstrap_difference(0, 0, 0, 500, 1) is None
    assert bootstrap_difference(10, 3, 1, 0, 1) is None
    lo, hi = bootstrap_difference(200, 60, 0, 2000, 1) or (0.0, 0.0)
    assert 0 < lo < 30 < hi  # 30 points ahead, clearly more than noise
    assert mcnemar_exact(60, 0) < 1e-6


def _runs() -> tuple[Run, Run]:
    a = [_rec(i, 1 if i % 3 else 0, 1 if i % 2 else 0, sx=1) for i in range(40)]
    a.append(_rec(100, 1, 1))  # only in A
    a.append(_rec(101, None, 1))  # in both, EX undefined in A
    b = [_rec(i, 1 if i % 5 else 0, 1 if i % 4 else 0, sx=1) for i in range(40)]
    b.append(_rec(101, 1, 0))
    b.append(_rec(200, 0, 0))  # only in B
    b.append(_rec(201, 0, 0))
    return Run("a", Path("a"), a), Run("b", Path("b"), b)


def test_paired_test_counts_shared_items_only() -> None:
    a, b = _runs()
    t = paired_test(a, b, "bird_ex", resamples=500, seed=3)
    ex_a = {i: 1 if i % 3 else 0 for i in range(40)}
    ex_b = {i: 1 if i % 5 else 0 for i in range(40)}
    assert (t.shared, t.n, t.left_out) == (41, 40, 1)
    assert t.a_only == sum(1 for i in range(40) if ex_a[i] and not ex_b[i])
    assert t.b_only == sum(1 for i in range(40) if ex_b[i] and not ex_a[i])
    assert t.difference == round(100 * (sum(ex_a.values()) - sum(ex_b.values())) / 40, 2)
    assert t.p_value == mcnemar_exact(t.a_only, t.b_only)
    pair = compare_pair(a, b, resamples=500, seed=3)
    assert (pair.only_a, pair.only_b) == (1, 2)
    assert [x.reading for x in pair.tests] == ["rose", "bird_ex", "spider_ex"]  # keep-distinct never recorded here
    assert "soft_f1" not in BINARY
    ts = pair.tests[2]
    assert (ts.n, ts.discordant, ts.p_value, ts.interval) == (40, 0, 1.0, (0.0, 0.0))
    # the order of the records changes nothing
    shuffled = Run("a", Path("a"), random.Random(0).sample(a.records, len(a.records)))
    assert paired_test(shuffled, b, "bird_ex", resamples=500, seed=3) == t


def test_rose_is_not_compared_while_a_judge_is_awaited() -> None:
    a, b = _runs()
    waiting = Run("b", Path("b"), [*b.records, _rec(300, 1, None, reason="awaiting_judge")])
    t = paired_test(a, waiting, "rose")
    assert t.skipped == "ROSE awaits a judge in b"
    assert (t.n, t.p_value, t.interval) == (0, None, None)


def test_compare_prints_and_writes_the_paired_tests(tmp_path: Path) -> None:
    a, b = _runs()
    write_records(tmp_path / "runs" / "a", a.records)
    write_records(tmp_path / "runs" / "b", b.records)
    out = tmp_path / "t.json"
    args = ["compare", str(tmp_path / "runs"), "--json", str(out), "--bootstrap", "500", "--seed", "3"]
    res = rose(*args)  # a log wide enough for one line per row
    assert res.exit_code == 0, res.output
    assert "Does A beat B?" in res.output and "McNemar" in res.output
    data = json.loads(out.read_text())
    (pair,) = data["pairs"]
    ex = next(t for t in pair["tests"] if t["reading"] == "bird_ex")
    # the table's order puts the better system first: compare the same direction
    first, second = (a, b) if pair["a"] == "a" else (b, a)
    t = paired_test(first, second, "bird_ex", resamples=500, seed=3)
    assert ex["interval"] == list(t.interval or ())
    assert (ex["n"], ex["discordant"], ex["p_value"]) == (t.n, t.discordant, t.p_value)
    assert f"{t.difference:+.2f} [{t.interval[0]:+.2f}, {t.interval[1]:+.2f}]" in res.output  # type: ignore[index]
    again = rose(*args)
    assert json.loads(out.read_text()) == data and again.output == res.output  # seeded: the same every time


def test_report_shows_the_intervals() -> None:
    a, b = _runs()
    page = build_report([a, b])
    t = paired_test(a, b, "bird_ex")
    assert 'id="paired"' in page
    assert f"{t.difference:+.2f} [{t.interval[0]:+.2f}, {t.interval[1]:+.2f}]" in page  # type: ignore[index]
    assert "a has 1 items b lacks, b has 2 items a lacks" in page
    assert 'id="paired"' not in build_report([a])  # one system: nothing to pair


def test_the_same_id_in_two_benchmarks_is_two_items_never_compared_as_one() -> None:
    """BIRD's item 3 and Spider's item 3 share an id and nothing else: neither the paired tests nor rose diff
    pair them (they are each run's own items); the same id, database and question are one item."""
    from rose_sql.analysis.diff import diff_runs

    bird = [_rec(i, 1, 1, db_id="formula_1", question=f"Which driver won race {i}?") for i in range(6)]
    spider = [_rec(i, 0, 0, db_id="dogs", question=f"How many dogs are of breed {i}?") for i in range(6)]
    a, b = Run("bird", Path("a"), bird), Run("spider", Path("b"), spider)
    pair = compare_pair(a, b, resamples=100, seed=1)
    assert pair.tests == [] and pair.only_a == 6 and pair.only_b == 6
    d = diff_runs(a, b)
    assert d.shared == 0 and d.items == [] and len(d.only_a) == len(d.only_b) == 6
    again = Run(
        "spider-2",
        Path("c"),
        [_rec(i, 1, 1, db_id="dogs", question=f"How many dogs are of breed {i}?") for i in range(6)],
    )
    assert diff_runs(b, again).shared == 6 and len(diff_runs(b, again).items) == 6
