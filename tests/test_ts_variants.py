"""Test-suite accuracy on variant databases, item for item against the official script's answers.

The fixture (``tests/ts_variants.py``) is an original and three perturbed variants, generated here; the
official ``exec_eval.eval_exec_match`` answers are pinned in ``tests/data/official/ts-variants.json`` by
``bench/official_ts_variants.py``. Items that pass the original and fail a variant have ``spider_ex`` 1
and ``ts_ex`` 0; a db_id without variants has no ``ts_ex`` at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import ts_variants

from rose_sql.accounting import figures
from rose_sql.config import Config
from rose_sql.engines import Source
from rose_sql.engines.execute import Executor
from rose_sql.items.load import Item
from rose_sql.readings.official import ts_databases
from rose_sql.record import Record
from rose_sql.run.evaluate import evaluate_item
from rose_sql.summary import Brief

OFFICIAL = json.loads((Path(__file__).parent / "data" / "official" / "ts-variants.json").read_text())["items"]


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Record]:
    root = ts_variants.build(tmp_path_factory.mktemp("ts"))
    with Executor(Config()) as executor:
        return {
            str(i): evaluate_item(Item(i, db, pred, gold), Source.folder(root), executor)
            for i, db, gold, pred in ts_variants.ITEMS
        }


def test_every_item_equals_the_official_script(records: dict[str, Record]) -> None:
    assert set(records) == set(OFFICIAL)
    mismatches = []
    for i, want in OFFICIAL.items():
        got = records[i].readings
        pairs = {
            "spider_ex": want["one_db_ts_ex"],
            "spider_ex_keep_distinct": want["one_db_ts_ex_keep_distinct"],
            "ts_ex": want["ts_ex"] if records[i].db_id == "shop" else None,  # no variant: not test-suite accuracy
            "ts_ex_keep_distinct": want["ts_ex_keep_distinct"] if records[i].db_id == "shop" else None,
        }
        mismatches += [f"{i} {name}: ours {getattr(got, name)}, official {v}" for name, v in pairs.items()
                       if getattr(got, name) != v]  # fmt: skip
    assert not mismatches, mismatches


def test_the_fixture_separates_the_two_readings(records: dict[str, Record]) -> None:
    """It would prove nothing if the variants changed no answer: some items pass the original only."""
    only_original = [i for i, r in records.items() if r.readings.spider_ex == 1 and r.readings.ts_ex == 0]
    assert only_original == ["1", "2", "4", "5"]
    # the keep-distinct reading fails only on shop_3.sqlite3: a name that contains '.sqlite' counts
    nine = records["9"].readings
    assert (nine.spider_ex_keep_distinct, nine.ts_ex_keep_distinct) == (1, 0)
    assert records["0"].readings.ts_ex == 1  # shop.db (no '.sqlite' in its name) would fail it: ignored
    assert {r.readings.ts_databases for r in records.values()} == {4, None}
    assert records["10"].readings.ts_databases is None and records["10"].readings.spider_ex == 1


def test_the_databases_it_takes(tmp_path: Path) -> None:
    root = ts_variants.build(tmp_path)
    db = Source.folder(root).locate("shop")
    names = [Path(p).name for p in ts_databases(db)]
    assert names == ["shop.sqlite", "shop_1.sqlite", "shop_2.sqlite", "shop_3.sqlite3"]
    assert [Path(p).name for p in ts_databases(Source.folder(root).locate("solo"))] == ["solo.sqlite"]


def test_without_variants_the_reading_says_why(records: dict[str, Record]) -> None:
    solo = figures([Brief.of(records["10"])])
    assert solo.ts_ex.n == 0 and solo.ts_ex.left_out == {"no_variants": 1}
    assert solo.spider_ex.n == 1
    shop = figures(Brief.of(r) for r in records.values() if r.db_id == "shop")
    assert (shop.ts_ex.n, shop.ts_ex.hits, shop.spider_ex.hits) == (10, 2, 6)
