"""The labelled items a judge is calibrated on: those whose database is at hand.

``rose calibrate`` runs the cascade on a labelled set and measures agreement with its labels. The
set is a file in ROSE-VEC's format (``{question_id, db_id, question, evidence, predicted_sql,
gold_sql, label, ...}``): ROSE-VEC's own parts, or the export of ``rose review``. An item can be
judged only where its database exists, so each part is cut down to those items (:func:`select`),
and the rest are counted by database, never dropped silently. The kept items are written as one
file (:func:`write_part`) that is both what ``rose run`` evaluates and the labels agreement reads;
the experts' GoldX / AmbQ id lists are cut down the same way. The files are written byte for byte
the same from the same data and databases, so two judges calibrated apart get cards with the same
validation-set digest, which the upgrade rule requires.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rose_sql.analysis.labels import Flag, id_order, key, read_ids
from rose_sql.engines import Source
from rose_sql.errors import InputError

ROSE_VEC_PARTS = ("rose-vec-bird.json", "rose-vec-spider.json")
"""ROSE-VEC's two parts, in its folder."""
ROSE_VEC_TAGS: dict[str, dict[Flag, str]] = {
    "rose-vec-bird.json": {
        "goldx": "historical_51e2685/gold_false_ids.json",
        "ambq": "historical_51e2685/ambq_ids.json",
    }
}
"""The experts' GoldX and AmbQ id lists of each part, relative to the ROSE-VEC folder (Spider has none)."""
EXPORT_TAGS: dict[Flag, str] = {"goldx": "gold_false_ids.json", "ambq": "ambq_ids.json"}
"""The id lists ``rose review --export`` writes beside its consensus file."""
_REQUIRED = ("question_id", "db_id", "predicted_sql", "gold_sql", "label")


@dataclass(frozen=True, slots=True)
class Labelled:
    """One labelled file to calibrate on, and the experts' tag lists that go with it."""

    path: Path
    """The labelled items (ROSE-VEC format)."""
    tags: dict[Flag, Path] = field(default_factory=dict)
    """Id lists of the items the experts tagged GoldX / AmbQ, where they exist."""


@dataclass(frozen=True, slots=True)
class Part:
    """The items of one labelled file that can be judged here."""

    name: str
    """The subset's name: the file's stem (``rose-vec-bird``), which names its run and label set too."""
    source: Labelled
    """Where the items came from."""
    kept: list[dict[str, Any]]
    """The items whose database exists, as read."""
    total: int
    """Items in the file."""
    missing: dict[str, int]
    """Items skipped because their database is absent, by ``db_id``."""
    checked: bool = True
    """False when the databases are behind a URL: presence is not checked, every item is kept."""

    @property
    def skipped(self) -> int:
        """Items left out."""
        return self.total - len(self.kept)


def rose_vec_sources(folder: Path) -> list[Labelled]:
    """ROSE-VEC's parts in ``folder`` (its BIRD part with the experts' GoldX and AmbQ lists)."""
    if not folder.is_dir():
        raise InputError(folder, "not a folder: --rose-vec takes the ROSE-VEC folder (holding rose-vec-bird.json)")
    tags = {name: {f: folder / p for f, p in ROSE_VEC_TAGS.get(name, {}).items()} for name in ROSE_VEC_PARTS}
    found = [
        Labelled(folder / name, {f: p for f, p in tags[name].items() if p.is_file()})
        for name in ROSE_VEC_PARTS
        if (folder / name).is_file()
    ]
    if not found:
        raise InputError(folder, f"no ROSE-VEC file here ({' or '.join(ROSE_VEC_PARTS)})")
    return found


def labelled_source(path: Path) -> Labelled:
    """A labelled file such as ``rose review``'s export, with the tag lists found beside it."""
    return Labelled(path, {f: path.parent / n for f, n in EXPORT_TAGS.items() if (path.parent / n).is_file()})


def read_items(path: Path) -> list[dict[str, Any]]:
    """A ROSE-VEC-format file: a JSON list of labelled items with their SQL (read at most
    :data:`~rose_sql.config.MAX_INPUT_BYTES`, as every labels file)."""
    from rose_sql.config import MAX_INPUT_BYTES
    from rose_sql.items.readers import read_capped

    try:
        data = json.loads(read_capped(path, MAX_INPUT_BYTES, "a labelled set").decode("utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise InputError(path, f"not a JSON labelled set: {e}") from None
    if not isinstance(data, list) or not data:
        raise InputError(path, "expected a non-empty JSON list of labelled items (ROSE-VEC format)")
    for i, row in enumerate(data):
        lacking = [f for f in _REQUIRED if not isinstance(row, dict) or f not in row]
        if lacking:
            raise InputError(path, f"item {i} lacks {', '.join(lacking)} (ROSE-VEC format: {', '.join(_REQUIRED)})")
    return data


def select(source: Labelled, db_root: Source) -> Part:
    """The items of ``source`` whose database is under ``db_root`` (all of them behind a URL)."""
    rows = read_items(source.path)
    if db_root.folder_path is None:
        return Part(source.path.stem, source, rows, len(rows), {}, checked=False)
    present = {d: db_root.locate(d).path.is_file() for d in {str(r["db_id"]) for r in rows}}
    kept = [r for r in rows if present[str(r["db_id"])]]
    missing = Counter(str(r["db_id"]) for r in rows if not present[str(r["db_id"])])
    return Part(source.path.stem, source, kept, len(rows), dict(missing.most_common()))


def write_part(part: Part, folder: Path) -> tuple[Path, dict[Flag, Path]]:
    """Write the kept items as ``folder/<name>.json`` and the tag lists cut down to them; returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    items = folder / f"{part.name}.json"
    items.write_text(json.dumps(part.kept, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    ids = {key(r["question_id"]) for r in part.kept}
    tags: dict[Flag, Path] = {}
    for flag, path in part.source.tags.items():
        tagged = sorted((i for i in read_ids(path) if i in ids), key=id_order)
        tags[flag] = folder / f"{part.name}.{flag}_ids.json"
        tags[flag].write_text(json.dumps(tagged) + "\n", encoding="utf-8")
    return items, tags


def describe(part: Part, db_root: Source) -> str:
    """One line: what was kept of a part, and why the rest was skipped."""
    if not part.checked:
        return f"{part.name}: {part.total} items (databases behind a URL: their presence is not checked here)"
    dbs = sorted({str(r["db_id"]) for r in part.kept})
    line = f"{part.name}: {len(part.kept)} of {part.total} items kept"
    line += f" (databases present: {', '.join(dbs)})" if dbs else ""
    if part.skipped:
        shown = ", ".join(f"{d} {n}" for d, n in list(part.missing.items())[:6])
        more = f" and {len(part.missing) - 6} more databases" if len(part.missing) > 6 else ""
        line += (
            f"; {part.skipped} skipped because their database is not under {db_root} "
            f"(<db_id>/<db_id>.sqlite): {shown}{more}"
        )
    return line
