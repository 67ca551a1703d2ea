"""A scripted OpenAI-compatible chat-completions server on loopback, for tests.

No real LLM endpoint is reachable from the test machines, so the LLM judge stages are tested
against :class:`ScriptedOpenAI`: a real HTTP/1.1 server (stdlib ``http.server``, one thread per
connection, keep-alive) that speaks enough of the chat-completions protocol for the official
``openai`` SDK. The real client, its request building, retries and response parsing all run
over real sockets; only the model is replaced by a *responder*::

    responder(request: dict, index: int) -> Reply

``request`` is the parsed JSON body, ``index`` the 0-based arrival number of the request at
the server. Helpers build responders: :func:`script` (replies in order), :func:`by_content`
(decide from the user text, whatever the arrival order), :func:`by_model` (from the text, the
model and the seed), :func:`latency` (add a delay),
:func:`with_faults` (deterministic transient 429/5xx/timeout/dropped-connection faults that a
client with bounded retries always gets through) and :func:`at_cap` (every reply uses all the
completion tokens the request allows: the worst case a budget must cover).

Structured replies and the quirks of local servers: :func:`enforce_schema` makes every reply valid
JSON matching the schema the request carries (``response_format``, or vLLM's ``guided_json``,
llama.cpp's ``json_schema``, Ollama's ``format``: ``via``), as constrained decoding does;
:func:`refuse_schema` answers 400 to a ``response_format`` json_schema, as servers without structured
outputs do; left alone, a responder *ignores* the schema and replies as scripted.
:func:`refuse_params` answers 400 to named parameters (OpenAI's reasoning models and ``temperature``
or ``max_tokens``), :func:`with_reasoning` puts a chain of thought in ``reasoning_content`` (DeepSeek-R1,
vLLM's reasoning parsers). With ``prompt_cache=True`` the server reports
``usage.prompt_tokens_details.cached_tokens`` as OpenAI does: the longest prefix a request shares with
an earlier one, in whole 128-token blocks, once the prompt has 1024 tokens.

A :class:`Reply` can also break the protocol the way real endpoints and proxies do: a body
trickled a few bytes at a time (``trickle_s``), a body that is not JSON (``body``), a usage
object with wrong types or negative counts (``usage``), or a huge body (a long ``content``).

The Batch API's files and batches endpoints are served too (:mod:`rose_sql.testing.batches`), each
request of a batch answered by the same responder.

Example::

    with ScriptedOpenAI(by_content(lambda text: Reply(content=text.upper()))) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=2)
        out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert out.choices[0].message.content == "HI" and srv.calls == 1
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import BaseServer, TCPServer
from types import TracebackType
from typing import Any, Self

from rose_sql.testing.batches import BatchAPI, BatchScript
from rose_sql.testing.bodies import (
    BadRequest,
    Reply,
    all_text,
    completion_body,
    error_body,
    estimate_tokens,
    user_text,
)
from rose_sql.testing.sign import call_nonce, prompt_text, sign

__all__ = [
    "DEFAULT_FAULT_KINDS",
    "FaultInjector",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ScriptedOpenAI",
    "at_cap",
    "by_content",
    "by_model",
    "conform",
    "default_responder",
    "enforce_schema",
    "estimate_tokens",
    "latency",
    "refuse_params",
    "refuse_schema",
    "request_cap",
    "request_key",
    "request_schema",
    "script",
    "user_text",
    "with_faults",
    "with_reasoning",
]

CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
BATCH_API_PATHS = ("/v1/files", "/v1/batches")
"""Served by :class:`rose_sql.testing.batches.BatchAPI`."""
MAX_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_FAULT_KINDS: tuple[str, ...] = ("429", "500", "timeout", "drop")
_FAULT_KINDS = frozenset({"429", "500", "502", "503", "timeout", "drop"})
_SERVER_ERRORS = ("500", "502", "503")


# --------------------------------------------------------------------------- replies


Responder = Callable[[dict[str, Any], int], Reply]
"""Decides the reply to a request: ``(parsed JSON body, 0-based arrival index) -> Reply``."""


@dataclass(frozen=True)
class RecordedRequest:
    """One chat-completions request as the server received it.

    ``headers`` have lower-case names (the SDK's ``x-stainless-retry-count`` tells which attempt
    this was); ``arrived_at`` is a :func:`time.monotonic` reading, comparable between requests.
    """

    index: int
    body: dict[str, Any]
    headers: dict[str, str]
    arrived_at: float

    @property
    def model(self) -> str:
        """The requested model name."""
        return str(self.body.get("model", ""))

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's messages, as sent."""
        messages = self.body.get("messages", [])
        return messages if isinstance(messages, list) else []

    @property
    def user_text(self) -> str:
        """The concatenated text of the user messages (see :func:`user_text`)."""
        return user_text(self.body)


# --------------------------------------------------------------------------- request helpers


def request_key(request: Mapping[str, Any]) -> str:
    """A stable hash of the request's messages: identifies "the same request" across retries."""
    canonical = json.dumps(request.get("messages"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- responders


def default_responder(request: dict[str, Any], index: int) -> Reply:
    """The default responder: always the same valid reply, ``"OK"``."""
    return Reply(content="OK")


def script(replies: Sequence[Reply | Responder]) -> Responder:
    """Answer the n-th call with ``replies[n]`` (the last one repeats).

    An entry may itself be a responder, called with the request and its index. The count is
    the number of calls to *this* responder, so wrapping it in :func:`with_faults` does not
    consume entries on injected faults.
    """
    items = list(replies)
    if not items:
        raise ValueError("script() needs at least one reply")
    lock = threading.Lock()
    calls = 0

    def responder(request: dict[str, Any], index: int) -> Reply:
        nonlocal calls
        with lock:
            item = items[min(calls, len(items) - 1)]
            calls += 1
        return item if isinstance(item, Reply) else item(request, index)

    return responder


def by_content(fn: Callable[[str], Reply]) -> Responder:
    """Decide each reply from the request's user text (see :func:`user_text`) alone.

    Lets a test script per item whatever order concurrent requests arrive in.
    """

    def responder(request: dict[str, Any], index: int) -> Reply:
        return fn(user_text(request))

    return responder


def by_model(fn: Callable[[str, str, int | None], Reply]) -> Responder:
    """Decide each reply from the user text, the requested model and the request's seed:
    ``fn(user_text, model, seed)``. Lets a test script a panel whose models disagree, or samples
    (which differ by seed) whose votes split.
    """

    def responder(request: dict[str, Any], index: int) -> Reply:
        seed = request.get("seed")
        return fn(user_text(request), str(request.get("model", "")), seed if isinstance(seed, int) else None)

    return responder


def request_cap(request: Mapping[str, Any]) -> int | None:
    """The completion-token cap a request sets (``max_completion_tokens``, else ``max_tokens``), if any."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = request.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def at_cap(responder: Responder) -> Responder:
    """Wrap ``responder`` so every successful reply reports the request's whole completion cap as
    used (``completion_tokens`` = the cap; unchanged when the request sets none): what a budget
    must be ready to pay for each call."""

    def greedy(request: dict[str, Any], index: int) -> Reply:
        reply = responder(request, index)
        cap = request_cap(request)
        return replace(reply, completion_tokens=cap) if reply.ok and cap is not None else reply

    return greedy


def latency(responder: Responder, seconds: float) -> Responder:
    """Wrap ``responder`` so every reply waits ``seconds`` more before being sent."""
    if seconds < 0:
        raise ValueError(f"latency must be >= 0, got {seconds}")

    def slow(request: dict[str, Any], index: int) -> Reply:
        reply = responder(request, index)
        return replace(reply, delay_s=reply.delay_s + seconds)

    return slow


class FaultInjector:
    """A responder that fails each distinct request a few times, deterministically, then passes it on.

    Requests are identified by :func:`request_key` (a hash of their messages), so a retry is
    recognised as the same request. Each request independently fails its first attempt with
    probability ``rate``, its second (if the first failed) with the same probability, and so on
    up to ``max_faults`` failures; then it reaches the wrapped responder. A client that retries
    at least ``max_faults`` times therefore always gets through. Which requests fail, how often
    and how, depends only on ``seed`` and the messages: see :meth:`plan`.

    Fault kinds: ``"429"`` (rate limit, ``retry-after: 0``), ``"500"`` (one of 500/502/503;
    ``"502"``/``"503"`` pin one), ``"timeout"`` (answers only after ``timeout_delay_s``, which
    must exceed the client's timeout, and then with a 504) and ``"drop"`` (connection closed
    without an answer). Injected faults never call the wrapped responder.
    """

    def __init__(
        self,
        responder: Responder,
        *,
        rate: float,
        seed: int = 0,
        kinds: Iterable[str] = DEFAULT_FAULT_KINDS,
        timeout_delay_s: float = 3.0,
        max_faults: int = 2,
    ) -> None:
        self._kinds = tuple(kinds)
        _check_fault_args(rate, self._kinds, timeout_delay_s, max_faults)
        self._responder = responder
        self._rate = rate
        self._seed = seed
        self._timeout_delay_s = timeout_delay_s
        self._max_faults = max_faults
        self._lock = threading.Lock()
        self._attempts: dict[str, int] = {}
        self._injected: list[str] = []

    def plan(self, request: Mapping[str, Any]) -> tuple[str, ...]:
        """The faults this request meets on its first attempts, in order (empty: none)."""
        rng = random.Random(f"{self._seed}:{request_key(request)}")
        faults: list[str] = []
        while len(faults) < self._max_faults and rng.random() < self._rate:
            kind = rng.choice(self._kinds)
            faults.append(rng.choice(_SERVER_ERRORS) if kind == "500" else kind)
        return tuple(faults)

    @property
    def injected(self) -> int:
        """How many faults were injected so far."""
        with self._lock:
            return len(self._injected)

    @property
    def injected_kinds(self) -> list[str]:
        """The faults injected so far, in injection order (``"429"``, ``"502"``, ``"drop"``...)."""
        with self._lock:
            return list(self._injected)

    def __call__(self, request: dict[str, Any], index: int) -> Reply:
        """Answer a fault if this attempt of the request is planned to fail, else delegate."""
        key = request_key(request)
        with self._lock:
            attempt = self._attempts.get(key, 0)
            self._attempts[key] = attempt + 1
        faults = self.plan(request)
        if attempt >= len(faults):
            return self._responder(request, index)
        with self._lock:
            self._injected.append(faults[attempt])
        return self._fault_reply(faults[attempt])

    def _fault_reply(self, kind: str) -> Reply:
        if kind == "429":
            return Reply(status=429, error="Rate limit reached (scripted fault)", headers={"retry-after": "0"})
        if kind == "timeout":
            return Reply(status=504, error="Upstream timed out (scripted fault)", delay_s=self._timeout_delay_s)
        if kind == "drop":
            return Reply(drop=True)
        return Reply(status=int(kind), error=f"Scripted transient server error {kind}")


def _check_fault_args(rate: float, kinds: tuple[str, ...], timeout_delay_s: float, max_faults: int) -> None:
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"fault rate must be within [0, 1], got {rate}")
    if not kinds:
        raise ValueError("at least one fault kind is needed")
    unknown = sorted(set(kinds) - _FAULT_KINDS)
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; known: {sorted(_FAULT_KINDS)}")
    if timeout_delay_s <= 0:
        raise ValueError(f"timeout_delay_s must be > 0, got {timeout_delay_s}")
    if max_faults < 0:
        raise ValueError(f"max_faults must be >= 0, got {max_faults}")


def with_faults(
    responder: Responder,
    *,
    rate: float,
    seed: int = 0,
    kinds: Iterable[str] = DEFAULT_FAULT_KINDS,
    timeout_delay_s: float = 3.0,
    max_faults: int = 2,
) -> FaultInjector:
    """Wrap ``responder`` with deterministic transient faults (see :class:`FaultInjector`)."""
    return FaultInjector(
        responder, rate=rate, seed=seed, kinds=kinds, timeout_delay_s=timeout_delay_s, max_faults=max_faults
    )


# --------------------------------------------------------------------------- structured replies and quirks

SCHEMA_FIELDS = ("response_format", "guided_json", "json_schema", "format")
"""Where servers take a reply's JSON schema: OpenAI's ``response_format``, vLLM's ``guided_json``,
llama.cpp's ``json_schema``, Ollama's ``format``."""


def request_schema(request: Mapping[str, Any], via: Iterable[str] = SCHEMA_FIELDS) -> dict[str, Any] | None:
    """The JSON schema a request asks its reply to follow, looked for in the fields ``via``; None if none."""
    for name in via:
        value = request.get(name)
        if name == "response_format":
            if isinstance(value, Mapping) and value.get("type") == "json_schema":
                spec = value.get("json_schema")
                value = spec.get("schema") if isinstance(spec, Mapping) else None
            elif isinstance(value, Mapping) and isinstance(value.get("schema"), Mapping):  # llama.cpp's json_object
                value = value["schema"]
            else:
                continue
        if isinstance(value, str):  # vLLM takes guided_json as a JSON string too
            with contextlib.suppress(ValueError):
                value = json.loads(value)
        if isinstance(value, Mapping):
            return dict(value)
    return None


def _intended(content: str | None) -> object:
    """The JSON value a scripted reply meant (the outermost braces of its text), or None."""
    text = content or ""
    with contextlib.suppress(ValueError):
        return json.loads(text)
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        with contextlib.suppress(ValueError):
            return json.loads(text[start : end + 1])
    return None


def conform(value: object, schema: Mapping[str, Any]) -> Any:
    """``value`` forced into ``schema`` (objects, arrays, strings, numbers, booleans, null, enums), as
    constrained decoding forces a model: fields kept where they fit, coerced or filled in where not.
    Every property of an object is present (strict schemas require them all), and no other."""
    types = schema.get("type", "object")
    types = [types] if isinstance(types, str) else list(types)
    if "enum" in schema:
        options = list(schema["enum"])
        return value if value in options else options[0]
    if value is None and "null" in types:
        return None
    if "object" in types:
        src = value if isinstance(value, Mapping) else {}
        props = schema.get("properties", {})
        return {k: conform(src.get(k), sub) for k, sub in props.items()}
    if "array" in types:
        items = schema.get("items", {})
        return [conform(v, items) for v in value] if isinstance(value, list) else []
    if "boolean" in types:
        if isinstance(value, bool):
            return value
        return str(value).strip().lower() in ("true", "yes", "1") if value is not None else False
    if "number" in types or "integer" in types:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        return None if "null" in types else 0
    if "string" in types:
        return value if isinstance(value, str) else ("" if value is None else json.dumps(value))
    return None


def enforce_schema(responder: Responder, *, via: Iterable[str] = ("response_format",)) -> Responder:
    """Wrap ``responder`` so that a request carrying a JSON schema (in one of the fields ``via``) gets a
    reply that is that schema's JSON and nothing else: what the scripted reply meant, conformed."""
    fields = tuple(via)

    def enforced(request: dict[str, Any], index: int) -> Reply:
        reply = responder(request, index)
        schema = request_schema(request, fields)
        if not reply.ok or reply.body is not None or schema is None:
            return reply
        return replace(reply, content=json.dumps(conform(_intended(reply.content), schema)))

    return enforced


def refuse_schema(
    responder: Responder, message: str = "Unsupported response_format type: 'json_schema' is not supported"
) -> Responder:
    """Wrap ``responder`` so a ``response_format`` of type json_schema is answered 400 with ``message``
    (other requests pass on): an endpoint without structured outputs."""

    def refusing(request: dict[str, Any], index: int) -> Reply:
        rf = request.get("response_format")
        if isinstance(rf, Mapping) and rf.get("type") == "json_schema":
            return Reply(status=400, error=message)
        return responder(request, index)

    return refusing


def refuse_params(responder: Responder, names: Iterable[str]) -> Responder:
    """Wrap ``responder`` so a request that sets one of ``names`` is answered 400 the way OpenAI's
    reasoning models answer ``temperature`` or ``max_tokens`` ("Unsupported parameter: ...")."""
    refused = tuple(names)

    def refusing(request: dict[str, Any], index: int) -> Reply:
        for name in refused:
            if name in request:
                hint = " Use 'max_completion_tokens' instead." if name == "max_tokens" else ""
                error = f"Unsupported parameter: '{name}' is not supported with this model.{hint}"
                return Reply(status=400, error=error)
        return responder(request, index)

    return refusing


def with_reasoning(responder: Responder, thought: str = "<reasoning> weighing every clause ") -> Responder:
    """Wrap ``responder`` so every successful reply carries a chain of thought in ``reasoning_content``
    (DeepSeek-R1, vLLM's reasoning parsers), counted in ``reasoning_tokens``."""

    def thinking(request: dict[str, Any], index: int) -> Reply:
        reply = responder(request, index)
        if not reply.ok or reply.reasoning_content is not None:
            return reply
        return replace(reply, reasoning_content=thought * 8)

    return thinking


class _PromptCache:
    """OpenAI's automatic prefix caching, imitated: a request's cached tokens are the longest prefix its
    text shares with an earlier request's, in whole blocks, once the prompt is long enough."""

    def __init__(self, block: int = 128, minimum: int = 1024) -> None:
        self.block, self.minimum = block, minimum
        self._seen: list[str] = []
        self._lock = threading.Lock()

    def cached(self, request: Mapping[str, Any]) -> int:
        text = all_text(request)
        with self._lock:
            common = max((_common_prefix(text, old) for old in self._seen), default=0)
            self._seen.append(text)
        if estimate_tokens(text) < self.minimum:
            return 0
        return (common // 4) // self.block * self.block


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


# --------------------------------------------------------------------------- response bodies


def _validate_chat(body: object) -> dict[str, Any]:
    """The body as a chat-completions request, or :class:`BadRequest`."""
    if not isinstance(body, dict):
        raise BadRequest("We could not parse the JSON body of your request: expected a JSON object.")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise BadRequest("you must provide a model parameter", param="model", code="missing_required_parameter")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise BadRequest(
            "Missing required parameter: 'messages' (a non-empty list of objects).",
            param="messages",
            code="missing_required_parameter",
        )
    if body.get("stream") is True:
        raise BadRequest("Streaming is not supported by ScriptedOpenAI.", param="stream", code="unsupported_parameter")
    return body


# --------------------------------------------------------------------------- HTTP plumbing


class _Server(ThreadingHTTPServer):
    """A threading HTTP server that knows its :class:`ScriptedOpenAI` and never prints."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, owner: ScriptedOpenAI, address: tuple[str, int]) -> None:
        self.owner = owner
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        """Bind without :meth:`HTTPServer.server_bind`'s reverse DNS lookup (slow offline)."""
        TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Swallow errors of a connection (a client that went away): tests must stay quiet."""


class _Handler(BaseHTTPRequestHandler):
    """One connection: HTTP/1.1 with keep-alive, JSON in, JSON out."""

    protocol_version = "HTTP/1.1"
    server_version = "rose-scripted-openai/1"
    sys_version = ""
    timeout = 120  # idle keep-alive connections; stop() closes them sooner
    server: _Server

    def __init__(self, request: Any, client_address: Any, server: BaseServer) -> None:
        self.request_id = ""
        super().__init__(request, client_address, server)

    @property
    def owner(self) -> ScriptedOpenAI:
        return self.server.owner

    def setup(self) -> None:
        super().setup()
        self.owner._track(self.connection, opened=True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.owner._track(self.connection, opened=False)

    def log_message(self, format: str, *args: Any) -> None:
        """No access log: tests must stay quiet."""

    def handle_one_request(self) -> None:
        """Serve one request; a client that disconnected mid-way just ends the connection."""
        self.request_id = f"req_{uuid.uuid4().hex[:16]}"
        try:
            super().handle_one_request()
        except (ConnectionError, OSError):
            self.close_connection = True

    # ----- routing

    def do_POST(self) -> None:
        """Route POST requests: chat completions, and the Batch API's files and batches."""
        self.owner._count_http()
        try:
            self._check_auth()
            if self._path().startswith(BATCH_API_PATHS):
                self.owner.batch.post(self, self._path())
                return
            if self._path() != CHAT_PATH:
                self._read_body()  # keep the connection usable
                raise BadRequest(f"Unknown request URL: POST {self.path}", status=404, code="unknown_url")
            self._chat(_validate_chat(self._read_json()))
        except BadRequest as problem:
            self._refuse(problem)

    def do_GET(self) -> None:
        """Route GET requests: the model list and single models, the Batch API's files and batches."""
        self.owner._count_http()
        try:
            self._check_auth()
            if self._path().startswith(BATCH_API_PATHS):
                self.owner.batch.get(self, self._path())
                return
            self._send_json(200, self._models(self._path()))
        except BadRequest as problem:
            self._refuse(problem)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors found by :mod:`http.server` itself (bad request line...), as OpenAI-style JSON."""
        self.owner._count_http()
        self.close_connection = True
        if not self.request_version.startswith("HTTP/1."):
            self.request_version = "HTTP/1.1"  # answer a status line even to a garbled request line
        text = message or HTTPStatus(code).phrase
        with contextlib.suppress(OSError):
            self._send_json(code, error_body(code, text))

    # ----- endpoints

    def _chat(self, body: dict[str, Any]) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        index = self.owner._record(body, headers)
        reply = self.owner._respond(body, index)
        cache = self.owner._prompt_cache
        cached = cache.cached(body) if cache is not None and reply.ok else 0
        if reply.delay_s and self.owner._stopping.wait(reply.delay_s):
            self.close_connection = True
            return
        if reply.drop:
            self._drop()
            return
        extra = dict(reply.headers)
        payload: Mapping[str, Any] | bytes
        if reply.body is not None:
            payload = reply.body.encode("utf-8") if isinstance(reply.body, str) else reply.body
        elif reply.ok:
            payload = completion_body(reply, body, self.owner.system_fingerprint, cached)
        else:
            payload = error_body(reply.status, reply.error or HTTPStatus(reply.status).phrase)
        self._send_json(reply.status, payload, extra, trickle=(reply.trickle_s, reply.trickle_bytes))

    def _models(self, path: str) -> dict[str, Any]:
        cards = {
            m: {"id": m, "object": "model", "created": 0, "owned_by": "rose-sql-testing"} for m in self.owner.models
        }
        if path == MODELS_PATH:
            return {"object": "list", "data": list(cards.values())}
        prefix = MODELS_PATH + "/"
        if path.startswith(prefix) and path[len(prefix) :] in cards:
            return cards[path[len(prefix) :]]
        if path.startswith(prefix):
            raise BadRequest(f"The model '{path[len(prefix) :]}' does not exist", status=404, code="model_not_found")
        raise BadRequest(f"Unknown request URL: GET {self.path}", status=404, code="unknown_url")

    # ----- request parts

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    def _check_auth(self) -> None:
        key = self.owner.api_key
        if key is not None and self.headers.get("Authorization") != f"Bearer {key}":
            self._read_body()
            raise BadRequest("Incorrect API key provided.", status=401)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        try:
            length = int(raw)
        except ValueError:
            raise BadRequest(f"Invalid Content-Length: {raw!r}", close=True) from None
        if length < 0:
            raise BadRequest(f"Invalid Content-Length: {raw!r}", close=True)
        if length > MAX_BODY_BYTES:
            raise BadRequest("Request body too large.", status=413, close=True)
        return self.rfile.read(length)

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024).split(b";", 1)[0].strip()
            try:
                size = int(line, 16)
            except ValueError:
                raise BadRequest("Malformed chunked request body.", close=True) from None
            total += size
            if size < 0 or total > MAX_BODY_BYTES:
                raise BadRequest("Malformed or too large chunked request body.", close=True)
            if size == 0:
                while self.rfile.readline(1024).strip():  # trailers up to the blank line
                    pass
                return b"".join(chunks)
            chunks.append(self.rfile.read(size))
            self.rfile.readline(1024)  # the CRLF after each chunk

    def _read_json(self) -> object:
        data = self._read_body()
        try:
            return json.loads(data)
        except ValueError:  # JSONDecodeError and UnicodeDecodeError
            raise BadRequest(
                "We could not parse the JSON body of your request. (HINT: This likely means you aren't using "
                "your HTTP library correctly. The OpenAI API expects a JSON payload.)"
            ) from None

    # ----- answering

    def _refuse(self, problem: BadRequest) -> None:
        if problem.close:
            self.close_connection = True
        self.owner._count_rejected()
        self._send_json(problem.status, problem.body)

    def _send_json(
        self,
        status: int,
        payload: Mapping[str, Any] | bytes,
        headers: Mapping[str, str] | None = None,
        *,
        trickle: tuple[float, int] = (0.0, 1),
    ) -> None:
        """Answer ``payload`` (JSON, or bytes sent as they are); ``trickle``: (seconds between pieces,
        bytes a piece) to send the body slowly."""
        data = payload if isinstance(payload, bytes) else json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", self.request_id)
        for name, value in (headers or {}).items():
            if name.lower() not in ("content-length", "content-type", "connection"):
                self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        pause, size = trickle
        if not pause:
            self.wfile.write(data)
            self.wfile.flush()
            return
        for start in range(0, len(data), size):
            self.wfile.write(data[start : start + size])
            self.wfile.flush()
            if self.owner._stopping.wait(pause):
                self.close_connection = True
                return

    def _send_stream(self, status: int, parts: Iterator[bytes], length: int) -> None:
        """Answer ``length`` bytes made by ``parts`` as they are sent (a body never held whole); a client that
        stops reading closes the connection."""
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("x-request-id", self.request_id)
        self.end_headers()
        try:
            for part in parts:
                self.wfile.write(part)
            self.wfile.flush()
        except OSError:  # the client read what it wanted and left
            self.close_connection = True

    def _drop(self) -> None:
        """Close the connection without a byte of answer."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


# --------------------------------------------------------------------------- the server


def signed(body: Mapping[str, Any], reply: Reply) -> Reply:
    """``reply`` with the nonce ``body`` (a chat-completions request) asks for written into the verdicts it
    scripts, as an honest judge writes it (:func:`rose_sql.testing.sign.sign`); any other reply as it is."""
    if not reply.ok or reply.body is not None:
        return reply
    messages = [m for m in body.get("messages", []) if isinstance(m, dict)]
    nonce = call_nonce(messages, request_schema(body))
    if nonce is None:
        return reply
    prompt = prompt_text(messages)
    return replace(
        reply,
        content=sign(reply.content, nonce, prompt),
        reasoning_content=sign(reply.reasoning_content, nonce, prompt),
    )


class ScriptedOpenAI:
    """An OpenAI-compatible chat-completions server on ``127.0.0.1``, scripted by a responder.

    It binds a free port and serves from a daemon thread as soon as it is built; use it as a
    context manager (or call :meth:`stop`). Point the SDK at :attr:`base_url`. Every
    chat-completions request that passes validation is recorded (:attr:`requests`,
    :attr:`calls`) and answered by the responder; malformed ones get a 400 and are counted in
    :attr:`rejected`. A responder that raises yields a 500 and lands in :attr:`errors`.

    ``prompt_cache``: report cached prompt tokens for prefixes repeated across requests (see
    :class:`_PromptCache`: ``cache_block`` tokens a block, from ``cache_min_tokens`` prompt tokens).

    ``sign``: the responder's judges are honest about the nonce: each verdict it scripts is answered with
    the request's nonce written into it, as the judges' prompt asks (:func:`rose_sql.testing.sign.sign`);
    False answers the replies exactly as scripted.
    """

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        models: Sequence[str] = ("scripted-model",),
        api_key: str | None = None,
        system_fingerprint: str = "fp_rose_scripted",
        host: str = "127.0.0.1",
        port: int = 0,
        prompt_cache: bool = False,
        cache_block: int = 128,
        cache_min_tokens: int = 1024,
        batch: BatchScript | None = None,
        sign: bool = True,
    ) -> None:

        self.responder: Responder = responder or default_responder
        self.sign = sign
        self._prompt_cache = _PromptCache(cache_block, cache_min_tokens) if prompt_cache else None
        self.batch = BatchAPI(self, batch or BatchScript())
        """The Batch API (files and batches endpoints), scripted by ``batch``."""
        self.models = tuple(models)
        self.api_key = api_key
        self.system_fingerprint = system_fingerprint
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._requests: list[RecordedRequest] = []
        self._errors: list[BaseException] = []
        self._open: set[socket.socket] = set()
        self._connections = 0
        self._http_requests = 0
        self._rejected = 0
        self._server = _Server(self, (host, port))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-openai", daemon=True
        )
        self._thread.start()

    # ----- lifecycle

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving, wake delayed replies and close every open connection. Idempotent."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._server.shutdown()
        with self._lock:
            open_now = list(self._open)
        for conn in open_now:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._server.server_close()
        self._thread.join(timeout=5)

    # ----- where and what

    @property
    def port(self) -> int:
        """The TCP port the server listens on."""
        return self._server.server_port

    @property
    def base_url(self) -> str:
        """The SDK's ``base_url``: ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self._server.server_name}:{self.port}/v1"

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
    def connections(self) -> int:
        """How many TCP connections were accepted (keep-alive reuse keeps this low)."""
        with self._lock:
            return self._connections

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
            self._connections = self._http_requests = self._rejected = 0

    # ----- used by the handler

    def _record(self, body: dict[str, Any], headers: dict[str, str]) -> int:
        with self._lock:
            index = len(self._requests)
            self._requests.append(RecordedRequest(index, body, headers, time.monotonic()))
            return index

    def _respond(self, body: dict[str, Any], index: int) -> Reply:
        try:
            reply = self.responder(body, index)
            if not isinstance(reply, Reply):
                raise TypeError(f"responder returned {type(reply).__name__}, not Reply")
            return self._signed(body, reply)
        except Exception as e:  # a broken responder answers 500, never kills the server
            with self._lock:
                self._errors.append(e)
            return Reply(status=500, error=f"responder raised {type(e).__name__}: {e}")

    def _signed(self, body: dict[str, Any], reply: Reply) -> Reply:
        """The reply with the request's nonce written into the verdicts it scripts (see the class's text)."""
        return signed(body, reply) if self.sign else reply

    def _track(self, conn: socket.socket, *, opened: bool) -> None:
        with self._lock:
            if opened:
                self._open.add(conn)
                self._connections += 1
            else:
                self._open.discard(conn)

    def _count_http(self) -> None:
        with self._lock:
            self._http_requests += 1

    def _count_rejected(self) -> None:
        with self._lock:
            self._rejected += 1
