"""A reading depends on the item alone: never on what else ran in its worker process, nor on the load.

Two ways it could: the execution cache holding more memory than it reckons (the results other items left
there then take the worker's memory bound from the statements that come after), and a test-suite variant
of the prediction that a guard stopped, its confirmation alone not made, read as the prediction's 0.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from rose_sql.config import Config
from rose_sql.engines import Database
from rose_sql.engines.base import GUARD_STOPPED
from rose_sql.engines.execute import Executor
from rose_sql.engines.workers import Watch
from rose_sql.items.load import Item
from rose_sql.readings.formulas import ts_pred_sql
from rose_sql.readings.official import read_official
from rose_sql.results import Execution

SCRIPT = "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'a');"


def _text_rows(n: int, distinct: int, salt: int) -> str:
    """``n`` rows of one short text each, ``distinct`` of them distinct, a statement of its own for each
    ``salt``."""
    return (
        f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n}) "
        f"SELECT 'v{salt}-' || (x % {distinct}) FROM c"
    )


@pytest.mark.parametrize(("rows", "distinct"), [(400, 400), (1_200, 300)], ids=["whole", "past_the_cap"])
def test_the_cache_holds_no_more_memory_than_its_bound(make_db: Callable[..., Path], rows: int, distinct: int) -> None:
    """What the cache keeps is bounded by the memory it holds, not by a reckoning of its cells' text that
    leaves out the objects holding them (about three times as much), nor the distinct rows a result past
    the row cap keeps besides."""
    config = Config(max_rows=1_000, max_result_bytes=100_000)
    bound = 4 * config.max_result_bytes
    db = Database.file(make_db(SCRIPT))
    with Executor(config, watch=Watch()) as ex:
        ex.run(db, "SELECT 1")  # the connection opened before the count starts
        tracemalloc.start()
        try:
            for salt in range(30):
                e = ex.run(db, _text_rows(rows, distinct, salt))
                assert e.ok and e.result is not None and e.result.truncated == (rows > config.max_rows)
                assert rows <= config.max_rows or e.result.distinct is not None
            del e
            gc.collect()
            with_cache = tracemalloc.get_traced_memory()[0]
            assert ex._cache, "precondition: results are kept"
            ex._cache.clear()
            gc.collect()
            held = with_cache - tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
    assert held <= bound, f"the cache holds {held:,} bytes against its bound of {bound:,}"


class _VariantStopped(Executor):
    """An executor whose run of one statement ends as a guard that could not be confirmed leaves it."""

    def __init__(self, stopped: str) -> None:
        super().__init__(watch=Watch())
        self.stopped = stopped

    def run(self, db: Database, sql: str, *, role: str = "pred", fresh: bool = False) -> Execution:
        if sql == self.stopped:
            error = f"{GUARD_STOPPED} (not confirmed: a fresh process could not be started)"
            return Execution("guard", 0.0, error=error, limit="process")
        return super().run(db, sql, role=role, fresh=fresh)


def test_a_variant_stopped_by_a_guard_unconfirmed_is_not_the_predictions_zero(make_db: Callable[..., Path]) -> None:
    """The test suite's variant of the prediction (its DISTINCT removed) stopped by what is not the
    prediction's doing leaves the reading undefined, as the gold's failure does; the reading whose
    statements ran is kept."""
    db = Database.file(make_db(SCRIPT), "t")
    gold, pred = "SELECT DISTINCT name FROM t", "SELECT DISTINCT t.name FROM t"
    item = Item(id=1, db_id="t", pred_sql=pred, gold_sql=gold)
    with _VariantStopped(ts_pred_sql(pred)) as ex:
        g, p = ex.run(db, gold, role="gold"), ex.run(db, pred)
        readings = read_official(item, db, g, p, ex).readings
    assert readings.spider_ex is None
    assert (readings.bird_ex, readings.spider_ex_keep_distinct) == (1, 1)
