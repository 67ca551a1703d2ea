"""Compare: our typed result comparator (:mod:`~rose_sql.compare.comparator`), which says why two results
differ, and the bounded matching of their columns (:mod:`~rose_sql.compare.columns`)."""

from rose_sql.compare.comparator import Comparison, compare

__all__ = ["Comparison", "compare"]
