"""Compare: our typed result comparator (:mod:`~rose_sql.comparison.comparator`), which says why two results
differ, and the bounded matching of their columns (:mod:`~rose_sql.comparison.columns`)."""

from rose_sql.comparison.comparator import Comparison, compare

__all__ = ["Comparison", "compare"]
