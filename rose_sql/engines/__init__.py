"""Database engines: one module each, for what differs between them (opening a user's database
read-only, what a query may do, what the catalogue says).

- :mod:`~rose_sql.engines.sqlite`: SQLite files, the executor's own fast path (:mod:`rose_sql.execute`);
- :mod:`~rose_sql.engines.base`: the :class:`~rose_sql.engines.base.Engine` protocol the others implement
  (open a pooled read-only connection, run one statement with limits, cancel, describe the schema), the
  function policy and capped fetching they share;
- :mod:`~rose_sql.engines.postgres`, :mod:`~rose_sql.engines.mysql` (MySQL and MariaDB),
  :mod:`~rose_sql.engines.duckdb`: the engines, each loaded only when a URL names it;
- :mod:`~rose_sql.engines.source`: what ``--db`` names (a folder of SQLite files or a URL), and where a
  db_id's database is;
- :mod:`~rose_sql.engines.copy` (``rose db copy``) and :mod:`~rose_sql.engines.roles` (``rose db reader``).
"""
