"""``rose db reader``: a role that can read one database and write nothing, for the URL of ``--db``.

PostgreSQL: ``CREATE ROLE name LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE`` with
``default_transaction_read_only = on``, a ``temp_file_limit`` (the temporary files one session may
write: a sort past it fails, as the memory limit does; only a superuser may change it), ``CONNECT`` on
the database, ``USAGE`` on its schemas and
``SELECT`` on their tables (now and, through default privileges, later). MySQL / MariaDB: ``CREATE USER
name@'%'`` and ``name@'localhost'`` with ``SELECT`` on the database's tables only. Run it with an
administrator's URL; running it again grants again.
"""

from __future__ import annotations

from dataclasses import dataclass

from rose_sql.config import Config
from rose_sql.engines.kinds import Database
from rose_sql.errors import UsageError

TEMP_BYTES = Config().engine_temp_bytes
"""The PostgreSQL reader's ``temp_file_limit`` unless told otherwise (``Config.engine_temp_bytes``)."""


@dataclass(frozen=True, slots=True)
class Reader:
    """The role :func:`create_reader` made."""

    where: str
    """Where it can read, for people."""
    temp_bytes: int | None = None
    """The temporary files one of its sessions may write, where the role itself bounds them (PostgreSQL's
    ``temp_file_limit``); None where it does not (MariaDB bounds them statement by statement)."""
    refused: tuple[str, ...] = ()
    """The database's own functions (and operators) the policy refuses to the role's statements, with why."""


def create_reader(db: Database, name: str, password: str | None, *, temp_bytes: int = TEMP_BYTES) -> Reader:
    """Create (or re-grant) the read-only role ``name`` on ``db``'s database, its PostgreSQL temporary files
    bounded to ``temp_bytes`` a session."""
    if db.kind == "postgresql":
        where, refused = _postgres(db, name, password, temp_bytes)
        return Reader(where, temp_bytes, refused)
    if db.kind == "mysql":
        where, refused = _mysql(db, name, password)
        return Reader(where, None, refused)
    raise UsageError(f"{db.info.name} databases are always opened read-only: no role is needed")


def _postgres(db: Database, name: str, password: str | None, temp_bytes: int) -> tuple[str, tuple[str, ...]]:
    import psycopg
    from psycopg import sql

    from rose_sql.engines.postgres import read_functions

    role = sql.Identifier(name)
    with psycopg.connect(db.target, autocommit=True) as conn:
        database = conn.execute("SELECT current_database()").fetchone()
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
        verb = "ALTER" if exists else "CREATE"
        conn.execute(sql.SQL(verb + " ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION").format(role))
        if password is not None:
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(role, sql.Literal(password)))
        conn.execute(sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(role))
        kb = max(1, temp_bytes // 1024)  # the setting's unit
        conn.execute(sql.SQL("ALTER ROLE {} SET temp_file_limit = {}").format(role, sql.Literal(f"{kb}kB")))
        assert database is not None
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(database[0]), role))
        schemas = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'"
        ).fetchall()
        for (schema,) in schemas:
            s = sql.Identifier(schema)
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(s, role))
            conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(s, role))
            conn.execute(sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA {} GRANT SELECT ON TABLES TO {}").format(s, role))
        refused = read_functions(conn, privileged_login=False).found()
    return db.shown, tuple(refused)


def _mysql(db: Database, name: str, password: str | None) -> tuple[str, tuple[str, ...]]:
    import pymysql

    from rose_sql.engines.mysql import connect_args, quote, stored_functions

    args = connect_args(db.target)
    database = args.get("database")
    if not database:
        raise UsageError(f"{db.shown}: the URL names no database")
    with pymysql.connect(**args, autocommit=True) as conn, conn.cursor() as cur:
        for host in ("%", "localhost"):
            cur.execute("CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s", (name, host, password or ""))
            cur.execute(f"GRANT SELECT ON {quote(database)}.* TO %s@%s", (name, host))
        refused = stored_functions(conn)
    return db.shown, tuple(refused)
