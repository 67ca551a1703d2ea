"""Self-contained HTML reports of one run or a comparison of several: charts and an item browser.

:func:`build_report` returns the page as text; :func:`write_report` writes it. The page loads
nothing: its style, script, SVG charts and records are all inline, and its Content-Security-Policy
forbids fetching anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rose_sql.analysis.html.page import build_report
from rose_sql.analysis.runs import Run

__all__ = ["build_report", "write_report"]


def write_report(runs: Sequence[Run], out: Path, *, reading: str = "bird_ex", version: str = "") -> Path:
    """Write the report of ``runs`` to ``out`` (a file path; parent folders are created)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(build_report(runs, reading=reading, version=version), encoding="utf-8")
    return out
