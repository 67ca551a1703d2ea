"""Spider hardness and exact-set match (EM), as ``evaluation.py --etype match`` reads them.

A clean-room re-implementation of taoyds/test-suite-sql-eval's match reading (``process_sql.py`` and
``evaluation.py``), written from reading that code and checked item for item against it
(``tests/data/official/spider-match``, ``docs/spider-match.md``). It reproduces, on purpose:

Tokenizer (``process_sql.tokenize``)
    Every ``'`` becomes ``"``; an odd number of ``"`` rejects the query; each quoted span (with its
    quotes, case kept) becomes one token; the rest goes through NLTK's ``word_tokenize`` (Punkt
    sentence splitting with an empty model, then the improved Treebank word rules, re-expressed in
    :func:`_treebank`) and is lower-cased; ``!``/``>``/``<`` followed by ``=`` are glued. So ``<>`` is
    two tokens, a backtick is a token of its own, ``1,2`` stays one token, and ``T1.*`` splits as a
    sentence end (``t1`` ``.`` ``*``).
Grammar (``process_sql.get_sql``)
    What the recursive-descent parser accepts, including what it silently ignores (trailing tokens,
    a ``LIMIT`` value, which is always read as 1) and where it raises (an alias equal to a table name,
    ``FROM a, b``, ``LEFT``/``INNER JOIN``, a table alias without ``AS``, a column alias, ``IS NULL``,
    ``<>``, quoted identifiers, ...). A rejected prediction is the official empty query: EM 0.
    ``FROM`` is looked up as the first ``from`` token after the query start, so a sub-query inside
    ``SELECT`` lends the outer query its ``FROM``. ``AS`` anywhere (also ``COUNT(*) AS n``) defines an
    alias for the token before it.
Hardness (``Evaluator.eval_hardness``)
    Counted on the gold as parsed; the "aggregate" count also counts ``NOT`` conditions in WHERE and
    every ``and``/``or`` word and ``NOT`` condition in HAVING (the official ``has_agg`` is applied to
    condition lists).
Exact set match (``Evaluator.eval_exact_match`` after ``rebuild_sql_val`` / ``rebuild_sql_col``)
    Values are dropped from conditions (also the right-hand column of a join condition), also inside
    nested condition queries, which are however compared without the foreign-key or DISTINCT
    normalisation (a FROM sub-query keeps even its values); DISTINCT is dropped from the outer
    queries; a column of a table in FROM that is a foreign key is replaced by the first column of its
    key group (groups built pair by pair, not transitively); GROUP BY is compared by column name only
    (not table), ORDER BY as one direction for the whole list, LIMIT by presence; the tables by their
    sorted list (two different FROM sub-queries make the official sort raise: ``em`` None, the
    official run would abort).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

HARDNESS_LEVELS = ("easy", "medium", "hard", "extra")

CLAUSES = ("select", "from", "where", "group", "order", "limit", "intersect", "union", "except")
JOINS = ("join", "on", "as")
WHERE_OPS = ("not", "between", "=", ">", "<", ">=", "<=", "!=", "in", "like", "is", "exists")
UNIT_OPS = ("none", "-", "+", "*", "/")
AGG_OPS = ("none", "max", "min", "count", "sum", "avg")
SET_OPS = ("intersect", "union", "except")
ORDER_DIRS = ("desc", "asc")
_LIKE = WHERE_OPS.index("like")
_IN = WHERE_OPS.index("in")


class _Rejected(Exception):
    """The official parser would raise on this query."""


# --------------------------------------------------------------------------- tokenizer


def _sub(pattern: str, repl: str) -> tuple[re.Pattern[str], str]:
    return re.compile(pattern), repl


# NLTK's improved Treebank rules, in the order it applies them, limited to what can occur once every
# quote has become a placeholder (no ASCII quotes are left, so its quote and clitic rules never fire).
_BEFORE = (
    _sub(r"([«“‘„]|`+)", r" \1 "),  # opening quotes and runs of backticks
    _sub(r"([^.])(\.)([\]\)}>\"'»”’ ]*+)\s*$", r"\1 \2 \3 "),  # a final period
    _sub(r"([:,])([^\d])", r" \1 \2"),  # , and : unless a digit follows ("1,2" stays one token)
    _sub(r"([:,])$", r" \1 "),
    _sub(r"\.{2,}", r" \g<0> "),
    _sub(r"[;@#$%&]", r" \g<0> "),
    _sub(r"[\u2012-\u2015]", r" \g<0> "),
    _sub(r"([^.])(\.)([\]\)}>\"']*)\s*$", r"\1 \2\3 "),
    _sub(r"[?!]", r" \g<0> "),
    _sub(r"[*]", r" \g<0> "),
    _sub(r"[\]\[\(\)\{\}<>]", r" \g<0> "),
    _sub(r"--", r" -- "),
)
_AFTER = (
    _sub(r"([»”’])", r" \1 "),
    _sub(r"(?i)\b(can)(not)\b", r" \1 \2 "),
    _sub(r"(?i)\b(gim)(me)\b", r" \1 \2 "),
    _sub(r"(?i)\b(gon)(na)\b", r" \1 \2 "),
    _sub(r"(?i)\b(got)(ta)\b", r" \1 \2 "),
    _sub(r"(?i)\b(lem)(me)\b", r" \1 \2 "),
    _sub(r"(?i)\b(wan)(na)(?=\s)", r" \1 \2 "),
)


_RARE = re.compile(r"[«“‘„`;@#$%&\u2012-\u2015?!»”’]|\.\.|--|(?i:cannot|gimme|gonna|gotta|lemme|wanna)")
"""What any rule but the common ones (:data:`_COMMON`) needs to find in a sentence to change it. The rules only
put spaces around what they find (and the final-period rules trim white space at the end), so they never
make a match for a later rule out of text that had none: where this finds nothing, those rules do nothing."""
_COMMON = tuple(_BEFORE[k] + (need,) for k, need in ((1, "."), (2, None), (3, None), (7, "."), (9, "*"), (10, None)))
"""The rules of :data:`_BEFORE` that most SQL meets (a period, a comma, ``*``, brackets), in their order, each
with a character it cannot act without (None: several, always applied)."""


def _treebank(text: str) -> list[str]:
    if _RARE.search(text) is None:  # most SQL: the few rules that can act on it, in their order
        for pattern, repl, need in _COMMON:
            if need is None or need in text:
                text = pattern.sub(repl, text)
        return text.split()
    return every_rule(text)


def every_rule(text: str) -> list[str]:
    """The word rules as NLTK applies them: every rule, in its order (the shortcut above is checked against it)."""
    for pattern, repl in _BEFORE:
        text = pattern.sub(repl, text)
    text = " " + text + " "
    for pattern, repl in _AFTER:
        text = pattern.sub(repl, text)
    return text.split()


# A period Punkt may end a sentence at: followed by one of its non-word characters, or by white space
# and a token. With an empty model nothing is an abbreviation, so such a period ends a sentence unless
# it closes an ellipsis, or an initial / a number followed by a lower-case word or punctuation.
_NON_WORD = frozenset(")\";}]*:@'({[‘’“”«»?!")
_WORD_BREAK = re.compile(r"[(\"`{\[:;&#*@)}\],-]")
_NUMBER = re.compile(r"^-?[.,]?\d[\d,.-]*$")
_INITIAL = re.compile(r"^[^\W\d]$")


def _ends_sentence(word: str, nxt: str | None) -> bool:
    """Whether Punkt (empty model) ends a sentence at a period after ``word``, ``nxt`` the next token."""
    word = _WORD_BREAK.split(word)[-1]
    if word.endswith("."):
        return False  # an ellipsis
    if nxt is not None and (_INITIAL.match(word) or _NUMBER.match(word)):
        if nxt[0] in ";:,.!?" or nxt[0].islower():
            return False
        if _INITIAL.match(word) and nxt[0].isupper():
            return False
    return True


def _sentences(text: str) -> list[str]:
    """Punkt's sentence split with an empty model: one pass over the white-space separated chunks."""
    if "." not in text:  # only a period ends a sentence
        text = text.strip()
        return [text] if text else []
    chunks = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    cuts = []
    for k, (a, b) in enumerate(chunks):
        seg = a  # where the word before the next candidate period starts (after the last cut)
        pos = text.find(".", a, b)
        while pos != -1:
            if pos + 1 < b:
                # _ends_sentence(text[seg:pos], None) without the slice (quadratic in a chunk of "..?"):
                # with no next token only an ellipsis keeps the sentence going
                if text[pos + 1] in _NON_WORD and not (pos > seg and text[pos - 1] == "."):
                    cuts.append(pos + 1)
                    seg = pos + 1
            elif k + 1 < len(chunks):
                c, d = chunks[k + 1]
                if _ends_sentence(text[seg:pos], text[c:d]):
                    cuts.append(b)
            pos = text.find(".", pos + 1, b)
    out, start = [], 0
    for cut in cuts:
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return [s for s in (s.strip() for s in out) if s]


@lru_cache(maxsize=65536)
def tokenize(sql: str) -> tuple[str, ...]:
    """The official tokens of ``sql`` (raises :class:`_Rejected` on an odd number of quotes)."""
    text = sql.replace("'", '"')
    quotes = [i for i, c in enumerate(text) if c == '"'] if '"' in text else []
    if len(quotes) % 2:
        raise _Rejected("odd number of quotes")
    # each quoted span becomes a placeholder naming its offsets (the official code splices them in one by
    # one from the end, each splice copying the text: the same text, built in one pass)
    values: dict[str, str] = {}
    pieces, done = [], 0
    for a, b in zip(quotes[::2], quotes[1::2], strict=True):
        key = f"__val_{a}_{b}__"
        values[key] = text[a : b + 1]
        pieces += [text[done:a], key]
        done = b + 1
    text = "".join([*pieces, text[done:]])
    toks = [t.lower() for s in _sentences(text) for t in _treebank(s)]
    return tuple(_join_comparisons([values.get(t, t) for t in toks]))


_BEFORE_EQ = frozenset(("!", ">", "<"))


def _join_comparisons(toks: list[str]) -> list[str]:
    """``!``, ``>`` or ``<`` before ``=`` made one token, as the official code does from the last ``=`` to
    the first (one list copy per ``=`` there; one pass here). Joins never overlap, since none of the three
    is ``=``, so each reads the tokens as they were; but the official ``toks[i - 1]`` at ``i == 0`` reads
    the last token after the other joins, and splices the rest in again."""
    joined = {i for i in range(1, len(toks)) if toks[i] == "=" and toks[i - 1] in _BEFORE_EQ}
    out = [toks[i - 1] + "=" if i in joined else t for i, t in enumerate(toks) if i + 1 not in joined]
    if toks and toks[0] == "=" and out[-1] in _BEFORE_EQ:
        out = [*out[:-1], out[-1] + "=", *out[1:]]
    return out


# --------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class Schema:
    """Lower-cased table -> columns, as the official script reads them from the database file (its
    ``PRAGMA table_info`` leaves the name unquoted, so a table whose name needs quotes makes it abort;
    we quote it)."""

    tables: Mapping[str, tuple[str, ...]]

    @property
    def ids(self) -> dict[str, str]:
        return _ids(self)

    @classmethod
    def of(cls, catalogue: Iterable[tuple[str, Iterable[str]]]) -> Schema:
        """The schema the official ``get_schema`` reads from a database whose catalogue (every
        ``type='table'`` row of ``sqlite_master``, SQLite's own included, in its order, with each table's
        columns: :meth:`rose_sql.engines.execute.Executor.catalogue`) is ``catalogue``: each name lower-cased
        by Python, and the columns of the table SQLite finds by that lower-cased name (SQLite folds only
        ASCII letters: a table named with another capital finds none, or another table's)."""
        return _schema_of(tuple((name, tuple(columns)) for name, columns in catalogue))

    __hash__ = object.__hash__  # by identity (each catalogue has one Schema: _schema_of), computed in C


@lru_cache(maxsize=256)
def _schema_of(catalogue: tuple[tuple[str, tuple[str, ...]], ...]) -> Schema:
    """One Schema per catalogue (the parser's lookups are cached by the Schema)."""
    by_sqlite_name: dict[str, tuple[str, ...]] = {}
    for name, columns in catalogue:
        by_sqlite_name.setdefault(_ascii_lower(name), columns)
    tables = {}
    for name, _ in catalogue:
        t = str(name).lower()
        tables[t] = tuple(str(c).lower() for c in by_sqlite_name.get(_ascii_lower(t), ()))
    return Schema(tables)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _ascii_lower(name: str) -> str:
    """A name as SQLite compares identifiers: ASCII letters folded, every other character as it is."""
    return name.translate(_ASCII_LOWER)


@lru_cache(maxsize=256)
def _ids(schema: Schema) -> dict[str, str]:
    ids = {"*": "__all__"}
    for t, cols in schema.tables.items():
        for c in cols:
            ids[f"{t}.{c}"] = f"__{t}.{c}__"
    for t in schema.tables:
        ids[t] = f"__{t}__"
    return ids


def foreign_key_maps(tables_json: str | Path) -> dict[str, dict[str, str]]:
    """db_id -> {column id: representative column id} from Spider's ``tables.json``."""
    entries = json.loads(Path(tables_json).read_text(encoding="utf-8"))
    out: dict[str, dict[str, str]] = {}
    for e in entries:
        names = e["table_names_original"]
        cols = [f"__{names[t].lower()}.{c.lower()}__" if t >= 0 else "__all__" for t, c in e["column_names_original"]]
        groups: list[set[int]] = []
        for a, b in e["foreign_keys"]:
            group = next((g for g in groups if a in g or b in g), None)  # first group with either: no merging
            if group is None:
                group = set()
                groups.append(group)
            group.update((a, b))
        fk: dict[str, str] = {}
        for g in groups:
            first = min(g)
            for i in g:
                fk[cols[i]] = cols[first]
        out[e["db_id"]] = fk
    return out


# --------------------------------------------------------------------------- parser

# The official "sql dict": the same nesting of dicts, lists and tuples, so that equality is the same.
Sql = dict[str, Any]


class _Parser:
    def __init__(self, toks: Sequence[str], schema: Schema) -> None:
        self.schema = schema
        self.ids = schema.ids
        aliases: dict[str, str] = {}
        for i, t in enumerate(toks):
            if t == "as":
                aliases[_at(toks, i + 1)] = toks[i - 1]
        for t in schema.tables:
            if t in aliases:
                raise _Rejected(f"alias {t} is a table name")
            aliases[t] = t
        self.aliases = aliases

    def col(self, toks: Sequence[str], i: int, tables: list[str] | None) -> tuple[int, str]:
        t = _at(toks, i)
        if t == "*":
            return i + 1, self.ids[t]
        if "." in t:
            parts = t.split(".")
            if len(parts) != 2:
                raise _Rejected(f"column {t}")
            return i + 1, self._id(self._alias(parts[0]) + "." + parts[1])
        if not tables:
            raise _Rejected("a column before any table")
        for alias in tables:
            table = self._alias(alias)
            if t in self.schema.tables[table]:
                return i + 1, self.ids[table + "." + t]
        raise _Rejected(f"unknown column {t}")

    def _alias(self, name: str) -> str:
        if name not in self.aliases:
            raise _Rejected(f"unknown table or alias {name}")
        return self.aliases[name]

    def _id(self, key: str) -> str:
        if key not in self.ids:
            raise _Rejected(f"unknown name {key}")
        return self.ids[key]

    def col_unit(self, toks: Sequence[str], i: int, tables: list[str] | None) -> tuple[int, tuple[Any, ...]]:
        n = len(toks)
        block = _at(toks, i) == "("
        if block:
            i += 1
        distinct = False
        if _at(toks, i) in AGG_OPS:
            agg = AGG_OPS.index(toks[i])
            i += 1
            _expect(i < n and toks[i] == "(", "( after an aggregate")
            i += 1
            if _at(toks, i) == "distinct":
                i += 1
                distinct = True
            i, c = self.col(toks, i, tables)
            _expect(i < n and toks[i] == ")", ") after an aggregate")
            return i + 1, (agg, c, distinct)  # an enclosing "(" is left unconsumed, as officially
        if _at(toks, i) == "distinct":
            i += 1
            distinct = True
        i, c = self.col(toks, i, tables)
        if block:
            _expect(_at(toks, i) == ")", ")")
            i += 1
        return i, (0, c, distinct)

    def val_unit(self, toks: Sequence[str], i: int, tables: list[str] | None) -> tuple[int, tuple[Any, ...]]:
        block = _at(toks, i) == "("
        if block:
            i += 1
        op, second = 0, None
        i, first = self.col_unit(toks, i, tables)
        if i < len(toks) and toks[i] in UNIT_OPS:
            op = UNIT_OPS.index(toks[i])
            i, second = self.col_unit(toks, i + 1, tables)
        if block:
            _expect(_at(toks, i) == ")", ")")
            i += 1
        return i, (op, first, second)

    def table_unit(self, toks: Sequence[str], i: int) -> tuple[int, str, str]:
        key = self._alias(_at(toks, i))
        i += 3 if i + 1 < len(toks) and toks[i + 1] == "as" else 1
        return i, self._id(key), key

    def value(self, toks: Sequence[str], i: int, tables: list[str] | None) -> tuple[int, Any]:
        start = i
        block = _at(toks, i) == "("
        if block:
            i += 1
        val: Any
        t = _at(toks, i)
        if t == "select":
            i, val = self.sql(toks, i)
        elif '"' in t:
            val, i = t, i + 1
        else:
            try:
                val, i = float(t), i + 1
            except ValueError:
                end = i
                while end < len(toks) and toks[end] not in (",", ")", "and", *CLAUSES, *JOINS):
                    end += 1
                _, val = self.col_unit(toks[start:end], 0, tables)  # from start: a "(" included
                i = end
        if block:
            _expect(_at(toks, i) == ")", ")")
            i += 1
        return i, val

    def condition(self, toks: Sequence[str], i: int, tables: list[str] | None) -> tuple[int, list[Any]]:
        n = len(toks)
        conds: list[Any] = []
        while i < n:
            i, vu = self.val_unit(toks, i, tables)
            negated = _at(toks, i) == "not"
            if negated:
                i += 1
            _expect(i < n and toks[i] in WHERE_OPS, f"operator at {i}")
            op = WHERE_OPS.index(toks[i])
            i += 1
            i, v1 = self.value(toks, i, tables)
            v2 = None
            if op == 1:  # BETWEEN .. AND ..
                _expect(_at(toks, i) == "and", "and after between")
                i, v2 = self.value(toks, i + 1, tables)
            conds.append((negated, op, vu, v1, v2))
            if i < n and (toks[i] in CLAUSES or toks[i] in (")", ";") or toks[i] in JOINS):
                break
            if i < n and toks[i] in ("and", "or"):
                conds.append(toks[i])
                i += 1
        return i, conds

    def select(self, toks: Sequence[str], i: int, tables: list[str]) -> tuple[bool, list[Any]]:
        n = len(toks)
        _expect(_at(toks, i) == "select", "select")
        i += 1
        distinct = i < n and toks[i] == "distinct"
        if distinct:
            i += 1
        units = []
        while i < n and toks[i] not in CLAUSES:
            agg = 0
            if toks[i] in AGG_OPS:
                agg = AGG_OPS.index(toks[i])
                i += 1
            i, vu = self.val_unit(toks, i, tables)
            units.append((agg, vu))
            if i < n and toks[i] == ",":
                i += 1
        return distinct, units

    def from_(self, toks: Sequence[str], start: int) -> tuple[int, list[Any], list[Any], list[str]]:
        n = len(toks)
        if "from" not in toks[start:]:
            raise _Rejected("no from")
        i = list(toks).index("from", start) + 1
        tables: list[str] = []
        units: list[Any] = []
        conds: list[Any] = []
        while i < n:
            block = toks[i] == "("
            if block:
                i += 1
            if _at(toks, i) == "select":
                i, sub = self.sql(toks, i)
                units.append(("sql", sub))
            else:
                if i < n and toks[i] == "join":
                    i += 1
                i, unit, name = self.table_unit(toks, i)
                units.append(("table_unit", unit))
                tables.append(name)
            if i < n and toks[i] == "on":
                i, more = self.condition(toks, i + 1, tables)
                if conds:
                    conds.append("and")
                conds.extend(more)
            if block:
                _expect(_at(toks, i) == ")", ")")
                i += 1
            if i < n and (toks[i] in CLAUSES or toks[i] in (")", ";")):
                break
        return i, units, conds, tables

    def _clause(self, toks: Sequence[str], i: int, word: str, tables: list[str]) -> tuple[int, list[Any]]:
        if i >= len(toks) or toks[i] != word:
            return i, []
        return self.condition(toks, i + 1, tables)

    def group_by(self, toks: Sequence[str], i: int, tables: list[str]) -> tuple[int, list[Any]]:
        n = len(toks)
        if i >= n or toks[i] != "group":
            return i, []
        _expect(_at(toks, i + 1) == "by", "by")
        i += 2
        units = []
        while i < n and not (toks[i] in CLAUSES or toks[i] in (")", ";")):
            i, cu = self.col_unit(toks, i, tables)
            units.append(cu)
            if i < n and toks[i] == ",":
                i += 1
            else:
                break
        return i, units

    def order_by(self, toks: Sequence[str], i: int, tables: list[str]) -> tuple[int, Any]:
        n = len(toks)
        if i >= n or toks[i] != "order":
            return i, []
        _expect(_at(toks, i + 1) == "by", "by")
        i += 2
        direction, units = "asc", []
        while i < n and not (toks[i] in CLAUSES or toks[i] in (")", ";")):
            i, vu = self.val_unit(toks, i, tables)
            units.append(vu)
            if i < n and toks[i] in ORDER_DIRS:
                direction = toks[i]
                i += 1
            if i < n and toks[i] == ",":
                i += 1
            else:
                break
        return i, (direction, units)

    def sql(self, toks: Sequence[str], i: int) -> tuple[int, Sql]:
        start = i
        block = _at(toks, i) == "("
        if block:
            i += 1
        end, units, conds, tables = self.from_(toks, start)
        out: Sql = {"from": {"table_units": units, "conds": conds}, "select": self.select(toks, i, tables)}
        i, out["where"] = self._clause(toks, end, "where", tables)
        i, out["groupBy"] = self.group_by(toks, i, tables)
        i, out["having"] = self._clause(toks, i, "having", tables)
        i, out["orderBy"] = self.order_by(toks, i, tables)
        out["limit"] = None
        if i < len(toks) and toks[i] == "limit":
            _at(toks, i + 1)  # the official code reads the token after LIMIT, then ignores it
            i += 2
            out["limit"] = 1  # the token is a str, never an int: every LIMIT reads as 1
        i = _skip_semicolons(toks, i)
        if block:
            _expect(_at(toks, i) == ")", ")")
            i += 1
        i = _skip_semicolons(toks, i)
        for op in SET_OPS:
            out[op] = None
        if i < len(toks) and toks[i] in SET_OPS:
            op = toks[i]
            i, out[op] = self.sql(toks, i + 1)
        return i, out


def _at(toks: Sequence[str], i: int) -> str:
    try:
        return toks[i]  # i is never negative here
    except IndexError:
        raise _Rejected("ran past the last token") from None


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise _Rejected(f"expected {what}")


def _skip_semicolons(toks: Sequence[str], i: int) -> int:
    while i < len(toks) and toks[i] == ";":
        i += 1
    return i


def parse(sql: str, schema: Schema) -> Sql:
    """The official sql dict of ``sql`` (raises :class:`_Rejected` where the official parser raises)."""
    toks = tokenize(sql)
    try:
        return _Parser(toks, schema).sql(toks, 0)[1]
    except RecursionError as exc:  # pragma: no cover - the official parser would recurse as deep
        raise _Rejected("nesting too deep") from exc


def empty_sql() -> Sql:
    """What the official script scores a rejected prediction as."""
    return {
        "except": None,
        "from": {"conds": [], "table_units": []},
        "groupBy": [],
        "having": [],
        "intersect": None,
        "limit": None,
        "orderBy": [],
        "select": [False, []],
        "union": None,
        "where": [],
    }


# --------------------------------------------------------------------------- hardness


def _nested(sql: Sql) -> list[Sql]:
    out = []
    for cu in sql["from"]["conds"][::2] + sql["where"][::2] + sql["having"][::2]:
        out += [v for v in (cu[3], cu[4]) if isinstance(v, dict)]
    return out + [sql[op] for op in ("intersect", "except", "union") if sql[op] is not None]


def _conjunctions(sql: Sql) -> list[Any]:
    return list(sql["from"]["conds"][1::2] + sql["where"][1::2] + sql["having"][1::2])


def _cond_units(sql: Sql) -> list[Any]:
    return list(sql["from"]["conds"][::2] + sql["where"][::2] + sql["having"][::2])


def _first_is_not_zero(units: Sequence[Any]) -> int:
    # the official has_agg: unit[0] != 0, applied alike to select units, col units, cond units (their
    # NOT flag) and the 'and'/'or' words of a condition list (their first letter)
    return sum(1 for u in units if u[0] != 0)


def hardness(sql: Sql) -> str:
    """The official hardness class of a parsed gold."""
    comp1 = sum(1 for k in ("where", "groupBy", "orderBy") if len(sql[k]) > 0) + (sql["limit"] is not None)
    if sql["from"]["table_units"]:
        comp1 += len(sql["from"]["table_units"]) - 1
    comp1 += _conjunctions(sql).count("or")
    comp1 += sum(1 for cu in _cond_units(sql) if cu[1] == _LIKE)
    comp2 = len(_nested(sql))
    aggs = _first_is_not_zero(sql["select"][1]) + _first_is_not_zero(sql["where"][::2])
    aggs += _first_is_not_zero(sql["groupBy"])
    if sql["orderBy"]:
        vus = sql["orderBy"][1]
        aggs += _first_is_not_zero([u[1] for u in vus if u[1]] + [u[2] for u in vus if u[2]])
    aggs += _first_is_not_zero(sql["having"])
    others = (aggs > 1) + (len(sql["select"][1]) > 1) + (len(sql["where"]) > 1) + (len(sql["groupBy"]) > 1)
    if comp1 <= 1 and others == 0 and comp2 == 0:
        return "easy"
    if (others <= 2 and comp1 <= 1 and comp2 == 0) or (comp1 <= 2 and others < 2 and comp2 == 0):
        return "medium"
    if (
        (others > 2 and comp1 <= 2 and comp2 == 0)
        or (2 < comp1 <= 3 and others <= 2 and comp2 == 0)
        or (comp1 <= 1 and others == 0 and comp2 <= 1)
    ):
        return "hard"
    return "extra"


# --------------------------------------------------------------------------- normalisation


def _drop_values(sql: Sql | None) -> Sql | None:
    """rebuild_sql_val: condition values become None unless they are queries (recursively so); a new
    sql dict, ``sql`` left as it is."""
    if sql is None:
        return None
    sql = {**sql, "from": {**sql["from"]}}  # a copy: the parse it reads is shared (:func:`_parsed`)

    def cond(c: list[Any]) -> list[Any]:
        return [
            (u[0], u[1], u[2], _drop_values(u[3]) if isinstance(u[3], dict) else None,
             _drop_values(u[4]) if isinstance(u[4], dict) else None)
            if k % 2 == 0 else u
            for k, u in enumerate(c)
        ]  # fmt: skip

    sql["from"]["conds"] = cond(sql["from"]["conds"])
    sql["having"] = cond(sql["having"])
    sql["where"] = cond(sql["where"])
    for op in ("intersect", "except", "union"):
        sql[op] = _drop_values(sql[op])
    return sql


def _valid_columns(units: Sequence[Any], schema: Schema) -> frozenset[str]:
    return _columns_of(schema, frozenset(u[1][:-2] for u in units if u[0] == "table_unit"))


@lru_cache(maxsize=4096)
def _columns_of(schema: Schema, prefixes: frozenset[str]) -> frozenset[str]:
    """The schema's column ids under these table prefixes (once per schema and set of tables: a walk of
    every column of the schema)."""
    return frozenset(v for v in schema.ids.values() if "." in v and v[: v.index(".")] in prefixes)


def _map_columns(valid: frozenset[str], sql: Sql | None, fk: Mapping[str, str]) -> Sql | None:
    """rebuild_sql_col: foreign keys to their representative, DISTINCT flags dropped (not in nested
    condition queries, which it does not visit); a new sql dict, ``sql`` left as it is."""
    if sql is None:
        return None
    sql = {**sql, "from": {**sql["from"]}}

    def cu(u: Any) -> Any:
        if u is None:
            return None
        c = fk[u[1]] if u[1] in fk and u[1] in valid else u[1]
        return (u[0], c, None)

    def vu(u: Any) -> Any:
        return None if u is None else (u[0], cu(u[1]), cu(u[2]))

    def cond(c: list[Any]) -> list[Any]:
        return [(u[0], u[1], vu(u[2]), u[3], u[4]) if k % 2 == 0 else u for k, u in enumerate(c)]

    sql["select"] = (None, [(agg, vu(v)) for agg, v in sql["select"][1]])
    sql["from"]["conds"] = cond(sql["from"]["conds"])
    sql["where"] = cond(sql["where"])
    sql["groupBy"] = [cu(u) for u in sql["groupBy"]]
    if sql["orderBy"]:
        sql["orderBy"] = (sql["orderBy"][0], [vu(v) for v in sql["orderBy"][1]])
    sql["having"] = cond(sql["having"])
    for op in ("intersect", "except", "union"):
        sql[op] = _map_columns(valid, sql[op], fk)
    return sql


def normalise(sql: Sql, schema: Schema, fk: Mapping[str, str]) -> Sql:
    valid = _valid_columns(sql["from"]["table_units"], schema)
    out = _map_columns(valid, _drop_values(sql), fk)
    assert out is not None
    return out


# --------------------------------------------------------------------------- exact set match


def _same_bag(pred: Sequence[Any], gold: Sequence[Any]) -> bool:
    if len(pred) != len(gold):
        return False
    rest = list(gold)
    for u in pred:
        if u in rest:
            rest.remove(u)
        else:
            return False
    return True


def _keywords(sql: Sql) -> set[str]:
    kw = {k for k, key in (("where", "where"), ("group", "groupBy"), ("having", "having")) if sql[key]}
    if sql["orderBy"]:
        kw |= {sql["orderBy"][0], "order"}
    kw |= {k for k in ("limit", "except", "union", "intersect") if sql[k] is not None}
    if "or" in _conjunctions(sql):
        kw.add("or")
    units = _cond_units(sql)
    if any(u[0] for u in units):
        kw.add("not")
    if any(u[1] == _IN for u in units):
        kw.add("in")
    if any(u[1] == _LIKE for u in units):
        kw.add("like")
    return kw


def _group_name(col: str) -> str:
    return col.split(".")[1] if "." in col else col


def exact_match(pred: Sql, gold: Sql) -> bool:
    """Evaluator.eval_exact_match on two normalised sql dicts: every component's F1 is 1, same tables."""
    ps, gs = pred["select"][1], gold["select"][1]
    if not _same_bag(ps, gs) or not _same_bag([u[1] for u in ps], [u[1] for u in gs]):
        return False
    pw, gw = pred["where"][::2], gold["where"][::2]
    if not _same_bag(pw, gw) or not _same_bag([u[2] for u in pw], [u[2] for u in gw]):
        return False
    pg, gg = [u[1] for u in pred["groupBy"]], [u[1] for u in gold["groupBy"]]
    if not _same_bag([_group_name(c) for c in pg], [_group_name(c) for c in gg]):
        return False
    if bool(pg) != bool(gg) or (gg and (pg != gg or pred["having"] != gold["having"])):
        return False
    if bool(pred["orderBy"]) != bool(gold["orderBy"]):
        return False
    if gold["orderBy"] and (pred["orderBy"] != gold["orderBy"] or (pred["limit"] is None) != (gold["limit"] is None)):
        return False
    if set(pred["where"][1::2]) != set(gold["where"][1::2]):
        return False
    pn = [op for op in SET_OPS if pred[op] is not None]
    gn = [op for op in SET_OPS if gold[op] is not None]
    if len(pn) != len(gn):
        return False
    hits = sum(1 for op in SET_OPS if pred[op] is not None and gold[op] is not None and exact_match(pred[op], gold[op]))
    if hits != len(pn):
        return False
    if _keywords(pred) != _keywords(gold):
        return False
    if gold["from"]["table_units"]:
        return bool(sorted(gold["from"]["table_units"]) == sorted(pred["from"]["table_units"]))
    return True


# --------------------------------------------------------------------------- the reading


@dataclass(frozen=True, slots=True)
class Match:
    """Spider's match reading of one item."""

    hardness: str | None
    """The gold's hardness class, None if the official parser rejects the gold (it would abort)."""
    em: int | None
    """Exact-set match 1/0; None where the official script would abort (gold rejected, sort error)."""
    pred_rejected: str | None = None
    """Why the official parser rejects the prediction (then em is 0), else None."""


def pred_line(pred: str) -> str:
    """The prediction as evaluation.py matches it: stripped, cut at a tab, ``value`` -> ``1``."""
    return pred.strip().split("\t", 1)[0].replace("value", "1")


def _parse(sql: str, schema: Schema) -> Sql:
    try:
        return parse(sql, schema)
    except _Rejected:
        raise
    except Exception as exc:  # a name looked up and absent (KeyError...): the official code raises too
        raise _Rejected(f"{type(exc).__name__}: {exc}") from exc


@lru_cache(maxsize=4096)
def _parsed(sql: str, schema: Schema) -> Sql | _Rejected:
    """:func:`_parse`'s sql dict, or why it rejects ``sql``: once per distinct SQL and schema in a process
    (a gold recurs in every system's item of its question). Shared, so never changed: :func:`normalise`
    builds new dicts."""
    try:
        return _parse(sql, schema)
    except _Rejected as exc:
        return exc


def spider_match(pred: str, gold: str, schema: Schema, fk: Mapping[str, str], max_chars: int | None = None) -> Match:
    """Hardness of ``gold`` and exact-set match of ``pred`` (the raw prediction line) against it.

    ``max_chars``: SQL longer than this is not parsed (``Config.max_sql_chars``, which the executor
    refuses too): a longer gold has no reading, a longer prediction is rejected (em 0), as it fails to run."""
    if max_chars is not None and len(gold) > max_chars:
        return Match(None, None)
    g = _parsed(gold.strip(), schema)
    if isinstance(g, _Rejected):
        return Match(None, None)
    level, g_normal = _gold_side(g, schema, fk)
    rejected = None
    p = _parsed(pred_line(pred), schema) if max_chars is None or len(pred) <= max_chars else None
    if not isinstance(p, dict):
        rejected = (str(p) or "rejected") if p is not None else f"SQL longer than {max_chars} characters"
        p = empty_sql()
    if g_normal is None:  # its normalisation recursed too deep: the official run aborts
        return Match(level, None, rejected)
    try:
        em = int(exact_match(normalise(p, schema, fk), g_normal))
    except (TypeError, RecursionError):  # sorting two different FROM sub-queries: the official run aborts
        return Match(level, None, rejected)
    return Match(level, em, rejected)


_GOLD_SIDES: dict[int, tuple[Sql, Mapping[str, str], str, Sql | None]] = {}
"""By the identity of a gold's shared parse (:func:`_parsed`): that parse, the foreign-key map, its hardness and its
normalised form (None where normalising recursed too deep)."""


def _gold_side(g: Sql, schema: Schema, fk: Mapping[str, str]) -> tuple[str, Sql | None]:
    """The hardness and the normalised form of a gold's shared parse, computed once for all the items that share
    the gold (neither changes the parse: :func:`normalise` builds new dicts, :func:`exact_match` reads them)."""
    known = _GOLD_SIDES.get(id(g))
    if known is not None and known[0] is g and known[1] is fk:
        return known[2], known[3]
    normal: Sql | None
    try:
        normal = normalise(g, schema, fk)
    except RecursionError:
        normal = None
    if len(_GOLD_SIDES) >= 4096:
        _GOLD_SIDES.clear()
    level = hardness(g)
    _GOLD_SIDES[id(g)] = (g, fk, level, normal)
    return level, normal


# --------------------------------------------------------------------------- where the run finds it


@lru_cache(maxsize=8)
def _fk_maps_at(path: str) -> dict[str, dict[str, str]] | None:
    p = Path(path)
    if not p.is_file():
        return None
    try:
        return foreign_key_maps(p)
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None  # not Spider's tables.json: the reading is not defined


@lru_cache(maxsize=256)
def _tables_json(db_file: str | Path, db_id: str) -> str | None:
    """Where Spider's ``tables.json`` would be for a database file in its layout; None for another layout."""
    f = Path(db_file)
    if f.name != f"{db_id}.sqlite" or f.parent.name != db_id:
        return None
    return str(f.parent.parent.parent / "tables.json")


def for_database(
    db_file: str | Path, db_id: str, catalogue: Callable[[], Iterable[tuple[str, Iterable[str]]] | None]
) -> tuple[Schema, dict[str, str]] | None:
    """The schema and foreign-key map of a database in Spider's layout (``<root>/<db_id>/<db_id>.sqlite``
    with ``tables.json`` beside ``<root>`` naming ``db_id``), as ``evaluation.py --db <root> --table
    tables.json`` reads them, ``catalogue()`` reading the database's catalogue (asked only in that layout;
    see :meth:`Schema.of`); None elsewhere, or when it cannot be read (the match reading is then not
    defined)."""
    tables = _tables_json(db_file, db_id)
    maps = _fk_maps_at(tables) if tables is not None else None
    if maps is None or db_id not in maps:
        return None
    read = catalogue()
    return None if read is None else (Schema.of(read), maps[db_id])
