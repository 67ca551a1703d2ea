"""``rose compare``, ``rose report`` and ``rose audit``: views of finished runs across systems."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click
from rich.table import Table

from rose_sql import __version__
from rose_sql.analysis.runs import load_run
from rose_sql.analysis.systems import SUBSETS, SystemRow, ordered_difficulties
from rose_sql.cli.main import PATH, console, fail, wide
from rose_sql.errors import RoseError, UsageError

READINGS = ("bird_ex", "ts_ex", "ts_ex_keep_distinct")


def _fmt(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.2f}" if signed else f"{x:.2f}"


def rich_tables(rows: Sequence[SystemRow], reading: str = "bird_ex") -> list[Table]:
    """The terminal tables: one line per system, then EX / ROSE / gap by difficulty when the data has it."""
    table = Table(title=f"Re-evaluation: EX ({reading}) vs ROSE, percent", title_justify="left")
    heads = (
        "system",
        "n",
        "EX",
        "ROSE",
        "gap",
        "discordant",
        "EX✓ROSE✗",
        "EX✗ROSE✓",
        "GoldX share",
        "AmbQ share",
        "either share",
    )
    for col in heads:
        table.add_column(col, justify="left" if col == "system" else "right", no_wrap=col == "system")
    for row in rows:
        o = row.overall
        table.add_row(
            row.system,
            str(o.n),
            _fmt(o.ex),
            _fmt(o.rose),
            _fmt(o.gap, signed=True),
            str(row.discordant),
            str(row.ex_only),
            str(row.rose_only),
            *(_fmt(row.subsets[s].share) for s in SUBSETS),
        )
    tables = [table]
    difficulties = ordered_difficulties(d for row in rows for d in row.by_difficulty)
    if difficulties:
        by = Table(title="By difficulty: EX / ROSE (gap)", title_justify="left")
        by.add_column("system", no_wrap=True)
        for d in difficulties:
            by.add_column(d, justify="right")
        for row in rows:
            cells = []
            for d in difficulties:
                x = row.by_difficulty.get(d)
                cells.append(f"{_fmt(x.ex)} / {_fmt(x.rose)} ({_fmt(x.gap, True)})" if x else "-")
            by.add_row(row.system, *cells)
        tables.append(by)
    return tables


@click.command("compare")
@click.argument("runs", nargs=-1, required=True, type=PATH)
@click.option("--reading", type=click.Choice(READINGS), default="bird_ex", show_default=True, help="Which EX.")
@click.option("--csv", "csv_out", type=PATH, help="Also write the table as CSV here.")
@click.option("--json", "json_out", type=PATH, help="Also write the table as JSON here.")
def compare_cmd(runs: tuple[Path, ...], reading: str, csv_out: Path | None, json_out: Path | None) -> None:
    """Re-evaluation table across systems: EX vs ROSE, the gap by difficulty, and where they disagree.

    Discordance (EX and ROSE differ) is shown overall and inside the GoldX and AmbQ subsets flagged
    by the judges, with the share of all discordance each explains.
    """
    from rose_sql.analysis.systems import leaderboard, to_csv, to_json

    try:
        rows = leaderboard([load_run(p) for p in runs], reading)
    except RoseError as e:
        fail(e)
    for table in rich_tables(rows, reading):
        wide().print(table)
    for path, text in ((csv_out, to_csv(rows)), (json_out, to_json(rows, reading))):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            console.print(f"wrote {path}", highlight=False)


@click.command("report")
@click.argument("runs", nargs=-1, required=True, type=PATH)
@click.option("--compare", "several", is_flag=True, help="Compare several runs on one page.")
@click.option("--out", type=PATH, help="HTML file (default: RUN_DIR/report.html, or rose-compare.html).")
@click.option("--reading", type=click.Choice(READINGS), default="bird_ex", show_default=True, help="Which EX.")
def report_cmd(runs: tuple[Path, ...], several: bool, out: Path | None, reading: str) -> None:
    """Write a self-contained HTML report: charts (EX vs ROSE, gap by difficulty, discordance, calls
    and cost per stage) and a filterable browser of every item with its evidence and judge reasoning.

    The page loads nothing from the network; open it from the file.
    """
    from rose_sql.analysis.html import write_report

    try:
        if len(runs) > 1 and not several:
            raise UsageError("several runs: pass --compare to put them on one page")
        loaded = [load_run(p) for p in runs]
        if len({r.name for r in loaded}) != len(loaded):
            raise UsageError("two runs share a name; the report tells systems apart by folder name")
        target = out or (runs[0] / "report.html" if not several and runs[0].is_dir() else Path("rose-compare.html"))
        path = write_report(loaded, target, reading=reading, version=__version__)
    except RoseError as e:
        fail(e)
    console.print(f"wrote {path}", highlight=False)


@click.command("audit")
@click.argument("runs", nargs=-1, required=True, type=PATH)
@click.option("--out", required=True, type=PATH, help="Folder for audit.jsonl and audit.csv.")
def audit_cmd(runs: tuple[Path, ...], out: Path) -> None:
    """Export every item flagged GoldX or AmbQ, or with a gold smell, with evidence and reasoning.

    For benchmark maintainers: audit.jsonl has everything, audit.csv one line per item.
    """
    from rose_sql.analysis.audit import audit_rows, write_audit

    try:
        rows = audit_rows([load_run(p) for p in runs])
    except RoseError as e:
        fail(e)
    jsonl, csv_path = write_audit(rows, out)
    console.print(f"{len(rows)} flagged items -> {jsonl}, {csv_path}", highlight=False)
