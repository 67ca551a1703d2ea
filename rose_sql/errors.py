"""The one exception tree of ROSE-SQL.

Problems with a single item (a prediction that fails, a gold that times out, a missing database, a
judge that never answers usefully, a spent budget) are never raised out of a run: they are data on
that item's record. The first group below stops a whole run before it starts, and the CLI turns it
into a message; the second is raised inside a stage and caught one level up, where it becomes data
on the item; the third belongs to the RL reward::

    RoseError                 base of everything ROSE-SQL raises on purpose
     |   caller mistakes: shown to the user by the CLI (exit status 2)
     +-- InputError           a file cannot be read or parsed; names the file and line or key
     +-- UsageError           options that contradict each other or name nothing usable
     |   infrastructure: stops a run that has started (exit status 2), what was recorded kept
     +-- EndpointUnreachable  the judge's endpoint cannot be reached, or refuses the key, at the first call
     |   judge failures: caught by the judge walk, recorded on the item
     +-- ReplyError           a judge's reply holds no valid JSON object of the expected shape
     +-- EndpointError        the endpoint kept failing, or answered outside the protocol (raw text kept)
     +-- JudgeFailed          no valid reply after the re-asks, or the endpoint kept failing
     +-- BudgetExhausted      the budget forbids the next LLM call
     +-- Pending              a judge call a batch has not answered yet (rose run --batch: the item waits)
     |   the worker engine: caught by the run, recorded on the items of the unit
     +-- Lost                 a unit of work whose worker process died twice
     |   the evidence: caught by the engine's space, recorded on the item's evidence
     +-- CopyRefused          the witness search's private copy cannot be made (too large, too slow, refused)
     |   the reward
     +-- LabelError           a reward label names no gold SQL or no usable database (also a ValueError)
     +-- BadRequest           the reward server cannot read a request; answered with an HTTP status
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Any, NoReturn


class RoseError(Exception):
    """Base class of every error ROSE-SQL raises on purpose."""


class InputError(RoseError):
    """An input file is missing, unreadable or malformed (shown to the user; the run does not start)."""

    def __init__(self, path: str | Path, message: str, *, where: str | int | None = None) -> None:
        self.path = str(path)
        self.where = where
        location = self.path if where is None else f"{self.path}:{where}"
        super().__init__(f"{location}: {message}")


class UsageError(RoseError):
    """Options or arguments that cannot work together (shown to the user; the run does not start)."""


class EndpointUnreachable(RoseError):
    """The judge's endpoint cannot be reached, or refuses the key, before a run's first uncached call (exit 2)."""


class ReplyError(RoseError):
    """A judge's reply holds no valid JSON object of the expected shape (re-asked; kept as the call's error)."""


class EndpointError(RoseError):
    """The endpoint kept failing, missed the deadline or broke the protocol (item: ``judge_error``)."""

    def __init__(self, message: str, raw: str = "") -> None:
        super().__init__(message)
        self.raw = raw
        """The beginning of what the endpoint sent, when it sent something: it goes on the call."""


class JudgeFailed(RoseError):
    """No valid reply after the re-asks (``judge_invalid``), or the endpoint failed (``judge_error``)."""

    def __init__(self, message: str, calls: Sequence[Any], *, invalid: bool = False) -> None:
        super().__init__(message)
        self.calls = list(calls)
        """The calls made (:class:`rose_sql.record.JudgeCall`), raw replies included: they go on the item's
        record. Typed loosely: the record imports this module, not the other way round."""
        self.invalid = invalid
        """True when the judge answered, but never validly; False when the endpoint failed."""


class BudgetExhausted(RoseError):
    """The budget forbids the next LLM call (the item is unscored ``budget_exhausted``, never shown as an error)."""

    def __init__(self, message: str = "budget exhausted", calls: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.calls = list(calls)
        """The calls this item made before the budget ran out (:class:`rose_sql.record.JudgeCall`): they go on
        its record."""


class Pending(RoseError):
    """A judge call whose reply no batch has brought yet (``rose run --batch``: the item waits for the next round)."""


class LabelError(RoseError, ValueError):
    """A reward label that does not say which gold SQL and database an item has (that item's reward error)."""


class BadRequest(RoseError):
    """A reward-server request body it cannot read (answered to the client with ``status`` and the message)."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status of the answer (400, 413)."""


class CopyRefused(RoseError):
    """The witness search's private copy of a database cannot be made; the message says why (the item's evidence)."""


class Lost(RoseError):
    """A unit of work whose worker process kept dying (caught by the run: its items are recorded unscored)."""


def exit_interrupted() -> NoReturn:
    """End the command at status 130 after Ctrl-C was caught (the line saying so already printed).

    CPython started as ``python -m`` notes a KeyboardInterrupt that leaves an ``exec`` or ``eval`` of source
    text (dataclasses and namedtuple build their methods so while modules load) and, once the interpreter has
    exited, kills the process with SIGINT even though the interrupt was caught: the status is -2, not 130.
    Evaluating source text once more clears that note (tests/test_interrupt.py sends the signal as rose starts)."""
    exec("")
    sys.exit(130)
