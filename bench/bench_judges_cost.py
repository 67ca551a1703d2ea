#!/usr/bin/env python3
"""Cost per item of the judge cascade: ``rose run`` against the ROSE reference implementation, one endpoint.

Issue 14's bench ("What it must show", second bullet). ``bench_judges.py`` beside it measures wall time;
this one measures what the judges would be billed. No real LLM is reachable here, so both sides talk to
one scripted OpenAI-compatible server started in this process (:class:`rose_sql.testing.ScriptedOpenAI`
on loopback), answered by ``bench_judges.Judge``: it tells the two sides and their judges apart by the
system prompt and replies valid JSON in the shape each prompt asks for, with deterministic verdicts per
predicted SQL (the Prover passes 3 in 4, the Refuter overturns 1 in 4), the same for both sides.

Workload: the items whose ``db_id`` is ``superhero`` (the one BIRD database in ``../shared/data``) of the
first ``--systems`` (2) prediction files of ``<shared>/preds/bird-dev/*.json`` in name order (``all``: the
14 of them, 1,806 items), in the ROSE/SQLExam format (question, evidence, predicted and gold SQL). They
are written, filtered, to a temporary folder: one file per system for ``rose run``, and one list for the
reference with ``question_id`` made unique as ``<system>:<question_id>``.

Runs, each a fresh subprocess with a fresh output folder, each against a freshly reset server:

1. ``rose run <system files> --db-root <shared>/bird --out OUT --judge-model gpt-4o --judge-base-url URL
   --no-cache --concurrency 16``: the default policy (evidence on, the Refuter on a matching result only
   when evidence doubts it, structured replies);
2. the same, the server reporting cached prompt tokens (``usage.prompt_tokens_details.cached_tokens``,
   OpenAI's automatic prefix caching as :class:`rose_sql.testing.openai_server._PromptCache` imitates
   it: the longest prefix shared with an earlier request, in whole 128-token blocks, from 1,024 tokens);
3. the same with ``--batch --batch-poll 0.05 --cache-dir <fresh>`` (the Batch API through the server's
   files and batches endpoints; no cached tokens reported);
4. the reference's ``main.py --input ITEMS.json --threads 8`` from a temporary folder holding
   ``dev_databases/superhero/superhero.sqlite`` (a copy: it opens databases writable) and
   ``data/description`` (a symbolic link to the reference's own ``data/description``: its
   ``get_db_info`` reads the column descriptions from there, relative to its working directory, as it
   does when run from its repository), with ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` set in its
   environment. Its model name is fixed in its ``main.py`` (``deepseek/deepseek-r1-0528``); the server
   accepts any, and every side is priced as the one ``--price-model``.

Counted the same way for both sides, at the server: every chat request (the Batch API's included) goes
through one meter in front of the responder, which counts prompt tokens as the server's
``estimate_tokens`` does (4 characters a token) over the messages' text plus the ``response_format``
JSON schema where one is sent (a provider counts it as input), completion tokens over the reply's text,
and cached tokens with the server's own prefix-cache imitation, and hands these counts to the server as
the reply's usage (so ``rose run``'s own ``summary.json`` sees the same numbers; its cost is printed as
a cross-check). The cached counts are computed on every run; only run 2 reports them to the client, and
the reference's "with prompt caching" row prices its own run's cached counts (its prompts put the
shared system prompt first too; the reference never reads usage, so reporting them would change
nothing). Cost: at ``--price-model``'s list price in ``rose_sql/judges/prices.json`` (gpt-4o by default:
input, cached input, output, batch discount). Completion tokens here are the scripted JSON replies'
only: a real judge writes more, and a reasoning model (o3, as in the paper) thinks thousands of
reasoning tokens per call, which neither side's prompt controls; the comparison is of what the prompts
and the cascade send.

Printed: the side-by-side table (calls, prompt, cached and completion tokens, cost, per item), calls by
stage, the mean prompt of each stage on each side with where our prompt's characters go (system prompt
and the ``## `` sections), the ratios against the reference and whether the targets hold (ROSE-SQL at
most half the reference's cost per item with the default policy, at most a quarter with ``--batch``;
against the reference without prompt caching, which is how it runs), and the load average before and
after.

The reference implementation is third-party code: it is read from the path given, never copied into
this repository. Obtain it with::

    git clone https://github.com/CedricPei/ROSE /tmp/rose-ref && git -C /tmp/rose-ref checkout cdc64b9
    python3 -m venv /tmp/rose-ref-venv && /tmp/rose-ref-venv/bin/pip install openai python-dotenv tqdm pandas

Exact command (from the repository root)::

    .venv/bin/python bench/bench_judges_cost.py --rose-ref /tmp/rose-ref --rose-ref-python /tmp/rose-ref-venv/bin/python

Options: ``--shared`` (default ``../shared/data``), ``--systems N|all``, ``--price-model``,
``--concurrency`` (ours, 16), ``--threads`` (the reference's, 8), ``--rose`` (default ``.venv/bin/rose``),
``--cap`` (seconds any one run may take, 3600), ``--skip-reference``, ``--json FILE``, ``--keep``. Exit
status 0 when every run completed, 1 when one failed (the targets are reported, not enforced), 2 when a
path is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_judges import Judge, _sections, classify, git_state, read_jsonl

from rose_sql.testing import Reply, ScriptedOpenAI
from rose_sql.testing.batches import BatchScript
from rose_sql.testing.bodies import all_text as _all_text
from rose_sql.testing.bodies import estimate_tokens
from rose_sql.testing.openai_server import _PromptCache

REPO = Path(__file__).resolve().parents[1]
DB_ID = "superhero"
REF_COMMIT = "cdc64b9"


# ----------------------------------------------------------------------------- the meter


@dataclass
class Counted:
    side: str
    stage: str
    prompt: int
    completion: int
    cached: int
    sections: dict[str, int] = field(default_factory=dict)


class Meter:
    """In front of the responder: counts every request's tokens one way for both sides, and reports them
    to the client as the reply's usage (cached tokens only when ``report_cached``)."""

    def __init__(self, judge: Judge, *, report_cached: bool) -> None:
        self.judge = judge
        self.report_cached = report_cached
        self.cache = _PromptCache()
        self.calls: list[Counted] = []
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any], index: int) -> Reply:
        reply = self.judge(request, index)
        if not reply.ok:  # a prompt the judge did not recognise: counted, then refused
            with self._lock:
                self.calls.append(Counted("unknown", "unknown", 0, 0, 0))
            return reply
        schema = request.get("response_format")
        prompt = estimate_tokens(_all_text(request)) + (estimate_tokens(json.dumps(schema)) if schema else 0)
        completion = estimate_tokens(reply.content or "")
        cached = min(self.cache.cached(request), prompt)
        side, stage, _ = classify(request)
        sections: dict[str, int] = {}
        if side == "rose":
            sections = {k: len(v) for k, v in _sections(_Req(request)).items()}
            if schema:
                sections["(response_format schema)"] = len(json.dumps(schema))
        with self._lock:
            self.calls.append(Counted(side, stage, prompt, completion, cached, sections))
        return replace(
            reply,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=cached if self.report_cached else 0,
        )


class _Req:
    """What ``bench_judges._sections`` reads of a request."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        self.user_text = "\n".join(
            m["content"] for m in self.messages if m.get("role") == "user" and isinstance(m.get("content"), str)
        )


# ----------------------------------------------------------------------------- prices


@dataclass(frozen=True)
class Prices:
    model: str
    input: float
    output: float
    cached_input: float
    batch_discount: float

    def usd(self, prompt: int, completion: int, cached: int = 0, batch: bool = False) -> float:
        usd = ((prompt - cached) * self.input + cached * self.cached_input + completion * self.output) / 1e6
        return usd * (1 - self.batch_discount) if batch else usd


def prices(model: str) -> Prices:
    table = json.loads(resources.files("rose_sql.judges").joinpath("prices.json").read_text())
    p = table[model]
    return Prices(model, p["input"], p["output"], p.get("cached_input", p["input"]), p.get("batch_discount", 0.0))


# ----------------------------------------------------------------------------- workload


@dataclass
class Workload:
    files: list[Path]  # one per system, for rose run
    ref_json: Path
    ref_dir: Path
    items: int
    per_system: dict[str, int]


def build_workload(shared: Path, systems: str, tmp: Path, rose_ref: Path | None) -> Workload:
    preds = sorted((shared / "preds" / "bird-dev").glob("*.json"))
    if systems != "all":
        preds = preds[: int(systems)]
    ours = tmp / "items"
    ours.mkdir()
    ref_dir = tmp / "reference"
    ref_items: list[dict[str, Any]] = []
    files, per_system = [], {}
    for pred in preds:
        system = pred.stem.removesuffix("-result")
        rows = [r for r in json.loads(pred.read_text(encoding="utf-8")) if r.get("db_id") == DB_ID]
        per_system[system] = len(rows)
        path = ours / f"{system}.json"
        path.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
        files.append(path)
        ref_items += [{**r, "question_id": f"{system}:{r['question_id']}"} for r in rows]
    (ref_dir / "dev_databases" / DB_ID).mkdir(parents=True)
    shutil.copy2(shared / "bird" / DB_ID / f"{DB_ID}.sqlite", ref_dir / "dev_databases" / DB_ID / f"{DB_ID}.sqlite")
    if rose_ref is not None:
        (ref_dir / "data").mkdir()
        (ref_dir / "data" / "description").symlink_to((rose_ref / "data" / "description").resolve())
    ref_json = ref_dir / "superhero.json"
    ref_json.write_text(json.dumps(ref_items, ensure_ascii=False, indent=1), encoding="utf-8")
    return Workload(files, ref_json, ref_dir, len(ref_items), per_system)


# ----------------------------------------------------------------------------- runs


@dataclass
class Run:
    name: str
    side: str
    rc: int | None
    wall_s: float
    calls: list[Counted]
    batch: bool = False
    priced_cached: bool = False  # the cost counts cached tokens at the cached rate
    info: dict[str, Any] = field(default_factory=dict)


def run_cmd(cmd: list[str], *, cwd: Path, env: dict[str, str], log: Path, cap: float) -> tuple[int | None, float]:
    with log.open("wb") as out:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=cap)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # our own child's group, nothing else
            proc.wait()
            rc = None
    return rc, time.monotonic() - t0


def rose_run(
    name: str, slug: str, wl: Workload, args: argparse.Namespace, srv: ScriptedOpenAI, *, cached: bool, batch: bool
) -> Run:
    meter = Meter(Judge(), report_cached=cached)
    srv.reset()
    srv.responder = meter
    out = args.tmp / f"out-{slug}"
    cmd = [str(args.rose), "run", *map(str, wl.files), "--db-root", str(args.shared / "bird"), "--out", str(out)]
    cmd += ["--judge-model", args.price_model, "--judge-base-url", srv.base_url, "--concurrency", str(args.concurrency)]
    if batch:
        cmd += ["--batch", "--batch-poll", "0.05", "--cache-dir", str(args.tmp / f"cache-{slug}")]
    else:
        cmd += ["--no-cache"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["OPENAI_API_KEY"] = "bench-key"
    rc, wall = run_cmd(cmd, cwd=args.tmp, env=env, log=args.tmp / f"{slug}.log", cap=args.cap)
    info: dict[str, Any] = {"cmd": cmd, "summary_cost_usd": 0.0, "summary_calls": 0, "scored": 0, "unscored": 0}
    for f in wl.files:
        summary_path = out / f.stem / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
        llm = summary.get("llm") or {}
        info["summary_cost_usd"] += llm.get("cost_usd") or 0.0
        info["summary_calls"] += llm.get("calls") or 0
        info["scored"] += summary.get("scored") or 0
        records = read_jsonl(out / f.stem / "records.jsonl")
        info["unscored"] += sum(1 for r in records if r.get("score") is None)
    return Run(name, "rose", rc, wall, meter.calls, batch=batch, priced_cached=cached, info=info)


def reference_run(wl: Workload, args: argparse.Namespace, srv: ScriptedOpenAI) -> Run:
    meter = Meter(Judge(), report_cached=False)
    srv.reset()
    srv.responder = meter
    cmd = [str(args.rose_ref_python), str(args.rose_ref / "main.py"), "--input", str(wl.ref_json)]
    cmd += ["--threads", str(args.threads)]
    env = dict(os.environ, OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="bench-key", PYTHONUNBUFFERED="1")
    rc, wall = run_cmd(cmd, cwd=wl.ref_dir, env=env, log=args.tmp / "reference.log", cap=args.cap)
    found = sorted((wl.ref_dir / "output").glob(f"rose-vec/{wl.ref_json.stem}/*/ROSE/eval_results.json"))
    results = json.loads(found[0].read_text(encoding="utf-8")) if found else []
    problems = wl.ref_dir / "output" / "rose-vec" / wl.ref_json.stem / "problem_question_ids.json"
    log = (args.tmp / "reference.log").read_text(encoding="utf-8", errors="replace")
    info = {
        "cmd": cmd,
        "cwd": str(wl.ref_dir),
        "results": len(results),
        "problem_ids": len(json.loads(problems.read_text())) if problems.exists() else 0,
        "judge_errors_printed": log.count("Prover error") + log.count("Refuter error"),
    }
    return Run(f"reference ({REF_COMMIT}, --threads {args.threads})", "reference", rc, wall, meter.calls, info=info)


# ----------------------------------------------------------------------------- report


def totals(run: Run, price: Prices, *, cached: bool) -> dict[str, float]:
    p = sum(c.prompt for c in run.calls)
    k = sum(c.cached for c in run.calls) if cached else 0
    o = sum(c.completion for c in run.calls)
    usd = sum(price.usd(c.prompt, c.completion, c.cached if cached else 0, run.batch) for c in run.calls)
    return {"calls": len(run.calls), "prompt": p, "cached": k, "completion": o, "usd": usd}


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def report(runs: list[Run], wl: Workload, price: Prices) -> tuple[list[str], dict[str, Any]]:
    n = wl.items
    rows: list[tuple[str, dict[str, float]]] = []
    for r in runs:
        if r.side == "reference":
            rows.append((f"{r.name}", totals(r, price, cached=False)))
            rows.append((f"{r.name}, with prompt caching", totals(r, price, cached=True)))
        else:
            rows.append((r.name, totals(r, price, cached=r.priced_cached)))
    lines = [
        f"{n} items (BIRD superhero, {len(wl.per_system)} systems: {wl.per_system}); prices: {price.model} "
        f"(USD/M tokens: input {price.input}, cached input {price.cached_input}, output {price.output}, "
        f"batch discount {price.batch_discount})",
        "",
        "| run | calls/item | prompt tokens/item | of which cached | completion tokens/item | USD/item |"
        " USD per 1,000 items |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, t in rows:
        lines.append(
            f"| {name} | {t['calls'] / n:.3f} | {t['prompt'] / n:,.0f} | {t['cached'] / n:,.0f} |"
            f" {t['completion'] / n:,.0f} | {t['usd'] / n:.6f} | {1000 * t['usd'] / n:.3f} |"
        )
    by = dict(rows)
    ref_name = next((r.name for r in runs if r.side == "reference"), None)
    data: dict[str, Any] = {"items": n, "rows": {k: {**v, "per_item_usd": v["usd"] / n} for k, v in rows}}
    lines.append("")
    if ref_name:
        ref = by[ref_name]["usd"]
        ref_cached = by[f"{ref_name}, with prompt caching"]["usd"]
        checks = [
            ("ROSE-SQL default", "rose run (default policy)", ref, 0.5),
            ("ROSE-SQL default, prompt caching", "rose run (default policy), prompt caching", ref, 0.5),
            ("ROSE-SQL --batch", "rose run --batch (default policy)", ref, 0.25),
        ]
        data["ratios"] = {}
        for label, key, base, target in checks:
            if key not in by:
                continue
            ratio = by[key]["usd"] / base
            verdict = "met" if ratio <= target else "NOT met"
            lines.append(f"{label} / reference: {ratio:.3f}  (target <= {target:g}: {verdict})")
            data["ratios"][label] = {"ratio": ratio, "target": target, "met": ratio <= target}
        for label, key in (("default, prompt caching", "rose run (default policy), prompt caching"),):
            if key in by:
                lines.append(
                    f"  (ROSE-SQL {label} / reference with prompt caching too: {by[key]['usd'] / ref_cached:.3f})"
                )
    lines.append("")
    lines.append("calls by stage, and the mean prompt of a call (tokens):")
    for r in runs:
        stages: dict[str, list[int]] = defaultdict(list)
        for c in r.calls:
            stages[c.stage].append(c.prompt)
        desc = ", ".join(f"{s} {len(v)} calls x {sum(v) / len(v):,.0f}" for s, v in sorted(stages.items()))
        lines.append(f"  {r.name}: {desc}")
    ours = next((r for r in runs if r.side == "rose" and not r.batch), None)
    if ours and ours.calls:
        share: Counter[str] = Counter()
        for c in ours.calls:
            share.update(c.sections)
        total = sum(share.values())
        top = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in share.most_common(8))
        lines.append(f"where ROSE-SQL's prompt characters go ({ours.name}): {top}")
        data["rose_prompt_sections_chars_per_call"] = {k: v / len(ours.calls) for k, v in share.most_common()}
    lines.append("")
    for r in runs:
        info = {k: v for k, v in r.info.items() if k not in ("cmd", "cwd")}
        if r.side == "rose":  # rose's own summary.json beside the bench's count, as a cross-check
            info["summary_cost_usd"] = round(info["summary_cost_usd"], 6)
            info["bench_cost_usd"] = round(totals(r, price, cached=r.priced_cached)["usd"], 6)
        lines.append(f"{r.name}: rc {r.rc}, {r.wall_s:.1f} s; {json.dumps(info)}")
    return lines, data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    ap.add_argument("--rose-ref", type=Path, help="local checkout of CedricPei/ROSE (holds main.py)")
    ap.add_argument("--rose-ref-python", type=Path, help="a Python with openai, python-dotenv, tqdm, pandas")
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--systems", default="2", help="how many bird-dev prediction files (in name order), or all")
    ap.add_argument("--price-model", default="gpt-4o")
    ap.add_argument("--concurrency", type=int, default=16, help="rose run --concurrency")
    ap.add_argument("--threads", type=int, default=8, help="the reference's --threads")
    ap.add_argument("--rose", type=Path, default=REPO / ".venv" / "bin" / "rose")
    ap.add_argument("--cap", type=float, default=3600.0, help="seconds any one run may take")
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--json", type=Path, help="write the measurements here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args(argv)
    need = [args.shared / "preds" / "bird-dev", args.shared / "bird" / DB_ID / f"{DB_ID}.sqlite", args.rose]
    if not args.skip_reference:
        if args.rose_ref is None or args.rose_ref_python is None:
            ap.error("--rose-ref and --rose-ref-python are needed (or --skip-reference)")
        need += [args.rose_ref / "main.py", args.rose_ref / "data" / "description", args.rose_ref_python]
    missing = [str(p) for p in need if not p.exists()]
    if missing:
        print(f"missing: {', '.join(missing)}", file=sys.stderr)
        return 2
    price = prices(args.price_model)
    args.tmp = Path(tempfile.mkdtemp(prefix="rose-bench-judges-cost-"))
    failed = False
    try:
        before = loadavg()
        wl = build_workload(args.shared, args.systems, args.tmp, None if args.skip_reference else args.rose_ref)
        print(f"load average before: {before}; rose_sql at {git_state()}; temporary folder {args.tmp}", flush=True)
        if not args.skip_reference:
            head = subprocess.run(
                ["git", "-C", str(args.rose_ref), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
            ).stdout.strip()
            print(f"reference at {args.rose_ref}: commit {head or 'unknown (not a git checkout)'}", flush=True)
        runs: list[Run] = []
        script = BatchScript(validating_polls=0, in_progress_polls=1)
        with ScriptedOpenAI(models=(args.price_model,), batch=script) as srv:
            plan = [
                ("rose run (default policy)", "default", False, False),
                ("rose run (default policy), prompt caching", "cached", True, False),
                ("rose run --batch (default policy)", "batch", False, True),
            ]
            for name, slug, cached, batch in plan:
                run = rose_run(name, slug, wl, args, srv, cached=cached, batch=batch)
                runs.append(run)
                print(f"  {name}: rc {run.rc}, {run.wall_s:.1f} s, {len(run.calls)} calls", flush=True)
                failed |= run.rc != 0
            if not args.skip_reference:
                ref = reference_run(wl, args, srv)
                runs.append(ref)
                print(f"  {ref.name}: rc {ref.rc}, {ref.wall_s:.1f} s, {len(ref.calls)} calls", flush=True)
                failed |= ref.rc != 0
            unknown = sum(1 for r in runs for c in r.calls if c.side == "unknown")
        after = loadavg()
        lines, data = report(runs, wl, price)
        print()
        print("\n".join(lines))
        print(f"\nrequests no prompt was recognised in (answered 400): {unknown}")
        print(f"load average before: {before}; after: {after}")
        print("commands:")
        for r in runs:
            print("  " + " ".join(r.info["cmd"]) + (f"   (cwd {r.info['cwd']})" if "cwd" in r.info else ""))
        if args.json:
            data["load_average"] = {"before": before, "after": after}
            args.json.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    finally:
        if args.keep:
            print(f"kept {args.tmp}")
        else:
            shutil.rmtree(args.tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
