"""ROSE-SQL: judge whether predicted SQL answers the question, not whether it equals one gold query.

The public API is small: load items, evaluate them (with or without judges), read the records::

    from rose_sql import Config, JudgeConfig, evaluate_items, load_items, load_run

    items = load_items("preds.json", gold_path="dev.json").items
    records = evaluate_items(items, db_root, Config(judge=JudgeConfig(model="gpt-4o")))
    run = load_run("runs/preds")  # a finished `rose run` folder: typed records and summary
"""

from rose_sql.analysis.runs import Run, load_run
from rose_sql.compare import Comparison, compare
from rose_sql.config import Config, JudgeConfig
from rose_sql.errors import InputError, RoseError, UsageError
from rose_sql.evaluate import evaluate_item, evaluate_items
from rose_sql.execute import Execution, Executor, ResultSet
from rose_sql.items import Item, Loaded, load_items
from rose_sql.readings import Readings
from rose_sql.record import Record
from rose_sql.summary import Summary

__version__ = "0.1.0"

__all__ = [
    "Comparison",
    "Config",
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
    "Summary",
    "UsageError",
    "__version__",
    "compare",
    "evaluate_item",
    "evaluate_items",
    "load_items",
    "load_run",
]
