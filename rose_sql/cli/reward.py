"""``rose serve-reward``: the RL reward over HTTP (the server is :mod:`rose_sql.reward.server`)."""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

import click

from rose_sql.cli.main import err, fail
from rose_sql.cli.options import POSITIVE, db_option
from rose_sql.config import MAX_QUERY_THREADS, Config, Schedule, ServeConfig
from rose_sql.engines import Source
from rose_sql.errors import RoseError, UsageError

_SERVE = ServeConfig(db_root=Source.folder("."))
"""Read for its defaults only (``--db-root`` has none)."""
_REWARD = _SERVE.reward
MB = 2**20


@click.command("serve-reward")
@db_option("Folder holding <db_id>/<db_id>.sqlite, or a URL (postgresql://, mysql://, duckdb://; see rose run --db).")
@click.option("--host", default=_SERVE.host, show_default=True, help="Address to bind (loopback by default).")
@click.option("--port", type=int, default=_SERVE.port, show_default=True, help="TCP port (0: any free one).")
@click.option(
    "--max-steps",
    type=click.IntRange(min=1000),
    default=_REWARD.max_steps,
    show_default=True,
    help="SQLite steps one predicted query may take; past them it gets the timeout reward. The same on every "
    "machine (about 1-10 s of one core).",
)
@click.option(
    "--timeout",
    type=POSITIVE,
    default=_REWARD.timeout_s,
    show_default=True,
    help="Wall-clock guard, in seconds, of one predicted query (at most half of --deadline): past it the query is "
    "stopped, its worker process too if SQLite cannot interrupt it, and the item is unscored (wall_guard).",
)
@click.option(
    "--deadline",
    type=POSITIVE,
    default=_SERVE.deadline_s,
    show_default=True,
    help="Seconds within which every request is answered once its body is in; items not scored by then are "
    "unscored with the reason, the others of the request scored.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=_REWARD.processes,
    show_default=True,
    help="Worker processes running the queries and scores (one per core, at most 8).",
)
@click.option(
    "--query-threads",
    type=click.IntRange(min=1, max=MAX_QUERY_THREADS),
    default=_REWARD.workers,
    show_default=True,
    help="Threads running queries in each worker process (they join only while queries are slow).",
)
@click.option(
    "--schedule",
    type=click.Choice(get_args(Schedule)),
    default=_REWARD.schedule,
    show_default=True,
    help="How the syntax weight moves from --alpha-start to --alpha-end over --total-steps.",
)
@click.option(
    "--alpha-start", type=float, default=_REWARD.alpha_start, show_default=True, help="Syntax weight at step 0."
)
@click.option("--alpha-end", type=float, default=_REWARD.alpha_end, show_default=True, help="Syntax weight at the end.")
@click.option("--total-steps", type=int, default=_REWARD.total_steps, show_default=True, help="Steps of the schedule.")
@click.option(
    "--max-body-mb",
    type=POSITIVE,
    default=_SERVE.max_body_bytes / MB,
    show_default=True,
    help="Largest request body, in MiB (413 beyond, before it is read).",
)
@click.option(
    "--max-items",
    type=click.IntRange(min=1),
    default=_SERVE.max_items,
    show_default=True,
    help="Completions one request may hold (413 beyond).",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=_SERVE.max_connections,
    show_default=True,
    help="Open connections at once; past it new ones are answered 503 with Retry-After (health checks still 200).",
)
@click.option(
    "--header-timeout",
    type=POSITIVE,
    default=_SERVE.header_timeout_s,
    show_default=True,
    help="Seconds a request's head may take to arrive; idle kept-alive connections are closed after it.",
)
@click.option(
    "--body-timeout",
    type=POSITIVE,
    default=_SERVE.body_timeout_s,
    show_default=True,
    help="Seconds a request's whole body may take to arrive, whatever the pace (408 past it).",
)
@click.option(
    "--allow-privileged-login",
    is_flag=True,
    help="Serve with a --db login that may do more than read (see rose run --allow-privileged-login), warned; "
    "without it such a login is refused (a URL with {db_id} is not checked: it names no database yet).",
)
@click.option("--verbose", is_flag=True, help="Log every request to stderr.")
def serve_reward_cmd(
    db_root: str,
    host: str,
    port: int,
    max_steps: int,
    timeout: float,
    deadline: float,
    workers: int,
    query_threads: int,
    schedule: str,
    alpha_start: float,
    alpha_end: float,
    total_steps: int,
    max_body_mb: float,
    max_items: int,
    max_connections: int,
    header_timeout: float,
    body_timeout: float,
    allow_privileged_login: bool,
    verbose: bool,
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
        reward = replace(
            _REWARD,
            max_steps=max_steps,
            timeout_s=timeout,
            schedule=schedule,  # type: ignore[arg-type]
            alpha_start=alpha_start,
            alpha_end=alpha_end,
            total_steps=total_steps,
            processes=workers,
            workers=query_threads,
        )
        served = replace(
            _SERVE,
            db_root=root,
            host=host,
            port=port,
            deadline_s=deadline,
            header_timeout_s=header_timeout,
            body_timeout_s=body_timeout,
            max_body_bytes=int(max_body_mb * MB),
            max_pending_bytes=max(_SERVE.max_pending_bytes, int(max_body_mb * MB)),
            max_items=max_items,
            max_connections=max_connections,
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
