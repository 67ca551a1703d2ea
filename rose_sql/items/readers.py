"""Reading untrusted input files: bounded, decoded and parsed, every failure an InputError.

The loaders in :mod:`rose_sql.items.load` read prediction and gold files only through these functions,
so whatever a file holds, reading it either returns plain values or raises
:class:`~rose_sql.errors.InputError` naming the file and the line (or the JSON index and key):

- size: at most ``max_bytes`` are read (:data:`rose_sql.config.MAX_INPUT_BYTES` by default);
- bytes: compressed files, databases and UTF-16 are named as such; a NUL byte or text that is not
  UTF-8 is reported at its line;
- JSON: ``NaN``, infinities, numbers too large for a float or an int, keys repeated in one object
  and nesting deeper than the parser's stack are errors, never values;
- CSV: read strictly (an unterminated quote is an error, not the rest of the file in one field);
  every row has exactly the header's fields; column names are unique; a field longer than the
  csv module's limit (131,072 characters) is an error.

Parsing costs the same as ``json.loads`` or ``csv.reader`` on the happy path; locating a problem
re-reads the file, on the error path only.

The files of finished runs (``records.jsonl``, ``summary.json``, ``manifest.json``, labels, ids and scores
files) are read through :func:`read_lines` (line by line, each line at most a cap: memory bounded whatever the
file's size) and :func:`read_capped` (a whole small file, at most a cap), which name the file and line of
what they refuse.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from rose_sql.errors import InputError

_MAGIC = (
    (b"\x1f\x8b", "gzip-compressed"),
    (b"PK\x03\x04", "a zip archive"),
    (b"BZh", "bzip2-compressed"),
    (b"\xfd7zXZ\x00", "xz-compressed"),
    (b"SQLite format 3\x00", "a SQLite database"),
    (b"%PDF-", "a PDF document"),
    (b"\xff\xfe", "UTF-16 text (save it as UTF-8)"),
    (b"\xfe\xff", "UTF-16 text (save it as UTF-8)"),
)


def read_text(path: Path, max_bytes: int) -> str:
    """The file as text: at most ``max_bytes`` bytes of UTF-8 without NUL bytes; a BOM is dropped and
    line ends become ``\n``."""
    try:
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except IsADirectoryError:
        raise InputError(path, "is a folder, not a file") from None
    except OSError as e:
        raise InputError(path, f"cannot read ({e.strerror or e})") from None
    if len(data) > max_bytes:
        raise InputError(
            path,
            f"{_mib(path.stat().st_size)}, larger than the input limit of {_mib(max_bytes)}; if the file is right, "
            "raise the limit (rose run --max-input-mb, or load_items(..., max_bytes=...))",
        )
    for magic, what in _MAGIC:
        if data.startswith(magic):
            raise InputError(path, f"this is {what}, not a text file", where=1)
    data = data.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark
    nul = data.find(b"\x00")
    if nul >= 0:
        line, col = _line_col(data, nul)
        raise InputError(path, f"NUL byte at column {col}: a binary or corrupted file, not text", where=line)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line, col = _line_col(data, e.start)
        raise InputError(path, f"not UTF-8 text (byte 0x{data[e.start]:02x} at column {col})", where=line) from None
    if "\r" in text:  # universal newlines, as open() reads text
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def read_lines(path: Path, max_line_bytes: int, *, block: int = 2**20) -> Iterator[tuple[int, bytes, bool]]:
    """The lines of a file as (line number from 1, its bytes without the newline, whether a newline ends it),
    read in blocks: at most ``max_line_bytes + block`` bytes are held at once, whatever the file's size.

    Raises :class:`~rose_sql.errors.InputError` naming the file and line of a line longer than
    ``max_line_bytes`` (as soon as it is past the cap: the rest of it is never read), and for a file that
    cannot be read (missing, a folder, not a regular file: a FIFO would block)."""
    f = _open_regular(path)
    with f:
        buf = bytearray()
        lineno = 1
        while chunk := f.read(block):
            buf += chunk
            start = 0
            while (nl := buf.find(b"\n", start)) != -1:
                if nl - start > max_line_bytes:
                    raise _too_long(path, lineno, max_line_bytes)
                yield lineno, bytes(buf[start:nl]), True
                lineno += 1
                start = nl + 1
            del buf[:start]
            if len(buf) > max_line_bytes:
                raise _too_long(path, lineno, max_line_bytes)
        if buf:
            yield lineno, bytes(buf), False


def read_capped(path: Path, max_bytes: int, what: str) -> bytes:
    """A whole file of at most ``max_bytes`` bytes (``what`` it is, for the message). Raises
    :class:`~rose_sql.errors.InputError` naming the file when it is larger (read no further) or unreadable."""
    f = _open_regular(path)
    with f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputError(
            path, f"larger than {_mib(max_bytes)}, more than {what} holds: the file was edited or is not {what}"
        )
    return data


def _open_regular(path: Path) -> BinaryIO:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except OSError as e:
        raise InputError(path, f"cannot read ({e.strerror or e})") from None
    if stat.S_ISDIR(mode):
        raise InputError(path, "is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise InputError(path, "is not a regular file (a pipe or a device): give a file")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # never blocks on a file swapped for a FIFO
        return os.fdopen(fd, "rb")
    except OSError as e:
        raise InputError(path, f"cannot read ({e.strerror or e})") from None


def _too_long(path: Path, lineno: int, cap: int) -> InputError:
    return InputError(
        path,
        f"a line longer than {_mib(cap)}, more than any line of this file holds: the file was edited or corrupted",
        where=lineno,
    )


def _mib(n: int) -> str:
    return f"{n / 2**20:.4g} MiB" if n >= 2**20 else f"{n:,} bytes"


def _line_col(data: bytes, offset: int) -> tuple[int, int]:
    """1-based line and column (in bytes) of a byte offset."""
    return data.count(b"\n", 0, offset) + 1, offset - data.rfind(b"\n", 0, offset)


def lines(text: str) -> list[str]:
    """Lines split at ``\\n`` only (never at U+2028 or form feeds); a final newline adds no line."""
    out = text.split("\n")
    return out[:-1] if text.endswith("\n") else out


# --------------------------------------------------------------------------- JSON


class _Reject(ValueError):
    """Raised from a parser hook: the value is not one the loaders accept."""


class _Bad:
    """Where a rejected value stood, when the file is parsed again to find it."""

    def __init__(self, what: str, key: str | None = None) -> None:
        self.what = what
        self.key = key
        """The repeated key, for a repeated key."""


def _no_constant(name: str) -> Any:
    raise _Reject(name)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Reject(text)
    return value


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _Reject("repeated key")
    return obj


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite, object_pairs_hook=_unique)


def _marking_unique(pairs: list[tuple[str, Any]]) -> Any:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return _Bad(f"the key {key[:80]!r} occurs twice in one object (a JSON reader keeps only one)", key)
        seen.add(key)
    return dict(pairs)


def _marking_int(text: str) -> Any:
    digits = len(text.lstrip("-"))
    return _Bad(f"an integer of {digits} digits is too long") if digits > sys.get_int_max_str_digits() else int(text)


def _marking_float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else _Bad(f"{text[:40]} is beyond the range of a number")


_MARKING = json.JSONDecoder(
    parse_constant=lambda name: _Bad(f"{name} is not a number JSON allows"),
    parse_float=_marking_float,
    parse_int=_marking_int,
    object_pairs_hook=_marking_unique,
)


def parse_json(text: str, path: Path, line: int | None = None) -> Any:
    """One JSON document; ``line`` is the line it sits on (JSONL), reported instead of the JSON path.

    Errors are reported at the line (a syntax error, deep nesting) or at the index and key of the
    offending value (``NaN``, infinities, huge numbers, a repeated key).
    """
    try:
        return _decode(_DECODER, text, path, line)
    except ValueError:  # a hook's _Reject, or an integer past Python's digit limit
        pass
    found = _find_bad(_decode(_MARKING, text, path, line))  # again, to find where; a syntax error after it counts
    if found is None:  # cannot happen: the same text and a hook that marks what the other rejected
        raise InputError(path, "a value JSON readers disagree on", where=line)
    keys, bad = found
    where, field = _place(keys, line)
    if where is None and bad.key is not None:  # a key repeated at the top: its second occurrence's line
        seen = [m.start() for m in re.finditer(re.escape(json.dumps(bad.key)) + r"\s*:", text)]
        where = text.count("\n", 0, seen[1]) + 1 if len(seen) > 1 else None
    if where is None:  # the whole document is the bad value: the line it starts on
        where = text.count("\n", 0, len(text) - len(text.lstrip())) + 1
    raise InputError(path, f"{field}{bad.what}", where=where)


def _decode(decoder: json.JSONDecoder, text: str, path: Path, line: int | None) -> Any:
    try:
        return decoder.decode(text)
    except json.JSONDecodeError as e:
        hint = ""
        if e.msg == "Extra data" and line is None:
            hint = "; one JSON value per line is JSON Lines: name the file .jsonl"
        raise InputError(path, f"invalid JSON: {e.msg} (column {e.colno}){hint}", where=line or e.lineno) from None
    except RecursionError:
        depth, at = _deepest(text)
        at_line = text.count("\n", 0, at) + 1 if line is None else line
        message = f"JSON nested {depth} levels deep, more than the parser can hold"
        raise InputError(path, message, where=at_line) from None


def _find_bad(data: Any) -> tuple[list[int | str], _Bad] | None:
    """The JSON path to the first marked value, depth first, without recursion."""
    stack: list[tuple[list[int | str], Any]] = [([], data)]
    while stack:
        keys, value = stack.pop()
        if isinstance(value, _Bad):
            return keys, value
        children: list[tuple[int | str, Any]]
        if isinstance(value, dict):
            children = list(value.items())
        elif isinstance(value, list):
            children = list(enumerate(value))
        else:
            continue
        stack.extend(([*keys, k], v) for k, v in reversed(children))
    return None


def _place(keys: list[int | str], line: int | None) -> tuple[str | int | None, str]:
    """Where a value is: the line (JSONL) or the top-level index or key, and the field path below it."""
    if line is None and keys:
        head, keys = keys[0], keys[1:]
        where: str | int | None = f"[{head}]" if isinstance(head, int) else repr(head)
    else:
        where = line
    field = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys).lstrip(".")
    return where, (f"field {field!r}: " if field else "")


_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _deepest(text: str) -> tuple[int, int]:
    """The deepest nesting of brackets (outside strings) and the offset where it is first reached."""
    depth = best = at = 0
    for m in _STRUCTURE.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > best:
                best, at = depth, m.start()
        elif c in "]}":
            depth -= 1
    return best, at


def json_lines(text: str, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of a JSONL text; every line must be an object."""
    for lineno, line in enumerate(lines(text), start=1):
        if not line.strip():
            continue
        obj = parse_json(line, path, lineno)
        if not isinstance(obj, dict):
            raise InputError(path, "each line must be a JSON object", where=lineno)
        yield lineno, obj


# --------------------------------------------------------------------------- CSV


def read_csv(text: str, path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Header (names stripped) and ``(line, row)`` for each record; blank lines are skipped.

    The line of a record is the line it starts on (a quoted field may span lines).
    """
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    start = 1
    header: list[str] | None = None
    rows: list[tuple[int, dict[str, str]]] = []
    try:
        for fields in reader:
            if header is None:
                header = [h.strip() for h in fields]
                _check_header(header, path, start)
            elif fields:
                if len(fields) != len(header):
                    raise InputError(
                        path, f"{len(fields)} fields but the header has {len(header)} ({header})", where=start
                    )
                rows.append((start, dict(zip(header, fields, strict=True))))
            start = reader.line_num + 1
    except csv.Error as e:
        raise InputError(path, f"invalid CSV: {_csv_reason(str(e))}", where=start) from None
    if header is None:
        raise InputError(path, "empty CSV file: no header")
    return header, rows


def _check_header(header: list[str], path: Path, line: int) -> None:
    seen: set[str] = set()
    for name in header:
        if not name:
            raise InputError(path, f"empty column name in the header {header}", where=line)
        if name in seen:
            raise InputError(path, f"column {name!r} occurs twice in the header", where=line)
        seen.add(name)


def _csv_reason(message: str) -> str:
    if "field larger than field limit" in message:
        return (
            f"a field longer than {csv.field_size_limit():,} characters (the CSV reader's limit): "
            "an unterminated quote, or not a CSV file"
        )
    if "unexpected end of data" in message:
        return "a quoted field is never closed (an unterminated quote runs to the end of the file)"
    return message
