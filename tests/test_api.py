"""The public surface: ``rose_sql.__all__`` is pinned, and every command is documented and has help."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import rose_sql
from rose_sql.cli import main

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def test_public_api_is_pinned() -> None:
    assert sorted(rose_sql.__all__) == sorted(
        [
            "Comparison",
            "Config",
            "Execution",
            "Executor",
            "InputError",
            "Item",
            "JudgeConfig",
            "Loaded",
            "Readings",
            "Record",
            "ResultSet",
            "RoseError",
            "Run",
            "Summary",
            "UsageError",
            "__version__",
            "compare",
            "evaluate_item",
            "evaluate_items",
            "load_items",
            "load_run",
        ]
    )
    for name in rose_sql.__all__:
        assert hasattr(rose_sql, name), name


COMMANDS = main.list_commands(click.Context(main))


def test_commands_defined_elsewhere_are_listed_and_load_under_their_names() -> None:
    assert {"run", "demo", "agree", "report", "serve-reward"} <= set(COMMANDS)
    for name in COMMANDS:
        command = main.get_command(click.Context(main), name)
        assert command is not None and command.name == name


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_and_is_in_the_readme(command: str) -> None:
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output
    assert re.search(rf"\brose {re.escape(command)}\b", README), f"`rose {command}` is not in the README"
