"""Administration beside the CLI, for people who run the databases: ``rose db copy`` (a SQLite database
built in another engine, :mod:`~rose_sql.engines.admin.copy`) and ``rose db reader`` (a role that can only
read, :mod:`~rose_sql.engines.admin.reader`). They take an administrator's URL by design and speak each
engine's own DDL and grants, so they live with the engines; nothing of an evaluation runs through them."""
