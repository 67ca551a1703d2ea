"""Our LLM seam over an inspect_ai model: the cascade's judges asked through ``Model.generate``.

The cascade (:class:`rose_sql.judges.judges.Judges`) asks its model through the
:class:`~rose_sql.judges.llm.LLM` protocol: ``cfg`` (the judge's configuration), ``ledger``,
``reply_format(schema)``, ``complete(messages, ...) -> ChatReply`` and ``aclose()``. :class:`InspectLLM`
implements it over any inspect model (a provider, a model role such as ``grader``, or ``mockllm``), so
inspect does the calling, retrying, rate limiting, caching and logging, and our prompts, validation,
re-ask and decision table are unchanged. It shares no state with the live client; mypy checks it against
the protocol where the scorer hands it to the judges.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    ContentReasoning,
    GenerateConfig,
    ModelOutput,
    ResponseSchema,
)
from inspect_ai.util import JSONSchema, LimitExceededError

from rose_sql.config import JudgeConfig
from rose_sql.errors import EndpointError
from rose_sql.judges.budget import Ledger, Message
from rose_sql.judges.llm import ChatReply, ReplySchema
from rose_sql.verdicts import ReplyFormat

if TYPE_CHECKING:
    from inspect_ai.model import Model


def _message(m: Message) -> ChatMessage:
    role, content = m["role"], m["content"]
    if role == "system":
        return ChatMessageSystem(content=content)
    if role == "assistant":
        return ChatMessageAssistant(content=content)
    return ChatMessageUser(content=content)


def _reasoning(output: ModelOutput) -> str | None:
    """The reasoning blocks of the reply, where the provider returns them."""
    if not output.choices or isinstance(output.message.content, str):
        return None
    parts = [c.reasoning for c in output.message.content if isinstance(c, ContentReasoning) and not c.redacted]
    return "\n".join(parts) or None


class InspectLLM:
    """The judges' LLM, answered by an inspect_ai :class:`~inspect_ai.model.Model`.

    ``cfg.model`` is only the name recorded on each call (default: the inspect model's name); the
    sampling parameters sent are ``cfg.temperature``, ``cfg.seed`` and ``cfg.max_tokens``. A model
    error (after inspect's own retries) is an :class:`~rose_sql.errors.EndpointError`, so the item is
    unscored ``judge_error`` as with any endpoint; inspect's limits (tokens, time, cost) are not
    caught: they end the sample as inspect decides.
    """

    def __init__(self, model: Model, cfg: JudgeConfig | None = None) -> None:
        self.model = model
        self.cfg = cfg if cfg is not None else JudgeConfig(model=str(model), cache_dir=None)
        self.ledger = Ledger(budget_usd=None)

    def reply_format(self, schema: ReplySchema | None) -> ReplyFormat:
        """``json_schema`` when the schema goes to inspect as its ``response_schema``, else ``text``."""
        return "json_schema" if schema is not None and self.cfg.structured != "off" else "text"

    def _generate_config(self, schema: ReplySchema | None, sample: int = 0) -> GenerateConfig:
        wanted = None
        if schema is not None and self.cfg.structured != "off":
            name, body = schema
            wanted = ResponseSchema(name=name, json_schema=JSONSchema.model_validate(body), strict=True)
        return GenerateConfig(
            temperature=self.cfg.temperature,
            seed=self.cfg.seed + sample if self.cfg.seed is not None else None,
            max_tokens=self.cfg.max_tokens,
            response_schema=wanted,
        )

    async def complete(
        self, messages: list[Message], *, fresh: bool = False, schema: ReplySchema | None = None, sample: int = 0
    ) -> ChatReply:
        """One chat completion from the inspect model (``fresh`` is moot: this seam keeps no cache); the
        reply's schema goes to inspect as its ``response_schema``, which each provider maps its own way;
        ``sample`` shifts the seed, as for our own client."""
        config = self._generate_config(schema, sample)
        started = time.monotonic()
        try:
            output = await self.model.generate([_message(m) for m in messages], config=config)
        except LimitExceededError:
            raise
        except Exception as e:  # whatever the provider raised once inspect gave up retrying
            raise EndpointError(f"inspect model {self.model} failed: {type(e).__name__}: {e}") from None
        if output.error:
            raise EndpointError(f"inspect model {self.model} failed: {output.error}", raw=output.completion)
        usage = output.usage
        # inspect counts the prompt tokens read from (or written to) a provider's cache apart from its
        # input_tokens; our calls count them in the prompt, as OpenAI's usage does (cached_tokens: of them)
        cache_read = (usage.input_tokens_cache_read or 0) if usage else 0
        cache_write = (usage.input_tokens_cache_write or 0) if usage else 0
        params: dict[str, Any] = {k: v for k, v in config.model_dump(exclude_none=True).items()}
        key = hashlib.sha256(json.dumps([str(self.model), params, messages], sort_keys=True).encode()).hexdigest()
        self.ledger.calls += 1
        return ChatReply(
            content=output.completion,
            reasoning=_reasoning(output),
            prompt_tokens=usage.input_tokens + cache_read + cache_write if usage else 0,
            completion_tokens=usage.output_tokens if usage else 0,
            reasoning_tokens=usage.reasoning_tokens if usage else None,
            cost_usd=usage.total_cost if usage else None,
            cached=False,
            params=params,
            seconds=round(output.time if output.time is not None else time.monotonic() - started, 4),
            key=key,
            cached_tokens=cache_read,
            reply_format="json_schema" if config.response_schema is not None else "text",
        )

    async def aclose(self) -> None:
        """Nothing to close: inspect owns the model's client."""


def judge_config(model: Model, base: JudgeConfig | None = None) -> JudgeConfig:
    """The judge configuration of ``model``: ``base`` (or the defaults) named after the inspect model, no cache."""
    return replace(base or JudgeConfig(model=""), model=str(model), base_url=None, cache_dir=None, budget_usd=None)
