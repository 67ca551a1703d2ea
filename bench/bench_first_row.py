#!/usr/bin/env python3
"""BIRD dev's timing (a statement to its first row) through the sandbox, against the published one.

BIRD dev's ``evaluation_ves.py`` opens a connection, starts its clock, calls ``cursor.execute`` (which runs
a statement to its first row), stops the clock and never reads the rows. This script times the pairs of a
finished ``rose run`` (SQLite; the records whose ``dev_time_ratio`` is set) three or four ways, alternating
pair by pair, ``--iterations`` iterations each (prediction, then gold), and prints for each way the mean
over the pairs of log(its published ratio / the published timing's), with its standard error:

- ``published``: the published ``execute_sql`` written out here (Python's ``sqlite3``, ``time.time``);
- ``read after``: the same, then the rows read and the connection closed after the clock, which is what
  timing the first row inside mini-dev's executions does (the state it leaves moves the next execution);
- ``sandbox``: :meth:`rose_sql.engines.sqlite.SQLite.timed_first` in this process;
- ``worker`` (``--worker``): :meth:`rose_sql.engines.execute.Executor.time_pass` with ``first_row``, in
  the sandbox's guarded worker process, as ``rose run`` runs it.

Machine- and load-dependent, as every wall-time figure: run it on an idle machine and read the standard
errors. Usage::

    python bench/bench_first_row.py runs/official/predict_mini_dev_gpt-4_sqlite --db-root ../shared/data/bird \\
        [--ids 730 738] [--iterations 40] [--worker]
"""

from __future__ import annotations

import argparse
import math
import os
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rose_sql.analysis.runs import load_run
from rose_sql.config import Config
from rose_sql.engines import Database
from rose_sql.engines.execute import Executor
from rose_sql.engines.sqlite import SQLite
from rose_sql.readings.efficiency import published_ratio


def published(path: str, read_after: bool) -> Callable[[str], float]:
    def run(sql: str) -> float:
        conn = sqlite3.connect(path)
        cursor = conn.cursor()
        start = time.time()
        cursor.execute(sql)
        seconds = time.time() - start
        if read_after:
            cursor.fetchall()
            conn.close()
        return seconds

    return run


def ratio(timer: Callable[[str], float], pred: str, gold: str, iterations: int) -> float:
    values = []
    for _ in range(iterations):
        p = timer(pred)
        values.append(timer(gold) / p)
    return published_ratio(values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a system folder of rose run --efficiency time (SQLite)")
    ap.add_argument("--db-root", required=True, type=Path)
    ap.add_argument("--ids", nargs="*", default=None, help="question ids (default: every timed item)")
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--worker", action="store_true", help="also through the sandbox's worker process")
    args = ap.parse_args()
    wanted = set(args.ids) if args.ids else None
    records = [
        r
        for r in load_run(args.run).records
        if r.efficiency is not None
        and r.efficiency.dev_time_ratio
        and r.pred_sql
        and r.gold_sql
        and (wanted is None or str(r.id) in wanted)
    ]
    if not records:
        sys.exit(f"{args.run}: no record with a dev_time_ratio (a rose run --efficiency time on SQLite)")
    missing = sorted({str(p) for r in records if not (p := args.db_root / r.db_id / f"{r.db_id}.sqlite").is_file()})
    if missing:
        sys.exit(f"--db-root {args.db_root}: no {', '.join(missing)}")
    print(f"load average at start: {os.getloadavg()}", file=sys.stderr)
    engine = SQLite(Config().limits)
    gaps: dict[str, list[float]] = {"read after": [], "sandbox": [], "worker": []}
    with Executor(Config()) as ex:
        for r in records:
            pred, gold = r.pred_sql or "", r.gold_sql or ""
            path = str(args.db_root / r.db_id / f"{r.db_id}.sqlite")
            db = Database.file(path)

            def sandbox(sql: str, db: Database = db) -> float:
                return engine.timed_first(db, sql, time.monotonic() + 60).seconds

            base = ratio(published(path, False), pred, gold, args.iterations)
            ways = {
                "read after": ratio(published(path, True), pred, gold, args.iterations),
                "sandbox": ratio(sandbox, pred, gold, args.iterations),
            }
            if args.worker:
                done = ex.time_pass(db, (pred, gold), args.iterations, first_row=True)
                ways["worker"] = published_ratio([g / p for p, g in done.times])
            print(f"question {r.id}: published {base:.3f}, " + ", ".join(f"{k} {v:.3f}" for k, v in ways.items()))
            for name, value in ways.items():
                if base > 0 and value > 0:
                    gaps[name].append(math.log(value / base))
    engine.close()
    for name, values in gaps.items():
        if len(values) > 1:
            mean, se = statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))
            print(f"{name}: mean log(ratio / published) {mean:+.4f} (standard error {se:.4f}), {len(values)} items")
    print(f"load average at end: {os.getloadavg()}", file=sys.stderr)


if __name__ == "__main__":
    main()
