"""A result past the row cap keeps the official readings the official scripts compute (issue 36, symptom 1).

Mini-dev question 207: a prediction without DISTINCT returned 139,838 rows where the gold returned 14, and
the official script, which compares sets, scored it 1; ``rose run`` (``--max-rows`` 100,000) left every
reading out as ``truncated``. Here the same shape on a small database and a cap of 10 rows: the rows past
the cap stream by, their distinct rows kept within caps of their own, so that BIRD EX and Soft-F1 are
what they are with no cap at all (and what the official formulas give on every row), on SQLite and on the
servers; the test suite's bag readings are 0 where the exact row counts differ, as its ``result_eq``
says first. Our own comparator still says the result was cut (ROSE's stricter accounting is unchanged).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import build_db
from servers import load

from rose_sql.config import Config
from rose_sql.engines import Source
from rose_sql.engines.execute import Executor
from rose_sql.items.load import Item
from rose_sql.readings.formulas import bird_ex, soft_f1
from rose_sql.record import Record
from rose_sql.run.evaluate import evaluate_item

DB = "rose_test_past_cap"
ELEMENTS = ("cl", "c", "h", "o")
SCRIPT = "CREATE TABLE atom (id INTEGER PRIMARY KEY, element TEXT, molecule INTEGER);\n" + "".join(
    f"INSERT INTO atom VALUES ({i}, '{ELEMENTS[i % 4]}', {i // 8});\n" for i in range(40)
)
GOLD = "SELECT DISTINCT element FROM atom"
CASES = {
    "the_symptom_a_prediction_without_distinct": ("SELECT element FROM atom", 1),
    "fewer_distinct_rows": ("SELECT element FROM atom WHERE element <> 'cl'", 0),
    "another_column": ("SELECT element, molecule % 2 FROM atom", 0),
    "distinct_rows_past_their_own_cap": ("SELECT id FROM atom", None),
}
"""Prediction, and its BIRD EX with a cap of 10 rows (None: its 40 distinct rows pass the distinct cap)."""
CAP = 10


@pytest.fixture(scope="module", name="sources")
def sources_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Source]]:
    tmp = tmp_path_factory.mktemp("past-cap")
    sqlite_file = build_db(tmp / DB / f"{DB}.sqlite", SCRIPT)
    made: dict[str, Source] = {}

    def get(kind: str) -> Source:
        if kind not in made:
            if kind == "sqlite":
                made[kind] = Source.folder(tmp)
            else:
                made[kind] = Source(kind, load(kind, sqlite_file, DB, tmp)[1])  # type: ignore[arg-type]
        return made[kind]

    yield get


def _record(source: Source, pred: str, max_rows: int) -> Record:
    with Executor(Config(workers=1, evidence=False, max_rows=max_rows)) as ex:
        return evaluate_item(Item("q207", DB, pred, GOLD, question="Which elements?"), source, ex)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_result_past_the_cap_reads_as_with_no_cap(case: str, kind: str, sources: Callable[[str], Source]) -> None:
    pred, expected = CASES[case]
    source = sources(kind)
    capped, whole = _record(source, pred, CAP), _record(source, pred, 100_000)
    assert capped.pred.truncated and capped.pred.row_count == whole.pred.row_count > CAP and not whole.pred.truncated
    assert capped.readings.bird_ex == expected
    if expected is None:
        assert capped.readings.soft_f1 is None
        return
    assert (capped.readings.bird_ex, capped.readings.soft_f1) == (whole.readings.bird_ex, whole.readings.soft_f1)
    # ours stays strict: the comparison says the result was cut, and no judge has ruled
    assert capped.comparison is not None and capped.comparison.reason == "truncated"
    assert capped.unscored_reason == "awaiting_judge"
    if kind == "sqlite":  # the official formulas on every row, fetched as the official script fetches them
        conn = sqlite3.connect(Path(source.location) / DB / f"{DB}.sqlite")
        p, g = conn.execute(pred).fetchall(), conn.execute(GOLD).fetchall()
        conn.close()
        assert (capped.readings.bird_ex, capped.readings.soft_f1) == (bird_ex(p, g), soft_f1(p, g))
        # the test suite keeps DISTINCT here: 40 rows against 4 is 0 without reading them all
        assert capped.readings.spider_ex_keep_distinct == whole.readings.spider_ex_keep_distinct == 0
