"""The public surface: ``rose_sql.__all__`` is pinned, and every command is documented and has help."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import rose_sql
from rose_sql.cli import main

DOCS = Path(__file__).resolve().parents[1] / "docs"
GUIDE = "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md")) if p.name != "cli.md")
"""The pages of the guide (the CLI reference is generated: tests/test_docs.py checks it holds every command)."""


def test_public_api_is_pinned() -> None:
    assert sorted(rose_sql.__all__) == sorted(
        [
            "Comparison",
            "Config",
            "Database",
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
            "Source",
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
def test_every_command_has_help_and_a_page_of_the_guide(command: str) -> None:
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output
    assert re.search(rf"\brose {re.escape(command)}\b", GUIDE), f"`rose {command}` is on no page of docs/"


def test_every_exception_is_in_the_one_tree_and_drawn_in_its_docstring() -> None:
    import inspect

    from rose_sql import errors

    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, Exception)]
    assert errors.RoseError in classes and len(classes) >= 8
    for cls in classes:
        assert issubclass(cls, errors.RoseError) and cls.__module__ == "rose_sql.errors", cls
        assert re.search(rf"\+-- {cls.__name__} |^    {cls.__name__} ", errors.__doc__ or "", re.M), cls
        assert cls.__doc__ and "\n" not in cls.__doc__.strip(), f"{cls.__name__} needs a one-line docstring"
    package = Path(rose_sql.__file__).parent
    elsewhere = [
        f"{path.relative_to(package)}:{m.group(1)}"
        for path in package.rglob("*.py")
        if path.name != "errors.py" and "testing" not in path.parts
        for m in re.finditer(r"^class (\w+)\((?:\w+Error|Exception)\)", path.read_text(encoding="utf-8"), re.M)
        if not m.group(1).startswith("_")  # a module's private signal that never leaves it
    ]
    assert not elsewhere, f"exceptions outside rose_sql.errors: {elsewhere}"


def test_the_cli_shows_the_config_defaults() -> None:
    from rose_sql.cli.reward import serve_reward_cmd
    from rose_sql.cli.run import run_cmd
    from rose_sql.config import Config, JudgeConfig, ServeConfig

    run, judge = Config(), JudgeConfig(model="m")
    serve = ServeConfig(Path("."))
    expected = {
        run_cmd: {
            "timeout": run.timeout_s,
            "max_steps": run.max_steps,
            "evidence_steps": run.evidence_max_steps,
            "max_rows": run.max_rows,
            "evidence_budget": run.evidence_budget_s,
            "concurrency": judge.concurrency,
            "policy": judge.policy,
            "matched_refuter": judge.matched_refuter,
            "judge_timeout": judge.timeout_s,
            "max_retries": judge.max_retries,
        },
        serve_reward_cmd: {
            "host": serve.host,
            "port": serve.port,
            "deadline": serve.deadline_s,
            "max_steps": serve.reward.max_steps,
            "timeout": serve.reward.timeout_s,
            "workers": serve.reward.processes,  # processes, as everywhere on the command line
            "query_threads": serve.reward.workers,
            "max_items": serve.max_items,
            "max_connections": serve.max_connections,
            "header_timeout": serve.header_timeout_s,
            "body_timeout": serve.body_timeout_s,
            "schedule": serve.reward.schedule,
            "alpha_start": serve.reward.alpha_start,
            "alpha_end": serve.reward.alpha_end,
            "total_steps": serve.reward.total_steps,
        },
    }
    for command, defaults in expected.items():
        options = {p.name: p for p in command.params if isinstance(p, click.Option)}
        for name, value in defaults.items():
            assert options[name].default == value and options[name].show_default, (command.name, name)


def test_the_troubleshooting_page_lists_every_unscored_reason() -> None:
    from rose_sql.decide import UNSCORED

    troubleshooting = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    missing = [r for r in UNSCORED if f"`{r}`" not in troubleshooting]
    assert not missing, f"Troubleshooting does not explain {missing}"


@pytest.mark.slow
def test_the_docs_run_examples_run_as_written(shared: Path, tmp_path: Path) -> None:
    """Every `rose run $D/...` line of the first block of docs/evaluate.md, from the repository root beside
    ../shared/data."""
    import glob
    import os
    import shlex
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    block = (DOCS / "evaluate.md").read_text(encoding="utf-8").split("```bash", 1)[1].split("```", 1)[0]
    lines = [line.strip().removesuffix("\\") for line in block.splitlines() if not line.startswith("#")]
    commands = " ".join(line.split("  # ")[0] for line in lines)
    runs = [c.strip() for c in commands.split("rose run")[1:]]
    assert len(runs) >= 4
    for i, args in enumerate(runs):
        argv = shlex.split(args.replace("$D", "../shared/data").replace("runs/", str(tmp_path / f"runs{i}") + "/"))
        argv = [g for a in argv for g in (sorted(glob.glob(a, root_dir=root)) if "*" in a else [a])]  # as a shell would
        done = subprocess.run(
            [sys.executable, "-m", "rose_sql", "run", *argv], cwd=root, capture_output=True, text=True, env=os.environ
        )
        assert done.returncode == 0, (args, done.stderr[-2000:])
