"""Small GGUF files for tests: a header that reads, and as many bytes of tensor data as it declares.

What :func:`rose_sql.judges.gguf.check_gguf` reads (the GGUF layout, version 3): the magic, the version, the
tensor and metadata counts, each metadata entry (a key, a type, a value), each tensor's name, dimensions, type
and offset, then the data section at the header's end aligned to 32 bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

__all__ = ["write_gguf"]

_ALIGNMENT = 32


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def write_gguf(
    path: Path,
    metadata: dict[str, str] | None = None,
    tensors: Sequence[tuple[str, int]] = (),
    *,
    sparse: bool = False,
    extra: int = 0,
) -> Path:
    """A GGUF file at ``path``: string ``metadata``, and F32 ``tensors`` of one dimension (a name and an element
    count each) whose data is zeros (``sparse``: a hole the file system does not store); ``extra`` bytes after
    it that its header does not declare."""
    meta = metadata or {}
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    for key, value in meta.items():
        head += _string(key) + struct.pack("<I", 8) + _string(value)
    offset = end = 0
    for name, count in tensors:
        head += _string(name) + struct.pack("<IQIQ", 1, count, 0, offset)  # one dimension, F32, its offset
        end = offset + 4 * count
        offset = end + -end % _ALIGNMENT
    head += b"\0" * (-len(head) % _ALIGNMENT)
    size = len(head) + end
    with path.open("wb") as f:
        f.write(head)
        if sparse:
            f.truncate(size + extra)
        else:
            f.write(b"\0" * (size - len(head) + extra))
    return path
