"""The RL reward on Ray: :class:`RewardPool`, actors that each keep one long-lived reward scorer.

Each actor (:class:`RewardWorker`, one CPU) keeps a :class:`rose_sql.reward.RewardScorer` for its
whole life, and with it its open read-only connections, its gold and prediction result caches and its
parse and tree-distance memos. A batch is split between the actors by :func:`route`:

- **database locality**: each database has a stable order of preference over the actors (rendezvous
  hashing of its path), and its completions go to the first ``k`` of them, ``k`` growing with the
  database's share of the batch (one actor for a database with a small share, all of them for a batch
  on one database); a question (gold SQL) always goes to the same one of those ``k``, so its gold
  result stays warm from one training step to the next;
- **a global rate limit** (``rate``, completions per second): one small limiter actor keeps a token
  bucket for every caller of the pool, wherever it runs (a trainer's reward workers included);
- **faults**: a part whose actor died is sent to the next actor (Ray restarts the dead one); a part
  that every actor failed gets the ``invalid`` reward, never a guess.

The results are those of :meth:`rose_sql.reward.RewardScorer.score_batch` and of
:func:`rose_sql.reward.compute_score_batch` in one process: each actor runs exactly that on its part.
A pool with a ``name`` is a set of named, detached actors that every process of the cluster finds
(:mod:`rose_sql.distributed.verl` uses one); :meth:`RewardPool.close` stops them.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from rose_sql.config import RewardConfig
from rose_sql.distributed import LOOPBACK, require_ray
from rose_sql.engines import Source
from rose_sql.errors import UsageError
from rose_sql.reward import Reward, RewardItem, RewardScorer, compute_score_batch, invalid, parse_label

NAMESPACE = "rose_sql"
"""The Ray namespace of named pools."""
BURST_S = 1.0
"""The rate limiter lets this many seconds' worth of completions through at once."""


def _h(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).digest()[:8], "big")


def route(keys: Sequence[tuple[str, str]], workers: int) -> dict[int, list[int]]:
    """Which actor scores which completion: ``keys[i]`` is completion i's (database, question); the
    answer maps an actor's index to the indices of its completions (see the module for the rule)."""
    by_db: dict[str, dict[str, list[int]]] = {}
    for i, (db, question) in enumerate(keys):
        by_db.setdefault(db, {}).setdefault(question, []).append(i)
    out: dict[int, list[int]] = {}
    for db, questions in by_db.items():
        order = sorted(range(workers), key=lambda w: _h(db, str(w)))
        share = sum(len(ix) for ix in questions.values()) / len(keys)
        k = min(workers, max(1, math.ceil(share * workers)))
        for question, ix in questions.items():
            out.setdefault(order[_h(question) % k], []).extend(ix)
    return out


class RewardWorker:
    """A Ray actor: one long-lived scorer (its connections, caches and memos live as long as it does)."""

    def __init__(self, config: RewardConfig) -> None:
        self.config = replace(config, processes=1)  # the actor holds one CPU: one worker process
        self.scorer = RewardScorer(self.config)

    def ready(self) -> int:
        """This actor's process id (it has started)."""
        return os.getpid()

    def score_batch(self, items: list[RewardItem], step: int | None) -> list[Reward]:
        return self.scorer.score_batch(items, step)

    def compute_score_batch(self, args: tuple[list[Any], ...], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        """:func:`rose_sql.reward.compute_score_batch` on this actor's part (its scorer per config is kept)."""
        return compute_score_batch(*args, **{"processes": 1, **kwargs})  # one CPU, one worker process


class RateLimiter:
    """A Ray actor keeping one token bucket for every caller of a pool."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.tokens = rate * BURST_S
        self.last = time.monotonic()

    def take(self, n: int) -> float:
        """Take ``n`` tokens; the answer is how long the caller must wait before sending them."""
        now = time.monotonic()
        self.tokens = min(self.rate * BURST_S, self.tokens + (now - self.last) * self.rate) - n
        self.last = now
        return max(0.0, -self.tokens / self.rate)


class RewardPool:
    """Ray actors serving the RL reward: ``score_batch`` and verl's ``compute_score_batch``, batched.

    ``size``: actors (default: one per CPU of the cluster); ``rate``: completions per second for all
    callers together (None: no limit); ``name``: named, detached actors that any process of the cluster
    attaches to by the same name (None: actors owned by this process). Connects to Ray (``address``)
    unless this process already has.
    """

    def __init__(
        self,
        config: RewardConfig | None = None,
        *,
        size: int | None = None,
        rate: float | None = None,
        name: str | None = None,
        address: str | None = None,
    ) -> None:
        ray = require_ray("RewardPool")
        if not ray.is_initialized():
            kw: dict[str, Any] = {"include_dashboard": False, "_node_ip_address": LOOPBACK} if address is None else {}
            ray.init(address=address, log_to_driver=False, logging_level="ERROR", **kw)
        self.config = config or RewardConfig()
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        self.size = size or max(1, int(cpus))
        opts: dict[str, Any] = {"num_cpus": min(1.0, cpus / self.size), "max_restarts": -1, "max_task_retries": 0}
        if name is not None:
            opts |= {"namespace": NAMESPACE, "lifetime": "detached", "get_if_exists": True}
        worker = ray.remote(RewardWorker)
        self.workers = [
            worker.options(**opts, **({"name": f"{name}-{i}"} if name else {})).remote(self.config)
            for i in range(self.size)
        ]
        self.limiter: Any = None
        if rate is not None:
            named = {"name": f"{name}-limiter", "namespace": NAMESPACE, "lifetime": "detached", "get_if_exists": True}
            self.limiter = ray.remote(RateLimiter).options(num_cpus=0, **(named if name else {})).remote(rate)
        self.pids: list[int] = ray.get([w.ready.remote() for w in self.workers])

    def score_batch(self, items: Sequence[RewardItem], step: int | None = None) -> list[Reward]:
        """The rewards of ``items``, in order: :meth:`RewardScorer.score_batch` spread over the actors."""
        keys = [(str(it.db), it.gold_sql) for it in items]

        def send(worker: Any, ix: list[int]) -> Any:
            return worker.score_batch.remote([items[i] for i in ix], step)

        def failed(why: str) -> Reward:
            return invalid(why, self.config, step)

        return self._scatter(keys, send, failed)

    def compute_score_batch(
        self,
        data_sources: Sequence[str],
        solution_strs: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        """verl's batch reward (:func:`rose_sql.reward.compute_score_batch`, same arguments and results),
        spread over the actors."""
        infos = [None] * len(solution_strs) if extra_infos is None else list(extra_infos)
        root = kwargs.get("db_root") or os.environ.get("ROSE_DB_ROOT")
        keys = [_verl_key(t, info, root) for t, info in zip(ground_truths, infos, strict=True)]
        config = RewardConfig.from_mapping(kwargs)

        def send(worker: Any, ix: list[int]) -> Any:
            args = ([data_sources[i] for i in ix], [solution_strs[i] for i in ix], [ground_truths[i] for i in ix])
            return worker.compute_score_batch.remote((*args, [infos[i] for i in ix]), kwargs)

        def failed(why: str) -> dict[str, Any]:
            r = invalid(why, config)
            return {"score": config.unscored, "execution": config.unscored, "syntax": r.syntax,
                    "clause": r.clause_part, "scored": False, "status": r.status}  # fmt: skip

        return self._scatter(keys, send, failed)

    def _scatter(
        self, keys: list[tuple[str, str]], send: Callable[[Any, list[int]], Any], failed: Callable[[str], Any]
    ) -> list[Any]:
        import ray
        from ray.exceptions import RayActorError

        out: list[Any] = [None] * len(keys)
        if not keys:
            return out
        pending: dict[Any, tuple[int, list[int], int]] = {}
        for w, ix in sorted(route(keys, self.size).items()):
            self._wait_for(len(ix))
            pending[send(self.workers[w], ix)] = (w, ix, 1)
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            w, ix, tries = pending.pop(ref)
            try:
                done = ray.get(ref)
            except RayActorError:  # the actor died: the next in line scores this part
                if tries < self.size:
                    pending[send(self.workers[(w + 1) % self.size], ix)] = ((w + 1) % self.size, ix, tries + 1)
                    continue
                done = [failed("every reward worker died scoring it")] * len(ix)
            for i, value in zip(ix, done, strict=True):
                out[i] = value
        return out

    def _wait_for(self, n: int) -> None:
        if self.limiter is not None:
            import ray

            time.sleep(ray.get(self.limiter.take.remote(n)))

    def close(self) -> None:
        """Stop the pool's actors (named ones too: every process attached to them loses them)."""
        import ray

        for a in [*self.workers, *([self.limiter] if self.limiter is not None else [])]:
            ray.kill(a, no_restart=True)


def _verl_key(truth: Any, info: Mapping[str, Any] | None, root: str | None) -> tuple[str, str]:
    """A verl item's (database, question), for :func:`route` only (the actor reads the label itself)."""
    question = truth if isinstance(truth, str) else repr(truth)
    info = info or {}
    db = info.get("db_path") or info.get("db_id")
    if db is None:
        try:
            where = info.get("db_root", root)
            db = str(parse_label(truth, Source.parse(str(where)) if where else None).db)
        except (ValueError, UsageError):  # the actor reports it on the item
            db = ""
    return str(db), question
