"""The values an item takes from a parsed input file, checked one by one.

Each function takes the value, the file, where the value sits (line, index or key) and the field's
name, and returns the value an :class:`~rose_sql.items.load.Item` may hold, or raises
:class:`~rose_sql.errors.InputError` saying which field of which line is wrong and why. Text must be
text (a number is not a question), ids are strings or integers, a ``db_id`` names a folder inside
``--db-root``, and no text but SQL may hold a NUL or a lone surrogate (records are written as UTF-8).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rose_sql.errors import InputError

_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")
_NOT_DB_NAME = re.compile(r"[\x00-\x1f\x7f/\\]")


def kind(value: Any) -> str:
    """What a JSON value is, in JSON's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def clean(value: str, path: Path, where: str | int, name: str) -> str:
    """The string itself, if it holds no NUL and no lone surrogate."""
    bad = _BAD_CHAR.search(value)
    if bad:
        what = "a NUL character" if bad.group() == "\x00" else f"an unpaired surrogate \\u{ord(bad.group()):04x}"
        raise InputError(path, f"field {name!r} contains {what}", where=where)
    return value


def text(value: Any, path: Path, where: str | int, name: str) -> str | None:
    """A text field: a string (checked) or null."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(path, f"field {name!r} must be text, not {kind(value)}", where=where)
    return clean(value, path, where, name)


def opt_text(value: Any, path: Path, where: str | int, name: str) -> str | None:
    """A text field where blank means absent."""
    found = text(value, path, where, name)
    return found if found and found.strip() else None


def sql(value: Any, path: Path, where: str | int, name: str) -> str | None:
    """SQL text or null; a bare number (some systems wrote ``0`` for no answer) is read as its text.

    SQL is not cleaned: a NUL or a lone surrogate in a query is the query's own problem, and the
    sandbox records it on the item like any other query that cannot run.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if value is None or isinstance(value, str):
        return value
    raise InputError(path, f"field {name!r} must be text, not {kind(value)}", where=where)


def opt_sql(value: Any, path: Path, where: str | int, name: str) -> str | None:
    """Gold SQL where blank means absent."""
    found = sql(value, path, where, name)
    return found if found and found.strip() else None


def item_id(value: Any, path: Path, where: str | int, name: str) -> int | str:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        if not value.strip():
            raise InputError(path, f"field {name!r} is empty; an id must name the question", where=where)
        return clean(value, path, where, name)
    raise InputError(path, f"field {name!r} must be a string or an integer, not {kind(value)}", where=where)


def db_id(value: Any, path: Path, where: str | int, name: str = "db_id") -> str:
    """A database name: ``<db-root>/<db_id>/<db_id>.sqlite`` must stay inside ``--db-root``."""
    if not isinstance(value, str):
        raise InputError(path, f"field {name!r} must be text, not {kind(value)}", where=where)
    db_id = value.strip()
    if not db_id or db_id in (".", "..") or _NOT_DB_NAME.search(db_id) or _BAD_CHAR.search(db_id):
        raise InputError(path, f"{name} {value[:80]!r} is not a database folder name", where=where)
    return db_id


def pick(obj: dict[str, Any], names: Iterable[str], path: Path, where: str | int) -> Any:
    for name in names:
        if name in obj:
            return obj[name]
    raise InputError(path, f"missing field {' or '.join(repr(n) for n in names)}", where=where)


def name_of(obj: dict[str, Any], names: tuple[str, ...]) -> str:
    return next((n for n in names if n in obj), names[0])
