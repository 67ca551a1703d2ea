"""A fake of the :class:`~rose_sql.judges.llm.LLM` protocol: the judge cascade tested without HTTP.

As httpx's ``MockTransport`` takes a function from request to response, :class:`FakeLLM` takes a function
from the call (:class:`Asked`: the messages, the reply's schema, the sample) to the scripted server's
:class:`~rose_sql.testing.bodies.Reply`, so a responder written for the server (``verdicts(text) -> Reply``)
serves both. A 2xx reply is the completion; any other status is the endpoint's failure (an
:class:`~rose_sql.errors.EndpointError`, as the live client raises once its retries are spent); a handler
may also raise. Every call is kept in :attr:`FakeLLM.asked`, in order.

Its judges are honest about the nonce: each verdict a handler scripts is answered with the call's nonce
written into it, as the prompt asks (:func:`rose_sql.testing.sign.sign`); ``sign=False`` answers the
replies exactly as scripted.

What it does not fake is the wire: retries, deadlines, refused parameters, schemas the server refuses,
the cache, batches. Those stay with :class:`~rose_sql.testing.ScriptedOpenAI`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from rose_sql.config import JudgeConfig
from rose_sql.errors import EndpointError
from rose_sql.judges.budget import Ledger, Message, cost, prompt_tokens_bound
from rose_sql.judges.llm import ChatReply, ReplySchema, priced
from rose_sql.testing.bodies import Reply, estimate_tokens
from rose_sql.testing.sign import call_nonce, prompt_text, sign
from rose_sql.verdicts import ReplyFormat

__all__ = ["Asked", "FakeLLM", "Handler"]


@dataclass(frozen=True, slots=True)
class Asked:
    """One call the cascade made."""

    messages: list[Message]
    schema: ReplySchema | None
    """The reply's JSON schema the call carried (None: none)."""
    sample: int
    fresh: bool
    """Asked past the cache (``--retry-invalid``)."""

    @property
    def user(self) -> str:
        """The text of the user messages, joined by newlines (what the scripted server's ``by_content`` reads)."""
        return "\n".join(m["content"] for m in self.messages if m["role"] == "user")

    @property
    def stage(self) -> str:
        """``prover``, ``refuter`` or ``refuter_matched``, read from the blocks the judge is shown."""
        if "## Reference SQL (noisy)" not in self.user:
            return "prover"
        return "refuter_matched" if "## Results\nBoth queries returned the same result" in self.user else "refuter"


Handler = Callable[[Asked], Reply]
"""What the fake answers to a call."""


class FakeLLM:
    """An :class:`~rose_sql.judges.llm.LLM` answered by ``handler`` (see the module's text).

    ``cfg``: the judge's configuration (default: a model named ``fake``, no cache); its price, when the
    price table has one, charges each call, and its budget is reserved and settled as the live client
    does, so ``no_budget`` paths can be tested too. ``sign``: write the call's nonce into the verdicts the
    handler scripts (see the module's text).
    """

    def __init__(self, handler: Handler, cfg: JudgeConfig | None = None, *, sign: bool = True) -> None:
        self.handler = handler
        self.sign = sign
        self.cfg = cfg if cfg is not None else JudgeConfig(model="fake", cache_dir=None)
        self.ledger = Ledger(budget_usd=self.cfg.budget_usd)
        self.price = priced(self.cfg)
        self.asked: list[Asked] = []
        """Every call, in order."""
        self.closed = False

    @classmethod
    def by_content(cls, fn: Callable[[str], Reply], cfg: JudgeConfig | None = None, *, sign: bool = True) -> FakeLLM:
        """A fake whose replies depend on the user text alone (the scripted server's ``by_content``)."""
        return cls(lambda asked: fn(asked.user), cfg, sign=sign)

    def reply_format(self, schema: ReplySchema | None) -> ReplyFormat:
        return "json_schema" if schema is not None and self.cfg.structured != "off" else "text"

    async def complete(
        self, messages: list[Message], *, fresh: bool = False, schema: ReplySchema | None = None, sample: int = 0
    ) -> ChatReply:
        asked = Asked(list(messages), schema, sample, fresh)
        self.asked.append(asked)
        worst = cost(self.price, prompt_tokens_bound(messages), self.cfg.max_tokens) or 0.0
        held = worst if self.ledger.reserve(worst) else 0.0  # BudgetExhausted when spending leaves no room
        spent = 0.0
        try:
            reply = self.handler(asked)
            nonce = call_nonce(messages, schema[1] if schema is not None else None) if self.sign else None
            if nonce is not None and reply.ok:
                prompt = prompt_text(messages)
                reply = replace(
                    reply,
                    content=sign(reply.content, nonce, prompt),
                    reasoning_content=sign(reply.reasoning_content, nonce, prompt),
                )
            if not reply.ok:
                raise EndpointError(f"HTTP {reply.status}: {reply.error}", raw=reply.content or "")
            content = reply.content or ""
            pt = reply.prompt_tokens if reply.prompt_tokens is not None else estimate_tokens(asked.user)
            ct = reply.completion_tokens if reply.completion_tokens is not None else estimate_tokens(content)
            spent = cost(self.price, pt, ct) or 0.0
        finally:
            self.ledger.settle(held, spent)
        self.ledger.add(cached=False)
        seed = self.cfg.seed + sample if self.cfg.seed is not None else None
        params = {"temperature": self.cfg.temperature, "seed": seed, "max_tokens": self.cfg.max_tokens}
        return ChatReply(
            content=content,
            reasoning=reply.reasoning_content,
            prompt_tokens=pt,
            completion_tokens=ct,
            reasoning_tokens=reply.reasoning_tokens,
            cost_usd=spent if self.price is not None else None,
            cached=False,
            params={k: v for k, v in params.items() if v is not None},
            seconds=0.0,
            key=f"fake-{len(self.asked)}",
            reply_format=self.reply_format(schema),
            finish_reason=reply.finish_reason,
        )

    async def aclose(self) -> None:
        self.closed = True
