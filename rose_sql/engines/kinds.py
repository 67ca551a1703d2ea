"""Where the databases are: the list of engines, what ``--db`` names, and one item's database.

``--db`` (and ``--db-root``, its older name) names a :class:`Source`: a folder of SQLite files (or
``sqlite:///folder``), laid out ``<folder>/<db_id>/<db_id>.sqlite`` as BIRD and Spider ship them, or a URL
of another engine:

- ``postgresql://user@host:5432/bird`` (or ``postgres://``), ``mysql://root@127.0.0.1:3306/BIRD``
  (MySQL and MariaDB; ``mariadb://`` is the same): one database shared by every ``db_id``, as BIRD
  mini-dev keeps all its databases' tables in one PostgreSQL or MySQL database;
- the same with a ``{db_id}`` placeholder (``postgresql://host/{db_id}``): one database per ``db_id``;
- ``duckdb:///path/file.duckdb`` (one shared file), ``duckdb:///path/{db_id}.duckdb``, or
  ``duckdb:///path/folder`` (a folder of ``<db_id>.duckdb`` files).

:meth:`Source.locate` gives the :class:`Database` of a ``db_id``: the one value every stage is handed,
whatever the engine. :data:`KINDS` is the list of engines: adding one is one entry here, one engine
module and one space module (:mod:`rose_sql.engines.spaces`). Passwords never leave this module in text
meant for people (:attr:`Database.shown`, :attr:`Source.shown`).
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Kind = Literal["sqlite", "postgresql", "mysql", "duckdb"]
"""The engines."""
PLACEHOLDER = "{db_id}"


@dataclass(frozen=True, slots=True)
class KindInfo:
    """What the rest of the package may know about an engine, without loading it."""

    name: str
    """How people call it."""
    module: str
    """The engine's module (:class:`~rose_sql.engines.base.Engine` named ``ENGINE`` in it)."""
    space: str
    """The module of its private copies for the witness search (:mod:`rose_sql.engines.spaces`)."""
    dialect: str
    """sqlglot's name of its SQL dialect."""
    schemes: tuple[str, ...]
    """URL schemes that name it (a folder names SQLite)."""
    driver: str | None = None
    """The client library's module, when not the standard library's."""
    package: str | None = None
    """The distribution that installs the driver (its version goes in the manifest)."""
    extra: str | None = None
    """The extra that installs it (``pip install 'rose-sql[EXTRA]'``)."""
    suffix: str | None = None
    """For engines whose databases are files: their ending. A URL names one file, a ``{db_id}`` path, or a
    folder of ``<db_id><suffix>`` files (SQLite's folders are laid out as BIRD and Spider ship them)."""
    python_sqlite3: bool = False
    """The official scripts run it through Python's ``sqlite3`` (Spider's test suite, BIRD's SQLite script):
    their readings and quirks apply (an empty statement returns no rows, text that is not UTF-8 fails), and
    its engine does what those scripts do besides running a statement (:class:`~rose_sql.engines.base.Scripted`:
    Spider's reading of the schema, BIRD's step count, in the sandbox like any statement)."""
    timed: bool = False
    """Its engine times one execution as BIRD's ``evaluation_ves.py`` times it
    (:class:`~rose_sql.engines.base.TimedEngine`): the wall-time efficiency pass (``rose run --efficiency
    time``) runs on it. False: the pass is not run, and the summary leaves its items out as ``not_timed``."""

    @property
    def files(self) -> bool:
        """Its databases are files on this machine (identified by their content; placed by size on Ray)."""
        return self.suffix is not None


KINDS: dict[Kind, KindInfo] = {
    "sqlite": KindInfo(
        "SQLite",
        "rose_sql.engines.sqlite",
        "rose_sql.engines.spaces.sqlite",
        "sqlite",
        ("sqlite",),
        suffix=".sqlite",
        python_sqlite3=True,
        timed=True,
    ),
    "postgresql": KindInfo(
        "PostgreSQL",
        "rose_sql.engines.postgres",
        "rose_sql.engines.spaces.postgres",
        "postgres",
        ("postgresql", "postgres"),
        driver="psycopg",
        package="psycopg",
        extra="postgres",
        timed=True,
    ),
    "mysql": KindInfo(
        "MySQL/MariaDB",
        "rose_sql.engines.mysql",
        "rose_sql.engines.spaces.mysql",
        "mysql",
        ("mysql", "mariadb"),
        driver="pymysql",
        package="PyMySQL",
        extra="mysql",
        timed=True,
    ),
    "duckdb": KindInfo(
        "DuckDB",
        "rose_sql.engines.duckdb",
        "rose_sql.engines.spaces.duckdb",
        "duckdb",
        ("duckdb",),
        driver="duckdb",
        package="duckdb",
        extra="duckdb",
        suffix=".duckdb",
        timed=True,
    ),
}
"""The list of engines."""
SCHEMES: dict[str, Kind] = {scheme: kind for kind, info in KINDS.items() for scheme in info.schemes}
SERVERS = tuple(k for k, info in KINDS.items() if not info.files)
"""The engines whose databases live on a server (a scratch database can be made there)."""


@dataclass(frozen=True, slots=True)
class Database:
    """One item's database, on any engine: what the sandbox, the judges and the evidence are handed."""

    kind: Kind
    """The engine."""
    target: str
    """The file (SQLite, DuckDB) or the URL of the database, placeholder filled in."""
    db_id: str = ""
    """The db_id it serves."""
    shared: bool = False
    """Whether one database holds the tables of every db_id (BIRD mini-dev's layout on a server)."""

    @classmethod
    def file(cls, path: str | Path, db_id: str = "") -> Database:
        """A SQLite database file (a folder of them is :meth:`Source.folder`)."""
        return cls("sqlite", str(path), db_id or Path(path).stem)

    @property
    def info(self) -> KindInfo:
        return KINDS[self.kind]

    @property
    def dialect(self) -> str:
        return KINDS[self.kind].dialect

    @property
    def path(self) -> Path:
        """The file, for engines whose databases are files."""
        return Path(self.target)

    @property
    def shown(self) -> str:
        """Where it is, for people (no password); a shared database names the db_id it serves."""
        if self.info.python_sqlite3:  # a path, as BIRD and Spider name their files
            return self.target
        where = f"{self.info.schemes[0]}://{self.target}" if self.info.files else redact(self.target)
        return f"{where} (db_id {self.db_id})" if self.shared and self.db_id else where

    def __str__(self) -> str:
        return self.shown


@dataclass(frozen=True, slots=True)
class Source:
    """Databases on one engine, named by a folder or a URL (see the module docstring)."""

    kind: Kind
    """The engine."""
    url: str
    """The folder or the URL as given (a ``{db_id}`` placeholder kept)."""

    @classmethod
    def parse(cls, text: str | Path) -> Source:
        """A ``--db`` value: a folder of SQLite databases, or an engine's URL. Raises UsageError for an
        unknown scheme."""
        scheme, sep, rest = str(text).partition("://")
        if isinstance(text, Path) or not sep:
            return cls("sqlite", str(text))
        kind = SCHEMES.get(scheme.lower())
        if kind is None:
            from rose_sql.errors import UsageError

            known = ", ".join(f"{s}://" for s in SCHEMES)
            raise UsageError(
                f"--db {redact(str(text))}: unknown scheme {scheme!r}; use a folder of SQLite files or {known}"
            )
        return cls(kind, rest if kind == "sqlite" else str(text))

    @classmethod
    def folder(cls, path: str | Path) -> Source:
        """A folder of ``<db_id>/<db_id>.sqlite`` files."""
        return cls("sqlite", str(path))

    @property
    def info(self) -> KindInfo:
        return KINDS[self.kind]

    @property
    def dialect(self) -> str:
        """sqlglot's dialect of this engine."""
        return KINDS[self.kind].dialect

    @property
    def per_db(self) -> bool:
        """Whether each ``db_id`` has its own database (else one is shared by all)."""
        if self.kind == "sqlite":
            return True
        return PLACEHOLDER in self.url or (self.info.files and not _one_file(self.url))

    @property
    def shown(self) -> str:
        """The folder, or the URL without its password."""
        return redact(self.url)

    @property
    def folder_path(self) -> Path | None:
        """The folder of SQLite files this source names (None for a URL): where a SQLite file named by its
        path (a reward label's ``db_path``) is looked for."""
        return Path(self.url) if self.kind == "sqlite" else None

    @property
    def location(self) -> str:
        """Where it is, as a manifest records it: a folder resolved, a URL without its password."""
        return str(Path(self.url).resolve()) if self.kind == "sqlite" else self.shown

    def locate(self, db_id: str) -> Database:
        """The database that holds ``db_id``'s tables."""
        suffix = self.info.suffix
        if self.kind == "sqlite":  # a folder, laid out as BIRD and Spider ship them (once per item: no pathlib)
            return Database("sqlite", os.path.join(self.url, db_id, f"{db_id}{suffix}"), db_id)
        if suffix is not None:
            path = self.url.partition("://")[2]
            if PLACEHOLDER in path:
                path = path.replace(PLACEHOLDER, db_id)
            elif not _one_file(self.url):
                path = str(Path(path) / f"{db_id}{suffix}")
            return Database(self.kind, path, db_id, shared=not self.per_db)
        if PLACEHOLDER in self.url:
            return Database(self.kind, self.url.replace(PLACEHOLDER, urllib.parse.quote(db_id, safe="")), db_id)
        return Database(self.kind, self.url, db_id, shared=True)

    def __str__(self) -> str:
        return self.shown


def as_source(value: object) -> Source:
    """``value`` when it is a :class:`Source`; a TypeError saying how to make one otherwise (a folder or a URL
    passed where the API takes a Source is the caller's mistake, said before any item runs)."""
    if not isinstance(value, Source):
        raise TypeError(
            f"where the databases are is a rose_sql.Source, not {type(value).__name__}: "
            "Source.folder(path) for <path>/<db_id>/<db_id>.sqlite, Source.parse(url) for another engine"
        )
    return value


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


def _one_file(url: str) -> bool:
    """Whether a file engine's URL names one file (not a folder of ``<db_id>`` files)."""
    path = url.partition("://")[2]
    if PLACEHOLDER in path:
        return False
    p = Path(path)
    return not p.is_dir() and (p.suffix != "" or p.is_file())
