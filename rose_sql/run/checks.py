"""The rules between options that no one field can check: every entry point calls them before anything
runs (``rose run``, :func:`rose_sql.evaluate_items`), so the library refuses what the command refuses, with
the same messages (:class:`~rose_sql.errors.UsageError`; the options are named as ``rose run`` spells them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rose_sql.config import Config, JudgeConfig
from rose_sql.errors import UsageError
from rose_sql.items.load import Item, Loaded


def check_config(config: Config, items: Sequence[Item]) -> None:
    """What :func:`rose_sql.evaluate_items` refuses before it starts: vote options that cannot be kept, a
    budget without a price, judges asked about items none of which has a question."""
    if config.judge is None:
        return
    check_votes(config.judge)
    check_budget(config.judge)
    if items and not any((it.question or "").strip() for it in items):
        raise UsageError(f"{_NO_QUESTION}: no item given has one. {_GIVE_QUESTIONS}, or evaluate without a judge")


def check_votes(judge: JudgeConfig | None, *, ray: bool = False) -> None:
    """Refuse vote options that cannot work together: votes on Ray, a budget with a voting model unpriced."""
    if judge is None:
        return
    if judge.votes and ray:
        raise UsageError("--ray runs one judge model with one reply per stage: drop --samples, --panel, --escalate-to")
    for spec in [*judge.panel, *([judge.escalate_to] if judge.escalate_to else [])]:
        check_budget(replace(judge, model=spec.partition("=")[0]))


def check_batch(judge: JudgeConfig | None, *, ray: bool) -> None:
    """Refuse what the Batch API cannot do: votes (one reply per stage), or batches sent from Ray workers."""
    if judge is not None and judge.votes:
        raise UsageError("--batch asks one reply per judge stage: drop --samples, --panel and --escalate-to")
    if ray:
        raise UsageError("--batch and --ray cannot be combined: the batches are sent from this machine")


def check_budget(judge: JudgeConfig) -> None:
    """Refuse a --budget that could not be kept: the model has no price, so no call has a known cost."""
    from rose_sql.judges.budget import load_prices, price_of

    if judge.budget_usd is not None and price_of(judge.model, load_prices(judge.prices_path)) is None:
        raise UsageError(
            f"--budget needs the price of {judge.model!r}, which the price table lacks: give it with --prices FILE "
            f'(a JSON object such as {{"{judge.model}": {{"input": 0.5, "output": 1.5}}}}, USD per million tokens)'
        )


_NO_QUESTION = "the judges decide whether SQL answers the question"
_GIVE_QUESTIONS = (
    "Give the questions: --gold dev.json for Spider and BIRD (it holds question and SQL), or a question field"
)


def require_questions(loaded: Sequence[Loaded], gold: Path | None) -> None:
    """Refuse to judge a prediction file none of whose items has a question: the judges would guess it."""
    for lf in loaded:
        if lf.items and not any((it.question or "").strip() for it in lf.items):
            where = f"--gold {gold}" if gold is not None else str(lf.path)
            raise UsageError(
                f"{_NO_QUESTION}, and no item of {lf.path} has one ({where} gives SQL only). {_GIVE_QUESTIONS} in "
                "the input; or drop --judge-model to run the deterministic stages alone"
            )
