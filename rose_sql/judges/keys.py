"""The run key: the one secret a run's fence markers and verdict nonces are derived from.

Every judge call gets a *nonce* no input can predict, which the prompt asks the judge to write inside its
verdict object, and the reader takes only a verdict carrying it (:func:`rose_sql.judges.replies.parse_reply`):
so no text a prediction, a gold, a result cell or a schema can carry is read as a verdict, however the judge
restates it. The nonce of a call is an HMAC, under the run key, of everything that identifies the call
(the stage, the model, the sample, the attempt, and the messages as laid out before it, which hold the
item), and the fence markers around untrusted text are keyed by another secret derived from the same key
(:class:`rose_sql.judges.context.Fences`).

Unpredictable, yet repeatable: the key is kept with the cache (``run.key`` in the cache folder, made once),
so a rerun or a ``--resume`` with the same cache asks the very same prompts and finds its calls there; a
run may take a key explicitly (``rose run --run-key FILE``), and with the same key a pinned judge
reproduces every prompt and reply byte for byte from empty caches. Without a key or a cache that holds one,
a fresh key is drawn for the process. The manifest identifies the key by a fingerprint
(:attr:`RunKey.fingerprint`), never the key itself.

What remains: a judge persuaded by a prompt injection to write the nonce into the attacker's verdict. That
is prompt injection of the model, which the deterministic evidence and the Refuter exist for.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import itertools
import json
import os
import re
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rose_sql.errors import InputError, UsageError

if TYPE_CHECKING:
    from rose_sql.config import JudgeConfig
    from rose_sql.judges.budget import Message

__all__ = ["NONCE_ASK", "NONCE_HEX", "RUN_KEY_FILE", "RunKey", "check_key_file", "nonce_asked", "run_key"]

RUN_KEY_FILE = "run.key"
"""The run key's file in the cache folder: 64 hex digits."""
LEGACY_KEY_FILE = "fence.key"
"""The fence secret of caches made before verdict nonces: read as the run key where no ``run.key`` is."""
KEY_HEX = 64
"""Hex digits of a run key (256 bits)."""
NONCE_HEX = 16
"""Hex digits of a verdict nonce (64 bits): no prediction guesses it."""
NONCE_ASK = (
    '\n\nThis call\'s nonce is {nonce}. Write it as the first field of your JSON object: {{"nonce": "{nonce}", ...}}'
)
"""What ends each ask of a call (:func:`rose_sql.judges.ask.sealed`): its nonce, and where the judge writes it."""
_ASKED = re.compile(rf"This call's nonce is ([0-9a-f]{{{NONCE_HEX}}})\. [^\n]*\Z")


@dataclass(frozen=True, slots=True)
class RunKey:
    """A run's secret (see the module's text)."""

    secret: bytes = field(repr=False)
    """The key (never written anywhere but the cache folder's ``run.key`` or the user's own key file)."""
    kept: bool = True
    """Whether the key is kept (in a cache folder or a key file), so another run can use it again; False for a
    key drawn for this process only."""

    @classmethod
    def fresh(cls) -> RunKey:
        """A key for this process only."""
        return cls(secrets.token_bytes(KEY_HEX // 2), kept=False)

    def derive(self, purpose: str) -> bytes:
        """A secret of its own for one purpose (``fence``, ``nonce``)."""
        return hmac.new(self.secret, b"rose-sql " + purpose.encode(), hashlib.sha256).digest()

    @property
    def fingerprint(self) -> str:
        """What identifies the key in manifests (a digest: the key cannot be read back from it)."""
        return hashlib.sha256(b"rose-sql run key\0" + self.secret).hexdigest()[:16]

    def nonce(self, stage: str, model: str, sample: int, attempt: int, messages: Sequence[Message]) -> str:
        """The nonce of one call: ``stage`` and ``model`` asked for the ``sample``-th time, its ``attempt``-th
        ask (0, then the re-asks), with ``messages`` laid out before the nonce is added. None of the messages
        holds it (a text that did would hand it to a reply that copies the text: the next one is taken)."""
        what = json.dumps([stage, model, sample, attempt, list(messages)], sort_keys=True, ensure_ascii=False)
        data = what.encode("utf-8", "surrogatepass")
        key = self.derive("nonce")
        texts = [str(m.get("content", "")) for m in messages]
        for salt in itertools.count():
            nonce = hmac.new(key, salt.to_bytes(4, "big") + data, hashlib.sha256).hexdigest()[:NONCE_HEX]
            if not any(nonce in t for t in texts):
                return nonce
        raise AssertionError("unreachable")  # pragma: no cover


def nonce_asked(messages: Sequence[Message]) -> str | None:
    """The nonce the last message of a conversation asks for (None: it asks for none)."""
    if not messages:
        return None
    m = _ASKED.search(str(messages[-1].get("content", "")))
    return m.group(1) if m else None


def run_key(cfg: JudgeConfig, *, create: bool = True) -> RunKey:
    """The run key of a judge configuration: its ``--run-key`` file; else the one kept with its cache (made
    there the first time, unless ``create`` is false: the dry run writes nothing); else a fresh one.

    Raises :class:`~rose_sql.errors.InputError` naming a key file that holds no key."""
    if cfg.run_key is not None:
        return RunKey(_read_key_file(cfg.run_key))
    if cfg.cache_dir is None:
        return RunKey.fresh()
    return kept_key(cfg.cache_dir, create=create)


def kept_key(folder: Path, *, create: bool = True) -> RunKey:
    """The key kept in a cache ``folder`` (``run.key``, or the fence secret of a cache made before it),
    made there once when there is none and ``create`` says so; else a key for this process."""
    path = folder / RUN_KEY_FILE
    key = _read_key(path)
    if key is None:
        key = _read_key(folder / LEGACY_KEY_FILE)
    if key is not None:
        return RunKey(key)
    if not create:
        return RunKey.fresh()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{RUN_KEY_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        tmp.write_text(secrets.token_hex(KEY_HEX // 2) + "\n", encoding="ascii")
        tmp.chmod(0o600)
        try:
            os.link(tmp, path)  # atomic, and never replaces the key another process made first
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
        raise OSError(f"cannot keep the run key in {path}")
    return RunKey(key)


def _read_key(path: Path) -> bytes | None:
    try:
        with path.open("rb") as f:
            text = f.read(4 * KEY_HEX).decode("ascii").strip()
        return bytes.fromhex(text) if len(text) == KEY_HEX else None
    except (OSError, ValueError):
        return None


def _read_key_file(path: Path) -> bytes:
    if not path.is_file():
        raise InputError(path, "no such key file (--run-key wants a file holding 64 hex digits)")
    key = _read_key(path)
    if key is None:
        raise InputError(
            path,
            f"not a run key: the file must hold {KEY_HEX} hex digits (a cache folder's {RUN_KEY_FILE} is one; "
            'make one with python -c "import secrets; print(secrets.token_hex(32))")',
        )
    return key


def check_key_file(text: str) -> Path:
    """``--run-key``: the path, once it is known to hold a key (:class:`UsageError` otherwise)."""
    path = Path(text)
    try:
        _read_key_file(path)
    except InputError as e:
        raise UsageError(str(e)) from None
    return path
