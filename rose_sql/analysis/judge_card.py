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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from rose_sql.analysis.labels import LabelSet
from rose_sql.analysis.runs import Run
from rose_sql.errors import InputError, UsageError
from rose_sql.provenance import JudgeInfo

CARD_VERSION = 1
UPGRADE_METRICS = ("kappa", "accuracy", "mcc", "f1")
_PARAMETERS = ("temperature", "seed", "max_tokens", "policy", "matched_refuter", "reask")
_WHEN_SET = ("structured", "reasoning_effort", "options")
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
    return found[0]


def _provider(base_url: str | None) -> str:
    if not base_url:
        return "openai (or $OPENAI_BASE_URL at run time)"
    return urlparse(base_url).hostname or base_url


def build_card(
    runs: Sequence[Run],
    labels: Sequence[LabelSet],
    agreement: dict[str, Any],
    *,
    validation_set: str,
    date: str | None = None,
    version: str = "",
) -> dict[str, Any]:
    """The card of the judge that produced ``runs``, with its agreement on ``validation_set``."""
    judge = _judge(runs)
    month = _month(date)
    subsets = {name: _short(block) for name, block in agreement.get("subsets", {}).items()}
    return {
        "name": card_name(judge.model, month),
        "card_version": CARD_VERSION,
        "model": judge.model,
        "provider": judge.provider or _provider(judge.base_url),
        "base_url": judge.base_url,
        "date": month,
        "created": datetime.now(UTC).strftime("%Y-%m-%d"),
        "prompts": judge.prompts,
        "parameters": _parameters(judge),
        "validation_set": {
            "name": validation_set,
            "subsets": [
                {"name": ls.name, "file": ls.path.name, "sha256": ls.sha256, "items": len(ls.labels)} for ls in labels
            ],
            "sha256": "+".join(ls.sha256 for ls in labels),
        },
        "agreement": {**_short(agreement), "subsets": subsets, "convention": agreement.get("convention")},
        "runs": [str(r.path) for r in runs],
        "rose_sql_version": version,
    }


def _parameters(judge: JudgeInfo) -> dict[str, Any]:
    """The judge's parameters; for imported judgements, only those their summary states."""
    values = {k: getattr(judge, k) for k in _PARAMETERS}
    values |= {k: v for k in _WHEN_SET if (v := getattr(judge, k)) is not None}
    if judge.provider is not None:  # imported: what is unknown is left out, not shown as null
        return {k: v for k, v in values.items() if v is not None}
    return values


def _short(block: dict[str, Any]) -> dict[str, Any]:
    keys = ("kappa", "accuracy", "mcc", "f1", "precision", "recall", "n", "unscored", "confusion", "ci95", "flags")
    return {k: block[k] for k in keys if k in block}


def load_card(path: Path) -> dict[str, Any]:
    """A judge card from disk, checked for the fields the upgrade rule needs."""
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(path, "no such judge card") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(path, f"not a judge card: {e}") from None
    if not isinstance(card, dict) or "agreement" not in card or "validation_set" not in card:
        raise InputError(path, "not a judge card (no 'agreement' or 'validation_set')")
    for m in UPGRADE_METRICS:
        if not isinstance(card["agreement"].get(m), int | float):
            raise InputError(path, f"the card has no number for {m}")
    return card


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of the upgrade rule."""

    upgrade: bool
    """True: the new judge replaces the old one."""
    reasons: list[str]
    """One line per metric, then the conclusion."""


def upgrade(old: dict[str, Any], new: dict[str, Any]) -> Verdict:
    """The paper's rule: replace only if the new judge is strictly better on kappa, accuracy, MCC and F1."""
    old_set, new_set = old["validation_set"], new["validation_set"]
    if (old_set.get("name"), old_set.get("sha256")) != (new_set.get("name"), new_set.get("sha256")):
        raise UsageError(
            f"the cards were measured on different validation sets ({old_set.get('name')} "
            f"{old_set.get('sha256')} vs {new_set.get('name')} {new_set.get('sha256')}): not comparable"
        )
    lines, better = [], []
    for m in UPGRADE_METRICS:
        a, b = float(old["agreement"][m]), float(new["agreement"][m])
        ok = b > a
        better.append(ok)
        word = "better" if ok else ("equal" if b == a else "worse")
        interval = (old["agreement"].get("ci95") or {}).get(m)
        inside = " (inside the old judge's 95% interval)" if interval and interval[0] <= b <= interval[1] else ""
        lines.append(f"{m}: {b:.2f} vs {a:.2f} ({b - a:+.2f}) {word}{inside}")
    if all(better):
        lines.append(f"upgrade: {new['name']} beats {old['name']} on all four metrics")
    else:
        failed = ", ".join(m for m, ok in zip(UPGRADE_METRICS, better, strict=True) if not ok)
        lines.append(f"keep {old['name']}: {new['name']} is not better on {failed}")
    return Verdict(all(better), lines)
