"""The demo's inputs: its database (built from SQL text) and its annotated items.

Everything here is written for ROSE-SQL: a made-up amateur cycling league (``schema.sql``,
``data.sql``) and 40 questions with gold and predicted SQL (``items.json``), each annotated with
what is going on (``kind``, ``note``) and what an expert would say (``expert``).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

from rose_sql.engines.sqlite import connect_read_only
from rose_sql.errors import UsageError
from rose_sql.sql import quote_identifier

DB_ID = "cycling_league"
"""The demo database's id: it lives at ``<db root>/cycling_league/cycling_league.sqlite``."""

Expert = Literal["correct", "incorrect", "ambiguous"]

KINDS: dict[str, str] = {
    "correct": "plainly correct",
    "wrong": "plainly wrong",
    "column_order": "column order swapped",
    "extra_column": "extra identifying column",
    "ratio_percentage": "fraction vs percentage",
    "int_float": "1 vs 1.0",
    "text_number": "'2100' vs 2100",
    "multiplicity": "duplicates in a listing",
    "order": "order reversed",
    "tie": "tie at the maximum",
    "coincidence": "coincidental match",
    "both_empty": "both results empty",
    "wrong_gold": "wrong gold",
    "gold_copied": "copies a wrong gold",
    "ambiguous": "ambiguous question",
    "fails": "does not execute",
    "timeout": "too slow",
    "gold_fails": "gold does not execute",
}
"""Each kind of demo item and the short label the demo prints for it."""


@dataclass(frozen=True, slots=True)
class DemoItem:
    """One demo question with its gold and predicted SQL, and what an expert says about it."""

    id: int
    """Position in the demo (1-based)."""
    kind: str
    """What the item demonstrates (a key of :data:`KINDS`)."""
    question: str
    """The question."""
    evidence: str | None
    """External knowledge in BIRD's style, if any."""
    gold_sql: str
    """The reference SQL (wrong on purpose for some kinds)."""
    pred_sql: str
    """The predicted SQL."""
    expert: Expert
    """The expert's verdict on the prediction; ``ambiguous``: acceptable under one reasonable reading."""
    note: str
    """What is going on, in a sentence or two."""

    @property
    def accepted(self) -> bool:
        """Whether the expert accepts the prediction (correct, or a reasonable reading of an ambiguous question)."""
        return self.expert != "incorrect"

    @property
    def label(self) -> str:
        """The short label of the item's kind."""
        return KINDS[self.kind]


def _resource_text(name: str) -> str:
    return resources.files("rose_sql.demo").joinpath(name).read_text(encoding="utf-8")


def _demo_item(obj: dict[str, Any]) -> DemoItem:
    if obj["kind"] not in KINDS or obj["expert"] not in get_args(Expert):
        raise ValueError(f"demo item {obj['id']}: unknown kind {obj['kind']!r} or verdict {obj['expert']!r}")
    return DemoItem(
        id=int(obj["id"]),
        kind=obj["kind"],
        question=obj["question"],
        evidence=obj.get("evidence"),
        gold_sql=obj["gold_sql"],
        pred_sql=obj["pred_sql"],
        expert=obj["expert"],
        note=obj["note"],
    )


def load_demo_items() -> list[DemoItem]:
    """The demo's annotated items, in order."""
    return [_demo_item(obj) for obj in json.loads(_resource_text("items.json"))]


def build_database(path: Path) -> Path:
    """Build the demo database at ``path`` from ``schema.sql`` and ``data.sql``, replacing any old one.

    The script holds only literal values, so every build gives the same bytes.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.executescript(_resource_text("schema.sql") + _resource_text("data.sql"))
        conn.commit()
    finally:
        conn.close()
    return path


def table_sizes(db: Path) -> dict[str, int]:
    """Rows per table of a database, in creation order."""
    conn = connect_read_only(db)
    try:
        names = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
        return {n: conn.execute(f"SELECT COUNT(*) FROM {quote_identifier(n)}").fetchone()[0] for n in names}
    finally:
        conn.close()


def _write_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    path.write_text(text, encoding="utf-8")


def write_items(items: list[DemoItem], path: Path) -> None:
    """Write the items in the ``generic`` JSONL format (what ``rose run`` reads)."""
    rows = [
        {
            "id": it.id,
            "db_id": DB_ID,
            "question": it.question,
            "evidence": it.evidence,
            "gold_sql": it.gold_sql,
            "pred_sql": it.pred_sql,
        }
        for it in items
    ]
    _write_jsonl(rows, path)


def write_labels(items: list[DemoItem], path: Path) -> None:
    """Write the expert's verdicts and the notes, one JSON line per item id."""
    _write_jsonl([{"id": it.id, "kind": it.kind, "expert": it.expert, "note": it.note} for it in items], path)


@dataclass(frozen=True, slots=True)
class DemoPaths:
    """Where the demo puts its files under its output folder."""

    out: Path
    """The output folder (``rose demo --out``)."""

    @property
    def db_root(self) -> Path:
        """Folder of databases: ``OUT/db``."""
        return self.out / "db"

    @property
    def db(self) -> Path:
        """The demo database: ``OUT/db/cycling_league/cycling_league.sqlite``."""
        return self.db_root / DB_ID / f"{DB_ID}.sqlite"

    @property
    def items(self) -> Path:
        """The items in the generic format: ``OUT/items.jsonl``."""
        return self.out / "items.jsonl"

    @property
    def labels(self) -> Path:
        """The expert's verdicts and notes: ``OUT/labels.jsonl``."""
        return self.out / "labels.jsonl"

    @property
    def runs(self) -> Path:
        """Output folder of the run: ``OUT/runs`` (the records land in ``OUT/runs/items/``)."""
        return self.out / "runs"

    @property
    def run_dir(self) -> Path:
        """The run's folder for the items file: ``OUT/runs/items``."""
        return self.runs / self.items.stem

    def _ours(self) -> list[Path]:
        return [self.db, self.items, self.run_dir / "records.jsonl", self.run_dir / "summary.json"]

    def prepare(self) -> None:
        """Create the output folder and remove what an earlier demo wrote there (and nothing else).

        ``labels.jsonl`` marks a folder the demo wrote; without it, existing files of the same names
        are someone else's and are left alone (:class:`~rose_sql.errors.UsageError`).
        """
        if self.out.exists() and not self.out.is_dir():
            raise UsageError(f"--out {self.out} is a file, not a folder")
        if not self.labels.exists():
            foreign = [p for p in self._ours() if p.exists()]
            if foreign:
                raise UsageError(f"{foreign[0]} exists and was not written by rose demo; choose another --out")
        self.out.mkdir(parents=True, exist_ok=True)
        for old in self._ours():
            old.unlink(missing_ok=True)
