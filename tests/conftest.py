"""Shared fixtures: tiny databases built from SQL text, and the shared real data (skipped when absent)."""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def build_db(path: Path, script: str) -> Path:
    """Create a SQLite database at ``path`` from a SQL script (foreign keys on)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.executescript(script)
    conn.commit()
    conn.close()
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def peak_rss_mb() -> int:
    """This process's peak resident memory (VmHWM), in MB."""
    m = re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text())
    assert m is not None
    return int(m.group(1)) // 1024


@contextmanager
def peak_rss_growth() -> Iterator[list[int]]:
    """Yields a list that receives the growth (MB) of this process's peak RSS during the block."""
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark to the current RSS
    except OSError as e:
        pytest.skip(f"cannot reset the peak RSS here ({e}); the memory bound needs Linux /proc")
    before = peak_rss_mb()
    out: list[int] = []
    yield out
    out.append(peak_rss_mb() - before)


@pytest.fixture
def make_db(tmp_path: Path) -> Callable[..., Path]:
    """``make_db(script, db_id="t")`` builds ``tmp_path/dbs/<db_id>/<db_id>.sqlite`` and returns its path."""

    def make(script: str, db_id: str = "t") -> Path:
        return build_db(tmp_path / "dbs" / db_id / f"{db_id}.sqlite", script)

    return make


@pytest.fixture(scope="session")
def shared() -> Path:
    """The shared third-party data folder; tests using it skip when it is absent (CI has it)."""
    if not SHARED.is_dir():
        pytest.skip(f"shared data not found at {SHARED} (it sits beside the repository in CI)")
    return SHARED
