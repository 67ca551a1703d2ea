"""Each engine's private copies of a database, where the evidence reads and the witness search changes data.

The evidence (:mod:`rose_sql.evidence`) asks one thing of an engine: :func:`open_space`, a :class:`Space`
for a database. The gold smells read through it; the witness search asks it for a :class:`Copy` holding
the tables the queries read (:meth:`Space.copy`) and changes that, inside a transaction or savepoint
rolled back after each candidate. The user's database is never written: each engine's space module says
where its copy lives.

- SQLite (:mod:`~rose_sql.engines.spaces.sqlite`): an in-memory copy of the whole file, which is both
  the space and the copy; bounded by SQLite steps, so it finds the same on every machine;
- DuckDB (:mod:`~rose_sql.engines.spaces.duckdb`): the database read through its engine, and an
  in-memory DuckDB copy for the witness search;
- PostgreSQL and MySQL/MariaDB (:mod:`~rose_sql.engines.spaces.postgres`,
  :mod:`~rose_sql.engines.spaces.mysql`, on :mod:`~rose_sql.engines.spaces.scratch`): the database read
  through its engine, and a scratch database that rose creates and drops (``--evidence-scratch``).

Our own queries (:meth:`Space.query`) are written in SQLite's syntax with ``?`` parameters and rendered
in the engine's dialect; the queries under test (:meth:`Space.run`) are in the engine's own. Rows of a copy
are named by an integer ``rowid``.
"""

from __future__ import annotations

import importlib
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from rose_sql.config import Config
from rose_sql.engines.kinds import KINDS, Database
from rose_sql.results import ResultSet

ChangeOp = Literal["update", "insert", "delete"]


@dataclass(frozen=True, slots=True)
class Change:
    """One edit of the private copy of the database (a witness is one or a few of them).

    While the search runs, the values are the database's own (bytes included); a witness keeps them
    as JSON values (:func:`rose_sql.evidence.findings.change_json`), as the record does."""

    op: ChangeOp
    """``update`` a cell, ``insert`` a copy of a row, or ``delete`` a row."""
    table: str
    """The table edited."""
    rowid: int | None
    """The row's rowid (of the new row, for an insert)."""
    column: str | None = None
    """The cell's column (updates)."""
    old: Any = None
    """The cell's value before (updates)."""
    new: Any = None
    """The cell's value after (updates; None is a NULL)."""
    copy_of: int | None = None
    """The rowid of the row copied (inserts)."""
    values: dict[str, Any] | None = None
    """The cells of the copy that differ from the original (inserts)."""
    row: dict[str, Any] | None = None
    """The whole row inserted or deleted."""

    def to_dict(self) -> dict[str, Any]:
        """The change as JSON data: only the fields its kind of edit has."""
        data: dict[str, Any] = {"op": self.op, "table": self.table, "rowid": self.rowid}
        if self.op == "update":
            data |= {"column": self.column, "old": self.old, "new": self.new}
        elif self.op == "insert":
            data |= {"copy_of": self.copy_of, "values": self.values, "row": self.row}
        else:
            data["row"] = self.row
        return data


@dataclass
class Column:
    """A column with what the database says and what its data shows."""

    name: str
    type: str
    notnull: bool
    pk: bool
    unique: bool = False
    has_nulls: bool = False
    has_duplicates: bool = False
    pool: list[Any] = field(default_factory=list)
    """A few distinct values of the column (its own data first)."""


@dataclass
class Table:
    """A table: its columns, keys and the foreign keys pointing at it."""

    name: str
    columns: dict[str, Column]
    rowid: bool
    children: list[tuple[str, str, str]] = field(default_factory=list)
    """(child table, child column, parent column) for each FK referencing this table."""
    parents: list[tuple[str, str, str]] = field(default_factory=list)
    """(child column, parent table, parent column) for each FK this table declares."""
    rows: int = 0
    profiled: bool = False
    """Whether the columns' data facts were looked for (they are only when every probe of the profile ran)."""


class Space(Protocol):
    """What the gold smells read, and where the witness search gets its copy, for one database."""

    tables: dict[str, Table]
    dialect: str
    guard_fired: bool
    """Whether the item's wall-clock guard stopped a statement (what was found then depends on the machine)."""

    @property
    def guard_s(self) -> float:
        """Seconds an item's evidence may take here before the worker's guard may stop it (plus a margin)."""
        ...

    def prepare(self, tables: Iterable[str]) -> None:
        """Before an item's clock and budget start: profile ``tables`` (names as the queries write them) for
        the witness search, once per table, under a budget of the table's own (where steps are counted), so
        that no item pays for it and what an item finds never depends on which item came first."""
        ...

    def start(self, steps: int, deadline: float) -> None:
        """Begin an item: all its statements together may take ``steps`` (where steps are counted); the
        wall-clock guard is at ``deadline``."""
        ...

    def stop(self) -> None:
        """End the item's budget."""
        ...

    def run(self, sql: str, steps: int | None = None) -> ResultSet | None:
        """A query under test, read-only, within the budget; None when it fails, runs out, or is too large
        to compare soundly here."""
        ...

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]] | None:
        """One of our probes (SQLite's syntax, ``?`` parameters); None when it fails or runs out."""
        ...

    def stored(self, table: str, column: str, limit: int) -> list[tuple[str, Any]]:
        """Up to ``limit`` non-NULL values of a column with their storage class (``text``, ``integer``...;
        where columns have one type, ``text`` for what the driver gives as str and ``other`` otherwise)."""
        ...

    def reversed_run(self, sql: str) -> ResultSet | None:
        """The query with unordered rows returned in reverse, where the engine can (None elsewhere)."""
        ...

    def copy(self, tables: Iterable[str]) -> Copy | str:
        """The copy the witness search changes, holding ``tables`` (names as the queries write them) and
        started with this item's budget, or why there is none."""
        ...

    def close(self) -> None:
        """Drop the copies (a scratch database on a server)."""
        ...


class Copy(Protocol):
    """What the candidate generation and the witness search need of a private copy of a database."""

    tables: dict[str, Table]
    dialect: str
    errors: tuple[type[BaseException], ...]
    """What the copy's driver raises when a statement fails (a constraint, a limit)."""
    guard_fired: bool

    @property
    def steps_left(self) -> int:
        """Steps the item may still take. Each statement of the search (a query under test, one of its
        probes, a change) charges its own virtual-machine steps, in grains of ``STEP_GRAIN``, whatever
        else ran before it; a cache that answers a statement must charge what the statement took when it
        ran, so that the budget, and what the search finds, never depends on which worker, order, load or
        cache served it."""
        ...

    def alive(self) -> bool:
        """Whether the copy can still be used (a server's connection can be lost)."""
        ...

    def identity(self, sql: str) -> Hashable | None:
        """What every answer of this copy to a query under test depends on besides the data and the
        budgets: two texts of equal identity give the same results for the same steps on every state of
        the copy (SQLite: the programs they compile to). None where that is not known, or where answers
        are not reproducible (a wall clock, not steps, bounds them): nothing is then remembered of them."""
        ...

    def table_of(self, name: str) -> Table | None: ...

    def profile(self, table: str) -> bool: ...

    def run(self, sql: str, steps: int | None = None) -> ResultSet | None: ...

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]] | None: ...

    def set_reverse_order(self, on: bool) -> None: ...

    def begin(self) -> None: ...

    def rollback(self) -> None: ...

    def sample_rowids(self, table: str, limit: int) -> list[int]: ...

    def rowids_where(self, table: str, column: str, values: list[Any], limit: int) -> list[int]: ...

    def row(self, table: str, rowid: int) -> dict[str, Any]: ...

    def update(self, table: str, rowid: int, column: str, value: Any) -> Change: ...

    def insert_copy(self, table: str, rowid: int, overrides: dict[str, Any] | None = None) -> Change: ...

    def delete(self, table: str, rowid: int) -> list[Change]: ...


def open_space(db: Database, config: Config) -> Space | str:
    """The evidence's space for ``db`` (its engine's space module), or why there is none."""
    module = importlib.import_module(KINDS[db.kind].space)
    space: Space | str = module.open_space(db, config)
    return space
