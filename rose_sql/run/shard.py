"""Shards: a stable share of a run's items, chosen by a hash of each item's id.

Shard ``I/N`` (``0 <= I < N``) holds the items whose id hashes to ``I``: the first 8 bytes of the
SHA-256 of the id's JSON form (:func:`rose_sql.record.id_key`: ``5``, ``"5"``, ``"137@487"``; ASCII
only, non-ASCII escaped), read as a big-endian integer, modulo ``N``. Nothing in it depends on the
machine, the Python version (no ``hash()``, no seed) or the order of the input, so N jobs that each run
``rose run ... --shard I/N`` on the same input evaluate every item exactly once between them, on any
scheduler, and ``rose merge`` (:mod:`rose_sql.distributed.merge`) joins their folders.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from rose_sql.errors import UsageError
from rose_sql.items.load import ItemId
from rose_sql.record import id_key

_FORM = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


def shard_of(item_id: ItemId, count: int) -> int:
    """The shard (``0 .. count-1``) that holds the item with this id."""
    digest = hashlib.sha256(id_key(item_id).encode("ascii")).digest()
    return int.from_bytes(digest[:8], "big") % count


@dataclass(frozen=True, slots=True)
class Shard:
    """One of ``count`` shares of a run's items."""

    index: int
    """Which share, from 0."""
    count: int
    """How many shares."""

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"I/N"`` with ``0 <= I < N``; :class:`UsageError` otherwise."""
        m = _FORM.fullmatch(text)
        if m is None:
            raise UsageError(f"--shard {text!r}: expected I/N, e.g. 0/4 (shards are numbered from 0)")
        index, count = int(m.group(1)), int(m.group(2))
        if count < 1 or index >= count:
            raise UsageError(f"--shard {text}: I must be at least 0 and below N ({count}); shards are numbered from 0")
        return cls(index, count)

    def holds(self, item_id: ItemId) -> bool:
        """Whether the item with this id is in this shard."""
        return shard_of(item_id, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"
