"""Evaluate the demo's items with the ordinary run machinery and read back what it recorded."""

from __future__ import annotations

from rose_sql.config import Config
from rose_sql.demo.build import DemoPaths
from rose_sql.engines import Source
from rose_sql.items.load import load_items
from rose_sql.record import Record, read_records
from rose_sql.run.runner import plan, run
from rose_sql.summary import Summary


def evaluate(paths: DemoPaths, config: Config) -> tuple[dict[int, Record], Summary]:
    """Evaluate ``OUT/items.jsonl`` into ``OUT/runs/``; the records read back by item id, and the summary."""
    loaded = load_items(paths.items, fmt="generic")
    source = Source.folder(paths.db_root)
    systems = plan([loaded], paths.runs, db_root=source, config=config)
    (summary,) = run(systems, source, config)
    records = read_records(systems[0].out_dir / "records.jsonl")
    return {int(r.id): r for r in records}, summary
