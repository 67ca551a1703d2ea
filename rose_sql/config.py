"""The one frozen configuration, and the only home of defaults.

Built once at the entry point (CLI or API) and passed down; no module keeps mutable
settings of its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Self


def _default_workers() -> int:
    return max(2, 2 * (os.cpu_count() or 1))


@dataclass(frozen=True, slots=True)
class Config:
    """Everything that changes how items are executed, compared and recorded."""

    timeout_s: float = 30.0
    """Wall-clock limit for one query; a query past it is interrupted inside SQLite."""
    max_rows: int = 100_000
    """Rows kept per result; past it the result is marked ``truncated`` (rows are still counted)."""
    max_result_bytes: int = 64 * 2**20
    """Approximate bytes of cell data kept per result; past it the result is truncated."""
    max_value_bytes: int = 16 * 2**20
    """SQLite's limit on one string or blob (SQLITE_LIMIT_LENGTH): stops ``randomblob`` giants."""
    max_sql_chars: int = 200_000
    """Longer SQL is rejected before it reaches a parser."""
    sqlite_heap_bytes: int = 2 * 2**30
    """Hard heap limit for SQLite in this process (``PRAGMA hard_heap_limit``)."""
    count_past_cap_s: float = 5.0
    """After truncation, keep stepping (without storing) this long to count the total rows."""
    float_digits: int = 12
    """Numbers are compared after rounding to this many significant digits (int 1 == float 1.0)."""
    workers: int = field(default_factory=_default_workers)
    """Threads executing items; SQLite releases the GIL while it runs a query."""
    cache_cells: int = 20_000_000
    """Cells of query results kept in the in-process execution cache (LRU beyond it)."""

    def with_(self, **changes: object) -> Self:
        """A copy with some fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]
