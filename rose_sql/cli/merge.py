"""``rose merge``: join the folders of a sharded run into one run."""

from __future__ import annotations

from pathlib import Path

import click

from rose_sql.cli.main import PATH, console, err, fail
from rose_sql.errors import RoseError
from rose_sql.provenance import command_line


@click.command("merge")
@click.argument("shards", nargs=-1, required=True, type=PATH)
@click.option("--out", required=True, type=PATH, help="Where the merged run goes: OUT/<name>/ for each system.")
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
    command reads it as a run. Exit status 0 when merged, 2 when refused (nothing is written).
    """
    from rose_sql.cli.run import print_summaries
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
