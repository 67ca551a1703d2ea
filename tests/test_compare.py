"""Our comparator, driven by tests/cases/compare.json: both sides are real SQLite results."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from rose_sql.comparison.columns import Budget
from rose_sql.comparison.comparator import canon, compare
from rose_sql.config import Config
from rose_sql.engines import Database
from rose_sql.engines.execute import Executor
from rose_sql.readings.formulas import ts_equal
from rose_sql.results import ResultSet
from rose_sql.sql import has_top_level_order_by

CASES = json.loads((Path(__file__).parent / "cases" / "compare.json").read_text())


@pytest.fixture(scope="module")
def executor() -> Executor:
    return Executor(Config(workers=1))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_compare_case(case: dict[str, Any], make_db: Callable[..., Path], executor: Executor) -> None:
    db = make_db("CREATE TABLE unused (x);")
    lite = Database.file(db)
    gold, pred = executor.run(lite, case["gold"]), executor.run(lite, case["pred"])
    assert gold.result is not None and pred.result is not None, (gold.error, pred.error)
    c = compare(pred.result, gold.result, ordered=has_top_level_order_by(case["gold"]))
    assert (c.equal, c.reason) == (case["equal"], case["reason"]), c.detail
    if "note" in case:
        assert any(case["note"] in n for n in c.notes), c.notes
    if "notes" in case:
        assert list(c.notes) == case["notes"]


def rs(rows: list[tuple[Any, ...]], cols: int | None = None, truncated: bool = False) -> ResultSet:
    n = cols if cols is not None else (len(rows[0]) if rows else 1)
    return ResultSet(tuple(f"c{i}" for i in range(n)), tuple(rows), len(rows), truncated)


def test_truncated_results_are_undecidable() -> None:
    c = compare(rs([(1,)], truncated=True), rs([(1,)]), ordered=False)
    assert c.equal is None and c.reason == "truncated"


def test_decimal_and_bool_are_numbers() -> None:
    assert compare(rs([(Decimal("2.50"), True)]), rs([(2.5, 1)]), ordered=False).equal is True
    assert canon(Decimal("3")) == canon(3.0) == 3


TYPES_NOTE = "numbers equal by value with different types or rounding (e.g. 1 vs 1.0)"


@pytest.mark.parametrize(
    ("gold", "pred", "note"),
    [
        ([(1, "a"), (2, None)], [(2, None), (1, "a")], False),  # values only equal to their own type
        ([(1.5, "a"), (None, b"x")], [(None, b"x"), (1.5, "a")], False),  # one type a column, besides NULL
        ([(1, "a"), (2.0, "b")], [(2.0, "b"), (1, "a")], False),  # a column of two types, paired alike
        ([(1, "a"), (2, "b")], [(2.0, "b"), (1, "a")], True),  # 2 vs 2.0
        ([(1,), (0,)], [(0,), (True,)], True),  # 1 vs True
        ([(1.0, 2), (3.0, 4)], [(3.0, 4), (1, 2)], True),
    ],
)
def test_rows_equal_in_another_order_note_values_of_other_types(
    gold: list[tuple[Any, ...]], pred: list[tuple[Any, ...]], note: bool
) -> None:
    c = compare(rs(pred), rs(gold), ordered=False)
    assert (c.equal, c.reason) == (True, "same")
    assert (TYPES_NOTE in c.notes) is note, c.notes


def test_mismatch_counts_rows_on_each_side() -> None:
    c = compare(rs([(1,), (2,), (2,)]), rs([(1,), (3,)]), ordered=False)
    assert (c.equal, c.reason, c.pred_only, c.gold_only) == (False, "values", 2, 1)


def test_wide_results_with_many_equal_columns_stay_fast() -> None:
    row = tuple([7] * 26)
    c = compare(rs([row] * 50), rs([row] * 49 + [(*row[:-1], 8)]), ordered=False)
    assert c.equal is False


def _latin(n: int, repeat: int) -> list[tuple[int, ...]]:
    """n columns that all hold the same values, as often: every column has one value signature."""
    return [tuple((k + c) % n for c in range(n)) for k in range(n)] * repeat


@pytest.mark.parametrize("width", [9, 11, 12])
def test_column_matching_is_bounded_when_columns_look_alike(width: int) -> None:
    gold = _latin(width, 80)
    pred = list(gold)
    a, b = pred[0], pred[1]  # swap two cells of one column between two rows: column signatures unchanged
    pred[0], pred[1] = (b[0], *a[1:]), (a[0], *b[1:])
    start = time.monotonic()
    c = compare(rs(pred), rs(gold), ordered=False)
    shuffled = compare(rs([r[::-1] for r in gold]), rs(gold), ordered=False)
    took = time.monotonic() - start
    assert (c.equal, c.reason) == (False, "values")
    assert (shuffled.equal, shuffled.reason) == (True, "same") and "columns in another order" in shuffled.notes
    assert took < 10  # was minutes at 12 columns; a generous bound for a loaded machine


def test_a_search_that_runs_out_of_work_is_undecided() -> None:
    gold = _latin(6, 3)
    c = compare(rs([r[::-1] for r in gold]), rs(gold), ordered=False, budget=Budget(50))
    assert (c.equal, c.reason) == (None, "undecided") and "gave up" in c.detail
    assert ts_equal(gold, [r[::-1] for r in gold], ordered=False, budget=Budget(50)) is None


@pytest.mark.parametrize(
    ("gold", "pred", "note"),
    [
        ([(1, "a", 0.5), (2, "b", 1.5)], [("b", 2, 1.5), ("a", 1, 0.5)], False),
        ([(1, "a"), (2, "b")], [("b", 2.0), ("a", 1)], True),  # 2 vs 2.0
        ([(0.1 + 0.2, "a")], [("a", 0.3)], True),  # equal when rounded only
    ],
)
def test_columns_in_another_order_note_values_of_other_types(
    gold: list[tuple[Any, ...]], pred: list[tuple[Any, ...]], note: bool
) -> None:
    c = compare(rs(pred), rs(gold), ordered=False)
    assert (c.equal, c.reason) == (True, "same") and "columns in another order" in c.notes
    assert (TYPES_NOTE in c.notes) is note, c.notes
