"""Labels: which gold SQL and database a completion is checked against."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rose_sql.engines import Database, Source
from rose_sql.errors import LabelError, UsageError


@dataclass(frozen=True, slots=True)
class Gold:
    """Where a completion is checked: the gold SQL and the database."""

    sql: str
    """The reference SQL."""
    db: Database
    """The database."""


_DB_ID = re.compile(r"^[\w.-]+$")


def parse_label(label: Any, db_root: Source | None = None, *, confine: bool = False) -> Gold:
    """Read a label: a mapping or JSON object ``{"gold_sql", "db_id" | "db_path"}``, or ``SQL<TAB>db_id``.

    The tab form takes either order (Spider's ``dev_gold.sql`` lines are ``SQL<TAB>db_id``): the
    part that is a bare name is the db_id. ``db_id`` resolves to its database in ``db_root``
    (:meth:`Source.locate`: ``<folder>/<db_id>/<db_id>.sqlite``, or a URL's database for that db_id); a
    ``db_path`` names a SQLite file, a relative one under ``db_root``'s folder. With ``confine``, the
    file must lie under ``db_root`` (the server's rule: clients cannot name arbitrary files). Raises
    :class:`LabelError`, or :class:`UsageError` for a ``db_id`` without a ``db_root`` (the caller's setup,
    not the label).
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


def resolve_db(db_id: Any, db_path: Any, db_root: Source | None, *, confine: bool = False) -> Database:
    """The database named by ``db_path`` or by ``db_id`` in ``db_root`` (a folder or a URL)."""
    named = isinstance(db_id, str) and _DB_ID.match(db_id) is not None and db_id not in (".", "..")
    folder = db_root.folder_path if db_root is not None else None
    if db_root is not None and folder is None:  # a URL's databases are named by db_id
        if named:
            return db_root.locate(db_id)
        raise LabelError(f"label names no db_id, which {db_root.shown} needs (db_path names SQLite files only)")
    if isinstance(db_path, str | Path) and str(db_path):
        path = Path(db_path) if folder is None or Path(db_path).is_absolute() else folder / db_path
        if confine and (folder is None or not path.resolve().is_relative_to(folder.resolve())):
            raise LabelError("db_path must lie under the server's --db-root")
        return Database.file(path)
    if named:
        if db_root is None:
            raise UsageError(f"db_id {db_id!r} needs a db_root (the folder holding <db_id>/<db_id>.sqlite)")
        return db_root.locate(db_id)
    raise LabelError("label names no database: give db_id (a bare name) or db_path")
