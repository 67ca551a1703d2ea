"""The one frozen configuration, and the only home of defaults.

Built once at the entry point (CLI or API) and passed down; no module keeps mutable
settings of its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Self

MatchedRefuter = Literal["always", "evidence", "never"]
Policy = Literal["rose", "paper"]


def default_cache_dir() -> Path:
    """``$ROSE_CACHE_DIR``, else ``$XDG_CACHE_HOME/rose-sql``, else ``~/.cache/rose-sql``."""
    if os.environ.get("ROSE_CACHE_DIR"):
        return Path(os.environ["ROSE_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "rose-sql"


@dataclass(frozen=True, slots=True)
class JudgeConfig:
    """How the LLM judges are reached and how the cascade uses them."""

    model: str
    """Model name as the endpoint knows it (e.g. ``gpt-4o``, ``deepseek-reasoner``, ``qwen2.5:32b``)."""
    base_url: str | None = None
    """OpenAI-compatible endpoint; None uses ``OPENAI_BASE_URL`` or OpenAI itself."""
    api_key: str | None = None
    """API key; None uses ``OPENAI_API_KEY`` (never written to records or the cache)."""
    concurrency: int = 16
    """LLM calls in flight at once."""
    timeout_s: float = 180.0
    """Seconds one HTTP call may take before it is retried."""
    max_retries: int = 5
    """Retries (with exponential backoff) on 429, 5xx, timeouts and connection errors."""
    temperature: float | None = 0.0
    """Sampling temperature; dropped (and recorded as such) where the model refuses it."""
    seed: int | None = 20260101
    """Sampling seed where the provider accepts one."""
    max_tokens: int | None = None
    """Cap on completion tokens (None: the provider's default)."""
    reask: int = 1
    """How many times an invalid reply is re-asked before the item is unscored ``judge_error``."""
    cache_dir: Path | None = field(default_factory=default_cache_dir)
    """Content-addressed cache of every call; None disables it (``--no-cache``)."""
    budget_usd: float | None = None
    """Stop starting new calls once this much was spent (remaining items: ``budget_exhausted``)."""
    prices_path: Path | None = None
    """Extra price table (JSON: model -> {input, output} USD per million tokens)."""
    matched_refuter: MatchedRefuter = "evidence"
    """When results match: always ask the Refuter (the paper), only when evidence questions the match, never."""
    policy: Policy = "rose"
    """``paper`` reproduces the paper's flow exactly (implies matched_refuter=always)."""

    @property
    def effective_matched_refuter(self) -> MatchedRefuter:
        return "always" if self.policy == "paper" else self.matched_refuter


def _default_workers() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class Config:
    """Everything that changes how items are executed, compared and recorded."""

    timeout_s: float = 30.0
    """Wall-clock limit for one query; a query past it is interrupted inside SQLite."""
    max_rows: int = 100_000
    """Rows kept per result; past it the result is marked ``truncated`` (rows are still counted)."""
    max_result_bytes: int = 64 * 2**20
    """Approximate bytes of cell data kept per result; past it the result is truncated."""
    max_value_bytes: int = 16 * 2**20
    """SQLite's limit on one string or blob (SQLITE_LIMIT_LENGTH): stops ``randomblob`` giants."""
    max_sql_chars: int = 200_000
    """Longer SQL is rejected before it reaches a parser."""
    sqlite_heap_bytes: int = 2 * 2**30
    """Hard heap limit for SQLite in this process (``PRAGMA hard_heap_limit``)."""
    count_past_cap_s: float = 5.0
    """After truncation, keep stepping (without storing) this long to count the total rows."""
    float_digits: int = 12
    """Numbers are compared after rounding to this many significant digits (int 1 == float 1.0)."""
    workers: int = field(default_factory=_default_workers)
    """Processes running the deterministic stages (1: in this process); the judges are async."""
    cache_cells: int = 20_000_000
    """Cells of query results kept in the in-process execution cache (LRU beyond it)."""
    evidence: bool = True
    """Search for witnesses, distinguishing rows and gold smells (rose_sql.evidence)."""
    evidence_budget_s: float = 2.0
    """Time for one item's evidence."""
    evidence_max_candidates: int = 80
    """Witness candidates tried at most per item (keeps fast databases fast)."""
    evidence_max_db_bytes: int = 256 * 2**20
    """Larger databases are not copied for a witness search."""
    judge: JudgeConfig | None = None
    """The LLM judges; None runs the deterministic stages only (items then await a judge)."""

    def with_(self, **changes: object) -> Self:
        """A copy with some fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]


MAX_INPUT_BYTES = 256 * 2**20
"""Largest prediction or gold file read (``rose run --max-input-mb``): 250 times BIRD dev's largest
prediction file, and small enough that parsing it stays within a few GiB of memory."""
