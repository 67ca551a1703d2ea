"""ROSE-SQL: judge whether predicted SQL answers the question, not whether it equals one gold query.

The public API is small: load items, evaluate them (with or without judges), read the records::

    from rose_sql import Config, JudgeConfig, Source, evaluate_items, load_items, load_run

    items = load_items("preds.json", gold_path="dev.json").items
    databases = Source.folder("dev_databases")  # <db_id>/<db_id>.sqlite; or Source.parse("postgresql://...")
    records = evaluate_items(items, databases, Config(judge=JudgeConfig(model="gpt-4o")))
    run = load_run("runs/preds")  # a finished `rose run` folder: typed records and summary
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rose_sql.__version__ import __version__

if TYPE_CHECKING:
    from rose_sql.analysis.runs import Run, load_run
    from rose_sql.comparison.comparator import Comparison, compare
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

_HOMES = {
    "Comparison": "rose_sql.comparison.comparator",
    "Config": "rose_sql.config",
    "Database": "rose_sql.engines",
    "Execution": "rose_sql.results",
    "Executor": "rose_sql.engines.execute",
    "InputError": "rose_sql.errors",
    "Item": "rose_sql.items.load",
    "JudgeConfig": "rose_sql.config",
    "Loaded": "rose_sql.items.load",
    "Readings": "rose_sql.readings.formulas",
    "Record": "rose_sql.record",
    "ResultSet": "rose_sql.results",
    "RoseError": "rose_sql.errors",
    "Run": "rose_sql.analysis.runs",
    "Source": "rose_sql.engines",
    "Summary": "rose_sql.summary",
    "UsageError": "rose_sql.errors",
    "compare": "rose_sql.comparison.comparator",
    "evaluate_item": "rose_sql.run.evaluate",
    "evaluate_items": "rose_sql.run.evaluate",
    "load_items": "rose_sql.items.load",
    "load_run": "rose_sql.analysis.runs",
}
"""Where each public name lives: imported on first use, so that ``import rose_sql`` (and the ``rose``
command's start) loads nothing but what is asked for."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rose_sql' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup finds it here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


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
