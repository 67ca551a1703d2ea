"""SQL text helpers built on sqlglot's SQLite tokenizer.

Lexical work only (statement gate, comment stripping, top-level ORDER BY): it never fails on SQL
that sqlglot's parser does not understand, and it costs microseconds. The execution sandbox
(:mod:`rose_sql.execute`) is what actually enforces read-only access; this gate gives a clear
reason early.
"""

from __future__ import annotations

import re
from functools import lru_cache

from sqlglot import Token, TokenType
from sqlglot.dialects.sqlite import SQLite

_DIALECT = SQLite()
_STARTS = {TokenType.SELECT, TokenType.WITH, TokenType.VALUES, TokenType.L_PAREN}
_PLAIN_START = re.compile(r"\s*(?:(?:select|with|values)(?![\w$])|\()", re.IGNORECASE | re.ASCII)


def _tokens(sql: str) -> list[Token] | None:
    """sqlglot's tokens, or None when it cannot tokenize (whatever it raises: the input is untrusted)."""
    try:
        return list(_DIALECT.tokenize(sql))
    except Exception:
        return None


EMPTY = "empty SQL"
ONLY_COMMENTS = "SQL is only comments"
NO_STATEMENT = (EMPTY, ONLY_COMMENTS)
"""The gate's reasons for SQL that holds no statement (Python's sqlite3 would run it as "no rows")."""


def quote_identifier(name: str) -> str:
    """A table or column name as a double-quoted SQLite identifier."""
    return '"' + name.replace('"', '""') + '"'


def gate(sql: str, *, max_chars: int = 200_000) -> str | None:
    """Why this SQL may not run (None: it may). Accepts exactly one SELECT / WITH / VALUES statement."""
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
    tokens = _tokens(sql)
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


def _split(tokens: list[Token]) -> list[list[Token]]:
    statements: list[list[Token]] = [[]]
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            statements.append([])
        else:
            statements[-1].append(tok)
    return [s for s in statements if s]


def strip_comments(sql: str) -> str:
    """The SQL without ``--`` and ``/* */`` comments (string literals untouched)."""
    tokens = _tokens(sql)
    if tokens is None:
        return sql
    out: list[str] = []
    prev_end = -1
    for tok in tokens:
        if out and tok.start > prev_end + 1:
            out.append(" ")
        out.append(sql[tok.start : tok.end + 1])
        prev_end = tok.end
    return "".join(out)


@lru_cache(maxsize=65536)
def has_top_level_order_by(sql: str) -> bool:
    """Whether the statement's outermost query is ordered (ORDER BY outside every parenthesis).

    Window ``OVER (ORDER BY ..)``, subqueries and CTE bodies do not count; an ORDER BY after a
    compound SELECT does. If the SQL cannot be tokenized, falls back to the text test the
    Spider test suite uses (``'order by' in sql.lower()``).
    """
    if "order" not in sql.lower():
        return False
    tokens = _tokens(sql)
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
