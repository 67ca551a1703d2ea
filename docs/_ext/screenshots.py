"""Placeholder, replaced below."""


def setup(app):  # type: ignore[no-untyped-def]
    return {"parallel_read_safe": True}
