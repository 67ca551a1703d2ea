"""Administration beside the CLI, for people who run the databases: ``rose db copy`` (a SQLite database
built in another engine, :mod:`~rose_sql.tools.copy`) and ``rose db reader`` (a role that can only read,
:mod:`~rose_sql.tools.reader`). They take an administrator's URL by design; nothing of an evaluation runs
through them."""
