"""``rose serve-reward``: the RL reward over HTTP, in OpenRLHF's remote reward shape.

Request (``POST`` to ``/get_reward``, or any path but ``/health``)::

    {"query": [completion, ...], "prompts": [prompt, ...], "labels": [label, ...], "step": 120}

``query`` holds the texts to score (OpenRLHF sends prompt + response; a leading ``prompts[i]`` is cut
off) or lists of chat messages; ``labels`` (one per query) say what each is checked against, in
:func:`rose_sql.reward.parse_label`'s forms, databases under ``--db-root``; ``prompts`` and ``step``
(the schedule's training step) are optional. Answer::

    {"rewards": [...], "scores": [...], "extra_logs": {...}, "status": [...], "errors": [...]}

(:func:`rose_sql.reward.payload.response`). Nothing an item does fails the request: a bad label, a
missing database, a failing gold or the deadline become that item's answer with its reason. A
malformed body is answered 400, one past a bound 413, a busy server 503 with ``Retry-After``.

One asyncio event loop serves every connection, reading HTTP/1.1 with h11: a slow or idle client
costs a few kilobytes, never a thread. Bodies are decoded on one thread beside the loop and scored
in the scorer's worker processes, so the loop answers ``GET /health`` at once whatever the other
clients do. Every wait is bounded by :class:`~rose_sql.config.ServeConfig`: a head within
``header_timeout_s``, a body within ``body_timeout_s`` (in total, whatever the pace), an answer
within ``deadline_s`` of its body; bodies, items, JSON values, bodies held at once and connections
are capped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from http import HTTPStatus
from typing import Any

import h11

from rose_sql.config import ServeConfig
from rose_sql.errors import BadRequest
from rose_sql.reward.payload import Request, items_of, read_request, response
from rose_sql.reward.schedule import Reward, finish, invalid
from rose_sql.reward.scorer import RewardItem, RewardScorer
from rose_sql.reward.syntax import UNPARSED

_READ = 64 * 2**10
"""Bytes read from a socket at once."""
_OVERFLOW_HEAD_S = 1.0
"""A connection past ``max_connections`` must send its head within this (to be told 503, or its health)."""
OVERFLOW = 4
"""Connections past ``max_connections`` read for their head (a health check is answered), in multiples of
it; past those, a connection is told 503 and closed unread."""
_BACKLOG = 4096
"""Connections the kernel queues before they are accepted (a flood of connects must not drop a health check's)."""
_LINGER_S = 1.0
"""Before closing, a client's unread bytes are drained this long, so that its answer is not lost to a reset."""
_HEALTH = (b"", b"/health")
_BUSY_BODY = b'{"rewards": [], "error": "too many connections; retry"}'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\n"
    + f"Content-Length: {len(_BUSY_BODY)}\r\nConnection: close\r\n\r\n".encode()
    + _BUSY_BODY
)
"""What a connection past ``(1 + OVERFLOW) * max_connections`` is told before it is closed, unread."""

Answer = tuple[int, dict[str, Any], list[tuple[str, str]]]
"""An HTTP status, a JSON payload and extra headers."""


class RewardServer:
    """The reward over HTTP: one event loop for the connections, worker processes for the scoring."""

    def __init__(self, config: ServeConfig, *, verbose: bool = False) -> None:
        self.config = config
        self.verbose = verbose
        reward = config.reward  # no query holds a worker longer than a chunk may: half a deadline
        guard = config.deadline_s / 2
        reward = replace(
            reward, timeout_s=min(reward.timeout_s, guard), gold_timeout_s=min(reward.gold_timeout_s, guard)
        )
        self.scorer = RewardScorer(reward)
        try:
            self.scorer.start()  # the workers fork now, while this process has a single thread
            self._socket = socket.create_server((config.host, config.port), backlog=_BACKLOG)
            _enough_files((1 + OVERFLOW) * config.max_connections + 256)
        except BaseException:
            self.scorer.close()
            raise
        self._decoder = ThreadPoolExecutor(1, thread_name_prefix="rose-decode")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._serving = threading.Event()
        self._stopped = threading.Event()
        self._closing = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._open = 0
        self._overflow = 0
        self._held = 0
        """Bytes of request bodies reserved, from their head until their answer."""

    @property
    def url(self) -> str:
        """Where to POST: ``http://host:port/get_reward``."""
        host, port = self._socket.getsockname()[:2]
        return f"http://{host!s}:{port}/get_reward"

    def serve_forever(self) -> None:
        """Serve until :meth:`close` is called from another thread (or Ctrl-C)."""
        try:
            asyncio.run(self._serve())
        finally:
            self._stopped.set()

    def close(self) -> None:
        """Stop serving and release everything."""
        self._closing = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not self._stopped.is_set():
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop.set)
            self._stopped.wait(30)
        self._socket.close()
        self._decoder.shutdown(wait=False, cancel_futures=True)
        self.scorer.close()

    def __enter__(self) -> RewardServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ connections

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._closing:
            return
        server = await asyncio.start_server(self._connection, sock=self._socket, backlog=_BACKLOG)
        self._serving.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            for w in list(self._writers):  # no waiting for clients: they are cut off
                w.transport.abort()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cfg = self.config
        overflow = self._open >= cfg.max_connections
        if overflow and self._overflow >= OVERFLOW * cfg.max_connections:
            writer.write(_BUSY)
            writer.close()
            return
        if overflow:
            self._overflow += 1
        else:
            self._open += 1
        self._writers.add(writer)
        try:
            if await self._exchange(reader, writer, overflow):
                await self._linger(reader, writer)
        except (TimeoutError, ConnectionError, OSError, h11.ProtocolError):
            pass  # the client went away, stalled or broke the protocol: nothing to answer
        except Exception as e:  # a bug of ours: this connection ends, the server goes on
            self._log(f"internal error: {type(e).__name__}: {e}")
        finally:
            if overflow:
                self._overflow -= 1
            else:
                self._open -= 1
            self._writers.discard(writer)
            writer.transport.abort()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, overflow: bool) -> bool:
        """Requests and answers on one connection, until either side closes it; whether the client may
        still be sending what the last answer did not read."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.config.max_head_bytes)
        while True:
            try:
                request = await self._head(conn, reader, _OVERFLOW_HEAD_S if overflow else self.config.header_timeout_s)
            except h11.RemoteProtocolError as e:
                with contextlib.suppress(h11.LocalProtocolError):
                    bad: Answer = (e.error_status_hint, {"rewards": [], "error": f"bad request: {e}"}, [])
                    await self._send(conn, writer, bad)
                return True
            if request is None:
                return False  # silent past its deadline, or gone: nothing was answered
            started = time.monotonic()
            answer = await self._route(conn, reader, writer, request, overflow)
            await self._send(conn, writer, answer, head_only=request.method == b"HEAD", close=overflow)
            target = request.target.decode(errors="replace")
            self._log(f"{request.method.decode()} {target} {answer[0]} {time.monotonic() - started:.3f} s")
            if overflow or conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return conn.their_state is not h11.DONE
            conn.start_next_cycle()

    async def _head(self, conn: h11.Connection, reader: asyncio.StreamReader, timeout: float) -> h11.Request | None:
        """The next request's head, or None when the connection closes or stays silent past ``timeout``."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        conn.receive_data(await reader.read(_READ))
                    elif isinstance(event, h11.Request):
                        return event
                    else:
                        return None
        except TimeoutError:
            return None

    async def _route(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: h11.Request,
        overflow: bool,
    ) -> Answer:
        path = request.target.split(b"?", 1)[0].rstrip(b"/")
        if path in _HEALTH and request.method in (b"GET", b"HEAD"):
            return HTTPStatus.OK, {"status": "ok"}, []
        if overflow:
            return _busy(f"the server has {self.config.max_connections} connections open, its limit; retry")
        if path in _HEALTH:
            return HTTPStatus.METHOD_NOT_ALLOWED, {"error": "/health answers GET"}, [("Allow", "GET, HEAD")]
        if request.method != b"POST":
            return (
                HTTPStatus.METHOD_NOT_ALLOWED,
                {"rewards": [], "error": "POST the request to /get_reward"},
                [("Allow", "POST")],
            )
        return await self._score(conn, reader, writer, request)

    # ------------------------------------------------------------------ scoring

    async def _score(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: h11.Request
    ) -> Answer:
        cfg = self.config
        length = _content_length(request)
        if length is not None and length > cfg.max_body_bytes:
            return _refused(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body has {length:,} bytes: {cfg.max_body_bytes:,} at most"
            )
        held = cfg.max_body_bytes if length is None else length  # a chunked body may grow to the cap
        if self._held + held > cfg.max_pending_bytes:
            return _busy(f"the server holds {cfg.max_pending_bytes:,} bytes of requests at most; retry")
        self._held += held
        try:
            if conn.they_are_waiting_for_100_continue:
                writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
            body = await self._body(conn, reader)
            if isinstance(body, tuple):
                return body
            deadline = time.monotonic() + cfg.deadline_s  # the request is in: its own time starts
            loop = asyncio.get_running_loop()
            try:
                req, items, futures = await loop.run_in_executor(self._decoder, self._prepare, body, deadline)
            except BadRequest as e:
                return _refused(e.status, str(e))
            del body
            await _until_done(futures, deadline)
            return HTTPStatus.OK, response(self._rewards(req, items, futures), self.scorer.config), []
        finally:
            self._held -= held

    async def _body(self, conn: h11.Connection, reader: asyncio.StreamReader) -> bytearray | Answer:
        """The request's body, read within ``body_timeout_s`` in all; or the answer refusing it."""
        cfg = self.config
        body = bytearray()
        try:
            async with asyncio.timeout(cfg.body_timeout_s):
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        conn.receive_data(await reader.read(_READ))
                    elif isinstance(event, h11.Data):
                        body += event.data
                        if len(body) > cfg.max_body_bytes:
                            too_large = f"the body is over {cfg.max_body_bytes:,} bytes"
                            return _refused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, too_large)
                    elif isinstance(event, h11.EndOfMessage):
                        return body
                    else:
                        raise ConnectionError("the client closed the connection in the middle of its body")
        except TimeoutError:
            return _refused(HTTPStatus.REQUEST_TIMEOUT, f"the body did not arrive within {cfg.body_timeout_s:g} s")

    def _prepare(
        self, body: bytearray, deadline: float
    ) -> tuple[Request, list[RewardItem | str], list[Future[Reward]]]:
        """On the decoding thread: the request, its items, and their rewards to come."""
        req = read_request(body, self.config)
        items = items_of(req, self.config.db_root)
        good = [it for it in items if isinstance(it, RewardItem)]
        return req, items, self.scorer.submit(good, req.step, deadline=deadline)

    def _rewards(self, req: Request, items: list[RewardItem | str], futures: list[Future[Reward]]) -> list[Reward]:
        """Each item's reward, or why it has none: its own problem, the deadline, or a bug of ours."""
        cfg = self.scorer.config
        late = f"deadline of {self.config.deadline_s:g} s exceeded before it was scored"
        scored = iter(futures)
        out = []
        for it in items:
            if isinstance(it, str):
                out.append(invalid(it, cfg, req.step))
                continue
            f = next(scored)
            if not f.done():
                out.append(finish("wall_guard", late, None, UNPARSED, cfg, req.step))
            elif (error := f.exception()) is not None:
                out.append(invalid(f"internal error: {type(error).__name__}: {error}", cfg, req.step))
            else:
                out.append(f.result())
        return out

    # ------------------------------------------------------------------ answering

    async def _send(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        answer: Answer,
        *,
        head_only: bool = False,
        close: bool = False,
    ) -> None:
        """Send an answer; the client has ``body_timeout_s`` to take it."""
        status, payload, extra = answer
        body = json.dumps(payload, allow_nan=False).encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *extra]
        if close:
            headers.append(("Connection", "close"))
        data = conn.send(h11.Response(status_code=int(status), headers=headers))
        if not head_only:
            data += conn.send(h11.Data(data=body))
        writer.write(data + conn.send(h11.EndOfMessage()))
        async with asyncio.timeout(self.config.body_timeout_s):
            await writer.drain()

    async def _linger(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Close the sending side, then drain what the client still sends for a moment: closing a socket
        with unread bytes resets it, and the client could lose its answer."""
        if writer.can_write_eof():
            writer.write_eof()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_LINGER_S):
                while await reader.read(_READ):
                    pass

    def _log(self, line: str) -> None:
        if self.verbose:
            sys.stderr.write(line + "\n")


def _enough_files(wanted: int) -> None:
    """Raise this process's limit of open files towards ``wanted`` (never above the hard limit): every
    connection the server may hold is a file."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            top = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))


def _content_length(request: h11.Request) -> int | None:
    for name, value in request.headers:
        if name == b"content-length":
            return int(value)
    return None


def _refused(status: int, message: str) -> Answer:
    return status, {"rewards": [], "error": message}, []


def _busy(message: str) -> Answer:
    return HTTPStatus.SERVICE_UNAVAILABLE, {"rewards": [], "error": message}, [("Retry-After", "1")]


async def _until_done(futures: Sequence[Future[Reward]], deadline: float) -> None:
    """Wait until every future is done, or until ``deadline``."""
    if not futures:
        return
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_: Future[Reward]) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            with contextlib.suppress(RuntimeError):  # the loop ended (the server is closing)
                loop.call_soon_threadsafe(done.set)

    for f in futures:
        f.add_done_callback(one_done)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), max(0.0, deadline - time.monotonic()))


def serve_in_thread(config: ServeConfig) -> tuple[RewardServer, threading.Thread]:
    """Start a server in a daemon thread (tests, benchmarks, notebooks); ``server.close()`` stops it."""
    server = RewardServer(config)
    thread = threading.Thread(target=server.serve_forever, name="rose-reward-server", daemon=True)
    thread.start()
    server._serving.wait(30)
    return server, thread
