"""Ctrl-C: the command ends at status 130 with a line that says so, never a traceback, whenever it comes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rose_sql.engines.workers import Pool, Watch

SLOW = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000) SELECT count(*) + {} FROM c"


def _state(arg: None, watch: Watch) -> None:
    return None


def _nap(state: None, seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@pytest.fixture
def thread_errors() -> Iterator[list[BaseException]]:
    """What any thread raised and nobody caught while the test ran (the supervisor's included)."""
    seen: list[BaseException] = []
    before = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        seen.append(args.exc_value or RuntimeError(str(args.exc_type)))

    threading.excepthook = hook
    yield seen
    threading.excepthook = before


def _mark(state: None, path: str) -> str:
    Path(path).write_text("ran")
    return path


def test_a_unit_its_caller_cancelled_is_answered_without_raising_in_the_supervisor(
    thread_errors: list[BaseException], tmp_path: Path
) -> None:
    """Ctrl-C cancels the tasks waiting on units: the answer of one that was running arrives after, and
    setting its cancelled future raised InvalidStateError in the supervising thread (a traceback before the
    clean line); a unit still queued is dropped, never sent."""
    marker = tmp_path / "ran"
    with Pool(1, _state, None) as pool:
        running = pool.submit(_nap, [0.5])
        in_flight = pool.submit(_nap, [0.0])  # waits in the worker's pipe (two units in flight)
        queued = pool.submit(_mark, [str(marker)])
        time.sleep(0.2)
        assert running.cancel() and queued.cancel()
        assert pool.submit(_nap, [0.0]).result(timeout=30) == [0.0]
        assert in_flight.result(timeout=30) == [0.0]
    assert thread_errors == []
    assert not marker.exists()


def _run(items: Path, db_root: Path, out: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "rose_sql", "run", str(items), "--db-root", str(db_root), "--out", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _records(out: Path) -> int:
    path = out / "items" / "records.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def _importing(pid: int) -> bool:
    """Whether process ``pid`` runs rose's code yet: it has loaded ``_multiprocessing``, which the command
    group's imports load (the workers) and Python's own start does not. (Before that, Python itself is
    starting: an interrupt there is Python's to report, with its traceback, before any line of rose ran.)"""
    try:
        return "/_multiprocessing." in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


WHEN: dict[str, Callable[[Path, subprocess.Popen[str]], bool]] = {
    "while it starts": lambda out, proc: _importing(proc.pid),
    "at the first record": lambda out, proc: _records(out) >= 1,
    "mid-run": lambda out, proc: _records(out) >= 40,
}


@pytest.mark.slow  # three rose runs as processes of their own, interrupted (13 s)
@pytest.mark.parametrize("moment", list(WHEN))
def test_ctrl_c_at_any_moment_is_status_130_and_no_traceback(
    make_db: Callable[..., Path], tmp_path: Path, moment: str
) -> None:
    db_root = make_db("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);", db_id="league").parent.parent
    items = tmp_path / "items.jsonl"
    rows: list[dict[str, Any]] = [
        {"id": i, "db_id": "league", "gold_sql": "SELECT 1", "pred_sql": SLOW.format(i)} for i in range(200)
    ]
    items.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    proc = _run(items, db_root, out)
    start = time.monotonic()
    while not WHEN[moment](out, proc):
        assert proc.poll() is None, "the run ended before the moment came"
        assert time.monotonic() - start < 120
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "Error" not in stderr, stderr
    assert "interrupted" in stderr
