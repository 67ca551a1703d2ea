"""How a server splits a statement's text into spaces, comments, quoted strings and names, and code,
written out from its own lexer, to check that sqlglot (which the policy reads) splits it the same way.

The policy (:func:`rose_sql.engines.base.policy`) checks sqlglot's reading of a statement. Where the
server's lexer reads the same text otherwise, the policy checks one statement and the server runs
another: MariaDB starts a ``--`` comment only before an ASCII space or control character, sqlglot
before any Unicode space, so in ``SELECT 1 --\\u00a0, @@datadir`` (a no-break space after the dashes)
the policy sees a comment where the server reads ``1 - -\\u00a0`` and then ``@@datadir``. So each
engine reads the text with :func:`mysql`, :func:`postgres` or :func:`duckdb` (the engine's rules, from
MariaDB's ``sql_lex.cc``, PostgreSQL's ``scan.l`` and DuckDB's parser), and :func:`disagreement` refuses
the statement wherever that reading and sqlglot's (:func:`rose_sql.sql.lexemes`) differ: a character
that is a comment or a space to one and code to the other, a string or a quoted name that begins or
ends elsewhere, or is a string to one and a name to the other. The differential test
(``tests/test_policy_tokens.py``) runs generated statements on the real engines to show that what this
accepts, the engine reads as sqlglot does.

Only the spans matter here, not the tokens inside code: inside a run of code both sides see every
character, which the policy then checks in sqlglot's tree.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple

from rose_sql.sql import lexemes

SpanKind = Literal["space", "comment", "string", "name", "code", "executable", "open", "rewritten"]
_LABEL = {"code": 0, "space": 1, "comment": 2, "string": 3, "name": 4, "executable": 2, "open": 2, "rewritten": 3}
_SAID = {0: "code", 1: "a space", 2: "a comment", 3: "a string", 4: "a quoted name"}
_SKIPPED = {True: "a space", False: "a comment"}


class Span(NamedTuple):
    """A run of the text as a server reads it (a tuple: a statement makes dozens of them)."""

    kind: SpanKind
    start: int
    end: int
    """Exclusive."""


# --------------------------------------------------------------------------- MySQL and MariaDB

_MY_SPACE = frozenset(" \t\n\v\f\r")
"""``my_isspace`` of the utf8mb4 character sets: the ASCII spaces only."""
_MY_CODE = re.compile(r"(?:(?![nNxXbB]')[0-9A-Za-z_$\u0080-\U0010ffff]+|[(),;.+*<>=!~^&|%@?:\[\]{}\\])+")
"""A run of code: unquoted names and numbers (every character past ASCII belongs to a name; ``N'``, ``X'``
and ``B'`` start a string instead) and the punctuation that starts nothing else."""
_MY_SPACES = re.compile(r"[ \t\n\v\f\r]+")


def _dash_comment(sql: str, i: int) -> bool:
    """MySQL's rule: ``--`` starts a comment only before an ASCII space or control character (or the
    end of the text), never before a Unicode space."""
    if i + 2 >= len(sql):
        return True
    c = sql[i + 2]
    return c in _MY_SPACE or c < " " or c == "\x7f"


def mysql(sql: str, *, backslash_escapes: bool = True, ansi_quotes: bool = False) -> list[Span]:
    """The spans of ``sql`` as MySQL and MariaDB read it, under the session's ``sql_mode``
    (``NO_BACKSLASH_ESCAPES`` clears ``backslash_escapes``; ``ANSI_QUOTES`` makes ``"`` quote names)."""
    spans: list[Span] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        nxt = sql[i + 1] if i + 1 < n else ""
        kind: SpanKind = "code"
        j: int | None
        if c in _MY_SPACE:
            kind, j = "space", _end(_MY_SPACES.match(sql, i), n)
        elif c == "#" or (c == "-" and nxt == "-" and _dash_comment(sql, i)):
            kind, j = "comment", _find(sql, "\n", i, n)
        elif c == "/" and nxt == "*":
            kind = "executable" if sql.startswith("!", i + 2) or sql[i + 2 : i + 4].upper() == "M!" else "comment"
            j = _after(sql, "*/", i + 2, n)
        elif c == "'" or (c == '"' and not ansi_quotes):
            kind, j = "string", _quoted(sql, i + 1, c, backslash_escapes)
        elif c == "`" or c == '"':
            kind, j = "name", _quoted(sql, i + 1, c, False)
        elif c in "nN" and nxt == "'":
            kind, j = "string", _quoted(sql, i + 2, "'", backslash_escapes)
        elif c in "xXbB" and nxt == "'":
            kind, j = "string", _after(sql, "'", i + 2, n)
        elif (m := _MY_CODE.match(sql, i)) is not None:
            j = m.end()
        else:
            j = i + 1
        if j is None:  # a comment, a string or a name that never ends: the server reads no statement
            kind, j = "open", n
        spans.append(Span(kind, i, j))
        i = j
    return spans


# --------------------------------------------------------------------------- PostgreSQL


_PG_CODE = re.compile(
    r"(?:(?![eEnNbBxX]'|[uU]&['\"])[A-Za-z_\u0080-\U0010ffff][A-Za-z_0-9$\u0080-\U0010ffff]*|[0-9]+"
    r"|[(),;.+*<>=!~^&|%@#?:\[\]{}\\])+"
)
"""A run of code: names (``ident_start ident_cont*``: every byte past ASCII, so every character past it,
belongs to a name; ``E'``, ``N'``, ``B'``, ``X'``, ``U&'`` and ``U&"`` start a quoted text instead),
numbers (never ``$``, which may start a dollar quote after them) and the punctuation that starts nothing
else."""
_DOLLAR = re.compile(r"\$(?:[A-Za-z_\u0080-\U0010ffff][A-Za-z_0-9\u0080-\U0010ffff]*)?\$")
_PARAMETER = re.compile(r"\$[0-9]*")


def _continuation(vertical_tab: bool) -> re.Pattern[str]:
    """``scan.l``'s quote continuation: ``'a'`` and ``'b'`` separated by spaces and ``--`` comments that
    hold a line break are one string."""
    horizontal = "[ \\t\\f\\v]" if vertical_tab else "[ \\t\\f]"
    space = "[ \\t\\n\\r\\f\\v]" if vertical_tab else "[ \\t\\n\\r\\f]"
    comment = "--[^\\n\\r]*"
    return re.compile(f"(?:{horizontal}|{comment})*+[\\n\\r](?:{space}|{comment}[\\n\\r])*+'")


_CONTINUATION = {False: _continuation(False), True: _continuation(True)}


def postgres(sql: str, *, standard_strings: bool = True, vertical_tab: bool = False) -> list[Span]:
    """The spans of ``sql`` as PostgreSQL reads it: ``standard_strings`` is the session's
    ``standard_conforming_strings`` (off: a backslash escapes in ``'...'`` too); ``vertical_tab``
    whether ``\\v`` is a space (PostgreSQL 16 and later)."""
    space = " \t\n\r\f\v" if vertical_tab else " \t\n\r\f"
    spaces = re.compile(f"[{re.escape(space)}]+")
    continuation = _CONTINUATION[vertical_tab]
    spans: list[Span] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        nxt = sql[i + 1] if i + 1 < n else ""
        kind: SpanKind = "code"
        j: int | None
        if c in space:
            kind, j = "space", _end(spaces.match(sql, i), n)
        elif c == "-" and nxt == "-":
            kind, j = "comment", min(_find(sql, "\n", i, n), _find(sql, "\r", i, n))
        elif c == "/" and nxt == "*":
            kind, j = "comment", _nested_comment(sql, i + 2, n)
        elif c == '"':
            kind, j = "name", _quoted(sql, i + 1, '"', False)
        elif c in "uU" and nxt == "&" and sql.startswith('"', i + 2):
            kind, j = "name", _quoted(sql, i + 3, '"', False)
        elif (start := _pg_string_start(sql, i, c, nxt)) is not None:
            body, backslash = start
            escapes = backslash if backslash is not None else not standard_strings
            doubled = c not in "bBxX" or nxt != "'"  # B'..' and X'..' end at their next quote
            kind, j = "string", _pg_quoted(sql, body, escapes, doubled)
            while j is not None and (m := continuation.match(sql, j)) is not None:  # 'a' <line break> 'b': 'ab'
                j = _pg_quoted(sql, m.end(), escapes, doubled)
        elif c == "$":
            m = _DOLLAR.match(sql, i)
            if m is not None:
                kind, j = "string", _after(sql, m.group(), m.end(), n)
            else:
                j = _end(_PARAMETER.match(sql, i), n)
        elif (m := _PG_CODE.match(sql, i)) is not None:
            j = m.end()
        else:
            j = i + 1
        if j is None:  # a comment, a string or a name that never ends: the server reads no statement
            kind, j = "open", n
        spans.append(Span(kind, i, j))
        i = j
    return spans


# --------------------------------------------------------------------------- DuckDB

_DUCK_SPACES = frozenset(
    [chr(0xA0), *map(chr, range(0x2000, 0x200C)), chr(0x202F), chr(0x205F), chr(0x2060), chr(0x3000), chr(0xFEFF)]
)
"""The Unicode spaces DuckDB replaces with an ASCII space before it parses a statement."""


def duckdb(sql: str) -> list[Span]:
    """The spans of ``sql`` as DuckDB reads it: PostgreSQL's rules (its parser is PostgreSQL's) with
    ``\\v`` a space, after DuckDB's own pass over the text, which replaces the Unicode spaces of
    :data:`_DUCK_SPACES` with ASCII spaces wherever a simpler reading than its parser's finds them
    outside quotes (it knows ``'``, ``"``, dollar quotes and ``--``, not ``/* */`` nor backslash escapes).
    Such a space inside what the parser then reads as a string or a quoted name changes its value, and
    one in code splits what sqlglot reads as one name (U+200B, U+2060 and U+FEFF are no spaces to it):
    that place is a ``rewritten`` span, which :func:`disagreement` refuses."""
    spans = postgres(sql, standard_strings=True, vertical_tab=True)
    if _DUCK_SPACES.isdisjoint(sql):
        return spans
    for at in _duckdb_rewrites(sql):
        for s in spans:
            if s.start <= at < s.end and s.kind != "comment":
                return [*spans, Span("rewritten", at, at + 1)]
    return spans


def _duckdb_rewrites(sql: str) -> list[int]:
    """Where DuckDB's pass replaces a Unicode space (character offsets), following its reading of the
    text byte by byte: a quote runs to the same quote (doubled, it stays inside), ``$`` and a tag (letters
    or any byte past ASCII, then digits too) run to the same ``$tag$``, looked for from the opening's last
    ``$`` on, ``--`` runs to a line break, and the last two bytes of the text are never looked at."""
    data = sql.encode("utf-8")
    chars = [i for i, ch in enumerate(sql) for _ in range(len(ch.encode("utf-8")))]  # byte -> character
    n, pos, found = len(data), 0, []
    while pos + 2 < n:
        b = data[pos]
        if b >= 0xC2 and sql[chars[pos]] in _DUCK_SPACES and (pos == 0 or chars[pos - 1] != chars[pos]):
            found.append(chars[pos])
            pos += 1
        elif b in (0x22, 0x27):  # a quote, to the same quote; a doubled one stays inside
            pos += 1
            while pos + 1 < n and not (data[pos] == b and data[pos + 1] != b):
                pos += 2 if data[pos] == b else 1
            if pos + 1 >= n:
                break
            pos += 1
        elif b == 0x24 and (data[pos + 1] == 0x24 or _tag_start(data[pos + 1])):  # a dollar quote
            pos = start = pos + 1
            while pos + 2 < n and data[pos] != 0x24 and (_tag_start(data[pos]) or 0x30 <= data[pos] <= 0x39):
                pos += 1
            if pos + 2 >= n:
                break
            if data[pos] != 0x24:
                continue  # not a tag: that byte is read as any other
            tag = data[start:pos]
            close = _dollar_close(data, tag, pos)
            if close is None:
                break
            pos = close + len(tag) + 1  # its last $, which is read again
        elif b == 0x2D and data[pos + 1] == 0x2D:  # -- to a line break
            while pos < n and data[pos] not in (0x0A, 0x0D):
                pos += 1
        else:
            pos += 1
    return found


def _dollar_close(data: bytes, tag: bytes, pos: int) -> int | None:
    """Where DuckDB's pass finds ``$tag$`` closing a dollar quote, from ``pos`` on (None: nowhere)."""
    n = len(data)
    while pos + 2 < n:
        end = pos + len(tag) + 1
        if data[pos] == 0x24 and end < n and data[end] == 0x24 and data[pos + 1 : end] == tag:
            return pos
        pos += 1
    return None


def _tag_start(b: int) -> bool:
    return 0x41 <= b <= 0x5A or 0x61 <= b <= 0x7A or b >= 0x80


def _pg_string_start(sql: str, i: int, c: str, nxt: str) -> tuple[int, bool | None] | None:
    """Where a string literal's body begins if one starts at ``i``, and whether a backslash escapes in it
    (None: as ``standard_conforming_strings`` says)."""
    if c == "'":
        return i + 1, None
    if nxt == "'" and c in "eE":
        return i + 2, True
    if nxt == "'" and c in "nN":
        return i + 2, None
    if nxt == "'" and c in "bBxX":
        return i + 2, False
    if c in "uU" and nxt == "&" and sql.startswith("'", i + 2):
        return i + 3, False
    return None


def _pg_quoted(sql: str, i: int, backslash: bool, doubled: bool) -> int | None:
    """The end of a PostgreSQL string whose body starts at ``i`` (None: it never ends)."""
    n = len(sql)
    while i < n:
        c = sql[i]
        if backslash and c == "\\":
            i += 2
        elif c == "'":
            if doubled and sql.startswith("'", i + 1):
                i += 2
            else:
                return i + 1
        else:
            i += 1
    return None


def _nested_comment(sql: str, i: int, n: int) -> int | None:
    """The end of a PostgreSQL block comment whose body starts at ``i`` (they nest; None: it never ends)."""
    depth = 1
    while i < n:
        if sql.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif sql.startswith("*/", i):
            depth, i = depth - 1, i + 2
            if not depth:
                return i
        else:
            i += 1
    return None


# --------------------------------------------------------------------------- shared


def _end(m: re.Match[str] | None, n: int) -> int:
    return n if m is None else m.end()


def _find(sql: str, what: str, i: int, n: int) -> int:
    """Where ``what`` next occurs from ``i`` (the end of the text when it does not)."""
    k = sql.find(what, i)
    return n if k < 0 else k


def _after(sql: str, what: str, i: int, n: int) -> int | None:
    """Just past the next ``what`` from ``i`` (None when there is none: the text ends open)."""
    k = sql.find(what, i)
    return None if k < 0 else k + len(what)


def _quoted(sql: str, i: int, quote: str, backslash: bool) -> int | None:
    """The end of a quoted text whose body starts at ``i`` (None: it never ends): a doubled quote is the
    quote itself, and a backslash escapes the next character when ``backslash``."""
    n = len(sql)
    while i < n:
        c = sql[i]
        if backslash and c == "\\":
            i += 2
        elif c == quote:
            if sql.startswith(quote, i + 1):
                i += 2
            else:
                return i + 1
        else:
            i += 1
    return None


Lexeme = tuple[str, int, int]
"""sqlglot's reading of one token: its kind (``code``, ``string``, ``name``, ``comment`` for a hint), its
start and its end (exclusive); see :func:`rose_sql.sql.lexemes`."""
_SPACE = re.compile(r"\s")


def disagreement(sql: str, server: Sequence[Span], reading: Sequence[Lexeme], engine: str) -> str | None:
    """Why ``engine`` and sqlglot read ``sql`` differently (None: they read the same spaces, comments,
    strings, quoted names and code)."""
    for s in server:
        if s.kind == "executable":
            return f"an executable comment at character {s.start + 1} (/*! ... */): {engine} runs what it holds"
        if s.kind == "rewritten":
            return (
                f"{engine} replaces the U+{ord(sql[s.start]):04X} at character {s.start + 1} with a space before it "
                "reads the text, where sqlglot reads it as part of a name or a quoted text"
            )
        if s.kind == "open":
            return (
                f"a comment, string or quoted name that never ends, from character {s.start + 1}: {engine} reads "
                "no statement there"
            )
    n = len(sql)
    theirs = bytearray(n)  # code, unless a span says otherwise
    for s in server:
        if s.kind != "code":
            theirs[s.start : s.end] = bytes([_LABEL[s.kind]]) * (s.end - s.start)
    ours = bytearray(b"\x01" * n)  # what no token covers, sqlglot skipped
    for kind, start, end in reading:
        if kind == "code" and end - start > 2 and _SPACE.search(sql, start, end):  # ORDER BY: one token over a space
            ours[start:end] = bytes(1 if ch.isspace() else 0 for ch in sql[start:end])
        else:
            ours[start:end] = bytes([_LABEL[kind]]) * (end - start)
    theirs_skipped = theirs.replace(b"\x02", b"\x01")  # a comment or a space: skipped either way
    ours_skipped = ours.replace(b"\x02", b"\x01")
    if theirs_skipped != ours_skipped:
        at = next(i for i in range(n) if theirs_skipped[i] != ours_skipped[i])
        return _differs(sql, at, theirs[at], ours[at], engine)
    for s in server:  # a character of code that sqlglot takes for a space inside a token (ORDER\u00a0BY)
        if s.kind == "code" and (m := _SPACE.search(sql, s.start, s.end)) is not None:
            return _differs(sql, m.start(), 0, 1, engine)
    quoted = {(s.start, s.end, s.kind) for s in server if s.kind in ("string", "name")}
    read = {(start, end, kind) for kind, start, end in reading if kind in ("string", "name")}
    if quoted != read:
        at = min(start for start, _, _ in quoted ^ read)
        return (
            f"{engine} and sqlglot (which the policy reads) end a quoted string or name at different places "
            f"from character {at + 1}: the policy cannot check what {engine} would run"
        )
    return None


def _differs(sql: str, at: int, theirs: int, ours: int, engine: str) -> str:
    ch = sql[at]
    shown = f"{ch!r}" if ch.isprintable() and not ch.isspace() else f"U+{ord(ch):04X} {unicodedata.name(ch, '')}"
    said = _SKIPPED[ch.isspace()] if ours == 1 else _SAID[ours]  # sqlglot skips spaces and comments alike
    return (
        f"{engine} and sqlglot (which the policy reads) read this text differently at character {at + 1} "
        f"({shown}): {_SAID[theirs]} to {engine}, {said} to sqlglot; the policy cannot check what {engine} "
        "would run"
    )


def refusal(sql: str, dialect: str, lexer: Callable[[str], list[Span]], engine: str) -> str | None:
    """Why the policy may not check ``sql`` for ``engine``, whose lexer is ``lexer``: the two read it
    differently (None: they read it alike, or sqlglot cannot read it, which the policy refuses itself)."""
    reading = lexemes(sql, dialect)
    if reading is None:
        return None
    return disagreement(sql, lexer(sql), reading, engine)
