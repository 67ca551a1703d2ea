#!/usr/bin/env python3
"""Rewards per second of ROSE-SQL's RL reward against an SQL-R1-style loop and nl2sqlevaluator, and a
bounded load test of ``rose serve-reward``, all in one run on one workload.

The workload: rollouts built from the shared predictions. Every question of Spider dev (gold
``spider/dev_gold.sql``, the 9 files of ``preds/spider``; ``wta_1``'s database is missing, so its
questions are left out) and every BIRD dev question on ``superhero`` (the 14 files of
``preds/bird-dev``) gets one rollout per system: 9 (Spider) or 14 (BIRD) completions per question,
about 10,500 in all, ordered question by question as a GRPO batch would hold them. Each completion is
written in the R1 format (``<think>..</think><answer>```sql ..```</answer>``) so that every method
extracts the same SQL; for ROSE-SQL every fourth one is a chat-message list instead.

Measured, each as wall time over the whole workload in batches of ``--batch`` completions, every
method starting cold (no cache from an earlier method), with the same per-query timeout:

- ``ROSE-SQL full reward``: :class:`rose_sql.reward.RewardScorer` ``score_batch`` computing the
  whole reward (execution against the gold under our comparator with partial credit, syntax reward
  with tree edit distance and clause scores, the schedule), in two modes: ``1 process`` (one worker
  process, its queries on query threads that join only while queries are slow, comparisons and
  syntax in its main thread) and ``processes`` (``RewardConfig(processes=cores)``: a batch's distinct
  completions go in balanced chunks, a question's together, to one worker process per core, each
  with its own caches; their start-up is included), to see whether processes help;
  and ``1 process, started`` and ``processes, started``: the same with the workers started before the
  clock starts (on a throw-away database, so the workload's caches stay cold), as in a training run that
  keeps its scorer for hours.
- ``ROSE-SQL execution reward``: the same with ``RewardConfig(syntax=False)``: the execution reward
  alone, the same work the two baselines do (and more: our comparator, partial credit, the sandbox).
- ``SQL-R1-style``: the loop SQL-R1's reward runs, written here in a few lines: sequential; per
  completion a regex for ``<answer>`` and the last ```` ```sql ```` block, a fresh ``sqlite3``
  connection per query, prediction and gold each run under a thread-based timeout (func_timeout's
  way: the thread is abandoned, the query keeps running), ``frozenset`` equality.
- ``nl2sqlevaluator``: Think2SQL's executor (``NL2SQLEvaluator`` 1.3.4 needs Python 3.12, so it runs
  in its own interpreter given by ``--nl2sql-python``, timed inside that process after imports), its
  call as Think2SQL's reward makes it: per batch one ``ExecuteTask`` per question's gold and one per
  question's completions (its ``extract_sql_or_same``), ``SQLiteDBExecutor.execute_queries`` with
  ``num_cpus`` = cores (a process pool per call, ``func_timeout`` inside), no persistent cache, then
  ``frozenset`` equality as its BIRD EX evaluator does.

Targets: the full reward >= 10x the SQL-R1-style loop and >= 3x nl2sqlevaluator, the execution reward
>= 15x and >= 4x, at equal cores. ``--grpo 256 8`` measures them on a GRPO step's shape instead: 256
questions (every BIRD superhero one, then Spider's) with 8 completions each, scored as one batch.

Then the server: ``rose serve-reward`` is started as a subprocess on a free loopback port, and
``--clients`` threads, each on one keep-alive connection, send requests of ``--per-request``
rollouts of one question (labels ``{"gold_sql", "db_path"}``) until ``--requests`` have been sent in
all or ``--load-seconds`` have passed (bounded in count and time; loopback only). Printed: latency
percentiles, requests per second and failed requests (non-200, wrong shape, or an exception).

Exact command (from the repository root)::

    .venv/bin/python bench/bench_reward.py --nl2sql-python ../nl2sqlev-venv/bin/python

where ``../nl2sqlev-venv`` was made with ``python3.12 -m venv ../nl2sqlev-venv &&
../nl2sqlev-venv/bin/pip install nl2sqlevaluator==1.3.4`` (the bench skips it when absent).
Options: ``--shared`` (default ``../shared/data``), ``--batch`` (256), ``--timeout`` (2 s),
``--repeat`` (best of N runs per method, default 1), ``--limit`` (first N completions),
``--requests`` (3000), ``--clients`` (16), ``--per-request`` (4), ``--load-seconds`` (120),
``--skip`` (methods to leave out), ``--json`` (write the figures), ``--stages`` (first, where the time
goes: each stage of a worker's scorer alone, in this process, beside the limit of plain ``sqlite3``
running each distinct statement once).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rose_sql.config import steps_for  # noqa: E402
from rose_sql.engines import Database  # noqa: E402
from rose_sql.items.load import load_items  # noqa: E402
from rose_sql.reward import RewardConfig, RewardItem, RewardScorer  # noqa: E402

THINK = "<think>\nThe question names the tables and the filter; I write one SELECT over them.\n</think>\n"


# --------------------------------------------------------------------------- the workload


@dataclass(frozen=True, slots=True)
class Rollout:
    """One completion for one question."""

    question: str
    gold: str
    db: Path
    completion: str


def load_workload(shared: Path) -> list[Rollout]:
    """Every Spider and BIRD-superhero question with one completion per system, grouped by question."""
    groups: dict[str, list[Rollout]] = {}
    spider = shared / "spider"
    for f in sorted((shared / "preds" / "spider").iterdir()):
        gold = None if f.suffix == ".csv" else spider / "dev_gold.sql"
        for it in load_items(f, gold).items:
            _add(groups, f"spider:{it.id}", it.gold_sql, spider / "database", it.db_id, it.pred_sql)
    for f in sorted((shared / "preds" / "bird-dev").glob("*.json")):
        for it in load_items(f).items:
            if it.db_id == "superhero":
                _add(groups, f"bird:{it.id}", it.gold_sql, shared / "bird", it.db_id, it.pred_sql)
    return [r for rollouts in groups.values() for r in rollouts]


def _add(groups: dict[str, list[Rollout]], key: str, gold: str | None, root: Path, db_id: str, pred: str) -> None:
    db = root / db_id / f"{db_id}.sqlite"
    if gold is None or not db.is_file():
        return
    completion = f"{THINK}<answer>\n```sql\n{pred.strip()}\n```\n</answer>"
    groups.setdefault(key, []).append(Rollout(key, gold, db, completion))


def grpo_workload(rollouts: Sequence[Rollout], prompts: int, per_prompt: int) -> list[Rollout]:
    """A GRPO step's shape: ``prompts`` questions with ``per_prompt`` completions each, every BIRD superhero
    question that has that many first, then Spider's in order, to ``prompts`` in all."""
    groups: dict[str, list[Rollout]] = {}
    for r in rollouts:
        groups.setdefault(r.question, []).append(r)
    full = [g[:per_prompt] for g in groups.values() if len(g) >= per_prompt]
    chosen = [g for g in full if g[0].question.startswith("bird")] + [
        g for g in full if g[0].question.startswith("spider")
    ]
    return [r for g in chosen[:prompts] for r in g]


def batches(rollouts: Sequence[Rollout], size: int) -> list[Sequence[Rollout]]:
    return [rollouts[k : k + size] for k in range(0, len(rollouts), size)]


# --------------------------------------------------------------------------- ROSE-SQL


def rose_items(batch: Sequence[Rollout], offset: int) -> list[RewardItem]:
    out = []
    for k, r in enumerate(batch, offset):
        completion: Any = [{"role": "assistant", "content": r.completion}] if k % 4 == 3 else r.completion
        out.append(RewardItem(completion, r.gold, Database.file(r.db)))
    return out


def run_rose(
    rollouts: Sequence[Rollout], args: argparse.Namespace, processes: int, syntax: bool, warm: bool = False
) -> tuple[float, int]:
    """ROSE-SQL's reward, batch after batch, from cold caches; worker start-up included unless ``warm``."""
    config = RewardConfig(max_steps=steps_for(args.timeout), processes=processes, syntax=syntax)
    matches = 0
    start = time.perf_counter()
    with RewardScorer(config) as scorer:
        if warm:  # start the workers on a throw-away database: the workload's caches stay cold
            with tempfile.TemporaryDirectory() as tmp:
                db = Path(tmp) / "warm.sqlite"
                sqlite3.connect(db).close()
                scratch = Database.file(db)
                scorer.score_batch([RewardItem(f"SELECT {k}", "SELECT 1", scratch) for k in range(4 * processes)])
            start = time.perf_counter()
        offset = 0
        for batch in batches(rollouts, args.batch):
            matches += sum(r.status == "match" for r in scorer.score_batch(rose_items(batch, offset), step=0))
            offset += len(batch)
    return time.perf_counter() - start, matches


def rose_method(
    processes: int, syntax: bool, warm: bool = False
) -> Callable[[Sequence[Rollout], argparse.Namespace], tuple[float, int]]:
    return lambda rollouts, args: run_rose(rollouts, args, processes, syntax, warm)


# --------------------------------------------------------------------------- where the time goes


def stage_profile(rollouts: Sequence[Rollout], args: argparse.Namespace) -> dict[str, float]:
    """Where a reward's time goes: one pass of a worker's scorer in this process (the stages one by one,
    from cold caches, no query threads, no guard: for measuring only, never how the library runs queries),
    beside the limit: each distinct statement once with plain ``sqlite3``, one connection per database.
    CPU seconds of this process (the load of other work disturbs them least), best of ``--repeat``, and
    milliseconds per completion; the counts say how much is done once."""
    import gc

    from rose_sql.engines.workers import GC_YOUNG, Watch
    from rose_sql.reward.extract import completion_text, extract_sql
    from rose_sql.reward.worker import Worker

    items = rose_items(rollouts, 0)
    best: dict[str, float] = {}
    threshold = gc.get_threshold()
    gc.set_threshold(GC_YOUNG, *threshold[1:])  # the collector as a worker sets it (sqlglot's trees are cyclic)
    for _ in range(args.repeat):
        config = RewardConfig(max_steps=steps_for(args.timeout), processes=1)
        w = Worker(config, Watch())
        seen: dict[str, float] = {}
        t = time.process_time()
        jobs = list(dict.fromkeys((completion_text(i.completion), i.gold_sql, i.db) for i in items))
        keys = list(dict.fromkeys((extract_sql(text), gold, db) for text, gold, db in jobs))
        seen["extraction"] = time.process_time() - t
        t = time.process_time()
        golds = list(dict.fromkeys((db, gold) for _, gold, db in keys))
        gold_runs = dict(zip(golds, [w._run_gold(k) for k in golds], strict=True))
        seen["gold executions"] = time.process_time() - t
        t = time.process_time()
        wanted = list(dict.fromkeys((db, sql) for sql, gold, db in keys if sql and gold_runs[db, gold].ok))
        pred_runs = dict(zip(wanted, [w._run_pred(k) for k in wanted], strict=True))
        seen["prediction executions"] = time.process_time() - t
        t = time.process_time()
        compared: dict[Any, Any] = {}
        for sql, gold, db in keys:
            run = pred_runs.get((db, sql or ""))
            if sql and run is not None and gold_runs[db, gold].ok:
                w._compare(run, gold_runs[db, gold], gold, db, compared)
        seen["comparison"] = time.process_time() - t
        t = time.process_time()
        for sql, gold, _ in keys:
            if sql:
                w._syntax(sql, gold)
        seen["syntax (parse, trees, distance)"] = time.process_time() - t
        w.close()
        statements = list(dict.fromkeys([*golds, *wanted]))
        conns: dict[str, sqlite3.Connection] = {}
        t = time.process_time()
        for db, sql in statements:
            if db.target not in conns:
                conns[db.target] = sqlite3.connect(f"file:{db.target}?mode=ro&immutable=1", uri=True)
            with contextlib.suppress(sqlite3.Error):  # a failing statement costs what it cost
                conns[db.target].execute(sql).fetchall()
        seen["the limit: each distinct statement once, plain sqlite3"] = time.process_time() - t
        for c in conns.values():
            c.close()
        for k, v in seen.items():
            best[k] = min(best.get(k, v), v)
    gc.set_threshold(*threshold)
    n = len(rollouts)
    print(
        f"\nwhere the time goes ({n} completions: {len(jobs)} distinct texts, {len(keys)} distinct (SQL, gold, "
        f"database), {len(golds)} golds and {len(wanted)} predictions to run, {len(statements)} distinct statements; "
        f"CPU of this process, best of {args.repeat}):"
    )
    for k, v in best.items():
        print(f"  {k:58} {v:6.3f} CPU s {1000 * v / n:7.3f} ms per completion")
    return best


# --------------------------------------------------------------------------- the SQL-R1-style baseline


class _Timeout(Exception):
    pass


def _with_thread_timeout(seconds: float, fn: Callable[..., Any], *args: Any) -> Any:
    """func_timeout's way: run in a thread, stop waiting at the deadline (the query itself runs on)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn(*args)
        except BaseException as e:
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise _Timeout
    if "error" in box:
        raise box["error"]
    return box["result"]


def _execute(db: str, sql: str) -> frozenset[Any]:
    conn = sqlite3.connect(db)
    try:
        return frozenset(conn.execute(sql).fetchall())
    finally:
        conn.close()


def sql_r1_reward(completion: str, gold: str, db: Path, timeout: float) -> float:
    """SQL-R1's reward shape: -1 for a bad format, 0 when a query fails or differs, 1 on a set match."""
    answer = re.search(r"<answer>(.*?)</answer>", completion, re.S)
    sqls = re.findall(r"```sql(.*?)```", answer.group(1), re.S) if answer else []
    if not sqls:
        return -1.0
    try:
        pred = _with_thread_timeout(timeout, _execute, str(db), sqls[-1].strip())
        ref = _with_thread_timeout(timeout, _execute, str(db), gold)
    except Exception:
        return 0.0
    return 1.0 if pred == ref else 0.0


def run_sql_r1(rollouts: Sequence[Rollout], args: argparse.Namespace) -> tuple[float, int]:
    start = time.perf_counter()
    matches = sum(sql_r1_reward(r.completion, r.gold, r.db, args.timeout) == 1.0 for r in rollouts)
    return time.perf_counter() - start, matches


# --------------------------------------------------------------------------- nl2sqlevaluator (own interpreter)

NL2SQL_DRIVER = r"""
import json, os, sys, time
from NL2SQLEvaluator.db_executor_nodes import SQLiteDBExecutor
from NL2SQLEvaluator.db_executor_nodes.cache.cache_protocol import OutputTable
from NL2SQLEvaluator.db_executor_nodes.db_executor_protocol import ExecuteTask, extract_sql_or_same

data = json.load(open(sys.argv[1]))
batch, timeout, cpus = int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
start = time.perf_counter()
matches = 0
for k in range(0, len(data), batch):
    chunk = data[k:k + batch]
    questions = list(dict.fromkeys(x["question"] for x in chunk))
    first = {x["question"]: x for x in reversed(chunk)}
    tasks = [ExecuteTask(db_files=first[q]["db"], queries=[first[q]["gold"]], timeout=timeout) for q in questions]
    tasks += [
        ExecuteTask(
            db_files=first[q]["db"],
            queries=[extract_sql_or_same(x["completion"]) for x in chunk if x["question"] == q],
            timeout=timeout,
        )
        for q in questions
    ]
    results = SQLiteDBExecutor.execute_queries(tasks=tasks, num_cpus=cpus)
    for gold, preds in zip(results[: len(questions)], results[len(questions):]):
        g = gold[0]
        for p in preds:
            if isinstance(g, OutputTable) and isinstance(p, OutputTable) and frozenset(g.rows) == frozenset(p.rows):
                matches += 1
print(json.dumps({"seconds": time.perf_counter() - start, "matches": matches}))
"""


def run_nl2sql(rollouts: Sequence[Rollout], args: argparse.Namespace) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="bench-reward-") as tmp:
        data = Path(tmp) / "workload.json"
        data.write_text(
            json.dumps(
                [
                    {"question": r.question, "gold": r.gold, "db": str(r.db), "completion": r.completion}
                    for r in rollouts
                ]
            )
        )
        driver = Path(tmp) / "driver.py"
        driver.write_text(NL2SQL_DRIVER)
        cmd = [args.nl2sql_python, str(driver), str(data), str(args.batch), str(args.timeout), str(os.cpu_count() or 1)]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"nl2sqlevaluator driver failed: {proc.stderr.strip()[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(out["seconds"]), int(out["matches"])


# --------------------------------------------------------------------------- the server load test


def load_test(rollouts: Sequence[Rollout], shared: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Start ``rose serve-reward``, hammer it from ``--clients`` threads, stop it; latencies in ms."""
    groups: dict[str, list[Rollout]] = {}
    for r in rollouts:
        groups.setdefault(r.question, []).append(r)
    requests = []
    for group in groups.values():
        for k in range(0, len(group), args.per_request):
            part = group[k : k + args.per_request]
            labels = [json.dumps({"gold_sql": r.gold, "db_path": str(r.db.relative_to(shared))}) for r in part]
            requests.append(json.dumps({"query": [r.completion for r in part], "labels": labels}).encode())
    cmd = [sys.executable, "-m", "rose_sql", "serve-reward", "--db-root", str(shared), "--port", "0"]
    server = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "COLUMNS": "300"})
    try:
        assert server.stderr is not None
        match = re.search(r"(http://\S+/get_reward)", server.stderr.readline())
        if not match:
            raise RuntimeError("the reward server did not start")
        return _hammer(match.group(1), requests, args)
    finally:
        server.terminate()
        server.wait(30)


def _hammer(url: str, requests: list[bytes], args: argparse.Namespace) -> dict[str, Any]:
    parts = urlsplit(url)
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    counter = iter(range(args.requests))
    stop_at = time.monotonic() + args.load_seconds

    def client() -> None:
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120)
        while time.monotonic() < stop_at:
            with lock:
                n = next(counter, None)
            if n is None:
                break
            body = requests[n % len(requests)]
            t0 = time.perf_counter()
            try:
                conn.request("POST", parts.path, body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                payload = json.loads(resp.read())
                ok = resp.status == 200 and len(payload["rewards"]) == len(json.loads(body)["query"])
                problem = "" if ok else f"status {resp.status}: {str(payload)[:200]}"
            except Exception as e:
                problem = f"{type(e).__name__}: {e}"
                conn.close()
                conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120)
            with lock:
                latencies.append((time.perf_counter() - t0) * 1000)
                if problem:
                    failures.append(problem)
        conn.close()

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [latencies[0]] * 99
    return {
        "requests": len(latencies),
        "completions_per_request": args.per_request,
        "clients": args.clients,
        "seconds": wall,
        "requests_per_s": len(latencies) / wall,
        "p50_ms": q[49],
        "p90_ms": q[89],
        "p99_ms": q[98],
        "max_ms": max(latencies),
        "failed": len(failures),
        "failures": failures[:5],
    }


# --------------------------------------------------------------------------- main


def _cpu_seconds() -> float:
    """User + system CPU time of this process and all its descendants, live or finished.

    Read from ``/proc`` (finished descendants count through their reaping parent's ``cutime``, which
    covers forkserver workers too); without ``/proc``, ``getrusage`` of self and reaped children.
    """
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        parents[int(d.name)] = int(fields[1])
        cpu[int(d.name)] = sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return total


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def _warm_page_cache(rollouts: Sequence[Rollout]) -> None:
    for db in {r.db for r in rollouts}:
        db.read_bytes()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--timeout", type=float, default=2.0)
    p.add_argument("--repeat", type=int, default=1, help="best of N runs per method")
    p.add_argument("--limit", type=int, default=None, help="only the first N completions")
    p.add_argument("--nl2sql-python", default="../nl2sqlev-venv/bin/python")
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--per-request", type=int, default=4)
    p.add_argument("--load-seconds", type=float, default=120.0)
    p.add_argument(
        "--grpo",
        nargs=2,
        type=int,
        metavar=("PROMPTS", "PER_PROMPT"),
        help="a GRPO-shaped workload instead: PROMPTS questions x PER_PROMPT completions, one batch (256 8)",
    )
    p.add_argument("--skip", nargs="*", default=[], choices=["processes", "sql-r1", "nl2sql", "server"])
    p.add_argument("--stages", action="store_true", help="first, where the time goes, stage by stage")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args(argv)
    if not args.shared.is_dir():
        print(f"shared data not found at {args.shared}", file=sys.stderr)
        return 2

    rollouts = load_workload(args.shared)[: args.limit]
    if args.grpo:
        rollouts = grpo_workload(rollouts, *args.grpo)
        args.batch = len(rollouts)  # one training step's batch
    questions = len({r.question for r in rollouts})
    cores = os.cpu_count() or 1
    print(
        f"workload: {len(rollouts)} completions for {questions} questions "
        f"({sum(r.question.startswith('spider') for r in rollouts)} Spider, "
        f"{sum(r.question.startswith('bird') for r in rollouts)} BIRD superhero); "
        f"batch {args.batch}, timeout {args.timeout:g} s, {cores} cores, Python {sys.version.split()[0]}, "
        f"load average {_load()} (other processes share these cores: compare CPU s too)"
    )
    _warm_page_cache(rollouts)
    stages = stage_profile(rollouts, args) if args.stages else None

    methods: list[tuple[str, Callable[[Sequence[Rollout], argparse.Namespace], tuple[float, int]]]] = []
    for label, syntax in (("full reward", True), ("execution reward", False)):
        methods.append((f"ROSE-SQL {label}, 1 process", rose_method(1, syntax)))
        methods.append((f"ROSE-SQL {label}, 1 process, started", rose_method(1, syntax, True)))
        if "processes" not in args.skip:
            methods.append((f"ROSE-SQL {label}, {cores} processes", rose_method(cores, syntax)))
            methods.append((f"ROSE-SQL {label}, {cores} processes, started", rose_method(cores, syntax, True)))
    if "sql-r1" not in args.skip:
        methods.append(("SQL-R1-style (sequential, thread timeout)", run_sql_r1))
    if "nl2sql" not in args.skip:
        if Path(args.nl2sql_python).exists():
            methods.append(("nl2sqlevaluator 1.3.4 (process pool)", run_nl2sql))
        else:
            print(f"nl2sqlevaluator: skipped, no interpreter at {args.nl2sql_python} (see the docstring)")

    results: dict[str, dict[str, float]] = {}
    for _ in range(args.repeat):
        for name, fn in methods:
            cpu_before = _cpu_seconds()
            seconds, matches = fn(rollouts, args)
            cpu = _cpu_seconds() - cpu_before
            best = results.get(name)
            if best is None or seconds < best["seconds"]:
                results[name] = {
                    "seconds": seconds,
                    "rewards_per_s": len(rollouts) / seconds,
                    "cpu_seconds": cpu,
                    "rewards_per_cpu_s": len(rollouts) / cpu,
                    "matches": matches,
                }
            print(f"  {name}: {seconds:.2f} s wall, {cpu:.2f} s CPU", flush=True)

    print(f"\n{'method':52} {'seconds':>8} {'rewards/s':>10} {'CPU s':>7} {'per CPU s':>10} {'matches':>8}")
    for name, r in results.items():
        print(
            f"{name:52} {r['seconds']:8.2f} {r['rewards_per_s']:10.0f} {r['cpu_seconds']:7.2f} "
            f"{r['rewards_per_cpu_s']:10.0f} {r['matches']:8.0f}"
        )
    ratios: dict[str, float] = {}
    for label in ("full reward", "execution reward"):
        ours = max(r["rewards_per_s"] for n, r in results.items() if n.startswith(f"ROSE-SQL {label}"))
        targets = {"full reward": (10.0, 3.0), "execution reward": (15.0, 4.0)}[label]
        for name, target in zip(("SQL-R1-style", "nl2sqlevaluator"), targets, strict=True):
            other = next((r for n, r in results.items() if n.startswith(name)), None)
            if other:
                ratio = ratios[f"{label} / {name}"] = ours / other["rewards_per_s"]
                verdict = "met" if ratio >= target else "NOT met"
                print(f"ROSE-SQL {label} (best mode) / {name}: {ratio:.1f}x (target >= {target:g}x: {verdict})")

    print(f"load average at the end: {_load()}")
    load: dict[str, Any] | None = None
    if "server" not in args.skip:
        load = load_test(rollouts, args.shared, args)
        print(
            f"\nreward server (loopback, {load['clients']} clients, {load['completions_per_request']} completions "
            f"per request): {load['requests']} requests in {load['seconds']:.1f} s ({load['requests_per_s']:.0f}/s); "
            f"latency p50 {load['p50_ms']:.0f} ms, p90 {load['p90_ms']:.0f} ms, p99 {load['p99_ms']:.0f} ms, "
            f"max {load['max_ms']:.0f} ms; failed requests: {load['failed']}"
        )
        for f in load["failures"]:
            print(f"  failure: {f}")
    if args.json:
        figures = {"results": results, "ratios": ratios, "server": load, "stages": stages}
        args.json.write_text(json.dumps(figures, indent=2))
    return 1 if load and load["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
