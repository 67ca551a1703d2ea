"""PostgreSQL's space: the database read through its engine, and a scratch database for the witness search.

The copy's tables get their columns' own types (``format_type``), NOT NULL, the primary key,
single-column UNIQUE constraints and foreign keys (``NOT VALID``: they hold for every change, as on the
user's database), rows streamed with ``COPY``; rows are named by ``ctid``. Scratch databases are made and
dropped as :mod:`rose_sql.engines.spaces.scratch` says.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql as pgsql

from rose_sql.config import Config
from rose_sql.engines.base import ColumnInfo, TableInfo
from rose_sql.engines.kinds import Database
from rose_sql.engines.postgres import PostgreSQL
from rose_sql.engines.postgres import _Conn as PgConn
from rose_sql.engines.spaces.scratch import Server, ServerSpace, open_server_space
from rose_sql.engines.spaces.shared import EngineReader, EngineSpace, fetch_capped
from rose_sql.errors import CopyRefused
from rose_sql.results import Limits, ResultSet


def open_space(db: Database, config: Config) -> EngineReader | str:
    """The database read through its engine; a scratch copy on ``--evidence-scratch`` for the witness search."""
    return open_server_space(db, config, PgSpace)


class PgServer(Server):
    """Scratch databases on a PostgreSQL server."""

    def _admin(self) -> Any:
        return psycopg.connect(self.url, autocommit=True, connect_timeout=10, application_name="rose-sql")

    def list(self) -> list[str]:
        with self._admin() as c:
            rows = c.execute("SELECT datname FROM pg_database WHERE datname LIKE 'rose\\_scratch\\_%' ORDER BY 1")
            return [r[0] for r in rows.fetchall()]

    def create(self, name: str) -> None:
        with self._admin() as c:
            c.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))

    def drop(self, name: str, *, force: bool) -> None:
        with self._admin() as c:  # without FORCE, PostgreSQL refuses a database someone is connected to
            text = "DROP DATABASE IF EXISTS {} WITH (FORCE)" if force else "DROP DATABASE IF EXISTS {}"
            c.execute(pgsql.SQL(text).format(pgsql.Identifier(name)))


SERVER = PgServer
"""How scratch databases are made on this engine's servers."""


class PgSpace(ServerSpace):
    """A scratch PostgreSQL database holding copies of the tables the items read."""

    dialect = "postgres"
    locator = "ctid"

    def _open(self, url: str, limits: Limits) -> None:
        self.errors = (psycopg.Error,)
        ms = max(1, int(limits.engine_timeout_s * 1000))
        options = f"-c statement_timeout={ms} -c lock_timeout={ms} -c max_parallel_workers_per_gather=0"
        self._conn = psycopg.connect(
            url, autocommit=True, connect_timeout=10, application_name="rose-sql-scratch", options=options
        )
        self._conn.prepare_threshold = None
        engine = PostgreSQL(limits)
        wrapped = PgConn(self._conn, url)
        EngineSpace.__init__(
            self,
            limits,
            lambda name: engine._allowed(wrapped, name),
            catalog=engine._catalog,
            check=lambda sql: engine._check(wrapped, sql),
        )
        # the policy's catalogue, read now: outside any candidate's transaction, before any item's clock
        engine._functions_of(wrapped)

    def _close_conn(self) -> None:
        self._conn.close()

    def alive(self) -> bool:
        return not self._conn.broken and not self._conn.closed

    def _in_transaction(self) -> bool | None:
        return self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def _rid(self, native: Any) -> int:
        block, _, offset = str(native).strip("()").partition(",")
        return (int(block) << 16) | int(offset)

    def _native(self, rid: int) -> Any:
        return f"({rid >> 16},{rid & 0xFFFF})"

    def _where(self) -> str:
        return "ctid = %s::tid"

    def _execute(self, sql: str, params: Sequence[Any] = (), *, timeout: float) -> tuple[list[str], list[Any]]:
        cur = self._conn.execute(sql, list(params) if params else None)
        cols = [d.name for d in cur.description or ()]
        return cols, cur.fetchall() if cur.description else []

    def _untrusted(self, sql: str, timeout: float) -> ResultSet:
        c = self._conn
        own = c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # outside a candidate: one of its own
        if own:
            c.execute("BEGIN")
        try:
            c.execute("SET TRANSACTION READ ONLY")  # allowed after the candidate's writes: nothing more is written
            c.execute(f"SET LOCAL statement_timeout = {max(1, int(timeout * 1000))}")
            cur = c.execute("DECLARE rose_witness NO SCROLL CURSOR FOR " + sql)
            described = c.execute("FETCH FORWARD 0 FROM rose_witness")
            columns = tuple(d.name for d in described.description or cur.description or ())

            def fetch(n: int) -> Sequence[Sequence[Any]]:
                return c.execute(f"FETCH FORWARD {int(n)} FROM rose_witness").fetchall()

            result = fetch_capped(fetch, columns, self.limits, self.max_rows)
            c.execute("CLOSE rose_witness")
            return result
        finally:
            if own:
                c.execute("ROLLBACK")

    def _is_timeout(self, e: BaseException) -> bool:
        return getattr(getattr(e, "diag", None), "sqlstate", None) == "57014"

    # ------------------------------------------------------------------ the copy

    def _source(self) -> Any:
        ms = max(1, int(self.copy_seconds * 1000))
        return psycopg.connect(
            self.db.target,
            autocommit=True,
            connect_timeout=10,
            application_name="rose-sql",
            options=f"-c default_transaction_read_only=on -c statement_timeout={ms}",
        )

    def _source_names(self, src: Any) -> list[str]:
        rows = src.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
            "AND table_schema = ANY (current_schemas(false)) ORDER BY table_name"
        ).fetchall()
        return [r[0] for r in rows]

    def _read(self, src: Any, table: str) -> TableInfo:
        rel = pgsql.Identifier(table).as_string(src)
        cols = src.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull FROM pg_attribute a "
            "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            (rel,),
        ).fetchall()
        keys = src.execute(
            "SELECT i.indisprimary, array_agg(a.attname ORDER BY a.attnum) FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) "
            "WHERE i.indrelid = %s::regclass AND i.indisunique GROUP BY i.indexrelid, i.indisprimary",
            (rel,),
        ).fetchall()
        fks = src.execute(
            "SELECT a.attname, p.relname, pa.attname FROM pg_constraint k "
            "JOIN pg_class p ON p.oid = k.confrelid "
            "JOIN LATERAL unnest(k.conkey, k.confkey) AS u(col, ref) ON true "
            "JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.col "
            "JOIN pg_attribute pa ON pa.attrelid = k.confrelid AND pa.attnum = u.ref "
            "WHERE k.contype = 'f' AND k.conrelid = %s::regclass AND cardinality(k.conkey) = 1",
            (rel,),
        ).fetchall()
        pk: tuple[str, ...] = ()
        for primary, names in keys:
            if primary:
                pk = tuple(names)
            elif len(names) == 1:
                self.unique.append((table, names[0]))
        columns = tuple(ColumnInfo(n, ty, bool(nn)) for n, ty, nn in cols)
        return TableInfo(table, columns, pk, tuple((a, b, d) for a, b, d in fks))

    def _copy(self, src: Any, info: TableInfo, deadline: float) -> None:
        c = self._conn
        q = pgsql.Identifier
        parts = [
            pgsql.SQL("{} {}{}").format(q(col.name), pgsql.SQL(col.type), pgsql.SQL(" NOT NULL" if col.notnull else ""))
            for col in info.columns
        ]
        if info.primary_key:
            parts.append(pgsql.SQL("PRIMARY KEY ({})").format(pgsql.SQL(", ").join(q(k) for k in info.primary_key)))
        parts += [pgsql.SQL("UNIQUE ({})").format(q(col)) for t, col in self.unique if t == info.name]
        try:
            c.execute(pgsql.SQL("CREATE TABLE {} ({})").format(q(info.name), pgsql.SQL(", ").join(parts)))
        except Exception as e:
            raise CopyRefused(
                f"table {info.name} cannot be made in the scratch database: {type(e).__name__}: {e}"
            ) from None
        with (
            src.cursor().copy(pgsql.SQL("COPY {} TO STDOUT").format(q(info.name))) as out,
            c.cursor().copy(pgsql.SQL("COPY {} FROM STDIN").format(q(info.name))) as into,
        ):
            for chunk in out:
                self._count(len(chunk), deadline)
                into.write(chunk)

    def _finish(self, infos: Sequence[TableInfo]) -> None:
        for info in infos:
            for col, parent, ref in info.foreign_keys:
                if parent not in self.infos and all(i.name != parent for i in infos):
                    continue
                with contextlib.suppress(Exception):  # a parent column without a unique key: no constraint
                    self._conn.execute(
                        pgsql.SQL("ALTER TABLE {} ADD FOREIGN KEY ({}) REFERENCES {} ({}) NOT VALID").format(
                            pgsql.Identifier(info.name),
                            pgsql.Identifier(col),
                            pgsql.Identifier(parent),
                            pgsql.Identifier(ref),
                        )
                    )
