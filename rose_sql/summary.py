"""Summaries of a run: ``summary.json`` and the numbers the terminal shows.

Computed from :class:`Brief`\\ s (what a summary needs of a record: small enough to cross between
processes cheaply), deduplicated by id, the last one winning: a run passes the records it wrote plus
those an interrupted run had already written, so a resumed run summarises every item exactly once, old
and new alike. :meth:`Summary.from_dict` reads a ``summary.json`` back, typed, as
:meth:`rose_sql.record.Record.from_dict` reads records.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from typing_extensions import TypedDict  # pydantic reads typing.TypedDict only on Python 3.12+

from rose_sql.accounting import READINGS, Figure, Figures, by_difficulty, counted_0, figures, gaps
from rose_sql.config import Config
from rose_sql.items.load import ItemId, Loaded
from rose_sql.provenance import JudgeInfo, Manifest, SubsetInfo, judge_info, lift_judge
from rose_sql.readings.formulas import Readings
from rose_sql.record import SCHEMA_VERSION, Record, id_key, read_records, rename_ts

if TYPE_CHECKING:
    from pydantic import TypeAdapter

__all__ = ["READINGS", "Brief", "CallBrief", "StageUsage", "Summary", "Usage", "summarize", "summarize_briefs"]


class CallBrief(NamedTuple):
    """What a summary needs of one judge call."""

    stage: str
    cached: bool
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    cached_tokens: int = 0
    reasoning_tokens: int | None = None


class Brief(NamedTuple):
    """What a summary needs of one record (a named tuple: thousands cross from the worker processes)."""

    id: ItemId
    score: int | None
    unscored_reason: str | None
    decided_by: str | None
    readings: Readings
    difficulty: str | None
    comparison_reason: str | None
    """Our comparator's reason; None when nothing was compared."""
    calls: tuple[CallBrief, ...]
    escalated: bool = False
    """Whether a stage of the item escalated to the strong model (``--escalate-to``)."""
    gaps: tuple[str | None, ...] = (None, None, None, None)
    """Per official reading, why it is undefined (:func:`rose_sql.accounting.gaps`)."""
    predicted: bool = True
    """False for a question of the gold file without a prediction (``no_prediction``)."""
    steps: float | str | None = None
    """The item's VM-step efficiency ratio (``--efficiency``), or why it has none; None: not asked."""
    time: float | str | None = None
    """The item's published wall-time efficiency ratio, or why it has none; None: not asked."""
    counted_0: str | None = None
    """Why its official readings are 0 by the official rule alone (:func:`rose_sql.accounting.counted_0`)."""
    dev_time: float | str | None = None
    """The wall-time ratio VES takes: BIRD dev's where it was measured (SQLite), else ``time``."""

    @classmethod
    def of(cls, r: Record) -> Brief:
        calls = tuple(
            CallBrief(
                c.stage, c.cached, c.prompt_tokens, c.completion_tokens, c.cost_usd, c.cached_tokens, c.reasoning_tokens
            )
            for c in r.judges
        )
        reason = r.comparison.reason if r.comparison is not None else None
        escalated = any(v.escalated for v in r.votes or ())
        return cls(
            r.id,
            r.score,
            r.unscored_reason,
            r.decided_by,
            r.readings,
            r.difficulty,
            reason,
            calls,
            escalated,
            gaps(r),
            r.pred_sql is not None,
            *_efficiency_brief(r),
            counted_0(r),
            _dev_time(r),
        )


def _efficiency_brief(r: Record) -> tuple[float | str, float | str | None]:
    """An item's two efficiency ratios for the summary, each a ratio, the reason it has none, or None for
    a base not asked (a record without efficiency: its BIRD EX's gap, on both bases)."""
    e = r.efficiency
    if e is None:
        gap = gaps(r)[0] or "not_asked"
        return gap, gap
    missing = "not_sqlite" if r.dialect is not None else "no_count"
    steps = (e.steps_ratio if e.steps_ratio is not None else missing) if e.base in ("steps", "both") else "not_asked"
    time: float | str | None = None
    if e.base in ("time", "both"):
        # a pass that ran says why it gave no ratio; an engine that does not time (or a record made before
        # the servers were timed) has no pass and no reason
        untimed = "no_count" if e.time_reason is not None or r.dialect is None else "not_timed"
        time = e.time_ratio if e.time_ratio is not None else untimed
    return steps, time


def _dev_time(r: Record) -> float | str | None:
    """The item's ratio for VES on the time base: BIRD dev's (:attr:`Efficiency.dev_time_ratio
    <rose_sql.readings.efficiency.Efficiency.dev_time_ratio>`) where measured, else the published one."""
    e = r.efficiency
    if e is not None and e.dev_time_ratio is not None:
        return e.dev_time_ratio
    return _efficiency_brief(r)[1]


@dataclass(frozen=True, slots=True)
class StageUsage:
    """LLM calls of one judge stage."""

    calls: int = 0
    """Calls made to the endpoint."""
    cached: int = 0
    """Replies served from the cache."""
    prompt_tokens: int = 0
    """Input tokens of the calls made."""
    completion_tokens: int = 0
    """Output tokens of the calls made."""
    cost_usd: float = 0.0
    """What the calls made cost."""
    cached_tokens: int = 0
    """Of the input tokens, those the provider read from its prefix cache."""
    reasoning_tokens: int = 0
    """Of the output tokens, those the provider reported as reasoning."""


@dataclass(frozen=True, slots=True)
class Usage:
    """LLM calls, cached replies, tokens and cost of a run: totals and per stage (from the records)."""

    calls: int = 0
    cached: int = 0
    calls_per_item: float = 0.0
    """Calls made and cached, per item."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    by_stage: dict[str, StageUsage] = field(default_factory=dict)
    cached_tokens: int = 0
    """Of the input tokens, those the provider read from its prefix cache (priced at the cached rate)."""
    cache_hit_share: float | None = None
    """cached_tokens / prompt_tokens of the calls made (None when they had no prompt tokens)."""
    reasoning_tokens: int = 0
    """Of the output tokens, those the provider reported as reasoning."""
    judged: int = 0
    """Items a judge was asked about (made or cached calls)."""
    calls_per_judged_item: float = 0.0
    """Calls made and cached, per judged item."""
    escalated: int = 0
    """Items the cheap-first policy escalated to the strong model (``--escalate-to``)."""


class EfficiencyFigure(TypedDict):
    """One cell of :attr:`Summary.efficiency`: a base's R-VES and VES over one difficulty label."""

    r_ves: float | None
    ves: float | None
    n: int
    of: int
    left_out: dict[str, int]


@dataclass(frozen=True, slots=True)
class Summary:
    """Aggregates of one system's run (the content of ``summary.json``)."""

    system: str
    """Name of the prediction file (its output folder)."""
    n: int
    """Items recorded."""
    scored: int
    """Items with a score of 0 or 1."""
    coverage: float
    """scored / n."""
    rose: float | None
    """Mean score over scored items; None while any item awaits a judge, and when nothing is scored."""
    bird_ex: float | None
    """Mean BIRD EX over items where it is defined (None over no item)."""
    spider_ex: float | None
    """Mean Spider EX: the test-suite script's execution match on the one database of each db_id."""
    spider_ex_keep_distinct: float | None
    """The same with --keep_distinct."""
    ts_ex: float | None
    """Mean test-suite accuracy (every database of the db_id's folder; DISTINCT removed, its default)."""
    ts_ex_keep_distinct: float | None
    """Mean test-suite accuracy with --keep_distinct."""
    soft_f1: float | None
    """Mean BIRD Soft-F1."""
    unscored: dict[str, int]
    """Unscored items by reason (awaiting_judge, gold_error, db_missing, ...)."""
    decided_by: dict[str, int]
    """Scored items by the stage that decided them."""
    comparison: dict[str, int]
    """Our comparator's outcomes by reason (same, order, values, ...)."""
    readings_n: dict[str, int]
    """How many items each reading is defined on."""
    figures: Figures
    """Every figure above with its numerator, denominator and what it left out, by reason
    (:mod:`rose_sql.accounting`)."""
    by_difficulty: dict[str, Figures] = field(default_factory=dict)
    """The figures per difficulty label, where the data has them, each with its own denominator."""
    no_prediction: int = 0
    """Questions of the gold file without a prediction: scored 0, in every denominator."""
    llm: Usage = field(default_factory=Usage)
    """LLM calls, cached replies, tokens and cost: totals and per stage (from the records)."""
    judge: JudgeInfo | None = None
    """The judge configuration that produced the scores (model, endpoint, parameters, prompt hashes)."""
    format: str = ""
    """Input format the predictions were read as."""
    warnings: list[str] = field(default_factory=list)
    """What was odd about the input."""
    manifest: Manifest | None = None
    """What produced the records: inputs with their hashes, options, versions, times, and whether the run is
    complete (None for summaries written by other commands)."""
    spider_match: dict[str, dict[str, float | int | None]] | None = None
    """Spider's exact-set match as ``evaluation.py --etype match`` prints it: per hardness class
    (``easy``, ``medium``, ``hard``, ``extra``) and ``all``, the items (``count``) and the mean EM
    (``em``), over the items where it is defined; None where it is defined on no item."""
    efficiency: dict[str, dict[str, EfficiencyFigure]] | None = None
    """BIRD's efficiency readings (``rose run --efficiency``), per base (``steps``, ``time``) and per
    difficulty label and ``all``: ``r_ves`` (mini-dev's R-VES) and ``ves`` (BIRD dev's VES; on the ``time``
    base from BIRD dev's own timing on SQLite, to the statement's first row) in percent over
    ``n`` items (those with BIRD EX defined and a ratio: an incorrect prediction counts 0), of the
    group's ``of`` items, ``left_out`` by reason (the BIRD EX gap, ``not_sqlite`` for the step base off
    SQLite, ``not_timed`` for the time base on an engine that does not time, ``no_count``). None when not
    asked. The ``time`` base, measured on SQLite and the servers alike, depends on the machine, the server
    and their load, and decides nothing."""
    subset: SubsetInfo | None = None
    """For a run of a subset (``rose run --limit``, ``--ids``): which items of the input, how many of how
    many; every figure is over the subset only. None for a run of the whole input."""
    schema: int = SCHEMA_VERSION
    """Version of the record and summary layout."""

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = asdict(self)
        data["figures"] = self.figures.to_dict()
        data["by_difficulty"] = {d: f.to_dict() for d, f in self.by_difficulty.items()}
        return data

    @classmethod
    def from_dict(cls, data: Any) -> Summary:
        """A ``summary.json`` read back, older layouts lifted (see :func:`rose_sql.record.migrate`), validated."""
        from pydantic import ValidationError

        if not isinstance(data, dict):
            raise ValueError("not a summary: not a JSON object")
        version = data.get("schema", 1)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ValueError(f"summary layout {version!r} is newer than this rose-sql reads; upgrade")
        if version < 5:
            data = _rename(data)
        if version < 4:
            data = _lift(data)
        try:
            data = {**data, "judge": lift_judge(data.get("judge"))}
            if isinstance(data.get("manifest"), dict):
                data["manifest"] = {**data["manifest"], "judge": lift_judge(data["manifest"].get("judge"))}
            summary: Summary = _adapter().validate_python({**data, "schema": SCHEMA_VERSION})
        except ValidationError as e:
            err = e.errors()[0]
            raise ValueError(f"not a valid summary: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
        return summary


def _rename(data: Any) -> Any:
    """A summary of layout 4 or before under layout 5's names (see :func:`rose_sql.record.rename_ts`): the
    means, the counts, the figures (a ``ts_ex`` figure over no item, ``not_recorded``) and by difficulty."""
    out = {**rename_ts(data), "ts_ex": None, "ts_ex_keep_distinct": None}
    if isinstance(data.get("readings_n"), dict):
        out["readings_n"] = rename_ts(data["readings_n"])

    def figs(f: Any) -> Any:
        if not isinstance(f, dict):
            return f
        g = rename_ts(f)
        for name in ("spider_ex", "spider_ex_keep_distinct"):
            if isinstance(g.get(name), dict):
                g[name] = {**g[name], "name": name}
        items = int(f.get("items", 0) or 0)
        for name in ("ts_ex", "ts_ex_keep_distinct"):
            g[name] = Figure(name, 0.0, 0, items, {"not_recorded": items} if items else {}).to_dict()
        return g

    if "figures" in data:
        out["figures"] = figs(data["figures"])
    if isinstance(data.get("by_difficulty"), dict):
        out["by_difficulty"] = {d: figs(f) for d, f in data["by_difficulty"].items()}
    return out


def _lift(data: dict[str, Any]) -> dict[str, object]:
    """A summary of a layout before 4 (no figures) lifted: its figures rebuilt from its means and counts
    (a reading's left-out items under ``not_recorded``: the reasons were not kept), ROSE no number while
    items await a judge (those layouts wrote 0.0), ``by_difficulty`` dropped (its means had no
    denominators of their own; the records give them)."""
    n, scored = int(data.get("n", 0)), int(data.get("scored", 0))
    unscored = {str(k): int(v) for k, v in (data.get("unscored") or {}).items()}
    counts = data.get("readings_n") or {}

    def reading(name: str) -> Figure:
        k = int(counts.get(name, 0))
        return Figure(name, float(data.get(name) or 0.0) * k, k, n, {"not_recorded": n - k} if n > k else {})

    rose = Figure("rose", float(data.get("rose") or 0.0) * scored, scored, n, unscored)
    figs = Figures(n, rose, *(reading(name) for name in READINGS))
    out: dict[str, object] = {k: v for k, v in data.items() if k != "by_difficulty"}
    out["figures"] = figs.to_dict()
    if rose.awaiting:
        out["rose"] = None
    return out


@cache
def _adapter() -> TypeAdapter[Summary]:
    from pydantic import TypeAdapter

    return TypeAdapter(Summary)


_COUNTS = ("calls", "cached", "prompt_tokens", "completion_tokens", "cost_usd", "cached_tokens", "reasoning_tokens")


def _usage(briefs: list[Brief]) -> Usage:
    stages: dict[str, dict[str, float]] = {}
    for b in briefs:
        for c in b.calls:
            s = stages.setdefault(
                c.stage,
                dict.fromkeys(_COUNTS, 0.0),
            )
            if c.cached:
                s["cached"] += 1
            else:
                s["calls"] += 1
                s["prompt_tokens"] += c.prompt_tokens or 0
                s["completion_tokens"] += c.completion_tokens or 0
                s["cached_tokens"] += c.cached_tokens or 0
                s["reasoning_tokens"] += c.reasoning_tokens or 0
                s["cost_usd"] = round(s["cost_usd"] + (c.cost_usd or 0.0), 8)
    n = len(briefs) or 1
    judged = sum(1 for b in briefs if b.calls)
    by_stage = {
        name: StageUsage(
            int(s["calls"]),
            int(s["cached"]),
            int(s["prompt_tokens"]),
            int(s["completion_tokens"]),
            s["cost_usd"],
            int(s["cached_tokens"]),
            int(s["reasoning_tokens"]),
        )
        for name, s in stages.items()
    }
    prompt = sum(s.prompt_tokens for s in by_stage.values())
    cached = sum(s.cached_tokens for s in by_stage.values())
    return Usage(
        calls=sum(s.calls for s in by_stage.values()),
        cached=sum(s.cached for s in by_stage.values()),
        calls_per_item=round(sum(s.calls + s.cached for s in by_stage.values()) / n, 4),
        prompt_tokens=prompt,
        completion_tokens=sum(s.completion_tokens for s in by_stage.values()),
        cost_usd=round(sum(s.cost_usd for s in by_stage.values()), 6),
        by_stage=by_stage,
        cached_tokens=cached,
        cache_hit_share=round(cached / prompt, 4) if prompt else None,
        reasoning_tokens=sum(s.reasoning_tokens for s in by_stage.values()),
        judged=judged,
        calls_per_judged_item=round(sum(len(b.calls) for b in briefs) / judged, 4) if judged else 0.0,
        escalated=sum(b.escalated for b in briefs),
    )


def summarize(records_path: Path, loaded: Loaded | None = None, config: Config | None = None) -> Summary:
    """Summarise a ``records.jsonl`` (deduplicated by id, the last record of an id winning)."""
    briefs = (Brief.of(r) for r in read_records(records_path))
    return summarize_briefs(briefs, records_path.parent.name, loaded, config)


def summarize_briefs(
    briefs_in: Iterable[Brief],
    system: str,
    loaded: Loaded | None = None,
    config: Config | None = None,
    *,
    manifest: Manifest | None = None,
) -> Summary:
    """Summarise the briefs of one system's records (deduplicated by id, the last of an id winning)."""
    by_id = {id_key(b.id): b for b in briefs_in}
    briefs = list(by_id.values())
    main = figures(briefs)
    n = len(briefs)
    return Summary(
        system=system,
        n=n,
        scored=main.rose.n,
        coverage=round(main.rose.n / n, 6) if n else 0.0,
        rose=main.rose.value,
        bird_ex=main.bird_ex.value,
        spider_ex=main.spider_ex.value,
        spider_ex_keep_distinct=main.spider_ex_keep_distinct.value,
        ts_ex=main.ts_ex.value,
        ts_ex_keep_distinct=main.ts_ex_keep_distinct.value,
        soft_f1=main.soft_f1.value,
        unscored=main.rose.left_out,
        decided_by=dict(Counter(str(b.decided_by) for b in briefs if b.score is not None)),
        comparison=dict(Counter(b.comparison_reason or "not_compared" for b in briefs)),
        readings_n={name: main.reading(name).n for name in READINGS},
        figures=main,
        by_difficulty=by_difficulty(briefs),
        no_prediction=sum(1 for b in briefs if not b.predicted),
        llm=_usage(briefs),
        judge=judge_info(config),
        format=loaded.format if loaded else "",
        warnings=list(loaded.warnings) if loaded else [],
        manifest=manifest,
        subset=manifest.subset if manifest is not None else None,
        spider_match=spider_match_table(briefs),
        efficiency=efficiency_table(briefs),
    )


_LEVELS = ("all", "simple", "moderate", "challenging", "easy", "medium", "hard", "extra")


def _label_order(label: str) -> tuple[int, str]:
    """``all``, then BIRD's difficulties and Spider's hardness in their order, then any other label by name:
    the same order whatever order the records were written in."""
    return (_LEVELS.index(label), "") if label in _LEVELS else (len(_LEVELS), label)


def efficiency_table(briefs: Iterable[Brief]) -> dict[str, dict[str, EfficiencyFigure]] | None:
    """R-VES and VES per base and difficulty with their denominators (see :attr:`Summary.efficiency`)."""
    from rose_sql.readings.efficiency import r_ves, ves

    briefs = list(briefs)
    bases = [
        base
        for base, values in (("steps", [b.steps for b in briefs]), ("time", [b.time for b in briefs]))
        if any(isinstance(v, float) or v in ("not_sqlite", "not_timed", "no_count") for v in values)
    ]
    if not bases:
        return None
    out: dict[str, dict[str, EfficiencyFigure]] = {}
    for base in bases:
        # VES on the time base takes BIRD dev's ratio (SQLite: to the first row), R-VES mini-dev's
        groups: dict[str, list[tuple[float | str | None, float | str | None]]] = {"all": []}
        for b in briefs:
            value = (b.steps, b.steps) if base == "steps" else (b.time, b.dev_time)
            groups["all"].append(value)
            if b.difficulty:
                groups.setdefault(b.difficulty, []).append(value)
        table: dict[str, EfficiencyFigure] = {}
        for label in sorted(groups, key=_label_order):
            values = [v for v, _ in groups[label]]
            ratios = [v for v in values if isinstance(v, float)]
            dev = [d for v, d in groups[label] if isinstance(v, float) and isinstance(d, float)]
            left = Counter(v if isinstance(v, str) else "not_asked" for v in values if not isinstance(v, float))
            rv, v = r_ves(ratios), ves(dev)
            table[label] = {
                "r_ves": round(rv, 4) if rv is not None else None,
                "ves": round(v, 4) if v is not None else None,
                "n": len(ratios),
                "of": len(values),
                "left_out": dict(sorted(left.items())),
            }
        out[base] = table
    return out


def spider_match_table(briefs: Iterable[Brief]) -> dict[str, dict[str, float | int | None]] | None:
    """EM per hardness class and over all, where the match reading is defined (see :class:`Summary`)."""
    from rose_sql.readings.spider_match import HARDNESS_LEVELS

    defined = [b for b in briefs if b.readings.spider_em is not None]
    if not defined:
        return None
    out: dict[str, dict[str, float | int | None]] = {}
    for level in (*HARDNESS_LEVELS, "all"):
        group = [b.readings.spider_em or 0 for b in defined if level == "all" or b.difficulty == level]
        out[level] = {"count": len(group), "em": round(sum(group) / len(group), 6) if group else None}
    return out


def write_summary(summary: Summary, path: Path) -> None:
    """Write ``summary.json`` atomically."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
