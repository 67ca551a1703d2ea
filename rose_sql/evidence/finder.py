"""Gathers an item's evidence: witness, distinguishing rows and gold smells, on the engine's space.

:class:`Finder` keeps one space of each database per thread (:func:`rose_sql.engines.spaces.open_space`:
on SQLite an in-memory copy; elsewhere the database read through its engine, and a private copy made when
the witness search asks) and, for an item whose gold ran, gathers: the *gold smells*; when the results
match, a *witness* (a schema-valid change of the database on which the two queries disagree); when they
differ, the *distinguishing rows* and the shape of the difference. All of it is deterministic, bounded
by a step budget where the engine counts steps (a wall-clock guard elsewhere) and a candidate budget, and
computed on copies: the user's database is only read.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import replace
from typing import Any

from rose_sql.comparison.comparator import Comparison
from rose_sql.config import Config
from rose_sql.engines import Database
from rose_sql.engines.base import GUARD_STOPPED
from rose_sql.engines.spaces import Copy, Space, open_space
from rose_sql.engines.workers import Watch, statement_key
from rose_sql.evidence.distinguish import describe
from rose_sql.evidence.features import Features, features
from rose_sql.evidence.findings import Evidence, SearchInfo
from rose_sql.evidence.smells import gold_smells
from rose_sql.evidence.witness import Search, search
from rose_sql.results import Execution, ResultSet
from rose_sql.sql import has_top_level_order_by

Names = tuple[tuple[str, ...], tuple[str, ...]]
"""The names of the gold's and the prediction's columns."""
SEARCHES = 4096
"""Witness searches a thread remembers (see :meth:`Finder._search_key`), the least recently found dropped."""
_FAILURES = (Exception,)
"""What a problem of one item's evidence may raise (a server gone away, a catalogue unreadable, a limit):
it becomes the item's evidence, never the run's failure."""


class Finder:
    """Gathers evidence; thread-safe (one space per database per thread)."""

    def __init__(self, config: Config, *, watch: Watch | None = None) -> None:
        self.config = config
        self.watch = watch or Watch()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._every: list[dict[Database, Space | str]] = []  # every thread's spaces, to close them
        self._at_exit = False

    def gather(
        self,
        db: Database,
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
        key = statement_key("evidence", db.kind, db.target, gold_sql, pred_sql)
        if key in self.watch.poisoned:
            return Evidence(skipped="stopped", guard=f"the evidence search was {GUARD_STOPPED}")
        space: Space | str | None = None
        try:
            space = self._space(db)
            if isinstance(space, str):
                return Evidence(skipped=space)
            if comparison is not None and (comparison.equal is True or comparison.reason == "multiplicity"):
                self._prepare(space, db, features(gold_sql).merge(features(pred_sql)).tables)
            start = time.monotonic()  # the item's clock starts after what is the tables' (their profiles)
            self.watch.arm(key, space.guard_s + cfg.guard_margin_s)
            space.start(cfg.evidence_max_steps, start + cfg.evidence_budget_s)
            try:
                found = self._gather(space, db, gold_sql, pred_sql, g, p, comparison)
            finally:
                space.stop()
        except _FAILURES as e:  # the item's, never the run's
            if space is not None and not isinstance(space, str):
                self._forget(db)  # the space may be broken: the next item makes a new one
            return Evidence(skipped=f"the evidence search failed on {db.kind}: {type(e).__name__}: {e}")
        finally:
            self.watch.disarm()
        if space.guard_fired:
            guard = f"the evidence search was stopped by the wall-time guard after {cfg.evidence_budget_s:g} s"
            found = replace(found, guard=guard)
        return replace(found, seconds=round(time.monotonic() - start, 4))

    def _gather(
        self,
        space: Space,
        db: Database,
        gold_sql: str,
        pred_sql: str,
        g: ResultSet,
        p: ResultSet | None,
        comparison: Comparison | None,
    ) -> Evidence:
        cfg = self.config
        ordered = has_top_level_order_by(gold_sql)
        feats = features(gold_sql).merge(features(pred_sql))
        smells = gold_smells(space, gold_sql, g, feats.tables, ordered=ordered, digits=cfg.float_digits)
        if comparison is None or p is None:
            return Evidence(None, None, smells, None, 0.0)
        diff = None
        if comparison.equal is False:
            diff = describe(p, g, comparison, cfg.float_digits)
            if comparison.reason != "multiplicity":
                return Evidence(None, diff, smells, None, 0.0)
            # the same distinct rows, repeated differently (BIRD's set-based EX credits it): look for a
            # witness on which the distinct rows differ too
        elif comparison.equal is not True:
            return Evidence(None, None, smells, None, 0.0)
        distinct = diff is not None
        copy = space.copy(feats.tables)
        if isinstance(copy, str):
            return Evidence(None, diff, smells, None, 0.0, skipped=f"on {db.kind}: no witness search: {copy}")
        values = _result_values(g)
        key = self._search_key(copy, db, gold_sql, pred_sql, p, feats, ordered, values, distinct)
        names = (g.columns, p.columns if p is not None else ())
        kept = self._searches().get(key) if key is not None else None
        # the columns' names are the texts' own: they show only in a witness's results
        known = kept[0] if kept is not None and (kept[0].witness is None or kept[1] == names) else None
        if known is not None:
            s = replace(known, tried=dict(known.tried), seconds=0.0)
        else:
            s = search(
                copy,
                gold_sql,
                pred_sql,
                feats,
                ordered=ordered,
                digits=cfg.float_digits,
                max_candidates=cfg.evidence_max_candidates,
                result_values=values,
                result_rows=cfg.evidence_result_rows,
                column_work=cfg.evidence_column_work,
                distinct=distinct,
            )
            if key is not None and not copy.guard_fired and copy.alive():
                self._keep(key, s, names)
        if not copy.alive():  # what it found then is not the search's: the next item makes a new copy
            return Evidence(None, diff, smells, None, 0.0, skipped=f"on {db.kind}: the copy was lost during the search")
        info = SearchInfo(
            s.tried, s.candidates, round(s.seconds, 4), s.stopped, s.order_dependent, s.implausible, distinct
        )
        return Evidence(s.witness, diff, smells, info, 0.0)

    def _search_key(
        self,
        copy: Copy,
        db: Database,
        gold_sql: str,
        pred_sql: str,
        p: ResultSet | None,
        feats: Features,
        ordered: bool,
        values: list[Any],
        distinct: bool,
    ) -> Hashable | None:
        """Everything a witness search depends on but the names of the queries' columns (which show only
        in a witness's results), where the copy's answers are reproducible (None elsewhere): the data (the
        database), what the two queries compile to, what they read, the gold's first values, and the steps
        the item has left. Items that agree on all of it (two systems' spellings of one prediction) find the
        same."""
        if p is None:
            return None
        gold, pred = copy.identity(gold_sql), copy.identity(pred_sql)
        if gold is None or pred is None:
            return None
        return (db, gold, pred, feats.key(), ordered, repr(values), distinct, copy.steps_left)

    def _searches(self) -> OrderedDict[Hashable, tuple[Search, Names]]:
        """This thread's remembered searches, with the names of the columns they ran with (least recently
        found first)."""
        searches: OrderedDict[Hashable, tuple[Search, Names]] | None = getattr(self._local, "searches", None)
        if searches is None:
            searches = self._local.searches = OrderedDict()
        return searches

    def _keep(self, key: Hashable, found: Search, names: Names) -> None:
        searches = self._searches()
        searches[key] = (replace(found, tried=dict(found.tried)), names)
        while len(searches) > SEARCHES:
            searches.popitem(last=False)

    def _prepare(self, space: Space, db: Database, tables: frozenset[str] | set[str]) -> None:
        """The tables' profiles for the witness search, before the item's clock starts, under a guard of
        their own (a profile its guard stopped is not looked for again, on any later item)."""
        key = statement_key("profile", db.kind, db.target, *sorted(tables))
        if key in self.watch.poisoned:
            return
        self.watch.arm(key, space.guard_s + self.config.guard_margin_s)
        try:
            space.prepare(tables)
        finally:
            self.watch.disarm()

    def _space(self, db: Database) -> Space | str:
        """This thread's space of ``db``, or why there is none (kept for the items that follow)."""
        spaces: dict[Database, Space | str] | None = getattr(self._local, "spaces", None)
        if spaces is None:
            spaces = self._local.spaces = {}
            with self._lock:
                self._every.append(spaces)
        space = spaces.get(db)
        if space is None:
            space = spaces[db] = open_space(db, self.config)
            if not isinstance(space, str) and not self._at_exit:  # a finder nobody closes still drops its copies
                self._at_exit = True
                atexit.register(self.close)
        return space

    def _forget(self, db: Database) -> None:
        searches = self._searches()
        for key in [k for k in searches if k[0] == db]:  # type: ignore[index]
            del searches[key]
        spaces: dict[Database, Space | str] = getattr(self._local, "spaces", {})
        space = spaces.pop(db, None)
        if space is not None and not isinstance(space, str):
            with contextlib.suppress(Exception):  # best effort: `rose db scratch --drop` cleans up
                space.close()

    def close(self) -> None:
        """Close the spaces (dropping scratch databases); the finder may be used again after."""
        with self._lock:
            every = [(spaces, list(spaces.values())) for spaces in self._every]
        for spaces, values in every:
            spaces.clear()
            for space in values:
                if not isinstance(space, str):
                    with contextlib.suppress(Exception):  # best effort: `rose db scratch --drop` cleans up
                        space.close()


def _result_values(g: ResultSet) -> list[Any]:
    """Values of the gold's first rows: the rows holding them are tried first."""
    return list(dict.fromkeys(v for row in g.rows[:20] for v in row if isinstance(v, int | float | str)))[:20]
