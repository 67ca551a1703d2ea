"""The accounting seam: every figure a view shows, with its numerator, its denominator and what it left out.

ROSE and the official readings (BIRD EX, TS EX, TS EX keep-distinct, Soft-F1) are means over the items
where each is defined, and a mean alone misleads: 82.69 over the 52 items whose database exists is not
82.69 over a benchmark of 500, and a ROSE over the 91 items a judge answered is not a ROSE over 129. So
each figure is a :class:`Figure`: its sum (``hits``), the items it is over (``n``), the items it could
have been over (``of``: the run, or a difficulty's items), and the items it left out, by reason
(``left_out``, summing to ``of - n``). Computed here and only here, from what a figure needs of each
record (:class:`Counted`: :class:`rose_sql.summary.Brief` in a run, the records of a finished run
through it), for ``summary.json``, the terminal, ``rose compare``, the HTML report and the inspect
scorer alike; :func:`shown` and :func:`left_out_lines` are how every view says it.

What is counted:

- an item without a prediction for a question of the gold file (``no_prediction``) is a wrong
  prediction: scored 0 and in every denominator, as leaderboards count it, and counted apart
  (``Figure.no_prediction``) so that no view hides it;
- an item unscored for any other reason is left out of ROSE under that reason
  (:data:`rose_sql.decide.UNSCORED`);
- a reading is left out of an item for the reason its gap has (:data:`GAPS`): the item's own reason when
  its gold could not run (``db_missing``, ``gold_error``...), else why that reading alone is undefined
  (a result cut at the row cap, the test suite's readings on an engine other than SQLite...);
- the official readings count what the official scripts count: a gold that fails on its own account
  (an error, a refusal, a confirmed runaway) makes BIRD EX and Soft-F1 0, as BIRD's scripts count any
  failure, and a prediction the policy refuses is 0 as a failing one; both are named beneath the figure
  (``Figure.counted_0``). Our stricter accounting stays beside it, labelled (:attr:`Figure.stricter`: the
  items with a working gold only), so that "BIRD EX" is always the official script's number on the same
  items. Where the official script has no number (the test suite asserts that every gold executes, and
  stops), the reading is left out as ``official_aborts``;
- ROSE is no number (``value`` None) while any item awaits a judge: the only scores execution settles
  alone are the 0s of failing predictions, and their mean says nothing about a system. A figure over no
  item is no number either. Never 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from rose_sql.readings.formulas import Readings

if TYPE_CHECKING:
    from rose_sql.record import Record

READINGS = ("bird_ex", "spider_ex", "spider_ex_keep_distinct", "ts_ex", "ts_ex_keep_distinct", "soft_f1")
"""The official readings, in the order every view shows them."""
FIGURES = ("rose", *READINGS)
"""Every figure of a run: ROSE, then the official readings."""
NAMES = {
    "rose": "ROSE",
    "bird_ex": "BIRD EX",
    "spider_ex": "Spider EX",
    "spider_ex_keep_distinct": "Spider EX keep-distinct",
    "ts_ex": "TS EX",
    "ts_ex_keep_distinct": "TS EX keep-distinct",
    "soft_f1": "Soft-F1",
    "spider_em": "Spider EM",
    "their_ex": "their EX",
}
"""How the views name the figures."""
AWAITING, UNDEFINED = "awaiting judge", "undefined"
"""The words shown in place of a number: ROSE while items await a judge; a figure over no item."""

GAPS: dict[str, str] = {
    "no_gold": "the item has no gold SQL: the official readings compare with one",
    "truncated": "a result was cut at the row cap, so the reading cannot be computed honestly",
    "ts_undefined": "the test suite's version of the gold (DISTINCT removed, or kept) does not execute or is cut "
    "at the row cap, or its column matching gave up (too many columns look alike)",
    "not_on_engine": "the Spider test suite runs on SQLite only: its readings are not defined on this engine",
    "no_variants": "test-suite accuracy needs the test suite's variant databases in the db_id's folder, and it "
    "holds one database: the reading on that one is spider_ex",
    "not_recorded": "the record holds no such reading (an imported run, or a scores file)",
    "not_in_their_ex": "their EX outputs have no entry for this item, although their ROSE outputs have one",
    "official_aborts": "the gold fails, and the test suite's script asserts that every gold executes: it stops "
    "there and gives no number for the run",
}
"""Why a reading is undefined on an item whose gold ran, beside the unscored reasons of
:data:`rose_sql.decide.UNSCORED` (an item whose gold could not run leaves every reading out for its own
reason)."""
_ITEM_REASONS = frozenset(
    {
        "db_missing",
        "db_unreadable",
        "gold_error",
        "internal_error",
        "wall_guard",
        "no_score",
        "absent_from_outputs",
        "failed_in_their_run",
    }
)
"""Unscored reasons that leave the readings out too: nothing was compared."""

COUNTED_0: dict[str, str] = {
    "gold_error": "the gold fails on its own account (an error, a refusal, a confirmed runaway): BIRD's scripts "
    "count the item 0, and so does the official reading; the stricter figure beside it leaves it out",
    "policy_refused": "our policy refused the prediction: it counts 0, as a prediction that fails",
}
"""Why an official reading counts an item 0 where a reader might expect it left out (named beneath the
figure, :attr:`Figure.counted_0`)."""
STRICTER_OUT = ("gold_error",)
"""Of :data:`COUNTED_0`, the reasons our stricter accounting leaves out instead (:attr:`Figure.stricter`)."""
STRICTER_LABEL = "with a working gold"
"""How the views label the stricter figure."""
_GOLD_FAILED = frozenset({"error", "timeout", "rejected"})
"""A gold's statuses that are its own failure (``missing``, ``unreadable`` and ``guard`` are not: the
database's, or an unconfirmed wall clock)."""


class Counted(Protocol):
    """What a figure needs of one record."""

    @property
    def score(self) -> int | None: ...
    @property
    def unscored_reason(self) -> str | None: ...
    @property
    def readings(self) -> Readings: ...
    @property
    def gaps(self) -> tuple[str | None, ...]:
        """Per reading of :data:`READINGS`, why it is undefined (None where it is defined)."""
        ...

    @property
    def predicted(self) -> bool:
        """False for a question of the gold file that the prediction file has no prediction for."""
        ...

    @property
    def difficulty(self) -> str | None: ...

    @property
    def counted_0(self) -> str | None:
        """Why an official reading of the item is 0 by the official rule alone (:data:`COUNTED_0`), or None."""
        ...


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure over a group of items: what it sums, what it is over, what it left out."""

    name: str
    """``rose`` or a reading of :data:`READINGS`."""
    hits: float
    """The sum of the item values it is over (scores of 1; Soft-F1 fractions)."""
    n: int
    """Its denominator: the items it is over."""
    of: int
    """The items of the group (the run, a difficulty): ``n`` plus everything left out."""
    left_out: dict[str, int] = field(default_factory=dict)
    """The items not in ``n``, by reason (``awaiting_judge``, ``db_missing``, ``truncated``...)."""
    no_prediction: int = 0
    """Of the items in ``n``, those without a prediction, counted 0."""
    counted_0: dict[str, int] = field(default_factory=dict)
    """Of the items in ``n``, those an official reading counts 0 by the official script's rule, by reason
    (:data:`COUNTED_0`): named beneath the figure; those of :data:`STRICTER_OUT` leave :attr:`stricter`."""

    @property
    def stricter(self) -> Figure | None:
        """Our stricter accounting beside the official figure: the items of :data:`STRICTER_OUT` (a gold
        that fails) left out under their reason instead of counted 0. None when it is the same figure."""
        out = {reason: k for reason, k in self.counted_0.items() if reason in STRICTER_OUT and k}
        if not out:
            return None
        left = Counter(self.left_out)
        left.update(out)
        kept = {reason: k for reason, k in self.counted_0.items() if reason not in out}
        n = self.n - sum(out.values())
        return Figure(self.name, self.hits, n, self.of, _sorted(left), self.no_prediction, kept)

    @property
    def awaiting(self) -> int:
        """Items awaiting a judge: while there are any, ROSE is no number."""
        return self.left_out.get("awaiting_judge", 0)

    @property
    def value(self) -> float | None:
        """The mean as a fraction (six decimals); None over no item, and for ROSE while items await a judge."""
        if not self.n or self.awaiting:
            return None
        return round(self.hits / self.n, 6)

    @property
    def percent(self) -> float | None:
        """The mean in percent (two decimals), None where :attr:`value` is."""
        if not self.n or self.awaiting:
            return None
        return round(100 * self.hits / self.n, 2)

    def to_dict(self) -> dict[str, object]:
        """As JSON data: the fields, and the value as a fraction and in percent (null where undefined)."""
        return {
            "name": self.name,
            "value": self.value,
            "percent": self.percent,
            "hits": round(self.hits, 6),
            "n": self.n,
            "of": self.of,
            "left_out": dict(self.left_out),
            "no_prediction": self.no_prediction,
            "counted_0": dict(self.counted_0),
            "stricter": _stricter_dict(self.stricter),
        }

    def cell(self) -> str:
        """The figure in a table cell: ``82.69 (52/500)`` (``79.12 (972)`` over every item), ``awaiting judge
        (971 items)``, ``undefined``."""
        if self.awaiting:
            return f"{AWAITING} ({self.awaiting} {'item' if self.awaiting == 1 else 'items'})"
        if self.percent is None:
            return UNDEFINED
        cell = f"{self.percent:.2f} ({self.n}/{self.of})" if self.n != self.of else f"{self.percent:.2f} ({self.n})"
        strict = self.stricter
        if strict is None:
            return cell
        head = cell.replace(" (", " (official, ", 1)
        tail = f"{strict.percent:.2f} ({strict.n} {STRICTER_LABEL})" if strict.percent is not None else UNDEFINED
        return f"{head}; {tail}"

    def shown(self) -> str:
        """The figure in a sentence: ``82.69 over 52 of 500 (448 db_missing)``, never a bare number."""
        if self.awaiting:
            head = f"{AWAITING} ({self.awaiting} of {self.of} items)"
        elif self.percent is None:
            head = f"{UNDEFINED} (over no item of {self.of})"
        else:
            head = f"{self.percent:.2f} over {self.n} of {self.of}"
        parts = [f"{count} {reason}" for reason, count in sorted(self.left_out.items(), key=lambda kv: (-kv[1], kv[0]))]
        if self.no_prediction:
            parts.append(f"{self.no_prediction} no_prediction counted 0")
        parts += [f"{k} {reason} counted 0" for reason, k in sorted(self.counted_0.items()) if k]
        shown = head + (f" ({', '.join(parts)})" if parts else "")
        strict = self.stricter
        if strict is None:
            return shown
        beside = f"{strict.percent:.2f}" if strict.percent is not None else UNDEFINED
        return f"{shown.replace(' over ', ' (official) over ', 1)}; {beside} over the {strict.n} {STRICTER_LABEL}"


@dataclass(frozen=True, slots=True)
class Figures:
    """ROSE and the official readings over one group of items, each with its own denominator."""

    items: int
    """Items of the group."""
    rose: Figure
    bird_ex: Figure
    spider_ex: Figure
    spider_ex_keep_distinct: Figure
    ts_ex: Figure
    ts_ex_keep_distinct: Figure
    soft_f1: Figure

    def to_dict(self) -> dict[str, object]:
        """As JSON data (see :meth:`Figure.to_dict`)."""
        return {"items": self.items, **{f.name: f.to_dict() for f in self.all()}}

    def all(self) -> tuple[Figure, ...]:
        """Every figure, in the order of :data:`FIGURES`."""
        return (
            self.rose,
            self.bird_ex,
            self.spider_ex,
            self.spider_ex_keep_distinct,
            self.ts_ex,
            self.ts_ex_keep_distinct,
            self.soft_f1,
        )

    def reading(self, name: str) -> Figure:
        """A figure by name (``rose`` or a reading of :data:`READINGS`)."""
        for f in self.all():
            if f.name == name:
                return f
        raise KeyError(name)


def _sorted(counts: Counter[str]) -> dict[str, int]:
    return dict(sorted(counts.items()))


def _stricter_dict(f: Figure | None) -> dict[str, object] | None:
    if f is None:
        return None
    return {"value": f.value, "percent": f.percent, "n": f.n, "left_out": dict(f.left_out), "label": STRICTER_LABEL}


def figures(items: Iterable[Counted]) -> Figures:
    """The figures of a group of items (every item counted once: deduplicate before)."""
    group = list(items)
    of = len(group)
    scored = [c for c in group if c.score is not None]
    rose = Figure(
        "rose",
        float(sum(c.score or 0 for c in scored)),
        len(scored),
        of,
        _sorted(Counter(str(c.unscored_reason) for c in group if c.score is None)),
        sum(1 for c in scored if not c.predicted),
    )
    readings = []
    for i, name in enumerate(READINGS):
        values: list[float] = []
        gaps: Counter[str] = Counter()
        zero: Counter[str] = Counter()
        for c in group:
            v = getattr(c.readings, name)
            if v is None:
                gaps[c.gaps[i] or "not_recorded"] += 1
            else:
                values.append(v)
                if c.counted_0 is not None and v == 0:
                    zero[c.counted_0] += 1
        absent = sum(1 for c in group if not c.predicted and getattr(c.readings, name) is not None)
        readings.append(Figure(name, float(sum(values)), len(values), of, _sorted(gaps), absent, _sorted(zero)))
    return Figures(of, rose, *readings)


IMPORTED = ("their_ex",)
"""Readings an imported run carries as theirs (``rose import-rose``): named apart from the official ones."""
NOT_EVALUATED = frozenset({"absent_from_outputs", "failed_in_their_run"})
"""Unscored reasons of items the imported run never evaluated (no entry in its outputs)."""


def value(record: Record, name: str) -> float | None:
    """One figure of a record by name: ``rose`` is the score, ``their_ex`` the imported EX (None for our own
    runs), anything else an official reading (None where undefined)."""
    if name == "rose":
        return record.score
    if name == "their_ex":
        return record.imported.ex if record.imported is not None else None
    v: float | None = getattr(record.readings, name, None)
    return v


def imported_figure(name: str, records: Iterable[Record]) -> Figure:
    """A reading of :data:`IMPORTED` over records, with what it left out: the item's own reason when their run
    never evaluated it (:data:`NOT_EVALUATED`), ``not_in_their_ex`` when only their EX lacks it,
    ``not_recorded`` on records of our own runs."""
    group = list(records)
    values: list[float] = []
    gaps: Counter[str] = Counter()
    for r in group:
        v = value(r, name)
        if v is not None:
            values.append(v)
        elif r.unscored_reason in NOT_EVALUATED:
            gaps[str(r.unscored_reason)] += 1
        else:
            gaps["not_in_their_ex" if r.imported is not None else "not_recorded"] += 1
    return Figure(name, float(sum(values)), len(values), len(group), _sorted(gaps))


def by_difficulty(items: Sequence[Counted]) -> dict[str, Figures]:
    """The figures per difficulty label, where items have one (labels in order of first appearance sorted)."""
    labels = sorted({c.difficulty for c in items if c.difficulty})
    return {d: figures(c for c in items if c.difficulty == d) for d in labels}


def gaps(record: Record) -> tuple[str | None, ...]:
    """Why each reading of :data:`READINGS` is undefined on a record (None where it is defined)."""
    return tuple(None if getattr(record.readings, name) is not None else _gap(record, name) for name in READINGS)


def counted_0(record: Record) -> str | None:
    """Why the official readings of a record are 0 by the official rule alone (:data:`COUNTED_0`): its gold
    failed on its own account (``gold_error``), or our policy refused its prediction (``policy_refused``);
    None otherwise, and for imported runs."""
    from rose_sql.sql import NO_STATEMENT

    if record.imported is not None:
        return None
    if record.gold.status in _GOLD_FAILED:
        return "gold_error"
    if record.pred.status == "rejected" and record.pred.error not in NO_STATEMENT:
        return "policy_refused"
    return None


def _gap(r: Record, name: str) -> str:
    if (
        name.startswith(("ts_", "spider_"))
        and r.gold.status in _GOLD_FAILED
        and r.unscored_reason
        in (
            "gold_error",
            None,
        )
    ):
        return "not_on_engine" if r.dialect is not None else "official_aborts"
    if r.unscored_reason in _ITEM_REASONS:
        return r.unscored_reason
    if r.imported is not None:  # another evaluator's outputs: nothing of ours was read
        return "not_recorded"
    if r.gold_sql is None:
        return "no_gold"
    gold, pred = r.gold, r.pred
    if gold.status == "skipped":
        return "not_recorded"
    if gold.status == "guard":
        return "wall_guard"
    if gold.status != "ok":
        return "gold_error"
    if pred.status == "unreadable":
        return "db_unreadable"
    if name.startswith(("ts_", "spider_")) and r.dialect is not None:
        return "not_on_engine"
    if name.startswith("ts_") and r.readings.ts_databases is None:
        return "no_variants"
    if gold.truncated or pred.truncated:
        return "truncated"
    return "ts_undefined" if name.startswith(("ts_", "spider_")) else "not_recorded"


def left_out_lines(figs: Figures) -> list[str]:
    """What the figures leave out, in words, one phrase per set of figures that leave out the same items:
    ``ROSE leaves out 38 judge_error``, ``every figure leaves out 448 db_missing``. Items without a
    prediction (counted 0) are named too. Items awaiting a judge are not (every view says so already:
    ROSE is no number while they wait). Empty when every figure is over every item."""
    out = []
    groups: dict[tuple[tuple[str, int], ...], list[str]] = {}
    for f in figs.all():
        left = {reason: n for reason, n in f.left_out.items() if reason != "awaiting_judge"}
        if left:
            groups.setdefault(tuple(sorted(left.items())), []).append(NAMES[f.name])
    for reasons, names in groups.items():
        subject = "every figure leaves" if len(names) == len(FIGURES) else f"{_and(names)} {_verb(names)}"
        out.append(f"{subject} out {_and([f'{n} {reason}' for reason, n in reasons])}")
    zeros: dict[tuple[tuple[str, int], ...], list[Figure]] = {}
    for f in figs.all():
        if any(f.counted_0.values()):
            zeros.setdefault(tuple(sorted(f.counted_0.items())), []).append(f)
    for reasons, fs in zeros.items():
        names = [NAMES[f.name] for f in fs]
        line = f"{_and(names)} {'counts' if len(names) == 1 else 'count'} {_and([f'{n} {r}' for r, n in reasons])} 0"
        line += ", as the official scripts do"
        beside = [(f, s) for f in fs if (s := f.stricter) is not None]
        if beside:
            shown = [f"{NAMES[f.name]} {s.percent:.2f}" if s.percent is not None else NAMES[f.name] for f, s in beside]
            line += f"; over the {beside[0][1].n} items {STRICTER_LABEL}: {_and(shown)}"
        out.append(line)
    if figs.rose.no_prediction:
        out.append(f"{figs.rose.no_prediction} questions without a prediction are counted 0 (no_prediction)")
    return out


def _verb(names: Sequence[str]) -> str:
    return "leaves" if len(names) == 1 else "leave"


def _and(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
