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


def test_a_candidate_whose_transaction_sqlite_undid_is_rolled_back_without_error(make_db: Any) -> None:
    """A change stopped mid-way (by the step budget or the guard's interrupt) makes SQLite undo the whole
    transaction, the candidate's savepoint with it: the candidate's rollback then finds no savepoint to
    undo, and must end it quietly, the copy back on the real data (it once raised 'no such savepoint:
    candidate', and the item's evidence was skipped with that error)."""
    db: Path = make_db("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);")
    ws = open_space(Database.file(db), Config())
    assert isinstance(ws, Workspace)
    ws.start(10**12, float("inf"))
    ws.copy({"t"})
    ws.begin()
    ws.update("t", 1, "x", 5)
    changed = ws.run("SELECT x FROM t")
    assert changed is not None and changed.rows == ((5,),)
    ws.conn.execute("ROLLBACK")  # what SQLite does when a change inside the transaction is interrupted
    ws.rollback()
    back = ws.run("SELECT x FROM t")
    assert back is not None and back.rows == ((1,),)
    ws.close()
