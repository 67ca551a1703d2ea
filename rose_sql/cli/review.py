"""``rose review``: the expert review web app (the app is :mod:`rose_sql.review`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import click

from rose_sql.cli.agree import GreedyCommand
from rose_sql.cli.main import PATH, console, err, fail
from rose_sql.errors import RoseError, UsageError
from rose_sql.items.load import FORMATS
from rose_sql.review.settings import ReviewConfig

_DEFAULTS = ReviewConfig(state=Path())
"""Read for its defaults only."""
EXTRAS = ("starlette", "jinja2", "uvicorn", "pygments")
"""What serving needs beyond rose-sql's own dependencies (the ``review`` extra)."""


class _ReviewCommand(GreedyCommand):
    greedy = ("--import-annotations",)


def missing_extras() -> list[str]:
    """The web packages serving needs that are not installed."""
    return [name for name in EXTRAS if importlib.util.find_spec(name) is None]


@click.command("review", cls=_ReviewCommand)
@click.argument("state", type=PATH)
@click.option("--project", help="The project to load into, import into or export (default: the loaded file's name).")
@click.option(
    "--load",
    "load",
    type=PATH,
    help="Items to review: a rose run output (system folder or records.jsonl) or a file rose run reads.",
)
@click.option("--gold", type=PATH, help="Gold file for --load, where its format needs one (as rose run --gold).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Format of --load (detected when omitted).")
@click.option("--db-root", type=PATH, help="Folder of <db_id>/<db_id>.sqlite: results, schema and own queries.")
@click.option(
    "--import-annotations",
    "annotations",
    multiple=True,
    type=PATH,
    help="Per-annotator label files (ROSE-VEC's annotations_<n>.json, one annotator each); several may follow.",
)
@click.option(
    "--export",
    "export_dir",
    type=PATH,
    help="Write the consensus (ROSE-VEC format), flag id lists and every label to DIR/<project>/, then exit.",
)
@click.option(
    "--export-for",
    "export_for",
    metavar="NAME",
    help=(
        "With --export: what annotator NAME may see: the items they still owe a label are left out of every "
        "file and figure (the export of someone labelling blind)."
    ),
)
@click.option(
    "--host", default=_DEFAULTS.host, show_default=True, help="Address to bind (loopback: this machine only)."
)
@click.option("--port", type=int, default=_DEFAULTS.port, show_default=True, help="TCP port (0: any free one).")
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    help="Another name the Host header may carry (when --host is not loopback); repeatable.",
)
@click.option(
    "--labels-per-item",
    type=int,
    default=_DEFAULTS.labels_per_item,
    show_default=True,
    help="Independent labels each item gets; one more is asked where they disagree.",
)
@click.option("--no-serve", is_flag=True, help="Load or import, then exit without serving.")
def review_cmd(
    state: Path,
    project: str | None,
    load: Path | None,
    gold: Path | None,
    fmt: str | None,
    db_root: Path | None,
    annotations: tuple[Path, ...],
    export_dir: Path | None,
    export_for: str | None,
    host: str,
    port: int,
    allow_hosts: tuple[str, ...],
    labels_per_item: int,
    no_serve: bool,
) -> None:
    """Label items with a team of experts in a local web app, measure your agreement, export validation sets.

    STATE is the SQLite file holding projects, items and every label (created when missing); each label
    is committed when given. Annotators sign in with a name and no password: the app is for this machine
    (loopback) unless --host says otherwise, and it refuses requests whose Host or Origin is not its own.
    Each item gets two independent labels and a third where they disagree; the machine's verdict is shown
    only after labelling. Serving needs the extra: pip install 'rose-sql[review]'.

    \b
    Examples:
      rose review review.sqlite --project c3sql --load runs/c3sql --db-root spider/database
      rose review review.sqlite                      # serve: open http://127.0.0.1:8765/
      rose review rv.sqlite --project rose-vec-bird \\
          --import-annotations ../shared/data/rose-vec/annotations/bird/annotations_*.json --no-serve
      rose review rv.sqlite --project rose-vec-bird --export validation/
    """
    from rose_sql.review.exchange import export, import_annotations
    from rose_sql.review.store import Store
    from rose_sql.review.work import load_work

    if labels_per_item < 1:
        fail(UsageError("--labels-per-item must be at least 1"))
    if export_for is not None and export_dir is None:
        fail(UsageError("--export-for says whom an export is for: give --export DIR too"))
    serving = export_dir is None and not no_serve
    if serving and missing_extras():
        # printed without rich markup, which would take "[review]" for a style
        missing = ", ".join(missing_extras())
        err.print(
            f"error: serving needs {missing}: install the extra with pip install 'rose-sql[review]'",
            markup=False,
            highlight=False,
        )
        sys.exit(2)
    try:
        store = Store(state)
        if load is not None:
            name = project or load.stem if load.name != "records.jsonl" else project or load.parent.name
            work = load_work(load, gold=gold, fmt=fmt)
            for w in work.warnings:
                err.print(f"[yellow]warning:[/] {w}", highlight=False)
            added = store.add_items(name, work.source, work.items, db_root)
            console.print(f"project {name}: {added} new items of {len(work.items)} from {work.source}", highlight=False)
            project = name
        if annotations:
            if project is None:
                raise UsageError("--import-annotations needs --project (the project to import into)")
            imported = import_annotations(store, project, list(annotations), db_root)
            console.print(f"project {project}: {imported.items_added} new items", highlight=False)
            for who, new, kept in imported.files:
                console.print(f"  {who}: {new} labels imported, {kept} already there", highlight=False)
        if db_root is not None and load is None and not annotations:
            if project is None:
                raise UsageError("--db-root without --load needs --project (whose databases they are)")
            store.set_db_root(project, db_root)
        if export_dir is not None:
            if project is None:
                raise UsageError("--export needs --project")
            summary = export(store, project, export_dir, viewer=export_for, per_item=labels_per_item)
            console.print(
                f"project {project}: {summary['consensus']} consensus items of {summary['items']} "
                f"({summary['consensus_correct']} correct); raw agreement {summary['first_two_agree']} of "
                f"{summary['double_labelled']} double-labelled items; written to {export_dir / project}",
                highlight=False,
            )
            return
    except RoseError as e:
        fail(e)
    if not serving:
        return
    _serve(state, host, port, allow_hosts, labels_per_item)


def _serve(state: Path, host: str, port: int, allow_hosts: tuple[str, ...], labels_per_item: int) -> None:
    from rose_sql.review.serve import is_loopback, serve

    config = ReviewConfig(state=state, host=host, port=port, allowed_hosts=allow_hosts, labels_per_item=labels_per_item)
    if not is_loopback(host):
        err.print(
            f"[yellow]warning:[/] listening on {host}: anyone who reaches it can label under any name (no "
            "passwords); requests must name an allowed host (--allow-host)",
            highlight=False,
        )

    def ready(url: str) -> None:
        err.print(f"rose review on {url} (state in {state}); Ctrl-C stops it", highlight=False)

    try:
        serve(config, ready=ready)
    except OSError as e:
        fail(UsageError(f"cannot listen on {host}:{port}: {e}"))
    except KeyboardInterrupt:
        pass
