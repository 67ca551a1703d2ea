"""``rose demo``: what EX gets wrong, shown on a small database written for ROSE-SQL.

The demo builds a made-up cycling league (4 tables, under 200 rows) into ``OUT/db/``, writes 40
questions with gold and predicted SQL to ``OUT/items.jsonl`` (the ``generic`` format), evaluates
them with :func:`rose_sql.run.runner.run` into ``OUT/runs/items/`` and prints, per item, BIRD EX, what
ROSE-SQL's deterministic stage says, and an expert's verdict. The items show the classic EX
failures (column order, an extra column, a fraction vs a percentage, ties, a wrong gold, an
ambiguous question, coincidental matches, failing and slow predictions) among plainly correct and
plainly wrong ones. Rerunning replaces the previous demo's files.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.text import Text

from rose_sql.config import DEMO_MAX_STEPS, Config
from rose_sql.demo.build import (
    DB_ID,
    KINDS,
    DemoItem,
    DemoPaths,
    build_database,
    load_demo_items,
    table_sizes,
    write_items,
    write_labels,
)
from rose_sql.demo.evaluate import evaluate
from rose_sql.demo.show import WIDTH, print_demo

__all__ = [
    "DB_ID",
    "KINDS",
    "DemoItem",
    "DemoPaths",
    "evaluate",
    "load_demo_items",
    "run_demo",
]


def run_demo(out: Path, console: Console) -> None:
    """Build the demo database and items under ``out``, evaluate them and print what EX, ROSE-SQL and an expert say."""
    paths = DemoPaths(out)
    items = load_demo_items()
    paths.prepare()
    build_database(paths.db)
    write_labels(items, paths.labels)  # first: it marks the folder as the demo's
    write_items(items, paths.items)
    sizes = ", ".join(f"{name} {n}" for name, n in table_sizes(paths.db).items())
    console.print(
        Text.assemble(
            ("ROSE-SQL demo", "bold"),
            f": {len(items)} questions with a gold and a predicted SQL query on a made-up cycling league "
            f"({sizes} rows), run with a budget of {DEMO_MAX_STEPS:,} SQLite steps per query and no judge.",
        ),
        width=min(console.width, WIDTH),
        soft_wrap=False,
    )
    start = time.monotonic()
    records, summary = evaluate(paths, Config(max_steps=DEMO_MAX_STEPS))
    print_demo(console, items, records, summary, paths, time.monotonic() - start)
