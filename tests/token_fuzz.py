"""Statements generated around comment and quote markers, and sqlglot's comment-free rendering of them,
for the differential test of ``tests/test_policy_tokens.py``.

Each statement selects sums of distinct powers of two, strings and a quoted name, with comments, quotes,
Unicode spaces, line separators and format characters between and inside its tokens, so that its value
says where each comment and each quoted text began and ended: text that one reader takes for a comment
adds a term, or a column, or an error, when the other reads it as code. The rendering is what sqlglot
read, and only that: its tokens, strings and quoted names written again from the values sqlglot read
in them, comments dropped. A server that reads the statement as sqlglot does gives both the same value.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from sqlglot import TokenType

from rose_sql.sql import query

SPECIALS = (
    "\u00a0",  # no-break space
    "\u2028",  # line separator
    "\u2029",  # paragraph separator
    "\u0085",  # next line
    "\u3000",  # ideographic space
    "\u1680",
    "\u2000",
    "\u200a",
    "\u202f",
    "\u205f",
    "\u180e",  # Mongolian vowel separator (a format character)
    "\u200b",  # zero-width space (a format character)
    "\ufeff",  # byte-order mark (a format character)
    "\u00ad",  # soft hyphen (a format character)
    "\u200e",  # left-to-right mark
    "\x0b",
    "\x0c",
    "\x1c",
    "\x1f",
    "\x7f",
    "\x01",
)
"""Characters some reader may take for a space, a line break or part of a name."""
PLAIN = (" ", " ", " ", "\t", "\n", "\r", "\r\n", "")
MARKERS = ("--", "-- ", "#", "/*", "*/", "/*/", "'", '"', "`", "\\", "''", "$$", "$a$", "E'", "N'", "U&'", "\\'")
"""What may start or end a comment, a string or a quoted name."""
CODE = (", 64", "+ 1024", " + 4096", "-8192", ", 'x'", ") , (1", "*/ + 16384")
"""Code that changes the value when a reader takes it for code."""


class Generator:
    """Statements for one dialect (``mysql`` or ``postgres``) from one seed."""

    def __init__(self, dialect: str, seed: int) -> None:
        self.dialect = dialect
        self.rng = random.Random(seed)
        self.bit = 0
        self.wild = 1.0
        """How much noise this statement gets: tame ones reach the servers more often."""

    def __iter__(self) -> Iterator[str]:
        while True:
            yield self.statement()

    # ---------------------------------------------------------------- pieces

    def pick(self, *choices: tuple[str, ...]) -> str:
        return self.rng.choice(self.rng.choice(choices))

    def noise(self, size: int = 3) -> str:
        """Text that may end up anywhere: markers, specials, code and letters."""
        return "".join(
            self.pick(MARKERS, SPECIALS, CODE, PLAIN, ("x", "ab", "1", "é", "名"))
            for _ in range(self.rng.randint(0, max(1, round(size * self.wild))))
        )

    def gap(self) -> str:
        """What separates two tokens: mostly a space, else a special character or a comment."""
        r = self.rng.random()
        if r < 0.9 - 0.25 * self.wild:
            return self.pick(PLAIN)
        if r < 0.95 - 0.23 * self.wild:
            return self.pick(PLAIN) + self.pick(SPECIALS) + self.pick(PLAIN)
        return " " + self.comment() + self.pick(PLAIN)

    def comment(self) -> str:
        r = self.rng.random()
        if r < 0.5:
            start = "--" + self.pick((" ", "\t", "", "x", "-", "\n", "\r"), SPECIALS)
            end = self.pick(("\n", "\r", "\r\n", "\n", "\n"), SPECIALS)
            return start + self.noise() + self.pick(CODE) + self.noise(1) + end
        if r < (0.65 if self.dialect == "mysql" else 0.52):
            return "#" + self.noise() + self.pick(CODE) + self.pick(("\n", "\r\n", "\r"), SPECIALS)
        inner = self.noise() + self.pick(CODE) + self.rng.choice(("", "/*", "*/", "/*/", "**/")) + self.noise(2)
        return "/*" + inner + self.rng.choice(("*/", "*/", "*/", "**/", "*/*/"))

    def number(self) -> str:
        self.bit = (self.bit + 1) % 40
        return str(1 << self.bit)

    def string(self) -> str:
        """A string literal in one of the dialect's quotings, its content full of markers (its own closing
        quote mostly escaped, so that most of them end where they were meant to)."""
        if self.rng.random() < 0.1:  # a hex or bit string: no escapes in it, a doubled quote ends it
            prefix = self.rng.choice(("X'", "x'", "B'", "b'"))
            digits = "".join(self.rng.choice("0123456789abcdef" if prefix[0] in "Xx" else "01") for _ in range(4))
            return prefix + self.rng.choice((digits, digits, digits[:2] + "''" + digits[2:], digits + "\\")) + "'"
        if self.dialect == "mysql":
            quote = self.rng.choice(("'", '"', "'", "N'", "_utf8mb4'"))
        else:
            quote = self.rng.choice(("'", "'", "E'", "N'", "U&'", "$$", "$a$", "$\u00a0$", "$é$"))
        close = quote if quote.startswith("$") else quote[-1]
        body = self.noise(4)
        if self.rng.random() < 1.2 - 0.4 * self.wild:
            body = body.replace(close, close + close) if not close.startswith("$") else body.replace(close, "")
        return quote + body + close

    def name(self) -> str:
        """A quoted (or not) name with specials in it."""
        inner = self.rng.choice(("", "x")) + self.pick(SPECIALS, ("a", "b c", "--", "#", "/*")) + self.noise(1)
        if self.rng.random() < 0.2:
            return self.pick(SPECIALS) if self.rng.random() < 0.5 else "n" + self.pick(SPECIALS)
        q = "`" if self.dialect == "mysql" else '"'
        return q + inner.replace(q, q + q) + q

    def sum(self, name: str | None) -> str:
        terms = []
        for _ in range(self.rng.randint(1, 4)):
            r = self.rng.random()
            if r < 0.6:
                terms.append(self.number())
            elif r < 0.85:
                terms.append(("CHAR_LENGTH(" if self.dialect == "mysql" else "length(") + self.string() + ")")
            else:
                terms.append(f"d.{name}" if name is not None else self.number())
        out = terms[0]
        for t in terms[1:]:
            out += self.gap() + self.rng.choice(("+", "-", "+", "-", "--", "- -")) + self.gap() + t
        return out

    def statement(self) -> str:
        self.wild = self.rng.choice((0.4, 1.0))
        name = self.name() if self.rng.random() < 0.4 else None
        columns = []
        for _ in range(self.rng.randint(1, 3)):
            columns.append(self.string() if self.rng.random() < 0.25 else self.sum(name))
        sql = "SELECT" + self.rng.choice((" ", "\n", "\t")) + self.gap()
        sql += ("," + self.gap()).join(columns)
        if name is not None:
            sql += self.gap() + "FROM" + self.gap() + f"(SELECT 1 AS {name})" + self.gap() + "AS d"
        if self.rng.random() < 0.15:
            sql += " ORDER" + self.rng.choice((" ", "\u00a0", "\u3000", "\n", "\x0b", "\t")) + "BY 1"
        if self.rng.random() < 0.3:
            sql += self.gap()
        return sql


# --------------------------------------------------------------------------- sqlglot's rendering

REWRITTEN = frozenset("\u200b\u2060\ufeff")
"""Characters sqlglot reads as part of a name and DuckDB replaces with a space outside quotes."""
_STRINGS = {
    TokenType.STRING,
    TokenType.NATIONAL_STRING,
    TokenType.BYTE_STRING,
    TokenType.HEREDOC_STRING,
    TokenType.RAW_STRING,
}


def render(sql: str, dialect: str) -> str | None:
    """What sqlglot read in ``sql``, written again without comments: strings and quoted names from the
    values sqlglot read in them, the other tokens as written, one space (a line break where the text had
    one) where the text had a space or a comment. None when sqlglot cannot tokenize it."""
    tokens = query(sql, dialect).tokens
    if tokens is None:
        return None
    out: list[str] = []
    end = 0
    for tok in tokens:
        if tok.token_type == TokenType.HINT:
            continue
        between = sql[end : tok.start]
        if out and between:
            out.append("\n" if "\n" in between else " ")
        elif out and tok.token_type == TokenType.DASH and out[-1] == "-":  # 1--1: a minus and a negation
            out.append(" ")
        raw = sql[tok.start : tok.end + 1]
        if tok.token_type == TokenType.IDENTIFIER and raw[:1] in '`"':
            q = raw[0]
            out.append(q + tok.text.replace(q, q + q) + q)
        elif tok.token_type in _STRINGS and raw[-1:] in "'\"$":
            out.append(_string(tok.text, dialect, national=tok.token_type == TokenType.NATIONAL_STRING))
        elif tok.token_type in (TokenType.HEX_STRING, TokenType.BIT_STRING) and raw.endswith("'"):
            out.append(("X'" if tok.token_type == TokenType.HEX_STRING else "B'") + tok.text + "'")
        elif tok.token_type == TokenType.UNICODE_STRING:
            out.append("U&'" + tok.text.replace("'", "''") + "'")
        elif any(ch.isspace() for ch in raw):  # one keyword over a space: ORDER BY
            out.append(tok.text)
        elif dialect == "duckdb" and tok.token_type == TokenType.VAR and not REWRITTEN.isdisjoint(raw):
            out.append('"' + raw.replace('"', '""') + '"')  # a name to sqlglot; DuckDB would split it unquoted
        else:
            out.append(raw)
        end = tok.end + 1
    return "".join(out)


def _string(value: str, dialect: str, *, national: bool) -> str:
    """A string literal of ``value`` (N'..' stays national: PostgreSQL's is a ``char(n)``)."""
    prefix = "N'" if national else "'"
    if dialect == "mysql":
        return prefix + value.replace("\\", "\\\\").replace("'", "\\'").replace("\x00", "\\0") + "'"
    return prefix + value.replace("'", "''") + "'"
