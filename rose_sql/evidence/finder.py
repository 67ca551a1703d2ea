"""Gathers an item's evidence: witness, distinguishing rows and gold smells, on a private copy
(on another engine: the gold smells read the database through its sandbox, and the witness search
changes a private copy made by :mod:`rose_sql.evidence.remote`).

:class:`Finder` keeps one private in-memory copy of each database per thread and, for an item whose
gold ran, gathers: when the results match, a *witness* (a schema-valid change of the database on
which the two queries disagree); when they differ, the *distinguishing rows* and the shape of the
difference; in both cases the *gold smells*. All of it is deterministic, bounded by a time and
candidate budget, and computed on copies: the user's database is opened read-only.
"""

from __future__ import annotations

import atexit
import contextlib
import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    from rose_sql.evidence.remote import EngineSpace

STATEMENT_STEPS = 50_000_000
"""Steps one statement of the evidence search may take (the queries under test run on a copy many times)."""


class Finder:
    """Gathers evidence; thread-safe (one workspace per database per thread)."""

    def __init__(self, config: Config, *, watch: Watch | None = None) -> None:
        self.config = config
        self.watch = watch or Watch()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._remote: list[dict[str, EngineSpace | str]] = []  # every thread's copies on other engines
        self._at_exit = False

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
            return self._on_engine(db, gold_sql, pred_sql, g, p, comparison, start)
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
        self,
        db: Remote,
        gold_sql: str,
        pred_sql: str,
        g: ResultSet,
        p: ResultSet | None,
        comparison: Comparison | None,
        start: float,
    ) -> Evidence:
        """On another engine: the gold smells, probing the database read-only through the engine's
        sandbox; the distinguishing rows; and, when the results match, the witness search on a private copy
        (DuckDB: in memory; a server: in a scratch database, only when ``evidence_scratch`` names one)."""
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
        found = Evidence(None, diff, smells, None, 0.0)
        if comparison is not None and p is not None and comparison.equal is True:
            found = self._witness_on_engine(db, gold_sql, pred_sql, g, found)
        return replace(found, seconds=round(time.monotonic() - start, 4))

    def _witness_on_engine(self, db: Remote, gold_sql: str, pred_sql: str, g: ResultSet, found: Evidence) -> Evidence:
        cfg = self.config
        feats = features(gold_sql).merge(features(pred_sql))
        key = statement_key("evidence-witness", db.key[0], gold_sql, pred_sql)
        if key in self.watch.poisoned:
            return replace(found, skipped="stopped", guard=f"the witness search was {GUARD_STOPPED}")
        self.watch.arm(key, 2 * cfg.evidence_budget_s + GUARD_MARGIN_S)  # a first copy, then the search
        try:
            space = self._space(db, feats.tables)
            if isinstance(space, str):
                return replace(found, skipped=f"on {db.kind}: no witness search: {space}")
            start = time.monotonic()
            space.start(start + cfg.evidence_budget_s)
            try:
                s = search(
                    space,
                    gold_sql,
                    pred_sql,
                    feats,
                    ordered=has_top_level_order_by(gold_sql),
                    digits=cfg.float_digits,
                    max_candidates=cfg.evidence_max_candidates,
                    result_values=_result_values(g),
                    result_rows=cfg.evidence_result_rows,
                )
            finally:
                space.stop()
            if not space.alive():  # what it found then is not the search's: the next item makes a new copy
                self._forget(db)
                return replace(found, skipped=f"on {db.kind}: the connection to the copy was lost during the search")
        except Exception as e:  # the item's, never the run's (a server gone away mid-search)
            self._forget(db)  # the copy may be broken: the next item makes a new one
            return replace(found, skipped=f"the witness search failed on {db.kind}: {type(e).__name__}: {e}")
        finally:
            self.watch.disarm()
        info = SearchInfo(s.tried, s.candidates, round(s.seconds, 4), s.stopped, s.order_dependent)
        guard = None
        if space.guard_fired:
            guard = (
                f"the witness search on {db.kind} was stopped by its wall-clock limit "
                f"(--timeout, or the {cfg.evidence_budget_s:g} s evidence budget)"
            )
        return replace(found, witness=s.witness, search=info, guard=guard)

    def _space(self, db: Remote, tables: frozenset[str] | set[str]) -> EngineSpace | str:
        """This thread's private copy of ``db`` holding ``tables``, or why there is none."""
        from rose_sql.evidence.remote import open_space

        spaces: dict[str, EngineSpace | str] | None = getattr(self._local, "remote", None)
        if spaces is None:
            spaces = self._local.remote = {}
            with self._lock:
                self._remote.append(spaces)
        space = spaces.get(db.target)
        if space is None:
            space = spaces[db.target] = open_space(db, self.config)  # why not, when not: kept for later items
            if not isinstance(space, str) and not self._at_exit:  # a finder nobody closes still drops its copies
                self._at_exit = True
                atexit.register(self.close)
        if isinstance(space, str):
            return space
        return space.need(tables) or space

    def _forget(self, db: Remote) -> None:
        spaces: dict[str, EngineSpace | str] = getattr(self._local, "remote", {})
        space = spaces.pop(db.target, None)
        if space is not None and not isinstance(space, str):
            with contextlib.suppress(Exception):  # best effort: `rose db scratch --drop` cleans up
                space.close()

    def close(self) -> None:
        """Close the private copies (dropping scratch databases); the finder may be used again after."""
        with self._lock:
            every = [(spaces, list(spaces.values())) for spaces in self._remote]
        for spaces, values in every:
            spaces.clear()
            for space in values:
                if not isinstance(space, str):
                    with contextlib.suppress(Exception):  # best effort: `rose db scratch --drop` cleans up
                        space.close()

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
            values = _result_values(g)
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


def _result_values(g: ResultSet) -> list[Any]:
    """Values of the gold's first rows: the rows holding them are tried first."""
    return list(dict.fromkeys(v for row in g.rows[:20] for v in row if isinstance(v, int | float | str)))[:20]
