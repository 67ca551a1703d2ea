"""PostgreSQL: role settings and the database's own functions, refused (issue 34, symptom 5).

``pg_db_role_setting`` was refused but ``pg_roles.rolconfig`` and ``pg_user.useconfig`` showed the same
settings: a custom setting holding a token on another role reached a record. The database's own
functions were refused by name only, so attribute notation (``SELECT s.leak FROM t s`` calls
``leak(s)``) called a superuser's SECURITY DEFINER function that returned ``pg_read_file``. Now a
function of the database's own schemas may be called only when it is immutable or stable, not SECURITY
DEFINER and not owned by a privileged role, however it is called (by name, as an attribute, through an
operator), and ``rose db reader`` and ``rose run`` say which they found. Each test makes its database and
roles under unique names and drops them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from servers import PG_ADMIN, need, with_database

from rose_sql.cli.main import main


@pytest.fixture(name="pg_policy")
def pg_policy_fixture() -> Iterator[dict[str, str]]:
    """A database with a table ``t``, a superuser's SECURITY DEFINER functions (one called by name, one
    on a row of ``t``, one behind an operator ``t + int``), a volatile one that sleeps, a harmless one
    owned by an ordinary role, and another role whose setting holds a token; its names."""
    need("postgresql")
    import psycopg
    from psycopg import sql

    tag = uuid.uuid4().hex[:10]
    names = {
        "database": f"rose_test_policy_{tag}",
        "other": f"rose_test_other_{tag}",
        "owner": f"rose_test_owner_{tag}",
        "reader": f"rose_test_reader_{tag}",
        "token": f"rose-token-{uuid.uuid4().hex}",
    }
    with psycopg.connect(PG_ADMIN, autocommit=True) as c:
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(names["database"])))
        c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(names["other"])))
        c.execute(
            sql.SQL("ALTER ROLE {} SET rose.token = {}").format(
                sql.Identifier(names["other"]), sql.Literal(names["token"])
            )
        )
        c.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(names["owner"])))
    names["url"] = with_database(PG_ADMIN, names["database"])
    try:
        with psycopg.connect(names["url"], autocommit=True) as c:
            c.execute("CREATE TABLE t (a int); INSERT INTO t VALUES (1), (2)")
            leak = "LANGUAGE sql SECURITY DEFINER AS $$ SELECT pg_read_file('/etc/hostname') $$"
            c.execute(f"CREATE FUNCTION leak() RETURNS text {leak}")
            c.execute(f"CREATE FUNCTION row_leak(t) RETURNS text {leak}")
            c.execute(f"CREATE FUNCTION plus_leak(t, int) RETURNS text {leak}")
            c.execute("CREATE OPERATOR + (LEFTARG = t, RIGHTARG = int, FUNCTION = plus_leak)")
            c.execute("CREATE FUNCTION slow() RETURNS int LANGUAGE sql AS $$ SELECT 1 FROM pg_sleep(2) $$")
            c.execute("CREATE FUNCTION doubled(int) RETURNS int IMMUTABLE LANGUAGE sql AS $$ SELECT $1 * 2 $$")
            c.execute(sql.SQL("ALTER FUNCTION doubled(int) OWNER TO {}").format(sql.Identifier(names["owner"])))
        yield names
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (names["database"],))
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(names["database"])))
            for role in ("reader", "other", "owner"):
                c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(names[role])))


def test_role_settings_and_the_databases_unsafe_functions_are_refused_and_named(
    pg_policy: dict[str, str], tmp_path: Path
) -> None:
    made = CliRunner().invoke(main, ["db", "reader", pg_policy["url"], "--name", pg_policy["reader"]])
    assert made.exit_code == 0, made.output
    said = " ".join(made.output.split())
    assert "the policy refuses 5 of the database's own functions" in said, said
    for found in (
        "public.leak (SECURITY DEFINER: it runs with the rights of its owner postgres)",
        "public.row_leak (SECURITY DEFINER",
        "public.slow (owned by the privileged role postgres)",
        "public.+ (operator of plus_leak",
    ):
        assert found in said, found
    assert "doubled" not in said
    attacks = {
        "rolconfig": f"SELECT rolconfig FROM pg_roles WHERE rolname = '{pg_policy['other']}'",
        "roles_row": "SELECT r FROM pg_catalog.pg_roles r",
        "useconfig": f"SELECT useconfig FROM pg_user WHERE usename = '{pg_policy['other']}'",
        "by_name": "SELECT leak()",
        "qualified": "SELECT public.leak()",
        "attribute": "SELECT s.row_leak FROM t s",
        "attribute_parenthesized": "SELECT (s).row_leak FROM t s",
        "operator": "SELECT s + 1 FROM t s",
        "sleeps": "SELECT slow()",
    }
    items = tmp_path / "items.jsonl"
    rows = [{"id": k, "db_id": "t", "gold_sql": "SELECT 1", "pred_sql": s} for k, s in attacks.items()]
    rows.append({"id": "harmless", "db_id": "t", "gold_sql": "SELECT 1", "pred_sql": "SELECT doubled(a) FROM t"})
    items.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    reader = with_database(pg_policy["url"], pg_policy["database"], pg_policy["reader"])
    out = tmp_path / "out"
    done = CliRunner().invoke(main, ["run", str(items), "--db", reader, "--out", str(out), "--workers", "1"])
    assert done.exit_code == 0, done.output
    assert "the policy refuses 5 of the database's own functions" in " ".join(done.output.split())
    records: dict[str, Any] = {
        r["id"]: r for r in map(json.loads, (out / "items" / "records.jsonl").read_text().splitlines())
    }
    for name in attacks:
        pred = records[name]["pred"]
        assert pred["status"] == "rejected" and pred["preview"] is None, (name, pred)
        assert pred["seconds"] < 1, (name, pred)
    assert records["harmless"]["pred"]["status"] == "ok"
    assert records["harmless"]["pred"]["preview"] == [[2], [4]]
    written = "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())
    assert pg_policy["token"] not in written
