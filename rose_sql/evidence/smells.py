"""Gold smells: cheap mechanical checks that the gold SQL may not mean what the question asks.

Each is one or two extra executions of a variant of the gold, read through the engine's space
(:mod:`rose_sql.engines.spaces`: on SQLite its private copy), and each is a heuristic reported with its
details, never a verdict:

- ``limit_tie``: ORDER BY .. LIMIT k cuts through rows that tie on every ordering key;
- ``numeric_text_order``: ORDER BY / MIN / MAX over a text column holding numbers (sorted as text);
- ``nulls_first``: an ascending ORDER BY .. LIMIT whose first row has a NULL key (SQLite sorts NULLs first);
- ``literal_absent``: a literal compared with ``=`` that occurs nowhere in its column (near matches shown);
- ``count_fanout``: COUNT(x) over joins changes with COUNT(DISTINCT x): duplicates from the join are counted;
- ``order_dependent``: the result changes when unordered rows come in reverse (where the engine can: SQLite).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from sqlglot import exp

from rose_sql.comparison.comparator import compare, json_value
from rose_sql.engines.spaces import Space
from rose_sql.evidence.findings import Smell
from rose_sql.results import ResultSet
from rose_sql.sql import query
from rose_sql.sql import quote_identifier as _q

_NUMBER = re.compile(r"^\s*-?\d+(\.\d+)?\s*$")


def _sql(tree: exp.Expr, dialect: str = "sqlite") -> str:
    return tree.sql(dialect=dialect)


def _columns_named(ws: Space, tables: set[str], name: str) -> list[tuple[str, str]]:
    out = []
    for t in ws.tables.values():
        if t.name.lower() in tables:
            out += [(t.name, c.name) for c in t.columns.values() if c.name.lower() == name.lower()]
    return out


@lru_cache(maxsize=512)
def _limit_probe(gold_sql: str, dialect: str) -> tuple[str, int, tuple[bool, ...]] | None:
    """The gold with its ordering keys in front and no LIMIT, the LIMIT, and which keys ascend (made once
    per gold: the systems' items of one question share it)."""
    tree = query(gold_sql, dialect).tree
    if not isinstance(tree, exp.Select):
        return None
    order, limit = tree.args.get("order"), tree.args.get("limit")
    if order is None or limit is None:
        return None
    try:
        k = int(limit.expression.this)
    except (AttributeError, TypeError, ValueError):
        return None
    keys = [o.this.copy() for o in order.expressions]
    probe = tree.copy()
    probe.set("limit", None)
    probe.set("offset", None)
    probe.set("expressions", [*[exp.alias_(key, f"__k{i}") for i, key in enumerate(keys)], *tree.expressions])
    return _sql(probe, dialect), k, tuple(not o.args.get("desc") for o in order.expressions)


def _limit_and_nulls(ws: Space, gold_sql: str) -> list[Smell]:
    made = _limit_probe(gold_sql, ws.dialect)
    if made is None:
        return []
    probe_sql, k, asc = made
    res = ws.run(probe_sql)
    if res is None:
        return []
    smells: list[Smell] = []
    n = len(asc)
    rows = res.rows
    if len(rows) > k >= 1:
        inside, outside = rows[k - 1], rows[k]
        if inside[:n] == outside[:n] and inside[n:] != outside[n:]:
            tied = sum(1 for r in rows if r[:n] == inside[:n])
            detail = (
                f"LIMIT {k} cuts through {tied} rows that tie on the "
                f"ordering key {list(inside[:n])!r}; which of them the gold returns is arbitrary"
            )
            smells.append(Smell("limit_tie", detail, key=[json_value(v) for v in inside[:n]], tied_rows=tied))
    if rows and any(a and v is None for a, v in zip(asc, rows[0][:n], strict=False)):
        detail = (
            "the first row by the ORDER BY has a NULL key: SQLite "
            "sorts NULLs first ascending, so 'the lowest' may be a missing value"
        )
        smells.append(Smell("nulls_first", detail))
    return smells


def _numeric_text(ws: Space, tree: exp.Expr, tables: set[str]) -> list[Smell]:
    targets: set[str] = set()
    order = tree.args.get("order")
    if order is not None:
        targets |= {o.this.name for o in order.expressions if isinstance(o.this, exp.Column)}
    for agg in tree.find_all(exp.Max, exp.Min):
        if isinstance(agg.this, exp.Column):
            targets.add(agg.this.name)
    smells = []
    for name in sorted(targets):
        for table, col in _columns_named(ws, tables, name):
            rows = ws.stored(table, col, 200)
            texts = [v for t, v in rows if t == "text"]
            if texts and len(texts) >= len(rows) / 2 and all(_NUMBER.match(v) for v in texts):
                lengths = {len(v.strip().split(".")[0].lstrip("-")) for v in texts}
                if len(lengths) > 1:
                    detail = (
                        f"{table}.{col} stores numbers as text "
                        f"of different lengths; ORDER BY / MIN / MAX compare them as text ('10' < '9')"
                    )
                    smells.append(Smell("numeric_text_order", detail, column=f"{table}.{col}"))
    return smells


def _literals(ws: Space, tree: exp.Expr, tables: set[str]) -> list[Smell]:
    smells = []
    for eq in tree.find_all(exp.EQ):
        col, lit = eq.left, eq.right
        if isinstance(lit, exp.Column) and isinstance(col, exp.Literal):
            col, lit = lit, col
        if not (isinstance(col, exp.Column) and isinstance(lit, exp.Literal) and lit.is_string):
            continue
        value = lit.this
        places = _columns_named(ws, tables, col.name)
        if not places:
            continue
        hits = [ws.query(f"SELECT 1 FROM {_q(t)} WHERE {_q(c)} = ? LIMIT 1", (value,)) for t, c in places]
        if any(hits) or any(h is None for h in hits):
            continue  # present, or unknown because the budget ran out
        near: list[Any] = []
        for t, c in places:
            near += [
                r[0]
                for r in ws.query(
                    f"SELECT DISTINCT {_q(c)} FROM {_q(t)} WHERE lower(trim({_q(c)})) = lower(trim(?)) "
                    f"OR {_q(c)} LIKE ? LIMIT 3",
                    (value, f"%{value}%"),
                )
                or []
            ]
        detail = f"{value!r} never occurs in {col.name}" + (f"; near matches: {near[:3]!r}" if near else "")
        smells.append(Smell("literal_absent", detail, literal=value, near=[json_value(v) for v in near[:3]]))
    return smells


@lru_cache(maxsize=512)
def _fanout_variant(gold_sql: str, dialect: str) -> str | None:
    """The gold with its COUNT(x) over joins made COUNT(DISTINCT x), or None (made once per gold)."""
    tree = query(gold_sql, dialect).tree
    if tree is None or not any(isinstance(j, exp.Join) for j in tree.find_all(exp.Join)):
        return None
    counts = [c for c in tree.find_all(exp.Count) if not isinstance(c.this, exp.Distinct | exp.Star) and c.this]
    if not counts:
        return None
    variant = tree.copy()
    for c in variant.find_all(exp.Count):
        if not isinstance(c.this, exp.Distinct | exp.Star) and c.this is not None:
            c.set("this", exp.Distinct(expressions=[c.this.copy()]))
    return _sql(variant, dialect)


def _fanout(ws: Space, gold_sql: str, gold: ResultSet, digits: int) -> list[Smell]:
    variant = _fanout_variant(gold_sql, ws.dialect)
    if variant is None:
        return []
    res = ws.run(variant)
    if res is None or compare(res, gold, ordered=False, digits=digits).equal is not False:
        return []
    detail = (
        "COUNT over a join changes when made DISTINCT: the join repeats rows, so entities may be counted more than once"
    )
    return [Smell("count_fanout", detail)]


def gold_smells(
    ws: Space, gold_sql: str, gold: ResultSet, tables: set[str], *, ordered: bool, digits: int
) -> list[Smell]:
    """Every smell that fires for this gold on this database (``order_dependent`` only where unordered
    rows can be reversed: SQLite)."""
    smells: list[Smell] = []
    tree = query(gold_sql, ws.dialect).tree  # read once per item: the features read it first
    if tree is not None:
        smells += _limit_and_nulls(ws, gold_sql)
        smells += _numeric_text(ws, tree, tables)
        smells += _literals(ws, tree, tables)
        smells += _fanout(ws, gold_sql, gold, digits)
    again = ws.reversed_run(gold_sql)
    if again is not None and compare(again, gold, ordered=ordered, digits=digits).equal is False:
        detail = (
            "the gold's result changes when unordered rows come "
            "in another order (LIMIT without ORDER BY, or a bare column beside an aggregate)"
        )
        smells.append(Smell("order_dependent", detail))
    return smells
