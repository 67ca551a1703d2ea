"""The reward server: OpenRLHF's request shape, concurrent clients, deadlines, malformed requests."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import pytest
from click.testing import CliRunner
from conftest import build_db

from rose_sql.cli import main
from rose_sql.config import ServeConfig
from rose_sql.engines import Source
from rose_sql.reward import RewardConfig
from rose_sql.reward.server import RewardServer, serve_in_thread

HANG_GUARD_S = 20.0  # only catches a hang; not a performance assertion
SCRIPT = """
CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
INSERT INTO singer VALUES (1, 'Ann', 'France', 52), (2, 'Bo', 'France', 43), (3, 'Cy', 'Peru', 41),
  (4, 'Di', 'Chile', 32), (5, 'Ed', 'France', 29), (6, 'Fe', 'Peru', 25);
"""
GOLD = "SELECT name FROM singer WHERE country = 'France'"
RUNAWAY = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"


def label(sql: str = GOLD, db_id: str = "music") -> str:
    return json.dumps({"gold_sql": sql, "db_id": db_id})


@pytest.fixture(scope="module")
def db_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dbs")
    build_db(root / "music" / "music.sqlite", SCRIPT)
    return root


@pytest.fixture(scope="module")
def server(db_root: Path) -> Iterator[RewardServer]:
    srv, _ = serve_in_thread(
        ServeConfig(Source.folder(db_root), port=0, reward=RewardConfig(max_steps=20_000_000, workers=4))
    )
    yield srv
    srv.close()


def post(url: str, payload: Any = None, *, raw: bytes | None = None, timeout: float = 60.0) -> tuple[int, Any]:
    """POST JSON (or raw bytes) and return (status, decoded JSON body)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    try:
        body = raw if raw is not None else json.dumps(payload).encode()
        conn.request("POST", parts.path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


# --------------------------------------------------------------------------- the request shape


def test_openrlhf_shape(server: RewardServer) -> None:
    prompt = "Question: who sings in France? Example:\n```sql\nSELECT 1\n```\nAnswer:"
    status, body = post(
        server.url,
        {
            "query": [
                prompt + f"```sql\n{GOLD}\n```<|im_end|>",
                prompt + "```sql\nSELECT name FROM singer\n```",
                prompt + "```sql\nSELECT nme FROM singer\n```",
            ],
            "prompts": [prompt] * 3,
            "labels": [label(), f"{GOLD}\tmusic", {"gold_sql": GOLD, "db_id": "music"}],
        },
    )
    assert status == 200
    assert set(body) >= {"rewards", "scores", "extra_logs", "status", "errors"}
    assert body["status"] == ["match", "partial", "error"]
    assert body["rewards"][0] == pytest.approx(1.0) and body["rewards"][0] > body["rewards"][1] > body["rewards"][2]
    assert body["scores"] == [1.0, 0.0, 0.0]
    assert body["errors"][:2] == [None, None] and "no such column: nme" in body["errors"][2]  # why it failed
    assert set(body["extra_logs"]) == {"execution", "syntax", "clause", "scored"}
    assert body["extra_logs"]["execution"] == [1.0, 0.5, -1.0]
    assert all(len(v) == 3 for v in body["extra_logs"].values())


def test_chat_message_queries_and_step(server: RewardServer) -> None:
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": f"<answer>{GOLD}</answer>"}]
    early = post(server.url, {"query": [messages, "SELECT 1"], "labels": [label(), label()], "step": 0})[1]
    late = post(server.url, {"query": [messages, "SELECT 1"], "labels": [label(), label()], "step": 10**6})[1]
    assert early["status"] == late["status"] == ["match", "wrong"]
    assert early["rewards"][1] > late["rewards"][1]  # syntax weighs more early in training


def test_item_errors_become_rewards_with_an_error(server: RewardServer) -> None:
    queries = ["SELECT 1", "SELECT 1", "SELECT 1", "SELECT 1", 42, "SELECT 1"]
    labels: list[Any] = [
        "no tab, no json",
        label(db_id="missing_db"),
        json.dumps({"gold_sql": "SELECT 1", "db_path": "/etc/hosts"}),
        label("SELECT nosuchcolumn FROM singer"),
        label(),
        None,
    ]
    status, body = post(server.url, {"query": queries, "labels": labels})
    assert status == 200
    assert body["status"] == ["invalid", "invalid", "invalid", "gold_error", "invalid", "invalid"]
    assert body["rewards"] == [0.0] * 6 and body["extra_logs"]["scored"] == [0.0] * 6
    assert all(isinstance(e, str) and e for e in body["errors"])
    assert "db-root" in body["errors"][2] and "no such column" in body["errors"][3] and "label" in body["errors"][5]


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"not json at all", 400),
        (b"", 400),
        (b"[1, 2, 3]", 400),
        (b'{"query": "x", "labels": 5}', 400),
        (b'{"labels": []}', 400),
        (b'{"query": {"a": 1}}', 400),
        (b'{"query": [], "step": "ten"}', 400),
        (b"\xff\xfe\x00garbage", 400),
    ],
)
def test_malformed_requests_are_answered(server: RewardServer, raw: bytes, status: int) -> None:
    got, body = post(server.url, raw=raw)
    assert got == status and body["rewards"] == [] and body["error"]
    assert post(server.url, {"query": [GOLD], "labels": [label()]})[1]["status"] == ["match"]  # still serving


def test_empty_query_list_and_health(server: RewardServer) -> None:
    assert post(server.url, {"query": [], "labels": []}) == (200, {**_empty()})
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    conn.request("GET", "/health")
    assert conn.getresponse().status == 200
    conn.close()


def _empty() -> dict[str, Any]:
    logs: dict[str, list[float]] = {"execution": [], "syntax": [], "clause": [], "scored": []}
    return {"rewards": [], "scores": [], "extra_logs": logs, "status": [], "errors": []}


def test_oversized_body_is_refused(db_root: Path) -> None:
    srv, _ = serve_in_thread(ServeConfig(Source.folder(db_root), port=0, max_body_bytes=1000))
    try:
        status, body = post(srv.url, {"query": ["x" * 5000], "labels": [label()]})
        assert status == 413 and body["rewards"] == []
    finally:
        srv.close()


# --------------------------------------------------------------------------- concurrency and deadlines


def test_concurrent_clients_all_answered(server: RewardServer) -> None:
    wrong = ["SELECT name FROM singer", "SELECT age FROM singer", "SELECT name FROM singer WHERE age > 40"]
    failures: list[str] = []
    answered = [0]
    lock = threading.Lock()

    def client(k: int) -> None:
        for i in range(15):
            queries = [GOLD, wrong[(k + i) % 3], f"```sql\n{GOLD}\n```", f"SELECT {k} + {i}"]
            try:
                status, body = post(server.url, {"query": queries, "labels": [label()] * 4})
                ok = status == 200 and body["status"][0] == body["status"][2] == "match"
                ok = ok and body["status"][3] == "wrong" and len(body["rewards"]) == 4
            except Exception as e:
                ok, body = False, repr(e)
            with lock:
                answered[0] += 1
                if not ok:
                    failures.append(str(body))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_GUARD_S * 3)
    assert answered[0] == 12 * 15
    assert failures == []


def test_runaway_completion_through_the_server(server: RewardServer) -> None:
    start = time.monotonic()
    status, body = post(server.url, {"query": [RUNAWAY, GOLD], "labels": [label(), label()]})
    assert status == 200 and body["status"] == ["timeout", "match"]
    assert body["rewards"][0] < 0
    assert time.monotonic() - start < HANG_GUARD_S


def test_deadline_answers_on_time_with_an_error(db_root: Path) -> None:
    cfg = ServeConfig(Source.folder(db_root), port=0, deadline_s=0.3, reward=RewardConfig(workers=2))
    srv, _ = serve_in_thread(cfg)
    try:
        start = time.monotonic()
        # two runaways: neither can finish (a quick item may or may not beat 0.3 s, as its worker starts;
        # an item past the deadline beside scored ones: test_reward_server_attacks.py)
        other = RUNAWAY.replace("x + 1", "x + 2")
        status, body = post(srv.url, {"query": [RUNAWAY, other], "labels": [label(), label()]})
        elapsed = time.monotonic() - start
        assert status == 200 and elapsed < 2.5  # answered before the 3 s query could have finished
        assert body["rewards"] == [0.0, 0.0] and all("deadline" in e for e in body["errors"])
    finally:
        srv.close()


# --------------------------------------------------------------------------- the command


def test_cli_help_documents_serve_reward() -> None:
    result = CliRunner().invoke(main, ["serve-reward", "--help"])
    assert result.exit_code == 0
    assert "OpenRLHF" in result.output and "--db-root" in result.output


def test_cli_speaks_one_vocabulary_and_documents_every_option() -> None:
    from rose_sql.cli.reward import serve_reward_cmd

    options = {p.name: p for p in serve_reward_cmd.params if isinstance(p, click.Option)}
    assert all(o.help for o in options.values()), [n for n, o in options.items() if not o.help]
    assert "processes" in (options["workers"].help or "") and options["workers"].default == RewardConfig().processes
    assert "Threads" in (options["query_threads"].help or "") and "processes" not in options
    result = CliRunner().invoke(main, ["serve-reward", "--help"], terminal_width=200)
    assert "Example:" in result.output and "rose serve-reward --db-root" in result.output
    assert "--query-threads" in result.output and "--max-body-mb" in result.output


def test_cli_refuses_a_missing_db_root(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["serve-reward", "--db-root", str(tmp_path / "nope")])
    assert result.exit_code == 2


def test_cli_serves_until_stopped(db_root: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rose_sql", "serve-reward", "--db-root", str(db_root), "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "300"},
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"(http://\S+/get_reward)", line)
        assert match, line
        status, body = post(match.group(1), {"query": [GOLD], "labels": [f"{GOLD}\tmusic"]})
        assert status == 200 and body["status"] == ["match"]
    finally:
        proc.terminate()
        proc.wait(HANG_GUARD_S)
