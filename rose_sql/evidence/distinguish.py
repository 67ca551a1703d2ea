"""Distinguishing rows when the results differ, and what the difference looks like.

Rows only in the prediction and rows only in the gold (as multisets, under our comparator's value
rules, columns aligned where the comparator could align them), and named shapes: subset or superset,
one column scaled by 100 (fraction vs percentage), rounding, duplicates, another row order, another
column order, extra or missing columns, numbers stored as text.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from rose_sql.comparison.comparator import NULL, Comparison, canon, json_value
from rose_sql.evidence.findings import Diff
from rose_sql.results import ResultSet

EXAMPLES = 5


def _aligned(
    pred: ResultSet, gold: ResultSet, cmp: Comparison, digits: int
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    g = [tuple(canon(v, digits) for v in r) for r in gold.rows]
    cmap = cmp.column_map
    if cmap is not None and len(cmap) == len(gold.columns) and all(j < len(pred.columns) for j in cmap):
        p = [tuple(canon(r[j], digits) for j in cmap) for r in pred.rows]
    else:
        p = [tuple(canon(v, digits) for v in r) for r in pred.rows]
    return p, g


def _numbers(rows: list[tuple[Any, ...]]) -> list[float] | None:
    flat = [v for r in rows for v in r]
    if not flat or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in flat):
        return None
    return [float(v) for v in flat]


def _scaled(p: list[tuple[Any, ...]], g: list[tuple[Any, ...]]) -> str | None:
    if len(p) != len(g) or len(p) > 50:
        return None
    pn, gn = _numbers(p), _numbers(g)
    if pn is None or gn is None or len(pn) != len(gn) or not any(gn):
        return None
    for factor, name in (
        (100.0, "the prediction is the gold x 100 (a percentage vs a fraction)"),
        (0.01, "the prediction is the gold / 100 (a fraction vs a percentage)"),
    ):
        if all(math.isclose(a, b * factor, rel_tol=1e-6, abs_tol=1e-9) for a, b in zip(pn, gn, strict=True)):
            return name
    return None


def _rounded(p: list[tuple[Any, ...]], g: list[tuple[Any, ...]]) -> str | None:
    if len(p) != len(g) or len(p) > 50:
        return None
    pn, gn = _numbers(p), _numbers(g)
    if pn is None or gn is None or len(pn) != len(gn):
        return None
    for k in range(6, -1, -1):
        if all(round(a, k) == round(b, k) for a, b in zip(pn, gn, strict=True)):
            return f"equal when rounded to {k} decimals"
    return None


def describe(pred: ResultSet, gold: ResultSet, cmp: Comparison, digits: int = 12) -> Diff:
    """The distinguishing rows and the shape of the difference (for ``evidence.diff``)."""
    p, g = _aligned(pred, gold, cmp, digits)
    pc, gc = Counter(p), Counter(g)
    only_p, only_g = pc - gc, gc - pc
    shapes: list[str] = []
    if cmp.reason in ("order", "multiplicity", "extra_columns", "missing_columns", "type", "column_count"):
        shapes.append(cmp.reason)
    if cmp.reason == "values" or cmp.reason == "multiplicity":
        if not only_p and only_g:
            shapes.append("subset: every predicted row is a gold row, some gold rows are missing")
        elif only_p and not only_g:
            shapes.append("superset: every gold row is predicted, plus others")
        elif only_p and only_g and not (set(pc) & set(gc)):
            shapes.append("disjoint: no row in common")
        elif only_p and only_g:
            shapes.append("overlap: some rows in common")
    if cmp.reason == "values":
        for probe in (_scaled(p, g), _rounded(p, g)):
            if probe:
                shapes.append(probe)
    if cmp.column_map is not None and cmp.column_map != tuple(range(len(cmp.column_map))):
        shapes.append("columns in another order")

    def show(c: Counter[tuple[Any, ...]]) -> list[list[Any]]:
        return [[_json(v) for v in row] for row in list(c.elements())[:EXAMPLES]]

    return Diff(show(only_p), show(only_g), sum(only_p.values()), sum(only_g.values()), shapes)


def _json(v: Any) -> Any:
    return None if v is NULL else json_value(v)
