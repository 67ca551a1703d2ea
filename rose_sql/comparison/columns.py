"""Matching the columns of two results: which column of one stands for which column of the other.

Two results may hold the same rows with their columns in another order (our comparator and the Spider
test suite both allow it). Finding the permutation is a search, and a naive one is exponential (a
12-column ``SELECT 0, 0, ...`` against one with a value changed ran for minutes). :func:`column_maps`
uses only necessary conditions of a match, cheapest first:

- columns holding the same vector (value for value, row by row) are one *class*: a class must stand for
  a class of the same vector's signature and size, and within a class any order is the same;
- a class stands only for a class with the same value signature (its multiset of values, or its set
  when rows may merge): classes whose signature is unique on both sides pair directly, and the rest are
  grouped by signature and permuted only within their group, after one refinement round (each class's
  multiset of pair signatures, below, with the others of its group);
- while the search assigns classes, the *pair* signature (the multiset or set of value pairs, row by
  row) of a class and each class assigned before agrees on both sides, and so do the rows projected on
  every class assigned so far.

Everything above is polynomial; what the last step leaves is a search, bounded by a :class:`Budget`:
all the work is counted in units (a cell read is one; a row of a pair signature :data:`PAIR_CELL`, a
candidate tried :data:`TRY`, a check of two columns one, a projection step its cells and :data:`STEP`:
weights measured so that a unit is about 0.1 us of one core, ``bench/bench_columns.py``), never timed,
so the work is bounded and the same on every machine. When it runs out the search says so (``budget.exhausted``),
and callers report the comparison as undecided rather than guess. Each full assignment yielded is still
to be confirmed by the caller on whole rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from rose_sql.config import COLUMN_WORK

Rows = Sequence[tuple[Any, ...]]

PAIR_CELL = 4
"""Units per row of a pair signature: a pair of cells made, counted and hashed."""
STEP = 32
"""Units of a search step's fixed work (projecting the rows on one more class), beside its cells."""
TRY = 2
"""Units of a candidate tried (a node of the search)."""


@dataclass
class Budget:
    """The work a column search may do, in units (a cell read, a node, a check of two columns)."""

    limit: int = COLUMN_WORK
    """Units it may spend in all."""
    spent: int = 0
    """Units spent so far (never more than ``limit``)."""
    exhausted: bool = False
    """Whether a step was refused: the search gave up."""

    def spend(self, units: int) -> bool:
        """Take ``units`` from the budget; False (and ``exhausted``) when there is not enough left."""
        if self.spent + units > self.limit:
            self.exhausted = True
            return False
        self.spent += units
        return True


def column_maps(a: Rows, b: Rows, na: int, nb: int, *, bags: bool, budget: Budget) -> Iterator[tuple[int, ...]]:
    """Injective maps ``m`` (column ``i`` of ``a`` -> column ``m[i]`` of ``b``) that pass the tests above.

    ``bags``: compare multisets (the results have as many rows, and rows stay rows); otherwise sets
    (projection may merge rows). With ``na == nb`` the maps are permutations.
    """
    if na > nb or not budget.spend((na + nb) * max(len(a), len(b), 1)):
        return
    ids: dict[Hashable, int] = {}  # signatures, interned: the same id on both sides for the same signature

    def sig(values: Iterable[Any]) -> int:
        key = frozenset(Counter(values).items()) if bags else frozenset(values)
        return ids.setdefault(key, len(ids))

    va = [tuple([r[i] for r in a]) for i in range(na)]
    vb = [tuple([r[j] for r in b]) for j in range(nb)]
    ca, cb = _classes(va), _classes(vb)
    sa, sb = [sig(va[c[0]]) for c in ca], [sig(vb[c[0]]) for c in cb]
    exact = na == nb  # a permutation: each class stands for a class of its own size

    def fits_size(x: int, y: int) -> bool:
        return len(cb[y]) == len(ca[x]) if exact else len(cb[y]) >= len(ca[x])

    cands = [[y for y in range(len(cb)) if sb[y] == sa[x] and fits_size(x, y)] for x in range(len(ca))]
    if exact and Counter(zip(sa, map(len, ca), strict=True)) != Counter(zip(sb, map(len, cb), strict=True)):
        return
    if not _fits_by_size(sa, ca, sb, cb):
        return
    pairs: dict[tuple[int, int, int], int] = {}  # (side, class, class) -> pair signature id

    def pair(side: int, x: int, y: int) -> int | None:
        key = (side, x, y)
        if key not in pairs:
            rows, vs, cs = (a, va, ca) if side == 0 else (b, vb, cb)
            if not budget.spend(PAIR_CELL * max(len(rows), 1)):
                return None
            pairs[key] = sig(zip(vs[cs[x][0]], vs[cs[y][0]], strict=True))
        return pairs[key]

    open_ = [x for x in range(len(ca)) if len(cands[x]) > 1]  # the classes the search chooses for
    alike = Counter(s for s, c in zip(sb, cb, strict=True) for _ in c)
    width = [alike[s] for s in sa]  # the search's order: by the columns of b alike to each, as it always was
    if exact and open_ and not _refine(cands, open_, (sa, ca), (sb, cb), pair, PAIR_CELL * (len(a) + len(b)), budget):
        return
    order = sorted(range(len(ca)), key=lambda x: (len(cands[x]) > 1, width[x], x))
    check = any(len(cands[x]) > 1 for x in order)  # no choice left: the caller's confirmation is the check
    chosen: list[tuple[int, int]] = []  # (class of a, class of b) of the open classes assigned so far
    used: set[int] = set()
    labels: list[tuple[list[int], list[int]]] = [([0] * len(a), [0] * len(b))]  # rows projected so far, interned

    def fits(x: int, y: int) -> bool:
        for x2, y2 in chosen:
            if not budget.spend(1):
                return False
            pa, pb = pair(0, x2, x), pair(1, y2, y)
            if pa is None or pb is None or pa != pb:
                return False
        return True

    def extend(x: int, y: int) -> bool:
        """Project the rows on one more class each side; whether the projections still agree."""
        if not budget.spend(len(a) + len(b) + STEP):
            return False
        la, lb = labels[-1]
        keys_of_a = list(zip(la, va[ca[x][0]], strict=True))
        ids_ = {t: i for i, t in enumerate(dict.fromkeys(keys_of_a))}  # the projected rows of a, interned
        got = list(map(ids_.get, zip(lb, vb[cb[y][0]], strict=True)))
        if None in got:  # a projected row of b that a lacks
            return False
        new_a, new_b = list(map(ids_.__getitem__, keys_of_a)), cast("list[int]", got)
        if sorted(new_a) != sorted(new_b) if bags else len(set(new_b)) != len(ids_):
            return False
        labels.append((new_a, new_b))
        return True

    def walk(k: int) -> Iterator[tuple[int, ...]]:
        if k == len(order):
            yield _assemble(na, chosen_all, ca, cb)
            return
        x = order[k]
        for y in cands[x]:
            if not budget.spend(TRY):
                return
            if y in used or (len(cands[x]) > 1 and not fits(x, y)) or (check and not extend(x, y)):
                if budget.exhausted:
                    return
                continue
            used.add(y)
            chosen_all.append((x, y))
            if len(cands[x]) > 1:
                chosen.append((x, y))
            yield from walk(k + 1)
            if len(cands[x]) > 1:
                chosen.pop()
            chosen_all.pop()
            used.discard(y)
            if check:
                labels.pop()
            if budget.exhausted:
                return

    chosen_all: list[tuple[int, int]] = []
    yield from walk(0)


def _classes(vectors: Sequence[tuple[Any, ...]]) -> list[list[int]]:
    """The columns grouped by identical vectors, in the order of their first column."""
    found: dict[tuple[Any, ...], list[int]] = {}
    for i, v in enumerate(vectors):
        found.setdefault(v, []).append(i)
    return list(found.values())


def _fits_by_size(sa: list[int], ca: list[list[int]], sb: list[int], cb: list[list[int]]) -> bool:
    """Hall's condition for classes, which may stand only for a class of their signature at least as large:
    for each signature, the k largest classes of ``a`` need k classes of ``b`` as large."""
    need: dict[int, list[int]] = {}
    have: dict[int, list[int]] = {}
    for s, c in zip(sa, ca, strict=True):
        need.setdefault(s, []).append(len(c))
    for s, c in zip(sb, cb, strict=True):
        have.setdefault(s, []).append(len(c))
    for s, sizes in need.items():
        got = sorted(have.get(s, []), reverse=True)
        if len(got) < len(sizes) or any(g < n for g, n in zip(got, sorted(sizes, reverse=True), strict=False)):
            return False
    return True


def _refine(
    cands: list[list[int]],
    open_: list[int],
    side_a: tuple[list[int], list[list[int]]],
    side_b: tuple[list[int], list[list[int]]],
    pair: Callable[[int, int, int], int | None],
    pair_cost: int,
    budget: Budget,
) -> bool:
    """One refinement round on a permutation: a class's pair signatures with the others of its group
    (same signature and size) must be those of the class it stands for. Narrows ``cands`` in place;
    False when no permutation can exist (or the budget ran out). Skipped (True, nothing narrowed) when
    it would take more than half the budget left: it only saves the search work."""
    (sa, ca), (sb, cb) = side_a, side_b
    group_a: dict[tuple[int, int], list[int]] = {}
    group_b: dict[tuple[int, int], list[int]] = {}
    for x in open_:
        group_a.setdefault((sa[x], len(ca[x])), []).append(x)
    for y in range(len(cb)):
        if (sb[y], len(cb[y])) in group_a:
            group_b.setdefault((sb[y], len(cb[y])), []).append(y)

    pairs_needed = sum(len(m) * (len(m) - 1) for m in group_a.values())
    if pairs_needed * pair_cost > (budget.limit - budget.spent) // 2:
        return True

    def profiles(side: int, members: list[int]) -> dict[int, tuple[int, ...]] | None:
        out = {}
        for x in members:
            ids = [pair(side, x, y) for y in members if y != x]
            if budget.exhausted:
                return None
            out[x] = tuple(sorted(i for i in ids if i is not None))
        return out

    for key, members in group_a.items():
        pa, pb = profiles(0, members), profiles(1, group_b[key])
        if pa is None or pb is None or Counter(pa.values()) != Counter(pb.values()):
            return False
        for x in members:
            cands[x] = [y for y in cands[x] if pb[y] == pa[x]]
    return True


def _assemble(na: int, chosen: list[tuple[int, int]], ca: list[list[int]], cb: list[list[int]]) -> tuple[int, ...]:
    """The column map of an assignment of classes: within a class, in order (any order is the same)."""
    m = [0] * na
    for x, y in chosen:
        for i, j in zip(ca[x], cb[y], strict=False):
            m[i] = j
    return tuple(m)
