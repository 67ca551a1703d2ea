"""MySQL/MariaDB's space: the database read through its engine, and a scratch database for the witness search.

The copy's tables are made from ``SHOW CREATE TABLE`` as InnoDB (so that a rollback undoes a candidate),
rows streamed and inserted, and an invisible ``rose_rowid`` column (``SELECT *`` does not see it) names
each row. Scratch databases are made and dropped as :mod:`rose_sql.engines.spaces.scratch` says.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from typing import Any

import pymysql
import pymysql.cursors
from pymysql.constants import SERVER_STATUS

from rose_sql.config import Config
from rose_sql.engines.base import ColumnInfo, TableInfo
from rose_sql.engines.kinds import Database
from rose_sql.engines.mysql import EXECUTABLE_COMMENT, MySQL, connect_args, lexer_for, quote
from rose_sql.engines.mysql import _Conn as MyConn
from rose_sql.engines.spaces.scratch import Server, ServerSpace, open_server_space
from rose_sql.engines.spaces.shared import EngineReader, EngineSpace, fetch_capped
from rose_sql.errors import CopyRefused
from rose_sql.results import Limits, ResultSet

ROWID = "rose_rowid"
"""The invisible column that names a row of a MySQL scratch table."""


def open_space(db: Database, config: Config) -> EngineReader | str:
    """The database read through its engine; a scratch copy on ``--evidence-scratch`` for the witness search."""
    return open_server_space(db, config, MySpace)


class MyServer(Server):
    """Scratch databases on a MySQL or MariaDB server."""

    def _admin(self) -> Any:
        args = connect_args(self.url)
        args.pop("database", None)
        return pymysql.connect(**args, autocommit=True, connect_timeout=10)

    def list(self) -> list[str]:
        c = self._admin()
        try:
            with c.cursor() as cur:
                cur.execute(
                    "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'rose\\_scratch\\_%'"
                )
                return sorted(r[0] for r in cur.fetchall())
        finally:
            c.close()

    def create(self, name: str) -> None:
        c = self._admin()
        try:
            with c.cursor() as cur:
                cur.execute(f"CREATE DATABASE {quote(name)} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        finally:
            c.close()

    def drop(self, name: str, *, force: bool) -> None:
        c = self._admin()
        try:
            with c.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS {quote(name)}")
        finally:
            c.close()


SERVER = MyServer
"""How scratch databases are made on this engine's servers."""


class MySpace(ServerSpace):
    """A scratch MySQL or MariaDB database holding copies of the tables the items read."""

    dialect = "mysql"
    locator = ROWID

    def _open(self, url: str, limits: Limits) -> None:
        self.errors = (pymysql.err.MySQLError,)
        self._conn = pymysql.connect(**connect_args(url), autocommit=True, connect_timeout=10, local_infile=False)
        self.mariadb = "mariadb" in self._conn.get_server_info().lower()
        engine = MySQL(limits)
        wrapped = MyConn(self._conn, self.mariadb, url)
        EngineSpace.__init__(
            self,
            limits,
            lambda name: engine._allowed(wrapped, name),
            catalog=engine._catalog,
            check=lambda sql: engine._check(wrapped, sql),
        )
        with self._conn.cursor() as cur:
            if self.mariadb:
                cur.execute(f"SET SESSION max_statement_time = {limits.engine_timeout_s:.3f}")
            cur.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',STRICT_ALL_TABLES')")
            cur.execute("SELECT @@sql_mode")
            wrapped.lexer = lexer_for(str((cur.fetchone() or ("",))[0]))  # what the policy reads it under
        # the policy's catalogue, read now: outside any candidate's transaction, before any item's clock
        engine._stored_of(wrapped)

    def quote(self, name: str) -> str:
        return quote(name)

    def alive(self) -> bool:
        return bool(self._conn.open)

    def _close_conn(self) -> None:
        self._conn.close()

    def _begin_sql(self) -> str:
        return "START TRANSACTION"

    def _in_transaction(self) -> bool | None:
        return bool(self._conn.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS)

    def _execute(self, sql: str, params: Sequence[Any] = (), *, timeout: float) -> tuple[list[str], list[Any]]:
        with self._conn.cursor() as cur:
            cur.execute(sql, list(params) if params else None)
            cols = [d[0] for d in cur.description or ()]
            return cols, list(cur.fetchall()) if cur.description else []

    def _untrusted(self, sql: str, timeout: float) -> ResultSet:
        if EXECUTABLE_COMMENT.search(sql):
            raise ValueError("a MySQL executable comment runs what it holds")
        text = f"SET STATEMENT max_statement_time = {timeout:.3f} FOR {sql}" if self.mariadb else sql
        if not self.mariadb:
            with self._conn.cursor() as cur:
                cur.execute(f"SET SESSION max_execution_time = {max(1, int(timeout * 1000))}")
        cur = self._conn.cursor(pymysql.cursors.SSCursor)
        try:
            cur.execute(text)
            return fetch_capped(cur.fetchmany, tuple(d[0] for d in cur.description or ()), self.limits, self.max_rows)
        finally:
            cur.close()

    def _is_timeout(self, e: BaseException) -> bool:
        return bool(e.args) and e.args[0] in (1969, 3024)

    # ------------------------------------------------------------------ the copy

    def _source(self) -> Any:
        c = pymysql.connect(**connect_args(self.db.target), autocommit=True, connect_timeout=10, local_infile=False)
        with c.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION READ ONLY")
        return c

    def _source_names(self, src: Any) -> list[str]:
        with src.cursor() as cur:
            cur.execute(
                "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                "AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME"
            )
            return [r[0] for r in cur.fetchall()]

    def _read(self, src: Any, table: str) -> TableInfo:
        with src.cursor() as cur:
            cur.execute(
                "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE = 'NO', COLUMN_KEY = 'PRI' "
                "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s "
                "ORDER BY ORDINAL_POSITION",
                (table,),
            )
            cols = cur.fetchall()
            cur.execute(
                "SELECT INDEX_NAME, MIN(COLUMN_NAME), COUNT(*) FROM information_schema.STATISTICS "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s AND NON_UNIQUE = 0 AND INDEX_NAME <> 'PRIMARY' "
                "GROUP BY INDEX_NAME",
                (table,),
            )
            self.unique += [(table, col) for _, col, n in cur.fetchall() if n == 1]
            cur.execute(
                "SELECT COLUMN_NAME, REFERENCED_TABLE_NAME, REFERENCED_COLUMN_NAME FROM "
                "information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s "
                "AND REFERENCED_TABLE_NAME IS NOT NULL",
                (table,),
            )
            fks = cur.fetchall()
        return TableInfo(
            table,
            tuple(ColumnInfo(n, str(ty), bool(nn)) for n, ty, nn, _ in cols),
            tuple(n for n, _, _, pk in cols if pk),
            tuple((a, b, d) for a, b, d in fks),
        )

    def _copy(self, src: Any, info: TableInfo, deadline: float) -> None:
        t = self.quote(info.name)
        with src.cursor() as cur:
            cur.execute(f"SHOW CREATE TABLE {t}")
            row = cur.fetchone()
        ddl = re.sub(r"\bENGINE=\w+", "ENGINE=InnoDB", str(row[1]))  # a rollback must undo a candidate
        if ROWID in {c.name for c in info.columns}:
            raise CopyRefused(f"table {info.name} has a column named {ROWID}, the name the scratch copy needs")
        with self._conn.cursor() as cur:
            cur.execute("SET SESSION foreign_key_checks = 0")  # parents may come later in this copy
            cur.execute(ddl)
        marks = ", ".join(["%s"] * len(info.columns))
        insert = f"INSERT INTO {t} ({', '.join(self.quote(c.name) for c in info.columns)}) VALUES ({marks})"
        read = src.cursor(pymysql.cursors.SSCursor)
        try:
            read.execute(f"SELECT {', '.join(self.quote(c.name) for c in info.columns)} FROM {t}")
            while batch := read.fetchmany(1000):
                self._count(sum(len(str(v)) + 8 for r in batch for v in r), deadline)
                with self._conn.cursor() as cur:
                    cur.executemany(insert, batch)
        finally:
            read.close()

    def _undo(self, tables: list[str]) -> None:
        with contextlib.suppress(Exception), self._conn.cursor() as cur:
            cur.execute("SET SESSION foreign_key_checks = 0")  # the tables dropped together may refer to one another
        try:
            super()._undo(tables)
        finally:
            with contextlib.suppress(Exception), self._conn.cursor() as cur:
                cur.execute("SET SESSION foreign_key_checks = 1")

    def _finish(self, infos: Sequence[TableInfo]) -> None:
        with self._conn.cursor() as cur:
            for info in infos:
                t = self.quote(info.name)
                cur.execute(f"ALTER TABLE {t} ADD COLUMN {ROWID} BIGINT INVISIBLE, ADD INDEX ({ROWID})")
                cur.execute("SET @rose_n = 0")
                cur.execute(f"UPDATE {t} SET {ROWID} = (@rose_n := @rose_n + 1)")
            cur.execute("SET SESSION foreign_key_checks = 1")
