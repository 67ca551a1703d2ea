"""BIRD's VES and mini-dev's R-VES by the published formulas, on hand-computed cases; SQLite VM steps as a
deterministic time base."""

from __future__ import annotations

import math
import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from rose_sql.efficiency import (
    by_difficulty,
    clean_abnormal,
    published_ratio,
    r_ves,
    reward,
    step_ratio,
    ves,
    vm_steps,
)

BOUND = 10**8


@pytest.mark.parametrize(
    ("ratio", "bucket"),
    [(0, 0), (0.1, 0.25), (0.2499, 0.25), (0.25, 0.5), (0.4999, 0.5), (0.5, 0.75), (0.999, 0.75), (1, 1),
     (1.999, 1), (2, 1.25), (50, 1.25)],
)  # fmt: skip
def test_reward_buckets(ratio: float, bucket: float) -> None:
    assert reward(ratio) == bucket


def test_formulas_by_hand() -> None:
    # rewards 0, 1, 1.25, 0.5: R-VES = 100 * (0 + 1 + sqrt(1.25) + sqrt(0.5)) / 4
    assert r_ves([0, 1.5, 3.0, 0.3]) == pytest.approx(100 * (1 + math.sqrt(1.25) + math.sqrt(0.5)) / 4)
    assert ves([0, 4, 1]) == pytest.approx(100.0)  # 100 * (0 + 2 + 1) / 3
    assert r_ves([]) is None and ves([]) is None
    assert r_ves([1.0] * 7) == 100.0 and ves([1.0] * 7) == 100.0  # as fast as the gold everywhere


def test_clean_abnormal_equals_numpy() -> None:
    rng = random.Random(1)
    for _ in range(50):
        xs = [rng.lognormvariate(0, 0.3) for _ in range(100)] + [rng.uniform(5, 50) for _ in range(rng.randint(0, 3))]
        a = np.asarray(xs)
        mean, std = np.mean(a), np.std(a)
        want = [x for x in xs if mean - 3 * std < x < mean + 3 * std]
        assert clean_abnormal(xs) == pytest.approx(want)
    assert len(clean_abnormal([1.0] * 99 + [100.0])) == 99  # the outlier is gone


def test_identical_ratios_keep_none_and_score_0() -> None:
    """The published rule keeps values strictly inside mean ± 3 sigma: with sigma 0 it keeps none."""
    assert clean_abnormal([1.5] * 100) == []
    assert published_ratio([1.5] * 100) == 0.0
    assert published_ratio([1.0, 2.0, 3.0]) == 2.0


def _db(path: Path, rows: int) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, i % 7) for i in range(rows)])
    conn.commit()
    conn.close()
    return path


def test_vm_steps_are_exact_and_deterministic(tmp_path: Path) -> None:
    small, big = _db(tmp_path / "s.sqlite", 100), _db(tmp_path / "b.sqlite", 1000)
    sql = "SELECT v FROM t WHERE v = 3"
    s1, s2, b = vm_steps(small, sql, BOUND), vm_steps(small, sql, BOUND), vm_steps(big, sql, BOUND)
    assert s1 is not None and s1 == s2  # the same count every time: no clock
    assert b is not None and 9 * s1 < b < 11 * s1  # a scan: steps grow with the rows
    by_key = vm_steps(big, "SELECT v FROM t WHERE id = 3", BOUND)
    assert by_key is not None and by_key * 50 < b  # a primary-key lookup is far cheaper than the scan
    assert step_ratio(b, by_key, True) == b / by_key  # the gold scans, the prediction looks up: faster
    assert vm_steps(small, "SELECT nope FROM t", BOUND) is None
    assert vm_steps(big, sql, 100) is None  # past the bound: no count, never a made-up one
    assert step_ratio(None, 5, True) is None and step_ratio(None, None, False) == 0.0


def test_by_difficulty_states_denominators() -> None:
    items = [("simple", 1.0), ("simple", 0.0), ("moderate", 3.0), ("moderate", None), (None, 0.3)]
    out = by_difficulty(items, r_ves)
    assert out["simple"] == (50.0, 2, 0)
    assert out["moderate"] == (pytest.approx(100 * math.sqrt(1.25)), 1, 1)
    assert out["all"][1:] == (4, 1)
    assert out["all"][0] == pytest.approx(100 * (1 + 0 + math.sqrt(1.25) + math.sqrt(0.5)) / 4)
