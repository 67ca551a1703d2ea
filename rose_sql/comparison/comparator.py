"""Our typed result comparator: does the prediction return the gold's rows, and if not, why.

Rules (each is a deliberate choice, see docs/records.md):

- rows are a multiset: duplicates count, and row order counts only when the gold's outermost
  query has an ORDER BY;
- column order and names are free, but a row stays a row: columns are matched as whole aligned
  vectors, never one by one;
- numbers compare by value: ``1 == 1.0 == Decimal('1')``, floats rounded to
  ``Config.float_digits`` significant digits; ``True`` is 1 (SQLite has no booleans);
- NULL is neither 0 nor ``''``; the text ``'1'`` is not the number 1 (reported as a *type* mismatch).

Every comparison carries a reason code and a one-line explanation.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from operator import itemgetter
from typing import Any, Literal

from rose_sql.comparison.columns import Budget, column_maps
from rose_sql.results import ONE_TYPE, ResultSet, Row

Reason = Literal[
    "same",  # equal, possibly up to tolerated representation differences (see notes)
    "order",  # the same rows in another order, and the gold is ordered
    "multiplicity",  # the same distinct rows, duplicated differently
    "extra_columns",  # the gold's columns are all in the prediction, rows aligned, plus others
    "missing_columns",  # the prediction's columns are all in the gold, rows aligned, but some are missing
    "column_count",  # different numbers of columns, and neither is a projection of the other
    "type",  # equal only if numeric text is read as numbers ('1' vs 1)
    "values",  # different rows
    "truncated",  # a result was cut by the row cap, so equality cannot be decided
    "undecided",  # too many columns look alike for the bounded column search to decide
]


class _Null:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL"


NULL = _Null()


@dataclass(frozen=True, slots=True)
class Comparison:
    """The outcome of comparing a prediction's result with the gold's."""

    equal: bool | None
    """True or False; None when undecidable (a truncated result, or a column search that gave up)."""
    reason: Reason
    """Why: ``same`` when equal, otherwise the kind of mismatch."""
    detail: str
    """One line a person can read."""
    notes: tuple[str, ...] = ()
    """Representation differences that were tolerated (column order, 1 vs 1.0, names)."""
    column_map: tuple[int, ...] | None = None
    """For each gold column, the prediction column it matched (when columns could be matched)."""
    pred_only: int = 0
    """Rows (with multiplicity) in the prediction but not in the gold."""
    gold_only: int = 0
    """Rows (with multiplicity) in the gold but not in the prediction."""


def same_bag(a: Iterable[Any], b: Iterable[Any]) -> bool:
    """Whether two collections hold the same elements with the same multiplicities.

    Compared as plain dicts: ``Counter.__eq__`` walks every key in Python, ``dict.__eq__`` in C
    (the same answer for counts, which are never zero here).
    """
    return dict.__eq__(Counter(a), Counter(b)) is True


def canon(value: Any, digits: int = 12) -> Any:
    """A hashable key under which values that are equal by our rules coincide."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float | Decimal):
        f = float(value)
        if not math.isfinite(f):
            return f
        if f == int(f) and abs(f) < 2**63:
            return int(f)
        r = float(f"{f:.{digits}g}")
        return int(r) if r == int(r) else r
    return value


def _numeric_text(value: Any, digits: int) -> Any:
    if isinstance(value, str):
        try:
            return canon(float(value.strip()), digits) if value.strip() else value
        except ValueError:
            return value
    return canon(value, digits)


def _rows(res: ResultSet, digits: int, key: Any = canon) -> list[tuple[Any, ...]]:
    if key is canon:  # integers and text are their own canonical form: skip the call for them
        return [tuple([v if type(v) is int or type(v) is str else canon(v, digits) for v in row]) for row in res.rows]
    return [tuple([key(v, digits) for v in row]) for row in res.rows]


def _project(rows: list[tuple[Any, ...]], cols: Sequence[int]) -> list[tuple[Any, ...]]:
    return [tuple(r[j] for j in cols) for r in rows]


def compare(
    pred: ResultSet, gold: ResultSet, *, ordered: bool, digits: int = 12, budget: Budget | None = None
) -> Comparison:
    """Compare a prediction's result with the gold's; ``ordered``: the gold has a top-level ORDER BY.

    ``budget``: the work the column search may do (:class:`rose_sql.comparison.columns.Budget`, by default
    :data:`rose_sql.config.COLUMN_WORK` units); past it the comparison is ``undecided``."""
    if pred.truncated or gold.truncated:
        which = (
            "both results were"
            if pred.truncated and gold.truncated
            else ("the prediction's result was" if pred.truncated else "the gold's result was")
        )
        return Comparison(None, "truncated", f"{which} cut at the row cap; equality cannot be decided")
    ng, np_ = len(gold.columns), len(pred.columns)
    if ng == np_ and (
        gold.rows == pred.rows or (not ordered and len(gold.rows) == len(pred.rows) and same_bag(gold.rows, pred.rows))
    ):
        # The common cases, before any canonicalising: Python's == is stricter than canon's
        # equality, and with equal rows the identity is the first column map the search would take.
        tolerated = _representation_notes(gold, pred, tuple(range(ng)), equal_as_given=True)
        return Comparison(True, "same", _same_detail(len(gold.rows)), tuple(tolerated), tuple(range(ng)))
    g, p = _rows(gold, digits), _rows(pred, digits)
    notes: list[str] = []
    if not g and not p:
        return Comparison(True, "same", "both results are empty", column_map=tuple(range(ng)) if ng == np_ else None)
    budget = budget if budget is not None else Budget()
    if ng == np_:
        found = _equal_up_to_columns(g, p, ng, ordered, budget)
        if found is not None:
            cmap, in_order = found
            if cmap != tuple(range(ng)):
                notes.append("columns in another order")
            notes += _representation_notes(gold, pred, cmap)
            if in_order:
                return Comparison(True, "same", _same_detail(len(g)), tuple(notes), cmap)
            return Comparison(
                False, "order", "the same rows in another order, and the gold is ordered", tuple(notes), cmap
            )
        if budget.exhausted:
            return _undecided(ng, budget)
        if not same_bag(g, p) and set(g) == set(p):
            return _diff(g, p, "multiplicity", "the same distinct rows, duplicated differently")
        if len(g) == len(p) and same_bag(_rows(gold, digits, _numeric_text), _rows(pred, digits, _numeric_text)):
            return _diff(g, p, "type", "equal only if numbers stored as text are read as numbers")
        return _diff(g, p, "values", f"{len(p)} predicted vs {len(g)} gold rows; the rows differ")
    if np_ > ng:
        for cmap in column_maps(g, p, ng, np_, bags=False, budget=budget):
            if not budget.spend(len(p) * ng):
                break
            proj = _project(p, cmap)
            if same_bag(proj, g) or set(proj) == set(g):
                extra = np_ - ng
                return Comparison(
                    False,
                    "extra_columns",
                    f"the prediction returns the gold's columns plus {extra} more, rows aligned",
                    column_map=cmap,
                )
    else:
        for cmap in column_maps(p, g, np_, ng, bags=False, budget=budget):
            if not budget.spend(len(g) * np_):
                break
            proj = _project(g, cmap)
            if same_bag(proj, p) or set(proj) == set(p):
                return Comparison(
                    False, "missing_columns", f"the prediction returns {np_} of the gold's {ng} columns, rows aligned"
                )
    if budget.exhausted:
        return _undecided(max(ng, np_), budget)
    return _diff(g, p, "column_count", f"{np_} predicted vs {ng} gold columns; no column alignment fits")


def _undecided(width: int, budget: Budget) -> Comparison:
    detail = (
        f"matching the {width} columns gave up after {budget.spent:,} of its {budget.limit:,} units of search "
        "(cells read, nodes, column checks): too many columns look alike to tell whether the rows agree"
    )
    return Comparison(None, "undecided", detail)


def _equal_up_to_columns(
    g: list[tuple[Any, ...]], p: list[tuple[Any, ...]], n: int, ordered: bool, budget: Budget
) -> tuple[tuple[int, ...], bool] | None:
    """A column permutation under which the row multisets agree, and whether the order agrees too."""
    if len(g) != len(p):
        return None
    gbag = dict(Counter(g))
    first: tuple[int, ...] | None = None
    identity = tuple(range(n))
    for cmap in column_maps(g, p, n, n, bags=True, budget=budget):
        if not budget.spend(len(p) * n):
            break
        perm = p if cmap == identity else _project(p, cmap)
        if dict(Counter(perm)) != gbag:
            continue
        if not ordered or perm == g:
            return cmap, True
        first = first or cmap
    return (first, False) if first is not None else None


_NULL_TYPE = frozenset({type(None)})


def _types_agree(a: Sequence[Row], b: Sequence[Row]) -> bool:
    """Whether equal rows of ``a`` and ``b`` (as Python compares them) hold values of the same types: in
    every column, the values of both sides are of one type besides NULL, or of :data:`ONE_TYPE`."""
    for col_a, col_b in zip(zip(*a, strict=True), zip(*b, strict=True), strict=True):
        types = set(map(type, col_a)) | set(map(type, col_b))
        if not types <= ONE_TYPE and len(types - _NULL_TYPE) > 1:
            return False
    return True


def _alike(gold: Sequence[Row], pred: Sequence[Row], cmap: tuple[int, ...], identity: bool) -> bool:
    """Whether the prediction's rows, its columns taken in ``cmap``'s order, are the gold's as Python
    compares them (as a bag) with values of the same types (:func:`_types_agree`): then the typed recount
    finds them equal too (a check in C where it counts cell by cell in Python)."""
    if not cmap:
        return False
    if identity:
        projected: Sequence[Row] = pred
    elif len(cmap) == 1:
        projected = [(r[cmap[0]],) for r in pred]
    else:
        projected = list(map(itemgetter(*cmap), pred))
    return same_bag(gold, projected) and _types_agree(gold, projected)


def _representation_notes(
    gold: ResultSet, pred: ResultSet, cmap: tuple[int, ...], *, equal_as_given: bool = False
) -> list[str]:
    """Differences that equality tolerated: value types or rounding, column names. ``equal_as_given``:
    the rows are equal as Python compares them, as a bag, ``cmap`` the identity (then, where each column
    holds one type, or values that only equal values of their own type, they are equal type for type)."""
    notes = []

    def typed(rows: Sequence[Row], cols: Sequence[int]) -> Iterator[tuple[Any, ...]]:
        return (tuple((type(r[j]).__name__, r[j]) for j in cols) for r in rows)

    identity = cmap == tuple(range(len(gold.columns)))
    same_values = identity and (
        gold.rows is pred.rows
        or (equal_as_given and _types_agree(gold.rows, pred.rows))
        or repr(gold.rows) == repr(pred.rows)
    )
    if (
        not same_values
        and not _alike(gold.rows, pred.rows, cmap, identity)
        and not same_bag(typed(gold.rows, range(len(gold.columns))), typed(pred.rows, cmap))
    ):
        notes.append("numbers equal by value with different types or rounding (e.g. 1 vs 1.0)")
    if [c.lower() for c in gold.columns] != [pred.columns[j].lower() for j in cmap]:
        notes.append("column names differ")
    return notes


def _diff(g: list[tuple[Any, ...]], p: list[tuple[Any, ...]], reason: Reason, detail: str) -> Comparison:
    gc, pc = Counter(g), Counter(p)
    return Comparison(False, reason, detail, pred_only=sum((pc - gc).values()), gold_only=sum((gc - pc).values()))


def _same_detail(n: int) -> str:
    return "identical results" if n else "both results are empty"


def json_value(v: Any) -> Any:
    """A result cell as a JSON value."""
    if isinstance(v, bytes):
        return "x'" + v[:64].hex() + ("..." if len(v) > 64 else "") + "'"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, str) and len(v) > 500:
        return v[:500] + f"... ({len(v)} chars)"
    return v
