"""The self-contained HTML page: overview, charts, notes and the per-item browser.

Everything is inline (style, script, SVG charts, the records as a JSON island), so the page opens
from a file with no network. Texts are escaped; the JSON island escapes ``<`` so that no record can
close the script element.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape

from rose_sql.accounting import AWAITING, IMPORTED, NAMES, READINGS, UNDEFINED, Figure, figures, left_out_lines
from rose_sql.analysis.html.assets import CSS, JS
from rose_sql.analysis.html.data import OUTCOMES, browser_item, flags, outcome, stage_usage
from rose_sql.analysis.html.groups import SystemsFile, group_charts
from rose_sql.analysis.html.svg import Series, bar_chart, stacked_chart
from rose_sql.analysis.paired import RESAMPLES, SEED, PairedTest, all_pairs, interval_cell, p_cell
from rose_sql.analysis.runs import PARTIAL_HELP, Run
from rose_sql.analysis.systems import READING_NAMES, Headline, SystemRow, ordered_difficulties, system_row
from rose_sql.record import Record
from rose_sql.summary import Brief, Usage

EX_COLOR, ROSE_COLOR = "#94a3b8", "#2563eb"
SOURCES = (
    ("goldx", "GoldX", "#ef4444"),
    ("ambq", "AmbQ", "#f59e0b"),
    ("both", "GoldX and AmbQ", "#8b5cf6"),
    ("smell", "gold smell only", "#06b6d4"),
    ("none", "unflagged", "#cbd5e1"),
)


def _figure(chart_id: str, title: str, caption: str, svg: str) -> str:
    return (
        f'<figure class="chart" id="chart-{chart_id}" data-chart="{chart_id}"><figcaption>{escape(title)}'
        f"<span>{escape(caption)}</span></figcaption>{svg}</figure>"
    )


def _source(record: Record) -> str:
    f = set(flags(record))
    if {"goldx", "ambq"} <= f:
        return "both"
    for name in ("goldx", "ambq", "smell"):
        if name in f:
            return name
    return "none"


def _discordance_sources(run: Run, reading: str) -> Counter[str]:
    return Counter(_source(r) for r in run.records if outcome(r, reading) in ("rose_only", "ex_only"))


def charts(runs: Sequence[Run], rows: Sequence[SystemRow], reading: str) -> list[str]:
    """The report's figures, in order: EX against ROSE for the systems ROSE has scored, the official
    readings alone when none has been, then LLM calls and cost when any judge was called."""
    by_name = {r.name: r for r in runs}
    judged = [r for r in rows if r.headline.rose_ready]
    out = _ex_rose_charts(judged, by_name, reading) if judged else [_readings_chart(runs, rows)]
    usage = [stage_usage(by_name[r.system]) for r in rows]
    if any(usage):
        out += _usage_charts([r.system for r in rows], usage)
    return out


def _readings_chart(runs: Sequence[Run], rows: Sequence[SystemRow]) -> str:
    """The official readings: by difficulty for one run, by system for several."""
    shown = [name for name in READINGS if any(r.headline.figures.reading(name).value is not None for r in rows)]
    difficulties = ordered_difficulties(d for row in rows for d in row.ex_by_difficulty)
    if len(runs) == 1 and difficulties:
        briefs = [Brief.of(r) for r in runs[0].records]
        groups = [rows[0].headline.figures, *(figures(b for b in briefs if b.difficulty == d) for d in difficulties)]
        cats = ["all", *difficulties]
    else:
        groups, cats = [r.headline.figures for r in rows], [r.system for r in rows]
    series = [Series(READING_NAMES[name], [g.reading(name).percent for g in groups]) for name in shown]
    chart = bar_chart("Official readings", cats, series, unit="%", domain=(0, 100), empty="no reading is defined")
    caption = "percent of the items where each is defined; ROSE awaits a judge"
    return _figure("readings", "Official readings", caption, chart)


def _ex_rose_charts(rows: Sequence[SystemRow], by_name: dict[str, Run], reading: str) -> list[str]:
    names = [r.system for r in rows]
    difficulties = ordered_difficulties(d for row in rows for d in row.by_difficulty)
    out = []
    if len(rows) == 1 and difficulties:
        row = rows[0]
        cats = ["all", *difficulties]
        groups = [row.overall, *(row.by_difficulty[d] for d in difficulties)]
    else:
        cats, groups = names, [r.overall for r in rows]
    series = [Series("EX", [g.ex for g in groups], EX_COLOR), Series("ROSE", [g.rose for g in groups], ROSE_COLOR)]
    ex_rose = bar_chart("EX vs ROSE", cats, series, unit="%", domain=(0, 100))
    out.append(_figure("ex-rose", "EX vs ROSE", f"percent of items, {reading} vs the ROSE score", ex_rose))
    gaps = [
        [r.overall.gap, *(r.by_difficulty[d].gap if d in r.by_difficulty else None for d in difficulties)] for r in rows
    ]
    gap = bar_chart("Gap by difficulty", *_grouped(names, ["all", *difficulties], gaps), unit="")
    out.append(_figure("gap", "Gap by difficulty", "ROSE minus EX, in points (above zero: EX under-rates)", gap))
    sources = [_discordance_sources(by_name[n], reading) for n in names]
    parts = [Series(label, [s[key] for s in sources], color) for key, label, color in SOURCES]
    out.append(
        _figure(
            "sources",
            "Where discordance comes from",
            "items where EX and ROSE disagree, by the judges' flags",
            stacked_chart("sources", names, parts),
        )
    )
    direction = [
        Series("EX ✓ ROSE ✗", [r.ex_only or 0 for r in rows], "#f97316"),
        Series("EX ✗ ROSE ✓", [r.rose_only or 0 for r in rows], "#10b981"),
    ]
    out.append(
        _figure(
            "direction",
            "Direction of discordance",
            "items EX accepts and ROSE rejects, and the reverse",
            stacked_chart("direction", names, direction),
        )
    )
    return out


def _usage_charts(names: Sequence[str], usage: Sequence[dict[str, dict[str, float]]]) -> list[str]:
    stages = sorted({s for u in usage for s in u})
    calls = [[u[s]["calls"] + u[s]["cached"] if s in u else None for s in stages] for u in usage]
    cost = [[round(u[s]["cost_usd"], 4) if s in u else None for s in stages] for u in usage]
    return [
        _figure(
            "calls",
            "LLM calls per stage",
            "judge calls recorded (made and served from cache)",
            bar_chart("calls", *_grouped(names, stages, calls), empty="no LLM calls recorded"),
        ),
        _figure(
            "cost",
            "Cost per stage",
            "USD of the calls made (cached and imported replies: no cost)",
            bar_chart("cost", *_grouped(names, stages, cost), empty="no cost recorded"),
        ),
    ]


def _grouped(
    systems: Sequence[str], groups: Sequence[str], values: Sequence[Sequence[float | None]]
) -> tuple[list[str], list[Series]]:
    """Categories and series of a chart of one value per system and group (``values[system][group]``):
    the groups along the x axis, one coloured series per system, unless there are more systems than
    groups, when the systems go along the axis and the groups get the colours (a short legend, colours
    told apart)."""
    if len(systems) <= len(groups):
        return list(groups), [Series(name, list(v)) for name, v in zip(systems, values, strict=True)]
    return list(systems), [Series(g, [v[gi] for v in values]) for gi, g in enumerate(groups)]


def _cards(run: Run, row: SystemRow, reading: str) -> str:
    """The overview of one run: every number with what it stands on, a word where it is undefined."""
    h = row.headline
    llm = run.summary.llm if run.summary is not None else Usage()
    cards = [
        ("items", str(h.items), ""),
        ("run", h.state, "interrupted or unfinished" if h.completeness == "partial" else h.subset_note or ""),
        *((READING_NAMES[name], *_mean(h.figures.reading(name))) for name in _HEADLINE),
        ("ROSE", *_rose(h)),
    ]
    if h.rose_ready:
        cards += [
            ("gap", _num(row.overall.gap, signed=True), f"ROSE minus {reading}, on {row.overall.n} items"),
            ("discordant", str(row.discordant), f"of {row.overall.n} items"),
        ]
    if llm.calls or llm.cached:
        priced = any(c.cost_usd is not None for r in run.records for c in r.judges)
        cost = ("cost", f"${llm.cost_usd:.4f}", "") if priced else ("cost", "not recorded", "no call has a price")
        cards += [("LLM calls / item", f"{llm.calls_per_item}", ""), cost]
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card"><div class="k">{escape(k)}</div><div class="v">{escape(v)}</div>'
            + (f'<div class="n">{escape(sub)}</div>' if sub else "")
            + "</div>"
            for k, v, sub in cards
        )
        + "</div>"
    )


_HEADLINE = ("bird_ex", "spider_ex", "ts_ex", "soft_f1")
"""The readings on the overview cards (the table has them all, the keep-distinct ones too)."""


def _mean(f: Figure) -> tuple[str, str]:
    """A card's number and what it stands on: ``on 52 of 500 items (448 db_missing)``."""
    if f.percent is None:
        return UNDEFINED, f"on no item of {f.of}"
    left = ", ".join(f"{n} {reason}" for reason, n in f.left_out.items())
    return f"{f.percent:.2f}", f"on {f.n} of {f.of} items" + (f" ({left})" if left else "")


def _rose(h: Headline) -> tuple[str, str]:
    if h.awaiting_judge:
        return AWAITING, f"{h.awaiting_judge} items; {h.figures.rose.n} scored by execution alone"
    return _mean(h.figures.rose)


def _num(x: float | None, signed: bool = False) -> str:
    if x is None:
        return UNDEFINED
    return f"{x:+.2f}" if signed else f"{x:.2f}"


def _html_table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    out = ["<table><thead><tr>"]
    out += [f'<th class="{"" if i == 0 else "num"}">{escape(h)}</th>' for i, h in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for cells in rows:
        out.append(f"<tr><td>{escape(str(cells[0]))}</td>")
        out += [f'<td class="num">{escape(str(c))}</td>' for c in cells[1:]]
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _table(rows: Sequence[SystemRow], reading: str) -> str:
    """The headline of every system, then EX against ROSE for those ROSE has scored."""
    theirs = reading in IMPORTED  # imported runs: their own EX beside ours, under its own name (as rose compare)
    head = ["system", "items", "run", *READING_NAMES.values(), *(["their EX"] if theirs else []), "ROSE"]
    lines = [
        [r.system, r.headline.items, r.headline.state]
        + [r.headline.figures.reading(name).cell() for name in READINGS]
        + ([r.ex.cell()] if theirs else [])
        + [r.headline.figures.rose.cell()]
        for r in rows
    ]
    out = (
        '<h3>Official readings and ROSE</h3><p class="note">percent (in brackets: the items each is over, of the '
        "run's items when it left some out)</p>"
    )
    out += _html_table(head, lines)
    left = [f"{r.system}: {line}" for r in rows for line in left_out_lines(r.headline.figures)]
    out += "".join(f'<p class="note">{escape(line)}</p>' for line in left)
    judged = [r for r in rows if r.headline.rose_ready]
    if not judged:
        return out
    head = ["system", "n", "EX", "ROSE", "gap", "discordant", "EX✓ROSE✗", "EX✗ROSE✓", "GoldX share", "AmbQ share"]
    lines = [
        [
            r.system,
            r.overall.n,
            _num(r.overall.ex),
            _num(r.overall.rose),
            _num(r.overall.gap, True),
            r.discordant,
            r.ex_only,
            r.rose_only,
            _num(r.subsets["goldx"].share),
            _num(r.subsets["ambq"].share),
        ]
        for r in judged
    ]
    out += f'<h3>EX ({escape(reading)}) vs ROSE</h3><p class="note">on the items where both are defined</p>'
    return out + _html_table(head, lines)


def _cells(t: PairedTest) -> list[object]:
    return [interval_cell(t), t.a_only, t.b_only, p_cell(t.p_value), t.left_out]


def _paired(runs: Sequence[Run], rows: Sequence[SystemRow]) -> str:
    """Every pair of systems (in the table's order, A above B) on their shared items: the difference of
    each binary figure with its paired bootstrap interval, the discordant items, McNemar's exact p-value."""
    by_name = {r.name: r for r in runs}
    if len(runs) < 2 or len(by_name) != len(runs):
        return ""
    pairs = all_pairs([by_name[r.system] for r in rows])
    head = ["A", "B", "figure", "n", "A", "B", "A - B [95% CI]", "A✓B✗", "A✗B✓", "McNemar p", "left out"]
    lines = [
        [pair.a, pair.b, NAMES.get(t.reading, t.reading), t.n, _num(t.a_percent), _num(t.b_percent), *_cells(t)]
        for pair in pairs
        for t in pair.tests
    ]
    only = [
        f"{p.a} has {p.only_a} items {p.b} lacks, {p.b} has {p.only_b} items {p.a} lacks: not compared"
        for p in pairs
        if p.only_a or p.only_b
    ]
    note = (
        f"on the shared items where both define the figure (n): A - B in points with its 95% paired bootstrap "
        f"interval ({RESAMPLES} resamples, seed {SEED}), the discordant items each way, McNemar's exact p-value"
    )
    out = f'<h3 id="paired">Does A beat B?</h3><p class="note">{escape(note)}</p>' + _html_table(head, lines)
    return out + "".join(f'<p class="note">{escape(line)}</p>' for line in only)


def _banner(runs: Sequence[Run]) -> str:
    """A banner over the page for every partial run: its numbers look final and are not."""
    out = []
    for run in runs:
        if run.completeness == "partial":
            text = (
                f"Partial run: {run.name} is {PARTIAL_HELP}. Its numbers cover the {len(run.records)} items "
                "recorded so far; continue it with the same `rose run` command and --resume."
            )
            out.append(f'<div class="banner" role="alert">{escape(text)}</div>')
    return "".join(out)


def _notes(runs: Sequence[Run], rows: Sequence[SystemRow], reading: str) -> str:
    lines = []
    if any(row.headline.rose_ready for row in rows):
        lines += [
            f"EX is the {reading} reading; EX, ROSE and their gap are computed on the items where both are defined.",
            "Discordance shares follow the ROSE paper: the items of a flagged subset where EX and ROSE differ, over "
            "all items where they differ. Flags are the judges' (GoldX: gold SQL wrong; AmbQ: question ambiguous).",
        ]
    for run, row in zip(runs, rows, strict=True):
        h = row.headline
        if h.awaiting_judge:
            lines.append(
                f"{row.system}: ROSE awaits a judge on {h.awaiting_judge} items (run without --judge-model); "
                "EX is compared with ROSE once a judge has scored them."
            )
        if h.completeness == "unknown":
            lines.append(f"{row.system}: completeness unknown (no manifest: made by an older rose-sql).")
        if h.subset_note:
            lines.append(f"{row.system}: {h.subset_note}.")
        reasons = Counter(
            r.unscored_reason for r in run.records if r.score is None and r.unscored_reason != "awaiting_judge"
        )
        if reasons:
            detail = ", ".join(f"{v} {k}" for k, v in sorted(reasons.items(), key=lambda kv: str(kv[0])))
            count = sum(reasons.values())
            lines.append(f"{row.system}: {count} unscored {'item' if count == 1 else 'items'} ({detail}), not in ROSE.")
        judge = run.summary.judge if run.summary is not None else None
        if judge is not None:
            where = judge.provider or judge.base_url or "default endpoint"
            policy = judge.matched_refuter
            lines.append(f"{row.system}: judged by {judge.model} ({where}), matched_refuter={policy}.")
    return "".join(f'<p class="note">{escape(x)}</p>' for x in lines)


_BROWSER = """
<div class="filters">
  <label>outcome <select id="f-outcome"><option value="">all</option></select></label>
  <label>label <select id="f-label"><option value="">all</option><option value="any">any flag</option>
    <option value="goldx">GoldX</option><option value="ambq">AmbQ</option><option value="smell">gold smell</option>
    <option value="none">no flag</option></select></label>
  <label>system <select id="f-system"><option value="">all</option></select></label>
  <label>search <input id="f-text" type="search" placeholder="id, question, SQL"></label>
  <span id="items-count" class="note"></span>
</div>
<table id="items-table"><thead><tr><th>id</th><th>db</th><th>difficulty</th><th class="num">EX</th>
<th class="num">ROSE</th><th>outcome</th><th>flags</th><th>decided by</th><th>question</th></tr></thead>
<tbody></tbody></table>
<p><button id="items-more" type="button">show more</button></p>
"""


def build_report(
    runs: Sequence[Run],
    *,
    reading: str = "bird_ex",
    title: str | None = None,
    version: str = "",
    systems: SystemsFile | None = None,
    group_by: str | None = None,
) -> str:
    """The whole page for one run (overview cards) or several (comparison table first); with a systems file,
    the gap by what it says of each system (:mod:`rose_sql.analysis.html.groups`)."""
    rows = [system_row(r, reading) for r in runs]
    extra = group_charts(rows, systems, group_by) if systems is not None else []
    names = [r.name for r in runs]
    heading = title or ("ROSE-SQL report: " + names[0] if len(runs) == 1 else "ROSE-SQL comparison")
    items = [browser_item(rec, i, reading) for i, run in enumerate(runs) for rec in run.records]
    figures = {row.system: row.headline.figures.to_dict() for row in rows}  # the headline's, with denominators
    data = {"systems": names, "outcomes": OUTCOMES, "figures": figures, "items": items}
    island = json.dumps(data, ensure_ascii=False, default=str)
    island = island.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    overview = _cards(runs[0], rows[0], reading) if len(runs) == 1 else ""
    return "".join(
        [
            '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "script-src 'unsafe-inline'; img-src data:\">",
            f"<title>{escape(heading)}</title><style>{CSS}</style></head><body>",
            f"<header><h1>{escape(heading)}</h1><p>{escape(', '.join(names))} · {len(items)} items · "
            f"generated {when} by rose-sql {escape(version)}</p></header><main>",
            f'<section id="overview">{_banner(runs)}<h2>Overview</h2>{overview}{_table(rows, reading)}',
            f"{_paired(runs, rows)}</section>",
            '<section id="charts"><h2>Charts</h2><div class="grid">'
            + "".join(charts(runs, rows, reading))
            + "".join(_figure(*chart) for chart in extra)
            + "</div>",
            _notes(runs, rows, reading) + "</section>",
            f'<section id="items"><h2>Items</h2>{_BROWSER}</section></main>',
            f'<script type="application/json" id="rose-data">{island}</script><script>{JS}</script></body></html>',
        ]
    )
