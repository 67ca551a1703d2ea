"""``rose serve-reward``: the RL reward over HTTP (the server is :mod:`rose_sql.reward.server`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import get_args

import click

from rose_sql.cli.main import err, fail
from rose_sql.config import Schedule, ServeConfig
from rose_sql.errors import UsageError

_SERVE = ServeConfig(db_root=Path())
"""Read for its defaults only (``--db-root`` has none)."""
_REWARD = _SERVE.reward


@click.command("serve-reward")
@click.option(
    "--db-root", required=True, type=click.Path(path_type=Path), help="Folder holding <db_id>/<db_id>.sqlite."
)
@click.option("--host", default=_SERVE.host, show_default=True, help="Address to bind.")
@click.option("--port", type=int, default=_SERVE.port, show_default=True, help="TCP port (0: any free one).")
@click.option(
    "--timeout", type=float, default=_REWARD.timeout_s, show_default=True, help="Seconds one predicted query may run."
)
@click.option(
    "--deadline",
    type=float,
    default=_SERVE.deadline_s,
    show_default=True,
    help="Seconds within which every request is answered.",
)
@click.option(
    "--workers",
    type=int,
    default=_REWARD.workers,
    show_default=True,
    help="Threads running queries (two per core, at least two).",
)
@click.option(
    "--processes",
    type=int,
    default=_REWARD.processes,
    show_default=True,
    help="Worker processes sharing comparisons and syntax scores (0: threads only).",
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
@click.option("--verbose", is_flag=True, help="Log every request to stderr.")
def serve_reward_cmd(
    db_root: Path,
    host: str,
    port: int,
    timeout: float,
    deadline: float,
    workers: int,
    processes: int,
    schedule: str,
    alpha_start: float,
    alpha_end: float,
    total_steps: int,
    verbose: bool,
) -> None:
    """Serve the RL reward over HTTP in OpenRLHF's remote reward shape.

    POST {"query": [...], "prompts": [...], "labels": [...]} to http://HOST:PORT/get_reward and get
    {"rewards": [...], "scores": [...], "extra_logs": {...}, "errors": [...]}. A label is
    {"gold_sql": SQL, "db_id": ID} (JSON) or "SQL<TAB>db_id". See docs/rewards.md.
    """
    from rose_sql.reward.server import RewardServer

    if not db_root.is_dir():
        fail(UsageError(f"--db-root {db_root} is not a folder"))
        return
    try:
        reward = replace(
            _REWARD,
            timeout_s=timeout,
            schedule=schedule,  # type: ignore[arg-type]
            alpha_start=alpha_start,
            alpha_end=alpha_end,
            total_steps=total_steps,
            workers=workers or _REWARD.workers,
            processes=processes,
        )
        served = replace(_SERVE, db_root=db_root, host=host, port=port, deadline_s=deadline, reward=reward)
        server = RewardServer(served, verbose=verbose)
    except (OSError, ValueError) as e:
        fail(UsageError(f"cannot start the reward server: {e}"))
        return
    err.print(f"rose reward server on {server.url} (databases under {db_root}); Ctrl-C stops it", highlight=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
