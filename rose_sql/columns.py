"""Matching the columns of two results: which column of one stands for which column of the other.

Two results may hold the same rows with their columns in another order (our comparator and the Spider
test suite both allow it). Finding the permutation is a search, and a naive one is exponential: a
12-column result whose columns share one value signature against a result with one value changed used
to take minutes. :func:`column_maps` prunes it in two ways, both necessary conditions of any match:

- a column can stand only for a column with the same value signature (its multiset of values, or its
  set of values when rows may merge);
- when a column is assigned, the *pair* signature of it and each column assigned before (the multiset
  or set of their value pairs, row by row) must agree on both sides, so one changed value rules out at
  once every assignment that would need it.

What is left is bounded by a :class:`Budget` of work (cells read): when it runs out the search says so
(``budget.exhausted``), and callers report the comparison as undecided rather than guess. Each full
assignment yielded is still to be confirmed by the caller on whole rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

Rows = Sequence[tuple[Any, ...]]

DEFAULT_WORK = 20_000_000
"""Cells a column search may read before it gives up (a few seconds at most, on any result)."""


@dataclass
class Budget:
    """The work a column search may still do, in cells read."""

    left: int = field(default_factory=lambda: DEFAULT_WORK)
    exhausted: bool = False

    def spend(self, cells: int) -> bool:
        """Take ``cells`` from the budget; False (and ``exhausted``) when there is not enough left."""
        if cells > self.left:
            self.exhausted = True
            return False
        self.left -= cells
        return True


def column_maps(
    a: Rows, b: Rows, na: int, nb: int, *, bags: bool, candidates: list[list[int]] | None = None, budget: Budget
) -> Iterator[tuple[int, ...]]:
    """Injective maps ``m`` (column ``i`` of ``a`` -> column ``m[i]`` of ``b``) that pass the signature tests.

    ``bags``: compare multisets (the results have as many rows, and rows stay rows); otherwise sets
    (projection may merge rows). ``candidates`` narrows the columns each column of ``a`` may take (the
    test suite's own rule); by default every column of ``b`` whose signature agrees.
    """
    rows = max(len(a), len(b), 1)
    if not budget.spend((na + nb) * rows):
        return

    def sig(values: Any) -> Any:
        return dict(Counter(values)) if bags else frozenset(values)

    col_a = [sig(r[i] for r in a) for i in range(na)]
    col_b = [sig(r[j] for r in b) for j in range(nb)]
    allowed = candidates or [list(range(nb)) for _ in range(na)]
    cands = [[j for j in allowed[i] if col_b[j] == col_a[i]] for i in range(na)]
    if any(not c for c in cands):
        return
    order = sorted(range(na), key=lambda i: (len(cands[i]), i))
    pair_a: dict[tuple[int, int], Any] = {}
    pair_b: dict[tuple[int, int], Any] = {}

    def pair(side: Rows, cache: dict[tuple[int, int], Any], x: int, y: int) -> Any:
        key = (x, y)
        if key not in cache:
            if not budget.spend(2 * rows):
                return None
            cache[key] = sig(zip([r[x] for r in side], [r[y] for r in side], strict=True))
        return cache[key]

    chosen: dict[int, int] = {}
    used: set[int] = set()

    def fits(i: int, j: int) -> bool:
        for i2, j2 in chosen.items():
            pa, pb = pair(a, pair_a, i2, i), pair(b, pair_b, j2, j)
            if pa is None or pb is None or pa != pb:
                return False
        return True

    def walk(k: int) -> Iterator[tuple[int, ...]]:
        if k == na:
            yield tuple(chosen[i] for i in range(na))
            return
        i = order[k]
        for j in cands[i]:
            if budget.exhausted:
                return
            if j in used or not fits(i, j):
                continue
            chosen[i] = j
            used.add(j)
            yield from walk(k + 1)
            used.discard(j)
            del chosen[i]

    yield from walk(0)
