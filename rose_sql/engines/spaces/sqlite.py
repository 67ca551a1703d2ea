"""SQLite's space: a private in-memory copy of the database file, where the evidence reads and changes data.

The user's file is opened read-only and copied page by page into ``:memory:``; every candidate change is
made inside a SAVEPOINT and rolled back. Mutations are valid by construction (fresh primary-key and UNIQUE
values for copies, children deleted with their parent) and the engine polices the rest with ``PRAGMA
foreign_keys=ON``, NOT NULL, UNIQUE and CHECK. The queries under test run with the sandbox's read-only
authorizer, its value-length limit and temp storage in memory.

Every statement is bounded by work, not time, so the search finds the same evidence on any machine at
any load: each statement by its own step budget, and all of an item's statements together by the item's
budget (:meth:`Workspace.start`); until the witness search asks for its copy (:meth:`Workspace.copy`: the
workspace itself), each statement of the gold smells may take at most a quarter of the item's budget.
The columns' profiles, kept for the items that follow, are computed before an item's clock and budget
start (:meth:`Workspace.prepare`), each table's under a budget of its own
(:data:`~rose_sql.config.EVIDENCE_PROFILE_STEPS`) and under no clock, so what an item finds never depends
on the items before it or on which worker ran it. The wall clock is only a guard: when the item's
deadline passes, every statement stops and ``guard_fired`` says that what was found depends on the
machine.

What a statement did is remembered (:class:`Workspace`'s memo): asked again on the same data, it is
answered without running and charged the steps it took, so the search costs a fraction of running every
statement and finds exactly what running them finds.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from itertools import chain, compress
from pathlib import Path
from typing import Any

from rose_sql.config import (
    EVIDENCE_MAX_ROWS,
    EVIDENCE_PROFILE_STEPS,
    EVIDENCE_STATEMENT_STEPS,
    INTERPRETER_BYTES,
    MAX_PATTERN_BYTES,
    Config,
)
from rose_sql.engines.base import CELL_BYTES
from rose_sql.engines.execute import CELL_OBJECT_BYTES, ROW_OBJECT_BYTES
from rose_sql.engines.kinds import Database
from rose_sql.engines.spaces import Change, Column, Copy, Table
from rose_sql.engines.sqlite import NOT_UTF8, STEP_GRAIN, Authorizer, connect_read_only
from rose_sql.results import ONE_TYPE, ResultSet
from rose_sql.sql import quote_identifier as _q


def open_space(db: Database, config: Config) -> Workspace | str:
    """An in-memory copy of the file for the evidence, or why there is none."""
    if db.path.stat().st_size > config.evidence_max_db_bytes:
        return f"database larger than {config.evidence_max_db_bytes // 2**20} MiB"
    return Workspace(
        db.path,
        statement_steps=min(config.max_steps, EVIDENCE_STATEMENT_STEPS),
        max_bytes=config.max_result_bytes,
        max_value_bytes=config.max_value_bytes,
        max_pattern_bytes=config.max_pattern_bytes,
        guard_s=config.evidence_budget_s,
    )


MEMO_BYTES = INTERPRETER_BYTES // 8
"""The most memory the statement memos of one process hold (all its workspaces together, reckoned as
:data:`rose_sql.engines.execute.ROW_OBJECT_BYTES` and ``CELL_OBJECT_BYTES`` reckon it): the least recently
used workspace's memo is dropped past it, which changes only how fast the search goes, never what it finds."""
NONDETERMINISTIC = frozenset(
    {
        "random",
        "randomblob",
        "changes",
        "total_changes",
        "last_insert_rowid",
        "date",
        "time",
        "datetime",
        "julianday",
        "strftime",
        "unixepoch",
        "current_date",
        "current_time",
        "current_timestamp",
        "sqlite_offset",
    }
)
"""Functions whose value depends on more than the data (the clock, chance, the connection's history): a
statement calling one is never answered from the memo."""
_LOSSY = re.compile(r"^-?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][-+]?\d+|inf|nan)$|^\(blob\)$", re.IGNORECASE)
"""An operand that ``EXPLAIN`` shows in fewer digits or bytes than the value has (a real as ``%.16g``, a
blob as ``(blob)`` or nothing): two statements whose programs differ only there may differ."""
_CALL = re.compile(r"^(\w+)\(")
"""A function's operand in ``EXPLAIN`` (``random(0)``)."""
CHUNK = 256
"""Rows of a query under test fetched at once, where no cap can be reached among them."""
TEXT = (str, bytes)
ENTRY_BYTES = 200
"""What a memo entry holds beside its rows: its key, its object, its slot in the memo."""
INTERNED_BYTES = 2**16
"""Results up to this size (as the byte cap reckons it) are kept as one object for equal ones."""
CHECKS_ONLY = frozenset({"NO ACTION", "RESTRICT"})
"""Foreign-key actions that only check (a copy whose foreign keys only check changes the same rows with
them off: the memo then makes a candidate's remembered changes without the checks' scans)."""


def _replaced(raw: bytes) -> str:
    """Text as the copy reads it where it is not UTF-8: the bad bytes replaced."""
    return raw.decode("utf-8", errors="replace")


class _Memos:
    """What the statement memos of one process hold, and which workspace's memo to drop past
    :data:`MEMO_BYTES` (the least recently used; dropped by its own thread, at its next statement)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used: OrderedDict[int, tuple[Workspace, int]] = OrderedDict()
        self.total = 0
        self.lock = threading.Lock()

    def add(self, ws: Workspace, size: int) -> None:
        with self.lock:
            key = id(ws)
            _, held = self.used.pop(key, (ws, 0))
            self.used[key] = (ws, held + size)
            self.total += size
            while self.total > self.limit and self.used:
                _, (old, held) = self.used.popitem(last=False)
                self.total -= held
                old.memo_full = True

    def forget(self, ws: Workspace) -> None:
        with self.lock:
            _, held = self.used.pop(id(ws), (ws, 0))
            self.total -= held


MEMOS = _Memos(MEMO_BYTES)


def _size(rows: Any) -> int:
    """What a memo entry holds, reckoned as the execution cache reckons results."""
    if not isinstance(rows, list | tuple):
        return ROW_OBJECT_BYTES
    size = ROW_OBJECT_BYTES * (len(rows) + 1)
    for row in rows:
        if isinstance(row, tuple):
            size += CELL_OBJECT_BYTES * len(row)
            for v in row:
                if type(v) is str or type(v) is bytes:
                    size += len(v)
    return size


def _params_key(params: tuple[Any, ...]) -> tuple[Any, ...]:
    """Parameters as a key that keeps apart what SQLite binds apart (``1``, ``1.0`` and ``True`` are equal
    in Python; a float is keyed by its exact text)."""
    if set(map(type, params)) <= ONE_TYPE:  # a tuple of them is its own key
        return params
    return ("typed", *((v.__class__, repr(v) if v.__class__ is float else v) for v in params))


class _Log:
    """The statements of a candidate's change as the memo keeps them: what they charged in all and at
    most, the changes they made in order, and whether every one of them completed."""

    __slots__ = ("complete", "most", "ticks", "writes")

    def __init__(self) -> None:
        self.ticks = 0
        self.most = 0
        self.complete = True
        self.writes: list[tuple[str, tuple[Any, ...]]] = []


class _Done:
    """A remembered change of a candidate: what :class:`_Log` saw, what it returned (or the constraint error
    it raised), and the state of the data after it."""

    __slots__ = ("error", "log", "made", "state")

    def __init__(self, log: _Log, made: Any, state: int, error: BaseException | None) -> None:
        self.log = log
        self.made = made
        self.state = state
        self.error = error


class _Entry:
    """What a statement did on one state of the copy: its outcome (rows, a row id, or the error it raised)
    and the ticks it took, all of them (``complete``) or up to where a budget stopped it."""

    __slots__ = ("complete", "error", "outcome", "ticks")

    def __init__(self, outcome: Any, ticks: int, complete: bool, error: BaseException | None) -> None:
        self.outcome = outcome
        self.ticks = ticks
        self.complete = complete
        self.error = error


class Workspace:
    """An in-memory copy of a database, its schema and column profiles: the space and its own copy.

    **The memo.** The witness search asks the same questions of the same data again and again: every
    candidate of an item starts from the real data, the items of one question (one system each) share
    their gold and most of their candidates, and many a prediction compiles to the gold's own program.
    Every statement's outcome and the steps it took are kept, by the state of the data it ran on (the
    real data, or the real data and the changes a candidate made so far, in order) and the statement (our
    probes by their text and parameters; a query under test by the program SQLite compiles it to, so two
    spellings of one program share it). Asked again, a statement is answered from the memo and charged
    the steps it took, stopped where the budgets left would have stopped it: the budget, and so what the
    search finds, is exactly what running it gives, on any worker, in any order, at any load. A
    candidate's changes are made only when a statement the memo cannot answer needs them. Statements whose
    outcome depends on more than the data (:data:`NONDETERMINISTIC`) always run.
    """

    dialect = "sqlite"
    """The SQL dialect of the copy (the gold smells write their probes in it)."""
    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)

    def __init__(
        self,
        db: Path,
        *,
        statement_steps: int,
        max_bytes: int,
        max_value_bytes: int,
        guard_s: float,
        max_pattern_bytes: int = MAX_PATTERN_BYTES,
        max_rows: int = EVIDENCE_MAX_ROWS,
    ) -> None:
        src = connect_read_only(db)
        # no statement cache: SQLite counts a cached statement's steps on from its earlier runs, so the progress
        # handler would tick at other points, and an item's budget would depend on the items before it
        self.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False, cached_statements=0)
        try:
            src.backup(self.conn)
        finally:
            src.close()
        self.conn.text_factory = _replaced  # while the schema is read; then SQLite's own decoding (see _utf8)
        self.conn.execute("PRAGMA foreign_keys = ON")
        self.conn.execute("PRAGMA temp_store = MEMORY")
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)  # no zeroblob(800000000)
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, max_pattern_bytes)  # as the sandbox
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        self.statement_steps = statement_steps
        """Steps one statement may take (a query under test may be given less)."""
        self.search_steps = statement_steps
        """Steps one statement of the witness search may take (the gold smells take less: :meth:`start`)."""
        self.guard_s = guard_s
        """Seconds an item's evidence may take before the worker's guard may stop it."""
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.max_value_bytes = max_value_bytes
        self.hard_deadline = float("inf")
        """The wall-clock guard of the current item: past it, every statement stops."""
        self.guard_fired = False
        """Whether the guard stopped a statement of the current item."""
        self._item_ticks = float("inf")  # the current item's steps left, in ticks
        self._ticks = 0  # ticks of the current statement
        self._limit = 0  # its limit
        self._charged = True  # whether its ticks count against the item's budget
        self._free = False  # our own undo statements: never stopped
        self._profile_ticks: int | None = None  # while a table is profiled: its own budget left, no clock
        self._stopped = False  # whether the progress handler stopped the current statement
        self._auth = Authorizer()
        # the memo (see the class docstring): states of the data are numbered, 0 the real data
        self._memo: dict[Hashable, _Entry | _Done] = {}
        self._states: dict[tuple[int, Hashable], int] = {}  # (state, change) -> the state after it
        self._touched: dict[int, frozenset[int] | None] = {}  # a state's changed tables' b-trees (None: unknown)
        # a query under test's key (None: always run) and the b-trees it reads
        self._programs: dict[tuple[bool, str], tuple[Hashable | None, frozenset[int] | None]] = {}
        self._program_ids: dict[tuple[Any, ...], int] = {}
        self.memo_full = False
        """Set when the process's memos hold too much: this one is dropped at its next statement."""
        self._names: dict[str, tuple[str, ...]] = {}  # a query under test's column names
        self._results: dict[str, tuple[Any, ...]] = {}  # small results, one object for equal ones
        self._size_hint: int | None = None  # what the result just fetched holds (reckoned while fetching)
        self._state = 0  # the data the next statement reads: 0, or a candidate's state
        self._pending: list[tuple[str, tuple[Any, ...]]] = []  # the candidate's changes not yet made
        self._candidate = False  # between begin() and rollback()
        self._savepoint = False  # whether the candidate's savepoint is open
        self._reverse = False  # reverse_unordered_selects as asked
        self._reverse_set = False  # ... and as set on the connection
        self._fk_actions = False  # whether a foreign key changes rows (ON DELETE CASCADE...): read with the schema
        self._roots: dict[str, frozenset[int]] = {}  # a table's b-trees (its own, its indexes'), by root page
        self._ripples = False  # whether a change may change other tables (a foreign key's action, a trigger)
        self._checked: frozenset[str] = frozenset()  # the deletions whose foreign keys' checks scan tables
        self._fk_off = False  # whether the candidate's savepoint was opened with foreign keys off
        self._made: list[tuple[str, tuple[Any, ...]]] = []  # the changes made in it
        self._depth = 0  # inside a change being remembered
        self._log: _Log | None = None  # what the statements of the change being remembered cost
        self.conn.set_progress_handler(self._progress, STEP_GRAIN)
        self._free = True  # reading the schema is ours and bounded by it
        try:
            self.tables = self._read_schema()
        finally:
            self._free = False
        self.conn.text_factory = str
        self._checked = frozenset(
            f"DELETE FROM {_q(t.name)} WHERE rowid = ?" for t in self.tables.values() if t.children
        )

    # ------------------------------------------------------------------ budgets

    def start(self, steps: int, deadline: float) -> None:
        """Begin an item: all its statements together may take ``steps``; the guard is at ``deadline``.
        Until :meth:`copy`, each statement (the gold smells') may take a quarter of ``steps``."""
        self._item_ticks = steps // STEP_GRAIN
        self.hard_deadline = deadline
        self.guard_fired = False
        self.statement_steps = min(self.search_steps, steps // 4)

    def stop(self) -> None:
        """End the item's budget."""
        self._item_ticks = float("inf")
        self.hard_deadline = float("inf")
        self.statement_steps = self.search_steps

    def copy(self, tables: Iterable[str]) -> Copy | str:
        """The workspace itself, its statements given the witness search's budget."""
        self.statement_steps = self.search_steps
        return self

    def alive(self) -> bool:
        return True

    def identity(self, sql: str) -> Hashable | None:
        """The programs ``sql`` compiles to, rows in order and reversed (None: it is always run)."""
        reverse = self._reverse
        try:
            keys = []
            for order in (False, True):
                self._reverse = order
                keys.append(self._program(sql)[0])
        finally:
            self._reverse = reverse
        return None if None in keys else tuple(keys)

    def stored(self, table: str, column: str, limit: int) -> list[tuple[str, Any]]:
        c, t = _q(column), _q(table)
        rows = self.query(f"SELECT typeof({c}), {c} FROM {t} WHERE {c} IS NOT NULL LIMIT {int(limit)}")
        return [(str(kind), value) for kind, value in rows or []]

    def reversed_run(self, sql: str) -> ResultSet | None:
        self.set_reverse_order(True)
        try:
            return self.run(sql)
        finally:
            self.set_reverse_order(False)

    @property
    def steps_left(self) -> int:
        """Steps the current item may still take."""
        return int(min(self._item_ticks, 2**62 // STEP_GRAIN)) * STEP_GRAIN

    def _progress(self) -> bool:
        if self._free:
            return False
        if self._profile_ticks is not None:  # the table's budget, never the item's, under no clock
            self._profile_ticks -= 1
            self._stopped = self._profile_ticks < 0
            return self._stopped
        self._ticks += 1
        if self._charged:
            self._item_ticks -= 1
            if self._item_ticks < 0:
                self._stopped = True
                return True
        if self._ticks > self._limit:
            self._stopped = True
            return True
        if time.monotonic() > self.hard_deadline:
            self.guard_fired = True
            self._stopped = True
            return True
        return False

    def _begin(self, steps: int | None = None) -> None:
        self._ticks = 0
        self._limit = min(steps or self.statement_steps, self.statement_steps) // STEP_GRAIN
        self._stopped = False
        self._size_hint = None

    # ------------------------------------------------------------------ the memo

    def _cost(self, entry: _Entry) -> tuple[int, bool] | None:
        """What running a remembered statement now would charge (after :meth:`_begin`), and whether it
        would complete; None when the memo cannot tell."""
        if entry.ticks and time.monotonic() > self.hard_deadline:
            return None  # the guard's business: run it, and let the clock stop it
        stop = min(self._item_ticks, self._limit) + 1  # the tick at which the budgets stop a statement
        if entry.complete and entry.ticks < stop:
            return entry.ticks, True
        if stop <= entry.ticks:  # it takes at least entry.ticks, and is stopped before
            return int(stop), False
        return None  # it was stopped earlier, under a smaller budget: how far it goes now is unknown

    def _replay(self, entry: _Entry) -> bool | None:
        """Charge a remembered statement as running it now would: True when it completes, False when a
        budget stops it (charged up to there), None when the memo cannot tell (nothing charged)."""
        cost = self._cost(entry)
        if cost is None:
            return None
        self._charge(cost[0])
        return cost[1]

    def _charge(self, ticks: int) -> None:
        self._ticks = ticks
        if self._charged:
            self._item_ticks -= ticks

    def _remember(self, key: Hashable, outcome: Any, error: BaseException | None) -> None:
        """Keep what the statement just run did (not what the clock decided, nor a failure of ours)."""
        if self._stopped and not (self._item_ticks < 0 or self._ticks > self._limit):
            return  # the wall-clock guard stopped it
        if error is not None and not isinstance(error, sqlite3.Error):
            return
        self._memo[key] = _Entry(outcome, self._ticks, not self._stopped, error)
        size, self._size_hint = self._size_hint, None
        MEMOS.add(self, (size if size is not None and outcome is not None else _size(outcome)) + ENTRY_BYTES)

    def _drop_memo(self) -> None:
        """Forget everything the memo holds (the real data changed, or the process's memos hold too much)."""
        MEMOS.forget(self)
        self.memo_full = False
        self._memo = {}
        self._states = {}
        self._touched = {}
        self._programs = {}
        self._program_ids = {}
        self._results = {}
        self._names = {}
        # a candidate goes on in states of its own, unknown to the memo, until its rollback
        self._state = -1 if self._candidate else 0

    def _ask(
        self, key: Hashable, steps: int | None, real: Callable[[], Any], *, look: bool = True, make: bool = True
    ) -> Any:
        """A statement of ours or under test, answered from the memo or run (``real``, after the
        candidate's changes are made, unless ``make`` is false: it reads none of them): its outcome, or the
        error it raises."""
        if self.memo_full:
            self._drop_memo()
        self._begin(steps)
        if self._profile_ticks is None and self._state >= 0:
            entry = self._memo.get(key) if look else None
            if isinstance(entry, _Entry):
                done = self._replay(entry)
                if done is not None:
                    self._note(done)
                    if not done:
                        raise sqlite3.OperationalError("interrupted")
                    if entry.error is not None:
                        raise type(entry.error)(*entry.error.args)
                    return entry.outcome
            if make:
                self._make()
            else:
                self._order()
            try:
                outcome = real()
            except BaseException as e:
                self._note(not self._stopped)
                self._remember(key, None, e)
                raise
            self._note(True)
            self._remember(key, outcome, None)
            return outcome
        self._note(False)
        self._make()
        return real()

    def _note(self, complete: bool, write: tuple[str, tuple[Any, ...]] | None = None) -> None:
        """Count the statement just asked in the change being remembered."""
        log = self._log
        if log is not None:
            log.ticks += self._ticks
            log.most = max(log.most, self._ticks)
            log.complete = log.complete and complete
            if write is not None:
                log.writes.append(write)

    def _key(self, *parts: Hashable) -> Hashable:
        return (self._state, self._reverse, *parts)

    def _order(self) -> None:
        """Set the row order asked (:meth:`set_reverse_order`) on the connection."""
        if self._reverse != self._reverse_set:
            self._pragma(f"PRAGMA reverse_unordered_selects = {int(self._reverse)}")
            self._reverse_set = self._reverse

    def _make(self, *, write: bool = False) -> None:
        """Before a statement runs on the copy: set the row order asked, and make the candidate's changes
        the memo answered so far (``write``: a change is to be made, with its foreign keys checked).

        Where the foreign keys only check (:data:`CHECKS_ONLY`), changes the memo answered that delete
        rows of a referenced table are made with them off: they passed the checks when they ran, and the
        deletions then scan no table for the rows that reference them (elsewhere, turning the checks off
        and on again costs more than it saves). Before a change is made for real, they are made again
        with them on."""
        self._order()
        if not self._candidate:
            return
        if write and self._fk_off:  # undo, and make them again with the foreign keys on
            self._end_savepoint()
            self._pending = self._made + self._pending
            self._made = []
        if not self._savepoint:
            if not write and not self._fk_actions and any(sql in self._checked for sql, _ in self._pending):
                self._pragma("PRAGMA foreign_keys = OFF")
                self._fk_off = True
            self._pragma("SAVEPOINT candidate")
            self._savepoint = True
        if self._pending:
            pending, self._pending = self._pending, []
            self._free = True  # charged when the memo answered them
            try:
                for sql, params in pending:
                    self.conn.execute(sql, params)
            finally:
                self._free = False
            if self._fk_off:
                self._made += pending

    def _end_savepoint(self) -> None:
        """Undo the candidate's changes made so far (never interrupted), foreign keys on again. Where a
        change was stopped mid-way, SQLite has undone the whole transaction, the savepoint with it: nothing
        is left to undo."""
        if self._savepoint:
            self._savepoint = False
            if self.conn.in_transaction:
                self._free = True
                try:
                    self.conn.execute("ROLLBACK TO candidate")
                    self.conn.execute("RELEASE candidate")
                finally:
                    self._free = False
        if self._fk_off:
            self._fk_off = False
            self._pragma("PRAGMA foreign_keys = ON")

    def _pragma(self, sql: str) -> None:
        """One of our own statements (row order, savepoints): never charged, never stopped."""
        self._free = True
        try:
            self.conn.execute(sql)
        finally:
            self._free = False

    def _utf8(self, real: Callable[[], Any]) -> Any:
        """``real()`` with text decoded by SQLite's module in C; where some text is not UTF-8, the statement
        runs again with its bad bytes replaced, the first attempt's steps given back (so it is charged
        what one run takes, as when every text was decoded in Python)."""
        item, profile = self._item_ticks, self._profile_ticks
        try:
            return real()
        except sqlite3.OperationalError as e:
            if not str(e).startswith(NOT_UTF8):
                raise
        self._item_ticks, self._profile_ticks = item, profile
        self._ticks, self._stopped = 0, False
        self.conn.text_factory = _replaced
        try:
            return real()
        finally:
            self.conn.text_factory = str

    def _read(self, sql: str, params: tuple[Any, ...] = (), *, one: bool = False) -> Any:
        """A read of ours under the statement and item budgets: all its rows, or (``one``) its first row
        and its column names."""

        def real() -> Any:
            cur = self.conn.execute(sql, params)
            if one:
                row = cur.fetchone()
                return row, tuple(d[0] for d in cur.description or ())
            return cur.fetchall()

        return self._ask(self._key("one" if one else "all", sql, _params_key(params)), None, lambda: self._utf8(real))

    def _write(self, sql: str, params: tuple[Any, ...] | list[Any], table: str) -> int | None:
        """A change of ours under the statement and item budgets: the row id it inserted. Inside a
        candidate, the memo may answer it (the change is then made when a later statement needs it)."""
        params = tuple(params)
        if self.memo_full or not self._candidate:  # outside a candidate the real data itself changes
            self._drop_memo()
        if self._state < 0 or not self._candidate:
            self._note(False)
            self._begin()
            self._make(write=True)
            made: int | None = self.conn.execute(sql, params).lastrowid
            self._state = self._next_state(None, table) if self._candidate else 0
            return made
        pk = _params_key(params)
        key = self._key("write", sql, pk)
        entry = self._memo.get(key)
        self._begin()
        cost = self._cost(entry) if isinstance(entry, _Entry) else None
        if isinstance(entry, _Entry) and cost is not None and cost[1]:  # a stopped change is made for real (see below)
            self._charge(cost[0])
            self._note(True, (sql, params))
            if entry.error is not None:
                raise type(entry.error)(*entry.error.args)
            self._pending.append((sql, params))
            self._state = self._next_state((sql, pk), table)
            rowid: int | None = entry.outcome
            return rowid
        self._make(write=True)
        try:
            rowid = self.conn.execute(sql, params).lastrowid
        except sqlite3.IntegrityError as e:  # a constraint refused it: the statement is undone, nothing else
            self._note(not self._stopped, (sql, params))
            if not self._stopped:
                self._remember(key, None, e)
            raise
        except BaseException:
            self._note(False)
            raise
        self._note(True, (sql, params))
        # a change a budget stopped undoes the whole transaction in SQLite (the savepoint goes with it): it
        # is never answered from the memo, so that the candidate meets what running it meets
        self._remember(key, rowid, None)
        self._state = self._next_state((sql, pk), table)
        return rowid

    def _next_state(self, change: Hashable, table: str) -> int:
        if self._state < 0:  # the memo was dropped during the candidate
            return self._state - 1
        state = self._states.get((self._state, change))
        if state is None:
            state = self._states[(self._state, change)] = len(self._states) + 1
            MEMOS.add(self, ENTRY_BYTES + (len(change[0]) if isinstance(change, tuple) else 0))
            before = self._touched.get(self._state) if self._state else frozenset()
            roots = self._roots.get(table.lower())
            self._touched[state] = before | roots if before is not None and roots is not None else None
        return state

    def _program(self, sql: str) -> tuple[Hashable | None, frozenset[int] | None]:
        """A query under test's key in the memo: the program SQLite compiles it to, where its listing shows
        every operand whole; its text otherwise; None when its outcome depends on more than the data. And
        the b-trees the program reads, by root page (None: not known)."""
        key = (self._reverse, sql)
        known = self._programs.get(key)
        if known is not None:
            return known
        self._order()  # the row order asked is part of the program
        self.conn.set_authorizer(self._auth)
        self._auth.begin()
        self._free = True
        try:
            ops = self.conn.execute("EXPLAIN " + sql).fetchall()
        except (sqlite3.Error, ValueError, OverflowError, MemoryError):
            ops = None
        finally:
            self._free = False
            self.conn.set_authorizer(None)
        found: Hashable | None = ("text", sql)
        reads: set[int] | None = None
        if ops is not None:
            whole = True
            reads = set()
            for op in ops:
                name, p4 = op[1], op[5]
                if isinstance(p4, str):
                    call = _CALL.match(p4)
                    if call is not None and call.group(1).lower() in NONDETERMINISTIC:
                        found = None
                        break
                    if _LOSSY.match(p4):
                        whole = False
                if name in ("Real", "Blob"):
                    whole = False
                if reads is not None:
                    if name in ("OpenRead", "OpenWrite", "ReopenIdx"):
                        if op[4] == 0 and not op[6] & 0x02:  # the main database, the root page given
                            reads.add(op[3])
                        else:
                            reads = None
                    elif name in ("VOpen", "VFilter", "VColumn", "VUpdate"):
                        reads = None  # a virtual table: what it reads is its own
            else:
                if whole:
                    found = ("program", self._program_ids.setdefault(tuple(ops), len(self._program_ids)))
        got = (found, frozenset(reads) if reads is not None else None)
        self._programs[key] = got
        return got

    # ------------------------------------------------------------------ schema

    def _read_schema(self) -> dict[str, Table]:
        tables: dict[str, Table] = {}
        names = [
            r[0]
            for r in self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        for name in names:
            info = self.conn.execute(f"PRAGMA table_info({_q(name)})").fetchall()
            cols = {r[1]: Column(r[1], (r[2] or "").upper(), bool(r[3]), bool(r[5])) for r in info}
            sql = self.conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0] or ""
            t = Table(name, cols, rowid="WITHOUT ROWID" not in sql.upper())
            for idx in self.conn.execute(f"PRAGMA index_list({_q(name)})").fetchall():
                if idx[2]:  # unique
                    idx_cols = [r[2] for r in self.conn.execute(f"PRAGMA index_info({_q(idx[1])})")]
                    if len(idx_cols) == 1 and idx_cols[0] in cols:
                        cols[idx_cols[0]].unique = True
            pks = [c for c in cols.values() if c.pk]
            if len(pks) == 1:
                pks[0].unique = True
            tables[name] = t
        roots: dict[str, set[int]] = {}
        for kind, owner, root in self.conn.execute("SELECT type, tbl_name, rootpage FROM sqlite_master"):
            if kind == "trigger":  # a change may change other tables: no query is known to be untouched
                self._ripples = True
            elif isinstance(root, int) and root > 0:
                roots.setdefault(str(owner).lower(), set()).add(root)
        self._roots = {name: frozenset(pages) for name, pages in roots.items()}
        for t in tables.values():
            for r in self.conn.execute(f"PRAGMA foreign_key_list({_q(t.name)})").fetchall():
                if str(r[5]).upper() not in CHECKS_ONLY or str(r[6]).upper() not in CHECKS_ONLY:
                    self._fk_actions = self._ripples = True
                parent = next((n for n in tables if n.lower() == str(r[2]).lower()), None)
                if parent is None:
                    continue
                pcol = r[4] or next((c.name for c in tables[parent].columns.values() if c.pk), None)
                if pcol is None:
                    continue
                t.parents.append((r[3], parent, pcol))
                tables[parent].children.append((t.name, r[3], pcol))
        return tables

    def prepare(self, tables: Iterable[str]) -> None:
        """Profile the tables the queries read (names as they write them), before the item starts."""
        for name in sorted(tables):
            t = self.table_of(name)
            if t is not None and t.rowid:
                self.profile(t.name)

    def profile(self, table: str) -> bool:
        """Fill the columns' data facts (NULLs, duplicates, value pool) for one table, once: under the table's
        own budget (:data:`~rose_sql.config.EVIDENCE_PROFILE_STEPS` in all) and no clock, never the item's.

        False when that budget ran out first: nothing is recorded, the same on every worker, and the table
        is not profiled again. Time it takes inside an item (:meth:`prepare` was not asked) is added to the
        item's deadline.
        """
        t = self.tables[table]
        if t.profiled:
            return t.rows > 0
        started = time.monotonic()
        self._profile_ticks = EVIDENCE_PROFILE_STEPS // STEP_GRAIN
        try:
            return self._profile(t)
        finally:
            self._profile_ticks = None
            t.profiled = True
            self.hard_deadline += time.monotonic() - started  # the table's time, not the item's

    def _profile(self, t: Table) -> bool:
        table = t.name
        facts = []
        for c in t.columns.values():
            col, tab = _q(c.name), _q(table)
            nulls = self.query(f"SELECT 1 FROM {tab} WHERE {col} IS NULL LIMIT 1")
            dups = self.query(f"SELECT 1 FROM {tab} WHERE {col} IS NOT NULL GROUP BY {col} HAVING COUNT(*) > 1 LIMIT 1")
            pool = self.query(f"SELECT DISTINCT {col} FROM {tab} WHERE {col} IS NOT NULL LIMIT 8")
            if nulls is None or dups is None or pool is None:
                return False
            facts.append((c, bool(nulls), bool(dups), [r[0] for r in pool]))
        count = self.query(f"SELECT COUNT(*) FROM {_q(table)}")
        if count is None:
            return False
        for c, nulls_, dups_, pool_ in facts:
            c.has_nulls, c.has_duplicates, c.pool = nulls_, dups_, pool_
        t.rows = count[0][0] or 1
        return True

    def table_of(self, name: str) -> Table | None:
        return next((t for n, t in self.tables.items() if n.lower() == name.lower()), None)

    # ------------------------------------------------------------------ queries under test

    def run(self, sql: str, steps: int | None = None) -> ResultSet | None:
        """Run an untrusted query read-only within ``steps`` (at most the statement budget); None when it
        fails, runs out, or returns more rows or bytes than can be compared soundly here."""
        try:
            program, reads = self._program(sql)
            names = self._names.get(sql)

            def real() -> tuple[Any, ...] | None:
                self.conn.set_authorizer(self._auth)
                self._auth.begin()
                try:
                    cur = self.conn.execute(sql)
                    self._names[sql] = names = tuple(d[0] for d in cur.description or ())
                    rows: list[tuple[Any, ...]] = []
                    nbytes = 0
                    max_rows, max_bytes = self.max_rows, self.max_bytes
                    # rows fetched in chunks that cannot reach a cap (each value is at most max_value_bytes),
                    # so they step the statement exactly as far as fetching row by row does
                    widest = CELL_BYTES * len(names) + len(names) * self.max_value_bytes
                    while (chunk := min(CHUNK, max_rows - len(rows), (max_bytes - nbytes) // max(widest, 1))) > 0:
                        fetched = cur.fetchmany(chunk)
                        if not fetched:
                            break
                        cells = tuple(chain.from_iterable(fetched))
                        texts = compress(cells, map(TEXT.__contains__, map(type, cells)))
                        nbytes += CELL_BYTES * len(cells) + sum(map(len, texts))
                        rows += fetched
                    else:  # near a cap: row by row, to stop where it is passed
                        for row in cur:
                            nbytes += CELL_BYTES * len(row)
                            for v in row:
                                if type(v) is str or type(v) is bytes:
                                    nbytes += len(v)
                            if len(rows) >= max_rows or nbytes > max_bytes:
                                return None  # too large to compare soundly here
                            rows.append(row)
                    objects = (CELL_OBJECT_BYTES - CELL_BYTES) * len(names) * len(rows)
                    size = ROW_OBJECT_BYTES * (len(rows) + 1) + objects + nbytes
                    got = tuple(rows)
                    same = self._same(got, nbytes)
                    self._size_hint = size if same is got else 0  # an equal result is held already
                    return same
                finally:
                    self.conn.set_authorizer(None)

            if program is None:  # its outcome depends on more than the data: always run
                self._begin(steps)
                self._make()
                got = self._utf8(real)
            else:
                # a query that reads none of the tables the candidate changed runs as on the real data
                touched = self._touched.get(self._state) if self._state > 0 and not self._ripples else None
                untouched = touched is not None and reads is not None and not reads & touched
                key = (0, self._reverse, "run", program) if untouched else self._key("run", program)
                # another spelling of the program ran before: this one's column names are not known yet
                look = names is not None or not self._has_rows(key)
                got = self._ask(key, steps, lambda: self._utf8(real), look=look, make=not untouched)
            if got is None:
                return None
            return ResultSet(self._names[sql], got, len(got))
        except (sqlite3.Error, ValueError, OverflowError, MemoryError):
            return None

    def _same(self, rows: tuple[Any, ...], nbytes: int) -> tuple[Any, ...]:
        """The one object the memo keeps for a small result, whichever statement and state gave it: equal
        results are then the same object, which the comparator sees at once (by their ``repr``, which
        tells ``1`` from ``1.0`` and ``True``, where ``==`` does not)."""
        if nbytes > INTERNED_BYTES:
            return rows
        key = repr(rows)
        same = self._results.get(key)
        if same is None:
            self._results[key] = same = rows
            MEMOS.add(self, len(key) + ENTRY_BYTES)
        return same

    def _has_rows(self, key: Hashable) -> bool:
        entry = self._memo.get(key)
        return isinstance(entry, _Entry) and entry.error is None and entry.outcome is not None

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]] | None:
        """A trusted query of ours (profiles, probes) under the same budgets; None if it fails or runs out."""
        try:
            return list(self._read(sql, params))
        except sqlite3.Error:
            return None

    def set_reverse_order(self, on: bool) -> None:
        """Return unordered rows in reverse (set on the connection before the next statement that runs)."""
        self._reverse = on

    # ------------------------------------------------------------------ mutations

    def begin(self) -> None:
        """Open a candidate: its changes are made in a savepoint (opened when the first of them is made, and
        never interrupted: an interrupted SAVEPOINT leaves none to undo)."""
        self._candidate = True
        self._state = 0
        self._pending = []

    def rollback(self) -> None:
        """Undo the candidate; never interrupted, so the copy always returns to the real data."""
        self._candidate = False
        self._state = 0
        self._pending = []
        self._made = []
        self._end_savepoint()

    def rowids_where(self, table: str, column: str, values: list[Any], limit: int) -> list[int]:
        """Rowids of up to ``limit`` rows whose ``column`` holds one of ``values``."""
        if not self.tables[table].rowid or not values:
            return []
        marks = ",".join("?" * len(values))
        sql = f"SELECT rowid FROM {_q(table)} WHERE {_q(column)} IN ({marks}) LIMIT ?"
        return [r[0] for r in self.query(sql, (*values, limit)) or []]

    def sample_rowids(self, table: str, limit: int) -> list[int]:
        t = self.tables[table]
        if not t.rowid:
            return []
        return [r[0] for r in self._read(f"SELECT rowid FROM {_q(table)} LIMIT ?", (limit,))]

    def row(self, table: str, rowid: int) -> dict[str, Any]:
        values, names = self._read(f"SELECT * FROM {_q(table)} WHERE rowid = ?", (rowid,), one=True)
        return dict(zip(names, values, strict=True)) if values else {}

    def fresh(self, table: str, column: Column, like: Any) -> Any:
        """A value not yet in a unique column, of the same kind as ``like``."""
        col = _q(column.name)
        if isinstance(like, int) or like is None:
            top = self._read(f"SELECT MAX({col}) FROM {_q(table)}", one=True)[0][0]
            return (top if isinstance(top, int) else 0) + 1000
        base = str(like)
        for i in range(1, 50):
            candidate = f"{base}~{i}"
            if self._read(f"SELECT 1 FROM {_q(table)} WHERE {col} = ?", (candidate,), one=True)[0] is None:
                return candidate
        return f"{base}~{len(base)}~fresh"  # deterministic; a clash makes the insert fail, and the candidate go

    def update(self, table: str, rowid: int, column: str, value: Any) -> Change:
        """Set one non-key cell; raises sqlite3.Error when a constraint forbids it."""
        change: Change = self._remembered(
            ("update", table, rowid, column, _params_key((value,))), lambda: self._update(table, rowid, column, value)
        )
        return change

    def _update(self, table: str, rowid: int, column: str, value: Any) -> Change:
        old = self.row(table, rowid).get(column)
        self._write(f"UPDATE {_q(table)} SET {_q(column)} = ? WHERE rowid = ?", (value, rowid), table)
        return Change("update", table, rowid, column=column, old=old, new=value)

    def insert_copy(self, table: str, rowid: int, overrides: dict[str, Any] | None = None) -> Change:
        """Insert a copy of a row with fresh key and UNIQUE values (and optional changed cells)."""
        cells = tuple(overrides or {})
        key = ("insert", table, rowid, cells, _params_key(tuple((overrides or {}).values())))
        change: Change = self._remembered(key, lambda: self._insert_copy(table, rowid, overrides))
        return change

    def _insert_copy(self, table: str, rowid: int, overrides: dict[str, Any] | None) -> Change:
        t = self.tables[table]
        values = self.row(table, rowid)
        new = dict(values)
        for c in t.columns.values():
            if c.unique or (c.pk and sum(x.pk for x in t.columns.values()) == 1):
                new[c.name] = self.fresh(table, c, values.get(c.name))
        new.update(overrides or {})
        names = list(new)
        inserted = self._write(
            f"INSERT INTO {_q(table)} ({', '.join(_q(n) for n in names)}) VALUES ({', '.join('?' * len(names))})",
            [new[n] for n in names],
            table,
        )
        changed = {k: v for k, v in new.items() if values.get(k) != v or k in (overrides or {})}
        return Change("insert", table, inserted, copy_of=rowid, values=changed, row=new)

    def delete(self, table: str, rowid: int) -> list[Change]:
        """Delete a row and, first, the rows of child tables that reference it."""
        changes: list[Change] = self._remembered(("delete", table, rowid), lambda: self._delete(table, rowid))
        return list(changes)

    def _remembered(self, op: tuple[Hashable, ...], make: Callable[[], Any]) -> Any:
        """A change of a candidate (an update, a copy, a deletion with the rows referencing it), remembered
        whole, by the state it starts from: asked again there, it is charged what its statements took,
        where every one of them completes within the budgets left, and its changes are made when a later
        statement needs them. What it returns is shared: never changed by its callers."""
        if self._depth or not self._candidate or self._state < 0 or self.memo_full:
            return make()
        key = self._key(*op)
        known = self._memo.get(key)
        if isinstance(known, _Done) and self._fits(known.log):
            self._charge(known.log.ticks)
            if known.error is not None:
                raise type(known.error)(*known.error.args)
            self._pending += known.log.writes
            self._state = known.state
            return known.made
        log = self._log = _Log()
        self._depth += 1
        try:
            made = make()
        except sqlite3.IntegrityError as e:  # a constraint refused it: remembered as such
            if log.complete and self._state >= 0:
                self._keep(key, _Done(log, None, self._state, e))
            raise
        finally:
            self._depth -= 1
            self._log = None
        if log.complete and self._state >= 0:
            self._keep(key, _Done(log, made, self._state, None))
        return made

    def _fits(self, log: _Log) -> bool:
        """Whether every statement of a remembered change completes within the budgets left."""
        if log.ticks and time.monotonic() > self.hard_deadline:
            return False
        return log.most <= self.statement_steps // STEP_GRAIN and log.ticks <= self._item_ticks

    def _keep(self, key: Hashable, done: _Done) -> None:
        self._memo[key] = done
        changes = done.made if isinstance(done.made, list) else [done.made] if done.made is not None else []
        rows = [tuple((c.row or {}).values()) for c in changes]
        MEMOS.add(self, ENTRY_BYTES * (1 + len(done.log.writes) + len(changes)) + _size(rows))

    def _delete(self, table: str, rowid: int) -> list[Change]:
        changes: list[Change] = []
        row = self.row(table, rowid)
        for child, ccol, pcol in self.tables[table].children:
            if child == table:
                continue
            kids = (
                [r[0] for r in self._read(f"SELECT rowid FROM {_q(child)} WHERE {_q(ccol)} = ?", (row.get(pcol),))]
                if self.tables[child].rowid
                else []
            )
            for kid in kids[:50]:
                changes += self._delete(child, kid)
        self._write(f"DELETE FROM {_q(table)} WHERE rowid = ?", (rowid,), table)
        changes.append(Change("delete", table, rowid, row=row))
        return changes

    def close(self) -> None:
        MEMOS.forget(self)
        self.conn.close()
