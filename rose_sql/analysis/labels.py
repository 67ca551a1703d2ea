"""Human labels to calibrate against: is each prediction correct, and is its gold wrong or its question ambiguous.

Formats read (detected):

- **ROSE-VEC** (the ROSE paper's validation set): a JSON list of ``{question_id, db_id, question,
  predicted_sql, gold_sql, label, ...}``. Items carrying ``"ex"`` were labelled true from their EX
  result without human review (50 items of the Spider part); they are kept, marked ``reviewed=False``;
- **generic**: a JSON object ``{id: bool}``, or a JSON list / JSONL / CSV of rows with ``id`` (or
  ``question_id``) and ``label`` (or ``correct``, or ``expert`` as in ``rose demo``'s labels), optionally
  ``goldx`` and ``ambq`` columns. The ``expert`` verdict ``ambiguous`` (the demo's) reads as correct and
  tagged AmbQ (the prediction took one of the question's reasonable readings); the file's other items
  are then tagged not AmbQ;
- **id lists** for the flags (ROSE-VEC's ``gold_false_ids.json`` and ``ambq_ids.json``): a JSON list
  of ids, applied to a label set with :func:`with_tags`: listed ids are tagged, every other item of
  the set is untagged.

Ids are matched as text (``12`` and ``"12"`` are the same item), as they are when runs are paired.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from rose_sql.analysis.runs import read_table
from rose_sql.config import MAX_INPUT_BYTES, MAX_TABLE_LINE_BYTES
from rose_sql.errors import InputError
from rose_sql.items.readers import read_capped, read_lines

Flag = Literal["goldx", "ambq"]
FLAGS: tuple[Flag, ...] = ("goldx", "ambq")
_TRUE = {"true", "1", "yes", "y", "t", "1.0", "correct"}
_FALSE = {"false", "0", "no", "n", "f", "0.0", "incorrect", "wrong"}
_LABEL_FIELDS = ("label", "correct", "expert", "value")
_SQL_FIELDS = ("predicted_sql", "pred_sql")


@dataclass(frozen=True, slots=True)
class HumanLabel:
    """What the experts said about one item."""

    correct: bool
    """The prediction answers the question."""
    reviewed: bool = True
    """False when the label was assigned without human review (ROSE-VEC's ``ex`` items)."""
    goldx: bool | None = None
    """The gold SQL is wrong (None: not tagged either way)."""
    ambq: bool | None = None
    """The question is ambiguous (None: not tagged either way)."""
    db_id: str | None = None
    """The database the item is about, when the file says (ROSE-VEC does): pairing checks it."""
    pred_sql: str | None = None
    """The predicted SQL the label is about, when the file says (ROSE-VEC does): pairing checks it, for a
    question labelled once is labelled about one system's prediction."""


@dataclass(frozen=True, slots=True)
class LabelSet:
    """The labels of one file: one subset of a validation set (e.g. ROSE-VEC's BIRD part)."""

    name: str
    """Subset name: the file's stem (``rose-vec-bird``)."""
    path: Path
    """The file read."""
    format: str
    """``rose-vec`` or ``generic``."""
    labels: dict[str, HumanLabel]
    """Labels by item id (as text)."""
    sha256: str
    """Digest of the file (and of any tag lists applied), identifying the validation set."""
    tag_sources: dict[str, str] = field(default_factory=dict)
    """Which file the human GoldX / AmbQ tags came from."""
    tags_outside: dict[str, list[str]] = field(default_factory=dict)
    """Tagged ids that are not items of this set (ignored, and reported), by flag."""
    systems: tuple[str, ...] = ()
    """The systems whose predictions were labelled, when the file says (a ``system`` field)."""

    def tagged(self, flag: Flag) -> bool:
        """Whether the experts' tags for this flag are known for the set."""
        return any(getattr(h, flag) is not None for h in self.labels.values())


def key(item_id: Any) -> str:
    """The text under which an id is matched."""
    return str(item_id)


def id_order(k: str) -> tuple[int, int | str]:
    """Sort key for ids as text: numbers by value first, then the others."""
    return (0, int(k)) if k.isdigit() else (1, k)


def parse_bool(value: Any, path: Path, where: str | int, what: str) -> bool:
    """A strict boolean: JSON true/false, 1/0, or the words true/false, yes/no, correct/incorrect."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InputError(
        path, f"{what} {value!r} is not a boolean (true/false, 1/0, yes/no, correct/incorrect)", where=where
    )


def _digest(*parts: bytes | Path) -> str:
    """sha256 of the parts in turn (a file's bytes read in blocks), its first 16 hex digits."""
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, Path):
            with p.open("rb") as f:
                while block := f.read(2**20):
                    h.update(block)
        else:
            h.update(p)
    return h.hexdigest()[:16]


def load_labels(path: Path) -> LabelSet:
    """Read a labels file (ROSE-VEC or generic); :class:`InputError` names the file and entry when malformed."""
    rows = read_table(path)
    if not rows:
        raise InputError(path, "no labels in this file")
    rose_vec = all("question_id" in r and "label" in r and "predicted_sql" in r for _, r in rows)
    labels: dict[str, HumanLabel] = {}
    for where, row in rows:
        item_id = row.get("id", row.get("question_id"))
        value = next((row[f] for f in _LABEL_FIELDS if row.get(f) is not None), None)
        if item_id is None or value is None:
            raise InputError(path, "each entry needs an id ('id' or 'question_id') and a 'label'", where=where)
        k = key(item_id)
        if k in labels:
            raise InputError(path, f"id {item_id!r} is labelled twice", where=where)
        ambiguous = str(value).strip().lower() == "ambiguous"  # the demo's: either reading is acceptable
        labels[k] = HumanLabel(
            correct=True if ambiguous else parse_bool(value, path, where, "label"),
            reviewed=not (rose_vec and "ex" in row),
            goldx=_optional_bool(row, "goldx", path, where),
            ambq=True if ambiguous else _optional_bool(row, "ambq", path, where),
            db_id=str(row["db_id"]) if row.get("db_id") not in (None, "") else None,
            pred_sql=_optional_sql(row, path, where),
        )
    if any(str(r.get("expert", "")).strip().lower() == "ambiguous" for _, r in rows):
        # the experts said which questions are ambiguous, so every other one is not
        labels = {k: h if h.ambq is not None else replace(h, ambq=False) for k, h in labels.items()}
    systems = tuple(sorted({str(r["system"]) for _, r in rows if r.get("system") not in (None, "")}))
    fmt = "rose-vec" if rose_vec else "generic"
    return LabelSet(path.stem, path, fmt, labels, _digest(path), systems=systems)


def _optional_sql(row: dict[str, Any], path: Path, where: str | int) -> str | None:
    name = next((f for f in _SQL_FIELDS if row.get(f) not in (None, "")), None)
    if name is None:
        return None
    value = row[name]
    if not isinstance(value, str):
        raise InputError(path, f"{name} must be text, not {type(value).__name__}", where=where)
    return value


def _optional_bool(row: dict[str, Any], name: str, path: Path, where: str | int) -> bool | None:
    value = row.get(name)
    if value is None or value == "":
        return None
    return parse_bool(value, path, where, name)


def read_ids(path: Path) -> list[str]:
    """A JSON list of ids (or a text file with one id per line), read within the bounds of
    :func:`~rose_sql.analysis.runs.read_table`'s files."""
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(read_capped(path, MAX_INPUT_BYTES, "an id list").decode("utf-8-sig"))
        except UnicodeDecodeError as e:
            raise InputError(path, f"cannot read: {e}") from None
        except json.JSONDecodeError as e:
            raise InputError(path, f"not JSON ({e.msg})", where=e.lineno) from None
        except RecursionError:
            raise InputError(path, "not JSON this reader holds (nested too deeply)") from None
        if not isinstance(data, list) or not all(isinstance(x, int | str) for x in data):
            raise InputError(path, "expected a JSON list of ids")
        return [key(x) for x in data]
    ids: list[str] = []
    for lineno, raw, _ended in read_lines(path, MAX_TABLE_LINE_BYTES):
        try:
            line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8").strip()
        except UnicodeDecodeError as e:
            raise InputError(path, f"not UTF-8 text ({e.reason} at byte {e.start})", where=lineno) from None
        if line:
            ids.append(line)
    return ids


def with_tags(labels: LabelSet, flag: Flag, ids_path: Path) -> LabelSet:
    """The label set with the experts' tags for one flag taken from an id list."""
    ids = set(read_ids(ids_path))
    updated = {
        k: replace(h, goldx=k in ids) if flag == "goldx" else replace(h, ambq=k in ids)
        for k, h in labels.labels.items()
    }
    return replace(
        labels,
        labels=updated,
        sha256=_digest(labels.sha256.encode(), flag.encode(), ids_path),
        tag_sources={**labels.tag_sources, flag: str(ids_path)},
        tags_outside={**labels.tags_outside, flag: sorted(ids - labels.labels.keys(), key=id_order)},
    )


def reviewed_only(labels: LabelSet) -> LabelSet:
    """The label set without the items labelled without human review."""
    return replace(labels, labels={k: h for k, h in labels.labels.items() if h.reviewed})
