"""``rose db copy``: a SQLite database's tables, keys and rows built in PostgreSQL, MySQL/MariaDB or DuckDB,
and the check that the golds of a benchmark return the same results on both sides.

The type map (by the column's declared type, SQLite's affinity rules, then what the column holds):

=====================================  ==================  ==================  ===========
SQLite column                          PostgreSQL          MySQL / MariaDB     DuckDB
=====================================  ==================  ==================  ===========
INTEGER affinity (``INT`` in the type)  ``bigint``          ``BIGINT``          ``BIGINT``
REAL affinity (``REAL``/``FLOA``/``DOUB``)  ``double precision``  ``DOUBLE``    ``DOUBLE``
TEXT affinity (``CHAR``/``CLOB``/``TEXT``)  ``text``        ``TEXT`` (``VARCHAR(n)`` in a key)  ``VARCHAR``
``DECIMAL(p,s)`` / ``NUMERIC(p,s)``    ``numeric(p,s)``    ``DECIMAL(p,s)``    ``DECIMAL(p,s)``
``DATE`` holding ISO dates             ``date``            ``DATE``            ``DATE``
``DATETIME``/``TIMESTAMP``, ISO values  ``timestamp``      ``DATETIME(6)``     ``TIMESTAMP``
``BOOLEAN`` holding 0 and 1            ``boolean``         ``BOOLEAN``         ``BOOLEAN``
BLOB affinity (``BLOB`` or no type)    by the values: as the INTEGER, REAL or TEXT rows above when all
                                       are integers, numbers or text; ``bytea`` / ``LONGBLOB`` / ``BLOB``
                                       when all are blobs; text when mixed
=====================================  ==================  ==================  ===========

A column whose values do not fit its mapped type (text in an INTEGER column, which SQLite allows)
becomes text, and the copy says so. Names are kept, except that PostgreSQL gets plain names
(``[A-Za-z_][A-Za-z0-9_]*``) in lower case: it folds unquoted names so, and mini-dev's PostgreSQL golds
write them unquoted. MySQL tables use ``utf8mb4`` and, by default, the ``utf8mb4_bin`` collation, so
that ``=`` compares text exactly as SQLite does (``--collation`` chooses another; SQLite's ``LIKE`` is
case-insensitive for ASCII under every choice). Primary keys and NOT NULL are declared where the data
satisfies them; foreign keys too, added after the rows (PostgreSQL: ``NOT VALID``, MySQL: with
``foreign_key_checks`` off, as the SQLite file never checked them; DuckDB only where every row
satisfies them, since it checks). Text that is not valid UTF-8 is copied with U+FFFD in place of the bad
bytes, and NUL characters are dropped (PostgreSQL refuses them).
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rose_sql.config import Config
from rose_sql.engines.kinds import Database, Kind, Source
from rose_sql.engines.sqlite import connect_read_only
from rose_sql.errors import UsageError
from rose_sql.sql import quote_identifier

BATCH = 500
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?$")
_DECIMAL = re.compile(r"(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)", re.IGNORECASE)


@dataclass
class Column:
    """A SQLite column and what it becomes."""

    name: str
    declared: str
    notnull: bool
    pk: int
    target: str = ""
    convert: str = ""
    """How values are converted on the way: '' (as they are), 'date', 'timestamp', 'bool', 'text'."""


@dataclass
class TablePlan:
    name: str
    columns: list[Column]
    primary_key: list[str] = field(default_factory=list)
    foreign_keys: list[tuple[list[str], str, list[str]]] = field(default_factory=list)
    rows: int = 0


@dataclass
class CopyReport:
    """What ``rose db copy`` did."""

    target: str
    tables: list[TablePlan] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def target_name(name: str, kind: Kind) -> str:
    """A SQLite table or column name as it is created on ``kind``."""
    return name.lower() if kind == "postgresql" and _PLAIN_NAME.match(name) else name


def quote(name: str, kind: Kind) -> str:
    return "`" + name.replace("`", "``") + "`" if kind == "mysql" else quote_identifier(name)


# --------------------------------------------------------------------------- reading and planning


def plan(src: sqlite3.Connection, kind: Kind, notes: list[str]) -> list[TablePlan]:
    """The tables of the SQLite database as they will be created on ``kind``, parents before children."""
    names = [
        r[0]
        for r in src.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        )
    ]
    plans: dict[str, TablePlan] = {}
    for name in names:
        q = quote_identifier(name)
        cols = [
            Column(r[1], (r[2] or "").upper(), bool(r[3]), int(r[5])) for r in src.execute(f"PRAGMA table_info({q})")
        ]
        t = TablePlan(name, cols, [c.name for c in sorted((c for c in cols if c.pk), key=lambda c: c.pk)])
        t.rows = src.execute(f"SELECT count(*) FROM {q}").fetchone()[0]
        keyed = set(t.primary_key)
        fks: dict[int, tuple[list[str], str, list[str]]] = {}
        for r in src.execute(f"PRAGMA foreign_key_list({q})"):
            entry = fks.setdefault(r[0], ([], r[2], []))
            entry[0].append(r[3])
            entry[2].append(r[4])
        t.foreign_keys = list(fks.values())
        for cols_, _, _ in t.foreign_keys:
            keyed |= set(cols_)
        for c in cols:
            _type(src, name, c, kind, c.name in keyed, notes)
        if t.primary_key and not _unique_and_present(src, name, t.primary_key):
            notes.append(f"{name}: primary key {t.primary_key} not declared (the data has NULLs or duplicates in it)")
            t.primary_key = []
        for c in cols:
            if (
                c.notnull
                and src.execute(f"SELECT 1 FROM {q} WHERE {quote_identifier(c.name)} IS NULL LIMIT 1").fetchone()
            ):
                c.notnull = False
        plans[name] = t
    return _parents_first(plans)


def _unique_and_present(src: sqlite3.Connection, table: str, cols: list[str]) -> bool:
    q, cs = quote_identifier(table), ", ".join(quote_identifier(c) for c in cols)
    nulls = " OR ".join(f"{quote_identifier(c)} IS NULL" for c in cols)
    if src.execute(f"SELECT 1 FROM {q} WHERE {nulls} LIMIT 1").fetchone():
        return False
    return src.execute(f"SELECT 1 FROM {q} GROUP BY {cs} HAVING count(*) > 1 LIMIT 1").fetchone() is None


def _parents_first(plans: dict[str, TablePlan]) -> list[TablePlan]:
    done: list[TablePlan] = []
    seen: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in seen or name not in plans or name in path:
            return
        for _, parent, _ in plans[name].foreign_keys:
            visit(parent, (*path, name))
        seen.add(name)
        done.append(plans[name])

    for name in plans:
        visit(name, ())
    return done


def _storage(src: sqlite3.Connection, table: str, col: str) -> dict[str, int]:
    c, t = quote_identifier(col), quote_identifier(table)
    return dict(src.execute(f"SELECT typeof({c}), count(*) FROM {t} GROUP BY 1").fetchall())


def _all_match(src: sqlite3.Connection, table: str, col: str, pattern: re.Pattern[str]) -> bool:
    c, t = quote_identifier(col), quote_identifier(table)
    return all(
        isinstance(v, str) and pattern.match(v)
        for (v,) in src.execute(f"SELECT DISTINCT {c} FROM {t} WHERE {c} IS NOT NULL")
    )


def _type(src: sqlite3.Connection, table: str, c: Column, kind: Kind, keyed: bool, notes: list[str]) -> None:
    """Choose ``c.target`` and ``c.convert`` (see the module's type map)."""
    held = _storage(src, table, c.name)
    kinds = set(held) - {"null"}
    d = c.declared
    text = {"postgresql": "text", "mysql": "TEXT", "duckdb": "VARCHAR"}[kind]
    bigint = {"postgresql": "bigint", "mysql": "BIGINT", "duckdb": "BIGINT"}[kind]
    double = {"postgresql": "double precision", "mysql": "DOUBLE", "duckdb": "DOUBLE"}[kind]
    blob = {"postgresql": "bytea", "mysql": "LONGBLOB", "duckdb": "BLOB"}[kind]

    def as_text() -> None:
        c.target, c.convert = text, "text"
        if kind == "mysql" and keyed:
            longest = src.execute(
                f"SELECT max(length({quote_identifier(c.name)})) FROM {quote_identifier(table)}"
            ).fetchone()[0]
            c.target = f"VARCHAR({max(64, int(longest or 0))})" if (longest or 0) <= 768 else "TEXT"

    if "INT" in d:
        if kinds <= {"integer"}:
            c.target = bigint
        else:
            notes.append(f"{table}.{c.name}: declared {d} but holds {sorted(kinds)}: copied as text")
            as_text()
    elif any(x in d for x in ("CHAR", "CLOB", "TEXT")):
        as_text()
    elif any(x in d for x in ("REAL", "FLOA", "DOUB")):
        c.target = double if kinds <= {"integer", "real"} else ""
        if not c.target:
            notes.append(f"{table}.{c.name}: declared {d} but holds {sorted(kinds)}: copied as text")
            as_text()
    elif d == "" or "BLOB" in d:
        if not kinds or kinds == {"text"}:
            as_text()
        elif kinds <= {"integer"}:
            c.target = bigint
        elif kinds <= {"integer", "real"}:
            c.target = double
        elif kinds == {"blob"}:
            c.target = blob
        else:
            notes.append(f"{table}.{c.name}: no declared type and mixed values {sorted(kinds)}: copied as text")
            as_text()
    else:  # NUMERIC affinity: DECIMAL, NUMERIC, DATE, DATETIME, BOOLEAN...
        m = _DECIMAL.search(d)
        if "BOOL" in d and kinds <= {"integer"} and _values_in(src, table, c.name, {0, 1}):
            c.target, c.convert = ("BOOLEAN" if kind != "postgresql" else "boolean"), "bool"
        elif "DATETIME" in d or "TIMESTAMP" in d:
            if kinds <= {"text"} and _all_match(src, table, c.name, _ISO_TIME):
                c.target = {"postgresql": "timestamp", "mysql": "DATETIME(6)", "duckdb": "TIMESTAMP"}[kind]
                c.convert = "timestamp"
            else:
                as_text()
        elif "DATE" in d:
            if kinds <= {"text"} and _all_match(src, table, c.name, _ISO_DATE):
                c.target, c.convert = ("date" if kind == "postgresql" else "DATE"), "date"
            else:
                as_text()
        elif m is not None and kinds <= {"integer", "real"}:
            p, s = int(m.group(1)), int(m.group(2) or 0)
            c.target = f"numeric({p},{s})" if kind == "postgresql" else f"DECIMAL({p},{s})"
        elif kinds <= {"integer"}:
            c.target = bigint
        elif kinds <= {"integer", "real"}:
            c.target = double
        else:
            notes.append(f"{table}.{c.name}: declared {d or 'NUMERIC'} but holds {sorted(kinds)}: copied as text")
            as_text()


def _values_in(src: sqlite3.Connection, table: str, col: str, allowed: set[int]) -> bool:
    c, t = quote_identifier(col), quote_identifier(table)
    return all(v in allowed for (v,) in src.execute(f"SELECT DISTINCT {c} FROM {t} WHERE {c} IS NOT NULL"))


def _value(v: Any, convert: str) -> Any:
    if v is None:
        return None
    if convert == "text":
        if isinstance(v, bytes):
            v = v.decode("utf-8", errors="replace")
        elif isinstance(v, float) and math.isfinite(v) and v == int(v):
            v = repr(v)
        v = str(v)
        return v.replace("\x00", "")
    if convert == "bool":
        return bool(v)
    if isinstance(v, str):
        return v.replace("\x00", "")
    return v


def _rows(src: sqlite3.Connection, t: TablePlan) -> Iterator[list[tuple[Any, ...]]]:
    cols = ", ".join(quote_identifier(c.name) for c in t.columns)
    cur = src.execute(f"SELECT {cols} FROM {quote_identifier(t.name)}")
    converts = [c.convert for c in t.columns]
    while True:
        batch = cur.fetchmany(BATCH)
        if not batch:
            return
        yield [tuple(_value(v, k) for v, k in zip(row, converts, strict=True)) for row in batch]


# --------------------------------------------------------------------------- writing


def copy_sqlite(
    path: Path, source: Source, db_id: str, *, replace: bool = False, collation: str = "utf8mb4_bin"
) -> CopyReport:
    """Build the SQLite database ``path``'s tables, keys and rows in ``source``'s database for ``db_id``
    (created when missing). Tables that exist already are refused unless ``replace``."""
    if not path.is_file():
        raise UsageError(f"{path}: no such SQLite database")
    if source.kind == "sqlite":
        raise UsageError(
            f"{source.shown}: name a PostgreSQL, MySQL or DuckDB database (postgresql://, mysql://, duckdb://)"
        )
    db = source.locate(db_id)
    report = CopyReport(db.shown)
    src = connect_read_only(path)
    src.text_factory = lambda b: b.decode("utf-8", errors="replace")
    try:
        report.tables = plan(src, source.kind, report.notes)
        if source.kind == "postgresql":
            _to_postgres(src, db, report, replace)
        elif source.kind == "mysql":
            _to_mysql(src, db, report, replace, collation)
        else:
            _to_duckdb(src, db, report, replace)
    finally:
        src.close()
    return report


def _create_sql(t: TablePlan, kind: Kind, *, foreign: bool, collation: str | None = None) -> str:
    def q(name: str) -> str:
        return quote(target_name(name, kind), kind)

    lines = [f"{q(c.name)} {c.target}{' NOT NULL' if c.notnull else ''}" for c in t.columns]
    if t.primary_key:
        lines.append(f"PRIMARY KEY ({', '.join(q(c) for c in t.primary_key)})")
    if foreign:
        for cols, parent, refs in t.foreign_keys:
            keys, parent_keys = ", ".join(q(c) for c in cols), ", ".join(q(r) for r in refs)
            lines.append(f"FOREIGN KEY ({keys}) REFERENCES {q(parent)} ({parent_keys})")
    tail = f" DEFAULT CHARSET = utf8mb4 COLLATE = {collation}" if kind == "mysql" and collation else ""
    return f"CREATE TABLE {q(t.name)} (\n  " + ",\n  ".join(lines) + f"\n){tail}"


def _fk_ok(t: TablePlan, parent_of: dict[str, TablePlan], cols: list[str], parent: str, refs: list[str]) -> bool:
    """Whether a foreign key can be declared: it references the parent's whole primary key."""
    p = parent_of.get(parent)
    if p is None:
        return False
    refs = [r or "" for r in refs]
    if refs == [""] * len(refs):
        refs = p.primary_key
    return bool(p.primary_key) and sorted(refs) == sorted(p.primary_key) and len(cols) == len(refs)


def _foreign_keys(report: CopyReport, kind: Kind) -> list[tuple[str, str]]:
    """(table, ``FOREIGN KEY (..) REFERENCES ..``) for each foreign key that can be declared on ``kind``
    after the rows (it references its parent's primary key); the others are noted in the report."""
    tables = {t.name: t for t in report.tables}
    out = []
    for t in report.tables:
        for cols, parent, refs in t.foreign_keys:
            if not _fk_ok(t, tables, cols, parent, refs):
                report.notes.append(f"{t.name}: foreign key {cols} -> {parent} not declared (not its primary key)")
                continue
            ref = [r for r in refs if r] or tables[parent].primary_key
            keys = ", ".join(quote(target_name(c, kind), kind) for c in cols)
            parent_keys = ", ".join(quote(target_name(r, kind), kind) for r in ref)
            out.append(
                (
                    target_name(t.name, kind),
                    f"FOREIGN KEY ({keys}) REFERENCES {quote(target_name(parent, kind), kind)} ({parent_keys})",
                )
            )
    return out


def _to_postgres(src: sqlite3.Connection, db: Database, report: CopyReport, replace: bool) -> None:
    import psycopg

    _ensure_database_postgres(db)
    with psycopg.connect(db.target, autocommit=False) as conn:
        for t in reversed(report.tables):
            name = quote(target_name(t.name, "postgresql"), "postgresql")
            exists = conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()
            if exists and exists[0] is not None:
                if not replace:
                    raise UsageError(f"{db.shown}: table {t.name} exists already; pass --replace to rebuild it")
                conn.execute(f"DROP TABLE {quote(target_name(t.name, 'postgresql'), 'postgresql')} CASCADE")
        for t in report.tables:
            conn.execute(_create_sql(t, "postgresql", foreign=False))
            cols = ", ".join(quote(target_name(c.name, "postgresql"), "postgresql") for c in t.columns)
            with conn.cursor().copy(
                f"COPY {quote(target_name(t.name, 'postgresql'), 'postgresql')} ({cols}) FROM STDIN"
            ) as cp:
                for batch in _rows(src, t):
                    for row in batch:
                        cp.write_row(row)
        for table, fk in _foreign_keys(report, "postgresql"):
            conn.execute(f"ALTER TABLE {_pg(table)} ADD {fk} NOT VALID")
        conn.commit()
    with psycopg.connect(db.target, autocommit=True) as conn:
        conn.execute("ANALYZE")


def _pg(name: str) -> str:
    return quote(target_name(name, "postgresql"), "postgresql")


def _ensure_database_postgres(db: Database) -> None:
    import psycopg

    params: dict[str, Any] = dict(psycopg.conninfo.conninfo_to_dict(db.target))
    name = str(params.get("dbname") or "")
    try:
        psycopg.connect(db.target, connect_timeout=10).close()
        return
    except psycopg.OperationalError as e:
        if "does not exist" not in str(e) or not name:
            raise UsageError(f"{db.shown}: {e}") from None
    params["dbname"] = "postgres"
    with psycopg.connect(psycopg.conninfo.make_conninfo(**params), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {quote(name, 'postgresql')}")


def _to_mysql(src: sqlite3.Connection, db: Database, report: CopyReport, replace: bool, collation: str) -> None:
    import pymysql

    from rose_sql.engines.mysql import connect_args

    args = connect_args(db.target)
    database = args.pop("database", None)
    if not database:
        raise UsageError(f"{db.shown}: the URL names no database")
    with pymysql.connect(**args, autocommit=True) as admin, admin.cursor() as cur:
        charset = f"DEFAULT CHARACTER SET utf8mb4 COLLATE {collation}"
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {quote(database, 'mysql')} {charset}")
    conn = pymysql.connect(**args, database=database, autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION foreign_key_checks = 0")
            for t in report.tables:
                cur.execute(
                    "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
                    (t.name,),
                )
                if cur.fetchone():
                    if not replace:
                        raise UsageError(f"{db.shown}: table {t.name} exists already; pass --replace to rebuild it")
                    cur.execute(f"DROP TABLE {quote(t.name, 'mysql')}")
            for t in report.tables:
                cur.execute(_create_sql(t, "mysql", foreign=False, collation=collation))
                cols = ", ".join(quote(c.name, "mysql") for c in t.columns)
                marks = ", ".join(["%s"] * len(t.columns))
                for batch in _rows(src, t):
                    cur.executemany(f"INSERT INTO {quote(t.name, 'mysql')} ({cols}) VALUES ({marks})", batch)
            for table, fk in _foreign_keys(report, "mysql"):
                cur.execute(f"ALTER TABLE {quote(table, 'mysql')} ADD {fk}")
            cur.execute("SET SESSION foreign_key_checks = 1")
        conn.commit()
    finally:
        conn.close()


def _to_duckdb(src: sqlite3.Connection, db: Database, report: CopyReport, replace: bool) -> None:
    import duckdb

    path = Path(db.target)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = duckdb.connect(str(path))
    try:
        existing = {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        tables = {t.name: t for t in report.tables}
        clash = [t.name for t in report.tables if t.name in existing]
        if clash and not replace:
            raise UsageError(f"{db.shown}: table {clash[0]} exists already; pass --replace to rebuild it")
        for t in reversed(report.tables):
            if t.name in existing:
                conn.execute(f"DROP TABLE {quote(t.name, 'duckdb')} CASCADE")
        for t in report.tables:
            kept = []
            for cols, parent, refs in t.foreign_keys:
                if _fk_ok(t, tables, cols, parent, refs) and _fk_holds(
                    src, t.name, cols, parent, refs or tables[parent].primary_key
                ):
                    kept.append((cols, parent, [r for r in refs if r] or tables[parent].primary_key))
                else:
                    report.notes.append(
                        f"{t.name}: foreign key {cols} -> {parent} not declared on DuckDB "
                        "(DuckDB checks it, and the data breaks it or it is not the parent's key)"
                    )
            plan_ = TablePlan(t.name, t.columns, t.primary_key, kept, t.rows)
            conn.execute(_create_sql(plan_, "duckdb", foreign=True))
            marks = "(" + ", ".join(["?"] * len(t.columns)) + ")"
            for batch in _rows(src, t):  # one statement per batch: executemany is a statement per row
                values = ", ".join([marks] * len(batch))
                conn.execute(
                    f"INSERT INTO {quote(t.name, 'duckdb')} VALUES {values}", [v for row in batch for v in row]
                )
        conn.execute("CHECKPOINT")
    finally:
        conn.close()


def _fk_holds(src: sqlite3.Connection, table: str, cols: list[str], parent: str, refs: Sequence[str]) -> bool:
    q = quote_identifier
    cond = " AND ".join(f"p.{q(r)} = c.{q(c)}" for c, r in zip(cols, refs, strict=False))
    present = " AND ".join(f"c.{q(c)} IS NOT NULL" for c in cols)
    orphan = src.execute(
        f"SELECT 1 FROM {q(table)} c WHERE {present} AND NOT EXISTS (SELECT 1 FROM {q(parent)} p WHERE {cond}) LIMIT 1"
    ).fetchone()
    return orphan is None


# --------------------------------------------------------------------------- checking


@dataclass(frozen=True, slots=True)
class GoldCheck:
    """One gold's result on the SQLite file and on the copy, compared."""

    id: Any
    equal: bool | None
    detail: str


def check_golds(
    path: Path, db: Database, pairs: Sequence[tuple[Any, str, str]], config: Config | None = None
) -> list[GoldCheck]:
    """Run each (id, SQLite gold, engine gold) on both sides and compare the results (our comparator)."""
    from rose_sql.comparison.comparator import compare
    from rose_sql.engines.execute import Executor
    from rose_sql.sql import has_top_level_order_by

    out = []
    lite = Database.file(path, db.db_id)
    with Executor((config or Config()).with_(workers=1)) as ex:
        for id_, lite_sql, engine_sql in pairs:
            a, b = ex.run(lite, lite_sql, role="gold"), ex.run(db, engine_sql, role="gold")
            if a.result is None or b.result is None:
                side = "SQLite" if a.result is None else db.kind
                err = a.error if a.result is None else b.error
                out.append(GoldCheck(id_, None, f"fails on {side}: {err}"))
                continue
            c = compare(b.result, a.result, ordered=has_top_level_order_by(lite_sql))
            out.append(GoldCheck(id_, c.equal, c.detail + (f" ({'; '.join(c.notes)})" if c.notes else "")))
    return out
