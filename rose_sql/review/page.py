"""What the item page shows, as plain data for the templates (which escape every string in it).

An expert needs: the question and evidence; the schema of the tables the two queries read, with
example values; both SQL texts formatted and highlighted; both results (first rows, row counts,
truncation); the deterministic evidence (a witness database as a readable change, the rows that
tell the results apart, gold smells); and, only once they have labelled, the machine's verdict.

Results are executed live in the sandbox of ``rose run`` (:class:`rose_sql.Executor`, read-only,
step budget, row and byte caps) when the project's databases are at hand; otherwise the record's
previews are shown, and otherwise the page says that nothing was executed. The only HTML made here
is Pygments' highlighting, which escapes the SQL it is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import sqlparse
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import SqlLexer

from rose_sql.accounting import READINGS
from rose_sql.comparison.comparator import json_value
from rose_sql.config import Config, JudgeConfig
from rose_sql.engines import Database, Source
from rose_sql.engines.execute import Executor
from rose_sql.engines.workers import Pool, Watch, limit_memory
from rose_sql.errors import Lost
from rose_sql.judges.context import Schema
from rose_sql.judges.judges import Judges
from rose_sql.record import ExecutionInfo, Record
from rose_sql.results import Execution
from rose_sql.review.settings import ReviewConfig
from rose_sql.review.work import WorkItem
from rose_sql.sql import tables_read
from rose_sql.verdicts import ProverReply, RefuterReply

_FORMATTER = HtmlFormatter(nowrap=True)
_LEXER = SqlLexer()
MAX_FORMAT_CHARS = 20_000
"""Longer SQL is shown as given (formatting it would take too long)."""


def pygments_css() -> str:
    """The highlighting colours, served as a stylesheet of the app's own."""
    return str(_FORMATTER.get_style_defs(".sql"))


@lru_cache(maxsize=4096)
def sql_html(sql: str) -> Markup:
    """SQL formatted (one clause a line; the case is kept, so a column named like a keyword stays as written)
    and highlighted; Pygments escapes the text."""
    text = sql
    if len(sql) <= MAX_FORMAT_CHARS:
        try:
            text = sqlparse.format(sql, reindent=True)
        except Exception:  # sqlparse may give up on odd text: show it as given
            text = sql
    return Markup(highlight(text, _LEXER, _FORMATTER))


# --------------------------------------------------------------------------- values and results


@dataclass(frozen=True, slots=True)
class Cell:
    """One shown value."""

    text: str
    """The value as text (cut when long)."""
    kind: str = ""
    """``null`` for a NULL, ``num`` for a number, ``cut`` for cut text, else empty."""


def cell(value: Any, limit: int) -> Cell:
    """A value as the page shows it."""
    if value is None:
        return Cell("NULL", "null")
    value = json_value(value)
    if isinstance(value, bool | int | float):
        return Cell(str(value), "num")
    text = str(value) if not isinstance(value, list | dict) else repr(value)
    if len(text) > limit:
        return Cell(text[:limit] + f"… (+{len(text) - limit} characters)", "cut")
    return Cell(text)


@dataclass(frozen=True, slots=True)
class Result:
    """One query's result as shown: status, columns, the first rows and how many there are."""

    status: str
    """``ok``, ``error``, ``timeout``, ``rejected``... or ``not executed``."""
    error: str | None = None
    """Why it did not run."""
    columns: list[str] = field(default_factory=list)
    """Column names."""
    rows: list[list[Cell]] = field(default_factory=list)
    """The first rows."""
    row_count: int | None = None
    """Rows in the whole result."""
    count_exact: bool = True
    """False when the count is a lower bound."""
    truncated: bool = False
    """The sandbox cut the result at its row or byte cap."""
    origin: str = ""
    """Where the rows come from: ``live`` (executed now) or ``record`` (the run's preview)."""


def result_of_execution(e: Execution, rows: int, limit: int) -> Result:
    """A live execution as shown."""
    if not e.ok or e.result is None:
        return Result(e.status, e.error, origin="live")
    r = e.result
    return Result(
        "ok",
        columns=list(r.columns),
        rows=[[cell(v, limit) for v in row] for row in r.rows[:rows]],
        row_count=r.row_count,
        count_exact=r.count_exact,
        truncated=r.truncated,
        origin="live",
    )


def result_of_record(info: ExecutionInfo, rows: int, limit: int) -> Result:
    """A record's execution as shown (the run keeps the first rows only)."""
    if info.status == "skipped":
        return Result("not executed", "the run did not execute it")
    if info.status != "ok":
        return Result(info.status, info.error, origin="record")
    return Result(
        "ok",
        columns=list(info.columns or []),
        rows=[[cell(v, limit) for v in row] for row in (info.preview or [])[:rows]],
        row_count=info.row_count,
        count_exact=info.count_exact,
        truncated=info.truncated,
        origin="record",
    )


# --------------------------------------------------------------------------- schema


@dataclass(frozen=True, slots=True)
class Column:
    """A column as shown: name, examples, description."""

    name: str
    examples: list[Cell]
    description: str


@dataclass(frozen=True, slots=True)
class TableView:
    """A table the queries read."""

    name: str
    columns: list[Column]
    references: list[str]


@dataclass(frozen=True, slots=True)
class SchemaView:
    """The tables involved, in full, and the names of the others."""

    tables: list[TableView]
    others: list[str]
    error: str | None = None


def schema_view(schema: Schema, touched: frozenset[str], examples: int) -> SchemaView:
    """The schema of the tables the queries read (every table when they read none that parse)."""
    names = list(schema.tables)
    shown = [n for n in names if n.lower() in touched] or names
    tables = []
    for n in shown:
        t = schema.tables[n]
        cols = [
            Column(c, [cell(v, 60) for v in t.examples.get(c, [])[:examples]], t.descriptions.get(c, ""))
            for c in t.columns
        ]
        tables.append(TableView(n, cols, list(t.foreign)))
    return SchemaView(tables, [n for n in names if n not in shown])


# --------------------------------------------------------------------------- evidence and the machine


def change_text(change: Any) -> str:
    """A witness's edit of the database in words."""
    if change.op == "update":
        return (
            f"table {change.table}, row {change.rowid}: {change.column} changes from "
            f"{cell(change.old, 80).text} to {cell(change.new, 80).text}"
        )
    if change.op == "insert":
        values = ", ".join(f"{k} = {cell(v, 60).text}" for k, v in (change.values or {}).items())
        return f"table {change.table}: a copy of row {change.copy_of} is added as row {change.rowid}" + (
            f", with {values}" if values else ""
        )
    row = ", ".join(f"{k} = {cell(v, 60).text}" for k, v in (change.row or {}).items())
    return f"table {change.table}: row {change.rowid} is deleted ({row})"


@dataclass(frozen=True, slots=True)
class Call:
    """One judge call as shown."""

    stage: str
    model: str
    verdict: str
    fields: list[tuple[str, str]]
    error: str | None


def call_view(stage: str, model: str, reply: ProverReply | RefuterReply | None, error: str | None, raw: str) -> Call:
    """A judge call's verdict and reasoning, field by field (empty fields left out)."""
    if reply is None:
        return Call(stage, model, "no usable reply", [("raw reply", raw)], error)
    call = _call_view(stage, model, reply, error)
    return Call(call.stage, call.model, call.verdict, [(k, v) for k, v in call.fields if v.strip()], call.error)


def _call_view(stage: str, model: str, reply: ProverReply | RefuterReply, error: str | None) -> Call:
    if isinstance(reply, ProverReply):
        verdict = "answers the question" if reply.answers_question else "does not answer the question"
        fields = [
            ("expected answer", reply.expected_answer),
            ("what the SQL does", reply.sql_behaviour),
            *((f"check: {k}", v) for k, v in reply.checks.items()),
            ("reasoning", reply.reasoning),
        ]
        return Call(stage, model, verdict, fields, error)
    verdict = "overturns the pass" if reply.overturn else "lets the prediction stand"
    fields = [
        ("reasoning", reply.reasoning),
        ("ambiguity", reply.ambiguity),
        (
            "gold correct",
            str(reply.gold_correct)
            + (f" (confidence {reply.gold_confidence})" if reply.gold_confidence is not None else ""),
        ),
    ]
    if reply.label:
        fields.append(("diagnostic", reply.label))
    return Call(stage, model, verdict, fields, error)


def machine_view(record: Record | None) -> dict[str, Any] | None:
    """The machine's verdict: score, who decided and why, the official readings, judges and their flags."""
    if record is None:
        return None
    return {
        "score": record.score,
        "unscored_reason": record.unscored_reason,
        "decided_by": record.decided_by,
        "why": record.why,
        "readings": [(n, getattr(record.readings, n)) for n in READINGS],
        "calls": [call_view(c.stage, c.model, c.reply, c.error, c.raw) for c in record.judges],
        "labels": record.labels,
    }


# --------------------------------------------------------------------------- the page


def _sandbox(config: Config, watch: Watch) -> Executor:
    """A worker process's sandbox (the worker engine stops it when a call SQLite cannot interrupt runs away),
    in a process held to the worker memory bound as rose run's are. A query a wall clock stopped is not
    run again to confirm it: the console's answers decide no score, and a person is waiting."""
    limit_memory(config.worker_memory_bytes)
    return Executor(config, watch=watch, confirm=False)


def _execute(executor: Executor, query: tuple[Database, str]) -> Execution:
    return executor.run(query[0], query[1], role="review")


class Pages:
    """Builds item pages: the sandbox's worker processes and one schema cache shared by every request."""

    def __init__(self, config: ReviewConfig) -> None:
        self.config = config
        self.pool = Pool(config.query.workers, _sandbox, config.query)
        self.catalogue = Executor(config.query)
        """This process's engines, for the schemas (the queries run in the workers)."""
        self.judges = Judges(JudgeConfig(model="", cache_dir=None), self.catalogue, asks=False)
        """The schemas as the judges see them (no model: the page shows, it never asks)."""

    def close(self) -> None:
        self.pool.close()
        self.catalogue.close()

    def database(self, db_root: Path | None, db_id: str) -> Database | None:
        """The item's database, when the project's databases are at hand."""
        if db_root is None:
            return None
        db = Source.folder(db_root).locate(db_id)
        return db if self.catalogue.exists(db) else None

    def run(self, db: Database, sql: str) -> Result:
        """An annotator's (or the page's) query, in the sandbox."""
        c = self.config
        try:
            (execution,) = self.pool.submit(_execute, [(db, sql)]).result()
        except Lost as e:  # the query's worker kept dying: the page says so
            execution = Execution("error", 0.0, error=str(e))
        return result_of_execution(execution, c.shown_rows, c.cell_chars)

    def item(self, it: WorkItem, db_root: Path | None) -> dict[str, Any]:
        """Everything the item page shows before the annotator labels (never the machine's verdict)."""
        c = self.config
        item = it.item
        db = self.database(db_root, item.db_id)
        rec = it.record
        results: dict[str, Result] = {}
        for role, sql, info in (
            ("pred", item.pred_sql, rec.pred if rec else None),
            ("gold", item.gold_sql, rec.gold if rec else None),
        ):
            if sql is None:
                results[role] = Result("not executed", "there is no gold SQL")
            elif db is not None:
                results[role] = self.run(db, sql)
            elif info is not None:
                results[role] = result_of_record(info, c.shown_rows, c.cell_chars)
            else:
                results[role] = Result("not executed", "the database is not at hand (start with --db-root)")
        schema = None
        if db is not None:
            try:
                touched = tables_read(item.pred_sql) | tables_read(item.gold_sql)
                schema = schema_view(self.judges.schema(db), touched, c.examples_per_column)
            except Exception as e:  # an unreadable database is shown, not raised
                schema = SchemaView([], [], f"cannot read the schema: {e}")
        ev = rec.evidence if rec else None
        return {
            "item": item,
            "pred_html": sql_html(item.pred_sql),
            "gold_html": sql_html(item.gold_sql) if item.gold_sql is not None else None,
            "results": results,
            "schema": schema,
            "db": db,
            "comparison": rec.comparison if rec else None,
            "doubts": rec.doubts if rec else None,
            "witness": ev.witness if ev else None,
            "changes": [change_text(ch) for ch in ev.witness.changes] if ev and ev.witness else [],
            "witness_results": (
                {
                    "pred": _sample(ev.witness.pred_result, c.cell_chars),
                    "gold": _sample(ev.witness.gold_result, c.cell_chars),
                }
                if ev and ev.witness
                else None
            ),
            "diff": ev.diff if ev else None,
            "diff_rows": (
                {
                    "pred": [[cell(v, c.cell_chars) for v in row] for row in ev.diff.pred_only],
                    "gold": [[cell(v, c.cell_chars) for v in row] for row in ev.diff.gold_only],
                }
                if ev and ev.diff
                else None
            ),
            "smells": ev.gold_smells if ev else [],
            "evidence_skipped": ev.skipped if ev else None,
            "has_machine": rec is not None,
        }


def _sample(s: Any, limit: int) -> Result:
    return Result(
        "ok", columns=list(s.columns), rows=[[cell(v, limit) for v in row] for row in s.rows], row_count=s.row_count
    )
