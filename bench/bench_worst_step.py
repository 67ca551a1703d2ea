#!/usr/bin/env python3
"""The dearest single step an accepted SQLite statement can make, at the sandbox's limits and at the former ones.

SQLite checks its progress handler (the step budget and the wall clock) between virtual-machine steps, so
one call of a built-in cannot be interrupted: its cost is what the step budget cannot see. Each construct
below is one such call (a statement of a dozen steps), built as long as a limit allows, and timed through
the sandbox (``Executor``, no confirmation, a clock far away):

- at the default limits (``Config.max_value_bytes``, ``Config.max_pattern_bytes``), run to its end;
- at the former limits (16 MiB values, SQLite's 50,000-byte patterns), measured at ``--former-at`` bytes
  and extrapolated to the limit by the call's cost model (``instr`` and ``replace`` quadratic in the
  length, LIKE and GLOB the length times the pattern's, one pass linear): the largest take hours.

Also measured, the work that repeats such steps (what falls to the wall-clock guard, ``docs/safety.md``):
the mean cost of one step of a statement that calls the dearest function on every row, and of a
recursive CTE that grows a string to the value limit.

    .venv/bin/python bench/bench_worst_step.py [--former-at 524288]

It prints the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rose_sql.config import Config
from rose_sql.engines import Database
from rose_sql.engines.execute import Executor
from rose_sql.engines.workers import Watch

FORMER_VALUE = 16 * 2**20
FORMER_PATTERN = 50_000


def a(n: int, c: str = "a") -> str:
    return f"printf('%.{n}c', '{c}')"


CALLS: dict[str, tuple[Callable[[int, int], str], Callable[[int, int], float]]] = {
    # n: the value limit, p: the pattern limit; each with its cost model in (n, p)
    "instr(x, y): |x| |y| byte compares": (
        lambda n, p: f"SELECT instr({a(n - 8)} || 'b', {a(n // 2)} || 'b')",
        lambda n, p: n * n,
    ),
    "replace(x, y, z)": (
        lambda n, p: f"SELECT length(replace({a(n - 8)}, {a(n // 2)} || 'b', 'x'))",
        lambda n, p: n * n,
    ),
    "x LIKE '%...b%': |x| |pattern|": (
        lambda n, p: f"SELECT {a(n - 8)} LIKE '%' || {a(p - 10)} || 'b%'",
        lambda n, p: n * p,
    ),
    "x GLOB '*[...]*': |x| |class|": (
        lambda n, p: f"SELECT {a(n - 8)} GLOB '*[' || {a(p - 10, 'b')} || ']*'",
        lambda n, p: n * p,
    ),
    "trim(x, set of 63 + 1)": (
        lambda n, p: f"SELECT length(trim({a(n - 8)}, '{'b' * 63}a'))",
        lambda n, p: n,
    ),
    "upper(x), one pass": (lambda n, p: f"SELECT length(upper({a(n - 8)}))", lambda n, p: n),
}
"""One call each, of a dozen steps: its time is the one step's."""
REFUSED = {
    "printf('%.*c', 2e9, 'x'): 2e9 loops at any value limit": "SELECT length(printf('%.*c', 2000000000, 'x'))",
    "trim(x, set of 20,000)": f"SELECT length(trim({a(200_000)}, {a(20_000, 'b')} || 'a'))",
    "group_concat over a window of 4,000 rows of 4 kB": (
        "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 4000) SELECT max(length(g)) "
        "FROM (SELECT group_concat(printf('%.4000c', 'x')) OVER (ORDER BY i) g FROM c)"
    ),
}
"""Refused at the default limits (``rose_sql.engines.sqlite.refused``): timed with the refusal lifted
(plain ``sqlite3`` at the former value limit)."""


def timed(ex: Executor, db: Database, sql: str) -> tuple[float, str]:
    start = time.perf_counter()
    e = ex.run(db, sql)
    took = time.perf_counter() - start
    return took, e.status if e.ok else f"{e.status}: {(e.error or '')[:60]}"


def steps_of(ex: Executor, db: Database, sql: str) -> int | None:
    return ex.count_steps(db, sql).steps


def plain(sql: str, value_limit: int) -> tuple[float, str]:
    conn = sqlite3.connect(":memory:")
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, value_limit)
    start = time.perf_counter()
    try:
        conn.execute(sql).fetchall()
        status = "ok"
    except sqlite3.Error as e:
        status = f"error: {e}"
    return time.perf_counter() - start, status


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--former-at", type=int, default=2**19, help="the value size run at the former pattern limit")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}; SQLite {sqlite3.sqlite_version}")
    folder = Path(tempfile.mkdtemp(prefix="rose-bench-"))
    path = folder / "d.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE big (x INTEGER); WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
        "WHERE x < 3000) INSERT INTO big SELECT x FROM c;"
    )
    conn.close()
    db = Database.file(path)
    now = Config(timeout_s=36_000, max_steps=10**15)
    former = now.with_(max_value_bytes=FORMER_VALUE, max_pattern_bytes=FORMER_PATTERN)
    n, p = now.max_value_bytes, now.max_pattern_bytes
    print(f"\ndefault limits: values {n:,} bytes, patterns {p:,} bytes")
    print(f"{'one call':36} {'s, default':>11} {'steps':>6} {f's at {args.former_at:,}':>14} {'s, former (model)':>18}")
    worst = 0.0
    with Executor(now, watch=Watch(), confirm=False) as ex, Executor(former, watch=Watch(), confirm=False) as old:
        for name, (make, model) in CALLS.items():
            took, status = timed(ex, db, make(n, p))
            assert status == "ok", (name, status)
            worst = max(worst, took)
            n1, p1 = args.former_at, min(FORMER_PATTERN, args.former_at // 2)
            then, status = timed(old, db, make(n1, p1))
            assert status == "ok", (name, status)
            at_limit = then * model(FORMER_VALUE, FORMER_PATTERN) / model(n1, p1)
            steps = steps_of(ex, db, make(n, p)) or 0
            print(f"{name:36} {took:11.3f} {steps:6d} {then:14.2f} {at_limit:18,.0f}")
        print(f"dearest one step at the default limits: {worst:.2f} s")
        print("\nrefused at the default limits (timed with plain sqlite3 at the former value limit):")
        for name, sql in REFUSED.items():
            refusal = ex.run(db, sql)
            took, status = plain(sql, FORMER_VALUE)
            print(f"  {name:60} {took:8.2f} s ({status}); now: {refusal.status}")
        print("\nwork that repeats such steps (falls to the wall-clock guard, confirmed before it counts):")
        per_row = f"SELECT sum(instr({a(n - 16)} || x, {a(n // 2)} || 'b')) FROM big WHERE x <= 5"
        took, status = timed(ex, db, per_row)
        steps = steps_of(ex, db, per_row) or 1
        print(f"  instr on 5 of 3,000 rows: {took:.2f} s, {took / 5:.2f} s a row, {steps} steps in all ({status})")
        grow = (
            "WITH RECURSIVE r(i, s) AS (SELECT 0, '' UNION ALL SELECT i + 1, s || 'x' FROM r WHERE i < 1000000000) "
            "SELECT max(length(s)) FROM r"
        )
        took, status = timed(ex, db, grow)
        print(f"  a string grown a byte a row to the value limit: {took:.2f} s ({status})")
        print(
            f"  the step budget ({Config().max_steps:,} steps in rose run) times the dearest step: "
            f"{worst * 1e9 / 3600 / 24 / 365:.0f} years; times an ordinary step (4-50 ns): 4-50 s"
        )
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
