"""The files and batches endpoints of :class:`~rose_sql.testing.openai_server.ScriptedOpenAI`: the Batch API.

``POST /v1/files`` (multipart, ``purpose=batch``), ``GET /v1/files/{id}`` and ``/v1/files/{id}/content``;
``POST /v1/batches``, ``GET /v1/batches`` and ``/v1/batches/{id}``, ``POST /v1/batches/{id}/cancel``. Each
request of a batch is answered by the server's responder, as its chat-completions endpoint would answer it.

A batch moves on only when it is polled, never with time (:class:`BatchScript`): ``validating`` for
``validating_polls`` retrieves, ``in_progress`` for ``in_progress_polls`` more (and for as long as
``hold`` is an event not set), then ``completed``, or ``expired`` with only the first requests answered
(``expire``). ``fail`` puts chosen requests in the error file. ``pad_bytes`` pads every output and error file
(inside its first line, or in lines of ``pad_line`` spaces after its lines), generated as it is sent: a provider
whose files are far larger than what they answer. :attr:`BatchAPI.submitted` counts the
requests sent per ``custom_id``, over every batch: a request sent twice shows there.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from email.message import Message
from typing import Any, Protocol

from rose_sql.testing.bodies import BadRequest, Reply, completion_body, error_body


class _Owner(Protocol):
    """What the Batch API needs of the server it is part of (:class:`~rose_sql.testing.ScriptedOpenAI`)."""

    system_fingerprint: str

    def _respond(self, body: dict[str, Any], index: int) -> Reply: ...


class _Handler(Protocol):
    """What the Batch API needs of the request being handled (the server's handler)."""

    headers: Message

    def _read_body(self) -> bytes: ...

    def _read_json(self) -> object: ...

    def _send_json(
        self, status: int, payload: Mapping[str, Any] | bytes, headers: Mapping[str, str] | None = None
    ) -> None: ...

    def _send_stream(self, status: int, parts: Iterator[bytes], length: int) -> None: ...


__all__ = ["BatchAPI", "BatchScript"]

FILES = "/v1/files"
BATCHES = "/v1/batches"
Fail = Callable[[str, dict[str, Any], int], str | None]
"""``(custom_id, request body, times that custom_id was sent before) -> error message`` (None: answer it)."""


@dataclass
class BatchScript:
    """How the scripted batches behave (see the module's text)."""

    validating_polls: int = 1
    """Retrieves that answer ``validating``."""
    in_progress_polls: int = 1
    """Retrieves that then answer ``in_progress``."""
    hold: threading.Event | None = None
    """While this event is not set, a batch stays ``in_progress``."""
    fail: Fail | None = None
    """Which requests go to the error file (a 500 from the model)."""
    expire: Callable[[int], int | None] | None = None
    """``batch number (0-based, in creation order) -> requests answered before it expires`` (None: it completes)."""
    pad_bytes: int = 0
    """Bytes of padding in each output and error file (never held in memory: made as they are sent)."""
    pad_line: int = 0
    """0: the padding is JSON whitespace inside the file's first line (before its last brace); N: lines of N bytes
    (spaces, then a newline) after the file's lines."""


@dataclass
class _Batch:
    data: dict[str, Any]
    requests: list[dict[str, Any]]
    number: int
    polls: int = 0
    cancel: bool = False
    answered: list[str] = field(default_factory=list)


class BatchAPI:
    """The Batch API state of one server; thread-safe."""

    def __init__(self, owner: _Owner, script: BatchScript) -> None:
        self.owner = owner
        self.script = script
        self._lock = threading.Lock()
        self._files: dict[str, tuple[dict[str, Any], bytes]] = {}
        self._batches: dict[str, _Batch] = {}
        self._submitted: Counter[str] = Counter()
        self._index = 0
        self._padded: set[str] = set()

    @property
    def submitted(self) -> Counter[str]:
        """Requests sent per ``custom_id``, over every batch created."""
        with self._lock:
            return Counter(self._submitted)

    @property
    def batches(self) -> list[dict[str, Any]]:
        """Every batch object, in creation order."""
        with self._lock:
            return [dict(b.data) for b in self._batches.values()]

    # ----- routing (called by the handler; raises the server's BadRequest)

    def post(self, handler: _Handler, path: str) -> None:

        if path == FILES:
            handler._send_json(200, self._upload(handler))
        elif path == BATCHES:
            body = handler._read_json()
            if not isinstance(body, dict):
                raise BadRequest("expected a JSON object")
            handler._send_json(200, self._create(body))
        elif path.startswith(BATCHES + "/") and path.endswith("/cancel"):
            handler._read_body()
            with self._lock:
                b = self._batch(path[len(BATCHES) + 1 : -len("/cancel")])
                b.cancel = True
                if b.data["status"] not in ("completed", "failed", "expired", "cancelled"):
                    b.data["status"] = "cancelling"
                handler._send_json(200, dict(b.data))
        else:
            handler._read_body()
            raise BadRequest(f"Unknown request URL: POST {path}", status=404, code="unknown_url")

    def get(self, handler: _Handler, path: str) -> None:

        if path == BATCHES:
            with self._lock:
                data = [dict(b.data) for b in reversed(self._batches.values())]
            handler._send_json(200, {"object": "list", "data": data, "has_more": False})
        elif path.startswith(BATCHES + "/"):
            handler._send_json(200, self._retrieve(path[len(BATCHES) + 1 :]))
        elif path.startswith(FILES + "/") and path.endswith("/content"):
            file_id = path[len(FILES) + 1 : -len("/content")]
            with self._lock:
                _meta, content = self._file(file_id)
                padded = file_id in self._padded
            if padded and self.script.pad_bytes:
                pad = self.script.pad_bytes
                handler._send_stream(200, _padded(content, pad, self.script.pad_line), len(content) + pad)
            else:
                handler._send_json(200, content)
        elif path.startswith(FILES + "/"):
            with self._lock:
                meta, _content = self._file(path[len(FILES) + 1 :])
            handler._send_json(200, meta)
        else:
            raise BadRequest(f"Unknown request URL: GET {path}", status=404, code="unknown_url")

    # ----- files

    def _upload(self, handler: _Handler) -> dict[str, Any]:

        raw = handler._read_body()
        head = f"Content-Type: {handler.headers.get('Content-Type', '')}\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + raw)
        fields: dict[str, tuple[str | None, bytes]] = {}
        for part in message.iter_parts() if message.is_multipart() else []:
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            if isinstance(name, str) and isinstance(payload, bytes):
                fields[name] = (part.get_filename(), payload)
        if "file" not in fields or fields.get("purpose", (None, b""))[1] != b"batch":
            raise BadRequest("expected a multipart upload with 'file' and purpose 'batch'")
        filename, content = fields["file"]
        with self._lock:
            return self._store(content, filename or "upload.jsonl", "batch")

    def _store(self, content: bytes, filename: str, purpose: str) -> dict[str, Any]:
        """Keep a file (the lock is held)."""
        file_id = f"file-{uuid.uuid4().hex[:24]}"
        meta: dict[str, Any] = {
            "id": file_id,
            "object": "file",
            "bytes": len(content),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
        }
        self._files[file_id] = (meta, content)
        return meta

    def _file(self, file_id: str) -> tuple[dict[str, Any], bytes]:

        if file_id not in self._files:
            raise BadRequest(f"No such File object: {file_id}", status=404)
        return self._files[file_id]

    # ----- batches

    def _create(self, body: dict[str, Any]) -> dict[str, Any]:

        with self._lock:
            _meta, content = self._file(str(body.get("input_file_id")))
            if body.get("endpoint") != "/v1/chat/completions" or body.get("completion_window") != "24h":
                raise BadRequest("endpoint must be /v1/chat/completions and completion_window 24h")
            requests = [json.loads(line) for line in content.splitlines() if line.strip()]
            for r in requests:
                self._submitted[r["custom_id"]] += 1
            now = int(time.time())
            data = {
                "id": f"batch_{uuid.uuid4().hex[:24]}",
                "object": "batch",
                "endpoint": body["endpoint"],
                "errors": None,
                "input_file_id": body["input_file_id"],
                "completion_window": "24h",
                "status": "validating",
                "output_file_id": None,
                "error_file_id": None,
                "created_at": now,
                "expires_at": now + 86400,
                "request_counts": {"total": len(requests), "completed": 0, "failed": 0},
                "metadata": body.get("metadata"),
            }
            self._batches[data["id"]] = _Batch(data, requests, len(self._batches))
            return dict(data)

    def _batch(self, batch_id: str) -> _Batch:

        if batch_id not in self._batches:
            raise BadRequest(f"No such Batch object: {batch_id}", status=404)
        return self._batches[batch_id]

    def _retrieve(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            b = self._batch(batch_id)
            b.polls += 1
            s = self.script
            status = b.data["status"]
            held = s.hold is not None and not s.hold.is_set()
            if status == "validating" and b.polls > s.validating_polls:
                b.data["status"] = status = "in_progress"
            if status == "cancelling":
                self._finish(b, "cancelled", 0)
            elif status == "in_progress" and b.polls > s.validating_polls + s.in_progress_polls and not held:
                keep = s.expire(b.number) if s.expire is not None else None
                self._finish(b, "completed" if keep is None else "expired", len(b.requests) if keep is None else keep)
            return dict(b.data)

    def _finish(self, b: _Batch, status: str, answered: int) -> None:
        """End a batch: its first ``answered`` requests answered (the lock is held)."""
        out: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        for r in b.requests[:answered]:
            cid, body = r["custom_id"], r["body"]
            line: dict[str, Any] = {"id": f"batch_req_{uuid.uuid4().hex[:20]}", "custom_id": cid, "error": None}
            failure = self.script.fail(cid, body, self._submitted[cid] - 1) if self.script.fail else None
            if failure is not None:
                errors.append({**line, "response": {"status_code": 500, "body": _error(500, failure)}})
                continue
            reply = self.owner._respond(body, self._index)
            self._index += 1
            if reply.ok:
                fingerprint = self.owner.system_fingerprint
                result = completion_body(reply, body, fingerprint) if reply.body is None else _verbatim(reply.body)
                out.append({**line, "response": {"status_code": 200, "request_id": line["id"], "body": result}})
            else:
                failed = {"status_code": reply.status, "body": _error(reply.status, reply.error)}
                errors.append({**line, "response": failed})
        why = {"expired": "batch_expired", "cancelled": "batch_cancelled"}.get(status, "")
        for r in b.requests[answered:]:
            message = f"This request could not be executed: the batch was {status}."
            error = {"code": why, "message": message}
            errors.append({"id": "", "custom_id": r["custom_id"], "response": None, "error": error})
        if out:
            b.data["output_file_id"] = self._store(_jsonl(out), f"{b.data['id']}_output.jsonl", "batch_output")["id"]
            self._padded.add(b.data["output_file_id"])
        if errors:
            b.data["error_file_id"] = self._store(_jsonl(errors), f"{b.data['id']}_error.jsonl", "batch_output")["id"]
            self._padded.add(b.data["error_file_id"])
        b.data["status"] = status
        b.data[f"{status}_at"] = int(time.time())
        b.data["request_counts"] = {"total": len(b.requests), "completed": len(out), "failed": len(errors)}


def _padded(content: bytes, pad: int, line: int) -> Iterator[bytes]:
    """``content`` with ``pad`` bytes of padding, in pieces: inside its first line (``line`` 0) or in lines of
    ``line`` bytes after it."""
    block = 2**20
    if line == 0:
        end = content.find(b"\n")
        cut = (end if end != -1 else len(content)) - 1  # before the first line's last brace
        yield content[:cut]
        for start in range(0, pad, block):
            yield b" " * min(block, pad - start)
        yield content[cut:]
        return
    yield content
    one = b" " * (line - 1) + b"\n"
    many = one * max(1, block // line)
    left = pad
    while left >= len(many):
        yield many
        left -= len(many)
    while left >= len(one):
        yield one
        left -= len(one)
    yield b" " * left


def _verbatim(body: str | bytes) -> Any:
    """A reply's verbatim ``body`` as an output line's ``response.body``: its JSON, or else its text."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    try:
        return json.loads(text)
    except ValueError:
        return text


def _error(status: int, message: str | None) -> dict[str, Any]:

    return error_body(status, message or "error")


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line, ensure_ascii=False).encode() + b"\n" for line in lines)
