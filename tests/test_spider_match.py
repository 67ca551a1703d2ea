"""Spider hardness and exact-set match, item for item against the official ``evaluation.py``.

``tests/data/official/spider-match`` holds what taoyds/test-suite-sql-eval's own functions give on
every item of the 9 shared Spider prediction files (``bench/official_em_expected.py``); our
clean-room :mod:`rose_sql.spider_match` must give the same hardness, EM and accept/reject decision.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from rose_sql.items import load_items
from rose_sql.spider_match import Schema, foreign_key_maps, spider_match

EXPECTED = sorted((Path(__file__).parent / "data" / "official" / "spider-match").glob("*.json"))


@cache
def _schema(path: str) -> Schema:
    return Schema.from_sqlite(path)


def test_expected_files_present() -> None:
    assert len(EXPECTED) == 9


@pytest.mark.parametrize("path", EXPECTED, ids=[p.name for p in EXPECTED])
def test_hardness_and_em_equal_the_official_script_on_every_item(path: Path, shared: Path) -> None:
    expected: dict[str, Any] = json.loads(path.read_text())
    loaded = load_items(
        shared / "preds" / "spider" / path.name.removesuffix(".json"), shared / "spider" / "dev_gold.sql"
    )
    fks = foreign_key_maps(shared / "spider" / "tables.json")
    seen, diffs = 0, []
    for it in loaded.items:
        want = expected["items"].get(str(it.id))
        if want is None:
            continue
        seen += 1
        db = shared / "spider" / "database" / it.db_id / f"{it.db_id}.sqlite"
        got = spider_match(it.pred_sql, it.gold_sql, _schema(str(db)), fks[it.db_id])
        rejected = got.pred_rejected is not None
        if (got.hardness, got.em, rejected) != (want["hardness"], want["em"], "pred_error" in want):
            diffs.append(f"id {it.id}: ours {got}, official {want}  pred={it.pred_sql[:100]!r}")
    assert seen == len(expected["items"]) == 972
    assert not diffs, f"{len(diffs)} differ:\n" + "\n".join(diffs[:15])
