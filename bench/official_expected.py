#!/usr/bin/env python3
"""Generate per-item expected verdicts of the *official* NL2SQL evaluation scripts.

This is our own driver code. It contains none of the official code: it imports the official modules
from local checkouts whose paths are given on the command line, and calls them item by item:

* BIRD mini_dev (``evaluation/evaluation_ex.py`` and ``evaluation/evaluation_f1.py``): the official
  ``execute_model`` of each module, i.e. ``func_timeout(T, execute_sql, ...)`` which opens one
  ``sqlite3`` connection, runs the prediction then the gold, ``fetchall()`` each, and applies
  ``calculate_ex`` / ``calculate_f1_score``; any exception or timeout gives 0.
* test-suite-sql-eval (``exec_eval.eval_exec_match``) with the arguments ``evaluation.py --etype exec``
  passes (``plug_value=False``, ``progress_bar_for_each_datapoint=False``), once with
  ``keep_distinct=False`` (the default) and once with ``keep_distinct=True``. The prediction string first
  gets ``evaluation.py``'s own line handling, which lives inside ``evaluate()`` and so is re-expressed
  here: ``line.strip().split('\\t')[0].replace("value", "1")``; the gold gets ``line.strip().split('\\t')``.

Every official call runs in a worker process that the parent kills and restarts when it overruns a
hard deadline (the test-suite code has no working timeout, and ``func_timeout`` leaves the timed-out
query running in a background thread).

Output: one JSON file per prediction file, ``{"source", "generated_by", ..., "items": {id: {...}}}``,
one item per line. See ``tests/data/official/README.md`` for the exact regeneration command.

Usage::

    python bench/official_expected.py \\
        --mini-dev /work/official/mini_dev --test-suite /work/official/test-suite-sql-eval \\
        --data ../shared/data --out tests/data/official

The interpreter must have what the official scripts import (sqlparse, nltk, tqdm, func_timeout,
psycopg2, pymysql).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

GENERATED_BY = "bench/official_expected.py"

# --------------------------------------------------------------------------------------------------
# worker side: the only place where official code is imported and called
# --------------------------------------------------------------------------------------------------

_OFFICIAL: dict[str, Any] = {}


def _import_official(mini_dev: str, test_suite: str) -> None:
    sys.path.insert(0, os.path.join(os.path.abspath(mini_dev), "evaluation"))
    sys.path.insert(0, os.path.abspath(test_suite))  # its parse.py must win over any PyPI "parse"
    # the official modules (mini_dev: evaluation_ex, evaluation_f1; test-suite-sql-eval: exec_eval)
    import evaluation_ex
    import evaluation_f1
    import exec_eval

    _OFFICIAL.update(evaluation_ex=evaluation_ex, evaluation_f1=evaluation_f1, exec_eval=exec_eval)


def _gold_ok(gold: str, db: str, timeout: float) -> bool:
    """Does the gold run (plain sqlite3, default text_factory, as mini_dev connects)?"""
    import sqlite3

    deadline = time.monotonic() + timeout
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10000)
    try:
        conn.execute(gold).fetchall()
        return True
    except Exception:
        return False
    finally:
        conn.close()


def _run_phase(task: dict[str, Any]) -> dict[str, Any]:
    kind = task["kind"]
    if kind == "bird":
        ex_mod, f1_mod = _OFFICIAL["evaluation_ex"], _OFFICIAL["evaluation_f1"]
        args = (task["pred"], task["gold"], task["db"], 0, task["timeout"], "SQLite")
        t0 = time.monotonic()
        ex = ex_mod.execute_model(*args)["res"]
        t1 = time.monotonic()
        f1 = f1_mod.execute_model(*args)["res"]
        t2 = time.monotonic()
        return {"bird_ex": ex, "soft_f1": f1, "t_ex": t1 - t0, "t_f1": t2 - t1}
    if kind == "ts":
        exec_eval = _OFFICIAL["exec_eval"]
        try:
            v = exec_eval.eval_exec_match(
                db=task["db"],
                p_str=task["pred"],
                g_str=task["gold"],
                plug_value=False,
                keep_distinct=task["keep_distinct"],
                progress_bar_for_each_datapoint=False,
            )
            return {"value": v}
        except Exception as e:  # the official evaluation.py has no handler: its whole run would stop here
            return {"value": None, "error": f"{type(e).__name__}: {e}"}
    if kind == "gold":
        return {"gold_ok": _gold_ok(task["gold"], task["db"], task["timeout"])}
    raise ValueError(kind)


def _worker_main(conn: Any, mini_dev: str, test_suite: str) -> None:
    _import_official(mini_dev, test_suite)
    conn.send(("ready", None))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        key, task = msg
        conn.send((key, _run_phase(task)))


# --------------------------------------------------------------------------------------------------
# parent side: a small pool of killable workers
# --------------------------------------------------------------------------------------------------


@dataclass
class _Slot:
    proc: Any = None
    conn: Any = None
    key: Any = None
    task: dict[str, Any] | None = None
    started: float = 0.0
    deadline: float = 0.0
    ready: bool = False
    restart_after: bool = False


@dataclass
class Pool:
    mini_dev: str
    test_suite: str
    jobs: int
    slots: list[_Slot] = field(default_factory=list)
    restarts: int = 0

    def __post_init__(self) -> None:
        self._ctx = mp.get_context("spawn")
        self.slots = [self._spawn() for _ in range(self.jobs)]

    def _spawn(self) -> _Slot:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker_main, args=(child, self.mini_dev, self.test_suite), daemon=True)
        proc.start()
        child.close()
        return _Slot(proc=proc, conn=parent)

    def _kill(self, slot: _Slot) -> None:
        if slot.proc.is_alive():
            slot.proc.kill()  # only our own worker, by its object/pid
        slot.proc.join()
        slot.conn.close()
        self.restarts += 1

    def run(self, tasks: list[tuple[Any, dict[str, Any]]], progress: str = "") -> dict[Any, dict[str, Any]]:
        """Run (key, task) pairs; task['deadline'] is the hard limit in seconds. Returns key -> result."""
        pending = list(reversed(tasks))
        results: dict[Any, dict[str, Any]] = {}
        total, last_print = len(tasks), time.monotonic()
        while pending or any(s.task is not None for s in self.slots):
            for s in self.slots:
                if s.ready and s.task is None and pending:
                    s.key, s.task = pending.pop()
                    s.started = time.monotonic()
                    s.deadline = s.started + s.task["deadline"]
                    s.conn.send((s.key, {k: v for k, v in s.task.items() if k != "deadline"}))
            conns = [s.conn for s in self.slots]
            now = time.monotonic()
            nearest = min((s.deadline for s in self.slots if s.task is not None), default=now + 1)
            for c in wait(conns, timeout=max(0.0, min(1.0, nearest - now))):
                s = next(x for x in self.slots if x.conn is c)
                try:
                    key, res = s.conn.recv()
                except EOFError:  # worker died unexpectedly
                    if s.task is not None:
                        results[s.key] = {"harness_error": "worker died"}
                    self._replace(s)
                    continue
                if key == "ready":
                    s.ready = True
                    continue
                res["elapsed"] = time.monotonic() - s.started
                results[key] = res
                task, s.task = s.task, None
                # func_timeout fired: the timed-out query still runs in a thread of that worker
                if task is not None and task["kind"] == "bird" and res["elapsed"] >= task["timeout"]:
                    self._replace(s)
            now = time.monotonic()
            for s in self.slots:
                if s.task is not None and now > s.deadline:
                    results[s.key] = {"harness_timeout": s.task["deadline"]}
                    self._replace(s)
            if progress and time.monotonic() - last_print > 15:
                last_print = time.monotonic()
                print(f"  {progress}: {len(results)}/{total}", file=sys.stderr, flush=True)
        return results

    def _replace(self, slot: _Slot) -> None:
        self._kill(slot)
        i = self.slots.index(slot)
        self.slots[i] = self._spawn()

    def close(self) -> None:
        for s in self.slots:
            with contextlib.suppress(BrokenPipeError, OSError):
                s.conn.send(None)
            s.proc.join(timeout=5)
            if s.proc.is_alive():
                s.proc.kill()
                s.proc.join()


# --------------------------------------------------------------------------------------------------
# reading the inputs
# --------------------------------------------------------------------------------------------------


@dataclass
class Item:
    id: str
    db: str  # path of the .sqlite file
    bird_pred: str  # the SQL string mini_dev would execute
    bird_gold: str
    ts_pred: str  # after evaluation.py's line handling
    ts_gold: str
    flags: dict[str, Any] = field(default_factory=dict)


def _evaluation_py_line(line: str, own_fields: int = 1) -> tuple[str, dict[str, Any]]:
    """evaluation.py's handling of one prediction line: strip, cut at first tab, "value" -> "1".

    ``own_fields`` is how many tab-separated fields the file format itself has (2 for "SQL\tdb_id");
    more fields than that means the SQL itself contained a tab and evaluation.py truncates it.
    """
    flags: dict[str, Any] = {}
    fields = line.strip().split("\t")
    p = fields[0]
    if len(fields) > own_fields:
        flags["ts_pred_cut_at_tab"] = True
    replaced = p.replace("value", "1")
    if replaced != p:
        flags["ts_value_replaced"] = True
    return replaced, flags


def _evaluation_py_sessions(path: Path) -> list[int]:
    """Sizes of the 'sessions' evaluation.py builds from a file (blank lines separate sessions)."""
    sessions, cur = [], 0
    with open(path) as f:
        for line in f.readlines():
            if len(line.strip()) == 0:
                sessions.append(cur)
                cur = 0
            else:
                cur += 1
    if cur:
        sessions.append(cur)
    return sessions


def _read_spider_gold(data: Path) -> list[tuple[str, str]]:
    with open(data / "spider" / "dev_gold.sql") as f:
        return [tuple(line.strip().split("\t")) for line in f.readlines()]  # type: ignore[misc]


def spider_items(data: Path, pred_file: Path, notes: dict[str, Any]) -> list[Item]:
    gold = _read_spider_gold(data)
    name = pred_file.name
    # prediction strings for mini_dev (bird_preds) and the raw "lines" evaluation.py would see (ts_lines)
    if pred_file.suffix == ".csv":
        with open(pred_file, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        header, rows = rows[0], rows[1:]
        col = {h: i for i, h in enumerate(header)}
        bird_preds = [r[col["PREDICTED SQL"]] for r in rows]
        ts_lines = bird_preds  # evaluation.py cannot read CSV: each field is treated as one line
        gold_mismatch = [i for i, r in enumerate(rows) if r[col["GOLD SQL"]] != gold[i][0]]
        db_mismatch = [i for i, r in enumerate(rows) if r[col["DATABASE"]] != gold[i][1]]
        notes["csv_rows"] = len(rows)
        notes["csv_gold_sql_equal_to_dev_gold"] = len(rows) - len(gold_mismatch)
        notes["csv_gold_sql_mismatch_ids"] = gold_mismatch
        notes["csv_database_mismatch_ids"] = db_mismatch
    else:
        with open(pred_file) as f:  # universal newlines, as evaluation.py and json-writing converters
            lines = [line[:-1] if line.endswith("\n") else line for line in f.readlines()]
        notes["physical_lines"] = len(lines)
        notes["ends_with_newline"] = pred_file.read_bytes().endswith(b"\n")
        notes["evaluation_py_sessions"] = _evaluation_py_sessions(pred_file)
        if name.endswith(".sql"):  # "SQL\tdb_id" lines
            parts = [line.rsplit("\t", 1) for line in lines]
            bird_preds = [p[0] for p in parts]
            db_mismatch = [i for i, p in enumerate(parts) if len(p) < 2 or p[1].strip() != gold[i][1]]
            notes["db_id_mismatch_ids"] = db_mismatch
        else:
            bird_preds = lines
        ts_lines = lines
    if len(bird_preds) != len(gold):
        raise SystemExit(f"{name}: {len(bird_preds)} predictions for {len(gold)} gold lines")
    items, skipped = [], []
    for i, ((g_sql, db_id), bp, tl) in enumerate(zip(gold, bird_preds, ts_lines, strict=True)):
        db = data / "spider" / "database" / db_id / f"{db_id}.sqlite"
        if not db.exists():
            skipped.append(i)
            continue
        ts_pred, flags = _evaluation_py_line(tl, own_fields=2 if name.endswith(".sql") else 1)
        items.append(Item(str(i), str(db), bp, g_sql, ts_pred, g_sql, flags))
    notes["skipped_missing_db"] = {"count": len(skipped), "db": sorted({gold[i][1] for i in skipped})}
    return items


def bird_items(data: Path, pred_file: Path, notes: dict[str, Any], db_id: str) -> list[Item]:
    with open(pred_file) as f:
        records = json.load(f)
    db = data / "bird" / db_id / f"{db_id}.sqlite"
    items = []
    for r in records:
        if r["db_id"] != db_id:
            continue
        pred = r["predicted_sql"] if isinstance(r["predicted_sql"], str) else " "  # as package_sqls
        gold = r["gold_sql"].strip()  # mini_dev and evaluation.py both strip gold lines
        ts_pred, flags = _evaluation_py_line(pred)
        if "\n" in pred.strip():
            flags["ts_pred_multiline"] = True
        items.append(Item(str(r["question_id"]), str(db), pred, gold, ts_pred, gold, flags))
    notes["records"] = len(records)
    notes["items"] = len(items)
    return items


# --------------------------------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------------------------------


def evaluate(
    pool: Pool, items: list[Item], gold_cache: dict[tuple[str, str], bool], args: Any, label: str
) -> dict[str, dict[str, Any]]:
    tasks: list[tuple[Any, dict[str, Any]]] = []
    for it in items:
        tasks.append(
            (
                (it.id, "bird"),
                {
                    "kind": "bird",
                    "pred": it.bird_pred,
                    "gold": it.bird_gold,
                    "db": it.db,
                    "timeout": args.timeout,
                    "deadline": 2 * args.timeout + 30,
                },
            )
        )
        for kd in (False, True):
            tasks.append(
                (
                    (it.id, "ts", kd),
                    {
                        "kind": "ts",
                        "pred": it.ts_pred,
                        "gold": it.ts_gold,
                        "db": it.db,
                        "keep_distinct": kd,
                        "deadline": args.ts_timeout,
                    },
                )
            )
        if (it.db, it.bird_gold) not in gold_cache:
            gold_cache[(it.db, it.bird_gold)] = None  # type: ignore[assignment]
            tasks.append(
                (
                    ("gold", it.db, it.bird_gold),
                    {
                        "kind": "gold",
                        "gold": it.bird_gold,
                        "db": it.db,
                        "timeout": args.timeout,
                        "deadline": args.timeout + 30,
                    },
                )
            )
    res = pool.run(tasks, progress=label)
    for key, r in res.items():
        if key[0] == "gold":
            gold_cache[(key[1], key[2])] = bool(r.get("gold_ok", False))
    out: dict[str, dict[str, Any]] = {}
    for it in items:
        b = res[(it.id, "bird")]
        rec: dict[str, Any] = {}
        if "harness_timeout" in b or "harness_error" in b:
            rec.update(bird_ex=0, soft_f1=0, bird_harness_error=str(b))
        else:
            rec.update(bird_ex=b["bird_ex"], soft_f1=b["soft_f1"])
            if b["t_ex"] >= args.timeout or b["t_f1"] >= args.timeout:
                rec["bird_timeout"] = True
        for kd, name in ((False, "ts_ex"), (True, "ts_ex_keep_distinct")):
            t = res[(it.id, "ts", kd)]
            err_name = "ts_error" if not kd else "ts_error_keep_distinct"
            if "harness_timeout" in t:
                rec[name] = None
                rec[err_name] = (
                    f"harness timeout: still running after {t['harness_timeout']} s "
                    "(official exec_eval has no effective timeout)"
                )
            elif "harness_error" in t:
                rec[name] = None
                rec[err_name] = t["harness_error"]
            else:
                rec[name] = t["value"]
                if t.get("error"):
                    rec[err_name] = t["error"]
        rec["gold_ok"] = gold_cache[(it.db, it.bird_gold)]
        rec.update(it.flags)
        out[it.id] = rec
    return out


def _commit(path: str, override: str | None) -> str:
    if override:
        return override
    try:
        return subprocess.run(
            ["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        pass
    commit_file = Path(path) / "COMMIT"
    if commit_file.exists():
        return commit_file.read_text().strip()
    return "unknown"


def _versions() -> dict[str, str]:
    code = (
        "import sys, sqlite3, importlib.metadata as m; "
        "print(sys.version.split()[0], sqlite3.sqlite_version, m.version('sqlparse'), m.version('func_timeout'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return {"python": out[0], "sqlite": out[1], "sqlparse": out[2], "func_timeout": out[3]}


def write_json(path: Path, header: dict[str, Any], items: dict[str, dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = sorted(items, key=lambda k: (int(k) if k.isdigit() else 0, k))
    lines = ["{"]
    for k, v in header.items():
        lines.append(f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)},")
    lines.append('"items": {')
    body = [f"{json.dumps(k)}: {json.dumps(items[k], separators=(',', ':'))}" for k in keys]
    lines.append(",\n".join(body))
    lines.append("}}")
    path.write_text("\n".join(lines) + "\n")


def summarize(items: dict[str, dict[str, Any]]) -> dict[str, Any]:
    n = len(items)

    def mean(key: str) -> float | None:
        vals = [v[key] for v in items.values() if v.get(key) is not None]
        return round(sum(vals) / len(vals), 6) if vals else None

    return {
        "n": n,
        "bird_ex": mean("bird_ex"),
        "soft_f1": mean("soft_f1"),
        "ts_ex": mean("ts_ex"),
        "ts_ex_keep_distinct": mean("ts_ex_keep_distinct"),
        "gold_ok": sum(v["gold_ok"] for v in items.values()),
        "ts_errors": sum("ts_error" in v for v in items.values()),
        "ts_errors_keep_distinct": sum("ts_error_keep_distinct" in v for v in items.values()),
        "bird_timeouts": sum(bool(v.get("bird_timeout")) for v in items.values()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mini-dev", required=True, help="checkout of bird-bench/mini_dev")
    ap.add_argument("--test-suite", required=True, help="checkout of taoyds/test-suite-sql-eval")
    ap.add_argument("--mini-dev-commit", help="commit of the mini_dev checkout (else git or COMMIT file)")
    ap.add_argument("--test-suite-commit", help="commit of the test-suite checkout (else git or COMMIT file)")
    ap.add_argument("--data", default="../shared/data", help="shared data folder (default ../shared/data)")
    ap.add_argument("--out", default="tests/data/official", help="output folder")
    ap.add_argument("--timeout", type=float, default=30.0, help="mini_dev meta_time_out (official default 30)")
    ap.add_argument(
        "--ts-timeout",
        type=float,
        default=120.0,
        help="hard limit for one eval_exec_match call (the official code has none)",
    )
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--bird-db", default="superhero")
    ap.add_argument("--only", nargs="*", help="only these prediction file names")
    args = ap.parse_args(argv)

    data, out = Path(args.data), Path(args.out)
    md_commit = _commit(args.mini_dev, args.mini_dev_commit)
    ts_commit = _commit(args.test_suite, args.test_suite_commit)
    source = (
        f"bird-bench/mini_dev@{md_commit} evaluation/evaluation_ex.py execute_model+calculate_ex, "
        f"evaluation/evaluation_f1.py execute_model+calculate_f1_score (SQLite); "
        f"taoyds/test-suite-sql-eval@{ts_commit} exec_eval.py eval_exec_match (plug_value=False) "
        f"after evaluation.py's prediction-line handling"
    )
    env = _versions()
    params = {"mini_dev_meta_time_out": args.timeout, "ts_harness_timeout": args.ts_timeout}

    jobs: list[tuple[str, Path]] = []
    for p in sorted((data / "preds" / "spider").iterdir()):
        jobs.append(("spider", p))
    for p in sorted((data / "preds" / "bird-dev").glob("*.json")):
        jobs.append(("bird-" + args.bird_db, p))
    if args.only:
        jobs = [j for j in jobs if j[1].name in args.only]

    pool = Pool(args.mini_dev, args.test_suite, args.jobs)
    gold_cache: dict[tuple[str, str], bool] = {}
    t_start = time.monotonic()
    try:
        for dataset, pred_file in jobs:
            notes: dict[str, Any] = {}
            if dataset == "spider":
                items = spider_items(data, pred_file, notes)
                gold_desc = "spider/dev_gold.sql (id = 0-based line number)"
            else:
                items = bird_items(data, pred_file, notes, args.bird_db)
                gold_desc = f"gold_sql field of the prediction file, db_id == {args.bird_db!r} (id = question_id)"
            t0 = time.monotonic()
            results = evaluate(pool, items, gold_cache, args, f"{dataset}/{pred_file.name}")
            summary = summarize(results)
            header = {
                "source": source,
                "generated_by": GENERATED_BY,
                "prediction_file": f"preds/{pred_file.parent.name}/{pred_file.name}",
                "gold": gold_desc,
                "environment": env,
                "params": params,
                "notes": notes,
                "summary": summary,
            }
            write_json(out / dataset / f"{pred_file.name}.json", header, results)  # <prediction file name>.json
            print(f"{dataset}/{pred_file.name}: {json.dumps(summary)} ({time.monotonic() - t0:.0f} s)", flush=True)
    finally:
        pool.close()
    print(f"done in {time.monotonic() - t_start:.0f} s, worker restarts: {pool.restarts}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
