"""Judge cards and the upgrade rule: judges are versioned, and replaced only when better on every count.

A card records one judge configuration (model, provider, date, prompt hashes, parameters, taken
from the run's ``summary.json``) with its agreement on a named validation set, intervals included.
It is named ``ROSE_<model>-<yyyymm>``. :func:`upgrade` applies the ROSE paper's rule: the new judge
replaces the old only if it beats it on kappa, accuracy, MCC and F1 at once, on the same validation
set.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
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

CARD_VERSION = 1
UPGRADE_METRICS = ("kappa", "accuracy", "mcc", "f1")
_PARAMETERS = ("temperature", "seed", "max_tokens", "policy", "matched_refuter", "reask")
_WHEN_SET = ("structured", "reasoning_effort", "options", "replies", "local")
"""Parameters shown only where the run recorded them (runs before them, and imports, did not)."""


def card_name(model: str, date: str) -> str:
    """``ROSE_<model>-<yyyymm>``; characters other than letters, digits, ``.`` and ``-`` become ``-``."""
    safe = re.sub(r"[^A-Za-z0-9.-]+", "-", model).strip("-")
    return f"ROSE_{safe}-{date.replace('-', '')}"


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
    subsets = {name: CardAgreement.of(b.agreement) for name, b in agreement.subsets.items()}
    return JudgeCard(
        name=card_name(judge.model, month),
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
    """The paper's rule: replace only if the new judge is strictly better on kappa, accuracy, MCC and F1."""
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
        ok = b > a
        better.append(ok)
        word = "better" if ok else ("equal" if b == a else "worse")
        interval = old.agreement.ci95.get(m)
        inside = " (inside the old judge's 95% interval)" if interval and interval[0] <= b <= interval[1] else ""
        lines.append(f"{m}: {b:.2f} vs {a:.2f} ({b - a:+.2f}) {word}{inside}")
    if all(better):
        lines.append(f"upgrade: {new.name} beats {old.name} on all four metrics")
    else:
        failed = ", ".join(m for m, ok in zip(UPGRADE_METRICS, better, strict=True) if not ok)
        lines.append(f"keep {old.name}: {new.name} is not better on {failed}")
    return Verdict(all(better), lines)
