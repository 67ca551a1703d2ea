"""DuckDB's space: the file read through its engine, and an in-memory DuckDB copy for the witness search.

The file is attached read-only to an in-memory database, its tables copied into it and detached; then
external access is turned off and the configuration locked, as on the engine's own connections. Rows are
named by DuckDB's ``rowid``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb

from rose_sql.config import Config
from rose_sql.engines.base import ColumnInfo, TableInfo
from rose_sql.engines.duckdb import DuckDB, _Conn, _Watchdog, functions_of, memory_limit, quote
from rose_sql.engines.kinds import Database
from rose_sql.engines.spaces import Change
from rose_sql.engines.spaces.shared import EngineReader, EngineSpace, evidence_limits, fetch_capped, tables_of
from rose_sql.errors import CopyRefused
from rose_sql.results import Limits, ResultSet


def open_space(db: Database, config: Config) -> EngineReader | str:
    """The file read through the DuckDB engine; its in-memory copy made when the witness search asks."""

    def make_copy() -> EngineSpace | str:
        try:
            return DuckSpace(
                db.target,
                evidence_limits(config),
                max_bytes=config.evidence_max_db_bytes,
                copy_seconds=config.evidence_budget_s,
            )
        except CopyRefused as e:
            return str(e)
        except Exception as e:  # unreadable now: the item says so
            return f"the database could not be copied: {type(e).__name__}: {e}"

    try:
        return EngineReader(db, config, make_copy)
    except Exception as e:  # the catalogue cannot be read
        return f"the database could not be read on duckdb: {type(e).__name__}: {e}"


class DuckSpace(EngineSpace):
    """An in-memory DuckDB copy of a DuckDB file (see the module docstring).

    The copy's tables keep their columns' types, NOT NULL, primary keys, UNIQUE and CHECK constraints,
    but not their foreign keys: DuckDB refuses to update any row another table references inside a
    transaction (its documented foreign-key limitations), which would forbid most candidates. The
    foreign keys are checked here instead (:meth:`_check`): a change that leaves a child without its
    parent fails, as the engine would make it fail.
    """

    dialect = "duckdb"
    mark = "?"
    locator = "rowid"

    def __init__(self, path: str, limits: Limits, *, max_bytes: int, copy_seconds: float) -> None:
        self.errors = (duckdb.Error,)
        size = Path(path).stat().st_size
        if size > max_bytes:
            raise CopyRefused(f"database larger than {max_bytes // 2**20} MiB")
        conn = duckdb.connect(
            ":memory:",
            config={
                "threads": 1,
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
                "memory_limit": memory_limit(limits.memory_bytes),
                "temp_directory": "",
            },
        )
        self._watchdog = _Watchdog()
        self._conn = _Conn(conn, {})
        unique: list[tuple[str, str]] = []
        try:
            conn.execute("ATTACH '" + path.replace("'", "''") + "' AS rose_source (READ_ONLY)")
            infos = self._describe(unique)
            self._watchdog.arm(self._conn, copy_seconds)
            try:
                for info, ddl in infos:
                    conn.execute(ddl)
                    conn.execute(f"INSERT INTO {quote(info.name)} SELECT * FROM rose_source.main.{quote(info.name)}")
            except duckdb.InterruptException:
                raise CopyRefused(f"copying the database took longer than {copy_seconds:g} s") from None
            finally:
                self._watchdog.disarm(self._conn)
            conn.execute("DETACH rose_source")
            conn.execute("SET enable_external_access = false")
            conn.execute("SET lock_configuration = true")
            self._conn.functions = functions_of(conn)
        except BaseException:
            conn.close()
            raise
        engine = DuckDB(limits)
        super().__init__(
            limits,
            lambda name: engine._allowed(self._conn, name),
            catalog=engine._catalog,
            check=lambda sql: engine._check(self._conn, sql),
        )
        self.tables = tables_of([info for info, _ in infos], unique)

    def _describe(self, unique: list[tuple[str, str]]) -> list[tuple[TableInfo, str]]:
        """The source's tables, and the DDL of each one's copy (its constraints but the foreign keys)."""
        c = self._conn.conn
        out = []
        for (t,) in c.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'rose_source' AND schema_name = 'main' "
            "ORDER BY table_name"
        ).fetchall():
            cols = c.execute(
                "SELECT column_name, data_type, NOT is_nullable FROM duckdb_columns() WHERE database_name = "
                "'rose_source' AND schema_name = 'main' AND table_name = ? ORDER BY column_index",
                [t],
            ).fetchall()
            pk: tuple[str, ...] = ()
            fks: list[tuple[str, str, str]] = []
            parts = [f"{quote(n)} {ty}{' NOT NULL' if nn else ''}" for n, ty, nn in cols]
            for kind, text, names, ref_table, ref_cols in c.execute(
                "SELECT constraint_type, constraint_text, constraint_column_names, referenced_table, "
                "referenced_column_names FROM duckdb_constraints() WHERE database_name = 'rose_source' "
                "AND schema_name = 'main' AND table_name = ? ORDER BY constraint_index",
                [t],
            ).fetchall():
                if kind in ("PRIMARY KEY", "UNIQUE", "CHECK"):
                    parts.append(text)
                if kind == "PRIMARY KEY":
                    pk = tuple(names)
                elif kind == "UNIQUE" and len(names) == 1:
                    unique.append((t, names[0]))
                elif kind == "FOREIGN KEY" and ref_table and len(names) == 1:
                    fks += [(names[0], ref_table, (ref_cols or [names[0]])[0])]
            info = TableInfo(t, tuple(ColumnInfo(n, ty, bool(nn)) for n, ty, nn in cols), pk, tuple(fks))
            out.append((info, f"CREATE TABLE {quote(t)} ({', '.join(parts)})"))
        return out

    def _check(self, change: Change) -> None:
        """Raise ValueError when ``change`` leaves a child row without its parent (the foreign keys)."""
        t = self.tables[change.table]
        cells: dict[str, Any] = {}
        if change.op == "update" and change.column is not None:
            cells = {change.column: change.new}
        elif change.op == "insert":
            cells = dict(change.row or {})
        for col, parent, pcol in t.parents:
            v = cells.get(col)
            if col in cells and v is not None:
                sql = f"SELECT 1 FROM {self.quote(parent)} WHERE {self.quote(pcol)} = ? LIMIT 1"
                if not self._ours(sql, (v,))[1]:
                    raise ValueError(f"foreign key {change.table}.{col}: no {parent} row has {pcol} = {v!r}")
        gone: dict[str, Any] = {}
        if change.op == "update" and change.column is not None:
            gone = {change.column: change.old}
        elif change.op == "delete":
            gone = dict(change.row or {})
        for child, ccol, pcol in t.children:
            v = gone.get(pcol)
            if pcol not in gone or v is None:
                continue
            still = f"SELECT 1 FROM {self.quote(t.name)} WHERE {self.quote(pcol)} = ? LIMIT 1"
            if self._ours(still, (v,))[1]:
                continue  # another parent row holds the value
            sql = f"SELECT 1 FROM {self.quote(child)} WHERE {self.quote(ccol)} = ? LIMIT 1"
            if self._ours(sql, (v,))[1]:
                raise ValueError(f"foreign key {child}.{ccol}: a row still refers to {t.name}.{pcol} = {v!r}")

    def update(self, table: str, rowid: int, column: str, value: Any) -> Change:
        change = super().update(table, rowid, column, value)
        self._check(change)
        return change

    def insert_copy(self, table: str, rowid: int, overrides: dict[str, Any] | None = None) -> Change:
        change = super().insert_copy(table, rowid, overrides)
        self._check(change)
        return change

    def delete(self, table: str, rowid: int) -> list[Change]:
        changes = super().delete(table, rowid)
        self._check(changes[-1])
        return changes

    def _execute(self, sql: str, params: Sequence[Any] = (), *, timeout: float) -> tuple[list[str], list[Any]]:
        c = self._conn.conn
        self._watchdog.arm(self._conn, timeout)
        try:
            c.execute(sql, list(params) if params else None)
            cols = [d[0] for d in c.description or ()]
            return cols, c.fetchall() if c.description else []
        finally:
            self._watchdog.disarm(self._conn)

    def _untrusted(self, sql: str, timeout: float) -> ResultSet:
        c = self._conn.conn
        self._watchdog.arm(self._conn, timeout)
        try:
            c.execute(sql)
            return fetch_capped(c.fetchmany, tuple(d[0] for d in c.description or ()), self.limits, self.max_rows)
        finally:
            self._watchdog.disarm(self._conn)

    def _is_timeout(self, e: BaseException) -> bool:
        return isinstance(e, duckdb.InterruptException)

    def _begin_sql(self) -> str:
        return "BEGIN TRANSACTION"

    def close(self) -> None:
        self._conn.conn.close()
