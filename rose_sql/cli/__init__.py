"""The ``rose`` command: the only place where exceptions become messages and exit codes, and the only
place that prints. One module per command group; :mod:`rose_sql.cli.main` holds the group."""

from rose_sql.cli.main import main

__all__ = ["main"]
