"""A query as clause trees: sqlglot's AST, normalised, cut into SELECT, FROM, WHERE ... trees."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import cast

from sqlglot import exp

from rose_sql.comparison.comparator import canon
from rose_sql.config import RewardConfig
from rose_sql.reward.trees import Tree, build_tree
from rose_sql.sql import parse as sql_parse

_SKIP_ARGS = {"alias", "comments"}
_CLAUSE_OF = {
    "distinct": "select",
    "expressions": "select",
    "from": "from",
    "from_": "from",
    "joins": "from",
    "laterals": "from",
    "where": "where",
    "group": "group",
    "having": "having",
    "order": "order",
    "limit": "limit",
    "offset": "limit",
    "with": "with",
    "with_": "with",
}
"""Which clause each argument of the outermost SELECT belongs to (others: ``other``)."""
_AROUND = {"order": "order", "limit": "limit", "offset": "limit", "with": "with", "with_": "with"}
"""The same for the nodes above it (UNION ...); their other arguments form ``compound``."""
_WRAPPERS = (exp.Union, exp.Intersect, exp.Except, exp.Subquery)


def _unwrap(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Alias) and isinstance(node.this, exp.Expression):
        node = node.this
    return node


_GENERIC, _ALIAS, _COLUMN, _TABLE, _IDENTIFIER, _LITERAL = range(6)


def _node_shape(cls: type) -> tuple[int, tuple[str, ...]]:
    """How :func:`_describe` treats a node class: its kind, and the arguments it reads, in order."""
    node_class = cast("type[exp.Expression]", cls)
    kinds = (
        (exp.Alias, _ALIAS),
        (exp.Column, _COLUMN),
        (exp.Table, _TABLE),
        (exp.Identifier, _IDENTIFIER),
        (exp.Literal, _LITERAL),
    )
    kind = next((k for base, k in kinds if issubclass(node_class, base)), _GENERIC)
    return kind, tuple(key for key in node_class.arg_types if key not in _SKIP_ARGS)


_shape: Callable[[type], tuple[int, tuple[str, ...]]] = cache(_node_shape)
""":func:`_node_shape`, once per class (typed by hand: mypy takes sqlglot's classes for unhashable)."""


def _describe(node: exp.Expression, args: list[str] | None = None) -> tuple[str, list[exp.Expression]]:
    """A node's label and its children; ``args``, when given, receives the argument each child is in.

    Names are lower-cased; column qualifiers, table aliases and select aliases are dropped (they
    do not change what a query means); boolean flags and other plain values join the label.
    """
    kind, keys = _shape(type(node))
    if kind == _ALIAS:
        node = _unwrap(node)
        kind, keys = _shape(type(node))
        kind = _GENERIC if kind == _ALIAS else kind  # an alias of no expression: described as it is
    if kind == _COLUMN:
        return "col:" + node.name.lower(), []
    if kind == _TABLE and isinstance(node.this, exp.Identifier):
        return "table:" + node.name.lower(), []
    if kind == _IDENTIFIER:
        return "id:" + node.name.lower(), []
    if kind == _LITERAL:
        return ("str:" + node.name) if node.is_string else ("num:" + _number(node.name)), []
    label = type(node).__name__
    children: list[exp.Expression] = []
    flags: list[str] | None = None
    values = node.args
    for key in keys:
        value = values.get(key)
        if value is None or value is False:
            continue
        for v in value if isinstance(value, list) else (value,):
            if isinstance(v, exp.Expression):
                if not isinstance(v, exp.TableAlias):
                    children.append(v)
                    if args is not None:
                        args.append(key)
            else:
                flags = flags if flags is not None else [label]
                flags.append(key if v is True else f"{key}={v}")
    return ":".join(flags) if flags is not None else label, children


def _number(text: str) -> str:
    try:
        return repr(canon(float(text)))
    except ValueError:
        return text


@dataclass(frozen=True, slots=True)
class Part:
    """One clause of a parsed query as a tree under a synthetic root named after the clause."""

    tree: Tree
    """The tree in postorder."""

    @property
    def size(self) -> int:
        """Nodes, not counting the synthetic root."""
        return len(self.tree[0]) - 1


@dataclass(frozen=True, slots=True)
class ParsedSQL:
    """A query parsed by sqlglot, cut into clauses: the unit of the syntax reward."""

    skeleton: tuple[str, ...]
    """Labels of the nodes from the root down to the outermost (leftmost) SELECT."""
    parts: dict[str, Part]
    """Every other node, in the clause it belongs to."""
    size: int
    """Nodes in all."""


def parse(sql: str, config: RewardConfig | None = None) -> ParsedSQL | None:
    """The query as clause trees, or None when sqlglot (SQLite dialect) does not read it as one query."""
    cfg = config or RewardConfig()
    if len(sql) > cfg.max_sql_chars:
        return None
    root = _sqlglot_parse(sql)
    if not isinstance(root, exp.Query | exp.Values) or not isinstance(root, exp.Expression):
        return None  # not one SELECT / WITH / VALUES query, the only statements the sandbox runs
    skeleton, clauses = _decompose(root)
    parts: dict[str, Part] = {}
    for name, roots in clauses.items():
        parts[name] = Part(build_tree(name, roots, _describe))
    return ParsedSQL(tuple(skeleton), parts, len(skeleton) + sum(p.size for p in parts.values()))


def _sqlglot_parse(sql: str) -> object:
    """sqlglot's tree of a single statement, or None (no statement, several, or a parse error).

    Not memoised here: the scorer keeps the :class:`ParsedSQL` built from it.
    """
    statements = [s for s in sql_parse(sql).statements if s is not None]
    return statements[0] if len(statements) == 1 else None


def _decompose(root: exp.Expression) -> tuple[list[str], dict[str, list[exp.Expression]]]:
    """Walk down ``.this`` through UNION / INTERSECT / EXCEPT / parentheses to the outermost SELECT;
    every argument met on the way goes to its clause."""
    skeleton: list[str] = []
    clauses: dict[str, list[exp.Expression]] = {}
    node: exp.Expression | None = root
    while node is not None:
        node = _unwrap(node)
        args: list[str] = []
        label, children = _describe(node, args)
        skeleton.append(label)
        is_select = isinstance(node, exp.Select)
        down = node.this if isinstance(node, _WRAPPERS) and isinstance(node.this, exp.Expression) else None
        for key, child in zip(args, children, strict=True):
            if child is not down:
                name = _CLAUSE_OF.get(key, "other") if is_select else _AROUND.get(key, "compound")
                clauses.setdefault(name, []).append(child)
        node = None if is_select else down
    return skeleton, clauses
