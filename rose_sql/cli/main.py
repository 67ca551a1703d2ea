"""The ``rose`` command: the only place where exceptions become messages and exit codes."""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rose_sql import __version__
from rose_sql.config import Config, JudgeConfig, MatchedRefuter, Policy
from rose_sql.errors import RoseError, UsageError
from rose_sql.items import FORMATS, load_items
from rose_sql.run import SystemRun, plan, run
from rose_sql.summary import Summary

if TYPE_CHECKING:
    from rose_sql.judges.llm import Ledger

DEFAULTS = Config()
JUDGE_DEFAULTS = JudgeConfig(model="")
"""Read for its defaults only (``--judge-model`` has none)."""
console = Console(stderr=False)
err = Console(stderr=True)


_ELSEWHERE = {
    **{
        name: f"rose_sql.cli.calibration:{attr}"
        for name, attr in (
            ("agree", "agree_cmd"),
            ("import-rose", "import_rose_cmd"),
            ("replay", "replay_cmd"),
            ("judge-card", "judge_card_cmd"),
            ("judge-compare", "judge_compare_cmd"),
            ("compare", "compare_cmd"),
            ("report", "report_cmd"),
            ("audit", "audit_cmd"),
        )
    },
    "serve-reward": "rose_sql.cli.reward:serve_reward_cmd",
}
"""Commands defined in other modules, imported only when invoked (or listed): ``rose run`` starts faster."""


class _Commands(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *_ELSEWHERE])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in _ELSEWHERE:
            module, attr = _ELSEWHERE[name].split(":")
            command: click.Command = getattr(importlib.import_module(module), attr)
            return command
        return super().get_command(ctx, name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rose")
def main() -> None:
    """ROSE-SQL: judge whether predicted SQL answers the question, not whether it equals one gold query."""


def _fail(e: RoseError) -> None:
    err.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
    sys.exit(2)


@main.command("run")
@click.argument("preds", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--gold", type=click.Path(path_type=Path), help="Gold file: BIRD/Spider dev.json or dev_gold.sql.")
@click.option(
    "--db-root", required=True, type=click.Path(path_type=Path), help="Folder holding <db_id>/<db_id>.sqlite."
)
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path),
    help="Output folder; each prediction file gets OUT/<file name>/.",
)
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Input format (default: detected).")
@click.option("--resume", is_flag=True, help="Continue an interrupted run: skip items already recorded.")
@click.option(
    "--timeout",
    type=float,
    default=DEFAULTS.timeout_s,
    show_default=True,
    help="Seconds one query may run before SQLite interrupts it.",
)
@click.option(
    "--workers",
    type=int,
    default=DEFAULTS.workers,
    show_default=True,
    help="Processes for the deterministic stages (one per core; 1: in this process).",
)
@click.option(
    "--max-rows",
    type=int,
    default=DEFAULTS.max_rows,
    show_default=True,
    help="Rows kept per result; larger results are marked truncated.",
)
@click.option(
    "--evidence/--no-evidence",
    default=None,
    help="Search witness databases, distinguishing rows and gold smells "
    "(default: on when a judge is configured, since the judges read it).",
)
@click.option(
    "--evidence-budget",
    type=float,
    default=DEFAULTS.evidence_budget_s,
    show_default=True,
    help="Seconds of evidence search per item.",
)
@click.option("--judge-model", help="Model of the LLM judges; without it only the deterministic stages run.")
@click.option("--judge-base-url", help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL, else OpenAI).")
@click.option(
    "--concurrency",
    type=int,
    default=JUDGE_DEFAULTS.concurrency,
    show_default=True,
    help="LLM calls in flight at once.",
)
@click.option(
    "--policy",
    type=click.Choice(get_args(Policy)),
    default=JUDGE_DEFAULTS.policy,
    show_default=True,
    help="'paper' reproduces the ROSE paper's flow exactly (Refuter on every matching result).",
)
@click.option(
    "--matched-refuter",
    type=click.Choice(get_args(MatchedRefuter)),
    default=JUDGE_DEFAULTS.matched_refuter,
    show_default=True,
    help="When results match: ask the Refuter always, only on doubtful evidence, never.",
)
@click.option("--budget", type=float, help="Stop starting LLM calls once this many USD are spent.")
@click.option("--prices", type=click.Path(path_type=Path), help="JSON price table to extend the bundled one.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the LLM cache.")
@click.option("--cache-dir", type=click.Path(path_type=Path), help="LLM cache folder (default: ~/.cache/rose-sql).")
@click.option(
    "--judge-timeout", type=float, default=JUDGE_DEFAULTS.timeout_s, show_default=True, help="Seconds per LLM call."
)
@click.option(
    "--max-retries", type=int, default=JUDGE_DEFAULTS.max_retries, show_default=True, help="Retries per LLM call."
)
@click.option(
    "--dry-run", is_flag=True, help="Build every prompt, estimate calls and cost; call nothing, write nothing."
)
def run_cmd(
    preds: tuple[Path, ...],
    gold: Path | None,
    db_root: Path,
    out: Path,
    fmt: str | None,
    resume: bool,
    timeout: float,
    workers: int,
    max_rows: int,
    evidence: bool | None,
    evidence_budget: float,
    judge_model: str | None,
    judge_base_url: str | None,
    concurrency: int,
    policy: str,
    matched_refuter: str,
    budget: float | None,
    prices: Path | None,
    no_cache: bool,
    cache_dir: Path | None,
    judge_timeout: float,
    max_retries: int,
    dry_run: bool,
) -> None:
    """Evaluate one or more prediction files against the gold and the databases.

    Writes OUT/<name>/records.jsonl (one line per item, appended as items finish) and
    OUT/<name>/summary.json for each prediction file. Exit status 0 when the run completed,
    whatever the scores; 2 for unusable input.
    """
    if evidence is None:
        evidence = judge_model is not None
    config = Config(timeout_s=timeout, max_rows=max_rows, evidence=evidence, evidence_budget_s=evidence_budget)
    if workers:
        config = config.with_(workers=workers)
    if judge_model:
        judge = JudgeConfig(
            model=judge_model,
            base_url=judge_base_url,
            concurrency=concurrency,
            policy=policy,  # type: ignore[arg-type]
            matched_refuter=matched_refuter,  # type: ignore[arg-type]
            budget_usd=budget,
            prices_path=prices,
            timeout_s=judge_timeout,
            max_retries=max_retries,
        )
        if no_cache:
            judge = replace(judge, cache_dir=None)
        elif cache_dir is not None:
            judge = replace(judge, cache_dir=cache_dir)
        config = config.with_(judge=judge)
    try:
        if not db_root.is_dir():
            raise UsageError(f"--db-root {db_root} is not a folder")
        if dry_run and config.judge is None:
            raise UsageError("--dry-run estimates LLM calls and needs --judge-model")
        loaded = [load_items(p, gold, fmt) for p in preds]
        if dry_run:
            from rose_sql.estimate import estimate, print_estimate

            print_estimate(estimate(loaded, db_root, config), console)
            return
        systems = plan(loaded, out, resume=resume)
    except RoseError as e:
        _fail(e)
        return
    for lf in loaded:
        for w in lf.warnings:
            err.print(f"[yellow]warning:[/] {w}", highlight=False)
    for s in systems:
        if s.resumed:
            console.print(f"{s.name}: resuming, {s.resumed} items already recorded, {len(s.todo)} to go")
    summaries = _run_with_progress(systems, db_root, config)
    print_summaries(summaries)
    console.print(f"records: {', '.join(str(s.out_dir / 'records.jsonl') for s in systems)}", highlight=False)


def _run_with_progress(systems: Sequence[SystemRun], db_root: Path, config: Config) -> list[Summary]:
    total = sum(len(s.todo) for s in systems)
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[llm]}"),
    )
    # Refreshed from tick() rather than by rich's refresh thread: the run forks its worker
    # processes only while this process has a single thread.
    shown = [0.0]
    with Progress(*columns, console=err, disable=total < 20 or not err.is_terminal, auto_refresh=False) as bar:
        task = bar.add_task("evaluating", total=total, llm="")

        def tick(name: str, ledger: Ledger | None) -> None:
            llm = f"LLM {ledger.calls} calls, {ledger.cached} cached, ${ledger.cost_usd:.4f}" if ledger else ""
            bar.update(task, advance=1, llm=llm)
            now = time.monotonic()
            if now - shown[0] >= 0.1:
                shown[0] = now
                bar.refresh()

        return run(systems, db_root, config, progress=tick)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def print_summaries(summaries: Sequence[Summary]) -> None:
    """The terminal summary of a run."""
    table = Table(title="ROSE-SQL run", title_justify="left")
    for col in ("system", "items", "scored", "ROSE", "BIRD EX", "TS EX", "TS EX keep-distinct", "Soft-F1"):
        table.add_column(col, justify="left" if col == "system" else "right")
    for s in summaries:
        table.add_row(
            s.system,
            str(s.n),
            f"{s.scored} ({100 * s.coverage:.1f}%)",
            _pct(s.rose),
            _pct(s.bird_ex),
            _pct(s.ts_ex),
            _pct(s.ts_ex_keep_distinct),
            _pct(s.soft_f1),
        )
    console.print(table)
    for s in summaries:
        if s.llm.get("calls") or s.llm.get("cached"):
            llm = s.llm
            console.print(
                f"{s.system}: LLM {llm['calls']} calls + {llm['cached']} cached ({llm['calls_per_item']} per item), "
                f"{llm['prompt_tokens']} + {llm['completion_tokens']} tokens, ${llm['cost_usd']:.4f}"
            )
    waiting = sum(s.unscored.get("awaiting_judge", 0) for s in summaries)
    if waiting:
        console.print(
            f"[bold]No judge is configured:[/] {waiting} items await a judge (score null, reason awaiting_judge). "
            "Only predictions that fail to execute are scored (0); ROSE covers scored items only."
        )
    for s in summaries:
        other = {k: v for k, v in s.unscored.items() if k != "awaiting_judge"}
        if other:
            console.print(f"{s.system}: unscored " + ", ".join(f"{v} {k}" for k, v in sorted(other.items())))


@main.command("demo")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("rose-demo-out"),
    show_default=True,
    help="Where the demo database, items and results go.",
)
def demo_cmd(out: Path) -> None:
    """Build the bundled demo database and run ROSE-SQL on its questions."""
    from rose_sql.demo import run_demo

    try:
        run_demo(out, console)
    except RoseError as e:
        _fail(e)
