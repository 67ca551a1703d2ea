#!/usr/bin/env python3
"""Wall time of the judge cascade: ``rose run`` against the ROSE reference implementation, one endpoint.

No real LLM is reachable here, so both sides talk to one scripted OpenAI-compatible server started in
this process (:class:`rose_sql.testing.ScriptedOpenAI` on loopback) whose every reply takes
``--latency`` seconds (1 s by default, via :func:`rose_sql.testing.latency`). The responder tells the
two sides and their judges apart by the system prompt and answers valid JSON in the shape each prompt
asks for: ours ``{"expected_answer", "sql_behaviour", "reasoning", "answers_question"}`` (Prover) and
``{"reasoning", "overturn", "ambiguity", "gold_correct"}`` (Refuter); the reference's ``{"expected_answer",
"sql_description", "reason", "verdict", "evidence"}`` (Prover) and ``{"judgement", "verdict", "ambiguity",
"gold_correct"}`` (Refuter). Verdicts are deterministic per item: a hash of the predicted SQL (comments
stripped, whitespace collapsed) decides whether the Prover passes (3 in 4) and whether the Refuter
overturns (1 in 4), so both sides see the same mix of passes and failures.

The workload: ``--n`` (500) items drawn deterministically (ordered by a hash of file and line) from the
Spider prediction files ``<shared>/preds/spider/*.txt`` paired with ``spider/dev.json`` (for the question
text; the gold is that of ``dev_gold.sql``), keeping only items whose database exists. It is written to a
temporary folder as generic JSONL (``id, db_id, question, evidence, gold_sql, pred_sql``) for ``rose run``
and as the reference's JSON list (``question_id, db_id, question, evidence, predicted_sql, gold_sql``);
the databases used are copied there twice (one copy per side: the reference opens them writable; its
copy is hashed before and after).

Measured in one run, each a fresh subprocess with a fresh output folder:

1. ``rose run ITEMS --db-root DB --out OUT --judge-model bench-model --judge-base-url URL
   --concurrency 32 --no-cache --policy paper`` (the paper's flow: the Refuter on every matching result);
2. the same with ``--policy rose`` (the default: the Refuter on a match only when evidence doubts it);
3. ``--policy paper --cache-dir C`` twice with the same fresh ``C``: the second run must make 0 server
   calls; its records.jsonl is compared with the first's, item by item, ignoring the fields ``cached``
   and ``seconds`` wherever they occur, and every other field that differs is listed;
4. the reference's ``main.py --input ITEMS.json --threads 8`` run from a temporary folder holding
   ``dev_databases/`` (it reads ``dev_databases/<db_id>/<db_id>.sqlite`` relative to its working
   directory and writes ``output/`` there), with ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` set in its
   environment: its Prover and Refuter build ``openai.OpenAI(api_key=os.getenv("OPENAI_API_KEY"),
   base_url=os.getenv("OPENAI_BASE_URL"))`` for every call, and ``load_dotenv()`` does not override
   variables already set. Its model name is fixed in ``main.py``; the scripted server accepts any.

Printed: wall times, the ratio reference / ROSE-SQL (``--policy paper``; target >= 8), calls per item
(``summary.json`` ``llm.calls_per_item`` and server requests / items), server requests by side and judge,
the peak number of requests in flight at the server (from arrival times: a request is in flight for
``--latency`` seconds after it arrives), where each run's wall time goes (start to first request, the LLM
phase, last reply to exit) next to its LLM-bound floor (ours: calls x latency / ``--concurrency``; the
reference's: the calls of its busiest thread x latency, since each thread takes a fixed slice of the items
and calls the LLM one item after another), requests the SDK marked as retries, how often the two sides'
scores agree, and the cache check.

Exact command (from the repository root)::

    .venv/bin/python bench/bench_judges.py --rose-ref /work/official/ROSE \\
        --rose-ref-python /work/official/rose-venv/bin/python

``--rose-ref`` is a local copy of the reference implementation (it is third-party code: read from the
path given, never copied), ``--rose-ref-python`` a Python with its dependencies (openai, python-dotenv,
tqdm, pandas). Options: ``--shared`` (default ``../shared/data``), ``--n``, ``--latency``,
``--concurrency`` (ours, default 32), ``--threads`` (the reference's, default 8), ``--rose`` (default
``.venv/bin/rose``), ``--cap`` (seconds any one run may take, default 3600), ``--skip-reference``,
``--json`` (write the measurements), ``--keep`` (keep the temporary folder). Exit status 0 when every run
completed, 1 when a run failed or a check did not hold (the ratio target is reported, not enforced),
2 when a path is missing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rose_sql.items.load import Item, load_items
from rose_sql.sql import strip_comments
from rose_sql.testing import RecordedRequest, Reply, ScriptedOpenAI, latency

REPO = Path(__file__).resolve().parents[1]
MODEL = "bench-model"
IGNORED_FIELDS = frozenset({"cached", "seconds"})

# ----------------------------------------------------------------------------- the scripted judge

# What tells the prompts apart (system prompt, then user text for the reference's matched Refuter).
_OURS_PROVER = "You are the SQL Prover"
_OURS_REFUTER = "You are the Adversarial Refuter"
_OURS_MATCHED = "returned exactly the same result"
_REF_PROVER = "You are a **SQL Prover**"
_REF_REFUTER = "You are a **SQL Refuter**"
_REF_MATCHED = "Execution results are not provided because"

_OURS_SQL = re.compile(r"<<<DATA predicted_sql (\w+)>>>\n(.*?)\n<<<END predicted_sql \1>>>", re.DOTALL)
_REF_SQL = re.compile(r"###### Predicted SQL\n(.*?)\n\n######", re.DOTALL)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def classify(body: dict[str, Any]) -> tuple[str, str, str | None]:
    """(side, stage, predicted SQL) of a chat request; side ``unknown`` when no prompt is recognised."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    system = " ".join(" ".join(_text(m) for m in messages if m.get("role") == "system").split())
    user = _text(next((m for m in messages if m.get("role") == "user"), {}))
    if _OURS_PROVER in system or _OURS_REFUTER in system:
        m = _OURS_SQL.search(user)
        matched = _OURS_MATCHED in system
        stage = "prover" if _OURS_PROVER in system else ("refuter_matched" if matched else "refuter")
        return "rose", stage, m.group(2) if m else None
    if _REF_PROVER in system or _REF_REFUTER in system:
        m = _REF_SQL.search(user)
        matched = _REF_MATCHED in user
        stage = "prover" if _REF_PROVER in system else ("refuter_matched" if matched else "refuter")
        return "reference", stage, m.group(1) if m else None
    return "unknown", "unknown", None


def norm_sql(sql: str) -> str:
    """The predicted SQL as both sides show it, comparable: comments stripped, whitespace collapsed."""
    return " ".join(strip_comments(sql).split())


def verdicts(sql: str) -> tuple[bool, bool]:
    """(the Prover passes, the Refuter overturns) for a predicted SQL: deterministic, about 3/4 and 1/4."""
    digest = hashlib.sha256(norm_sql(sql).encode("utf-8", "surrogatepass")).digest()
    return digest[0] < 192, digest[1] < 64


class Judge:
    """The responder: valid JSON in the shape each side's prompt asks for, the verdict from the SQL."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.unkeyed = 0  # requests whose predicted SQL could not be found (verdict from the whole text)

    def __call__(self, request: dict[str, Any], index: int) -> Reply:
        side, stage, sql = classify(request)
        if side == "unknown":
            return Reply(status=400, error="bench: unrecognised prompt")
        if sql is None:
            with self._lock:
                self.unkeyed += 1
            sql = json.dumps(request.get("messages"), sort_keys=True)
        passes, overturn = verdicts(sql)
        reply: dict[str, Any]
        if side == "rose" and stage == "prover":
            reply = {
                "expected_answer": "what the question asks for",
                "sql_behaviour": "what the query computes",
                "checks": dict.fromkeys(
                    ("requirements", "distinct", "nulls", "units", "extremes_and_ties", "joins"), "ok"
                ),
                "reasoning": "scripted verdict (bench)",
                "answers_question": passes,
            }
        elif side == "rose":
            reply = {
                "reasoning": "scripted verdict (bench)",
                "overturn": overturn,
                "label": "bench",
                "ambiguity": "none",
                "gold_correct": True,
                "gold_confidence": 0.9,
            }
        elif stage == "prover":
            reply = {
                "expected_answer": "what the question asks for",
                "sql_description": "what the query computes",
                "reason": "scripted verdict (bench)",
                "verdict": passes,
                "evidence": "column 1" if passes else "",
            }
        else:
            reply = {
                "judgement": "scripted verdict (bench)",
                "verdict": overturn,
                "ambiguity": "na",
                "gold_correct": True,
            }
        return Reply(content=json.dumps(reply))


# ----------------------------------------------------------------------------- workload


@dataclass
class Workload:
    folder: Path
    items: list[Item]
    jsonl: Path  # generic JSONL for rose run
    ref_json: Path  # the reference's JSON list
    db_root: Path  # ours
    ref_dir: Path  # the reference's working directory (holds dev_databases/)
    sources: dict[str, int] = field(default_factory=dict)
    skipped_files: list[str] = field(default_factory=list)


def build_workload(shared: Path, n: int, tmp: Path) -> Workload:
    spider = shared / "spider"
    candidates: list[tuple[str, Item]] = []
    skipped = []
    for pred in sorted((shared / "preds" / "spider").glob("*.txt")):
        try:
            loaded = load_items(pred, spider / "dev.json", "spider")
        except Exception as e:  # a file the loader refuses is reported, not fatal
            skipped.append(f"{pred.name}: {e}")
            continue
        for it in loaded.items:
            if (spider / "database" / it.db_id / f"{it.db_id}.sqlite").is_file() and it.gold_sql:
                key = hashlib.sha256(f"{pred.stem}:{it.id}".encode()).hexdigest()
                candidates.append((key, Item(f"{pred.stem}:{it.id}", it.db_id, it.pred_sql, it.gold_sql, it.question)))
    candidates.sort(key=lambda kv: kv[0])
    items = [it for _, it in candidates[:n]]
    if len(items) < n:
        raise SystemExit(f"only {len(items)} usable items under {shared}; --n {n} asked")
    folder = tmp / "work"
    folder.mkdir()
    jsonl = folder / "bench500.jsonl"
    with jsonl.open("w", encoding="utf-8") as f:
        for it in items:
            row = {"id": it.id, "db_id": it.db_id, "question": it.question, "evidence": "", "gold_sql": it.gold_sql}
            f.write(json.dumps({**row, "pred_sql": it.pred_sql}, ensure_ascii=False) + "\n")
    ref_dir = tmp / "reference"
    ref_dir.mkdir()
    ref_json = ref_dir / "bench500.json"
    ref_items = [
        {
            "question_id": it.id,
            "db_id": it.db_id,
            "question": it.question,
            "evidence": "",
            "predicted_sql": it.pred_sql,
            "gold_sql": it.gold_sql,
        }
        for it in items
    ]
    ref_json.write_text(json.dumps(ref_items, ensure_ascii=False, indent=1), encoding="utf-8")
    db_root = folder / "database"
    for root in (db_root, ref_dir / "dev_databases"):
        for db_id in sorted({it.db_id for it in items}):
            (root / db_id).mkdir(parents=True)
            shutil.copy2(spider / "database" / db_id / f"{db_id}.sqlite", root / db_id / f"{db_id}.sqlite")
    sources = Counter(str(it.id).split(":")[0] for it in items)
    return Workload(folder, items, jsonl, ref_json, db_root, ref_dir, dict(sorted(sources.items())), skipped)


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# ----------------------------------------------------------------------------- runs


@dataclass
class Run:
    name: str
    wall_s: float
    rc: int | None  # None: killed at --cap
    requests: list[RecordedRequest]
    t_start: float
    t_end: float
    log: Path
    stages: dict[str, int] = field(default_factory=dict)
    models: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def calls(self) -> int:
        return len(self.requests)

    @property
    def retries(self) -> int:
        """Requests the client marked as a retry (the SDK's ``x-stainless-retry-count`` header)."""
        return sum(1 for r in self.requests if r.headers.get("x-stainless-retry-count", "0") != "0")


def timed(
    name: str, cmd: list[str], *, cwd: Path, env: dict[str, str], log: Path, cap: float, srv: ScriptedOpenAI
) -> Run:
    """Run a command in its own process group with output to ``log``; the server's requests during it."""
    srv.reset()
    with log.open("wb") as out:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=cap)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # our own child's group, nothing else
            proc.wait()
            rc = None
        t1 = time.monotonic()
    reqs = srv.requests
    stages = Counter(f"{side}:{stage}" for side, stage, _ in (classify(r.body) for r in reqs))
    models = sorted({r.model for r in reqs})
    return Run(name, t1 - t0, rc, reqs, t0, t1, log, dict(sorted(stages.items())), models)


def peak_in_flight(arrivals: list[float], window: float) -> int:
    """Most requests that arrived within one ``window`` (each stays in flight at least that long)."""
    xs = sorted(arrivals)
    best, lo = 0, 0
    for hi, t in enumerate(xs):
        while xs[lo] <= t - window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def phases(run: Run, lat: float) -> dict[str, float]:
    """Start to first request, first request to last reply, last reply to exit (seconds)."""
    if not run.requests:
        return {"to_first_request": run.wall_s, "llm_phase": 0.0, "after_last_reply": 0.0}
    first = min(r.arrived_at for r in run.requests)
    last = max(r.arrived_at for r in run.requests) + lat
    return {
        "to_first_request": round(first - run.t_start, 2),
        "llm_phase": round(last - first, 2),
        "after_last_reply": round(run.t_end - last, 2),
    }


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def rose_run(
    name: str, slug: str, wl: Workload, args: argparse.Namespace, srv: ScriptedOpenAI, policy: str, cache: Path | None
) -> Run:
    out = wl.folder / f"out-{slug}"
    cmd = [str(args.rose), "run", str(wl.jsonl), "--db-root", str(wl.db_root), "--out", str(out)]
    cmd += ["--judge-model", MODEL, "--judge-base-url", srv.base_url, "--concurrency", str(args.concurrency)]
    cmd += ["--policy", policy] + (["--cache-dir", str(cache)] if cache else ["--no-cache"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    run = timed(name, cmd, cwd=wl.folder, env=env, log=wl.folder / f"{slug}.log", cap=args.cap, srv=srv)
    system = out / wl.jsonl.stem
    summary = json.loads((system / "summary.json").read_text()) if (system / "summary.json").exists() else {}
    records = read_jsonl(system / "records.jsonl")
    run.info = {
        "cmd": cmd,
        "summary_calls_per_item": (summary.get("llm") or {}).get("calls_per_item"),
        "summary_llm_calls": (summary.get("llm") or {}).get("calls"),
        "summary_llm_cached": (summary.get("llm") or {}).get("cached"),
        "records": len(records),
        "scored": summary.get("scored"),
        "rose": summary.get("rose"),
        "unscored": summary.get("unscored"),
        "decided_by": summary.get("decided_by"),
        "records_path": str(system / "records.jsonl"),
    }
    return run


def reference_run(wl: Workload, args: argparse.Namespace, srv: ScriptedOpenAI) -> Run:
    main = args.rose_ref / "main.py"
    cmd = [str(args.rose_ref_python), str(main), "--input", str(wl.ref_json), "--threads", str(args.threads)]
    env = dict(os.environ, OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="bench-key", PYTHONUNBUFFERED="1")
    before = tree_hashes(wl.ref_dir / "dev_databases")
    run = timed("reference", cmd, cwd=wl.ref_dir, env=env, log=wl.folder / "reference.log", cap=args.cap, srv=srv)
    after = tree_hashes(wl.ref_dir / "dev_databases")
    found = sorted((wl.ref_dir / "output").glob(f"rose-vec/{wl.ref_json.stem}/*/ROSE/eval_results.json"))
    results = json.loads(found[0].read_text(encoding="utf-8")) if found else []
    problems_path = wl.ref_dir / "output" / "rose-vec" / wl.ref_json.stem / "problem_question_ids.json"
    problems = json.loads(problems_path.read_text()) if problems_path.exists() else []
    log = run.log.read_text(encoding="utf-8", errors="replace")
    scores = [r["score"] for r in results if r.get("score") is not None]
    run.info = {
        "cmd": cmd,
        "cwd": str(wl.ref_dir),
        "results": len(results),
        "results_path": str(found[0]) if found else None,
        "problem_ids": len(problems),
        "score": round(sum(scores) / len(scores), 6) if scores else None,
        "sql_failures_printed": log.count("SQL execution failed"),
        "judge_errors_printed": log.count("Prover error") + log.count("Refuter error"),
        "db_files_changed": sorted(k for k in before if before[k] != after.get(k)) + sorted(set(after) - set(before)),
        "by_id": {str(r["question_id"]): r for r in results},
    }
    # Its threads take fixed slices (questions[i::threads]) and call the LLM one item after another:
    # even with free executions a thread needs (its LLM calls) x latency.
    per_item = {
        k: (r.get("prover_result") is not None) + (r.get("refuter_result") is not None)
        for k, r in run.info["by_id"].items()
    }
    ids = [str(it.id) for it in wl.items]
    slices = [sum(per_item.get(i, 0) for i in ids[t :: args.threads]) for t in range(args.threads)]
    run.info["llm_floor_s"] = round(max(slices) * args.latency, 1)
    return run


# ----------------------------------------------------------------------------- checks


def _flatten(obj: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k not in IGNORED_FIELDS:
                _flatten(v, f"{path}.{k}" if path else k, out)
    elif isinstance(obj, list) and path.split(".")[-1] == "judges":
        for i, v in enumerate(obj):
            _flatten(v, f"{path}[{i}]", out)
    else:
        out[path] = obj


def diff_records(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Items compared by id; the fields (``judges[]`` indices folded) that differ, with how many items."""
    ra = {json.dumps(r["id"]): r for r in a}
    rb = {json.dumps(r["id"]): r for r in b}
    fields: Counter[str] = Counter()
    examples: dict[str, tuple[Any, Any]] = {}
    for key in sorted(set(ra) & set(rb)):
        fa: dict[str, Any] = {}
        fb: dict[str, Any] = {}
        _flatten(ra[key], "", fa)
        _flatten(rb[key], "", fb)
        for p in sorted(set(fa) | set(fb)):
            if fa.get(p, "<absent>") != fb.get(p, "<absent>"):
                folded = re.sub(r"\[\d+\]", "[]", p)
                fields[folded] += 1
                examples.setdefault(folded, (fa.get(p, "<absent>"), fb.get(p, "<absent>")))
    return {
        "items_a": len(ra),
        "items_b": len(rb),
        "only_in_one": len(set(ra) ^ set(rb)),
        "differing_fields": dict(fields.most_common()),
        "examples": {k: [repr(v[0])[:80], repr(v[1])[:80]] for k, v in examples.items()},
    }


def _sections(request: RecordedRequest) -> dict[str, str]:
    """The user message of one of our requests, by ``## `` heading (the system prompt as ``system``)."""
    out = {"system": "\n".join(_text(m) for m in request.messages if m.get("role") == "system")}
    for block in ("\n" + request.user_text).split("\n## ")[1:]:
        head, _, body = block.partition("\n")
        out[head.strip()] = body
    return out


def explain_misses(cold: Run, warm: Run) -> dict[str, Any]:
    """For each call the warm run still made: which part of the prompt differs from the cold run's."""

    def key(r: RecordedRequest) -> tuple[str, str, str]:
        _, stage, sql = classify(r.body)
        return stage, norm_sql(sql or ""), _sections(r).get("Question", "")

    before = {key(r): _sections(r) for r in cold.requests}
    parts: Counter[str] = Counter()
    example = ""
    for r in warm.requests:
        old = before.get(key(r))
        if old is None:
            parts["(no cold request for this item and judge)"] += 1
            continue
        new = _sections(r)
        changed = sorted(h for h in set(old) | set(new) if old.get(h) != new.get(h))
        parts[", ".join(changed) or "(identical text: same prompt, not served from the cache)"] += 1
        if changed and not example:
            h = changed[0]
            a, b = (old.get(h) or "").splitlines(), (new.get(h) or "").splitlines()
            diff = [f"- {x}" for x in a if x not in b] + [f"+ {x}" for x in b if x not in a]
            example = f"{h}: " + " | ".join(line[:160] for line in diff[:4])
    return {"changed_sections": dict(parts.most_common()), "example": example}


def git_state() -> str:
    """The commit of this repository and how many files under rose_sql/ differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "rose_sql"], cwd=REPO, capture_output=True, text=True
        ).stdout
    except OSError:
        return "unknown"
    return f"{head.stdout.strip()} ({len(dirty.splitlines())} changed/untracked files under rose_sql/)"


def agreement(ours: list[dict[str, Any]], ref: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """How often ROSE-SQL (paper) and the reference give the same score, split by the path each took."""
    same = differ = 0
    paths: Counter[str] = Counter()
    for r in ours:
        other = ref.get(str(r["id"]))
        if other is None or r["score"] is None or other.get("score") is None:
            continue
        if other.get("prover_result") is None and other.get("refuter_result") is not None:
            ref_path = "matched"
        elif other.get("prover_result") is not None:
            ref_path = "differ"
        else:
            ref_path = "not_executed"
        our_path = {True: "matched", False: "differ"}.get((r.get("comparison") or {}).get("equal"), "not_executed")
        if r["decided_by"] == "execution" and r["score"] == 0:
            our_path = "not_executed"
        if float(r["score"]) == float(other["score"]):
            same += 1
        else:
            differ += 1
            paths[f"ours {our_path} / reference {ref_path}"] += 1
    return {"both_scored": same + differ, "same_score": same, "different_score": differ, "differences": dict(paths)}


# ----------------------------------------------------------------------------- report


def _fmt(x: Any, spec: str = "") -> str:
    return "-" if x is None else format(x, spec)


def report(runs: list[Run], wl: Workload, args: argparse.Namespace, extra: dict[str, Any]) -> list[str]:
    lines = []
    n = len(wl.items)
    head = f"{'run':<34} {'wall s':>8} {'rc':>4} {'server calls':>12} {'calls/item srv':>14} {'calls/item sum':>14}"
    head += f" {'peak in flight':>14} {'scored':>7} {'score':>7}"
    lines += [head, "-" * len(head)]
    for r in runs:
        score = r.info.get("rose", r.info.get("score"))
        scored = r.info.get("scored", r.info.get("results"))
        row = f"{r.name:<34} {r.wall_s:>8.1f} {_fmt(r.rc):>4} {r.calls:>12} {r.calls / n:>14.3f}"
        peak = peak_in_flight([q.arrived_at for q in r.requests], args.latency)
        row += f" {_fmt(r.info.get('summary_calls_per_item')):>14} {peak:>14}"
        row += f" {_fmt(scored):>7} {_fmt(score, '.4f'):>7}"
        lines.append(row)
    lines.append("")
    by = {r.name: r for r in runs}
    paper, ref = by.get("rose --policy paper"), by.get(f"reference --threads {args.threads}")
    if paper and ref:
        ratio = ref.wall_s / paper.wall_s
        verdict = "met" if ratio >= 8 else "NOT met"
        lines.append(f"ratio reference / ROSE-SQL (--policy paper): {ratio:.2f}x  (target >= 8x: {verdict})")
    rose_default = by.get("rose --policy rose")
    if paper and rose_default:
        lines.append(
            f"calls per item: --policy paper {paper.calls / n:.3f} (summary {paper.info['summary_calls_per_item']}), "
            f"--policy rose {rose_default.calls / n:.3f} (summary {rose_default.info['summary_calls_per_item']})"
        )
    lines.append("")
    lines.append("where the wall time goes (start -> first request | LLM phase | last reply -> exit), and requests:")
    for r in runs:
        ph = phases(r, args.latency)
        if r.name.startswith("reference"):
            lo = r.info.get("llm_floor_s", 0.0)
        else:
            lo = r.calls * args.latency / args.concurrency
        mean = r.calls * args.latency / ph["llm_phase"] if ph["llm_phase"] else 0.0
        lines.append(
            f"  {r.name:<32} {ph['to_first_request']:>6.1f} | {ph['llm_phase']:>6.1f} |"
            f" {ph['after_last_reply']:>5.1f} s;"
            f" mean in flight {mean:.1f}; LLM-bound floor {lo:.1f} s; retries {r.retries}; {r.stages}"
            f" models {r.models}"
        )
    lines.append("")
    for key, value in extra.items():
        lines.append(f"{key}: {json.dumps(value, ensure_ascii=False)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    ap.add_argument("--rose-ref", type=Path, required=True, help="local copy of the ROSE reference (holds main.py)")
    ap.add_argument("--rose-ref-python", type=Path, required=True, help="Python with the reference's dependencies")
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--latency", type=float, default=1.0, help="seconds every server reply takes")
    ap.add_argument("--concurrency", type=int, default=32, help="rose run --concurrency")
    ap.add_argument("--threads", type=int, default=8, help="the reference's --threads")
    ap.add_argument("--rose", type=Path, default=REPO / ".venv" / "bin" / "rose")
    ap.add_argument("--cap", type=float, default=3600.0, help="seconds any one run may take")
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--json", type=Path, help="write the measurements here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args(argv)
    need = [args.shared / "spider" / "dev.json", args.rose]
    if not args.skip_reference:
        need += [args.rose_ref / "main.py", args.rose_ref_python]
    missing = [str(p) for p in need if not p.exists()]
    if missing:
        print(f"missing: {', '.join(missing)}", file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="rose-bench-judges-"))
    judge = Judge()
    failed = False
    try:
        wl = build_workload(args.shared, args.n, tmp)
        print(f"workload: {len(wl.items)} items from {wl.sources}; databases {len({i.db_id for i in wl.items})}")
        if wl.skipped_files:
            print(f"prediction files skipped: {wl.skipped_files}")
        print(f"temporary folder: {tmp}; rose_sql at {git_state()}", flush=True)
        runs: list[Run] = []
        extra: dict[str, Any] = {}
        with ScriptedOpenAI(latency(judge, args.latency), models=(MODEL,)) as srv:
            print(f"scripted endpoint {srv.base_url}, every reply after {args.latency:g} s", flush=True)
            cache = tmp / "llm-cache"
            plan = [
                ("rose --policy paper", "paper", "paper", None),
                ("rose --policy rose", "rose", "rose", None),
                ("rose paper, --cache-dir (cold)", "paper-cold", "paper", cache),
                ("rose paper, --cache-dir (warm)", "paper-warm", "paper", cache),
            ]
            for name, slug, policy, cache_dir in plan:
                run = rose_run(name, slug, wl, args, srv, policy, cache_dir)
                runs.append(run)
                print(f"  {name}: {run.wall_s:.1f} s, rc {run.rc}, {run.calls} server calls", flush=True)
                failed |= run.rc != 0
            if not args.skip_reference:
                ref = reference_run(wl, args, srv)
                ref.name = f"reference --threads {args.threads}"
                runs.append(ref)
                print(f"  {ref.name}: {ref.wall_s:.1f} s, rc {ref.rc}, {ref.calls} server calls", flush=True)
                failed |= ref.rc != 0
            extra["server errors (responder raised)"] = len(srv.errors)
        extra["requests whose predicted SQL was not found"] = judge.unkeyed
        by = {r.name: r for r in runs}
        cold, warm = by["rose paper, --cache-dir (cold)"], by["rose paper, --cache-dir (warm)"]
        cmp = diff_records(read_jsonl(Path(cold.info["records_path"])), read_jsonl(Path(warm.info["records_path"])))
        extra["cache: warm-run server calls"] = warm.calls
        if warm.calls:
            extra["cache: why the warm run still called (prompt sections differing from the cold run)"] = (
                explain_misses(cold, warm)
            )
        extra["cache: records cold vs warm, ignoring cached/seconds"] = cmp
        nocache = diff_records(
            read_jsonl(Path(by["rose --policy paper"].info["records_path"])),
            read_jsonl(Path(cold.info["records_path"])),
        )
        extra["records --no-cache vs --cache-dir cold, ignoring cached/seconds"] = nocache
        failed |= warm.calls != 0
        if not args.skip_reference:
            ref = runs[-1]
            ours = read_jsonl(Path(by["rose --policy paper"].info["records_path"]))
            extra["score agreement, --policy paper vs reference"] = agreement(ours, ref.info["by_id"])
            extra["reference"] = {k: v for k, v in ref.info.items() if k not in ("by_id", "cmd")}
        extra["rose --policy paper: unscored / decided_by"] = [
            by["rose --policy paper"].info["unscored"],
            by["rose --policy paper"].info["decided_by"],
        ]
        extra["rose --policy rose: unscored / decided_by"] = [
            by["rose --policy rose"].info["unscored"],
            by["rose --policy rose"].info["decided_by"],
        ]
        extra["rose_sql at the end"] = git_state()
        print()
        print("\n".join(report(runs, wl, args, extra)))
        print()
        print("commands:")
        for r in runs:
            print("  " + " ".join(r.info["cmd"]) + (f"   (cwd {r.info['cwd']})" if "cwd" in r.info else ""))
        if args.json:
            data = {
                "runs": [
                    {
                        "name": r.name,
                        "wall_s": round(r.wall_s, 3),
                        "rc": r.rc,
                        "server_calls": r.calls,
                        "peak_in_flight": peak_in_flight([q.arrived_at for q in r.requests], args.latency),
                        "phases": phases(r, args.latency),
                        "stages": r.stages,
                        "retries": r.retries,
                        "info": {k: v for k, v in r.info.items() if k != "by_id"},
                    }
                    for r in runs
                ],
                "checks": extra,
            }
            args.json.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
