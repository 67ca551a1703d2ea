"""LLM access over any OpenAI-compatible endpoint: deadlines, retries, checked replies, the cache, the budget.

The official ``openai`` SDK builds and sends each request (its transport is httpx); around it this
module adds what an evaluator needs:

- one deadline for each HTTP attempt, the whole reply included (``--judge-timeout``): the SDK's
  timeout is per read, so a reply trickled a few bytes at a time would never time out;
- retries with exponential backoff (or the server's ``retry-after``) on 408, 409, 429, 5xx,
  timeouts and connection errors, at most ``max_retries`` (here rather than in the SDK, so that
  each attempt has its own deadline);
- the body read up to ``max_reply_bytes`` and checked (:mod:`rose_sql.judges.wire`): a reply that
  breaks the protocol fails the call with its raw text kept, never the item;
- temperature 0 and a seed where the provider accepts them (dropped, and recorded as dropped,
  where it refuses them), and always the completion cap, as ``max_tokens`` or, for the models that
  want it (OpenAI's reasoning models, or any endpoint that says so), ``max_completion_tokens``;
- every call keyed by (endpoint, model, parameters, messages) and cached on disk as it returns;
- its worst-case cost reserved before it is sent and settled to its real cost when the reply
  comes (:mod:`rose_sql.judges.budget`), so a ``--budget`` is never exceeded.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import re
import time
from dataclasses import dataclass
from typing import Any

from rose_sql.config import JudgeConfig
from rose_sql.errors import EndpointError, UsageError
from rose_sql.judges.budget import Ledger, Message, cost, load_prices, price_of, prompt_tokens_bound
from rose_sql.judges.cache import Cache, fence_key
from rose_sql.judges.context import Fences
from rose_sql.judges.wire import Completion, read_completion

__all__ = ["LLM", "ChatReply", "Ledger", "Message"]


@dataclass(frozen=True, slots=True)
class ChatReply:
    """One chat completion as the judges use it (from the endpoint or the cache)."""

    content: str
    """The reply text (may be empty)."""
    reasoning: str | None
    """``reasoning_content`` where the provider returns one (DeepSeek, vLLM)."""
    prompt_tokens: int
    """Input tokens the provider counted (0 when it reported no usage)."""
    completion_tokens: int
    """Output tokens the provider counted, reasoning included (0 when it reported no usage)."""
    reasoning_tokens: int | None
    """Reasoning tokens where reported."""
    cost_usd: float | None
    """Cost from the price table (the call's worst case when the provider reported no usage);
    None when the model has no price."""
    cached: bool
    """Served from the cache: no call was made."""
    params: dict[str, Any]
    """The sampling parameters the provider actually accepted (temperature, seed, the completion cap)."""
    seconds: float
    """Wall time of the call (0 when cached)."""
    key: str
    """The cache key (sha256 of endpoint, model, parameters and messages)."""


_CAP_NAMES = ("max_tokens", "max_completion_tokens")
_WANTS_MAX_COMPLETION_TOKENS = re.compile(r"(?:^|/)(?:o\d|gpt-5)", re.IGNORECASE)
"""OpenAI's reasoning models refuse ``max_tokens``: ask them with ``max_completion_tokens`` at once."""
_REFUSED = re.compile(r"unsupported|not supported|unrecognized|unknown|not allowed", re.IGNORECASE)
_RETRIED_STATUSES = (408, 409, 429)
_BACKOFF_S = (0.5, 8.0)
"""The first pause before a retry, and the longest (the SDK's own values)."""


class LLM:
    """An OpenAI-compatible chat endpoint with deadlines, caching, a budget and a concurrency limit.

    Raises :class:`~rose_sql.errors.UsageError` when a budget is set for a model without a price.
    """

    def __init__(self, cfg: JudgeConfig, *, ledger: Ledger | None = None) -> None:
        import openai  # imported here: the deterministic stages never pay for it

        self.cfg = cfg
        self._openai = openai
        self.client = openai.AsyncOpenAI(
            base_url=cfg.base_url,
            api_key=cfg.api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
            max_retries=0,  # retried here, each attempt under its own deadline
            timeout=cfg.timeout_s,
        )
        self.endpoint = str(self.client.base_url).rstrip("/")
        self.price = price_of(cfg.model, load_prices(cfg.prices_path))
        if cfg.budget_usd is not None and self.price is None:
            raise UsageError(
                f"--budget needs the price of {cfg.model!r}, which the price table lacks: "
                f'give it with --prices FILE ({{"{cfg.model}": {{"input": USD/Mtok, "output": USD/Mtok}}}})'
            )
        self.cache = Cache(cfg.cache_dir) if cfg.cache_dir is not None else None
        self.fences = Fences(fence_key(cfg.cache_dir))
        """The fence markers of this client's prompts (keyed by the secret kept with the cache)."""
        self.ledger = ledger or Ledger(budget_usd=cfg.budget_usd)
        self._sem: asyncio.Semaphore | None = None
        self._settled: asyncio.Condition | None = None
        self._refused: set[str] = set()
        self._cap = "max_completion_tokens" if _WANTS_MAX_COMPLETION_TOKENS.search(cfg.model) else "max_tokens"
        self._cap_switched = False

    def _seed(self, sample: int) -> int | None:
        """The seed of a sample: the configured seed plus the sample's index (each sample its own call)."""
        return self.cfg.seed + sample if self.cfg.seed is not None else None

    def _params(self, sample: int = 0) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if self.cfg.temperature is not None:
            params["temperature"] = self.cfg.temperature
        if self.cfg.seed is not None:
            params["seed"] = self._seed(sample)
        params = {k: v for k, v in params.items() if k not in self._refused}
        params[self._cap] = self.cfg.max_tokens  # never dropped: the budget's bound rests on it
        return params

    def key(self, messages: list[Message], sample: int = 0) -> str:
        """The cache key of a call with this client's endpoint, model and configured parameters (the
        seed of ``sample`` among them: each sample is its own entry; sample 0 is the single call's)."""
        wanted = {"temperature": self.cfg.temperature, "seed": self._seed(sample), "max_tokens": self.cfg.max_tokens}
        blob = json.dumps(
            {"endpoint": self.endpoint, "model": self.cfg.model, "params": wanted, "messages": messages},
            sort_keys=True,
            ensure_ascii=False,
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """USD of a call with these token counts (None without a price)."""
        return cost(self.price, prompt_tokens, completion_tokens)

    def worst_cost(self, messages: list[Message]) -> float | None:
        """The most a call with these messages can cost: prompt tokens bounded, the whole completion cap."""
        return self.cost(prompt_tokens_bound(messages), self.cfg.max_tokens)

    async def complete(self, messages: list[Message], *, fresh: bool = False, sample: int = 0) -> ChatReply:
        """One chat completion: from the cache if this exact call was made before, else from the endpoint.

        ``fresh``: ask the endpoint even if the cache holds a reply (which the new one replaces).
        ``sample``: which of several samples of this call (its seed is the configured one plus it).
        Raises :class:`~rose_sql.errors.BudgetExhausted` before a call that the budget no longer
        allows, and :class:`~rose_sql.errors.EndpointError` when the endpoint gave no usable reply.
        """
        key = self.key(messages, sample)
        if not fresh and self.cache is not None and (hit := self.cache.get(key)) is not None:
            self.ledger.add(cached=True)
            return _from_entry(hit, key)
        if self._sem is None or self._settled is None:
            self._sem, self._settled = asyncio.Semaphore(self.cfg.concurrency), asyncio.Condition()
        async with self._sem:
            worst = self.worst_cost(messages) or 0.0
            async with self._settled:
                while not self.ledger.reserve(worst):  # fits once calls in flight give back their reserve
                    await self._settled.wait()
            spent = 0.0
            try:
                start = time.monotonic()
                done, params = await self._send(messages, sample)
                c = self._reply(done, params, key, time.monotonic() - start, worst)
                spent = c.cost_usd or 0.0
            finally:
                self.ledger.settle(worst, spent)
                async with self._settled:
                    self._settled.notify_all()
        self.ledger.add(cached=False)
        if self.cache is not None:
            self.cache.put(key, _to_entry(c, self.cfg.model))
        return c

    async def _send(self, messages: list[Message], sample: int = 0) -> tuple[Completion, dict[str, Any]]:
        """Post the request until a reply comes, retrying transient failures; each attempt has one deadline."""
        openai = self._openai
        retries = 0
        while True:
            params = self._params(sample)
            try:
                async with asyncio.timeout(self.cfg.timeout_s):
                    body, cut = await self._post(messages, params)
                return read_completion(body, limit=self.cfg.max_reply_bytes, cut=cut), params
            except openai.BadRequestError as e:
                if self._adapt(params, str(e)):
                    continue  # a parameter the model refuses: dropped or renamed, and asked again
                raise EndpointError(f"{type(e).__name__}: {e}") from None
            except (TimeoutError, openai.APIConnectionError, openai.APIStatusError) as e:
                status = getattr(e, "status_code", None)
                transient = status is None or status in _RETRIED_STATUSES or status >= 500
                if not transient or retries >= self.cfg.max_retries:
                    raise EndpointError(_failure(e, self.cfg.timeout_s, retries)) from None
                await asyncio.sleep(_pause(retries, e))
                retries += 1

    async def _post(self, messages: list[Message], params: dict[str, Any]) -> tuple[bytes, bool]:
        """The body of one attempt, read up to ``max_reply_bytes`` (True: it went on past them)."""
        limit = self.cfg.max_reply_bytes
        create = self.client.chat.completions.with_streaming_response.create
        async with create(model=self.cfg.model, messages=messages, **params) as response:  # type: ignore[arg-type]
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    return b"".join(chunks)[:limit], True
            return b"".join(chunks), False

    def _adapt(self, params: dict[str, Any], message: str) -> bool:
        """Follow a 400 that names a parameter the model refuses: drop temperature or seed, or send the
        completion cap under its other name (once). False when the 400 is about something else."""
        text = message.lower()
        changed = False
        sent = next(name for name in _CAP_NAMES if name in params)
        other = _CAP_NAMES[1 - _CAP_NAMES.index(sent)]
        if sent in text and (other in text or _REFUSED.search(text)):
            if self._cap == sent:  # else a call in flight already switched
                if self._cap_switched:
                    return False  # both names refused: nothing else to try
                self._cap, self._cap_switched = other, True
            changed = True
        refused = {p for p in ("temperature", "seed") if p in params and p in text}
        self._refused |= refused
        return changed or bool(refused)

    def _reply(self, done: Completion, params: dict[str, Any], key: str, seconds: float, worst: float) -> ChatReply:
        if done.prompt_tokens is None or done.completion_tokens is None:  # no usage reported: charged the worst
            pt, ct, spent = 0, 0, (worst if self.price is not None else None)
        else:
            pt, ct = done.prompt_tokens, done.completion_tokens
            spent = self.cost(pt, ct)
        return ChatReply(
            content=done.content,
            reasoning=done.reasoning,
            prompt_tokens=pt,
            completion_tokens=ct,
            reasoning_tokens=done.reasoning_tokens,
            cost_usd=spent,
            cached=False,
            params=params,
            seconds=round(seconds, 3),
            key=key,
        )

    async def aclose(self) -> None:
        await self.client.close()


def _failure(e: BaseException, timeout_s: float, retries: int) -> str:
    tried = f" ({retries} retries)" if retries else ""
    if isinstance(e, TimeoutError):
        return f"no complete reply within {timeout_s:g} s (--judge-timeout){tried}"
    return f"{type(e).__name__}: {e}{tried}"


def _pause(retries: int, e: BaseException) -> float:
    """Seconds before the next attempt: the server's ``retry-after`` when it gives one (up to a minute),
    else exponential backoff with jitter."""
    response = getattr(e, "response", None)
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        try:
            wait = float(str(headers.get(name))) * scale
        except ValueError:  # absent ("None"), or an HTTP date: the backoff decides
            continue
        if 0 <= wait <= 60:
            return wait
    first, longest = _BACKOFF_S
    return float(min(first * 2**retries, longest) * (1 - 0.25 * random.random()))


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


def _from_entry(e: dict[str, Any], key: str) -> ChatReply:
    """A reply from a cache entry (already checked by :meth:`Cache.get`)."""
    return ChatReply(
        content=e["content"],
        reasoning=e["reasoning"],
        prompt_tokens=e["prompt_tokens"],
        completion_tokens=e["completion_tokens"],
        reasoning_tokens=e["reasoning_tokens"],
        cost_usd=e["cost_usd"],
        cached=True,
        params=e["params"],
        seconds=0.0,
        key=key,
    )
