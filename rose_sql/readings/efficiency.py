"""BIRD's efficiency readings by their published formulas: VES (BIRD dev) and R-VES (BIRD mini-dev).

Both weigh a correct prediction (BIRD EX 1) by how fast it runs against the gold; an incorrect one
counts 0, and every item is in the denominator:

- **VES** (BIRD dev's ``evaluation_ves.py``): ``100 * mean(sqrt(ratio_i))``, ``ratio_i`` = gold time /
  predicted time, 0 for an incorrect item;
- **R-VES** (mini-dev's ``evaluation/evaluation_ves.py``): ``100 * mean(sqrt(reward_i))``, the ratio put
  in reward buckets (:func:`reward`): 1.25 from 2, 1 from 1, 0.75 from 0.5, 0.5 from 0.25, else 0.25;
  0 for an incorrect item.

The published ratio is a mean of wall-time ratios over 100 iterations with the values beyond 3 sigma
removed (:func:`clean_abnormal`): it depends on the machine and its load, so it decides nothing here.
The deterministic ratio is the SQLite virtual machine's steps (:func:`vm_steps`: the progress handler
called on every instruction, grain 1, in a pass of its own), gold steps / predicted steps: the same on
any machine. It is defined on SQLite only: elsewhere plan costs depend on sampled statistics.

A quirk of the published code, kept by :func:`published_ratio`: :func:`clean_abnormal` keeps values
strictly inside mean ± 3 sigma, so 100 identical ratios (sigma 0) keep none, the mean divides by zero,
and the official script scores the item 0. A deterministic ratio is therefore never passed through it.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rose_sql.config import EfficiencyBase as Base

TIME_ITERATIONS = 100
"""The published script's iterations per item (``evaluation_ves.py``: ``iterate_num=100``)."""
TIME_FIELDS = ("time_ratio", "time_kept")
"""The wall-time fields of :class:`Efficiency`: machine- and load-dependent, in ``record.EXEMPT``."""


@dataclass(frozen=True, slots=True)
class Efficiency:
    """One item's efficiency ratios (``record.efficiency``), for an item whose BIRD EX is defined.

    Off SQLite every ratio is None (plan costs there depend on sampled statistics)."""

    steps_ratio: float | None
    """Gold VM steps / predicted VM steps for a correct prediction (BIRD EX 1), 0 for an incorrect one;
    None when not asked, off SQLite, or when a count is missing (a query that failed or passed ``max_steps`` in the
    counting pass). Deterministic: the same on any machine and at any load."""
    gold_steps: int | None = None
    """The gold's exact VM steps (counted only for a correct prediction)."""
    pred_steps: int | None = None
    """The prediction's exact VM steps (counted only for a correct prediction)."""
    base: Base = "steps"
    """What was asked (``--efficiency``): ``steps``, ``time`` or ``both``."""
    time_ratio: float | None = None
    """The published ratio: the mean of :data:`TIME_ITERATIONS` wall-time ratios gold / predicted, values
    beyond 3 sigma removed (0 for an incorrect prediction); None when not asked or off SQLite. Depends on
    the machine and its load: in ``record.EXEMPT``, decides nothing."""
    time_kept: int | None = None
    """Of the iterations, those the 3-sigma rule kept (None where ``time_ratio`` is)."""


def reward(ratio: float) -> float:
    """mini-dev's reward bucket of a time ratio (gold / predicted; 0 for an incorrect prediction)."""
    if ratio == 0:
        return 0.0
    if ratio >= 2:
        return 1.25
    if ratio >= 1:
        return 1.0
    if ratio >= 0.5:
        return 0.75
    if ratio >= 0.25:
        return 0.5
    return 0.25


def r_ves(ratios: Sequence[float]) -> float | None:
    """R-VES in percent over every item (an incorrect one has ratio 0); None over no item."""
    if not ratios:
        return None
    return 100 * sum(math.sqrt(reward(r)) for r in ratios) / len(ratios)


def ves(ratios: Sequence[float]) -> float | None:
    """BIRD's VES in percent over every item (an incorrect one has ratio 0); None over no item."""
    if not ratios:
        return None
    return 100 * sum(math.sqrt(r) for r in ratios) / len(ratios)


def clean_abnormal(values: Sequence[float]) -> list[float]:
    """The published outlier rule: keep the values strictly inside mean ± 3 population standard deviations."""
    n = len(values)
    if n == 0:
        return []
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    return [v for v in values if mean - 3 * std < v < mean + 3 * std]


def published_ratio(ratios: Sequence[float]) -> float:
    """The published time ratio of one item from its per-iteration ratios: the mean of the values kept by
    :func:`clean_abnormal`; 0 when none is kept (the official script's division by zero scores 0)."""
    kept = clean_abnormal(ratios)
    return sum(kept) / len(kept) if kept else 0.0


def vm_steps(db: Path, sql: str, max_steps: int) -> int | None:
    """The SQLite virtual machine instructions executing ``sql`` and fetching every row take, counted
    exactly (progress handler at grain 1), on a read-only connection; None when it fails or passes
    ``max_steps``."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    count = 0

    def step() -> int:
        nonlocal count
        count += 1
        return 1 if count > max_steps else 0

    try:
        conn.set_progress_handler(step, 1)
        conn.execute(sql).fetchall()
    except (sqlite3.Error, OverflowError, ValueError, MemoryError):
        return None
    finally:
        conn.close()
    return count


def _timed(db: Path, sql: str) -> float:
    """One timing as the published ``execute_sql`` takes it: the connection is opened before the clock
    starts; running the query, fetching every row and closing the connection are timed."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    start = time.perf_counter()
    try:
        conn.execute(sql).fetchall()
    finally:
        conn.close()
    return time.perf_counter() - start


def timed_ratios(db: Path, gold: str, pred: str, iterations: int = TIME_ITERATIONS) -> list[float]:
    """The published script's per-iteration ratios: each iteration runs and fetches the prediction, then
    the gold, each on a connection of its own (opened untimed), and takes gold time / predicted time."""
    ratios = []
    for _ in range(iterations):
        p = _timed(db, pred)
        g = _timed(db, gold)
        ratios.append(g / p if p > 0 else 0.0)
    return ratios


def measure(
    db: Path | None, gold: str, pred: str | None, correct: bool, base: Base, max_steps: int
) -> Efficiency | None:
    """One item's :class:`Efficiency` under ``base`` (None when ``off``); ``db`` None: not SQLite."""
    if base == "off":
        return None
    timed, counted = base in ("time", "both"), base in ("steps", "both")
    if db is None:
        return Efficiency(None, base=base)
    if not correct or pred is None:
        zero = 0.0 if timed else None
        return Efficiency(0.0 if counted else None, base=base, time_ratio=zero, time_kept=0 if timed else None)
    g = vm_steps(db, gold, max_steps) if counted else None
    p = vm_steps(db, pred, max_steps) if counted else None
    ratio, kept = None, None
    if timed:
        try:
            ratios = timed_ratios(db, gold, pred)
        except (sqlite3.Error, OverflowError, ValueError, MemoryError):
            pass
        else:
            ratio, kept = published_ratio(ratios), len(clean_abnormal(ratios))
    return Efficiency(step_ratio(g, p, True) if counted else None, g, p, base, ratio, kept)


def step_ratio(gold_steps: int | None, pred_steps: int | None, correct: bool) -> float | None:
    """The deterministic ratio of one item: gold steps / predicted steps for a correct prediction, 0 for an
    incorrect one; None when a count is missing (a query that failed or passed the step bound)."""
    if not correct:
        return 0.0
    if gold_steps is None or pred_steps is None:
        return None
    return gold_steps / max(pred_steps, 1)


def by_difficulty(
    items: Iterable[tuple[str | None, float | None]], formula: Callable[[Sequence[float]], float | None]
) -> dict[str, tuple[float | None, int, int]]:
    """Per difficulty label (and ``all``): ``(value, n, left_out)`` where ``n`` items have a ratio and
    ``left_out`` had none (a count missing); the formula is :func:`r_ves` or :func:`ves`."""
    groups: dict[str, list[float | None]] = {"all": []}
    for difficulty, ratio in items:
        groups["all"].append(ratio)
        if difficulty:
            groups.setdefault(difficulty, []).append(ratio)
    out = {}
    for label, ratios in groups.items():
        known = [r for r in ratios if r is not None]
        out[label] = (formula(known), len(known), len(ratios) - len(known))
    return out
