"""Step 4: the total, ``alpha(t) * syntax + beta(t) * execution`` with the clause part capped, as a
:class:`Reward` that carries everything it is made of."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from rose_sql.config import RewardConfig
from rose_sql.reward.execution import RewardStatus, execution_value
from rose_sql.reward.syntax import UNPARSED, SyntaxScore


def weights(config: RewardConfig, step: int | None = None) -> tuple[float, float]:
    """``(alpha, beta)`` at training ``step``: alpha weighs syntax, beta = 1 - alpha execution.

    ``constant``: alpha_start throughout. ``linear`` and ``cosine`` go from alpha_start at step 0 to
    alpha_end at ``total_steps`` (and stay there). ``step=None`` means the end of the schedule.
    Without the syntax reward (``config.syntax`` false) it is always ``(0, 1)``.
    """
    if not config.syntax:
        return 0.0, 1.0
    if config.schedule == "constant":
        alpha = config.alpha_start
    else:
        # compared before dividing: a step of any size (10**4000) is past the end, never an overflow
        progress = 1.0 if step is None or step >= config.total_steps else max(step, 0) / config.total_steps
        if config.schedule == "cosine":
            progress = (1.0 - math.cos(math.pi * progress)) / 2.0
        alpha = config.alpha_start + (config.alpha_end - config.alpha_start) * progress
    return alpha, 1.0 - alpha


def combine(
    structure: SyntaxScore, execution: float | None, config: RewardConfig, step: int | None = None
) -> tuple[float | None, float]:
    """``(total, clause_part)``: alpha * syntax + beta * execution, the clause part capped.

    The clause part ``alpha * clause_mix * clause`` may be at most ``clause_cap`` of the total:
    when it is more, it is cut to ``cap / (1 - cap) * rest`` (rest = the total without it), and to
    0 when the rest is not positive, so a query cannot earn its way up on clause overlap alone.
    """
    alpha, beta = weights(config, step)
    clause_part = alpha * config.clause_mix * structure.clause
    if execution is None:
        return None, clause_part
    rest = alpha * (1.0 - config.clause_mix) * structure.tree + beta * execution
    cap = config.clause_cap
    if clause_part > cap * (rest + clause_part):
        clause_part = max(0.0, cap / (1.0 - cap) * rest)
    return rest + clause_part, clause_part


def bounds(config: RewardConfig, step: int | None = None) -> tuple[float, float]:
    """The lowest and highest total at ``step``: no SQL at all, and the gold itself (the default reward's)."""
    worst = SyntaxScore(False, 0.0, 0.0)
    best = SyntaxScore(True, 1.0, 1.0)
    low = combine(worst, min(config.error, config.timeout, config.wrong, config.partial), config, step)[0]
    high = combine(best, config.match, config, step)[0]
    assert low is not None and high is not None
    return low, high


@dataclass(frozen=True, slots=True)
class Reward:
    """A reward and everything it is made of."""

    total: float | None
    """``alpha * syntax + beta * execution`` after the clause cap; None when unscored."""
    execution: float | None
    """The execution reward; None when unscored (gold failed, result undecidable, invalid item)."""
    syntax: float
    """The syntax reward in [0, 1]."""
    clause_part: float
    """What the clause score contributes to ``total`` after the cap."""
    status: RewardStatus
    """What decided the execution reward."""
    detail: str
    """One line: the comparator's reason or the error."""
    alpha: float
    """Syntax weight used."""
    beta: float
    """Execution weight used."""
    sql: str | None
    """The SQL extracted from the completion (None when none was found)."""
    structure: SyntaxScore
    """Tree and per-clause similarities."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (per-clause scores as an object)."""
        d = asdict(self)
        d["structure"]["clauses"] = dict(self.structure.clauses)
        return d


def finish(
    status: RewardStatus,
    detail: str,
    sql: str | None,
    structure: SyntaxScore,
    config: RewardConfig,
    step: int | None,
    value: float | None = None,
) -> Reward:
    """The reward of an execution outcome and a syntax score at training ``step``; under a preset
    (``config.preset``), the preset's ``value`` is the total and the execution reward alike."""
    if config.preset != "rose":
        return Reward(value, value, 0.0, 0.0, status, detail, 0.0, 1.0, sql, structure)
    execution = execution_value(status, config)
    total, clause_part = combine(structure, execution, config, step)
    alpha, beta = weights(config, step)
    syntax = structure.value(config.clause_mix)
    return Reward(total, execution, syntax, clause_part, status, detail, alpha, beta, sql, structure)


def invalid(detail: str, config: RewardConfig, step: int | None = None) -> Reward:
    """The reward of an item that could not be scored at all (bad label, missing column)."""
    alpha, beta = weights(config, step)
    return Reward(None, None, 0.0, 0.0, "invalid", detail, alpha, beta, None, UNPARSED)
