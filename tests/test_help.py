"""Every ``rose`` command's ``--help`` shows an example: the command tree is walked, so a command added later
without one fails here."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from rose_sql.cli import main


def _tree(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The path of the group and of every command under it, depth first."""
    ctx = click.Context(group)
    paths = [path]
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, f"rose {' '.join((*path, name))} is listed but cannot be loaded"
        if isinstance(command, click.Group):
            paths += _tree(command, (*path, name))
        else:
            paths.append((*path, name))
    return paths


COMMANDS = _tree(main)


def test_the_tree_holds_every_command_and_subcommand() -> None:
    assert {"run", "demo", "merge", "review"} <= {p[0] for p in COMMANDS if p}
    assert {("db", "copy"), ("db", "reader"), ("db", "scratch")} <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(("rose", *p)))
def test_help_shows_an_example(path: tuple[str, ...]) -> None:
    """An ``Example:`` (or ``Examples ...:``) heading, followed by a command line of this very command."""
    result = CliRunner().invoke(main, [*path, "--help"], terminal_width=120)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    headings = [i for i, line in enumerate(lines) if re.fullmatch(r"\s*Examples?\b.*:", line)]
    assert headings, f"rose {' '.join(path)} --help shows no example:\n{result.output}"
    invocation = re.compile(r"\s+" + r"\s+".join(map(re.escape, ("rose", *path))) + r"(\s|$)")
    after = lines[headings[0] + 1 :]
    assert any(invocation.match(line) for line in after), f"no 'rose {' '.join(path)}' line under the example"
