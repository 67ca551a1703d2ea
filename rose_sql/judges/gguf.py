"""A GGUF file checked before it is hashed or served: a regular file whose header reads and whose size is what
the header declares (``rose run --judge-gguf``).

The header (magic, version, metadata, tensor table) is read within bounds (at most
:data:`~rose_sql.config.GGUF_MAX_HEADER_BYTES`, and :data:`~rose_sql.config.GGUF_MAX_ITEMS` entries, tensors
or elements each), never past the file; from the tensor
table it computes where the data ends: the data section starts at the header's end aligned to
``general.alignment`` (32 by default), and each tensor takes its element count over its type's block size times
the block's bytes (the sizes of ggml's types, :data:`TYPE_SIZES`). A file shorter than that, or longer than it
rounded up to the alignment, is refused before a byte of its data is read: a FIFO, a file cut short, a sparse
file of gigabytes that only starts like a GGUF cost nothing.
"""

from __future__ import annotations

import math
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from rose_sql.config import GGUF_MAX_HEADER_BYTES, GGUF_MAX_ITEMS
from rose_sql.errors import InputError

__all__ = ["TYPE_SIZES", "Header", "check_gguf", "open_regular"]

MAGIC = b"GGUF"
VERSIONS = (2, 3)
"""The GGUF versions read (version 1, of 2023, counted with 32-bit integers and is no longer written)."""
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 8
"""Dimensions a tensor may have (ggml's tensors have four)."""

TYPE_SIZES: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 40),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82),
    23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2),
    34: (256, 54), 35: (256, 66), 39: (32, 17), 40: (64, 36), 41: (128, 18),
}  # fmt: skip
"""ggml's tensor types by number: (elements a block, bytes a block), as llama.cpp's ``ggml_type_traits`` and the
``gguf`` package's ``GGML_QUANT_SIZES`` give them."""

_FIRST_READ = 2**20
"""Bytes of a GGUF file read first for its header (then four times more, while the header runs past them)."""
_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
"""Metadata value types of a fixed size, by number: their bytes."""
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True, slots=True)
class Header:
    """What a GGUF header declares."""

    version: int
    tensors: int
    metadata: int
    """Metadata entries."""
    alignment: int
    data_start: int
    """Where the tensors' data begins."""
    data_end: int
    """Where the last tensor's data ends: the file's size, up to the alignment's padding."""


class _Cut(Exception):
    """The header runs past what was read."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise _Cut
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def skip(self, n: int) -> None:
        if n < 0 or self.at + n > len(self.data):
            raise _Cut
        self.at += n

    def u32(self) -> int:
        value: int = struct.unpack("<I", self.take(4))[0]
        return value

    def u64(self) -> int:
        value: int = struct.unpack("<Q", self.take(8))[0]
        return value

    def string(self) -> bytes:
        return self.take(self.u64())


def open_regular(path: Path, what: str) -> tuple[int, os.stat_result]:
    """A file descriptor of ``path`` read-only, once it is known to be a regular file (a FIFO or a device is
    refused before it is opened: opening a FIFO blocks); :class:`InputError` names the file otherwise."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise InputError(path, f"no such file ({what})") from None
    except OSError as e:
        raise InputError(path, f"cannot be read: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a pipe, a socket or a device)"
        raise InputError(path, f"is {kind}: {what} must be a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a file swapped for a FIFO never blocks
    except OSError as e:
        raise InputError(path, f"cannot be read: {e.strerror or e}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputError(path, f"is not a regular file: {what} must be a regular file")
    return fd, st


def check_gguf(path: Path, fd: int, size: int) -> Header:
    """The header of the GGUF file open at ``fd`` (``size`` bytes), checked: :class:`InputError` naming the file
    when it is no GGUF, its header is past the bounds or cut short, or its size is not what the header declares."""
    wanted = _FIRST_READ
    while True:  # the header is read in growing pieces: a model's is a few MiB
        with os.fdopen(os.dup(fd), "rb") as f:
            f.seek(0)
            data = f.read(min(size, wanted, GGUF_MAX_HEADER_BYTES))
        if data[:4] != MAGIC:
            raise InputError(path, "is not a GGUF file (it does not start with the GGUF magic bytes)")
        try:
            header = _parse(_Reader(data), path)
            break
        except _Cut:
            if len(data) >= GGUF_MAX_HEADER_BYTES:
                raise InputError(
                    path, f"its GGUF header runs past {GGUF_MAX_HEADER_BYTES // 2**20} MiB: not a model this reads"
                ) from None
            if len(data) >= size:
                raise InputError(path, "its GGUF header is cut short: the file is damaged or not a model") from None
            wanted *= 4
    padded = _aligned(header.data_end, header.alignment)
    if not header.data_end <= size <= padded:
        raise InputError(
            path,
            f"is {size:,} bytes, but its GGUF header declares {header.data_end:,} (tensor data included): "
            "the file is cut short, damaged or not a model",
        )
    return header


def _parse(r: _Reader, path: Path) -> Header:
    r.skip(4)
    version = r.u32()
    if version not in VERSIONS:
        raise InputError(path, f"GGUF version {version} is not one this reads ({', '.join(map(str, VERSIONS))})")
    tensors, metadata = r.u64(), r.u64()
    if tensors > GGUF_MAX_ITEMS or metadata > GGUF_MAX_ITEMS:
        raise InputError(path, f"its GGUF header declares {tensors:,} tensors and {metadata:,} metadata entries")
    alignment = DEFAULT_ALIGNMENT
    for _ in range(metadata):
        key = r.string()
        kind = r.u32()
        if key == b"general.alignment" and kind == 4:
            alignment = r.u32()
            if alignment == 0 or alignment & (alignment - 1):
                raise InputError(path, f"its GGUF alignment {alignment} is not a power of two")
        else:
            _skip_value(r, kind, path, 0)
    end = 0
    for _ in range(tensors):
        name = r.string()
        dims = r.u32()
        if dims > MAX_DIMS:
            raise InputError(path, f"tensor {name[:80]!r} has {dims} dimensions")
        shape = [r.u64() for _ in range(dims)]
        kind, offset = r.u32(), r.u64()
        if kind not in TYPE_SIZES:
            raise InputError(path, f"tensor {name[:80]!r} has the type {kind}, unknown to this rose-sql")
        block, nbytes = TYPE_SIZES[kind]
        count = math.prod(shape)
        if count % block:
            raise InputError(path, f"tensor {name[:80]!r} has {count} elements, not whole blocks of {block}")
        end = max(end, offset + count // block * nbytes)
    start = _aligned(r.at, alignment)
    return Header(version, tensors, metadata, alignment, start, start + end)


_MAX_NESTING = 4
"""Arrays of arrays a metadata value may nest (GGUF's writers nest none)."""


def _skip_value(r: _Reader, kind: int, path: Path, depth: int) -> None:
    if kind in _SCALARS:
        r.skip(_SCALARS[kind])
    elif kind == _STRING:
        r.string()
    elif kind == _ARRAY:
        inner, count = r.u32(), r.u64()
        if depth >= _MAX_NESTING:
            raise InputError(path, f"a GGUF metadata array nests more than {_MAX_NESTING} deep")
        if count > GGUF_MAX_ITEMS:
            raise InputError(path, f"a GGUF metadata array declares {count:,} elements")
        if inner in _SCALARS:
            r.skip(count * _SCALARS[inner])
        else:
            for _ in range(count):
                _skip_value(r, inner, path, depth + 1)
    else:
        raise InputError(path, f"a GGUF metadata value has the type {kind}, unknown to this rose-sql")


def _aligned(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment
