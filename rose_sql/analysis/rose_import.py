"""Import the ROSE authors' own per-item outputs as ROSE-SQL records, and replay them under other policies.

Two layouts of theirs are read:

- ROSE-VEC (``reference_outputs/<part>/<judge>/<method>``), paired with the experts' labels file, which
  gives each item's db_id and the items that should be there;
- the paper's re-evaluation (``<system>/o3-<system>-eval``, beside ``EX-<system>-eval`` and
  ``problem_question_ids.json``), paired with a benchmark file (:mod:`rose_sql.analysis.reeval`: BIRD
  mini-dev, and BIRD dev for ids outside it), which gives each item's db_id, the texts theirs are
  checked against and the items that should be there.

A method folder is read by its shape, whatever its name:

- ``eval_results.json`` + ``prover_output.json`` + ``refuter_output.json``: a ROSE run. The replies are
  ``{question_id, result}`` lists; a retried item appears more than once, the last entry being the one its
  score came from. What their flow did is recovered from which judges ran: the Prover alone when the
  results differ; the Refuter alone when they matched (its comparator's verdict); neither when the
  prediction did not execute. Each item is decided by :func:`rose_sql.decide.decide` under the paper's
  policy (``matched_refuter="always"``) from the stored replies, and the decision is checked against their
  score; ``replay`` re-decides under another variant (:mod:`rose_sql.analysis.replay`). ``failure.json``
  (BIRD part) lists items also in ``eval_results.json``, kept for their error analysis: not read;
- ``eval_results.json`` + ``prover_output.json``: a Prover-only run (their ``ProverOnly``). The Prover judged
  every item, results compared or not, so no comparison is recorded and each item is decided by the
  Prover's reply, as the table decides under ``no-refuter`` when whether the results match is unknown;
- ``eval_results.json`` alone: scores (``FLEX``, ``llmsolver``, ``decisive/EX``...). An entry whose
  ``error`` says their call failed (``Connection error.``) or gave no readable reply is unscored
  (``judge_error``, ``judge_invalid``), never the 0 their file gives it.

What their outputs said of each item stays on the record as theirs (``record.imported``: their score,
their EX from the EX folder beside the run, the error their run recorded), never under an official
reading's name: BIRD EX is ours to compute. The items that should be there and have no entry are
records too, unscored ``absent_from_outputs`` (dropped silently) or ``failed_in_their_run`` (their run
recorded the failure).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, TypedDict, cast

from rose_sql.analysis.labels import LabelSet, key
from rose_sql.analysis.replay import Variant, replay
from rose_sql.config import MAX_INPUT_BYTES
from rose_sql.decide import DatasetLabels, Unscored
from rose_sql.errors import InputError, UsageError
from rose_sql.items.readers import parse_json, read_text
from rose_sql.provenance import JudgeInfo
from rose_sql.readings.formulas import Readings
from rose_sql.record import ComparisonInfo, ExecutionInfo, ImportedScores, JudgeCall, Record, RecordWriter
from rose_sql.summary import Summary, summarize, write_summary
from rose_sql.verdicts import ProverReply, RefuterReply

Kind = Literal["rose", "prover-only", "scores"]
"""A method folder's shape: Prover and Refuter replies, the Prover's alone, or scores only."""


class Attempt(TypedDict, total=False):
    """One reply of their ``prover_output.json`` or ``refuter_output.json`` (an entry's ``result``)."""

    verdict: bool
    expected_answer: str
    sql_description: str
    evidence: str
    reason: str
    judgement: str
    ambiguity: str
    gold_correct: bool


class Entry(TypedDict, total=False):
    """One entry of their files: ``eval_results.json``, the replies' ``{question_id, result}``, a ROSE-VEC
    label or a BIRD question (each holds some of these keys; ``question_id`` always)."""

    question_id: int | str
    score: float | None
    prover_result: bool | None
    refuter_result: bool | None
    result: Attempt
    predicted_sql: str
    gold_sql: str
    SQL: str
    question: str
    evidence: str
    db_id: str
    difficulty: str
    error: str


@dataclass(frozen=True, slots=True)
class Reference:
    """What the benchmark (or the labels file) says of one item: its database and its texts."""

    db_id: str
    """The item's database."""
    source: str
    """The file it was found in (its name)."""
    question: str | None = None
    evidence: str | None = None
    gold_sql: str | None = None
    difficulty: str | None = None


@dataclass(frozen=True, slots=True)
class Frame:
    """What an import is checked against: each item's reference, the items that should have an entry, and
    what to say of one that has none."""

    references: Mapping[str, Reference]
    """By id (as text): where db_id and the reference texts come from."""
    expected: list[str]
    """The ids that should have an entry, in order (the labels' or the benchmark's)."""
    absent: Callable[[str], tuple[Unscored, str]]
    """The unscored reason and why, for an expected id without an entry."""
    name: str = ""
    """The benchmark's (or labels file's) name, for the sentences that cite it."""


@dataclass(frozen=True, slots=True)
class Imported:
    """The records made from one output folder."""

    records: list[Record]
    """One per entry of their outputs, and one per expected item without an entry (unscored)."""
    kind: Kind
    """The folder's shape (see :data:`Kind`)."""
    model: str | None
    """The judge model (``o3``), or None for a deterministic method (``decisive/EX``)."""
    method: str = "ROSE"
    """The method folder's name (``ROSE``, ``ROSE-thread-4``, ``ProverOnly``, ``FLEX``, ``llmsolver``, ``EX``)."""
    variant: Variant = "always"
    """The policy the items were decided under (``always``: the paper's)."""
    warnings: list[str] = field(default_factory=list)
    """Disagreements between their files and our replay of them, or with the benchmark; duplicates."""
    notes: list[str] = field(default_factory=list)
    """What the figures stand on (the paper's figure over its own entries, the items without an entry)."""


Stage = Literal["prover", "refuter"]
AMBIGUITY = {"na": "none", "none": "none", "ambiguous question": "question", "ambiguous schema": "schema"}
_TEXTS = (("question", "question"), ("evidence", "evidence"), ("gold_sql", "gold_sql"), ("difficulty", "difficulty"))
"""Their entry's text fields, and the reference's name for each, checked against the benchmark."""


def load_entries(path: Path) -> list[Entry]:
    """A JSON list of objects with ``question_id`` (their outputs, a labels or a benchmark file), bounded."""
    data = parse_json(read_text(path, MAX_INPUT_BYTES), path)
    if not isinstance(data, list) or not all(isinstance(x, dict) and "question_id" in x for x in data):
        raise InputError(path, "expected a JSON list of objects with 'question_id'")
    return cast(list[Entry], data)


def _load(path: Path) -> list[Entry]:
    if not path.is_file():
        raise InputError(path, "missing (expected in a ROSE output folder)")
    return load_entries(path)


def _replies(path: Path) -> dict[str, list[Attempt]]:
    """Replies by question id, every attempt in file order."""
    out: dict[str, list[Attempt]] = {}
    for i, entry in enumerate(_load(path)):
        if not isinstance(entry.get("result"), dict):
            raise InputError(path, "an entry without a 'result' object", where=f"[{i}]")
        out.setdefault(key(entry["question_id"]), []).append(entry["result"])
    return out


def _final(attempts: list[Attempt], verdict: bool) -> Attempt | None:
    """The last attempt whose verdict is the one the score was computed from."""
    return next((a for a in reversed(attempts) if a.get("verdict") is verdict), None)


def prover_reply(result: Attempt) -> ProverReply:
    """Their Prover's reply in our shape (``sql_description`` -> ``sql_behaviour``, ``verdict`` -> ...)."""
    evidence = result.get("evidence")
    return ProverReply(
        expected_answer=str(result.get("expected_answer") or ""),
        sql_behaviour=str(result.get("sql_description") or ""),
        checks={"evidence": str(evidence)} if evidence else {},
        reasoning=str(result.get("reason") or ""),
        answers_question=bool(result["verdict"]),
    )


def refuter_reply(result: Attempt) -> RefuterReply:
    """Their Refuter's reply in our shape (``verdict`` -> ``overturn``, ambiguity names mapped)."""
    ambiguity = str(result.get("ambiguity") or "na").strip().lower()
    return RefuterReply(
        reasoning=str(result.get("judgement") or ""),
        overturn=bool(result["verdict"]),
        ambiguity=AMBIGUITY.get(ambiguity, "none"),  # type: ignore[arg-type]
        gold_correct=result.get("gold_correct") is not False,
    )


def _call(stage: Stage, model: str, reply: ProverReply | RefuterReply, raw: Attempt, src: Path) -> JudgeCall:
    return JudgeCall(
        stage=stage,
        model=model,
        reply=reply,
        raw=json.dumps(raw, ensure_ascii=False),
        reasoning=None,
        cached=False,
        prompt_tokens=0,
        completion_tokens=0,
        reasoning_tokens=None,
        cost_usd=None,
        seconds=0.0,
        prompt_sha256=None,
        params={},
        imported_from=str(src),
    )


def _labels(raw: Attempt | None) -> DatasetLabels:
    """GoldX / AmbQ as the paper reads them: ``gold_correct`` false; ambiguity ``ambiguous question``."""
    if raw is None:
        return DatasetLabels()
    ambiguity = AMBIGUITY.get(str(raw.get("ambiguity") or "na").strip().lower(), "none")
    return DatasetLabels(goldx=raw.get("gold_correct") is False, ambq=ambiguity == "question", ambiguity=ambiguity)


def _comparison(equal: bool | None) -> ComparisonInfo | None:
    if equal is None:
        return None
    said = "equal" if equal else "different"
    detail = f"the ROSE reference implementation's comparator found the results {said}"
    return ComparisonInfo(equal, "imported", detail, [], None, None)


NOT_COMPARED = ComparisonInfo(
    None, "not_compared", "their Prover-only method asks the Prover on every item; whether the results match is unknown"
)
"""The comparison of a Prover-only item: none was made (the Prover decides, as when a match is unknown)."""


def shape(outputs: Path) -> Kind:
    """A method folder's shape, from the files it holds."""
    prover, refuter = (outputs / "prover_output.json").is_file(), (outputs / "refuter_output.json").is_file()
    if refuter:
        return "rose"
    return "prover-only" if prover else "scores"


def names(outputs: Path) -> tuple[str | None, str]:
    """The judge model and the method a folder holds, from where it sits: ``<part>/<judge>/<method>``
    (ROSE-VEC; ``<part>/decisive/<method>`` has no judge), or ``<judge>-<system>-eval`` (the re-evaluation,
    method ROSE; ``EX-<system>-eval`` is their EX)."""
    if outputs.parent.name == "decisive":
        return None, outputs.name
    m = re.fullmatch(r"([^-]+)-.+-eval", outputs.name)
    if m is not None:
        return (None, "EX") if m.group(1) == "EX" else (m.group(1), "ROSE")
    return outputs.parent.name, outputs.name


def ex_folder(outputs: Path) -> Path | None:
    """Their EX beside a run: ``<part>/decisive/EX`` (ROSE-VEC) or the ``EX-<system>-eval`` sibling (the
    re-evaluation); None when there is none."""
    rose_vec = outputs.parent.parent / "decisive" / "EX"
    if (rose_vec / "eval_results.json").is_file() and rose_vec != outputs:
        return rose_vec
    m = re.fullmatch(r"[^-]+-(.+-eval)", outputs.name)
    sibling = outputs.parent / f"EX-{m.group(1)}" if m else None
    if sibling is not None and sibling != outputs and (sibling / "eval_results.json").is_file():
        return sibling
    return None


def _ex_scores(folder: Path | None) -> dict[str, int]:
    if folder is None:
        return {}
    return {
        key(x["question_id"]): int(x["score"] == 1.0)
        for x in _load(folder / "eval_results.json")
        if x.get("score") is not None and not x.get("error")
    }


def _difficulties(path: Path | None) -> dict[str, str]:
    if path is None:
        return {}
    return {key(x["question_id"]): str(x["difficulty"]) for x in load_entries(path) if x.get("difficulty")}


def labels_frame(labels: LabelSet) -> Frame:
    """The frame of a labels file: db_id and texts from a ROSE-VEC file; every labelled item expected."""
    refs: dict[str, Reference] = {}
    if labels.format == "rose-vec":
        for x in load_entries(labels.path):
            refs[key(x["question_id"])] = Reference(
                str(x.get("db_id") or ""),
                labels.path.name,
                question=x.get("question"),
                gold_sql=x.get("gold_sql"),
            )

    def absent(k: str) -> tuple[Unscored, str]:
        return "absent_from_outputs", "labelled, but no entry in their outputs (their run dropped it)"

    return Frame(refs, list(labels.labels), absent, labels.path.name)


def _differs(entry: Entry, ref: Reference | None) -> list[str]:
    if ref is None:
        return []
    out = []
    for theirs, ours in _TEXTS:
        a, b = entry.get(theirs), getattr(ref, ours)
        if a is not None and b is not None and a != b:
            out.append(theirs)
    return out


def import_outputs(
    outputs: Path,
    frame: Frame | LabelSet,
    *,
    model: str | None = None,
    method: str | None = None,
    ex_dir: Path | None = None,
    difficulty_path: Path | None = None,
    variant: Variant = "always",
) -> Imported:
    """Turn one output folder into records (decided under ``variant``; ``always`` is the paper), checked
    against ``frame`` (a labels file, or a benchmark's :func:`rose_sql.analysis.reeval.benchmark_frame`)."""
    if not outputs.is_dir():
        raise InputError(outputs, "not a folder (expected e.g. reference_outputs/rose-vec-bird/o3/ROSE)")
    if isinstance(frame, LabelSet):
        frame = labels_frame(frame)
    kind = shape(outputs)
    found_model, found_method = names(outputs)
    model, method = model or found_model, method or found_method
    if kind != "scores" and model is None:
        raise UsageError(f"{outputs} holds judge replies but no judge model can be read from its path: pass --model")
    if kind == "scores" and variant != "always":
        raise UsageError(f"{outputs} holds scores only: there are no judgements to replay under {variant!r}")
    if kind == "prover-only" and variant not in ("always", "no-refuter"):
        raise UsageError(
            f"{outputs} is a Prover-only run: its Prover judged every item and no results were compared, so "
            f"there is no match to accept or refute under {variant!r} (its own flow is no-refuter's)"
        )
    src = outputs / "eval_results.json"
    entries = _load(src)
    ex = _ex_scores(ex_dir if ex_dir is not None else ex_folder(outputs))
    diffs = _difficulties(difficulty_path)
    provers = _replies(outputs / "prover_output.json") if kind != "scores" else {}
    refuters = _replies(outputs / "refuter_output.json") if kind == "rose" else {}
    judge = model or ""
    warnings: list[str] = []
    records: list[Record] = []
    seen: set[str] = set()
    for entry in entries:
        k = key(entry["question_id"])
        if k in seen:
            warnings.append(f"{src}: question {k} appears twice; the first entry is kept")
            continue
        seen.add(k)
        ref = frame.references.get(k)
        score = None if entry.get("score") is None or entry.get("error") else int(entry.get("score") == 1.0)
        theirs = ImportedScores(
            method=method,
            score=score,
            ex=score if method.upper() == "EX" and k not in ex else ex.get(k),
            error=str(entry["error"]) if entry.get("error") else None,
            benchmark=ref.source if ref is not None else None,
            differs=_differs(entry, ref),
        )
        base = _base(entry, ref, src, diffs.get(k), theirs)
        if kind == "scores":
            records.append(_score_record(entry, base, method))
            continue
        attempts = (provers.get(k, []), refuters.get(k, []))
        rec, problems = _judged_record(entry, base, judge, kind, attempts, outputs, variant)
        records.append(rec)
        warnings += problems
    missing = [k for k in frame.expected if k not in seen]
    for k in missing:
        reason, why = frame.absent(k)
        records.append(_absent(k, frame.references.get(k), reason, why))
    if missing:
        warnings.append(f"{len(missing)} items of {frame.name or 'the labels'} have no entry in {src}: unscored")
    return Imported(records, kind, model, method, variant, warnings)


class _Base(TypedDict):
    """The fields of a record that the item gives, whoever decided it."""

    id: int | str
    db_id: str
    readings: Readings
    difficulty: str | None
    question: str | None
    pred_sql: str
    gold_sql: str | None
    source: str
    imported: ImportedScores


def _base(entry: Entry, ref: Reference | None, src: Path, difficulty: str | None, theirs: ImportedScores) -> _Base:
    return {
        "id": entry["question_id"],
        "db_id": ref.db_id if ref is not None else str(entry.get("db_id") or ""),
        "readings": Readings(),
        "difficulty": difficulty or entry.get("difficulty") or (ref.difficulty if ref is not None else None),
        "question": entry.get("question"),
        "pred_sql": entry.get("predicted_sql") or "",
        "gold_sql": entry.get("gold_sql"),
        "source": f"{src}:{entry['question_id']}",
        "imported": theirs,
    }


def _failure(error: str) -> Unscored:
    """Their recorded error as a reason: a reply that could not be read is ``judge_invalid``, any other
    failure of their call or pipeline ``judge_error`` (never a 0: the prediction did not cause it)."""
    return "judge_invalid" if re.search(r"Expecting value|JSON|decode", error) else "judge_error"


def _score_record(entry: Entry, base: _Base, method: str) -> Record:
    raw, error = entry.get("score"), entry.get("error")
    if error:
        reason: Unscored | None = _failure(str(error))
        why = f"their {method} run recorded an error instead of a verdict ({error!r}); their file scores it {raw!r}"
        score = None
    else:
        score = None if raw is None else int(raw == 1.0)
        reason = None if score is not None else "no_score"
        why = f"score {raw!r} imported from the authors' {method} output"
    return Record(
        score=score,
        unscored_reason=reason,
        decided_by="imported" if score is not None else None,
        why=why,
        comparison=None,
        pred=ExecutionInfo("skipped", 0.0),
        gold=ExecutionInfo("skipped", 0.0),
        **base,
    )


def _calls(
    qid: int | str,
    model: str,
    verdicts: tuple[bool | None, bool | None],
    attempts: tuple[list[Attempt], list[Attempt]],
    outputs: Path,
) -> tuple[list[JudgeCall], Attempt | None, list[str]]:
    """The judge calls behind an item's verdicts, its Refuter's raw reply, and what could not be found."""
    calls: list[JudgeCall] = []
    problems: list[str] = []
    refuter_raw = None
    stages: tuple[Stage, Stage] = ("prover", "refuter")
    for stage, verdict, tried in zip(stages, verdicts, attempts, strict=True):
        if verdict is None:
            continue
        raw = _final(tried, bool(verdict))
        if raw is None:
            problems.append(f"question {qid}: no {stage} reply with verdict {verdict} in {stage}_output.json")
            continue
        reply = prover_reply(raw) if stage == "prover" else refuter_reply(raw)
        calls.append(_call(stage, model, reply, raw, outputs / f"{stage}_output.json"))
        refuter_raw = raw if stage == "refuter" else refuter_raw
    return calls, refuter_raw, problems


def _judged_record(
    entry: Entry,
    base: _Base,
    model: str,
    kind: Kind,
    attempts: tuple[list[Attempt], list[Attempt]],
    outputs: Path,
    variant: Variant,
) -> tuple[Record, list[str]]:
    qid = entry["question_id"]
    pv, rv = entry.get("prover_result"), entry.get("refuter_result")
    calls, refuter_raw, problems = _calls(qid, model, (pv, rv if kind == "rose" else None), attempts, outputs)
    executed = pv is not None or rv is not None or entry.get("score") == 1.0
    pred = ExecutionInfo("ok", 0.0) if executed else ExecutionInfo("error", 0.0, error="did not execute (their run)")
    own: Variant = "always" if kind == "rose" else "no-refuter"  # the policy their method decided under
    record = Record(
        score=None,
        unscored_reason=None,
        decided_by=None,
        why="",
        comparison=_comparison(pv is None if executed else None) if kind == "rose" else NOT_COMPARED,
        pred=pred,
        gold=ExecutionInfo("ok", 0.0),
        labels=_labels(refuter_raw),
        judges=calls,
        llm_calls=len(calls),
        **base,
    )
    paper, theirs = replay(record, own), base["imported"].score
    if variant == "always" and theirs is not None and paper.score != theirs:
        # what they published stands; the record says that their stored replies do not give it
        why = f"their score {entry.get('score')}, although their stored replies give {paper.score} ({paper.why})"
        problems.append(f"question {qid}: {why}")
        return replace(record, score=theirs, decided_by="imported", why=why), problems
    chosen = own if variant == "always" else variant
    decided = replay(record, chosen)
    why = decided.why + ("" if chosen == own else f" (replayed under policy {variant})")
    record = replace(record, score=decided.score, unscored_reason=decided.unscored_reason, why=why)
    return replace(record, decided_by=decided.decided_by), problems


def _absent(k: str, ref: Reference | None, reason: Unscored, why: str) -> Record:
    return Record(
        id=int(k) if k.isdigit() else k,
        db_id=ref.db_id if ref is not None else "",
        score=None,
        unscored_reason=reason,
        decided_by=None,
        why=why,
        readings=Readings(),
        comparison=None,
        pred=ExecutionInfo("skipped", 0.0),
        gold=ExecutionInfo("skipped", 0.0),
        difficulty=ref.difficulty if ref is not None else None,
        question=ref.question if ref is not None else None,
        gold_sql=ref.gold_sql if ref is not None else None,
    )


def judge_info(imported: Imported) -> JudgeInfo | None:
    """The judge an imported run names (None for a deterministic method): model, method, policy."""
    if imported.model is None:
        return None
    v = imported.variant
    if imported.kind == "rose":
        policy = "paper" if v == "always" else f"replay:{v}"
    elif imported.kind == "prover-only":
        policy = "prover-only"
    else:
        policy = "scores"
    return JudgeInfo(
        model=imported.model,
        provider="imported: ROSE authors' reference outputs",
        settings={"policy": policy, "method": imported.method},
        matched_refuter="never" if v in ("never", "no-refuter") or imported.kind != "rose" else v,
    )


def write_run(imported: Imported, out: Path, *, force: bool = False) -> Summary:
    """Write ``records.jsonl`` and ``summary.json`` into ``out`` (refusing to overwrite unless ``force``)."""
    records_path = out / "records.jsonl"
    if records_path.exists() and not force:
        raise UsageError(f"{records_path} already exists; pass --force to replace it, or choose another --out")
    return write_run_records(
        imported.records,
        out,
        None,
        format=f"rose-import:{imported.kind}",
        warnings=imported.warnings,
        judge=judge_info(imported),
    )


def write_run_records(
    records: Sequence[Record],
    out: Path,
    like: Summary | None,
    *,
    format: str | None = None,
    warnings: Sequence[str] | None = None,
    judge: JudgeInfo | None = None,
) -> Summary:
    """Write imported records as a run folder (``records.jsonl``, replaced, and ``summary.json``), its summary
    saying what ``like``'s does unless told otherwise (the format, the warnings, the judge)."""
    records_path = out / "records.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    records_path.unlink(missing_ok=True)
    writer = RecordWriter(records_path)
    try:
        for r in records:
            writer.write(r)
    finally:
        writer.close()
    summary = summarize(records_path)
    summary = replace(
        summary,
        format=format if format is not None else like.format if like is not None else "rose-import",
        warnings=list(warnings) if warnings is not None else like.warnings if like is not None else [],
        judge=judge if judge is not None else like.judge if like is not None else None,
    )
    write_summary(summary, out / "summary.json")
    return summary
