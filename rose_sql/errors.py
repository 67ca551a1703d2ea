"""One exception family for caller mistakes.

Problems with a single item (a prediction that fails, a gold that times out, a missing
database) are never raised: they are data on that item's record. Exceptions are for
mistakes that stop a whole run before it starts, and the CLI turns them into messages::

    RoseError                 base of everything ROSE-SQL raises on purpose
     +-- InputError           a file cannot be read or parsed; names the file and line or key
     +-- UsageError           options that contradict each other or name nothing usable
"""

from __future__ import annotations

from pathlib import Path


class RoseError(Exception):
    """Base class of every error ROSE-SQL raises on purpose."""


class InputError(RoseError):
    """An input file is missing, unreadable or malformed."""

    def __init__(self, path: str | Path, message: str, *, where: str | int | None = None) -> None:
        self.path = str(path)
        self.where = where
        location = self.path if where is None else f"{self.path}:{where}"
        super().__init__(f"{location}: {message}")


class UsageError(RoseError):
    """Options or arguments that cannot work together."""
