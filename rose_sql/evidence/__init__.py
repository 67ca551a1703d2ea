"""Evidence instead of opinion: witnesses, distinguishing rows and gold smells for one item.

:class:`Finder` keeps one private in-memory copy of each database per thread and, for an item whose
gold ran, gathers: when the results match, a *witness* (a schema-valid change of the database on
which the two queries disagree); when they differ, the *distinguishing rows* and the shape of the
difference; in both cases the *gold smells*. All of it is deterministic, bounded by a time and
candidate budget, and computed on copies: the user's database is opened read-only.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rose_sql.compare import Comparison, json_value
from rose_sql.config import Config
from rose_sql.evidence.diff import describe
from rose_sql.evidence.features import features
from rose_sql.evidence.smells import gold_smells
from rose_sql.evidence.witness import Witness, search
from rose_sql.evidence.workspace import Workspace
from rose_sql.execute import Execution, ResultSet
from rose_sql.sql import has_top_level_order_by


def _result(r: ResultSet, rows: int) -> dict[str, Any]:
    return {
        "columns": list(r.columns),
        "row_count": r.row_count,
        "rows": [[json_value(v) for v in row] for row in r.rows[:rows]],
    }


@dataclass
class Evidence:
    """What the deterministic search found for one item (``record.evidence``)."""

    witness: dict[str, Any] | None = None
    """The change to the database and both results on it; None when none was found (or not searched)."""
    diff: dict[str, Any] | None = None
    """Distinguishing rows and the shape of the difference, when the results differ."""
    gold_smells: list[dict[str, Any]] = field(default_factory=list)
    """Named smells of the gold with their details."""
    search: dict[str, Any] | None = None
    """How the witness search went: candidates tried by kind, seconds, why it stopped."""
    seconds: float = 0.0
    """Time spent on this item's evidence."""
    skipped: str | None = None
    """Why no evidence was gathered, when it was not."""

    @property
    def questions_match(self) -> bool:
        """Deterministic evidence casts doubt on a match (a witness or a gold smell)."""
        return self.witness is not None or bool(self.gold_smells)

    def to_dict(self) -> dict[str, Any]:
        return {
            "witness": self.witness,
            "diff": self.diff,
            "gold_smells": self.gold_smells,
            "search": self.search,
            "seconds": round(self.seconds, 4),
            "skipped": self.skipped,
        }

    def render(self) -> str:
        """The evidence as the judges read it: deterministic, short, neutral."""
        parts = []
        w = self.witness
        if w is not None:
            parts.append(
                f"WITNESS DATABASE ({w['kind']}): {w['reason']}.\nChange to the real database: {w['label']}.\n"
                f"On the changed database the predicted SQL returns {json.dumps(w['pred_result'], default=str)}\n"
                f"and the reference SQL returns {json.dumps(w['gold_result'], default=str)}\n"
                f"({w['comparison']})."
                + (f"\nRealism caveats: {'; '.join(w['caveats'])}." if w["caveats"] else "")
                + "\nCould such data occur for this question, and if so which result answers it? The witness may "
                "expose the reference as well as the prediction."
            )
        elif self.search is not None:
            # fixed wording: how far a time-bounded search got must not change the prompt (or its cache key)
            parts.append("No witness database was found; this does not prove the queries equivalent.")
        if self.diff is not None:
            d = self.diff
            parts.append(
                "How the results differ: " + ("; ".join(d["shape"]) or "different rows") + f". Rows only in the "
                f"prediction ({d['pred_only_count']}): {json.dumps(d['pred_only'], default=str)}; rows only in the "
                f"reference ({d['gold_only_count']}): {json.dumps(d['gold_only'], default=str)}."
            )
        for s in self.gold_smells:
            parts.append(f"Reference SQL smell ({s['name']}): {s['detail']}.")
        return "\n\n".join(parts)


def _witness_dict(w: Witness, rows: int) -> dict[str, Any]:
    return {
        "kind": w.kind,
        "reason": w.reason,
        "label": w.label,
        "changes": [_jsonable(c) for c in w.changes],
        "pred_result": _result(w.pred, rows),
        "gold_result": _result(w.gold, rows),
        "comparison": f"{w.comparison.reason}: {w.comparison.detail}",
        "caveats": w.caveats,
    }


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    return json_value(obj)


class Finder:
    """Gathers evidence; thread-safe (one workspace per database per thread)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._local = threading.local()

    def _workspace(self, db: Path) -> Workspace:
        spaces: dict[Path, Workspace] | None = getattr(self._local, "spaces", None)
        if spaces is None:
            spaces = self._local.spaces = {}
        if db not in spaces:
            spaces[db] = Workspace(db, timeout_s=min(self.config.timeout_s, 2.0))
        return spaces[db]

    def gather(
        self, db: Path, gold_sql: str, pred_sql: str, gold: Execution, pred: Execution, comparison: Comparison | None
    ) -> Evidence:
        """Evidence for one item whose gold ran (never raises for a problem of the item)."""
        start = time.monotonic()
        cfg = self.config
        g, p = gold.result, pred.result
        if g is None or g.truncated:
            return Evidence(skipped="the gold has no complete result")
        if db.stat().st_size > cfg.evidence_max_db_bytes:
            return Evidence(skipped=f"database larger than {cfg.evidence_max_db_bytes // 2**20} MiB")
        ws = self._workspace(db)
        ws.hard_deadline = start + cfg.evidence_budget_s
        try:
            return self._gather(ws, start, gold_sql, pred_sql, g, p, comparison)
        finally:
            ws.hard_deadline = float("inf")

    def _gather(
        self,
        ws: Workspace,
        start: float,
        gold_sql: str,
        pred_sql: str,
        g: ResultSet,
        p: ResultSet | None,
        comparison: Comparison | None,
    ) -> Evidence:
        cfg = self.config
        ordered = has_top_level_order_by(gold_sql)
        feats = features(gold_sql).merge(features(pred_sql))
        ev = Evidence()
        base_timeout, ws.timeout_s = ws.timeout_s, min(ws.timeout_s, cfg.evidence_budget_s / 4)
        try:
            ev.gold_smells = gold_smells(ws, gold_sql, g, feats.tables, ordered=ordered, digits=cfg.float_digits)
        finally:
            ws.timeout_s = base_timeout
        if comparison is not None and p is not None and comparison.equal is True:
            values = list({v for row in g.rows[:20] for v in row if isinstance(v, int | float | str)})[:20]
            remaining = max(0.0, cfg.evidence_budget_s - (time.monotonic() - start))
            s = search(
                ws,
                gold_sql,
                pred_sql,
                feats,
                ordered=ordered,
                digits=cfg.float_digits,
                budget_s=remaining,
                max_candidates=cfg.evidence_max_candidates,
                result_values=values,
            )
            ev.search = {
                "tried": s.tried,
                "candidates": s.candidates,
                "seconds": round(s.seconds, 4),
                "stopped": s.stopped,
                "order_dependent": s.order_dependent,
            }
            ev.witness = _witness_dict(s.witness, cfg.evidence_result_rows) if s.witness else None
        elif comparison is not None and p is not None and comparison.equal is False:
            ev.diff = describe(p, g, comparison, cfg.float_digits)
        ev.seconds = time.monotonic() - start
        return ev
