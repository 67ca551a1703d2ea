"""What the evidence stage finds, as the record keeps it: witnesses, distinguishing rows, gold smells.

Frozen records, written to ``record.evidence`` and read back by :meth:`rose_sql.record.Record.from_dict`;
:func:`render` turns them into the text the judges read. Finding them is :mod:`rose_sql.evidence.finder`'s
job; this module imports nothing heavy, so that everything that reads finished runs can use it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from rose_sql.comparison.comparator import json_value
from rose_sql.engines.spaces import Change


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    return json_value(obj)


def change_json(change: Change) -> Change:
    """The same change with its values as JSON values (bytes as ``x'hex'``, long text cut)."""
    return replace(
        change,
        old=_jsonable(change.old),
        new=_jsonable(change.new),
        values=_jsonable(change.values),
        row=_jsonable(change.row),
    )


@dataclass(frozen=True, slots=True)
class ResultSample:
    """A result as evidence shows it: its columns, how many rows, and the first rows as JSON values."""

    columns: list[str]
    """Column names."""
    row_count: int
    """Rows in the whole result."""
    rows: list[list[Any]]
    """The first rows (bytes as ``x'hex'``, long text cut)."""


@dataclass(frozen=True, slots=True)
class Witness:
    """A schema-valid change of the database on which the prediction and the gold disagree."""

    kind: str
    """The kind of candidate that found it (``null``, ``duplicate_row``, ``tie``, ``predicate``...)."""
    reason: str
    """Why that kind of change can tell queries apart."""
    label: str
    """The change in a few words."""
    changes: list[Change]
    """The edits, in order."""
    pred_result: ResultSample
    """The prediction's result on the changed database."""
    gold_result: ResultSample
    """The gold's result on the changed database."""
    comparison: str
    """How our comparator found the two results to differ."""
    caveats: list[str] = field(default_factory=list)
    """Realism notes: what the change does that the real data never shows."""
    plausible: bool = True
    """Whether the database could hold the change, given what its data shows
    (:mod:`rose_sql.evidence.plausibility`): only a plausible witness doubts a match; an implausible one is
    a fragility note. A witness recorded before grades existed (layout 4) reads as plausible, as it counted."""
    plausibility: str = ""
    """The rule that graded it, in brackets, and what it saw (``[null_seen] member.position is NULL on 3 of
    33 rows``)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "reason": self.reason,
            "label": self.label,
            "changes": [c.to_dict() for c in self.changes],
            "pred_result": _sample_dict(self.pred_result),
            "gold_result": _sample_dict(self.gold_result),
            "comparison": self.comparison,
            "caveats": list(self.caveats),
            "plausible": self.plausible,
            "plausibility": self.plausibility,
        }


def _sample_dict(s: ResultSample) -> dict[str, Any]:
    return {"columns": s.columns, "row_count": s.row_count, "rows": s.rows}


@dataclass(frozen=True, slots=True)
class Diff:
    """The rows that tell two different results apart, and the shape of the difference."""

    pred_only: list[list[Any]]
    """A few rows only the prediction returns (as JSON values)."""
    gold_only: list[list[Any]]
    """A few rows only the gold returns."""
    pred_only_count: int
    """How many rows (with multiplicity) only the prediction returns."""
    gold_only_count: int
    """How many rows only the gold returns."""
    shape: list[str]
    """Named shapes: subset, superset, x100, rounding, order, extra columns..."""


@dataclass(frozen=True, slots=True)
class Smell:
    """A mechanical hint that the gold SQL may not mean what the question asks (never a verdict)."""

    name: str
    """``limit_tie``, ``numeric_text_order``, ``nulls_first``, ``literal_absent``, ``count_fanout``,
    ``order_dependent``."""
    detail: str
    """What was seen, in a sentence."""
    key: list[Any] | None = None
    """limit_tie: the ordering key the tie is on."""
    tied_rows: int | None = None
    """limit_tie: how many rows tie."""
    column: str | None = None
    """numeric_text_order: the column holding numbers as text."""
    literal: str | None = None
    """literal_absent: the literal that occurs nowhere in its column."""
    near: list[Any] | None = None
    """literal_absent: values that nearly match it."""

    def to_dict(self) -> dict[str, Any]:
        """The smell as JSON data: its name, detail, and the fields its kind has."""
        data: dict[str, Any] = {"name": self.name, "detail": self.detail}
        for name in ("key", "tied_rows", "column", "literal", "near"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        return data


@dataclass(frozen=True, slots=True)
class SearchInfo:
    """How a witness search went (the part of it that is reproducible)."""

    tried: dict[str, int]
    """Candidates tried, by kind."""
    candidates: int
    """Candidates tried in all."""
    seconds: float
    """Time the search took."""
    stopped: str
    """Why it stopped: ``found``, ``budget`` or ``exhausted``."""
    order_dependent: int = 0
    """Candidates whose difference vanished when unordered rows came in reverse (not witnesses)."""
    implausible: int = 0
    """Witnesses found that the data makes implausible (set aside while a plausible one was looked for)."""
    distinct: bool = False
    """The search compared distinct rows: the results differed only in how often rows repeat (BIRD's
    set-based EX credits that), and the witness shows the distinct rows can differ too."""


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the deterministic search found for one item (``record.evidence``)."""

    witness: Witness | None = None
    """The change and both results on it; None when none was found (or none was searched)."""
    diff: Diff | None = None
    """Distinguishing rows and the shape of the difference, when the results differ."""
    gold_smells: list[Smell] = field(default_factory=list)
    """Smells of the gold."""
    search: SearchInfo | None = None
    """How the witness search went, when one ran."""
    seconds: float = 0.0
    """Time spent on this item's evidence."""
    skipped: str | None = None
    """Why no evidence was gathered, when none was."""
    guard: str | None = None
    """Set when the wall-time guard stopped the search: what was found then depends on the machine, so an
    item whose judges would read it is left unscored (``wall_guard``), never decided on it."""

    @property
    def questions_match(self) -> bool:
        """Whether this evidence casts doubt on a match (a plausible witness or a gold smell); an implausible
        witness is a fragility note, never doubt."""
        return (self.witness is not None and self.witness.plausible) or bool(self.gold_smells)

    def to_dict(self) -> dict[str, Any]:
        return {
            "witness": self.witness.to_dict() if self.witness else None,
            "diff": _diff_dict(self.diff) if self.diff else None,
            "gold_smells": [s.to_dict() for s in self.gold_smells],
            "search": _search_dict(self.search) if self.search else None,
            "seconds": round(self.seconds, 4),
            "skipped": self.skipped,
            "guard": self.guard,
        }


def _diff_dict(d: Diff) -> dict[str, Any]:
    return {
        "pred_only": d.pred_only,
        "gold_only": d.gold_only,
        "pred_only_count": d.pred_only_count,
        "gold_only_count": d.gold_only_count,
        "shape": d.shape,
    }


def _search_dict(s: SearchInfo) -> dict[str, Any]:
    return {
        "tried": s.tried,
        "candidates": s.candidates,
        "seconds": round(s.seconds, 4),
        "stopped": s.stopped,
        "order_dependent": s.order_dependent,
        "implausible": s.implausible,
        "distinct": s.distinct,
    }


def questions_match(doubts: list[str] | None, evidence: Evidence | None) -> bool:
    """Whether deterministic evidence questions a match: a cheap doubt, a plausible witness or a gold smell.

    The matched-results policy ``evidence`` asks the Refuter exactly when this is true; ``rose run``
    and ``rose replay`` both decide with it, from what the record keeps.
    """
    return bool(doubts) or bool(evidence and evidence.questions_match)


def render(doubts: list[str] | None, evidence: Evidence | None) -> str | None:
    """Everything deterministic the judges read about an item: short, neutral, always worded the same."""
    parts = list(doubts or [])
    if evidence is not None:
        parts += _render_evidence(evidence)
    return "\n\n".join(p for p in parts if p) or None


def _render_evidence(ev: Evidence) -> list[str]:
    parts = []
    w = ev.witness
    if w is not None and w.plausible:
        parts.append(
            f"WITNESS DATABASE ({w.kind}): {w.reason}.\nChange to the real database: {w.label}.\n"
            f"On the changed database the predicted SQL returns {_dumps(_sample_dict(w.pred_result))}\n"
            f"and the reference SQL returns {_dumps(_sample_dict(w.gold_result))}\n"
            f"({w.comparison})."
            + (f"\nRealism caveats: {'; '.join(w.caveats)}." if w.caveats else "")
            + (f"\nWhy such data is plausible here: {w.plausibility}." if w.plausibility else "")
            + "\nCould such data occur for this question, and if so which result answers it? The witness may "
            "expose the reference as well as the prediction."
        )
    elif w is not None:
        # an implausible witness: a fragility note, never a reason to doubt the match
        parts.append(
            f"FRAGILITY NOTE ({w.kind}): the two queries would disagree after this change: {w.label}; but "
            f"the database's data makes such a change implausible ({w.plausibility}). It shows how the "
            "queries could differ, not that they do on data like this one's."
        )
    elif ev.search is not None:
        # fixed wording: how far a search got must not change the prompt (or its cache key)
        parts.append("No witness database was found; this does not prove the queries equivalent.")
    if ev.diff is not None:
        d = ev.diff
        parts.append(
            "How the results differ: " + ("; ".join(d.shape) or "different rows") + f". Rows only in the "
            f"prediction ({d.pred_only_count}): {_dumps(d.pred_only)}; rows only in the "
            f"reference ({d.gold_only_count}): {_dumps(d.gold_only)}."
        )
    for s in ev.gold_smells:
        parts.append(f"Reference SQL smell ({s.name}): {s.detail}.")
    return parts


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str)
