"""How the commands print tables: names and ids whole, numbers never cut, readable in a terminal and in a log.

Every command that prints a table takes ``--tables`` (or ``$ROSE_TABLES``):

- ``auto`` (the default): boxed and fitted to the terminal; in a pipe or a log, with lines instead of boxes,
  fitted to ``$COLUMNS`` columns, else :data:`LOG_WIDTH` (rich assumes 80 there, which squeezes the
  numbers), and wider only where a word needs it: cells wrap between words, name columns
  (:func:`name_column`) never wrap, and nothing is cut or ends in an ellipsis;
- ``wide``: each row on one line at the table's natural width, however wide (for ``diff`` of two outputs);
- ``tsv``: a header line, then one tab-separated line per row (for ``grep``, ``cut`` and spreadsheets);
- ``markdown``: a GitHub table, the title as a line above it (for a paper, an issue, a pull request).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from typing import Any, Literal, TypeVar, cast, get_args

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rose_sql.cli.main import console

TableFormat = Literal["auto", "wide", "tsv", "markdown"]
LOG_WIDTH = 120
"""Columns of a table printed to a pipe or a file when ``$COLUMNS`` does not say."""
_KEY = "rose_tables"
F = TypeVar("F", bound=Callable[..., Any])


def tables_option(f: F) -> F:
    """The ``--tables`` option of a command that prints tables (see the module's text)."""

    def remember(ctx: click.Context, param: click.Parameter, value: str) -> None:
        ctx.meta[_KEY] = value

    option = click.option(
        "--tables",
        type=click.Choice(get_args(TableFormat)),
        default="auto",
        envvar="ROSE_TABLES",
        show_envvar=True,
        expose_value=False,
        callback=remember,
        help="How tables are printed: auto (boxed, fitted to the terminal, or to $COLUMNS or 120 columns in a "
        "log), wide (one line per row at its natural width), tsv (tab-separated), markdown.",
    )
    return option(f)


def name_column(table: Table, header: str) -> None:
    """A left-aligned column of names or ids, never wrapped."""
    table.add_column(header, justify="left", no_wrap=True)


def number_columns(table: Table, *headers: str) -> None:
    """Right-aligned columns of numbers (and of the words shown for undefined ones)."""
    for header in headers:
        table.add_column(header, justify="right")


def show(table: Table) -> None:
    """Print ``table`` on standard output in the format the command was given (``--tables``)."""
    ctx = click.get_current_context(silent=True)
    fmt: TableFormat = ctx.meta.get(_KEY, "auto") if ctx is not None else "auto"
    if fmt in ("tsv", "markdown"):
        _plain_text(table, fmt)
        return
    if fmt == "auto" and console.is_terminal:
        console.print(table)
        return
    natural = max(Console(width=10_000).measure(table).maximum, 20)
    if fmt == "wide":
        width = natural
    else:  # a log: lines instead of boxes, cells wrapped between words, wider only where a word needs it
        table.box, table.show_edge = box.SIMPLE_HEAD, False
        width = _fitted(table, _log_width(), natural)
    out = Console(width=width, highlight=False)
    if table.title is not None:  # on a line of its own, not centred over the table
        out.print(table.title, soft_wrap=True)
        table.title = None
    out.print(table)


def _cut(table: Table, width: int) -> int:
    """How many ellipses ``table`` shows at ``width`` (rich's mark of a cell cut short)."""
    out = Console(width=width, file=io.StringIO(), highlight=False)
    out.print(table)
    return cast("io.StringIO", out.file).getvalue().count("…")


def _fitted(table: Table, width: int, natural: int) -> int:
    """The narrowest width from ``width`` up at which no cell of ``table`` is cut (rich wraps a cell between
    its words, and cuts a word longer than its column): ``width`` itself for most tables."""
    if natural <= width:
        return natural
    whole = _cut(table, natural)  # ellipses of the text itself
    if _cut(table, width) == whole:
        return width
    low, high = width, natural  # cut at low, whole at high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if _cut(table, mid) == whole else (mid, high)
    return high


def _log_width() -> int:
    try:
        return max(40, int(os.environ.get("COLUMNS", "")))
    except ValueError:
        return LOG_WIDTH


def _text(cell: object) -> str:
    """A cell as plain text on one line (markup read, line breaks made spaces)."""
    if isinstance(cell, Text):
        text = cell.plain
    elif isinstance(cell, str):
        text = Text.from_markup(cell).plain
    else:
        text = str(cell)
    return " ".join(text.split())


def _plain_text(table: Table, fmt: TableFormat) -> None:
    headers = [_text(c.header) for c in table.columns]
    rows = [[_text(cell) for cell in cells] for cells in zip(*(c.cells for c in table.columns), strict=True)]
    if fmt == "tsv":
        lines = ["\t".join(cell.replace("\t", " ") for cell in row) for row in [headers, *rows]]
    else:
        title = [_text(table.title), ""] if table.title is not None else []

        def line(cells: list[str]) -> str:
            return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

        align = ["---:" if c.justify == "right" else "---" for c in table.columns]
        lines = [*title, line(headers), "| " + " | ".join(align) + " |", *(line(r) for r in rows)]
    click.echo("\n".join(lines))
