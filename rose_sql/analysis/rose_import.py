"""Import the ROSE authors' own per-item outputs as ROSE-SQL records, and replay them under other policies.

Their run folders (``reference_outputs/<part>/o3/ROSE``) hold ``eval_results.json`` (one entry per
item: ``score``, ``prover_result``, ``refuter_result``, ``label``), ``prover_output.json`` and
``refuter_output.json`` (the replies, ``{question_id, result}``; a retried item appears more than
once, the last entry being the one its score came from) and, for the BIRD part, ``failure.json`` (the
items where the score disagrees with the experts, kept for their error analysis: they are in
``eval_results.json`` too and count like any other item). A folder with ``eval_results.json`` only
(``decisive/EX``, or another judge's scores) is imported as scores.

What their flow did is recovered from which judges ran: the Prover alone ran when the results
differ; the Refuter alone when the results matched (its comparator's verdict); neither when the
prediction did not execute. Each imported item is then decided by :func:`rose_sql.decide.decide`
under the paper's policy (``matched_refuter="always"``) from the stored replies, and the decision is
checked against their score. ``replay`` re-decides under another variant (:mod:`rose_sql.analysis.replay`).

Their EX (``decisive/EX`` beside the run, when present) becomes the records' ``bird_ex`` reading.
Labels with no entry in their outputs become records unscored with reason ``absent_from_outputs``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, TypedDict, cast

from rose_sql.analysis.labels import LabelSet, key
from rose_sql.analysis.replay import Variant, replay
from rose_sql.decide import DatasetLabels
from rose_sql.errors import InputError, UsageError
from rose_sql.provenance import JudgeInfo
from rose_sql.readings.formulas import Readings
from rose_sql.record import ComparisonInfo, ExecutionInfo, JudgeCall, Record, RecordWriter
from rose_sql.summary import Summary, summarize, write_summary
from rose_sql.verdicts import ProverReply, RefuterReply


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
    question: str
    db_id: str
    difficulty: str


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


Stage = Literal["prover", "refuter"]
AMBIGUITY = {"na": "none", "none": "none", "ambiguous question": "question", "ambiguous schema": "schema"}


@dataclass(frozen=True, slots=True)
class Imported:
    """The records made from one output folder."""

    records: list[Record]
    """One per labelled item (and per output item without a label)."""
    kind: str
    """``rose`` (Prover and Refuter replies) or ``scores`` (eval_results.json only)."""
    model: str
    """The judge model named by the folder (``o3``), or the method (``EX``)."""
    variant: Variant = "always"
    """The policy the items were decided under (``always``: the paper's)."""
    warnings: list[str] = field(default_factory=list)
    """Disagreements between their files and our replay of them, duplicates, missing items."""


def _load(path: Path) -> list[Entry]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(path, "missing (expected in a ROSE output folder)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(path, f"cannot read: {e}") from None
    if not isinstance(data, list) or not all(isinstance(x, dict) and "question_id" in x for x in data):
        raise InputError(path, "expected a JSON list of objects with 'question_id'")
    return cast(list[Entry], data)


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


def _difficulties(path: Path | None) -> dict[str, str]:
    if path is None:
        return {}
    return {key(x["question_id"]): str(x["difficulty"]) for x in _load(path) if x.get("difficulty")}


def _ex_scores(outputs: Path, ex_dir: Path | None) -> dict[str, int]:
    """Their EX per item: ``ex_dir``, else ``<part>/decisive/EX`` beside ``<part>/<model>/ROSE``."""
    folder = ex_dir if ex_dir is not None else outputs.parent.parent / "decisive" / "EX"
    path = folder / "eval_results.json"
    if ex_dir is None and not path.is_file():
        return {}
    return {key(x["question_id"]): int(x["score"] == 1.0) for x in _load(path) if x.get("score") is not None}


def _base(entry: Entry, label_db: str, src: Path, ex: int | None, difficulty: str | None) -> _Base:
    return {
        "id": entry["question_id"],
        "db_id": label_db,
        "readings": Readings(bird_ex=ex),
        "difficulty": difficulty,
        "question": entry.get("question"),
        "pred_sql": entry.get("predicted_sql") or "",
        "gold_sql": entry.get("gold_sql"),
        "source": f"{src}:{entry['question_id']}",
    }


def import_outputs(
    outputs: Path,
    labels: LabelSet,
    *,
    model: str | None = None,
    ex_dir: Path | None = None,
    difficulty_path: Path | None = None,
    variant: Variant = "always",
) -> Imported:
    """Turn one ROSE output folder into records (decided under ``variant``; ``always`` is the paper)."""
    if not outputs.is_dir():
        raise InputError(outputs, "not a folder (expected e.g. reference_outputs/rose-vec-bird/o3/ROSE)")
    kind = (
        "rose" if (outputs / "prover_output.json").exists() or (outputs / "refuter_output.json").exists() else "scores"
    )
    name = model or (outputs.parent.name if kind == "rose" else outputs.name)
    src = outputs / "eval_results.json"
    entries = _load(src)
    raw_db = _raw_labels(labels)
    ex = _ex_scores(outputs, ex_dir)
    diffs = _difficulties(difficulty_path)
    warnings: list[str] = []
    if kind == "scores" and variant != "always":
        raise UsageError(f"{outputs} holds scores only: there are no judgements to replay under {variant!r}")
    provers = _replies(outputs / "prover_output.json") if kind == "rose" else {}
    refuters = _replies(outputs / "refuter_output.json") if kind == "rose" else {}
    records: list[Record] = []
    seen: set[str] = set()
    for entry in entries:
        k = key(entry["question_id"])
        if k in seen:
            warnings.append(f"{src}: question {k} appears twice; the first entry is kept")
            continue
        seen.add(k)
        base = _base(entry, raw_db.get(k, ""), src, ex.get(k), diffs.get(k))
        if kind == "scores":
            records.append(_score_record(entry, base, name))
        else:
            attempts = (provers.get(k, []), refuters.get(k, []))
            rec, problems = _rose_record(entry, base, name, attempts, outputs, variant)
            records.append(rec)
            warnings += problems
    for k in labels.labels.keys() - seen:
        records.append(_absent(k, raw_db.get(k, ""), src))
    if labels.labels.keys() - seen:
        warnings.append(f"{len(labels.labels.keys() - seen)} labelled items have no entry in {src}: unscored")
    return Imported(records, kind, name, variant, warnings)


def _raw_labels(labels: LabelSet) -> dict[str, str]:
    """db_id per item from a ROSE-VEC file (their outputs do not carry it)."""
    if labels.format != "rose-vec":
        return {}
    data = json.loads(labels.path.read_text(encoding="utf-8"))
    return {key(x["question_id"]): str(x.get("db_id") or "") for x in data}


def _score_record(entry: Entry, base: _Base, method: str) -> Record:
    raw = entry.get("score")
    score = None if raw is None else int(raw == 1.0)
    ex_reading = base["readings"]
    if method.upper() == "EX" and ex_reading.bird_ex is None:
        base = {**base, "readings": Readings(bird_ex=score)}
    return Record(
        score=score,
        unscored_reason=None if score is not None else "no_score",
        decided_by="imported" if score is not None else None,
        why=f"score {raw!r} imported from the authors' {method} output",
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


def _rose_record(
    entry: Entry,
    base: _Base,
    model: str,
    attempts: tuple[list[Attempt], list[Attempt]],
    outputs: Path,
    variant: Variant,
) -> tuple[Record, list[str]]:
    qid = entry["question_id"]
    pv, rv = entry.get("prover_result"), entry.get("refuter_result")
    calls, refuter_raw, problems = _calls(qid, model, (pv, rv), attempts, outputs)
    executed = pv is not None or rv is not None or entry.get("score") == 1.0
    pred = ExecutionInfo("ok", 0.0) if executed else ExecutionInfo("error", 0.0, error="did not execute (their run)")
    record = Record(
        score=None,
        unscored_reason=None,
        decided_by=None,
        why="",
        comparison=_comparison(pv is None if executed else None),
        pred=pred,
        gold=ExecutionInfo("ok", 0.0),
        labels=_labels(refuter_raw),
        judges=calls,
        llm_calls=len(calls),
        **base,
    )
    paper, theirs = replay(record, "always"), entry.get("score")
    if variant == "always" and theirs is not None and paper.score != int(theirs == 1.0):
        # what they published stands; the record says that their stored replies do not give it
        why = f"their score {theirs}, although their stored replies give {paper.score} ({paper.why})"
        problems.append(f"question {qid}: {why}")
        return replace(record, score=int(theirs == 1.0), decided_by="imported", why=why), problems
    decided = replay(record, variant)
    why = decided.why + ("" if variant == "always" else f" (replayed under policy {variant})")
    record = replace(record, score=decided.score, unscored_reason=decided.unscored_reason, why=why)
    return replace(record, decided_by=decided.decided_by), problems


def _absent(k: str, db_id: str, src: Path) -> Record:
    return Record(
        id=int(k) if k.isdigit() else k,
        db_id=db_id,
        score=None,
        unscored_reason="absent_from_outputs",
        decided_by=None,
        why=f"labelled, but no entry in {src} (their run dropped it)",
        readings=Readings(),
        comparison=None,
        pred=ExecutionInfo("skipped", 0.0),
        gold=ExecutionInfo("skipped", 0.0),
    )


def write_run(imported: Imported, out: Path, *, force: bool = False) -> Summary:
    """Write ``records.jsonl`` and ``summary.json`` into ``out`` (refusing to overwrite unless ``force``)."""
    records_path = out / "records.jsonl"
    if records_path.exists() and not force:
        raise UsageError(f"{records_path} already exists; pass --force to replace it, or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    records_path.unlink(missing_ok=True)
    writer = RecordWriter(records_path)
    try:
        for r in imported.records:
            writer.write(r)
    finally:
        writer.close()
    summary = summarize(records_path)
    v = imported.variant
    judge = (
        None
        if imported.kind == "scores"
        else JudgeInfo(
            model=imported.model,
            provider="imported: ROSE authors' reference outputs",
            settings={"policy": "paper" if v == "always" else f"replay:{v}"},
            matched_refuter="never" if v in ("never", "no-refuter") else v,
        )
    )
    summary = replace(summary, format=f"rose-import:{imported.kind}", warnings=imported.warnings, judge=judge)
    write_summary(summary, out / "summary.json")
    return summary
