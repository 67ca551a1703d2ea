"""ROSE-SQL: judge whether predicted SQL answers the question, not whether it equals one gold query.

The public API is small: load items, evaluate them, read the records.
"""

from rose_sql.compare import Comparison, compare
from rose_sql.config import Config
from rose_sql.errors import InputError, RoseError, UsageError
from rose_sql.evaluate import evaluate_item
from rose_sql.execute import Execution, Executor, ResultSet
from rose_sql.items import Item, Loaded, load_items
from rose_sql.readings import Readings
from rose_sql.record import Record

__version__ = "0.1.0"

__all__ = [
    "Comparison",
    "Config",
    "Execution",
    "Executor",
    "InputError",
    "Item",
    "Loaded",
    "Readings",
    "Record",
    "ResultSet",
    "RoseError",
    "UsageError",
    "__version__",
    "compare",
    "evaluate_item",
    "load_items",
]
