"""verl's reward function on a Ray actor pool: point ``custom_reward_function.path`` at this file.

verl runs on Ray already; with ``reward_model.reward_manager=batch`` it calls
``compute_score_batch(data_sources=..., solution_strs=..., ground_truths=..., extra_infos=...)`` with
the ``reward_kwargs`` as further keywords. This module's :func:`compute_score_batch` has the signature
and the results of :func:`rose_sql.reward.compute_score_batch`, but scores on a named
:class:`~rose_sql.distributed.pool.RewardPool` of the cluster verl runs on, made on the first call and
found by every later one (whichever process verl calls from). Three ``reward_kwargs`` are the pool's:
``ray_workers`` (actors, default one per CPU of the cluster), ``ray_rate`` (completions per second for
the whole cluster, default no limit) and ``ray_pool`` (its name, default ``rose-reward``); every other
one goes to the reward as with the in-process function (``db_root``, :class:`RewardConfig` fields).

verl loads this file by its path under another module name, so it holds no class of its own: the
actors are :mod:`rose_sql.distributed.pool`'s, which every Ray worker imports by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from rose_sql.distributed.pool import RewardPool

POOL_KEYS = ("ray_workers", "ray_rate", "ray_pool")
"""The ``reward_kwargs`` that configure the pool (the others configure the reward)."""


@lru_cache(maxsize=4)
def _pool(name: str, size: int | None, rate: float | None) -> RewardPool:
    return RewardPool(size=size, rate=rate, name=name)


def compute_score_batch(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
    **reward_kwargs: Any,
) -> list[dict[str, Any]]:
    """verl's batch reward on the cluster's reward pool: :func:`rose_sql.reward.compute_score_batch`'s
    arguments and results."""
    kwargs = {k: v for k, v in reward_kwargs.items() if k not in POOL_KEYS}
    size, rate = reward_kwargs.get("ray_workers"), reward_kwargs.get("ray_rate")
    pool = _pool(str(reward_kwargs.get("ray_pool", "rose-reward")), size, rate)
    return pool.compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos, **kwargs)


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """verl's per-response form (``reward_manager=naive``), on the pool: prefer the batch form, which
    sends a whole batch at once."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], **kwargs)[0]
