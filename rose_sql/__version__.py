"""The version of rose-sql (a leaf: every module may read it without importing the package's public API)."""

__version__ = "0.1.0"
