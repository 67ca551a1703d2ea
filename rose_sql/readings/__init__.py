"""Readings: the official metrics of one executed item, as the official scripts compute them.

:mod:`~rose_sql.readings.formulas` holds their rules (BIRD EX, Soft-F1, the test suite's comparison);
:mod:`~rose_sql.readings.official` reads them off an item's executions (the test suite's variant
databases included); :mod:`~rose_sql.readings.spider_match` is Spider's exact-set match and
:mod:`~rose_sql.readings.efficiency` BIRD's VES and R-VES."""

from rose_sql.readings.formulas import Readings

__all__ = ["Readings"]
