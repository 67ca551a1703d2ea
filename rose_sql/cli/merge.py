"""``rose merge``: join the folders of a sharded run into one run."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from rose_sql.cli.main import PATH, console, err, fail
from rose_sql.cli.options import out_option
from rose_sql.cli.tables import tables_option
from rose_sql.errors import RoseError
from rose_sql.provenance import command_line


@click.command("merge")
@tables_option
@click.argument("shards", nargs=-1, required=True, type=PATH)
@out_option("Where the merged run goes: OUT/<name>/ for each system.")
@click.option(
    "--allow-partial",
    is_flag=True,
    help="Write the merged run even when items are missing (marked partial; 'rose run ... --resume' on it, "
    "without --shard, evaluates the rest).",
)
def merge_cmd(shards: tuple[Path, ...], out: Path, allow_partial: bool) -> None:
    """Join the folders of a sharded run ('rose run ... --shard I/N') into one run.

    Each SHARD is a shard's --out folder (every system in it) or one system's folder. Shards of other
    inputs, options or judges are refused; missing items (a shard absent or unfinished) are refused
    unless --allow-partial, and items recorded twice alike are kept once (recorded differently:
    refused). The merged OUT/<name>/ holds records.jsonl, manifest.json and summary.json, and every
    command reads it as a run. Exit status 0 when merged, 3 when merged but items are unscored for a
    transient reason (as rose run would exit), 2 when refused (nothing is written).

    \b
    Example (two shards of one run, evaluated apart):
      rose run preds.txt --gold dev.json --db-root dbs --out runs/s0 --shard 0/2
      rose run preds.txt --gold dev.json --db-root dbs --out runs/s1 --shard 1/2
      rose merge runs/s0 runs/s1 --out runs/all
    """
    from rose_sql.cli.run import print_summaries, unscored_exit
    from rose_sql.distributed.merge import merge

    try:
        merged = merge(list(shards), out, allow_partial=allow_partial, command=command_line())
    except RoseError as e:
        fail(e)
    for m in merged:
        for w in m.warnings:
            err.print(f"[yellow]warning:[/] {m.name}: {w}", highlight=False)
        for line in m.missing:
            err.print(f"[yellow]partial:[/] {m.name}: {line}", highlight=False)
    print_summaries([m.summary for m in merged])
    for m in merged:
        state = "complete" if not m.missing else "partial"
        console.print(f"{m.name}: {m.shards} shard folders merged into {m.out_dir} ({state})", highlight=False)
    then = f"'rose run ... --resume' with --out {out} (without --shard), the inputs and options of the shards"
    unscored = unscored_exit([m.summary for m in merged], then=then)
    if unscored is not None:
        err.print(f"[bold]exit 3:[/] {unscored}", highlight=False)
        sys.exit(3)
