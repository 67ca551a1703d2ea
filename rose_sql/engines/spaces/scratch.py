"""Scratch databases on a server (PostgreSQL, MySQL/MariaDB), where the witness search changes a private copy.

``--evidence-scratch URL`` names a server and a role that may create databases. Each worker that needs
one creates its own database there, named ``rose_scratch_<host>_<pid>_<random>`` (recognisable, and
saying which process made it), copies into it the tables an item's queries read and their foreign-key
parents (once; later items add what they need), and drops it when the finder closes or the process exits.
An item sees only its own tables and their parents, whatever earlier items copied (:meth:`ServerSpace.need`):
a row it deletes takes with it, recorded, the rows of those tables that refer to it, as on a copy made for
it alone; the rows of the other tables that refer to it go too, unrecorded (they are never read), so that
what a witness changes never depends on which items came before. For the same reason the bound on the copy
is the item's: its tables and their parents may hold ``evidence_max_db_bytes`` of row data, and when the
scratch database holds more, the tables of other items go.
A worker killed before it could drop its database leaves one behind: the next scratch database made on
that server drops those of dead processes of this machine, and ``rose db scratch URL --drop`` drops them
on demand. Nothing is ever written to the user's database: it is read with a read-only session.

How a server makes, lists and drops databases is its space module's :class:`Server` (``SERVER`` there);
how a table is copied, its :class:`ServerSpace`. Every copy is bounded by ``evidence_max_db_bytes`` of row
data and ``evidence_budget_s``; past either, the witness search is skipped with the reason recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import re
import secrets
import socket
import time
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from rose_sql.config import Config
from rose_sql.engines.base import TableInfo
from rose_sql.engines.kinds import KINDS, SCHEMES, SERVERS, Database, Kind, redact
from rose_sql.engines.spaces import Change, Table
from rose_sql.engines.spaces.shared import EngineReader, EngineSpace, evidence_limits, tables_of
from rose_sql.errors import CopyRefused
from rose_sql.results import Limits

PREFIX = "rose_scratch_"
PURGE_DEPTH = 8
"""Levels of the other tables' rows referring to a deleted row that are deleted with it (past it, a foreign
key refuses the deletion, and the candidate goes)."""

_NAME = re.compile(r"^rose_scratch_([0-9a-f]{8})_(\d+)_[0-9a-f]+$")


def host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def scratch_name() -> str:
    """A new scratch database's name: recognisable, naming this machine and process."""
    return f"{PREFIX}{host_tag()}_{os.getpid()}_{secrets.token_hex(4)}"


def orphaned(name: str) -> bool:
    """Whether the scratch database ``name`` was made by a process of this machine that is gone."""
    m = _NAME.match(name)
    if m is None or m.group(1) != host_tag():
        return False
    try:
        os.kill(int(m.group(2)), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, someone else's
        return False
    return False


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


def _kind(url: str) -> Kind | None:
    return SCHEMES.get(url.partition("://")[0].lower())


class Server:
    """How a server's scratch databases are created, listed and dropped (each server's space module has one)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def list(self) -> list[str]:
        raise NotImplementedError

    def create(self, name: str) -> None:
        raise NotImplementedError

    def drop(self, name: str, *, force: bool) -> None:
        raise NotImplementedError


def server(url: str) -> Server:
    """The server ``url`` names, as its space module handles scratch databases there."""
    kind = _kind(url)
    if kind not in SERVERS:
        from rose_sql.errors import UsageError

        names = ", ".join(f"{KINDS[k].name} ({KINDS[k].schemes[0]}://)" for k in SERVERS)
        raise UsageError(f"{redact(url)}: name a server where scratch databases can be made: {names}")
    server_class: type[Server] = importlib.import_module(KINDS[kind].space).SERVER
    return server_class(url)


def check_url(url: str) -> str:
    """``url`` when it names a server scratch databases can be made on (by its scheme; nothing is
    contacted); :class:`~rose_sql.errors.UsageError` otherwise."""
    server(url)
    return url


def leftovers(url: str) -> list[str]:
    """The scratch databases on the server ``url`` names (of any run, finished or not)."""
    return server(url).list()


def drop_leftovers(url: str, *, every: bool = False) -> list[str]:
    """Drop the scratch databases of processes of this machine that are gone (``every``: all of them, even
    in use: only when no run is using the server); the names dropped."""
    s = server(url)
    dropped = []
    for name in s.list():
        if every or orphaned(name):
            try:
                s.drop(name, force=every)
            except Exception:  # in use, or not ours to drop: left for later
                continue
            dropped.append(name)
    return dropped


def open_server_space(db: Database, config: Config, space: type[ServerSpace]) -> EngineReader | str:
    """A server database read through its engine, and its scratch copy made when the witness search asks
    (on the server ``config.evidence_scratch`` names; without one, the reason is recorded)."""
    try:
        return EngineReader(db, config, lambda: server_space(db, config, space))
    except Exception as e:  # the catalogue cannot be read
        return f"the database could not be read on {db.kind}: {type(e).__name__}: {e}"


def server_space(db: Database, config: Config, space: type[ServerSpace]) -> EngineSpace | str:
    """A scratch database on the server ``--evidence-scratch`` names, for ``db``'s witness search, or why
    there is none."""
    scratch = config.evidence_scratch
    if scratch is None:
        return (
            f"it changes a private copy of the database, and on {db.kind} that copy lives in a scratch database: "
            "give --evidence-scratch URL (a server and role where rose may create and drop databases)"
        )
    if _kind(scratch) != db.kind:
        return f"--evidence-scratch {redact(scratch)} is not a {db.kind} server like the database's"
    with contextlib.suppress(Exception):  # best effort: a leftover of a killed worker
        drop_leftovers(scratch)
    name = scratch_name()
    s = server(scratch)
    try:
        s.create(name)
    except Exception as e:
        return f"could not create a scratch database on {redact(scratch)}: {type(e).__name__}: {e}"
    try:
        return space(db, s, name, config, evidence_limits(config))
    except BaseException as e:
        with contextlib.suppress(Exception):
            s.drop(name, force=True)
        if isinstance(e, Exception):
            return f"could not open the scratch database {name}: {type(e).__name__}: {e}"
        raise


# --------------------------------------------------------------------------- a scratch copy


class ServerSpace(EngineSpace):
    """A scratch database holding copies of the tables the items read (see the module docstring)."""

    def __init__(self, db: Database, srv: Server, name: str, config: Config, limits: Limits) -> None:
        self.db = db
        self.server = srv
        self.name = name
        """The scratch database's name."""
        self.max_bytes = config.evidence_max_db_bytes
        self.copy_seconds = config.evidence_budget_s
        self.copied_bytes = 0
        """Bytes of row data the scratch database holds."""
        self.infos: dict[str, TableInfo] = {}
        """The tables copied."""
        self.unique: list[tuple[str, str]] = []
        self._source_tables: dict[str, str] | None = None  # lower-case name -> the user's name
        self._catalog: dict[str, TableInfo] = {}  # every table read from the user's database
        self._bytes: dict[str, int] = {}  # bytes of each table's rows (at least: those counted before a copy stopped)
        self._copying = ""  # the table being copied
        self._item_bytes = 0  # bytes of the tables of the item being copied for
        self._refused: dict[frozenset[str], str] = {}  # an item's tables whose copy failed, and why (not tried again)
        self._every: dict[str, Table] = {}  # every table copied, with the foreign keys among them all
        self._views: dict[frozenset[str], dict[str, Table]] = {}  # what an item sees: its tables and their parents
        self._closed = False
        self._open(with_database(srv.url, name), limits)

    def _open(self, url: str, limits: Limits) -> None:
        raise NotImplementedError

    def _source(self) -> Any:
        """A read-only connection to the user's database (opened for a copy, closed after it)."""
        raise NotImplementedError

    def _source_names(self, src: Any) -> list[str]:
        raise NotImplementedError

    def _read(self, src: Any, table: str) -> TableInfo:
        """The table's columns (the engine's own types), primary key, unique columns and foreign keys."""
        raise NotImplementedError

    def _copy(self, src: Any, info: TableInfo, deadline: float) -> None:
        """Create the table in the scratch database and copy its rows, counting ``copied_bytes``."""
        raise NotImplementedError

    def _finish(self, infos: Sequence[TableInfo]) -> None:
        """After the rows: foreign keys, row names."""

    def _undo(self, tables: list[str]) -> None:
        """Drop what a failed copy made."""
        for t in tables:
            with contextlib.suppress(Exception):
                self._execute(f"DROP TABLE IF EXISTS {self.quote(t)} CASCADE", timeout=self.limits.engine_timeout_s)

    def _count(self, nbytes: int, deadline: float) -> None:
        self.copied_bytes += nbytes
        self._item_bytes += nbytes
        self._bytes[self._copying] += nbytes
        if self._item_bytes > self.max_bytes:
            raise CopyRefused(self._too_large())
        if time.monotonic() > deadline:
            raise CopyRefused(f"copying the tables the queries read took longer than {self.copy_seconds:g} s")

    def need(self, tables: Iterable[str]) -> str | None:
        try:
            self._need({t.lower() for t in tables})
        except CopyRefused as e:
            return str(e)
        return None

    def _need(self, wanted: set[str]) -> None:
        src = None
        try:
            if self._source_tables is None:
                src = self._source()
                self._source_tables = {n.lower(): n for n in self._source_names(src)}
            seen: set[str] = set()  # the tables the queries read and their parents, copied or to copy
            queue = [self._source_tables[t] for t in sorted(wanted) if t in self._source_tables]
            while queue:
                t = queue.pop()
                if t in seen:
                    continue
                seen.add(t)
                info = self._catalog.get(t)
                if info is None:
                    src = src or self._source()
                    info = self._catalog[t] = self._read(src, t)
                queue += [p for _, p, _ in info.foreign_keys if p not in seen]
            key = frozenset(seen)
            if key in self._refused:
                raise CopyRefused(self._refused[key])
            if sum(self._bytes.get(t, 0) for t in seen) > self.max_bytes:  # known from an earlier copy
                raise CopyRefused(self._too_large())
            todo = [self._catalog[t] for t in sorted(seen) if t not in self.infos]
            if todo:
                self._copy_for(src or self._source(), seen, todo)
            self.tables = self._view(seen)
        except CopyRefused:
            raise
        except Exception as e:  # the user's database could not be read
            raise CopyRefused(f"copying into the scratch database failed: {type(e).__name__}: {e}") from None
        finally:
            if src is not None:
                with contextlib.suppress(Exception):
                    src.close()

    def _copy_for(self, src: Any, seen: set[str], todo: list[TableInfo]) -> None:
        """Copy ``todo``, the tables of ``seen`` (an item's tables and their parents) not copied yet; then,
        when the scratch database holds more than its bound, drop the tables of other items."""
        self._item_bytes = sum(self._bytes[t] for t in seen if t in self.infos)
        deadline = time.monotonic() + self.copy_seconds
        try:
            for info in todo:
                self._copying, self._bytes[info.name] = info.name, 0
                self._copy(src, info, deadline)
            self._finish(todo)
        except Exception as e:
            too_large = self._item_bytes > self.max_bytes  # known from the bytes counted: not kept as a refusal
            why = str(e) if isinstance(e, CopyRefused) else f"copying failed: {type(e).__name__}: {e}"
            if not too_large:
                self._refused[frozenset(seen)] = why
            self._drop([info.name for info in todo])
            raise CopyRefused(why) from None
        self.infos.update((info.name, info) for info in todo)
        self._every = tables_of(list(self.infos.values()), self.unique)
        if self.copied_bytes > self.max_bytes:
            self._drop([t for t in self.infos if t not in seen])

    def _drop(self, tables: list[str]) -> None:
        """Drop tables from the scratch database (and what was built on them)."""
        self._undo(tables)
        for t in tables:
            self.infos.pop(t, None)
        self.copied_bytes = sum(self._bytes[t] for t in self.infos)
        self._views = {names: view for names, view in self._views.items() if names.issubset(self.infos)}
        self._every = tables_of(list(self.infos.values()), self.unique)

    def _too_large(self) -> str:
        return f"the tables the queries read hold more than {self.max_bytes // 2**20} MiB"

    def _view(self, names: set[str]) -> dict[str, Table]:
        """The tables an item sees: ``names`` (its tables and their parents), with the foreign keys among them
        only, in a fixed order; the same for every item that reads them, with the columns' profiles kept."""
        key = frozenset(names)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = tables_of([self.infos[n] for n in sorted(names)], self.unique)
        return view

    def update(self, table: str, rowid: int, column: str, value: Any) -> Change:
        if any(pcol == column and child not in self.tables for child, _, pcol in self._every[table].children):
            self._release(table, {column: self.row(table, rowid).get(column)})
        return super().update(table, rowid, column, value)

    def delete(self, table: str, rowid: int) -> list[Change]:
        self._release(table, self.row(table, rowid))
        return super().delete(table, rowid)

    def _release(self, table: str, cells: dict[str, Any]) -> None:
        """Delete, unrecorded, the rows of tables the item does not see (copied for other items) that refer
        to ``cells`` of a row of ``table``: their foreign keys would refuse a change that a copy made for the
        item alone allows, and the queries never read them."""
        for child, ccol, pcol in self._every[table].children:
            if child not in self.tables and cells.get(pcol) is not None:
                self._purge(child, ccol, cells[pcol], 1)

    def _purge(self, table: str, column: str, value: Any, depth: int) -> None:
        """Delete the rows of ``table`` whose ``column`` holds ``value``, and first the rows referring to them."""
        t, col = self.quote(table), self.quote(column)
        for child, ccol, pcol in self._every[table].children if depth < PURGE_DEPTH else ():
            if child == table:
                continue
            sql = f"SELECT DISTINCT {self.quote(pcol)} FROM {t} WHERE {col} = {self.mark}"
            for (v,) in self._ours(sql, (value,))[1]:
                if v is not None:
                    self._purge(child, ccol, v, depth + 1)
        self._ours(f"DELETE FROM {t} WHERE {col} = {self.mark}", (value,))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._close_conn()
        self.server.drop(self.name, force=True)

    def _close_conn(self) -> None:
        raise NotImplementedError
