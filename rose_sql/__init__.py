"""ROSE-SQL: judge whether predicted SQL answers the question, not whether it equals one gold query.

The public API is small: load items, evaluate them (with or without judges), read the records::

    from rose_sql import Config, JudgeConfig, Source, evaluate_items, load_items, load_run

    items = load_items("preds.json", gold_path="dev.json").items
    databases = Source.folder("dev_databases")  # <db_id>/<db_id>.sqlite; or Source.parse("postgresql://...")
    records = evaluate_items(items, databases, Config(judge=JudgeConfig(model="gpt-4o")))
    run = load_run("runs/preds")  # a finished `rose run` folder: typed records and summary
"""

from rose_sql.__version__ import __version__
from rose_sql.analysis.runs import Run, load_run
from rose_sql.compare.comparator import Comparison, compare
from rose_sql.config import Config, JudgeConfig
from rose_sql.engines import Database, Source
from rose_sql.engines.execute import Executor
from rose_sql.errors import InputError, RoseError, UsageError
from rose_sql.items.load import Item, Loaded, load_items
from rose_sql.readings.formulas import Readings
from rose_sql.record import Record
from rose_sql.results import Execution, ResultSet
from rose_sql.run.evaluate import evaluate_item, evaluate_items
from rose_sql.summary import Summary

__all__ = [
    "Comparison",
    "Config",
    "Database",
    "Execution",
    "Executor",
    "InputError",
    "Item",
    "JudgeConfig",
    "Loaded",
    "Readings",
    "Record",
    "ResultSet",
    "RoseError",
    "Run",
    "Source",
    "Summary",
    "UsageError",
    "__version__",
    "compare",
    "evaluate_item",
    "evaluate_items",
    "load_items",
    "load_run",
]
