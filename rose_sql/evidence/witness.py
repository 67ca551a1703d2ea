"""Witness search: a small, schema-valid change of the database on which the two queries disagree.

Candidates come in rank order from the queries' features (NULLs in nullable columns they read,
copies of rows that duplicate values or fan out joins, values at and around the literals they
compare with, ties on copied rows, deletions that empty a group), then seeded random edits. Each is
applied in a SAVEPOINT, both queries run, our comparator decides, and the change is rolled back. A
difference is reported only after a replay with ``reverse_unordered_selects`` still shows it.
"No witness" never means "equivalent".
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rose_sql.comparison.columns import Budget
from rose_sql.comparison.comparator import Comparison, compare, json_value
from rose_sql.config import COLUMN_WORK
from rose_sql.engines.spaces import Change, Copy
from rose_sql.engines.sqlite import STEP_GRAIN
from rose_sql.evidence.features import Features
from rose_sql.evidence.findings import ResultSample, Witness, change_json
from rose_sql.evidence.plausibility import grade, self_pairs
from rose_sql.results import ResultSet
from rose_sql.sql import quote_identifier as _q

Apply = Callable[[Copy], list[Change]]

MAX_WITNESSES = 3
EXTRA_AFTER_FIRST = 40
"""Candidates tried after the first witness, looking for a more realistic one."""
DRAWN_PER_TRIED = 10
"""Candidates drawn (tried, or skipped as a kind already witnessed) per candidate the cap allows."""

REASONS = {
    "null": "a NULL in a column the queries read: COUNT(col), AVG, comparisons and NOT IN treat NULL differently",
    "duplicate_row": "a copy of an existing row (fresh keys): counts, sums and DISTINCT react to duplicates",
    "tie": "a copy of a row with the same ordering values but another projected value: a tie at the cut",
    "predicate": "a value at or next to a literal the queries compare with: the two filters disagree on it",
    "deletion": "a row removed (with the rows that reference it): an empty group or a missing join partner",
    "numeric": "a number changed so a division or a range boundary behaves differently",
    "reverse_pair": "a pair of a relation between two entities of one kind stored the other way round: a query "
    "that reads the pair in one direction only misses it",
    "new_row": "a new row (a copy with one cell at or next to a literal the queries compare with): it meets "
    "one query's conditions and not the other's",
    "random": "a random schema-valid edit",
}


Difference = tuple[list[Change], ResultSet, ResultSet, Comparison]
"""What a candidate that tells the queries apart gives: its changes, both results, their comparison."""


@dataclass(frozen=True, slots=True)
class Candidate:
    kind: str
    label: str
    apply: Apply


def sample(r: ResultSet, rows: int) -> ResultSample:
    """The first ``rows`` rows of a result as JSON values, with its columns and size."""
    return ResultSample(list(r.columns), r.row_count, [[json_value(v) for v in row] for row in r.rows[:rows]])


@dataclass
class Search:
    """The outcome of a witness search."""

    witness: Witness | None
    tried: dict[str, int]
    candidates: int
    seconds: float
    order_dependent: int = 0
    """Candidates whose difference vanished when SQLite returned unordered rows in reverse."""
    stopped: str = "exhausted"
    """Why it stopped: ``found``, ``budget`` (steps, candidates or the comparator's counted work; or
    time) or ``exhausted`` (no candidates left)."""
    implausible: int = 0
    """Witnesses found that the data makes implausible."""


def _lineage(ws: Copy, table: str, cols: list[str], values: list[Any], limit: int = 4) -> list[int]:
    """Rowids of rows whose read columns hold values seen in the results, then the first rows."""
    ids: list[int] = []
    for c in cols:
        try:
            ids += ws.rowids_where(table, c, values, limit)
        except ws.errors:
            continue
    for rid in ws.sample_rowids(table, limit):
        if rid not in ids:
            ids.append(rid)
    return ids[: limit * 2]


def _variants(value: Any) -> list[Any]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value, value - 1, value + 1]
    if isinstance(value, float):
        return [value, value - 0.5, value + 0.5, round(value + 0.01, 6)]
    if isinstance(value, str):
        out = [value, value.upper(), value.lower(), value + " ", value.strip("%") + "x", value.strip("%")]
        if value.isdigit():
            out += [str(int(value) - 1), str(int(value) + 1)]
        return list(dict.fromkeys(v for v in out if v))
    return []


def _pair_rows(ws: Copy, table: str, c1: str, c2: str, feats: Features, lineage: list[int]) -> list[int]:
    """Rows of a relation whose pair the queries name (both ends among their literals), then lineage rows."""
    lits = sorted(
        {
            v
            for v in feats.literals.get(c1.lower(), set()) | feats.literals.get(c2.lower(), set())
            if isinstance(v, str | int)
        },
        key=repr,
    )[:8]
    ids: list[int] = []
    if lits:
        marks = ",".join("?" * len(lits))
        got = ws.query(
            f"SELECT rowid FROM {_q(table)} WHERE {_q(c1)} IN ({marks}) AND {_q(c2)} IN ({marks}) LIMIT 2",
            (*lits, *lits),
        )
        ids += [r[0] for r in got or []]
    return list(dict.fromkeys(ids + lineage[:2]))[:3]


def candidates(ws: Copy, feats: Features, result_values: list[Any], seed: int = 0) -> Iterator[Candidate]:
    """Mutations in rank order: guided by the queries' features first, random ones last."""
    tables = [t for t in (ws.table_of(n) for n in sorted(feats.tables)) if t is not None and t.rowid]
    for t in tables:
        ws.profile(t.name)
    read = {t.name: [c for c in t.columns.values() if c.name.lower() in feats.columns] for t in tables}
    rows = {t.name: _lineage(ws, t.name, [c.name for c in read[t.name]], result_values) for t in tables}

    def upd(table: str, rid: int, col: str, value: Any) -> Apply:
        return lambda w: [w.update(table, rid, col, value)]

    def copy(table: str, rid: int, overrides: dict[str, Any] | None = None) -> Apply:
        return lambda w: [w.insert_copy(table, rid, overrides)]

    def drop(table: str, rid: int) -> Apply:
        return lambda w: w.delete(table, rid)

    def add_reverse(table: str, rid: int, c1: str, c2: str) -> Apply:
        def apply(w: Copy) -> list[Change]:
            row = w.row(table, rid)
            return [w.insert_copy(table, rid, {c1: row.get(c2), c2: row.get(c1)})]  # a stored reverse: the key refuses

        return apply

    def only_reverse(table: str, rid: int, c1: str, c2: str) -> Apply:
        def apply(w: Copy) -> list[Change]:
            row = w.row(table, rid)
            a, b = row.get(c1), row.get(c2)
            stored = w.query(f"SELECT 1 FROM {_q(table)} WHERE {_q(c1)} = ? AND {_q(c2)} = ? LIMIT 1", (b, a))
            if stored is None:
                raise ValueError("the probe ran out")
            added = [] if stored else [w.insert_copy(table, rid, {c1: b, c2: a})]
            return added + w.delete(table, rid)

        return apply

    for t in tables:  # pairs of a relation between two entities of one kind, the other way round
        for c1, c2 in self_pairs(t):
            for rid in _pair_rows(ws, t.name, c1, c2, feats, rows[t.name]):
                yield Candidate(
                    "reverse_pair",
                    f"also store {t.name} row {rid} reversed ({c2}, {c1})",
                    add_reverse(t.name, rid, c1, c2),
                )
                yield Candidate(
                    "reverse_pair",
                    f"store {t.name} row {rid} only reversed ({c2}, {c1})",
                    only_reverse(t.name, rid, c1, c2),
                )
    for t in tables:  # NULLs where the schema allows them
        for c in read[t.name]:
            if not c.notnull and not c.pk:
                for rid in rows[t.name][:3]:
                    yield Candidate("null", f"{t.name}.{c.name} = NULL on row {rid}", upd(t.name, rid, c.name, None))
    for t in tables:  # duplicates and fan-out
        for rid in rows[t.name][:4]:
            yield Candidate("duplicate_row", f"copy of {t.name} row {rid}", copy(t.name, rid))
    for col_name, lits in sorted(feats.literals.items()):  # filters that disagree
        for t in tables:
            col = next((c for c in t.columns.values() if c.name.lower() == col_name), None)
            if col is None or col.pk:
                continue
            for lit in sorted(lits, key=repr):
                for v in _variants(lit):
                    for rid in rows[t.name][:2]:
                        yield Candidate(
                            "predicate", f"{t.name}.{col.name} = {v!r} on row {rid}", upd(t.name, rid, col.name, v)
                        )
    if feats.order_limit or "max" in feats.aggregates or "min" in feats.aggregates or feats.subquery_compare:
        for t in tables:  # ties: same ordering values, another projected value
            for c in read[t.name]:
                if c.pk or c.unique or len(c.pool) < 2:
                    continue
                for rid in rows[t.name][:3]:
                    current = ws.row(t.name, rid).get(c.name)
                    other = next((v for v in c.pool if v != current), None)
                    yield Candidate(
                        "tie",
                        f"copy of {t.name} row {rid} with {c.name} = {other!r}",
                        copy(t.name, rid, {c.name: other}),
                    )
    for t in tables:  # empty groups, missing partners
        for rid in rows[t.name][:3]:
            yield Candidate("deletion", f"delete {t.name} row {rid}", drop(t.name, rid))
    for t in tables:  # numbers
        for c in read[t.name]:
            if c.pk or c.unique:
                continue
            for rid in rows[t.name][:2]:
                v = ws.row(t.name, rid).get(c.name)
                if isinstance(v, int) and not isinstance(v, bool):
                    for nv in (v * 2 + 1, v + 7, 0):
                        yield Candidate(
                            "numeric", f"{t.name}.{c.name} = {nv} on row {rid}", upd(t.name, rid, c.name, nv)
                        )
                elif isinstance(v, float):
                    yield Candidate(
                        "numeric", f"{t.name}.{c.name} = {v + 0.5} on row {rid}", upd(t.name, rid, c.name, v + 0.5)
                    )
    for col_name, lits in sorted(feats.literals.items()):  # new rows that meet one query's filter only
        for t in tables:
            col = next((c for c in t.columns.values() if c.name.lower() == col_name), None)
            if col is None or col.pk or col.unique:
                continue
            for lit in sorted(lits, key=repr):
                for v in _variants(lit):
                    for rid in rows[t.name][:1]:
                        yield Candidate(
                            "new_row",
                            f"new {t.name} row: a copy of row {rid} with {col.name} = {v!r}",
                            copy(t.name, rid, {col.name: v}),
                        )
    rng = random.Random(seed)
    while tables:  # random fallback, until the budget stops it
        t = rng.choice(tables)
        ids = rows[t.name] or ws.sample_rowids(t.name, 20)
        if not ids:
            return
        rid = rng.choice(ids)
        cols = [c for c in (read[t.name] or list(t.columns.values())) if not c.pk and not c.unique]
        op = rng.random()
        if op < 0.5 and cols:
            c = rng.choice(cols)
            pool = (
                c.pool
                + [None] * (not c.notnull)
                # in a fixed order: a set of strings iterates in the order of the process's hash seed
                + [v for lit in sorted(feats.literals.get(c.name.lower(), ()), key=repr) for v in _variants(lit)]
            )
            if pool:
                v = rng.choice(pool)
                yield Candidate("random", f"{t.name}.{c.name} = {v!r} on row {rid}", upd(t.name, rid, c.name, v))
        elif op < 0.8:
            overrides = {}
            if cols:
                c = rng.choice(cols)
                if c.pool:
                    overrides[c.name] = rng.choice(c.pool)
            yield Candidate("random", f"copy of {t.name} row {rid} with {overrides}", copy(t.name, rid, overrides))
        else:
            yield Candidate("random", f"delete {t.name} row {rid}", drop(t.name, rid))


def _caveats(ws: Copy, changes: list[Change]) -> list[str]:
    """Realism notes: what the change does that the real data never shows."""
    notes = []
    for ch in changes:
        t = ws.tables.get(ch.table)
        if t is None:
            continue
        col = t.columns.get(ch.column or "")
        if ch.op == "update" and col is not None:
            where = f"{t.name}.{col.name}"
            if ch.new is None and not col.has_nulls:
                notes.append(f"the schema allows it, but {where} is never NULL in the database")
            elif ch.new is not None:
                seen = ws.query(f"SELECT 1 FROM {_q(t.name)} WHERE {_q(col.name)} = ? LIMIT 1", (ch.new,))
                if seen == []:
                    notes.append(f"the value {ch.new!r} does not occur in {where} in the database")
                elif seen and not col.has_duplicates:
                    notes.append(f"it gives {where} a duplicate value, which the database never has")
        if ch.op == "insert" and ch.row is not None:
            for c in t.columns.values():
                v = ch.row.get(c.name)
                if c.unique or c.pk or c.has_duplicates or v is None:
                    continue
                if ws.query(f"SELECT 1 FROM {_q(t.name)} WHERE {_q(c.name)} = ? LIMIT 1", (v,)):
                    notes.append(f"it gives {t.name}.{c.name} a duplicate value, which the database never has")
                    break
    return notes


class _Comparisons:
    """Our comparator over one search, spending its counted work: a pair of results it has compared
    (the same objects: a copy may give the same object for equal results, see
    :class:`rose_sql.engines.spaces.sqlite.Workspace`) is answered again, and charged the units it spent,
    where the work left covers them, so that what the search finds is what comparing again gives."""

    def __init__(self, ordered: bool, digits: int, work: Budget) -> None:
        self.ordered = ordered
        self.digits = digits
        self.work = work
        self.seen: dict[tuple[Any, ...], tuple[Comparison, int, ResultSet, ResultSet]] = {}

    def __call__(self, pred: ResultSet, gold: ResultSet) -> Comparison:
        work = self.work
        key = (id(pred.rows), id(gold.rows), pred.columns, gold.columns, pred.truncated, gold.truncated)
        if not work.exhausted:
            hit = self.seen.get(key)
            if hit is not None and work.spent + hit[1] <= work.limit:
                work.spent += hit[1]
                return hit[0]
        fresh = not work.exhausted
        before = work.spent
        cmp = compare(pred, gold, ordered=self.ordered, digits=self.digits, budget=work)
        if fresh and not work.exhausted:  # the objects are kept with it: their ids stay theirs
            self.seen[key] = (cmp, work.spent - before, pred, gold)
        return cmp


def search(
    ws: Copy,
    gold_sql: str,
    pred_sql: str,
    feats: Features,
    *,
    ordered: bool,
    digits: int,
    max_candidates: int,
    result_values: list[Any],
    result_rows: int = 10,
    seed: int = 0,
    column_work: int = COLUMN_WORK,
    distinct: bool = False,
) -> Search:
    """Look for a witness within the candidate cap, the item's step budget (``ws.start``) and
    ``column_work`` units of the comparator's column search over all candidates.

    Each witness is graded on the real data (:func:`rose_sql.evidence.plausibility.grade`, under the same
    step budget). After the first witness, a few more candidates are tried for a more realistic one (a
    plausible one, then fewer caveats), keeping at most one witness per kind; the most realistic is
    reported. ``distinct``: compare distinct rows (the results already differ in multiplicity only).
    """
    start = time.monotonic()
    tried: dict[str, int] = {}
    order_dependent = 0
    n = 0
    stopped = "exhausted"
    found: list[Witness] = []
    extra = 0
    pending = candidates(ws, feats, result_values, seed)
    spent: tuple[type[BaseException], ...] = (*ws.errors, TimeoutError)
    drawn = 0
    work = Budget(column_work)  # one for the whole search: each comparison of a candidate spends from it
    compared = _Comparisons(ordered, digits, work)

    def attempt(cand: Candidate, reverse: bool, steps: int) -> Difference | None:
        return _try(ws, cand, gold_sql, pred_sql, reverse=reverse, steps=steps, compared=compared, distinct=distinct)

    while True:
        if n >= max_candidates or drawn >= DRAWN_PER_TRIED * max_candidates or ws.steps_left <= 0 or work.exhausted:
            stopped = "budget"
            break
        drawn += 1
        try:
            cand = next(pending)
        except StopIteration:
            break
        except spent:  # a probe of ours ran out of steps (or time): the budget is spent
            stopped = "budget"
            break
        if found and (
            extra >= EXTRA_AFTER_FIRST
            or len(found) >= MAX_WITNESSES
            or any(w.plausible and not w.caveats for w in found)
        ):
            break
        if found and any(w.kind == cand.kind and w.plausible for w in found):
            continue  # an implausible witness of a kind leaves room for a plausible one of it
        if found and cand.kind == "new_row" and any(w.plausible for w in found):
            continue  # a new row only when no plausible edit of the data at hand tells them apart
        steps = max(STEP_GRAIN, ws.steps_left // 2)  # two queries per candidate
        n += 1
        extra += bool(found)
        tried[cand.kind] = tried.get(cand.kind, 0) + 1
        outcome = attempt(cand, False, steps)
        if outcome is None:
            continue
        if attempt(cand, True, steps) is None:
            order_dependent += 1  # a difference that moves with row order is not a semantic witness
            continue
        changes, pred, gold, cmp = outcome
        comparison = f"{cmp.reason}: {cmp.detail}"
        graded = grade(ws, cand.kind, changes, feats)  # on the real data: the candidate was rolled back
        witness = Witness(
            cand.kind,
            REASONS[cand.kind],
            cand.label,
            [change_json(c) for c in changes],
            sample(pred, result_rows),
            sample(gold, result_rows),
            comparison,
            _caveats(ws, changes),
            graded.plausible,
            graded.text,
        )
        found.append(witness)
    implausible = sum(not w.plausible for w in found)
    if found:
        # stable: the first among the most realistic (plausible first, then fewer caveats)
        best = min(found, key=lambda w: (not w.plausible, len(w.caveats)))
        return Search(best, tried, n, time.monotonic() - start, order_dependent, "found", implausible)
    return Search(None, tried, n, time.monotonic() - start, order_dependent, stopped)


def _distinct(r: ResultSet) -> ResultSet:
    rows = tuple(dict.fromkeys(r.rows))
    return ResultSet(r.columns, rows, len(rows))


def _try(
    ws: Copy,
    cand: Candidate,
    gold_sql: str,
    pred_sql: str,
    *,
    reverse: bool,
    steps: int,
    compared: Callable[[ResultSet, ResultSet], Comparison],
    distinct: bool = False,
) -> Difference | None:
    invalid: tuple[type[BaseException], ...] = (*ws.errors, ValueError, OverflowError, KeyError, TimeoutError)
    ws.begin()
    try:
        try:
            changes = cand.apply(ws)
        except invalid:
            return None  # a constraint forbids it: not a valid database
        if reverse:
            ws.set_reverse_order(True)
        try:
            gold, pred = ws.run(gold_sql, steps), ws.run(pred_sql, steps)
        finally:
            if reverse:
                ws.set_reverse_order(False)
        if gold is None or pred is None:
            return None  # a failure or a timeout is "unknown", never a difference
        if distinct:
            pred, gold = _distinct(pred), _distinct(gold)
        cmp = compared(pred, gold)
        return (changes, pred, gold, cmp) if cmp.equal is False else None  # undecided is never a witness
    finally:
        ws.rollback()
