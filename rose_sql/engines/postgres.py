"""PostgreSQL through psycopg 3: read-only transactions, ``statement_timeout``, a server-side cursor.

Every connection starts with ``default_transaction_read_only = on``, ``statement_timeout`` (the
``--timeout``), ``max_parallel_workers_per_gather = 0`` (a parallel float sum differs between runs:
bird-bench/mini_dev issue 48), ``cursor_tuple_fraction = 1`` (a cursor is planned as the plain query is,
so unordered rows come in the order a client that fetches everything sees: Soft-F1 is positional),
``lock_timeout`` and ``idle_in_transaction_session_timeout``, set as startup options, so that a reset
returns to them. A statement runs as a server-side cursor (``DECLARE .. CURSOR FOR``, which itself
accepts only a query, sent with the extended protocol, which takes one statement) inside ``BEGIN READ
ONLY`` (both and the first ``FETCH`` in one round trip, pipelined), is fetched in batches against the
row and byte caps, the rows past the cap are counted with ``MOVE FORWARD ALL``, and the transaction is
rolled back, then ``DISCARD ALL`` resets the session (advisory locks, prepared statements, settings:
what outlives a rollback).

The function policy: a function called by name must be in ``pg_catalog`` with every overload immutable
or stable (``provolatile``), and not one of :data:`DENIED` (stable functions that run SQL text given to
them), or one of :data:`ALLOWED` (volatile but harmless). That refuses advisory locks, ``set_config``,
``nextval``, ``lo_export``, ``pg_read_file``, ``pg_sleep``, ``pg_terminate_backend``, ``dblink`` and
every function of the database's own schemas.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg import sql as pgsql

from rose_sql.engines.base import ColumnInfo, Failure, Limits, Pooled, TableInfo, collect, examples
from rose_sql.engines.source import Kind, Remote
from rose_sql.execute import ResultSet

DENIED = frozenset(
    {
        "query_to_xml",
        "query_to_xmlschema",
        "query_to_xml_and_xmlschema",
        "cursor_to_xml",
        "cursor_to_xmlschema",
        "ts_stat",
        "ts_rewrite",
        "database_to_xml",
        "database_to_xmlschema",
        "database_to_xml_and_xmlschema",
        "schema_to_xml",
        "schema_to_xmlschema",
        "schema_to_xml_and_xmlschema",
    }
)
"""Functions that are not volatile but execute SQL text they are given (or read the whole database)."""
ALLOWED = frozenset({"random", "random_normal", "clock_timestamp", "timeofday", "gen_random_uuid"})
"""Volatile functions without side effects."""
FIRST_FETCH = 64
"""Rows in the first FETCH (most results fit); later batches are sized by the bytes seen so far."""
CURSOR = "rose_query"
_QUERY_CANCELED = "57014"
_GONE = ("57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08004", "3D000")


class _Conn:
    """A psycopg connection and the database it is connected to."""

    def __init__(self, conn: psycopg.Connection[Any], target: str) -> None:
        self.conn = conn
        self.target = target


class PostgreSQL(Pooled[_Conn]):
    """The PostgreSQL engine (see the module docstring)."""

    kind: Kind = "postgresql"
    dialect = "postgres"

    def __init__(self, limits: Limits) -> None:
        super().__init__(limits)
        self._functions: dict[str, dict[str, bool]] = {}
        ms = max(1, int(limits.timeout_s * 1000))
        self.options = (
            "-c default_transaction_read_only=on "
            f"-c statement_timeout={ms} "
            f"-c lock_timeout={ms} "
            f"-c idle_in_transaction_session_timeout={ms * 2} "
            "-c max_parallel_workers_per_gather=0 "
            "-c cursor_tuple_fraction=1"  # plan the cursor as the plain query: the same rows in the same order
        )

    def _connect(self, db: Remote) -> _Conn:
        params: dict[str, Any] = dict(psycopg.conninfo.conninfo_to_dict(db.target))
        params["options"] = f"{params.get('options') or ''} {self.options}".strip()
        params.setdefault("connect_timeout", 10)
        params["application_name"] = "rose-sql"
        conn = psycopg.connect(psycopg.conninfo.make_conninfo(**params), autocommit=True)
        conn.prepare_threshold = None  # DISCARD ALL drops prepared statements: psycopg must not keep any
        return _Conn(conn, db.target)

    def _close_conn(self, conn: _Conn) -> None:
        conn.conn.close()

    def _version(self, conn: _Conn) -> str:
        info = conn.conn.info
        v = info.server_version
        return f"PostgreSQL {v // 10000}.{v % 10000}"

    def exists(self, db: Remote) -> bool:
        try:
            self.conn(db)
        except psycopg.OperationalError as e:
            return "does not exist" not in str(e)
        return True

    def _statement(self, conn: _Conn, sql: str) -> tuple[ResultSet, int]:
        c = conn.conn
        limits = self.limits
        deadline = time.monotonic() + limits.timeout_s  # statement_timeout bounds each FETCH; this, all of them
        with c.pipeline():  # one round trip; the extended protocol takes exactly one statement each
            c.execute("BEGIN READ ONLY")
            c.execute(f"DECLARE {CURSOR} NO SCROLL CURSOR FOR " + sql)
            first = c.execute(f"FETCH FORWARD {FIRST_FETCH} FROM {CURSOR}")
        columns = tuple(d.name for d in first.description or ())

        def batches() -> Any:
            batch = first.fetchall()
            size = FIRST_FETCH
            while True:
                yield batch
                if len(batch) < size:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError("the statement's rows took longer than the time limit to fetch")
                seen = sum(len(str(v)) for v in batch[-1]) + 16 * len(batch[-1])
                size = max(1, min(5000, limits.max_bytes // (4 * max(seen, 1))))
                batch = c.execute(f"FETCH FORWARD {size} FROM {CURSOR}").fetchall()

        got = collect(batches(), limits)
        rest: int | None = 0
        if got.truncated:
            try:
                rest = int((c.execute(f"MOVE FORWARD ALL IN {CURSOR}").statusmessage or "MOVE 0").split()[-1])
            except psycopg.errors.QueryCanceled:  # the time limit met the count: a lower bound
                rest = None
        return got.result(columns, rest), got.nbytes

    def _end(self, conn: _Conn) -> None:
        c = conn.conn
        with c.pipeline():  # one round trip: each in its own implicit transaction
            if c.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                c.execute("ROLLBACK")
            c.execute("DISCARD ALL")

    def _classify(self, e: BaseException) -> Failure:
        state = (e.diag.sqlstate or e.sqlstate) if isinstance(e, psycopg.Error) else None
        inner = e.__context__
        if state is None and isinstance(e, psycopg.OperationalError) and isinstance(inner, psycopg.Error):
            # leaving a pipeline whose statement failed ("cannot exit pipeline mode while busy") hides why it
            # failed, e.g. the time limit: the statement's own error decides; the connection is not reused
            found = self._classify(inner)
            return Failure(found.status, found.message, broken=True)
        message = f"{type(e).__name__}: {str(e).strip()}"
        if state == _QUERY_CANCELED or isinstance(e, TimeoutError):
            return Failure("guard", message)
        if isinstance(e, psycopg.OperationalError) and (state is None or state in _GONE):
            return Failure("unreadable", message, broken=True)
        if isinstance(e, psycopg.InterfaceError):
            return Failure("unreadable", message, broken=True)
        if isinstance(e, MemoryError):
            return Failure("error", "stopped: the result needs more than the worker's memory limit", broken=True)
        if state == "25006":  # read_only_sql_transaction
            return Failure("rejected", message)
        return Failure("error", message)

    def _allowed(self, conn: _Conn, name: str) -> str | None:
        if name in ALLOWED:
            return None
        if name in DENIED:
            return "it runs SQL text given to it"
        with self._lock:
            functions = self._functions.get(conn.target)
        if functions is None:  # read once per database and process
            rows = conn.conn.execute(
                "SELECT p.proname, bool_and(p.provolatile <> 'v' AND n.nspname = 'pg_catalog') "
                "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace GROUP BY p.proname"
            ).fetchall()
            functions = {r[0]: bool(r[1]) for r in rows}
            with self._lock:
                self._functions[conn.target] = functions
        safe = functions.get(name)
        if safe is None:
            return "not a PostgreSQL built-in function"
        return None if safe else "it may have side effects (volatile, or not a built-in)"

    def _interrupt(self, conn: _Conn) -> None:
        conn.conn.cancel_safe()

    # ------------------------------------------------------------------ metadata

    def describe(self, db: Remote) -> list[TableInfo]:
        c = self.conn(db).conn
        tables = [
            r[0]
            for r in c.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
                "AND table_schema = ANY (current_schemas(false)) ORDER BY table_name"
            ).fetchall()
        ]
        out = []
        for t in tables:
            cols = c.execute(
                "SELECT column_name, data_type, is_nullable = 'NO' FROM information_schema.columns "
                "WHERE table_name = %s AND table_schema = ANY (current_schemas(false)) ORDER BY ordinal_position",
                (t,),
            ).fetchall()
            keys = c.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY (i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary",
                (pgsql.Identifier(t).as_string(c),),
            ).fetchall()
            fks = c.execute(
                "SELECT a.attname, p.relname, pa.attname FROM pg_constraint k "
                "JOIN pg_class p ON p.oid = k.confrelid "
                "JOIN LATERAL unnest(k.conkey, k.confkey) AS u(col, ref) ON true "
                "JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.col "
                "JOIN pg_attribute pa ON pa.attrelid = k.confrelid AND pa.attnum = u.ref "
                "WHERE k.contype = 'f' AND k.conrelid = %s::regclass",
                (pgsql.Identifier(t).as_string(c),),
            ).fetchall()
            samples = {}
            for name, *_ in cols:
                q = pgsql.SQL("SELECT {c} FROM {t} WHERE {c} IS NOT NULL LIMIT 50").format(
                    c=pgsql.Identifier(name), t=pgsql.Identifier(t)
                )
                samples[name] = examples(r[0] for r in c.execute(q).fetchall())
            out.append(
                TableInfo(
                    t,
                    tuple(ColumnInfo(n, ty, bool(nn)) for n, ty, nn in cols),
                    tuple(r[0] for r in keys),
                    tuple((a, b, d) for a, b, d in fks),
                    samples,
                )
            )
        c.execute("ROLLBACK") if c.info.transaction_status != psycopg.pq.TransactionStatus.IDLE else None
        return out

    def can_write(self, db: Remote) -> str | None:
        c = self.conn(db).conn
        row = c.execute(
            "SELECT current_user, r.rolsuper, "
            "has_database_privilege(current_database(), 'CREATE'), "
            "EXISTS (SELECT 1 FROM information_schema.tables t WHERE t.table_schema NOT IN "
            "('pg_catalog', 'information_schema') AND (has_table_privilege(quote_ident(t.table_schema) || '.' || "
            "quote_ident(t.table_name), 'INSERT, UPDATE, DELETE, TRUNCATE'))), "
            "EXISTS (SELECT 1 FROM pg_namespace n WHERE n.nspname NOT LIKE 'pg\\_%%' "
            "AND n.nspname <> 'information_schema' AND has_schema_privilege(n.oid, 'CREATE')) "
            "FROM pg_roles r WHERE r.rolname = current_user"
        ).fetchone()
        if row is None:
            return None
        user, superuser, create_db, write_table, create_schema = row
        if superuser:
            return f"role {user} is a superuser"
        if write_table:
            return f"role {user} may insert, update or delete rows"
        if create_schema or create_db:
            return f"role {user} may create tables"
        return None
