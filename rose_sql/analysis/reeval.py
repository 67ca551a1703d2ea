"""The ROSE paper's re-evaluation of published systems, imported against the benchmark it is over.

Their outputs for a system (``<system>/o3-<system>-eval``) carry no db_id, and their figure for a
system is a mean over whatever entries their run kept. So the import is checked against the benchmark
file (:func:`load_benchmark`: BIRD mini-dev by default, BIRD dev for ids outside it):

- each entry's db_id is the benchmark's, and its texts (question, evidence, gold SQL, difficulty) are
  compared with the benchmark's; where they differ the records say so (``imported.differs``) and a
  warning counts them (:func:`text_warnings`), naming how many of the differing golds equal another
  file's (BIRD dev's, before mini-dev corrected them);
- each benchmark id without an entry is a record, unscored ``failed_in_their_run`` when their run
  recorded it in ``problem_question_ids.json``, else ``absent_from_outputs`` (dropped silently), with the
  system's predictions file, when given, saying whether it had a prediction at all;
- the paper's figure is reproduced over its own entries and says so (:func:`entries_note`): ``over 488
  entries: 486 of mini_dev_sqlite.json's 498 ids and 2 outside it``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from rose_sql.accounting import NOT_EVALUATED
from rose_sql.analysis.labels import key
from rose_sql.analysis.rose_import import Entry, Frame, Imported, Reference, load_entries
from rose_sql.decide import Unscored
from rose_sql.errors import InputError, UsageError
from rose_sql.record import Record

DEFAULT_FILES = ("mini_dev_sqlite.json", "dev.json")
"""The benchmark files read from a BIRD data folder given as ``--benchmark``: mini-dev, then BIRD dev for the
ids outside it."""
PROBLEMS = "problem_question_ids.json"
"""Where their run recorded the items it failed on and left out (beside the system's output folders)."""


@dataclass(frozen=True, slots=True)
class Benchmark:
    """The benchmark an import is over (its first file), and other files that resolve ids outside it."""

    files: list[Path]
    """The files read, the benchmark first."""
    references: dict[str, list[Reference]]
    """By id (as text): the reference of each file that has the id, in the order of :attr:`files`."""
    ids: list[str]
    """The benchmark's ids (its first file's), in order, each once."""
    warnings: list[str] = field(default_factory=list)
    """What was odd about the files (an id repeated)."""

    @property
    def name(self) -> str:
        """The benchmark's file name."""
        return self.files[0].name


def load_benchmark(paths: Sequence[Path]) -> Benchmark:
    """The benchmark files: BIRD-format JSON lists (``question_id, db_id, question, evidence, SQL,
    difficulty``), the first being the benchmark. A folder stands for its ``mini_dev_sqlite.json`` and
    ``dev.json`` (those it holds; mini-dev is required)."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = [p / name for name in DEFAULT_FILES if (p / name).is_file()]
            if not (p / DEFAULT_FILES[0]).is_file():
                raise InputError(p, f"no {DEFAULT_FILES[0]} in this folder: pass the benchmark file itself")
            files += found
        else:
            files.append(p)
    if not files:
        raise UsageError("no benchmark file given")
    references: dict[str, list[Reference]] = {}
    ids: list[str] = []
    warnings: list[str] = []
    for n, path in enumerate(files):
        repeated: Counter[str] = Counter()
        for i, x in enumerate(load_entries(path)):
            if "db_id" not in x:
                raise InputError(path, "a benchmark entry without 'db_id'", where=f"[{i}]")
            k = key(x["question_id"])
            ref = _reference(x, path)
            have = references.setdefault(k, [])
            if have and have[-1].source == path.name:
                repeated[k] += 1
                if have[-1] != ref:
                    warnings.append(f"{path.name}: question {k} is repeated with other texts; the first is kept")
                continue
            have.append(ref)
            if n == 0:
                ids.append(k)
        if repeated:
            listed = ", ".join(sorted(repeated, key=int if all(r.isdigit() for r in repeated) else str))
            warnings.append(f"{path.name} repeats question ids {listed}: one item each (the first entry)")
    return Benchmark(files, references, ids, warnings)


def _reference(x: Entry, path: Path) -> Reference:
    return Reference(
        str(x.get("db_id") or ""),
        path.name,
        question=x.get("question"),
        evidence=x.get("evidence"),
        gold_sql=x.get("SQL") or x.get("gold_sql"),
        difficulty=x.get("difficulty"),
    )


def problem_ids(outputs: Path) -> set[str] | None:
    """The ids their run recorded as failed (``problem_question_ids.json`` beside the output folder), None
    when the file is not there."""
    path = outputs.parent / PROBLEMS
    if not path.is_file():
        return None
    from rose_sql.analysis.labels import read_ids

    return set(read_ids(path))


def prediction_ids(path: Path) -> set[str]:
    """The ids a system's predictions file (SQLExam format, a JSON list with ``question_id``) predicts."""
    return {key(x["question_id"]) for x in load_entries(path)}


def benchmark_frame(benchmark: Benchmark, outputs: Path, predictions: Path | None = None) -> Frame:
    """What an import of ``outputs`` is checked against: the benchmark's references (the benchmark's own
    first), its ids expected, and the reason an expected id has no entry."""
    problems = problem_ids(outputs)
    predicted = prediction_ids(predictions) if predictions is not None else None
    references = {k: refs[0] for k, refs in benchmark.references.items()}

    def absent(k: str) -> tuple[Unscored, str]:
        if problems is not None and k in problems:
            return "failed_in_their_run", f"no entry in their outputs: their run recorded it as failed ({PROBLEMS})"
        said = "not listed in " + PROBLEMS if problems is not None else f"no {PROBLEMS} to say why"
        why = f"no entry in their outputs and {said}: dropped silently"
        if predicted is not None and predictions is not None:
            has = "has a prediction for it" if k in predicted else "has no prediction for it"
            why += f"; the system's predictions file ({predictions.name}) {has}"
        return "absent_from_outputs", why

    return Frame(references, benchmark.ids, absent, benchmark.name)


def text_warnings(imported: Imported, benchmark: Benchmark) -> list[str]:
    """Where their entries' texts differ from the benchmark's, with counts (and, for the gold, how many of
    the differing golds equal another file's), one warning per field."""
    out: list[str] = []
    entries = [r for r in imported.records if r.imported is not None]
    for name in ("question", "evidence", "gold_sql", "difficulty"):
        differ = [r for r in entries if r.imported is not None and name in r.imported.differs]
        if not differ:
            continue
        line = (
            f"their {name} differs from {benchmark.name}'s on {len(differ)} of {len(entries)} entries "
            f"(ids {_ids(r.id_key for r in differ)})"
        )
        if name == "gold_sql":
            spaced = sum(1 for r in differ if _spaced(r, benchmark))
            if spaced:
                line += f"; {spaced} only in white space"
            for other in benchmark.files[1:]:
                same = sum(1 for r in differ if _equals_in(r, benchmark, other.name))
                if same:
                    line += f"; {same} equal {other.name}'s"
            line += "; the records keep their gold SQL (what their judges saw)"
        out.append(line)
    unknown = [r for r in entries if r.imported is not None and r.imported.benchmark is None]
    if unknown:
        files = ", ".join(f.name for f in benchmark.files)
        ids = _ids(r.id_key for r in unknown)
        out.append(f"{len(unknown)} entries have ids in none of {files} (ids {ids}): no db_id")
    return out


def _ids(ids: object) -> str:
    listed = sorted(ids, key=lambda k: (0, int(k)) if k.isdigit() else (1, k))  # type: ignore[call-overload]
    shown = ", ".join(listed[:8])
    return shown + (f" and {len(listed) - 8} more" if len(listed) > 8 else "")


def _spaced(r: Record, benchmark: Benchmark) -> bool:
    ref = benchmark.references.get(key(r.id), [None])[0]
    return ref is not None and " ".join((r.gold_sql or "").split()) == " ".join((ref.gold_sql or "").split())


def _equals_in(r: Record, benchmark: Benchmark, name: str) -> bool:
    return any(ref.source == name and ref.gold_sql == r.gold_sql for ref in benchmark.references.get(key(r.id), []))


@dataclass(frozen=True, slots=True)
class Entries:
    """What an imported run's figures stand on: its own entries, inside the benchmark and outside it."""

    entries: int
    """Items with an entry in their outputs."""
    inside: int
    """Of those, the benchmark's."""
    outside: list[str]
    """The others' ids."""
    benchmark: str
    """The benchmark's file name."""
    benchmark_ids: int
    """The benchmark's items (with an entry or not)."""
    missing: dict[str, int]
    """The benchmark's items without an entry, by reason."""


def entries_of(records: Sequence[Record], benchmark: str | None = None) -> Entries | None:
    """An imported run's entries, against the benchmark most of its records name (None for our own runs)."""
    imported = [r for r in records if r.imported is not None]
    if not imported:
        return None
    name = benchmark or Counter(r.imported.benchmark for r in imported if r.imported).most_common(1)[0][0] or ""
    mine = [r for r in records if r.unscored_reason not in NOT_EVALUATED]
    inside = [r for r in mine if r.imported is not None and r.imported.benchmark == name]
    outside = [r.id_key for r in mine if r.imported is None or r.imported.benchmark != name]
    missing = Counter(str(r.unscored_reason) for r in records if r.unscored_reason in NOT_EVALUATED)
    return Entries(len(mine), len(inside), outside, name, len(inside) + sum(missing.values()), dict(missing))


def entries_note(e: Entries) -> str:
    """``over 488 entries: 486 of mini_dev_sqlite.json's 498 ids and 2 outside it (119, 120)``."""
    out = f"over {e.entries} entries: {e.inside} of {e.benchmark}'s {e.benchmark_ids} ids"
    if e.outside:
        out += f" and {len(e.outside)} outside it ({', '.join(e.outside)})"
    if e.missing:
        out += "; " + ", ".join(f"{n} {reason}" for reason, n in sorted(e.missing.items())) + " without an entry"
    return out


def paper_figure(imported: Imported) -> str:
    """The paper's figure for the system, reproduced over its own entries, in a sentence: our decision
    under the paper's policy, their published mean, their EX, each over its items."""
    records = imported.records
    e = entries_of(records)
    mine = [r for r in records if r.unscored_reason not in NOT_EVALUATED]
    scored = [r.score for r in mine if r.score is not None]
    theirs = [r.imported.score for r in mine if r.imported is not None and r.imported.score is not None]
    ex = [r.imported.ex for r in mine if r.imported is not None and r.imported.ex is not None]
    head = f"{imported.method} ({imported.model or 'deterministic'})"
    parts = [f"{head} {_mean(scored)} over {len(scored)} scored"]
    if theirs and (len(theirs) != len(scored) or _mean(theirs) != _mean(scored)):
        parts.append(f"their published mean {_mean(theirs)} over {len(theirs)}")
    if ex:
        parts.append(f"their EX {_mean(ex)} over {len(ex)}")
    return "; ".join(parts) + (f", {entries_note(e)}" if e is not None else "")


def _mean(values: Sequence[int]) -> str:
    return f"{100 * sum(values) / len(values):.2f}" if values else "undefined"


def with_checks(imported: Imported, benchmark: Benchmark) -> Imported:
    """The import with the benchmark's warnings, the text checks and the paper's figure noted."""
    warnings = [*imported.warnings, *benchmark.warnings, *text_warnings(imported, benchmark)]
    return replace(imported, warnings=warnings, notes=[*imported.notes, paper_figure(imported)])
