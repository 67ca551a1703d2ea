"""What experts review: items loaded from a ``rose run`` output, from any input ``rose run`` reads, or
from a ROSE-VEC-style file, and the labels of the ROSE authors' per-annotator files.

Every source becomes a list of :class:`WorkItem` (the item's text and, from a run, the whole
:class:`~rose_sql.record.Record` with its executions, evidence and judges). Loading goes through the
public readers of the rest of the package (:func:`rose_sql.items.load.load_items`,
:func:`rose_sql.analysis.runs.load_runs`), so every malformed file is refused the same way, naming
the file and the entry.

Per-annotator files (``annotations_<n>.json`` of ROSE-VEC: ``{question_id, db_id, question,
evidence, predicted_sql, gold_sql, label, reason}``) carry no flags, only free text; the flags are
read from the reason with the rules the ROSE authors' own lists follow (:data:`FLAG_RULES`: on the
agreed BIRD items they give exactly the GoldX and AmbQ lists of ``historical_51e2685/``).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rose_sql.analysis.labels import key, parse_bool
from rose_sql.analysis.runs import load_runs, read_table
from rose_sql.errors import InputError, UsageError
from rose_sql.items.load import Item, ItemId, load_items
from rose_sql.record import Record


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One item to review: the question and both SQL texts, and its record when it comes from a run."""

    key: str
    """The item's id as text (ids are matched as text, as ``rose agree`` matches them)."""
    item: Item
    """The question, evidence, both SQL texts and the database, as ``rose run`` reads them."""
    record: Record | None = None
    """The ``rose run`` record (executions, evidence, judges), when the item comes from a run."""

    def to_json(self) -> str:
        """The item as one JSON text (the record in its own on-disk layout)."""
        record = self.record.to_dict() if self.record is not None else None
        return json.dumps({"item": asdict(self.item), "record": record}, ensure_ascii=False, default=str)

    @classmethod
    def from_json(cls, text: str) -> WorkItem:
        """An item written by :meth:`to_json` (its record validated again)."""
        data = json.loads(text)
        item = Item(**data["item"])
        record = data.get("record")
        return cls(key(item.id), item, Record.from_dict(record) if record is not None else None)


@dataclass(frozen=True, slots=True)
class Work:
    """The items of one source, and what was odd about it."""

    source: str
    """The path loaded, and how it was read (``run``, a format of ``rose run``)."""
    items: list[WorkItem]
    """Items in the source's order (a run's by id: :func:`id_order`)."""
    warnings: list[str]
    """Problems that did not stop the load."""


def _of_item(item: Item) -> WorkItem:
    return WorkItem(key(item.id), item)


def _of_record(r: Record) -> WorkItem:
    # records do not keep BIRD's evidence text
    item = Item(r.id, r.db_id, r.pred_sql, r.gold_sql, r.question, None, r.difficulty, r.source)
    return WorkItem(key(r.id), item, r)


def id_order(item_id: ItemId) -> tuple[int, int, str]:
    """Where an item goes among a run's: numbers by value first, then text. A run keeps its records in the
    order they finished, which changes from run to run; loaded in id order, item 718 of a benchmark numbered
    from 0 is the 719th (ids from ``question_id`` or a file's line follow the input's order)."""
    return (0, item_id, "") if isinstance(item_id, int) else (1, 0, str(item_id))


def _is_run(path: Path) -> bool:
    return path.is_dir() or path.name == "records.jsonl"


def load_work(path: Path, *, gold: Path | None = None, fmt: str | None = None) -> Work:
    """The items at ``path``: a ``rose run`` output (a system folder or its ``records.jsonl``), or a
    prediction file in any format ``rose run`` reads (a ROSE-VEC file reads as ``sqlexam``; its labels
    are not taken: import per-annotator files for that).

    Raises :class:`~rose_sql.errors.InputError` or :class:`~rose_sql.errors.UsageError`.
    """
    if _is_run(path):
        runs = load_runs(path)
        if len(runs) > 1:
            names = ", ".join(r.name for r in runs)
            raise UsageError(f"{path} holds {len(runs)} systems ({names}): load one system folder per project")
        run = runs[0]
        items = [_of_record(r) for r in sorted(run.records, key=lambda r: id_order(r.id))]
        return Work(f"{path} (rose run output)", _unique(items, path), list(run.warnings))
    loaded = load_items(path, gold_path=gold, fmt=fmt)
    items = [_of_item(it) for it in loaded.items]
    warnings = list(loaded.warnings)
    rows = read_table(path) if loaded.format == "sqlexam" else []
    if rows and all("label" in r for _, r in rows):
        warnings.append(
            f"{path.name}: its labels were not imported (items only); import per-annotator files with "
            "--import-annotations to bring labels in"
        )
    return Work(f"{path} ({loaded.format})", _unique(items, path), warnings)


def _unique(items: list[WorkItem], path: Path) -> list[WorkItem]:
    seen: set[str] = set()
    for it in items:
        if it.key in seen:
            raise InputError(path, f"two items have the id {it.key!r} once read as text; ids must differ as text")
        seen.add(it.key)
    return items


# --------------------------------------------------------------------------- per-annotator files

FLAG_RULES: dict[str, re.Pattern[str]] = {
    "goldx": re.compile(r"gold\s*false", re.IGNORECASE),
    "ambq": re.compile(r"ambiguous\s+question", re.IGNORECASE),
    "ambs": re.compile(r"ambiguous\s+schema", re.IGNORECASE),
}
"""How a free-text reason of the ROSE authors' annotators says a flag: ``GOLD FALSE`` (the gold is
wrong), ``AMBIGUOUS QUESTION``, ``AMBIGUOUS SCHEMA``, in any case."""


@dataclass(frozen=True, slots=True)
class ImportedLabel:
    """One label of a per-annotator file."""

    item: WorkItem
    """The item it is about (as the file gives it)."""
    correct: bool
    """The annotator's verdict: the prediction answers the question."""
    reason: str
    """Their free-text reason."""
    goldx: bool
    """The reason says the gold is wrong."""
    ambq: bool
    """The reason says the question is ambiguous."""
    ambs: bool
    """The reason says the schema is ambiguous."""

    def flags(self) -> dict[str, bool]:
        return {"goldx": self.goldx, "ambq": self.ambq, "ambs": self.ambs}


def annotator_name(path: Path) -> str:
    """The annotator a per-annotator file belongs to: its file name without extension
    (``annotations_3.json`` is ``annotations_3``)."""
    return path.stem


def read_annotations(path: Path) -> list[ImportedLabel]:
    """The labels of one per-annotator file, with their items; flags read from the reasons (:data:`FLAG_RULES`).

    Raises :class:`~rose_sql.errors.InputError` naming the file and entry of anything malformed.
    """
    loaded = load_items(path, fmt="sqlexam")
    rows = read_table(path)
    out = []
    for item, (where, row) in zip(loaded.items, rows, strict=True):
        if "label" not in row:
            raise InputError(path, "a per-annotator entry needs a 'label'", where=where)
        reason = row.get("reason") or ""
        if not isinstance(reason, str):
            raise InputError(path, f"reason {reason!r} is not text", where=where)
        try:
            reason.encode("utf-8")
        except UnicodeEncodeError as e:  # "\ud800" in JSON: no UTF-8 holds it, nor the state file
            raise InputError(
                path, f"the reason holds a lone surrogate at {e.start}, which is not text", where=where
            ) from None
        flags = {name: bool(rule.search(reason)) for name, rule in FLAG_RULES.items()}
        out.append(ImportedLabel(_of_item(item), parse_bool(row["label"], path, where, "label"), reason, **flags))
    return out


def item_dict(work: WorkItem) -> dict[str, Any]:
    """The item's text fields, without where it was read (for comparing two copies of an item)."""
    data = asdict(work.item)
    del data["source"]
    data["id"] = work.key  # 12 and "12" are one item
    return data
