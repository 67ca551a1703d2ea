"""Load: input files read within bounds (:mod:`~rose_sql.items.readers`), their values checked
(:mod:`~rose_sql.items.fields`), one small loader per format (:mod:`~rose_sql.items.load`) giving
:class:`Item` records, and a run's subset of them (:mod:`~rose_sql.items.subset`)."""

from rose_sql.items.load import FORMATS, Item, ItemId, Loaded, detect_format, load_gold, load_items

__all__ = ["FORMATS", "Item", "ItemId", "Loaded", "detect_format", "load_gold", "load_items"]
