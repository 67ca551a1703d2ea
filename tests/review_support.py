"""Helpers of the review app's tests: a server on loopback (in a thread or a process), an HTTP client
that signs in and posts like the app's own pages, and projects built from the bundled demo."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from rose_sql.config import Config
from rose_sql.demo.build import DB_ID, build_database, load_demo_items, write_items
from rose_sql.engines import Source
from rose_sql.items.load import load_items
from rose_sql.record import JudgeCall, Record
from rose_sql.review.settings import ReviewConfig
from rose_sql.review.store import Store
from rose_sql.review.work import WorkItem, load_work
from rose_sql.run.evaluate import evaluate_items
from rose_sql.verdicts import ProverReply, RefuterReply

ROSE = [sys.executable, "-m", "rose_sql"]


def call(stage: str, model: str = "judge-x", **reply: Any) -> JudgeCall:
    """A judge call whose reply is ``reply`` (the fields not given take neutral values)."""
    if stage == "prover":
        base = {"expected_answer": "", "sql_behaviour": "", "reasoning": "", "answers_question": True}
        r: ProverReply | RefuterReply = ProverReply.model_validate({**base, **reply})
    else:
        base = {"reasoning": "", "overturn": False, "ambiguity": "none", "gold_correct": True}
        r = RefuterReply.model_validate({**base, **reply})
    return JudgeCall(stage, model, r, json.dumps(reply), None, False, 10, 10, None, None, 0.1, "0" * 64, {})  # type: ignore[arg-type]


@contextmanager
def thread_server(config: ReviewConfig) -> Iterator[str]:
    """The app served by uvicorn in a thread of this process, on a free loopback port: its base URL."""
    import uvicorn

    from rose_sql.review.app import create_app
    from rose_sql.review.serve import bind

    sock = bind(config.host, 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(config, port=port), log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)
        sock.close()


@contextmanager
def process_server(state: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``rose review STATE --port 0`` in a process of its own: (the process, its base URL)."""
    proc = subprocess.Popen(
        [*ROSE, "review", str(state), "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        url = None
        deadline = time.monotonic() + 30
        assert proc.stderr is not None
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                raise AssertionError(f"rose review exited: {proc.stderr.read()}")
            m = re.search(r"on (http://\S+?)/? \(", line)
            if m:
                url = m.group(1).rstrip("/")
        assert url is not None, "rose review did not say where it listens"
        yield proc, url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


class Client:
    """A browser-like HTTP client: one cookie (the session), the app's own Origin on posts."""

    def __init__(self, base: str, origin: str | None = "") -> None:
        self.base = base
        self.host, port = base.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)
        self.origin = base if origin == "" else origin
        self.cookie: str | None = None
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        h = {"Host": f"{self.host}:{self.port}", **(headers or {})}
        if method == "POST" and self.origin is not None:
            h.setdefault("Origin", self.origin)
        if self.cookie:
            h["Cookie"] = self.cookie
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=body, headers=h)
                response = self.conn.getresponse()
                data = response.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
                if attempt:
                    raise
        headers_out = {k.lower(): v for k, v in response.getheaders()}
        cookie = headers_out.get("set-cookie")
        if cookie and "rose_review=" in cookie:
            value = cookie.split(";", 1)[0]
            self.cookie = None if value.endswith("=") or 'rose_review=""' in value else value
        return response.status, headers_out, data

    def get(self, path: str) -> tuple[int, dict[str, str], bytes]:
        return self.request("GET", path)

    def sign_in(self, name: str) -> None:
        status, _, _ = self.request(
            "POST",
            "/signin",
            urlencode({"name": name, "next": "/"}).encode(),
            {"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert status == 303 and self.cookie, status

    def label(self, project: str, key: str, correct: bool, reason: str = "", **flags: bool) -> dict[str, Any]:
        status, _, data = self.request(
            "POST",
            f"/p/{project}/label?{urlencode({'id': key})}",
            json.dumps({"correct": correct, "reason": reason, **flags}).encode(),
            {"Content-Type": "application/json"},
        )
        assert status == 200, (status, data)
        out: dict[str, Any] = json.loads(data)
        return out

    def close(self) -> None:
        self.conn.close()


# --------------------------------------------------------------------------- projects from the demo


def demo_inputs(folder: Path) -> tuple[Path, Path]:
    """The demo's items (generic JSONL) and database root, written under ``folder``."""
    db_root = folder / "db"
    build_database(db_root / DB_ID / f"{DB_ID}.sqlite")
    items = folder / "items.jsonl"
    write_items(load_demo_items(), items)
    return items, db_root


def demo_records(folder: Path, n: int = 40, evidence: bool = True) -> tuple[Path, Path]:
    """A run folder of the demo's first ``n`` items with evidence and made-up judge calls on a few."""
    items_path, db_root = demo_inputs(folder)
    items = load_items(items_path).items[:n]
    records = evaluate_items(items, Source.folder(db_root), Config(workers=1, evidence=evidence))
    judged = []
    for i, r in enumerate(records):
        if i % 3 == 0:
            r = with_judges(r, answers=i % 2 == 0)
        judged.append(r)
    run = folder / "runs" / "demo"
    run.mkdir(parents=True)
    (run / "records.jsonl").write_text("".join(r.to_json() + "\n" for r in judged), encoding="utf-8")
    return run, db_root


def with_judges(r: Record, answers: bool, reasoning: str = "The prediction filters on the right year.") -> Record:
    """The record as if the Prover and the Refuter had judged it."""
    calls = [
        call("prover", answers_question=answers, reasoning=reasoning, expected_answer="one row per rider"),
        call("refuter", overturn=False, reasoning="No hard evidence against it. " + reasoning),
    ]
    why = "the Refuter found no hard evidence against the Prover's pass" if answers else "the Prover's no"
    return replace(
        r,
        judges=calls,
        score=1 if answers else 0,
        decided_by="refuter" if answers else "prover",
        why=why,
        unscored_reason=None,
    )


def load_project(state: Path, name: str, source: Path, db_root: Path | None) -> list[WorkItem]:
    """Load ``source`` into project ``name`` of the state file."""
    work = load_work(source)
    store = Store(state)
    store.add_items(name, work.source, work.items, db_root)
    store.close()
    return work.items


def config(state: Path, **kw: Any) -> ReviewConfig:
    return ReviewConfig(state=state, host="127.0.0.1", port=0, **kw)
