"""Beyond one machine: sharded runs that merge (any scheduler), and Ray for runs and RL rewards.

- :mod:`~rose_sql.run.shard`: ``rose run --shard I/N`` evaluates a stable share of the items
  (by a hash of each item's id, the same on every machine and Python version);
- :mod:`~rose_sql.distributed.merge`: ``rose merge`` joins shard folders into one run, refusing shards
  of other inputs or options and reporting missing or duplicated items;
- :mod:`~rose_sql.distributed.cluster`: ``rose run --ray`` evaluates the batches on Ray actors placed
  by database, one actor owning the LLM client; records stream back to the driver, which writes them;
- :mod:`~rose_sql.distributed.pool`: :class:`~rose_sql.distributed.pool.RewardPool`, the RL reward
  served by Ray actors (database locality, one long-lived scorer per actor, a global rate limit), and
  :mod:`~rose_sql.distributed.verl`, the function verl's batch reward manager calls.

Sharding and merging need nothing but rose-sql; Ray is the optional extra ``rose-sql[ray]``, imported
only by the modules that use it (:func:`require_ray` says how to get it).
"""

from __future__ import annotations

from types import ModuleType

from rose_sql.errors import UsageError

INSTALL_RAY = "pip install 'rose-sql[ray]'"
"""How to get Ray (the optional extra)."""
LOOPBACK = "127.0.0.1"
"""The address of a local Ray instance this package starts (one machine: nothing listens beyond it)."""


def require_ray(what: str = "--ray") -> ModuleType:
    """The ``ray`` module; :class:`UsageError` saying how to install it when it is missing."""
    try:
        import ray
    except ImportError:
        raise UsageError(f"{what} needs Ray, which is not installed: {INSTALL_RAY}") from None
    return ray


def ray_address(text: str) -> str | None:
    """The address ``rose run --ray [ADDRESS]`` connects to (None: start a local Ray instance)."""
    if text == "local":
        return None
    if text == "auto" or ":" in text:
        return text
    raise UsageError(
        f"--ray {text!r}: an ADDRESS is 'auto', HOST:PORT or ray://HOST:PORT; without one, put --ray after "
        "the prediction files or write --ray=local"
    )
