"""Where the databases are: a folder of SQLite files, or a URL naming another engine's database(s).

``--db`` (and ``--db-root``, its older name) takes either. A folder (or ``sqlite:///folder``) is today's
``<folder>/<db_id>/<db_id>.sqlite`` layout and stays a plain :class:`~pathlib.Path` everywhere, so the
SQLite path is untouched. A URL becomes a :class:`Source`:

- ``postgresql://user@host:5432/bird`` (or ``postgres://``), ``mysql://root@127.0.0.1:3306/BIRD``
  (MySQL and MariaDB; ``mariadb://`` is the same): one database shared by every ``db_id``, as BIRD
  mini-dev keeps all its databases' tables in one PostgreSQL or MySQL database;
- the same with a ``{db_id}`` placeholder (``postgresql://host/{db_id}``): one database per ``db_id``;
- ``duckdb:///path/file.duckdb`` (one shared file), ``duckdb:///path/{db_id}.duckdb``, or
  ``duckdb:///path/folder`` (a folder of ``<db_id>.duckdb`` files).

:meth:`Source.locate` gives the :class:`Remote` database of a ``db_id``: what the sandbox, the judges'
schema reader and the evidence stage are handed instead of a file path. Passwords never leave this
module in text meant for people (:attr:`Remote.shown`, :attr:`Source.shown`).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Kind = Literal["postgresql", "mysql", "duckdb"]
"""The engines a URL can name (SQLite is a folder)."""
SCHEMES: dict[str, Kind] = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "mysql": "mysql",
    "mariadb": "mysql",
    "duckdb": "duckdb",
}
DIALECTS: dict[Kind, str] = {"postgresql": "postgres", "mysql": "mysql", "duckdb": "duckdb"}
"""sqlglot's name of each engine's dialect."""
EXTRAS: dict[Kind, tuple[str, str]] = {
    "postgresql": ("psycopg", "postgres"),
    "mysql": ("pymysql", "mysql"),
    "duckdb": ("duckdb", "duckdb"),
}
"""The client library each engine needs, and the extra that installs it (``pip install 'rose-sql[postgres]'``)."""
PLACEHOLDER = "{db_id}"
DUCKDB_SUFFIX = ".duckdb"


@dataclass(frozen=True, slots=True)
class Source:
    """Databases on one engine, named by a URL (see the module docstring)."""

    kind: Kind
    """The engine."""
    url: str
    """The URL as given (a ``{db_id}`` placeholder kept)."""

    @property
    def dialect(self) -> str:
        """sqlglot's dialect of this engine."""
        return DIALECTS[self.kind]

    @property
    def per_db(self) -> bool:
        """Whether each ``db_id`` has its own database (else one is shared by all)."""
        return PLACEHOLDER in self.url or (self.kind == "duckdb" and not _duckdb_file(self.url))

    @property
    def shown(self) -> str:
        """The URL without its password."""
        return redact(self.url)

    def locate(self, db_id: str) -> Remote:
        """The database that holds ``db_id``'s tables."""
        if self.kind == "duckdb":
            path = _duckdb_path(self.url)
            if PLACEHOLDER in path:
                path = path.replace(PLACEHOLDER, db_id)
            elif not _duckdb_file(self.url):
                path = str(Path(path) / f"{db_id}{DUCKDB_SUFFIX}")
            return Remote(self, db_id, path)
        if PLACEHOLDER in self.url:
            return Remote(self, db_id, self.url.replace(PLACEHOLDER, urllib.parse.quote(db_id, safe="")))
        return Remote(self, db_id, self.url)

    def __str__(self) -> str:
        return self.shown


@dataclass(frozen=True, slots=True)
class Remote:
    """One database on an engine other than SQLite: what the stages pass where a SQLite file is a Path."""

    source: Source
    """Where it was found."""
    db_id: str
    """The db_id it serves."""
    target: str
    """The URL of the database (a DuckDB file's path), placeholder filled in."""

    @property
    def kind(self) -> Kind:
        return self.source.kind

    @property
    def dialect(self) -> str:
        return self.source.dialect

    @property
    def shown(self) -> str:
        """Where it is, for people (no password); a shared database names the db_id it serves."""
        where = redact(self.target) if self.kind != "duckdb" else f"duckdb://{self.target}"
        return where if self.source.per_db or not self.db_id else f"{where} (db_id {self.db_id})"

    @property
    def key(self) -> tuple[str, int, int]:
        """Identity for the execution cache: the database itself (a query means the same whatever
        db_id asked for it in a shared database)."""
        return (f"{self.kind}:{self.target}", 0, 0)

    def __str__(self) -> str:
        return self.shown


def parse(text: str | Path) -> Path | Source:
    """A ``--db`` value: a folder of SQLite databases (a Path) or an engine's URL (a Source)."""
    if isinstance(text, Path):
        return text
    scheme, sep, rest = text.partition("://")
    if not sep:
        return Path(text)
    name = scheme.lower()
    if name == "sqlite":
        return Path(rest)
    if name not in SCHEMES:
        from rose_sql.errors import UsageError

        known = ", ".join(f"{s}://" for s in SCHEMES)
        raise UsageError(f"--db {redact(text)}: unknown scheme {scheme!r}; use a folder of SQLite files or {known}")
    return Source(SCHEMES[name], text)


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _duckdb_path(url: str) -> str:
    return url.partition("://")[2]


def _duckdb_file(url: str) -> bool:
    """Whether a DuckDB URL names one file (not a folder of ``<db_id>.duckdb``)."""
    path = _duckdb_path(url)
    if PLACEHOLDER in path:
        return False
    p = Path(path)
    return not p.is_dir() and (p.suffix != "" or p.is_file())
