#!/usr/bin/env python3
"""What reading a statement as the engine does costs, and what DuckDB's window costs, each against the
work it adds to, measured in one run.

1. The lexical check (``rose_sql.engines.lexical``) against the policy it runs beside: for every distinct
   predicted and gold SQL of the shared Spider and BIRD files, in the MySQL, PostgreSQL and DuckDB
   dialects, the CPU seconds of the policy alone (sqlglot's tokens and parse, the tree's walk) and of the
   check and the policy, as the engine runs them (the tokens read once, shared).
2. DuckDB's window (``rose_sql.engines.duckdb.fetch``) against the statement itself fetched as before
   (``_stream``): superhero copied into a DuckDB file (``rose db copy``), every distinct gold and
   prediction of the BIRD dev superhero items that DuckDB runs, both ways, interleaved, ``--repeat``
   times (the fastest kept), and how many results took one execution, two (narrow rows) or more (wide).

    .venv/bin/python bench/bench_policy.py --repeat 5
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def published() -> set[str]:
    """Every distinct predicted and gold SQL of the shared Spider and BIRD files."""
    texts: set[str] = set()
    for path in [*SHARED.glob("preds/bird-dev/*.json"), *SHARED.glob("preds/bird-minidev/*.json")]:
        for r in json.loads(path.read_text()):
            texts.update(v for k in ("predicted_sql", "gold_sql") if isinstance(v := r.get(k), str))
    for path in SHARED.glob("preds/spider/*.txt"):
        texts.update(line for line in path.read_text().splitlines() if line.strip())
    for path in SHARED.glob("preds/spider/*.csv"):
        with path.open(newline="") as f:
            texts.update(v for row in csv.DictReader(f) for k, v in row.items() if k and "SQL" in k.upper() and v)
    for path in [*SHARED.glob("preds/bird-minidev-official/*.json"), *SHARED.glob("preds/bird-dev-official-format/*")]:
        values = json.loads(path.read_text()).values()
        texts.update(v.split("\t----- bird -----")[0] for v in values if isinstance(v, str))
    for path in [*SHARED.glob("bird/mini_dev_*_gold.sql"), SHARED / "spider" / "dev_gold.sql"]:
        texts.update(line.rsplit("\t", 1)[0] for line in path.read_text().splitlines() if line.strip())
    return texts


def lexical_cost(texts: set[str], repeat: int) -> None:
    from rose_sql.engines import lexical
    from rose_sql.engines.base import policy
    from rose_sql.engines.lexical import refusal

    print(f"1. the policy with and without the lexical check, {len(texts):,} distinct statements, best of {repeat}")
    for dialect, lexer in (("mysql", lexical.mysql), ("postgres", lexical.postgres), ("duckdb", lexical.duckdb)):
        best = {"policy": float("inf"), "with the check": float("inf")}
        for _ in range(repeat):
            for name in best:
                start = time.process_time()
                for t in texts:  # as the engine does: the check first, its tokens then shared with the policy
                    if name != "policy":
                        refusal(t, dialect, lexer, dialect)
                    policy(t, dialect, lambda name: None)
                best[name] = min(best[name], time.process_time() - start)
        added = best["with the check"] - best["policy"]
        print(
            f"   {dialect:9s} policy {best['policy']:5.2f} s, with the check {best['with the check']:5.2f} s "
            f"(+{added / best['policy']:.0%}, {added / len(texts) * 1e6:.0f} µs a statement)"
        )


def window_cost(repeat: int) -> None:
    import duckdb

    from rose_sql.config import Config
    from rose_sql.engines import Source
    from rose_sql.engines.admin.copy import copy_sqlite
    from rose_sql.engines.duckdb import _stream, fetch, open_read_only

    limits = Config().limits
    sqls: set[str] = set()
    for path in SHARED.glob("preds/bird-dev/*.json"):
        for r in json.loads(path.read_text()):
            if r.get("db_id") == "superhero":
                sqls.update(v for k in ("predicted_sql", "gold_sql") if isinstance(v := r.get(k), str))
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "superhero.duckdb"
        copy_sqlite(SHARED / "bird" / "superhero" / "superhero.sqlite", Source.parse(f"duckdb://{target}"), "superhero")
        conn = open_read_only(str(target), limits.memory_bytes)
        runs = []
        for sql in sorted(sqls):
            try:
                _stream(conn, sql, limits)
            except duckdb.Error:
                continue
            runs.append(sql)
        best = {"statement": float("inf"), "window": float("inf")}
        for _ in range(repeat):
            for name, how in (("statement", _stream), ("window", fetch)):
                start = time.perf_counter()
                for sql in runs:
                    how(conn, sql, limits)
                best[name] = min(best[name], time.perf_counter() - start)
        kinds: collections.Counter[str] = collections.Counter()
        for sql in runs:
            result, _ = fetch(conn, sql, limits)
            kinds["one row or none: one execution" if result.row_count <= 1 else "more rows: two executions"] += 1
        conn.close()
    print(f"2. DuckDB's window, {len(runs)} distinct superhero statements of BIRD dev's predictions, best of {repeat}")
    print(
        f"   the statement itself {best['statement']:.3f} s, through the window {best['window']:.3f} s "
        f"({best['window'] / best['statement']:.2f}x); {dict(kinds)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not SHARED.is_dir():
        sys.exit(f"the shared data is not at {SHARED}")
    lexical_cost(published(), args.repeat)
    window_cost(args.repeat)


if __name__ == "__main__":
    main()
