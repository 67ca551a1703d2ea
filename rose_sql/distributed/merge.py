"""``rose merge``: the folders of a sharded run (``rose run --shard I/N``) joined into one run.

Each shard's manifest names its inputs (by SHA-256), databases, options, judge and share of the input
(:class:`rose_sql.provenance.ShardInfo`). Shards are joined only when they are shares of the same
inputs under the same options and judge (:func:`rose_sql.provenance.differences` between every shard
and the first; versions that differ are warned about); every record must belong to its folder's share.
Then, before anything is written, the merge reports:

- **missing** items: shards absent or unfinished. Refused unless ``allow_partial``, naming the shards
  and the command that makes each (the shard's own command line with the missing index);
- **duplicated** items: an item recorded by two folders (a shard run twice, a folder given twice).
  Identical records (:func:`rose_sql.record.comparable`) are kept once and warned about; records that
  differ are refused, since choosing one would hide that the runs disagree.

The merged folder is a normal run: ``records.jsonl`` (every item once, in the input's order when the
prediction file is still readable at its recorded path, else shard by shard), ``manifest.json`` (the
shards' common manifest for the whole input, ``complete`` when every item has a record, and each
shard joined under ``merged``) and ``summary.json``, which ``compare``, ``report``, ``agree``,
``audit`` and ``rose run --resume`` read as they read any run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rose_sql.errors import InputError, RoseError, UsageError
from rose_sql.items.load import load_items
from rose_sql.provenance import FileId, Manifest, MergedShard, differences, read_manifest, write_manifest
from rose_sql.record import Record, RecordWriter, comparable, read_records
from rose_sql.run.shard import Shard, shard_of
from rose_sql.summary import Brief, Summary, summarize_briefs, write_summary

SHOWN = 10
"""Item ids named in a message (the rest are counted)."""


@dataclass
class _Shard:
    folder: Path
    manifest: Manifest
    shard: Shard
    records: list[Record]


@dataclass
class Merged:
    """One system's merged run."""

    name: str
    """The system (its folder's name)."""
    out_dir: Path
    """The merged run's folder."""
    summary: Summary
    """Its summary (as written to ``summary.json``)."""
    shards: int
    """Shard folders joined."""
    missing: list[str] = field(default_factory=list)
    """What is missing (only with ``allow_partial``): one line per absent or unfinished shard."""
    warnings: list[str] = field(default_factory=list)
    """Duplicated items kept once, versions that differ."""


@dataclass
class _Plan:
    name: str
    shards: list[_Shard]
    records: list[Record]
    taken: dict[int, int]
    """Records taken from each shard folder, by its position in ``shards``."""
    missing: list[str]
    warnings: list[str]
    complete: bool


def system_folders(paths: list[Path]) -> dict[str, list[Path]]:
    """The shard folders of each system: a path with a ``manifest.json`` is one; otherwise (a ``rose run
    --out`` folder) its subfolders that have one are."""
    found: dict[str, list[Path]] = {}
    for path in paths:
        if not path.is_dir():
            raise UsageError(f"{path} is not a folder")
        if (path / "manifest.json").is_file():
            folders = [path]
        else:
            folders = sorted(p for p in path.iterdir() if (p / "manifest.json").is_file())
        if not folders:
            raise UsageError(f"{path} holds no run: a shard folder has the manifest.json of 'rose run --shard I/N'")
        for f in folders:
            found.setdefault(f.name, []).append(f)
    return found


def merge(paths: list[Path], out: Path, *, allow_partial: bool = False, command: list[str]) -> list[Merged]:
    """Join the shard folders under ``paths`` into ``out/<name>/`` for each system; every check is made
    before anything is written. Raises :class:`UsageError` naming what does not fit."""
    plans = [_plan(name, folders, allow_partial) for name, folders in system_folders(paths).items()]
    for p in plans:
        target = out / p.name / "records.jsonl"
        if target.exists():
            raise UsageError(f"{target} already exists: merge into another --out")
    return [_write(p, out, command) for p in plans]


def _read(folder: Path) -> _Shard:
    try:
        manifest = read_manifest(folder / "manifest.json")
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read {folder / 'manifest.json'}: {e}") from None
    assert manifest is not None  # system_folders found the file
    if manifest.shard is None:
        raise UsageError(f"{folder} is not a shard: it was run on the whole input (without --shard I/N)")
    shard = Shard(manifest.shard.index, manifest.shard.count)
    try:
        records = list(read_records(folder / "records.jsonl"))
    except InputError as e:
        raise UsageError(str(e)) from None
    return _Shard(folder, manifest, shard, records)


def _plan(name: str, folders: list[Path], allow_partial: bool) -> _Plan:
    shards = [_read(f) for f in folders]
    first = shards[0]
    warnings: list[str] = []
    for s in shards[1:]:
        if s.shard.count != first.shard.count:
            raise UsageError(
                f"{name}: {s.folder} is shard {s.shard} and {first.folder} shard {first.shard}: "
                "shards of one run share their N"
            )
        refuse, warn = differences(first.manifest, replace(s.manifest, shard=first.manifest.shard))
        if refuse:
            raise UsageError(
                f"{name}: {s.folder} and {first.folder} were made from other inputs or options:\n  - "
                + "\n  - ".join(refuse)
            )
        warnings += [f"{s.folder}: {w}" for w in warn]
    kept: dict[str, tuple[Record, _Shard]] = {}
    duplicated: list[str] = []
    for s in shards:
        for r in s.records:
            if not s.shard.holds(r.id):
                raise UsageError(
                    f"{name}: {s.folder} (shard {s.shard}) holds a record of item {r.id!r}, which belongs to shard "
                    f"{shard_of(r.id, s.shard.count)}/{s.shard.count}: the folder was edited or mixed up"
                )
            earlier = kept.get(r.id_key)
            if earlier is None:
                kept[r.id_key] = (r, s)
            elif comparable(earlier[0]) != comparable(r):
                raise UsageError(
                    f"{name}: item {r.id!r} is recorded differently by {earlier[1].folder} and {s.folder}: one item, "
                    "two outcomes. Merge only one of them."
                )
            elif earlier[1] is not s:
                duplicated.append(f"{r.id!r} ({earlier[1].folder}, {s.folder})")
    if duplicated:
        warnings.append(
            f"{len(duplicated)} items recorded alike by two folders, kept once: {_some(duplicated)}"
            + _twice(shards, first.shard.count)
        )
    order = _input_order(first.manifest)
    total = first.manifest.shard.total if first.manifest.shard else len(kept)
    missing = _missing(name, shards, kept, order, total)
    if missing and not allow_partial:
        raise UsageError(
            f"{name}: {total - len(kept)} of {total} items have no record:\n  - "
            + "\n  - ".join(missing)
            + "\nMake the missing shards (then merge their folders too), or pass --allow-partial to write a partial "
            "run ('rose run ... --resume' on it evaluates the rest)."
        )
    if order is not None:
        position = {key: i for i, key in enumerate(order)}
        records = sorted((r for r, _ in kept.values()), key=lambda r: position.get(r.id_key, len(position)))
    else:
        records = [r for r, _ in kept.values()]
    taken = {i: sum(1 for _, where in kept.values() if where is s) for i, s in enumerate(shards)}
    return _Plan(name, shards, records, taken, missing, warnings, complete=len(kept) == total)


def _some(things: list[str]) -> str:
    more = f" and {len(things) - SHOWN} more" if len(things) > SHOWN else ""
    return ", ".join(things[:SHOWN]) + more


def _twice(shards: list[_Shard], count: int) -> str:
    seen: dict[int, list[str]] = {}
    for s in shards:
        seen.setdefault(s.shard.index, []).append(str(s.folder))
    again = [f"shard {i}/{count} in {', '.join(fs)}" for i, fs in sorted(seen.items()) if len(fs) > 1]
    return f" ({'; '.join(again)})" if again else ""


def _input_order(manifest: Manifest) -> list[str] | None:
    """The ids of the whole input in its order, when the prediction file is still where the manifest
    says, with the same content (and the gold too); None otherwise."""
    from rose_sql.record import id_key

    pred, gold = manifest.predictions, manifest.gold
    if not _same(pred) or (gold is not None and not _same(gold)):
        return None
    try:
        loaded = load_items(Path(pred.path), Path(gold.path) if gold else None, manifest.format, max_bytes=pred.bytes)
    except RoseError:
        return None
    return [id_key(it.id) for it in loaded.items]


def _same(f: FileId) -> bool:
    path = Path(f.path)
    try:
        return path.is_file() and path.stat().st_size == f.bytes and FileId.of(path).sha256 == f.sha256
    except OSError:
        return False


def _missing(
    name: str, shards: list[_Shard], kept: dict[str, tuple[Record, _Shard]], order: list[str] | None, total: int
) -> list[str]:
    count = shards[0].shard.count
    present = {s.shard.index for s in shards}
    lines = []
    for i in range(count):
        if i not in present:
            lines.append(f"shard {i}/{count} is missing; make it with: {_command_for(shards[0], i)}")
    for s in shards:
        expected = s.manifest.shard.items if s.manifest.shard else 0
        have = sum(1 for _, where in kept.values() if where.shard.index == s.shard.index)
        if s.shard.index in present and have < expected and not _covered(s, shards, kept):
            lines.append(
                f"shard {s.shard} in {s.folder} has {have} of its {expected} items (interrupted); finish it with: "
                f"{_command_for(s, s.shard.index, resume=True)}"
            )
    if order is not None and len(kept) < total:
        ids = [json.loads(k) for k in order if k not in kept]
        lines.append(f"the items without a record: {_some([repr(i) for i in ids])}")
    return lines


def _covered(s: _Shard, shards: list[_Shard], kept: dict[str, tuple[Record, _Shard]]) -> bool:
    """Whether another folder of the same shard recorded all of its items."""
    expected = s.manifest.shard.items if s.manifest.shard else 0
    return sum(1 for _, where in kept.values() if where.shard.index == s.shard.index) >= expected and any(
        o is not s and o.shard.index == s.shard.index for o in shards
    )


def _command_for(s: _Shard, index: int, *, resume: bool = False) -> str:
    """The command that makes shard ``index`` (``s``'s own command line, its shard changed) into a folder of
    its own, or with ``resume`` finishes ``s`` in its folder: run as printed, it is never refused."""
    import shlex

    argv = list(s.manifest.command)
    for i, arg in enumerate(argv):
        if arg == "--shard" and i + 1 < len(argv):
            argv[i + 1] = f"{index}/{s.shard.count}"
        elif arg.startswith("--shard="):
            argv[i] = f"--shard={index}/{s.shard.count}"
        elif not resume and arg == "--out" and i + 1 < len(argv):
            argv[i + 1] = _fresh_out(argv[i + 1], index, s.shard.count)
        elif not resume and arg.startswith("--out="):
            argv[i] = "--out=" + _fresh_out(arg.removeprefix("--out="), index, s.shard.count)
    if resume and "--resume" not in argv:
        argv.append("--resume")
    return shlex.join(argv)


def _fresh_out(out: str, index: int, count: int) -> str:
    """A folder beside another shard's ``--out`` for shard ``index`` (that one holds its own shard's run)."""
    base = Path(out).parent / f"shard-{index}-of-{count}"
    fresh, n = base, 1
    while fresh.exists():
        n += 1
        fresh = base.with_name(f"{base.name}-{n}")
    return str(fresh)


def _write(p: _Plan, out: Path, command: list[str]) -> Merged:
    out_dir = out / p.name
    out_dir.mkdir(parents=True, exist_ok=True)
    RecordWriter.rewrite(out_dir / "records.jsonl", p.records)
    first = p.shards[0].manifest
    databases = {d.db_id: d for s in p.shards for d in s.manifest.databases}
    joined = [
        MergedShard(
            s.shard.index,
            s.shard.count,
            str(s.folder.resolve()),
            s.manifest.command,
            s.manifest.started,
            s.manifest.finished,
            s.manifest.complete,
            p.taken[i],
        )
        for i, s in enumerate(p.shards)
    ]
    manifest = replace(
        first,
        command=command,
        started=min(s.manifest.started for s in p.shards),
        databases=[databases[d] for d in sorted(databases)],
        shard=None,
        merged=joined,
    ).finish(complete=p.complete)
    write_manifest(manifest, out_dir / "manifest.json")
    summary = summarize_briefs([Brief.of(r) for r in p.records], p.name, manifest=manifest)
    earlier = _summary(p.shards[0].folder)
    summary = replace(
        summary,
        judge=earlier.judge if earlier else None,
        format=earlier.format if earlier else first.format,
        warnings=list(earlier.warnings) if earlier else [],
    )
    write_summary(summary, out_dir / "summary.json")
    return Merged(p.name, out_dir, summary, len(p.shards), p.missing, p.warnings)


def _summary(folder: Path) -> Summary | None:
    from rose_sql.config import MAX_SUMMARY_BYTES
    from rose_sql.errors import InputError
    from rose_sql.items.readers import read_capped

    try:
        data: Any = json.loads(read_capped(folder / "summary.json", MAX_SUMMARY_BYTES, "a run's summary"))
        return Summary.from_dict(data)
    except (InputError, OSError, ValueError, RecursionError):
        return None
