"""The Item record and one small loader per input format.

Every loader returns the same thing: a list of :class:`Item` plus warnings (problems that do
not stop the run, like BIRD prediction keys that are not ``0..N-1``). Malformed input raises
:class:`~rose_sql.errors.InputError` naming the file and the line or key.

Formats (``--format``; auto-detected when omitted):

- ``bird``: BIRD prediction JSON ``{"<key>": "SQL\\t----- bird -----\\tdb_id"}`` with ``--gold``
  ``dev.json`` / ``mini_dev_sqlite.json``; paired by key, the key being the question's position.
- ``spider``: one SQL per line (or ``SQL\\tdb_id`` lines) with ``--gold`` ``dev.json`` or
  ``dev_gold.sql``; paired by line, ``id`` is the 0-based position.
- ``sqlexam``: the ROSE/SQLExam list of ``{question_id, db_id, question, evidence,
  predicted_sql, gold_sql, difficulty}``; ``--gold`` optional.
- ``dincsv``: CSV with ``NLQ, PREDICTED SQL, GOLD SQL, DATABASE`` (DIN-SQL style).
- ``generic``: JSONL or CSV with ``id, db_id, question, evidence, gold_sql, pred_sql``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from rose_sql.errors import InputError, UsageError

FORMATS = ("bird", "spider", "sqlexam", "dincsv", "generic")
BIRD_SEPARATOR = "\t----- bird -----\t"

ItemId = int | str


@dataclass(frozen=True, slots=True)
class Item:
    """One question with its gold and predicted SQL."""

    id: ItemId
    """Identifier kept as the input gives it (BIRD key, Spider position, question_id)."""
    db_id: str
    """Database name: the database file is ``<db-root>/<db_id>/<db_id>.sqlite``."""
    pred_sql: str
    """The predicted SQL as written by the system."""
    gold_sql: str | None
    """The reference SQL; None when the input has none."""
    question: str | None = None
    """The natural-language question."""
    evidence: str | None = None
    """BIRD's external knowledge for the question, if any."""
    difficulty: str | None = None
    """Difficulty label (BIRD: simple / moderate / challenging)."""
    source: str = ""
    """Where the prediction came from, as ``file:line`` or ``file:key``."""


@lru_cache(maxsize=4096)
def db_file(db_root: Path, db_id: str) -> Path:
    """Where an item's database lives, as BIRD and Spider ship them: ``<db_root>/<db_id>/<db_id>.sqlite``."""
    return db_root / db_id / f"{db_id}.sqlite"


@dataclass(frozen=True, slots=True)
class Loaded:
    """Items of one prediction file, and what was odd about it."""

    path: Path
    """The prediction file."""
    format: str
    """The format it was read as."""
    items: list[Item]
    """Items in file order."""
    warnings: list[str] = field(default_factory=list)
    """Problems that do not stop the run (reported to the user and in summary.json)."""


@dataclass(frozen=True, slots=True)
class _Gold:
    id: ItemId
    db_id: str
    sql: str
    question: str | None = None
    evidence: str | None = None
    difficulty: str | None = None


# --------------------------------------------------------------------------- reading helpers


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise InputError(path, f"cannot read ({e.strerror})") from None


def _read_json(path: Path) -> Any:
    text = _read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(path, f"invalid JSON: {e.msg} (column {e.colno})", where=e.lineno) from None


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(path, f"invalid JSON: {e.msg} (column {e.colno})", where=lineno) from None
        if not isinstance(obj, dict):
            raise InputError(path, "each line must be a JSON object", where=lineno)
        yield lineno, obj


def _read_csv(path: Path) -> tuple[list[str], Iterator[tuple[int, dict[str, str]]]]:
    text = _read_text(path)
    reader = csv.DictReader(text.splitlines(keepends=True))
    header = [h.strip() for h in (reader.fieldnames or [])]
    reader.fieldnames = header

    def rows() -> Iterator[tuple[int, dict[str, str]]]:
        try:
            for row in reader:
                yield reader.line_num, row
        except csv.Error as e:
            raise InputError(path, f"invalid CSV: {e}", where=reader.line_num) from None

    return header, rows()


def _lines(path: Path) -> list[str]:
    """Lines of a text file; a final newline does not make an extra empty line."""
    text = _read_text(path)
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def _field(obj: dict[str, Any], names: Iterable[str], path: Path, where: str | int) -> Any:
    for name in names:
        if name in obj:
            return obj[name]
    raise InputError(path, f"missing field {' or '.join(repr(n) for n in names)}", where=where)


def _opt_str(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    return text if text.strip() else None


# --------------------------------------------------------------------------- gold files


def load_gold(path: Path) -> list[_Gold]:
    """Read a gold file: BIRD / Spider ``dev.json`` or ``SQL\\tdb_id`` lines (``dev_gold.sql``)."""
    if path.suffix.lower() == ".json":
        data = _read_json(path)
        if not isinstance(data, list):
            raise InputError(path, "a gold JSON file must be a list of questions")
        golds = []
        for i, obj in enumerate(data):
            if not isinstance(obj, dict):
                raise InputError(path, "each entry must be an object", where=f"[{i}]")
            where = f"[{i}]"
            sql = _field(obj, ("SQL", "query", "gold_sql", "sql"), path, where)
            golds.append(
                _Gold(
                    id=obj.get("question_id", i),
                    db_id=str(_field(obj, ("db_id",), path, where)),
                    sql=str(sql),
                    question=_opt_str(obj.get("question")),
                    evidence=_opt_str(obj.get("evidence")),
                    difficulty=_opt_str(obj.get("difficulty")),
                )
            )
        return golds
    golds = []
    for i, line in enumerate(_lines(path)):
        sql, sep, db_id = line.rpartition("\t")
        if not sep or not db_id.strip():
            raise InputError(path, "expected 'SQL<TAB>db_id'", where=i + 1)
        golds.append(_Gold(id=i, db_id=db_id.strip(), sql=sql))
    return golds


# --------------------------------------------------------------------------- prediction formats


def _bird(path: Path, gold_path: Path | None) -> Loaded:
    if gold_path is None:
        raise UsageError(f"{path}: BIRD predictions are keyed by question position; pass --gold dev.json")
    data = _read_json(path)
    if not isinstance(data, dict):
        raise InputError(path, "BIRD predictions must be a JSON object {key: 'SQL\\t----- bird -----\\tdb_id'}")
    golds = load_gold(gold_path)
    items, warnings, seen = [], [], set()
    for key, value in data.items():
        try:
            pos = int(key)
        except ValueError:
            raise InputError(path, "key is not a question position (an integer)", where=repr(key)) from None
        if not 0 <= pos < len(golds):
            raise InputError(path, f"key out of range: {gold_path} has {len(golds)} questions", where=repr(key))
        if not isinstance(value, str):
            raise InputError(path, "value must be a string", where=repr(key))
        sql, sep, db_id = value.partition(BIRD_SEPARATOR)
        gold = golds[pos]
        if sep and db_id.strip() != gold.db_id:
            raise InputError(
                path,
                f"db_id {db_id.strip()!r} but question {pos} of {gold_path} is on {gold.db_id!r}",
                where=repr(key),
            )
        seen.add(pos)
        items.append(
            Item(
                id=gold.id,
                db_id=gold.db_id,
                pred_sql=sql,
                gold_sql=gold.sql,
                question=gold.question,
                evidence=gold.evidence,
                difficulty=gold.difficulty,
                source=f"{path.name}:{key}",
            )
        )
    keys = list(data.keys())
    if keys != [str(i) for i in range(len(keys))]:
        if sorted(seen) == list(range(len(seen))):
            warnings.append(
                f"{path.name}: keys are not in order 0..{len(keys) - 1}; paired by key, not by position "
                "(the official BIRD script pairs by position and would misalign them)"
            )
        else:
            warnings.append(f"{path.name}: keys are not 0..{len(keys) - 1}; paired by key")
    missing = len(golds) - len(seen)
    if missing:
        warnings.append(f"{path.name}: {missing} of {len(golds)} questions in {gold_path.name} have no prediction")
    return Loaded(path, "bird", items, warnings)


def _spider(path: Path, gold_path: Path | None) -> Loaded:
    if gold_path is None:
        raise UsageError(f"{path}: Spider predictions are paired by line; pass --gold dev.json or dev_gold.sql")
    golds = load_gold(gold_path)
    lines = _lines(path)
    if len(lines) != len(golds):
        raise InputError(
            path,
            f"{len(lines)} prediction lines but {len(golds)} gold questions in {gold_path}; "
            "predictions are paired by line, so every question needs exactly one line",
        )
    items = []
    for i, (line, gold) in enumerate(zip(lines, golds, strict=True)):
        sql, sep, tail = line.rpartition("\t")
        tail = tail.strip()
        if not sep or not tail.isidentifier():  # no db_id column: tabs inside the SQL are whitespace
            sql = line
        elif tail != gold.db_id:
            raise InputError(path, f"db_id {tail!r} but gold line {i + 1} is on {gold.db_id!r}", where=i + 1)
        items.append(
            Item(
                id=i,
                db_id=gold.db_id,
                pred_sql=sql,
                gold_sql=gold.sql,
                question=gold.question,
                evidence=gold.evidence,
                difficulty=gold.difficulty,
                source=f"{path.name}:{i + 1}",
            )
        )
    return Loaded(path, "spider", items)


def _sqlexam(path: Path, gold_path: Path | None) -> Loaded:
    data = _read_json(path)
    if not isinstance(data, list):
        raise InputError(path, "expected a JSON list of {question_id, db_id, predicted_sql, gold_sql, ...}")
    by_id = {g.id: g for g in load_gold(gold_path)} if gold_path else {}
    items, warnings = [], []
    for i, obj in enumerate(data):
        where = f"[{i}]"
        if not isinstance(obj, dict):
            raise InputError(path, "each entry must be an object", where=where)
        qid = _field(obj, ("question_id", "id"), path, where)
        gold = by_id.get(qid)
        if gold_path and gold is None:
            warnings.append(f"{path.name}{where}: question_id {qid!r} not in {gold_path.name}; using its own gold_sql")
        pred = obj.get("predicted_sql")
        items.append(
            Item(
                id=qid,
                db_id=str(_field(obj, ("db_id",), path, where)),
                pred_sql="" if pred is None else str(pred),
                gold_sql=gold.sql if gold else _opt_str(obj.get("gold_sql")),
                question=_opt_str(obj.get("question")) or (gold.question if gold else None),
                evidence=_opt_str(obj.get("evidence")) or (gold.evidence if gold else None),
                difficulty=_opt_str(obj.get("difficulty")) or (gold.difficulty if gold else None),
                source=f"{path.name}{where}",
            )
        )
    return Loaded(path, "sqlexam", items, warnings)


def _dincsv(path: Path, gold_path: Path | None) -> Loaded:
    header, rows = _read_csv(path)
    for col in ("PREDICTED SQL", "GOLD SQL", "DATABASE"):
        if col not in header:
            raise InputError(path, f"missing column {col!r} (have {header})", where=1)
    items = [
        Item(
            id=i,
            db_id=row["DATABASE"].strip(),
            pred_sql=row["PREDICTED SQL"] or "",
            gold_sql=_opt_str(row["GOLD SQL"]),
            question=_opt_str(row.get("NLQ")),
            source=f"{path.name}:{line}",
        )
        for i, (line, row) in enumerate(rows)
    ]
    return _with_gold(Loaded(path, "dincsv", items), gold_path)


def _generic(path: Path, gold_path: Path | None) -> Loaded:
    records: Iterable[tuple[int, dict[str, Any]]]
    if path.suffix.lower() == ".csv":
        _, records = _read_csv(path)
    else:
        records = _read_jsonl(path)
    items = []
    for line, obj in records:
        items.append(
            Item(
                id=_field(obj, ("id", "question_id"), path, line),
                db_id=str(_field(obj, ("db_id",), path, line)).strip(),
                pred_sql=str(_field(obj, ("pred_sql", "predicted_sql"), path, line) or ""),
                gold_sql=_opt_str(obj.get("gold_sql")),
                question=_opt_str(obj.get("question")),
                evidence=_opt_str(obj.get("evidence")),
                difficulty=_opt_str(obj.get("difficulty")),
                source=f"{path.name}:{line}",
            )
        )
    return _with_gold(Loaded(path, "generic", items), gold_path)


def _with_gold(loaded: Loaded, gold_path: Path | None) -> Loaded:
    """Fill gold SQL (and question text) from a gold file by position, where the items lack it."""
    if gold_path is None:
        return loaded
    golds = load_gold(gold_path)
    if len(golds) != len(loaded.items):
        raise InputError(loaded.path, f"{len(loaded.items)} items but {len(golds)} in {gold_path}")
    items = [
        replace(
            it,
            gold_sql=it.gold_sql or g.sql,
            question=it.question or g.question,
            evidence=it.evidence or g.evidence,
            difficulty=it.difficulty or g.difficulty,
        )
        for it, g in zip(loaded.items, golds, strict=True)
    ]
    return replace(loaded, items=items)


_LOADERS = {"bird": _bird, "spider": _spider, "sqlexam": _sqlexam, "dincsv": _dincsv, "generic": _generic}


def detect_format(path: Path) -> str:
    """Guess a prediction file's format from its name and first bytes."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return "generic"
    if suffix == ".csv":
        header, _ = _read_csv(path)
        return "dincsv" if "PREDICTED SQL" in header else "generic"
    if suffix == ".json":
        data = _read_json(path)
        if isinstance(data, dict):
            return "bird"
        if isinstance(data, list) and data and isinstance(data[0], dict):
            return "sqlexam" if "predicted_sql" in data[0] else "generic"
        raise InputError(path, "cannot tell the format of this JSON file; pass --format")
    return "spider"


def load_items(pred_path: str | Path, gold_path: str | Path | None = None, fmt: str | None = None) -> Loaded:
    """Read one prediction file (and its gold file, where the format needs one)."""
    path = Path(pred_path)
    gold = Path(gold_path) if gold_path is not None else None
    if fmt is not None and fmt not in _LOADERS:
        raise UsageError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    fmt = fmt or detect_format(path)
    loaded = _LOADERS[fmt](path, gold)
    ids = [it.id for it in loaded.items]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise InputError(path, f"item id {dup!r} occurs more than once; ids must be unique")
    return loaded
