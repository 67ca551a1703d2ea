"""Framework adapters over one long-lived scorer: verl's ``compute_score`` (and its batch form) and
TRL reward functions. The OpenRLHF-style HTTP server is :mod:`rose_sql.reward.server`."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from rose_sql.config import RewardConfig
from rose_sql.errors import LabelError
from rose_sql.reward.gold import Gold, parse_label, resolve_db
from rose_sql.reward.schedule import Reward, invalid
from rose_sql.reward.scorer import RewardItem, RewardScorer


@lru_cache(maxsize=8)
def _shared_scorer(config: RewardConfig) -> RewardScorer:
    """One long-lived scorer per config for function-style adapters (verl, TRL): its caches persist."""
    return RewardScorer(config)


def _config_from(kwargs: Mapping[str, Any], config: RewardConfig | None = None) -> RewardConfig:
    return config if config is not None else RewardConfig.from_mapping(kwargs)


def _verl_dict(r: Reward, config: RewardConfig) -> dict[str, Any]:
    """verl's result: ``score`` plus the same keys for every item (verl stacks them per key)."""
    return {
        "score": r.total if r.total is not None else config.unscored,
        "execution": r.execution if r.execution is not None else config.unscored,
        "syntax": r.syntax,
        "clause": r.clause_part,
        "scored": r.total is not None,
        "status": r.status,
    }


def _verl_items(
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None],
    db_root: str | None,
) -> tuple[list[RewardItem | str], int | None]:
    out: list[RewardItem | str] = []
    step: int | None = None
    for solution, truth, extra in zip(solution_strs, ground_truths, extra_infos, strict=True):
        info = extra or {}
        step = info.get("step", info.get("global_step", step))
        try:
            if isinstance(truth, str) and not truth.lstrip().startswith("{") and "\t" not in truth:
                gold = Gold(truth, resolve_db(info.get("db_id"), info.get("db_path"), info.get("db_root", db_root)))
            else:
                gold = parse_label(truth, info.get("db_root", db_root))
            out.append(RewardItem(solution, gold.sql, gold.db))
        except LabelError as e:
            out.append(str(e))
    return out, step


def _score_mixed(scorer: RewardScorer, items: Sequence[RewardItem | str], step: int | None) -> list[Reward]:
    good = [it for it in items if isinstance(it, RewardItem)]
    scored = iter(scorer.score_batch(good, step))
    return [next(scored) if isinstance(it, RewardItem) else invalid(it, scorer.config, step) for it in items]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    *,
    db_root: str | None = None,
    config: RewardConfig | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """verl's ``compute_score``: one response against its gold, as ``{"score": ..., ...}``.

    ``ground_truth`` is the gold SQL with ``extra_info["db_id"]`` (or ``db_path``), or a label
    (:func:`parse_label`). ``db_root`` comes from verl's ``custom_reward_function.reward_kwargs``,
    ``extra_info["db_root"]`` or ``$ROSE_DB_ROOT``; other reward_kwargs set :class:`RewardConfig`
    fields. ``extra_info["step"]`` (if present) drives the schedule. Unscored items get
    ``config.unscored`` with ``scored: False``.
    """
    return compute_score_batch(
        [data_source], [solution_str], [ground_truth], [extra_info], db_root=db_root, config=config, **kwargs
    )[0]


def compute_score_batch(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
    *,
    db_root: str | None = None,
    config: RewardConfig | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """verl's batch form (``reward_manager=batch``): the same for a whole batch, scored concurrently."""
    cfg = _config_from(kwargs, config)
    root = db_root or os.environ.get("ROSE_DB_ROOT")
    infos = [None] * len(solution_strs) if extra_infos is None else extra_infos  # verl passes numpy arrays
    items, step = _verl_items(solution_strs, ground_truths, infos, root)
    return [_verl_dict(r, cfg) for r in _score_mixed(_shared_scorer(cfg), items, step)]


RewardFn = Callable[..., list[float | None]]
_COMPONENTS = ("total", "execution", "syntax")


def trl_reward(
    db_root: str | Path | None = None, config: RewardConfig | None = None, component: str = "total"
) -> RewardFn:
    """A TRL reward function ``f(prompts, completions, **columns) -> list[float | None]``.

    Columns (dataset fields TRL passes by name): ``gold_sql`` plus ``db_id`` (under ``db_root``) or
    ``db_path``; or one ``label`` column in :func:`parse_label`'s forms. Completions may be strings
    or lists of chat messages. The schedule follows ``trainer_state.global_step`` when TRL passes
    it. ``component`` picks ``total``, ``execution`` or ``syntax``; the function's ``__name__`` is
    ``rose_sql_<component>`` (TRL logs each reward under it). Unscored items are None.
    """
    if component not in _COMPONENTS:
        raise ValueError(f"component must be one of {_COMPONENTS}")
    cfg = config or RewardConfig()
    root = db_root or os.environ.get("ROSE_DB_ROOT")

    def reward(
        prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **columns: Any
    ) -> list[float | None]:
        state = columns.get("trainer_state")
        step = getattr(state, "global_step", None)
        items = [_trl_item(c, i, columns, root) for i, c in enumerate(completions)]
        rewards = _score_mixed(_shared_scorer(cfg), items, step)
        return [_pick(r, component) for r in rewards]

    reward.__name__ = reward.__qualname__ = f"rose_sql_{component}"
    return reward


def _trl_item(completion: Any, i: int, columns: Mapping[str, Any], root: str | Path | None) -> RewardItem | str:
    def col(name: str) -> Any:
        values = columns.get(name)
        return values[i] if isinstance(values, Sequence) and not isinstance(values, str) and i < len(values) else None

    try:
        if col("label") is not None:
            gold = parse_label(col("label"), root)
        else:
            sql = col("gold_sql")
            if not isinstance(sql, str) or not sql.strip():
                raise LabelError("no gold_sql column (or label column) for this completion")
            gold = Gold(sql, resolve_db(col("db_id"), col("db_path"), root))
    except LabelError as e:
        return str(e)
    return RewardItem(completion, gold.sql, gold.db)


def _pick(r: Reward, component: str) -> float | None:
    if component == "execution":
        return r.execution
    if component == "syntax":
        return r.syntax if r.total is not None else None
    return r.total
