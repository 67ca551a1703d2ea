"""Does system A beat system B? Paired differences on the items both were evaluated on.

For every pair of runs and every *binary* figure (ROSE and each official reading that is 1 or 0 per
item: BIRD EX, the test-suite readings, and any later one, :data:`BINARY`), on the items of both runs
(matched by id) where both define it:

- the difference A - B in points, with a 95 % **paired bootstrap** percentile interval: the ``n``
  shared items are resampled with replacement ``resamples`` times and the difference of the two means
  recomputed on each resample. A binary item enters the difference only through which of its pairs it
  is (A 1 and B 0, A 0 and B 1, or a tie), so a resample is drawn as its counts of those pairs, a
  multinomial draw (a binomial draw of the discordant items, then a binomial split of them), by
  inverting exact binomial distributions with one seeded :class:`random.Random`: the same counts and
  seed give the same interval on any machine, in any item order;
- **McNemar's exact test**: under "A and B are equally often right", each of the ``b + c`` discordant
  items is A's with probability 1/2; the two-sided p-value is twice the smaller binomial tail, at most 1
  (1 when no item is discordant). The discordant counts are given with it, so a reader sees what it
  stands on.

ROSE is compared only when both runs have it (no item awaits a judge): the 0s execution scores alone
compare nothing. Soft-F1 is not binary and gets neither test. Every test states its ``n`` and the
items it left out (shared items where either side leaves the figure undefined); items in one run only
are counted per pair (``only_a``, ``only_b``), never silently dropped.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from itertools import combinations, pairwise

from rose_sql.accounting import IMPORTED, NAMES, READINGS
from rose_sql.accounting import value as figure_value
from rose_sql.analysis.runs import Run
from rose_sql.record import Record

CONTINUOUS = frozenset({"soft_f1"})
"""Readings that are not 1 or 0 per item: no McNemar test, no paired difference of proportions."""
BINARY = ("rose", *(r for r in READINGS if r not in CONTINUOUS), "spider_em", *IMPORTED)
"""The figures tested, in the order the views show them (a reading added to ``READINGS`` joins); Spider's
exact-set match too, which is on the records (and ``summary.json``'s ``spider_match``) but no headline column;
and an imported run's own EX (``their_ex``), under its own name."""
RESAMPLES = 2000
"""Bootstrap resamples by default."""
SEED = 20260101
"""Bootstrap seed by default (the one ``rose agree`` uses)."""
LEVEL = 0.95
"""The interval's coverage."""


def value(record: Record, name: str) -> int | None:
    """A binary figure of a record: ``rose`` is the score, ``their_ex`` the imported EX, anything else a reading
    (None where undefined)."""
    v = figure_value(record, name)
    return None if v is None else int(v)


def mcnemar_exact(b: int, c: int) -> float:
    """McNemar's exact two-sided p-value for ``b`` and ``c`` discordant items (twice the smaller tail of
    Binomial(b + c, 1/2), at most 1; 1 when there is no discordant item). Computed in exact fractions."""
    m = b + c
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, k) for k in range(min(b, c) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**m)))


class _Binomial:
    """Exact Binomial(m, p) draws by inverting its cumulative distribution (built once, in log space)."""

    def __init__(self, m: int, p: float) -> None:
        self.m = m
        if p <= 0.0 or p >= 1.0 or m == 0:
            self.fixed: int | None = 0 if p <= 0.0 or m == 0 else m
            self.cdf: list[float] = []
            return
        self.fixed = None
        lp, lq, lm = math.log(p), math.log1p(-p), math.lgamma(m + 1)
        total, cdf = 0.0, []
        for k in range(m + 1):
            total += math.exp(lm - math.lgamma(k + 1) - math.lgamma(m - k + 1) + k * lp + (m - k) * lq)
            cdf.append(total)
        self.cdf = [x / total for x in cdf]  # the rounding of the sum, spread

    def draw(self, u: float) -> int:
        if self.fixed is not None:
            return self.fixed
        return min(bisect.bisect_right(self.cdf, u), self.m)


def bootstrap_difference(n: int, a_only: int, b_only: int, resamples: int, seed: int) -> tuple[float, float] | None:
    """The 95 % paired bootstrap percentile interval of mean(A) - mean(B), in points, for ``n`` items of
    which ``a_only`` have A 1 and B 0 and ``b_only`` the reverse (None without items or resamples)."""
    if n == 0 or resamples <= 0:
        return None
    rng = random.Random(seed)
    disc = a_only + b_only
    discordant = _Binomial(n, disc / n)
    splits: dict[int, _Binomial] = {}
    share = a_only / disc if disc else 0.0
    diffs = []
    for _ in range(resamples):
        k = discordant.draw(rng.random())
        split = splits.get(k)
        if split is None:
            split = splits[k] = _Binomial(k, share)
        x = split.draw(rng.random())
        diffs.append(100.0 * (2 * x - k) / n)
    diffs.sort()
    tail = (1 - LEVEL) / 2
    lo = diffs[math.floor(tail * (resamples - 1))]
    hi = diffs[math.ceil((1 - tail) * (resamples - 1))]
    return round(lo, 2), round(hi, 2)


@dataclass(frozen=True, slots=True)
class PairedTest:
    """One binary figure compared between two runs on their shared items."""

    reading: str
    """``rose`` or a reading name."""
    a: str
    """The first run's name."""
    b: str
    """The second run's name."""
    shared: int
    """Items (ids) in both runs."""
    n: int
    """Of those, the items where both runs define the figure: every number below is over these."""
    left_out: int
    """Shared items where either run leaves the figure undefined (``shared - n``)."""
    a_percent: float | None
    """A's mean on the ``n`` items, in percent."""
    b_percent: float | None
    """B's mean on the ``n`` items, in percent."""
    difference: float | None
    """A minus B, in points."""
    interval: tuple[float, float] | None
    """The 95 % paired bootstrap interval of the difference, in points."""
    a_only: int
    """Discordant items A gets right and B wrong."""
    b_only: int
    """Discordant items B gets right and A wrong."""
    p_value: float | None
    """McNemar's exact two-sided p-value (None over no item)."""
    resamples: int
    seed: int
    skipped: str | None = None
    """Why the test was not computed (ROSE awaiting a judge in either run), else None."""

    @property
    def discordant(self) -> int:
        return self.a_only + self.b_only

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["interval"] = list(self.interval) if self.interval is not None else None
        data["discordant"] = self.discordant
        data["name"] = NAMES.get(self.reading, self.reading)
        return data


@dataclass(frozen=True, slots=True)
class PairedComparison:
    """Two runs on their shared items: what each has alone, and a test per binary figure."""

    a: str
    b: str
    only_a: int
    """Items in A's run and not in B's."""
    only_b: int
    """Items in B's run and not in A's."""
    tests: list[PairedTest]

    def to_dict(self) -> dict[str, object]:
        return {
            "a": self.a,
            "b": self.b,
            "only_a": self.only_a,
            "only_b": self.only_b,
            "tests": [t.to_dict() for t in self.tests],
        }


def item_key(record: Record) -> tuple[str, str, str]:
    """An item as two runs share it: its id, its database and its question. The same id in two benchmarks
    (BIRD's item 12 and Spider's) is two items, never compared as one."""
    return record.id_key, record.db_id, record.question or ""


def _awaiting(run: Run) -> bool:
    return any(r.unscored_reason == "awaiting_judge" for r in run.records)


def paired_test(a: Run, b: Run, reading: str, *, resamples: int = RESAMPLES, seed: int = SEED) -> PairedTest:
    """The paired difference and McNemar's test of one binary figure between two runs."""
    bs = {item_key(r): r for r in b.records}
    shared = [(r, bs[item_key(r)]) for r in a.records if item_key(r) in bs]
    skipped = None
    if reading == "rose" and (_awaiting(a) or _awaiting(b)):
        skipped = "ROSE awaits a judge in " + " and ".join(run.name for run in (a, b) if _awaiting(run))
        pairs: list[tuple[int, int]] = []
    else:
        pairs = [
            (x, y)
            for ra, rb in shared
            if (x := value(ra, reading)) is not None and (y := value(rb, reading)) is not None
        ]
    n = len(pairs)
    a_only = sum(1 for x, y in pairs if x == 1 and y == 0)
    b_only = sum(1 for x, y in pairs if x == 0 and y == 1)
    a_pct = round(100 * sum(x for x, _ in pairs) / n, 2) if n else None
    b_pct = round(100 * sum(y for _, y in pairs) / n, 2) if n else None
    return PairedTest(
        reading=reading,
        a=a.name,
        b=b.name,
        shared=len(shared),
        n=n,
        left_out=len(shared) - n,
        a_percent=a_pct,
        b_percent=b_pct,
        difference=round(100 * (a_only - b_only) / n, 2) if n else None,
        interval=bootstrap_difference(n, a_only, b_only, resamples, seed),
        a_only=a_only,
        b_only=b_only,
        p_value=mcnemar_exact(a_only, b_only) if n else None,
        resamples=resamples,
        seed=seed,
        skipped=skipped,
    )


def compare_pair(a: Run, b: Run, *, resamples: int = RESAMPLES, seed: int = SEED) -> PairedComparison:
    """Every binary figure of two runs compared on their shared items (figures neither defines are omitted)."""
    a_ids, b_ids = {item_key(r) for r in a.records}, {item_key(r) for r in b.records}
    tests = [paired_test(a, b, name, resamples=resamples, seed=seed) for name in BINARY]
    tests = [t for t in tests if t.n or t.skipped]
    return PairedComparison(a.name, b.name, len(a_ids - b_ids), len(b_ids - a_ids), tests)


def all_pairs(runs: Sequence[Run], *, resamples: int = RESAMPLES, seed: int = SEED) -> list[PairedComparison]:
    """Every pair of runs in the order given (A before B), each compared on its shared items."""
    return [compare_pair(a, b, resamples=resamples, seed=seed) for a, b in combinations(runs, 2)]


def neighbour_pairs(runs: Sequence[Run], *, resamples: int = RESAMPLES, seed: int = SEED) -> list[PairedComparison]:
    """Each run against the next in the order given (a ranked table: A is the row above B)."""
    return [compare_pair(a, b, resamples=resamples, seed=seed) for a, b in pairwise(runs)]


def interval_cell(t: PairedTest) -> str:
    """``+2.40 [-0.20, +5.00]``: the difference and its interval, or why there is none."""
    if t.skipped:
        return "awaiting judge"
    if t.difference is None:
        return "no shared item"
    iv = f" [{t.interval[0]:+.2f}, {t.interval[1]:+.2f}]" if t.interval is not None else ""
    return f"{t.difference:+.2f}{iv}"


def p_cell(p: float | None) -> str:
    """A p-value in a cell: four significant digits, ``<1e-6`` below."""
    if p is None:
        return "undefined"
    return "<1e-6" if p < 1e-6 else f"{p:.4g}"
