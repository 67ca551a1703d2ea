"""Privileged logins refused for ``--db``, the catalog views and functions that expose the server refused
whatever the role, and temporary disk bounded where each engine allows (issue 22, findings 3 and 4).

Against this machine's PostgreSQL and MariaDB (skipped, naming the server, when one cannot be reached):
each test makes its roles and users under unique names and drops them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from servers import superhero_fixture, with_database  # noqa: F401

from rose_sql.cli.main import main
from rose_sql.cli.run import check_login
from rose_sql.config import Config
from rose_sql.engines import Database, Source
from rose_sql.engines.execute import Executor
from rose_sql.errors import UsageError
from rose_sql.items.load import Item
from rose_sql.run.evaluate import evaluate_item

MB = 2**20
SMALL = Config(workers=1, engine_memory_bytes=64 * MB, engine_temp_bytes=64 * MB)
"""A 64 MB memory and temporary-disk limit: the sort bombs below need several times that."""
SORT_BOMB = {
    "sqlite": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 20000000) "
    "SELECT x FROM c ORDER BY x DESC",
    "postgresql": "SELECT g FROM generate_series(1, 20000000) AS g ORDER BY g DESC",
    "duckdb": "SELECT range FROM range(20000000) ORDER BY range DESC",
    # filesort's merge files are not bounded on MariaDB 10.11: the bomb is the on-disk temporary table
    "mysql": "SELECT COUNT(*) FROM (SELECT DISTINCT CONCAT(seq, REPEAT('x', 200)) AS v FROM seq_1_to_1500000) AS d",
}


def _name(prefix: str) -> str:
    return f"rose_test_{prefix}_{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------- PostgreSQL roles


@pytest.fixture(name="pg_roles")
def pg_roles_fixture(superhero_on: Callable[[str], tuple[str, str]]) -> Iterator[Callable[..., str]]:
    """``make(*grants, temp_bytes=None)``: a login role on the superhero copy made by ``rose db reader``'s
    function (then ``grants``, each a statement with ``{role}``), its URL; dropped at the end."""
    import psycopg
    from psycopg import sql

    from rose_sql.engines.admin.reader import create_reader

    admin, _ = superhero_on("postgresql")
    made: list[str] = []

    def make(*grants: str, temp_bytes: int | None = None, limit: bool = True) -> str:
        name = _name("pg")
        made.append(name)
        db = Source.parse(admin).locate("superhero")
        create_reader(db, name, None, **({"temp_bytes": temp_bytes} if temp_bytes else {}))
        with psycopg.connect(admin, autocommit=True) as c:
            if not limit:
                c.execute(sql.SQL("ALTER ROLE {} RESET temp_file_limit").format(sql.Identifier(name)))
            for g in grants:
                c.execute(g.format(role=name))
        return with_database(admin, admin.rsplit("/", 1)[1], name)

    yield make
    with psycopg.connect(admin, autocommit=True) as c:
        for name in made:
            role = sql.Identifier(name)
            c.execute(
                sql.SQL("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = {}").format(
                    sql.Literal(name)
                )
            )
            c.execute(sql.SQL("DROP OWNED BY {}").format(role))
            c.execute(sql.SQL("DROP ROLE {}").format(role))


def _refusal(url: str) -> str | None:
    """What check_login says of a login (None: it runs)."""
    try:
        check_login(Source.parse(url), "superhero", Config())
    except UsageError as e:
        return str(e)
    return None


def test_a_postgres_role_with_more_than_reading_is_refused_naming_what_it_may_do(
    pg_roles: Callable[..., str], superhero_on: Callable[[str], tuple[str, str]]
) -> None:
    admin, _ = superhero_on("postgresql")
    superuser = _refusal(admin)
    assert superuser is not None and "is a superuser" in superuser and "rose db reader" in superuser
    assert "--allow-privileged-login" in superuser
    assert _refusal(pg_roles()) is None  # rose db reader's role
    writes = _refusal(pg_roles("GRANT INSERT ON colour TO {role}"))
    assert writes is not None and "may insert, update, delete or truncate rows" in writes
    creates = _refusal(pg_roles("GRANT CREATE ON SCHEMA public TO {role}"))
    assert creates is not None and "may create tables or schemas" in creates
    for predefined in ("pg_read_server_files", "pg_read_all_settings", "pg_monitor"):
        member = _refusal(pg_roles(f"GRANT {predefined} TO {{role}}"))
        assert member is not None and f"is a member of {predefined}" in member, member


def test_rose_run_refuses_a_superuser_url_unless_told_and_then_warns(
    superhero_on: Callable[[str], tuple[str, str]], tmp_path: Path
) -> None:
    """Today's code warned and ran: the run's records and prompts could hold the server's secrets."""
    admin, _ = superhero_on("postgresql")
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": 1, "db_id": "superhero", "gold_sql": "SELECT 1", "pred_sql": "SELECT 1"}))
    args = ["run", str(items), "--db", admin, "--workers", "1"]
    refused = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "a")])
    assert refused.exit_code == 2, refused.output
    assert "is a superuser" in refused.output and "rose db reader" in refused.output
    assert not (tmp_path / "a").exists()
    allowed = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "b"), "--allow-privileged-login"])
    assert allowed.exit_code == 0, allowed.output
    assert "warning" in allowed.output and "is a superuser" in allowed.output


def test_the_reward_server_refuses_a_superuser_url(superhero_on: Callable[[str], tuple[str, str]]) -> None:
    admin, _ = superhero_on("postgresql")
    result = CliRunner().invoke(main, ["serve-reward", "--db", admin, "--port", "0"])
    assert result.exit_code == 2, result.output
    assert "is a superuser" in result.output and "rose db reader" in result.output


def test_the_option_is_refused_where_it_changes_nothing(make_db: Callable[..., Path], tmp_path: Path) -> None:
    db = make_db("CREATE TABLE t (a INT);")
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": 1, "db_id": db.stem, "gold_sql": "SELECT 1", "pred_sql": "SELECT 1"}))
    args = ["run", str(items), "--db", str(db.parent.parent), "--out", str(tmp_path / "o"), "--allow-privileged-login"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "--allow-privileged-login is for server logins" in result.output


def test_rose_db_reader_bounds_the_roles_temporary_files_and_rose_run_warns_without(
    pg_roles: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    reader = pg_roles()
    with psycopg.connect(reader) as c:
        assert c.execute("SHOW temp_file_limit").fetchone() == ("2GB",)  # Config.engine_temp_bytes
    with psycopg.connect(pg_roles(temp_bytes=64 * MB)) as c:
        assert c.execute("SHOW temp_file_limit").fetchone() == ("64MB",)
    check_login(Source.parse(reader), "superhero", Config())
    assert capsys.readouterr().err == ""
    check_login(Source.parse(pg_roles(limit=False)), "superhero", Config())
    warned = capsys.readouterr().err
    assert "has no temp_file_limit" in warned and "SET temp_file_limit = '2048MB'" in warned


def test_the_reader_command_takes_the_limit(pg_roles: Callable[..., str], superhero_on: Callable[..., Any]) -> None:
    import psycopg

    admin, _ = superhero_on("postgresql")
    url = pg_roles()  # made, then made again by the command with another limit
    name = url.split("://", 1)[1].split("@", 1)[0]
    result = CliRunner().invoke(main, ["db", "reader", admin, "--name", name, "--temp-file-limit", "100"])
    assert result.exit_code == 0 and "temporary files at most 100 MiB a session" in result.output, result.output
    with psycopg.connect(url) as c:
        assert c.execute("SHOW temp_file_limit").fetchone() == ("100MB",)


def test_the_reader_command_names_no_bound_where_the_role_has_none(superhero_on: Callable[..., Any]) -> None:
    """MariaDB bounds temporary tables statement by statement, not by role: the message says no bound."""
    import pymysql

    from rose_sql.engines.mysql import connect_args

    admin, _ = superhero_on("mysql")
    name = _name("my")
    try:
        result = CliRunner().invoke(main, ["db", "reader", admin, "--name", name, "--temp-file-limit", "100"])
        assert result.exit_code == 0 and f"created {name}: it can read " in result.output, result.output
        assert "temporary files" not in result.output
    finally:
        with pymysql.connect(**connect_args(admin), autocommit=True) as c, c.cursor() as cur:
            for host in ("%", "localhost"):
                cur.execute("DROP USER IF EXISTS %s@%s", (name, host))


# --------------------------------------------------------------------------- MariaDB users


@pytest.fixture(name="my_users")
def my_users_fixture(superhero_on: Callable[[str], tuple[str, str]]) -> Iterator[Callable[..., str]]:
    """``make(*grants)``: a user made by ``rose db reader``'s function, then granted ``grants`` (each with
    ``{user}``); its URL; dropped at the end."""
    import pymysql

    from rose_sql.engines.admin.reader import create_reader
    from rose_sql.engines.mysql import connect_args

    admin, _ = superhero_on("mysql")
    made: list[str] = []

    def make(*grants: str) -> str:
        name = _name("my")
        made.append(name)
        create_reader(Source.parse(admin).locate("superhero"), name, None)
        with pymysql.connect(**connect_args(admin), autocommit=True) as c, c.cursor() as cur:
            for g in grants:
                for host in ("%", "localhost"):
                    cur.execute(g.format(user=f"'{name}'@'{host}'"))
        return with_database(admin, admin.rsplit("/", 1)[1], name)

    yield make
    with pymysql.connect(**connect_args(admin), autocommit=True) as c, c.cursor() as cur:
        for name in made:
            for host in ("%", "localhost"):
                cur.execute("DROP USER IF EXISTS %s@%s", (name, host))


def test_a_mysql_user_with_file_process_super_or_a_write_grant_is_refused(
    my_users: Callable[..., str], superhero_on: Callable[[str], tuple[str, str]]
) -> None:
    admin, _ = superhero_on("mysql")
    root = _refusal(admin)
    assert root is not None and "ALL PRIVILEGES" in root and "rose db reader" in root
    assert _refusal(my_users()) is None
    for privilege in ("FILE", "PROCESS", "SUPER"):
        found = _refusal(my_users(f"GRANT {privilege} ON *.* TO {{user}}"))
        assert found is not None and privilege in found, found
    database = admin.rsplit("/", 1)[1]
    writes = _refusal(my_users(f"GRANT INSERT ON `{database}`.* TO {{user}}"))
    assert writes is not None and "INSERT" in writes
    grant = _refusal(my_users(f"GRANT SELECT ON `{database}`.* TO {{user}} WITH GRANT OPTION"))
    assert grant is not None and "GRANT OPTION" in grant


def test_grant_lines_are_read_for_their_privileges_only() -> None:
    from rose_sql.engines.mysql import granted

    assert granted("GRANT USAGE ON *.* TO `r`@`%` IDENTIFIED BY PASSWORD '*ABC'") == {"USAGE"}
    assert granted("GRANT SELECT (a, b), INSERT (c) ON `d`.`t` TO `r`@`%`") == {"SELECT", "INSERT"}
    assert granted("GRANT `some_role` TO `r`@`%`") == set()
    assert granted("GRANT ALL PRIVILEGES ON *.* TO `root`@`h` WITH GRANT OPTION") == {"ALL PRIVILEGES", "GRANT OPTION"}


# --------------------------------------------------------------------------- the policy, whatever the role

SECRETS: dict[str, list[str]] = {
    "postgresql": [
        "SELECT rolpassword FROM pg_authid",
        "SELECT passwd FROM pg_catalog.pg_shadow",
        "SELECT * FROM pg_hba_file_rules",
        "SELECT * FROM pg_file_settings",
        "SELECT name, setting FROM pg_settings",
        "SELECT query FROM pg_stat_activity",
        "SELECT * FROM pg_user_mappings",
        "SELECT * FROM pg_largeobject",
        "SELECT current_setting('data_directory')",
        "SELECT pg_stat_get_backend_activity(s) FROM pg_stat_get_backend_idset() AS s",
        "SELECT table_to_xml('pg_authid'::regclass, true, false, '')",
        "SELECT * FROM pg_show_all_settings()",
        "SELECT txid_current()",
        "SELECT pg_current_xact_id()",
    ],
    "mysql": [
        "SELECT User, Password FROM mysql.user",
        "SELECT Priv FROM mysql.global_priv",
        "SELECT INFO FROM information_schema.PROCESSLIST",
        "SELECT * FROM information_schema.GLOBAL_VARIABLES",
        "SELECT trx_query FROM information_schema.INNODB_TRX",
        "SELECT SQL_TEXT FROM performance_schema.events_statements_current",
        "SELECT * FROM sys.processlist",
        "SELECT @@datadir",
        "SELECT @@global.secure_file_priv",
    ],
    "duckdb": [
        "SELECT name, setting FROM pg_settings",
        "SELECT * FROM pg_catalog.pg_settings",
        "SELECT current_setting('temp_directory')",
        "SELECT * FROM duckdb_logs",
        "SELECT * FROM duckdb_settings()",
    ],
}
"""Reads of the server's credentials, files, settings and other sessions, and PostgreSQL's stable
functions that assign a transaction id: each returned rows on today's code under the admin's URL."""


@pytest.mark.parametrize("kind", list(SECRETS))
def test_catalog_views_and_functions_that_expose_the_server_are_refused_whatever_the_role(
    kind: str, superhero_on: Callable[[str], tuple[str, str]]
) -> None:
    admin, _ = superhero_on(kind)
    db = Source.parse(admin).locate("superhero")
    with Executor(Config(workers=1)) as ex:
        for sql in SECRETS[kind]:
            e = ex.run(db, sql)
            assert e.status == "rejected", (sql, e.status, e.error)
        assert ex.run(db, "SELECT count(*) FROM superhero").status == "ok"  # reading the data is not


def test_txid_current_no_longer_consumes_transaction_ids(superhero_on: Callable[[str], tuple[str, str]]) -> None:
    import psycopg

    admin, _ = superhero_on("postgresql")
    db = Source.parse(admin).locate("superhero")
    with psycopg.connect(admin, autocommit=True) as c:
        before = c.execute("SELECT txid_current()").fetchone()
        with Executor(Config(workers=1)) as ex:
            for i in range(5):  # five texts: the execution cache would run one text once
                ex.run(db, f"SELECT txid_current() + {i}")
        after = c.execute("SELECT txid_current()").fetchone()
    # our own two calls (one on today's code's five statements too: it ran them, 6 ids and more)
    assert before is not None and after is not None and after[0] - before[0] <= 2


# --------------------------------------------------------------------------- temporary disk


def _outcome(record: Any) -> tuple[Any, ...]:
    side = record.pred if record.pred is not None and record.pred.status != "ok" else record.gold
    return (side.status, side.limit, record.score, record.unscored_reason)


@pytest.fixture(name="sqlite_bomb")
def sqlite_bomb_fixture(make_db: Callable[..., Path]) -> dict[str, tuple[Any, ...]]:
    """SQLite's outcomes under the 64 MB heap limit: the sort bomb as the prediction, then as the gold."""
    db = make_db("CREATE TABLE t (a INT);", db_id="bomb")
    source = Source.folder(db.parent.parent)
    with Executor(SMALL) as ex:
        pred = evaluate_item(Item(1, "bomb", SORT_BOMB["sqlite"], "SELECT 1"), source, ex)
        gold = evaluate_item(Item(2, "bomb", "SELECT 1", SORT_BOMB["sqlite"]), source, ex)
    assert _outcome(pred) == ("timeout", "memory", 0, None), pred.pred
    assert _outcome(gold) == ("timeout", "memory", None, "gold_error"), gold.gold
    return {"pred": _outcome(pred), "gold": _outcome(gold)}


def _bomb(source: Source, kind: str, config: Config = SMALL) -> dict[str, tuple[Any, ...]]:
    with Executor(config) as ex:
        pred = evaluate_item(Item(1, "superhero", SORT_BOMB[kind], "SELECT 1"), source, ex)
        gold = evaluate_item(Item(2, "superhero", "SELECT 1", SORT_BOMB[kind]), source, ex)
    assert pred.pred is not None and pred.pred.status == "timeout", pred.pred
    return {"pred": _outcome(pred), "gold": _outcome(gold), "error": pred.pred.error}


def test_a_postgres_sort_past_the_readers_temp_file_limit_ends_as_sqlites_heap_limit(
    pg_roles: Callable[..., str], sqlite_bomb: dict[str, tuple[Any, ...]]
) -> None:
    got = _bomb(Source.parse(pg_roles(temp_bytes=64 * MB)), "postgresql")
    assert {k: got[k] for k in ("pred", "gold")} == sqlite_bomb
    assert "temporary disk" in str(got["error"]) and "temp_file_limit" in str(got["error"])


def test_a_duckdb_sort_past_the_memory_limit_ends_as_sqlites_and_spills_nothing(
    superhero_on: Callable[[str], tuple[str, str]], sqlite_bomb: dict[str, tuple[Any, ...]]
) -> None:
    url, _ = superhero_on("duckdb")
    folder = Path(url.partition("://")[2]).parent
    before = sorted(p.name for p in folder.iterdir())
    got = _bomb(Source.parse(url), "duckdb")
    assert {k: got[k] for k in ("pred", "gold")} == sqlite_bomb
    assert sorted(p.name for p in folder.iterdir()) == before  # no .tmp folder beside the file
    db = Database("duckdb", url.partition("://")[2], "superhero")
    from rose_sql.engines import open_engine

    engine = open_engine("duckdb", SMALL.limits)
    try:
        conn = engine.conn(db).conn  # type: ignore[attr-defined]
        assert conn.execute("SELECT current_setting('temp_directory')").fetchone() == ("",)
    finally:
        engine.close()


def test_a_mariadb_temporary_table_past_the_disk_limit_ends_as_sqlites_heap_limit(
    superhero_on: Callable[[str], tuple[str, str]], sqlite_bomb: dict[str, tuple[Any, ...]]
) -> None:
    _, reader = superhero_on("mysql")
    got = _bomb(Source.parse(reader), "mysql")
    assert {k: got[k] for k in ("pred", "gold")} == sqlite_bomb
    assert "temporary disk" in str(got["error"]) and "is full" in str(got["error"])
