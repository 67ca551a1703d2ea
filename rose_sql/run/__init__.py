"""Run: one item start to finish (:mod:`~rose_sql.run.evaluate`), whole prediction files with resume
(:mod:`~rose_sql.run.runner`), the Batch API's rounds (:mod:`~rose_sql.run.batch`), the dry run
(:mod:`~rose_sql.run.estimate`), the rules between options (:mod:`~rose_sql.run.checks`), which BIRD
release the databases are (:mod:`~rose_sql.run.releases`) and a shard's share of the items
(:mod:`~rose_sql.run.shard`)."""
