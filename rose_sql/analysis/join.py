"""Our run of a system beside the import of another evaluator's run of it, item by item (``rose join``).

For the items both runs have, where our gold ran (the databases that are here), the join says:

- where their EX and our BIRD EX (the official script's reading, as we compute it) disagree, each item with
  its cause: their gold SQL is not the gold we ran (``gold_differs``), their prediction is not the file's
  (``prediction_differs``), the database here is another release's than the benchmark's
  (``database_differs``: BIRD mini-dev ships an edited toxicology), else ``unexplained``, with both results;
- what our deterministic evidence says of the items their comparator matched: whether ours matched too,
  plausible witnesses, cheap doubts, gold smells, and so whether our ``evidence`` policy would send the
  match to the Refuter, beside what their Refuter said;
- their judges' verdicts re-decided under our policies (:mod:`rose_sql.analysis.replay`): each joined
  record is theirs (their replies, their comparator's outcome) with our readings, evidence and doubts, so
  ``evidence`` asks their stored Refuter reply only where our evidence questions the match, ``never`` and
  ``no-refuter`` drop it; ROSE per system and policy over the joined items, and the ranks it gives.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from rose_sql.accounting import NOT_EVALUATED
from rose_sql.analysis.replay import Variant, replay_record
from rose_sql.analysis.runs import Run
from rose_sql.errors import UsageError
from rose_sql.evidence.doubts import doubts_of
from rose_sql.record import Record

CAUSES = {
    "gold_differs": "their gold SQL is not the benchmark's gold that we ran",
    "prediction_differs": "their predicted SQL is not the prediction file's that we ran",
    "database_differs": "the database here is another release's than the one the benchmark is read on",
    "duplicates": "the results hold the same distinct rows, duplicated differently: BIRD EX compares sets of rows, "
    "their EX counted the duplicates",
    "unexplained": "the same SQL on the same database: the readings disagree",
}
"""Why their EX and our BIRD EX may disagree on an item, in the order they are looked for."""
OURS_DIFFER = "Our comparator found the results different, where theirs found them equal"
"""The doubt a joined record carries where their comparator matched and ours did not."""


@dataclass(frozen=True, slots=True)
class Disagreement:
    """One item where their EX and our BIRD EX disagree."""

    system: str
    id: str
    db_id: str
    ours: int
    """Our BIRD EX."""
    theirs: int
    """Their EX."""
    causes: list[str]
    """Keys of :data:`CAUSES` that apply (``unexplained`` alone when none does)."""
    detail: str
    """What differs, in a line (the two golds, the database's release, or both results)."""


@dataclass(frozen=True, slots=True)
class Matched:
    """Our evidence on the items their comparator matched."""

    matched: int
    """Joined items their comparator found equal."""
    ours_equal: int
    """Of those, the items our comparator found equal too."""
    ours_differ: int
    """... and those it found different."""
    witness: int
    """Items with a plausible witness (a database on which the two queries part, of the data's own kind)."""
    implausible: int
    """Items whose only witness is implausible (a fragility note: no doubt)."""
    doubts: int
    """Items with a cheap doubt (both results empty, other tables read)."""
    smells: int
    """Items with a gold smell."""
    questioned: int
    """Items our ``evidence`` policy sends to the Refuter (any of the above, or our comparator differing)."""
    overturned: int
    """Items their Refuter overturned."""
    overturned_questioned: int
    """Of those, the items our evidence questioned."""
    witnesses: list[str] = field(default_factory=list)
    """The items with a plausible witness: ``id (kind, upheld|overturned)``, what their Refuter did."""


@dataclass(frozen=True, slots=True)
class SystemJoin:
    """One system's join."""

    system: str
    joined: int
    """Items in both runs where our gold ran and their run has an entry."""
    ours_only: int
    """Items our run has (gold ran) that their run has no entry for."""
    ex_agree: int
    disagreements: list[Disagreement]
    matched: Matched
    policies: dict[str, tuple[int, int]]
    """Per policy (``recorded``: their decisions; then each replayed), ROSE's hits and scored items over the
    joined items."""
    guarded: int = 0
    """Joined items whose evidence search our run stopped at its wall-clock guard (machine-dependent)."""

    def rose(self, policy: str) -> float | None:
        hits, n = self.policies[policy]
        return round(100 * hits / n, 2) if n else None

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["rose"] = {p: self.rose(p) for p in self.policies}
        return data


def _norm(sql: str | None) -> str:
    return " ".join((sql or "").split()).rstrip(";").strip()


def joined_record(ours: Record, theirs: Record) -> Record:
    """Their record (their replies and comparator) with our readings, evidence and doubts."""
    equal = ours.comparison is not None and ours.comparison.equal is True
    doubts = (
        ours.doubts if ours.doubts is not None else doubts_of(ours.pred_sql, ours.gold_sql, equal, ours.gold.row_count)
    )
    if theirs.comparison is not None and theirs.comparison.equal is True and not equal:
        detail = ours.comparison.detail if ours.comparison is not None else "nothing compared"
        doubts = [*doubts, f"{OURS_DIFFER}: {detail}."]
    return replace(theirs, readings=ours.readings, evidence=ours.evidence, doubts=doubts)


def _causes(ours: Record, theirs: Record, other_release: dict[str, str]) -> tuple[list[str], str]:
    causes, detail = [], []
    if _norm(theirs.gold_sql) != _norm(ours.gold_sql):
        causes.append("gold_differs")
        detail.append(f"their gold: {_norm(theirs.gold_sql)} | the benchmark's: {_norm(ours.gold_sql)}")
    if _norm(theirs.pred_sql) != _norm(ours.pred_sql):
        causes.append("prediction_differs")
        detail.append(f"their prediction: {_norm(theirs.pred_sql)} | the file's: {_norm(ours.pred_sql)}")
    if ours.db_id in other_release:
        causes.append("database_differs")
        detail.append(other_release[ours.db_id])
    if not causes and ours.comparison is not None and ours.comparison.reason == "multiplicity":
        causes.append("duplicates")
        detail.append(f"{ours.comparison.detail}: {ours.pred.row_count} rows against the gold's {ours.gold.row_count}")
    if not causes:
        causes.append("unexplained")
        detail.append(f"ours: prediction {ours.pred.preview} vs gold {ours.gold.preview}")
    if "database_differs" in causes and len(causes) == 1:
        detail.append(f"here the prediction gives {ours.pred.preview}, the gold {ours.gold.preview}")
    return causes, "; ".join(detail)


def other_release(run: Run) -> dict[str, str]:
    """The databases our run read that are another release's than its benchmark's, with a sentence each
    (from the manifest's databases and gold file: :mod:`rose_sql.run.releases`)."""
    from rose_sql.run.releases import benchmark_of, known_database

    m = run.manifest
    if m is None or m.gold is None:
        return {}
    bench = benchmark_of(m.gold.sha256, [])
    if bench is None:
        return {}
    digests: dict[tuple[str, int], str] = {}
    out = {}
    for d in m.databases:
        if not d.found or d.bytes is None:
            continue
        found = known_database(d.db_id, Path(d.path), d.bytes, digests)
        if found is not None and bench.release not in found.releases:
            out[d.db_id] = (
                f"{d.db_id}.sqlite here is {' and '.join(found.releases)}'s (sha256 {found.sha256[:8]}...); "
                f"{bench.name} is read on {bench.release}'s, which ships another"
            )
    return out


def _matched(pairs: Sequence[tuple[Record, Record, Record]]) -> Matched:
    from rose_sql.evidence.findings import questions_match

    matched = [(o, t, j) for o, t, j in pairs if t.comparison is not None and t.comparison.equal is True]
    counts: Counter[str] = Counter()
    witnesses = []
    for o, t, j in matched:
        equal = o.comparison is not None and o.comparison.equal is True
        counts["ours_equal" if equal else "ours_differ"] += 1
        w = o.evidence.witness if o.evidence is not None else None
        refuter = next((c.reply for c in t.judges if c.stage == "refuter" and c.reply is not None), None)
        overturned = bool(getattr(refuter, "overturn", False))
        if w is not None and w.plausible:
            counts["witness"] += 1
            said = "overturned" if overturned else "upheld"
            witnesses.append(f"{t.id_key} ({w.kind}, {said})")
        elif w is not None:
            counts["implausible"] += 1
        smells = bool(o.evidence is not None and o.evidence.gold_smells)
        cheap = bool([d for d in j.doubts or [] if not d.startswith(OURS_DIFFER)])
        counts["doubts"] += cheap
        counts["smells"] += smells
        questioned = questions_match(j.doubts, j.evidence)
        counts["questioned"] += questioned
        counts["overturned"] += overturned
        counts["overturned_questioned"] += overturned and questioned
    return Matched(
        matched=len(matched),
        ours_equal=counts["ours_equal"],
        ours_differ=counts["ours_differ"],
        witness=counts["witness"],
        implausible=counts["implausible"],
        doubts=counts["doubts"],
        smells=counts["smells"],
        questioned=counts["questioned"],
        overturned=counts["overturned"],
        overturned_questioned=counts["overturned_questioned"],
        witnesses=witnesses,
    )


def join(ours: Run, theirs: Run, variants: Sequence[Variant]) -> tuple[SystemJoin, list[Record]]:
    """The join of our run and their imported run of one system; and their run's records, with ours grafted
    onto the joined items (:func:`joined_record`), the others as they were."""
    if not any(r.imported is not None for r in theirs.records):
        raise UsageError(f"{theirs.path} is not an import of another evaluator's outputs (rose import-rose)")
    releases = other_release(ours)
    mine = {r.id_key: r for r in ours.records if r.readings.bird_ex is not None}
    pairs: list[tuple[Record, Record, Record]] = []
    for t in theirs.records:
        o = mine.get(t.id_key)
        if o is None or t.unscored_reason in NOT_EVALUATED or t.imported is None:
            continue
        pairs.append((o, t, joined_record(o, t)))
    disagreements = []
    agree = 0
    for o, t, _ in pairs:
        their_ex = t.imported.ex if t.imported is not None else None
        if their_ex is None or o.readings.bird_ex is None:
            continue
        if their_ex == o.readings.bird_ex:
            agree += 1
            continue
        causes, detail = _causes(o, t, releases)
        disagreements.append(Disagreement(theirs.name, t.id_key, o.db_id, o.readings.bird_ex, their_ex, causes, detail))
    joined = [j for _, _, j in pairs]
    policies = {"recorded": _rose(joined)}
    for v in variants:
        # only the evidence policy reads our evidence: the others decide on their facts alone (our evidence
        # search stopped by its wall-clock guard leaves an item unscored under evidence only)
        facts = joined if v == "evidence" else [t for _, t, _ in pairs]
        policies[v] = _rose([replay_record(j, v) for j in facts])
    grafted = {j.id_key: j for _, _, j in pairs}
    records = [grafted.get(t.id_key, t) for t in theirs.records]
    result = SystemJoin(
        theirs.name,
        len(pairs),
        len(mine.keys() - {t.id_key for _, t, _ in pairs}),
        agree,
        disagreements,
        _matched(pairs),
        policies,
        sum(1 for o, _, _ in pairs if o.evidence is not None and o.evidence.guard),
    )
    return result, records


def _rose(records: Sequence[Record]) -> tuple[int, int]:
    scored = [r.score for r in records if r.score is not None]
    return sum(scored), len(scored)


def pair_systems(ours: Sequence[Run], theirs: Sequence[Run]) -> list[tuple[Run, Run]]:
    """Our runs and their imports, paired by system name; our one run beside each of theirs when ours is one
    (one set of predictions, judged by several of their judges: ROSE-VEC's)."""
    if len(ours) == 1:
        return [(ours[0], t) for t in theirs]
    mine = {r.name: r for r in ours}
    pairs = [(mine[t.name], t) for t in theirs if t.name in mine]
    if not pairs:
        raise UsageError(
            f"no system name is on both sides (ours: {', '.join(sorted(mine))}; theirs: "
            f"{', '.join(sorted(t.name for t in theirs))}): name each folder after its system"
        )
    return pairs


def ranks(joins: Sequence[SystemJoin], policy: str) -> dict[str, int]:
    """Each system's rank by ROSE under ``policy`` over its joined items (1 is best; ties share)."""
    values = {j.system: j.rose(policy) for j in joins}
    order = sorted(values.values(), key=lambda v: -(v if v is not None else -1.0))
    return {s: order.index(v) + 1 for s, v in values.items()}
