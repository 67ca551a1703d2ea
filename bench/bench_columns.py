#!/usr/bin/env python3
"""The comparator's column search: units of work counted and CPU seconds, on results whose columns look alike.

Cases (each as gold vs prediction, ``rose_sql.comparison.comparator.compare`` with the default budget,
``rose_sql.config.COLUMN_WORK`` units):

- ``zeros``: the issue's ``SELECT 0, 0, ...`` against one value changed (it ran over 200 s at 12 columns);
- ``latin``: n columns holding the same values, each a different vector, two cells swapped;
- ``parity``: columns that are parities of 7-bit row numbers: every value and pair signature agrees, so
  only the search can tell them apart (shuffled: equal; changed: one column replaced, certainly not equal).

It prints, per case and width, the outcome, the units spent and the CPU seconds, and the worst seconds
per million units (what bounds a search that gives up: ``COLUMN_WORK`` times it).

    .venv/bin/python bench/bench_columns.py
"""

from __future__ import annotations

import time
from typing import Any

from rose_sql.comparison.columns import Budget
from rose_sql.comparison.comparator import compare
from rose_sql.config import COLUMN_WORK
from rose_sql.results import ResultSet


def rs(rows: list[tuple[Any, ...]]) -> ResultSet:
    return ResultSet(tuple(f"c{i}" for i in range(len(rows[0]))), tuple(rows), len(rows))


def parity(masks: list[int]) -> list[tuple[int, ...]]:
    return [tuple(bin(x & m).count("1") % 2 for m in masks) for x in range(128)]


def cases(n: int) -> list[tuple[str, list[tuple[Any, ...]], list[tuple[Any, ...]]]]:
    latin = [tuple((k + c) % n for c in range(n)) for k in range(n)] * 2
    swapped = list(latin)
    swapped[0], swapped[1] = (latin[1][0], *latin[0][1:]), (latin[0][0], *latin[1][1:])
    masks = [(k * 37) % 127 + 1 for k in range(n)]
    perm = [(k * 5 + 3) % n for k in range(n)]
    gold = parity(masks)
    return [
        ("zeros", [(0,) * n], [(0,) * (n - 1) + (1,)]),
        ("latin", latin, swapped),
        ("parity shuffled", gold, [tuple(r[j] for j in perm) for r in gold]),
        ("parity changed", gold, parity([*masks[:-1], (n * 37) % 127 + 1])),
    ]


def main() -> None:
    worst = 0.0
    print(f"budget: {COLUMN_WORK:,} units")
    for n in (12, 32, 64):
        for name, gold, pred in cases(n):
            budget = Budget()
            start = time.process_time()
            c = compare(rs(pred), rs(gold), ordered=False, budget=budget)
            took = time.process_time() - start
            if budget.spent > 1_000_000:
                worst = max(worst, took / budget.spent * 1e6)
            print(f"{n:3d} columns, {name:16s} {c.reason:10s} {budget.spent:12,d} units {took:7.2f} s CPU")
    print(f"worst: {worst:.3f} s CPU per million units, so at most about {worst * COLUMN_WORK / 1e6:.1f} s a search")


if __name__ == "__main__":
    main()
