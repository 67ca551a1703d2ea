"""What changed between two runs: the items whose outcome differs, two systems or two runs of one.

An item's outcome is its ROSE score and every binary reading (:data:`rose_sql.analysis.paired.BINARY`:
BIRD EX, the test-suite readings, and any later one); two records of the same id differ when any of
them differs (a number against an undefined one included). For each such item the diff keeps what a
reader needs to see why: both scores, the stage that decided each (``execution``, ``prover``,
``refuter``...), the reason (why it is unscored, else our comparator's mismatch reason) with the
record's one-line explanation, and both predicted SQL side by side (with the gold, one when both
agree on it). Items in one run only are listed by id apart, never mixed with the differences.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from rose_sql.accounting import NAMES
from rose_sql.analysis.paired import BINARY, item_key, value
from rose_sql.analysis.runs import Run
from rose_sql.record import Record


@dataclass(frozen=True, slots=True)
class Side:
    """One run's record of an item, as the diff shows it."""

    score: int | None
    decided_by: str | None
    reason: str | None
    """Why the item is unscored (``db_missing``, ``judge_error``...), else our comparator's reason (``same``,
    ``values``, ``order``...), which an item awaiting a judge has too."""
    why: str
    """The record's one-line explanation of its score."""
    pred_sql: str | None
    gold_sql: str | None
    readings: dict[str, int | None]
    """Every binary figure of :data:`BINARY` but ROSE (the score), by name."""
    awaiting: bool = False
    """The item awaits a judge (no ROSE score yet)."""

    @classmethod
    def of(cls, r: Record) -> Side:
        compared = r.comparison.reason if r.comparison is not None else None
        # an item awaiting a judge was still compared: the comparator's reason says more than the wait
        reason = compared if r.unscored_reason in (None, "awaiting_judge") and compared else r.unscored_reason
        readings = {name: value(r, name) for name in BINARY if name != "rose"}
        awaiting = r.unscored_reason == "awaiting_judge"
        return cls(r.score, r.decided_by, reason, r.why, r.pred_sql, r.gold_sql, readings, awaiting)


@dataclass(frozen=True, slots=True)
class ItemDiff:
    """An item whose outcome differs between the two runs."""

    id: str
    db_id: str
    changed: list[str]
    """The figures that differ, ``rose`` for the score, in the order of :data:`BINARY`."""
    a: Side
    b: Side


@dataclass(frozen=True, slots=True)
class RunDiff:
    """Two runs, item by item."""

    a: str
    """How the first run is named (its name, or its path when both runs have the same name)."""
    b: str
    shared: int
    """Items (ids) in both runs."""
    items: list[ItemDiff]
    """Of those, the items whose outcome differs, in the first run's order."""
    only_a: list[str]
    """Ids in the first run only."""
    only_b: list[str]
    """Ids in the second run only."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, ensure_ascii=False) + "\n"

    def counts(self) -> dict[str, int]:
        """Per figure, the shared items where it differs."""
        out = {name: 0 for name in BINARY}
        for item in self.items:
            for name in item.changed:
                out[name] += 1
        return {name: n for name, n in out.items() if n}


def _changed(x: Record, y: Record) -> list[str]:
    return [name for name in BINARY if value(x, name) != value(y, name)]


def diff_runs(a: Run, b: Run) -> RunDiff:
    """The items whose outcome differs between runs ``a`` and ``b`` (matched by id, database and question:
    :func:`~rose_sql.analysis.paired.item_key`)."""
    bs = {item_key(r): r for r in b.records}
    a_ids = {item_key(r) for r in a.records}
    items = []
    shared = 0
    for x in a.records:
        y = bs.get(item_key(x))
        if y is None:
            continue
        shared += 1
        changed = _changed(x, y)
        if changed:
            items.append(ItemDiff(x.id_key, x.db_id, changed, Side.of(x), Side.of(y)))
    names = (a.name, b.name) if a.name != b.name else (str(a.path), str(b.path))
    return RunDiff(
        names[0],
        names[1],
        shared,
        items,
        [r.id_key for r in a.records if item_key(r) not in bs],
        [r.id_key for r in b.records if item_key(r) not in a_ids],
    )


def change_cell(item: ItemDiff) -> str:
    """``BIRD EX 1→0, ROSE 1→0``: what differs, from A to B (``–`` for undefined)."""

    def show(v: int | None) -> str:
        return "–" if v is None else str(v)

    parts = []
    for name in item.changed:
        va = item.a.score if name == "rose" else item.a.readings.get(name)
        vb = item.b.score if name == "rose" else item.b.readings.get(name)
        parts.append(f"{NAMES.get(name, name)} {show(va)}→{show(vb)}")
    return ", ".join(parts)


def side_cell(s: Side) -> str:
    """A side's score, deciding stage and reason in one cell."""
    score = ("awaiting judge" if s.awaiting else "unscored") if s.score is None else str(s.score)
    return f"{score} · {s.decided_by or 'no stage'} · {s.reason or 'no reason'}"


def summary_lines(d: RunDiff) -> list[str]:
    """The counts under the table: every number with what it is over."""
    counts = ", ".join(f"{NAMES.get(k, k)} {n}" for k, n in d.counts().items()) or "none"
    lines = [f"{len(d.items)} of the {d.shared} shared items differ between {d.a} and {d.b} (by figure: {counts})"]
    if d.only_a or d.only_b:
        lines.append(f"not compared: {len(d.only_a)} items only in {d.a}, {len(d.only_b)} only in {d.b}")
    return lines
