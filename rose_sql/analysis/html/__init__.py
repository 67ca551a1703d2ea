"""Self-contained HTML reports of one run or a comparison of several: charts and an item browser.

:func:`build_report` returns the page as text; :func:`write_report` writes it. The page loads
nothing: its style, script, SVG charts and records are all inline, and its Content-Security-Policy
forbids fetching anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rose_sql.analysis.html.groups import SystemsFile
from rose_sql.analysis.html.page import build_report
from rose_sql.analysis.runs import Run

__all__ = ["build_report", "write_report"]


def write_report(
    runs: Sequence[Run],
    out: Path,
    *,
    reading: str = "bird_ex",
    version: str = "",
    systems: SystemsFile | None = None,
    group_by: str | None = None,
) -> Path:
    """Write the report of ``runs`` to ``out`` (a file path; parent folders are created)."""
    page = build_report(runs, reading=reading, version=version, systems=systems, group_by=group_by)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
