"""Provenance: what produced a run's records, written before the first item and checked on ``--resume``.

A :class:`Manifest` names everything that can change a score: the rose-sql and SQLite versions, every
input file with its SHA-256, each database's identity, every option that decides a score, and the judge
(model, endpoint, parameters, prompt hashes). ``rose run`` writes it as ``manifest.json`` when the run
starts (``complete: false``), again when it ends, and repeats it in ``summary.json``. ``--resume``
refuses to continue a run whose inputs or score-changing options differ (:func:`differences`): a
resumed run must not mix records of two runs.

A database's identity is its size and a digest of its first and last MiB: the first page holds SQLite's
change counter, which every write transaction increments, so the digest changes when the database does,
without reading a file of gigabytes whole.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rose_sql.config import MAX_MANIFEST_BYTES, Config, JudgeConfig, score_fields, scores
from rose_sql.engines import Source
from rose_sql.engines.base import Fingerprint
from rose_sql.engines.sqlite import library_version
from rose_sql.items.load import Loaded

if TYPE_CHECKING:
    from pydantic import TypeAdapter

MANIFEST_VERSION = 1
_EDGE = 2**20

SCORE_OPTIONS = score_fields(Config)
"""Config fields that can change a record's score, readings or evidence (compared on resume): those whose
declaration says so (``score=True``, :func:`rose_sql.config.option`)."""


@dataclass(frozen=True, slots=True)
class JudgeInfo:
    """What identifies the judge that produced the scores (no secrets)."""

    model: str = field(metadata={"score": True})
    """The judge model."""
    base_url: str | None = None
    """The endpoint (None: the SDK's default, ``$OPENAI_BASE_URL`` or OpenAI)."""
    settings: dict[str, Any] = field(default_factory=dict, metadata={"score": True})
    """Every :class:`~rose_sql.config.JudgeConfig` field marked as changing a score (``score=True``), by
    name: temperature, seed, max_tokens, policy, reask, what the prompts show (small_schema_chars,
    examples_per_column, result_rows, cell_chars), options and reasoning_effort. A field marked later
    joins it, and the resume check, with nothing else to edit. Empty for imported judgements that state
    none."""
    matched_refuter: str | None = scores(None)
    """The matched-results policy in effect (``--policy paper`` implies ``always``)."""
    prompts: dict[str, str] | None = scores(None)
    """Digests of the system prompts (None for imported judgements)."""
    key: str | None = scores(None)
    """The fingerprint of the run key (:attr:`rose_sql.judges.keys.RunKey.fingerprint`: ``run.key`` in the
    cache folder, or ``--run-key``): it decides the fence markers and every call's nonce, so runs that must ask
    the very same prompts share it; None where the key was drawn for the run's process only (no cache)."""
    provider: str | None = None
    """Where the judgements came from, when not from an endpoint of this run (``imported: ...``)."""
    structured: str | None = None
    """``--judge-structured``: whether replies were asked as a JSON schema (each call records what was used)."""
    votes: str | None = scores(None)
    """How stages vote (samples, panel, the model escalated to, the rule), when they do; None: one reply
    decides each stage."""
    local: dict[str, Any] | None = scores(None)
    """The pinned local judge (``--judge-gguf``): the GGUF file's ``sha256``, the ``runtime`` and its
    version, and every server setting that decides a reply (``sampling``); None for a remote endpoint."""
    replies: str | None = scores(None)
    """How verdicts are read from the replies (:data:`rose_sql.judges.replies.READING`); None: by the
    rule before it (any verdict-shaped object, fences first), so such a run cannot be resumed now."""


JUDGE_OPTIONS = score_fields(JudgeInfo)
"""What of the judge can change a score (what the judges are asked, and how), marked on
:class:`JudgeInfo`'s fields: a resume with other values is refused."""
JUDGE_SETTINGS = score_fields(JudgeConfig)
"""The :class:`~rose_sql.config.JudgeConfig` fields marked as changing a score, recorded by name in
:attr:`JudgeInfo.settings`."""


def judge_info(config: Config | None) -> JudgeInfo | None:
    """What identifies the judge of a run (no secrets); None without one."""
    if config is None or config.judge is None:
        return None
    from rose_sql.judges.ask import prompt_hashes
    from rose_sql.judges.replies import READING

    j = config.judge
    return JudgeInfo(
        model=j.model,
        base_url=j.base_url,
        settings={name: _plain(getattr(j, name)) for name in JUDGE_SETTINGS},
        matched_refuter=j.effective_matched_refuter,
        prompts=prompt_hashes(),
        key=_key_fingerprint(j),
        structured=j.structured,
        votes=_votes(j),
        local=_local(j),
        replies=READING,
    )


def _plain(value: Any) -> Any:
    """A setting as JSON holds it (a mapping as a dict), so that a manifest read back compares equal."""
    return dict(value) if isinstance(value, Mapping) else value


def lift_judge(data: Any) -> Any:
    """A judge of a manifest or summary written before :attr:`JudgeInfo.settings` (its settings were
    fields of their own, ``options`` None when empty) under today's layout; any other value as it is."""
    if not isinstance(data, dict) or "settings" in data:
        return data
    settings = {k: data[k] for k in JUDGE_SETTINGS if k in data}
    if "options" in settings:
        settings["options"] = settings["options"] or {}
    return {**{k: v for k, v in data.items() if k not in settings}, "settings": settings}


def _local(j: JudgeConfig) -> dict[str, Any] | None:
    if j.local is None:
        return None
    return {"sha256": j.local.sha256, "runtime": j.local.runtime, "sampling": j.local.sampling()}


def _votes(j: JudgeConfig) -> str | None:
    if not j.votes:
        return None
    parts = [f"samples={j.samples}" + (f" at temperature {j.samples_temperature:g}" if j.samples > 1 else "")]
    if j.panel:
        parts.append("panel=" + ",".join(m.partition("=")[0] for m in j.panel))  # endpoints may move
    if j.escalate_to:
        parts.append(f"escalate_to={j.escalate_to} below {j.escalate_below:g}")
    return "; ".join([*parts, f"aggregate={j.aggregate}"])


def _key_fingerprint(j: JudgeConfig) -> str | None:
    from rose_sql.judges.keys import run_key

    key = run_key(j)  # made here if the cache has none yet: the run uses this very one
    return key.fingerprint if key.kept else None


@dataclass(frozen=True, slots=True)
class FileId:
    """An input file: where it was, how large, and its SHA-256."""

    path: str
    bytes: int
    sha256: str

    @classmethod
    def of(cls, path: Path) -> FileId:
        h = hashlib.sha256()
        size = 0
        with path.open("rb") as f:
            while block := f.read(2**20):
                h.update(block)
                size += len(block)
        return cls(str(path.resolve()), size, h.hexdigest())


@dataclass(frozen=True, slots=True)
class DatabaseId:
    """A database an item names: where it was looked for, whether it was there, and its identity."""

    db_id: str
    """The name the items use."""
    path: str
    """Where it was looked for (a file resolved, ``<db-root>/<db_id>/<db_id>.sqlite``; a URL without its
    password)."""
    found: bool
    """Whether it exists."""
    bytes: int | None = None
    """A file's size."""
    fingerprint: str | None = None
    """SHA-256 of a file's first and last MiB (SQLite's first page holds its change counter); None on a
    server, whose data has no file to digest."""

    @classmethod
    def of(cls, db_id: str, fp: Fingerprint) -> DatabaseId:
        return cls(db_id, fp.where, fp.found, fp.bytes, fp.digest)


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """Which share of the input a sharded run (``rose run --shard I/N``) evaluated."""

    index: int
    """The shard, from 0."""
    count: int
    """How many shards the input was split into."""
    items: int
    """Items of the input in this shard."""
    total: int
    """Items of the whole input."""


@dataclass(frozen=True, slots=True)
class SubsetInfo:
    """Which items of the input a subset run (``rose run --limit N`` / ``--ids FILE``) evaluated: it is
    never a run of the whole input, and resuming it with another subset is refused."""

    limit: int | None
    """``--limit``: the first N items in input order (None without it)."""
    ids: FileId | None
    """``--ids``: the ids file (by content), None without it."""
    items: int
    """Items of the input in the subset."""
    total: int
    """Items of the whole input."""

    def key(self) -> str:
        """What a resumption must match: the limit and the ids file's content."""
        return f"limit {self.limit}, ids {self.ids.sha256[:12] if self.ids else None}"


@dataclass(frozen=True, slots=True)
class MergedShard:
    """A shard folder that ``rose merge`` joined into this run."""

    index: int
    """The shard, from 0."""
    count: int
    """How many shards the input was split into."""
    folder: str
    """The shard's folder."""
    command: list[str]
    """The command line that made it."""
    started: str
    """When it started."""
    finished: str | None
    """When it ended."""
    complete: bool
    """Whether every item of its share had a record."""
    records: int
    """Records taken from it (an item two shards recorded alike is taken once)."""


@dataclass(frozen=True, slots=True)
class Manifest:
    """What produced a run's records (``manifest.json``; repeated in ``summary.json``)."""

    rose_sql: str
    """The rose-sql version."""
    sqlite: str
    """The SQLite library version (query plans, and so step counts, depend on it)."""
    python: str
    """The Python version."""
    platform: str
    """The operating system and machine."""
    command: list[str]
    """The command line."""
    started: str
    """When the run (or this resumption of it) started, UTC, ISO 8601."""
    format: str
    """The input format the predictions were read as."""
    predictions: FileId
    """The prediction file."""
    gold: FileId | None
    """The gold file, when one was given."""
    db_root: str
    """The folder the databases were looked for in."""
    databases: list[DatabaseId]
    """Every database the items name."""
    options: dict[str, Any]
    """The options that can change a score (:data:`SCORE_OPTIONS`)."""
    judge: JudgeInfo | None = None
    """The judge: model, endpoint, parameters, prompt hashes and what it is shown (None without one)."""
    dialect: str = "sqlite"
    """sqlglot's dialect of the engine the databases are on (``sqlite``, ``postgres``, ``mysql``, ``duckdb``)."""
    server: str | None = None
    """The engine and its version when it is not SQLite (``PostgreSQL 15.20``...); None when unreachable."""
    driver: str | None = None
    """The client library that read the databases and its version (``psycopg 3.2.3``...); None on SQLite,
    read by Python's own sqlite3 (the SQLite version is ``sqlite``)."""
    finished: str | None = None
    """When the run ended (None while it runs, or if it was interrupted)."""
    complete: bool = False
    """Whether every item of the input (of its shard, for a shard) has a record."""
    shard: ShardInfo | None = None
    """For a sharded run, which share of the input it evaluated; None for the whole input."""
    merged: list[MergedShard] | None = None
    """For a run that ``rose merge`` made of shards, each shard it joined; None otherwise."""
    subset: SubsetInfo | None = None
    """For a subset run (``--limit``, ``--ids``), which items of the input; None for the whole input."""
    version: int = MANIFEST_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Manifest:
        from pydantic import ValidationError

        try:
            if isinstance(data, dict) and "judge" in data:
                data = {**data, "judge": lift_judge(data["judge"])}
            manifest: Manifest = _adapter().validate_python(data)
        except ValidationError as e:
            err = e.errors()[0]
            raise ValueError(f"not a valid manifest: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
        return manifest

    def finish(self, *, complete: bool) -> Manifest:
        """The manifest as the run ends."""
        return replace(self, finished=_now(), complete=complete)


@cache
def _adapter() -> TypeAdapter[Manifest]:
    from pydantic import TypeAdapter

    return TypeAdapter(Manifest)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def build(loaded: Loaded, gold: Path | None, db_root: Source, config: Config, *, command: list[str]) -> Manifest:
    """The manifest of one prediction file's run."""
    from rose_sql.__version__ import __version__

    db_ids = sorted({it.db_id for it in loaded.items})
    where = _databases(db_root, db_ids, config)
    return Manifest(
        rose_sql=__version__,
        sqlite=library_version(),
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}",
        command=command,
        started=_now(),
        format=loaded.format,
        predictions=FileId.of(loaded.path),
        gold=FileId.of(gold) if gold is not None else None,
        judge=judge_info(config),
        **where,
    )


def _databases(source: Source, db_ids: list[str], config: Config) -> dict[str, Any]:
    """Where the databases are: the folder or the URL (no password), each database's identity, the engine
    and its version, the options that change scores."""
    from rose_sql.engines.execute import Executor

    with Executor(config.with_(workers=1)) as ex:
        found = {d: ex.fingerprint(source.locate(d)) for d in db_ids}
        server = next((v for v in (ex.version(source.locate(d)) for d in db_ids[:1]) if v), None)
    options = {name: getattr(config, name) for name in SCORE_OPTIONS}
    if config.server_timeout_s is not None:  # the time limit of PostgreSQL, MySQL and DuckDB, when set apart
        options["server_timeout_s"] = config.server_timeout_s
    if config.evidence_scratch is not None:  # a witness search on a server: resuming without one is refused
        options["evidence_scratch"] = True
    return {
        "db_root": source.location,
        "databases": [DatabaseId.of(d, found[d]) for d in db_ids],
        "options": options,
        "dialect": source.dialect,
        "server": server,
        "driver": driver_version(source),
    }


def driver_version(source: Source) -> str | None:
    """The client library that reads the source's databases and its version (None: the standard library's
    sqlite3, whose SQLite version the manifest records)."""
    package = source.info.package
    if package is None:
        return None
    from importlib import metadata

    try:
        return f"{package} {metadata.version(package)}"
    except metadata.PackageNotFoundError:
        return package


def differences(old: Manifest, new: Manifest) -> tuple[list[str], list[str]]:
    """What differs between the manifest of a run and that of its resumption: (refusals, warnings).

    Refused: other input files (by content), another share of them (``--shard``) or subset (``--limit``,
    ``--ids``), other databases, other
    score-changing options, another judge (model, parameters, prompts) or none where there was one.
    Warned: another endpoint for the same model, another rose-sql or SQLite version.
    """
    refuse: list[str] = []
    warn: list[str] = []

    def file(name: str, a: FileId | None, b: FileId | None) -> None:
        if (a.sha256 if a else None) != (b.sha256 if b else None):
            refuse.append(f"the {name} file differs ({_file(a)} then, {_file(b)} now)")

    file("prediction", old.predictions, new.predictions)
    if _share(old) != _share(new):
        refuse.append(f"the share of the input differs ({_share(old)} then, {_share(new)} now)")
    if _subset(old) != _subset(new):
        refuse.append(f"the subset of the input differs ({_subset(old)} then, {_subset(new)} now)")
    file("gold", old.gold, new.gold)
    if old.format != new.format:
        refuse.append(f"the input format differs ({old.format} then, {new.format} now)")
    dbs_old = {d.db_id: d for d in old.databases}
    for d in new.databases:
        before = dbs_old.get(d.db_id)
        if before is not None and (before.found, before.fingerprint) != (d.found, d.fingerprint):
            refuse.append(f"database {d.db_id} differs ({_db(before)} then, {_db(d)} now)")
    for key in sorted(set(old.options) | set(new.options)):
        a, b = old.options.get(key), new.options.get(key)
        if a != b:
            refuse.append(f"option {key} differs ({a!r} then, {b!r} now)")
    if (old.judge is None) != (new.judge is None):
        then, now = ("a judge" if old.judge else "no judge"), ("a judge" if new.judge else "no judge")
        refuse.append(f"the run had {then}, this resumption has {now}: pass the same judge options")
    elif old.judge is not None and new.judge is not None:
        for key in JUDGE_OPTIONS:
            a, b = getattr(old.judge, key), getattr(new.judge, key)
            if key == "settings":
                for name in [*JUDGE_SETTINGS, *sorted((set(a) | set(b)) - set(JUDGE_SETTINGS))]:
                    if a.get(name) != b.get(name):
                        refuse.append(f"judge {name} differs ({a.get(name)!r} then, {b.get(name)!r} now)")
            elif key == "replies" and a != b:
                refuse.append(
                    f"judge replies differs ({a!r} then, {b!r} now): its verdicts were read another way (this version "
                    "reads only a verdict carrying its call's nonce, which a new prompt version asks the judge to "
                    "write), so the run's records cannot be continued; start a fresh run (its calls are asked again)"
                )
            elif a != b:
                refuse.append(f"judge {key} differs ({a!r} then, {b!r} now)")
        if old.judge.base_url != new.judge.base_url:
            warn.append(f"judge endpoint differs ({old.judge.base_url} then, {new.judge.base_url} now)")
    if old.dialect != new.dialect:
        refuse.append(f"the engine differs ({old.dialect} then, {new.dialect} now)")
    for name in ("rose_sql", "sqlite", "server", "driver"):
        if getattr(old, name) != getattr(new, name):
            warn.append(f"{name} version differs ({getattr(old, name)} then, {getattr(new, name)} now)")
    return refuse, warn


def _share(m: Manifest) -> str:
    return "the whole input" if m.shard is None else f"shard {m.shard.index}/{m.shard.count}"


def _subset(m: Manifest) -> str:
    return "the whole input" if m.subset is None else m.subset.key()


def _file(f: FileId | None) -> str:
    return "none" if f is None else f"{f.path}, sha256 {f.sha256[:12]}"


def _db(d: DatabaseId) -> str:
    return f"{d.path}, {d.fingerprint[:12]}" if d.found and d.fingerprint else f"{d.path}, missing"


def read_manifest(path: Path) -> Manifest | None:
    """The manifest in ``path`` (None when there is none), read at most :data:`~rose_sql.config.MAX_MANIFEST_BYTES`
    (:class:`~rose_sql.errors.InputError` past it; :class:`ValueError` for one that is not a manifest)."""
    from rose_sql.items.readers import read_capped

    if not path.exists():
        return None
    try:
        return Manifest.from_dict(json.loads(read_capped(path, MAX_MANIFEST_BYTES, "a run's manifest")))
    except RecursionError:
        raise ValueError("not a valid manifest: nested too deeply") from None


def write_manifest(manifest: Manifest, path: Path) -> None:
    """Write ``manifest.json`` atomically."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def command_line() -> list[str]:
    """This process's command line, as typed (``rose`` for the entry point)."""
    argv = list(sys.argv)
    if argv and Path(argv[0]).name in ("rose", "__main__.py"):
        argv[0] = "rose"
    return argv
