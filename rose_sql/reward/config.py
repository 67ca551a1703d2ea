"""Every constant of the reward in one frozen record, with its documented default."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

Schedule = Literal["constant", "linear", "cosine"]
"""How the syntax weight alpha moves over training steps (see :func:`rose_sql.reward.weights`)."""


def _default_workers() -> int:
    return max(2, 2 * (os.cpu_count() or 1))


@dataclass(frozen=True, slots=True)
class RewardConfig:
    """Every constant of the reward, with its default. Built once and passed down."""

    match: float = 1.0
    """Execution reward when the results are equal under our comparator."""
    partial: float = 0.5
    """Execution reward for a near miss (see :func:`execution_outcome`)."""
    wrong: float = 0.0
    """Execution reward for a query that runs but returns other rows."""
    error: float = -1.0
    """Execution reward for a query that fails, is rejected by the sandbox, or when no SQL is found."""
    timeout: float = -0.5
    """Execution reward for a query interrupted at ``timeout_s``."""
    partial_max_ratio: float = 4.0
    """Partial credit only when the larger row count is at most this times the smaller one: dropping a
    filter and returning the whole table is a superset of almost any gold."""
    partial_max_columns: int = 6
    """Column permutations are searched for partial credit up to this width (else columns as given)."""
    clause_weights: tuple[tuple[str, float], ...] = (
        ("select", 3.0),
        ("from", 3.0),
        ("where", 2.0),
        ("group", 1.0),
        ("having", 1.0),
        ("order", 1.0),
        ("limit", 0.5),
    )
    """Weight of each clause in the clause score (only clauses present in either query count)."""
    clause_mix: float = 0.4
    """Share of the clause score in the syntax reward; the rest is the whole-tree similarity."""
    max_ted_nodes: int = 300
    """Exact tree edit distance for clauses up to this many nodes; larger ones use the label-bag bound."""
    syntax: bool = True
    """Compute the syntax reward; False skips parsing and tree edit distance and weighs execution
    alone (alpha = 0, beta = 1): the cheapest reward, for when only results matter."""
    schedule: Schedule = "linear"
    """How alpha (the syntax weight) moves from ``alpha_start`` to ``alpha_end``; constant keeps alpha_start."""
    alpha_start: float = 0.6
    """Syntax weight at step 0 (syntax-heavy); beta = 1 - alpha weighs execution."""
    alpha_end: float = 0.1
    """Syntax weight from ``total_steps`` on, and when no step is known (execution-heavy)."""
    total_steps: int = 1000
    """Training steps over which the schedule moves."""
    clause_cap: float = 0.3
    """The clause part of the total may be at most this share of the total (none when the rest is <= 0)."""
    unscored: float = 0.0
    """What adapters that need a number (verl, OpenRLHF) give an unscored item; TRL gets None."""
    timeout_s: float = 2.0
    """Wall-clock limit of one predicted query, enforced inside SQLite."""
    gold_timeout_s: float = 30.0
    """Wall-clock limit of one gold query (run once, then cached); past it the item is ``gold_error``."""
    max_rows: int = 20_000
    """Rows kept per result; a gold past it is ``undecidable``, a prediction past it is ``wrong``."""
    max_sql_chars: int = 20_000
    """Longer extracted SQL is rejected (reward ``error``)."""
    float_digits: int = 12
    """Numbers compare after rounding to this many significant digits."""
    workers: int = field(default_factory=_default_workers)
    """Threads running a batch's queries at most; SQLite releases the GIL while a query runs."""
    slow_query_s: float = 0.02
    """One thread runs a batch's queries in turn; when every running query has taken this long,
    another thread joins (up to ``workers``), so slow queries overlap and fast ones do not contend."""
    processes: int = 0
    """Worker processes sharing a batch's executions, comparisons and syntax scores (0: all in this
    process): a batch goes to them in balanced chunks, a question's completions together. Use the
    number of cores when cores are free; each worker keeps its own caches."""
    memo_size: int = 50_000
    """Parses, (prediction, gold) syntax scores and clause-tree distances kept, each (LRU), so
    repeated completions cost nothing (0: none kept)."""
    cache_cells: int = 2_000_000
    """Result cells each of the two executors (gold, prediction) keeps cached (LRU beyond it)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.clause_cap < 1.0:
            raise ValueError("clause_cap must be in [0, 1)")
        if not 0.0 <= self.clause_mix <= 1.0:
            raise ValueError("clause_mix must be in [0, 1]")
        if self.schedule not in ("constant", "linear", "cosine"):
            raise ValueError(f"unknown schedule {self.schedule!r}")
        if self.total_steps <= 0 or self.workers <= 0 or self.processes < 0 or self.slow_query_s < 0:
            raise ValueError("total_steps and workers must be positive, processes and slow_query_s not negative")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> RewardConfig:
        """A config from the keys of ``values`` that name fields (others are ignored)."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in values.items() if k in names}
        if isinstance(kw.get("clause_weights"), Mapping):
            kw["clause_weights"] = tuple(kw["clause_weights"].items())
        return cls(**kw)
