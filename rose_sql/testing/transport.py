"""The scripted server's responders under the real ``openai`` client, without a socket: its httpx's MockTransport.

:class:`MockOpenAI` answers chat completions and the model list as
:class:`~rose_sql.testing.ScriptedOpenAI` does (the same responders, request checks, bodies and recorded
requests), in the client's own process, thread and event loop: no server thread, no port, no connection.
While it is open (a context manager), every judge client ROSE-SQL opens for its :attr:`~MockOpenAI.base_url`
(:func:`rose_sql.judges.llm.open_client`) sends its requests through it; a client of any other URL is left
alone. The real SDK still builds each request, reads each reply and raises on each status, and ROSE-SQL's
deadlines, retries, caps, checks, cache and budget all run::

    with MockOpenAI(by_content(lambda text: Reply(content="..."))) as judge:
        rose run ... --judge-base-url judge.base_url    # in this process (click's CliRunner, or the API)
        assert judge.calls == 2

What only a wire has stays with the scripted server: a body trickled over time (``trickle_s``), a ``rose``
started as a process of its own, a judge on a Ray worker, the Batch API, the connections counted. A dropped
connection (``Reply(drop=True)``) is raised as the client would see it, and a reply's ``delay_s`` is waited.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import json
import threading
import time
from collections.abc import Sequence
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Self

from rose_sql.testing.bodies import BadRequest, Reply, completion_body, error_body
from rose_sql.testing.openai_server import (
    CHAT_PATH,
    MODELS_PATH,
    RecordedRequest,
    Responder,
    _validate_chat,
    default_responder,
    signed,
)

if TYPE_CHECKING:
    import openai

    from rose_sql.config import JudgeConfig

__all__ = ["MockOpenAI"]

_ids = itertools.count()


class MockOpenAI:
    """A scripted OpenAI-compatible endpoint served by httpx's ``MockTransport`` (see the module's text)."""

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        models: Sequence[str] = ("scripted-model",),
        api_key: str | None = None,
        system_fingerprint: str = "fp_rose_scripted",
        sign: bool = True,
    ) -> None:
        self.responder: Responder = responder or default_responder
        self.sign = sign
        """Whether the scripted judges are honest about the nonce, as :class:`ScriptedOpenAI`'s (``sign``)."""
        self.models = tuple(models)
        self.api_key = api_key
        self.system_fingerprint = system_fingerprint
        self.base_url = f"http://scripted-{next(_ids)}.invalid/v1"
        """What to give the client (``--judge-base-url``): a name that never resolves, so nothing leaves."""
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._errors: list[BaseException] = []
        self._http_requests = 0
        self._rejected = 0
        self._restore: Any = None

    # ----- lifecycle

    def __enter__(self) -> Self:
        from rose_sql.judges import llm

        original = llm.open_client

        def open_client(cfg: JudgeConfig, *, max_retries: int = 0) -> openai.AsyncOpenAI:
            client = original(cfg, max_retries=max_retries)
            if str(cfg.base_url or "").rstrip("/") != self.base_url:
                return client
            import openai

            transport = _httpx().MockTransport(self._handle)
            return client.copy(http_client=openai.DefaultAsyncHttpxClient(transport=transport))

        llm.open_client = open_client

        def restore() -> None:
            llm.open_client = original

        self._restore = restore
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._restore is not None:
            self._restore()
            self._restore = None

    # ----- what was asked (as ScriptedOpenAI's)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the recorded chat-completions requests, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def calls(self) -> int:
        """How many chat-completions requests reached the responder."""
        with self._lock:
            return len(self._requests)

    @property
    def rejected(self) -> int:
        """How many requests were refused before the responder (malformed, bad path, bad key)."""
        with self._lock:
            return self._rejected

    @property
    def http_requests(self) -> int:
        """Every HTTP request received, of any kind."""
        with self._lock:
            return self._http_requests

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions raised by the responder (each answered as a 500)."""
        with self._lock:
            return list(self._errors)

    def reset(self) -> None:
        """Forget recorded requests, counters and errors (the responder stays)."""
        with self._lock:
            self._requests.clear()
            self._errors.clear()
            self._http_requests = self._rejected = 0

    # ----- the transport's handler

    async def _handle(self, request: Any) -> Any:
        """One HTTP request of the SDK's (its httpx's ``Request``) answered with its ``Response``."""
        with self._lock:
            self._http_requests += 1
        path = request.url.path.rstrip("/") or "/"
        data = await request.aread()
        try:
            if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
                raise BadRequest("Incorrect API key provided.", status=401)
            if request.method == "GET" and path.startswith(MODELS_PATH):
                return _json(200, self._models(path))
            if request.method != "POST" or path != CHAT_PATH:
                raise BadRequest(f"Unknown request URL: {request.method} {path}", status=404, code="unknown_url")
            try:
                parsed = json.loads(data)
            except ValueError:
                raise BadRequest("We could not parse the JSON body of your request.") from None
            body = _validate_chat(parsed)
        except BadRequest as problem:
            with self._lock:
                self._rejected += 1
            return _json(problem.status, problem.body)
        headers = {k.lower(): v for k, v in request.headers.items()}
        with self._lock:
            index = len(self._requests)
            self._requests.append(RecordedRequest(index, body, headers, time.monotonic()))
        reply = self._respond(body, index)
        if reply.trickle_s:
            raise ValueError("a body trickled over time needs the wire: use ScriptedOpenAI for this test")
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.drop:
            raise _httpx().RemoteProtocolError("Server disconnected without sending a response.", request=request)
        if reply.body is not None:
            payload: Any = reply.body.encode("utf-8") if isinstance(reply.body, str) else reply.body
        elif reply.ok:
            payload = completion_body(reply, body, self.system_fingerprint, 0)
        else:
            payload = error_body(reply.status, reply.error or "error")
        return _json(reply.status, payload, reply.headers)

    def _respond(self, body: dict[str, Any], index: int) -> Reply:
        try:
            reply = self.responder(body, index)
            if not isinstance(reply, Reply):
                raise TypeError(f"responder returned {type(reply).__name__}, not Reply")
            return signed(body, reply) if self.sign else reply
        except Exception as e:  # a broken responder answers 500, as the server's
            with self._lock:
                self._errors.append(e)
            return Reply(status=500, error=f"responder raised {type(e).__name__}: {e}")

    def _models(self, path: str) -> dict[str, Any]:
        cards = {m: {"id": m, "object": "model", "created": 0, "owned_by": "rose-sql-testing"} for m in self.models}
        if path == MODELS_PATH:
            return {"object": "list", "data": list(cards.values())}
        name = path[len(MODELS_PATH) + 1 :]
        if name in cards:
            return cards[name]
        raise BadRequest(f"The model '{name}' does not exist", status=404, code="model_not_found")


def _httpx() -> ModuleType:
    """The httpx the SDK is built on (``httpx2`` from openai 3 on, ``httpx`` before)."""
    import openai

    return importlib.import_module(openai.DefaultAsyncHttpxClient.__mro__[1].__module__.partition(".")[0])


def _json(status: int, payload: Any, headers: Any = None) -> Any:
    data = payload if isinstance(payload, bytes) else json.dumps(payload, ensure_ascii=False).encode("utf-8")
    extra = {k: v for k, v in (headers or {}).items() if k.lower() not in ("content-length", "content-type")}
    return _httpx().Response(status, content=data, headers={"content-type": "application/json", **extra})
