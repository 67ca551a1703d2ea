"""What the commands that read finished runs share: the runs their arguments name, and the options of
agreement with human labels (the unscored policy, the bootstrap), each defined here once."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from rose_sql.analysis.agree import BOOTSTRAP_RESAMPLES, UnscoredPolicy
from rose_sql.analysis.runs import Run, load_runs
from rose_sql.errors import UsageError

unscored_option = click.option(
    "--unscored",
    type=click.Choice(["exclude", "wrong"]),
    default="exclude",
    show_default=True,
    help="Unscored items: left out of the metrics (and counted), or counted as judged incorrect.",
)
bootstrap_option = click.option(
    "--bootstrap", type=int, default=BOOTSTRAP_RESAMPLES, show_default=True, help="Bootstrap resamples (0: none)."
)


def unscored_policy(value: str) -> UnscoredPolicy:
    """``--unscored``'s value as the agreement reads it."""
    return "wrong" if value == "wrong" else "exclude"


def all_runs(paths: Sequence[Path]) -> list[Run]:
    """Every run the paths name, an output folder of `rose run` giving each system in it."""
    return [run for p in paths for run in load_runs(p)]


def one_run_each(paths: Sequence[Path]) -> list[Run]:
    """One run per path, in order (they pair with the labels files): a system folder, records.jsonl or
    scores file, or the --out folder of `rose run` when it holds a single system."""
    out = []
    for p in paths:
        runs = load_runs(p)
        if len(runs) > 1:
            names = ", ".join(r.name for r in runs)
            raise UsageError(f"{p} holds {len(runs)} systems ({names}): pass the folder of each, with its labels file")
        out += runs
    return out
