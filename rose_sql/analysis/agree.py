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

**A run and a labels file must be about the same items** (:func:`pair_runs`). A record is the record of a
labelled item when their ids match and, where both name a database (ROSE-VEC labels and run records do), the
databases too, and, where both carry the predicted SQL, the same SQL up to how it is written
(:func:`rose_sql.sql.normalize`: whitespace, keyword case, a trailing semicolon): a question is labelled about
one system's prediction (ROSE-VEC labels one per question), and a label says nothing of another system's SQL
for the same question. A record with the id of a label but another database is counted as absent
(``db_mismatch``), one with other SQL too (``sql_mismatch``). Pairing is refused when fewer than half of the
labelled items (:data:`MIN_LABELLED_WITH_RECORD`) have a record: the metrics would then describe a remainder
the labels were not chosen for, and that is what a run paired with another benchmark's labels looks like
(Spider records read against BIRD labels share ids 0..1033 but not one database). Records without a label are
normal (a labelled subset of a whole benchmark's run) and only counted. Runs that are partial, tagged ids that
the labels file lacks, and databases that differ are reported as warnings.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

from rose_sql.analysis.labels import FLAGS, Flag, HumanLabel, LabelSet, key
from rose_sql.analysis.runs import PARTIAL_HELP, Run
from rose_sql.errors import UsageError
from rose_sql.sql import normalize

UnscoredPolicy = Literal["exclude", "wrong"]
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 20260101
METRICS = ("kappa", "accuracy", "mcc", "f1", "precision", "recall")
MIN_LABELLED_WITH_RECORD = 0.5
"""Pairing a run with a labels file is refused when fewer than this share of the labelled items have a record."""
SHOWN_IDS = 5
"""Ids named in a message; the JSON output has them all."""


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
    tags_outside: dict[str, list[str]]
    """Expert tags on ids outside the label set, by flag."""
    run: str = ""
    """The run's name."""
    completeness: str = "unknown"
    """Whether the run covers its input (:data:`rose_sql.analysis.runs.Completeness`)."""
    tag_sources: dict[str, str] = field(default_factory=dict)
    """The id lists the experts' tags came from, by flag."""
    other_db: list[tuple[str, str, str]] = field(default_factory=list)
    """Labelled ids whose record names another database: (id, the record's, the label's)."""
    other_sql: list[str] = field(default_factory=list)
    """Labelled ids whose record holds other predicted SQL than the label is about."""
    unchecked_sql: int = 0
    """Labels with predicted SQL paired with a record that has none (a scores file): paired by id alone."""
    systems: tuple[str, ...] = ()
    """The systems whose predictions the labels are about, when the labels file says."""

    @property
    def absent(self) -> list[str]:
        """Labelled ids without a record of the same item."""
        return [p.id for p in self.items if p.unscored_reason in _ABSENT]

    @property
    def with_record(self) -> int:
        """Labelled items with a record of the same item."""
        return len(self.items) - len(self.absent)


_ABSENT = ("absent_from_run", "db_mismatch", "sql_mismatch")


def pair(run: Run, labels: LabelSet) -> Pairing:
    """Match a run's records with a label set by id, and by database and predicted SQL where both say."""
    records = {key(r.id): r for r in run.records}
    items = []
    other_db: list[tuple[str, str, str]] = []
    other_sql: list[str] = []
    unchecked = 0
    for k, h in labels.labels.items():
        r = records.get(k)
        why = "absent_from_run"
        if r is not None and r.db_id and h.db_id and r.db_id != h.db_id:
            other_db.append((k, r.db_id, h.db_id))
            r, why = None, "db_mismatch"
        elif r is not None and h.pred_sql is not None:
            if not r.pred_sql:
                unchecked += 1
            elif normalize(r.pred_sql) != normalize(h.pred_sql):
                other_sql.append(k)
                r, why = None, "sql_mismatch"
        flags: dict[Flag, tuple[bool | None, bool | None]] = {
            f: (_tag(h, f), getattr(r.labels, f) if r is not None else None) for f in FLAGS
        }
        if r is None:
            items.append(Paired(labels.name, k, h.correct, None, why, h.reviewed, flags))
            continue
        reason = r.unscored_reason or ("unscored" if r.score is None else None)
        items.append(Paired(labels.name, k, h.correct, r.score, reason, h.reviewed, flags))
    unlabelled = sum(1 for k in records if k not in labels.labels)
    outside = {f: list(ids) for f, ids in labels.tags_outside.items()}
    return Pairing(
        labels.name,
        items,
        unlabelled,
        outside,
        run.name,
        run.completeness,
        dict(labels.tag_sources),
        other_db,
        other_sql,
        unchecked,
        labels.systems,
    )


def pair_runs(runs: Sequence[Run], sets: Sequence[LabelSet]) -> list[Pairing]:
    """Pair runs with label sets, in order (one labels file per run), refusing pairs about other items."""
    if len(runs) != len(sets):
        raise UsageError(f"{len(runs)} runs but {len(sets)} labels files: give one labels file per run, in order")
    pairings = [pair(r, s) for r, s in zip(runs, sets, strict=True)]
    for p in pairings:
        check_overlap(p)
    return pairings


def _some(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:SHOWN_IDS])
    return shown + (f" and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else "")


def check_overlap(p: Pairing) -> None:
    """Refuse (:class:`UsageError`) a run and a labels file that are not about the same items."""
    labelled = len(p.items)
    if p.with_record >= MIN_LABELLED_WITH_RECORD * labelled:
        return
    why = []
    if p.other_db:
        k, here, there = p.other_db[0]
        why.append(
            f"{len(p.other_db)} share an id with a record about another database "
            f"(id {k}: {here} in the run, {there} in the labels)"
        )
    if p.other_sql:
        about = f" (the labels are about {', '.join(p.systems)})" if p.systems else ""
        why.append(
            f"{len(p.other_sql)} are about another prediction than the run's for the same question{about} "
            f"(ids {_some(p.other_sql)})"
        )
    absent = [p.id for p in p.items if p.unscored_reason == "absent_from_run"]
    if absent:
        why.append(f"{len(absent)} have no record (ids {_some(absent)})")
    raise UsageError(
        f"run {p.run} and labels {p.subset} are not about the same items: only {p.with_record} of the "
        f"{labelled} labelled items have a record of the same item; {'; '.join(why)}. Agreement needs at least "
        f"half of the labelled items ({MIN_LABELLED_WITH_RECORD:.0%}): below that the metrics describe a "
        "remainder the labels were not chosen for, as when a run meets another benchmark's labels, or "
        "another system's predictions of the same questions, or the labels files are given in another "
        "order than the runs. Give each run the labels of its own items."
    )


def pairing_warnings(pairings: Sequence[Pairing]) -> list[str]:
    """What the metrics do not show about the pairs: partial runs, databases that differ, tags not applied."""
    out = []
    for p in pairings:
        if p.completeness == "partial":
            out.append(f"{p.run} is a partial run ({PARTIAL_HELP}): labelled items it lacks count as absent_from_run")
        elif p.completeness == "unknown":
            out.append(f"{p.run}: completeness unknown (no manifest: made by an older rose-sql)")
        if p.other_db:
            k, here, there = p.other_db[0]
            out.append(
                f"{p.run}: {len(p.other_db)} records share an id with a label of {p.subset} but name another "
                f"database (id {k}: {here} in the run, {there} in the labels): counted as absent (db_mismatch)"
            )
        if p.other_sql:
            out.append(
                f"{p.run}: {len(p.other_sql)} labels of {p.subset} are about another prediction than the run's "
                f"for the same question (ids {_some(p.other_sql)}): left out (sql_mismatch)"
            )
        if p.unchecked_sql:
            out.append(
                f"{p.run}: {p.unchecked_sql} records carry no predicted SQL (a scores file): paired with "
                f"{p.subset}'s labels by id alone, unchecked against the SQL the labels are about"
            )
        for flag, ids in p.tags_outside.items():
            if ids:
                source = p.tag_sources.get(flag, "the tag list")
                out.append(
                    f"--{flag}-ids {source}: {len(ids)} tagged ids are not items of {p.subset} "
                    f"(ids {_some(ids)}): not counted"
                )
    return out


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


Interval = list[float]
"""A 95 % interval, ``[low, high]`` in percent."""


@dataclass(frozen=True, slots=True)
class Metrics:
    """The agreement metrics of a table, in percent (None where undefined)."""

    kappa: float | None
    accuracy: float | None
    mcc: float | None
    f1: float | None
    precision: float | None
    recall: float | None

    @classmethod
    def of(cls, c: Confusion) -> Metrics:
        return cls(**metrics(c))

    def get(self, name: str) -> float | None:
        """A metric by name (one of :data:`METRICS`)."""
        value: float | None = getattr(self, name)
        return value


@dataclass(frozen=True, slots=True)
class FlagAgreement:
    """A judge flag (GoldX or AmbQ) against the experts' tags."""

    tagged: int
    """Items the experts tagged."""
    flagged: int
    """Of the items tagged either way, those the judge flagged."""
    both: int
    """Tagged and flagged."""
    items: int
    """Items the experts tagged either way."""
    judge_flagged_overall: int
    """Items the judge flagged, tagged either way or not."""
    tags_outside_set: int
    """Tagged ids that are not items of the label set (not counted)."""
    precision: float | None
    recall: float | None
    ci95: dict[str, Interval | None]
    """The 95 % intervals of precision and recall (empty without a bootstrap)."""


@dataclass(frozen=True, slots=True)
class Agreement:
    """The agreement of a set of paired items: metrics, counts, intervals, flags."""

    metrics: Metrics
    n: int
    """Items in the metrics."""
    unscored: int
    """Labelled items without a score (absent from the run, or unscored), by reason below."""
    unscored_reasons: dict[str, int]
    unscored_counted_as: Literal["excluded", "wrong"]
    unlabelled: int
    """Records without a label (ignored)."""
    unreviewed: int
    """Items labelled without human review that are included."""
    confusion: Confusion
    ci95: dict[str, Interval | None]
    """Each metric's 95 % interval (empty without a bootstrap)."""
    flags: dict[Flag, FlagAgreement]
    """The judge's flags against the experts' tags, where they tagged."""

    def to_dict(self) -> dict[str, object]:
        """As ``rose agree --json`` prints it (the metrics at the top level)."""
        c = self.confusion
        return {
            **{name: self.metrics.get(name) for name in METRICS},
            "n": self.n,
            "unscored": self.unscored,
            "unscored_reasons": dict(self.unscored_reasons),
            "unscored_counted_as": self.unscored_counted_as,
            "unlabelled": self.unlabelled,
            "unreviewed": self.unreviewed,
            "confusion": {"tp": c.tp, "fp": c.fp, "fn": c.fn, "tn": c.tn},
            "ci95": dict(self.ci95),
            "flags": {f: asdict(x) for f, x in self.flags.items()},
        }


@dataclass(frozen=True, slots=True)
class SubsetAgreement:
    """One labels file's agreement, with the run it was paired with."""

    agreement: Agreement
    run: str
    """The run's name."""
    run_completeness: str
    """Whether the run covers its input."""
    labelled_with_record: int
    """Labelled items that have a record of the same item."""
    tags_outside_ids: dict[str, list[str]]
    """Tagged ids that are not items of the labels file, by flag (where there are any)."""

    def to_dict(self) -> dict[str, object]:
        return {
            **self.agreement.to_dict(),
            "run": self.run,
            "run_completeness": self.run_completeness,
            "labelled_with_record": self.labelled_with_record,
            "tags_outside_ids": dict(self.tags_outside_ids),
        }


@dataclass(frozen=True, slots=True)
class Report:
    """The agreement of runs with their labels: merged, per subset, and what the metrics do not show."""

    merged: Agreement
    subsets: dict[str, SubsetAgreement]
    warnings: list[str]
    unscored: UnscoredPolicy
    resamples: int
    seed: int

    def to_dict(self) -> dict[str, object]:
        """As ``rose agree --json`` prints it: the merged block at the top level, each subset under ``subsets``."""
        return {
            **self.merged.to_dict(),
            "warnings": list(self.warnings),
            "subsets": {name: b.to_dict() for name, b in self.subsets.items()},
            "convention": {
                "positive": "the prediction is correct (score 1, label true)",
                "unscored": "counted as wrong" if self.unscored == "wrong" else "excluded from the metrics and counted",
                "percent": "two decimals",
                "bootstrap": {
                    "resamples": self.resamples,
                    "seed": self.seed,
                    "interval": "95% percentile, stratified by subset",
                },
            },
        }


def block(
    items: Sequence[Paired],
    *,
    unscored: UnscoredPolicy = "exclude",
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    unlabelled: int = 0,
    tags_outside: dict[str, list[str]] | None = None,
) -> Agreement:
    """The agreement of a set of paired items (several subsets are resampled within themselves)."""
    subsets = sorted({p.subset for p in items})
    strata = [_judged([p for p in items if p.subset == s], unscored) for s in subsets]
    pairs = [x for s in strata for x in s]
    c = Confusion.of(pairs)
    missing = Counter(str(p.unscored_reason) for p in items if p.score is None)
    flags: dict[Flag, FlagAgreement] = {}
    for flag in FLAGS:
        flag_strata = [_flag_table([p for p in items if p.subset == s], flag) for s in subsets]
        table = [x for s in flag_strata for x in s]
        if not table:
            continue
        fc = Confusion.of(table)
        stats = _flag_stats(table)
        flags[flag] = FlagAgreement(
            tagged=fc.tp + fc.fn,
            flagged=fc.tp + fc.fp,
            both=fc.tp,
            items=fc.n,
            judge_flagged_overall=sum(1 for p in items if p.flags[flag][1]),
            tags_outside_set=len((tags_outside or {}).get(flag, [])),
            precision=stats["precision"],
            recall=stats["recall"],
            ci95=_bootstrap(flag_strata, _flag_stats, resamples, seed) if resamples else {},
        )
    return Agreement(
        metrics=Metrics.of(c),
        n=c.n,
        unscored=sum(missing.values()),
        unscored_reasons=dict(sorted(missing.items())),
        unscored_counted_as="excluded" if unscored == "exclude" else "wrong",
        unlabelled=unlabelled,
        unreviewed=sum(1 for p in items if not p.reviewed),
        confusion=c,
        ci95=_bootstrap(strata, lambda s: metrics(Confusion.of(s)), resamples, seed) if resamples and c.n else {},
        flags=flags,
    )


def agree(
    pairings: Sequence[Pairing],
    *,
    unscored: UnscoredPolicy = "exclude",
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Report:
    """Agreement per subset and merged."""
    subsets = {}
    outside: dict[str, list[str]] = {}
    for p in pairings:
        subsets[p.subset] = SubsetAgreement(
            block(
                p.items,
                unlabelled=p.unlabelled,
                tags_outside=p.tags_outside,
                unscored=unscored,
                resamples=resamples,
                seed=seed,
            ),
            p.run,
            p.completeness,
            p.with_record,
            {f: ids for f, ids in p.tags_outside.items() if ids},
        )
        for f, ids in p.tags_outside.items():
            outside.setdefault(f, []).extend(ids)
    merged = block(
        [x for p in pairings for x in p.items],
        unlabelled=sum(p.unlabelled for p in pairings),
        tags_outside=outside,
        unscored=unscored,
        resamples=resamples,
        seed=seed,
    )
    return Report(merged, subsets, pairing_warnings(pairings), unscored, resamples, seed)
