"""Files in and out of a review: the ROSE authors' per-annotator files in, the consensus and every label out.

The export of project ``P`` is a folder ``OUT/P/``:

- ``P.json``: the consensus in ROSE-VEC's format (``question_id, db_id, question, evidence, gold_sql,
  predicted_sql, label, reason_1, reason_2...``: the reasons of the majority, in the order its
  annotators first labelled the item), so ``rose agree --labels OUT/P/P.json`` and judge cards read it
  as they read ``rose-vec-bird.json``; only items with a consensus are in it;
- ``gold_false_ids.json``, ``ambq_ids.json``, ``ambs_ids.json``: the consensus items flagged GoldX,
  AmbQ and ambiguous schema, as id lists (the layout of ROSE-VEC's ``historical_51e2685/``; the first
  two are ``rose agree``'s ``--goldx-ids`` and ``--ambq-ids``);
- ``labels.jsonl``: every label ever given, with the predicted SQL it is about, its annotator, time
  and source (``current`` is false for a label its annotator later changed);
- ``agreement.json``: raw agreement and kappa per pair over the labels given blind (each annotator's
  first), how many of the annotators' verdicts (one per annotator and item) changed after the reveal,
  and the counts of the export.

Every file is strict JSON (no ``NaN`` or ``Infinity``): a label's ``seconds`` that is not a finite
number (a state file written before they were refused) is exported as null.

An export for an annotator (``viewer``: ``rose review --export-for NAME``) leaves out every item they still owe
a label, its labels, consensus and flags, and computes every figure without them, as the app's pages do
(:func:`~rose_sql.review.agreement.withheld`); ``agreement.json`` says how many were left out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rose_sql.review.agreement import (
    FLAG_NAMES,
    agreement,
    blind,
    changed_verdicts,
    current,
    majority,
    visible,
    withheld,
)
from rose_sql.review.store import Label, Store
from rose_sql.review.work import WorkItem, annotator_name, read_annotations

FLAG_FILES = {"goldx": "gold_false_ids.json", "ambq": "ambq_ids.json", "ambs": "ambs_ids.json"}
"""The id list written for each flag."""


@dataclass(frozen=True, slots=True)
class Imported:
    """What importing per-annotator files did."""

    files: list[tuple[str, int, int]]
    """Per file: (annotator, labels added, labels already there)."""
    items_added: int
    """Items the project did not have yet."""


def import_annotations(store: Store, project: str, paths: Sequence[Path], db_root: Path | None = None) -> Imported:
    """Import the ROSE authors' per-annotator files (``annotations_<n>.json``) into a project, creating it
    and its items as needed; each file is one annotator (named after the file). Importing again adds nothing."""
    read = [(p, read_annotations(p)) for p in paths]  # every file is checked before anything is written
    items: dict[str, WorkItem] = {}
    for _, labels in read:
        for lab in labels:
            items.setdefault(lab.item.key, lab.item)
    source = ", ".join(str(p) for p in paths)
    added = store.add_items(project, f"{source} (per-annotator files)", list(items.values()), db_root)
    files = []
    for path, labels in read:
        new, kept = store.import_labels(project, annotator_name(path), labels, str(path))
        files.append((annotator_name(path), new, kept))
    return Imported(files, added)


def _question_id(k: str) -> int | str:
    """ROSE-VEC writes numeric ids as numbers."""
    return int(k) if k.isdigit() and str(int(k)) == k else k


def consensus_rows(items: Sequence[WorkItem], by_item: dict[str, list[Label]]) -> list[dict[str, Any]]:
    """The consensus of every item that has one, in ROSE-VEC's format, in project order."""
    rows = []
    for it in items:
        side = majority(by_item.get(it.key, []))
        if side is None:
            continue
        row: dict[str, Any] = {
            "question_id": _question_id(it.key),
            "db_id": it.item.db_id,
            "question": it.item.question or "",
            "evidence": it.item.evidence or "",
            "gold_sql": it.item.gold_sql or "",
            "predicted_sql": it.item.pred_sql,
            "label": side[0].verdict.correct,
        }
        for i, lab in enumerate(side, start=1):
            row[f"reason_{i}"] = lab.verdict.reason
        rows.append(row)
    return rows


def flagged(items: Sequence[WorkItem], by_item: dict[str, list[Label]], flag: str) -> list[int | str]:
    """Consensus items whose majority raised ``flag`` (any annotator of it), in project order."""
    out = []
    for it in items:
        side = majority(by_item.get(it.key, []))
        if side is not None and any(getattr(lab.verdict, flag) for lab in side):
            out.append(_question_id(it.key))
    return out


def label_rows(labels: Sequence[Label], items: dict[str, WorkItem], project: str) -> list[dict[str, Any]]:
    """Every label as JSON data, oldest first."""
    latest = {(lab.key, lab.annotator): lab.id for lab in labels}
    return [
        {
            "project": project,
            "question_id": _question_id(lab.key),
            "db_id": items[lab.key].item.db_id if lab.key in items else None,
            "predicted_sql": items[lab.key].item.pred_sql if lab.key in items else None,
            "annotator": lab.annotator,
            "label": lab.verdict.correct,
            "goldx": lab.verdict.goldx,
            "ambq": lab.verdict.ambq,
            "ambiguous_schema": lab.verdict.ambs,
            "reason": lab.verdict.reason,
            "time": lab.created,
            "seconds": lab.seconds if lab.seconds is not None and math.isfinite(lab.seconds) else None,
            "source": lab.source,
            "current": latest[lab.key, lab.annotator] == lab.id,
        }
        for lab in labels
    ]


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, allow_nan=False, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def export(store: Store, project: str, out: Path, *, viewer: str | None = None, per_item: int = 2) -> dict[str, Any]:
    """Write the export folder ``out/<project>/`` (see the module's docstring); returns ``agreement.json``'s data.

    ``viewer``: the annotator it is for: the items they still owe a label (``per_item`` labels an item) are left
    out of every file and figure."""
    order = store.keys(project)
    every = store.labels(project)
    hidden = withheld(every, order, viewer, per_item) if viewer is not None else []
    order = [k for k in order if k not in set(hidden)]
    items = [it for k in order if (it := store.item(project, k)) is not None]
    labels = visible(every, hidden)
    by_item = current(labels)
    folder = out / project
    folder.mkdir(parents=True, exist_ok=True)
    rows = consensus_rows(items, by_item)
    _write_json(folder / f"{project}.json", rows)
    flags = {}
    for flag, name in FLAG_FILES.items():
        ids = flagged(items, by_item, flag)
        _write_json(folder / name, ids)
        flags[flag] = len(ids)
    tmp = folder / "labels.jsonl.tmp"
    with tmp.open("w", encoding="utf-8") as f:
        for row in label_rows(labels, {it.key: it for it in items}, project):
            f.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
    tmp.replace(folder / "labels.jsonl")
    first = blind(labels)
    agreed = agreement(first, order)
    summary = {
        "project": project,
        "items": len(items),
        "labels": len(labels),
        "annotators": len({lab.annotator for lab in labels}),
        "double_labelled": agreed.double,
        "first_two_agree": agreed.agreed,
        "raw_agreement": agreed.raw,
        "pairs": [{"a": p.a, "b": p.b, "items": p.n, "agreed": p.agreed, "kappa": p.kappa} for p in agreed.pairs],
        "agreement_over": "each annotator's first label on an item, given before the others' were shown",
        "verdicts_changed_after_reveal": changed_verdicts(by_item, first),
        "verdicts": sum(len(on) for on in by_item.values()),
        "consensus": len(rows),
        "consensus_correct": sum(1 for r in rows if r["label"]),
        "flags": {FLAG_NAMES[f]: n for f, n in flags.items()},
        "rule": "consensus: a strict majority of at least two annotators; a flag: raised by any annotator of it",
    }
    if viewer is not None:
        summary["for"] = viewer
        summary["withheld_items"] = len(hidden)
        summary["withheld_because"] = f"{viewer} still owes them a label: nothing of their labels is exported"
    _write_json(folder / "agreement.json", summary)
    return summary
