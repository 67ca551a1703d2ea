"""Bar charts as inline SVG text: no plotting library, no script, nothing fetched.

Two shapes cover the report: grouped bars (several series side by side per category, negative values
drawn below a zero line) and stacked bars (parts of a whole per category). Every text is escaped;
every chart carries a ``<title>`` and a ``<desc>`` listing its numbers for screen readers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#2563eb", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#06b6d4", "#ec4899", "#84cc16", "#64748b")
WIDTH, HEIGHT = 560, 280
_LEFT, _RIGHT, _TOP, _BOTTOM = 52, 16, 36, 30


@dataclass(frozen=True, slots=True)
class Series:
    """One named row of values, one per category (None: no value)."""

    name: str
    values: Sequence[float | None]
    color: str | None = None


def _nice_step(span: float) -> float:
    raw = span / 5 if span > 0 else 1.0
    mag = 10.0 ** math.floor(math.log10(raw))
    return next(float(m * mag) for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def _domain(values: Sequence[float], fixed: tuple[float, float] | None) -> tuple[float, float, float]:
    if fixed is not None:
        lo, hi = fixed
    else:
        lo, hi = min([0.0, *values]), max([0.0, *values])
        if lo == hi:
            hi = lo + 1
        lo, hi = lo - 0.08 * (hi - lo) * (lo < 0), hi + 0.08 * (hi - lo) * (hi > 0)  # room for value labels
    step = _nice_step(hi - lo)
    return math.floor(lo / step) * step, math.ceil(hi / step) * step, step


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else (f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}")


def _frame(title: str, kind: str, desc: str, body: list[str]) -> str:
    return (
        f'<svg class="chart-svg" data-kind="{kind}" role="img" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}">'
        f"<title>{escape(title)}</title><desc>{escape(desc)}</desc>"
        f'<rect class="bg" x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>' + "".join(body) + "</svg>"
    )


def _axis(lo: float, hi: float, step: float, unit: str) -> tuple[list[str], float, float]:
    """Horizontal grid lines with labels; returns the SVG, the plot's y of ``lo`` and pixels per unit."""
    plot_h = HEIGHT - _TOP - _BOTTOM
    scale = plot_h / (hi - lo)
    y0 = _TOP + plot_h + lo * scale  # y of the value 0
    out = []
    n = round((hi - lo) / step)
    for i in range(n + 1):
        v = lo + i * step
        y = _TOP + plot_h - (v - lo) * scale
        stroke = "#94a3b8" if abs(v) < 1e-9 else "#e2e8f0"
        out.append(f'<line x1="{_LEFT}" x2="{WIDTH - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="{stroke}"/>')
        out.append(
            f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{escape(_fmt(v) + unit)}</text>'
        )
    return out, y0, scale


def _legend(series: Sequence[Series]) -> list[str]:
    out, x = [], float(_LEFT)
    for i, s in enumerate(series):
        color = s.color or PALETTE[i % len(PALETTE)]
        out.append(f'<rect x="{x:.1f}" y="10" width="12" height="12" rx="2" fill="{color}"/>')
        out.append(f'<text x="{x + 16:.1f}" y="20" class="legend">{escape(s.name)}</text>')
        x += 28 + 7 * len(s.name)
    return out


def _xlabels(categories: Sequence[str], band: float) -> list[str]:
    out = []
    for i, c in enumerate(categories):
        label = c if len(c) <= 18 else c[:17] + "…"
        x = _LEFT + band * (i + 0.5)
        out.append(
            f'<text x="{x:.1f}" y="{HEIGHT - _BOTTOM + 16}" text-anchor="middle" class="xlabel">{escape(label)}</text>'
        )
    return out


def bar_chart(
    title: str,
    categories: Sequence[str],
    series: Sequence[Series],
    *,
    unit: str = "",
    domain: tuple[float, float] | None = None,
    empty: str = "nothing to plot",
) -> str:
    """Grouped bars: for each category one bar per series, labelled with its value (all zero: ``empty``)."""
    values = [v for s in series for v in s.values if v is not None]
    if not categories or not any(values):
        return empty_chart(title, empty)
    lo, hi, step = _domain(values, domain)
    body, y0, scale = _axis(lo, hi, step, unit)
    band = (WIDTH - _LEFT - _RIGHT) / len(categories)
    bar = min(48.0, band * 0.8 / len(series))
    for ci in range(len(categories)):
        start = _LEFT + band * ci + (band - bar * len(series)) / 2
        for si, s in enumerate(series):
            v = s.values[ci]
            if v is None:
                continue
            color = s.color or PALETTE[si % len(PALETTE)]
            top, h = (y0 - v * scale, v * scale) if v >= 0 else (y0, -v * scale)
            x = start + si * bar
            body.append(
                f'<rect class="bar" x="{x + 1:.1f}" y="{top:.1f}" width="{bar - 2:.1f}" height="{max(h, 1):.1f}" '
                f'fill="{color}"><title>{escape(f"{s.name}, {categories[ci]}: {_fmt(v)}{unit}")}</title></rect>'
            )
            ty = top - 4 if v >= 0 else top + h + 11
            body.append(
                f'<text x="{x + bar / 2:.1f}" y="{ty:.1f}" text-anchor="middle" class="value">{escape(_fmt(v))}</text>'
            )
    body += _xlabels(categories, band) + _legend(series)
    desc = "; ".join(
        f"{s.name}: "
        + ", ".join(
            f"{c} {_fmt(v) if v is not None else 'undefined'}" for c, v in zip(categories, s.values, strict=True)
        )
        for s in series
    )
    return _frame(title, "bars", desc, body)


def stacked_chart(title: str, categories: Sequence[str], parts: Sequence[Series], *, unit: str = "") -> str:
    """Stacked bars: for each category the parts on top of each other, the total above."""
    totals = [sum(p.values[i] or 0.0 for p in parts) for i in range(len(categories))]
    if not categories or max(totals, default=0.0) <= 0:
        return empty_chart(title, "nothing to plot: no discordance")
    lo, hi, step = _domain(totals, None)
    body, y0, scale = _axis(lo, hi, step, unit)
    band = (WIDTH - _LEFT - _RIGHT) / len(categories)
    bar = min(64.0, band * 0.6)
    for ci in range(len(categories)):
        x, base = _LEFT + band * ci + (band - bar) / 2, y0
        for pi, p in enumerate(parts):
            v = p.values[ci] or 0.0
            if v <= 0:
                continue
            h = v * scale
            color = p.color or PALETTE[pi % len(PALETTE)]
            body.append(
                f'<rect class="bar" x="{x:.1f}" y="{base - h:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{color}"><title>{escape(f"{categories[ci]}, {p.name}: {_fmt(v)}{unit}")}</title></rect>'
            )
            base -= h
        body.append(
            f'<text x="{x + bar / 2:.1f}" y="{base - 4:.1f}" text-anchor="middle" class="value">'
            f"{escape(_fmt(totals[ci]))}</text>"
        )
    body += _xlabels(categories, band) + _legend(parts)
    desc = "; ".join(
        f"{c}: " + ", ".join(f"{p.name} {_fmt(p.values[i] or 0.0)}" for p in parts) for i, c in enumerate(categories)
    )
    return _frame(title, "stacked", desc, body)


def empty_chart(title: str, message: str) -> str:
    """A chart frame that says why there is nothing to draw."""
    body = [f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="empty">{escape(message)}</text>']
    return _frame(title, "empty", message, body)
