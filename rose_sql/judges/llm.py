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
- the reply's JSON schema sent as ``response_format`` (``--judge-structured``): where the endpoint
  refuses it, ``auto`` falls back to plain text parsed tolerantly, for the rest of the client's life;
- provider parameters passed through as they are (``--judge-option``), and ``reasoning_effort``;
- every call keyed by (endpoint, model, parameters, options, reply format, messages) and cached on
  disk as it returns;
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
from typing import TYPE_CHECKING, Any, Protocol

from rose_sql.config import JudgeConfig
from rose_sql.errors import EndpointError, EndpointUnreachable, UsageError
from rose_sql.judges.budget import Ledger, Message, Price, cost, load_prices, price_of, prompt_tokens_bound
from rose_sql.judges.cache import Cache
from rose_sql.judges.wire import Completion, read_completion
from rose_sql.verdicts import ReplyFormat

if TYPE_CHECKING:
    import openai

    from rose_sql.judges.local import LocalServer

__all__ = ["LLM", "ChatReply", "Ledger", "Message", "OpenAILLM", "ReplySchema", "Request", "parse_option"]

ReplySchema = tuple[str, dict[str, Any]]
"""A reply's name and JSON schema (:func:`rose_sql.judges.replies.reply_schema`)."""
SCHEMA_PLACEHOLDER = "$schema"
"""An option value (or a string anywhere inside one) that is replaced by the reply's JSON schema."""
RESERVED_OPTIONS = {
    "model": "--judge-model",
    "messages": "the prompts",
    "stream": "nothing: replies are read whole",
    "n": "nothing: one reply a call",
    "max_tokens": "--judge-max-tokens",
    "max_completion_tokens": "--judge-max-tokens",
    "reasoning_effort": "--reasoning-effort",
    "response_format": "--judge-structured (or an option of the server's own, such as guided_json=$schema)",
}
"""Request fields an option may not set, and what sets them (the budget's bound rests on the cap)."""


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
    """The cache key (sha256 of endpoint, model, parameters, options, reply format and messages)."""
    cached_tokens: int = 0
    """Of the prompt tokens, those the provider read from its prefix cache (priced at the cached rate)."""
    reply_format: ReplyFormat = "text"
    """Whether the reply's JSON schema was sent (``json_schema``) or the reply was asked as text."""
    batch_id: str | None = None
    """The Batch API batch that answered this call (``rose run --batch``); None for a live call."""
    finish_reason: str | None = None
    """Why the model stopped (``length``: at the completion cap, ``--judge-max-tokens``); None where unsaid."""


class _SchemaRefused(Exception):
    """The endpoint refused ``response_format``: ask again as text."""


_CAP_NAMES = ("max_tokens", "max_completion_tokens")
_WANTS_MAX_COMPLETION_TOKENS = re.compile(r"(?:^|/)(?:o\d|gpt-5)", re.IGNORECASE)
"""OpenAI's reasoning models refuse ``max_tokens``: ask them with ``max_completion_tokens`` at once."""
_REFUSED = re.compile(r"unsupported|not supported|unrecognized|unknown|not allowed", re.IGNORECASE)
_RETRIED_STATUSES = (408, 409, 429)
PROBE_TIMEOUT_S = 30.0
"""The longest the check that the endpoint answers waits (``--judge-timeout`` when it is shorter)."""


class LLM(Protocol):
    """What the judge cascade needs of a model: one chat call with its reply's schema and sampling, the
    usage and cost it ran up, and a close.

    The live client (:class:`OpenAILLM`), the Batch API client (:class:`~rose_sql.judges.batch.BatchLLM`),
    inspect's model (:class:`~rose_sql.inspect.judge.InspectLLM`), a Ray actor's forwarder and the tests'
    fake (:class:`~rose_sql.testing.fake.FakeLLM`) implement it; none inherits another's state.
    """

    @property
    def cfg(self) -> JudgeConfig:
        """The judge's configuration: the model recorded on each call, the sampling, the re-asks."""
        ...

    @property
    def ledger(self) -> Ledger:
        """The calls made and cached, and the money spent and reserved (the budget)."""
        ...

    def reply_format(self, schema: ReplySchema | None) -> ReplyFormat:
        """How a call with this schema is asked now (recorded on a call that failed)."""
        ...

    async def complete(
        self, messages: list[Message], *, fresh: bool = False, schema: ReplySchema | None = None, sample: int = 0
    ) -> ChatReply:
        """One chat completion. ``fresh``: not from a cache; ``schema``: the reply's JSON schema; ``sample``:
        which sample of the call (its seed is the configured one plus it). Raises
        :class:`~rose_sql.errors.EndpointError` when no usable reply came, and
        :class:`~rose_sql.errors.BudgetExhausted` when the budget forbids the call."""
        ...

    async def aclose(self) -> None:
        """Release what the model holds (its HTTP client)."""
        ...


class Request:
    """How calls to one endpoint are asked: the sampling parameters it accepts, the completion cap's name,
    whether the reply's schema goes as ``response_format``, and the cache key of a call.

    What it learns from the endpoint's refusals (a parameter, the cap's name, the schema) holds for the
    life of the client that owns it; the live client and the batch client each own one.
    """

    def __init__(self, cfg: JudgeConfig, endpoint: str) -> None:
        self.cfg = cfg
        self.endpoint = endpoint
        reasoner = bool(_WANTS_MAX_COMPLETION_TOKENS.search(cfg.model))
        self.refused: set[str] = {"temperature"} if reasoner else set()  # OpenAI's reasoning models refuse it
        self.cap = "max_completion_tokens" if reasoner else "max_tokens"
        self._cap_switched = False
        self.format_refused = cfg.structured == "off"
        """True once ``response_format`` is not to be sent: ``off``, or the endpoint refused it."""

    def seed(self, sample: int) -> int | None:
        """The seed of a sample: the configured seed plus the sample's index (each sample its own call)."""
        return self.cfg.seed + sample if self.cfg.seed is not None else None

    def params(self, sample: int = 0) -> dict[str, Any]:
        """The sampling parameters of a call as they are sent now."""
        params: dict[str, Any] = {}
        if self.cfg.temperature is not None:
            params["temperature"] = self.cfg.temperature
        if self.cfg.seed is not None:
            params["seed"] = self.seed(sample)
        if self.cfg.reasoning_effort is not None:
            params["reasoning_effort"] = self.cfg.reasoning_effort
        params = {k: v for k, v in params.items() if k not in self.refused}
        params[self.cap] = self.cfg.max_tokens  # never dropped: the budget's bound rests on it
        return params

    def reply_format(self, schema: ReplySchema | None) -> ReplyFormat:
        """How a call with this schema is asked now: ``json_schema`` when the schema goes to the endpoint
        (as ``response_format``, or through an option holding ``$schema``), else ``text``."""
        if schema is None:
            return "text"
        sent = not self.format_refused or _mentions_schema(self.cfg.options)
        return "json_schema" if sent else "text"

    def key(self, messages: list[Message], schema: ReplySchema | None = None, sample: int = 0) -> str:
        """The cache key of a call with this endpoint, model and configured parameters.

        Calls without options, ``reasoning_effort`` or a schema sent keep the keys of earlier versions.
        The seed of ``sample`` is among the parameters: each sample is its own entry; sample 0 is the
        single call's.
        """
        wanted = {"temperature": self.cfg.temperature, "seed": self.seed(sample), "max_tokens": self.cfg.max_tokens}
        what: dict[str, Any] = {"endpoint": self.endpoint, "model": self.cfg.model, "params": wanted}
        if self.cfg.options:
            what["options"] = dict(self.cfg.options)
        if self.cfg.reasoning_effort is not None:
            what["reasoning_effort"] = self.cfg.reasoning_effort
        if schema is not None and self.reply_format(schema) == "json_schema":
            what["reply_format"] = {"response_format": not self.format_refused, "schema": list(schema)}
        blob = json.dumps({**what, "messages": messages}, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def body(self, params: dict[str, Any], schema: ReplySchema | None, with_format: bool) -> dict[str, Any]:
        """The request's fields beside the model and messages: the parameters, and the schema as
        ``response_format`` when ``with_format``."""
        sent = dict(params)
        if schema is not None and with_format:
            name, body_schema = schema
            sent["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": body_schema, "strict": True},
            }
        return sent

    def options(self, schema: ReplySchema | None) -> dict[str, Any] | None:
        """The provider options as they go into the body (``$schema`` replaced by the reply's schema)."""
        return _substitute(dict(self.cfg.options), schema[1] if schema else None) if self.cfg.options else None

    def adapt(self, params: dict[str, Any], message: str) -> bool:
        """Follow a 400 that names a parameter the model refuses: drop temperature or seed, or send the
        completion cap under its other name (once). False when the 400 is about something else."""
        text = message.lower()
        changed = False
        sent = next(name for name in _CAP_NAMES if name in params)
        other = _CAP_NAMES[1 - _CAP_NAMES.index(sent)]
        if sent in text and (other in text or _REFUSED.search(text)):
            if self.cap == sent:  # else a call in flight already switched
                if self._cap_switched:
                    return False  # both names refused: nothing else to try
                self.cap, self._cap_switched = other, True
            changed = True
        refused = {p for p in ("temperature", "seed", "reasoning_effort") if p in params and p in text}
        self.refused |= refused
        return changed or bool(refused)


def open_client(cfg: JudgeConfig, *, max_retries: int = 0) -> openai.AsyncOpenAI:
    """The SDK's client of the endpoint (``cfg.base_url``, any OpenAI-compatible server; the key from the
    config or ``OPENAI_API_KEY``). Retries are ours by default, each attempt under its own deadline."""
    import openai  # imported here: the deterministic stages never pay for it

    return openai.AsyncOpenAI(
        base_url=cfg.base_url,
        api_key=cfg.api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
        max_retries=max_retries,
        timeout=cfg.timeout_s,
    )


def priced(cfg: JudgeConfig) -> Price | None:
    """The model's price; raises :class:`~rose_sql.errors.UsageError` when a budget is set without one."""
    price = price_of(cfg.model, load_prices(cfg.prices_path))
    if cfg.budget_usd is not None and price is None:
        raise UsageError(
            f"--budget needs the price of {cfg.model!r}, which the price table lacks: "
            f'give it with --prices FILE ({{"{cfg.model}": {{"input": USD/Mtok, "output": USD/Mtok}}}})'
        )
    return price


class OpenAILLM:
    """The live client: an OpenAI-compatible chat endpoint with deadlines, caching, a budget and a
    concurrency limit (an :class:`LLM`).

    Raises :class:`~rose_sql.errors.UsageError` when a budget is set for a model without a price.
    """

    def __init__(self, cfg: JudgeConfig, *, ledger: Ledger | None = None) -> None:
        import openai  # imported here: the deterministic stages never pay for it

        self.cfg = cfg
        self._openai = openai
        self.client = open_client(cfg)
        self.endpoint = str(self.client.base_url).rstrip("/")
        self.local: LocalServer | None = None
        """The server of a pinned local judge (``--judge-gguf``), started before the first uncached call."""
        if cfg.local is not None:
            from rose_sql.judges.local import LocalServer, endpoint_of

            self.local = LocalServer(cfg.local, cfg.model)
            self.endpoint = endpoint_of(cfg.local)  # the file's hash keys the cache, not the port of the day
        self.price = priced(cfg)
        self.cache = Cache(cfg.cache_dir) if cfg.cache_dir is not None else None
        self.ledger = ledger or Ledger(budget_usd=cfg.budget_usd)
        self.request = Request(cfg, self.endpoint)
        self._sem: asyncio.Semaphore | None = None
        self._settled: asyncio.Condition | None = None
        self._probed: asyncio.Lock | None = None
        self._reachable: bool | None = None
        self._unreachable = ""

    def reply_format(self, schema: ReplySchema | None) -> ReplyFormat:
        """How a call with this schema is asked now (:meth:`Request.reply_format`)."""
        return self.request.reply_format(schema)

    def key(self, messages: list[Message], schema: ReplySchema | None = None, sample: int = 0) -> str:
        """The cache key of a call (:meth:`Request.key`)."""
        return self.request.key(messages, schema, sample)

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float | None:
        """USD of a call with these token counts (None without a price)."""
        return cost(self.price, prompt_tokens, completion_tokens, cached_tokens)

    def worst_cost(self, messages: list[Message]) -> float | None:
        """The most a call with these messages can cost: prompt tokens bounded, the whole completion cap."""
        return self.cost(prompt_tokens_bound(messages), self.cfg.max_tokens)

    async def complete(
        self, messages: list[Message], *, fresh: bool = False, schema: ReplySchema | None = None, sample: int = 0
    ) -> ChatReply:
        """One chat completion: from the cache if this exact call was made before, else from the endpoint.

        ``fresh``: ask the endpoint even if the cache holds a reply (which the new one replaces).
        ``schema``: the reply's JSON schema, sent as ``response_format`` unless the endpoint refused it.
        ``sample``: which of several samples of this call (its seed is the configured one plus it).
        Raises :class:`~rose_sql.errors.BudgetExhausted` before a call that the budget no longer
        allows, and :class:`~rose_sql.errors.EndpointError` when the endpoint gave no usable reply.
        """
        while True:
            with_format = schema is not None and not self.request.format_refused  # what the key says, what is sent
            key = self.key(messages, schema, sample)
            if not fresh and self.cache is not None and (hit := self.cache.get(key)) is not None:
                self.ledger.add(cached=True)
                return _from_entry(hit, key)
            try:
                return await self._complete(messages, key, schema, with_format, sample)
            except _SchemaRefused:
                continue  # asked as text now: under another key, which the cache may hold

    async def check_reachable(self) -> None:
        """Raise :class:`~rose_sql.errors.EndpointUnreachable` when the endpoint cannot be reached or refuses
        the key: asked once per client, before its first call that the cache cannot answer (so never on a
        fully cached rerun), with a request that is no judge call (the model list: not cached, counted or
        charged). Any HTTP answer but 401 or 403 counts as reachable: a server without a model list, or
        one that is busy, still answers."""
        if self._reachable is None:
            if self._probed is None:
                self._probed = asyncio.Lock()
            async with self._probed:
                if self._reachable is None and self.local is not None:
                    try:
                        self.client.base_url = await asyncio.to_thread(self.local.start)
                    except EndpointUnreachable as e:  # said once; the run stops before any item is judged
                        self._reachable, self._unreachable = False, f"could not be started: {e}"
                if self._reachable is None:
                    problem = await self._probe()
                    self._reachable, self._unreachable = problem is None, problem or ""
        if not self._reachable:
            raise EndpointUnreachable(
                f"the judge's endpoint {self.endpoint} {self._unreachable}: no item was sent to it. Check "
                "--judge-base-url and the API key (OPENAI_API_KEY), then run again (--resume keeps what is recorded)"
            )

    async def _probe(self) -> str | None:
        """Why the endpoint cannot be reached (None when it answers)."""
        openai = self._openai
        wait = min(self.cfg.timeout_s, PROBE_TIMEOUT_S)
        try:
            async with asyncio.timeout(wait):
                await self.client.models.with_raw_response.list()
        except openai.APIStatusError as e:
            if e.status_code in (401, 403):
                return f"refuses the API key (HTTP {e.status_code}: {e.message})"
            return None
        except openai.APIConnectionError as e:
            cause = e.__cause__ or e.__context__
            return f"cannot be reached ({e}{f' {cause}' if cause else ''})"
        except TimeoutError:
            return f"did not answer within {wait:g} s"
        return None

    async def _complete(
        self, messages: list[Message], key: str, schema: ReplySchema | None, with_format: bool, sample: int = 0
    ) -> ChatReply:
        await self.check_reachable()
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
                done, params, fmt = await self._send(messages, schema, with_format, sample)
                c = self._reply(done, params, key, time.monotonic() - start, worst, fmt)
                spent = c.cost_usd or 0.0
            finally:
                self.ledger.settle(worst, spent)
                async with self._settled:
                    self._settled.notify_all()
        self.ledger.add(cached=False)
        if self.cache is not None:
            self.cache.put(key, _to_entry(c, self.cfg.model))
        return c

    async def _send(
        self, messages: list[Message], schema: ReplySchema | None, with_format: bool, sample: int = 0
    ) -> tuple[Completion, dict[str, Any], ReplyFormat]:
        """Post the request until a reply comes, retrying transient failures; each attempt has one deadline.

        ``with_format``: send the schema as ``response_format`` (as the call's cache key assumed).
        Returns the completion, the parameters it was asked with (as recorded: options as given, the
        schema left out) and the reply format. Raises :class:`_SchemaRefused` when ``auto`` must ask
        again as text, under the key of that."""
        openai = self._openai
        request = self.request
        retries = 0
        while True:
            if with_format and request.format_refused:  # another call learnt it while this one waited
                raise _SchemaRefused
            params = request.params(sample)
            fmt = request.reply_format(schema)
            sent = request.body(params, schema, with_format)
            try:
                async with asyncio.timeout(self.cfg.timeout_s):
                    body, cut = await self._post(messages, sent, request.options(schema))
                completion = read_completion(body, limit=self.cfg.max_reply_bytes, cut=cut)
                return completion, {**params, **self.cfg.options}, fmt
            except openai.BadRequestError as e:
                if "response_format" in sent and _FORMAT.search(str(e)):
                    if self.cfg.structured == "on":
                        raise EndpointError(
                            f"the endpoint refuses the reply's JSON schema as response_format ({e}): "
                            "--judge-structured auto falls back to plain replies, off never sends it"
                        ) from None
                    request.format_refused = True  # for the client's life, like a refused parameter
                    raise _SchemaRefused from None
                if request.adapt(params, str(e)):
                    continue  # a parameter the model refuses: dropped or renamed, and asked again
                raise EndpointError(f"{type(e).__name__}: {e}") from None
            except (TimeoutError, openai.APIConnectionError, openai.APIStatusError) as e:
                status = getattr(e, "status_code", None)
                transient = status is None or status in _RETRIED_STATUSES or status >= 500
                if not transient or retries >= self.cfg.max_retries:
                    raise EndpointError(_failure(e, self.cfg.timeout_s, retries)) from None
                await asyncio.sleep(_pause(retries, e, self.cfg.retry_backoff_s))
                retries += 1

    async def _post(
        self, messages: list[Message], params: dict[str, Any], extra: dict[str, Any] | None
    ) -> tuple[bytes, bool]:
        """The body of one attempt, read up to ``max_reply_bytes`` (True: it went on past them).

        ``extra``: the options, merged into the request body as they are."""
        limit = self.cfg.max_reply_bytes
        create = self.client.chat.completions.with_streaming_response.create
        async with create(model=self.cfg.model, messages=messages, extra_body=extra, **params) as response:  # type: ignore[arg-type]
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    return b"".join(chunks)[:limit], True
            return b"".join(chunks), False

    def _reply(
        self, done: Completion, params: dict[str, Any], key: str, seconds: float, worst: float, fmt: ReplyFormat
    ) -> ChatReply:
        if done.prompt_tokens is None or done.completion_tokens is None:  # no usage reported: charged the worst
            pt, ct, spent = 0, 0, (worst if self.price is not None else None)
        else:
            pt, ct = done.prompt_tokens, done.completion_tokens
            spent = self.cost(pt, ct, done.cached_tokens)
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
            cached_tokens=done.cached_tokens,
            reply_format=fmt,
            finish_reason=done.finish_reason,
        )

    async def aclose(self) -> None:
        await self.client.close()
        if self.local is not None:
            self.local.stop()


_FORMAT = re.compile(r"response_format|json_schema|structured output", re.IGNORECASE)
"""A 400 that names these, when ``response_format`` was sent, refuses it."""


def _substitute(value: Any, schema: dict[str, Any] | None) -> Any:
    """An option's value with every ``$schema`` string replaced by the reply's JSON schema (dropped
    from a mapping where there is no schema)."""
    if value == SCHEMA_PLACEHOLDER:
        return schema
    if isinstance(value, dict):
        out = {k: _substitute(v, schema) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not None or value[k] is None}
    if isinstance(value, list):
        return [_substitute(v, schema) for v in value]
    return value


def _mentions_schema(value: Any) -> bool:
    if value == SCHEMA_PLACEHOLDER:
        return True
    if isinstance(value, dict):
        return any(_mentions_schema(v) for v in value.values())
    if isinstance(value, list):
        return any(_mentions_schema(v) for v in value)
    return False


def parse_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--judge-option``: the value parsed as JSON when it parses, else kept as a string.

    Raises :class:`~rose_sql.errors.UsageError` naming the option and what to do.
    """
    key, eq, raw = text.partition("=")
    key = key.strip()
    if not eq or not key:
        raise UsageError(
            f"--judge-option wants KEY=VALUE (e.g. --judge-option top_k=20 or --judge-option "
            f"'chat_template_kwargs={{\"enable_thinking\": false}}'), got {text!r}"
        )
    if key in RESERVED_OPTIONS:
        raise UsageError(f"--judge-option {key}=... is not allowed: {key} is set by {RESERVED_OPTIONS[key]}")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return key, value


def _failure(e: BaseException, timeout_s: float, retries: int) -> str:
    tried = f" ({retries} retries)" if retries else ""
    if isinstance(e, TimeoutError):
        return f"no complete reply within {timeout_s:g} s (--judge-timeout){tried}"
    return f"{type(e).__name__}: {e}{tried}"


def _pause(retries: int, e: BaseException, backoff: tuple[float, float]) -> float:
    """Seconds before the next attempt: the server's ``retry-after`` when it gives one (up to a minute),
    else exponential backoff with jitter (``backoff``: the first pause and the longest)."""
    response = getattr(e, "response", None)
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        try:
            wait = float(str(headers.get(name))) * scale
        except ValueError:  # absent ("None"), or an HTTP date: the backoff decides
            continue
        if 0 <= wait <= 60:
            return wait
    first, longest = backoff
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
        "cached_tokens": c.cached_tokens,
        "reply_format": c.reply_format,
        "finish_reason": c.finish_reason,
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
        cached_tokens=e.get("cached_tokens", 0),
        reply_format="json_schema" if e.get("reply_format") == "json_schema" else "text",
        finish_reason=e.get("finish_reason"),
    )
