"""The Item record and one small loader per input format.

Every loader returns the same thing: a list of :class:`Item` plus warnings (problems that do
not stop the run, like BIRD prediction keys that are not ``0..N-1``). Malformed input raises
:class:`~rose_sql.errors.InputError` naming the file and the line or key, before any item is
evaluated: files are read through :mod:`rose_sql.items.readers` (size bound, encoding, strict JSON and
CSV), and every value an item takes is checked by :mod:`rose_sql.items.fields` (ids are strings or
integers, text is text, a ``db_id`` is a folder name). Nothing is dropped: a file with no items is an error, and empty
predictions are kept (they score 0) and counted in a warning. A question of a gold file that a BIRD or
SQLExam prediction file has no prediction for is an item too, without SQL (``pred_sql`` None): counted
wrong and in every denominator, as leaderboards count it, and named in a warning (Spider files, and
files paired with a gold by position, must have a line per question already).

Formats (``--format``; auto-detected when omitted):

- ``bird``: BIRD prediction JSON ``{"<key>": "SQL\\t----- bird -----\\tdb_id"}`` with ``--gold``
  ``dev.json`` / ``mini_dev_sqlite.json`` (or the ``*_gold.sql`` lines); paired by key, the key
  being the question's position, as the official script pairs them.
- ``spider``: one SQL per line (or ``SQL\\tdb_id`` lines) with ``--gold`` ``dev.json`` or
  ``dev_gold.sql``; paired by line, ``id`` is the 0-based position.
- ``sqlexam``: the ROSE/SQLExam list of ``{question_id, db_id, question, evidence,
  predicted_sql, gold_sql, difficulty}``.
- ``dincsv``: CSV with ``NLQ, PREDICTED SQL, GOLD SQL, DATABASE`` (DIN-SQL style).
- ``generic``: JSONL, a JSON list, or CSV with ``id, db_id, question, evidence, gold_sql, pred_sql``.

Item ids: the gold's ``question_id`` (BIRD; positions when the gold is ``SQL<TAB>db_id`` lines),
the line position (Spider), or the file's own ``question_id`` / ``id``. A gold file may repeat a
question_id (BIRD mini-dev repeats 137 and 138 at positions 484/487 and 485/488): every position
stays a question of its own, the first keeps the plain question_id and each repeat gets the string
``"<question_id>@<position>"`` (``"137@487"``), so ids are unique and the same on every run; a
warning names the gold file and the repeated ids.

``--gold`` with a format that carries its own gold (``sqlexam``, ``dincsv``, ``generic``) is
used, and a warning says how: for ``sqlexam`` the gold file's SQL replaces the file's own for the
items whose ``question_id`` it has (it must be a JSON gold with question_ids); for ``dincsv`` and
``generic`` it is paired by position (db_ids must agree) and fills only what an item lacks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rose_sql.config import MAX_INPUT_BYTES
from rose_sql.errors import InputError, UsageError
from rose_sql.items import fields
from rose_sql.items.readers import json_lines, lines, parse_json, read_csv, read_text

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
    pred_sql: str | None
    """The predicted SQL as written by the system; None for a question of the gold file that the prediction
    file has no prediction for (``no_prediction``: scored 0, as leaderboards count it)."""
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
    """Unique within its file: the question_id (``"<question_id>@<position>"`` for a repeat) or the position."""
    qid: ItemId | None
    """The question_id as the file gives it; None for ``SQL<TAB>db_id`` lines."""
    db_id: str
    sql: str
    question: str | None = None
    evidence: str | None = None
    difficulty: str | None = None


@dataclass(frozen=True, slots=True)
class _GoldFile:
    """A gold file read once, with what is odd about it (repeated question ids)."""

    path: Path
    golds: list[_Gold]
    warnings: list[str]


# --------------------------------------------------------------------------- gold files

_GOLD_SQL = ("SQL", "query", "gold_sql", "sql")


def load_gold(path: Path, max_bytes: int = MAX_INPUT_BYTES) -> _GoldFile:
    """Read a gold file: BIRD / Spider ``dev.json`` or ``SQL\\tdb_id`` lines (``dev_gold.sql``)."""
    text = read_text(path, max_bytes)
    golds: list[_Gold] = []
    if path.suffix.lower() != ".json":
        for i, line in enumerate(lines(text)):
            sql, sep, db_id = line.rpartition("\t")
            if not sep or not db_id.strip():
                raise InputError(path, "expected 'SQL<TAB>db_id'", where=i + 1)
            golds.append(_Gold(id=i, qid=None, db_id=fields.db_id(db_id, path, i + 1), sql=sql))
        if not golds:
            raise InputError(path, "no questions: the gold file is empty")
        return _GoldFile(path, golds, [])
    data = parse_json(text, path)
    if not isinstance(data, list):
        raise InputError(path, "a gold JSON file must be a list of questions", where=1)
    if not data:
        raise InputError(path, "no questions: the gold list is empty")
    first: dict[ItemId, int] = {}
    repeats: dict[ItemId, list[int]] = {}
    for i, obj in enumerate(data):
        where = f"[{i}]"
        if not isinstance(obj, dict):
            raise InputError(path, "each entry must be an object", where=where)
        qid = fields.item_id(obj["question_id"], path, where, "question_id") if "question_id" in obj else None
        base = i if qid is None else qid
        if base in first:
            repeats.setdefault(base, [first[base]]).append(i)
            item_id: ItemId = f"{base}@{i}"
        else:
            first[base] = i
            item_id = base
        sql_name = fields.name_of(obj, _GOLD_SQL)
        gold_sql = fields.sql(fields.pick(obj, _GOLD_SQL, path, where), path, where, sql_name)
        if gold_sql is None:
            raise InputError(path, f"field {sql_name!r} is null", where=where)
        golds.append(
            _Gold(
                id=item_id,
                qid=qid,
                db_id=fields.db_id(fields.pick(obj, ("db_id",), path, where), path, where),
                sql=gold_sql,
                question=fields.opt_text(obj.get("question"), path, where, "question"),
                evidence=fields.opt_text(obj.get("evidence"), path, where, "evidence"),
                difficulty=fields.opt_text(obj.get("difficulty"), path, where, "difficulty"),
            )
        )
    return _GoldFile(path, golds, [_repeat_warning(path, repeats)] if repeats else [])


def _repeat_warning(path: Path, repeats: dict[ItemId, list[int]]) -> str:
    listed = "; ".join(f"{qid} at positions {', '.join(map(str, pos))}" for qid, pos in repeats.items())
    new_ids = ", ".join(repr(f"{qid}@{p}") for qid, pos in repeats.items() for p in pos[1:])
    return (
        f"{path.name} repeats question ids ({listed}): each position stays a question of its own, as in the "
        f"official evaluation; where item ids come from question_id, the repeats are {new_ids}"
    )


# --------------------------------------------------------------------------- prediction formats

_UNPARSED: Any = object()


@dataclass(frozen=True, slots=True)
class _Source:
    """A prediction file read once: its text, and what format detection already parsed of it."""

    path: Path
    text: str
    parsed: Any = _UNPARSED
    """The JSON value, or the CSV ``(header, rows)``, when detection parsed it."""

    def json(self) -> Any:
        return parse_json(self.text, self.path) if self.parsed is _UNPARSED else self.parsed

    def csv(self) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
        return read_csv(self.text, self.path) if self.parsed is _UNPARSED else self.parsed


_POSITION = re.compile("[0-9]{1,18}")
"""A BIRD key: a question position (longer numbers are out of range of any gold file)."""


def _bird(src: _Source, gold: _GoldFile | None) -> Loaded:
    path = src.path
    if gold is None:
        raise UsageError(f"{path}: BIRD predictions are keyed by question position; pass --gold dev.json")
    data = src.json()
    if not isinstance(data, dict):
        raise InputError(
            path, "BIRD predictions must be a JSON object {key: 'SQL\\t----- bird -----\\tdb_id'}", where=1
        )
    golds, gold_path = gold.golds, gold.path
    items, warnings = [], list(gold.warnings)
    keys_of: dict[int, str] = {}
    for key, value in data.items():
        if not _POSITION.fullmatch(key):
            if not (key.isascii() and key.isdigit()):
                raise InputError(path, "key is not a question position (an integer)", where=repr(key))
            raise InputError(path, f"key out of range: {gold_path} has {len(golds)} questions", where=repr(key))
        pos = int(key)
        if not 0 <= pos < len(golds):
            raise InputError(path, f"key out of range: {gold_path} has {len(golds)} questions", where=repr(key))
        if pos in keys_of:
            raise InputError(path, f"keys {keys_of[pos]!r} and {key!r} both name question {pos}", where=repr(key))
        keys_of[pos] = key
        if not isinstance(value, str):
            raise InputError(path, f"value must be a string, not {fields.kind(value)}", where=repr(key))
        sql, sep, db_id = value.partition(BIRD_SEPARATOR)
        g = golds[pos]
        if sep and db_id.strip() != g.db_id:
            raise InputError(
                path, f"db_id {db_id.strip()!r} but question {pos} of {gold_path} is on {g.db_id!r}", where=repr(key)
            )
        items.append(
            Item(
                id=g.id,
                db_id=g.db_id,
                pred_sql=sql,
                gold_sql=g.sql,
                question=g.question,
                evidence=g.evidence,
                difficulty=g.difficulty,
                source=f"{path.name}:{key}",
            )
        )
    keys = list(data.keys())
    if keys != [str(i) for i in range(len(keys))]:
        if sorted(keys_of) == list(range(len(keys_of))):
            warnings.append(
                f"{path.name}: keys are not in order 0..{len(keys) - 1}; paired by key, not by position "
                "(the official BIRD script pairs by position and would misalign them)"
            )
        else:
            warnings.append(f"{path.name}: keys are not 0..{len(keys) - 1}; paired by key")
    absent = [(pos, g) for pos, g in enumerate(golds) if pos not in keys_of]
    items += [_unpredicted(g, f"{gold_path.name}[{pos}]") for pos, g in absent]
    if absent:
        warnings.append(_unpredicted_warning(path, gold, [g.id for _, g in absent]))
    return Loaded(path, "bird", items, warnings)


def _unpredicted(g: _Gold, source: str) -> Item:
    """The item of a gold question that the prediction file has no prediction for (scored 0)."""
    return Item(g.id, g.db_id, None, g.sql, g.question, g.evidence, g.difficulty, source)


UNPREDICTED_TAIL = (
    "each is counted wrong (no_prediction, scored 0) and stays in every denominator, as leaderboards count a "
    "missing prediction"
)
"""How the warning about questions without a prediction ends (a subset run says it of its own items)."""


def _unpredicted_warning(path: Path, gold: _GoldFile, ids: list[ItemId]) -> str:
    return unpredicted_warning(path, ids, f"{len(gold.golds)} questions in {gold.path.name}")


def unpredicted_warning(path: Path, ids: Sequence[ItemId], of: str) -> str:
    """The warning that ``ids`` of ``of`` (``500 questions in dev.json``) have no prediction."""
    shown = _some([repr(i) for i in ids])
    return f"{path.name}: {len(ids)} of {of} have no prediction (ids {shown}): {UNPREDICTED_TAIL}"


def _spider(src: _Source, gold: _GoldFile | None) -> Loaded:
    path = src.path
    if gold is None:
        raise UsageError(f"{path}: Spider predictions are paired by line; pass --gold dev.json or dev_gold.sql")
    golds = gold.golds
    pred_lines = lines(src.text)
    if len(pred_lines) != len(golds):
        raise InputError(
            path,
            f"{len(pred_lines)} prediction lines but {len(golds)} gold questions in {gold.path}; "
            "predictions are paired by line, so every question needs exactly one line",
        )
    items = []
    for i, (line, g) in enumerate(zip(pred_lines, golds, strict=True)):
        sql, sep, tail = line.rpartition("\t")
        tail = tail.strip()
        if not sep or not tail.isidentifier():  # no db_id column: tabs inside the SQL are whitespace
            sql = line
        elif tail != g.db_id:
            raise InputError(path, f"db_id {tail!r} but gold line {i + 1} is on {g.db_id!r}", where=i + 1)
        items.append(
            Item(
                id=i,
                db_id=g.db_id,
                pred_sql=sql,
                gold_sql=g.sql,
                question=g.question,
                evidence=g.evidence,
                difficulty=g.difficulty,
                source=f"{path.name}:{i + 1}",
            )
        )
    return Loaded(path, "spider", items, list(gold.warnings))


def _sqlexam(src: _Source, gold: _GoldFile | None) -> Loaded:
    path = src.path
    data = src.json()
    if not isinstance(data, list):
        raise InputError(path, "expected a JSON list of {question_id, db_id, predicted_sql, gold_sql, ...}", where=1)
    by_qid: dict[ItemId, _Gold] = {}
    if gold is not None:
        if gold.golds[0].qid is None:
            raise UsageError(
                f"{path}: SQLExam items are matched to --gold by question_id, and {gold.path} (SQL<TAB>db_id lines) "
                "has none; pass a JSON gold with question_ids (dev.json), or no --gold to use the file's own gold_sql"
            )
        for earlier in reversed(gold.golds):  # the first of repeated question_ids wins
            if earlier.qid is not None:
                by_qid[earlier.qid] = earlier
    items, numbers = [], []
    for i, obj in enumerate(data):
        where = f"[{i}]"
        if not isinstance(obj, dict):
            raise InputError(path, "each entry must be an object", where=where)
        id_name = fields.name_of(obj, ("question_id", "id"))
        qid = fields.item_id(fields.pick(obj, ("question_id", "id"), path, where), path, where, id_name)
        raw = fields.pick(obj, ("predicted_sql",), path, where)
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            numbers.append(where)
        g = by_qid.get(qid)
        items.append(
            Item(
                id=qid,
                db_id=fields.db_id(fields.pick(obj, ("db_id",), path, where), path, where),
                pred_sql=fields.sql(raw, path, where, "predicted_sql") or "",
                gold_sql=g.sql if g else fields.opt_sql(obj.get("gold_sql"), path, where, "gold_sql"),
                question=fields.opt_text(obj.get("question"), path, where, "question") or (g.question if g else None),
                evidence=fields.opt_text(obj.get("evidence"), path, where, "evidence") or (g.evidence if g else None),
                difficulty=fields.opt_text(obj.get("difficulty"), path, where, "difficulty")
                or (g.difficulty if g else None),
                source=f"{path.name}{where}",
            )
        )
    warnings = list(gold.warnings) if gold else []
    if numbers:
        warnings.append(
            f"{path.name}: predicted_sql is a number, not text, in {len(numbers)} items ({_some(numbers)}); "
            "each is evaluated as the SQL text of that number"
        )
    if gold is not None:
        warnings.append(_sqlexam_gold_note(path, gold, data, items))
        have = {it.id for it in items}  # matched by question_id: a repeat's position shares its question's prediction
        absent = [g for g in gold.golds if g.qid is not None and g.qid not in have]
        items += [_unpredicted(g, f"{gold.path.name}:{g.id}") for g in absent]
        if absent:
            warnings.append(_unpredicted_warning(path, gold, [g.id for g in absent]))
    return Loaded(path, "sqlexam", items, warnings)


def _sqlexam_gold_note(path: Path, gold: _GoldFile, data: list[Any], items: list[Item]) -> str:
    """What --gold did to a file that carries its own gold_sql."""
    qids = {g.qid for g in gold.golds}
    matched = [i for i, it in enumerate(items) if it.id in qids]
    differ = sum(items[i].gold_sql != data[i].get("gold_sql") for i in matched)
    note = (
        f"{path.name} carries its own gold_sql; --gold {gold.path.name} replaced it for {len(matched)} of "
        f"{len(items)} items, matched by question_id ({differ} of them differ from the file's own)"
    )
    unmatched = [repr(it.id) for it in items if it.id not in qids]
    if unmatched:
        note += f"; question_id {_some(unmatched)} ({len(unmatched)}) not in it keep their own"
    return note


def _dincsv(src: _Source, gold: _GoldFile | None) -> Loaded:
    path = src.path
    header, rows = src.csv()
    for col in ("PREDICTED SQL", "GOLD SQL", "DATABASE"):
        if col not in header:
            raise InputError(path, f"missing column {col!r} (have {header})", where=1)
    items = [
        Item(
            id=i,
            db_id=fields.db_id(row["DATABASE"], path, line, "DATABASE"),
            pred_sql=row["PREDICTED SQL"],
            gold_sql=row["GOLD SQL"] if row["GOLD SQL"].strip() else None,
            question=row["NLQ"] if row.get("NLQ", "").strip() else None,
            source=f"{path.name}:{line}",
        )
        for i, (line, row) in enumerate(rows)
    ]
    return _with_gold(Loaded(path, "dincsv", items), gold)


_GENERIC_ID = ("id", "question_id")
_GENERIC_PRED = ("pred_sql", "predicted_sql")


def _generic(src: _Source, gold: _GoldFile | None) -> Loaded:
    path = src.path
    records: Iterable[tuple[int | str, dict[str, Any]]]
    suffix = path.suffix.lower()
    if suffix == ".csv":
        header, records = src.csv()
        for names in (_GENERIC_ID, ("db_id",), _GENERIC_PRED):
            if not any(n in header for n in names):
                raise InputError(path, f"missing column {' or '.join(map(repr, names))} (have {header})", where=1)
    elif suffix == ".json":
        data = src.json()
        if not isinstance(data, list):
            raise InputError(path, "expected a JSON list of {id, db_id, pred_sql, gold_sql, ...}", where=1)
        records = list(_objects(data, path))
    else:
        records = json_lines(src.text, path)
    items = []
    for where, obj in records:
        raw_id, raw_pred = fields.pick(obj, _GENERIC_ID, path, where), fields.pick(obj, _GENERIC_PRED, path, where)
        items.append(
            Item(
                id=fields.item_id(raw_id, path, where, fields.name_of(obj, _GENERIC_ID)),
                db_id=fields.db_id(fields.pick(obj, ("db_id",), path, where), path, where),
                pred_sql=fields.sql(raw_pred, path, where, fields.name_of(obj, _GENERIC_PRED)) or "",
                gold_sql=fields.opt_sql(obj.get("gold_sql"), path, where, "gold_sql"),
                question=fields.opt_text(obj.get("question"), path, where, "question"),
                evidence=fields.opt_text(obj.get("evidence"), path, where, "evidence"),
                difficulty=fields.opt_text(obj.get("difficulty"), path, where, "difficulty"),
                source=f"{path.name}:{where}" if isinstance(where, int) else f"{path.name}{where}",
            )
        )
    return _with_gold(Loaded(path, "generic", items), gold)


def _objects(data: list[Any], path: Path) -> Iterable[tuple[str, dict[str, Any]]]:
    for i, obj in enumerate(data):
        if not isinstance(obj, dict):
            raise InputError(path, "each entry must be an object", where=f"[{i}]")
        yield f"[{i}]", obj


def _with_gold(loaded: Loaded, gold: _GoldFile | None) -> Loaded:
    """Fill gold SQL (and question text) from a gold file by position, where the items lack it."""
    if gold is None:
        return loaded
    golds, path = gold.golds, loaded.path
    if len(golds) != len(loaded.items):
        raise InputError(path, f"{len(loaded.items)} items but {len(golds)} in {gold.path}")
    items, sql_filled, other_filled = [], 0, 0
    for i, (it, g) in enumerate(zip(loaded.items, golds, strict=True)):
        if it.db_id != g.db_id:
            raise InputError(
                path,
                f"db_id {it.db_id!r} but question {i} of {gold.path} is on {g.db_id!r} (--gold pairs by position)",
                where=_place_of(it, path),
            )
        new = replace(
            it,
            gold_sql=it.gold_sql or g.sql,
            question=it.question or g.question,
            evidence=it.evidence or g.evidence,
            difficulty=it.difficulty or g.difficulty,
        )
        sql_filled += it.gold_sql is None
        other_filled += (new.question, new.evidence, new.difficulty) != (it.question, it.evidence, it.difficulty)
        items.append(new)
    own = len(items) - sql_filled
    if own == 0:
        note = f"{path.name}: gold SQL of all {len(items)} items from --gold {gold.path.name}, paired by position"
    elif sql_filled == 0:
        note = (
            f"{path.name} carries gold SQL for all {len(items)} items: --gold {gold.path.name} gave none "
            f"(it fills only what items lack, paired by position)"
        )
    else:
        note = (
            f"{path.name} carries gold SQL for {own} of {len(items)} items; --gold {gold.path.name} filled "
            f"the other {sql_filled}, paired by position"
        )
    if other_filled:
        note += f"; it also gave question, evidence or difficulty to {other_filled} items"
    return replace(loaded, items=items, warnings=[*loaded.warnings, *gold.warnings, note])


def _place_of(item: Item, path: Path) -> str:
    """An item's line, index or key in its file (its source without the file name)."""
    return item.source.removeprefix(path.name).lstrip(":")


def _some(names: list[str], n: int = 5) -> str:
    return ", ".join(names[:n]) + (", ..." if len(names) > n else "")


_LOADERS = {"bird": _bird, "spider": _spider, "sqlexam": _sqlexam, "dincsv": _dincsv, "generic": _generic}


def _detect(path: Path, text: str) -> tuple[str, Any]:
    """The format of a prediction file from its name and content, and what was parsed to tell."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return "generic", _UNPARSED
    if suffix == ".csv":
        parsed = read_csv(text, path)
        return ("dincsv" if "PREDICTED SQL" in parsed[0] else "generic"), parsed
    if suffix == ".json":
        data = parse_json(text, path)
        if isinstance(data, dict):
            return "bird", data
        if isinstance(data, list) and data and isinstance(data[0], dict):
            return ("sqlexam" if "predicted_sql" in data[0] else "generic"), data
        raise InputError(path, "cannot tell the format of this JSON file; pass --format", where=1)
    if text.lstrip()[:1] in ("{", "["):
        raise InputError(
            path,
            f"looks like JSON, but the name ends in {suffix or 'nothing'!r}: name it .json or .jsonl, or pass --format",
            where=1,
        )
    return "spider", _UNPARSED


def detect_format(path: Path, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """Guess a prediction file's format from its name and first bytes."""
    return _detect(path, read_text(path, max_bytes))[0]


def load_items(
    pred_path: str | Path,
    gold_path: str | Path | None = None,
    fmt: str | None = None,
    *,
    max_bytes: int = MAX_INPUT_BYTES,
) -> Loaded:
    """Read one prediction file (and its gold file, where the format needs one).

    Raises :class:`~rose_sql.errors.InputError` for anything malformed, naming the file and the line
    or key, and for files larger than ``max_bytes``; nothing is evaluated here.
    """
    path = Path(pred_path)
    if fmt is not None and fmt not in _LOADERS:
        raise UsageError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    text = read_text(path, max_bytes)
    parsed = _UNPARSED
    if fmt is None:
        fmt, parsed = _detect(path, text)
    gold = load_gold(Path(gold_path), max_bytes) if gold_path is not None else None
    loaded = _LOADERS[fmt](_Source(path, text, parsed), gold)
    if all(it.pred_sql is None for it in loaded.items):  # none, or only the gold's questions it lacks
        raise InputError(path, "no items: the file holds no predictions")
    seen: dict[ItemId, str] = {}
    for it in loaded.items:
        if it.id in seen:
            both = f"{seen[it.id]} and {it.source}"
            message = f"item id {it.id!r} occurs more than once ({both}); ids must be unique"
            raise InputError(path, message, where=_place_of(it, path))
        seen[it.id] = it.source
    empty = [it.source for it in loaded.items if it.pred_sql is not None and not it.pred_sql.strip()]
    if empty:
        loaded.warnings.append(
            f"{path.name}: {len(empty)} of {len(loaded.items)} items have an empty prediction ({_some(empty)}); "
            "an empty query does not run, so each scores 0"
        )
    return loaded
