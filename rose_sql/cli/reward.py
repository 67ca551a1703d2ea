"""``rose serve-reward``: the RL reward over HTTP (the server is :mod:`rose_sql.reward.server`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click

from rose_sql.cli.main import err, fail
from rose_sql.cli.options import POSITIVE, ordered, run_options, values_of
from rose_sql.config import Config, RewardConfig, ServeConfig
from rose_sql.engines import Source
from rose_sql.errors import RoseError, UsageError

_SERVE = ServeConfig(db_root=Source.folder("."))
"""Read for its defaults only (``--db-root`` has none)."""
_REWARD = _SERVE.reward
MB = 2**20

ORDER = (
    *("db_root", "host", "port", "preset", "max_steps", "timeout", "deadline", "workers", "query_threads", "schedule"),
    *("alpha_start", "alpha_end", "total_steps", "max_body_mb", "max_items", "max_connections", "header_timeout"),
    *("body_timeout", "allow_privileged_login", "verbose"),
)
"""The order ``rose serve-reward --help`` lists its options in (the fields' options, and its own)."""
_OWN: dict[str, click.Parameter] = {
    "db_root": click.Option(
        ["--db", "--db-root", "db_root"],
        required=True,
        help="Folder holding <db_id>/<db_id>.sqlite, or a URL (postgresql://, mysql://, duckdb://; see rose run --db).",
    ),
    "max_body_mb": click.Option(
        ["--max-body-mb"],
        type=POSITIVE,
        default=_SERVE.max_body_bytes / MB,
        show_default=True,
        help="Largest request body, in MiB (413 beyond, before it is read).",
    ),
    "allow_privileged_login": click.Option(
        ["--allow-privileged-login"],
        is_flag=True,
        help=(
            "Serve with a --db login that may do more than read (see rose run --allow-privileged-login), "
            "warned; without it such a login is refused (a URL with {db_id} is not checked: it names no "
            "database yet)."
        ),
    ),
    "verbose": click.Option(["--verbose"], is_flag=True, help="Log every request to stderr."),
}
PARAMS = ordered({**run_options(RewardConfig, ServeConfig), **_OWN}, ORDER)


@click.command("serve-reward", params=PARAMS)
def serve_reward_cmd(
    db_root: str, max_body_mb: float, allow_privileged_login: bool, verbose: bool, **values: Any
) -> None:
    """Serve the RL reward over HTTP in OpenRLHF's remote reward shape.

    POST {"query": [...], "prompts": [...], "labels": [...]} to http://HOST:PORT/get_reward and get
    {"rewards": [...], "scores": [...], "extra_logs": {...}, "status": [...], "errors": [...]}. A label is
    {"gold_sql": SQL, "db_id": ID} (JSON) or "SQL<TAB>db_id", one per query. GET /health answers
    {"status": "ok"}. Every bound and its default: docs/rewards.md.

    Example:

    \b
        rose serve-reward --db-root spider/database --port 5000
        curl -s http://127.0.0.1:5000/get_reward -d '{"query": ["SELECT count(*) FROM singer"],
             "labels": ["SELECT count(*) FROM singer\\tconcert_singer"]}'
    """
    from rose_sql.cli.run import check_login, databases
    from rose_sql.reward.server import RewardServer

    try:
        root = databases(db_root, Config(), option="--db")
        if not root.info.files and not root.per_db:  # one database: its login is checked as rose run's is
            check_login(root, "", Config(), allow_privileged=allow_privileged_login)
    except RoseError as e:
        fail(e)
    try:
        reward = replace(_REWARD, **values_of(RewardConfig, values))
        served = replace(
            _SERVE,
            **values_of(ServeConfig, values),
            db_root=root,
            max_body_bytes=int(max_body_mb * MB),
            max_pending_bytes=max(_SERVE.max_pending_bytes, int(max_body_mb * MB)),
            reward=reward,
        )
        server = RewardServer(served, verbose=verbose)
    except (OSError, ValueError) as e:
        fail(UsageError(f"cannot start the reward server: {e}"))
        return
    err.print(f"rose reward server on {server.url} (databases: {root}); Ctrl-C stops it", highlight=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
