"""An evidence item's step budget never depends on the items before it (found by running on Ray, where the
items of a worker differ from a local run's): SQLite counts a cached statement's steps on from its earlier
runs, so with a statement cache the progress handler ticked at other points the second time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rose_sql.config import Config
from rose_sql.engines import Database
from rose_sql.engines.spaces.sqlite import Workspace, open_space

COUNT = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < {n}) SELECT count(*) FROM r"


def test_the_same_statement_costs_the_same_steps_every_time(make_db: Any) -> None:
    db: Path = make_db("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);")
    ws = open_space(Database.file(db), Config())
    assert isinstance(ws, Workspace)
    ws.start(10**12, float("inf"))
    ws.copy({"t"})  # the witness search's statement budget
    costs = []
    for n in (777, 777, 5, 777, 777, 777, 3, 777):
        before = ws.steps_left
        assert ws.run(COUNT.format(n=n)) is not None
        costs.append((n, before - ws.steps_left))
    assert len({cost for n, cost in costs if n == 777}) == 1, costs
    ws.close()
