"""The calibration commands: agree, import-rose, replay, judge-card, judge-compare."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast, get_args

import click
from rich import box
from rich.table import Table

from rose_sql.__version__ import __version__
from rose_sql.analysis.agree import (
    BOOTSTRAP_SEED,
    Agreement,
    FlagAgreement,
    Report,
    agree,
    pair_runs,
    pairing_warnings,
)
from rose_sql.analysis.judge_card import JudgeCard
from rose_sql.analysis.labels import Flag, LabelSet, load_labels, reviewed_only, with_tags
from rose_sql.analysis.replay import MEANING, VARIANTS, Variant, replay_table
from rose_sql.cli.common import bootstrap_option, one_run_each, unscored_option, unscored_policy
from rose_sql.cli.main import PATH, console, err, fail, warn
from rose_sql.cli.options import json_flag, out_option
from rose_sql.cli.tables import name_column, number_columns, show, tables_option
from rose_sql.config import Aggregate
from rose_sql.errors import RoseError, UsageError


def _expand(args: list[str], greedy: Sequence[str]) -> list[str]:
    """``--labels A B`` -> ``--labels A --labels B``: the values up to the next option all belong to it."""
    out: list[str] = []
    current: str | None = None
    for a in args:
        if a == "--":
            current = None
            out.append(a)
        elif a in greedy:
            current = a
        elif current is not None and not a.startswith("-"):
            out += [current, a]
        else:
            current = None
            out.append(a)
    return out


class GreedyCommand(click.Command):
    """A command whose list options take several values after one flag (``--labels A B``)."""

    greedy = ("--labels",)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _expand(args, self.greedy))


_labels_opt = click.option(
    "--labels",
    "labels",
    multiple=True,
    required=True,
    type=PATH,
    help="Human labels, one file per run (ROSE-VEC JSON, or id -> bool JSON/JSONL/CSV); several may follow.",
)
_goldx_opt = click.option(
    "--goldx-ids",
    multiple=True,
    metavar="[SUBSET=]FILE",
    help="The experts' GoldX ids (JSON list) for the labels file named SUBSET (its stem).",
)
_ambq_opt = click.option(
    "--ambq-ids", multiple=True, metavar="[SUBSET=]FILE", help="The experts' AmbQ ids, as --goldx-ids."
)
_reviewed_opt = click.option(
    "--reviewed-only", is_flag=True, help="Leave out items labelled without human review (ROSE-VEC's 'ex' items)."
)
_seed_opt = click.option("--seed", type=int, default=BOOTSTRAP_SEED, show_default=True, help="Bootstrap seed.")


def _tags(label_sets: list[LabelSet], specs: Sequence[str], flag: Flag) -> list[LabelSet]:
    names = [ls.name for ls in label_sets]
    for spec in specs:
        subset, _, file = spec.rpartition("=")
        if not subset and len(label_sets) > 1:
            raise UsageError(f"--{flag}-ids {spec}: several labels files; say which: SUBSET=FILE, SUBSET in {names}")
        target = subset or names[0]
        if target not in names:
            raise UsageError(f"--{flag}-ids {spec}: no labels file named {target!r} (known: {', '.join(names)})")
        i = names.index(target)
        label_sets[i] = with_tags(label_sets[i], flag, Path(file))
    return label_sets


def _label_sets(labels: Sequence[Path], goldx: Sequence[str], ambq: Sequence[str], reviewed: bool) -> list[LabelSet]:
    sets = [load_labels(p) for p in labels]
    names = [s.name for s in sets]
    if len(set(names)) != len(names):
        raise UsageError(f"two labels files share the name {names!r}: subsets are named by file stem")
    sets = _tags(_tags(sets, goldx, "goldx"), ambq, "ambq")
    return [reviewed_only(s) for s in sets] if reviewed else sets


def _fmt(x: Any) -> str:
    return "undefined" if x is None else f"{x:.2f}" if isinstance(x, float) else str(x)


def _ci(value: float | None, ci: list[float] | None) -> str:
    """The value, with its interval on a second, dim line."""
    return f"{_fmt(value)}\n[dim]{ci[0]:.1f}-{ci[1]:.1f}[/]" if ci else _fmt(value)


def print_agreement(result: Report) -> None:
    """Agreement tables: metrics with intervals per subset and merged, then the flags."""
    table = Table(
        title="Agreement with the human labels (percent; 95% bootstrap interval below)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    name_column(table, "subset")
    number_columns(table, "n", "unscored", "kappa", "accuracy", "MCC", "F1", "TP/FP/FN/TN")
    blocks: list[tuple[str, Agreement]] = [(name, b.agreement) for name, b in result.subsets.items()]
    if len(blocks) > 1:
        blocks.append(("merged", result.merged))
    for name, b in blocks:
        c = b.confusion
        table.add_row(
            name,
            str(b.n),
            str(b.unscored),
            *(_ci(b.metrics.get(m), b.ci95.get(m)) for m in ("kappa", "accuracy", "mcc", "f1")),
            f"{c.tp}/{c.fp}/{c.fn}/{c.tn}",
        )
    show(table)
    for name, b in blocks:
        if b.unscored:
            detail = ", ".join(f"{v} {k}" for k, v in b.unscored_reasons.items())
            console.print(f"{name}: {b.unscored} unscored ({detail}), {b.unscored_counted_as}")
        if b.unreviewed:
            console.print(f"{name}: {b.unreviewed} items labelled without human review are included")
        if b.unlabelled:
            console.print(f"{name}: {b.unlabelled} records have no label (ignored)")
    tagged_in = {f: sum(1 for _, b in blocks[: len(result.subsets)] if f in b.flags) for f in ("goldx", "ambq")}
    flags: list[tuple[str, str, FlagAgreement]] = [
        (name, f, x)
        for name, b in blocks
        for f, x in b.flags.items()
        if name != "merged" or tagged_in[f] > 1  # the merged line only adds something over two tagged subsets
    ]
    if flags:
        ft = Table(title="Judge flags against the experts' tags", title_justify="left", box=box.SIMPLE_HEAD)
        name_column(ft, "subset")
        name_column(ft, "flag")
        number_columns(ft, "tagged", "flagged", "both", "precision", "recall")
        for name, f, x in flags:
            ft.add_row(
                name,
                f,
                str(x.tagged),
                str(x.flagged),
                str(x.both),
                _ci(x.precision, x.ci95.get("precision")),
                _ci(x.recall, x.ci95.get("recall")),
            )
        show(ft)


@click.command("agree", cls=GreedyCommand)
@tables_option
@click.argument("runs", nargs=-1, required=True, type=PATH)
@_labels_opt
@_goldx_opt
@_ambq_opt
@unscored_option
@_reviewed_opt
@bootstrap_option
@_seed_opt
@json_flag("Print the result as JSON.")
def agree_cmd(
    runs: tuple[Path, ...],
    labels: tuple[Path, ...],
    goldx_ids: tuple[str, ...],
    ambq_ids: tuple[str, ...],
    unscored: str,
    reviewed_only: bool,
    bootstrap: int,
    seed: int,
    as_json: bool,
) -> None:
    """Agreement of runs' scores with human labels: kappa, accuracy, MCC, F1, flags, intervals.

    RUNS are run folders (records.jsonl) or id -> score files, paired in order with the --labels
    files; several pairs are reported per subset and merged. Positive = the prediction is correct.
    Unscored items are counted and, by default, left out of the metrics.

    Each run must be about the items of its labels file: a record pairs with a label when the ids
    match and, where both name a database, the databases too. Fewer than half of the labelled items
    with a record is refused (exit 2), naming the missing ids. Partial runs, tagged ids the labels
    file lacks, and records about another database are warned about (and listed in --json).

    \b
    Example (the ROSE authors' o3 outputs, imported with rose import-rose):
      rose agree runs/o3-bird runs/o3-spider --labels rose-vec-bird.json rose-vec-spider.json \\
          --goldx-ids rose-vec-bird=gold_false_ids.json --json
    """
    try:
        pairings = pair_runs(one_run_each(runs), _label_sets(labels, goldx_ids, ambq_ids, reviewed_only))
        result = agree(pairings, unscored=unscored_policy(unscored), resamples=bootstrap, seed=seed)
    except RoseError as e:
        fail(e)
    warn(result.warnings)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        print_agreement(result)


def _variant(value: str) -> Variant:
    for v in VARIANTS:
        if v == value:
            return v
    raise UsageError(f"unknown policy {value!r}: choose among {', '.join(VARIANTS)}")


POLICIES = "\n    ".join(f"  {v:<11} {MEANING[v]}" for v in VARIANTS)
"""The policies, one a line, for a ``{policies}`` line of a help text (indented as a docstring's body)."""


@click.command("import-rose")
@click.argument("outputs", type=PATH)
@click.option("--labels", type=PATH, help="The ROSE-VEC labels file of this part (gives db_id and the items).")
@click.option(
    "--benchmark",
    "benchmarks",
    multiple=True,
    type=PATH,
    help="The benchmark the outputs are over (gives db_id, the texts checked and the items): a BIRD-format JSON "
    "file, the first being the benchmark and later ones resolving ids outside it; a BIRD data folder stands "
    "for its mini_dev_sqlite.json and dev.json.",
)
@click.option(
    "--predictions", type=PATH, help="The system's predictions file: says whether an item dropped silently had one."
)
@out_option("Run folder to write records.jsonl and summary.json into.")
@click.option("--ex", "ex_dir", type=PATH, help="Their EX folder (default: decisive/EX or EX-<system>-eval beside).")
@click.option("--difficulty", type=PATH, help="A JSON list with question_id and difficulty (e.g. BIRD dev.json).")
@click.option("--model", help="Judge model name (default: from the path, e.g. o3).")
@click.option("--method", help="Method name (default: the folder's, e.g. ROSE, FLEX; ROSE for <judge>-<system>-eval).")
@click.option(
    "--replay",
    type=click.Choice(VARIANTS),
    default="always",
    show_default=True,
    help="Decide the judges' stored replies under this policy (see above); scores-only folders have none.",
)
@click.option("--force", is_flag=True, help="Replace an existing records.jsonl in --out.")
def import_rose_cmd(
    outputs: Path,
    labels: Path | None,
    benchmarks: tuple[Path, ...],
    predictions: Path | None,
    out: Path,
    ex_dir: Path | None,
    difficulty: Path | None,
    model: str | None,
    method: str | None,
    replay: str,
    force: bool,
) -> None:
    """Import the ROSE authors' outputs as records: ROSE-VEC's (with --labels) or the re-evaluation's
    (with --benchmark).

    A folder is read by its shape: Prover and Refuter replies (ROSE), the Prover's alone
    (ProverOnly: the Prover decides every item), or scores only (FLEX, llmsolver, decisive/EX); an
    entry whose call failed ("Connection error.") is unscored judge_error, never a 0. Judge replies
    are kept in each record's judges, the Refuter's ambiguity and gold_correct become the AmbQ and
    GoldX labels, and every item is decided with our decision table from the stored replies (checked
    against their scores), under the --replay policy:

    \b
    {policies}

    Their score and their EX (the EX folder beside the run) stay on each record as theirs
    (record.imported; "their EX" in rose compare), never as the BIRD EX reading. The items of the
    labels or the benchmark without an entry are records too, unscored: failed_in_their_run when
    their problem_question_ids.json lists them, absent_from_outputs when dropped silently.

    \b
    Examples:
      rose import-rose reference_outputs/rose-vec-bird/o3/ROSE --labels rose-vec-bird.json --out runs/o3-bird
      rose import-rose reference_outputs/rose-vec-bird/o3/FLEX --labels rose-vec-bird.json --out runs/o3-flex
      rose import-rose rose-reeval/gpt-5/o3-gpt-5-eval --benchmark ../shared/data/bird --out reeval/gpt-5
    """
    from rose_sql.analysis.reeval import benchmark_frame, load_benchmark, with_checks
    from rose_sql.analysis.rose_import import import_outputs, labels_frame, write_run

    try:
        variant = _variant(replay)
        if (labels is None) == (not benchmarks):
            raise UsageError(
                "pass --labels (ROSE-VEC: the experts' labels file) or --benchmark (the re-evaluation: the "
                "benchmark file or BIRD data folder), one of the two"
            )
        benchmark = load_benchmark(benchmarks) if benchmarks else None
        frame = (
            benchmark_frame(benchmark, outputs, predictions)
            if benchmark is not None
            else labels_frame(load_labels(labels))  # type: ignore[arg-type]
        )
        imported = import_outputs(
            outputs, frame, model=model, method=method, ex_dir=ex_dir, difficulty_path=difficulty, variant=variant
        )
        if benchmark is not None:
            imported = with_checks(imported, benchmark)
        summary = write_run(imported, out, force=force)
    except RoseError as e:
        fail(e)
    for w in imported.warnings:
        err.print(f"[yellow]warning:[/] {w}", highlight=False)
    mean = "undefined" if summary.rose is None else f"{100 * summary.rose:.2f}"
    who = imported.model or "no judge"
    if imported.kind == "scores":
        what = f"imported {imported.method} scores ({who}; no judge replies, so no ROSE policy), mean score {mean}"
    elif imported.kind == "prover-only":
        what = f"{imported.method} judged by {who}: the Prover decides every item, mean score {mean}"
    else:
        what = f"{imported.method} judged by {who}, decided under policy {variant}, ROSE {mean}"
    console.print(f"{out}: {summary.n} items imported, {summary.scored} scored: {what}", highlight=False)
    for note in imported.notes:
        console.print(note, highlight=False)


import_rose_cmd.help = (import_rose_cmd.help or "").replace("{policies}", POLICIES)


@click.command("replay", cls=GreedyCommand)
@tables_option
@click.argument("runs", nargs=-1, required=True, type=PATH)
@_labels_opt
@_goldx_opt
@_ambq_opt
@unscored_option
@_reviewed_opt
@click.option(
    "--variants",
    default=",".join(VARIANTS),
    show_default=True,
    help=f"Comma-separated policies to replay, among {', '.join(VARIANTS)} (see above).",
)
@click.option(
    "--aggregate",
    "aggregates",
    default="",
    help="Comma-separated aggregation rules to re-decide voting stages under, among majority, unanimous, any-fail, "
    "strong-only (runs made with --samples, --panel or --escalate-to); each policy is replayed under each rule.",
)
@json_flag("Print the table as JSON.")
def replay_cmd(
    runs: tuple[Path, ...],
    labels: tuple[Path, ...],
    goldx_ids: tuple[str, ...],
    ambq_ids: tuple[str, ...],
    unscored: str,
    reviewed_only: bool,
    variants: str,
    aggregates: str,
    as_json: bool,
) -> None:
    """Re-decide runs under other policies from their stored judgements, and compare agreement.

    No model is called: the Prover's and Refuter's recorded replies are fed to the decision table
    again. Prints one line per policy (the scores as recorded first), merged over the runs. The
    policies (the first three are those of rose run --matched-refuter):

    \b
    {policies}

    A policy that needs a reply the run never asked for leaves the item unscored (not_replayable).
    Runs pair with the labels files as in rose agree. Stages that voted are re-decided under each
    --aggregate rule from their stored votes; items whose votes cannot support a rule (strong-only
    where the strong model was never asked) are named.

    \b
    Examples:
      rose replay runs/o3-bird --labels rose-vec-bird.json --variants always,never
      rose replay runs/k3 --labels labels.json --variants evidence --aggregate majority,unanimous,any-fail
    """
    try:
        chosen = [_variant(v.strip()) for v in variants.split(",") if v.strip()]
        rules = [_rule(a.strip()) for a in aggregates.split(",") if a.strip()]
        loaded = one_run_each(runs)
        sets = _label_sets(labels, goldx_ids, ambq_ids, reviewed_only)
        warnings = pairing_warnings(pair_runs(loaded, sets))
        table = replay_table(loaded, sets, chosen, unscored_policy(unscored), rules)
    except RoseError as e:
        fail(e)
    warn(warnings)
    if as_json:
        click.echo(json.dumps([asdict(row) for row in table], indent=2))
        return
    t = Table(title="Replay: the same judgements under other policies (percent)", title_justify="left")
    subsets = [s.name for s in sets]
    name_column(t, "policy")
    number_columns(t, "n", "unscored", "kappa", "accuracy", "MCC", "F1", *(f"kappa {s}" for s in subsets))
    for row in table:
        t.add_row(
            row.policy,
            str(row.n),
            str(row.unscored),
            *(_fmt(x) for x in (row.kappa, row.accuracy, row.mcc, row.f1)),
            *(_fmt(row.subsets[s]) for s in subsets),
        )
    show(t)
    for row in table:
        if row.note:
            console.print(f"{row.policy}: {row.note}", highlight=False)
        if row.unsupported:
            ids = ", ".join(json.dumps(i) for i in row.unsupported[:10])
            more = f" and {len(row.unsupported) - 10} more" if len(row.unsupported) > 10 else ""
            console.print(
                f"{row.policy}: the stored votes of {len(row.unsupported)} items cannot support this rule "
                f"(not_replayable): {ids}{more}",
                highlight=False,
            )


def _rule(text: str) -> Aggregate:
    if text not in get_args(Aggregate):
        raise UsageError(f"unknown aggregation rule {text!r}: choose among {', '.join(get_args(Aggregate))}")
    return cast(Aggregate, text)


replay_cmd.help = (replay_cmd.help or "").replace("{policies}", POLICIES)


@click.command("judge-card", cls=GreedyCommand)
@click.argument("runs", nargs=-1, required=True, type=PATH)
@_labels_opt
@_goldx_opt
@_ambq_opt
@unscored_option
@_reviewed_opt
@bootstrap_option
@_seed_opt
@click.option("--validation-set", required=True, help="Name of the validation set (e.g. ROSE-VEC).")
@click.option("--date", help="The judge's month, YYYY-MM (default: this month).")
@out_option("Where to write the card (JSON).")
def judge_card_cmd(
    runs: tuple[Path, ...],
    labels: tuple[Path, ...],
    goldx_ids: tuple[str, ...],
    ambq_ids: tuple[str, ...],
    unscored: str,
    reviewed_only: bool,
    bootstrap: int,
    seed: int,
    validation_set: str,
    date: str | None,
    out: Path,
) -> None:
    """Write a judge card named ROSE_<model>-<yyyymm>: the judge's configuration and its agreement.

    Model, provider, method, prompt hashes and parameters come from the runs' summary.json; agreement
    (with 95% intervals) is measured against the labels, per subset and merged. Runs pair with the
    labels files as in rose agree. Several runs with one labels file are repeats of one configuration
    (the same model and method run again): the card keeps each run's metrics and their spread, its
    headline being the run of median kappa, and rose judge-compare then refuses an upgrade whose margin
    lies within that spread. Cards of other methods than ROSE are named after them (FLEX_o3-...).

    \b
    Examples:
      rose judge-card runs/my-run --labels labels.json --validation-set ROSE-VEC --out cards/new.json
      rose judge-card runs/o3 runs/o3-t4 runs/o3-t8 --labels rose-vec-bird.json --validation-set ROSE-VEC-BIRD \\
          --out cards/o3-bird.json
    """
    from rose_sql.analysis.judge_card import build_card, build_repeated_card

    try:
        loaded = one_run_each(runs)
        sets = _label_sets(labels, goldx_ids, ambq_ids, reviewed_only)
        policy = unscored_policy(unscored)
        if len(sets) == 1 and len(loaded) > 1:
            reports = [agree(pair_runs([r], sets), unscored=policy, resamples=bootstrap, seed=seed) for r in loaded]
            card = build_repeated_card(
                loaded, sets[0], reports, validation_set=validation_set, date=date, version=__version__
            )
            warnings = [w for rep in reports for w in rep.warnings]
        else:
            result = agree(pair_runs(loaded, sets), unscored=policy, resamples=bootstrap, seed=seed)
            card = build_card(loaded, sets, result, validation_set=validation_set, date=date, version=__version__)
            warnings = result.warnings
    except RoseError as e:
        fail(e)
    warn(warnings)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(card.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    console.print(f"{card_line(card)} -> {out}", highlight=False)
    if card.repeats:
        runs_kappa = ", ".join(_fmt(r.kappa) for r in card.repeats)
        widths = ", ".join(f"{m} {card.spread_width(m):.2f}" for m in card.spread)
        console.print(f"{len(card.repeats)} runs of one configuration: kappa {runs_kappa}; spread {widths}")


def card_line(card: JudgeCard) -> str:
    """A card's agreement in one line."""
    a = card.agreement
    return (
        f"{card.name}: kappa {_fmt(a.kappa)}, accuracy {_fmt(a.accuracy)}, MCC {_fmt(a.mcc)}, F1 {_fmt(a.f1)} on "
        f"{card.validation_set.name} (n={a.n})"
    )


@click.command("judge-compare")
@click.argument("old", type=PATH)
@click.argument("new", type=PATH)
@json_flag("Print the verdict as JSON.")
def judge_compare_cmd(old: Path, new: Path, as_json: bool) -> None:
    """Apply the upgrade rule: NEW replaces OLD only if better on kappa, accuracy, MCC and F1 at once.

    Exit status 0 when NEW should replace OLD, 1 when OLD stays, 2 when the cards cannot be compared.

    \b
    Example:
      rose judge-compare cards/ROSE_o3-202601.json cards/ROSE_gpt-5-202603.json
    """
    from rose_sql.analysis.judge_card import load_card, upgrade

    try:
        a, b = load_card(old), load_card(new)
        verdict = upgrade(a, b)
    except RoseError as e:
        fail(e)
    if as_json:
        click.echo(
            json.dumps({"old": a.name, "new": b.name, "upgrade": verdict.upgrade, "reasons": verdict.reasons}, indent=2)
        )
    else:
        for line in verdict.reasons:
            console.print(line, highlight=False)
    sys.exit(0 if verdict.upgrade else 1)
