"""``rose run --dry-run``: what a judged run would cost, without calling anything or writing records.

Runs the deterministic stages, builds every first-stage prompt exactly as a real run would, counts
tokens locally (about four characters per token: the providers' tokenizers are not available
offline, so this is an estimate) and prices calls with the run's price table. A Prover pass leads
to a Refuter call, so items whose results differ need one or two calls: both bounds are shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rose_sql.config import Config
from rose_sql.decide import Decision, decide
from rose_sql.evaluate import Executed, execute_item
from rose_sql.execute import Executor
from rose_sql.items import Loaded
from rose_sql.judges.ask import Case, prover_messages, refuter_messages
from rose_sql.judges.context import Schemas
from rose_sql.judges.llm import load_prices, price_of

CHARS_PER_TOKEN = 4
ASSUMED_COMPLETION_TOKENS = 800
"""Completion tokens assumed per call (reasoning models may use several times more)."""


@dataclass(frozen=True, slots=True)
class Estimate:
    """Expected LLM usage of a run."""

    system: str
    items: int
    decided_without_llm: int
    min_calls: int
    max_calls: int
    prompt_tokens_min: int
    prompt_tokens_max: int
    cost_min_usd: float | None
    cost_max_usd: float | None


def _tokens(messages: list[dict[str, str]]) -> int:
    return sum(len(m["content"]) for m in messages) // CHARS_PER_TOKEN + 4 * len(messages)


def estimate(loaded: Sequence[Loaded], db_root: Path, config: Config) -> list[Estimate]:
    """Estimate calls, tokens and cost per prediction file."""
    assert config.judge is not None
    judge = config.judge
    price = price_of(judge.model, load_prices(judge.prices_path))
    schemas = Schemas()
    out = []
    with Executor(config) as executor, ThreadPoolExecutor(config.workers) as pool:
        for lf in loaded:
            executed: list[Executed] = list(pool.map(lambda it: execute_item(it, db_root, executor), lf.items))
            n_free = lo_calls = hi_calls = lo_tok = hi_tok = 0
            for ex in executed:
                step = decide(ex.facts(judge=True, matched_refuter=judge.effective_matched_refuter))
                if isinstance(step, Decision):
                    n_free += 1
                    continue
                assert ex.pred is not None
                case = Case(ex.item, ex.db, ex.gold, ex.pred, ex.comparison)
                schema = schemas.get(ex.db)
                if step == "prover":
                    p = _tokens(prover_messages(case, schema, judge))
                    lo_calls, lo_tok = lo_calls + 1, lo_tok + p
                    if ex.gold is not None:
                        r = (
                            _tokens(refuter_messages(case, schema, None, judge, matched=False))
                            + ASSUMED_COMPLETION_TOKENS
                        )
                        hi_calls, hi_tok = hi_calls + 2, hi_tok + p + r
                    else:
                        hi_calls, hi_tok = hi_calls + 1, hi_tok + p
                else:
                    r = _tokens(refuter_messages(case, schema, None, judge, matched=True))
                    lo_calls, hi_calls, lo_tok, hi_tok = lo_calls + 1, hi_calls + 1, lo_tok + r, hi_tok + r

            def cost(calls: int, tokens: int) -> float | None:
                if price is None:
                    return None
                return round((tokens * price[0] + calls * ASSUMED_COMPLETION_TOKENS * price[1]) / 1e6, 4)

            out.append(
                Estimate(
                    lf.path.stem,
                    len(lf.items),
                    n_free,
                    lo_calls,
                    hi_calls,
                    lo_tok,
                    hi_tok,
                    cost(lo_calls, lo_tok),
                    cost(hi_calls, hi_tok),
                )
            )
    return out


def print_estimate(estimates: Sequence[Estimate], console: Console) -> None:
    """The dry-run table."""
    table = Table(title="Dry run: expected LLM usage (nothing was called)", title_justify="left")
    for col in ("system", "items", "no LLM needed", "calls", "prompt tokens (est.)", "cost USD (est.)"):
        table.add_column(col, justify="left" if col == "system" else "right")
    for e in estimates:
        cost = "no price for this model" if e.cost_min_usd is None else f"{e.cost_min_usd:.4f} - {e.cost_max_usd:.4f}"
        table.add_row(
            e.system,
            str(e.items),
            str(e.decided_without_llm),
            f"{e.min_calls} - {e.max_calls}",
            f"{e.prompt_tokens_min} - {e.prompt_tokens_max}",
            cost,
        )
    console.print(table)
    console.print(
        f"Tokens are estimated at {CHARS_PER_TOKEN} characters per token; completions at "
        f"{ASSUMED_COMPLETION_TOKENS} tokens per call (reasoning models can use far more)."
    )
