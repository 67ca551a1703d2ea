"""The reward server under attack: slow clients, slowly streamed bodies, huge bodies, many items,
hostile JSON, too many connections, slow completions. Through each, ``GET /health`` answers within
1 s, the server's threads and memory (read from ``/proc``) stay bounded, and every request gets the
right status. The server runs as its own process on loopback, as in production.

The bounds asserted are generous (they hold on a loaded two-core machine); what was measured is
printed (``pytest -s``).
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import build_db
from reward_cases import GOLD, INSTR, OTHER_GOLD, RUNAWAY, SCRIPT

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's /proc")

HEALTH_S = 1.0
MAX_THREADS = 16
"""The server's threads whatever the clients do (event loop, decoder, scorer queue, pool supervisor...)."""
SERVE = """
import json, sys
from pathlib import Path
from rose_sql.config import RewardConfig, ServeConfig
from rose_sql.engines import Source
from rose_sql.reward.server import RewardServer
kw = json.loads(sys.argv[1])
reward = RewardConfig(**kw.pop("reward"))
server = RewardServer(ServeConfig(Source.folder(kw.pop("db_root")), port=0, reward=reward, **kw))
print(server.url, flush=True)
try:
    server.serve_forever()
finally:
    server.close()
"""
PROBE = """
import http.client, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    start = time.monotonic()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
        conn.request("GET", "/health")
        ok = conn.getresponse().status == 200
        conn.close()
    except OSError:
        ok = False
    print(time.monotonic() - start if ok else "inf", flush=True)
    time.sleep(0.1)
"""
"""A health checker in a process of its own (the attacking test's own work does not slow it)."""
BOUNDS = {"header_timeout_s": 3.0, "body_timeout_s": 4.0, "deadline_s": 6.0}
REWARD = {"processes": 2, "max_steps": 10**12}


def label(sql: str = GOLD) -> str:
    return json.dumps({"gold_sql": sql, "db_id": "music"})


@dataclass
class Server:
    proc: subprocess.Popen[str]
    port: int
    health: list[float] = field(default_factory=list)
    """Latencies of the health checks during an attack (inf: failed)."""

    def proc_status(self) -> dict[str, int]:
        text = Path(f"/proc/{self.proc.pid}/status").read_text()
        return {k: int(re.search(rf"^{k}:\s+(\d+)", text, re.M).group(1)) for k in ("VmHWM", "VmRSS", "Threads")}  # type: ignore[union-attr]

    def reset_peak(self) -> int:
        """Reset the server's peak RSS to its current RSS; returns it (MB)."""
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")
        return self.proc_status()["VmRSS"] // 1024

    def request(
        self, method: str, path: str = "/get_reward", body: Any = None, *, raw: bytes | None = None, timeout: float = 60
    ) -> tuple[int, dict[str, str], Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = raw if raw is not None else None if body is None else json.dumps(body).encode()
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            text = resp.read()
            return resp.status, dict(resp.getheaders()), json.loads(text) if text else None
        finally:
            conn.close()

    @contextmanager
    def watched(self) -> Iterator[dict[str, int]]:
        """During the block, a client process of its own checks the health every 0.1 s, and the server's
        threads are sampled; yields the most threads seen."""
        worst = {"threads": 0}
        stop = threading.Event()
        prober = subprocess.Popen([sys.executable, "-c", PROBE, str(self.port)], stdout=subprocess.PIPE, text=True)

        def sample() -> None:
            while not stop.wait(0.1):
                worst["threads"] = max(worst["threads"], self.proc_status()["Threads"])

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield worst
        finally:
            stop.set()
            thread.join()
            prober.terminate()
            out, _ = prober.communicate(timeout=30)
        self.health = [float(x) for x in out.split()]
        slowest = max(self.health)
        print(f"health: {len(self.health)} checks, slowest {slowest:.3f} s; threads at most {worst['threads']}")
        assert self.health and slowest < HEALTH_S
        assert worst["threads"] <= MAX_THREADS


@contextmanager
def serving(root: Path, **kw: Any) -> Iterator[Server]:
    config = {**BOUNDS, **kw, "db_root": str(root), "reward": {**REWARD, **kw.pop("reward", {})}}
    proc = subprocess.Popen([sys.executable, "-c", SERVE, json.dumps(config)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline()
        match = re.search(r":(\d+)/get_reward", url)
        assert match, url
        server = Server(proc, int(match.group(1)))
        server.request("POST", body={"query": [GOLD, OTHER_GOLD], "labels": [label(), label(OTHER_GOLD)]})  # workers up
        yield server
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("attacks")
    build_db(folder / "music" / "music.sqlite", SCRIPT)
    return folder


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[Server]:
    with serving(root) as s:
        yield s


def _connect(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setblocking(False)
        socks.append(s)
    return socks


def _poll(s: socket.socket) -> bytes | None:
    """What the server sent (b"" once it closed), or None while it says nothing."""
    try:
        return s.recv(65536)
    except BlockingIOError:
        return None
    except OSError:
        return b""


# --------------------------------------------------------------------------- slow clients


@pytest.mark.slow  # an attack held for seconds against the server
def test_800_slow_clients_are_cut_off_and_cost_no_threads(server: Server) -> None:
    base = server.reset_peak()
    with server.watched():
        socks = _connect(server.port, 800)
        for s in socks:
            s.send(b"POST /get_reward HTTP/1.1\r\n")
        start = time.monotonic()
        open_ = set(range(len(socks)))
        cut: list[float] = []
        while open_ and time.monotonic() - start < BOUNDS["header_timeout_s"] + 5.0:
            for i in list(open_):
                if _poll(socks[i]) is not None:  # closed (a head never came: nothing to answer)
                    cut.append(time.monotonic() - start)
                    open_.discard(i)
                    continue
                try:
                    socks[i].send(b"X")  # a byte of a header, every 0.25 s: never a whole head
                except OSError:
                    cut.append(time.monotonic() - start)
                    open_.discard(i)
            time.sleep(0.25)
        for s in socks:
            s.close()
    peak = server.proc_status()["VmHWM"] // 1024
    cut.sort()
    first, last = cut[800 - 257], cut[-1]
    print(f"800 slow clients: 544 past max_connections cut off within {first:.1f} s, all within {last:.1f} s")
    print(f"    (header timeout {BOUNDS['header_timeout_s']:g} s); peak RSS {base} -> {peak} MB")
    assert not open_ and last < BOUNDS["header_timeout_s"] + 3
    assert first < 1.0 + 2  # past max_connections (256), a head has 1 s
    assert peak - base < 100


@pytest.mark.slow  # an attack held for seconds against the server
def test_a_head_is_bounded_in_total_not_per_read(server: Server) -> None:
    (s,) = _connect(server.port, 1)
    start = time.monotonic()
    s.send(b"POST /get_reward HTTP/1.1\r\nHost: x\r\n")
    while _poll(s) is None and time.monotonic() - start < 30:
        try:
            s.send(b"X")
        except OSError:
            break
        time.sleep(0.2)
    elapsed = time.monotonic() - start
    s.close()
    print(f"a head sent a byte every 0.2 s: cut off after {elapsed:.2f} s")
    assert BOUNDS["header_timeout_s"] - 0.5 < elapsed < BOUNDS["header_timeout_s"] + 3


# --------------------------------------------------------------------------- bodies


@pytest.mark.slow  # an attack held for seconds against the server
def test_400_slowly_streamed_6mb_bodies_keep_memory_bounded(server: Server) -> None:
    base = server.reset_peak()
    chunk = b"x" * 250_000
    with server.watched():
        socks = _connect(server.port, 400)
        for s in socks:
            s.send(b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Length: 6000000\r\n\r\n")
        time.sleep(1.0)
        refused = {i: _poll(s) for i, s in enumerate(socks)}
        streaming = [i for i, got in refused.items() if got is None]
        answers: dict[int, bytes] = {}
        start = time.monotonic()
        while len(answers) < len(streaming) and time.monotonic() - start < BOUNDS["body_timeout_s"] + 10:
            for i in streaming:
                if i in answers:
                    continue
                got = _poll(socks[i])
                if got is not None:
                    answers[i] = got
                    continue
                socks[i].setblocking(True)
                try:
                    socks[i].sendall(chunk)  # 6 MB in 24 chunks, one every 0.25 s: too slow by design
                except OSError:
                    answers[i] = b""
                socks[i].setblocking(False)
            time.sleep(0.25)
        for s in socks:
            s.close()
    peak = server.proc_status()["VmHWM"] // 1024
    busy = [got for got in refused.values() if got is not None]
    print(f"400 slow 6 MB bodies: {len(busy)} told 503, {len(streaming)} read; peak RSS {base} -> {peak} MB")
    assert len(busy) >= 350 and all(b"503" in b and b"Retry-After: 1" in b for b in busy)
    assert all(b.startswith(b"HTTP/1.1 408") for b in answers.values())  # the body's time is counted in total
    assert peak - base < 128 + 100  # max_pending_bytes (128 MiB) of bodies at most, and some change


def test_a_30mb_body_of_8_million_queries_is_refused_at_once(server: Server) -> None:
    base = server.reset_peak()
    body = b'{"query": [' + b'"",' * 8_000_000 + b'""], "labels": []}'
    with server.watched():
        start = time.monotonic()
        status, _, answer = server.request("POST", raw=body)
        elapsed = time.monotonic() - start
    peak = server.proc_status()["VmHWM"] // 1024
    size = len(body) / 2**20
    print(f"a {size:.0f} MiB body of 8M queries: {status} after {elapsed:.2f} s; peak RSS {base} -> {peak} MB")
    assert status == 413 and "JSON values" in answer["error"]
    assert elapsed < 15 and peak - base < 250


def test_a_body_over_the_cap_is_refused_before_it_is_read(server: Server) -> None:
    (s,) = _connect(server.port, 1)
    s.setblocking(True)
    s.settimeout(10)
    s.sendall(b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Length: 40000000\r\n\r\n")
    head = s.recv(65536)
    s.close()
    assert head.startswith(b"HTTP/1.1 413") and b"33,554,432" in head


def test_too_many_items_are_refused(server: Server) -> None:
    status, _, answer = server.request("POST", body={"query": ["SELECT 1"] * 5000, "labels": [label()] * 5000})
    assert status == 413 and "4,096 at most" in answer["error"]


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"query": [], "labels": [], "step": 1' + b"0" * 4000 + b"}", "training step"),
        (b'{"query": [], "labels": [], "step": 1' + b"0" * 5000 + b"}", "digits"),
        (b'{"query": [], "labels": [], "step": -1}', "training step"),
        (b'{"query": [], "labels": [], "step": true}', "training step"),
        (b'{"query": [], "labels": [], "step": 1.5}', "training step"),
        (b'{"query": ' + DEEP + b', "labels": []}', "nested too deeply"),
        (b'{"query": ["SELECT 1"], "labels": [NaN]}', "NaN"),
        (b'{"query": ["SELECT 1"], "labels": [Infinity]}', "Infinity"),
        (b'{"query": {"a": 1}, "labels": []}', '"query" must be a list'),
        (b'{"query": ["SELECT 1"], "labels": 5}', '"labels" must be a list'),
        (b'{"query": ["SELECT 1", "SELECT 2"], "labels": ["SELECT 1\\tmusic"]}', "2 queries but 1 labels"),
        (b'{"query": ["SELECT 1"], "labels": ["x"], "prompts": ["a", "b"]}', "one prompt per query"),
        (b'"just a string"', "JSON object"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b"{" * 10, "not valid JSON"),
    ],
    ids=[
        "step 10**4000", "5000 digits", "negative step", "boolean step", "float step", "deep nesting", "NaN",
        "Infinity", "query object", "labels number", "2 queries 1 label", "prompts mismatch", "string body",
        "not utf-8", "truncated",
    ],
)  # fmt: skip
def test_every_malformed_body_is_a_400(server: Server, raw: bytes, says: str) -> None:
    status, _, answer = server.request("POST", raw=raw)
    assert status == 400 and answer["rewards"] == [] and says in answer["error"], answer


def test_wrong_methods_are_405(server: Server) -> None:
    status, headers, _ = server.request("GET", "/get_reward")
    assert status == 405 and headers["Allow"] == "POST"
    assert server.request("PUT", "/anything", {"query": []})[:1] == (405,)
    status, headers, _ = server.request("POST", "/health", {})
    assert status == 405 and "GET" in headers["Allow"]
    assert server.request("GET", "/health")[::2] == (200, {"status": "ok"})


# --------------------------------------------------------------------------- connections


@pytest.mark.slow  # an attack held for seconds against the server
def test_past_max_connections_new_ones_are_told_503_and_health_still_answers(root: Path) -> None:
    with serving(root, max_connections=20) as server:
        held = _connect(server.port, 20)
        for s in held:
            s.send(b"POST /get_reward HTTP/1.1\r\n")
        time.sleep(0.3)
        status, headers, answer = server.request("POST", body={"query": [GOLD], "labels": [label()]})
        assert status == 503 and headers["Retry-After"] == "1" and "20 connections" in answer["error"]
        start = time.monotonic()
        assert server.request("GET", "/health")[0] == 200 and time.monotonic() - start < HEALTH_S
        time.sleep(BOUNDS["header_timeout_s"] + 1)  # the held ones are cut off at their head's deadline
        assert server.request("POST", body={"query": [GOLD], "labels": [label()]})[2]["status"] == ["match"]
        for s in held:
            s.close()


# --------------------------------------------------------------------------- slow completions


@pytest.mark.slow  # an attack held for seconds against the server
def test_slow_completions_do_not_take_the_time_of_later_requests(server: Server) -> None:
    results: dict[str, tuple[float, Any]] = {}

    def send(name: str, queries: list[str], labels: list[str]) -> None:
        start = time.monotonic()
        body = server.request("POST", body={"query": queries, "labels": labels})[2]
        results[name] = (time.monotonic() - start, body)

    with server.watched():
        slow = [threading.Thread(target=send, args=(f"slow{k}", [RUNAWAY], [label()])) for k in range(2)]
        for t in slow:
            t.start()
        time.sleep(0.3)  # both workers busy with a runaway query
        pair = ([GOLD, OTHER_GOLD], [label(), label(OTHER_GOLD)])
        innocent = [threading.Thread(target=send, args=(f"ok{k}", *pair)) for k in range(4)]
        for t in innocent:
            t.start()
        for t in slow + innocent:
            t.join(60)
    deadline = BOUNDS["deadline_s"]
    for k in range(4):
        elapsed, body = results[f"ok{k}"]
        print(f"an innocent request behind two runaway ones: {elapsed:.2f} s, {body['status']}")
        assert body["status"] == ["match", "match"] and elapsed < deadline
    for k in range(2):
        elapsed, body = results[f"slow{k}"]
        print(f"a runaway request: {elapsed:.2f} s, {body['status']}, {body['errors']}")
        assert body["status"] == ["wall_guard"]  # stopped by its guard or at its chunk's share of the deadline
        assert "wall-time guard after 3 s" in body["errors"][0] or "deadline" in body["errors"][0]
        assert elapsed < deadline + 3


@pytest.mark.slow  # an attack held for seconds against the server
def test_an_item_past_the_deadline_is_answered_and_the_others_scored(server: Server) -> None:
    start = time.monotonic()
    status, _, body = server.request(
        "POST",
        body={
            "query": [INSTR, OTHER_GOLD, "```sql\nDELETE FROM singer\n```"],
            "labels": [label(), label(OTHER_GOLD)] * 1 + [label()],
        },
    )
    elapsed = time.monotonic() - start
    print(f"instr with a {BOUNDS['deadline_s']:g} s deadline: answered after {elapsed:.2f} s: {body['errors']}")
    assert status == 200 and elapsed < BOUNDS["deadline_s"] + 3
    assert body["status"][:2] == ["wall_guard", "match"] and "deadline" in body["errors"][0]
    assert body["status"][2] == "error" and "not a SELECT statement" in body["errors"][2]  # the reason, not null
    time.sleep(BOUNDS["deadline_s"])  # the stopped worker is replaced; then requests are scored as ever
    assert server.request("POST", body={"query": [GOLD], "labels": [label()]})[2]["status"] == ["match"]
