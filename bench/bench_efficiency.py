#!/usr/bin/env python3
"""R-VES and VES of finished `rose run` systems, per difficulty, on two time bases.

For every record whose BIRD EX is defined (its database exists, its gold ran), on SQLite:

- **steps** (deterministic): gold VM steps / predicted VM steps for an item with BIRD EX 1, counted in a
  pass of their own at progress-handler grain 1 in the sandbox
  (:meth:`rose_sql.engines.execute.Executor.count_steps`); 0 otherwise;
- **timed** (``--timed``, as published): the mean of ``--iterations`` wall-time ratios (each iteration
  runs and fetches the prediction then the gold, each on a fresh sandbox connection opened before the
  clock starts, as mini-dev's script does: :meth:`rose_sql.engines.execute.Executor.time_pass`), values
  beyond 3 sigma removed; an item whose pass stopped is left out. R-VES takes those ratios, VES those of
  a pass of its own timing each statement to its first row, as BIRD dev's script times ``cursor.execute``.
  Machine- and load-dependent: printed with the load average, never used to decide.

Every statement runs in the sandbox's guarded worker process, as under ``rose run``.

Then mini-dev's R-VES and BIRD's VES over those ratios, for ``all`` and each difficulty, each with its n.

Usage::

    python bench/bench_efficiency.py runs/bird/predict_mini_dev_gpt-4_sqlite --db-root ../shared/data/bird \\
        [--timed --iterations 100]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from rose_sql.analysis.runs import load_run
from rose_sql.config import Config
from rose_sql.engines import Database
from rose_sql.engines.execute import Executor
from rose_sql.readings.efficiency import (
    by_difficulty,
    pass_ratios,
    published_ratio,
    r_ves,
    step_ratio,
    ves,
)


def _timed_ratios(ex: Executor, db: Database, gold: str, pred: str, iterations: int) -> tuple[float, float] | None:
    """mini-dev's and BIRD dev's published ratios of one pass (None: the pass stopped)."""
    ratios, _, _ = pass_ratios(ex.time_pass(db, (pred, gold), iterations), iterations)
    firsts, _, _ = pass_ratios(ex.time_pass(db, (pred, gold), iterations, first_row=True), iterations)
    if ratios is None or firsts is None:
        return None
    return published_ratio(ratios), published_ratio(firsts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="system folders of rose run")
    ap.add_argument("--db-root", required=True, type=Path)
    ap.add_argument("--timed", action="store_true", help="also the published wall-time ratio")
    ap.add_argument("--iterations", type=int, default=100)
    args = ap.parse_args()
    ex = Executor(Config())
    print(f"load average at start: {os.getloadavg()}", file=sys.stderr)
    for path in args.runs:
        run = load_run(path)
        steps: list[tuple[str | None, float | None]] = []
        timed: list[tuple[str | None, float | None]] = []
        dev: list[tuple[str | None, float | None]] = []
        started = time.monotonic()
        for r in run.records:
            if r.readings.bird_ex is None or r.gold_sql is None or r.dialect is not None:
                continue
            db = Database.file(args.db_root / r.db_id / f"{r.db_id}.sqlite")
            correct = r.readings.bird_ex == 1 and r.pred_sql is not None
            g = ex.count_steps(db, r.gold_sql).steps if correct else None
            p = ex.count_steps(db, r.pred_sql or "").steps if correct else None
            steps.append((r.difficulty, step_ratio(g, p, correct)))
            if args.timed:
                both = _timed_ratios(ex, db, r.gold_sql, r.pred_sql or "", args.iterations) if correct else (0.0, 0.0)
                timed.append((r.difficulty, both[0] if both else None))
                dev.append((r.difficulty, both[1] if both else None))
        seconds = time.monotonic() - started
        print(f"{run.name}: {len(steps)} items with BIRD EX defined, of {len(run.records)}; {seconds:.1f} s")
        bases = [("steps", steps, steps)] + ([(f"timed x{args.iterations}", timed, dev)] if args.timed else [])
        for base, minidev, birddev in bases:
            for name, formula, items in (("R-VES", r_ves, minidev), ("VES", ves, birddev)):
                cells = [
                    f"{label} {value:.2f} (n {n}{f', {left} no count' if left else ''})"
                    if value is not None
                    else f"{label} undefined"
                    for label, (value, n, left) in by_difficulty(items, formula).items()
                ]
                print(f"  {base:>10} {name:>5}: " + "; ".join(cells))
    ex.close()
    print(f"load average at end: {os.getloadavg()}", file=sys.stderr)


if __name__ == "__main__":
    main()
