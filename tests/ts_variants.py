"""A test-suite fixture: one database, its three perturbed variants, and items that pass the original but
fail a variant, written here (no test-suite release data is copied).

Shared by ``tests/test_ts_variants.py`` and by the driver ``bench/official_ts_variants.py`` that pins what
the official ``exec_eval.eval_exec_match`` gives on it (``tests/data/official/ts-variants.json``).

Layout, as the test-suite release ships it: ``<root>/shop/shop.sqlite`` (the original) and, in the same
folder, ``shop_1.sqlite``, ``shop_2.sqlite`` and ``shop_3.sqlite3`` (``.sqlite`` is in that name too: the
official rule is a substring test), and ``shop.db``, which it ignores. ``<root>/solo/solo.sqlite`` has
no variant.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

SCHEMA = "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, price REAL, cat TEXT)"
ORIGINAL = [
    (1, "ant", 5.0, "a"),
    (2, "bee", 12.0, "a"),
    (3, "cat", 25.0, "b"),
    (4, "dog", 30.0, "b"),
    (5, "eel", 8.0, "c"),
]
VARIANTS = {
    # a price between 10 and 11, and one more row: a hard-coded count or bound no longer holds
    "shop_1.sqlite": [*ORIGINAL, (6, "fox", 10.5, "c")],
    # a third price above 20, and ids no longer in price order
    "shop_2.sqlite": [(1, "ant", 50.0, "a"), (2, "bee", 12.0, "a"), (3, "cat", 25.0, "b"), (4, "dog", 30.0, "b"),
                      (5, "eel", 8.0, "c")],
    # every category once: DISTINCT and GROUP BY agree here
    "shop_3.sqlite3": [(1, "ant", 5.0, "a"), (2, "bee", 12.0, "b"), (3, "cat", 25.0, "c"), (4, "dog", 30.0, "d"),
                       (5, "eel", 8.0, "e")],
    # not a test-suite database (no '.sqlite' in its name): would fail everything, is never read
    "shop.db": [(1, "zzz", 0.0, "z")],
}  # fmt: skip

ITEMS: list[tuple[int, str, str, str]] = [
    # (id, db_id, gold, prediction)
    (0, "shop", "SELECT name FROM t WHERE price > 10", "SELECT name FROM t WHERE NOT price <= 10"),  # passes all
    (1, "shop", "SELECT name FROM t WHERE price > 10", "SELECT name FROM t WHERE price >= 11"),  # fails shop_1
    (2, "shop", "SELECT count(*) FROM t", "SELECT 5"),  # hard-coded: fails shop_1
    (3, "shop", "SELECT name FROM t ORDER BY price", "SELECT name FROM t ORDER BY id"),  # fails on the original
    (4, "shop", "SELECT name FROM t WHERE price > 20", "SELECT name FROM t WHERE id IN (3, 4)"),  # fails shop_2
    # fails shop_2
    (5, "shop", "SELECT name FROM t ORDER BY price DESC LIMIT 2",
     "SELECT name FROM t WHERE id IN (3, 4) ORDER BY id DESC"),
    (6, "shop", "SELECT DISTINCT cat FROM t", "SELECT cat FROM t GROUP BY cat"),  # DISTINCT removed: 0; kept: 1
    # columns permuted: passes everywhere
    (7, "shop", "SELECT cat, count(*) FROM t GROUP BY cat", "SELECT count(*), cat FROM t GROUP BY cat"),
    (8, "shop", "SELECT name FROM t", "SELECT nme FROM t"),  # fails everywhere
    (9, "shop", "SELECT count(DISTINCT cat) FROM t", "SELECT 3"),  # DISTINCT removed from COUNT too
    (10, "solo", "SELECT name FROM t WHERE price > 10", "SELECT name FROM t WHERE price >= 11"),  # no variant
]  # fmt: skip


def _write(path: Path, rows: list[tuple[int, str, float, str]]) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(SCHEMA)
        conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
        conn.commit()
    finally:
        conn.close()


def build(root: Path, *, variants: bool = True) -> Path:
    """Write the fixture under ``root`` (``variants=False``: the originals alone); returns ``root``."""
    (root / "shop").mkdir(parents=True, exist_ok=True)
    (root / "solo").mkdir(parents=True, exist_ok=True)
    _write(root / "shop" / "shop.sqlite", ORIGINAL)
    _write(root / "solo" / "solo.sqlite", ORIGINAL)
    if variants:
        for name, rows in VARIANTS.items():
            _write(root / "shop" / name, rows)
    return root
