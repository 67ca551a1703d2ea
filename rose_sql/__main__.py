"""``python -m rose_sql`` and the ``rose`` command.

Ctrl-C at any moment ends the command with status 130 and one line on standard error, never a
traceback: :func:`run` imports the command group inside its own guard (``import rose_sql`` loads
nothing else), and each command that runs long says what it kept and what continues it.
"""

import sys

from rose_sql.errors import exit_interrupted


def run() -> None:
    """The ``rose`` command."""
    try:
        from rose_sql.cli.main import main

        main()
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        exit_interrupted()


if __name__ == "__main__":
    run()
