"""``rose compare``, ``rose diff``, ``rose report`` and ``rose audit``: views of finished runs across systems."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from rose_sql.__version__ import __version__
from rose_sql.accounting import IMPORTED, NAMES, UNDEFINED, Figure, left_out_lines
from rose_sql.analysis.diff import RunDiff, change_cell, side_cell, summary_lines
from rose_sql.analysis.paired import RESAMPLES, SEED, PairedComparison, interval_cell, p_cell
from rose_sql.analysis.runs import PARTIAL_HELP, Run, load_runs
from rose_sql.analysis.systems import (
    READING_NAMES,
    SUBSETS,
    Discordance,
    Headline,
    RankMove,
    SystemRow,
    ordered_difficulties,
)
from rose_sql.cli.common import all_runs
from rose_sql.cli.main import PATH, console, err, fail
from rose_sql.cli.options import json_file_option, out_option
from rose_sql.cli.tables import name_column, number_columns, show, tables_option
from rose_sql.errors import RoseError, UsageError

READINGS = ("bird_ex", "spider_ex", "spider_ex_keep_distinct", "ts_ex", "ts_ex_keep_distinct", "their_ex")
READING_HELP = (
    "Which EX to compare ROSE with (default: bird_ex, or their_ex when no run has ours: an imported run's own EX, "
    "labelled as theirs)."
)


def _fmt(x: float | None, signed: bool = False) -> str:
    if x is None:
        return UNDEFINED
    return f"{x:+.2f}" if signed else f"{x:.2f}"


def _count(x: int | None) -> str:
    return UNDEFINED if x is None else str(x)


def headline_table(
    title: str, names: Sequence[str], heads: Sequence[Headline], theirs: Sequence[Figure] | None = None
) -> Table:
    """One line per system: whether the run is complete, the official readings, and ROSE; with ``theirs``,
    the imported runs' own EX beside them, under its own name."""
    table = Table(title=title, title_justify="left")
    name_column(table, "system")
    number_columns(table, "items")
    table.add_column("run", no_wrap=True)
    number_columns(table, *READING_NAMES.values(), *(["their EX"] if theirs else []), "ROSE")
    for i, (name, h) in enumerate(zip(names, heads, strict=True)):
        state = f"[bold yellow]{h.state}[/]" if h.completeness in ("partial", "subset") else h.state
        readings = [h.figures.reading(r).cell() for r in READING_NAMES] + ([theirs[i].cell()] if theirs else [])
        table.add_row(escape(name), str(h.items), state, *readings, h.figures.rose.cell())
    return table


HEADLINE_TITLE = "percent (in brackets: the items each is over, n/items when it left some out)"
"""What a headline table's cells say."""


IMPORTED_NOTE = (
    "carry no official reading of ours: BIRD EX and the others are left out of their items as not_recorded "
    "(`rose run` computes them); their EX is theirs, named apart"
)
"""What the notes say once for every imported run, instead of a line per reading and run."""


def left_out_notes(names: Sequence[str], heads: Sequence[Headline]) -> list[str]:
    """What each system's figures leave out, by reason, under the headline table (never a bare number). The
    official readings an imported run never had are said once for all of them."""
    out, imported = [], []
    for name, h in zip(names, heads, strict=True):
        lines = ([h.subset_note] if h.subset_note else []) + left_out_lines(h.figures)
        if h.completeness == "imported":
            imported.append(name)
            lines = [line for line in lines if "not_recorded" not in line]
        out += [f"{name}: {line}" for line in lines]
    if imported:
        out.append(f"imported runs ({', '.join(imported)}) {IMPORTED_NOTE}")
    return out


def rich_tables(rows: Sequence[SystemRow], reading: str = "bird_ex") -> list[Table]:
    """The terminal tables: the headline of every system; then, for those ROSE has scored, EX against ROSE
    overall and by difficulty; the EX reading by difficulty for the others."""
    title = f"Official readings and ROSE, {HEADLINE_TITLE}"
    theirs = [r.ex for r in rows] if reading in IMPORTED else None
    tables = [headline_table(title, [r.system for r in rows], [r.headline for r in rows], theirs)]
    judged = [r for r in rows if r.headline.rose_ready]
    waiting = [r for r in rows if not r.headline.rose_ready]
    name = NAMES.get(reading, reading)
    if judged:
        title = f"{name} vs ROSE on the items where both are defined, percent"
        table = Table(title=title, title_justify="left")
        name_column(table, "system")
        number_columns(table, "n", "EX", "ROSE", "gap", "discordant", "EX✓ROSE✗", "EX✗ROSE✓")
        number_columns(table, "GoldX disc.", "AmbQ disc.", "GoldX share", "AmbQ share", "either share")
        for row in judged:
            o = row.overall
            inside = (_inside(row.subsets.get(s)) for s in ("goldx", "ambq"))
            shares = (_fmt(row.subsets[s].share) if s in row.subsets else UNDEFINED for s in SUBSETS)
            counts = (_count(row.discordant), _count(row.ex_only), _count(row.rose_only))
            table.add_row(
                escape(row.system), str(o.n), _fmt(o.ex), _fmt(o.rose), _fmt(o.gap, True), *counts, *inside, *shares
            )
        tables.append(table)
    difficulties = ordered_difficulties(d for row in judged for d in row.by_difficulty)
    if difficulties:
        title = f"By difficulty: ROSE and {name}, each over its items; the gap (ROSE - EX) where both are defined"
        by = Table(title=title, title_justify="left")
        name_column(by, "system")
        number_columns(by, *difficulties)
        for row in (r for r in judged if r.by_difficulty):
            by.add_row(escape(row.system), *(_difficulty_cell(row, d) for d in difficulties))
        tables.append(by)
    difficulties = ordered_difficulties(d for row in waiting for d in row.ex_by_difficulty)
    if difficulties:
        by = Table(title=f"By difficulty: {reading} (items)", title_justify="left")
        name_column(by, "system")
        number_columns(by, *difficulties)
        for row in (r for r in waiting if r.ex_by_difficulty):
            exs = (f.cell() if (f := row.ex_by_difficulty.get(d)) is not None else "no item" for d in difficulties)
            by.add_row(escape(row.system), *exs)
        tables.append(by)
    return tables


def _difficulty_cell(row: SystemRow, d: str) -> str:
    """ROSE and the EX reading on one difficulty, each over its items, and their gap where both are defined."""
    rose, ex, both = row.rose_by_difficulty.get(d), row.ex_by_difficulty.get(d), row.by_difficulty.get(d)
    if rose is None or ex is None:
        return "no item"
    gap = f"\n[dim]gap {_fmt(both.gap, True)} (n={both.n})[/]" if both else ""
    return f"ROSE {rose.cell()}\nEX {ex.cell()}{gap}"


def _inside(d: Discordance | None) -> str:
    """Discordant items inside a flagged subset: ``3 of 12 (25.00)``."""
    if d is None:
        return UNDEFINED
    return f"{d.discordant} of {d.n}" + (f" ({d.rate:.2f})" if d.rate is not None else "")


def notes(rows: Sequence[SystemRow], runs: Sequence[Run] = ()) -> list[str]:
    """What the tables cannot say in a cell: what imported runs' figures stand on, runs awaiting a judge,
    partial runs, runs of unknown completeness."""
    from rose_sql.analysis.reeval import entries_note, entries_of

    out = []
    for run in runs:
        entries = entries_of(run.records)
        if entries is not None:
            out.append(f"{run.name}: imported; its figures are {entries_note(entries)}")
    out += left_out_notes([r.system for r in rows], [r.headline for r in rows])
    waiting = [r for r in rows if r.headline.awaiting_judge]
    if waiting:
        total = sum(r.headline.awaiting_judge for r in waiting)
        names = ", ".join(r.system for r in waiting)
        out.append(
            f"ROSE awaits a judge on {total} items ({names}): no ROSE number until `rose run` scores them with "
            "--judge-model; the readings above stand on their own."
        )
    for r in rows:
        if r.headline.completeness == "partial":
            out.append(f"warning: {r.system} is a partial run ({PARTIAL_HELP}): its numbers cover its records only.")
        elif r.headline.completeness == "unknown":
            out.append(f"note: {r.system}: completeness unknown (no manifest: made by an older rose-sql).")
    return out


@click.command("compare")
@tables_option
@click.argument("runs", nargs=-1, required=True, type=PATH)
@click.option("--reading", type=click.Choice(READINGS), default=None, help=READING_HELP)
@click.option(
    "--common",
    is_flag=True,
    help="Restrict every figure to the items every run has (an imported run's items without an entry are not "
    "its), and show how the ranks move against each run's own items.",
)
@click.option(
    "--pairs",
    "pairs_mode",
    type=click.Choice(["auto", "all", "neighbours", "none"]),
    default="auto",
    show_default=True,
    help="Paired tests: every pair, each system against the next in the ranked table, or none (auto: every pair "
    "up to 5 systems, neighbours beyond).",
)
@click.option("--csv", "csv_out", type=PATH, help="Also write the table as CSV here.")
@json_file_option("Also write the table (and the paired tests) as JSON here.")
@click.option(
    "--bootstrap",
    type=click.IntRange(min=0),
    default=RESAMPLES,
    show_default=True,
    help="Resamples of the paired bootstrap interval (0: no interval).",
)
@click.option("--seed", type=int, default=SEED, show_default=True, help="Seed of the paired bootstrap.")
def compare_cmd(
    runs: tuple[Path, ...],
    reading: str | None,
    common: bool,
    pairs_mode: str,
    csv_out: Path | None,
    json_out: Path | None,
    bootstrap: int,
    seed: int,
) -> None:
    """Re-evaluation table across systems: the official readings and ROSE, then EX vs ROSE.

    RUNS are the --out folder of `rose run` (every system in it), system folders, records.jsonl or
    id -> score files. Each system's line gives the official readings (BIRD EX, test-suite EX,
    Soft-F1) with the items each is defined on, and ROSE: a number once a judge has scored the
    items, "awaiting judge" until then; "undefined" where nothing is defined. The run column says
    whether every item of the input has a record (partial: interrupted or unfinished). Where ROSE
    exists, EX and ROSE are compared on the items where both are defined: the gap by difficulty, and
    the discordance overall and inside the GoldX and AmbQ subsets flagged by the judges. Runs imported
    with `rose import-rose` carry their own EX ("their EX", --reading their_ex), never as BIRD EX.

    With several systems, pairs of systems (A before B in the order given, as rose report and rose diff
    take them; with --pairs neighbours, each row of the ranked table against the next) are compared on the items
    both were evaluated on, for every binary figure (ROSE, BIRD EX, the test-suite readings, their EX):
    the difference A - B in points with its 95 % paired bootstrap interval (seeded: the same runs and
    seed give the same interval), the discordant items each way, and McNemar's exact p-value.

    \b
    Examples:
      rose compare runs/                     every system rose run wrote into runs/
      rose compare runs/a runs/b --reading spider_ex --csv table.csv
      rose compare reeval/ --common          the systems on the items all of them have
    """
    from rose_sql.analysis.paired import all_pairs, neighbour_pairs
    from rose_sql.analysis.systems import (
        common_items,
        default_reading,
        leaderboard,
        rank_moves,
        restricted,
        to_csv,
        to_json,
    )

    try:
        loaded = all_runs(runs)
        which = reading or default_reading(loaded)
        own = leaderboard(loaded, which)
        moves: list[RankMove] = []
        shared: int | None = None
        if common:
            keys = common_items(loaded)
            shared = len(keys)
            if not keys:
                raise UsageError("--common: the runs have no item in common")
            loaded = restricted(loaded, keys)
        rows = leaderboard(loaded, which) if common else own
        moves = rank_moves(own, rows) if common else []
        by_name = {r.name: r for r in loaded}
        named = len(by_name) == len(loaded)  # pairs are told apart by name
        mode = pairs_mode if pairs_mode != "auto" else ("all" if len(rows) <= 5 else "neighbours")
        pairs = []
        if named and mode == "all":  # A before B in the order given, as rose report and rose diff take them
            pairs = all_pairs(loaded, resamples=bootstrap, seed=seed)
        elif named and mode == "neighbours":  # each row of the ranked table against the next
            pairs = neighbour_pairs([by_name[r.system] for r in rows], resamples=bootstrap, seed=seed)
    except RoseError as e:
        fail(e)
    if shared is not None:
        console.print(
            f"Every figure below is over the {shared} items all {len(rows)} runs have (--common); "
            "the ranks table compares them with each run's own items.",
            highlight=False,
        )
    for table in rich_tables(rows, which):
        show(table)
    if moves:
        show(ranks_table(moves, which, shared or 0))
    if pairs:
        show(paired_table(pairs, bootstrap, seed, neighbours=mode == "neighbours"))
    for line in notes(rows, [] if common else loaded):
        (err if line.startswith("warning") else console).print(line, highlight=False)
    if not named:
        err.print("warning: two runs share a name: no paired tests (give the systems distinct folder names)")
    for path, text in ((csv_out, to_csv(rows)), (json_out, to_json(rows, which, pairs, moves, shared))):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            console.print(f"wrote {path}", highlight=False)


def ranks_table(moves: Sequence[RankMove], reading: str, common: int) -> Table:
    """Each system's rank on its own items and on the common ones, by ROSE and by the EX reading."""
    name = NAMES.get(reading, reading)
    title = f"Ranks on each run's own items and on the {common} common items (ROSE, then {name}; n in brackets)"
    table = Table(title=title, title_justify="left")
    name_column(table, "system")
    number_columns(table, "ROSE own", "rank", "ROSE common", "rank", "move", "EX own", "rank", "EX common", "rank")
    number_columns(table, "move")
    for m in moves:
        table.add_row(
            escape(m.system),
            m.rose_own.cell(),
            str(m.ranks["rose_own"]),
            m.rose_common.cell(),
            str(m.ranks["rose_common"]),
            _move(m.rose_move),
            m.ex_own.cell(),
            str(m.ranks["ex_own"]),
            m.ex_common.cell(),
            str(m.ranks["ex_common"]),
            _move(m.ex_move),
        )
    return table


def _move(n: int) -> str:
    return "=" if n == 0 else f"[green]+{n}[/]" if n > 0 else f"[red]{n}[/]"


def paired_table(pairs: Sequence[PairedComparison], resamples: int, seed: int, *, neighbours: bool = False) -> Table:
    """One line per pair of systems and binary figure: n, both means, A - B with its interval, the
    discordant items each way, McNemar's exact p-value; and the items each run has alone."""
    which = "each system against the next in the ranked table; " if neighbours else "A before B as given; "
    title = (
        f"Does A beat B? {which}On the shared items where both define the figure: A - B in points, 95% paired "
        f"bootstrap interval ({resamples} resamples, seed {seed}), McNemar's exact test on the discordant items"
    )
    table = Table(title=title, title_justify="left")
    name_column(table, "A")
    name_column(table, "B")
    table.add_column("figure", no_wrap=True)
    number_columns(table, "n", "A", "B", "A - B [95% CI]", "A✓B✗", "A✗B✓", "McNemar p", "left out", "A only", "B only")
    for pair in pairs:
        for t in pair.tests:
            table.add_row(
                escape(pair.a),
                escape(pair.b),
                NAMES.get(t.reading, t.reading),
                str(t.n),
                _fmt(t.a_percent),
                _fmt(t.b_percent),
                interval_cell(t),
                str(t.a_only),
                str(t.b_only),
                p_cell(t.p_value),
                str(t.left_out),
                str(pair.only_a),
                str(pair.only_b),
            )
    return table


@click.command("report")
@click.argument("runs", nargs=-1, required=True, type=PATH)
@click.option("--compare", "several", is_flag=True, help="Compare several runs on one page.")
@out_option("HTML file (default: RUN/report.html, or rose-compare.html).", required=False)
@click.option("--reading", type=click.Choice(READINGS), default=None, help=READING_HELP)
@click.option(
    "--systems",
    "systems_file",
    type=PATH,
    help="A systems file (CSV, or JSON) with a 'system' column and what you know of each (type, base_model, "
    "release_date...): charts of the ROSE-EX gap by it.",
)
@click.option("--group-by", help="The systems file's column to group and colour the systems by (e.g. type).")
def report_cmd(
    runs: tuple[Path, ...],
    several: bool,
    out: Path | None,
    reading: str | None,
    systems_file: Path | None,
    group_by: str | None,
) -> None:
    """Write a self-contained HTML report: the official readings and ROSE, charts (EX vs ROSE, gap by
    difficulty, discordance, calls and cost per stage) and a filterable browser of every item with its
    evidence and judge reasoning.

    RUN is the --out folder of `rose run` (its systems on one page), a system folder, a records.jsonl
    or an id -> score file. Without a judge the page shows the official readings and says that ROSE
    awaits a judge; a partial run (interrupted or unfinished) gets a banner. The page loads nothing
    from the network; open it from the file. With --systems, the ROSE-EX gap per system and per
    difficulty grouped by a column of that file (--group-by), and over release dates when it has a
    release_date column.

    \b
    Examples:
      rose report runs/c3sql                  writes runs/c3sql/report.html
      rose report runs/                       every system in runs/, on runs/report.html
      rose report runs/a runs/b --compare --out compare.html
      rose report reeval/ --systems systems.csv --group-by type
    """
    from rose_sql.analysis.html import write_report
    from rose_sql.analysis.html.groups import load_systems
    from rose_sql.analysis.systems import default_reading

    try:
        if len(runs) > 1 and not several:
            raise UsageError("several runs: pass --compare to put them on one page")
        if group_by is not None and systems_file is None:
            raise UsageError("--group-by names a column of the --systems file: give it")
        loaded = all_runs(runs)
        if len({r.name for r in loaded}) != len(loaded):
            raise UsageError("two runs share a name; the report tells systems apart by folder name")
        systems = load_systems(systems_file) if systems_file is not None else None
        default = runs[0] / "report.html" if len(runs) == 1 and runs[0].is_dir() else Path("rose-compare.html")
        which = reading or default_reading(loaded)
        page = out or default
        path = write_report(loaded, page, reading=which, version=__version__, systems=systems, group_by=group_by)
    except RoseError as e:
        fail(e)
    for run in loaded:
        if run.completeness == "partial":
            err.print(f"warning: {run.name} is a partial run ({PARTIAL_HELP}); the page says so", highlight=False)
    console.print(f"wrote {path}", highlight=False)


@click.command("audit")
@click.argument("runs", nargs=-1, required=True, type=PATH)
@out_option("Folder for audit.jsonl and audit.csv.")
def audit_cmd(runs: tuple[Path, ...], out: Path) -> None:
    """Export every item flagged GoldX or AmbQ, or with a gold smell, with evidence and reasoning.

    For benchmark maintainers: audit.jsonl has everything, audit.csv one line per item. RUNS are as
    for `rose compare` (the --out folder of `rose run` gives every system in it).

    \b
    Example:
      rose audit runs/ --out audit/           audit/audit.jsonl and audit/audit.csv
    """
    from rose_sql.analysis.audit import audit_rows, write_audit

    try:
        rows = audit_rows(all_runs(runs))
    except RoseError as e:
        fail(e)
    jsonl, csv_path = write_audit(rows, out)
    console.print(f"{len(rows)} flagged items -> {jsonl}, {csv_path}", highlight=False)


@click.command("diff")
@tables_option
@click.argument("run_a", type=PATH)
@click.argument("run_b", type=PATH)
@click.option("--json", "json_out", type=PATH, help="Also write the items as JSON here ('-': standard output only).")
@click.option("--limit", type=click.IntRange(min=0), default=None, help="Show at most this many items in the table.")
def diff_cmd(run_a: Path, run_b: Path, json_out: Path | None, limit: int | None) -> None:
    """The items whose outcome differs between two runs: two systems, or two runs of one (another judge,
    another rose-sql, another database).

    RUN_A and RUN_B are system folders of `rose run`, records.jsonl files or id -> score files; items
    are matched by id. An item differs when its ROSE score or any binary reading (BIRD EX, test-suite
    EX...) differs. Each line shows what changed (A→B), each side's score, deciding stage and reason,
    and both predicted SQL side by side; under the table, how many of the shared items differ, by
    figure, and the items only one run has.

    \b
    Examples:
      rose diff runs/c3sql runs/dail-sql-gpt4
      rose diff old/c3sql new/c3sql --json changes.json
    """
    from rose_sql.analysis.diff import diff_runs

    try:
        a, b = (_one_run(p) for p in (run_a, run_b))
        d = diff_runs(a, b)
    except RoseError as e:
        fail(e)
    if json_out is not None and str(json_out) == "-":
        console.print_json(d.to_json()) if console.is_terminal else print(d.to_json(), end="")
        return
    show(diff_table(d, limit))
    for line in summary_lines(d):
        console.print(line, highlight=False)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(d.to_json(), encoding="utf-8")
        console.print(f"wrote {json_out}", highlight=False)


def _one_run(path: Path) -> Run:
    found = load_runs(path)
    if len(found) != 1:
        names = ", ".join(r.name for r in found)
        raise UsageError(f"{path} holds {len(found)} systems ({names}): pass one system folder")
    return found[0]


def diff_table(d: RunDiff, limit: int | None = None) -> Table:
    """One line per differing item: what changed, each side's score · stage · reason, both SQL."""
    shown = d.items if limit is None else d.items[:limit]
    more = f" (the first {len(shown)})" if len(shown) < len(d.items) else ""
    title = f"Items whose outcome differs: A = {d.a}, B = {d.b}{more}"
    table = Table(title=title, title_justify="left", show_lines=True)
    name_column(table, "id")
    table.add_column("db", no_wrap=True)
    table.add_column("changed (A→B)")
    table.add_column("A: score · stage · reason")
    table.add_column("B: score · stage · reason")
    table.add_column("A SQL", overflow="fold")
    table.add_column("B SQL", overflow="fold")
    for item in shown:
        same = item.a.pred_sql == item.b.pred_sql
        b_sql = "(the same)" if same else (item.b.pred_sql or "(no prediction)")
        table.add_row(
            escape(item.id),
            escape(item.db_id),
            change_cell(item),
            escape(side_cell(item.a)),
            escape(side_cell(item.b)),
            escape(item.a.pred_sql or "(no prediction)"),
            escape(b_sql),
        )
    return table
