"""Every default of ``rose review``, in one frozen configuration built at the entry point.

The review app lives in its own subpackage (its web dependencies are an optional extra), so its
defaults sit here rather than in :mod:`rose_sql.config`; the CLI reads them from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rose_sql.config import Config, console_config

LOOPBACK = ("127.0.0.1", "localhost", "::1")
"""Host names that always reach the app when it listens on loopback."""


@dataclass(frozen=True, slots=True)
class ReviewConfig:
    """How the review app listens, what it shows and how it assigns work."""

    state: Path
    """The SQLite file holding projects, items, annotators and every label."""
    host: str = "127.0.0.1"
    """Address to bind: loopback by default (a local tool, not a public service)."""
    port: int = 8765
    """TCP port (0: any free one)."""
    allowed_hosts: tuple[str, ...] = ()
    """Extra names the ``Host`` header may carry (besides loopback and ``host``), e.g. a LAN name."""
    labels_per_item: int = 2
    """Independent labels each item is assigned to; one more is asked where they disagree."""
    claim_minutes: float = 20.0
    """An item opened by an annotator who still owes it a label is held for them this long."""
    shown_rows: int = 20
    """Rows of each result shown on the item page (row counts are always whole)."""
    cell_chars: int = 300
    """Longer cells are cut on the page (the cut is said)."""
    examples_per_column: int = 3
    """Example values shown per column in the schema."""
    query: Config = field(default_factory=console_config)
    """The sandbox's limits for the page's executions (:func:`rose_sql.config.console_config`)."""
