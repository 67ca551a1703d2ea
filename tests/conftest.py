"""Shared fixtures: tiny databases built from SQL text, and the shared real data (skipped when absent)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rose_sql.config import RETRY_BACKOFF_ENV
from rose_sql.record import Record
from rose_sql.summary import Summary

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# A judge call's retries wait for nothing in the tests (their scripted faults), here and in every `rose` the
# tests start as a subprocess; what the pauses are is pinned in tests/test_judges_hardening.py.
os.environ[RETRY_BACKOFF_ENV] = "0,0"


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


# --------------------------------------------------------------------------- records written by hand

_PROVER = {"expected_answer": "", "sql_behaviour": "", "reasoning": "", "answers_question": True}
_REFUTER = {"reasoning": "", "overturn": False, "ambiguity": "none", "gold_correct": True}
_CALL = {
    "model": "judge-x",
    "raw": "",
    "reasoning": None,
    "cached": False,
    "prompt_tokens": 0,
    "completion_tokens": 0,
    "reasoning_tokens": None,
    "cost_usd": None,
    "seconds": 0.0,
    "prompt_sha256": None,
    "params": {},
}


def make_record(data: dict[str, Any]) -> Record:
    """A typed record from the fields a test cares about; the others take neutral values."""
    full: dict[str, Any] = {
        "db_id": "",
        "unscored_reason": None,
        "decided_by": None,
        "why": "",
        "readings": {},
        "comparison": None,
        "pred": {"status": "skipped", "seconds": 0.0},
        "gold": {"status": "skipped", "seconds": 0.0},
        **data,
    }
    if full.get("score") is not None and full["decided_by"] is None:
        full["decided_by"] = "refuter"
    calls = []
    for call in full.get("judges") or []:
        reply = call.get("reply")
        if reply is not None:
            reply = {**(_PROVER if call["stage"] == "prover" else _REFUTER), **reply}
        calls.append({**_CALL, **call, "reply": reply})
    full["judges"] = calls
    if full.get("evidence") is not None:
        full["evidence"] = {"witness": None, **full["evidence"]}
    return Record.from_dict(full)


def write_records(folder: Path, records: list[Record], summary: dict[str, Any] | None = None) -> Path:
    """A run folder holding ``records`` (and a summary.json made of ``summary``'s fields, when given)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "records.jsonl").write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps(make_summary(folder.name, summary).to_dict()))
    return folder


def make_summary(system: str, data: dict[str, Any]) -> Summary:
    """A typed summary from the fields a test cares about."""
    base: dict[str, Any] = {
        "system": system,
        "n": 0,
        "scored": 0,
        "coverage": 0.0,
        "rose": None,
        "bird_ex": None,
        "spider_ex": None,
        "spider_ex_keep_distinct": None,
        "ts_ex": None,
        "ts_ex_keep_distinct": None,
        "soft_f1": None,
        "unscored": {},
        "decided_by": {},
        "comparison": {},
        "readings_n": {},
    }
    return Summary.from_dict({**base, **data})


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """One local Ray instance of 2 CPUs for every test that needs one (Ray starts slowly on two cores);
    yields its address, for subprocesses to join. Skipped when Ray (the optional extra) is absent."""
    try:
        import ray
    except ImportError:
        pytest.skip("Ray is not installed: pip install -e '.[ray]' to run the tests of rose run --ray and RewardPool")
    context = ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
        _node_ip_address="127.0.0.1",  # loopback only
    )
    try:
        yield str(context.address_info["address"])
    finally:
        ray.shutdown()
