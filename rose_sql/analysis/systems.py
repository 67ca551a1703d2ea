"""The re-evaluation table across systems: the official readings and ROSE, then EX against ROSE.

For each system (one run folder) its :class:`Headline`: the official readings (BIRD EX, test-suite
EX, Soft-F1) and ROSE, each a :class:`~rose_sql.accounting.Figure` with the items it is over, the items
of the run, and what it left out by reason (computed by :mod:`rose_sql.accounting`, as ``summary.json``'s).
While items await a judge (a run without ``--judge-model``) ROSE is no number but their count: the only
scores execution settles alone are the 0s of predictions that fail, and their mean says nothing about a
system. An undefined number is None here and a word in every view (:meth:`Figure.cell`), never 0.

Where ROSE exists, EX (the ``bird_ex`` reading by default; ``their_ex``, an imported run's own EX, when no
run has ours: :func:`default_reading`) and ROSE are compared on the items where *both* are defined, so
the gap compares like with like; the same by difficulty; and the discordance between them (items where
EX and ROSE differ) overall and inside the items the judges flagged GoldX (gold SQL wrong) or AmbQ
(question ambiguous), with the share of all discordance each subset explains, as in the ROSE paper's
analysis. Items missing either number are counted (``ex_undefined``,
``unscored``), never silently dropped.

Runs over different items (an imported run holds only the entries its authors' pipeline kept) compare on the
same footing once cut to the items every run has (:func:`common_items`, :func:`restricted`: ``rose compare
--common``); :func:`rank_moves` says how each system's rank moves from its own items to those.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from rose_sql.accounting import (
    AWAITING,
    IMPORTED,
    NAMES,
    NOT_EVALUATED,
    READINGS,
    UNDEFINED,
    Figure,
    Figures,
    figures,
    imported_figure,
    value,
)
from rose_sql.analysis.paired import PairedComparison, item_key
from rose_sql.analysis.runs import Completeness, Run, completeness
from rose_sql.provenance import SubsetInfo
from rose_sql.record import Record
from rose_sql.summary import Brief, Summary

__all__ = ["AWAITING", "UNDEFINED", "Headline", "SystemRow", "headline", "leaderboard", "summary_headline"]

SUBSETS = ("goldx", "ambq", "goldx_or_ambq")
_COUNTS = ("discordant", "ex_only", "rose_only")
READING_NAMES = {name: NAMES[name] for name in READINGS}
"""The official readings as the views name them."""
_DIFFICULTY_RANK = {"simple": 0, "easy": 0, "moderate": 1, "medium": 1, "challenging": 2, "hard": 2, "extra": 3}


def ordered_difficulties(labels: Iterable[str]) -> list[str]:
    """Difficulty labels from easiest to hardest (BIRD's and Spider's names known; others after, sorted)."""
    return sorted(set(labels), key=lambda d: (_DIFFICULTY_RANK.get(d.lower(), 9), d))


@dataclass(frozen=True, slots=True)
class Headline:
    """What a system's run says at a glance: the official readings, and ROSE once a judge has scored."""

    items: int
    """Records in the run."""
    completeness: Completeness
    """Whether every item of the input has a record (``partial`` runs look finished otherwise)."""
    figures: Figures
    """ROSE and the official readings, each with its denominator and what it left out."""
    subset: SubsetInfo | None = None
    """For a run of a subset (``--limit``, ``--ids``), which items of the input; None for the whole input."""

    @property
    def state(self) -> str:
        """What the run covers, in a word or three: ``complete``, ``subset 5 of 10``, ``partial (subset 5 of 10)``."""
        if self.subset is None:
            return self.completeness
        part = f"subset {self.subset.items} of {self.subset.total}"
        return part if self.completeness == "subset" else f"{self.completeness} ({part})"

    @property
    def subset_note(self) -> str | None:
        """The sentence that says a run is of a subset (None for a run of the whole input)."""
        if self.subset is None:
            return None
        how = [f"--limit {self.subset.limit}"] if self.subset.limit is not None else []
        if self.subset.ids is not None:
            how.append(f"--ids {self.subset.ids.path}")
        return (
            f"a subset run ({', '.join(how)}): {self.subset.items} of the input's {self.subset.total} items; every "
            f"figure is over these only, the {self.subset.total - self.subset.items} others are not counted"
        )

    @property
    def rose_ready(self) -> bool:
        """Whether ROSE is a number."""
        return self.figures.rose.value is not None

    @property
    def awaiting_judge(self) -> int:
        """Items no judge has scored yet (reason ``awaiting_judge``)."""
        return self.figures.rose.awaiting


def _pct(part: float, whole: int) -> float | None:
    return round(100 * part / whole, 2) if whole else None


def reading(record: Record, name: str) -> int | None:
    """An EX reading of a record by name: an official one (``bird_ex``, ``ts_ex``...), or ``their_ex``, the
    imported run's own EX (:data:`rose_sql.accounting.IMPORTED`)."""
    v = value(record, name)
    return None if v is None else int(v)


def ex_figure(records: Sequence[Record], name: str) -> Figure:
    """The EX reading ``name`` over records, with its denominator and what it left out."""
    if name in IMPORTED:
        return imported_figure(name, records)
    return figures(Brief.of(r) for r in records).reading(name)


def default_reading(runs: Sequence[Run]) -> str:
    """The EX the views compare ROSE with when none is asked for: BIRD EX where any run has it (ours), else
    the imported runs' own EX (their_ex), labelled as theirs."""
    has = {name for run in runs for r in run.records for name in ("bird_ex", *IMPORTED) if value(r, name) is not None}
    return "bird_ex" if "bird_ex" in has or not has else next(n for n in IMPORTED if n in has)


def common_items(runs: Sequence[Run]) -> set[tuple[str, str, str]]:
    """The items every run has: a record that is not an item its (imported) run never evaluated
    (:data:`rose_sql.accounting.NOT_EVALUATED`)."""
    keys = [{item_key(r) for r in run.records if r.unscored_reason not in NOT_EVALUATED} for run in runs]
    return set.intersection(*keys) if keys else set()


def restricted(runs: Sequence[Run], keys: set[tuple[str, str, str]]) -> list[Run]:
    """The runs cut down to the items ``keys`` names (:func:`common_items`)."""
    return [replace(run, records=[r for r in run.records if item_key(r) in keys]) for run in runs]


def headline(records: Sequence[Record], state: Completeness = "unknown") -> Headline:
    """The headline of a run's records."""
    return Headline(len(records), state, figures(Brief.of(r) for r in records))


def summary_headline(s: Summary) -> Headline:
    """The headline of a ``summary.json`` (what ``rose run`` prints as it ends)."""
    return Headline(s.n, completeness(s.manifest, s), s.figures, s.manifest.subset if s.manifest else None)


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
    ex_by_difficulty: dict[str, Figure]
    """The EX reading compared, per difficulty label, over the items where it is defined."""
    ex: Figure
    """The EX reading compared, over the run's items (an official reading, or their EX)."""
    rose_by_difficulty: dict[str, Figure]
    """ROSE per difficulty label, over the items it scored."""
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
    briefs = [Brief.of(r) for r in run.records]
    head = Headline(len(briefs), run.completeness, figures(briefs), run.manifest.subset if run.manifest else None)
    difficulties = ordered_difficulties(str(r.difficulty) for r in run.records if r.difficulty)
    groups = {d: [r for r in run.records if r.difficulty == d] for d in difficulties}
    row = SystemRow(
        system=run.name,
        headline=head,
        unscored=sum(1 for r in run.records if r.score is None),
        ex_undefined=sum(1 for r in run.records if reading(r, which) is None),
        ex_by_difficulty={d: ex_figure(g, which) for d, g in groups.items()},
        ex=ex_figure(run.records, which),
        rose_by_difficulty={d: figures(Brief.of(r) for r in g).rose for d, g in groups.items()},
        overall=Scores(0, None, None, None),
        by_difficulty={},
        discordant=None,
        ex_only=None,
        rose_only=None,
    )
    if not head.rose_ready:
        return row
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
    return replace(
        row,
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
        rose, ex = row.headline.figures.rose.value, row.ex.value
        return -(rose if rose is not None else -1.0), -(ex if ex is not None else -1.0), row.system

    return sorted((system_row(r, reading) for r in runs), key=rank)


@dataclass(frozen=True, slots=True)
class RankMove:
    """One system ranked on its own items and on the items every system has (``rose compare --common``)."""

    system: str
    rose_own: Figure
    """ROSE over the run's own items."""
    rose_common: Figure
    """ROSE over the common items."""
    ex_own: Figure
    """The EX reading over the run's own items."""
    ex_common: Figure
    """The EX reading over the common items."""
    ranks: dict[str, int]
    """1-based ranks: ``rose_own``, ``rose_common``, ``ex_own``, ``ex_common`` (ties share the better rank)."""

    @property
    def rose_move(self) -> int:
        """Places gained on the common items by ROSE (negative: lost)."""
        return self.ranks["rose_own"] - self.ranks["rose_common"]

    @property
    def ex_move(self) -> int:
        """Places gained on the common items by the EX reading."""
        return self.ranks["ex_own"] - self.ranks["ex_common"]

    def to_dict(self) -> dict[str, object]:
        return {
            "system": self.system,
            **{name: getattr(self, name).to_dict() for name in ("rose_own", "rose_common", "ex_own", "ex_common")},
            "ranks": dict(self.ranks),
            "rose_move": self.rose_move,
            "ex_move": self.ex_move,
        }


def _ranks(values: dict[str, float | None]) -> dict[str, int]:
    """1-based competition ranks, best (highest) first; an undefined value ranks last."""
    order = sorted(values.values(), key=lambda v: -(v if v is not None else -1.0))
    return {name: order.index(v) + 1 for name, v in values.items()}


def rank_moves(own: Sequence[SystemRow], common: Sequence[SystemRow]) -> list[RankMove]:
    """Each system's ranks on its own items (``own``) and on the common items (``common``, the same systems),
    in the order of ``common``."""
    by_name = {r.system: r for r in own}
    ranks = {
        "rose_own": _ranks({r.system: r.headline.figures.rose.value for r in own}),
        "rose_common": _ranks({r.system: r.headline.figures.rose.value for r in common}),
        "ex_own": _ranks({r.system: r.ex.value for r in own}),
        "ex_common": _ranks({r.system: r.ex.value for r in common}),
    }
    return [
        RankMove(
            r.system,
            by_name[r.system].headline.figures.rose,
            r.headline.figures.rose,
            by_name[r.system].ex,
            r.ex,
            {name: ranked[r.system] for name, ranked in ranks.items()},
        )
        for r in common
    ]


def to_json(
    rows: Sequence[SystemRow],
    reading: str = "bird_ex",
    pairs: Sequence[PairedComparison] = (),
    moves: Sequence[RankMove] = (),
    common: int | None = None,
) -> str:
    """The table as JSON (percent values, two decimals; an undefined number is null); ``pairs``: the paired
    comparisons of :mod:`rose_sql.analysis.paired`, under ``pairs``; with ``--common``, the number of common
    items and each system's ranks on its own items and on them (``ranks``)."""
    data: dict[str, object] = {"reading": reading, "systems": [_row_dict(r) for r in rows]}
    if common is not None:
        data["common_items"] = common
        data["ranks"] = [m.to_dict() for m in moves]
    if pairs:
        data["pairs"] = [p.to_dict() for p in pairs]
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _row_dict(row: SystemRow) -> dict[str, object]:
    data = asdict(row)
    data["headline"]["figures"] = row.headline.figures.to_dict()
    data["ex_by_difficulty"] = {d: f.to_dict() for d, f in row.ex_by_difficulty.items()}
    data["ex"] = row.ex.to_dict()
    data["rose_by_difficulty"] = {d: f.to_dict() for d, f in row.rose_by_difficulty.items()}
    return data


def _left_out(f: Figure) -> str:
    return "; ".join(f"{n} {reason}" for reason, n in f.left_out.items())


def to_csv(rows: Sequence[SystemRow]) -> str:
    """The table as CSV, one line per system; readings, difficulties and subsets are flattened.

    An undefined number is an empty cell: ``rose`` is empty while ``awaiting_judge`` items wait.
    """
    difficulties = ordered_difficulties(d for row in rows for d in row.ex_by_difficulty)
    head = ["system", "items", "completeness"]
    for name in READINGS:
        head += [name, f"{name}_n", f"{name}_left_out"]
    head += ["rose", "scored", "rose_left_out", "no_prediction", "awaiting_judge", "unscored", "ex_undefined"]
    head += ["pair_n", "pair_ex", "pair_rose", "gap"]
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
            f = h.figures.reading(name)
            line += [f.percent, f.n, _left_out(f)]
        rose = h.figures.rose
        line += [rose.percent, rose.n, _left_out(rose), rose.no_prediction, h.awaiting_judge, row.unscored]
        line += [row.ex_undefined, o.n, o.ex, o.rose, o.gap]
        for d in difficulties:
            ex = row.ex_by_difficulty.get(d)
            g = row.by_difficulty.get(d, Scores(0, None, None, None))
            line += [ex.percent if ex else None, ex.n if ex else 0, g.n, g.ex, g.rose, g.gap]
        line += [row.discordant, row.ex_only, row.rose_only]
        for name in SUBSETS:
            x = row.subsets.get(name)
            line += [x.n, x.discordant, x.rate, x.share] if x is not None else [None] * 4
        w.writerow(["" if v is None else v for v in line])
    return buf.getvalue()
