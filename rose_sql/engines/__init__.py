"""Database engines behind one seam: SQLite, PostgreSQL, MySQL/MariaDB and DuckDB.

- :mod:`~rose_sql.engines.kinds`: the list of engines (:data:`~rose_sql.engines.kinds.KINDS`), what
  ``--db`` names (:class:`~rose_sql.engines.kinds.Source`: a folder of SQLite files or a URL) and one
  item's :class:`~rose_sql.engines.kinds.Database`;
- :mod:`~rose_sql.engines.base`: the :class:`~rose_sql.engines.base.Engine` protocol, the outcome contract
  every engine maps its errors into (:data:`~rose_sql.engines.base.CONTRACT`), the function policy and
  capped fetching they share;
- :mod:`~rose_sql.engines.sqlite`, :mod:`~rose_sql.engines.postgres`, :mod:`~rose_sql.engines.mysql`
  (MySQL and MariaDB), :mod:`~rose_sql.engines.duckdb`: one module each, for what differs between them
  (opening a database read-only, what a query may do, how errors map, what the catalogue says), loaded
  only when a database of that kind is used;
- :mod:`~rose_sql.engines.spaces`: each engine's private copies for the witness search.

A new engine is one entry in ``KINDS``, one engine module and one space module.
"""

from __future__ import annotations

import importlib
from typing import cast

from rose_sql.engines.base import CONTRACT, Engine, TableInfo
from rose_sql.engines.kinds import KINDS, Database, Kind, Source, redact
from rose_sql.errors import UsageError
from rose_sql.results import Limits

__all__ = ["CONTRACT", "KINDS", "Database", "Engine", "Kind", "Source", "TableInfo", "open_engine", "redact"]


def open_engine(kind: Kind, limits: Limits) -> Engine:
    """A new engine of ``kind`` with ``limits``; raises UsageError naming the extra to install when the
    engine's client library is missing."""
    info = KINDS[kind]
    if info.driver is not None:
        try:
            importlib.import_module(info.driver)
        except ImportError:
            raise UsageError(
                f"{info.name} needs the {info.driver} client library: pip install 'rose-sql[{info.extra}]'"
            ) from None
    module = importlib.import_module(info.module)
    return cast("Engine", module.ENGINE(limits))
