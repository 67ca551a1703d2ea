"""What two queries read, learned from their syntax trees (sqlglot): the targets of the mutations.

Approximate by design: columns are matched to tables by name among the tables the queries touch,
which is all the witness search needs to choose where to mutate. A query that does not parse
yields no features and the search falls back to random edits.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from functools import lru_cache

from sqlglot import exp

from rose_sql.sql import query

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike)


@dataclass
class Features:
    """Tables, columns, literals and constructs one or both queries use."""

    tables: set[str] = field(default_factory=set)
    """Lower-cased table names read."""
    columns: set[str] = field(default_factory=set)
    """Lower-cased column names referenced anywhere."""
    literals: dict[str, set[object]] = field(default_factory=dict)
    """Column name -> literal values it is compared with."""
    order_limit: bool = False
    """A top-level ORDER BY .. LIMIT."""
    aggregates: set[str] = field(default_factory=set)
    """Aggregate functions used (count, sum, avg, min, max), with ``_distinct`` when DISTINCT."""
    distinct: bool = False
    """SELECT DISTINCT somewhere."""
    joins: int = 0
    """Number of joins."""
    subquery_compare: bool = False
    """A scalar subquery compared with a column (``= (SELECT ..)``)."""
    parsed: bool = True
    """False when the query did not parse."""

    def key(self) -> Hashable:
        """The features as a key: equal for equal features (literals told apart by type, ``1`` from
        ``1.0``, as the search binds them)."""
        literals = tuple(sorted((c, tuple(sorted(repr(v) for v in vs))) for c, vs in self.literals.items()))
        return (
            tuple(sorted(self.tables)),
            tuple(sorted(self.columns)),
            literals,
            self.order_limit,
            tuple(sorted(self.aggregates)),
            self.distinct,
            self.joins,
            self.subquery_compare,
            self.parsed,
        )

    def merge(self, other: Features) -> Features:
        lits = {k: set(v) for k, v in self.literals.items()}
        for k, v in other.literals.items():
            lits.setdefault(k, set()).update(v)
        return Features(
            self.tables | other.tables,
            self.columns | other.columns,
            lits,
            self.order_limit or other.order_limit,
            self.aggregates | other.aggregates,
            self.distinct or other.distinct,
            self.joins + other.joins,
            self.subquery_compare or other.subquery_compare,
            self.parsed and other.parsed,
        )


def _literal(node: exp.Expr) -> object | None:
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        value = _literal(node.this)
        return -value if isinstance(value, int | float) else None
    if not isinstance(node, exp.Literal):
        return None
    if node.is_string:
        return str(node.this)
    try:
        text = node.this
        return int(text) if text.lstrip("-").isdigit() else float(text)
    except ValueError:
        return None


def features(sql: str | None) -> Features:
    """The features of one query (the same object for the same text while it is among the last ones
    asked for: read it, never change it; :meth:`Features.merge` makes a new one)."""
    if not sql:
        return Features()
    return _features(sql)


@lru_cache(maxsize=256)
def _features(sql: str) -> Features:
    f = Features()
    q = query(sql)
    tree = q.tree
    if tree is None:
        f.parsed = False
        return f
    f.tables = {t for t in q.tables if t}
    f.columns = {c.name.lower() for c in tree.find_all(exp.Column) if c.name}
    for node in tree.find_all(*_COMPARISONS):
        left, right = node.left, node.right
        for col, other in ((left, right), (right, left)):
            if isinstance(col, exp.Column):
                value = _literal(other)
                if value is not None:
                    f.literals.setdefault(col.name.lower(), set()).add(value)
                if isinstance(other, exp.Subquery | exp.Select):
                    f.subquery_compare = True
    f.order_limit = bool(tree.args.get("order") and tree.args.get("limit"))
    for agg in tree.find_all(exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max):
        name = agg.key.lower()
        f.aggregates.add(name + ("_distinct" if isinstance(agg.this, exp.Distinct) else ""))
    f.distinct = any(isinstance(s.args.get("distinct"), exp.Distinct) for s in tree.find_all(exp.Select))
    f.joins = sum(1 for _ in tree.find_all(exp.Join))
    return f
