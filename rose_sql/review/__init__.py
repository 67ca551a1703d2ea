"""``rose review``: a local web app where experts label items, measure their own agreement and build
validation sets.

The state (projects, items, annotators, every label) is one SQLite file (:mod:`~rose_sql.review.store`);
items come from runs and input files (:mod:`~rose_sql.review.work`); who labels what, the consensus
and the agreement are pure functions (:mod:`~rose_sql.review.agreement`); the ROSE authors'
per-annotator files come in and the consensus goes out in ROSE-VEC's format
(:mod:`~rose_sql.review.exchange`). Only the web part needs the optional extra (``pip install
'rose-sql[review]'``): the app (:mod:`~rose_sql.review.app`), who may drive it
(:mod:`~rose_sql.review.guard`), the item page (:mod:`~rose_sql.review.page`) and the server
(:mod:`~rose_sql.review.serve`).
"""
