"""Bar charts as inline SVG text: no plotting library, no script, nothing fetched.

Two shapes cover the report: grouped bars (several series side by side per category, negative values
drawn below a zero line) and stacked bars (parts of a whole per category). Every text is escaped;
every chart carries a ``<title>`` and a ``<desc>`` listing its numbers for screen readers.

Labels never overlap, from 2 to 25 systems and beyond: the legend wraps into rows, x labels that would
touch side by side are turned 45 degrees, or 90 when that is still too close (and thinned past about 30
categories), and a chart writes its values over the bars only when every one fits its bar (each bar's
tooltip has it in any case). Text widths are estimated for DejaVu Sans, wider than the usual fonts;
tests/test_report_html.py measures the boxes in Chromium.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#2563eb", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#06b6d4", "#ec4899", "#84cc16", "#64748b")
WIDTH = 560
_PLOT_H = 214  # the plot's height; the chart grows above it for the legend and below it for the x labels
_LEFT, _RIGHT, _BOTTOM = 52, 16, 30
_LABEL, _VALUE = 11.0, 10.0  # font sizes of the axis and legend texts and of the value labels (the style sheet's)
_LINE = 1.25  # a text's box height, in font sizes
_VALUE_ROOM = 10  # between the legend and the plot: a value label over a bar at the domain's top
_ACROSS = _LINE * _LABEL + 2  # the room a turned x label needs across its direction


@dataclass(frozen=True, slots=True)
class Series:
    """One named row of values, one per category (None: no value)."""

    name: str
    values: Sequence[float | None]
    color: str | None = None


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where the plot sits in a chart whose height depends on its legend rows and its x labels."""

    left: float
    top: float
    height: float
    band: float

    @property
    def bottom(self) -> float:
        """The y of the plot's bottom edge."""
        return self.top + _PLOT_H


def _text_width(text: str, size: float) -> float:
    """A generous estimate of a text's width in pixels (DejaVu Sans, the widest common fallback font)."""
    em = 0.0
    for c in text:
        if c in ".,:;!|'il ()[]frtj-":
            em += 0.42
        elif c in "mwMW%@" or not c.isascii():
            em += 1.0
        else:
            em += 0.76 if c.isupper() else 0.64
    return em * size


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


def _frame(title: str, kind: str, desc: str, body: list[str], height: float) -> str:
    h = f"{height:.0f}"
    return (
        f'<svg class="chart-svg" data-kind="{kind}" role="img" '
        f'viewBox="0 0 {WIDTH} {h}" width="{WIDTH}" height="{h}">'
        f"<title>{escape(title)}</title><desc>{escape(desc)}</desc>"
        f'<rect class="bg" x="0" y="0" width="{WIDTH}" height="{h}" fill="#ffffff"/>' + "".join(body) + "</svg>"
    )


def _axis(lo: float, hi: float, step: float, unit: str, at: _Layout) -> tuple[list[str], float, float]:
    """Horizontal grid lines with labels; returns the SVG, the y of the value 0 and pixels per unit."""
    scale = _PLOT_H / (hi - lo)
    y0 = at.bottom + lo * scale  # y of the value 0
    out = []
    n = round((hi - lo) / step)
    for i in range(n + 1):
        v = lo + i * step
        y = at.bottom - (v - lo) * scale
        stroke = "#94a3b8" if abs(v) < 1e-9 else "#e2e8f0"
        out.append(f'<line x1="{at.left:.1f}" x2="{WIDTH - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="{stroke}"/>')
        out.append(
            f'<text x="{at.left - 6:.1f}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
            f"{escape(_fmt(v) + unit)}</text>"
        )
    return out, y0, scale


def _legend_rows(series: Sequence[Series]) -> list[list[tuple[int, float]]]:
    """The legend's entries (index, width) wrapped into rows that fit the chart's width."""
    rows: list[list[tuple[int, float]]] = [[]]
    used = 0.0
    for i, s in enumerate(series):
        w = 16 + _text_width(s.name, _LABEL) + 12
        if rows[-1] and _LEFT + used + w > WIDTH - _RIGHT:
            rows.append([])
            used = 0.0
        rows[-1].append((i, w))
        used += w
    return rows


def _legend(series: Sequence[Series]) -> list[str]:
    out = []
    for r, row in enumerate(_legend_rows(series)):
        x, y = float(_LEFT), 10 + 18 * r
        for i, w in row:
            s = series[i]
            color = s.color or PALETTE[i % len(PALETTE)]
            out.append(f'<rect x="{x:.1f}" y="{y}" width="12" height="12" rx="2" fill="{color}"/>')
            out.append(f'<text x="{x + 16:.1f}" y="{y + 10}" class="legend">{escape(s.name)}</text>')
            x += w
    return out


_SHORT = 18
"""Characters an x label keeps (the full name is in each bar's tooltip)."""
_SEPARATORS = "_./ "
"""Where a shared start or end of the names may be cut (a hyphen joins: ``gpt-4`` stays whole)."""


def _shared(names: Sequence[str]) -> int:
    """How many characters every name starts with."""
    first = names[0]
    n = min(map(len, names))
    for i in range(n):
        if any(name[i] != first[i] for name in names):
            return i
    return n


def short_labels(names: Sequence[str]) -> list[str]:
    """The x labels of ``names``, told apart. Names that fit are kept; otherwise what all of them share at
    the start and at the end (up to a separator, so words stay whole) is dropped, and a label still too long
    keeps its start and its end around an ellipsis: ``predict_mini_dev_gpt-4_sqlite`` and
    ``predict_mini_dev_gpt-35-turbo_sqlite`` read ``gpt-4`` and ``gpt-35-turbo``, where both once read
    ``predict_mini_dev_…``. Each bar's tooltip keeps the whole name."""
    core = list(names)
    if len(set(names)) > 1 and max(map(len, names)) > _SHORT:
        head = _shared(core)
        while head and core[0][head - 1] not in _SEPARATORS:
            head -= 1
        tail = _shared([n[head:][::-1] for n in core])
        while tail and core[0][len(core[0]) - tail] not in _SEPARATORS:
            tail -= 1
        if all(len(n) > head + tail for n in core):
            core = [n[head : len(n) - tail] for n in core]
    out = [c if len(c) <= _SHORT else c[: _SHORT // 2 - 1] + "…" + c[-(_SHORT // 2) :] for c in core]
    if len(set(out)) < len(set(names)):  # cut down to the same text: the whole names
        return list(names)
    return out


def _angle(categories: Sequence[str], band: float) -> int:
    """How far the x labels are turned: not at all when each fits its band side by side, else 45 degrees
    when neighbours stay apart so, else 90."""
    if all(_text_width(c, _LABEL) <= band - 6 for c in categories):
        return 0
    return 45 if band * math.sin(math.radians(45)) >= _ACROSS else 90


def _thinning(band: float, angle: int) -> int:
    """Every how many x labels one is drawn, so that turned neighbours never touch."""
    return 1 if angle == 0 else max(1, math.ceil(_ACROSS / (band * math.sin(math.radians(angle)))))


def _layout(categories: Sequence[str], series: Sequence[Series], value_room: float) -> _Layout:
    """The plot's place: below the legend's rows (and ``value_room`` for labels over the highest bar), above
    the x labels, and for slanted labels far enough right that the first does not leave the chart."""
    top = 10 + 18 * len(_legend_rows(series)) + value_room
    widths = [_text_width(c, _LABEL) for c in categories]
    left, n = float(_LEFT), max(1, len(categories))
    for _ in range(5):  # moving the plot right narrows the bands, which may turn the labels further: settle
        band = (WIDTH - left - _RIGHT) / n
        cos = math.cos(math.radians(_angle(categories, band)))
        reach = max(w * cos - band * (i + 0.5) for i, w in enumerate(widths)) + 8  # a slanted label's left end
        if reach <= left:
            break
        left = reach
    band = (WIDTH - left - _RIGHT) / n
    angle = _angle(categories, band)
    if angle == 0:
        return _Layout(left, top, top + _PLOT_H + _BOTTOM, band)
    sin, cos = math.sin(math.radians(angle)), math.cos(math.radians(angle))
    return _Layout(left, top, top + _PLOT_H + 12 + max(widths) * sin + _LINE * _LABEL * cos + 8, band)


def _xlabels(categories: Sequence[str], at: _Layout) -> list[str]:
    out = []
    angle = _angle(categories, at.band)
    every = _thinning(at.band, angle)
    for i, c in enumerate(categories):
        if i % every:
            continue
        x, label = at.left + at.band * (i + 0.5), escape(c)
        if angle == 0:
            y = at.bottom + 16
            out.append(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="middle" class="xlabel">{label}</text>')
            continue
        if angle == 90:
            x += 0.35 * _LABEL  # a turned text sits beside its baseline: centre it on the bar
        y = at.bottom + 12
        out.append(
            f'<text x="{x:.1f}" y="{y:.1f}" transform="rotate(-{angle} {x:.1f} {y:.1f})" text-anchor="end" '
            f'class="xlabel">{label}</text>'
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
    """Grouped bars: for each category one bar per series, labelled with its value when every value fits
    over its bar (else the values are in each bar's tooltip and the chart's description); all zero:
    ``empty``."""
    values = [v for s in series for v in s.values if v is not None]
    if not categories or not any(values):
        return empty_chart(title, empty)
    lo, hi, step = _domain(values, domain)
    at = _layout(short_labels(categories), series, _VALUE_ROOM)
    body, y0, scale = _axis(lo, hi, step, unit, at)
    bar = min(48.0, at.band * 0.9 / len(series))
    labelled = all(_text_width(_fmt(v), _VALUE) <= bar - 1 for v in values)
    for ci in range(len(categories)):
        start = at.left + at.band * ci + (at.band - bar * len(series)) / 2
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
            if labelled:
                body.append(
                    f'<text x="{x + bar / 2:.1f}" y="{ty:.1f}" text-anchor="middle" class="value">'
                    f"{escape(_fmt(v))}</text>"
                )
    body += _xlabels(short_labels(categories), at) + _legend(series)
    desc = "; ".join(
        f"{s.name}: "
        + ", ".join(
            f"{c} {_fmt(v) if v is not None else 'undefined'}" for c, v in zip(categories, s.values, strict=True)
        )
        for s in series
    )
    return _frame(title, "bars", desc, body, at.height)


def stacked_chart(title: str, categories: Sequence[str], parts: Sequence[Series], *, unit: str = "") -> str:
    """Stacked bars: for each category the parts on top of each other, the total above (when every total
    fits its band)."""
    totals = [sum(p.values[i] or 0.0 for p in parts) for i in range(len(categories))]
    if not categories or max(totals, default=0.0) <= 0:
        return empty_chart(title, "nothing to plot: no discordance")
    lo, hi, step = _domain(totals, None)
    at = _layout(short_labels(categories), parts, _VALUE_ROOM)
    body, y0, scale = _axis(lo, hi, step, unit, at)
    bar = min(64.0, at.band * 0.6)
    labelled = all(_text_width(_fmt(t), _VALUE) <= at.band - 4 for t in totals)
    for ci in range(len(categories)):
        x, base = at.left + at.band * ci + (at.band - bar) / 2, y0
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
        if labelled:
            body.append(
                f'<text x="{x + bar / 2:.1f}" y="{base - 4:.1f}" text-anchor="middle" class="value">'
                f"{escape(_fmt(totals[ci]))}</text>"
            )
    body += _xlabels(short_labels(categories), at) + _legend(parts)
    desc = "; ".join(
        f"{c}: " + ", ".join(f"{p.name} {_fmt(p.values[i] or 0.0)}" for p in parts) for i, c in enumerate(categories)
    )
    return _frame(title, "stacked", desc, body, at.height)


def empty_chart(title: str, message: str) -> str:
    """A chart frame that says why there is nothing to draw."""
    height = 10 + 18 + _VALUE_ROOM + _PLOT_H + _BOTTOM
    body = [f'<text x="{WIDTH / 2}" y="{height / 2}" text-anchor="middle" class="empty">{escape(message)}</text>']
    return _frame(title, "empty", message, body, height)
