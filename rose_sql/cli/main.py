"""The ``rose`` command group: commands are imported from their modules only when invoked (or listed),
so ``rose run`` starts fast; the consoles and the one way errors become messages live here.

Modules, one per command group: :mod:`~rose_sql.cli.run` (run, demo), :mod:`~rose_sql.cli.agree`
(agree, import-rose, replay, judge-card, judge-compare), :mod:`~rose_sql.cli.analysis` (compare, diff,
report, audit), :mod:`~rose_sql.cli.reward` (serve-reward), :mod:`~rose_sql.cli.review` (review),
:mod:`~rose_sql.cli.merge` (merge), :mod:`~rose_sql.cli.db` (db copy, db reader).
:mod:`~rose_sql.cli.calibrate` (calibrate) runs a judge on a labelled set through ``rose run``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape

from rose_sql.__version__ import __version__
from rose_sql.engines.workers import preload
from rose_sql.errors import RoseError, exit_interrupted

console = Console(soft_wrap=True)
"""Standard output: results and tables."""
err = Console(stderr=True, soft_wrap=True)
"""Standard error: progress, warnings and errors (messages stay on one line, whole paths included)."""
WIDE = 110
"""Tables sent to a pipe or file are this wide (rich assumes 80 columns there, and squeezes the numbers)."""
PATH = click.Path(path_type=Path)

COMMANDS = {
    "run": "rose_sql.cli.run:run_cmd",
    "demo": "rose_sql.cli.run:demo_cmd",
    "agree": "rose_sql.cli.agree:agree_cmd",
    "import-rose": "rose_sql.cli.agree:import_rose_cmd",
    "replay": "rose_sql.cli.agree:replay_cmd",
    "judge-card": "rose_sql.cli.agree:judge_card_cmd",
    "judge-compare": "rose_sql.cli.agree:judge_compare_cmd",
    "calibrate": "rose_sql.cli.calibrate:calibrate_cmd",
    "compare": "rose_sql.cli.analysis:compare_cmd",
    "join": "rose_sql.cli.reeval:join_cmd",
    "panel": "rose_sql.cli.reeval:panel_cmd",
    "select": "rose_sql.cli.reeval:select_cmd",
    "diff": "rose_sql.cli.analysis:diff_cmd",
    "report": "rose_sql.cli.analysis:report_cmd",
    "audit": "rose_sql.cli.analysis:audit_cmd",
    "serve-reward": "rose_sql.cli.reward:serve_reward_cmd",
    "review": "rose_sql.cli.review:review_cmd",
    "merge": "rose_sql.cli.merge:merge_cmd",
    "db": "rose_sql.cli.db:db_cmd",
}
"""Every command, and where it is defined."""


class _Commands(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name].split(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        """The options read, with Ctrl-C ending the command as in :meth:`invoke`."""
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            _interrupted()

    def invoke(self, ctx: click.Context) -> object:
        """The command, with Ctrl-C ending it at status 130 after one line (click's own ``Aborted!`` is
        status 1): a command that runs long catches it first, to say what it kept and what continues."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            _interrupted()


def _interrupted() -> NoReturn:
    err.print("\n[bold]interrupted[/]", highlight=False)
    exit_interrupted()


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rose")
def main() -> None:
    """ROSE-SQL: judge whether predicted SQL answers the question, not whether it equals one gold query.

    \b
    Examples (rose COMMAND --help shows each command's own):
      rose demo
      rose run rose-demo-out/items.jsonl --db-root rose-demo-out/db --out runs/
      rose report runs/items
    """
    preload(__package__ or "rose_sql.cli")  # what the `rose` script imports, for the workers that run it again


def fail(e: RoseError) -> NoReturn:
    """Print an error and exit with status 2 (unusable input or options)."""
    err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)  # the message's [brackets] are text
    sys.exit(2)


def warn(lines: Sequence[str]) -> None:
    """Print each line as a warning on standard error."""
    for line in lines:
        err.print(f"[yellow]warning:[/] {line}", highlight=False)


def wide() -> Console:
    """The console for tables: at least WIDE columns when the output is not a terminal."""
    return console if console.is_terminal or console.width >= WIDE else Console(width=WIDE, soft_wrap=True)
