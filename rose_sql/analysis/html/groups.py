"""The report's charts of the ROSE-EX gap by what the user knows of each system: a small systems file.

The file (``rose report --systems FILE``) is a CSV with a ``system`` column, or a JSON list of objects with
``system``, or a JSON object ``{system: {column: value}}``; its other columns are free (``type``: prompting,
fine-tuned...; ``base_model``; ``release_date``). ``--group-by COLUMN`` colours and groups the systems by
one of them; a ``release_date`` (or ``date``) column, ``YYYY-MM`` or ``YYYY-MM-DD``, adds the gap over
release dates. Systems the file does not name are grouped under ``(not in the systems file)``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rose_sql.analysis.html.svg import Series, bar_chart
from rose_sql.analysis.runs import read_table
from rose_sql.analysis.systems import SystemRow, ordered_difficulties
from rose_sql.errors import InputError, UsageError

DATE_COLUMNS = ("release_date", "date")
"""The columns read as a system's release date."""
UNKNOWN = "(not in the systems file)"
"""The group of a system the file does not name (or names without a value in the column)."""


@dataclass(frozen=True, slots=True)
class SystemsFile:
    """What the user says of each system, by name."""

    path: Path
    columns: list[str]
    rows: dict[str, dict[str, str]]

    def value(self, system: str, column: str) -> str:
        return self.rows.get(system, {}).get(column) or UNKNOWN

    @property
    def date_column(self) -> str | None:
        return next((c for c in DATE_COLUMNS if c in self.columns), None)


def load_systems(path: Path) -> SystemsFile:
    """A systems file (see the module), checked: every row names its system once, dates are dates."""
    rows: dict[str, dict[str, str]] = {}
    columns: list[str] = []
    for where, row in read_table(path):
        if "value" in row and isinstance(row["value"], dict):  # {system: {column: value}}
            row = {"system": row["id"], **row["value"]}
        name = row.get("system")
        if not isinstance(name, str) or not name:
            raise InputError(path, "each row needs a 'system' (the run's folder name)", where=where)
        if name in rows:
            raise InputError(path, f"system {name!r} is named twice", where=where)
        values = {str(k): "" if v is None else str(v).strip() for k, v in row.items() if k != "system"}
        for k in values:
            if k not in columns:
                columns.append(k)
        for c in DATE_COLUMNS:
            if values.get(c) and not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])(-\d{2})?", values[c]):
                raise InputError(path, f"{c} {values[c]!r} of {name} is not YYYY-MM or YYYY-MM-DD", where=where)
        rows[name] = values
    return SystemsFile(path, columns, rows)


def _pooled(rows: Sequence[SystemRow], difficulty: str | None) -> float | None:
    """ROSE minus EX over every item of the rows (per difficulty, or all), where both are defined."""
    n = ex = rose = 0.0
    for r in rows:
        s = r.overall if difficulty is None else r.by_difficulty.get(difficulty)
        if s is None or not s.n or s.ex is None or s.rose is None:
            continue
        n += s.n
        ex += s.ex * s.n
        rose += s.rose * s.n
    return round((rose - ex) / n, 2) if n else None


def group_charts(
    rows: Sequence[SystemRow], systems: SystemsFile, group_by: str | None
) -> list[tuple[str, str, str, str]]:
    """The charts (id, title, caption, SVG) of the gap by the systems file: per system coloured by group, per
    group and difficulty, and over release dates when the file gives them."""
    judged = [r for r in rows if r.headline.rose_ready and r.overall.gap is not None]
    if group_by is not None and group_by not in systems.columns:
        raise UsageError(f"--group-by {group_by}: {systems.path} has no such column ({', '.join(systems.columns)})")
    if not judged:
        return []

    def group(r: SystemRow) -> str:
        return systems.value(r.system, group_by) if group_by else "all systems"

    groups = sorted({group(r) for r in judged}, key=lambda g: (g == UNKNOWN, g))
    ordered = sorted(judged, key=lambda r: (groups.index(group(r)), -(r.overall.gap or 0.0), r.system))
    out = []
    by = f"by {group_by}" if group_by else ""
    series = [Series(g, [r.overall.gap if group(r) == g else None for r in ordered]) for g in groups]
    out.append(
        (
            "gap-systems",
            f"ROSE − EX gap per system {by}".strip(),
            "points, on the items where both are defined; systems ordered by group, then gap",
            bar_chart("gap per system", [r.system for r in ordered], series),
        )
    )
    difficulties = ordered_difficulties(d for r in judged for d in r.by_difficulty)
    pooled = [
        Series(d or "all", [_pooled([r for r in judged if group(r) == g], d) for g in groups])
        for d in [None, *difficulties]
    ]
    out.append(
        (
            "gap-groups",
            f"ROSE − EX gap {by} and difficulty".strip(),
            "points, pooled over the items of each group's systems where both are defined",
            bar_chart("gap per group", groups, pooled),
        )
    )
    date = systems.date_column
    dated = (
        sorted(
            (r for r in judged if systems.value(r.system, date or "") != UNKNOWN),
            key=lambda r: systems.value(r.system, date or ""),
        )
        if date
        else []
    )
    if dated and date:
        cats = [f"{systems.value(r.system, date)[:7]} {r.system}" for r in dated]
        by_date = [Series(g, [r.overall.gap if group(r) == g else None for r in dated]) for g in groups]
        out.append(
            (
                "gap-dates",
                "ROSE − EX gap over release dates",
                f"points; systems in order of {date} (the axis is an order, not a time scale); "
                f"{len(judged) - len(dated)} systems without a date left out",
                bar_chart("gap over release dates", cats, [s for s in by_date if any(v is not None for v in s.values)]),
            )
        )
    return out
