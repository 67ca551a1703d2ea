"""Agreement of a judge's scores with human labels: kappa, accuracy, MCC, F1, flags, bootstrap intervals.

The positive class is "the prediction is correct" (score 1, label true). Figures are in percent,
rounded to two decimals, as the ROSE paper reports them; on the paper's own outputs they reproduce its
numbers exactly (see :mod:`rose_sql.analysis.rose_import`).

**Unscored items are never dropped silently.** A labelled item whose record is unscored, or that has
no record at all (reason ``absent_from_run``), is counted under ``unscored`` with its reason. By
default (``unscored="exclude"``) it is left out of the metrics, which are computed on ``n`` scored
items; ``unscored="wrong"`` counts it as judged incorrect instead, as the ROSE authors' script reads
every score other than 1 (their runs drop an item that failed from ``eval_results.json`` altogether,
which is what ``exclude`` does, with the count shown). Records without a label are counted as
``unlabelled``.

Intervals are percentile bootstrap intervals (95 %), from a seeded generator so that a rerun gives
the same numbers; when several subsets are merged each is resampled within itself (stratified).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rose_sql.analysis.labels import FLAGS, Flag, HumanLabel, LabelSet, key
from rose_sql.analysis.runs import Run
from rose_sql.errors import UsageError

UnscoredPolicy = Literal["exclude", "wrong"]
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 20260101
METRICS = ("kappa", "accuracy", "mcc", "f1", "precision", "recall")


@dataclass(frozen=True, slots=True)
class Confusion:
    """Counts of a binary agreement table (positive = the prediction is correct)."""

    tp: int = 0
    """Judge says correct, experts say correct."""
    tn: int = 0
    """Both say incorrect."""
    fp: int = 0
    """Judge says correct, experts say incorrect."""
    fn: int = 0
    """Judge says incorrect, experts say correct."""

    @property
    def n(self) -> int:
        return self.tp + self.tn + self.fp + self.fn

    @classmethod
    def of(cls, pairs: Sequence[tuple[bool, bool]]) -> Confusion:
        """From (human, judge) pairs."""
        c = Counter(pairs)
        return cls(tp=c[True, True], tn=c[False, False], fp=c[False, True], fn=c[True, False])


def kappa(c: Confusion) -> float | None:
    """Cohen's kappa; None when chance agreement is total (both raters constant and equal)."""
    if c.n == 0:
        return None
    po = (c.tp + c.tn) / c.n
    pe = ((c.tp + c.fp) * (c.tp + c.fn) + (c.tn + c.fn) * (c.tn + c.fp)) / (c.n * c.n)
    return None if pe == 1 else (po - pe) / (1 - pe)


def accuracy(c: Confusion) -> float | None:
    """Share of items where judge and experts agree."""
    return (c.tp + c.tn) / c.n if c.n else None


def precision(c: Confusion) -> float | None:
    """Of the items the judge accepts, the share the experts accept (None when it accepts none)."""
    return c.tp / (c.tp + c.fp) if c.tp + c.fp else None


def recall(c: Confusion) -> float | None:
    """Of the items the experts accept, the share the judge accepts (None when they accept none)."""
    return c.tp / (c.tp + c.fn) if c.tp + c.fn else None


def f1(c: Confusion) -> float | None:
    """Harmonic mean of precision and recall; 0 when there is no true positive but something to find."""
    if c.n == 0 or (c.tp + c.fp + c.fn) == 0:
        return None
    return 2 * c.tp / (2 * c.tp + c.fp + c.fn)


def mcc(c: Confusion) -> float | None:
    """Matthews correlation; 0 when a margin is empty (the convention of the paper and scikit-learn)."""
    if c.n == 0:
        return None
    den = (c.tp + c.fp) * (c.tp + c.fn) * (c.tn + c.fp) * (c.tn + c.fn)
    return (c.tp * c.tn - c.fp * c.fn) / math.sqrt(den) if den else 0.0


def pct(x: float | None) -> float | None:
    """A proportion in percent with two decimals."""
    return None if x is None else round(100 * x, 2)


def metrics(c: Confusion) -> dict[str, float | None]:
    """All agreement metrics of a table, in percent."""
    fns: dict[str, Callable[[Confusion], float | None]] = {
        "kappa": kappa,
        "accuracy": accuracy,
        "mcc": mcc,
        "f1": f1,
        "precision": precision,
        "recall": recall,
    }
    return {name: pct(fns[name](c)) for name in METRICS}


# --------------------------------------------------------------------------- pairing


@dataclass(frozen=True, slots=True)
class Paired:
    """One labelled item with what the judge said about it."""

    subset: str
    """The label set it belongs to."""
    id: str
    """Its id (as text)."""
    human: bool
    """The experts' label."""
    score: int | None
    """The judge's score (None: unscored or absent)."""
    unscored_reason: str | None
    """Why there is no score."""
    reviewed: bool
    """The label was reviewed by a person."""
    flags: dict[Flag, tuple[bool | None, bool | None]]
    """Per flag: (experts' tag, judge's flag)."""


@dataclass(frozen=True, slots=True)
class Pairing:
    """A run matched with a label set."""

    subset: str
    """The label set's name."""
    items: list[Paired]
    """Every labelled item, scored or not."""
    unlabelled: int
    """Records of the run without a label."""
    tags_outside: dict[str, int]
    """Expert tags on ids outside the label set, by flag."""


def pair(run: Run, labels: LabelSet) -> Pairing:
    """Match a run's records with a label set by id."""
    records = {key(r.id): r for r in run.records}
    items = []
    for k, h in labels.labels.items():
        r = records.get(k)
        flags: dict[Flag, tuple[bool | None, bool | None]] = {
            f: (_tag(h, f), getattr(r.labels, f) if r is not None else None) for f in FLAGS
        }
        if r is None:
            items.append(Paired(labels.name, k, h.correct, None, "absent_from_run", h.reviewed, flags))
            continue
        reason = r.unscored_reason or ("unscored" if r.score is None else None)
        items.append(Paired(labels.name, k, h.correct, r.score, reason, h.reviewed, flags))
    unlabelled = sum(1 for k in records if k not in labels.labels)
    return Pairing(labels.name, items, unlabelled, dict(labels.tags_outside))


def pair_runs(runs: Sequence[Run], sets: Sequence[LabelSet]) -> list[Pairing]:
    """Pair runs with label sets, in order (one labels file per run)."""
    if len(runs) != len(sets):
        raise UsageError(f"{len(runs)} runs but {len(sets)} labels files: give one labels file per run, in order")
    return [pair(r, s) for r, s in zip(runs, sets, strict=True)]


def _tag(h: HumanLabel, flag: Flag) -> bool | None:
    return h.goldx if flag == "goldx" else h.ambq


# --------------------------------------------------------------------------- agreement


def _judged(items: Sequence[Paired], unscored: UnscoredPolicy) -> list[tuple[bool, bool]]:
    out = []
    for p in items:
        if p.score is not None:
            out.append((p.human, p.score == 1))
        elif unscored == "wrong":
            out.append((p.human, False))
    return out


def _flag_table(items: Sequence[Paired], flag: Flag) -> list[tuple[bool, bool]]:
    """(experts' tag, judge's flag) over items the experts tagged either way; no flag counts as False."""
    return [(h, bool(j)) for p in items for h, j in [p.flags[flag]] if h is not None]


def _flag_stats(pairs: Sequence[tuple[bool, bool]]) -> dict[str, float | None]:
    c = Confusion.of(pairs)
    return {"precision": pct(precision(c)), "recall": pct(recall(c))}


def _bootstrap(
    strata: Sequence[Sequence[tuple[bool, bool]]],
    stat: Callable[[list[tuple[bool, bool]]], dict[str, float | None]],
    resamples: int,
    seed: int,
) -> dict[str, list[float] | None]:
    """95 % percentile intervals of each statistic, resampling each stratum within itself."""
    rng = random.Random(seed)
    draws: dict[str, list[float]] = {}
    for _ in range(resamples):
        sample = [x for s in strata if s for x in rng.choices(s, k=len(s))]
        for name, value in stat(sample).items():
            if value is not None:
                draws.setdefault(name, []).append(value)
    return {name: _interval(values, resamples) for name, values in draws.items()}


def _interval(values: list[float], resamples: int) -> list[float] | None:
    if len(values) < 0.95 * resamples:  # undefined in too many resamples to mean anything
        return None
    values.sort()
    lo = values[math.floor(0.025 * (len(values) - 1))]
    hi = values[math.ceil(0.975 * (len(values) - 1))]
    return [round(lo, 2), round(hi, 2)]


def block(
    items: Sequence[Paired],
    *,
    unscored: UnscoredPolicy = "exclude",
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    unlabelled: int = 0,
    tags_outside: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The agreement of a set of paired items (several subsets are resampled within themselves)."""
    subsets = sorted({p.subset for p in items})
    strata = [_judged([p for p in items if p.subset == s], unscored) for s in subsets]
    pairs = [x for s in strata for x in s]
    c = Confusion.of(pairs)
    out: dict[str, Any] = {**metrics(c), "n": c.n}
    missing = Counter(p.unscored_reason for p in items if p.score is None)
    out["unscored"] = sum(missing.values())
    out["unscored_reasons"] = dict(sorted(missing.items(), key=lambda kv: str(kv[0])))
    out["unscored_counted_as"] = "excluded" if unscored == "exclude" else "wrong"
    out["unlabelled"] = unlabelled
    out["unreviewed"] = sum(1 for p in items if not p.reviewed)
    out["confusion"] = {"tp": c.tp, "fp": c.fp, "fn": c.fn, "tn": c.tn}
    out["ci95"] = _bootstrap(strata, lambda s: metrics(Confusion.of(s)), resamples, seed) if resamples and c.n else {}
    out["flags"] = {}
    for flag in FLAGS:
        flag_strata = [_flag_table([p for p in items if p.subset == s], flag) for s in subsets]
        table = [x for s in flag_strata for x in s]
        if not table:
            continue
        fc = Confusion.of(table)
        out["flags"][flag] = {
            "tagged": fc.tp + fc.fn,
            "flagged": fc.tp + fc.fp,
            "both": fc.tp,
            "items": fc.n,
            "judge_flagged_overall": sum(1 for p in items if p.flags[flag][1]),
            "tags_outside_set": (tags_outside or {}).get(flag, 0),
            **_flag_stats(table),
            "ci95": _bootstrap(flag_strata, _flag_stats, resamples, seed) if resamples else {},
        }
    return out


def agree(
    pairings: Sequence[Pairing],
    *,
    unscored: UnscoredPolicy = "exclude",
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, Any]:
    """Agreement per subset and merged: the merged block at the top level, each subset under ``subsets``."""
    kw: dict[str, Any] = {"unscored": unscored, "resamples": resamples, "seed": seed}
    subsets = {p.subset: block(p.items, unlabelled=p.unlabelled, tags_outside=p.tags_outside, **kw) for p in pairings}
    outside: Counter[str] = Counter()
    for p in pairings:
        outside.update(p.tags_outside)
    merged = block(
        [x for p in pairings for x in p.items],
        unlabelled=sum(p.unlabelled for p in pairings),
        tags_outside=dict(outside),
        **kw,
    )
    return {
        **merged,
        "subsets": subsets,
        "convention": {
            "positive": "the prediction is correct (score 1, label true)",
            "unscored": "excluded from the metrics and counted" if unscored == "exclude" else "counted as wrong",
            "percent": "two decimals",
            "bootstrap": {"resamples": resamples, "seed": seed, "interval": "95% percentile, stratified by subset"},
        },
    }
