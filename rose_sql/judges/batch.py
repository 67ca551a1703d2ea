"""The judges' calls through the OpenAI Batch API (``rose run --batch``): sent in rounds, at the batch price.

:class:`BatchLLM` implements the :class:`~rose_sql.judges.llm.LLM` protocol; its :meth:`~BatchLLM.complete`
never calls the endpoint: a call the cache answers is answered, any other is noted and :class:`Pending` is raised, which
stops that item's walk over the decision table for this round. :meth:`~BatchLLM.submit` then sends the
noted calls as batches (a JSONL file uploaded with ``purpose="batch"``, one batch per file, split at
:class:`BatchOptions`' limits), each request's worst case reserved in the ledger first;
:meth:`~BatchLLM.collect` polls the open batches to their end and writes every reply into the cache under
the key a live call would have (so the walk, run again, replays it like any cached reply). Requests are
matched back by ``custom_id``, a hash of the cache key.

Every batch is written to the run's ``batches.jsonl`` (:class:`Log`) before it is polled: the file it was
uploaded as and the custom ids it holds, then the batch id, then what came back. A run killed at any point
resumes by polling the batches it left open, never by sending them again. A request that fails (a line of
the error file, a non-200 response, or left unfinished by a batch that expired or was cancelled) is sent
again in the next round, :attr:`BatchOptions.max_attempts` times at most; then the call fails as a live
call that got no reply does (the item: ``judge_error``, an infrastructure failure, never a score).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from rose_sql.config import (
    BATCH_FILE_LINE_SLACK,
    BATCH_LINE_ENVELOPE_BYTES,
    BATCH_MAX_ATTEMPTS,
    BATCH_MAX_BYTES,
    BATCH_MAX_FILE_BYTES,
    BATCH_MAX_REQUESTS,
    BATCH_POLL_S,
    MAX_LOG_LINE_BYTES,
    JudgeConfig,
)
from rose_sql.errors import BudgetExhausted, EndpointError, Pending, UsageError
from rose_sql.judges.budget import Ledger, Message, cost, prompt_tokens_bound
from rose_sql.judges.cache import Cache
from rose_sql.judges.llm import _FORMAT, ChatReply, ReplySchema, Request, _from_entry, _to_entry, open_client, priced
from rose_sql.judges.wire import read_completion
from rose_sql.verdicts import ReplyFormat

__all__ = ["BatchLLM", "BatchOptions", "Log", "Pending", "custom_id", "for_item"]

ENDPOINT: Final = "/v1/chat/completions"
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
"""Batch statuses after which nothing more will come."""

RECOVER_LOOKS_AT = 1000
"""The provider's most recent batches searched for one a killed run created but did not record."""

Status = Callable[[str], None]
"""Shown the state of the batch being polled (a line of text)."""


@dataclass(frozen=True, slots=True)
class BatchOptions:
    """How calls are batched, and how long between polls."""

    max_requests: int = BATCH_MAX_REQUESTS
    """Requests per batch at most (the provider's limit)."""
    max_bytes: int = BATCH_MAX_BYTES
    """Bytes of a batch's input file at most (the provider's limit)."""
    max_attempts: int = BATCH_MAX_ATTEMPTS
    """Times a request is sent before its call fails (``judge_error``)."""
    poll_s: float = BATCH_POLL_S
    """Seconds between two polls of a batch."""


_ITEM: contextvars.ContextVar[str] = contextvars.ContextVar("rose_batch_item", default="")


def for_item(token: str) -> None:
    """Name the item whose walk runs in this task: a reply the batch gave is charged to the first item
    that reads it (cost and ``cached=false``); any other item reading it gets it as cached."""
    _ITEM.set(token)


def custom_id(key: str) -> str:
    """The ``custom_id`` of a call: a hash of its cache key."""
    return "rose-" + hashlib.sha256(key.encode()).hexdigest()[:32]


# --------------------------------------------------------------------------- batches.jsonl


class Log:
    """The run's ``batches.jsonl``: every batch sent, what it holds and what came back, appended and synced
    before the next step, so that a killed run knows every batch it sent."""

    def __init__(self, path: Path) -> None:
        """Read the log at ``path`` (none yet: empty), line by line; :class:`~rose_sql.errors.InputError` names
        a line longer than :data:`~rose_sql.config.MAX_LOG_LINE_BYTES` (not one this class wrote)."""
        from rose_sql.items.readers import read_lines

        self.path = path
        self.events: list[dict[str, Any]] = []
        if not path.exists():
            return
        for _lineno, line, _ended in read_lines(path, MAX_LOG_LINE_BYTES):
            try:
                event = json.loads(line)
            except (ValueError, RecursionError):  # a line torn by a crash: its step is done again
                continue
            if isinstance(event, dict) and isinstance(event.get("event"), str):
                self.events.append(event)

    def append(self, event: dict[str, Any]) -> None:
        """Add an event, on disk before this returns."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.events.append(event)

    def of(self, kind: str) -> Iterator[dict[str, Any]]:
        """The events of one kind (``uploaded``, ``submitted``, ``collected``), oldest first."""
        return (e for e in self.events if e["event"] == kind)

    def uploads(self) -> dict[str, dict[str, Any]]:
        """Uploaded input files by id: their requests (custom id -> cache key) and sampling parameters."""
        return {e["file"]: e for e in self.of("uploaded")}

    def submitted(self) -> dict[str, str]:
        """Batch id -> its input file's id."""
        return {e["batch"]: e["file"] for e in self.of("submitted")}

    def open(self) -> list[str]:
        """The batches sent and not yet collected, oldest first."""
        collected = {e["batch"] for e in self.of("collected")}
        return [b for b in self.submitted() if b not in collected]

    def unsent(self) -> list[str]:
        """Files uploaded for a batch whose creation was never recorded (the run was killed in between)."""
        sent = set(self.submitted().values())
        return [f for f in self.uploads() if f not in sent]


# --------------------------------------------------------------------------- the client


class BatchLLM:
    """An :class:`~rose_sql.judges.llm.LLM` that answers from the cache and batches every other call (see the
    module's text). It asks as the live client would (its own :class:`~rose_sql.judges.llm.Request`), so a
    batch's reply lands under the key a live call has.

    Raises :class:`~rose_sql.errors.UsageError` without a cache: the batches' replies are kept there.
    """

    def __init__(
        self, cfg: JudgeConfig, log: Log, options: BatchOptions | None = None, *, ledger: Ledger | None = None
    ) -> None:
        import openai  # imported here: the deterministic stages never pay for it

        if cfg.cache_dir is None:
            raise UsageError("--batch keeps the batches' replies in the LLM cache: drop --no-cache")
        self.cfg = cfg
        self._openai = openai
        self.client = open_client(cfg)
        self.price = priced(cfg)
        self.cache = Cache(cfg.cache_dir)
        self.ledger = ledger or Ledger(budget_usd=cfg.budget_usd)
        self.request = Request(cfg, str(self.client.base_url).rstrip("/"))
        self.log = log
        self.options = options or BatchOptions()
        self.discount = self.price.batch_discount if self.price is not None else 0.0
        self.api = self.client.with_options(max_retries=cfg.max_retries)
        self.wanted: dict[str, tuple[list[Message], ReplySchema | None]] = {}
        """Calls the walk asked for and the cache could not answer (with the reply's schema): the next round's
        requests."""
        self.made: dict[str, str] = {}
        """Cache key -> the batch of this run that answered it."""
        self.failures: dict[str, list[str]] = {}
        """Cache key -> why each of its requests failed (in this process)."""
        self.batches_sent = 0
        """Batches this process created."""
        self.requests_failed = 0
        """Requests of this process's polls that failed (each sent again, up to ``max_attempts``)."""
        self._no_budget: dict[str, str] = {}
        self._reserved: dict[str, float] = {}
        self._owner: dict[str, str] = {}
        uploads, submitted = log.uploads(), log.submitted()
        for e in log.of("collected"):  # an earlier process's failures are not counted: --resume tries again
            requests = uploads.get(submitted.get(e["batch"], ""), {}).get("requests", {})
            for cid in e.get("ok", []):
                if cid in requests:
                    self.made[requests[cid]] = e["batch"]

    async def complete(
        self, messages: list[Message], *, fresh: bool = False, schema: ReplySchema | None = None, sample: int = 0
    ) -> ChatReply:
        """The reply of a call from the cache (a reply a batch of this run gave counts as fresh); else the
        call is noted for the next round and :class:`Pending` raised. Raises
        :class:`~rose_sql.errors.EndpointError` once its requests failed ``max_attempts`` times, and
        :class:`~rose_sql.errors.BudgetExhausted` when the budget left no room to send it. Batches carry
        one reply per stage: a stage that votes (``sample`` past 0) is refused with :class:`UsageError`."""
        if sample:
            raise UsageError("--batch asks one reply per judge stage: drop --samples, --panel and --escalate-to")
        key = self.request.key(messages, schema)
        made = self.made.get(key)
        hit = self.cache.get(key) if made is not None or not fresh else None
        if hit is not None:
            c = _from_entry(hit, key)
            if made is None:
                return c
            who = _ITEM.get()
            return replace(c, cached=self._owner.setdefault(key, who) != who, batch_id=made)
        failed = self.failures.get(key, [])
        if len(failed) >= self.options.max_attempts:
            raise EndpointError(f"the Batch API failed this request {len(failed)} times; the last: {failed[-1]}")
        if key in self._no_budget:
            raise BudgetExhausted(self._no_budget[key])
        self.wanted.setdefault(key, (list(messages), schema))
        raise Pending(key)

    def reply_format(self, schema: ReplySchema | None) -> ReplyFormat:
        """How a call with this schema is asked now (as a live call would be)."""
        return self.request.reply_format(schema)

    async def aclose(self) -> None:
        """Close the SDK's client."""
        await self.client.close()

    # ----- sending

    async def submit(self) -> tuple[int, int]:
        """Send the calls noted since the last round as batches: (requests sent, calls refused for the budget).

        Each request's worst case (at the batch price) is reserved first; one that fits only once the round
        settles waits for the next round, one the money spent leaves no room for is refused."""
        params = self.request.params()
        lines: list[tuple[str, bytes]] = []
        formats: dict[str, ReplyFormat] = {}
        refused = 0
        for key, (messages, schema) in self.wanted.items():
            worst = (cost(self.price, prompt_tokens_bound(messages), self.cfg.max_tokens) or 0.0) * (1 - self.discount)
            try:
                if not self.ledger.reserve(worst):
                    continue  # asked again by the next round's walk
            except BudgetExhausted as e:
                self._no_budget[key], refused = str(e), refused + 1
                continue
            self._reserved[key] = worst
            body: dict[str, Any] = {"model": self.cfg.model, "messages": messages, **params}
            body.update(self.request.options(schema) or {})  # merged as they are, as a live call's extra_body
            with_format = schema is not None and not self.request.format_refused
            body.update(self.request.body({}, schema, with_format))  # the schema as a live call sends it
            formats[custom_id(key)] = self.request.reply_format(schema)
            line = {"custom_id": custom_id(key), "method": "POST", "url": ENDPOINT, "body": body}
            lines.append((key, (json.dumps(line) + "\n").encode()))  # ASCII: a lone surrogate stays JSON
        self.wanted.clear()
        recorded = {**params, **self.cfg.options}  # as a live call records them
        for chunk in self._split(lines):
            with self._api("sending a batch"):
                await self._upload(chunk, recorded, {custom_id(k): formats[custom_id(k)] for k, _ in chunk})
        return len(lines), refused

    def _split(self, lines: list[tuple[str, bytes]]) -> Iterator[list[tuple[str, bytes]]]:
        chunk: list[tuple[str, bytes]] = []
        size = 0
        for key, line in lines:
            if len(line) > self.options.max_bytes:  # alone past the limit: it can never be sent
                why = f"the request has {len(line)} bytes, more than a batch may ({self.options.max_bytes})"
                self.failures[key] = [why] * self.options.max_attempts
                self.ledger.settle(self._reserved.pop(key, 0.0), 0.0)
                continue
            if chunk and (len(chunk) >= self.options.max_requests or size + len(line) > self.options.max_bytes):
                yield chunk
                chunk, size = [], 0
            chunk.append((key, line))
            size += len(line)
        if chunk:
            yield chunk

    async def _upload(
        self, chunk: list[tuple[str, bytes]], params: dict[str, Any], formats: dict[str, ReplyFormat]
    ) -> None:
        data = b"".join(line for _, line in chunk)
        uploaded = await self.api.files.create(file=("rose-batch.jsonl", data), purpose="batch")
        requests = {custom_id(key): key for key, _ in chunk}
        event = {"event": "uploaded", "file": uploaded.id, "params": params, "formats": formats, "requests": requests}
        self.log.append(event)
        batch = await self.api.batches.create(
            input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h", metadata={"made_by": "rose-sql"}
        )
        self.log.append({"event": "submitted", "batch": batch.id, "file": uploaded.id})
        self.batches_sent += 1

    async def recover(self) -> None:
        """Find the batches of files a killed run uploaded without recording the batch (among the provider's
        recent batches); a file no batch was made of is left: its calls are asked again."""
        unsent = set(self.log.unsent())
        if not unsent:
            return
        with self._api("listing the batches"):
            seen = 0
            async for b in self.api.batches.list(limit=100):  # newest first: the lost ones are near the top
                if b.input_file_id in unsent:
                    self.log.append({"event": "submitted", "batch": b.id, "file": b.input_file_id})
                    unsent.discard(b.input_file_id)
                seen += 1
                if not unsent or seen >= RECOVER_LOOKS_AT:
                    break

    # ----- receiving

    async def collect(self, status: Status) -> None:
        """Poll every open batch to its end and take in what came back (replies into the cache).

        Raises :class:`~rose_sql.errors.EndpointError` when the Batch API keeps failing (after the
        retries): the batches stay open in the log, and ``--resume`` polls them again."""
        for batch_id in self.log.open():
            with self._api(f"polling batch {batch_id}"):
                await self._collect(batch_id, status)

    @contextlib.contextmanager
    def _api(self, doing: str) -> Iterator[None]:
        """The SDK's errors of the files and batches endpoints as an :class:`EndpointError` (which stops the run)."""
        try:
            yield
        except self._openai.APIError as e:
            raise EndpointError(f"the Batch API failed while {doing}: {type(e).__name__}: {e}") from None

    async def _collect(self, batch_id: str, status: Status) -> None:
        upload = self.log.uploads()[self.log.submitted()[batch_id]]
        requests: dict[str, str] = upload["requests"]
        while True:
            b = await self.api.batches.retrieve(batch_id)
            counts = b.request_counts
            done = f"{counts.completed}/{counts.total} done, {counts.failed} failed" if counts else "no counts yet"
            status(f"batch {batch_id}: {b.status}, {done}")
            if b.status in TERMINAL:
                break
            await asyncio.sleep(self.options.poll_s)
        ok: list[str] = []
        failed: dict[str, str] = {}
        cap = self.cfg.max_reply_bytes + BATCH_LINE_ENVELOPE_BYTES
        file_cap = min(BATCH_MAX_FILE_BYTES, (len(requests) + BATCH_FILE_LINE_SLACK) * cap)
        unread: list[str] = []
        for file_id in (b.output_file_id, b.error_file_id):
            async for line in self._lines(file_id, cap, file_cap, unread):
                self._take(line, requests, upload, batch_id, ok, failed)
        ended = f"not answered: the batch ended {b.status}"
        if unread:
            ended = "not answered: " + "; ".join(unread)
        elif b.errors is not None and b.errors.data:  # a batch that failed as a whole says why here
            ended += ": " + "; ".join(f"{e.code}: {e.message}" for e in b.errors.data[:3])
        for cid in requests:
            if cid not in ok and cid not in failed:
                failed[cid] = ended
        self.log.append({"event": "collected", "batch": batch_id, "status": b.status, "ok": ok, "failed": failed})
        for cid in ok:
            self.made[requests[cid]] = batch_id
        self.requests_failed += len(failed)
        for cid, why in failed.items():
            self.failures.setdefault(requests[cid], []).append(why)
            self.ledger.settle(self._reserved.pop(requests[cid], 0.0), 0.0)  # failed requests are not charged

    def _take(
        self,
        line: dict[str, Any] | str,
        requests: dict[str, str],
        upload: dict[str, Any],
        batch_id: str,
        ok: list[str],
        failed: dict[str, str],
    ) -> None:
        """One line of a result file: a reply into the cache, or why its request failed (a text: the custom
        id of a line too long to read, with the reason)."""
        if isinstance(line, str):
            long_id, _, why = line.partition("\0")
            if long_id in requests and long_id not in ok:
                failed[long_id] = why
            return
        cid = line.get("custom_id")
        if not isinstance(cid, str) or cid not in requests or cid in ok:
            return
        fmt: ReplyFormat = "json_schema" if upload.get("formats", {}).get(cid) == "json_schema" else "text"
        reply, why = self._read(line, fmt)
        key = requests[cid]
        if reply is None:
            failed[cid] = why
            return
        c = self._chat_reply(reply, key, upload.get("params", {}), batch_id, fmt)
        entry = _to_entry(c, self.cfg.model)
        self.cache.put(key, {**entry, "batch_id": batch_id})
        ok.append(cid)
        failed.pop(cid, None)
        self.ledger.settle(self._reserved.pop(key, 0.0), c.cost_usd or 0.0)
        self.ledger.add(cached=False)

    async def _lines(
        self, file_id: str | None, cap: int, file_cap: int, unread: list[str]
    ) -> AsyncIterator[dict[str, Any] | str]:
        """The lines of a result file, streamed: each a JSON object, or, for a line longer than ``cap`` (read no
        further), ``"<custom id>\\0<why>"`` when its custom id can be found. At most ``file_cap`` bytes are read;
        past them the rest of the file is left, and ``unread`` says so. Memory holds one line at most."""
        if not file_id:
            return
        async with self.api.files.with_streaming_response.content(file_id) as response:
            lines = _Lines(cap)
            read = 0
            async for chunk in response.iter_bytes(_BLOCK):
                read += len(chunk)
                if read > file_cap:
                    chunk = chunk[: len(chunk) - (read - file_cap)]
                for line in lines.feed(chunk):
                    if (parsed := _result_line(line, cap)) is not None:
                        yield parsed
                if read > file_cap:
                    unread.append(f"the result file {file_id} is larger than {file_cap} bytes, read no further")
                    return
            for line in lines.end():
                if (parsed := _result_line(line, cap)) is not None:
                    yield parsed

    def _read(self, line: dict[str, Any], fmt: ReplyFormat) -> tuple[Any, str]:
        """A result line's completion, or why there is none (``fmt``: how the request asked for the reply)."""
        response, error = line.get("response"), line.get("error")
        if isinstance(response, dict) and response.get("status_code") == 200:
            raw = json.dumps(response.get("body"), ensure_ascii=False).encode("utf-8", "surrogatepass")
            limit = self.cfg.max_reply_bytes
            try:
                return read_completion(raw[:limit], limit=limit, cut=len(raw) > limit), ""
            except EndpointError as e:
                return None, str(e)
        if isinstance(error, dict):
            return None, f"{error.get('code')}: {error.get('message')}"
        if isinstance(response, dict):
            body = response.get("body")
            detail = body.get("error") if isinstance(body, dict) else None
            message = detail.get("message") if isinstance(detail, dict) else None
            text = str(message or body)[:500]
            if response.get("status_code") == 400 and fmt == "json_schema" and _FORMAT.search(text):
                if self.cfg.structured == "on":
                    return None, f"the endpoint refuses the reply's JSON schema as response_format ({text})"
                self.request.format_refused = True  # asked as text from the next round on, under the key of that
            elif response.get("status_code") == 400:
                self.request.adapt(self.request.params(), text)  # a parameter the model refuses: dropped next round
            return None, f"HTTP {response.get('status_code')}: {text}"
        return None, "a result line with neither response nor error"

    def _chat_reply(self, done: Any, key: str, params: dict[str, Any], batch_id: str, fmt: ReplyFormat) -> ChatReply:
        factor = 1 - self.discount
        if done.prompt_tokens is None or done.completion_tokens is None:  # no usage: charged the worst
            pt, ct = 0, 0
            full = cost(self.price, 0, self.cfg.max_tokens)
            spent = self._reserved.get(key) if key in self._reserved else (full * factor if full is not None else None)
        else:
            pt, ct = done.prompt_tokens, done.completion_tokens
            full = cost(self.price, pt, ct, done.cached_tokens)
            spent = round(full * factor, 8) if full is not None else None
        return ChatReply(
            content=done.content,
            reasoning=done.reasoning,
            prompt_tokens=pt,
            completion_tokens=ct,
            reasoning_tokens=done.reasoning_tokens,
            cost_usd=spent,
            cached=False,
            params=params,
            seconds=0.0,
            key=key,
            cached_tokens=done.cached_tokens,
            reply_format=fmt,
            batch_id=batch_id,
            finish_reason=done.finish_reason,
        )


_BLOCK = 2**16
"""Bytes a result file is read by."""
_CUSTOM_ID = re.compile(rb'"custom_id"\s*:\s*"(rose-[0-9a-f]{32})"')
_ID_OVERLAP = 64
"""Bytes kept from one block to the next while a long line's custom id is looked for."""


@dataclass(slots=True)
class _Long:
    """A line past the cap: its custom id once seen, and how long it is so far."""

    custom_id: str | None
    size: int


class _Lines:
    """A byte stream cut into lines of at most ``cap`` bytes: a longer one is kept no further than its custom
    id (:class:`_Long`). Holds one line at most."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.buf = bytearray()
        self.long: _Long | None = None
        self.tail = b""

    def feed(self, chunk: bytes) -> Iterator[bytes | _Long]:
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            piece = chunk[start:] if nl == -1 else chunk[start:nl]
            if self.long is None and len(self.buf) + len(piece) > self.cap:
                self.long = _Long(None, len(self.buf))
                self.tail = bytes(self.buf[-_ID_OVERLAP:])
                self._seek_id(bytes(self.buf))
                self.buf = bytearray()
            if self.long is not None:
                self.long.size += len(piece)
                self._seek_id(self.tail + piece)
                self.tail = (self.tail + piece)[-_ID_OVERLAP:]
            else:
                self.buf += piece
            if nl == -1:
                return
            yield self._done()
            start = nl + 1

    def end(self) -> Iterator[bytes | _Long]:
        if self.buf or self.long is not None:
            yield self._done()

    def _seek_id(self, data: bytes) -> None:
        assert self.long is not None
        if self.long.custom_id is None and (m := _CUSTOM_ID.search(data)) is not None:
            self.long.custom_id = m.group(1).decode()

    def _done(self) -> bytes | _Long:
        line: bytes | _Long = self.long if self.long is not None else bytes(self.buf)
        self.buf, self.long, self.tail = bytearray(), None, b""
        return line


def _result_line(line: bytes | _Long, cap: int) -> dict[str, Any] | str | None:
    """A result line as a JSON object; a line past the cap as ``"<custom id>\\0<why>"`` (None without an id
    to charge it to: nothing can be done with it); None for a line that is not a JSON object."""
    if isinstance(line, _Long):
        if line.custom_id is None:
            return None
        return f"{line.custom_id}\0the result line has more than {cap} bytes ({line.size}), read no further"
    try:
        parsed = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None
