"""``rose db``: load a benchmark's SQLite database into another engine, make a read-only role, list or drop
the witness search's scratch databases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from rose_sql.cli.main import console, err, fail
from rose_sql.config import Config
from rose_sql.errors import RoseError, UsageError


@click.group("db")
def db_cmd() -> None:
    """Databases on PostgreSQL, MySQL/MariaDB and DuckDB: copy a SQLite database there, make a reader.

    \b
    Example (the demo's database, after rose demo):
      rose db copy rose-demo-out/db/cycling_league/cycling_league.sqlite duckdb:///tmp/cycling_league.duckdb
    """


@db_cmd.command("copy")
@click.argument("sqlite_file", type=click.Path(path_type=Path))
@click.argument("url")
@click.option("--db-id", help="The db_id the copy serves (default: the file's name without extension).")
@click.option("--replace", is_flag=True, help="Drop and rebuild tables that exist already.")
@click.option(
    "--collation",
    default="utf8mb4_bin",
    show_default=True,
    help="MySQL/MariaDB collation of the tables (the default compares text exactly, as SQLite's = does).",
)
@click.option(
    "--check",
    "check",
    type=click.Path(path_type=Path),
    help="Gold file in the engine's dialect (mini_dev_postgresql.json...): run each of its golds of this db_id "
    "on the copy and, from --sqlite-gold, on the SQLite file, and compare the results.",
)
@click.option(
    "--sqlite-gold",
    type=click.Path(path_type=Path),
    help="The same golds in SQLite's dialect, paired by question_id (default: --check's own SQL on both sides).",
)
def copy_cmd(
    sqlite_file: Path,
    url: str,
    db_id: str | None,
    replace: bool,
    collation: str,
    check: Path | None,
    sqlite_gold: Path | None,
) -> None:
    """Build SQLITE_FILE's tables, keys and rows in the database URL names (the type map: docs/engines.md).

    URL: postgresql://user@host:port/db, mysql://user@host:port/db (MySQL, MariaDB) or
    duckdb:///path/file.duckdb; a {db_id} placeholder names one database per db_id.

    \b
    Examples (the demo's database, after rose demo):
      rose db copy rose-demo-out/db/cycling_league/cycling_league.sqlite duckdb:///tmp/cycling_league.duckdb
      rose run rose-demo-out/items.jsonl --db duckdb:///tmp/cycling_league.duckdb --out runs/
      rose db copy rose-demo-out/db/cycling_league/cycling_league.sqlite \\
          postgresql://postgres@127.0.0.1:5432/postgres --replace
    """
    from rose_sql.engines import Source
    from rose_sql.engines.admin.copy import check_golds, copy_sqlite

    try:
        source = Source.parse(url)
        name = db_id or sqlite_file.stem
        report = copy_sqlite(sqlite_file, source, name, replace=replace, collation=collation)
        pairs = _pairs(check, sqlite_gold, name) if check is not None else []
    except RoseError as e:
        fail(e)
    rows = sum(t.rows for t in report.tables)
    console.print(f"copied {len(report.tables)} tables, {rows} rows of {sqlite_file} into {report.target}")
    for note in report.notes:
        err.print(f"[yellow]note:[/] {note}", highlight=False)
    if not pairs:
        return
    checks = check_golds(sqlite_file, source.locate(name), pairs)
    same = sum(1 for c in checks if c.equal)
    for c in checks:
        if not c.equal:
            console.print(f"  gold {c.id}: {c.detail}", highlight=False)
    console.print(f"golds of {name}: {same} of {len(checks)} return the same results on SQLite and on the copy")


def _pairs(check: Path, sqlite_gold: Path | None, db_id: str) -> list[tuple[Any, str, str]]:
    from rose_sql.items.load import load_gold

    engine = [g for g in load_gold(check).golds if g.db_id == db_id]
    if sqlite_gold is None:
        return [(g.id, g.sql, g.sql) for g in engine]
    lite = {g.id: g.sql for g in load_gold(sqlite_gold).golds if g.db_id == db_id}
    missing = [g.id for g in engine if g.id not in lite]
    if missing:
        raise UsageError(f"{sqlite_gold}: no gold for question_id {missing[0]} of {check}")
    return [(g.id, lite[g.id], g.sql) for g in engine]


@db_cmd.command("reader")
@click.argument("url")
@click.option("--name", default="rose_reader", show_default=True, help="The read-only role (user) to create.")
@click.option("--password", default=None, help="Its password (none: the server's local authentication rules).")
@click.option("--db-id", help="With a {db_id} URL: the database to grant reading on.")
@click.option(
    "--temp-file-limit",
    "temp_mb",
    type=click.IntRange(min=1),
    default=Config().engine_temp_bytes // 2**20,
    show_default=True,
    help="PostgreSQL: the role's temp_file_limit, in MiB: the temporary files (a large sort) one session may "
    "write; a statement past it fails as the memory limit does (a prediction scores 0).",
)
def reader_cmd(url: str, name: str, password: str | None, db_id: str | None, temp_mb: int) -> None:
    """Create a role that can read URL's database and nothing else, with a login (run it as an admin).

    Then evaluate with that role in the URL: rose run ... --db postgresql://rose_reader@host/db

    \b
    Example (as the server's admin, on the database rose db copy filled):
      rose db reader postgresql://postgres@127.0.0.1:5432/postgres --name rose_reader
      rose run rose-demo-out/items.jsonl --db postgresql://rose_reader@127.0.0.1:5432/postgres --out runs/
    """
    from rose_sql.engines import Source
    from rose_sql.engines.admin.reader import create_reader

    try:
        source = Source.parse(url)
        if source.per_db and not db_id:
            raise UsageError("the URL has a {db_id} placeholder: say which database with --db-id")
        made = create_reader(source.locate(db_id or ""), name, password, temp_bytes=temp_mb * 2**20)
    except RoseError as e:
        fail(e)
    bound = "" if made.temp_bytes is None else f", its temporary files at most {made.temp_bytes // 2**20} MiB a session"
    console.print(
        f"created {name}: it can read {made.where} and write nothing{bound}; use it in the URL of --db", highlight=False
    )
    if made.refused:
        console.print(
            f"the policy refuses {len(made.refused)} of the database's own functions to every statement: "
            + "; ".join(made.refused),
            highlight=False,
        )


@db_cmd.command("scratch")
@click.argument("url")
@click.option("--drop", is_flag=True, help="Drop those left behind by processes of this machine that are gone.")
@click.option(
    "--all", "every", is_flag=True, help="With --drop: drop every scratch database, in use or not (no run active)."
)
def scratch_cmd(url: str, drop: bool, every: bool) -> None:
    """List (or drop) the scratch databases the witness search made on the server URL names.

    A run drops its own (rose_scratch_<host>_<pid>_<random>) when it ends; a worker that was killed leaves
    its one behind, dropped by the next run on this machine or by this command.

    \b
    Examples:
      rose db scratch postgresql://postgres@127.0.0.1:5432/postgres
      rose db scratch postgresql://postgres@127.0.0.1:5432/postgres --drop
    """
    from rose_sql.engines.spaces.scratch import drop_leftovers, leftovers

    try:
        names = drop_leftovers(url, every=every) if drop else leftovers(url)
    except RoseError as e:
        fail(e)
    except Exception as e:  # the server cannot be reached
        from rose_sql.engines import redact

        fail(UsageError(f"{redact(url)}: {type(e).__name__}: {e}"))
    verb = "dropped" if drop else "found"
    console.print(f"{verb} {len(names)} scratch database(s)" + "".join(f"\n  {n}" for n in names), highlight=False)
