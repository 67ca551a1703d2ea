"""Summaries of a run: ``summary.json`` and the numbers the terminal shows.

Computed from records (the whole records or their :func:`~rose_sql.record.brief`), deduplicated by
id, the last one winning: a run passes the records it wrote plus those an interrupted run had
already written, so a resumed run summarises every item exactly once, old and new alike.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rose_sql.config import Config
from rose_sql.items import Loaded
from rose_sql.record import SCHEMA_VERSION, id_key, read_records

READINGS = ("bird_ex", "ts_ex", "ts_ex_keep_distinct", "soft_f1")


@dataclass(frozen=True, slots=True)
class Summary:
    """Aggregates of one system's run (the content of ``summary.json``)."""

    system: str
    """Name of the prediction file (its output folder)."""
    n: int
    """Items recorded."""
    scored: int
    """Items with a score of 0 or 1."""
    coverage: float
    """scored / n."""
    rose: float | None
    """Mean score over scored items (None when nothing is scored)."""
    bird_ex: float | None
    """Mean BIRD EX over items where it is defined."""
    ts_ex: float | None
    """Mean Spider test-suite EX (DISTINCT removed, its default)."""
    ts_ex_keep_distinct: float | None
    """Mean Spider test-suite EX with --keep_distinct."""
    soft_f1: float | None
    """Mean BIRD Soft-F1."""
    unscored: dict[str, int]
    """Unscored items by reason (awaiting_judge, gold_error, db_missing, ...)."""
    decided_by: dict[str, int]
    """Scored items by the stage that decided them."""
    comparison: dict[str, int]
    """Our comparator's outcomes by reason (same, order, values, ...)."""
    readings_n: dict[str, int]
    """How many items each reading is defined on."""
    by_difficulty: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The same means per difficulty label, where the data has them."""
    llm: dict[str, Any] = field(default_factory=dict)
    """LLM calls, cached replies, tokens and cost: totals and per stage (from the records)."""
    judge: dict[str, Any] | None = None
    """The judge configuration that produced the scores (model, endpoint, parameters, prompt hashes)."""
    format: str = ""
    """Input format the predictions were read as."""
    warnings: list[str] = field(default_factory=list)
    """What was odd about the input."""
    schema: int = SCHEMA_VERSION
    """Version of the record and summary layout."""


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def _block(records: list[dict[str, Any]]) -> dict[str, Any]:
    scored = [r["score"] for r in records if r["score"] is not None]
    out: dict[str, Any] = {"n": len(records), "scored": len(scored), "rose": _mean(scored)}
    for name in READINGS:
        out[name] = _mean([r["readings"][name] for r in records if r["readings"].get(name) is not None])
    return out


def _llm(records: list[dict[str, Any]]) -> dict[str, Any]:
    stages: dict[str, dict[str, float]] = {}
    for r in records:
        for c in r.get("judges") or []:
            s = stages.setdefault(
                c["stage"], {"calls": 0, "cached": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
            )
            key = "cached" if c.get("cached") else "calls"
            s[key] += 1
            if not c.get("cached"):
                s["prompt_tokens"] += c.get("prompt_tokens") or 0
                s["completion_tokens"] += c.get("completion_tokens") or 0
                s["cost_usd"] = round(s["cost_usd"] + (c.get("cost_usd") or 0.0), 8)
    n = len(records) or 1
    total_calls = sum(int(s["calls"] + s["cached"]) for s in stages.values())
    return {
        "calls": sum(int(s["calls"]) for s in stages.values()),
        "cached": sum(int(s["cached"]) for s in stages.values()),
        "calls_per_item": round(total_calls / n, 4),
        "prompt_tokens": sum(int(s["prompt_tokens"]) for s in stages.values()),
        "completion_tokens": sum(int(s["completion_tokens"]) for s in stages.values()),
        "cost_usd": round(sum(s["cost_usd"] for s in stages.values()), 6),
        "by_stage": stages,
    }


def judge_info(config: Config | None) -> dict[str, Any] | None:
    """What identifies the judge that produced the scores (no secrets)."""
    if config is None or config.judge is None:
        return None
    from rose_sql.judges.ask import prompt_hashes

    j = config.judge
    return {
        "model": j.model,
        "base_url": j.base_url,
        "temperature": j.temperature,
        "seed": j.seed,
        "max_tokens": j.max_tokens,
        "policy": j.policy,
        "matched_refuter": j.effective_matched_refuter,
        "reask": j.reask,
        "prompts": prompt_hashes(),
    }


def summarize(records_path: Path, loaded: Loaded | None = None, config: Config | None = None) -> Summary:
    """Summarise a ``records.jsonl`` (deduplicated by id, the last record of an id winning)."""
    return summarize_records(read_records(records_path), records_path.parent.name, loaded, config)


def summarize_records(
    records_in: Iterable[dict[str, Any]], system: str, loaded: Loaded | None = None, config: Config | None = None
) -> Summary:
    """Summarise records of one system (deduplicated by id, the last record of an id winning)."""
    by_id = {id_key(r["id"]): r for r in records_in}
    records = list(by_id.values())
    main = _block(records)
    n = len(records)
    difficulties = sorted({r["difficulty"] for r in records if r.get("difficulty")})
    return Summary(
        system=system,
        n=n,
        scored=main["scored"],
        coverage=round(main["scored"] / n, 6) if n else 0.0,
        rose=main["rose"],
        bird_ex=main["bird_ex"],
        ts_ex=main["ts_ex"],
        ts_ex_keep_distinct=main["ts_ex_keep_distinct"],
        soft_f1=main["soft_f1"],
        unscored=dict(Counter(r["unscored_reason"] for r in records if r["score"] is None)),
        decided_by=dict(Counter(r["decided_by"] for r in records if r["score"] is not None)),
        comparison=dict(Counter((r["comparison"] or {}).get("reason", "not_compared") for r in records)),
        readings_n={k: sum(1 for r in records if r["readings"].get(k) is not None) for k in READINGS},
        by_difficulty={d: _block([r for r in records if r.get("difficulty") == d]) for d in difficulties},
        llm=_llm(records),
        judge=judge_info(config),
        format=loaded.format if loaded else "",
        warnings=list(loaded.warnings) if loaded else [],
    )


def write_summary(summary: Summary, path: Path) -> None:
    """Write ``summary.json`` atomically."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(asdict(summary), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
