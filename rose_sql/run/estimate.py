"""``rose run --dry-run``: what a judged run would cost, without calling anything or writing records.

Runs the deterministic stages, evidence included, so it knows which items reach which judge (and
which have no question a judge could read); walks the decision table (:func:`rose_sql.decide.walk`)
along every path the judges' unknown replies could take; builds each prompt exactly as a real run
would, and prices calls with the run's price table. Two figures come out:

- an estimate, from the shortest to the longest paths, no reply re-asked, at about four characters
  a token (the providers' tokenizers are not available offline) and ``ASSUMED_COMPLETION_TOKENS``
  a reply;
- an upper bound that a run cannot exceed (a ``--budget`` of at least it never stops the run): the
  longest path of every item, every call re-asked ``reask`` times (a re-ask sends the conversation
  again with the invalid reply in it), prompt tokens bounded as the budget bounds them
  (:func:`rose_sql.judges.budget.prompt_tokens_bound`) and every reply at the completion cap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from rose_sql.config import Config
from rose_sql.decide import Facts, Step, walk
from rose_sql.engines import Source
from rose_sql.engines.execute import Executor
from rose_sql.engines.workers import Pool
from rose_sql.items.load import Loaded
from rose_sql.judges.ask import REASK_PROBLEM_CHARS, reask_messages, sealed
from rose_sql.judges.budget import (
    Message,
    Price,
    cost,
    load_prices,
    price_of,
    prompt_tokens_bound,
    prompt_tokens_estimate,
)
from rose_sql.judges.context import Context
from rose_sql.judges.judges import Judges
from rose_sql.judges.keys import NONCE_HEX
from rose_sql.run.evaluate import Executed, case_of, execute_in_worker, init_worker
from rose_sql.verdicts import ProverReply, RefuterReply

ASSUMED_COMPLETION_TOKENS = 800
"""Completion tokens a reply is estimated to take (reasoning models may use several times more)."""
RESENT_REPLY_TOKENS = 64
"""A reply read back in a prompt (the invalid one in a re-ask, the Prover's in the Refuter's) takes the
tokens it was generated in, at most the completion cap, plus at most this many: the chat template, and
the indentation the Prover's reply is shown with."""


@dataclass(frozen=True, slots=True)
class Estimate:
    """Expected LLM usage of a run, and its upper bound."""

    system: str
    items: int
    decided_without_llm: int
    """Items no judge will see (execution settles them, or they have no question)."""
    no_question: int
    """Of those, items a judge would see but that have no question text (unscored ``no_question``)."""
    min_calls: int
    """Calls on the shortest paths, nothing re-asked."""
    likely_max_calls: int
    """Calls on the longest paths, nothing re-asked."""
    max_calls: int
    """At most this many calls: the longest paths, every call re-asked."""
    prompt_tokens_min: int
    """Estimated prompt tokens on the shortest paths."""
    prompt_tokens_max: int
    """At most this many prompt tokens."""
    cost_min_usd: float | None
    """Estimated cost on the shortest paths (None: no price for the model)."""
    cost_likely_max_usd: float | None
    """Estimated cost on the longest paths, nothing re-asked."""
    cost_max_usd: float | None
    """At most this cost: what the run cannot exceed."""


_PASS = ProverReply(expected_answer="", sql_behaviour="", reasoning="", answers_question=True)
_FAIL = ProverReply(expected_answer="", sql_behaviour="", reasoning="", answers_question=False)
_UPHOLD = RefuterReply(reasoning="", overturn=False, ambiguity="none", gold_correct=True)


def judge_paths(facts: Facts) -> list[list[Step]]:
    """Every sequence of judges the walk over the decision table can ask for, whatever they answer.

    Only the replies are unknown: the Prover may pass or fail; the Refuter's answer ends the walk.
    """
    paths: list[list[Step]] = []

    def explore(answers: list[ProverReply | RefuterReply]) -> None:
        steps, asked = walk(facts), []
        try:
            step = next(steps)
            for answer in answers:
                asked.append(step)
                step = steps.send(answer)
        except StopIteration:
            paths.append(asked)
            return
        for answer in (_PASS, _FAIL) if step == "prover" else (_UPHOLD,):
            explore([*answers, answer])

    explore([])
    return paths


@dataclass(frozen=True, slots=True)
class _Usage:
    """Calls and tokens along one path."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: _Usage) -> _Usage:
        return _Usage(
            self.calls + other.calls,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )

    def times(self, k: int) -> _Usage:
        """The usage of ``k`` such calls (the votes of a stage)."""
        return _Usage(self.calls * k, self.prompt_tokens * k, self.completion_tokens * k)

    def usd(self, price: Price | None) -> float:
        return cost(price, self.prompt_tokens, self.completion_tokens) or 0.0


def estimate(loaded: Sequence[Loaded], db_root: Source, config: Config) -> list[Estimate]:
    """Estimate and bound calls, tokens and cost per prediction file (the deterministic stages run,
    evidence included)."""
    assert config.judge is not None
    judge = config.judge
    prices = load_prices(judge.prices_path)
    price = price_of(judge.model, prices)
    # voting stages (--samples, --panel, --escalate-to): the estimate counts the first tier's votes at the
    # judge model's price; the bound also every escalation, at the dearest model's prices
    first = judge.samples * max(1, len(judge.panel))
    most = first + (judge.samples if judge.escalate_to else 0)
    models = [m.partition("=")[0] for m in (*judge.panel, *([judge.escalate_to] if judge.escalate_to else []))]
    dearest: Price | None = price
    for m in models:
        p = price_of(m, prices)
        dearest = (
            None if p is None or dearest is None else Price(max(p.input, dearest.input), max(p.output, dearest.output))
        )
    out = []
    # the deterministic stages in guarded worker processes, as under rose run; the schemas read here
    with Executor(config) as catalogue, Pool(config.workers, init_worker, config) as pool:
        judges = Judges(judge, catalogue, asks=False)  # the prompts alone; markers of the run's length
        for lf in loaded:
            runs = [pool.submit(execute_in_worker, [(it, db_root, True)]) for it in lf.items]
            executed: list[Executed] = [ex for run in runs for ex in run.result()]
            free = unasked = 0
            low, likely, bound = _Usage(), _Usage(), _Usage()
            low_usd = likely_usd = bound_usd = 0.0
            for ex in executed:
                facts = ex.facts(judge=True, matched_refuter=judge.effective_matched_refuter)
                paths = judge_paths(facts)
                if paths == [[]]:
                    free += 1
                    unasked += not facts.question and judge_paths(replace(facts, question=True)) != [[]]
                    continue
                built = _Prompts(judges, judges.context(case_of(ex), judges.schema(ex.db)))
                guesses = [built.path(p, bound=False).times(first) for p in paths]
                bounds = [built.path(p, bound=True).times(most) for p in paths]
                shortest = min(guesses, key=lambda u: (u.calls, u.usd(price), u.prompt_tokens))
                longest = max(guesses, key=lambda u: (u.calls, u.usd(price), u.prompt_tokens))
                worst = max(bounds, key=lambda u: (u.usd(dearest), u.calls, u.prompt_tokens))
                low, likely = low + shortest, likely + longest
                bound += _Usage(max(u.calls for u in bounds), max(u.prompt_tokens for u in bounds), 0)
                low_usd, likely_usd = low_usd + shortest.usd(price), likely_usd + longest.usd(price)
                bound_usd += worst.usd(dearest)

            def usd(value: float) -> float | None:
                return None if price is None else round(value, 6)

            out.append(
                Estimate(
                    lf.path.stem,
                    len(lf.items),
                    free,
                    unasked,
                    low.calls,
                    likely.calls,
                    bound.calls,
                    low.prompt_tokens,
                    bound.prompt_tokens,
                    usd(low_usd),
                    usd(likely_usd),
                    None if dearest is None else round(bound_usd + 5e-7, 6),  # rounded up: a bound
                )
            )
    return out


_NONCE = "0" * NONCE_HEX
"""A nonce's stand-in: each ask ends with its call's nonce (:func:`rose_sql.judges.ask.sealed`), as long."""


class _Prompts:
    """The prompts of one item's judges, and what the calls along a path take."""

    def __init__(self, judges: Judges, ctx: Context) -> None:
        self.judge = judges.cfg
        self.prover = sealed(judges.messages("prover", ctx), _NONCE)
        self.refuter = sealed(judges.messages("refuter", ctx, _PASS), _NONCE)
        self.matched = sealed(judges.messages("refuter_matched", ctx), _NONCE)
        # what a re-ask adds besides the invalid reply itself: the complaint, with the longest problem
        self.reask = sealed(reask_messages([], "", "\U0010ffff" * REASK_PROBLEM_CHARS), _NONCE)

    def path(self, steps: list[Step], *, bound: bool) -> _Usage:
        usage = _Usage()
        for step in steps:
            usage += self._step(step, bound)
        return usage

    def _step(self, step: Step, bound: bool) -> _Usage:
        messages = {"prover": self.prover, "refuter": self.refuter, "refuter_matched": self.matched}[step]
        if not bound:
            # the Refuter after a pass reads the Prover's reply: about one reply's worth of tokens
            read = ASSUMED_COMPLETION_TOKENS if step == "refuter" else 0
            return _Usage(1, prompt_tokens_estimate(messages) + read, ASSUMED_COMPLETION_TOKENS)
        cap = self.judge.max_tokens
        reply = cap + RESENT_REPLY_TOKENS  # a reply read back, at most
        first = prompt_tokens_bound(messages) + (reply if step == "refuter" else 0)
        per_reask = reply + _bound_of(self.reask)
        attempts = 1 + self.judge.reask
        prompts = sum(first + k * per_reask for k in range(attempts))
        return _Usage(attempts, prompts, attempts * cap)


def _bound_of(messages: list[Message]) -> int:
    """Tokens these messages add to a prompt, at most (without the prompt's own template tokens)."""
    return prompt_tokens_bound(messages) - prompt_tokens_bound([])
