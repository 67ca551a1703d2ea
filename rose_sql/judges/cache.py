"""The secret the fence markers of the judges' prompts are keyed with, kept in the cache folder.

Created once (:func:`fence_key`): the markers that fence untrusted text in the judges' prompts are
an HMAC of the text under it, so the text cannot predict them, yet a rerun builds the very same
prompts and finds its calls in the cache.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from pathlib import Path

FENCE_KEY_FILE = "fence.key"
"""The fence secret's file in the cache folder: 64 hex digits."""


def fence_key(folder: Path | None, *, create: bool = True) -> bytes:
    """The secret of the fence markers, kept in ``folder`` (the cache) and created there once.

    Without a folder (``--no-cache``), or when ``create`` is false and there is none yet (the dry run
    writes nothing), a secret for this process only: markers are then unpredictable but not stable
    across runs, which costs only the providers' prefix caching.
    """
    if folder is None:
        return secrets.token_bytes(32)
    path = folder / FENCE_KEY_FILE
    key = _read_key(path)
    if key is not None or not create:
        return key if key is not None else secrets.token_bytes(32)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{FENCE_KEY_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        tmp.write_text(secrets.token_hex(32) + "\n", encoding="ascii")
        tmp.chmod(0o600)
        try:
            os.link(tmp, path)  # atomic, and never replaces the secret another process made first
        except FileExistsError:
            if _read_key(path) is None:  # a damaged file: replaced (prompts change once)
                tmp.replace(path)
        except OSError:  # a file system without hard links
            if not path.exists():
                tmp.replace(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    key = _read_key(path)
    if key is None:
        raise OSError(f"cannot keep the fence secret in {path}")
    return key


def _read_key(path: Path) -> bytes | None:
    try:
        text = path.read_text(encoding="ascii").strip()
        return bytes.fromhex(text) if len(text) == 64 else None
    except (OSError, ValueError):
        return None
