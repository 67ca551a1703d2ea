"""``rose run`` and ``rose demo``: evaluate prediction files, with a progress bar and a summary table."""

from __future__ import annotations

import contextlib
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import click
from click.core import ParameterSource
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from rose_sql.cli.main import console, err, fail
from rose_sql.cli.options import DB_HELP, field_options, ordered, out_option, run_options, values_of
from rose_sql.cli.tables import tables_option
from rose_sql.config import (
    BATCH_MAX_REQUESTS,
    BATCH_POLL_S,
    LOCAL_CTX,
    MAX_INPUT_BYTES,
    Config,
    JudgeConfig,
    Subset,
    option,
)
from rose_sql.distributed import INSTALL_RAY, ray_address
from rose_sql.engines import Source
from rose_sql.errors import RoseError, UsageError, exit_interrupted
from rose_sql.items.load import FORMATS, Loaded, load_items
from rose_sql.provenance import command_line
from rose_sql.run.batch import BatchBackend
from rose_sql.run.checks import check_batch, check_budget, check_votes, require_questions
from rose_sql.run.runner import Backend, SystemRun, plan, run
from rose_sql.run.shard import Shard
from rose_sql.summary import Summary

if TYPE_CHECKING:
    from rose_sql.judges.llm import Ledger
    from rose_sql.run.estimate import Estimate


def check_panel(text: str) -> str:
    """``--panel``'s list, refused when an entry names no model (``a,,b``, ``=URL``)."""
    if any(not m.strip().partition("=")[0].strip() for m in text.split(",")):
        raise UsageError(f"{text!r}: name a model in each comma-separated entry (MODEL or MODEL=URL)")
    return text


def check_ray(text: str) -> str:
    """``--ray``'s value, checked as it is read (before a missing argument is: ``--ray preds.txt`` took the file)."""
    ray_address(text)
    return text


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """What ``rose run`` is asked beside the config: its inputs, where it writes, how it resumes and exits,
    where it runs. Each field declares its option as the config's fields do."""

    gold: Path | None = option(None, flags="--gold", help="Gold file: BIRD/Spider dev.json or dev_gold.sql.")
    db_root: str = option(flags=("--db", "--db-root", "db_root"), required=True, help=DB_HELP)
    out: Path = option(flags="--out", required=True, help="Output folder; each prediction file gets OUT/<file name>/.")
    fmt: str | None = option(
        None, flags=("--format", "fmt"), choices=tuple(FORMATS), help="Input format (default: detected)."
    )
    max_input_mb: float = option(
        MAX_INPUT_BYTES / 2**20,
        flags="--max-input-mb",
        min=0,
        min_open=True,
        help="Largest prediction or gold file read, in MiB; a larger one is refused before anything runs.",
    )
    resume: bool = option(
        False,
        flags="--resume",
        help=(
            "Continue an earlier run in OUT: keep its records (refused if its inputs or options differ) and "
            "evaluate again the items it left unscored for a transient reason."
        ),
    )
    strict: bool = option(
        False,
        flags="--strict",
        help=(
            "Exit 3 when any item is unscored (db_missing, gold_error... too), for CI jobs; without it only "
            "transient and infrastructure reasons do (judge_error, budget_exhausted, wall_guard, "
            "db_unreadable...). Items awaiting a judge in a run without one are what such a run is for: "
            "never counted."
        ),
    )
    keep_unscored: bool = option(
        False,
        flags="--keep-unscored",
        help="With --resume: keep items left unscored for a transient reason as they are (no retry).",
    )
    allow_privileged_login: bool = option(
        False,
        flags="--allow-privileged-login",
        help=(
            "Run with a --db login that may do more than read (a superuser, a write grant, PostgreSQL's "
            "pg_read_server_files / pg_read_all_settings / pg_monitor, MySQL's FILE, PROCESS, SUPER), with a "
            "warning; without it such a login is refused (make a reader with rose db reader)."
        ),
    )
    no_cache: bool = option(False, flags="--no-cache", help="Do not read or write the LLM cache.")
    dry_run: bool = option(
        False, flags="--dry-run", help="Build every prompt, estimate calls and cost; call nothing, write nothing."
    )
    shard: str | None = option(
        None,
        flags="--shard",
        metavar="I/N",
        help=(
            "Evaluate only shard I of N (0 <= I < N): the items whose id hashes to I, the same share on "
            "every machine. Run each shard into its own --out, then join them with 'rose merge'."
        ),
    )
    ray: str | None = option(
        None,
        flags=("--ray", "ray"),
        metavar="[ADDRESS]",
        check="rose_sql.cli.run:check_ray",
        flag_value="local",
        unset=None,
        help="Evaluate on a Ray cluster: ADDRESS 'auto', HOST:PORT or ray://HOST:PORT; alone, a local Ray instance "
        "(put it after the prediction files). --workers is then the number of Ray workers (default: one per CPU of "
        f"the cluster). Needs the optional extra: {INSTALL_RAY}.",
    )
    batch: bool = option(
        False,
        flags="--batch",
        help=(
            "Send the judges' calls through the provider's Batch API (OpenAI's files and batches endpoints), "
            "in rounds as the cascade needs them, at the batch price (OpenAI: half). Replies can take up to "
            "24 hours; the batches are kept in OUT/batches.jsonl, so an interrupted run continues them with "
            "--resume without sending them again. Needs the LLM cache."
        ),
    )
    batch_poll: float = option(
        BATCH_POLL_S,
        flags="--batch-poll",
        min=0,
        min_open=True,
        help="With --batch: seconds between two polls of a batch.",
    )
    judge_gguf: Path | None = option(
        None,
        flags="--judge-gguf",
        metavar="FILE",
        help="The pinned local judge: serve this GGUF file with llama.cpp's server (the local extra: xllamacpp) in a "
        "child process on 127.0.0.1, started at the first call the cache cannot answer and stopped at the end; "
        "temperature 0, a fixed seed, one slot, no prompt cache, one thread. The manifest records the file's "
        "SHA-256, the runtime's version and these settings. --judge-model defaults to the file's name.",
    )
    judge_gguf_ctx: int = option(
        LOCAL_CTX,
        flags="--judge-gguf-ctx",
        min=512,
        help="Context window of --judge-gguf's server, prompt and reply together (ROSE's prompts take about 3.7k "
        "tokens); a request past it is judge_error.",
    )
    judge_gguf_threads: int = option(
        1,
        flags="--judge-gguf-threads",
        min=1,
        help="CPU threads of --judge-gguf's server (recorded: the arithmetic's order may depend on it). More than the "
        "free cores makes llama.cpp far slower, not faster.",
    )
    batch_max_requests: int = option(
        BATCH_MAX_REQUESTS,
        flags="--batch-max-requests",
        min=1,
        help="With --batch: requests per batch at most (the provider's limit; lower it to stay under a queue limit).",
    )


ORDER = (
    *("gold", "db_root", "out", "fmt", "max_input_mb", "resume", "strict", "keep_unscored", "max_steps", "timeout"),
    *("workers", "max_rows", "evidence", "evidence_steps", "evidence_budget", "evidence_scratch"),
    *("allow_privileged_login", "judge_model", "panel", "samples", "samples_temperature", "escalate_to"),
    *("escalate_below", "aggregate", "judge_base_url", "judge_gguf", "judge_gguf_ctx", "judge_gguf_threads"),
    *("concurrency", "policy", "matched_refuter", "budget"),
    *("prices", "no_cache", "cache_dir", "run_key", "judge_timeout", "judge_max_tokens", "retry_invalid"),
    *("max_retries",),
    *("judge_structured", "judge_options", "reasoning_effort", "dry_run", "shard", "limit", "ids_file", "ray"),
    *("batch", "batch_poll", "batch_max_requests"),
)
"""The order ``rose run --help`` lists its options in; an option not named here comes after them."""
PARAMS: list[click.Parameter] = [
    click.Argument(["preds"], nargs=-1, required=True, type=click.Path(path_type=Path)),
    *ordered(run_options(Job, Config, JudgeConfig, Subset), ORDER),
]


@click.command("run", params=PARAMS)
@tables_option
def run_cmd(preds: tuple[Path, ...], **values: Any) -> None:
    """Evaluate one or more prediction files against the gold and the databases.

    Writes OUT/<name>/records.jsonl (one line per item, appended as items finish), manifest.json and
    summary.json for each prediction file. Exit status: 0 when the run completed and every item is
    scored, or awaits a judge in a run without one, whatever the scores; 3 when it completed but items
    are unscored for a transient or infrastructure reason (judge_error, judge_invalid, budget_exhausted,
    wall_guard, db_unreadable, internal_error; with --strict, for any reason), after a line that says
    how many, why, and the command that continues; 2 for unusable input or options, when no database
    could be read, when the --db login may do more than read (--allow-privileged-login), or when the
    judge's endpoint cannot be reached; 130 when interrupted (the command
    that continues is printed).

    \b
    Examples (from the repository root, beside ../shared/data):
      rose run ../shared/data/preds/spider/c3sql.txt --gold ../shared/data/spider/dev.json \\
          --db-root ../shared/data/spider/database --out runs/
      rose run preds.json --gold dev.json --db-root dbs --out runs --judge-model gpt-4o --dry-run
      rose run preds.json --gold dev.json --db-root dbs --out runs --judge-model gpt-4o --resume
      rose run preds.json --gold dev.json --db-root dbs --out runs --judge-model gpt-4o --batch
      rose run preds.json --gold dev.json --db-root dbs --out runs --judge-model gpt-4o-mini --samples 3 \\
          --escalate-to o3
    """
    job = Job(**values_of(Job, values))
    try:
        config = run_config(values, no_cache=job.no_cache)
        prepared = _prepare(job, config, preds, Subset(**values_of(Subset, values)), ray_workers=values["workers"])
    except RoseError as e:
        fail(e)
    if prepared is None:
        return  # a dry run: the estimate is printed
    root, systems, backend = prepared
    _announce(systems, config)
    try:
        summaries = _run_with_progress(systems, root, config, backend)
    except RoseError as e:
        err.print(
            f"records written so far are kept under {job.out}; to continue:\n  {resume_command()}", highlight=False
        )
        fail(e)
    except KeyboardInterrupt:
        _interrupted(systems, job.out)
    print_summaries(summaries)
    for line in missing_databases(systems, root):
        console.print(line, highlight=False)
    if isinstance(backend, BatchBackend):
        console.print(backend.report(), highlight=False)
    console.print(f"records: {', '.join(str(s.out_dir / 'records.jsonl') for s in systems)}", highlight=False)
    _exit_if_nothing_could_run(systems, summaries, root)
    _exit_if_unscored(summaries, strict=job.strict)


@contextlib.contextmanager
def hashing(path: Path) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on standard error while a GGUF file is hashed (shown only once it takes a while)."""
    bar = Progress(
        f"hashing {path.name}", BarColumn(), DownloadColumn(), TimeRemainingColumn(), console=err, transient=True
    )
    task = bar.add_task("hash", total=None)
    with bar:
        yield lambda done, total: bar.update(task, completed=done, total=total)


def run_config(values: dict[str, Any], *, no_cache: bool = False) -> Config:
    """The config of a ``rose run`` from its parameters: every declared field by name; the judge's models from
    --judge-model and --panel (``MODEL=URL`` gives one its endpoint), evidence on with a judge unless told."""
    judge_values = values_of(JudgeConfig, values)
    gguf: Path | None = values.get("judge_gguf")
    if gguf is not None:
        if values["judge_base_url"] or values["panel"] or values["escalate_to"] or values["batch"] or values["ray"]:
            raise UsageError(
                "--judge-gguf is the judges' endpoint and model: drop --judge-base-url, --panel, "
                "--escalate-to, --batch and --ray"
            )
        judge_values["model"] = judge_values.get("model") or gguf.name.removesuffix(".gguf")
    first = [m] if (m := judge_values.pop("model", None)) else []
    panel = judge_values.pop("panel", "")
    models = list(dict.fromkeys([*first, *(m.strip() for m in panel.split(",") if m.strip())]))
    judge_model = models[0].partition("=")[0] if models else None
    config_values = values_of(Config, values)
    config_values.setdefault("evidence", judge_model is not None)
    config = Config(**config_values)
    if not judge_model and (values["judge_options"] or values["reasoning_effort"]):
        raise UsageError("--judge-option and --reasoning-effort configure the judges: give --judge-model too")
    if not judge_model:
        if judge_model is None and values["escalate_to"] is not None:
            raise UsageError("--escalate-to needs --judge-model: the cheap model that judges first")
        return config
    judge = JudgeConfig(model=judge_model, **judge_values, panel=tuple(models) if len(models) > 1 else ())
    if "=" in models[0]:
        judge = replace(judge, base_url=models[0].partition("=")[2] or judge.base_url)
    if gguf is not None:
        from rose_sql.judges.local import local_model

        # one call at a time: the server has one slot, and a call queued there would spend its timeout
        with hashing(gguf) as progress:
            local = local_model(
                gguf,
                n_ctx=values["judge_gguf_ctx"],
                threads=values["judge_gguf_threads"],
                hashes=None if no_cache else judge.cache_dir,
                progress=progress,
            )
        judge = replace(judge, local=local, concurrency=1)
    return config.with_(judge=replace(judge, cache_dir=None) if no_cache else judge)


def _prepare(
    job: Job, config: Config, preds: Sequence[Path], subset: Subset, *, ray_workers: int | None
) -> tuple[Source, list[SystemRun], Backend | None] | None:
    """Every refusal before anything runs, the inputs read, and the plan of the run (None after a dry run's
    estimate): the databases, each file's system, the backend (Ray, the Batch API, or None: this machine)."""
    check_votes(config.judge, ray=job.ray is not None)
    root = databases(job.db_root, config, option="--db")
    _refuse_idle_options(click.get_current_context(), config, root, resume=job.resume)
    if job.ray is not None and root.folder_path is None:
        raise UsageError("--ray evaluates folders of SQLite files; with a URL, run rose run --shard on each node")
    if job.batch:
        check_batch(config.judge, ray=job.ray is not None)
    if job.dry_run and config.judge is None:
        raise UsageError("--dry-run estimates LLM calls and needs --judge-model")
    share = Shard.parse(job.shard) if job.shard is not None else None
    chosen = subset if subset.limit is not None or subset.ids is not None else None
    address = ray_address(job.ray) if job.ray is not None else None
    if config.judge is not None:
        check_budget(config.judge)
    loaded = [load_items(p, job.gold, job.fmt, max_bytes=int(job.max_input_mb * 2**20)) for p in preds]
    if config.judge is not None:
        require_questions(loaded, job.gold)
    some_db = next((it.db_id for lf in loaded for it in lf.items), None)
    check_login(root, some_db, config, allow_privileged=job.allow_privileged_login)
    if job.dry_run and config.judge is not None:
        _dry_run(loaded, root, config, chosen, share)
        return None
    _writable(job.out)
    systems = plan(
        loaded,
        job.out,
        db_root=root,
        config=config,
        gold=job.gold,
        resume=job.resume,
        retry_unscored=not job.keep_unscored,
        shard=share,
        subset=chosen,
    )
    backend = _ray_backend(config, address, ray_workers, systems) if job.ray is not None else None
    if job.batch:
        backend = _batch_backend(config, job.out, job.batch_poll, job.batch_max_requests)
    return root, systems, backend


def _dry_run(loaded: list[Loaded], root: Source, config: Config, subset: Subset | None, share: Shard | None) -> None:
    """Print the estimate of the LLM calls of the run's items (of its subset, of its shard)."""
    from rose_sql.run.estimate import estimate

    assert config.judge is not None
    if subset is not None:  # the estimate of the subset's items
        from rose_sql.items.subset import restrict, select

        loaded = [restrict(lf, select(lf, subset)) for lf in loaded]
    if share is not None:  # the estimate of this shard's items
        loaded = [replace(lf, items=[it for it in lf.items if share.holds(it.id)]) for lf in loaded]
    print_estimate(estimate(loaded, root, config), config.judge)


def _announce(systems: Sequence[SystemRun], config: Config) -> None:
    """Before the first item: each file's warnings, the note on matches without evidence, what a resumption keeps."""
    for s in systems:  # each file's warnings, with those the plan added (a database of another release)
        for w in s.loaded.warnings:
            err.print(f"[yellow]warning:[/] {w}", highlight=False)
    if (note := evidence_note(config)) is not None:
        err.print(f"[yellow]note:[/] {note}", highlight=False)
    for s in systems:
        for w in s.warnings:
            err.print(f"[yellow]warning:[/] {s.name}: {w}", highlight=False)
        if s.resumed or s.retried:
            again = f", {s.retried} left unscored for a transient reason evaluated again" if s.retried else ""
            console.print(f"{s.name}: resuming: {s.resumed} items kept{again}, {len(s.todo)} to go", highlight=False)


def _interrupted(systems: Sequence[SystemRun], out: Path) -> NoReturn:
    """Exit 130 after Ctrl-C, saying what is kept and what continues."""
    saved = sum(len(s.briefs) for s in systems)
    total = sum(len(s.loaded.items) for s in systems)
    err.print(
        f"\n[bold]interrupted:[/] {saved} of {total} items are recorded under {out} (summary.json marked "
        f"incomplete); nothing recorded is lost. To continue:\n  {resume_command()}",
        highlight=False,
    )
    exit_interrupted()


def databases(text: str, config: Config, *, option: str) -> Source:
    """The databases a ``--db`` value names: a folder of SQLite files, or an engine's URL (whose client
    library must be installed)."""
    from rose_sql.engines import open_engine

    root = Source.parse(text)
    folder = root.folder_path
    if folder is not None and not folder.is_dir():
        raise UsageError(f"{option} {folder} is not a folder")
    open_engine(root.kind, config.limits).close()  # UsageError naming the extra when the driver is missing
    return root


def check_login(root: Source, db_id: str | None, config: Config, *, allow_privileged: bool = False) -> None:
    """Refuse (UsageError) a ``--db`` login whose role may do more than read its database, unless
    ``allow_privileged`` (then warn); warn when its temporary files are unbounded; say which of the
    database's own functions the policy refuses to every statement."""
    if db_id is None:
        return
    from rose_sql.engines import open_engine

    engine = open_engine(root.kind, config.limits)
    try:
        db = root.locate(db_id)
        why, disk, refused = engine.privileges(db), engine.unbounded_disk(db), engine.refused_functions(db)
    except Exception:  # unreachable now: every statement will say so
        return
    finally:
        engine.close()
    reader = f"rose db reader {root.shown} --name rose_reader (then put rose_reader in the URL)"
    if why and not allow_privileged:
        raise UsageError(
            f"--db {root.shown}: {why}. A privileged login is refused: a prediction could read the server's files, "
            f"settings, password hashes or other sessions' queries into records and prompts. Create a read-only "
            f"role with: {reader}; or pass --allow-privileged-login"
        )
    if why:
        err.print(
            f"[yellow]warning:[/] {root.shown}: {why} (--allow-privileged-login). Queries run read-only and rolled "
            f"back, and the policy refuses the catalog views that expose secrets, but a role that cannot do more "
            f"than read is the safer guard; create one with: {reader}",
            highlight=False,
        )
    if disk:
        err.print(f"[yellow]warning:[/] {root.shown}: {disk}", highlight=False)
    if refused:
        err.print(
            f"note: {root.shown}: the policy refuses {len(refused)} of the database's own functions to every "
            f"statement (a statement that calls one is rejected): {'; '.join(refused)}",
            highlight=False,
        )


def _ray_backend(config: Config, address: str | None, workers: int | None, systems: Sequence[SystemRun]) -> Backend:
    from rose_sql.distributed.cluster import RayBackend

    databases = {d.db_id: d for s in systems for d in s.manifest.databases}
    return RayBackend(config, address=address, workers=workers, databases=list(databases.values()))


def _batch_backend(config: Config, out: Path, poll_s: float, max_requests: int) -> Backend:
    from rose_sql.judges.batch import BatchOptions

    return BatchBackend(config, out, BatchOptions(poll_s=poll_s, max_requests=max_requests))


_JUDGE_ONLY = tuple(
    p.name
    for p in PARAMS
    if p.name in set(field_options(JudgeConfig)) - {"judge_model", "panel"}
    or p.name in ("no_cache", "batch", "batch_poll", "batch_max_requests", "judge_gguf_ctx", "judge_gguf_threads")
)
"""Options that configure the judges: given without a judge, they would change nothing."""


def _given(ctx: click.Context) -> dict[str, str]:
    """The options given on the command line (not left at their defaults): parameter name -> option."""
    out = {}
    for p in ctx.command.params:
        source = ctx.get_parameter_source(p.name) if p.name else None
        if p.name and isinstance(p, click.Option) and source not in (None, ParameterSource.DEFAULT):
            out[p.name] = max(p.opts, key=len)
    return out


def _refuse_idle_options(ctx: click.Context, config: Config, root: Source, *, resume: bool) -> None:
    """Refuse options that would be accepted and do nothing, naming each and why (as a run that scores
    something else than the user asked for must not start)."""
    given = _given(ctx)
    idle: list[str] = []
    if config.judge is None:
        idle += [f"{given[n]} configures the judges: give --judge-model too" for n in _JUDGE_ONLY if n in given]
    else:
        j = config.judge
        if "samples_temperature" in given and j.samples == 1:
            idle.append("--samples-temperature is the temperature of --samples above 1: give --samples too")
        if "escalate_below" in given and j.escalate_to is None:
            idle.append("--escalate-below says when to escalate: give --escalate-to too")
        if "aggregate" in given and not j.votes:
            idle.append("--aggregate decides between votes: give --samples, --panel or --escalate-to too")
        for name in ("judge_gguf_ctx", "judge_gguf_threads"):
            if name in given and j.local is None:
                idle.append(f"{given[name]} configures --judge-gguf's server: give --judge-gguf too")
        if "concurrency" in given and j.local is not None:
            idle.append("--concurrency: --judge-gguf's server has one slot and is asked one call at a time")
        if "matched_refuter" in given and j.policy == "paper":
            idle.append("--matched-refuter is set by --policy paper (the Refuter on every match): drop one")
        if ("batch_poll" in given or "batch_max_requests" in given) and "batch" not in given:
            idle.append(f"{given.get('batch_poll', given.get('batch_max_requests'))} configures --batch: give it too")
    if not config.evidence:
        idle += [
            f"{given[n]} configures the evidence search, which is off (give --evidence, or a judge)"
            for n in ("evidence_steps", "evidence_budget", "evidence_scratch")
            if n in given
        ]
    elif "evidence_scratch" in given and root.info.files:
        idle.append(
            f"--evidence-scratch is the server where the witness search copies tables on PostgreSQL and MySQL; on "
            f"{root.info.name} it copies the file into memory: drop it"
        )
    if "allow_privileged_login" in given and root.info.files:
        idle.append(
            f"--allow-privileged-login is for server logins; {root.info.name} files are opened read-only: drop it"
        )
    if "keep_unscored" in given and not resume:
        idle.append("--keep-unscored says what --resume keeps: give --resume too")
    if idle:
        raise UsageError("options that would change nothing: " + "; ".join(idle))


def evidence_note(config: Config) -> str | None:
    """How matching results are decided when a judge runs without evidence under the default policy (said
    before the run: a match then often passes without any judge)."""
    j = config.judge
    if j is None or config.evidence or j.effective_matched_refuter != "evidence":
        return None
    return (
        "without evidence (--no-evidence), --matched-refuter evidence (the default) asks the Refuter about a "
        "matching result only when a cheap doubt questions it (both results empty, other tables read): every "
        "other match passes without a judge. Give --matched-refuter always to have each one checked"
    )


def _writable(out: Path) -> None:
    """Refuse an --out that cannot be written, before any item is evaluated."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".rose-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"--out {out} cannot be written: {e.strerror or e}") from None


def resume_command() -> str:
    """The command line of this run, with --resume: what continues it."""
    argv = command_line()
    return shlex.join(argv if "--resume" in argv else [*argv, "--resume"])


_INFRASTRUCTURE = ("db_missing", "db_unreadable")


def missing_databases(systems: Sequence[SystemRun], root: Source) -> list[str]:
    """Which databases the run's db_missing items name, where each was looked for and how many items each
    left out (one line per database, however many files name it): a misspelt db_id or a database not yet
    copied is named on the console, not only in the records."""
    by_db: dict[str, dict[str, int]] = {}
    for s in systems:
        db_of = {it.id: it.db_id for it in s.loaded.items}
        for b in s.briefs:
            if b.unscored_reason == "db_missing" and b.id in db_of:
                files = by_db.setdefault(db_of[b.id], {})
                files[s.name] = files.get(s.name, 0) + 1
    if not by_db:
        return []
    found = {d.db_id: d.found for s in systems for d in s.manifest.databases}
    lines = []
    for db_id, files in sorted(by_db.items(), key=lambda kv: (-sum(kv[1].values()), kv[0])):
        counts = sorted(set(files.values()))
        if len(files) == 1:
            n = f"{counts[0]} item{'s' if counts[0] != 1 else ''}"
        elif len(counts) == 1:
            n = f"{counts[0]} items in each of {len(files)} files"
        else:
            n = f"{sum(files.values())} items in {len(files)} files"
        where = root.locate(db_id).shown
        what = "not found" if not found.get(db_id, False) else "found, but it lacks a table the gold reads"
        lines.append(f"db_missing: {db_id} ({n}): {what} at {where}")
    return lines


def _exit_if_nothing_could_run(systems: Sequence[SystemRun], summaries: Sequence[Summary], db_root: Source) -> None:
    """Exit 2 when no item of the run could be evaluated because no database could be read."""
    n = sum(s.n for s in summaries)
    blocked = sum(s.unscored.get(r, 0) for s in summaries for r in _INFRASTRUCTURE)
    if n == 0 or blocked < n:
        return
    tried = sorted({d.path for s in systems for d in s.manifest.databases})
    if db_root.folder_path is not None:  # the files as the user named them (the manifest's are resolved)
        tried = sorted({db_root.locate(d.db_id).target for s in systems for d in s.manifest.databases})
    shown = ", ".join(tried[:5]) + (f" and {len(tried) - 5} more" if len(tried) > 5 else "")
    if db_root.folder_path is None:
        fail(UsageError(f"no item could be evaluated: no database of --db {db_root} could be read (tried {shown})."))
    fail(
        UsageError(
            f"no item could be evaluated: no database under --db-root {db_root} could be read "
            f"(tried {shown}). The databases must be at <db-root>/<db_id>/<db_id>.sqlite."
        )
    )


def unscored_exit(summaries: Sequence[Summary], *, strict: bool = False, then: str | None = None) -> str | None:
    """Why the run exits 3 (None: it exits 0): items unscored for a transient or infrastructure reason, or
    with ``strict`` for any reason but awaiting a judge in a run without one; the line says how many, why,
    and what continues (``then``; by default this command with ``--resume``)."""
    from rose_sql.decide import UNSCORED

    transient_reasons = {reason for reason, info in UNSCORED.items() if info.transient}
    counts: dict[str, int] = {}
    for s in summaries:
        for reason, n in s.unscored.items():
            if reason in transient_reasons or (strict and reason != "awaiting_judge"):
                counts[reason] = counts.get(reason, 0) + n
    if not counts:
        return None
    total, items = sum(counts.values()), sum(s.n for s in summaries)
    why = ", ".join(f"{n} {r}" for r, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    line = f"{total} of {items} items are unscored ({why}): every figure above leaves them out."
    transient = [r for r in counts if r in transient_reasons]
    if transient:
        line += f" To evaluate them again: {then or resume_command()}"
    if "wall_guard" in counts:
        line += (
            " (wall_guard: a time limit fired on something whose outcome could not be confirmed, such as the "
            "evidence search, so which items it stops depends on the machine's load; that is what a guard is for)"
        )
    if strict and len(transient) < len(counts):
        line += " --strict counts every unscored reason."
    return line


def _exit_if_unscored(summaries: Sequence[Summary], *, strict: bool) -> None:
    """Exit 3 after the line of :func:`unscored_exit`, when there is one."""
    line = unscored_exit(summaries, strict=strict)
    if line is not None:
        err.print(f"[bold]exit 3:[/] {line}", highlight=False)
        sys.exit(3)


def _run_with_progress(
    systems: Sequence[SystemRun], db_root: Source, config: Config, backend: Backend | None = None
) -> list[Summary]:
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
        if isinstance(backend, BatchBackend):
            backend.status = _batch_status(bar)

        def tick(name: str, ledger: Ledger | None) -> None:
            llm = f"LLM {ledger.calls} calls, {ledger.cached} cached, ${ledger.cost_usd:.4f}" if ledger else ""
            bar.update(task, advance=1, llm=llm)
            now = time.monotonic()
            if now - shown[0] >= 0.1:
                shown[0] = now
                bar.refresh()

        return run(systems, db_root, config, progress=tick, backend=backend)


def _batch_status(bar: Progress) -> Callable[[str], None]:
    """Show the state of the batch being polled: a line of the progress display on a terminal, else a line
    on stderr each time it changes."""
    task: list[TaskID] = []
    last = [""]

    def show(text: str) -> None:
        if bar.disable:
            if text != last[0]:
                err.print(text, highlight=False)
            last[0] = text
            return
        if not task:
            task.append(bar.add_task(text, total=None, llm=""))
        bar.update(task[0], description=text)
        bar.refresh()

    return show


_BASES = {"steps": "VM steps", "time": "wall time x100, machine- and load-dependent"}


_EFFICIENCY: tuple[tuple[Literal["r_ves", "ves"], str], ...] = (
    ("r_ves", "R-VES (mini-dev)"),
    ("ves", "VES (BIRD dev)"),
)


def efficiency_lines(s: Summary) -> list[str]:
    """The run's R-VES and VES lines, per base: each difficulty's figure with its denominator (items with
    a ratio) of the group's items."""
    lines = []
    for base, table in (s.efficiency or {}).items():
        for key, name in _EFFICIENCY:
            cells = [
                f"{label} {v[key]:.2f} ({v['n']} of {v['of']})"
                if v[key] is not None
                else f"{label} none (0 of {v['of']})"
                for label, v in table.items()
            ]
            lines.append(f"{s.system}: {name} by {_BASES.get(base, base)}: " + ", ".join(cells))
    return lines


def print_summaries(summaries: Sequence[Summary]) -> None:
    """The terminal summary of a run: the official readings with the items each is defined on, and ROSE
    (a number once a judge has scored the items, "awaiting judge" until then, never a 0 it does not mean)."""
    from rose_sql.analysis.systems import summary_headline
    from rose_sql.cli.analysis import HEADLINE_TITLE, headline_table, left_out_notes
    from rose_sql.cli.tables import show

    names, heads = [s.system for s in summaries], [summary_headline(s) for s in summaries]
    show(headline_table(f"ROSE-SQL run: {HEADLINE_TITLE}", names, heads))
    for line in left_out_notes(names, heads):
        console.print(line, highlight=False)
    for s in summaries:
        if s.spider_match is not None:
            cells = [
                f"{level} {100 * float(v['em']):.1f} ({v['count']})"
                for level, v in s.spider_match.items()
                if v["em"] is not None
            ]
            console.print(f"{s.system}: Spider EM (evaluation.py --etype match): " + ", ".join(cells), highlight=False)
    for s in summaries:
        for line in efficiency_lines(s):
            console.print(line, highlight=False)
    for s in summaries:
        llm = s.llm
        if llm.calls or llm.cached:
            share = llm.cache_hit_share
            console.print(
                f"{s.system}: LLM {llm.calls} calls + {llm.cached} cached ({llm.calls_per_item} per item), "
                f"{llm.prompt_tokens} + {llm.completion_tokens} tokens, ${llm.cost_usd:.4f}"
                + (f" ({share:.0%} of prompt tokens from the provider's cache)" if share else "")
            )
            if s.judge is not None and s.judge.votes:
                console.print(
                    f"{s.system}: votes ({s.judge.votes}): {llm.calls_per_judged_item} calls per judged item "
                    f"({llm.judged} items), {llm.escalated} items escalated",
                    highlight=False,
                )
    waiting = sum(s.unscored.get("awaiting_judge", 0) for s in summaries)
    if waiting:
        console.print(
            f"[bold]No judge is configured:[/] {waiting} items await a judge (score null, reason awaiting_judge), "
            "so ROSE is no number yet: the readings are the official metrics. Add --judge-model to score them."
        )
    for s in summaries:
        other = {k: v for k, v in s.unscored.items() if k != "awaiting_judge"}
        if other:
            console.print(f"{s.system}: unscored " + ", ".join(f"{v} {k}" for k, v in sorted(other.items())))
    invalid = sum(s.unscored.get("judge_invalid", 0) for s in summaries)
    if invalid:
        from rose_sql.decide import UNSCORED

        console.print(f"{invalid} items got no valid judge reply (judge_invalid): {UNSCORED['judge_invalid'].fix}.")


@click.command("demo")
@out_option(
    "Where the demo database, items and results go.", required=False, default=Path("rose-demo-out"), show_default=True
)
def demo_cmd(out: Path) -> None:
    """Build the bundled demo database and run ROSE-SQL on its questions.

    Writes the demo database, its items and the run under OUT, and prints what EX, ROSE-SQL's
    deterministic stage and an expert say about each item.

    \b
    Example:
      rose demo --out /tmp/rose-demo
    """
    from rose_sql.demo import run_demo

    try:
        run_demo(out, console)
    except RoseError as e:
        fail(e)


def print_estimate(estimates: Sequence[Estimate], judge: JudgeConfig) -> None:
    """The dry-run table: the estimate, and the upper bound a run cannot exceed."""
    from rose_sql.judges.budget import CHARS_PER_TOKEN
    from rose_sql.run.estimate import ASSUMED_COMPLETION_TOKENS

    table = Table(title="Dry run: expected LLM usage (nothing was called)", title_justify="left")
    columns = ("system", "items", "no LLM needed", "calls", "prompt tokens", "cost USD (est.)", "cost USD (at most)")
    for col in columns:
        table.add_column(col, justify="left" if col == "system" else "right")
    for e in estimates:
        priced = e.cost_min_usd is not None and e.cost_likely_max_usd is not None and e.cost_max_usd is not None
        table.add_row(
            e.system,
            str(e.items),
            str(e.decided_without_llm),
            f"{e.min_calls} - {e.likely_max_calls} (at most {e.max_calls})",
            f"~{e.prompt_tokens_min} (at most {e.prompt_tokens_max})",
            f"{e.cost_min_usd:.4f} - {e.cost_likely_max_usd:.4f}" if priced else "no price for this model",
            f"{e.cost_max_usd:.4f}" if priced else "-",
        )
    console.print(table)
    console.print(
        f"Estimate: {CHARS_PER_TOKEN} characters per token, {ASSUMED_COMPLETION_TOKENS} completion tokens per call, "
        "no reply re-asked (reasoning models can use far more). At most: every item's longest path, every call "
        f"re-asked {judge.reask} time(s), one prompt token per byte, every reply at --judge-max-tokens "
        f"{judge.max_tokens}: no run can cost more.",
        highlight=False,
    )
    if judge.votes:
        first = judge.samples * max(1, len(judge.panel))
        most = first + (judge.samples if judge.escalate_to else 0)
        console.print(
            f"Votes: the estimate counts {first} call(s) per stage (--samples x the panel); the bound {most}, every "
            "stage escalated, at the dearest model's prices.",
            highlight=False,
        )
    unasked = sum(e.no_question for e in estimates)
    if unasked:
        err.print(
            f"[yellow]warning:[/] {unasked} items have no question text: no judge will see them (unscored "
            "no_question); give the questions to have them judged",
            highlight=False,
        )
    bound = sum(e.cost_max_usd or 0.0 for e in estimates)
    if judge.budget_usd is not None and bound > judge.budget_usd:
        console.print(
            f"--budget {judge.budget_usd:g} USD is below the upper bound ({bound:.4f}): the run may stop "
            "before every item is judged (those left: budget_exhausted, retried by --resume).",
            highlight=False,
        )
