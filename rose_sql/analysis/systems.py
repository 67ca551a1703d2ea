"""The re-evaluation table across systems: the official readings and ROSE, then EX against ROSE.

For each system (one run folder) its :class:`Headline`: the official readings (BIRD EX, test-suite
EX, Soft-F1) in percent, each with the number of items it is defined on, and ROSE, the mean score over
scored items, once a judge has scored them. While items await a judge (a run without
``--judge-model``) ROSE is no number but their count: the only scores execution settles alone are the
0s of predictions that fail, and their mean says nothing about a system. An undefined number is
None here and a word in every view (:func:`shown`, :func:`rose_shown`), never 0.

Where ROSE exists, EX (the ``bird_ex`` reading by default) and ROSE are compared on the items where
*both* are defined, so the gap compares like with like; the same by difficulty; and the discordance
between them (items where EX and ROSE differ) overall and inside the items the judges flagged GoldX
(gold SQL wrong) or AmbQ (question ambiguous), with the share of all discordance each subset
explains, as in the ROSE paper's analysis. Items missing either number are counted (``ex_undefined``,
``unscored``), never silently dropped.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rose_sql.analysis.runs import Completeness, Run, completeness
from rose_sql.record import Record
from rose_sql.summary import READINGS, Summary

SUBSETS = ("goldx", "ambq", "goldx_or_ambq")
_COUNTS = ("discordant", "ex_only", "rose_only")
READING_NAMES = {
    "bird_ex": "BIRD EX",
    "ts_ex": "TS EX",
    "ts_ex_keep_distinct": "TS EX keep-distinct",
    "soft_f1": "Soft-F1",
}
"""The official readings as the views name them."""
AWAITING, UNDEFINED = "awaiting judge", "undefined"
"""The words shown in place of a number: ROSE while items await a judge; a number defined on no item."""
_DIFFICULTY_RANK = {"simple": 0, "easy": 0, "moderate": 1, "medium": 1, "challenging": 2, "hard": 2, "extra": 3}


def ordered_difficulties(labels: Iterable[str]) -> list[str]:
    """Difficulty labels from easiest to hardest (BIRD's and Spider's names known; others after, sorted)."""
    return sorted(set(labels), key=lambda d: (_DIFFICULTY_RANK.get(d.lower(), 9), d))


@dataclass(frozen=True, slots=True)
class Mean:
    """A mean in percent over the items where it is defined."""

    value: float | None
    """Percent, two decimals; None when defined on no item (and for ROSE while items await a judge)."""
    n: int
    """Items it is defined on (for ROSE: the scored items)."""


@dataclass(frozen=True, slots=True)
class Headline:
    """What a system's run says at a glance: the official readings, and ROSE once a judge has scored."""

    items: int
    """Records in the run."""
    completeness: Completeness
    """Whether every item of the input has a record (``partial`` runs look finished otherwise)."""
    readings: dict[str, Mean]
    """The official readings by name (:data:`rose_sql.summary.READINGS`)."""
    rose: Mean
    """The mean score over scored items; its value is None while any item awaits a judge."""
    awaiting_judge: int
    """Items no judge has scored yet (reason ``awaiting_judge``)."""

    @property
    def rose_ready(self) -> bool:
        """Whether ROSE is a number."""
        return self.rose.value is not None


def _pct(part: float, whole: int) -> float | None:
    return round(100 * part / whole, 2) if whole else None


def reading(record: Record, name: str) -> int | None:
    """An official reading of a record by name (``bird_ex``, ``ts_ex``, ``ts_ex_keep_distinct``)."""
    value: int | None = getattr(record.readings, name)
    return value


def reading_means(records: Sequence[Record]) -> dict[str, Mean]:
    """Each official reading's mean over the records where it is defined."""
    out = {}
    for name in READINGS:
        values = [v for r in records if (v := getattr(r.readings, name)) is not None]
        out[name] = Mean(_pct(sum(values), len(values)), len(values))
    return out


def _rose(mean: float | None, scored: int, awaiting: int) -> Mean:
    return Mean(None if awaiting or mean is None else round(100 * mean, 2), scored)


def headline(records: Sequence[Record], state: Completeness = "unknown") -> Headline:
    """The headline of a run's records."""
    scores = [r.score for r in records if r.score is not None]
    awaiting = sum(1 for r in records if r.unscored_reason == "awaiting_judge")
    mean = sum(scores) / len(scores) if scores else None
    return Headline(len(records), state, reading_means(records), _rose(mean, len(scores), awaiting), awaiting)


def summary_headline(s: Summary) -> Headline:
    """The headline of a ``summary.json`` (what ``rose run`` prints as it ends)."""
    means = {}
    for name in READINGS:
        value: float | None = getattr(s, name)
        means[name] = Mean(None if value is None else round(100 * value, 2), s.readings_n.get(name, 0))
    awaiting = s.unscored.get("awaiting_judge", 0)
    return Headline(s.n, completeness(s.manifest, s), means, _rose(s.rose, s.scored, awaiting), awaiting)


def shown(m: Mean, unit: str = "") -> str:
    """A mean with the items it is defined on, ``79.12 (972)``; ``undefined`` when defined on none."""
    return UNDEFINED if m.value is None else f"{m.value:.2f}{unit} ({m.n})"


def rose_shown(h: Headline) -> str:
    """ROSE as every view shows it: ``59.94 (322)``, ``awaiting judge (971 items)`` or ``undefined``."""
    if h.awaiting_judge:
        return f"{AWAITING} ({h.awaiting_judge} {'item' if h.awaiting_judge == 1 else 'items'})"
    return shown(h.rose)


@dataclass(frozen=True, slots=True)
class Scores:
    """EX and ROSE on one group of items."""

    n: int
    """Items where both EX and ROSE are defined."""
    ex: float | None
    """EX in percent."""
    rose: float | None
    """ROSE in percent."""
    gap: float | None
    """ROSE minus EX, in points."""


@dataclass(frozen=True, slots=True)
class Discordance:
    """EX and ROSE disagreeing, inside one subset of items."""

    n: int
    """Items of the subset where both are defined."""
    discordant: int
    """Items where they differ."""
    rate: float | None
    """discordant / n, in percent."""
    share: float | None
    """This subset's discordant items over all discordant items of the system, in percent."""


@dataclass(frozen=True, slots=True)
class SystemRow:
    """One system's line of the re-evaluation table.

    The EX-against-ROSE fields (``overall`` to ``subsets``) are empty or None while ROSE is no number
    (items await a judge): the few items execution scored alone would compare EX with 0s only.
    """

    system: str
    """The run's name."""
    headline: Headline
    """The official readings and ROSE."""
    unscored: int
    """Items without a ROSE score."""
    ex_undefined: int
    """Items without the EX reading compared."""
    ex_by_difficulty: dict[str, Mean]
    """The EX reading compared, per difficulty label, over the items where it is defined."""
    overall: Scores
    """EX, ROSE and gap on every item where both are defined."""
    by_difficulty: dict[str, Scores]
    """The same per difficulty label."""
    discordant: int | None
    """Items where EX and ROSE differ."""
    ex_only: int | None
    """EX accepts, ROSE rejects (EX false positives, by ROSE's reading)."""
    rose_only: int | None
    """ROSE accepts, EX rejects (EX false negatives, by ROSE's reading)."""
    subsets: dict[str, Discordance] = field(default_factory=dict)
    """Discordance inside the GoldX, AmbQ and either-flag subsets."""


def _scores(pairs: Sequence[tuple[int, int]]) -> Scores:
    n = len(pairs)
    ex, rose = _pct(sum(e for e, _ in pairs), n), _pct(sum(r for _, r in pairs), n)
    gap = round(rose - ex, 2) if ex is not None and rose is not None else None
    return Scores(n, ex, rose, gap)


def _flagged(record: Record, subset: str) -> bool:
    labels = record.labels
    if subset == "goldx_or_ambq":
        return labels.goldx is True or labels.ambq is True
    return getattr(labels, subset) is True


def system_row(run: Run, which: str = "bird_ex") -> SystemRow:
    """The re-evaluation line of one run, EX being the reading ``which``."""
    head = headline(run.records, run.completeness)
    difficulties = ordered_difficulties(str(r.difficulty) for r in run.records if r.difficulty)
    ex_by_difficulty = {}
    for d in difficulties:
        values = [v for r in run.records if r.difficulty == d and (v := reading(r, which)) is not None]
        ex_by_difficulty[d] = Mean(_pct(sum(values), len(values)), len(values))
    common: dict[str, Any] = {
        "system": run.name,
        "headline": head,
        "unscored": sum(1 for r in run.records if r.score is None),
        "ex_undefined": sum(1 for r in run.records if reading(r, which) is None),
        "ex_by_difficulty": ex_by_difficulty,
    }
    if not head.rose_ready:
        none = Scores(0, None, None, None)
        return SystemRow(**common, overall=none, by_difficulty={}, discordant=None, ex_only=None, rose_only=None)
    both = []
    for r in run.records:
        ex = reading(r, which)
        if ex is not None and r.score is not None:
            both.append((r, int(ex), int(r.score)))
    discordant = [r for r, e, s in both if e != s]
    subsets = {}
    for name in SUBSETS:
        inside = [(r, e, s) for r, e, s in both if _flagged(r, name)]
        k = sum(1 for _, e, s in inside if e != s)
        subsets[name] = Discordance(len(inside), k, _pct(k, len(inside)), _pct(k, len(discordant)))
    paired_difficulties = ordered_difficulties(str(r.difficulty) for r, _, _ in both if r.difficulty)
    return SystemRow(
        **common,
        overall=_scores([(e, s) for _, e, s in both]),
        by_difficulty={d: _scores([(e, s) for r, e, s in both if r.difficulty == d]) for d in paired_difficulties},
        discordant=len(discordant),
        ex_only=sum(1 for _, e, s in both if e == 1 and s == 0),
        rose_only=sum(1 for _, e, s in both if e == 0 and s == 1),
        subsets=subsets,
    )


def leaderboard(runs: Sequence[Run], reading: str = "bird_ex") -> list[SystemRow]:
    """One row per run, ranked by ROSE (then the EX reading), best first; runs without ROSE after."""

    def rank(row: SystemRow) -> tuple[float, float, str]:
        h = row.headline
        return -(h.rose.value if h.rose.value is not None else -1.0), -(h.readings[reading].value or -1.0), row.system

    return sorted((system_row(r, reading) for r in runs), key=rank)


def to_json(rows: Sequence[SystemRow], reading: str = "bird_ex") -> str:
    """The table as JSON (percent values, two decimals; an undefined number is null)."""
    return json.dumps({"reading": reading, "systems": [asdict(r) for r in rows]}, indent=2, ensure_ascii=False) + "\n"


def to_csv(rows: Sequence[SystemRow]) -> str:
    """The table as CSV, one line per system; readings, difficulties and subsets are flattened.

    An undefined number is an empty cell: ``rose`` is empty while ``awaiting_judge`` items wait.
    """
    difficulties = ordered_difficulties(d for row in rows for d in row.ex_by_difficulty)
    head = ["system", "items", "completeness"]
    for name in READINGS:
        head += [name, f"{name}_n"]
    head += ["rose", "scored", "awaiting_judge", "unscored", "ex_undefined", "pair_n", "pair_ex", "pair_rose", "gap"]
    for d in difficulties:
        head += [f"{d}_ex", f"{d}_ex_n", f"{d}_pair_n", f"{d}_pair_ex", f"{d}_pair_rose", f"{d}_gap"]
    head += list(_COUNTS)
    for name in SUBSETS:
        head += [f"{name}_n", f"{name}_discordant", f"{name}_rate", f"{name}_share"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(head)
    for row in rows:
        h, o = row.headline, row.overall
        line: list[Any] = [row.system, h.items, h.completeness]
        for name in READINGS:
            line += [h.readings[name].value, h.readings[name].n]
        line += [h.rose.value, h.rose.n, h.awaiting_judge, row.unscored, row.ex_undefined, o.n, o.ex, o.rose, o.gap]
        for d in difficulties:
            ex = row.ex_by_difficulty.get(d, Mean(None, 0))
            g = row.by_difficulty.get(d, Scores(0, None, None, None))
            line += [ex.value, ex.n, g.n, g.ex, g.rose, g.gap]
        line += [row.discordant, row.ex_only, row.rose_only]
        for name in SUBSETS:
            x = row.subsets.get(name)
            line += [x.n, x.discordant, x.rate, x.share] if x is not None else [None] * 4
        w.writerow(["" if v is None else v for v in line])
    return buf.getvalue()
