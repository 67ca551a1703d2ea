"""One call run alone in a fresh process, within a deadline: how a runaway is confirmed before it counts.

A statement that a wall clock stopped (SQLite's wall-clock guard, a server's ``statement_timeout`` or
``max_execution_time``, the worker's guard that stopped its process) may have been slowed by the machine
rather than by its own work. :func:`call_alone` runs it again in a process of its own that runs nothing
else, started for it and stopped after it: a fresh interpreter (``sys.executable``, the caller's
``sys.path``) that imports the target, says it is ready, makes the one call and sends back its value.
The deadline counts from the moment the child is ready, so the interpreter's start is not the
statement's; past it the child is killed, whatever call it is in (one SQLite cannot interrupt
included). A child also leaves by itself when the process that started it is gone.

Calls in one process are confirmed one at a time (:data:`_ONE_AT_A_TIME`), so that two confirmations
never compete for the same cores.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

READY = b"R"
"""What the child writes once it has imported the target and read the request, before the call."""
START_S = 120.0
"""Seconds a fresh interpreter may take to import the target and read its request (not counted against
the call's deadline): on a loaded machine, importing the package takes seconds."""
_ONE_AT_A_TIME = threading.Lock()
_STDERR_TAIL = 2000


@dataclass(frozen=True, slots=True)
class Alone:
    """How a call run alone ended."""

    outcome: Literal["done", "past", "failed"]
    """``done``: it returned (``value``); ``past``: it was still running at its deadline and was killed;
    ``failed``: the child could not run it (it did not start, died, or raised: ``why``)."""
    value: Any = None
    seconds: float = 0.0
    """From the child's readiness to its answer (or to the kill)."""
    why: str | None = None


def call_alone(target: str, request: Any, seconds: float) -> Alone:
    """``target(request)`` (``module:function``, imported in the child) in a fresh process, killed when it
    has not answered ``seconds`` after it started the call. ``request`` and the value are pickled."""
    with _ONE_AT_A_TIME:
        return _call(target, request, seconds)


def _call(target: str, request: Any, seconds: float) -> Alone:
    module, _, function = target.partition(":")
    code = (
        f"import sys; sys.path[:0] = {[p for p in sys.path if p]!r}; "
        f"from rose_sql.engines.alone import child; child({module!r}, {function!r})"
    )
    payload = pickle.dumps(request)
    with tempfile.TemporaryFile() as stderr:
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
            )
        except OSError as e:
            return Alone("failed", why=f"a fresh process could not be started: {e}")
        ready = threading.Event()
        box: dict[str, Any] = {}
        reader = threading.Thread(target=_read, args=(proc, payload, ready, box), daemon=True)
        reader.start()
        try:
            if not ready.wait(START_S):
                return Alone("failed", why=_died(proc, stderr, f"it did not start within {START_S:g} s"))
            started = box.get("ready_at", time.monotonic())
            reader.join(max(0.0, started + seconds - time.monotonic()))
            took = time.monotonic() - started
            if reader.is_alive():
                return Alone("past", seconds=took)
            if "value" not in box:
                return Alone("failed", seconds=took, why=_died(proc, stderr, "it ended without an answer"))
            kind, value = box["value"]
            if kind == "raised":
                return Alone("failed", seconds=took, why=str(value))
            return Alone("done", value, took)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            reader.join(5)


def _read(proc: subprocess.Popen[bytes], payload: bytes, ready: threading.Event, box: dict[str, Any]) -> None:
    """The parent's side of the pipe: send the request, note readiness, read the answer."""
    assert proc.stdin is not None and proc.stdout is not None
    try:
        with contextlib.suppress(OSError):
            proc.stdin.write(payload)
            proc.stdin.close()
        first = proc.stdout.read(1)
        if first != READY:
            return
        box["ready_at"] = time.monotonic()
        ready.set()
        data = proc.stdout.read()
        if data:
            box["value"] = pickle.loads(data)
    except Exception as e:  # an answer that does not unpickle: a failure of the confirmation, not a runaway
        box["value"] = ("raised", f"the answer could not be read: {type(e).__name__}: {e}")
    finally:
        ready.set()  # an early end wakes the waiting parent too


def _died(proc: subprocess.Popen[bytes], stderr: Any, what: str) -> str:
    if proc.poll() is None:
        proc.kill()
    code = proc.wait()
    stderr.seek(0)
    tail = stderr.read()[-_STDERR_TAIL:].decode("utf-8", errors="replace").strip()
    return f"{what} (exit code {code})" + (f": {tail.splitlines()[-1]}" if tail else "")


def child(module: str, function: str) -> None:
    """The child's side: leave with the parent, read the request, call the target, write its value."""
    import importlib

    parent = os.getppid()
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    request = pickle.load(sys.stdin.buffer)
    fn = getattr(importlib.import_module(module), function)
    out = sys.stdout.buffer
    out.write(READY)
    out.flush()
    try:
        answer: tuple[str, Any] = ("value", fn(request))
    except Exception as e:  # said to the parent: a failure of the confirmation
        answer = ("raised", f"{type(e).__name__}: {e}")
    try:
        data = pickle.dumps(answer)
    except Exception as e:
        data = pickle.dumps(("raised", f"the answer could not be sent: {type(e).__name__}: {e}"))
    out.write(data)
    out.flush()


def _exit_with(parent: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)
