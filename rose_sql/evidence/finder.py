"""Gathers an item's evidence: witness, distinguishing rows and gold smells, on a private copy
(on another engine: the gold smells read the database through its sandbox, and no witness is searched).

:class:`Finder` keeps one private in-memory copy of each database per thread and, for an item whose
gold ran, gathers: when the results match, a *witness* (a schema-valid change of the database on
which the two queries disagree); when they differ, the *distinguishing rows* and the shape of the
difference; in both cases the *gold smells*. All of it is deterministic, bounded by a time and
candidate budget, and computed on copies: the user's database is opened read-only.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rose_sql.compare import Comparison
from rose_sql.config import Config
from rose_sql.engines.source import Remote
from rose_sql.evidence.diff import describe
from rose_sql.evidence.features import features
from rose_sql.evidence.findings import Evidence, SearchInfo
from rose_sql.evidence.smells import gold_smells
from rose_sql.evidence.witness import search
from rose_sql.evidence.workspace import Workspace
from rose_sql.execute import GUARD_MARGIN_S, GUARD_STOPPED, Execution, ResultSet
from rose_sql.sql import has_top_level_order_by
from rose_sql.workers import Watch, statement_key

if TYPE_CHECKING:
    from rose_sql.evidence.probe import EngineProbe

STATEMENT_STEPS = 50_000_000
"""Steps one statement of the evidence search may take (the queries under test run on a copy many times)."""


class Finder:
    """Gathers evidence; thread-safe (one workspace per database per thread)."""

    def __init__(self, config: Config, *, watch: Watch | None = None) -> None:
        self.config = config
        self.watch = watch or Watch()
        self._local = threading.local()

    def _workspace(self, db: Path) -> Workspace:
        spaces: dict[Path, Workspace] | None = getattr(self._local, "spaces", None)
        if spaces is None:
            spaces = self._local.spaces = {}
        if db not in spaces:
            cfg = self.config
            spaces[db] = Workspace(
                db,
                statement_steps=min(cfg.max_steps, STATEMENT_STEPS),
                max_bytes=cfg.max_result_bytes,
                max_value_bytes=cfg.max_value_bytes,
            )
        return spaces[db]

    def gather(
        self,
        db: Path | Remote,
        gold_sql: str,
        pred_sql: str,
        gold: Execution,
        pred: Execution,
        comparison: Comparison | None,
    ) -> Evidence:
        """Evidence for one item whose gold ran (never raises for a problem of the item)."""
        start = time.monotonic()
        cfg = self.config
        g, p = gold.result, pred.result
        if g is None or g.truncated:
            return Evidence(skipped="the gold has no complete result")
        if not isinstance(db, Path):
            return self._on_engine(db, gold_sql, g, p, comparison, start)
        if db.stat().st_size > cfg.evidence_max_db_bytes:
            return Evidence(skipped=f"database larger than {cfg.evidence_max_db_bytes // 2**20} MiB")
        key = statement_key("evidence", str(db), gold_sql, pred_sql)
        if key in self.watch.poisoned:
            return Evidence(skipped="stopped", guard=f"the evidence search was {GUARD_STOPPED}")
        self.watch.arm(key, cfg.evidence_budget_s + GUARD_MARGIN_S)
        try:
            ws = self._workspace(db)
            ws.start(cfg.evidence_max_steps, start + cfg.evidence_budget_s)
            try:
                found = self._gather(ws, start, gold_sql, pred_sql, g, p, comparison)
            finally:
                ws.stop()
        except (sqlite3.Error, MemoryError, OverflowError, ValueError) as e:  # the item's, never the run's
            return Evidence(skipped=f"the evidence search failed: {type(e).__name__}: {e}")
        finally:
            self.watch.disarm()
        if ws.guard_fired:
            guard = f"the evidence search was stopped by the wall-time guard after {cfg.evidence_budget_s:g} s"
            return replace(found, guard=guard)
        return found

    def _on_engine(
        self, db: Remote, gold_sql: str, g: ResultSet, p: ResultSet | None, comparison: Comparison | None, start: float
    ) -> Evidence:
        """On another engine: the gold smells, probing the database read-only through the engine's
        sandbox, and the distinguishing rows. The witness search changes a private copy of the database,
        which exists on SQLite only."""
        cfg = self.config
        key = statement_key("evidence", db.key[0], gold_sql)
        if key in self.watch.poisoned:
            return Evidence(skipped="stopped", guard=f"the evidence search was {GUARD_STOPPED}")
        self.watch.arm(key, cfg.evidence_budget_s + GUARD_MARGIN_S)
        try:
            probe = self._probe(db)
            tables = features(gold_sql).tables
            smells = gold_smells(
                probe, gold_sql, g, tables, ordered=has_top_level_order_by(gold_sql), digits=cfg.float_digits
            )
        except Exception as e:  # the item's, never the run's (a server gone away, a catalogue unreadable)
            return Evidence(skipped=f"the gold smells failed on {db.kind}: {type(e).__name__}: {e}")
        finally:
            self.watch.disarm()
        diff = None
        if comparison is not None and p is not None and comparison.equal is False:
            diff = describe(p, g, comparison, cfg.float_digits)
        note = f"on {db.kind}: the witness search needs a private copy of the database to change (SQLite only)"
        return Evidence(None, diff, smells, None, round(time.monotonic() - start, 4), skipped=note)

    def _probe(self, db: Remote) -> EngineProbe:
        from rose_sql.engines.base import engine_for
        from rose_sql.evidence.probe import EngineProbe

        probes: dict[Remote, EngineProbe] | None = getattr(self._local, "probes", None)
        if probes is None:
            probes = self._local.probes = {}
        if db not in probes:
            limits = self.config.with_(server_timeout_s=self.config.evidence_budget_s)
            probes[db] = EngineProbe(engine_for(db.kind, limits), db)
        return probes[db]

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
        base, ws.statement_steps = ws.statement_steps, min(ws.statement_steps, cfg.evidence_max_steps // 4)
        try:
            smells = gold_smells(ws, gold_sql, g, feats.tables, ordered=ordered, digits=cfg.float_digits)
        finally:
            ws.statement_steps = base
        witness = diff = info = None
        if comparison is not None and p is not None and comparison.equal is True:
            values = list(dict.fromkeys(v for row in g.rows[:20] for v in row if isinstance(v, int | float | str)))[:20]
            s = search(
                ws,
                gold_sql,
                pred_sql,
                feats,
                ordered=ordered,
                digits=cfg.float_digits,
                max_candidates=cfg.evidence_max_candidates,
                result_values=values,
                result_rows=cfg.evidence_result_rows,
            )
            info = SearchInfo(s.tried, s.candidates, round(s.seconds, 4), s.stopped, s.order_dependent)
            witness = s.witness
        elif comparison is not None and p is not None and comparison.equal is False:
            diff = describe(p, g, comparison, cfg.float_digits)
        return Evidence(witness, diff, smells, info, round(time.monotonic() - start, 4))
