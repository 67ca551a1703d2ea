"""No prediction leaves itself out of the denominator (the integrity issue's first symptom, as written).

Infrastructure reasons leave an item unscored and ``--resume`` retries it, so a prediction that could
trigger one removed itself from every figure: on PostgreSQL a permission error of its own SQL
(``information_schema.sql_parts``, ``pg_replication_origin_oid``) through a reader role, on MariaDB a
table of another database (1142), and on SQLite one call the engine cannot interrupt (a LIKE over a
4 MB string built with ``printf``), which ran into the worker's guard. BIRD EX 50.0 over 4 items became
100.0 over 2. Each wrong prediction is now 0 in the denominator and the correct ones keep their 1.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from servers import MYSQL_ADMIN, SUPERHERO, need, superhero_fixture, with_database  # noqa: F401

from rose_sql.cli.main import main
from rose_sql.record import Record, read_records

CORRECT = [
    ("SELECT count(*) FROM superhero", "SELECT count(*) FROM superhero"),
    ("SELECT race FROM race WHERE id = 1", "SELECT race FROM race WHERE id = 1"),
]
GOLD = "SELECT count(*) FROM race"
ELSEWHERE = "rose_test_elsewhere"
"""A MariaDB database the reader made by ``rose db reader`` may not read."""


def _run(tmp_path: Path, db: list[str], wrong: list[str]) -> tuple[list[Record], dict[str, Any], float]:
    rows = [{"id": f"ok{i}", "db_id": "superhero", "gold_sql": g, "pred_sql": p} for i, (g, p) in enumerate(CORRECT)]
    rows += [{"id": f"wrong{i}", "db_id": "superhero", "gold_sql": GOLD, "pred_sql": p} for i, p in enumerate(wrong)]
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    start = time.monotonic()
    result = CliRunner().invoke(main, ["run", str(items), *db, "--out", str(tmp_path / "out"), "--workers", "1"])
    took = time.monotonic() - start
    assert result.exit_code == 0, result.output  # nothing unscored for a transient reason: nothing to resume
    folder = tmp_path / "out" / "items"
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    return list(read_records(folder / "records.jsonl")), summary, took


def _check(records: list[Record], summary: dict[str, Any]) -> None:
    bird_ex = summary["figures"]["bird_ex"]
    assert (bird_ex["percent"], bird_ex["n"], bird_ex["left_out"]) == (50.0, 4, {})
    for r in records:
        if r.id.startswith("ok"):
            assert r.readings.bird_ex == 1 and r.unscored_reason == "awaiting_judge", r.why
        else:  # the prediction's own doing: 0 by execution, in the denominator, never retried
            assert (r.score, r.unscored_reason, r.decided_by, r.readings.bird_ex) == (0, None, "execution", 0), r.why
            assert r.pred.status in ("error", "rejected", "timeout"), r.pred


def test_postgresql_permission_errors_of_the_predictions_own_are_its_zero(
    superhero_on: Callable[[str], tuple[str, str]], tmp_path: Path
) -> None:
    reader = superhero_on("postgresql")[1]  # a role made by rose db reader
    wrong = ["SELECT count(*) FROM information_schema.sql_parts", "SELECT pg_replication_origin_oid('x')"]
    records, summary, _ = _run(tmp_path, ["--db", reader], wrong)
    _check(records, summary)
    denied = [r for r in records if r.pred.status == "error"]
    assert denied and all("the statement's own error" in (r.pred.error or "") for r in denied)


def test_mariadb_a_table_of_another_database_is_the_predictions_zero(
    superhero_on: Callable[[str], tuple[str, str]], tmp_path: Path
) -> None:
    need("mysql")
    import pymysql

    from rose_sql.engines.mysql import connect_args

    reader = superhero_on("mysql")[1]
    args = connect_args(MYSQL_ADMIN)
    args.pop("database", None)
    with pymysql.connect(**args, autocommit=True) as conn, conn.cursor() as cur:  # the reader may not read it
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {ELSEWHERE}")
        cur.execute(f"CREATE TABLE IF NOT EXISTS {ELSEWHERE}.race (id INT PRIMARY KEY, race TEXT)")
    wrong = [f"SELECT count(*) FROM {ELSEWHERE}.race", f"SELECT race FROM {ELSEWHERE}.race WHERE id = 2"]
    records, summary, _ = _run(tmp_path, ["--db", reader], wrong)
    _check(records, summary)
    assert all("1142" in (r.pred.error or "") for r in records if r.id.startswith("wrong"))


def test_sqlite_a_like_over_megabytes_is_the_predictions_zero_at_once(tmp_path: Path) -> None:
    if not SUPERHERO.is_file():
        pytest.skip(f"shared data not found at {SUPERHERO}")
    wrong = [  # one LIKE over a 4 MB string, built with printf, and without it
        "SELECT count(*) FROM superhero WHERE printf('%.4000000c', 'a') LIKE '%' || printf('%.24000c', 'a') || 'b%'",
        "SELECT count(*) FROM superhero WHERE replace(hex(zeroblob(2000000)), '0', 'a') LIKE '%' || "
        "printf('%.900c', 'a') || 'b%'",
    ]
    records, summary, took = _run(tmp_path, ["--db-root", str(SUPERHERO.parent.parent)], wrong)
    _check(records, summary)
    assert took < 60  # refused or stopped at the value limit: nothing waits for a guard


def _corrupt_db(path: Path) -> Path:
    """A database whose table ``a`` reads fine and whose table ``b`` has a corrupt last page."""
    import sqlite3

    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE a (x INTEGER)")
    conn.execute("INSERT INTO a VALUES (1), (2)")
    conn.execute("CREATE TABLE b (y TEXT)")
    conn.executemany("INSERT INTO b VALUES (?)", [(f"v{i:05d}" * 20,) for i in range(2000)])
    conn.commit()
    conn.close()
    data = bytearray(path.read_bytes())
    data[-4096:] = b"\xff" * 4096  # the last page: b's
    path.write_bytes(bytes(data))
    return path


def test_a_corrupt_page_only_the_prediction_reads_is_its_own_error(tmp_path: Path) -> None:
    """SQLite's 'database disk image is malformed' read as the database's: the gold, run again on a fresh
    connection right after, reads the database, so the failure is the prediction's own, a 0 (and the RL
    reward's failing-query reward), never an unscored db_unreadable that --resume retries forever."""
    from rose_sql.engines import Database, Source
    from rose_sql.engines.execute import Executor
    from rose_sql.items.load import Item
    from rose_sql.reward import RewardItem, RewardScorer
    from rose_sql.run.evaluate import evaluate_item

    db = _corrupt_db(tmp_path / "dbs" / "c" / "c.sqlite")
    item = Item("1", "c", "SELECT count(*) FROM b", "SELECT count(*) FROM a")
    with Executor() as ex:
        record = evaluate_item(item, Source.folder(db.parent.parent), ex)
    assert (record.score, record.unscored_reason, record.pred.status) == (0, None, "error"), record.why
    assert "malformed" in (record.pred.error or "") and "the statement's own error" in (record.pred.error or "")
    with RewardScorer() as scorer:
        reward = scorer.score(RewardItem("SELECT count(*) FROM b", "SELECT count(*) FROM a", Database.file(db)))
    assert (reward.status, reward.execution) == ("error", -1.0) and "malformed" in reward.detail


def test_a_database_the_gold_cannot_read_again_leaves_the_item_unscored(tmp_path: Path) -> None:
    """The other side of the rule: when the gold, run again on a fresh connection, fails the same way, the
    database (or the login) is at fault: the item is db_unreadable, which --resume retries."""
    from rose_sql.config import Config
    from rose_sql.decide import Decision, Facts, decide
    from rose_sql.engines import Database
    from rose_sql.engines.execute import Executor
    from rose_sql.engines.workers import Watch

    db = _corrupt_db(tmp_path / "c" / "c.sqlite")
    gold_sql = "SELECT count(*) FROM a"
    with Executor(Config(), watch=Watch()) as ex:
        gold = ex.run(Database.file(db), gold_sql, role="gold")
        db.write_bytes(b"not a database " * 1000)  # the file is replaced after the gold ran
        pred = ex.run(Database.file(db), "SELECT count(*) FROM a WHERE x > 1")
        attributed = ex.attribute(Database.file(db), pred, gold_sql)
    assert gold.ok and pred.status == "unreadable" and attributed is pred
    decision = decide(Facts(True, gold, attributed))
    assert isinstance(decision, Decision) and decision.unscored_reason == "db_unreadable"
