"""The commands that audit another evaluator's published runs: join (ours beside theirs) and panel."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from rose_sql.analysis.join import CAUSES, Disagreement, SystemJoin
from rose_sql.analysis.replay import MEANING, VARIANTS, Variant
from rose_sql.cli.common import all_runs
from rose_sql.cli.main import PATH, console, fail
from rose_sql.cli.options import json_file_option
from rose_sql.cli.tables import name_column, number_columns, show
from rose_sql.errors import RoseError, UsageError


def variants_of(text: str) -> list[Variant]:
    """``always,evidence`` as policies, each checked."""
    out: list[Variant] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        found = next((v for v in VARIANTS if v == part), None)
        if found is None:
            raise UsageError(f"unknown policy {part!r}: choose among {', '.join(VARIANTS)}")
        out.append(found)
    return out


@click.command("join")
@click.argument("ours", type=PATH)
@click.argument("theirs", type=PATH)
@click.option(
    "--replay",
    "policies",
    default="always,evidence,never,no-refuter",
    show_default=True,
    help="Comma-separated policies to re-decide their verdicts under, with our evidence (see above).",
)
@click.option("--out", type=PATH, help="Write the joined records (theirs with our readings and evidence) here.")
@json_file_option("Also write the join as JSON here.")
def join_cmd(ours: Path, theirs: Path, policies: str, out: Path | None, json_out: Path | None) -> None:
    """Our run of each system beside the import of their run of it, item by item.

    OURS is `rose run`'s --out folder (or one system's folder), THEIRS the folder of `rose import-rose`
    runs; systems pair by folder name. On the items both have where our gold ran, it lists every item
    where their EX and our BIRD EX disagree, with its cause (their gold, their prediction, the
    database's release, or unexplained); our evidence on the items their comparator matched (our
    comparator, plausible witnesses, cheap doubts, gold smells: whether our evidence policy would ask
    the Refuter) beside what their Refuter said; and their verdicts re-decided under our policies, with
    ROSE per system over the joined items and the ranks it gives:

    \b
    {policies}

    \b
    Example (the ROSE paper's re-evaluation against our run of the same predictions):
      rose join runs/minidev reeval/ --json join.json --out joined/
    """
    from rose_sql.analysis.join import join, pair_systems
    from rose_sql.analysis.rose_import import write_run_records

    try:
        chosen = variants_of(policies)
        pairs = pair_systems(all_runs([ours]), all_runs([theirs]))
        results = []
        for mine, other in pairs:
            result, joined = join(mine, other, chosen)
            results.append(result)
            if out is not None:
                write_run_records(joined, out / other.name, other.summary)
    except RoseError as e:
        fail(e)
    show(ex_table(results))
    lines = [d for r in results for d in r.disagreements]
    if lines:
        show(disagreement_table(lines))
    show(evidence_table(results))
    show(policy_table(results, ["recorded", *chosen]))
    for r in results:
        if r.matched.witnesses:
            shown = ", ".join(r.matched.witnesses)
            console.print(f"{r.system}: plausible witnesses on their matches (their Refuter): {shown}", highlight=False)
        guarded = r.guarded
        if guarded:
            console.print(
                f"{r.system}: our evidence search was stopped by its wall-clock guard on {guarded} joined items: "
                "unscored under evidence (wall_guard), as rose run leaves them",
                highlight=False,
            )
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps([r.to_dict() for r in results], indent=2) + "\n", encoding="utf-8")
        console.print(f"wrote {json_out}", highlight=False)
    if out is not None:
        console.print(f"wrote the joined records of {len(results)} systems under {out}", highlight=False)


join_cmd.help = (join_cmd.help or "").replace("{policies}", "\n    ".join(f"  {v:<11} {MEANING[v]}" for v in VARIANTS))


def ex_table(results: Sequence[SystemJoin]) -> Table:
    """Per system: the joined items, and how often their EX and our BIRD EX agree, by cause."""
    t = Table(title="Their EX against our BIRD EX on the joined items", title_justify="left")
    name_column(t, "system")
    number_columns(t, "joined", "ours only", "agree", "disagree", *CAUSES)
    for r in results:
        causes = [sum(c in d.causes for d in r.disagreements) for c in CAUSES]
        t.add_row(
            escape(r.system),
            str(r.joined),
            str(r.ours_only),
            str(r.ex_agree),
            str(len(r.disagreements)),
            *map(str, causes),
        )
    return t


def disagreement_table(lines: Sequence[Disagreement]) -> Table:
    """Every item where their EX and our BIRD EX disagree, with its cause."""
    t = Table(title="Every disagreement, with its cause", title_justify="left", show_lines=True)
    name_column(t, "system")
    name_column(t, "id")
    t.add_column("db", no_wrap=True)
    number_columns(t, "ours", "theirs")
    t.add_column("cause")
    t.add_column("detail", overflow="fold")
    for d in lines:
        cells = (escape(d.system), escape(d.id), escape(d.db_id), str(d.ours), str(d.theirs), ", ".join(d.causes))
        t.add_row(*cells, escape(d.detail))
    return t


def evidence_table(results: Sequence[SystemJoin]) -> Table:
    """Our evidence on the items their comparator matched, beside their Refuter."""
    title = "Our evidence on the items their comparator matched (joined items), and what their Refuter did"
    t = Table(title=title, title_justify="left")
    name_column(t, "system")
    number_columns(t, "matched", "ours equal", "ours differ", "plausible witness", "implausible", "cheap doubt")
    number_columns(t, "gold smell", "Refuter asked (evidence)", "Refuter overturned", "of them asked")
    for r in results:
        m = r.matched
        cells = (m.matched, m.ours_equal, m.ours_differ, m.witness, m.implausible, m.doubts, m.smells)
        t.add_row(escape(r.system), *map(str, cells), *map(str, (m.questioned, m.overturned, m.overturned_questioned)))
    return t


def policy_table(results: Sequence[SystemJoin], policies: Sequence[str]) -> Table:
    """ROSE per system and policy over the joined items (scored of joined), with each policy's rank."""
    from rose_sql.analysis.join import ranks

    ranked = {p: ranks(results, p) for p in policies}
    title = "Their verdicts under our policies: ROSE over the joined items (rank; recorded = as they decided)"
    t = Table(title=title, title_justify="left")
    name_column(t, "system")
    number_columns(t, "joined", *policies)
    order = sorted(results, key=lambda r: ranked["recorded"][r.system])
    for r in order:
        cells = []
        for p in policies:
            n = r.policies[p][1]
            value = r.rose(p)
            shown = "undefined" if value is None else f"{value:.2f}"
            scored = f" ({n})" if n != r.joined else ""
            move = ranked["recorded"][r.system] - ranked[p][r.system]
            arrow = "" if p == "recorded" or move == 0 else f" [{'green' if move > 0 else 'red'}]{move:+d}[/]"
            cells.append(f"{shown}{scored} #{ranked[p][r.system]}{arrow}")
        t.add_row(escape(r.system), str(r.joined), *cells)
    return t
