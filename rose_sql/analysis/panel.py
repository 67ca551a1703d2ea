"""Panels of stored runs, and an honest choice among them: no model is called.

A *panel* combines several finished runs of the same items, item by item (:func:`combine`): by
``majority`` (an item is correct when more than half of the runs that scored it say so; a tie is
unscored), ``any`` (correct when any run says so: the lenient panel) or ``all`` (correct only when every
run that scored it says so: the strict one). Several runs of one judge configuration make a
self-consistency panel; runs of several judges a panel of judges. Each run may first be re-decided under
a policy (:mod:`rose_sql.analysis.replay`), our deterministic evidence among them (``evidence``: the
Refuter's stored reply on a match counts only where our evidence questions the match).

Which panel, rule and policy agree best with the experts is a choice, and a figure chosen and reported
on the same labels flatters it. :func:`select` makes the choice on other labels than it reports on:

- ``part``: for configurations run on two parts of the labels (ROSE-VEC's BIRD and Spider parts), the
  candidate that agrees best on one part is reported on the other, both ways;
- ``database``: within one part (ROSE-VEC's BIRD part: 11 databases), leave one database out: the
  candidate chosen on the other databases decides the items of the one left out, and the held-out
  figure is agreement over every item so decided.

The best in-sample figure is given beside each held-out one, so that the optimism of choosing on the
labels one reports on can be seen. Candidates are every single run under every policy, and every panel
of up to ``max_size`` runs of distinct configurations under each rule (majority panels of odd size);
decisions are kept as bit sets over the items, so a few hundred thousand candidates are scored in
seconds.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Literal

from rose_sql.analysis.agree import Confusion, kappa, pair, pct
from rose_sql.analysis.labels import LabelSet, key
from rose_sql.analysis.replay import Variant, carries_evidence, replay_record
from rose_sql.analysis.runs import Run
from rose_sql.config import SELECT_MAX_CANDIDATES
from rose_sql.decide import Unscored
from rose_sql.errors import UsageError
from rose_sql.record import Record

Rule = Literal["single", "majority", "any", "all"]
RULES: tuple[Rule, ...] = ("majority", "any", "all")
"""The rules a panel combines its runs' scores by."""
Policy = Literal["recorded", "always", "evidence", "never", "no-refuter"]
POLICIES: tuple[Policy, ...] = ("recorded", "always", "evidence", "never", "no-refuter")
"""How each run's items are decided before they are combined: as recorded, or replayed under a policy."""
MEANING = {
    "majority": "correct when more than half of the runs that scored the item say so (a tie is unscored)",
    "any": "correct when any run says so (the lenient panel)",
    "all": "correct only when every run that scored the item says so (the strict panel)",
}


def vote(rule: Rule, scores: Sequence[int | None]) -> int | None:
    """One item's panel score under ``rule`` from its runs' scores (None: that run left it unscored)."""
    given = [s for s in scores if s is not None]
    if not given:
        return None
    ones = sum(given)
    if rule == "any":
        return int(ones > 0)
    if rule == "all":
        return int(ones == len(given))
    if 2 * ones == len(given):
        return None
    return int(2 * ones > len(given))


def decided(run: Run, policy: Policy) -> Run:
    """The run with its items decided under ``policy`` (``recorded``: as they are)."""
    if policy == "recorded":
        return run
    variant: Variant = policy
    return replace(run, records=[replay_record(r, variant) for r in run.records])


def combine(runs: Sequence[Run], rule: Rule, name: str) -> Run:
    """The panel of ``runs`` (each decided as the caller chose) as a run: one record per item of the first
    run, its score by ``rule``, its ``why`` naming every member's score. A record's other fields are the first
    run's; its judge calls are not kept (each member's are in its own run), so a panel is not replayed."""
    if len(runs) < 2:
        raise UsageError("a panel needs at least two runs")
    others = [{r.id_key: r for r in run.records} for run in runs[1:]]
    out = []
    for first in runs[0].records:
        members = [first, *(o.get(first.id_key) for o in others)]
        scores = [m.score if m is not None else None for m in members]
        score = vote(rule, scores)
        said = ", ".join(f"{run.name} {_word(s)}" for run, s in zip(runs, scores, strict=True))
        unscored: Unscored | None = None
        if score is None:
            unscored = "judges_split" if any(s is not None for s in scores) else "no_score"
        out.append(
            replace(
                first,
                score=score,
                unscored_reason=unscored,
                decided_by="panel" if score is not None else None,
                why=f"{rule} of {len(runs)} runs: {said}",
                judges=[],
                llm_calls=0,
                cost_usd=0.0,
                votes=None,
            )
        )
    return Run(name, runs[0].path, out, runs[0].summary)


def _word(score: int | None) -> str:
    return "unscored" if score is None else str(score)


# --------------------------------------------------------------------------- candidates as bit sets


@dataclass(frozen=True, slots=True, order=True)
class Member:
    """One stored run (its configuration's name) decided under one policy."""

    config: str
    policy: Policy = "recorded"

    @property
    def name(self) -> str:
        return self.config if self.policy == "recorded" else f"{self.config}@{self.policy}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A single member, or a panel of members of distinct configurations under a rule."""

    rule: Rule
    members: tuple[Member, ...]

    @property
    def name(self) -> str:
        if self.rule == "single":
            return self.members[0].name
        return f"{self.rule}({', '.join(m.name for m in self.members)})"

    @property
    def configs(self) -> frozenset[str]:
        return frozenset(m.config for m in self.members)


@dataclass(frozen=True, slots=True)
class Tally:
    """Decisions over a part's items as two bit sets: bit i of ``ones`` (``zeros``) set when item i is
    scored 1 (0); neither when it is unscored."""

    ones: int
    zeros: int


@dataclass(frozen=True, slots=True)
class Part:
    """One labels file's items, with every member's decisions on them."""

    name: str
    ids: list[str]
    positive: int
    """Items the experts label correct."""
    reviewed: int
    """Items labelled by people (ROSE-VEC's Spider part has 50 labelled from EX without review)."""
    databases: dict[str, int]
    """The items of each database."""
    members: dict[Member, Tally]
    notes: list[str] = field(default_factory=list)
    """Members left out, and why."""

    @property
    def all(self) -> int:
        return (1 << len(self.ids)) - 1


def _votes(records: dict[str, Record], ids: Sequence[str]) -> Tally:
    ones = zeros = 0
    for i, k in enumerate(ids):
        r = records.get(k)
        if r is None or r.score is None:
            continue
        if r.score:
            ones |= 1 << i
        else:
            zeros |= 1 << i
    return Tally(ones, zeros)


def build_part(labels: LabelSet, runs: Sequence[Run], policies: Sequence[Policy]) -> Part:
    """The part of ``labels``: its items and, for each run and policy, the decisions on them (items the run
    holds about another database or another prediction count as unscored). A policy that leaves items
    ``not_replayable`` (a reply the run never asked for) is not a member, and a note says so."""
    ids = list(labels.labels)
    positive = sum(1 << i for i, k in enumerate(ids) if labels.labels[k].correct)
    reviewed = sum(1 << i for i, k in enumerate(ids) if labels.labels[k].reviewed)
    databases: dict[str, int] = {}
    for i, k in enumerate(ids):
        db = labels.labels[k].db_id or ""
        databases[db] = databases.get(db, 0) | (1 << i)
    members: dict[Member, Tally] = {}
    notes = []
    for run in runs:
        matched = {p.id for p in pair(run, labels).items if p.unscored_reason not in _ABSENT}
        records = {k: r for r in run.records if (k := key(r.id)) in matched}
        judged = any(r.judges for r in records.values())
        evidence = any(carries_evidence(r) for r in records.values())
        for policy in policies:
            if policy != "recorded" and not judged:
                continue
            if policy == "evidence" and not evidence:
                notes.append(f"{run.name}@evidence left out: its records carry no deterministic evidence ({NEVER})")
                continue
            got = records if policy == "recorded" else _replayed(records, policy)
            lost = sum(1 for r in got.values() if r.unscored_reason == "not_replayable")
            if lost:
                notes.append(f"{run.name}@{policy} left out: {lost} items need a reply the run never asked for")
                continue
            members[Member(run.name, policy)] = _votes(got, ids)
    return Part(labels.name, ids, positive, reviewed, databases, members, notes)


_ABSENT = ("absent_from_run", "db_mismatch", "sql_mismatch")
NEVER = "it would decide as never; rose join grafts ours onto imported runs"


def _replayed(records: dict[str, Record], policy: Policy) -> dict[str, Record]:
    variant: Variant = "always" if policy == "recorded" else policy
    return {k: replay_record(r, variant) for k, r in records.items()}


def _combine(rule: Rule, votes: Sequence[Tally]) -> Tally:
    """The panel's decisions from its members' (:func:`vote`, on every item at once)."""
    ones = zeros = 0
    for v in votes:
        ones |= v.ones
        zeros |= v.zeros
    if rule == "any":
        return Tally(ones, zeros & ~ones)
    if rule == "all":
        return Tally(ones & ~zeros, zeros)
    n_ones, n_zeros = _count([v.ones for v in votes]), _count([v.zeros for v in votes])
    return Tally(_greater(n_ones, n_zeros), _greater(n_zeros, n_ones))


def _count(sets: Sequence[int]) -> list[int]:
    """How many of the bit sets hold each item, as a vertical binary number (bit planes, lowest first)."""
    planes: list[int] = []
    for carry in sets:
        for i, plane in enumerate(planes):
            planes[i], carry = plane ^ carry, plane & carry
        if carry:
            planes.append(carry)
    return planes


def _greater(a: list[int], b: list[int]) -> int:
    """The items where the vertical number ``a`` exceeds ``b``."""
    width = max(len(a), len(b))
    a, b = a + [0] * (width - len(a)), b + [0] * (width - len(b))
    greater, equal = 0, -1
    for x, y in zip(reversed(a), reversed(b), strict=True):
        greater |= equal & x & ~y
        equal &= ~(x ^ y)
    return greater


# --------------------------------------------------------------------------- the choice, made honestly


@dataclass(frozen=True, slots=True)
class Pool:
    """The configurations a choice may draw on (``o3-class``: ``o3-*``, ``gemini-*``), by name patterns."""

    name: str
    patterns: tuple[str, ...] = ("*",)

    def admits(self, config: str) -> bool:
        return any(fnmatch.fnmatchcase(config, p) for p in self.patterns)

    @classmethod
    def parse(cls, text: str) -> Pool:
        """``NAME=PATTERN[,PATTERN...]``, or a bare ``NAME`` (every configuration)."""
        name, _, patterns = text.partition("=")
        if not name.strip():
            raise UsageError(f"--pool {text!r}: give NAME=PATTERN[,PATTERN...]")
        found = tuple(p.strip() for p in patterns.split(",") if p.strip())
        return cls(name.strip(), found or ("*",))


def candidates(members: Iterable[Member], max_size: int, rules: Sequence[Rule] = RULES) -> Iterator[Candidate]:
    """Every member alone, and every panel of 2 to ``max_size`` members of distinct configurations under each
    rule (majority panels of odd size only: an even one ties on its own)."""
    pool = sorted(members)
    for m in pool:
        yield Candidate("single", (m,))
    for size in range(2, max_size + 1):
        for group in combinations(pool, size):
            if len({m.config for m in group}) < size:
                continue
            for rule in rules:
                if rule == "majority" and size % 2 == 0:
                    continue
                yield Candidate(rule, group)


def confusion(v: Tally, positive: int, mask: int) -> Confusion:
    """The agreement table of decisions ``v`` with the experts on the items of ``mask``."""
    negative = ~positive & mask
    ones, zeros = v.ones & mask, v.zeros & mask
    return Confusion(
        tp=(ones & positive).bit_count(),
        tn=(zeros & negative).bit_count(),
        fp=(ones & negative).bit_count(),
        fn=(zeros & positive).bit_count(),
    )


def _kappa(v: Tally, positive: int, mask: int) -> float:
    k = kappa(confusion(v, positive, mask))
    return -2.0 if k is None else k


@dataclass(frozen=True, slots=True)
class Scored:
    """Agreement of a set of decisions with the experts, in percent."""

    kappa: float | None
    accuracy: float | None
    n: int
    """Items scored (the metrics are over these)."""
    unscored: int
    """Items of the set left unscored."""

    @classmethod
    def of(cls, v: Tally, positive: int, mask: int) -> Scored:
        c = confusion(v, positive, mask)
        accuracy = (c.tp + c.tn) / c.n if c.n else None
        return cls(pct(kappa(c)), pct(accuracy), c.n, mask.bit_count() - c.n)


@dataclass(frozen=True, slots=True)
class Selection:
    """A candidate chosen on some labels and reported on others."""

    pool: str
    protocol: Literal["part", "database"]
    chosen_on: str
    """The labels the choice was made on (a part; for ``database``, the part's other databases, fold by fold)."""
    reported_on: str
    """The labels the figure is over."""
    held_out: Scored
    """Agreement of the chosen candidate(s) on the labels they were not chosen on."""
    chosen: dict[str, int]
    """The candidates chosen (one for ``part``; per fold for ``database``), with how many folds chose each."""
    in_sample: tuple[str, Scored]
    """The best candidate chosen and reported on the same labels, for comparison (optimistic by design)."""
    candidates: int
    """Candidates the choice was among."""


def _best(cands: Sequence[tuple[Candidate, Tally]], positive: int, mask: int) -> tuple[Candidate, Tally]:
    return max(cands, key=lambda cv: (_kappa(cv[1], positive, mask), _neg(cv[0].name)))


def _neg(name: str) -> tuple[int, ...]:
    """Ties broken by name, the first in order winning (max over the negated code points)."""
    return (*(-ord(c) for c in name), 0)


def count(members: Iterable[Member], max_size: int, rules: Sequence[Rule] = RULES) -> int:
    """How many candidates :func:`candidates` makes, without making them."""
    per_config = Counter(m.config for m in members)
    sizes = list(per_config.values())
    total = sum(sizes)
    for size in range(2, max_size + 1):
        groups = _choose_distinct(sizes, size)
        total += groups * sum(1 for r in rules if not (r == "majority" and size % 2 == 0))
    return total


def _choose_distinct(sizes: Sequence[int], k: int) -> int:
    """Ways to pick k members of k distinct configurations (``sizes``: members per configuration)."""
    ways = [1] + [0] * k  # elementary symmetric polynomials of the sizes
    for n in sizes:
        for j in range(k, 0, -1):
            ways[j] += ways[j - 1] * n
    return ways[k]


def _scored(
    part: Part, pool: Pool, members: set[Member], max_size: int, rules: Sequence[Rule]
) -> list[tuple[Candidate, Tally]]:
    """Every candidate of the pool's members, with its decisions on the part's items."""
    admitted = [m for m in members if pool.admits(m.config)]
    n = count(admitted, max_size, rules)
    if n > SELECT_MAX_CANDIDATES:
        raise UsageError(
            f"pool {pool.name}: {n:,} candidates on {part.name}, more than {SELECT_MAX_CANDIDATES:,}: "
            "give a smaller --max-size, fewer --policies or --rules, or a narrower --pool"
        )
    out = []
    for c in candidates(admitted, max_size, rules):
        votes = [part.members[m] for m in c.members]
        out.append((c, votes[0] if c.rule == "single" else _combine(c.rule, votes)))
    return out


def by_part(
    a: Part,
    b: Part,
    pool: Pool,
    *,
    max_size: int = 3,
    rules: Sequence[Rule] = RULES,
) -> list[Selection]:
    """Chosen on one part and reported on the other, both ways, among the candidates both parts have; a part
    with items labelled without review is also taken without them (chosen on, and reported on)."""
    shared = {m for m in a.members if m in b.members}
    out = []
    for x, y in ((a, b), (b, a)):
        on_x, on_y = _scored(x, pool, shared, max_size, rules), dict(_scored(y, pool, shared, max_size, rules))
        if not on_x:
            continue
        by_name = {c.name: v for c, v in on_y.items()}
        for x_mask, x_name in _masks(x):
            chosen, _ = _best(on_x, x.positive, x_mask)
            for y_mask, y_name in _masks(y):
                best, best_v = _best(list(on_y.items()), y.positive, y_mask)
                out.append(
                    Selection(
                        pool.name,
                        "part",
                        x_name,
                        y_name,
                        Scored.of(by_name[chosen.name], y.positive, y_mask),
                        {chosen.name: 1},
                        (best.name, Scored.of(best_v, y.positive, y_mask)),
                        len(on_x),
                    )
                )
    return out


def _masks(p: Part) -> list[tuple[int, str]]:
    """The part's items, and, when some were labelled without review, the reviewed ones alone."""
    out = [(p.all, f"{p.name} ({p.all.bit_count()})")]
    if p.reviewed != p.all:
        out.append((p.reviewed, f"{p.name} reviewed ({p.reviewed.bit_count()})"))
    return out


def by_database(p: Part, pool: Pool, *, max_size: int = 3, rules: Sequence[Rule] = RULES) -> Selection | None:
    """Leave one database out: for each database, the candidate that agrees best on the part's other
    databases decides its items; the held-out figure is over every item so decided."""
    scored = _scored(p, pool, set(p.members), max_size, rules)
    if not scored or len(p.databases) < 2:
        return None
    ones = zeros = 0
    chosen: Counter[str] = Counter()
    for db in sorted(p.databases):
        fold = p.databases[db]
        best, v = _best(scored, p.positive, p.all & ~fold)
        chosen[best.name] += 1
        ones |= v.ones & fold
        zeros |= v.zeros & fold
    best, v = _best(scored, p.positive, p.all)
    return Selection(
        pool.name,
        "database",
        f"{p.name}: the other {len(p.databases) - 1} databases",
        f"{p.name} ({p.all.bit_count()}), each database held out",
        Scored.of(Tally(ones, zeros), p.positive, p.all),
        dict(chosen.most_common()),
        (best.name, Scored.of(v, p.positive, p.all)),
        len(scored),
    )


def select(parts: Sequence[Part], pool: Pool, *, max_size: int = 3, rules: Sequence[Rule] = RULES) -> list[Selection]:
    """Every honest choice for the pool: across parts for what runs on two (both ways), and leave one database
    out within each part for everything run on it."""
    out: list[Selection] = []
    for a, b in combinations(parts, 2):
        out += by_part(a, b, pool, max_size=max_size, rules=rules)
    for p in parts:
        found = by_database(p, pool, max_size=max_size, rules=rules)
        if found is not None:
            out.append(found)
    return out
