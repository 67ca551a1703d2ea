"""What the judges are shown: schema, column descriptions, example values, SQL and results.

An item's context is gathered once (:func:`gather`: its :class:`Case` read, the schema cut to the
tables its queries touch, every block rendered and fenced) into a :class:`Context`, from which
:mod:`rose_sql.judges.ask` lays out each judge's messages.

Faithful and bounded: the whole schema for small databases, else the tables the queries touch and
their foreign-key neighbours; BIRD column descriptions where the database folder has them; a few
example values per column (read by the engine, within a step budget on SQLite); the engine's name and
the semantics where it differs from SQLite's, from the engine itself; SQL with comments stripped;
results with column names, the total row count, the first rows with long cells cut, and an explicit
note of what was left out. Everything
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

import hashlib
import hmac
import itertools
import json
import threading
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from rose_sql.comparison.comparator import Comparison
from rose_sql.config import JudgeConfig
from rose_sql.engines import Database, TableInfo
from rose_sql.engines.execute import Executor
from rose_sql.items.load import Item
from rose_sql.results import Execution
from rose_sql.sql import strip_comments, tables_read

TAG_HEX = 16
"""Hex digits of a fence marker's tag (64 bits)."""


def fence(name: str, text: str, key: bytes) -> str:
    """Wrap untrusted text in markers it cannot forge.

    The tag is an HMAC of the block's name and text under ``key``, a secret the text never sees (derived
    from the run key: :mod:`rose_sql.judges.keys`): the same text gets the same markers on every rerun
    (so the judge cache and the providers' prefix caching keep working), yet no text can predict
    its own closing marker. Should the text contain the tag anyway, the next one is taken.
    """
    data = f"{name}\0{text}".encode("utf-8", "surrogatepass")
    for attempt in itertools.count():
        tag = _nonce(key, data, attempt)
        if tag not in text:
            return f"<<<DATA {name} {tag}>>>\n{text}\n<<<END {name} {tag}>>>"
    raise AssertionError("unreachable")  # pragma: no cover


def _nonce(key: bytes, data: bytes, attempt: int) -> str:
    salt = b"" if attempt == 0 else attempt.to_bytes(4, "big")
    return hmac.new(key, salt + data, hashlib.sha256).hexdigest()[:TAG_HEX]


@dataclass(frozen=True, slots=True)
class Fences:
    """:func:`fence` under one secret: what builds a judge's messages is given one."""

    key: bytes = field(repr=False)
    """The secret (derived from the run key, :meth:`rose_sql.judges.keys.RunKey.derive`)."""

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


def schema_of(tables: list[TableInfo], note: str, quote: Callable[[str], str]) -> Schema:
    """The judges' view of a database's tables as its engine describes them (``note``: the engine's)."""
    return Schema(
        {
            t.name: Table(
                t.name,
                t.ddl(quote),
                tuple(c.name for c in t.columns),
                tuple(sorted({ref for _, ref, _ in t.foreign_keys})),
                t.examples,
                t.descriptions,
            )
            for t in tables
        },
        note,
    )


class Schemas:
    """Schemas read once per database through the run's executor, shared across items and threads."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self._lock = threading.Lock()
        self._schemas: dict[Database, Schema] = {}

    def get(self, db: Database) -> Schema:
        with self._lock:
            if db not in self._schemas:
                engine = self.executor.engine(db.kind)
                self._schemas[db] = schema_of(engine.describe(db), engine.prompt_note(db), engine.quote)
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


# --------------------------------------------------------------------------- one item's context


@dataclass(frozen=True, slots=True)
class Case:
    """Everything the judges may be shown about one item."""

    item: Item
    """The question, evidence and both SQL texts."""
    db: Database
    """The database."""
    gold: Execution | None
    """The gold's execution (None without gold SQL)."""
    pred: Execution
    """The prediction's execution."""
    comparison: Comparison | None
    """Our comparator's outcome."""
    evidence: str | None = None
    """Deterministic evidence, already rendered for the judges (witnesses, smells, diffs)."""
    witness: bool = False
    """A witness database separates the prediction from the gold (read by the escalation, never shown)."""


@dataclass(frozen=True, slots=True)
class Context:
    """One item's blocks as every judge is shown them, each with its heading, fenced where it is data."""

    schema: str
    """The database's schema (whole when small, else the touched tables)."""
    question: str
    knowledge: str | None
    """BIRD's external knowledge given with the question (None without)."""
    pred_sql: str
    gold_sql: str
    pred_result: str
    gold_result: str
    same_result: str
    """What the Refuter of matched results reads instead of the two results."""
    difference: str | None
    """How the results differ, from our comparator (None when it did not compare them)."""
    evidence: str | None
    """The deterministic evidence (None without)."""


def gather(case: Case, schema: Schema, cfg: JudgeConfig, fence: Fences) -> Context:
    """An item's context, read and rendered once (``fence``: the markers of the untrusted blocks)."""
    it = case.item
    touched = tables_read(it.pred_sql) | tables_read(it.gold_sql)
    return Context(
        schema="## Database schema (with column descriptions and example values)\n"
        + fence("schema", schema.render(touched, cfg)),
        question="## Question\n" + fence("question", it.question or "(no question text was given)"),
        knowledge=(
            "## External knowledge given with the question\n" + fence("evidence", it.evidence) if it.evidence else None
        ),
        pred_sql=fence("predicted_sql", _sql(it.pred_sql)),
        gold_sql=fence("reference_sql", _sql(it.gold_sql)),
        pred_result=fence("predicted_result", render_result(case.pred, cfg)),
        gold_result=fence("reference_result", render_result(case.gold, cfg)),
        same_result="Both queries returned the same result on the database (" + _shape(case.pred) + ").",
        difference=case.comparison.detail if case.comparison is not None else None,
        evidence=fence("evidence", case.evidence) if case.evidence else None,
    )


def _sql(sql: str | None) -> str:
    return strip_comments(sql or "").strip()


def _shape(e: Execution) -> str:
    r = e.result
    return "no result" if r is None else f"{r.row_count} rows x {len(r.columns)} columns"
