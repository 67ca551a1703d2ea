"""What a judge call costs and may cost: prices, prompt tokens estimated and bounded, the ledger.

``--budget`` is a promise that the recorded costs never add up to more than it. So before a call is
sent, the :class:`Ledger` reserves its worst case: its prompt tokens bounded from above
(:func:`prompt_tokens_bound`: one token per UTF-8 byte, which no byte-level tokenizer exceeds, plus
the chat template's tokens) and the whole completion cap, at the model's prices. A call whose worst
case does not fit waits for the calls in flight to settle (each gives back what it did not spend),
and is refused with :class:`~rose_sql.errors.BudgetExhausted` once even the money actually spent
leaves no room for it. The dry run (:mod:`rose_sql.run.estimate`) bounds a run the same way.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from rose_sql.errors import BudgetExhausted, InputError

Message = dict[str, str]

CHARS_PER_TOKEN = 4
"""The usual rate of English text and SQL, for estimates (the providers' tokenizers are not available offline)."""
TEMPLATE_TOKENS_PER_MESSAGE = 16
"""At most this many tokens of chat template around each message (OpenAI counts 3 or 4, Llama 3 about 5)."""
TEMPLATE_TOKENS_PER_CALL = 16
"""At most this many tokens of chat template around the whole prompt (the reply's priming, BOS)."""


def prompt_tokens_estimate(messages: Sequence[Message]) -> int:
    """The likely prompt tokens of a call: about four characters a token."""
    return sum(len(m["content"]) for m in messages) // CHARS_PER_TOKEN + 4 * len(messages)


def prompt_tokens_bound(messages: Sequence[Message]) -> int:
    """At most this many prompt tokens: one per UTF-8 byte of the messages, plus the chat template's.

    Byte-level BPE tokenizers (OpenAI's, Llama 3's, Qwen's, DeepSeek's) never make a token of less
    than one byte, and SentencePiece ones fall back to bytes, so no text has more tokens than bytes.
    About four times the estimate on English text: the price of a bound that holds on any text.
    """
    text = sum(len(m["content"].encode("utf-8", "surrogatepass")) for m in messages)
    return text + TEMPLATE_TOKENS_PER_MESSAGE * len(messages) + TEMPLATE_TOKENS_PER_CALL


# --------------------------------------------------------------------------- prices


class Price(NamedTuple):
    """USD per million tokens."""

    input: float
    output: float
    cached_input: float | None = None
    """Prompt tokens the provider served from its prefix cache (None: billed as other input)."""
    batch_discount: float = 0.0
    """The share of the price a Batch API call saves (0.5 for OpenAI's models; 0: none)."""


def load_prices(extra: Path | None = None) -> dict[str, Price]:
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
            cached = p.get("cached_input")
            price = Price(float(p["input"]), float(p["output"]), None if cached is None else float(cached))
        except (TypeError, KeyError, ValueError, AttributeError):
            raise InputError(
                extra or "prices.json",
                f"price of {model!r} needs numeric 'input' and 'output' (and 'cached_input', when given)",
            ) from None
        if not all(math.isfinite(x) and x >= 0 for x in price if x is not None):  # a negative price makes room
            raise InputError(extra or "prices.json", f"price of {model!r} must be finite and not negative")
        discount = p.get("batch_discount", 0.0)
        if isinstance(discount, bool) or not isinstance(discount, int | float) or not 0 <= discount < 1:
            raise InputError(extra or "prices.json", f"batch_discount of {model!r} must be a number in [0, 1)")
        price = price._replace(batch_discount=float(discount))
        prices[model] = price
    return prices


def price_of(model: str, prices: dict[str, Price]) -> Price | None:
    """The price of a model: exact name, else the longest known prefix (``gpt-4o-2024-08-06`` -> ``gpt-4o``)."""
    if model in prices:
        return prices[model]
    name = model.rsplit("/", 1)[-1]
    best = max((k for k in prices if name.startswith(k)), key=len, default=None)
    return prices[best] if best else None


def cost(price: Price | None, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float | None:
    """USD of a call at ``price`` (None without one).

    ``cached_tokens``: of the prompt tokens, those the provider read from its prefix cache, at the cached
    rate where the price has one (never more of them than the prompt had)."""
    if price is None:
        return None
    cached = min(max(cached_tokens, 0), prompt_tokens) if price.cached_input is not None else 0
    fresh = prompt_tokens - cached
    usd = fresh * price.input + cached * (price.cached_input or 0.0) + completion_tokens * price.output
    return round(usd / 1e6, 8)


# --------------------------------------------------------------------------- the ledger


@dataclass
class Ledger:
    """Live totals of calls and cost, and the money reserved by calls in flight; thread- and task-safe.

    Per-stage tokens and costs are not kept here: summary.json derives them from the records.
    """

    budget_usd: float | None = None
    calls: int = 0
    cached: int = 0
    cost_usd: float = 0.0
    reserved_usd: float = 0.0
    """The worst cases of the calls in flight, not yet settled."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def reserve(self, worst: float) -> bool:
        """Hold ``worst`` USD for a call about to be sent: True when held; False when it fits only
        once calls in flight settle; :class:`BudgetExhausted` when what was spent leaves no room."""
        with self._lock:
            if self.budget_usd is None:
                return True
            if self.cost_usd + worst > self.budget_usd:
                raise BudgetExhausted(
                    f"budget of {self.budget_usd:g} USD: {self.cost_usd:.6f} spent, and the next call may cost "
                    f"up to {worst:.6f}"
                )
            if self.cost_usd + self.reserved_usd + worst > self.budget_usd:
                return False
            self.reserved_usd += worst
            return True

    def settle(self, reserved: float, spent: float) -> None:
        """A call came back (or failed): give back what was reserved for it, count what it cost."""
        with self._lock:
            if self.budget_usd is not None:
                self.reserved_usd = max(0.0, self.reserved_usd - reserved)
            self.cost_usd += spent

    def add(self, cached: bool) -> None:
        """Count a call: made, or served from the cache."""
        with self._lock:
            if cached:
                self.cached += 1
            else:
                self.calls += 1
