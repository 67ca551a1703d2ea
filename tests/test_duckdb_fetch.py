"""DuckDB caps rows and bytes while fetching, as the other engines do (issue 34, symptom 6).

DuckDB computes 2,048 rows at a time, and the strings a projection makes are outside its
``memory_limit``: a prediction returning rows of a few megabytes each made gigabytes before its first
row was fetched, and ended as ``timeout`` (the worker's memory bound) with a peak RSS of 2.08 GB, where
SQLite stops the same result at the byte cap as ``truncated``. The engine now reads a result through a
window that grows (``rose_sql.engines.duckdb.fetch``). Measured here as ``tests/test_worker_memory.py``
measures the worker's bound: through the public API, in a fresh interpreter whose peak RSS and its
workers' are read.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rose_sql.config import Config
from rose_sql.results import Limits

duckdb = pytest.importorskip("duckdb", reason="DuckDB is not installed: pip install 'rose-sql[duckdb]'")

BOUND = 768 * 2**20
WIDE = "SELECT repeat('x', 3000000) AS v FROM range(1000)"
"""1,000 rows of 3 MB: 3 GB, where the byte cap keeps 64 MiB."""
SCRIPT = """
import json, resource, sys
from rose_sql import Config, Item, Source, evaluate_items
path, bound, wide = sys.argv[1], int(sys.argv[2]), sys.argv[3]
items = [Item(id="wide", db_id="wide", gold_sql="SELECT a FROM t", pred_sql=wide),
         Item(id="plain", db_id="wide", gold_sql="SELECT a FROM t", pred_sql="SELECT a FROM t ORDER BY a")]
records = evaluate_items(items, Source.parse("duckdb://" + path), Config(workers=1, worker_memory_bytes=bound))
own = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
peak = max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
out = {r.id: [r.pred.status, r.pred.limit, r.pred.error, r.pred.truncated, r.pred.row_count, r.score]
       for r in records}
print(json.dumps({"records": out, "peak": peak * 1024}))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the memory bound and /proc/self/status are Linux's")
def test_rows_of_megabytes_are_truncated_within_the_worker_bound(tmp_path: Path) -> None:
    path = tmp_path / "wide.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2)")
    conn.close()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path), str(BOUND), WIDE], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    status, limit, error, truncated, count, _ = measured["records"]["wide"]
    assert (status, limit, truncated, count) == ("ok", None, True, 1000), error  # the rest counted, exactly
    assert measured["records"]["plain"][:2] == ["ok", None]
    peak = measured["peak"]
    assert peak <= BOUND, f"peak RSS {peak / 2**20:.0f} MiB over the {BOUND / 2**20:.0f} MiB bound"


# --------------------------------------------------------------------------- the window, in process


@pytest.fixture(name="limits")
def limits_fixture() -> Limits:
    return Config(max_rows=100, max_result_bytes=4 * 2**20).limits


@pytest.fixture(name="conn")
def conn_fixture() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect(config={"threads": 1})
    c.execute("CREATE TABLE t AS SELECT range AS a, range % 7 AS g FROM range(500)")
    return c


def test_narrow_rows_come_as_the_statement_gives_them(conn: duckdb.DuckDBPyConnection, limits: Limits) -> None:
    from rose_sql.engines.duckdb import fetch

    for sql in ("SELECT a, g FROM t ORDER BY g", "SELECT g, count(*) FROM t GROUP BY g", "SELECT 1", "SELECT 1;"):
        result, _ = fetch(conn, sql, limits)
        whole = conn.execute(sql.rstrip(";")).fetchall()
        assert result.rows == tuple(whole[: limits.max_rows]), sql
        assert result.row_count == len(whole) and result.truncated == (len(whole) > limits.max_rows), sql


def test_wide_rows_stop_at_the_byte_cap_and_are_counted(conn: duckdb.DuckDBPyConnection, limits: Limits) -> None:
    from rose_sql.engines.duckdb import fetch

    result, nbytes = fetch(conn, "SELECT repeat('x', 1000000) AS v, a AS v FROM t -- a comment", limits)
    assert result.columns == ("v", "v")  # the window's own renaming (v_1) undone
    assert result.truncated and result.row_count == 500 and result.count_exact
    assert nbytes <= limits.max_bytes and len(result.rows) == 4  # 4 MiB of 1 MB rows
    whole, _ = fetch(conn, "SELECT repeat('x', 100000) AS v FROM t WHERE a < 30", limits)
    assert not whole.truncated and whole.row_count == 30 and len(whole.rows) == 30
