"""Dataset audit export for benchmark maintainers: every item whose gold or question looks wrong.

An item is exported when the Refuter flagged its gold SQL as wrong (GoldX), its question as
ambiguous (AmbQ), or when the deterministic evidence found a gold smell. Each row carries what a
maintainer needs to decide: the question, both SQL texts, the flags with the judges' reasoning, the
smells and the witness. Written as ``audit.jsonl`` (full detail) and ``audit.csv`` (one line each).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rose_sql.analysis.runs import Run

CSV_COLUMNS = (
    "system",
    "id",
    "db_id",
    "difficulty",
    "reasons",
    "goldx",
    "goldx_confidence",
    "ambq",
    "ambiguity",
    "diagnostic",
    "gold_smells",
    "score",
    "bird_ex",
    "question",
    "gold_sql",
    "pred_sql",
    "refuter_reasoning",
    "prover_reasoning",
    "witness",
    "why",
)


def smells(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The gold smells in a record's evidence."""
    found = (record.get("evidence") or {}).get("gold_smells") or []
    return [s if isinstance(s, dict) else {"name": str(s), "detail": ""} for s in found]


def reasons(record: dict[str, Any]) -> list[str]:
    """Why an item belongs in the audit (empty: it does not)."""
    labels = record.get("labels") or {}
    out = []
    if labels.get("goldx") is True:
        out.append("goldx")
    if labels.get("ambq") is True:
        out.append("ambq")
    out += [f"smell:{s.get('name', '?')}" for s in smells(record)]
    return out


def _reasoning(record: dict[str, Any], stage: str) -> str | None:
    for call in reversed(record.get("judges") or []):
        if call.get("stage") == stage and call.get("reply"):
            return str(call["reply"].get("reasoning") or "")
    return None


def audit_row(run_name: str, record: dict[str, Any]) -> dict[str, Any]:
    """The audit entry of one flagged record."""
    labels = record.get("labels") or {}
    evidence = record.get("evidence") or {}
    return {
        "system": run_name,
        "id": record.get("id"),
        "db_id": record.get("db_id"),
        "difficulty": record.get("difficulty"),
        "reasons": reasons(record),
        "goldx": labels.get("goldx"),
        "goldx_confidence": labels.get("goldx_confidence"),
        "ambq": labels.get("ambq"),
        "ambiguity": labels.get("ambiguity"),
        "diagnostic": labels.get("diagnostic"),
        "gold_smells": smells(record),
        "score": record.get("score"),
        "bird_ex": (record.get("readings") or {}).get("bird_ex"),
        "question": record.get("question"),
        "gold_sql": record.get("gold_sql"),
        "pred_sql": record.get("pred_sql"),
        "refuter_reasoning": _reasoning(record, "refuter"),
        "prover_reasoning": _reasoning(record, "prover"),
        "witness": evidence.get("witness"),
        "why": record.get("why"),
    }


def audit_rows(runs: Iterable[Run]) -> list[dict[str, Any]]:
    """Audit entries of every flagged record of the runs, in record order."""
    return [audit_row(run.name, r) for run in runs for r in run.records if reasons(r)]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "; ".join(value)
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return "; ".join(f"{v.get('name', '?')}: {v.get('detail', '')}".rstrip(": ") for v in value)
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def write_audit(rows: list[dict[str, Any]], out: Path) -> tuple[Path, Path]:
    """Write ``audit.jsonl`` and ``audit.csv`` into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    jsonl, csv_path = out / "audit.jsonl", out / "audit.csv"
    with jsonl.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    with csv_path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for row in rows:
            w.writerow([_cell(row[c]) for c in CSV_COLUMNS])
    return jsonl, csv_path
