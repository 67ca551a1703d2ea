"""LLM access over any OpenAI-compatible endpoint: retries, a content-addressed cache, accounting.

The official ``openai`` SDK does the HTTP (its transport is httpx), including bounded retries with
exponential backoff on 408/409/429/5xx, timeouts and connection errors. Around it this module adds
what an evaluator needs: every call keyed by (endpoint, model, parameters, messages) and cached on
disk as soon as it returns, temperature 0 and a seed where the provider accepts them (dropped and
recorded where it refuses them), token and cost accounting per call, and a budget.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from rose_sql.config import JudgeConfig
from rose_sql.errors import BudgetExhausted, InputError
from rose_sql.judges.cache import fence_key
from rose_sql.judges.context import Fences

Message = dict[str, str]


@dataclass(frozen=True, slots=True)
class ChatReply:
    """One chat completion as the judges use it (from the endpoint or the cache)."""

    content: str
    """The reply text (may be empty)."""
    reasoning: str | None
    """``reasoning_content`` where the provider returns one (DeepSeek, vLLM)."""
    prompt_tokens: int
    """Input tokens the provider counted."""
    completion_tokens: int
    """Output tokens the provider counted (reasoning included)."""
    reasoning_tokens: int | None
    """Reasoning tokens where reported."""
    cost_usd: float | None
    """Cost from the price table; None when the model has no price."""
    cached: bool
    """Served from the cache: no call was made."""
    params: dict[str, Any]
    """The sampling parameters the provider actually accepted (temperature, seed, max_tokens)."""
    seconds: float
    """Wall time of the call (0 when cached)."""
    key: str
    """The cache key (sha256 of endpoint, model, parameters and messages)."""


# --------------------------------------------------------------------------- prices


def load_prices(extra: Path | None = None) -> dict[str, tuple[float, float]]:
    """The bundled price table, extended or overridden by ``extra`` (USD per million tokens)."""
    table: dict[str, Any] = json.loads(resources.files("rose_sql.judges").joinpath("prices.json").read_text())
    if extra is not None:
        try:
            more = json.loads(extra.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise InputError(extra, f"cannot read the price table: {e}") from None
        if not isinstance(more, dict):
            raise InputError(extra, 'expected {"model": {"input": USD/Mtok, "output": USD/Mtok}}')
        table.update(more)
    prices = {}
    for model, p in table.items():
        if model.startswith("_"):
            continue
        try:
            prices[model] = (float(p["input"]), float(p["output"]))
        except (TypeError, KeyError, ValueError):
            raise InputError(extra or "prices.json", f"price of {model!r} needs numeric 'input' and 'output'") from None
    return prices


def price_of(model: str, prices: dict[str, tuple[float, float]]) -> tuple[float, float] | None:
    """The price of a model: exact name, else the longest known prefix (``gpt-4o-2024-08-06`` -> ``gpt-4o``)."""
    if model in prices:
        return prices[model]
    name = model.rsplit("/", 1)[-1]
    best = max((k for k in prices if name.startswith(k)), key=len, default=None)
    return prices[best] if best else None


# --------------------------------------------------------------------------- cache


class Cache:
    """Replies on disk, one JSON file per key, written atomically as each call returns."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / "llm" / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self._path(key).read_text(encoding="utf-8"))
            return data
        except (OSError, json.JSONDecodeError):
            return None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(entry, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)


# --------------------------------------------------------------------------- accounting


@dataclass
class Ledger:
    """Live totals of calls and cost for the progress bar and the budget; thread- and task-safe.

    Per-stage tokens and costs are not kept here: summary.json derives them from the records.
    """

    budget_usd: float | None = None
    calls: int = 0
    cached: int = 0
    cost_usd: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def check(self) -> None:
        """Raise :class:`BudgetExhausted` when the budget is spent."""
        if self.budget_usd is not None and self.cost_usd >= self.budget_usd:
            raise BudgetExhausted(f"budget of {self.budget_usd:g} USD spent")

    def add(self, c: ChatReply) -> None:
        with self._lock:
            if c.cached:
                self.cached += 1
            else:
                self.calls += 1
                self.cost_usd += c.cost_usd or 0.0


# --------------------------------------------------------------------------- client


_REFUSED_PARAM_HINTS = ("temperature", "seed", "max_tokens")


class LLM:
    """An OpenAI-compatible chat endpoint with caching, accounting and a concurrency limit."""

    def __init__(self, cfg: JudgeConfig, *, ledger: Ledger | None = None) -> None:
        import openai  # imported here: the deterministic stages never pay for it

        self.cfg = cfg
        self._bad_request = openai.BadRequestError
        self.client = openai.AsyncOpenAI(
            base_url=cfg.base_url,
            api_key=cfg.api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
            max_retries=cfg.max_retries,
            timeout=cfg.timeout_s,
        )
        self.endpoint = str(self.client.base_url).rstrip("/")
        self.cache = Cache(cfg.cache_dir) if cfg.cache_dir is not None else None
        self.fences = Fences(fence_key(cfg.cache_dir))
        """The fence markers of this client's prompts (keyed by the secret kept with the cache)."""
        self.prices = load_prices(cfg.prices_path)
        self.price = price_of(cfg.model, self.prices)
        self.ledger = ledger or Ledger(budget_usd=cfg.budget_usd)
        self._sem: asyncio.Semaphore | None = None
        self._refused: set[str] = set()

    def _params(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if self.cfg.temperature is not None:
            params["temperature"] = self.cfg.temperature
        if self.cfg.seed is not None:
            params["seed"] = self.cfg.seed
        if self.cfg.max_tokens is not None:
            params["max_tokens"] = self.cfg.max_tokens
        return {k: v for k, v in params.items() if k not in self._refused}

    def key(self, messages: list[Message]) -> str:
        """The cache key of a call with this client's endpoint, model and configured parameters."""
        wanted = {"temperature": self.cfg.temperature, "seed": self.cfg.seed, "max_tokens": self.cfg.max_tokens}
        blob = json.dumps(
            {"endpoint": self.endpoint, "model": self.cfg.model, "params": wanted, "messages": messages},
            sort_keys=True,
            ensure_ascii=False,
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        if self.price is None:
            return None
        return round((prompt_tokens * self.price[0] + completion_tokens * self.price[1]) / 1e6, 8)

    async def complete(self, messages: list[Message]) -> ChatReply:
        """One chat completion: from the cache if this exact call was made before, else from the endpoint.

        Raises :class:`BudgetExhausted` before a call that the budget no longer allows, and the
        SDK's ``openai.APIError`` family when the endpoint keeps failing after the retries.
        """
        key = self.key(messages)
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            c = _from_entry(hit, key, cached=True)
            self.ledger.add(c)
            return c
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.cfg.concurrency)
        async with self._sem:
            self.ledger.check()
            start = time.monotonic()
            response = await self._create(messages)
            seconds = time.monotonic() - start
        c = self._completion(response, key, seconds)
        if self.cache is not None:
            self.cache.put(key, _to_entry(c, self.cfg.model))
        self.ledger.add(c)
        return c

    async def _create(self, messages: list[Message]) -> Any:
        while True:
            params = self._params()
            try:
                return await self.client.chat.completions.create(
                    model=self.cfg.model,
                    messages=messages,  # type: ignore[arg-type]
                    **params,
                )
            except self._bad_request as e:  # e.g. reasoning models refuse temperature
                refused = {p for p in params if p in _REFUSED_PARAM_HINTS and p in str(e).lower()}
                if not refused:
                    raise
                self._refused |= refused

    def _completion(self, response: Any, key: str, seconds: float) -> ChatReply:
        choice = response.choices[0] if response.choices else None
        message = choice.message if choice is not None else None
        content = (message.content or "") if message is not None else ""
        reasoning = None
        if message is not None:
            extra = message.model_extra or {}
            reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        usage = response.usage
        pt = usage.prompt_tokens if usage else 0
        ct = usage.completion_tokens if usage else 0
        details = getattr(usage, "completion_tokens_details", None) if usage else None
        rt = getattr(details, "reasoning_tokens", None) if details else None
        return ChatReply(
            content=content,
            reasoning=reasoning if isinstance(reasoning, str) else None,
            prompt_tokens=pt,
            completion_tokens=ct,
            reasoning_tokens=rt,
            cost_usd=self.cost(pt, ct),
            cached=False,
            params=self._params(),
            seconds=round(seconds, 3),
            key=key,
        )

    async def aclose(self) -> None:
        await self.client.close()


def _to_entry(c: ChatReply, model: str) -> dict[str, Any]:
    return {
        "model": model,
        "content": c.content,
        "reasoning": c.reasoning,
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": c.completion_tokens,
        "reasoning_tokens": c.reasoning_tokens,
        "cost_usd": c.cost_usd,
        "params": c.params,
        "seconds": c.seconds,
    }


def _from_entry(e: dict[str, Any], key: str, *, cached: bool) -> ChatReply:
    return ChatReply(
        content=e.get("content") or "",
        reasoning=e.get("reasoning"),
        prompt_tokens=int(e.get("prompt_tokens", 0)),
        completion_tokens=int(e.get("completion_tokens", 0)),
        reasoning_tokens=e.get("reasoning_tokens"),
        cost_usd=e.get("cost_usd"),
        cached=cached,
        params=e.get("params") or {},
        seconds=0.0,
        key=key,
    )
