"""``rose serve-reward``: the RL reward over HTTP, in OpenRLHF's remote reward shape.

Request (``POST`` to ``/get_reward``, or any path)::

    {"query": [completion, ...], "prompts": [prompt, ...], "labels": [label, ...], "step": 120}

``query`` holds the texts to score (OpenRLHF sends prompt + response; a leading ``prompts[i]`` is cut
off) or lists of chat messages; ``labels`` say what each is checked against, in
:func:`rose_sql.reward.parse_label`'s forms (``{"gold_sql": ..., "db_id": ...}`` as JSON or an
object, or ``SQL<TAB>db_id``), databases under ``--db-root``; ``prompts`` and ``step`` (the
schedule's training step) are optional. Answer, always within the deadline::

    {"rewards": [...], "scores": [...], "extra_logs": {...}, "status": [...], "errors": [...]}

``rewards`` are the totals (an unscored item gets ``RewardConfig.unscored`` and an error);
``scores`` are 1.0 for an execution match and 0.0 otherwise (OpenRLHF's dynamic filtering wants
[0, 1]); ``extra_logs`` has per-item ``execution``, ``syntax``, ``clause`` and ``scored`` lists.
Nothing an item does makes the request fail: a bad label, a missing database, a failing gold or the
deadline become that item's reward plus an error. A body that is not such a JSON object gets a 400
with ``{"rewards": [], "error": ...}``.

Requests that arrive together are scored as one batch (within ``batch_window_s``), so concurrent
clients share gold executions and the worker threads.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rose_sql.config import RewardConfig, ServeConfig
from rose_sql.errors import BadRequest, LabelError
from rose_sql.reward import Reward, RewardItem, RewardScorer, invalid, parse_label


@dataclass(slots=True)
class _Job:
    items: list[RewardItem]
    step: int | None
    future: Future[list[Reward]] = field(default_factory=Future)


class Batcher:
    """Collects the items of concurrent requests and scores them together."""

    def __init__(self, scorer: RewardScorer, window_s: float, max_batch: int) -> None:
        self._scorer = scorer
        self._window_s = window_s
        self._max_batch = max_batch
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._dispatch = ThreadPoolExecutor(2, thread_name_prefix="rose-batch")  # one batch runs, one is collected
        self._thread = threading.Thread(target=self._loop, name="rose-batcher", daemon=True)
        self._thread.start()

    def submit(self, items: list[RewardItem], step: int | None) -> Future[list[Reward]]:
        """Queue items for scoring; the future holds their rewards in order."""
        job = _Job(items, step)
        self._queue.put(job)
        return job.future

    def close(self) -> None:
        """Stop collecting; batches already started finish."""
        self._queue.put(None)
        self._thread.join()
        self._dispatch.shutdown(wait=True)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs, size = [job], len(job.items)
            end = time.monotonic() + self._window_s
            while size < self._max_batch:
                try:
                    nxt = self._queue.get(timeout=max(0.0, end - time.monotonic()))
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)  # stop after this batch
                    break
                jobs.append(nxt)
                size += len(nxt.items)
            self._dispatch.submit(self._run, jobs)

    def _run(self, jobs: list[_Job]) -> None:
        for step in dict.fromkeys(j.step for j in jobs):
            group = [j for j in jobs if j.step == step]
            try:
                rewards = iter(self._scorer.score_batch([it for j in group for it in j.items], step))
                for j in group:
                    j.future.set_result([next(rewards) for _ in j.items])
            except BaseException as e:  # a bug of ours: every waiting request hears of it
                for j in group:
                    if not j.future.done():
                        j.future.set_exception(e)


class RewardApp:
    """Turns a request payload into a response payload. Never raises for an item's problem."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.scorer = RewardScorer(config.reward)
        self.batcher = Batcher(self.scorer, config.batch_window_s, config.max_batch)

    def close(self) -> None:
        """Stop the batcher and the scorer."""
        self.batcher.close()
        self.scorer.close()

    def handle(self, payload: Any, started: float | None = None) -> dict[str, Any]:
        """The response to one request (raises :class:`BadRequest` when the payload is unusable)."""
        started = time.monotonic() if started is None else started
        queries, prompts, labels, step = _read_payload(payload)
        items: list[RewardItem | str] = [
            self._item(q, prompts[i] if i < len(prompts) else None, labels[i] if i < len(labels) else None)
            for i, q in enumerate(queries)
        ]
        good = [it for it in items if isinstance(it, RewardItem)]
        cfg = self.config.reward
        scored: list[Reward] | None = None
        late = ""
        if good:
            future = self.batcher.submit(good, step)
            try:
                scored = future.result(timeout=max(0.0, started + self.config.deadline_s - time.monotonic()))
            except TimeoutError:
                late = f"deadline of {self.config.deadline_s:g} s exceeded"
            except Exception as e:  # a bug of ours: the items are unscored, the client still gets an answer
                late = f"internal error: {type(e).__name__}: {e}"
        results = iter(scored or [])
        rewards = []
        for it in items:
            if isinstance(it, str):  # the item's own problem
                rewards.append(invalid(it, cfg, step))
            elif scored is None:  # the deadline passed (or a bug of ours)
                rewards.append(invalid(late, cfg, step))
            else:
                rewards.append(next(results))
        return _response(rewards, cfg)

    def _item(self, query: Any, prompt: Any, label: Any) -> RewardItem | str:
        if not isinstance(query, str | list | dict):
            return "query must be text or a list of chat messages"
        if label is None:
            return "no label for this query"
        try:
            gold = parse_label(label, self.config.db_root, confine=True)
        except LabelError as e:
            return str(e)
        return RewardItem(query, gold.sql, gold.db, prompt if isinstance(prompt, str) else None)


def _read_payload(payload: Any) -> tuple[list[Any], list[Any], list[Any], int | None]:
    if not isinstance(payload, dict):
        raise BadRequest(HTTPStatus.BAD_REQUEST, 'the body must be a JSON object {"query": [...], "labels": [...]}')
    queries = payload.get("query", payload.get("queries"))
    if isinstance(queries, str):
        queries = [queries]
    if not isinstance(queries, list):
        raise BadRequest(HTTPStatus.BAD_REQUEST, '"query" must be a list of completions')
    prompts = payload.get("prompts") or []
    labels = payload.get("labels")
    labels = [labels] if isinstance(labels, str | dict) else labels or []
    step = payload.get("step")
    if not isinstance(prompts, list) or not isinstance(labels, list):
        raise BadRequest(HTTPStatus.BAD_REQUEST, '"prompts" and "labels" must be lists')
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        raise BadRequest(HTTPStatus.BAD_REQUEST, '"step" must be an integer')
    return queries, prompts, labels, step


def _response(rewards: list[Reward], cfg: RewardConfig) -> dict[str, Any]:
    def num(x: float | None) -> float:
        return cfg.unscored if x is None else x

    return {
        "rewards": [num(r.total) for r in rewards],
        "scores": [1.0 if r.status == "match" else 0.0 for r in rewards],
        "extra_logs": {
            "execution": [num(r.execution) for r in rewards],
            "syntax": [r.syntax for r in rewards],
            "clause": [r.clause_part for r in rewards],
            "scored": [0.0 if r.total is None else 1.0 for r in rewards],
        },
        "status": [r.status for r in rewards],
        "errors": [r.detail if r.total is None else None for r in rewards],
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: OpenRLHF's clients reuse connections
    server: RewardServer

    def do_POST(self) -> None:
        started = time.monotonic()
        try:
            payload = self._read_json()
            self._send(HTTPStatus.OK, self.server.app.handle(payload, started))
        except BadRequest as e:
            self._send(e.status, {"rewards": [], "error": str(e)})
        except Exception as e:  # never let a request take the server down or go unanswered
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"rewards": [], "error": f"{type(e).__name__}: {e}"})

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("", "/health"):
            self._send(HTTPStatus.OK, {"status": "ok"})
        else:
            self._send(HTTPStatus.NOT_FOUND, {"error": "POST the request to /get_reward"})

    def _read_json(self) -> Any:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            raise BadRequest(HTTPStatus.BAD_REQUEST, "bad Content-Length") from None
        if length > self.server.app.config.max_body_bytes:
            self.close_connection = True  # the unread body cannot be skipped safely
            raise BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "request body too large")
        body = self.rfile.read(length) if length > 0 else b""
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BadRequest(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {e}") from None

    def _send(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, allow_nan=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            sys.stderr.write(f"{self.address_string()} - {format % args}\n")


class RewardServer(ThreadingHTTPServer):
    """A threading HTTP server around a :class:`RewardApp` (one thread per connection)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, config: ServeConfig, *, verbose: bool = False) -> None:
        self.app = RewardApp(config)
        self.verbose = verbose
        self._served = False
        try:
            super().__init__((config.host, config.port), _Handler)
        except BaseException:
            self.app.close()
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke mid-answer (the client went away): noted only when verbose."""
        if self.verbose:
            super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        """Where to POST: ``http://host:port/get_reward``."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/get_reward"

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve until :meth:`close` (or ``shutdown``) is called from another thread."""
        self._served = True
        super().serve_forever(poll_interval)

    def close(self) -> None:
        """Stop serving and release everything."""
        if self._served:
            self.shutdown()  # returns at once when serve_forever already ended
        self.server_close()
        self.app.close()

    def __enter__(self) -> RewardServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_in_thread(config: ServeConfig) -> tuple[RewardServer, threading.Thread]:
    """Start a server in a daemon thread (tests, benchmarks, notebooks); ``server.close()`` stops it."""
    server = RewardServer(config)
    thread = threading.Thread(target=server.serve_forever, name="rose-reward-server", daemon=True)
    thread.start()
    return server, thread
