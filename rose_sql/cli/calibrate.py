"""``rose calibrate``: run a judge on a labelled set, measure its agreement, write its card, compare.

The judge and execution options are ``rose run``'s own (the same :class:`click.Option` objects, so
they cannot drift apart), and the cascade runs through ``rose run`` itself; agreement, the card and
the upgrade rule are those of ``rose agree``, ``rose judge-card`` and ``rose judge-compare``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from rose_sql.__version__ import __version__
from rose_sql.analysis.agree import BOOTSTRAP_SEED, agree, pair_runs
from rose_sql.analysis.judge_card import JudgeCard
from rose_sql.analysis.labelled import Part, describe, labelled_source, rose_vec_sources, select, write_part
from rose_sql.analysis.labels import LabelSet, load_labels, with_tags
from rose_sql.cli.agree import card_line, print_agreement
from rose_sql.cli.common import bootstrap_option, one_run_each, unscored_option, unscored_policy
from rose_sql.cli.main import PATH, console, fail, warn
from rose_sql.cli.options import out_option
from rose_sql.cli.run import databases, run_cmd
from rose_sql.config import Config
from rose_sql.errors import RoseError, UsageError

NOT_FORWARDED = frozenset({"preds", "gold", "out", "fmt", "max_input_mb", "shard", "ray"})
"""``rose run``'s parameters that calibrate sets itself (the items, where they go) or does not offer."""
RUN_OPTIONS = [p for p in run_cmd.params if p.name not in NOT_FORWARDED]
"""Every other option of ``rose run``: the judge, its endpoint, budget, cache, execution limits, dry run."""


@click.command("calibrate")
@click.option(
    "--rose-vec",
    type=PATH,
    help="The ROSE-VEC folder (rose-vec-bird.json, rose-vec-spider.json): its items whose database is under --db.",
)
@click.option(
    "--labels",
    type=PATH,
    help="A labelled set in ROSE-VEC's format, e.g. rose review's export <project>.json (GoldX / AmbQ id lists "
    "beside it are read too).",
)
@out_option("Calibration folder: the items kept, the runs and the judge card.")
@click.option("--card", "old_card", type=PATH, help="The current judge's card: apply the upgrade rule against it.")
@click.option(
    "--validation-set", help="Name of the validation set on the card (default: ROSE-VEC, or the labels file's stem)."
)
@click.option("--date", help="The judge's month on the card, YYYY-MM (default: this month).")
@unscored_option
@bootstrap_option
@click.pass_context
def calibrate_cmd(
    ctx: click.Context,
    /,
    rose_vec: Path | None,
    labels: Path | None,
    out: Path,
    old_card: Path | None,
    validation_set: str | None,
    date: str | None,
    unscored: str,
    bootstrap: int,
    **run_options: Any,
) -> None:
    """Calibrate a judge: run the cascade on a labelled set, measure agreement, write the judge card.

    The items are ROSE-VEC's (--rose-vec) or a labelled set such as rose review's export (--labels),
    cut down to those whose database is under --db (the others are counted, by database). The
    cascade runs as in rose run with the judge options below (OUT/runs/<part>/), agreement with the
    human labels is measured with 95% bootstrap intervals, and the card ROSE_<model>-<yyyymm> is
    written to OUT/. With --card OLD, the upgrade rule says whether the new judge replaces the old
    one (it must be better on kappa, accuracy, MCC and F1 at once, on the same items). With
    --dry-run, the cost of the run is printed and nothing is called or written.

    \b
    Examples (from the repository root, beside ../shared/data):
      rose calibrate --rose-vec ../shared/data/rose-vec --db ../shared/data/bird --out calib/gpt-4o \\
          --judge-model gpt-4o --dry-run
      rose calibrate --labels validation/c3sql/c3sql.json --db spider/database --out calib/new \\
          --judge-model gpt-5 --card cards/ROSE_o3-202601.json
    """
    try:
        if (rose_vec is None) == (labels is None):
            raise UsageError("give the labelled items: --rose-vec FOLDER or --labels FILE (one of them)")
        if not run_options.get("judge_model"):
            raise UsageError("calibrate measures a judge: give --judge-model (and --judge-base-url)")
        root = databases(run_options["db_root"], Config(), option="--db")
        sources = rose_vec_sources(rose_vec) if rose_vec is not None else [labelled_source(Path(str(labels)))]
        parts = [select(s, root) for s in sources]
    except RoseError as e:
        fail(e)
    for p in parts:
        console.print(describe(p, run_options["db_root"]), highlight=False)
    usable = [p for p in parts if p.kept]
    if not usable:
        fail(UsageError(f"no labelled item has its database under --db {run_options['db_root']}: nothing to judge"))
    if run_options.get("dry_run"):
        with tempfile.TemporaryDirectory(prefix="rose-calibrate-") as tmp:  # nothing is written under --out
            _run(ctx, usable, Path(tmp), run_options)  # a dry run makes no call: nothing is left unscored
        console.print("Dry run: no judge was called, no card written.")
        return
    sets, status = _run(ctx, usable, out, run_options)
    name = validation_set or ("ROSE-VEC" if rose_vec is not None else sets[0].name)
    _card(out, sets, name, date, unscored, bootstrap, old_card)
    if status:  # the run left items unscored for a transient reason: the card counts them, the status says so
        sys.exit(status)


def _run(
    ctx: click.Context, parts: list[Part], folder: Path, run_options: dict[str, Any]
) -> tuple[list[LabelSet], int]:
    """Write the kept items, run the cascade on them with ``rose run``, and return their label sets and the
    run's exit status: 3 when it left items unscored for a transient reason (agreement and the card still
    follow, counting them as unscored), else 0."""
    written = [write_part(p, folder / "items") for p in parts]
    status = 0
    try:
        preds = tuple(items for items, _ in written)
        ctx.invoke(run_cmd, preds=preds, out=folder / "runs", fmt="sqlexam", **run_options)
    except SystemExit as e:
        if e.code != 3:
            raise
        status = 3
    if run_options.get("dry_run"):
        return [], status
    sets = []
    for items, tags in written:
        labels = load_labels(items)
        for flag, path in tags.items():
            labels = with_tags(labels, flag, path)
        sets.append(labels)
    return sets, status


def _card(
    out: Path,
    sets: list[LabelSet],
    validation_set: str,
    date: str | None,
    unscored: str,
    bootstrap: int,
    old_card: Path | None,
) -> None:
    """Agreement, the judge card and, with an old card, the upgrade rule's verdict in plain words."""
    from rose_sql.analysis.judge_card import build_card, load_card, upgrade

    try:
        runs = one_run_each([out / "runs" / s.name for s in sets])
        result = agree(
            pair_runs(runs, sets), unscored=unscored_policy(unscored), resamples=bootstrap, seed=BOOTSTRAP_SEED
        )
        card = build_card(runs, sets, result, validation_set=validation_set, date=date, version=__version__)
        old = load_card(old_card) if old_card is not None else None
    except RoseError as e:
        fail(e)
    warn(result.warnings)
    print_agreement(result)
    path = out / f"{card.name}.json"
    path.write_text(json.dumps(card.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    console.print(f"{card_line(card)} -> {path}", highlight=False)
    if old is None or old_card is None:
        return
    try:
        verdict = upgrade(old, card)
    except UsageError as e:
        console.print(f"Cannot apply the upgrade rule: {e}. Keep using {old.name}.", highlight=False)
        return
    for line in verdict.reasons[:-1]:
        console.print(f"  {line}", highlight=False)
    console.print(advice(old, card, old_card, path, verdict.upgrade), highlight=False)
    (out / "verdict.json").write_text(
        json.dumps({"old": old.name, "new": card.name, "upgrade": verdict.upgrade, "reasons": verdict.reasons}) + "\n",
        encoding="utf-8",
    )


def advice(old: JudgeCard, new: JudgeCard, old_path: Path, new_path: Path, upgrade: bool) -> str:
    """The upgrade rule's verdict as advice: which judge to use from now on, and why."""
    from rose_sql.analysis.judge_card import UPGRADE_METRICS

    if upgrade:
        return (
            f"Use the new judge, {new.name} ({new_path}): it agrees with the experts better than the current "
            f"judge, {old.name} ({old_path}), on kappa, accuracy, MCC and F1 alike."
        )
    worse = [m for m in UPGRADE_METRICS if (new.agreement.metric(m) or 0.0) <= (old.agreement.metric(m) or 0.0)]
    names = ", ".join("MCC" if m == "mcc" else "F1" if m == "f1" else m for m in worse)
    return (
        f"Keep using the current judge, {old.name} ({old_path}): the new judge, {new.name} ({new_path}), "
        f"is not better on {names}, and the rule asks for better on all four."
    )


calibrate_cmd.params.extend(RUN_OPTIONS)
