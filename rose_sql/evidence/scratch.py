"""Scratch databases on PostgreSQL and MySQL/MariaDB, where the witness search changes a private copy.

``--evidence-scratch URL`` names a server and a role that may create databases. Each worker that needs
one creates its own database there, named ``rose_scratch_<host>_<pid>_<random>`` (recognisable, and
saying which process made it), copies into it the tables an item's queries read and their foreign-key
parents (once; later items add what they need), and drops it when the finder closes or the process exits.
A worker killed before it could drop its database leaves one behind: the next scratch database made on
that server drops those of dead processes of this machine, and ``rose db scratch URL --drop`` drops them
on demand. Nothing is ever written to the user's database: it is read with a read-only session.

The copy: PostgreSQL tables get their columns' own types (``format_type``), NOT NULL, the primary key,
single-column UNIQUE constraints and foreign keys (``NOT VALID``: they hold for every change, as on the
user's database), rows streamed with ``COPY``; rows are named by ``ctid``. MySQL/MariaDB tables are made
from ``SHOW CREATE TABLE`` as InnoDB (so that a rollback undoes a candidate), rows streamed and inserted,
and an invisible ``rose_rowid`` column (``SELECT *`` does not see it) names each row. Both are bounded by
``evidence_max_db_bytes`` of row data and ``evidence_budget_s`` per copy; past either, the witness search is
skipped with the reason recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import socket
import time
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from rose_sql.config import Config
from rose_sql.engines.base import ColumnInfo, Limits, TableInfo
from rose_sql.engines.source import SCHEMES, Remote, redact
from rose_sql.evidence.remote import EngineSpace, fetch_capped, tables_of
from rose_sql.execute import ResultSet

PREFIX = "rose_scratch_"
ROWID = "rose_rowid"
"""The invisible column that names a row of a MySQL scratch table."""


class _Skip(Exception):
    """This module's signal: the copy cannot be made; :func:`server_space` and ``need`` return why."""


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


def _kind(url: str) -> str | None:
    return SCHEMES.get(url.partition("://")[0].lower())


# --------------------------------------------------------------------------- the servers' dialects


class _Server:
    """What differs between PostgreSQL and MySQL for creating, listing and dropping scratch databases."""

    def __init__(self, url: str) -> None:
        self.url = url

    def list(self) -> list[str]:
        raise NotImplementedError

    def create(self, name: str) -> None:
        raise NotImplementedError

    def drop(self, name: str, *, force: bool) -> None:
        raise NotImplementedError


class _PgServer(_Server):
    def _admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.url, autocommit=True, connect_timeout=10, application_name="rose-sql")

    def list(self) -> list[str]:
        with self._admin() as c:
            rows = c.execute("SELECT datname FROM pg_database WHERE datname LIKE 'rose\\_scratch\\_%' ORDER BY 1")
            return [r[0] for r in rows.fetchall()]

    def create(self, name: str) -> None:
        from psycopg import sql

        with self._admin() as c:
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def drop(self, name: str, *, force: bool) -> None:
        from psycopg import sql

        with self._admin() as c:  # without FORCE, PostgreSQL refuses a database someone is connected to
            text = "DROP DATABASE IF EXISTS {} WITH (FORCE)" if force else "DROP DATABASE IF EXISTS {}"
            c.execute(sql.SQL(text).format(sql.Identifier(name)))


class _MyServer(_Server):
    def _admin(self) -> Any:
        import pymysql

        from rose_sql.engines.mysql import connect_args

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
        from rose_sql.engines.mysql import quote

        c = self._admin()
        try:
            with c.cursor() as cur:
                cur.execute(f"CREATE DATABASE {quote(name)} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        finally:
            c.close()

    def drop(self, name: str, *, force: bool) -> None:
        from rose_sql.engines.mysql import quote

        c = self._admin()
        try:
            with c.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS {quote(name)}")
        finally:
            c.close()


def server(url: str) -> _Server:
    kind = _kind(url)
    if kind == "postgresql":
        return _PgServer(url)
    if kind == "mysql":
        return _MyServer(url)
    from rose_sql.errors import UsageError

    raise UsageError(f"{redact(url)}: name a PostgreSQL or MySQL/MariaDB server (postgresql://, mysql://)")


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


def server_space(db: Remote, scratch: str, config: Config, limits: Limits) -> EngineSpace | str:
    """A scratch database on the server ``scratch`` names, for ``db``'s witness search, or why there is none."""
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
        return (PgSpace if db.kind == "postgresql" else MySpace)(db, s, name, config, limits)
    except BaseException as e:
        with contextlib.suppress(Exception):
            s.drop(name, force=True)
        if isinstance(e, Exception):
            return f"could not open the scratch database {name}: {type(e).__name__}: {e}"
        raise


# --------------------------------------------------------------------------- a scratch copy


class ServerSpace(EngineSpace):
    """A scratch database holding copies of the tables the items read (see the module docstring)."""

    def __init__(self, db: Remote, srv: _Server, name: str, config: Config, limits: Limits) -> None:
        self.db = db
        self.server = srv
        self.name = name
        """The scratch database's name."""
        self.max_bytes = config.evidence_max_db_bytes
        self.copy_seconds = config.evidence_budget_s
        self.copied_bytes = 0
        self.infos: dict[str, TableInfo] = {}
        self.unique: list[tuple[str, str]] = []
        self._source_tables: dict[str, str] | None = None  # lower-case name -> the user's name
        self._refused: dict[str, str] = {}  # tables whose copy failed, and why (not tried again)
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
                self._execute(f"DROP TABLE IF EXISTS {self.quote(t)} CASCADE", timeout=self.limits.timeout_s)

    def _count(self, nbytes: int, deadline: float) -> None:
        self.copied_bytes += nbytes
        if self.copied_bytes > self.max_bytes:
            raise _Skip(f"the tables the queries read hold more than {self.max_bytes // 2**20} MiB")
        if time.monotonic() > deadline:
            raise _Skip(f"copying the tables the queries read took longer than {self.copy_seconds:g} s")

    def need(self, tables: Iterable[str]) -> str | None:
        try:
            self._need({t.lower() for t in tables})
        except _Skip as e:
            return str(e)
        return None

    def _need(self, wanted: set[str]) -> None:
        src = None
        try:
            if self._source_tables is None:
                src = self._source()
                self._source_tables = {n.lower(): n for n in self._source_names(src)}
            todo: dict[str, TableInfo] = {}
            queue = [self._source_tables[t] for t in sorted(wanted) if t in self._source_tables]
            while queue:
                t = queue.pop()
                if t in self.infos or t in todo:
                    continue
                if t in self._refused:
                    raise _Skip(self._refused[t])
                src = src or self._source()
                todo[t] = self._read(src, t)
                queue += [p for _, p, _ in todo[t].foreign_keys if p not in self.infos and p not in todo]
            if not todo:
                return
            deadline, before = time.monotonic() + self.copy_seconds, self.copied_bytes
            try:
                for info in todo.values():
                    self._copy(src, info, deadline)
                self._finish(list(todo.values()))
            except Exception as e:
                why = str(e) if isinstance(e, _Skip) else f"copying failed: {type(e).__name__}: {e}"
                self._refused.update(dict.fromkeys(todo, why))
                self._undo(list(todo))
                self.copied_bytes = before
                raise _Skip(why) from None
            self.infos.update(todo)
            self.tables = tables_of(list(self.infos.values()), self.unique)
        except _Skip:
            raise
        except Exception as e:  # the user's database could not be read
            raise _Skip(f"copying into the scratch database failed: {type(e).__name__}: {e}") from None
        finally:
            if src is not None:
                with contextlib.suppress(Exception):
                    src.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._close_conn()
        self.server.drop(self.name, force=True)

    def _close_conn(self) -> None:
        raise NotImplementedError


class PgSpace(ServerSpace):
    dialect = "postgres"
    locator = "ctid"

    def _open(self, url: str, limits: Limits) -> None:
        import psycopg

        from rose_sql.engines.postgres import PostgreSQL
        from rose_sql.engines.postgres import _Conn as PgConn

        self.errors = (psycopg.Error,)
        ms = max(1, int(limits.timeout_s * 1000))
        options = f"-c statement_timeout={ms} -c lock_timeout={ms} -c max_parallel_workers_per_gather=0"
        self._conn = psycopg.connect(
            url, autocommit=True, connect_timeout=10, application_name="rose-sql-scratch", options=options
        )
        self._conn.prepare_threshold = None
        engine = PostgreSQL(limits)
        wrapped = PgConn(self._conn, url)
        EngineSpace.__init__(self, limits, lambda name: engine._allowed(wrapped, name))

    def _close_conn(self) -> None:
        self._conn.close()

    def alive(self) -> bool:
        return not self._conn.broken and not self._conn.closed

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
        import psycopg

        c = self._conn
        own = c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # outside a candidate: one of its own
        if own:
            c.execute("BEGIN")
        try:
            c.execute("SET TRANSACTION READ ONLY")  # allowed after the candidate's writes: nothing more is written
            c.execute(f"SET LOCAL statement_timeout = {max(1, int(timeout * 1000))}")
            c.execute("DECLARE rose_witness NO SCROLL CURSOR FOR " + sql)
            first = c.execute("FETCH FORWARD 1000 FROM rose_witness")
            columns = tuple(d.name for d in first.description or ())
            pending: list[Sequence[Sequence[Any]]] = [first.fetchall()]

            def fetch(n: int) -> Sequence[Sequence[Any]]:
                if pending:
                    return pending.pop()
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
        import psycopg

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
        from psycopg import sql

        rel = sql.Identifier(table).as_string(src)
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
        from psycopg import sql

        c = self._conn
        q = sql.Identifier
        parts = [
            sql.SQL("{} {}{}").format(q(col.name), sql.SQL(col.type), sql.SQL(" NOT NULL" if col.notnull else ""))
            for col in info.columns
        ]
        if info.primary_key:
            parts.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(q(k) for k in info.primary_key)))
        parts += [sql.SQL("UNIQUE ({})").format(q(col)) for t, col in self.unique if t == info.name]
        try:
            c.execute(sql.SQL("CREATE TABLE {} ({})").format(q(info.name), sql.SQL(", ").join(parts)))
        except Exception as e:
            raise _Skip(f"table {info.name} cannot be made in the scratch database: {type(e).__name__}: {e}") from None
        with (
            src.cursor().copy(sql.SQL("COPY {} TO STDOUT").format(q(info.name))) as out,
            c.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(q(info.name))) as into,
        ):
            for chunk in out:
                self._count(len(chunk), deadline)
                into.write(chunk)

    def _finish(self, infos: Sequence[TableInfo]) -> None:
        from psycopg import sql

        for info in infos:
            for col, parent, ref in info.foreign_keys:
                if parent not in self.infos and all(i.name != parent for i in infos):
                    continue
                with contextlib.suppress(Exception):  # a parent column without a unique key: no constraint
                    self._conn.execute(
                        sql.SQL("ALTER TABLE {} ADD FOREIGN KEY ({}) REFERENCES {} ({}) NOT VALID").format(
                            sql.Identifier(info.name), sql.Identifier(col), sql.Identifier(parent), sql.Identifier(ref)
                        )
                    )


class MySpace(ServerSpace):
    dialect = "mysql"
    locator = ROWID

    def _open(self, url: str, limits: Limits) -> None:
        import pymysql

        from rose_sql.engines.mysql import MySQL, connect_args
        from rose_sql.engines.mysql import _Conn as MyConn

        self.errors = (pymysql.err.MySQLError,)
        self._conn = pymysql.connect(**connect_args(url), autocommit=True, connect_timeout=10, local_infile=False)
        self.mariadb = "mariadb" in self._conn.get_server_info().lower()
        engine = MySQL(limits)
        wrapped = MyConn(self._conn, self.mariadb, url)
        EngineSpace.__init__(self, limits, lambda name: engine._allowed(wrapped, name))
        with self._conn.cursor() as cur:
            if self.mariadb:
                cur.execute(f"SET SESSION max_statement_time = {limits.timeout_s:.3f}")
            cur.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',STRICT_ALL_TABLES')")

    def quote(self, name: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    def alive(self) -> bool:
        return bool(self._conn.open)

    def _close_conn(self) -> None:
        self._conn.close()

    def _begin_sql(self) -> str:
        return "START TRANSACTION"

    def _execute(self, sql: str, params: Sequence[Any] = (), *, timeout: float) -> tuple[list[str], list[Any]]:
        with self._conn.cursor() as cur:
            cur.execute(sql, list(params) if params else None)
            cols = [d[0] for d in cur.description or ()]
            return cols, list(cur.fetchall()) if cur.description else []

    def _untrusted(self, sql: str, timeout: float) -> ResultSet:
        import pymysql.cursors

        from rose_sql.engines.mysql import EXECUTABLE_COMMENT

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
        import pymysql

        from rose_sql.engines.mysql import connect_args

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
        import pymysql.cursors

        t = self.quote(info.name)
        with src.cursor() as cur:
            cur.execute(f"SHOW CREATE TABLE {t}")
            row = cur.fetchone()
        ddl = re.sub(r"\bENGINE=\w+", "ENGINE=InnoDB", str(row[1]))  # a rollback must undo a candidate
        if ROWID in {c.name for c in info.columns}:
            raise _Skip(f"table {info.name} has a column named {ROWID}, the name the scratch copy needs")
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

    def _finish(self, infos: Sequence[TableInfo]) -> None:
        with self._conn.cursor() as cur:
            for info in infos:
                t = self.quote(info.name)
                cur.execute(f"ALTER TABLE {t} ADD COLUMN {ROWID} BIGINT INVISIBLE, ADD INDEX ({ROWID})")
                cur.execute("SET @rose_n = 0")
                cur.execute(f"UPDATE {t} SET {ROWID} = (@rose_n := @rose_n + 1)")
            cur.execute("SET SESSION foreign_key_checks = 1")
