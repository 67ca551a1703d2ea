"""The commands that audit another evaluator's published runs: join (ours beside theirs) and panel."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from rose_sql.analysis.join import CAUSES, Disagreement, SystemJoin
from rose_sql.analysis.panel import Policy, Rule, Selection
from rose_sql.analysis.replay import MEANING, VARIANTS, Variant
from rose_sql.analysis.runs import Run
from rose_sql.cli.agree import GreedyCommand
from rose_sql.cli.common import all_runs
from rose_sql.cli.main import PATH, console, fail
from rose_sql.cli.options import json_file_option
from rose_sql.cli.tables import name_column, number_columns, show, tables_option
from rose_sql.errors import RoseError, UsageError
from rose_sql.provenance import JudgeInfo


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
@tables_option
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
    runs; systems pair by folder name, and one run of ours goes beside each of theirs (the same
    predictions judged by several of their judges, as ROSE-VEC's). --out writes their runs with our
    readings, evidence and doubts on the joined items (for rose replay, rose panel, rose select).
    On the items both have where our gold ran, it lists every item
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


@click.command("panel")
@click.argument("runs", nargs=-1, required=True, type=PATH)
@click.option("--rule", type=click.Choice(["majority", "any", "all"]), default="majority", show_default=True)
@click.option(
    "--policy",
    type=click.Choice(["recorded", "always", "evidence", "never", "no-refuter"]),
    default="recorded",
    show_default=True,
    help="Decide each run's items under this policy first (recorded: as they are).",
)
@click.option("--out", type=PATH, required=True, help="Run folder to write the panel's records.jsonl and summary.json.")
def panel_cmd(runs: tuple[Path, ...], rule: str, policy: str, out: Path) -> None:
    """Combine finished runs of the same items into one, item by item, by a rule: a panel of judges, or
    the self-consistency of one judge run several times. No model is called.

    \b
      majority   correct when more than half of the runs that scored the item say so (a tie is unscored)
      any        correct when any run says so (the lenient panel)
      all        correct only when every run that scored the item says so (the strict panel)

    Each run may first be re-decided under a policy (as rose replay does; evidence uses the deterministic
    evidence the records carry). The panel is a run folder: rose agree, rose judge-card and rose compare
    read it. Its records name every member's score; its judge calls stay in the members' runs.

    \b
    Example (o3's three ROSE runs of ROSE-VEC's BIRD part, imported with rose import-rose):
      rose panel runs/o3-ROSE runs/o3-ROSE-thread-4 runs/o3-ROSE-thread-8 --out runs/o3-majority
    """
    from rose_sql.analysis.panel import combine, decided
    from rose_sql.analysis.rose_import import write_run_records

    try:
        loaded = all_runs(runs)
        chosen = _policy(policy)
        members = [decided(r, chosen) for r in loaded]
        rule_ = _rule(rule)
        panel = combine(members, rule_, out.name)
        judge = panel_judge(loaded, rule_, chosen)
        summary = write_run_records(panel.records, out, None, format="rose-panel", judge=judge)
    except RoseError as e:
        fail(e)
    mean = "undefined" if summary.rose is None else f"{100 * summary.rose:.2f}"
    console.print(
        f"{out}: {rule} of {len(loaded)} runs ({', '.join(r.name for r in loaded)}), policy {policy}: "
        f"ROSE {mean} over {summary.scored} of {summary.n} items",
        highlight=False,
    )


def _policy(text: str) -> Policy:
    from rose_sql.analysis.panel import POLICIES

    found = next((p for p in POLICIES if p == text), None)
    if found is None:
        raise UsageError(f"unknown policy {text!r}: choose among {', '.join(POLICIES)}")
    return found


def _rule(text: str) -> Rule:
    from rose_sql.analysis.panel import RULES

    found = next((r for r in RULES if r == text), None)
    if found is None:
        raise UsageError(f"unknown rule {text!r}: choose among {', '.join(RULES)}")
    return found


def panel_judge(runs: Sequence[Run], rule: Rule, policy: Policy) -> JudgeInfo | None:
    """What judged a panel: the members' model (joined with + when they differ) and method, the rule."""
    from rose_sql.analysis.judge_card import method_of

    judges = [r.summary.judge for r in runs if r.summary is not None and r.summary.judge is not None]
    if len(judges) != len(runs):
        return None
    models = sorted({j.model for j in judges})
    methods = sorted({method_of(j) for j in judges})
    return JudgeInfo(
        model="+".join(models),
        provider=f"panel of {len(runs)} stored runs: {', '.join(str(r.path) for r in runs)}",
        settings={"method": "+".join(methods), "panel": f"{rule} of {len(runs)} runs", "policy": policy},
    )


@click.command("select", cls=GreedyCommand)
@tables_option
@click.argument("runs", nargs=-1, required=True, type=PATH)
@click.option(
    "--labels",
    "labels",
    multiple=True,
    required=True,
    type=PATH,
    help="The labels files, one per part (ROSE-VEC's BIRD and Spider parts); each run goes with the one it is about.",
)
@click.option(
    "--pool",
    "pools",
    multiple=True,
    metavar="NAME=PATTERN[,PATTERN]",
    help="A pool of configurations (run folder names, shell patterns) to choose among; several may be given "
    "(default: one pool of every run).",
)
@click.option(
    "--policies",
    default="recorded,never,no-refuter,evidence",
    show_default=True,
    help="The policies each run may be decided under (rose replay's, and recorded: as they are).",
)
@click.option("--rules", default="majority,any,all", show_default=True, help="The panel rules to consider.")
@click.option("--max-size", type=click.IntRange(1, 5), default=3, show_default=True, help="Largest panel.")
@json_file_option("Also write every selection as JSON here.")
def select_cmd(
    runs: tuple[Path, ...],
    labels: tuple[Path, ...],
    pools: tuple[str, ...],
    policies: str,
    rules: str,
    max_size: int,
    json_out: Path | None,
) -> None:
    """Choose a judge, panel and policy among stored runs with the choice made on other labels than the
    figure is reported on.

    Candidates: every run under every policy, and every panel of up to --max-size runs of distinct
    configurations under every rule (see rose panel). For configurations run on two parts, the
    candidate that agrees best (Cohen's kappa) on one part is reported on the other, both ways, with
    and without items labelled without review (ROSE-VEC's 50 Spider items labelled by EX); within each
    part, leave one database out: the candidate best on the other databases decides the items of the
    one left out. The best in-sample figure (chosen and reported on the same labels) is shown beside,
    for how much choosing on the reported labels flatters.

    \b
    Example (every judge the ROSE authors ran on ROSE-VEC, imported under runs/bird/ and runs/spider/):
      rose select runs/bird runs/spider --labels rose-vec-bird.json rose-vec-spider.json \\
          --pool 'o3-class=o3-*,gemini-*' --pool 'open-32b=qwen3-30b-*,deepseek-r1-distill-*'
    """
    from rose_sql.analysis.agree import pair
    from rose_sql.analysis.labels import load_labels
    from rose_sql.analysis.panel import Pool, build_part, select

    try:
        sets = [load_labels(p) for p in labels]
        chosen_policies = [_policy(p.strip()) for p in policies.split(",") if p.strip()]
        chosen_rules = [_rule(r.strip()) for r in rules.split(",") if r.strip()]
        by_part: dict[str, list[Run]] = {s.name: [] for s in sets}
        for run in all_runs(runs):
            fits = [(pair(run, s).with_record, s.name) for s in sets]
            best, name = max(fits)
            if best * 2 < len(next(s for s in sets if s.name == name).labels):
                raise UsageError(f"{run.path} is about none of the labels files (at most {best} labelled items)")
            by_part[name].append(run)
        parts = [build_part(s, by_part[s.name], chosen_policies) for s in sets if by_part[s.name]]
        found = [
            sel
            for pool in [Pool.parse(p) for p in pools] or [Pool("all")]
            for sel in select(parts, pool, max_size=max_size, rules=chosen_rules)
        ]
    except RoseError as e:
        fail(e)
    show(selection_table(found))
    for p in parts:
        for note in p.notes:
            console.print(f"{p.name}: {note}", highlight=False)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps([asdict(s) for s in found], indent=2) + "\n", encoding="utf-8")
        console.print(f"wrote {json_out}", highlight=False)


def selection_table(found: Sequence[Selection]) -> Table:
    """One line per choice: the held-out figure, what was chosen, the in-sample best beside it."""
    title = "Chosen on some labels, reported on others: Cohen's kappa (percent) over the items reported on"
    t = Table(title=title, title_justify="left", show_lines=True)
    name_column(t, "pool")
    t.add_column("protocol", no_wrap=True)
    t.add_column("chosen on")
    t.add_column("reported on")
    number_columns(t, "held-out kappa", "n", "candidates")
    t.add_column("chosen", overflow="fold")
    t.add_column("in-sample best (kappa)", overflow="fold")
    for s in found:
        chosen = "; ".join(f"{name} ×{n}" if n > 1 else name for name, n in s.chosen.items())
        best, scored = s.in_sample
        t.add_row(
            escape(s.pool),
            s.protocol,
            escape(s.chosen_on),
            escape(s.reported_on),
            _k(s.held_out.kappa),
            str(s.held_out.n),
            str(s.candidates),
            escape(chosen),
            escape(f"{best} ({_k(scored.kappa)})"),
        )
    return t


def _k(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.2f}"
