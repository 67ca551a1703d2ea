"""How plausible a witness is: could the database hold this change, given what its data shows?

A witness is a change the schema allows on which the two queries disagree. That proves the queries can
differ; it says nothing about whether data like the changed database occurs. This module grades each
witness from the database itself (the real data, after the candidate is rolled back) with the rules of
:data:`RULES`, one per kind of edit, and gives the witness ``plausible`` and ``plausibility`` (the rule
that decided and what it saw). Only a plausible witness doubts a match; an implausible one is a fragility
note (:mod:`rose_sql.evidence.findings`).

Every fact is read with the copy's own probes (:meth:`rose_sql.engines.spaces.Copy.query`), under the
item's counted budget; a probe that runs out leaves the witness ``ungraded``, which counts as plausible
(doubt, as before grades existed), so the grade never depends on the machine. Fresh key values that a
copied row needs (a primary key, a UNIQUE column) are the search's, not the data's: they are not graded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rose_sql.engines.spaces import Change, Column, Copy, Table
from rose_sql.evidence.features import Features
from rose_sql.sql import quote_identifier as _q

SAMPLE = 200
"""Distinct values of a column read to learn its formats."""
CLOSED = 12
"""A column with at most this many distinct values, each used on average three times or more, is a
closed set: a value outside it is implausible."""
MARKERS = ("", "-", "--", "N/A", "n/a", "NA", "None", "none", "null", "NULL", "unknown", "Unknown", "?")
"""Text a column may hold for a missing value: a column that holds one records missing data."""
CAP = 3
"""A column whose values each occur at most this many times caps them (a bond named by its two directions):
a change that makes a value occur more often than any does is implausible."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the rules table: an edit, when it is plausible, and what the reason then says."""

    name: str
    edit: str
    plausible: bool
    when: str


RULES: tuple[Rule, ...] = (
    Rule("null_seen", "set a cell to NULL", True, "the column holds NULLs in the database"),
    Rule(
        "null_marker",
        "set a cell to NULL",
        True,
        "the column holds a missing-value marker ('', '-', 'N/A'...) on several rows",
    ),
    Rule("null_never", "set a cell to NULL", False, "the column is never NULL and holds no missing-value marker"),
    Rule("value_seen", "set a cell to a value", True, "the value occurs in the column"),
    Rule(
        "value_key", "set a cell to a value", False, "the value repeats one in a column whose values are all distinct"
    ),
    Rule(
        "value_capped",
        "set a cell to a value",
        False,
        f"no value of the column occurs more than {CAP} times, and the value then would",
    ),
    Rule(
        "value_format",
        "set a cell to a value",
        True,
        "a new value of the column's type, inside its numeric range or with a text form its values have",
    ),
    Rule("value_closed", "set a cell to a value", False, "a new value in a closed set (few values, each often used)"),
    Rule("value_foreign", "set a cell to a value", False, "a new value outside the column's range, type or forms"),
    Rule("copy_dup", "insert a copy of a row", True, "the table has rows repeating another's non-key values"),
    Rule("copy_key", "insert a row", False, "it repeats a value of a column whose values are all distinct"),
    Rule(
        "copy_unique",
        "insert a copy of a row",
        False,
        "no two rows of the table agree on every non-key column (but the copy's changed cells)",
    ),
    Rule(
        "row_new",
        "insert a row with changed cells",
        True,
        "every changed cell is plausible, no all-distinct column repeated, rows agreeing on the other cells occur",
    ),
    Rule("delete_kind", "delete a row", True, "another row has the same values in the columns the queries read"),
    Rule("delete_only", "delete a row", False, "it is the only row of its kind (the columns the queries read)"),
    Rule(
        "pair_reverse",
        "store a pair of a relation the other way round",
        True,
        "both columns name the same kind of entity and the data or a query reads pairs both ways",
    ),
    Rule(
        "pair_directed",
        "store a pair of a relation the other way round",
        False,
        "nothing shows the relation is symmetric",
    ),
    Rule("ungraded", "any", True, "a probe ran out of the item's budget: counted as doubt"),
)
BY_NAME = {r.name: r for r in RULES}


class _Spent(Exception):
    """A probe returned nothing: the budget ran out (or the engine refused it)."""


@dataclass(frozen=True, slots=True)
class Grade:
    plausible: bool
    rule: str
    reason: str

    @property
    def text(self) -> str:
        return f"[{self.rule}] {self.reason}"


def _ask(ws: Copy, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    rows = ws.query(sql, params)
    if rows is None:
        raise _Spent
    return rows


def _shape(text: str) -> str:
    """A text's form: letters by case, digits, spaces kept apart, runs collapsed (``'TR004_8'`` -> ``'A9_9'``)."""
    out: list[str] = []
    for ch in text:
        c = "A" if ch.isupper() else "a" if ch.islower() else "9" if ch.isdigit() else " " if ch.isspace() else ch
        if not out or out[-1] != c:
            out.append(c)
    return "".join(out)


def _where(t: Table, c: Column) -> str:
    return f"{t.name}.{c.name}"


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _counts(ws: Copy, t: Table, c: Column) -> tuple[int, int, int]:
    """Rows, non-NULL values, distinct values of a column."""
    row = _ask(ws, f"SELECT COUNT(*), COUNT({_q(c.name)}), COUNT(DISTINCT {_q(c.name)}) FROM {_q(t.name)}")[0]
    return int(row[0] or 0), int(row[1] or 0), int(row[2] or 0)


def _seen(ws: Copy, t: Table, c: Column, v: Any) -> bool:
    return bool(_ask(ws, f"SELECT 1 FROM {_q(t.name)} WHERE {_q(c.name)} = ? LIMIT 1", (v,)))


def _all_distinct(ws: Copy, t: Table, c: Column) -> tuple[bool, int]:
    _, values, distinct = _counts(ws, t, c)
    return values >= 2 and values == distinct, values


def grade_null(ws: Copy, t: Table, c: Column) -> Grade:
    rows, values, _ = _counts(ws, t, c)
    if values < rows:
        return Grade(True, "null_seen", f"{_where(t, c)} is NULL on {rows - values} of {rows} rows")
    if c.type.upper() not in ("INTEGER", "REAL", "NUMERIC", "FLOAT", "DOUBLE", "INT", "BIGINT"):
        marks = ",".join("?" * len(MARKERS))
        sql = f"SELECT {_q(c.name)}, COUNT(*) FROM {_q(t.name)} WHERE {_q(c.name)} IN ({marks}) GROUP BY 1"
        used = [(m, n) for m, n in _ask(ws, sql, MARKERS) if n > 1]
        if used:  # a marker on one row only names a category (a lookup's 'N/A'), it is no missing data
            m, n = used[0]
            return Grade(True, "null_marker", f"{_where(t, c)} records missing values ({m!r} on {n} rows)")
    return Grade(False, "null_never", f"the schema allows it, but {_where(t, c)} is never NULL on its {rows} rows")


def grade_value(ws: Copy, t: Table, c: Column, v: Any) -> Grade:
    where = _where(t, c)
    if _seen(ws, t, c, v):
        unique, n = _all_distinct(ws, t, c)
        if unique:
            return Grade(False, "value_key", f"{v!r} repeats a value of {where}, whose {n} values are all distinct")
        col, tab = _q(c.name), _q(t.name)
        top = _ask(
            ws, f"SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM {tab} WHERE {col} IS NOT NULL GROUP BY {col}) AS g"
        )
        uses = _ask(ws, f"SELECT COUNT(*) FROM {tab} WHERE {col} = ?", (v,))[0][0] or 0
        most = top[0][0] or 0
        if most <= CAP and uses + 1 > most:
            return Grade(
                False,
                "value_capped",
                f"{v!r} would occur {uses + 1} times in {where}, where no value occurs more than {most}",
            )
        return Grade(True, "value_seen", f"{v!r} occurs in {where} ({uses} rows)")
    _, values, distinct = _counts(ws, t, c)
    if 0 < distinct <= CLOSED and values >= 3 * distinct:
        some = [r[0] for r in _ask(ws, f"SELECT DISTINCT {_q(c.name)} FROM {_q(t.name)} LIMIT 5")]
        return Grade(False, "value_closed", f"{v!r} is none of the {distinct} values of {where} (e.g. {some!r})")
    if _is_number(v):
        lo, hi = _ask(ws, f"SELECT MIN({_q(c.name)}), MAX({_q(c.name)}) FROM {_q(t.name)}")[0]
        if not (_is_number(lo) and _is_number(hi)):
            return Grade(False, "value_foreign", f"{where} holds no numbers, and {v!r} is one")
        if isinstance(v, float) and not v.is_integer() and isinstance(lo, int) and isinstance(hi, int):
            return Grade(False, "value_foreign", f"{v!r} has a fraction; {where} holds whole numbers")
        if lo <= v <= hi:
            return Grade(True, "value_format", f"{v!r} is new in {where} but inside its range [{lo}, {hi}]")
        return Grade(False, "value_foreign", f"{v!r} is outside the range of {where}, [{lo}, {hi}]")
    if isinstance(v, str):
        sample = [r[0] for r in _ask(ws, f"SELECT DISTINCT {_q(c.name)} FROM {_q(t.name)} LIMIT {SAMPLE}")]
        texts = [s for s in sample if isinstance(s, str)]
        if not texts:
            return Grade(False, "value_foreign", f"{where} holds no text, and {v!r} is text")
        shapes = {_shape(s): s for s in texts}
        if _shape(v) in shapes:
            like = shapes[_shape(v)]
            return Grade(
                True, "value_format", f"{v!r} is new in {where} but has the form of its values (e.g. {like!r})"
            )
        return Grade(
            False, "value_foreign", f"{v!r} has a form none of {len(texts)} values of {where} has (e.g. {texts[0]!r})"
        )
    return Grade(False, "value_foreign", f"{v!r} is of a kind {where} does not hold")


def _fresh(t: Table, c: Column) -> bool:
    """A column whose value a copied row gets anew (the search's, not graded)."""
    return c.unique or (c.pk and sum(x.pk for x in t.columns.values()) == 1)


def grade_insert(ws: Copy, t: Table, ch: Change) -> Grade:
    row = ch.row or {}
    changed = {k for k, v in (ch.values or {}).items() if k in t.columns and not _fresh(t, t.columns[k])}
    for name, v in row.items():
        c = t.columns.get(name)
        if c is None or _fresh(t, c) or v is None:
            continue
        if name in changed:
            g = grade_value(ws, t, c, v)
            if not g.plausible:
                return g
            continue
        unique, n = _all_distinct(ws, t, c)
        if unique:
            return Grade(
                False, "copy_key", f"the new row repeats {v!r} in {_where(t, c)}, whose {n} values are all distinct"
            )
    rest = [c for c in t.columns.values() if not _fresh(t, c) and c.name not in changed]
    names = ", ".join(c.name for c in rest)
    cells = ", ".join(f"{k} = {row.get(k)!r}" for k in sorted(changed))
    if rest:  # a copy repeats its original's other cells: plausible where the data has such near-copies
        cols = ", ".join(_q(c.name) for c in rest)
        if not _ask(ws, f"SELECT 1 FROM {_q(t.name)} GROUP BY {cols} HAVING COUNT(*) > 1 LIMIT 1"):
            but = f" (the copy differs only in {cells})" if changed else ""
            return Grade(
                False, "copy_unique", f"no two rows of {t.name} agree on all of {names}: a key the data respects{but}"
            )
    if changed:
        return Grade(True, "row_new", f"a new {t.name} row with {cells}; other {t.name} rows repeat another's {names}")
    if not rest:
        return Grade(True, "copy_dup", f"{t.name} has no columns but its keys")
    return Grade(True, "copy_dup", f"{t.name} holds rows that repeat another's {names}")


def grade_delete(ws: Copy, t: Table, ch: Change, feats: Features, cascaded: int) -> Grade:
    row = ch.row or {}
    kind = [c for c in t.columns.values() if c.name.lower() in feats.columns and not _fresh(t, c) and c.name in row]
    more = f" (and {cascaded} rows referencing it)" if cascaded else ""
    if not kind:
        n = _ask(ws, f"SELECT COUNT(*) FROM {_q(t.name)}")[0][0] or 0
        if n > 1:
            return Grade(
                True, "delete_kind", f"one of {n} rows of {t.name}{more}; the queries read none of its other columns"
            )
        return Grade(False, "delete_only", f"the only row of {t.name}{more}")
    conds = " AND ".join(f"{_q(c.name)} IS NULL" if row[c.name] is None else f"{_q(c.name)} = ?" for c in kind)
    params = tuple(row[c.name] for c in kind if row[c.name] is not None)
    n = _ask(ws, f"SELECT COUNT(*) FROM {_q(t.name)} WHERE {conds}", params)[0][0] or 0
    what = ", ".join(f"{c.name} = {row[c.name]!r}" for c in kind)
    if n > 1:
        return Grade(True, "delete_kind", f"{n - 1} other {t.name} rows have {what}{more}")
    return Grade(False, "delete_only", f"the only {t.name} row with {what}{more}")


def self_pairs(t: Table) -> list[tuple[str, str]]:
    """Pairs of columns that reference the same parent key in a table that is a relation between two
    entities of one kind (atoms bonded to atoms, members who know members): the pair is in the primary
    key, or every other column is a key or a reference too. Two references to one lookup table among a
    row's attributes (hair and skin colour) are not a relation."""
    keys = {c.name for c in t.columns.values() if c.pk}
    refs = {c for c, _, _ in t.parents}
    out = []
    for i, (c1, p1, k1) in enumerate(t.parents):
        for c2, p2, k2 in t.parents[i + 1 :]:
            if (p1, k1) != (p2, k2) or c1 == c2:
                continue
            if {c1, c2} <= keys or all(c in keys or c in refs for c in t.columns):
                out.append((c1, c2))
    return out


def grade_pair(ws: Copy, t: Table, c1: str, c2: str, feats: Features) -> Grade:
    parent = next((p for c, p, _ in t.parents if c == c1), "?")
    both = f"{t.name}.{c1} and {t.name}.{c2} both name a {parent}"
    on = f"a.{_q(c1)} = b.{_q(c2)} AND a.{_q(c2)} = b.{_q(c1)}"
    stored = _ask(ws, f"SELECT COUNT(*) FROM {_q(t.name)} a JOIN {_q(t.name)} b ON {on}")[0][0]
    if stored:
        return Grade(
            True, "pair_reverse", f"{both}, and the data stores {stored} pairs both ways: a symmetric relation"
        )
    lits1, lits2 = feats.literals.get(c1.lower(), set()), feats.literals.get(c2.lower(), set())
    if lits1 & lits2:
        return Grade(True, "pair_reverse", f"{both}, and a query reads a pair both ways: a symmetric relation")
    return Grade(False, "pair_directed", f"{both}, but nothing shows the relation is symmetric")


def grade(ws: Copy, kind: str, changes: list[Change], feats: Features) -> Grade:
    """The grade of a witness's changes, read on the real data (call it after the candidate's rollback)."""
    spent: tuple[type[BaseException], ...] = (_Spent, TimeoutError, *ws.errors)
    try:
        return _grade(ws, kind, changes, feats)
    except spent:
        return Grade(True, "ungraded", "a probe ran out of the item's budget; counted as doubt")


def _grade(ws: Copy, kind: str, changes: list[Change], feats: Features) -> Grade:
    if not changes:
        return Grade(True, "ungraded", "no change recorded")
    if kind == "reverse_pair":
        t = ws.table_of(changes[-1].table)
        pair = self_pairs(t)[0] if t is not None and self_pairs(t) else None
        if t is None or pair is None:
            return Grade(True, "ungraded", "the relation's table was not found")
        return grade_pair(ws, t, pair[0], pair[1], feats)
    grades = []
    if changes[-1].op == "delete":
        t = ws.table_of(changes[-1].table)
        if t is None:
            return Grade(True, "ungraded", f"table {changes[-1].table} was not found")
        return grade_delete(ws, t, changes[-1], feats, len(changes) - 1)
    for ch in changes:
        t = ws.table_of(ch.table)
        if t is None:
            return Grade(True, "ungraded", f"table {ch.table} was not found")
        if ch.op == "update":
            c = t.columns.get(ch.column or "")
            if c is None:
                return Grade(True, "ungraded", f"column {ch.table}.{ch.column} was not found")
            grades.append(grade_null(ws, t, c) if ch.new is None else grade_value(ws, t, c, ch.new))
        elif ch.op == "insert":
            grades.append(grade_insert(ws, t, ch))
    bad = next((g for g in grades if not g.plausible), None)
    if bad is not None:
        return bad
    return Grade(True, grades[0].rule, "; ".join(g.reason for g in grades))


_RULE = re.compile(r"^\[(\w+)\]")


def rule_of(plausibility: str) -> str | None:
    """The rule named at the start of a witness's ``plausibility``."""
    m = _RULE.match(plausibility)
    return m.group(1) if m else None
