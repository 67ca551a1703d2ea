"""What the judges are shown: schema, column descriptions, example values, SQL and results.

Faithful and bounded: the whole schema for small databases, else the tables the queries touch and
their foreign-key neighbours; BIRD column descriptions where the database folder has them; a few
example values per column; SQL with comments stripped; results with column names, the total row
count, the first rows with long cells cut, and an explicit note of what was left out. Everything
that comes from a prediction or from the data is fenced as data, between markers keyed by a secret
(:class:`Fences`), so it cannot pose as instructions nor close its own fence.

Laid out for the providers' prefix caching: what many items share comes first (the stage's system
prompt, then the database's schema block, fenced under markers that depend only on its text), and the
item's own text last (question, SQL, results, evidence). The schema is whole per database up to
``small_schema_chars`` (12,000 characters, about 3,000 tokens), so every item on such a database sends
the same prefix; measured on the databases at hand, that is all of them (the 19 Spider dev databases
here at most 5,426 characters, BIRD's superhero 6,769, KaggleDBQA's at most 1,109). Above it, the
touched tables are kept rather than the whole schema: at OpenAI's cached rate (half the input price) a
whole schema costs less only while it is under twice the trimmed one, and a judge reads a long schema
less carefully; items that touch the same tables still share that prefix.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import itertools
import json
import sqlite3
import threading
import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rose_sql.config import JudgeConfig
from rose_sql.engines.source import Remote
from rose_sql.engines.sqlite import connect_read_only
from rose_sql.execute import Execution
from rose_sql.sql import quote_identifier

NONCE_HEX = 16
"""Hex digits of a fence marker's nonce (64 bits)."""


def fence(name: str, text: str, key: bytes) -> str:
    """Wrap untrusted text in markers it cannot forge.

    The nonce is an HMAC of the block's name and text under ``key``, a secret the text never sees
    (:func:`rose_sql.judges.cache.fence_key`): the same text gets the same markers on every rerun
    (so the judge cache and the providers' prefix caching keep working), yet no text can predict
    its own closing marker. Should the text contain the nonce anyway, the next one is taken.
    """
    data = f"{name}\0{text}".encode("utf-8", "surrogatepass")
    for attempt in itertools.count():
        nonce = _nonce(key, data, attempt)
        if nonce not in text:
            return f"<<<DATA {name} {nonce}>>>\n{text}\n<<<END {name} {nonce}>>>"
    raise AssertionError("unreachable")  # pragma: no cover


def _nonce(key: bytes, data: bytes, attempt: int) -> str:
    salt = b"" if attempt == 0 else attempt.to_bytes(4, "big")
    return hmac.new(key, salt + data, hashlib.sha256).hexdigest()[:NONCE_HEX]


@dataclass(frozen=True, slots=True)
class Fences:
    """:func:`fence` under one secret: what builds a judge's messages is given one."""

    key: bytes = field(repr=False)
    """The secret (never written anywhere but the cache folder's ``fence.key``)."""

    def __call__(self, name: str, text: str) -> str:
        return fence(name, text, self.key)


@dataclass(frozen=True, slots=True)
class Table:
    """One table as the judges see it."""

    name: str
    ddl: str
    columns: tuple[str, ...]
    foreign: tuple[str, ...]  # tables this one references
    examples: dict[str, list[Any]]  # distinct short values among a column's first 50, in order
    descriptions: dict[str, str]


@dataclass(frozen=True, slots=True)
class Schema:
    """A database's tables, read once and shared by every item on it."""

    tables: dict[str, Table]
    engine: str = ""
    """What the judges must know of the engine (its name, version and the semantics that differ from
    SQLite's); empty on SQLite, whose schema text is as it always was."""

    def render(self, touched: AbstractSet[str], cfg: JudgeConfig) -> str:
        """The schema text: whole when small, else the touched tables and their FK neighbours."""
        text = self._render(touched, cfg)
        return f"{self.engine}\n\n{text}" if self.engine else text

    def _render(self, touched: AbstractSet[str], cfg: JudgeConfig) -> str:
        names = list(self.tables)
        examples = cfg.examples_per_column
        full = "\n\n".join(self._table_text(self.tables[n], examples) for n in names)
        if len(full) <= cfg.small_schema_chars or not touched:
            return full
        keep = {n for n in names if n.lower() in touched}
        for n in list(keep):
            keep |= {f for f in self.tables[n].foreign if f in self.tables}
        keep |= {n for n in names if any(f in keep for f in self.tables[n].foreign) and n.lower() in touched}
        shown = [n for n in names if n in keep]
        left = [n for n in names if n not in keep]
        text = "\n\n".join(self._table_text(self.tables[n], examples) for n in shown)
        return text + f"\n\n-- {len(left)} other tables not shown: {', '.join(left)}"

    @staticmethod
    def _table_text(t: Table, examples: int) -> str:
        lines = [t.ddl.strip().rstrip(";") + ";"]
        for col in t.columns:
            bits = []
            if col in t.descriptions:
                bits.append(t.descriptions[col])
            if t.examples.get(col):
                shown = t.examples[col][:examples]
                bits.append("e.g. " + ", ".join(json.dumps(v, ensure_ascii=False) for v in shown))
            if bits:
                lines.append(f"--   {col}: " + " | ".join(bits))
        return "\n".join(lines)


def _short(v: Any, limit: int = 60) -> Any:
    if isinstance(v, bytes):
        return f"<{len(v)} bytes>"
    if isinstance(v, str) and len(v) > limit:
        return v[:limit] + "…"
    return v


def _descriptions(db_dir: Path, table: str) -> dict[str, str]:
    """BIRD's ``database_description/<table>.csv``: column -> description (empty when absent)."""
    path = db_dir / "database_description" / f"{table}.csv"
    if not path.is_file():
        return {}
    raw = path.read_bytes()
    text = raw.decode("utf-8-sig", errors="replace") if raw[:3] == b"\xef\xbb\xbf" else raw.decode("latin-1")
    out = {}
    for row in csv.DictReader(text.splitlines()):
        row = {(k or "").strip().lower(): (v or "").strip() for k, v in row.items()}
        col = row.get("original_column_name", "")
        parts = [row.get("column_description", ""), row.get("value_description", "")]
        if row.get("column_name") and row.get("column_name", "").lower() != col.lower():
            parts.insert(0, f"({row['column_name']})")
        desc = " ".join(" ".join(p.split()) for p in parts if p)
        if col and desc:
            out[col] = desc[:400]
    return out


def read_schema(db: Path, *, deadline_s: float = 2.0) -> Schema:
    """Read a database's tables, keys and example values (trusted, fixed queries; read-only)."""
    conn = connect_read_only(db)
    conn.text_factory = lambda b: b.decode("utf-8", errors="replace")
    stop = time.monotonic() + deadline_s
    conn.set_progress_handler(lambda: time.monotonic() > stop, 10_000)
    try:
        rows = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        ).fetchall()
        tables = {}
        for name, ddl in rows:
            cols = tuple(r[1] for r in conn.execute(f"PRAGMA table_info({quote_identifier(name)})"))
            foreign = tuple(sorted({r[2] for r in conn.execute(f"PRAGMA foreign_key_list({quote_identifier(name)})")}))
            examples: dict[str, list[Any]] = {}
            for col in cols:
                try:
                    c, t = quote_identifier(col), quote_identifier(name)
                    sample = conn.execute(f"SELECT {c} FROM {t} WHERE {c} IS NOT NULL LIMIT 50").fetchall()
                except sqlite3.Error:
                    continue
                seen: list[Any] = []
                for (v,) in sample:
                    v = _short(v)
                    if v not in seen:
                        seen.append(v)
                examples[col] = seen  # how many are shown is the judges' config (Schema.render)
            tables[name] = Table(name, ddl or "", cols, foreign, examples, _descriptions(db.parent, name))
        return Schema(tables)
    finally:
        conn.close()


DIALECT_NOTES = {
    "postgres": (
        "integer / integer truncates (5 / 2 = 2); NULLs sort last ascending and first descending; = and LIKE "
        "are case-sensitive (ILIKE is not); unquoted names are folded to lower case; REAL is single precision; "
        "SUM and AVG of integers are exact decimals"
    ),
    "mysql": (
        "integer / integer is a decimal (5 / 2 = 2.5000; DIV truncates); NULLs sort first ascending and last "
        "descending; string comparison follows the column's collation (case-insensitive under the default ones); "
        "|| is OR unless PIPES_AS_CONCAT is set"
    ),
    "duckdb": (
        "integer / integer is a double (5 / 2 = 2.5; // truncates); NULLs sort last ascending and descending; "
        "= and LIKE are case-sensitive (ILIKE is not)"
    ),
}
"""Semantics of each engine that differ from SQLite's and change what a query returns."""


def read_engine_schema(db: Remote) -> Schema:
    """A database's tables, keys and example values read from its engine, and the engine's note."""
    from rose_sql.config import Config
    from rose_sql.engines.base import engine_for

    engine = engine_for(db.kind, Config())
    try:
        infos = engine.describe(db)
        version = engine.version(db)
    finally:
        engine.close()
    quote = quote_identifier if db.kind != "mysql" else (lambda n: "`" + n.replace("`", "``") + "`")
    tables = {
        t.name: Table(
            t.name,
            t.ddl(quote),
            tuple(c.name for c in t.columns),
            tuple(sorted({ref for _, ref, _ in t.foreign_keys})),
            {k: [_short(v) for v in vs] for k, vs in t.examples.items()},
            {},
        )
        for t in infos
    }
    note = f"-- Engine: {version} (SQL dialect {db.dialect}). {DIALECT_NOTES.get(db.dialect, '')}."
    return Schema(tables, note)


class Schemas:
    """Schemas read once per database, shared across items and threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._schemas: dict[Path | Remote, Schema] = {}

    def get(self, db: Path | Remote) -> Schema:
        with self._lock:
            if db not in self._schemas:
                self._schemas[db] = read_schema(db) if isinstance(db, Path) else read_engine_schema(db)
            return self._schemas[db]


def render_result(e: Execution | None, cfg: JudgeConfig) -> str:
    """A result as the judges see it: status, columns, total rows, the first rows, what was cut."""
    if e is None:
        return "(not executed)"
    if not e.ok or e.result is None:
        return f"(the query failed: {e.status}: {e.error})"
    r = e.result
    lines = [f"columns: {json.dumps(list(r.columns), ensure_ascii=False)}"]
    count = f"{r.row_count}" + ("" if r.count_exact else "+")
    shown = r.rows[: cfg.result_rows]
    lines.append(
        f"rows: {count} in total" + (f"; the first {len(shown)} are shown" if len(shown) < r.row_count else "")
    )
    cut = False
    for row in shown:
        cells = []
        for v in row:
            if isinstance(v, str) and len(v) > cfg.cell_chars:
                v, cut = v[: cfg.cell_chars] + f"…(+{len(v) - cfg.cell_chars} chars)", True
            elif isinstance(v, bytes):
                v = f"<blob of {len(v)} bytes>"
            cells.append(v)
        lines.append(json.dumps(cells, ensure_ascii=False, default=str))
    if cut:
        lines.append(f"(cells longer than {cfg.cell_chars} characters are cut)")
    if r.truncated:
        lines.append("(the result was cut at the evaluator's row cap; the total above was counted separately)")
    return "\n".join(lines)
