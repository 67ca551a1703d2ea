"""The re-evaluation table across systems: EX against ROSE, their gap, and where they disagree.

For each system (one run folder): EX (the ``bird_ex`` reading by default) and ROSE (the score), both
in percent over the items where *both* are defined, so the gap compares like with like; the same by
difficulty; and the discordance between them (items where EX and ROSE differ) overall and inside the
items the judges flagged GoldX (gold SQL wrong) or AmbQ (question ambiguous), with the share of all
discordance each subset explains, as in the ROSE paper's analysis. Items missing either number are
counted (``ex_undefined``, ``unscored``), never silently dropped.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rose_sql.analysis.runs import Run
from rose_sql.record import Record

SUBSETS = ("goldx", "ambq", "goldx_or_ambq")
_DIFFICULTY_RANK = {"simple": 0, "easy": 0, "moderate": 1, "medium": 1, "challenging": 2, "hard": 2, "extra": 3}


def ordered_difficulties(labels: Iterable[str]) -> list[str]:
    """Difficulty labels from easiest to hardest (BIRD's and Spider's names known; others after, sorted)."""
    return sorted(set(labels), key=lambda d: (_DIFFICULTY_RANK.get(d.lower(), 9), d))


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
    """One system's line of the re-evaluation table."""

    system: str
    """The run's name."""
    items: int
    """Records in the run."""
    unscored: int
    """Items without a ROSE score."""
    ex_undefined: int
    """Items without an EX reading."""
    overall: Scores
    """EX, ROSE and gap on every item where both are defined."""
    by_difficulty: dict[str, Scores]
    """The same per difficulty label."""
    discordant: int
    """Items where EX and ROSE differ."""
    ex_only: int
    """EX accepts, ROSE rejects (EX false positives, by ROSE's reading)."""
    rose_only: int
    """ROSE accepts, EX rejects (EX false negatives, by ROSE's reading)."""
    subsets: dict[str, Discordance] = field(default_factory=dict)
    """Discordance inside the GoldX, AmbQ and either-flag subsets."""


def _pct(part: float, whole: int) -> float | None:
    return round(100 * part / whole, 2) if whole else None


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


def reading(record: Record, name: str) -> int | None:
    """An official reading of a record by name (``bird_ex``, ``ts_ex``, ``ts_ex_keep_distinct``)."""
    value: int | None = getattr(record.readings, name)
    return value


def system_row(run: Run, which: str = "bird_ex") -> SystemRow:
    """The re-evaluation line of one run, EX being the reading ``which``."""
    both = []
    for r in run.records:
        ex = reading(r, which)
        if ex is not None and r.score is not None:
            both.append((r, int(ex), int(r.score)))
    difficulties = ordered_difficulties(str(r.difficulty) for r, _, _ in both if r.difficulty)
    discordant = [r for r, e, s in both if e != s]
    subsets = {}
    for name in SUBSETS:
        inside = [(r, e, s) for r, e, s in both if _flagged(r, name)]
        d = sum(1 for _, e, s in inside if e != s)
        subsets[name] = Discordance(len(inside), d, _pct(d, len(inside)), _pct(d, len(discordant)))
    return SystemRow(
        system=run.name,
        items=len(run.records),
        unscored=sum(1 for r in run.records if r.score is None),
        ex_undefined=sum(1 for r in run.records if reading(r, which) is None),
        overall=_scores([(e, s) for _, e, s in both]),
        by_difficulty={d: _scores([(e, s) for r, e, s in both if r.difficulty == d]) for d in difficulties},
        discordant=len(discordant),
        ex_only=sum(1 for _, e, s in both if e == 1 and s == 0),
        rose_only=sum(1 for _, e, s in both if e == 0 and s == 1),
        subsets=subsets,
    )


def leaderboard(runs: Sequence[Run], reading: str = "bird_ex") -> list[SystemRow]:
    """One row per run, ranked by ROSE (then EX), best first."""
    rows = [system_row(r, reading) for r in runs]
    return sorted(rows, key=lambda row: (-(row.overall.rose or -1.0), -(row.overall.ex or -1.0), row.system))


def to_json(rows: Sequence[SystemRow], reading: str = "bird_ex") -> str:
    """The table as JSON (percent values, two decimals)."""
    return json.dumps({"reading": reading, "systems": [asdict(r) for r in rows]}, indent=2, ensure_ascii=False) + "\n"


def to_csv(rows: Sequence[SystemRow]) -> str:
    """The table as CSV, one line per system; by-difficulty and subset columns are flattened."""
    difficulties = ordered_difficulties(d for row in rows for d in row.by_difficulty)
    head = ["system", "items", "n", "unscored", "ex_undefined", "ex", "rose", "gap"]
    for d in difficulties:
        head += [f"{d}_n", f"{d}_ex", f"{d}_rose", f"{d}_gap"]
    head += ["discordant", "ex_only", "rose_only"]
    for name in SUBSETS:
        head += [f"{name}_n", f"{name}_discordant", f"{name}_rate", f"{name}_share"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(head)
    for row in rows:
        o = row.overall
        line: list[Any] = [row.system, row.items, o.n, row.unscored, row.ex_undefined, o.ex, o.rose, o.gap]
        for d in difficulties:
            g = row.by_difficulty.get(d, Scores(0, None, None, None))
            line += [g.n, g.ex, g.rose, g.gap]
        line += [row.discordant, row.ex_only, row.rose_only]
        for name in SUBSETS:
            x = row.subsets[name]
            line += [x.n, x.discordant, x.rate, x.share]
        w.writerow(["" if v is None else v for v in line])
    return buf.getvalue()
