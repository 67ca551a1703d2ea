"""``rose review`` as a process on loopback: killed with SIGKILL in the middle of a labelling session, it
restarts with every acknowledged label; under 20 concurrent annotators for a bounded time it answers
without an error, loses no label, and its page latency is reported."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="rose review's extra is not installed: pip install -e '.[review]'")

from review_support import Client, demo_inputs, load_project, process_server

from rose_sql.demo.build import load_demo_items
from rose_sql.review.store import Store

LOAD_SECONDS = float(os.environ.get("ROSE_REVIEW_LOAD_SECONDS", "20"))
"""How long the load test runs (bounded: every annotator stops at this deadline)."""
ANNOTATORS = 20


def _many_items(folder: Path, n: int) -> tuple[Path, Path]:
    """``n`` items cycling through the demo's questions (ids 0..n-1), and the demo database."""
    _, db_root = demo_inputs(folder)
    demo = load_demo_items()
    path = folder / "many.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            it = demo[i % len(demo)]
            row = {"id": i, "db_id": "cycling_league", "question": it.question, "evidence": it.evidence}
            f.write(json.dumps({**row, "gold_sql": it.gold_sql, "pred_sql": it.pred_sql}) + "\n")
    return path, db_root


def _verdict(key: str) -> bool:
    return int(key) % 4 != 0


class Session:
    """One scripted annotator: opens the first item waiting, labels it, again, recording every acknowledgement."""

    def __init__(self, base: str, name: str, project: str) -> None:
        self.client = Client(base)
        self.client.sign_in(name)
        self.name = name
        self.project = project
        self.acked: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.page_s: list[float] = []
        self.label_s: list[float] = []
        self.done = False

    def step(self) -> None:
        """Open the next item and label it (raises when the server is gone)."""
        status, headers, _ = self.client.get(f"/p/{self.project}/todo")
        if status != 303:
            self.errors.append(f"todo: {status}")
            return
        location = headers["location"]
        if "/overview" in location:
            self.done = True
            return
        start = time.monotonic()
        status, _, page = self.client.get(location)
        self.page_s.append(time.monotonic() - start)
        if status != 200 or b'id="label"' not in page:
            self.errors.append(f"item page: {status}")
            return
        key = location.split("id=", 1)[1]
        start = time.monotonic()
        answer = self.client.label(self.project, key, _verdict(key), reason=f"{self.name} on {key}")
        self.label_s.append(time.monotonic() - start)
        self.acked.append({"id": answer["id"], "key": key, "annotator": self.name})


def _stored(state: Path, project: str) -> dict[int, tuple[str, str, bool, str]]:
    store = Store(state)
    try:
        return {
            lab.id: (lab.key, lab.annotator, lab.verdict.correct, lab.verdict.reason) for lab in store.labels(project)
        }
    finally:
        store.close()


def _integrity(state: Path) -> str:
    conn = sqlite3.connect(state)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.slow  # kills and restarts the review server, a process of its own
def test_a_killed_server_restarts_with_every_acknowledged_label(tmp_path: Path) -> None:
    items, db_root = _many_items(tmp_path, 200)
    state = tmp_path / "state.sqlite"
    load_project(state, "kill", items, db_root)
    sessions: list[Session] = []
    with process_server(state) as (proc, base):
        sessions = [Session(base, name, "kill") for name in ("kim", "lee", "max")]
        stop = threading.Event()

        def work(s: Session) -> None:
            while not stop.is_set():
                try:
                    s.step()
                except (OSError, AssertionError, json.JSONDecodeError):
                    return  # the server is gone: whatever was not acknowledged may be lost

        threads = [threading.Thread(target=work, args=(s,)) for s in sessions]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while sum(len(s.acked) for s in sessions) < 40 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGKILL)  # mid-session: requests are in flight
        proc.wait(10)
        stop.set()
        for t in threads:
            t.join(30)
    acked = [a for s in sessions for a in s.acked]
    assert len(acked) >= 40
    assert _integrity(state) == "ok"
    stored = _stored(state, "kill")
    for a in acked:
        assert stored.get(a["id"]) == (a["key"], a["annotator"], _verdict(a["key"]), f"{a['annotator']} on {a['key']}")
    with process_server(state) as (_, base):  # and it serves again, with them
        again = Session(base, "kim", "kill")
        status, _, page = again.client.get("/p/kill/overview")
        assert status == 200 and b"kim" in page
        again.step()
        assert again.acked and not again.errors


@pytest.mark.slow  # a load test: twenty annotators at once
def test_twenty_concurrent_annotators_lose_nothing_and_latency_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items, db_root = _many_items(tmp_path, 1000)
    state = tmp_path / "state.sqlite"
    load_project(state, "load", items, db_root)
    load_before = os.getloadavg()
    with process_server(state) as (_, base):
        sessions = [Session(base, f"annotator-{i:02d}", "load") for i in range(ANNOTATORS)]
        deadline = time.monotonic() + LOAD_SECONDS
        crashes: list[BaseException] = []

        def work(s: Session) -> None:
            try:
                while time.monotonic() < deadline and not s.done:
                    s.step()
            except BaseException as e:
                crashes.append(e)

        threads = [threading.Thread(target=work, args=(s,)) for s in sessions]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(LOAD_SECONDS + 120)
        elapsed = time.monotonic() - start
    load_after = os.getloadavg()
    assert not crashes, crashes[:3]
    errors = [e for s in sessions for e in s.errors]
    assert not errors, errors[:5]
    acked = [a for s in sessions for a in s.acked]
    stored = _stored(state, "load")
    assert len(stored) == len(acked) and all(a["id"] in stored for a in acked)  # no label lost, none invented
    per_item: dict[str, int] = {}
    for key, _, _, _ in stored.values():
        per_item[key] = per_item.get(key, 0) + 1
    pages = sorted(x for s in sessions for x in s.page_s)
    labels = sorted(x for s in sessions for x in s.label_s)

    def q(xs: list[float], p: float) -> float:
        return 1000 * xs[min(len(xs) - 1, int(p * len(xs)))]

    report = (
        f"rose review load test: {ANNOTATORS} annotators for {elapsed:.1f} s on loopback, {len(acked)} labels "
        f"acknowledged and stored ({len(acked) / elapsed:.1f}/s), {len(per_item)} items labelled "
        f"(at most {max(per_item.values())} labels on one), 0 errors; item page ms p50 {q(pages, 0.5):.0f} "
        f"p95 {q(pages, 0.95):.0f} max {1000 * pages[-1]:.0f}; label ms p50 {q(labels, 0.5):.0f} p95 "
        f"{q(labels, 0.95):.0f} max {1000 * labels[-1]:.0f}; {os.cpu_count()} cores, load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after; mean page {1000 * statistics.mean(pages):.0f} ms"
    )
    with capsys.disabled():
        print("\n" + report)
    assert len(acked) >= ANNOTATORS  # everyone labelled
    assert max(per_item.values()) <= 2  # they all agree, so no item was given to a third annotator
    assert q(pages, 0.95) < 10_000 and q(labels, 0.95) < 10_000
