"""The judges' disk cache: one JSON file per call, kept beside the run key.

Entries are written atomically (a temporary file renamed over the entry) as each call returns, and
checked on every read (:func:`rose_sql.judges.wire.valid_entry`): a damaged entry is a miss, and the
fresh reply is written over it. Temporary files a killed process left behind are removed when a
client opens the cache.

The run key (``run.key``, :func:`rose_sql.judges.keys.run_key`) lives beside the entries and is created
once: the fence markers and the verdict nonces of the judges' prompts are HMACs under it, so no input can
predict them, yet a rerun builds the very same prompts and finds its calls in this cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from rose_sql.judges.wire import valid_entry

STALE_TMP_S = 3600.0
"""A temporary file this old is a leftover even if its process id was reused."""


class Cache:
    """Replies on disk, one JSON file per key, written atomically as each call returns."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sweep()

    def _path(self, key: str) -> Path:
        return self.root / "llm" / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry of a key; None when there is none, or it is not an entry this version wrote."""
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return None
        return data if valid_entry(data) else None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Write an entry (replacing any other under its key)."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_text(json.dumps(entry, ensure_ascii=False), encoding="utf-8")
            tmp.replace(path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def sweep(self) -> int:
        """Remove the temporary files of writes that never finished (their process was killed): those
        whose process is gone, and any older than an hour. How many were removed."""
        removed = 0
        now = time.time()
        for tmp in (self.root / "llm").glob("*/*.tmp"):
            try:
                pid = int(tmp.name.split(".")[-3])
                if _alive(pid) and now - tmp.stat().st_mtime < STALE_TMP_S:
                    continue
                tmp.unlink()
                removed += 1
            except (ValueError, IndexError, OSError):
                continue
        return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by someone else
        return True
    return True
