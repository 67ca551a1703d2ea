"""``rose run --dry-run``: what a judged run would cost, without calling anything or writing records.

Runs the deterministic stages, evidence included, so it knows which items reach which judge; walks the
decision table (:func:`rose_sql.decide.walk`) along every path the judges' unknown replies could take;
builds each prompt exactly as a real run would, counts tokens locally (about four characters per
token: the providers' tokenizers are not available offline, so this is an estimate) and prices calls
with the run's price table. A Prover pass leads to a Refuter call, so items whose results differ need
one or two calls: both bounds are shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rose_sql.config import Config, JudgeConfig
from rose_sql.decide import Facts, Step, walk
from rose_sql.evaluate import Executed, execute_item
from rose_sql.evidence.finder import Finder
from rose_sql.execute import Executor
from rose_sql.items import Loaded
from rose_sql.judges.ask import Case, prover_messages, refuter_messages
from rose_sql.judges.cache import fence_key
from rose_sql.judges.context import Fences, Schema, Schemas
from rose_sql.judges.llm import load_prices, price_of
from rose_sql.judges.replies import ProverReply, RefuterReply

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


def estimate(loaded: Sequence[Loaded], db_root: Path, config: Config) -> list[Estimate]:
    """Estimate calls, tokens and cost per prediction file (the deterministic stages run, evidence included)."""
    assert config.judge is not None
    judge = config.judge
    price = price_of(judge.model, load_prices(judge.prices_path))
    fences = Fences(fence_key(judge.cache_dir, create=False))  # markers of the same length as the run's
    schemas = Schemas()
    finder = Finder(config) if config.evidence else None
    out = []
    with Executor(config) as executor, ThreadPoolExecutor(config.workers) as pool:
        for lf in loaded:
            executed: list[Executed] = list(
                pool.map(lambda it: execute_item(it, db_root, executor, finder, doubts=True), lf.items)
            )
            n_free = lo_calls = hi_calls = lo_tok = hi_tok = 0
            for ex in executed:
                paths = judge_paths(ex.facts(judge=True, matched_refuter=judge.effective_matched_refuter))
                if paths == [[]]:
                    n_free += 1
                    continue
                assert ex.pred is not None
                case = Case(ex.item, ex.db, ex.gold, ex.pred, ex.comparison, evidence=ex.evidence_text())
                schema = schemas.get(ex.db)
                costs = [_path_tokens(path, case, schema, judge, fences) for path in paths]
                lo_calls += min(len(p) for p in paths)
                hi_calls += max(len(p) for p in paths)
                lo_tok += min(costs)
                hi_tok += max(costs)

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


def _path_tokens(path: list[Step], case: Case, schema: Schema, judge: JudgeConfig, fences: Fences) -> int:
    """Prompt tokens of the calls on one path (a Refuter after a pass also reads the Prover's reply)."""
    tokens = 0
    for step in path:
        if step == "prover":
            tokens += _tokens(prover_messages(case, schema, judge, fences))
        else:
            msgs = refuter_messages(case, schema, None, judge, fences, matched=step == "refuter_matched")
            tokens += _tokens(msgs) + (ASSUMED_COMPLETION_TOKENS if step == "refuter" else 0)
    return tokens
