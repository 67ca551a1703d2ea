"""Finished runs read back from disk: a run folder's records and summary, or a plain file of scores.

Everything downstream of a run (agreement, comparison, reports, audits) starts here, so every
reader sees the same records: deduplicated by id, the last record of an id winning (as in
``summary.json``). :func:`load_runs` also takes the ``--out`` folder of ``rose run`` (one sub-folder
per system). Each run says whether it is complete (:attr:`Run.completeness`), from its manifest.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rose_sql.config import MAX_INPUT_BYTES, MAX_SUMMARY_BYTES, MAX_TABLE_LINE_BYTES
from rose_sql.errors import InputError
from rose_sql.items.readers import read_capped, read_lines
from rose_sql.provenance import Manifest, read_manifest
from rose_sql.readings.formulas import Readings
from rose_sql.record import ExecutionInfo, Record, read_records
from rose_sql.summary import Summary

Completeness = Literal["complete", "subset", "partial", "unknown", "imported", "panel", "scores file"]
"""Whether a run covers its whole input: ``complete`` or ``partial`` (interrupted, or still running) as
its manifest says, ``subset`` for a finished run of a subset (``--limit``, ``--ids``: never a full
run); ``unknown`` for a run folder without one (older rose-sql); ``imported`` for
``rose import-rose`` (every labelled item has a record, absent ones unscored); ``panel`` for ``rose panel``
(the items of its first run); ``scores file`` for a plain file of scores, which holds what it holds."""
PARTIAL_HELP = "interrupted or unfinished: not every item of its input has a record"
"""What ``partial`` means, in the words every view uses."""


@dataclass(frozen=True, slots=True)
class Run:
    """One system's evaluated items as read from disk."""

    name: str
    """The system's name (its folder's name, or the file's stem)."""
    path: Path
    """The folder (or file) it was read from."""
    records: list[Record]
    """The records, one per id, in file order."""
    summary: Summary | None = None
    """``summary.json`` when the folder has one."""
    warnings: list[str] = field(default_factory=list)
    """What was odd about the input."""
    manifest: Manifest | None = None
    """What produced the records: ``manifest.json`` (the freshest: rewritten when a run starts and ends),
    else the summary's copy; None for imported runs, scores files and runs of older rose-sql."""

    @property
    def completeness(self) -> Completeness:
        """Whether every item of the input has a record (see :data:`Completeness`)."""
        return completeness(self.manifest, self.summary, scores_file=self.summary is None and self.path.is_file())


def completeness(manifest: Manifest | None, summary: Summary | None, *, scores_file: bool = False) -> Completeness:
    """Whether a run covers its whole input, from its manifest, else from how it was made."""
    if manifest is not None:
        if not manifest.complete:
            return "partial"
        return "subset" if manifest.subset is not None else "complete"
    if summary is not None and summary.format.startswith("rose-import"):
        return "imported"
    if summary is not None and summary.format.startswith("rose-panel"):
        return "panel"
    return "scores file" if scores_file else "unknown"


def load_runs(path: Path) -> list[Run]:
    """The runs at ``path``: the ``--out`` folder of ``rose run`` gives every system in it (its
    sub-folders holding a ``records.jsonl``, by name); anything else is one run (:func:`load_run`)."""
    if path.is_dir() and not (path / "records.jsonl").is_file():
        systems = sorted(p for p in path.iterdir() if (p / "records.jsonl").is_file())
        if systems:
            return [load_run(p) for p in systems]
        raise InputError(
            path,
            "no records.jsonl in this folder nor in any folder inside it: pass the --out folder of `rose run`, "
            "one of its system folders, a records.jsonl or a scores file",
        )
    return [load_run(path)]


def load_run(path: Path) -> Run:
    """Read a run folder (``records.jsonl`` + ``summary.json``), a ``records.jsonl``, or a scores file.

    A scores file maps ids to scores: a JSON object ``{id: score}``, a JSON list or JSONL of objects
    with ``id`` (or ``question_id``) and ``score``, or a CSV with ``id`` and ``score`` columns. A
    score that is empty or null means unscored.
    """
    if path.is_dir():
        records_path = path / "records.jsonl"
        if not records_path.is_file():
            raise InputError(path, "no records.jsonl in this folder (is it the output folder of `rose run`?)")
        return _from_records(path.name, path, records_path, _summary(path / "summary.json"))
    if not path.is_file():
        raise InputError(path, "no such file or folder")
    if path.name == "records.jsonl":
        return _from_records(path.parent.name, path.parent, path, _summary(path.parent / "summary.json"))
    return Run(path.stem, path, _scores_file(path))


def _from_records(name: str, folder: Path, records_path: Path, summary: Summary | None) -> Run:
    by_id = {r.id_key: r for r in read_records(records_path)}
    warnings = [] if by_id else [f"{records_path} holds no records"]
    try:
        manifest = read_manifest(folder / "manifest.json")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError, RecursionError) as e:
        raise InputError(folder / "manifest.json", f"cannot read the manifest: {e}") from None
    if manifest is None and summary is not None:
        manifest = summary.manifest
    return Run(name, folder, list(by_id.values()), summary, warnings, manifest)


def _summary(path: Path) -> Summary | None:
    if not path.exists():
        return None
    data = read_capped(path, MAX_SUMMARY_BYTES, "a run's summary")
    try:
        return Summary.from_dict(json.loads(data))
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError, RecursionError) as e:
        raise InputError(path, f"cannot read the summary: {e}") from None


def _score(value: Any, path: Path, where: str | int) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return int(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(path, f"score {value!r} is not 0, 1 or empty", where=where) from None
    if number not in (0.0, 1.0):
        raise InputError(path, f"score {value!r} is not 0, 1 or empty", where=where)
    return int(number)


def _minimal(item_id: Any, score: int | None, path: Path, where: str | int) -> Record:
    """A scores file's entry as a record: the score and nothing else is known."""
    if not isinstance(item_id, int | str) or isinstance(item_id, bool):
        raise InputError(path, f"id {item_id!r} is not a string or an integer", where=where)
    return Record(
        id=item_id,
        db_id="",
        score=score,
        unscored_reason=None if score is not None else "no_score",
        decided_by="imported" if score is not None else None,
        why=f"score imported from {path.name}",
        readings=Readings(),
        comparison=None,
        pred=ExecutionInfo("skipped", 0.0),
        gold=ExecutionInfo("skipped", 0.0),
        source=f"{path.name}:{where}",
    )


def _scores_file(path: Path) -> list[Record]:
    rows = read_table(path)
    out: list[Record] = []
    for where, row in rows:
        item_id = row.get("id", row.get("question_id"))
        if item_id is None or not ("score" in row or "value" in row):
            raise InputError(path, "each entry needs 'id' (or 'question_id') and 'score'", where=where)
        out.append(_minimal(item_id, _score(row.get("score", row.get("value")), path, where), path, where))
    return out


def read_table(path: Path) -> list[tuple[str | int, dict[str, Any]]]:
    """Rows of a JSON object (``{id: v}`` becomes rows ``{"id": id, "value": v}``), JSON list, JSONL or CSV.

    Each row comes with where it was found (a line number or a key) for error messages. JSON Lines and CSV
    are read line by line, each line at most :data:`~rose_sql.config.MAX_TABLE_LINE_BYTES`; a JSON document
    at most :data:`~rose_sql.config.MAX_INPUT_BYTES` (:class:`InputError` naming the file and line past them).
    """
    suffix = path.suffix.lower()
    if suffix == ".csv":
        reader = csv.DictReader(_text_lines(path))
        try:
            return [(reader.line_num, dict(row)) for row in reader]
        except csv.Error as e:
            raise InputError(path, f"not CSV ({e})", where=reader.line_num) from None
    if suffix == ".jsonl":
        rows: list[tuple[str | int, dict[str, Any]]] = []
        for i, line in enumerate(_text_lines(path), start=1):
            if line.strip():
                rows.append((i, _json_object(line, path, i)))
        return rows
    try:
        text = read_capped(path, MAX_INPUT_BYTES, "a labels or scores file").decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(path, f"cannot read: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(path, f"not JSON ({e.msg})", where=e.lineno) from None
    except RecursionError:
        raise InputError(path, "not JSON this reader holds (nested too deeply)") from None
    if isinstance(data, dict):
        return [(str(k), {"id": k, "value": v}) for k, v in data.items()]
    if isinstance(data, list) and all(isinstance(x, dict) for x in data):
        return [(f"[{i}]", x) for i, x in enumerate(data)]
    raise InputError(path, "expected a JSON object {id: value} or a list of objects")


def _text_lines(path: Path) -> Iterator[str]:
    """The lines of a text file, decoded (a UTF-8 byte order mark dropped), each at most
    :data:`~rose_sql.config.MAX_TABLE_LINE_BYTES`; line ends kept as ``\\n``, as the csv module wants them."""
    for lineno, raw, ended in read_lines(path, MAX_TABLE_LINE_BYTES):
        try:
            text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
        except UnicodeDecodeError as e:
            raise InputError(path, f"not UTF-8 text ({e.reason} at byte {e.start})", where=lineno) from None
        yield text.removesuffix("\r") + ("\n" if ended else "")


def _json_object(line: str, path: Path, lineno: int) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise InputError(path, f"not JSON ({e.msg})", where=lineno) from None
    if not isinstance(obj, dict):
        raise InputError(path, "each line must be a JSON object", where=lineno)
    return obj
