"""The official readings of one executed item, as the official scripts compute them on its engine.

:func:`read_official` is what the run asks: given an item whose gold ran (or has none), and the
prediction's execution (None without a prediction), the readings of :mod:`rose_sql.readings.formulas`,
Spider's exact-set match and hardness (:mod:`rose_sql.readings.spider_match`, where Spider's
``tables.json`` is found), and the efficiency ratios when asked (:mod:`rose_sql.readings.efficiency`).
On engines the official scripts run through Python's ``sqlite3`` all four execution readings apply, the
test suite's over the variant databases of the item's folder (each statement run through the sandbox);
on a server, BIRD EX and Soft-F1 as mini-dev's script computes them there.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from rose_sql.engines import Database
from rose_sql.engines.execute import Executor
from rose_sql.items.load import Item
from rose_sql.readings.efficiency import Efficiency, measure
from rose_sql.readings.formulas import Readings, bird_ex, soft_f1, ts_equal, ts_gold_sql, ts_order_matters, ts_pred_sql
from rose_sql.results import Execution, ResultSet
from rose_sql.sql import NO_STATEMENT

GOLD_FAILED = ("error", "timeout", "rejected")
"""A gold's statuses that are its own failure: BIRD's scripts count the item 0 (the test suite's script
asserts that the gold executes, and stops: its readings stay undefined, ``official_aborts``)."""


NOT_THE_PREDICTION = ("unreadable", "guard")
"""A test-suite variant's statuses that are not the prediction's doing (the database could not be read, a
guard stopped it and the run alone that would confirm it could not be made): its reading is undefined
(None), never a 0 that would depend on what else ran in the worker and on the machine's load."""


@dataclass(frozen=True, slots=True)
class Official:
    """What the official scripts would read off one item."""

    readings: Readings = field(default_factory=Readings)
    """The official readings (Spider EM included)."""
    hardness: str | None = None
    """The gold's official Spider hardness, where the match reading is defined."""
    efficiency: Efficiency | None = None
    """BIRD's efficiency ratios, when asked (``Config.efficiency``) and BIRD EX is defined."""

    def fields(self) -> dict[str, Any]:
        """These as the keyword arguments of the executed item that carries them."""
        return {"readings": self.readings, "hardness": self.hardness, "efficiency": self.efficiency}


def read_official(
    item: Item, db: Database, gold: Execution | None, pred: Execution | None, executor: Executor
) -> Official:
    """The official readings of an item whose database is present and readable: ``gold`` its gold's
    execution (None without gold SQL), ``pred`` its prediction's (None without a prediction: 0, as
    leaderboards count a question left unanswered)."""
    em, hardness = _spider_match(item, db, executor)
    if item.pred_sql is None or pred is None:
        readings = _no_prediction(db, gold)
    elif gold is not None and gold.ok and pred.status != "unreadable":
        readings = _readings(item, db, gold, pred, executor) if db.info.python_sqlite3 else _bird_readings(gold, pred)
    elif gold is not None and gold.status in GOLD_FAILED and pred.status not in ("unreadable", "guard"):
        readings = Readings(bird_ex=0, soft_f1=0.0)  # BIRD's scripts count any failure 0, the gold's too
    else:
        readings = Readings()
    readings = replace(readings, spider_em=em)
    return Official(readings, hardness, _efficiency(item, db, readings, executor))


def _efficiency(item: Item, db: Database, readings: Readings, executor: Executor) -> Efficiency | None:
    """The item's efficiency ratios when asked and its BIRD EX is defined (null ratios off SQLite)."""
    base = executor.config.efficiency
    if base == "off" or readings.bird_ex is None or item.gold_sql is None:
        return None
    return measure(executor, db, item.gold_sql, item.pred_sql, readings.bird_ex == 1, base)


def _spider_match(item: Item, db: Database, executor: Executor) -> tuple[int | None, str | None]:
    """Spider's exact-set match and the gold's hardness, where Spider's ``tables.json`` is found beside a
    database the official script reads through Python's ``sqlite3`` (its schema read by ``executor``)."""
    if not db.info.python_sqlite3 or item.gold_sql is None:
        return None, None
    from rose_sql.readings.spider_match import for_database, spider_match

    found = for_database(db.target, item.db_id, lambda: executor.catalogue(db))
    if found is None:
        return None, None
    m = spider_match(item.pred_sql or "", item.gold_sql, *found, max_chars=executor.config.max_sql_chars)
    return m.em, m.hardness


def _no_prediction(db: Database, gold: Execution | None) -> Readings:
    """The readings of a question without a prediction whose gold ran: 0, as a prediction that fails (the
    test suite's where it runs)."""
    if gold is None or not gold.ok:
        return Readings()
    if db.info.python_sqlite3:
        n = len(ts_databases(db))
        ts = 0 if n > 1 else None
        return Readings(
            bird_ex=0,
            soft_f1=0.0,
            spider_ex=0,
            spider_ex_keep_distinct=0,
            ts_ex=ts,
            ts_ex_keep_distinct=ts,
            ts_databases=n if n > 1 else None,
        )
    return Readings(bird_ex=0, soft_f1=0.0)


def _bird_readings(gold: Execution, pred: Execution) -> Readings:
    """``bird_ex`` and Soft-F1 as mini-dev's script computes them on a server: the prediction and the
    gold fetched, ``set()`` of rows compared with Python's ``==`` (a failure, or a result ``set()``
    cannot hash, is 0)."""
    g, p = gold.result, pred.result
    assert g is not None
    if p is None:
        return Readings(bird_ex=0, soft_f1=0.0)
    if g.unhashable or p.unhashable:
        return Readings(bird_ex=0, soft_f1=0.0)
    pr, gr = set_rows(p), set_rows(g)
    if pr is None or gr is None:
        return Readings()
    return Readings(bird_ex=bird_ex(pr, gr), soft_f1=soft_f1(pr, gr))


def set_rows(result: ResultSet) -> tuple[tuple[Any, ...], ...] | None:
    """What BIRD's set readings need of a result: its rows, or for a result cut at the row cap its distinct
    rows in the order each first came (``set()`` and ``dict.fromkeys`` of them are those of every row);
    None where those passed their own caps (the reading is then undefined, ``truncated``)."""
    return result.distinct if result.truncated else result.rows


def ts_past_cap(g: ResultSet, p: ResultSet) -> int | None:
    """The test suite's equality where a result is cut at the row cap: 0 when the two results' exact row
    counts differ (the official ``result_eq`` compares the lengths first); None (undefined) otherwise."""
    if not (g.count_exact and p.count_exact):
        return None
    return 0 if g.row_count != p.row_count else None


def _readings(item: Item, db: Database, gold: Execution, pred: Execution, executor: Executor) -> Readings:
    g, p = gold.result, pred.result
    assert g is not None and item.gold_sql is not None
    if p is None and pred.status == "rejected" and pred.error in NO_STATEMENT:
        p = ResultSet((), (), 0)  # Python's sqlite3 runs an empty or comment-only string as "no rows"
    b: int | None
    f1: float | None
    if p is None:
        b, f1 = 0, 0.0
    elif g.decode_errors or p.decode_errors:
        b, f1 = 0, 0.0  # BIRD's default text decoding raises on such text: the query "fails"
    elif (pr := set_rows(p)) is None or (gr := set_rows(g)) is None:
        b, f1 = None, None
    else:
        b, f1 = bird_ex(pr, gr), soft_f1(pr, gr)
    one = _ts(item, db, gold, pred, executor, False)
    same_sql = ts_gold_sql(item.gold_sql) == ts_gold_sql(item.gold_sql, keep_distinct=True) and ts_pred_sql(
        item.pred_sql
    ) == ts_pred_sql(item.pred_sql, keep_distinct=True)
    one_keep = one if same_sql else _ts(item, db, gold, pred, executor, True)
    files = ts_databases(db)
    if len(files) < 2:  # the original alone: test-suite accuracy is not defined, its one-database reading is
        return Readings(bird_ex=b, soft_f1=f1, spider_ex=one, spider_ex_keep_distinct=one_keep)
    variants = [Database.file(f, db.db_id) for f in files if f != db.target]
    ts = _on_variants(item, variants, executor, False, one)
    keep = ts if same_sql else _on_variants(item, variants, executor, True, one_keep)
    return Readings(
        bird_ex=b,
        soft_f1=f1,
        spider_ex=one,
        spider_ex_keep_distinct=one_keep,
        ts_ex=ts,
        ts_ex_keep_distinct=keep,
        ts_databases=len(files),
    )


def ts_databases(db: Database) -> list[str]:
    """The databases the test suite compares an item on: every file of the database's folder whose name
    contains ``.sqlite`` (``exec_eval.eval_exec_match``'s rule, journal files included), sorted; only
    for SQLite files."""
    if not db.info.python_sqlite3:
        return []
    return _sqlite_files(os.path.dirname(db.target) or ".")


@lru_cache(maxsize=4096)
def _sqlite_files(folder: str) -> list[str]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(os.path.join(folder, n) for n in names if ".sqlite" in n)


def _on_variants(
    item: Item, variants: Sequence[Database], executor: Executor, keep: bool, first: int | None
) -> int | None:
    """Test-suite accuracy from the original's reading ``first`` and the variants: 1 iff every one
    matches; None where the gold fails on one (the official script aborts), is cut, or the column search
    gives up, unless a database already showed a mismatch (the official loop stops at the first)."""
    if first != 1:
        return first
    assert item.gold_sql is not None
    g_sql = ts_gold_sql(item.gold_sql, keep_distinct=keep)
    p_sql = ts_pred_sql(item.pred_sql, keep_distinct=keep)
    for db in variants:
        g, p = executor.run(db, g_sql, role="gold"), executor.run(db, p_sql, role="pred")
        if g.result is None or p.status in NOT_THE_PREDICTION:
            return None
        if p.result is None:
            return 0
        if g.result.truncated or p.result.truncated:
            return ts_past_cap(g.result, p.result)
        equal = ts_equal(g.result.rows, p.result.rows, ts_order_matters(g_sql))
        if equal is None:
            return None
        if not equal:
            return 0
    return 1


def _ts(item: Item, db: Database, gold: Execution, pred: Execution, executor: Executor, keep: bool) -> int | None:
    assert item.gold_sql is not None
    g_sql = ts_gold_sql(item.gold_sql, keep_distinct=keep)
    p_sql = ts_pred_sql(item.pred_sql, keep_distinct=keep)
    g = gold if g_sql == item.gold_sql else executor.run(db, g_sql, role="gold")
    p = pred if p_sql == item.pred_sql else executor.run(db, p_sql, role="pred")
    if g.result is None:
        return None  # the official script aborts the whole run here
    if p.status in NOT_THE_PREDICTION:
        return None
    if p.result is None:
        return 0
    if g.result.truncated or p.result.truncated:
        return ts_past_cap(g.result, p.result)
    equal = ts_equal(g.result.rows, p.result.rows, ts_order_matters(g_sql))
    return None if equal is None else int(equal)
