"""What the report shows, computed from the runs: per-stage usage, item outcomes, the browser's rows."""

from __future__ import annotations

from typing import Any

from rose_sql.analysis.audit import smells
from rose_sql.analysis.runs import Run

OUTCOMES = {
    "both_correct": "EX ✓ ROSE ✓",
    "both_wrong": "EX ✗ ROSE ✗",
    "rose_only": "EX ✗ ROSE ✓",
    "ex_only": "EX ✓ ROSE ✗",
    "unscored": "unscored",
    "no_ex": "no EX",
}
_TEXT_CAP = 4000


def stage_usage(run: Run) -> dict[str, dict[str, float]]:
    """LLM calls (made and cached) and cost per judge stage, counted from the records."""
    stages: dict[str, dict[str, float]] = {}
    for r in run.records:
        for c in r.get("judges") or []:
            s = stages.setdefault(str(c.get("stage")), {"calls": 0, "cached": 0, "cost_usd": 0.0})
            if c.get("cached"):
                s["cached"] += 1
            else:
                s["calls"] += 1
                s["cost_usd"] += float(c.get("cost_usd") or 0.0)
    return stages


def outcome(record: dict[str, Any], reading: str = "bird_ex") -> str:
    """How EX and ROSE judged an item: one of :data:`OUTCOMES`."""
    score = record.get("score")
    ex = (record.get("readings") or {}).get(reading)
    if score is None:
        return "unscored"
    if ex is None:
        return "no_ex"
    return {(1, 1): "both_correct", (0, 0): "both_wrong", (0, 1): "rose_only", (1, 0): "ex_only"}[int(ex), int(score)]


def flags(record: dict[str, Any]) -> list[str]:
    """The item's labels as short tags: ``goldx``, ``ambq``, ``smell``."""
    labels = record.get("labels") or {}
    out = [f for f in ("goldx", "ambq") if labels.get(f) is True]
    return out + (["smell"] if smells(record) else [])


def _cap(text: Any) -> str | None:
    if text is None:
        return None
    s = str(text)
    return s if len(s) <= _TEXT_CAP else s[:_TEXT_CAP] + f"… ({len(s)} chars)"


def _verdict(call: dict[str, Any]) -> str:
    reply = call.get("reply")
    if not reply:
        return f"no valid reply ({call.get('error') or 'unknown error'})"
    if "answers_question" in reply:
        return "pass" if reply["answers_question"] else "fail"
    return "overturn" if reply.get("overturn") else "uphold"


def _judge(call: dict[str, Any]) -> dict[str, Any]:
    reply = call.get("reply") or {}
    extra = {
        k: _cap(reply.get(k))
        for k in ("expected_answer", "sql_behaviour", "label", "ambiguity", "gold_correct")
        if reply.get(k) not in (None, "")
    }
    return {
        "stage": call.get("stage"),
        "model": call.get("model"),
        "verdict": _verdict(call),
        "reasoning": _cap(reply.get("reasoning")),
        "extra": extra,
    }


def _evidence(record: dict[str, Any]) -> dict[str, Any] | None:
    ev = record.get("evidence") or {}
    witness = ev.get("witness")
    diff = ev.get("diff")
    out = {
        "smells": [f"{s.get('name')}: {s.get('detail', '')}" for s in smells(record)],
        "witness": f"{witness.get('reason')} ({witness.get('label')})" if isinstance(witness, dict) else None,
        "diff": "; ".join(diff.get("shape") or []) if isinstance(diff, dict) else None,
    }
    return out if any(out.values()) else None


def browser_item(record: dict[str, Any], system: int, reading: str = "bird_ex") -> dict[str, Any]:
    """One row of the per-item browser (texts capped so that the page stays small)."""
    return {
        "s": system,
        "id": record.get("id"),
        "db": record.get("db_id"),
        "d": record.get("difficulty"),
        "q": _cap(record.get("question")),
        "p": _cap(record.get("pred_sql")),
        "g": _cap(record.get("gold_sql")),
        "sc": record.get("score"),
        "ex": (record.get("readings") or {}).get(reading),
        "o": outcome(record, reading),
        "f": flags(record),
        "by": record.get("decided_by"),
        "ur": record.get("unscored_reason"),
        "why": _cap(record.get("why")),
        "j": [_judge(c) for c in record.get("judges") or []],
        "ev": _evidence(record),
    }
