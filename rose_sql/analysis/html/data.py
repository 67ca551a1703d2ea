"""What the report shows, computed from the runs: per-stage usage, item outcomes, the browser's rows."""

from __future__ import annotations

from typing import Any

from rose_sql.analysis.runs import Run
from rose_sql.analysis.systems import reading as reading_of
from rose_sql.record import JudgeCall, Record
from rose_sql.verdicts import ProverReply

OUTCOMES = {
    "both_correct": "EX ✓ ROSE ✓",
    "both_wrong": "EX ✗ ROSE ✗",
    "rose_only": "EX ✗ ROSE ✓",
    "ex_only": "EX ✓ ROSE ✗",
    "awaiting": "awaiting judge",
    "unscored": "unscored",
    "no_ex": "no EX",
}
_TEXT_CAP = 4000


def stage_usage(run: Run) -> dict[str, dict[str, float]]:
    """LLM calls (made and cached) and cost per judge stage, counted from the records."""
    stages: dict[str, dict[str, float]] = {}
    for r in run.records:
        for c in r.judges:
            s = stages.setdefault(c.stage, {"calls": 0, "cached": 0, "cost_usd": 0.0})
            if c.cached:
                s["cached"] += 1
            else:
                s["calls"] += 1
                s["cost_usd"] += c.cost_usd or 0.0
    return stages


def outcome(record: Record, reading: str = "bird_ex") -> str:
    """How EX and ROSE judged an item: one of :data:`OUTCOMES`."""
    score = record.score
    ex = reading_of(record, reading)
    if score is None:
        return "awaiting" if record.unscored_reason == "awaiting_judge" else "unscored"
    if ex is None:
        return "no_ex"
    return {(1, 1): "both_correct", (0, 0): "both_wrong", (0, 1): "rose_only", (1, 0): "ex_only"}[int(ex), int(score)]


def flags(record: Record) -> list[str]:
    """The item's labels as short tags: ``goldx``, ``ambq``, ``smell``."""
    out = [f for f in ("goldx", "ambq") if getattr(record.labels, f) is True]
    return out + (["smell"] if record.evidence is not None and record.evidence.gold_smells else [])


def _cap(text: Any) -> str | None:
    if text is None:
        return None
    s = str(text)
    return s if len(s) <= _TEXT_CAP else s[:_TEXT_CAP] + f"… ({len(s)} chars)"


def _verdict(call: JudgeCall) -> str:
    reply = call.reply
    if reply is None:
        return f"no valid reply ({call.error or 'unknown error'})"
    if isinstance(reply, ProverReply):
        return "pass" if reply.answers_question else "fail"
    return "overturn" if reply.overturn else "uphold"


def _judge(call: JudgeCall) -> dict[str, object]:
    reply = call.reply
    shown = ("expected_answer", "sql_behaviour", "label", "ambiguity", "gold_correct")
    extra = {k: _cap(getattr(reply, k)) for k in shown if getattr(reply, k, None) not in (None, "")}
    return {
        "stage": call.stage,
        "model": call.model,
        "verdict": _verdict(call),
        "reasoning": _cap(reply.reasoning) if reply is not None else None,
        "extra": extra,
    }


def _evidence(record: Record) -> dict[str, object] | None:
    ev = record.evidence
    if ev is None:
        return None
    out: dict[str, object] = {
        "smells": [f"{s.name}: {s.detail}" for s in ev.gold_smells],
        "witness": f"{ev.witness.reason} ({ev.witness.label})" if ev.witness is not None else None,
        "diff": "; ".join(ev.diff.shape) if ev.diff is not None else None,
    }
    return out if any(out.values()) else None


def browser_item(record: Record, system: int, reading: str = "bird_ex") -> dict[str, object]:
    """One row of the per-item browser (texts capped so that the page stays small)."""
    return {
        "s": system,
        "id": record.id,
        "db": record.db_id,
        "d": record.difficulty,
        "q": _cap(record.question),
        "p": _cap(record.pred_sql),
        "g": _cap(record.gold_sql),
        "sc": record.score,
        "ex": reading_of(record, reading),
        "o": outcome(record, reading),
        "f": flags(record),
        "by": record.decided_by,
        "ur": record.unscored_reason,
        "why": _cap(record.why),
        "j": [_judge(c) for c in record.judges],
        "ev": _evidence(record),
    }
