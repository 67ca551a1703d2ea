"""The record of one item: typed on the way out and on the way back, versioned, in an append-only file.

:class:`Record` is one line of ``records.jsonl``. :meth:`Record.to_dict` writes it;
:meth:`Record.from_dict` reads it back, validating every field (with pydantic, loaded only by readers)
and lifting records of older layouts to this one (:func:`migrate`), so everything downstream of a run
works with the same typed record that the run wrote. ``records.jsonl`` is appended and flushed as items
finish, so a crash loses at most the line being written: :func:`read_records` skips a torn last line and
:class:`RecordWriter` truncates it before appending again.

Layout versions (``schema``):

- 1: the first layout;
- 2: ``labels`` always carries all five GoldX/AmbQ fields; ``doubts`` (cheap reasons to doubt a match,
  recorded when a judge is configured), ``evidence.guard`` and an execution's ``limit`` are new; judge
  calls may carry ``imported_from``. Items evaluated on PostgreSQL, MySQL/MariaDB or DuckDB carry
  ``dialect`` and ``server``; a record without them was evaluated on SQLite (written only when set, so
  SQLite records are unchanged, and readers of this layout that predate them ignore them). Judge calls
  answered by a Batch API batch (``rose run --batch``) carry ``batch_id``, written the same way. Runs that
  ask several replies per judge stage (``--samples``, ``--panel``, ``--escalate-to``) carry ``votes``
  (each stage's tally, the rule that decided it, and why it escalated), and their calls ``sample`` and
  ``tier``; written only when set, so other records are unchanged and older readers ignore them.
- 3: an execution's ``status`` may be ``missing`` (a relation or the database it reads does not exist: the
  item is ``db_missing`` when the gold meets it), and an execution may carry ``note`` (a documented way its
  engine differed from SQLite for that statement, written only when set). Nothing was renamed: a record of
  layout 2 reads as it was.
- 4: ``pred_sql`` is null for a question of the gold file that the prediction file has no prediction for
  (scored 0 by execution: ``no_prediction``); ``summary.json`` carries ``figures`` (each figure with its
  denominator and what it left out) and ``by_difficulty`` holds figures too. A record of layout 3 reads as
  it was; a summary of layout 3 gets its figures rebuilt from its means (see ``rose_sql.summary``).
  Spider items whose ``tables.json`` is found carry ``readings.spider_em`` (exact-set match) and, when
  the data has no difficulty, the gold's official hardness as ``difficulty``; ``summary.json`` then has
  ``spider_match``. Written only when set, so other records are unchanged and earlier readers of this
  layout ignore them.
- 5: the reading ``ts_ex`` (and ``ts_ex_keep_distinct``), computed on the db_id's one database, is renamed
  ``spider_ex`` (``spider_ex_keep_distinct``): that is what it is. ``ts_ex`` now names test-suite accuracy
  over the original and its variant databases, with ``ts_databases``, defined only where the db_id's
  folder holds variants. A record of layout 4 or before reads with its ``ts_ex`` as ``spider_ex`` and no
  ``ts_ex`` (no earlier rose-sql read the variants); a summary likewise (its means, counts and figures).
- 6: a witness carries its grade, ``plausible`` and ``plausibility`` (:mod:`rose_sql.evidence.plausibility`:
  only a plausible witness doubts a match); ``evidence.search`` carries ``implausible`` and ``distinct``.
  A witness of layout 5 or before had no grade and counted as doubt: it reads as plausible, with the
  ``plausibility`` :data:`UNGRADED`, so that replaying an old run decides as the run did. A run with
  ``--efficiency`` carries ``efficiency`` on the items whose BIRD EX is defined; written only when set, so
  other records are unchanged and earlier readers of this layout ignore it. Its ``steps_reason`` and
  ``time_reason`` (why a pass gave no ratio) are written the same way, only when set.
- 7: an item imported from another evaluator's outputs (``rose import-rose``) carries ``imported``: what those
  outputs said of it (their score, their EX, the error their run recorded, the benchmark file its db_id and
  texts were checked against, the fields of theirs that differ from it), kept beside our decision and never
  under an official reading's name; written only when set. An imported item without an entry in their
  outputs is unscored ``absent_from_outputs`` (dropped silently) or ``failed_in_their_run`` (their run
  recorded the failure), a reason layout 6 did not have; a record of a panel of runs (``rose panel``) is
  ``decided_by`` ``panel``. An execution may carry ``rerun`` (why it ran twice: a wall clock stopped its
  first run, and the record holds the second, run alone with the guard doubled), written only when set; and
  ``status`` ``timeout`` with ``limit`` ``wall`` or ``process`` now means a confirmed runaway (a wall clock
  stopped it twice), which layout 6 left ``guard``. Nothing was renamed: a record of layout 6 reads as it was.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, fields, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rose_sql.comparison.comparator import Comparison, json_value
from rose_sql.config import MAX_RECORD_LINE_BYTES, Aggregate
from rose_sql.decide import DatasetLabels, DecidedBy, Decision, Unscored
from rose_sql.errors import InputError
from rose_sql.evidence.findings import Evidence
from rose_sql.items.load import ItemId
from rose_sql.items.readers import read_lines
from rose_sql.readings.efficiency import REASONS, TIME_FIELDS, Efficiency
from rose_sql.readings.formulas import Readings
from rose_sql.results import Execution, Limit, Status

if TYPE_CHECKING:  # pydantic models: imported by the judges and by readers, never by a judge-free run
    from pydantic import TypeAdapter

    from rose_sql.verdicts import ProverReply, RefuterReply, ReplyFormat

SCHEMA_VERSION = 7
"""The layout this version writes; :func:`migrate` reads every earlier one."""
UNGRADED = "[ungraded] recorded before witnesses were graded (record layout 5 or before): counted as doubt, as it was"
"""The ``plausibility`` a witness of layout 5 or before reads with."""
PREVIEW_ROWS = 5
"""Rows of each result a record keeps."""

ExecutionStatus = Status | Literal["skipped"]


@dataclass(frozen=True, slots=True)
class ExecutionInfo:
    """What the record keeps of one execution."""

    status: ExecutionStatus
    """How the execution ended (:data:`rose_sql.results.Status`), or ``skipped`` (not run)."""
    seconds: float
    """Wall time in seconds (of the original run when cached)."""
    error: str | None = None
    """Why it did not run, when not ok."""
    columns: list[str] | None = None
    """Result column names."""
    row_count: int | None = None
    """Total rows (a lower bound if ``count_exact`` is false)."""
    truncated: bool = False
    """Rows were cut at the row or byte cap."""
    count_exact: bool = True
    """False when the rows past the cap could not all be counted in time."""
    preview: list[list[Any]] | None = None
    """The first rows, as JSON values (bytes as ``x'hex'``)."""
    cached: bool = False
    """Served from the execution cache."""
    limit: Limit | None = None
    """Which limit stopped it, when one did (``steps``, ``memory``, ``wall``, ``process``)."""
    note: str | None = None
    """A documented way the engine differed from SQLite for this statement, when one applied."""
    rerun: str | None = None
    """Why the statement ran twice, when it did: how a wall clock stopped its first run (a runaway to
    confirm); the execution is its second run, alone with the guard doubled. Load-dependent: in
    :data:`EXEMPT` (written only when set)."""

    @classmethod
    def of(cls, e: Execution | None) -> ExecutionInfo:
        if e is None:
            return cls("skipped", 0.0)
        r = e.result
        return cls(
            status=e.status,
            seconds=round(e.seconds, 6),
            error=e.error,
            columns=list(r.columns) if r else None,
            row_count=r.row_count if r else None,
            truncated=r.truncated if r else False,
            count_exact=r.count_exact if r else True,
            preview=[[json_value(v) for v in row] for row in r.rows[:PREVIEW_ROWS]] if r else None,
            cached=e.cached,
            limit=e.limit,
            note=e.note,
            rerun=e.rerun,
        )

    def as_cached(self) -> ExecutionInfo:
        """The same execution, served from the cache (as another item that ran the same SQL records it)."""
        return replace(self, cached=True) if self.status != "skipped" else self

    def execution(self) -> Execution | None:
        """The execution as the decision table needs it (status and error; no rows), None when skipped."""
        return None if self.status == "skipped" else Execution(self.status, self.seconds, error=self.error)


@dataclass(frozen=True, slots=True)
class ComparisonInfo:
    """What the record keeps of our comparator's outcome."""

    equal: bool | None
    """True, False, or None when undecidable (a truncated result)."""
    reason: str
    """``same`` when equal, otherwise the kind of mismatch (``imported`` for the ROSE authors' comparator)."""
    detail: str
    """One line a person can read."""
    notes: list[str] = field(default_factory=list)
    """Representation differences that were tolerated."""
    pred_only: int | None = 0
    """Rows (with multiplicity) only in the prediction (None when unknown)."""
    gold_only: int | None = 0
    """Rows (with multiplicity) only in the gold (None when unknown)."""

    @classmethod
    def of(cls, c: Comparison | None) -> ComparisonInfo | None:
        if c is None:
            return None
        return cls(c.equal, c.reason, c.detail, list(c.notes), c.pred_only, c.gold_only)


@dataclass(frozen=True, slots=True)
class ImportedScores:
    """What another evaluator's per-item outputs said of an item (``rose import-rose``), kept as theirs.

    Their EX is theirs: it never becomes the ``bird_ex`` reading, which is the official script's number as
    we compute it; views name it "their EX" (``their_ex``)."""

    method: str
    """The method whose outputs these are: ``ROSE``, ``ProverOnly``, ``FLEX``, ``llmsolver``, ``EX``..."""
    score: int | None = None
    """Their published score for the item, 1 or 0 (None: no entry, or their run recorded an error instead)."""
    ex: int | None = None
    """Their EX for the item, 1 or 0 (None: their EX outputs have no entry for it)."""
    error: str | None = None
    """The error their run recorded for the item (``Connection error.``), when it recorded one."""
    benchmark: str | None = None
    """The file whose entry gave the item's db_id and against which their texts were checked (None: unchecked)."""
    differs: list[str] = field(default_factory=list)
    """Their entry's fields that differ from that file's (``gold_sql``, ``question``, ``evidence``, ``difficulty``)."""


Tier = Literal["first", "escalated"]
"""Who cast a vote: the judge model or panel (``first``), or the strong model escalated to."""


@dataclass(frozen=True, slots=True)
class JudgeCall:
    """One call of a judge, as the record keeps it."""

    stage: Literal["prover", "refuter"]
    """Which judge (a Refuter on a match is recorded as ``refuter``)."""
    model: str
    """The model that answered."""
    reply: ProverReply | RefuterReply | None
    """The validated reply; None when the reply was unusable (see ``error``)."""
    raw: str
    """The reply text as received."""
    reasoning: str | None
    """The provider's separate reasoning text, when it returns one."""
    cached: bool
    """Served from the LLM cache: no call was made."""
    prompt_tokens: int
    """Input tokens the provider counted."""
    completion_tokens: int
    """Output tokens the provider counted (reasoning included)."""
    reasoning_tokens: int | None
    """Reasoning tokens, where reported."""
    cost_usd: float | None
    """Cost from the price table; None when the model has no price."""
    seconds: float
    """Wall time of the call (0 when cached)."""
    prompt_sha256: str | None
    """Digest of the system prompt (None for imported replies)."""
    params: dict[str, Any]
    """Sampling parameters the provider accepted."""
    error: str | None = None
    """Why the reply could not be used, when it could not."""
    imported_from: str | None = None
    """The file an imported reply came from (``rose import-rose``)."""
    cached_tokens: int = 0
    """Of the prompt tokens, those the provider read from its prefix cache (priced at the cached rate)."""
    reply_format: ReplyFormat = "text"
    """``json_schema``: the reply's JSON schema was sent to the endpoint; ``text``: it was asked as plain
    text and parsed tolerantly (every call of records written before this field)."""
    batch_id: str | None = None
    """The Batch API batch that answered the call (``rose run --batch``; its cost is at the batch price)."""
    sample: int | None = None
    """Which sample of its model this call was (seed = the configured seed + it), when a stage votes."""
    tier: Tier | None = None
    """``first`` (the judge model or the panel) or ``escalated`` (the strong model), when a stage votes."""

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in _CALL_FIELDS}
        data["reply"] = self.reply.model_dump() if self.reply is not None else None
        for optional in ("imported_from", "batch_id", "sample", "tier"):  # written only when set: older readers
            if data[optional] is None:  # still read the rest
                del data[optional]
        return data


Verdict = Literal["pass", "fail", "split"]
"""A stage's verdict on the prediction: a pass (the Prover accepts, the Refuter upholds), a fail, or a split
(the votes disagree under a rule that needs them to agree)."""


@dataclass(frozen=True, slots=True)
class StageVotes:
    """How one judge stage's votes became its verdict (``record.votes``)."""

    stage: Literal["prover", "refuter"]
    """The judge."""
    rule: Aggregate
    """The aggregation rule that decided (:data:`rose_sql.config.Aggregate`)."""
    verdict: Verdict | None
    """The stage's verdict; None when no vote was valid (the item is then unscored)."""
    votes: int
    """Valid votes the rule counted (the strong model's alone when the stage escalated)."""
    passes: int
    """How many of them pass the prediction."""
    invalid: int = 0
    """Samples asked that gave no valid reply, re-asks included (every tier)."""
    agreement: float | None = None
    """Share of the counted votes agreeing with their majority (1.0: unanimous)."""
    stated: float | None = None
    """Mean confidence the counted replies stated, when any did."""
    confidence: float | None = None
    """The stage's confidence: the agreement, or the stated confidence when lower."""
    models: dict[str, Verdict] = field(default_factory=dict)
    """Each model's own verdict (the majority of its samples; ties ``split``)."""
    escalated: bool = False
    """Whether the strong model was asked."""
    escalation: list[str] = field(default_factory=list)
    """Why it was asked (empty when it was not)."""


@dataclass(frozen=True, slots=True)
class Record:
    """Everything known about one evaluated item (one line of ``records.jsonl``)."""

    id: ItemId
    """The item's id as the input gave it."""
    db_id: str
    """Database name."""
    score: int | None
    """1 (answers the question), 0 (does not) or None (unscored, see ``unscored_reason``)."""
    unscored_reason: Unscored | None
    """Why there is no score: one of :data:`rose_sql.decide.UNSCORED`."""
    decided_by: DecidedBy | None
    """The stage that settled the score, None when unscored."""
    why: str
    """One line explaining the decision."""
    readings: Readings
    """The official metrics (bird_ex, ts_ex, ts_ex_keep_distinct, soft_f1)."""
    comparison: ComparisonInfo | None
    """Our comparator's outcome (None when there was nothing to compare)."""
    pred: ExecutionInfo
    """The prediction's execution."""
    gold: ExecutionInfo
    """The gold's execution."""
    difficulty: str | None = None
    """Difficulty label when the data has one; for Spider without one, the gold's official hardness
    (``easy``, ``medium``, ``hard``, ``extra``) where the match reading is defined."""
    question: str | None = None
    """The question text."""
    pred_sql: str | None = ""
    """The predicted SQL as given; None for a question of the gold file without a prediction (scored 0)."""
    gold_sql: str | None = None
    """The gold SQL as given."""
    source: str = ""
    """Where the item came from (file:line or file:key)."""
    labels: DatasetLabels = field(default_factory=DatasetLabels)
    """What the Refuter said about the item itself: GoldX, AmbQ (None until a Refuter looked)."""
    judges: list[JudgeCall] = field(default_factory=list)
    """LLM calls in order."""
    llm_calls: int = 0
    """Calls made to the endpoint for this item (cached replies not counted)."""
    cost_usd: float = 0.0
    """What those calls cost."""
    evidence: Evidence | None = None
    """Deterministic evidence (witness, distinguishing rows, gold smells) when that stage ran."""
    doubts: list[str] | None = None
    """Cheap deterministic reasons to doubt a match (both results empty, other tables read); recorded
    when a judge is configured, None otherwise. With the evidence, they decide whether the matched-results
    policy ``evidence`` asks the Refuter."""
    dialect: str | None = None
    """sqlglot's dialect of the engine the item ran on (``postgres``, ``mysql``, ``duckdb``); None: SQLite."""
    server: str | None = None
    """The engine and its version (``PostgreSQL 15.20``, ``MariaDB 10.11.19``...); None: SQLite."""
    votes: list[StageVotes] | None = None
    """Each judge stage's tally, when stages vote (``--samples``, ``--panel``, ``--escalate-to``); None
    otherwise (one reply decides a stage, as it always did)."""
    efficiency: Efficiency | None = None
    """BIRD's efficiency ratios (``rose run --efficiency``), for an item whose BIRD EX is defined; None when
    not asked (written only when set: other records keep their layout)."""
    imported: ImportedScores | None = None
    """What another evaluator's outputs said of the item (``rose import-rose``); None for our own runs (written
    only when set)."""
    schema: int = SCHEMA_VERSION
    """Version of this record's layout."""

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data (nested lists are shared, not copied)."""
        data = {name: getattr(self, name) for name in _RECORD_FIELDS}
        data["readings"] = {name: getattr(self.readings, name) for name in _READINGS_FIELDS}
        if self.readings.spider_em is None:  # written only when set: other records keep their layout
            del data["readings"]["spider_em"]
        data["comparison"] = _plain(self.comparison, _COMPARISON_FIELDS)
        data["pred"] = _execution(self.pred)
        data["gold"] = _execution(self.gold)
        data["labels"] = _plain(self.labels, _LABEL_FIELDS)
        data["judges"] = [c.to_dict() for c in self.judges]
        data["evidence"] = self.evidence.to_dict() if self.evidence is not None else None
        if self.dialect is None and self.server is None:  # SQLite: the layout as it always was
            del data["dialect"], data["server"]
        if self.votes is None:  # one reply per stage: the layout as it always was
            del data["votes"]
        else:
            data["votes"] = [_plain(v, _VOTES_FIELDS) for v in self.votes]
        if self.efficiency is None:  # not asked: the layout as it always was
            del data["efficiency"]
        else:
            eff = {name: getattr(self.efficiency, name) for name in _EFFICIENCY_FIELDS}
            data["efficiency"] = {k: v for k, v in eff.items() if v is not None or k not in REASONS}  # when set
        if self.imported is None:  # our own run: the layout as it always was
            del data["imported"]
        else:
            data["imported"] = _plain(self.imported, _IMPORTED_FIELDS)
        return data

    def to_json(self) -> str:
        return dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: Any) -> Record:
        """A record read back: older layouts migrated, every field validated.

        Raises :class:`ValueError` naming the first field that is not what this layout holds.
        """
        from pydantic import ValidationError

        data = migrate(data)
        wrong = out_of_range(data)
        if wrong is not None:
            raise ValueError(f"not a valid record: {wrong}")
        try:
            record: Record = _adapter().validate_python(data)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise ValueError(f"not a valid record: {where}: {err['msg']}") from None
        return record

    @property
    def id_key(self) -> str:
        """A key under which ids read back from JSON equal the ids they were written from."""
        return id_key(self.id)


_RECORD_FIELDS = tuple(f.name for f in fields(Record))
_READINGS_FIELDS = tuple(f.name for f in fields(Readings))
_EXECUTION_FIELDS = tuple(f.name for f in fields(ExecutionInfo))
_COMPARISON_FIELDS = tuple(f.name for f in fields(ComparisonInfo))
_LABEL_FIELDS = tuple(f.name for f in fields(DatasetLabels))
_CALL_FIELDS = tuple(f.name for f in fields(JudgeCall))
_VOTES_FIELDS = tuple(f.name for f in fields(StageVotes))
_EFFICIENCY_FIELDS = tuple(f.name for f in fields(Efficiency))
_IMPORTED_FIELDS = tuple(f.name for f in fields(ImportedScores))


EXEMPT = frozenset({"seconds", "cached", "llm_calls", "cost_usd", "batch_id", "rerun", *TIME_FIELDS})
"""The only fields that may differ between two runs of the same inputs and options, on any machine and
at any load: timing (``seconds`` at every level), cache flags (``cached``: which executions or replies a
cache served; ``batch_id``: which Batch API batch answered), and this run's own counters of calls made
and their cost (``llm_calls``, and the record's ``cost_usd``), an execution's ``rerun`` (a first run a
wall clock stopped, before a second run alone with the guard doubled ended as recorded), and the published
wall-time efficiency ratios (``efficiency.time_ratio``, ``time_kept``, ``dev_time_ratio``, and
``time_reason`` when its pass stopped: ``rose run --efficiency time``). Everything else is the same, for a
given SQLite version."""


def comparable(record: Record) -> dict[str, Any]:
    """The record as JSON data without the :data:`EXEMPT` fields: equal across runs of the same inputs."""

    def drop(x: Any, top: bool) -> Any:
        if isinstance(x, dict):
            gone = EXEMPT if top else EXEMPT - {"cost_usd"}  # a call's cost is its reply's: compared
            return {k: drop(v, False) for k, v in x.items() if k not in gone}
        if isinstance(x, list):
            return [drop(v, False) for v in x]
        return x

    out: dict[str, Any] = drop(record.to_dict(), True)
    return out


def _plain(obj: Any, names: tuple[str, ...]) -> dict[str, Any] | None:
    return None if obj is None else {name: getattr(obj, name) for name in names}


def _execution(e: ExecutionInfo) -> dict[str, Any]:
    data = {name: getattr(e, name) for name in _EXECUTION_FIELDS}
    if data["note"] is None:  # written only when set
        del data["note"]
    if data["rerun"] is None:
        del data["rerun"]
    return data


def migrate(data: Any) -> Any:
    """A record of an earlier layout, lifted to :data:`SCHEMA_VERSION` (a dict of this layout is returned as is)."""
    if not isinstance(data, dict):
        raise ValueError("not a valid record: not a JSON object")
    version = data.get("schema", 1)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ValueError(f"record layout {version!r} is newer than this rose-sql reads ({SCHEMA_VERSION}); upgrade")
    if version == SCHEMA_VERSION:
        return data
    # 1 -> 2: new fields take their defaults (labels' three Refuter fields, doubts); nothing was renamed
    # 2 -> 3: a new status value and an optional note; nothing was renamed
    # 3 -> 4: pred_sql may be null (no prediction); nothing was renamed
    if version <= 4:  # 4 -> 5: the one-database reading ts_ex is spider_ex; ts_ex (over the variants) did not exist
        readings = data.get("readings")
        if isinstance(readings, dict):
            data = {**data, "readings": rename_ts(readings)}
    # 5 -> 6: a witness gets its grade; one recorded without it counted as doubt, and still does
    evidence = data.get("evidence")
    if isinstance(evidence, dict) and isinstance(evidence.get("witness"), dict):
        witness = evidence["witness"]
        if "plausible" not in witness:
            witness = {**witness, "plausible": True, "plausibility": UNGRADED}
            data = {**data, "evidence": {**evidence, "witness": witness}}
    # 6 -> 7: an optional field (imported) and an unscored reason (failed_in_their_run) are new; nothing renamed
    return {**data, "schema": SCHEMA_VERSION}


_BINARY = "0, 1 or null"
_COUNT = "a count of at least 0"
_SHARE = "a number from 0 to 1, or null"
_AT_LEAST_0 = "a number of at least 0"
RANGES: dict[str, str] = {
    "score": _BINARY,
    "llm_calls": _COUNT,
    "cost_usd": _AT_LEAST_0,
    **{f"readings.{name}": _BINARY for name in ("bird_ex", "spider_ex", "spider_ex_keep_distinct", "ts_ex")},
    **{f"readings.{name}": _BINARY for name in ("ts_ex_keep_distinct", "spider_em")},
    "readings.soft_f1": _SHARE,
    "readings.ts_databases": _COUNT,
    **{
        f"{side}.{name}": kind
        for side in ("pred", "gold")
        for name, kind in (("seconds", _AT_LEAST_0), ("row_count", _COUNT))
    },
    "comparison.pred_only": _COUNT,
    "comparison.gold_only": _COUNT,
    "labels.goldx_confidence": _SHARE,
    **{
        f"judges[].{name}": _COUNT
        for name in ("prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_tokens")
    },
    "judges[].sample": _COUNT,
    "judges[].cost_usd": _AT_LEAST_0,
    "judges[].seconds": _AT_LEAST_0,
    **{f"votes[].{name}": _COUNT for name in ("votes", "passes", "invalid")},
    **{f"votes[].{name}": _SHARE for name in ("agreement", "stated", "confidence")},
    **{f"efficiency.{name}": _COUNT for name in ("gold_steps", "pred_steps", "time_kept")},
    **{f"efficiency.{name}": _AT_LEAST_0 for name in ("steps_ratio", "time_ratio", "dev_time_ratio")},
}
"""The range of every number a record holds, by field (``[]``: each element of a list); null is allowed
wherever the layout allows it (a score of null is an unscored item). A record outside them was not written by
rose-sql: :meth:`Record.from_dict` refuses it, naming the field."""


def _fits(value: float, kind: str) -> bool:
    if not math.isfinite(value):
        return False
    if kind == _BINARY:
        return value in (0, 1)
    if kind == _SHARE:
        return 0 <= value <= 1
    if kind == _COUNT:
        return value >= 0 and float(value).is_integer()
    return value >= 0


def out_of_range(data: dict[str, Any]) -> str | None:
    """The first field of a record's data (of this layout) whose number is outside its range
    (:data:`RANGES`), said with its value and range; None when every one is in range. Values of the wrong
    type are left to the layout's validation, which names them."""
    for path, kind in RANGES.items():
        for where, value in _at(data, path.split(".")):
            if isinstance(value, bool) and kind == _BINARY:
                return f"{where}: {value!r} is not {kind}"
            if isinstance(value, int | float) and not isinstance(value, bool) and not _fits(value, kind):
                return f"{where}: {value!r} is not {kind}"
    return None


def _at(data: Any, parts: list[str], where: str = "") -> Iterator[tuple[str, Any]]:
    if not parts:
        yield where, data
        return
    head, rest = parts[0], parts[1:]
    many = head.endswith("[]")
    name = head[:-2] if many else head
    if not isinstance(data, dict) or name not in data:
        return
    value = data[name]
    here = f"{where}.{name}" if where else name
    if not many:
        yield from _at(value, rest, here)
    elif isinstance(value, list):
        for i, element in enumerate(value):
            yield from _at(element, rest, f"{here}.{i}")


def rename_ts(readings: dict[str, Any]) -> dict[str, Any]:
    """Readings (or per-reading values) of layout 4 or before under layout 5's names: ``ts_ex`` ->
    ``spider_ex``, ``ts_ex_keep_distinct`` -> ``spider_ex_keep_distinct``."""
    out = {k: v for k, v in readings.items() if k not in ("ts_ex", "ts_ex_keep_distinct")}
    for old in ("ts_ex", "ts_ex_keep_distinct"):
        if old in readings:
            out["spider" + old[2:]] = readings[old]
    return out


@cache
def _adapter() -> TypeAdapter[Record]:
    from pydantic import TypeAdapter

    from rose_sql.verdicts import ProverReply, RefuterReply, ReplyFormat

    adapter = TypeAdapter(Record)
    namespace = {"ProverReply": ProverReply, "RefuterReply": RefuterReply, "ReplyFormat": ReplyFormat}
    adapter.rebuild(_types_namespace=namespace)
    return adapter


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=str)


def dumps(data: dict[str, Any]) -> str:
    """A record's data as its one JSON line (without the newline)."""
    return _ENCODER.encode(data)


def id_key(item_id: Any) -> str:
    """A key under which an id read back from JSON equals the id it was written from: the id's JSON text
    (``5``, ``"5"``). Asked several times per item of every run: the common ids are written without the
    JSON encoder, to the same text."""
    kind = type(item_id)
    if kind is int:
        return str(item_id)
    if kind is str and item_id.isascii() and item_id.isprintable() and '"' not in item_id and "\\" not in item_id:
        return f'"{item_id}"'
    return json.dumps(item_id)


def read_records(path: Path, *, max_line_bytes: int = MAX_RECORD_LINE_BYTES) -> Iterator[Record]:
    """The records of a ``records.jsonl``, typed, read line by line; a torn (unterminated) last line is skipped.

    Raises :class:`~rose_sql.errors.InputError` naming the file and line of a line that is not a record, of a
    record outside the layout's ranges (:func:`out_of_range`), and of a line longer than ``max_line_bytes``
    (refused unread: memory stays bounded whatever the file holds)."""
    if not path.exists():
        return
    for lineno, raw, ended in read_lines(path, max_line_bytes):
        if not ended or not raw.strip():  # the part after the last newline is torn
            continue
        try:
            yield Record.from_dict(json.loads(raw))
        except json.JSONDecodeError as e:
            raise InputError(path, f"not a record ({e.msg}); the file was edited or corrupted", where=lineno) from None
        except RecursionError:
            raise InputError(
                path, "not a record (nested too deeply); the file was edited or corrupted", where=lineno
            ) from None
        except ValueError as e:
            raise InputError(path, str(e), where=lineno) from None


def _torn_tail(path: Path, block: int = 2**16) -> int:
    """Where the last complete line of a file ends (its length when it ends with a newline), read from the end
    in blocks: never the whole file."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        at = size
        while at > 0:
            start = max(0, at - block)
            f.seek(start)
            chunk = f.read(at - start)
            nl = chunk.rfind(b"\n")
            if nl != -1:
                return start + nl + 1
            at = start
        return 0


class RecordWriter:
    """Appends records to ``records.jsonl``, one flushed line each."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            end = _torn_tail(path)
            if end != path.stat().st_size:  # drop a line torn by a crash
                with path.open("r+b") as f:
                    f.truncate(end)
        self.path = path
        self._f = path.open("a", encoding="utf-8", errors="backslashreplace")  # lone surrogates stay valid JSON

    @staticmethod
    def rewrite(path: Path, records: list[Record]) -> None:
        """Replace ``path`` with exactly these records, atomically (a crash leaves the old file or the new)."""
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", encoding="utf-8", errors="backslashreplace") as f:
            for r in records:
                f.write(r.to_json() + "\n")
        tmp.replace(path)

    def write(self, record: Record) -> None:
        """Append a record (flushed by :meth:`flush`, which the run calls after every batch)."""
        self.write_line(record.to_json())

    def write_line(self, line: str) -> None:
        """Append a record already serialised as one JSON line."""
        self._f.write(line + "\n")

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()


@dataclass(frozen=True, slots=True)
class Judged:
    """The judges' part of a record: the decision, and the calls that led to it
    (:meth:`rose_sql.judges.judges.Judges.judge`)."""

    decision: Decision
    """The decision, with GoldX / AmbQ from the Refuter's reply."""
    calls: list[JudgeCall] = field(default_factory=list)
    """Every call made, in order (re-asks included)."""
    votes: list[StageVotes] | None = None
    """Each stage's tally, when stages voted (None: one reply decided each stage, or no judge was asked)."""
