"""How the commands that read runs print tables: names and ids whole, numbers never cut.

On a terminal a table is as wide as the terminal (rich wraps the numeric columns if it must, never the
name columns, made with :func:`name_column`). Piped or redirected, there is no width to fit: the table
is printed at its natural width, so that no cell is wrapped or ends in an ellipsis and a line holds
one whole row for ``grep``, ``diff`` and ``cut``.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from rose_sql.cli.main import console


def name_column(table: Table, header: str) -> None:
    """A left-aligned column of names or ids, never wrapped."""
    table.add_column(header, justify="left", no_wrap=True)


def number_columns(table: Table, *headers: str) -> None:
    """Right-aligned columns of numbers (and of the words shown for undefined ones)."""
    for header in headers:
        table.add_column(header, justify="right")


def show(table: Table) -> None:
    """Print ``table`` on standard output: fitted to a terminal, at its natural width anywhere else."""
    if console.is_terminal:
        console.print(table)
        return
    plain = Console(width=max(Console(width=10_000).measure(table).maximum, 20), highlight=False)
    if table.title is not None:  # on a line of its own, not padded to the table's width
        plain.print(table.title, soft_wrap=True)
        table.title = None
    plain.print(table)
