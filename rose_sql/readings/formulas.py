"""The official readings, reproduced item for item with their quirks.

``bird_ex``
    BIRD's execution accuracy (bird-bench/mini_dev ``evaluation_ex.py``): 1 iff
    ``set(pred_rows) == set(gold_rows)`` on ``fetchall()`` tuples. Row order and duplicates are
    ignored, column order matters, Python equality (``507 == 507.0``). Text that is not valid
    UTF-8 makes its query fail there (default ``text_factory``), so it scores 0 here too.
``spider_ex`` / ``spider_ex_keep_distinct``
    Spider's execution accuracy as the test-suite script computes it on the one database of a db_id
    (taoyds/test-suite-sql-eval ``evaluation.py --etype exec`` with only the original in the folder):
    the prediction is cut at its first tab and ``value`` is replaced by ``1`` everywhere in it;
    ``> =`` / ``< =`` / ``! =`` are glued; by default every ``DISTINCT`` token (sqlparse's
    tokenization, also inside ``COUNT(DISTINCT x)``) is deleted from both queries
    (``ts_ex_keep_distinct`` keeps them); results are bags of rows, equal up to a column
    permutation, ordered iff the string ``order by`` occurs anywhere in the gold; a quick
    rejection compares rows sorted by ``str(value) + str(type(value))``; both empty is a match.
``spider_em``
    Spider's exact-set match (test-suite-sql-eval ``evaluation.py --etype match``): 1 iff the
    prediction, parsed by the official grammar, has the gold's components (see
    :mod:`rose_sql.readings.spider_match`; a prediction the grammar rejects is 0). Defined where Spider's
    ``tables.json`` is beside the database folder (its release layout) and names the db_id.
``ts_ex`` / ``ts_ex_keep_distinct``
    Test-suite accuracy as defined: the same rules, and the prediction must match the gold on *every*
    database of the db_id's folder, as ``exec_eval.eval_exec_match`` takes them: every file whose name
    contains ``.sqlite`` (the original and the distilled variants of the test-suite release). Defined
    only when the folder holds more than one such file (``ts_databases`` says how many); with the
    original alone it would be ``spider_ex`` under another name. A gold that fails on any of them makes
    it undefined (the official script aborts the run there); a prediction that fails on any, or
    differs, is 0. Records of layout 4 and before called ``spider_ex`` ``ts_ex``
    (:func:`rose_sql.record.migrate` renames it).
``soft_f1``
    BIRD mini-dev's Soft-F1 (``evaluation_f1.py``): rows de-duplicated in order, gold row *i*
    compared with predicted row *i* by cell membership, precision/recall over the summed
    per-row fractions; both empty is 1.

Where a reading cannot be computed honestly (a gold that fails, a truncated result) it is None.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlparse.engine import FilterStack
from sqlparse.lexer import tokenize

from rose_sql.comparison.columns import Budget, column_maps
from rose_sql.results import Row


@dataclass(frozen=True, slots=True)
class Readings:
    """The official metrics for one item (None where they do not apply)."""

    bird_ex: int | None = None
    """BIRD EX: 1 or 0."""
    spider_ex: int | None = None
    """Spider EX by the test-suite script's rules on the db_id's one database (DISTINCT removed): 1 or 0."""
    spider_ex_keep_distinct: int | None = None
    """The same with ``--keep_distinct``: 1 or 0."""
    ts_ex: int | None = None
    """Test-suite accuracy on every database of the db_id's folder (DISTINCT removed): 1 or 0; None
    without variants."""
    ts_ex_keep_distinct: int | None = None
    """Test-suite accuracy with ``--keep_distinct``: 1 or 0; None without variants."""
    soft_f1: float | None = None
    """BIRD mini-dev Soft-F1 in [0, 1]."""
    spider_em: int | None = None
    """Spider exact-set match (``evaluation.py --etype match``): 1 or 0."""
    ts_databases: int | None = None
    """The databases ``ts_ex`` compared on (the original and its variants); None when the folder holds one."""


# --------------------------------------------------------------------------- BIRD


def bird_ex(pred: Sequence[Row], gold: Sequence[Row]) -> int:
    """BIRD EX on two fetched results."""
    return int(set(pred) == set(gold))


def _row_match(pred_row: Row, gold_row: Row) -> tuple[float, float, float]:
    total = len(gold_row)
    matches = sum(1 for v in pred_row if v in gold_row)
    pred_only = len(pred_row) - matches
    gold_only = sum(1 for v in gold_row if v not in pred_row)
    return matches / total, pred_only / total, gold_only / total


def soft_f1(pred: Sequence[Row], gold: Sequence[Row]) -> float:
    """BIRD mini-dev Soft-F1 on two fetched results."""
    if not pred and not gold:
        return 1.0
    if list(pred) == list(gold) and all(gold):
        return 1.0  # every row pair matches in full: tp = rows, fp = fn = 0, exactly as the loop below
    p = list(dict.fromkeys(pred))
    g = list(dict.fromkeys(gold))
    match: list[float] = []
    pred_only: list[float] = []
    gold_only: list[float] = []
    for i, g_row in enumerate(g):
        if i >= len(p):
            match.append(0)
            gold_only.append(1)
            continue
        m, po, go = _row_match(p[i], g_row)
        match.append(m)
        pred_only.append(po)
        gold_only.append(go)
    for _ in range(len(p) - len(g)):
        match.append(0)
        pred_only.append(1)
        gold_only.append(0)
    tp, fp, fn = sum(match), sum(pred_only), sum(gold_only)
    precision = tp / (tp + fp) if tp + fp > 0 else 0.0
    recall = tp / (tp + fn) if tp + fn > 0 else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


# --------------------------------------------------------------------------- Spider test suite


def _glue_operators(sql: str) -> str:
    return sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")


_CURDATE_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.IGNORECASE)


@lru_cache(maxsize=65536)
def _remove_distinct(sql: str) -> str:
    """Drop every sqlparse token equal to DISTINCT; like the original, keep only the first statement."""
    if "distinct" not in sql.lower() and (";" not in sql or (sql.rstrip().endswith(";") and sql.count(";") == 1)):
        return sql  # sqlparse's first statement would give the same text to execute
    if not sql.strip():
        return sql
    if ";" not in sql and "GO" not in sql:
        # nothing sqlparse splits statements at (';', its GO keyword): the statement is every token
        return "".join(value for _, value in tokenize(sql) if value.lower() != "distinct")
    # sqlparse's statement splitting without its (slow) grouping pass: the same tokens as
    # sqlparse.parse(sql)[0].flatten(), checked on every Spider gold and prediction here
    statement = next(iter(FilterStack().run(sql)))
    return "".join(t.value for t in statement.flatten() if t.value.lower() != "distinct")


@lru_cache(maxsize=65536)
def ts_pred_sql(pred: str, *, keep_distinct: bool = False) -> str:
    """The prediction as the test suite executes it (line stripped, cut at a tab, ``value`` -> ``1``)."""
    sql = _glue_operators(pred.strip().split("\t", 1)[0].replace("value", "1"))
    sql = sql if keep_distinct else _remove_distinct(sql)
    return _CURDATE_YEAR.sub("2020", sql)


@lru_cache(maxsize=65536)
def ts_gold_sql(gold: str, *, keep_distinct: bool = False) -> str:
    """The gold as the test suite executes it."""
    sql = _glue_operators(gold.strip())
    sql = sql if keep_distinct else _remove_distinct(sql)
    return _CURDATE_YEAR.sub("2020", sql)


def ts_order_matters(gold: str) -> bool:
    """The test suite's order rule: the text ``order by`` anywhere in the gold."""
    return "order by" in gold.lower()


def _unorder_key(x: Any) -> str:
    return str(x) + str(type(x))


def _unorder_row(row: Row) -> tuple[Any, ...]:
    return tuple(sorted(row, key=_unorder_key))


def _quick_reject(gold: Sequence[Row], pred: Sequence[Row], ordered: bool) -> bool:
    if len(gold[0]) == 1:  # a one-cell row is its own sorted form
        g, p = list(gold), list(pred)
    else:
        g = [_unorder_row(r) for r in gold]
        p = [_unorder_row(r) for r in pred]
    return g != p if ordered else set(g) != set(p)


def ts_equal(gold: Sequence[Row], pred: Sequence[Row], ordered: bool, budget: Budget | None = None) -> bool | None:
    """Test-suite result equality: bags (or lists) of rows up to one column permutation.

    None when the column search gave up (:mod:`rose_sql.comparison.columns`; ``budget``, by default
    :data:`rose_sql.config.COLUMN_WORK` units): the official search can run for hours on wide results
    whose columns look alike; we say the reading is undecided instead.
    """
    if not gold and not pred:
        return True
    if len(gold) != len(pred):
        return False
    n = len(gold[0])
    if len(pred[0]) != n:
        return False
    if gold == pred and repr(gold) == repr(pred):
        return True  # the same values of the same types: the quick rejection and the search both accept
    if _quick_reject(gold, pred, ordered):
        return False
    if list(gold) == list(pred):
        return True  # the identity permutation, which the search below would try and accept
    gbag = None if ordered else dict(Counter(gold))  # compared as dicts: in C
    budget = budget if budget is not None else Budget()
    for perm in column_maps(gold, pred, n, n, bags=True, budget=budget):
        if not budget.spend(len(pred) * n):
            break
        permuted = [tuple(row[j] for j in perm) for row in pred]
        if list(gold) == permuted if gbag is None else gbag == dict(Counter(permuted)):
            return True
    return None if budget.exhausted else False
