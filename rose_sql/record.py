"""The on-disk record of one item, and the append-only ``records.jsonl`` it lives in.

One JSON line per item, appended and flushed as the item finishes, so a crash loses at most the
line being written; :func:`read_records` skips a torn last line and :class:`RecordWriter`
truncates it before appending again. The schema is versioned (``schema``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from rose_sql.compare import Comparison, json_value
from rose_sql.errors import InputError
from rose_sql.execute import Execution
from rose_sql.items import ItemId
from rose_sql.readings import Readings

SCHEMA_VERSION = 1
PREVIEW_ROWS = 5


@dataclass(frozen=True, slots=True)
class ExecutionInfo:
    """What the record keeps of one execution."""

    status: str
    """``ok``, ``error``, ``timeout``, ``rejected`` or ``skipped``."""
    seconds: float
    """Wall time in seconds (of the original run when cached)."""
    error: str | None = None
    """Why it did not run, when not ok."""
    columns: list[str] | None = None
    """Result column names."""
    row_count: int | None = None
    """Total rows (a lower bound if ``count_exact`` is false)."""
    truncated: bool = False
    """Rows were cut at the row or byte cap."""
    count_exact: bool = True
    """False when the rows past the cap could not all be counted in time."""
    preview: list[list[Any]] | None = None
    """The first rows, as JSON values (bytes as ``x'hex'``)."""
    cached: bool = False
    """Served from the execution cache."""

    @classmethod
    def of(cls, e: Execution | None) -> ExecutionInfo:
        if e is None:
            return cls("skipped", 0.0)
        r = e.result
        return cls(
            status=e.status,
            seconds=round(e.seconds, 6),
            error=e.error,
            columns=list(r.columns) if r else None,
            row_count=r.row_count if r else None,
            truncated=r.truncated if r else False,
            count_exact=r.count_exact if r else True,
            preview=[[json_value(v) for v in row] for row in r.rows[:PREVIEW_ROWS]] if r else None,
            cached=e.cached,
        )


@dataclass(frozen=True, slots=True)
class Record:
    """Everything known about one evaluated item (one line of ``records.jsonl``)."""

    id: ItemId
    """The item's id as the input gave it."""
    db_id: str
    """Database name."""
    score: int | None
    """1 (answers the question), 0 (does not) or None (unscored, see ``unscored_reason``)."""
    unscored_reason: str | None
    """Why there is no score: db_missing, no_gold, gold_error, awaiting_judge."""
    decided_by: str | None
    """The stage that settled the score (``execution``), None when unscored."""
    why: str
    """One line explaining the decision."""
    readings: Readings
    """The official metrics (bird_ex, ts_ex, ts_ex_keep_distinct, soft_f1)."""
    comparison: dict[str, Any] | None
    """Our comparator's outcome: equal, reason, detail, notes (None when nothing to compare)."""
    pred: ExecutionInfo
    """The prediction's execution."""
    gold: ExecutionInfo
    """The gold's execution."""
    difficulty: str | None = None
    """Difficulty label when the data has one."""
    question: str | None = None
    """The question text."""
    pred_sql: str = ""
    """The predicted SQL as given."""
    gold_sql: str | None = None
    """The gold SQL as given."""
    source: str = ""
    """Where the item came from (file:line or file:key)."""
    labels: dict[str, Any] = field(default_factory=lambda: {"goldx": None, "ambq": None})
    """Dataset labels (GoldX, AmbQ); None until a Refuter has looked."""
    judges: list[dict[str, Any]] = field(default_factory=list)
    """LLM calls in order: stage, model, validated reply, raw reply, cached, tokens, cost."""
    llm_calls: int = 0
    """Calls made to the endpoint for this item (cached replies not counted)."""
    cost_usd: float = 0.0
    """What those calls cost."""
    evidence: dict[str, Any] | None = None
    """Deterministic evidence (witness, distinguishing rows, gold smells) when that stage ran."""
    schema: int = SCHEMA_VERSION
    """Version of this record layout."""

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data (nested dicts and lists are shared, not copied)."""
        # one level of fields by hand: dataclasses.asdict deep-copies every nested dict and list
        data = {name: getattr(self, name) for name in _RECORD_FIELDS}
        data["readings"] = {name: getattr(self.readings, name) for name in _READINGS_FIELDS}
        data["pred"] = {name: getattr(self.pred, name) for name in _EXECUTION_FIELDS}
        data["gold"] = {name: getattr(self.gold, name) for name in _EXECUTION_FIELDS}
        return data

    def to_json(self) -> str:
        return dumps(self.to_dict())


_RECORD_FIELDS = tuple(f.name for f in fields(Record))
_READINGS_FIELDS = tuple(f.name for f in fields(Readings))
_EXECUTION_FIELDS = tuple(f.name for f in fields(ExecutionInfo))

_CALL_BRIEF = ("stage", "cached", "prompt_tokens", "completion_tokens", "cost_usd")


def brief(record: dict[str, Any]) -> dict[str, Any]:
    """What a run's summary reads of a record (as read back, or as :meth:`Record.to_dict` gives it):
    a small record of the same shape, cheap to keep and to send between processes."""
    comparison = record.get("comparison")
    return {
        "id": record["id"],
        "score": record.get("score"),
        "unscored_reason": record.get("unscored_reason"),
        "decided_by": record.get("decided_by"),
        "readings": record.get("readings") or {},
        "difficulty": record.get("difficulty"),
        "comparison": {"reason": comparison.get("reason")} if comparison else None,
        "judges": [{k: c.get(k) for k in _CALL_BRIEF} for c in record.get("judges") or []],
    }


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=str)


def dumps(data: dict[str, Any]) -> str:
    """A record's data as its one JSON line (without the newline)."""
    return _ENCODER.encode(data)


def comparison_dict(c: Comparison | None) -> dict[str, Any] | None:
    """The JSON form of a comparison."""
    if c is None:
        return None
    return {
        "equal": c.equal,
        "reason": c.reason,
        "detail": c.detail,
        "notes": list(c.notes),
        "pred_only": c.pred_only,
        "gold_only": c.gold_only,
    }


def id_key(item_id: Any) -> str:
    """A key under which an id read back from JSON equals the id it was written from."""
    return json.dumps(item_id)


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a ``records.jsonl`` as dicts; a torn (unterminated) last line is skipped."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    lines = data.split(b"\n")
    for lineno, raw in enumerate(lines[:-1], start=1):  # the part after the last newline is torn
        if not raw.strip():
            continue
        try:
            yield json.loads(raw)
        except json.JSONDecodeError as e:
            raise InputError(path, f"not a record ({e.msg}); the file was edited or corrupted", where=lineno) from None


class RecordWriter:
    """Appends records to ``records.jsonl``, one flushed line each."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            data = path.read_bytes()
            end = data.rfind(b"\n") + 1
            if end != len(data):  # drop a line torn by a crash
                with path.open("r+b") as f:
                    f.truncate(end)
        self.path = path
        self._f = path.open("a", encoding="utf-8", errors="backslashreplace")  # lone surrogates stay valid JSON

    def write(self, record: Record) -> None:
        """Append a record (flushed by :meth:`flush`, which the run calls after every batch)."""
        self.write_line(record.to_json())

    def write_line(self, line: str) -> None:
        """Append a record already serialised as one JSON line."""
        self._f.write(line + "\n")

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()
