"""What running one statement gives back, on any engine, and what it may take: a leaf of the package.

Every engine (:mod:`rose_sql.engines`) answers a statement with an :class:`Execution`: its status in the
one vocabulary of :data:`Status` (the outcome contract, :data:`rose_sql.engines.base.CONTRACT`, says
which engine error becomes which), its :class:`ResultSet` when it ran, and which limit stopped it when
one did. :class:`Limits` is what one statement may take, built from the run's configuration
(:attr:`rose_sql.config.Config.limits`). This module imports nothing of ours, so that every stage can
name these types without importing a stage before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["ok", "error", "timeout", "rejected", "guard", "unreadable", "missing"]
"""How an execution ended; what each means for a gold and for a prediction is the outcome contract
(:data:`rose_sql.engines.base.CONTRACT`)."""
Limit = Literal["steps", "memory", "wall", "process"]
"""Which limit stopped a statement: SQLite's step budget, an engine's memory limit, a wall clock, or the
wall-time guard that stopped its worker process (the last two decide a score only once confirmed)."""
Row = tuple[Any, ...]


ONE_TYPE = frozenset({int, str, bytes, type(None)})
"""Value types no value of another of them equals (``True == 1 == 1.0``; ``1 != '1'``): values of them
compare as their type and value, so a tuple of them is its own key."""


@dataclass(frozen=True, slots=True)
class ResultSet:
    """The rows a query returned, as Python values (int, float, str, bytes, None; Decimal, dates and
    booleans where the engine gives them)."""

    columns: tuple[str, ...]
    """Column names as the engine reports them."""
    rows: tuple[Row, ...]
    """The rows kept, in the order the engine returned them (at most ``Limits.max_rows``)."""
    row_count: int
    """Total rows the query produced (a lower bound when ``count_exact`` is false)."""
    truncated: bool = False
    """True when rows were dropped by the row or byte cap."""
    count_exact: bool = True
    """False when counting the rows past the cap ran out of its budget."""
    decode_errors: bool = False
    """True when some text was not valid UTF-8 and was decoded ignoring the bad bytes."""
    unhashable: bool = False
    """True when an engine returned a list or a mapping (kept as a tuple or JSON text): the official
    scripts' ``set()`` of rows raises on such a result."""
    distinct: tuple[Row, ...] | None = None
    """For a result cut at the row cap: every one of its distinct rows, in the order each first came (the
    order of ``dict.fromkeys`` over all its rows), streamed past the cap and kept while they fit caps of
    their own (``Limits.max_rows`` distinct rows, ``Limits.max_bytes``). What the official set readings
    (BIRD EX, Soft-F1) need of a result, so that the row cap bounds memory without changing them. None
    for a whole result (``rows`` is every row), and where the distinct rows passed their caps or could
    not all be read (the count past the cap ran out of its budget, or text past it was not UTF-8)."""


@dataclass(frozen=True, slots=True)
class Execution:
    """What happened when one SQL ran on one database."""

    status: Status
    """``ok``; ``error`` (the engine raised: the statement's own fault); ``missing`` (a relation or the
    database it reads does not exist); ``timeout`` (SQLite's step budget or an engine's memory limit,
    see ``limit``); ``rejected`` (the gate, the function policy or the authorizer refused it);
    ``guard`` (a wall clock stopped it, and it was not confirmed: never a score); ``unreadable`` (the
    database or its server could not be read: a login, a permission, the network, a corrupt or locked
    file). A runaway, once confirmed (it ran away again alone with its guard doubled), is a ``timeout``
    whose ``limit`` is ``wall`` or ``process``: the statement's own outcome."""
    seconds: float
    """Wall time of the execution (of the original one, when served from cache)."""
    result: ResultSet | None = None
    """The result, when ``status`` is ``ok``."""
    error: str | None = None
    """The engine's message or the gate's reason, when not ``ok``."""
    cached: bool = False
    """True when this execution was served from the cache."""
    limit: Limit | None = None
    """Which limit stopped it, when one did."""
    note: str | None = None
    """A documented way the engine differs from SQLite that applied to this statement (MariaDB stopped a
    recursive CTE at its iteration limit, MySQL compared text case-insensitively), for the record."""
    rerun: str | None = None
    """Why this is a second run: how the first one was stopped (a wall clock: a runaway to confirm). The
    statement ran again alone, in a fresh process, with its guard doubled, and this is how that run ended.
    Whether the first run met its guard depends on the machine's load: the record keeps it apart from what
    is compared between runs (``record.EXEMPT``)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_cached(self) -> Execution:
        """The same execution, served from a cache (a plain copy: ``dataclasses.replace`` costs five times
        as much, and this runs for every item whose executions another item made)."""
        return Execution(self.status, self.seconds, self.result, self.error, True, self.limit, self.note, self.rerun)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one statement may take, on every engine (from :attr:`rose_sql.config.Config.limits`)."""

    max_steps: int
    """SQLite virtual-machine steps (the deterministic limit; other engines count none)."""
    timeout_s: float
    """The wall clock inside SQLite (a guard: a statement stopped there runs again alone with it doubled,
    and counts as a runaway only if it is stopped again)."""
    engine_timeout_s: float
    """The wall-clock limit other engines enforce themselves (``statement_timeout``...; a guard too,
    confirmed the same way)."""
    max_rows: int
    """Rows kept; past them the result is truncated (and the rest counted)."""
    max_bytes: int
    """Approximate bytes of cell data kept; past them the result is truncated."""
    max_value_bytes: int
    """The largest string or blob SQLite may make (its ``SQLITE_LIMIT_LENGTH``)."""
    max_pattern_bytes: int
    """The longest LIKE or GLOB pattern SQLite may match (its ``SQLITE_LIMIT_LIKE_PATTERN_LENGTH``)."""
    max_sql_chars: int
    """Longer SQL is rejected before it reaches a parser."""
    memory_bytes: int
    """An engine's own memory limit (SQLite's heap limit, DuckDB's ``memory_limit``)."""
    temp_bytes: int
    """An engine's own limit on temporary disk, where it has one (MariaDB's ``tmp_disk_table_size``)."""
    count_past_cap_steps: int
    """SQLite steps spent counting the rows past a cap (without keeping them)."""
    schema_steps: int
    """SQLite steps each statement that reads the schema and its example values may take."""
