"""Labels: which gold SQL and database file a completion is checked against."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rose_sql.engines.source import Remote, Source
from rose_sql.engines.source import parse as parse_source
from rose_sql.errors import LabelError, UsageError
from rose_sql.items import db_file


@dataclass(frozen=True, slots=True)
class Gold:
    """Where a completion is checked: the gold SQL and the database file."""

    sql: str
    """The reference SQL."""
    db: Path | Remote
    """The SQLite file, or the database of another engine (a URL's)."""


_DB_ID = re.compile(r"^[\w.-]+$")


def parse_label(label: Any, db_root: Path | str | Source | None = None, *, confine: bool = False) -> Gold:
    """Read a label: a mapping or JSON object ``{"gold_sql", "db_id" | "db_path"}``, or ``SQL<TAB>db_id``.

    The tab form takes either order (Spider's ``dev_gold.sql`` lines are ``SQL<TAB>db_id``): the
    part that is a bare name is the db_id. ``db_id`` resolves to ``<db_root>/<db_id>/<db_id>.sqlite``,
    or, when ``db_root`` is a URL (``postgresql://``, ``mysql://``, ``duckdb://``), to its database for
    that db_id; a relative ``db_path`` to ``<db_root>/<db_path>``. With ``confine``, the file must lie under
    ``db_root`` (the server's rule: clients cannot name arbitrary files). Raises :class:`LabelError`,
    or :class:`UsageError` for a ``db_id`` without a ``db_root`` (the caller's setup, not the label).
    """
    if isinstance(label, str) and label.lstrip().startswith("{"):
        try:
            label = json.loads(label)
        except json.JSONDecodeError as e:
            raise LabelError(f"label is not valid JSON: {e}") from None
    if isinstance(label, Mapping):
        sql = label.get("gold_sql", label.get("sql"))
        db_id, db_path = label.get("db_id"), label.get("db_path")
    elif isinstance(label, str) and "\t" in label:
        sql, db_id = _split_tab(label.strip())
        db_path = None
    else:
        raise LabelError('label must be {"gold_sql": ..., "db_id": ...} (JSON) or "SQL<TAB>db_id"')
    if not isinstance(sql, str) or not sql.strip():
        raise LabelError("label has no gold_sql")
    return Gold(sql, resolve_db(db_id, db_path, db_root, confine=confine))


def _split_tab(label: str) -> tuple[str, str]:
    head, _, tail = label.rpartition("\t")
    if _DB_ID.match(tail.strip()):
        return head, tail.strip()
    head, _, tail = label.partition("\t")
    if _DB_ID.match(head.strip()):
        return tail, head.strip()
    raise LabelError("a tab-separated label needs a bare db_id on one side of the tab")


def resolve_db(
    db_id: Any, db_path: Any, db_root: Path | str | Source | None, *, confine: bool = False
) -> Path | Remote:
    """The database named by ``db_path`` or by ``db_id`` under ``db_root`` (a folder or a URL)."""
    if isinstance(db_root, str) and "://" in db_root:
        db_root = parse_source(db_root)
    if isinstance(db_root, Source):
        if isinstance(db_id, str) and _DB_ID.match(db_id) and db_id not in (".", ".."):
            return db_root.locate(db_id)
        raise LabelError(f"label names no db_id, which {db_root.shown} needs (db_path names SQLite files only)")
    root = Path(db_root) if db_root is not None else None
    if isinstance(db_path, str | Path) and str(db_path):
        path = Path(db_path) if root is None or Path(db_path).is_absolute() else root / db_path
    elif isinstance(db_id, str) and _DB_ID.match(db_id) and db_id not in (".", ".."):
        if root is None:
            raise UsageError(f"db_id {db_id!r} needs a db_root (the folder holding <db_id>/<db_id>.sqlite)")
        path = db_file(root, db_id)
    else:
        raise LabelError("label names no database: give db_id (a bare name) or db_path")
    if confine and (root is None or not path.resolve().is_relative_to(root.resolve())):
        raise LabelError("db_path must lie under the server's --db-root")
    return path
