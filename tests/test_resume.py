"""Crash and resume through the real ``rose run``: kill -9 mid-run, then ``--resume`` finishes the job.

After the kill (and a torn last line, as a crash mid-write leaves), ``--resume`` must give exactly
one record per item: no id lost, none twice, the torn line gone, the summary counting every item.
Running again without ``--resume`` on a non-empty ``records.jsonl`` must refuse and leave it alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import write_items

N_ITEMS = 200
SLOW_EVERY = 4
HANG_GUARD_S = 120.0


def rose_command() -> list[str]:
    script = Path(sys.executable).with_name("rose")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rose_sql"]


def slow_sql(i: int) -> str:
    """A prediction of roughly 50-200 ms, distinct per item so the execution cache cannot share it."""
    return (
        f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 250000) SELECT count(*) + {i} FROM c"
    )


def make_items(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"q{i:04d}",
            "db_id": "r",
            "question": f"question {i}",
            "evidence": "",
            "gold_sql": "SELECT count(*) FROM t",
            "pred_sql": slow_sql(i) if i % SLOW_EVERY == 0 else f"SELECT count(*) + {i % 2} FROM t",
        }
        for i in range(n)
    ]


def count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def run_args(preds: Path, db_root: Path, out: Path, *extra: str) -> list[str]:
    return [*rose_command(), "run", str(preds), "--db-root", str(db_root), "--out", str(out), "--workers", "2", *extra]


ENV = {**os.environ, "NO_COLOR": "1"}


@pytest.fixture
def setup(make_db: Callable[..., Path], tmp_path: Path) -> tuple[Path, Path, Path, list[dict[str, Any]]]:
    db = make_db("CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2), (3);", db_id="r")
    items = make_items(N_ITEMS)
    preds = tmp_path / "preds.jsonl"
    write_items(preds, items)
    return preds, db.parent.parent, tmp_path / "out", items


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_gives_one_record_per_item(
    setup: tuple[Path, Path, Path, list[dict[str, Any]]],
) -> None:
    preds, db_root, out, items = setup
    records = out / "preds" / "records.jsonl"
    proc = subprocess.Popen(
        run_args(preds, db_root, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV
    )
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while count_lines(records) < 20 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(HANG_GUARD_S)
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed; make the items slower"
    before_kill = records.read_bytes()
    done = before_kill.count(b"\n")
    assert 20 <= done < N_ITEMS, f"{done} records at the kill: not mid-run"

    with records.open("ab") as f:  # a crash in the middle of writing a line
        f.write(b'{"id": "q0001", "db_id": "r", "torn_by_the_crash": tr')

    resumed = subprocess.run(
        run_args(preds, db_root, out, "--resume"), capture_output=True, text=True, env=ENV, timeout=HANG_GUARD_S
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    data = records.read_bytes()
    assert data.startswith(before_kill[: before_kill.rfind(b"\n") + 1])  # earlier records kept as they were
    assert data.endswith(b"\n") and b"torn_by_the_crash" not in data  # the torn line is gone
    lines = data.decode("utf-8").splitlines()
    ids = [json.loads(line)["id"] for line in lines]  # every line is a whole record
    assert len(ids) == len(set(ids)) == N_ITEMS
    assert set(ids) == {it["id"] for it in items}
    summary = json.loads((out / "preds" / "summary.json").read_text())
    assert summary["n"] == N_ITEMS

    again = subprocess.run(
        run_args(preds, db_root, out, "--resume"), capture_output=True, text=True, env=ENV, timeout=HANG_GUARD_S
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert records.read_bytes() == data  # nothing left to do: nothing appended


def test_rerun_without_resume_refuses_and_leaves_records_alone(
    setup: tuple[Path, Path, Path, list[dict[str, Any]]],
) -> None:
    preds, db_root, out, items = setup
    write_items(preds, items[1:30:SLOW_EVERY])  # quick items only
    first = subprocess.run(run_args(preds, db_root, out), capture_output=True, text=True, env=ENV, timeout=HANG_GUARD_S)
    assert first.returncode == 0, first.stderr[-3000:]
    records = out / "preds" / "records.jsonl"
    digest = hashlib.sha256(records.read_bytes()).hexdigest()
    stat = records.stat()
    assert count_lines(records) == len(items[1:30:SLOW_EVERY])

    second = subprocess.run(
        run_args(preds, db_root, out), capture_output=True, text=True, env=ENV, timeout=HANG_GUARD_S
    )
    assert second.returncode == 2
    assert "--resume" in second.stderr + second.stdout
    assert hashlib.sha256(records.read_bytes()).hexdigest() == digest
    assert records.stat().st_mtime_ns == stat.st_mtime_ns
