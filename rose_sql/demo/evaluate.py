"""Evaluate the demo's items with the ordinary run machinery and read back what it recorded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rose_sql.config import Config
from rose_sql.demo.build import DemoPaths
from rose_sql.items import load_items
from rose_sql.record import read_records
from rose_sql.run import plan, run
from rose_sql.summary import Summary


@dataclass(frozen=True, slots=True)
class ItemResult:
    """The parts of one line of ``records.jsonl`` that the demo shows."""

    id: int
    """The demo item's id."""
    score: int | None
    """1, 0, or None when unscored."""
    unscored_reason: str | None
    """Why there is no score (``awaiting_judge``, ``gold_error``, ...)."""
    why: str
    """The record's one-line explanation."""
    bird_ex: int | None
    """BIRD EX's reading (None when undefined, e.g. the gold fails)."""
    comparison: dict[str, Any] | None
    """Our comparator's outcome: equal, reason, detail, notes."""
    pred_status: str
    """How the prediction's execution ended (``ok``, ``error``, ``timeout``, ...)."""
    pred_seconds: float
    """How long the prediction ran."""
    pred_error: str | None
    """Why the prediction did not run, when it did not."""
    gold_error: str | None
    """Why the gold did not run, when it did not."""
    evidence: dict[str, Any] | None = None
    """The evidence stage's findings (witness, diff, gold smells)."""

    @classmethod
    def of(cls, record: dict[str, Any]) -> ItemResult:
        """The view of one record read from ``records.jsonl``."""
        return cls(
            id=int(record["id"]),
            score=record["score"],
            unscored_reason=record["unscored_reason"],
            why=record["why"],
            bird_ex=record["readings"]["bird_ex"],
            comparison=record["comparison"],
            pred_status=record["pred"]["status"],
            pred_seconds=float(record["pred"]["seconds"]),
            pred_error=record["pred"]["error"],
            gold_error=record["gold"]["error"],
            evidence=record.get("evidence"),
        )


def evaluate(paths: DemoPaths, config: Config) -> tuple[dict[int, ItemResult], Summary]:
    """Evaluate ``OUT/items.jsonl`` into ``OUT/runs/``; the recorded results by item id, and the summary."""
    loaded = load_items(paths.items, fmt="generic")
    systems = plan([loaded], paths.runs, resume=False)
    (summary,) = run(systems, paths.db_root, config)
    results = (ItemResult.of(r) for r in read_records(systems[0].out_dir / "records.jsonl"))
    return {r.id: r for r in results}, summary
