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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rose_sql.analysis.runs import Run
from rose_sql.evidence.findings import Smell
from rose_sql.record import Record

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


@dataclass(frozen=True, slots=True)
class AuditRow:
    """One flagged item, with what a maintainer needs to decide (a line of ``audit.jsonl``)."""

    system: str
    """The run it comes from."""
    record: Record
    """The item's record."""
    reasons: list[str]
    """Why it is flagged: ``goldx``, ``ambq``, ``smell:<name>``."""

    def to_dict(self) -> dict[str, object]:
        r, labels = self.record, self.record.labels
        return {
            "system": self.system,
            "id": r.id,
            "db_id": r.db_id,
            "difficulty": r.difficulty,
            "reasons": self.reasons,
            "goldx": labels.goldx,
            "goldx_confidence": labels.goldx_confidence,
            "ambq": labels.ambq,
            "ambiguity": labels.ambiguity,
            "diagnostic": labels.diagnostic,
            "gold_smells": [s.to_dict() for s in smells(r)],
            "score": r.score,
            "bird_ex": r.readings.bird_ex,
            "question": r.question,
            "gold_sql": r.gold_sql,
            "pred_sql": r.pred_sql,
            "refuter_reasoning": _reasoning(r, "refuter"),
            "prover_reasoning": _reasoning(r, "prover"),
            "witness": r.evidence.witness.to_dict() if r.evidence is not None and r.evidence.witness else None,
            "why": r.why,
        }


def smells(record: Record) -> list[Smell]:
    """The gold smells in a record's evidence."""
    return list(record.evidence.gold_smells) if record.evidence is not None else []


def reasons(record: Record) -> list[str]:
    """Why an item belongs in the audit (empty: it does not)."""
    out = [flag for flag in ("goldx", "ambq") if getattr(record.labels, flag) is True]
    return out + [f"smell:{s.name}" for s in smells(record)]


def _reasoning(record: Record, stage: str) -> str | None:
    for call in reversed(record.judges):
        if call.stage == stage and call.reply is not None:
            return call.reply.reasoning
    return None


def audit_rows(runs: Iterable[Run]) -> list[AuditRow]:
    """Audit entries of every flagged record of the runs, in record order."""
    return [AuditRow(run.name, r, why) for run in runs for r in run.records if (why := reasons(r))]


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


def write_audit(audit: list[AuditRow], out: Path) -> tuple[Path, Path]:
    """Write ``audit.jsonl`` and ``audit.csv`` into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    jsonl, csv_path = out / "audit.jsonl", out / "audit.csv"
    rows = [a.to_dict() for a in audit]
    with jsonl.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    with csv_path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for row in rows:
            w.writerow([_cell(row[c]) for c in CSV_COLUMNS])
    return jsonl, csv_path
