"""The gold smells on PostgreSQL, MySQL/MariaDB and DuckDB: the probes read the database through its
engine's sandbox (they only read, so no private copy is needed; the witness search, which changes the
data, runs on SQLite only).

:class:`EngineProbe` offers what :func:`~rose_sql.evidence.smells.gold_smells` asks of a workspace:
the tables and their columns, ``run`` (a variant of the gold, written in the engine's dialect) and
``query`` (our own probes, written in SQLite's syntax with ``?`` parameters and rendered in the engine's
dialect by sqlglot, values as literals). It cannot reverse the order of unordered rows, so the
``order_dependent`` smell is not looked for there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp

from rose_sql.engines.base import Engine
from rose_sql.engines.source import Remote
from rose_sql.execute import ResultSet
from rose_sql.sql import quote_identifier


@dataclass(frozen=True, slots=True)
class ProbeColumn:
    name: str


@dataclass(frozen=True, slots=True)
class ProbeTable:
    name: str
    columns: dict[str, ProbeColumn] = field(default_factory=dict)


class EngineProbe:
    """Read-only probes of one database on an engine, for the gold smells."""

    def __init__(self, engine: Engine, db: Remote) -> None:
        self.engine = engine
        self.db = db
        self.dialect = db.dialect
        self.tables = {
            t.name: ProbeTable(t.name, {c.name: ProbeColumn(c.name) for c in t.columns}) for t in engine.describe(db)
        }

    def run(self, sql: str, steps: int | None = None) -> ResultSet | None:
        """A query in the engine's dialect, through its sandbox; None when it fails or is cut at a cap."""
        e, _ = self.engine.run(self.db, sql, "evidence")
        return e.result if e.result is not None and not e.result.truncated else None

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]] | None:
        """One of our probes (SQLite's syntax, ``?`` parameters), rendered in the engine's dialect."""
        rendered = render(sql, params, self.dialect)
        result = self.run(rendered) if rendered is not None else None
        return list(result.rows) if result is not None else None

    @staticmethod
    def quote(name: str) -> str:
        return quote_identifier(name)


def render(sql: str, params: tuple[Any, ...], dialect: str) -> str | None:
    """One of our probes, written in SQLite's syntax with ``?`` parameters, in ``dialect`` with the values
    as literals; None when sqlglot cannot read it."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.ParseError:
        return None
    values = iter(params)
    return tree.transform(lambda n: literal(next(values)) if isinstance(n, exp.Placeholder) else n).sql(dialect=dialect)


def literal(value: Any) -> exp.Expr:
    """A Python value as a SQL literal (our probes' parameters, rendered in any dialect)."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool | int | float):
        return exp.Literal.number(value)
    return exp.Literal.string(str(value))
