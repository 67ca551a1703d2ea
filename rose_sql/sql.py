"""The one sqlglot seam: SQL text read as tokens and trees, and what the stages ask of it.

Every module that reads SQL does it here: the statement gate, comment stripping, whether the
outermost query is ordered, the tables a query reads, identifier quoting, and sqlglot's trees for
the evidence and the syntax reward. The dialect is a parameter (``sqlite``, the only engine today,
by default). Untrusted SQL never makes these functions raise: what sqlglot cannot read comes back as
a :class:`Parsed` with an ``error``, or as each function's documented fallback. The lexical helpers
(gate, comments, ordering) cost microseconds and never fail on SQL that sqlglot's parser does not
understand. The execution sandbox (:mod:`rose_sql.engines.execute`) is what actually enforces read-only
access; the gate gives a clear reason early.

Each text is read once. :func:`query` memoises one :class:`Query` per distinct text (a bounded
LRU) whose tokens and tree are computed on first use, so the stages of an item that need the same
SQL (the gate, whether the gold is ordered, the evidence's features and gold smells, the judges'
schema subset) share one tokenization and one parse. Memoised rather than carried through the
stages: the deterministic stages run in worker processes and the judges in the main one, a sqlglot
tree costs more to pickle than to parse, and threading a Query through every stage's signature
would buy nothing within a process that the memo does not.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeVar

from sqlglot import Token, TokenType, exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError
from sqlglot.parser import Parser
from sqlglot.tokens import Tokenizer

DEFAULT_DIALECT = "sqlite"
"""The dialect SQL is read in unless a caller names another (the only engine today is SQLite)."""

_STARTS = {TokenType.SELECT, TokenType.WITH, TokenType.VALUES, TokenType.L_PAREN}
_PLAIN_START = re.compile(r"\s*(?:(?:select|with|values)(?![\w$])|\()", re.IGNORECASE | re.ASCII)
_MEMO_QUERIES = 64
"""Queries :func:`query` keeps (LRU): the texts of the items in flight in a process (a worker process
evaluates one item at a time). Kept trees cost the garbage collector time, so few are kept."""
_MEMO_MAX_CHARS = 8192
"""Longer texts are read afresh each time they are asked for, never kept: a hostile 200,000-character
query's tree is not held in memory."""

R = TypeVar("R")


# --------------------------------------------------------------------------- reading with sqlglot


@dataclass(frozen=True, slots=True)
class Parsed:
    """What sqlglot read in one SQL text: its statements, or why it could not read them."""

    statements: tuple[exp.Expr | None, ...] = ()
    """Every statement in order, as ``sqlglot.parse`` returns them (None for an empty one)."""
    tree: exp.Expr | None = None
    """The statement, or a ``Block`` of all of them when there are several (as ``sqlglot.parse_one``);
    None when the text is unreadable or its first statement is empty."""
    error: str | None = None
    """Why sqlglot could not read the text (None when it could)."""


_LOCAL = threading.local()


@lru_cache(maxsize=16)
def _dialect(name: str) -> Dialect:
    return Dialect.get_or_raise(name)


def _tools(dialect: str) -> tuple[Tokenizer, Parser]:
    """This thread's sqlglot tokenizer and parser for a dialect (making them costs about as much as
    parsing a short query, and they keep state while they work, so each thread has its own)."""
    tools: dict[str, tuple[Tokenizer, Parser]] | None = getattr(_LOCAL, "tools", None)
    if tools is None:
        tools = _LOCAL.tools = {}
    if dialect not in tools:
        d = _dialect(dialect)
        tools[dialect] = (d.tokenizer(), d.parser())
    return tools[dialect]


def _guarded(read: Callable[[], R]) -> R | str:
    """``read()``, or what it raised as a readable message.

    The one place where sqlglot's failures are caught. On untrusted text it raises its own errors
    (``TokenError``, ``ParseError``), ``RecursionError`` on deep nesting, ``ValueError``, and, from
    inside its parser, ``TypeError`` or ``AttributeError`` on some inputs (``{!->>GLOB,=``): every
    exception means "not read".
    """
    try:
        return read()
    except Exception as e:  # see above: the input is untrusted, and so is what sqlglot makes of it
        if isinstance(e, ParseError) and e.errors:
            first = e.errors[0]
            return f"{first.get('description')} (line {first.get('line')}, column {first.get('col')})"[:500]
        return f"{type(e).__name__}: {e}"[:500]


def _tokenize(sql: str, dialect: str) -> tuple[Token, ...] | str:
    return _guarded(lambda: tuple(_tools(dialect)[0].tokenize(sql)))


def _parse_tokens(sql: str, tokens: tuple[Token, ...], dialect: str) -> Parsed:
    statements = _guarded(lambda: tuple(_tools(dialect)[1].parse(list(tokens), sql)))
    if isinstance(statements, str):
        return Parsed(error=statements)
    if not statements or statements[0] is None:
        return Parsed(statements)
    return Parsed(statements, exp.Block(expressions=list(statements)) if len(statements) > 1 else statements[0])


def parse(sql: str, dialect: str = DEFAULT_DIALECT) -> Parsed:
    """sqlglot's reading of ``sql``, not memoised (never raises: what it cannot read is ``error``).

    For callers that keep their own memo of what they build from the tree (the syntax reward);
    everyone else asks :func:`query`.
    """
    return Query(sql, dialect).parsed


class Query:
    """One SQL text and what is read from it, each part computed on first use and kept.

    Get one with :func:`query`, which returns the same object for the same text. Its tree is shared
    with every later caller: copy it before changing it (the gold smells do). Not locked: two threads
    asking at once may both compute a part, harmlessly (they compute equal values).
    """

    __slots__ = ("_ordered", "_parsed", "_tables", "_tokens", "dialect", "text")

    def __init__(self, text: str, dialect: str = DEFAULT_DIALECT) -> None:
        self.text = text
        """The SQL."""
        self.dialect = dialect
        """The dialect it is read in."""
        self._tokens: tuple[Token, ...] | str | None = None
        self._parsed: Parsed | None = None
        self._tables: frozenset[str] | None = None
        self._ordered: bool | None = None

    def _lexed(self) -> tuple[Token, ...] | str:
        if self._tokens is None:
            self._tokens = _tokenize(self.text, self.dialect)
        return self._tokens

    @property
    def tokens(self) -> tuple[Token, ...] | None:
        """sqlglot's tokens (comments are not tokens), or None when it cannot tokenize the text."""
        tokens = self._lexed()
        return None if isinstance(tokens, str) else tokens

    @property
    def parsed(self) -> Parsed:
        """sqlglot's statements and tree, parsed from :attr:`tokens`, or why there are none."""
        if self._parsed is None:
            tokens = self._lexed()
            self._parsed = (
                Parsed(error=tokens) if isinstance(tokens, str) else _parse_tokens(self.text, tokens, self.dialect)
            )
        return self._parsed

    @property
    def tree(self) -> exp.Expr | None:
        """The tree of the query (see :attr:`Parsed.tree`), or None."""
        return self.parsed.tree

    @property
    def tables(self) -> frozenset[str]:
        """Lower-cased names of the tables the statements read (empty when they do not parse)."""
        if self._tables is None:
            trees = self.parsed.statements
            self._tables = frozenset(name for tree in trees if tree is not None for name in _tables_of(tree))
        return self._tables

    @property
    def ordered(self) -> bool:
        """Whether the outermost query is ordered: see :func:`has_top_level_order_by`."""
        if self._ordered is None:
            self._ordered = _ordered(self)
        return self._ordered


@lru_cache(maxsize=_MEMO_QUERIES)
def _memo(text: str, dialect: str) -> Query:
    return Query(text, dialect)


def query(text: str, dialect: str = DEFAULT_DIALECT) -> Query:
    """The :class:`Query` of ``text``: the same object while the text is among the last 64 asked for
    (texts longer than 8,192 characters get a new one each time)."""
    return Query(text, dialect) if len(text) > _MEMO_MAX_CHARS else _memo(text, dialect)


# --------------------------------------------------------------------------- what the stages ask


EMPTY = "empty SQL"
ONLY_COMMENTS = "SQL is only comments"
NO_STATEMENT = (EMPTY, ONLY_COMMENTS)
"""The gate's reasons for SQL that holds no statement (Python's sqlite3 would run it as "no rows")."""


def quote_identifier(name: str) -> str:
    """A table or column name as a double-quoted SQLite identifier."""
    return '"' + name.replace('"', '""') + '"'


def gate(sql: str, *, max_chars: int, dialect: str = DEFAULT_DIALECT) -> str | None:
    """Why this SQL may not run (None: it may). Accepts exactly one SELECT / WITH / VALUES statement,
    read in ``dialect``."""
    if not sql.strip():
        return EMPTY
    if "\x00" in sql:
        return "SQL contains a NUL byte"
    if len(sql) > max_chars:
        return f"SQL longer than {max_chars} characters"
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"SQL is not valid Unicode text (lone surrogate {sql[e.start]!r} at {e.start})"
    if _plainly_one_select(sql):
        return None
    tokens = query(sql, dialect).tokens
    if tokens is None:
        return None  # let SQLite report the syntax error in its own words
    if not tokens:
        return ONLY_COMMENTS
    statements = _split(tokens)
    if len(statements) != 1:
        return f"{len(statements)} statements; exactly one SELECT is allowed"
    if statements[0][0].token_type not in _STARTS:
        return f"not a SELECT statement (starts with {statements[0][0].text.upper()!r})"
    return None


def _plainly_one_select(sql: str) -> bool:
    """One SELECT / WITH / VALUES statement, seen without tokenizing: no comment, no inner semicolon.

    The common case, decided in a microsecond; anything else goes through the tokenizer.
    """
    body = sql.rstrip()
    body = body[:-1] if body.endswith(";") else body
    return ";" not in body and "--" not in body and "/*" not in body and _PLAIN_START.match(body) is not None


def _split(tokens: tuple[Token, ...]) -> list[list[Token]]:
    statements: list[list[Token]] = [[]]
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            statements.append([])
        else:
            statements[-1].append(tok)
    return [s for s in statements if s]


def strip_comments(sql: str) -> str:
    """The SQL without ``--`` and ``/* */`` comments (string literals untouched).

    Text sqlglot cannot tokenize (a block comment left open at the end, which SQLite accepts) goes
    through :func:`_strip_comments_lexically` instead: comments never survive because of it.
    """
    tokens = query(sql).tokens
    if tokens is None:
        return _strip_comments_lexically(sql)
    out: list[str] = []
    prev_end = -1
    for tok in tokens:
        if out and tok.start > prev_end + 1:
            out.append(" ")
        out.append(sql[tok.start : tok.end + 1])
        prev_end = tok.end
    return "".join(out)


_QUOTED_TOKENS = frozenset(
    {
        TokenType.STRING,
        TokenType.NATIONAL_STRING,
        TokenType.HEX_STRING,
        TokenType.BIT_STRING,
        TokenType.BYTE_STRING,
        TokenType.UNICODE_STRING,
        TokenType.HEREDOC_STRING,
        TokenType.RAW_STRING,
        TokenType.NATIONAL_RAW_STRING,
    }
)
"""Tokens sqlglot reads as a quoted literal (a hex or bit literal only when written with quotes)."""


def lexemes(sql: str, dialect: str = DEFAULT_DIALECT) -> tuple[tuple[str, int, int], ...] | None:
    """sqlglot's reading of the text's lexical structure, for comparing it with a server's
    (:mod:`rose_sql.engines.lexical`): each token as (kind, start, end), the end exclusive, its kind
    ``string`` (a quoted literal, prefix included: ``N'x'``, ``E'x'``, ``$$x$$``), ``name`` (a quoted
    name), ``comment`` (an optimizer hint, a comment sqlglot keeps as a token) or ``code``. What no token
    covers, sqlglot skipped as a space or a comment. None when sqlglot cannot tokenize the text."""
    tokens = query(sql, dialect).tokens
    if tokens is None:
        return None
    out = []
    for tok in tokens:
        kind, kind_of = "code", tok.token_type
        if kind_of == TokenType.IDENTIFIER and sql[tok.start] in ('"', "`", "["):
            kind = "name"
        elif kind_of in _QUOTED_TOKENS and sql[tok.end] in ("'", '"', "$"):
            kind = "string"
        elif kind_of == TokenType.HINT:
            kind = "comment"
        out.append((kind, tok.start, tok.end + 1))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class NameUses:
    """The names a statement's tokens call or reach as attributes, whatever sqlglot's tree makes of them
    (unquoted names lower-cased, quoted ones as written)."""

    called: frozenset[str]
    """Names followed by ``(``: ``f(x)``, ``schema.f(x)``, ``"f"(x)``."""
    attributes: frozenset[str]
    """Names after a ``.`` and not followed by ``(``: ``s.f`` (PostgreSQL's attribute notation calls
    ``f(s)`` when ``s`` has no column ``f``)."""


def name_uses(sql: str, dialect: str = DEFAULT_DIALECT) -> NameUses | None:
    """The names ``sql`` calls or reaches as attributes (None when sqlglot cannot tokenize it)."""
    tokens = query(sql, dialect).tokens
    if tokens is None:
        return None
    called: set[str] = set()
    attributes: set[str] = set()
    for i, tok in enumerate(tokens):
        if tok.token_type in _NOT_NAMES:
            continue
        name = tok.text if tok.token_type == TokenType.IDENTIFIER else tok.text.lower()
        after = tokens[i + 1].token_type if i + 1 < len(tokens) else None
        if after == TokenType.L_PAREN:
            called.add(name)
        elif i and tokens[i - 1].token_type == TokenType.DOT:
            attributes.add(name)
    return NameUses(frozenset(called), frozenset(attributes))


_NOT_NAMES = _QUOTED_TOKENS | {
    TokenType.L_PAREN,
    TokenType.R_PAREN,
    TokenType.DOT,
    TokenType.COMMA,
    TokenType.NUMBER,
    TokenType.STAR,
    TokenType.HINT,
}
"""Tokens that are never a function's name."""


def enclosable(sql: str, dialect: str = DEFAULT_DIALECT) -> str | None:
    """The statement without its trailing semicolons and what follows its last token, to be read inside
    parentheses (``SELECT * FROM (...) LIMIT n``); None unless sqlglot reads its parentheses balanced,
    where parentheses around it could close early."""
    tokens = query(sql, dialect).tokens
    if not tokens:
        return None
    depth = 0
    for tok in tokens:
        depth += (tok.token_type == TokenType.L_PAREN) - (tok.token_type == TokenType.R_PAREN)
        if depth < 0:
            return None
    end = len(tokens)
    while end and tokens[end - 1].token_type == TokenType.SEMICOLON:
        end -= 1
    return sql[: tokens[end - 1].end + 1] if end and not depth else None


_KEPT_AS_WRITTEN = {TokenType.STRING, TokenType.NATIONAL_STRING, TokenType.HEX_STRING, TokenType.BIT_STRING}
"""Tokens whose text is data: their case is never folded."""


@lru_cache(maxsize=4096)
def normalize(sql: str) -> str:
    """The text under which two ways of writing the same SQL coincide: tokens one space apart, keywords and
    unquoted names in upper case, comments and trailing semicolons dropped; string literals and quoted
    names kept as written (``select  a from t;`` and ``SELECT a FROM t`` are one text). What sqlglot
    cannot tokenize falls back to its whitespace collapsed and trailing semicolons dropped.

    For pairing what refers to one prediction (a label and a record), never for deciding a score.
    """
    tokens = query(sql).tokens
    if tokens is None:
        return " ".join(sql.split()).rstrip("; ")
    words = []
    for tok in tokens:
        raw = sql[tok.start : tok.end + 1]
        quoted = tok.token_type == TokenType.IDENTIFIER and raw[:1] in ('"', "`", "[")
        words.append(raw if quoted or tok.token_type in _KEPT_AS_WRITTEN else raw.upper())
    while words and words[-1] == ";":
        words.pop()
    return " ".join(words)


_CLOSING_QUOTE = {"'": "'", '"': '"', "`": "`", "[": "]"}


def _strip_comments_lexically(sql: str) -> str:
    """Comments cut out by SQLite's own lexical rules, in one pass: quoted text (``'..'``, ``".."``,
    ```..```, ``[..]``, a doubled quote escaping itself) is kept whole, a ``--`` comment runs to the
    end of its line and a ``/*`` comment to its ``*/`` or, left open, to the end of the text. Each
    comment becomes one space."""
    kept: list[str] = []
    start = i = 0
    n = len(sql)
    while i < n:
        c = sql[i]
        if c in _CLOSING_QUOTE:
            close = _CLOSING_QUOTE[c]
            i += 1
            while (i := sql.find(close, i)) != -1 and close != "]" and sql.startswith(close, i + 1):
                i += 2  # a doubled quote is the quote itself
            i = n if i == -1 else i + 1
        elif sql.startswith("--", i) or sql.startswith("/*", i):
            end = sql.find("\n", i) if c == "-" else sql.find("*/", i + 2)
            kept.append(sql[start:i] + " ")
            i = start = n if end == -1 else end + (0 if c == "-" else 2)
        else:
            i += 1
    kept.append(sql[start:])
    return "".join(kept)


@lru_cache(maxsize=65536)
def has_top_level_order_by(sql: str) -> bool:
    """Whether the statement's outermost query is ordered (ORDER BY outside every parenthesis).

    Window ``OVER (ORDER BY ..)``, subqueries and CTE bodies do not count; an ORDER BY after a
    compound SELECT does. If the SQL cannot be tokenized, falls back to the text test the
    Spider test suite uses (``'order by' in sql.lower()``).
    """
    return query(sql).ordered


def _ordered(q: Query) -> bool:
    sql = q.text
    if "order" not in sql.lower():
        return False
    tokens = q.tokens
    if tokens is None:
        return "order by" in sql.lower()
    depth = 0
    for tok in tokens:
        if tok.token_type == TokenType.L_PAREN:
            depth += 1
        elif tok.token_type == TokenType.R_PAREN:
            depth -= 1
        elif tok.token_type == TokenType.ORDER_BY and depth == 0:
            return True
    return False


def _tables_of(tree: exp.Expr) -> set[str]:
    """The tables a tree reads, without the names of its common table expressions (``WITH f AS (...)
    SELECT ... FROM f`` reads what ``f`` reads, not a table ``f``). A reference to a CTE's own name inside
    that CTE (``WITH member AS (SELECT * FROM member)``) is the table of that name, unless the CTE is
    recursive."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    out: set[str] = set()
    for t in tree.find_all(exp.Table):
        name = t.name.lower()
        if name in ctes and not t.db:
            own = t.find_ancestor(exp.CTE)
            while own is not None and own.alias_or_name.lower() != name:
                own = own.find_ancestor(exp.CTE)
            if own is None or (isinstance(own.parent, exp.With) and own.parent.args.get("recursive")):
                continue  # a CTE, not a table
        out.add(name)
    return out


@lru_cache(maxsize=65536)
def tables_read(sql: str | None) -> frozenset[str]:
    """Lower-cased names of the tables a query reads (empty when there is no SQL or it does not parse)."""
    return query(sql).tables if sql else frozenset()
