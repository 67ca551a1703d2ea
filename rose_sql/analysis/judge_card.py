"""Judge cards and the upgrade rule: judges are versioned, and replaced only when better on every count.

A card records one judge configuration (model, provider, date, prompt hashes, parameters, the method,
taken from the run's ``summary.json``) with its agreement on a named validation set, intervals included.
It is named ``ROSE_<model>-<yyyymm>`` (``<method>_<model>-<yyyymm>`` for another method: ``FLEX_o3-202601``).
:func:`upgrade` applies the ROSE paper's rule: the new judge replaces the old only if it beats it on kappa,
accuracy, MCC and F1 at once, on the same validation set.

One configuration run several times does not give the same agreement twice: the three o3 ROSE runs the
authors published of ROSE-VEC's BIRD part reach kappa 80.68, 79.15 and 86.46. A card built from several
runs of one configuration (:func:`build_repeated_card`) keeps each run's metrics (``repeats``) and their
``spread``, its headline being the run of median kappa; and the upgrade rule refuses a margin that lies
within the larger spread of the two cards: such a difference is what running the same judge again gives.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from rose_sql.analysis.agree import METRICS, Agreement, FlagAgreement, Report
from rose_sql.analysis.labels import Flag, LabelSet
from rose_sql.analysis.runs import Run
from rose_sql.errors import InputError, UsageError
from rose_sql.provenance import JudgeInfo

if TYPE_CHECKING:
    from pydantic import TypeAdapter

CARD_VERSION = 2
"""2: ``method``, ``repeats`` and ``spread`` (cards of version 1 read with none)."""
UPGRADE_METRICS = ("kappa", "accuracy", "mcc", "f1")
_PARAMETERS = ("temperature", "seed", "max_tokens", "policy", "matched_refuter", "reask")
_WHEN_SET = ("structured", "reasoning_effort", "options", "replies", "local")
"""Parameters shown only where the run recorded them (runs before them, and imports, did not)."""


def card_name(model: str, date: str, method: str = "ROSE") -> str:
    """``ROSE_<model>-<yyyymm>`` (``<method>_<model>-<yyyymm>`` for a method other than ROSE); characters other
    than letters, digits, ``.`` and ``-`` become ``-``."""
    safe = re.sub(r"[^A-Za-z0-9.-]+", "-", model).strip("-")
    prefix = re.sub(r"[^A-Za-z0-9.-]+", "-", method).strip("-") or "ROSE"
    return f"{prefix}_{safe}-{date.replace('-', '')}"


def method_of(judge: JudgeInfo) -> str:
    """The method a judge configuration ran: ROSE unless its settings name another (``FLEX``, ``ProverOnly``);
    another run of a method (``ROSE-thread-4``) is that method."""
    method = str(judge.settings.get("method") or "ROSE")
    return re.sub(r"-thread-\d+$", "", method)


def _month(date: str | None) -> str:
    if date is None:
        return datetime.now(UTC).strftime("%Y-%m")
    if not re.fullmatch(r"\d{4}-?(0[1-9]|1[0-2])", date):
        raise UsageError(f"--date {date!r} is not a month (YYYY-MM)")
    return f"{date[:4]}-{date[-2:]}"


def _judge(runs: Sequence[Run]) -> JudgeInfo:
    judges = [r.summary.judge if r.summary is not None else None for r in runs]
    missing = [str(r.path) for r, j in zip(runs, judges, strict=True) if j is None]
    if missing:
        raise UsageError(f"no judge configuration in the summary.json of {', '.join(missing)}: no judge to describe")
    found = [j for j in judges if j is not None]
    models = {j.model for j in found}
    if len(models) > 1:
        raise UsageError(f"the runs were judged by different models ({', '.join(sorted(models))}): one card each")
    methods = {method_of(j) for j in found}
    if len(methods) > 1:
        raise UsageError(f"the runs are of different methods ({', '.join(sorted(methods))}): one card each")
    files = {(j.local or {}).get("sha256") for j in found}
    if len(files) > 1:
        named = ", ".join(sorted(str(f) if f else "a remote endpoint" for f in files))
        raise UsageError(f"the runs were judged by different GGUF files under one name ({named}): one card each")
    return found[0]


def _local_provider(local: dict[str, Any]) -> str:
    """A pinned local judge (``--judge-gguf``) is named by its file's hash and its runtime."""
    return f"gguf sha256:{local.get('sha256')} ({local.get('runtime')})"


def _provider(base_url: str | None) -> str:
    if not base_url:
        return "openai (or $OPENAI_BASE_URL at run time)"
    return urlparse(base_url).hostname or base_url


@dataclass(frozen=True, slots=True)
class SubsetRef:
    """One labels file of a validation set."""

    name: str
    file: str = ""
    sha256: str = ""
    items: int = 0


@dataclass(frozen=True, slots=True)
class ValidationSet:
    """The labels a judge was measured on: named, and identified by their digests."""

    name: str
    sha256: str
    subsets: list[SubsetRef] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CardAgreement:
    """A card's agreement: the metrics in percent, their intervals, counts and flags (per subset below)."""

    kappa: float | None = None
    accuracy: float | None = None
    mcc: float | None = None
    f1: float | None = None
    precision: float | None = None
    recall: float | None = None
    n: int = 0
    unscored: int = 0
    confusion: dict[str, int] = field(default_factory=dict)
    ci95: dict[str, list[float] | None] = field(default_factory=dict)
    flags: dict[Flag, FlagAgreement] = field(default_factory=dict)
    subsets: dict[str, CardAgreement] = field(default_factory=dict)

    @classmethod
    def of(cls, a: Agreement, subsets: dict[str, CardAgreement] | None = None) -> CardAgreement:
        c = a.confusion
        return cls(
            **{m: a.metrics.get(m) for m in METRICS},
            n=a.n,
            unscored=a.unscored,
            confusion={"tp": c.tp, "fp": c.fp, "fn": c.fn, "tn": c.tn},
            ci95=dict(a.ci95),
            flags=dict(a.flags),
            subsets=subsets or {},
        )

    def metric(self, name: str) -> float | None:
        """A metric by name (one of :data:`rose_sql.analysis.agree.METRICS`)."""
        value: float | None = getattr(self, name)
        return value


@dataclass(frozen=True, slots=True)
class Repeat:
    """One run of a configuration carded from several: its metrics, in percent."""

    run: str
    kappa: float | None = None
    accuracy: float | None = None
    mcc: float | None = None
    f1: float | None = None
    n: int = 0
    unscored: int = 0


@dataclass(frozen=True, slots=True)
class JudgeCard:
    """One judge configuration and its agreement on a named validation set (a card's JSON, typed)."""

    name: str
    """``ROSE_<model>-<yyyymm>``."""
    validation_set: ValidationSet
    agreement: CardAgreement
    card_version: int = CARD_VERSION
    model: str = ""
    provider: str = ""
    base_url: str | None = None
    date: str = ""
    """The judge's month, ``YYYY-MM``."""
    created: str = ""
    prompts: dict[str, str] | None = None
    """Digests of the system prompts."""
    parameters: dict[str, object] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    rose_sql_version: str = ""
    method: str = "ROSE"
    """The method the judge ran (ROSE, ProverOnly, FLEX, llmsolver...)."""
    repeats: list[Repeat] = field(default_factory=list)
    """Each run's metrics, for a card built from several runs of one configuration (empty otherwise)."""
    spread: dict[str, list[float]] = field(default_factory=dict)
    """Per upgrade metric, ``[min, max]`` over :attr:`repeats` (empty for a card of one run)."""

    def spread_width(self, metric: str) -> float:
        """How far apart the repeats lie on ``metric`` (0 for a card of one run)."""
        lo_hi = self.spread.get(metric)
        return round(lo_hi[1] - lo_hi[0], 2) if lo_hi else 0.0

    def to_dict(self) -> dict[str, object]:
        """The card's JSON."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object, path: Path | str = "<card>") -> JudgeCard:
        """A card read back, validated; :class:`InputError` names the file and the field."""
        from pydantic import ValidationError

        try:
            card: JudgeCard = _adapter().validate_python(data)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(map(str, err["loc"])) or "the card"
            raise InputError(path, f"not a judge card: {where}: {err['msg']}") from None
        return card


@cache
def _adapter() -> TypeAdapter[JudgeCard]:
    from pydantic import TypeAdapter

    return TypeAdapter(JudgeCard)


def build_card(
    runs: Sequence[Run],
    labels: Sequence[LabelSet],
    agreement: Report,
    *,
    validation_set: str,
    date: str | None = None,
    version: str = "",
) -> JudgeCard:
    """The card of the judge that produced ``runs``, with its agreement on ``validation_set``."""
    judge = _judge(runs)
    month = _month(date)
    method = method_of(judge)
    subsets = {name: CardAgreement.of(b.agreement) for name, b in agreement.subsets.items()}
    return JudgeCard(
        name=card_name(judge.model, month, method),
        method=method,
        model=judge.model,
        provider=judge.provider or (_local_provider(judge.local) if judge.local else _provider(judge.base_url)),
        base_url=judge.base_url,
        date=month,
        created=datetime.now(UTC).strftime("%Y-%m-%d"),
        prompts=judge.prompts,
        parameters=_parameters(judge),
        validation_set=ValidationSet(
            validation_set,
            "+".join(ls.sha256 for ls in labels),
            [SubsetRef(ls.name, ls.path.name, ls.sha256, len(ls.labels)) for ls in labels],
        ),
        agreement=CardAgreement.of(agreement.merged, subsets),
        runs=[str(r.path) for r in runs],
        rose_sql_version=version,
    )


def build_repeated_card(
    runs: Sequence[Run],
    labels: LabelSet,
    agreements: Sequence[Report],
    *,
    validation_set: str,
    date: str | None = None,
    version: str = "",
) -> JudgeCard:
    """The card of one configuration run several times on one labels file (``agreements[i]`` is ``runs[i]``'s):
    the run of median kappa is the headline, with its intervals; every run's metrics are kept, and their
    spread."""
    if len(runs) < 2 or len(runs) != len(agreements):
        raise UsageError("a card of repeated runs needs at least two runs, each with its agreement")
    repeats = [
        Repeat(
            str(r.path),
            kappa=a.merged.metrics.get("kappa"),
            accuracy=a.merged.metrics.get("accuracy"),
            mcc=a.merged.metrics.get("mcc"),
            f1=a.merged.metrics.get("f1"),
            n=a.merged.n,
            unscored=a.merged.unscored,
        )
        for r, a in zip(runs, agreements, strict=True)
    ]
    order = sorted(range(len(runs)), key=lambda i: (repeats[i].kappa is None, repeats[i].kappa or 0.0))
    median = order[(len(order) - 1) // 2]
    card = build_card([runs[median]], [labels], agreements[median], validation_set=validation_set, date=date)
    _judge(runs)  # one model, one method
    spread = {}
    for m in UPGRADE_METRICS:
        values = [v for rep in repeats if (v := getattr(rep, m)) is not None]
        if values:
            spread[m] = [min(values), max(values)]
    return replace(
        card,
        runs=[str(r.path) for r in runs],
        repeats=repeats,
        spread=spread,
        rose_sql_version=version,
    )


def _parameters(judge: JudgeInfo) -> dict[str, object]:
    """The judge's parameters; for imported judgements, only those their summary states."""
    known = {"matched_refuter": judge.matched_refuter, "structured": judge.structured, "replies": judge.replies}
    flat: dict[str, object] = {**known, "local": judge.local, **judge.settings}
    values = {k: flat.get(k) for k in _PARAMETERS}
    values |= {k: v for k in _WHEN_SET if (v := flat.get(k)) not in (None, {})}
    if judge.provider is not None:  # imported: what is unknown is left out, not shown as null
        return {k: v for k, v in values.items() if v is not None}
    return values


def load_card(path: Path) -> JudgeCard:
    """A judge card from disk, checked for the fields the upgrade rule needs."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(path, "no such judge card") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(path, f"not a judge card: {e}") from None
    if not isinstance(data, dict) or "agreement" not in data or "validation_set" not in data:
        raise InputError(path, "not a judge card (no 'agreement' or 'validation_set')")
    card = JudgeCard.from_dict(data, path)
    for m in UPGRADE_METRICS:
        if card.agreement.metric(m) is None:
            raise InputError(path, f"the card has no number for {m}")
    return card


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of the upgrade rule."""

    upgrade: bool
    """True: the new judge replaces the old one."""
    reasons: list[str]
    """One line per metric, then the conclusion."""


def upgrade(old: JudgeCard, new: JudgeCard) -> Verdict:
    """The paper's rule: replace only if the new judge is strictly better on kappa, accuracy, MCC and F1; and,
    where either card was built from repeated runs, better on each by more than the larger of the two cards'
    run-to-run spreads (a margin within it is what running the same judge again gives)."""
    old_set, new_set = old.validation_set, new.validation_set
    if (old_set.name, old_set.sha256) != (new_set.name, new_set.sha256):
        raise UsageError(
            f"the cards were measured on different validation sets ({old_set.name} "
            f"{old_set.sha256} vs {new_set.name} {new_set.sha256}): not comparable"
        )
    lines, better = [], []
    for m in UPGRADE_METRICS:
        a, b = old.agreement.metric(m), new.agreement.metric(m)
        if a is None or b is None:
            raise UsageError(f"{old.name if a is None else new.name} has no number for {m}: not comparable")
        spread = max(old.spread_width(m), new.spread_width(m))
        ok = b > a and b - a > spread
        better.append(ok)
        word = "better" if b > a else ("equal" if b == a else "worse")
        interval = old.agreement.ci95.get(m)
        inside = " (inside the old judge's 95% interval)" if interval and interval[0] <= b <= interval[1] else ""
        within = ""
        if b > a and not ok:
            whose = old if old.spread_width(m) >= new.spread_width(m) else new
            lo, hi = whose.spread[m]
            within = (
                f", but within the run-to-run spread of {spread:.2f} points ({whose.name}'s {len(whose.repeats)} "
                f"runs: {lo:.2f} to {hi:.2f}): not better"
            )
        lines.append(f"{m}: {b:.2f} vs {a:.2f} ({b - a:+.2f}) {word}{inside}{within}")
    if all(better):
        lines.append(f"upgrade: {new.name} beats {old.name} on all four metrics")
    else:
        failed = ", ".join(m for m, ok in zip(UPGRADE_METRICS, better, strict=True) if not ok)
        lines.append(f"keep {old.name}: {new.name} is not better on {failed}")
    return Verdict(all(better), lines)
