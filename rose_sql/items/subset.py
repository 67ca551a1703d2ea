"""A subset of a run's items (``rose run --limit N``, ``--ids FILE``), and what the manifest says of it.

``--limit N`` keeps the first N items of each input in its order (all of them when it has fewer);
``--ids FILE`` keeps the items whose ids the file lists, one per line, in the file's order: blank lines
and lines starting with ``#`` are skipped, surrounding spaces ignored; an id listed twice, an id that
no item has, or a file with no id is refused (exit 2) naming the file and the line. The items outside a
subset are not part of the run: they are no record, no ``no_prediction`` and no denominator, and every
view of the run says it is a subset of how many items (:class:`rose_sql.provenance.SubsetInfo`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rose_sql.config import Subset
from rose_sql.errors import InputError
from rose_sql.items.load import UNPREDICTED_TAIL, Item, Loaded, unpredicted_warning


def read_ids(path: Path) -> list[tuple[int, str]]:
    """The ids of an ids file with their line numbers (from 1); InputError for an unreadable or empty file
    or an id listed twice."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text ({e.reason} at byte {e.start}): list one item id per line") from None
    except OSError as e:
        raise InputError(path, f"cannot read the ids file: {e.strerror or e}") from None
    ids: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        item_id = line.strip()
        if not item_id or item_id.startswith("#"):
            continue
        if item_id in seen:
            raise InputError(path, f"id {item_id!r} is listed twice (first on line {seen[item_id]})", where=number)
        seen[item_id] = number
        ids.append((number, item_id))
    if not ids:
        raise InputError(path, "lists no item id (one per line; blank lines and # comments are skipped)")
    return ids


def select(loaded: Loaded, subset: Subset, ids: list[tuple[int, str]] | None = None) -> list[Item]:
    """The items of ``loaded`` in ``subset``: the first ``limit``, or those ``ids`` lists (read from
    ``subset.ids`` when not given), in the order of the ids file. InputError for an id no item has."""
    if subset.ids is None:
        return loaded.items if subset.limit is None else loaded.items[: subset.limit]
    by_id = {str(it.id): it for it in loaded.items}
    chosen = []
    for number, item_id in ids if ids is not None else read_ids(subset.ids):
        item = by_id.get(item_id)
        if item is None:
            raise InputError(
                subset.ids, f"id {item_id!r} is not an item of {loaded.path} ({len(loaded.items)} items)", where=number
            )
        chosen.append(item)
    return chosen if subset.limit is None else chosen[: subset.limit]


def restrict(loaded: Loaded, chosen: list[Item]) -> Loaded:
    """``loaded`` with only the ``chosen`` items, its warning about questions without a prediction said of
    them alone: a question outside the subset is not a missing prediction."""
    warnings = [w for w in loaded.warnings if not w.endswith(UNPREDICTED_TAIL)]
    absent = [it.id for it in chosen if it.pred_sql is None]
    if absent:
        warnings.append(unpredicted_warning(loaded.path, absent, f"the subset's {len(chosen)} questions"))
    return replace(loaded, items=chosen, warnings=warnings)
