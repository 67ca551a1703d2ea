#!/usr/bin/env python3
"""Wall time of ``rose run`` against "the limit" and the official scripts, on one workload, in one go.

The workload: the 9 Spider prediction files of ``<shared>/preds/spider`` (gold ``spider/dev_gold.sql``,
databases ``spider/database``; 972 of the 1034 items per file can run, ``wta_1``'s database is missing)
and the ``superhero`` items of the 14 files of ``<shared>/preds/bird-dev`` (SQLExam lists, 129 items
each, database ``bird/superhero/superhero.sqlite``). Filtered copies of the BIRD files, and every input
the official scripts need in their own formats, are written to a temporary folder.

Measured, in this order:

(b) the limit: every distinct (database, SQL) among all gold and predicted queries of the workload
    executed once, sequentially, with plain ``sqlite3`` in this process: one read-only connection per
    database, a progress-handler deadline of ``--timeout`` seconds (as ``rose run``), ``fetchall()``.
    No process start, no parsing, no comparison, no output: nothing an evaluator can do is cheaper.
(a) ROSE-SQL: one ``rose run`` over the 9 Spider files and one over the 14 filtered BIRD files (the
    gold and database root differ), each a fresh subprocess with a fresh ``--out``, default workers,
    ``--timeout``. Wall time includes interpreter start, loading, all four readings (``ts_ex`` may
    execute extra DISTINCT-stripped variants), records.jsonl and summary.json.
(c) BIRD mini-dev ``evaluation/evaluation_ex.py`` run as its ``run_evaluation.sh`` runs it, once per
    prediction file (it takes one): ``--predicted_sql_path`` (``{"0": "SQL\\t----- bird -----\\tdb_id"}``),
    ``--ground_truth_path`` (``SQL\\tdb_id`` lines), ``--db_root_path``, ``--diff_json_path`` (it
    divides by the size of each difficulty class, so Spider items get simple/moderate/challenging
    in turn; only the total is compared), ``--num_cpus os.cpu_count()``, ``--meta_time_out 30`` (its
    default), with ``--official-python``.
(d) Spider test-suite ``evaluation.py --gold G --pred P --db DIR --table tables.json --etype exec`` once
    per Spider file (run from its own folder; it has no working timeout). It is also tried on the BIRD
    files: it parses every gold with its Spider-only SQL parser before executing anything, without a
    handler, so a gold it cannot parse ends its whole run; such files are reported and excluded from
    the test-suite ratio. Its parser tokenizes with NLTK's ``word_tokenize``, which needs the
    ``punkt_tab`` data; where NLTK cannot find it, an empty ``punkt_tab/english`` model is supplied
    through ``NLTK_DATA`` (this changes at most how a query is split into sentences before parsing,
    which decides the hardness column, never the execution accuracy) and the output says so.

Every phase reports wall time (the targets are about it) and CPU time (user + system of the process and
the children it waited for; far less sensitive to other load on a shared machine). With ``--repeat N``
the four phases run N times, interleaved, and the fastest run of each is kept.

The readings ``rose run`` computed (every name of a record's ``readings`` in its runs) are printed as
"readings measured" and written to ``--json``: ``docs/benchmarks.md`` states them, and a test compares
that statement with the readings ``rose_sql`` computes today, so that adding one calls for measuring again.

Sanity check, per file: the official scripts' item counts and accuracies next to ours (``bird_ex`` and
``ts_ex`` means from each ``summary.json``); a mismatch makes the exit status 1. The databases' SHA-256
are compared before and after (the official scripts open them writable). Targets, each met on every workload
it applies to: ours / limit at most 4 on Spider (where ``rose run`` also computes Spider's exact-set match)
and 1.5 on BIRD, BIRD script / ours above 1, test-suite / ours at least 15.

Exact command (from the repository root)::

    .venv/bin/python bench/bench_run.py --mini-dev /work/official/mini_dev \\
        --test-suite /work/official/test-suite-sql-eval --official-python /work/official/venv/bin/python \\
        --repeat 3

Options: ``--shared`` (default ``../shared/data``), ``--timeout`` (default 30), ``--only spider|bird``,
``--repeat``, ``--rose`` (default ``.venv/bin/rose``), ``--rose-args`` (extra ``rose run`` options), ``--cap``
(hard limit on one official invocation), ``--json`` (write the measurements), ``--keep`` (keep the
temporary folder). Exit status 2 when a path is missing. The official scripts are third-party code: they
are read from the paths given, never copied.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import resource
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BIRD_DB = "superhero"
BIRD_SEPARATOR = "\t----- bird -----\t"
PROGRESS_OPS = 2000  # progress-handler granularity, as rose_sql.engines.execute
DIFFICULTIES = ("simple", "moderate", "challenging")
LIMIT_TARGET = {"spider": 4.0, "bird": 1.5}
"""The most ``rose run`` / the limit may be, per workload."""
TEST_SUITE_TARGET = 15.0
"""The least test-suite / ``rose run`` may be."""
BIRD_META_TIME_OUT = 30.0  # evaluation_ex.py's default and run_evaluation.sh's value


# --------------------------------------------------------------------------- the workload


@dataclass
class Item:
    db_id: str
    gold: str
    pred: str | None  # None: the prediction file holds no string (BIRD's script then runs " ")
    difficulty: str
    ts_line: str  # the prediction line as evaluation.py would read it (it cuts at the first tab)


@dataclass
class PredFile:
    dataset: str  # "spider" or "bird"
    path: Path  # the file rose runs (BIRD: the filtered copy)
    items: list[Item]  # only items whose database exists

    @property
    def stem(self) -> str:
        return self.path.stem


@dataclass
class Dataset:
    name: str
    db_root: Path
    rose_args: list[str]
    files: list[PredFile] = field(default_factory=list)

    def db(self, db_id: str) -> Path:
        return self.db_root / db_id / f"{db_id}.sqlite"


def _one_line(sql: str) -> str:
    """SQL on one line, for the line-based official formats (none of the shared files needs it)."""
    return " ".join(sql.split())


def load_spider(shared: Path) -> Dataset:
    root = shared / "spider"
    ds = Dataset("spider", root / "database", ["--gold", str(root / "dev_gold.sql")])
    gold = []
    for line in (root / "dev_gold.sql").read_text(encoding="utf-8").splitlines():
        sql, _, db_id = line.rpartition("\t")
        gold.append((sql, db_id.strip()))
    for path in sorted((shared / "preds" / "spider").iterdir()):
        if path.suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
            triples = [(r["PREDICTED SQL"], r["GOLD SQL"], r["DATABASE"].strip()) for r in rows]
            lines = [_one_line(p) for p, _, _ in triples]
        else:
            text = path.read_text(encoding="utf-8")
            lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
            preds = [ln.rpartition("\t")[0] if path.suffix == ".sql" else ln for ln in lines]
            triples = [(p, g, d) for p, (g, d) in zip(preds, gold, strict=True)]
        items = []
        for i, ((pred, g_sql, db_id), line) in enumerate(zip(triples, lines, strict=True)):
            if ds.db(db_id).is_file():
                items.append(Item(db_id, g_sql, pred, DIFFICULTIES[i % 3], line))
        ds.files.append(PredFile("spider", path, items))
    return ds


def load_bird(shared: Path, tmp: Path) -> Dataset:
    ds = Dataset("bird", shared / "bird", [])
    out = tmp / "bird-preds"
    out.mkdir()
    for path in sorted((shared / "preds" / "bird-dev").glob("*.json")):
        records = [r for r in json.loads(path.read_text(encoding="utf-8")) if r["db_id"] == BIRD_DB]
        copy = out / path.name
        copy.write_text(json.dumps(records, ensure_ascii=False, indent=1), encoding="utf-8")
        items = []
        for r in records:
            pred = r["predicted_sql"] if isinstance(r["predicted_sql"], str) else None
            items.append(Item(BIRD_DB, r["gold_sql"], pred, r["difficulty"], _one_line(pred or "")))
        ds.files.append(PredFile("bird", copy, items))
    return ds


# --------------------------------------------------------------------------- running things


@dataclass
class Proc:
    seconds: float
    cpu: float  # user + system seconds of the process and the children it waited for
    returncode: int | None  # None: killed at --cap
    stdout: str
    stderr: str


def run_proc(cmd: list[str], *, cwd: Path, cap: float, env: dict[str, str] | None = None) -> Proc:
    """Run one command, timing it; past ``cap`` seconds its process group (ours) is killed."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = p.communicate(timeout=cap)
        code: int | None = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        code = None
    seconds = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
    return Proc(seconds, cpu, code, out, err)


def _tail(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


class _Deadline:
    """The progress handler of the limit's connections: interrupt a query past its deadline."""

    def __init__(self) -> None:
        self.at = float("inf")

    def start(self, timeout: float) -> float:
        now = time.monotonic()
        self.at = now + timeout
        return now

    def expired(self) -> bool:
        return time.monotonic() > self.at


def measure_limit(ds: Dataset, timeout: float) -> dict[str, Any]:
    """Execute each distinct (database, SQL) of the dataset once: plain sqlite3, sequential, fetchall."""
    queries: dict[tuple[Path, str], None] = {}
    for pf in ds.files:
        for it in pf.items:
            db = ds.db(it.db_id)
            queries[(db, it.gold)] = None
            queries[(db, it.pred or "")] = None
    conns: dict[Path, sqlite3.Connection] = {}
    clock = _Deadline()
    errors = timeouts = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for db, sql in queries:
        conn = conns.get(db)
        if conn is None:
            conn = conns[db] = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            conn.set_progress_handler(clock.expired, PROGRESS_OPS)
        start = clock.start(timeout)
        try:
            conn.execute(sql).fetchall()
        except Exception:  # a failing prediction is part of the workload
            errors += 1
            if time.monotonic() - start >= timeout:
                timeouts += 1
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    for conn in conns.values():
        conn.close()
    return {"seconds": seconds, "cpu": cpu, "queries": len(queries), "errors": errors, "timeouts": timeouts}


def measure_rose(rose: str, extra: list[str], ds: Dataset, tmp: Path, timeout: float, cap: float) -> dict[str, Any]:
    out_dir = tmp / "out"
    cmd = [rose, "run", *(str(pf.path) for pf in ds.files), *ds.rose_args]
    cmd += ["--db-root", str(ds.db_root), "--out", str(out_dir), "--timeout", f"{timeout:g}", *extra]
    p = run_proc(cmd, cwd=tmp, cap=cap)
    if p.returncode != 0:
        raise SystemExit(f"rose run failed ({p.returncode}): {_tail(p.stderr) or _tail(p.stdout)}\n{' '.join(cmd)}")
    summaries = {}
    readings: set[str] = set()
    for pf in ds.files:
        with (out_dir / pf.stem / "records.jsonl").open(encoding="utf-8") as f:
            readings.update(k for line in f for k in json.loads(line)["readings"])
        s = json.loads((out_dir / pf.stem / "summary.json").read_text(encoding="utf-8"))
        summaries[pf.stem] = {
            "n": s["readings_n"]["bird_ex"],
            "bird_ex": s["bird_ex"],
            "ts_ex_n": s["readings_n"]["spider_ex"],  # the official script on the one database: our spider_ex
            "ts_ex": s["spider_ex"],
        }
    return {"seconds": p.seconds, "cpu": p.cpu, "files": summaries, "readings": sorted(readings)}


def _write_bird_inputs(ds: Dataset, pf: PredFile, d: Path) -> tuple[Path, Path, Path]:
    d.mkdir(parents=True)
    preds = {str(i): None if it.pred is None else it.pred + BIRD_SEPARATOR + it.db_id for i, it in enumerate(pf.items)}
    pred_path, gold_path, diff_path = d / "predict.json", d / "gold.sql", d / "diff.jsonl"
    pred_path.write_text(json.dumps(preds, ensure_ascii=False, indent=1), encoding="utf-8")
    gold_path.write_text("".join(f"{_one_line(it.gold)}\t{it.db_id}\n" for it in pf.items), encoding="utf-8")
    diff_path.write_text("".join(json.dumps({"difficulty": it.difficulty}) + "\n" for it in pf.items))
    return pred_path, gold_path, diff_path


def measure_bird_script(python: str, mini_dev: Path, ds: Dataset, tmp: Path, cap: float) -> dict[str, Any]:
    script = mini_dev / "evaluation" / "evaluation_ex.py"
    files: dict[str, Any] = {}
    total = cpu = 0.0
    for pf in ds.files:
        d = tmp / pf.stem
        pred_path, gold_path, diff_path = _write_bird_inputs(ds, pf, d)
        cmd = [python, "-u", str(script), "--db_root_path", f"{ds.db_root}/", "--predicted_sql_path", str(pred_path)]
        cmd += ["--ground_truth_path", str(gold_path), "--num_cpus", str(os.cpu_count() or 1)]
        cmd += ["--output_log_path", str(d / "log.txt"), "--diff_json_path", str(diff_path)]
        cmd += ["--meta_time_out", f"{BIRD_META_TIME_OUT:g}", "--sql_dialect", "SQLite"]
        p = run_proc(cmd, cwd=d, cap=cap)
        total, cpu = total + p.seconds, cpu + p.cpu
        ex = re.search(r"^EX\s+\S+\s+\S+\s+\S+\s+([\d.]+)", p.stdout, re.M)
        count = re.search(r"^count\s+\d+\s+\d+\s+\d+\s+(\d+)", p.stdout, re.M)
        files[pf.stem] = {
            "seconds": p.seconds,
            "n": int(count.group(1)) if count else None,
            "ex": float(ex.group(1)) / 100 if ex else None,
            "error": None if ex and p.returncode == 0 else (_tail(p.stderr) or f"exit {p.returncode}"),
        }
    return {"seconds": total, "cpu": cpu, "files": files}


def _nltk_data(python: str, tmp: Path) -> tuple[dict[str, str], str | None]:
    """The environment for evaluation.py: NLTK's punkt_tab data, or an empty stand-in where it is missing."""
    env = dict(os.environ)
    probe = "import nltk; nltk.data.find('tokenizers/punkt_tab/english/')"
    if subprocess.run([python, "-c", probe], capture_output=True).returncode == 0:
        return env, None
    model = tmp / "nltk_data" / "tokenizers" / "punkt_tab" / "english"
    model.mkdir(parents=True)
    for name in ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab"):
        (model / name).touch()
    env["NLTK_DATA"] = str(tmp / "nltk_data")
    return env, "NLTK punkt_tab data not installed: used an empty punkt_tab/english model in the temporary folder"


def measure_test_suite(
    python: str, test_suite: Path, ds: Dataset, tables: Path, tmp: Path, cap: float, env: dict[str, str]
) -> dict[str, Any]:
    files: dict[str, Any] = {}
    total = cpu = 0.0
    for pf in ds.files:
        d = tmp / pf.stem
        d.mkdir(parents=True)
        gold_path, pred_path = d / "gold.sql", d / "pred.sql"
        gold_path.write_text("".join(f"{_one_line(it.gold)}\t{it.db_id}\n" for it in pf.items), encoding="utf-8")
        # a blank line would start a new "session" and misalign every later item
        pred_path.write_text("".join((it.ts_line if it.ts_line.strip() else "SELECT") + "\n" for it in pf.items))
        cmd = [python, str(test_suite / "evaluation.py"), "--gold", str(gold_path), "--pred", str(pred_path)]
        cmd += ["--db", str(ds.db_root), "--table", str(tables), "--etype", "exec"]
        p = run_proc(cmd, cwd=test_suite, cap=cap, env=env)
        ok = p.returncode == 0
        count = re.search(r"^count\s+(?:\d+\s+){4}(\d+)", p.stdout, re.M)
        ex = re.search(r"^execution\s+(?:[\d.]+\s+){4}([\d.]+)", p.stdout, re.M)
        files[pf.stem] = {
            "seconds": p.seconds,
            "n": int(count.group(1)) if count and ok else None,
            "ex": float(ex.group(1)) if ex and ok else None,
            "error": None if ok and ex else (_tail(p.stderr) or ("killed at --cap" if p.returncode is None else "")),
        }
        total, cpu = total + p.seconds, cpu + p.cpu
    ran = all(f["error"] is None for f in files.values())
    return {"seconds": total, "cpu": cpu, "files": files, "ran": ran}


def db_hashes(datasets: list[Dataset]) -> dict[str, str]:
    out = {}
    for ds in datasets:
        for path in sorted(ds.db_root.glob("*/*.sqlite")):
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


# --------------------------------------------------------------------------- report


def _pct(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}"


def _sanity(datasets: list[Dataset], res: dict[str, Any]) -> list[str]:
    """Print the official accuracies next to ours, file by file; return the mismatches."""
    problems = []
    print("\nSanity check: the official scripts' item counts and accuracies (%) next to ours")
    head = f"{'BIRD n':>6} {'BIRD EX':>8} {'ours':>8} | {'TS n':>5} {'TS EX':>6} {'ours':>6}"
    print(f"{'file':<24} {'items':>5} | {head}")
    not_run = {"n": None, "ex": None, "error": "not run"}
    for ds in datasets:
        ts_files = res["test_suite"].get(ds.name, {}).get("files", {})
        for pf in ds.files:
            n = len(pf.items)
            o = res["rose"][ds.name]["files"][pf.stem]
            b = res["bird_script"][ds.name]["files"][pf.stem]
            t = ts_files.get(pf.stem, not_run)
            bird_cells = f"{b['n'] or '-':>6} {_pct(b['ex'], 2):>8} {_pct(o['bird_ex'], 2):>8}"
            ts_cells = f"{t['n'] or '-':>5} {_pct(t['ex'], 1):>6} {_pct(o['ts_ex'], 1):>6}"
            print(f"{pf.stem:<24} {n:>5} | {bird_cells} | {ts_cells}")
            if b["error"] or b["n"] != n or o["n"] != n or abs(b["ex"] - o["bird_ex"]) > 0.000051:
                problems.append(f"{ds.name}/{pf.stem}: official BIRD {b}, ours bird_ex {o['bird_ex']} on {o['n']}/{n}")
            if not t["error"] and (t["n"] != n or o["ts_ex_n"] != n or abs(t["ex"] - o["ts_ex"]) > 0.00051):
                problems.append(f"{ds.name}/{pf.stem}: official TS {t}, ours ts_ex {o['ts_ex']} on {o['ts_ex_n']}/{n}")
    return problems


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _table(datasets: list[Dataset], res: dict[str, Any], key: str) -> None:
    """The time table and the ratios, for wall time (key "seconds") or CPU time (key "cpu")."""
    names = [ds.name for ds in datasets]
    limit = {n: float(res["limit"][n][key]) for n in names}
    ours = {n: float(res["rose"][n][key]) for n in names}
    bird = {n: float(res["bird_script"][n][key]) for n in names}
    ts = {n: float(res["test_suite"][n][key]) if res["test_suite"][n]["ran"] else None for n in names}
    ts_names = [n for n in names if ts[n] is not None]  # the test-suite ratio covers what it could evaluate
    ts_total = sum(ts[n] or 0.0 for n in ts_names) if ts_names else None
    ours_on_ts = sum(ours[n] for n in ts_names) if ts_names else None

    def row(label: str, cells: list[str]) -> None:
        print(f"{label:<46}" + "".join(f"{c:>12}" for c in cells))

    def times(label: str, t: dict[str, float | None], total: float | None) -> None:
        row(label, [_fmt(t[n]) for n in names] + [_fmt(total)])

    row("", [*names, "total"])
    times("(b) limit: distinct queries, plain sqlite3", dict(limit), sum(limit.values()))
    row("    distinct (db, SQL) executed", [str(res["limit"][n]["queries"]) for n in names])
    times("(a) ROSE-SQL: rose run (one per dataset)", dict(ours), sum(ours.values()))
    row("    prediction files", [str(len(ds.files)) for ds in datasets])
    times("(c) BIRD evaluation_ex.py (one per file)", dict(bird), sum(bird.values()))
    times("(d) test-suite evaluation.py (one per file)", ts, ts_total)
    for n in names:
        r = res["test_suite"][n]
        if not r["ran"]:
            errors = sorted({f["error"] for f in r["files"].values() if f["error"]})
            print(f"    test-suite cannot evaluate {n} ({_fmt(r[key])} s): {'; '.join(errors)[:160]}; excluded")
    print()
    row("ratio", [*names, "total", "target", ""])
    limits = " / ".join(f"{LIMIT_TARGET[n]:g}" for n in names)
    checks: list[tuple[str, list[float | None], float | None, str, Callable[[str, float], bool]]] = [
        (
            "ours / limit",
            [_ratio(ours[n], limit[n]) for n in names],
            _ratio(sum(ours.values()), sum(limit.values())),
            f"<= {limits}",
            lambda n, r: r <= LIMIT_TARGET[n],
        ),
        (
            "BIRD script / ours",
            [_ratio(bird[n], ours[n]) for n in names],
            _ratio(sum(bird.values()), sum(ours.values())),
            "> 1",
            lambda n, r: r > 1,
        ),
        (
            "test-suite / ours",
            [_ratio(ts[n], ours[n]) for n in names],
            _ratio(ts_total, ours_on_ts),
            f">= {TEST_SUITE_TARGET:g}",
            lambda n, r: r >= TEST_SUITE_TARGET,
        ),
    ]
    for label, per, total, target, ok in checks:  # met: on every workload it could be measured on
        measured = [(n, r) for n, r in zip(names, per, strict=True) if r is not None]
        verdict = "-" if not measured else ("met" if all(ok(n, r) for n, r in measured) else "MISSED")
        row(label, [_fmt(x) for x in per] + [_fmt(total), target, verdict])


def report(datasets: list[Dataset], res: dict[str, Any], notes: list[str]) -> list[str]:
    """Print the sanity check, the wall-time and CPU-time tables with their ratios; return the mismatches."""
    problems = _sanity(datasets, res)
    best = f", the fastest of {res['repeat']} interleaved runs" if res["repeat"] > 1 else ""
    load = f"{res['loadavg']['before'][0]:.2f} -> {res['loadavg']['after'][0]:.2f}"
    print(f"\nrose: {' '.join(res['rose_command'])}")
    print(f"readings measured: {', '.join(res['readings'])}")
    print(f"rose and the limit: --timeout {res['timeout']:g} s; BIRD script: --meta_time_out {BIRD_META_TIME_OUT:g}")
    print(f"\nWALL TIME in seconds ({res['cpus']} CPUs, 1-min load average {load}{best})")
    _table(datasets, res, "seconds")
    print("\nCPU TIME in seconds (user + system, subprocesses and their children; less sensitive to load)")
    _table(datasets, res, "cpu")
    for note in notes:
        print(f"note: {note}")
    return problems


# --------------------------------------------------------------------------- main


def _fastest(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the least wall time, noting every run's wall and CPU time (CPU: the least)."""
    best = dict(min(runs, key=lambda r: float(r["seconds"])))
    best["all_seconds"] = [r["seconds"] for r in runs]
    best["all_cpu"] = [r["cpu"] for r in runs]
    best["cpu"] = min(best["all_cpu"])
    return best


def _require(path: Path, what: str) -> None:
    if not path.exists():
        raise SystemExit(f"error: {what} not found: {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mini-dev", type=Path, required=True, help="checkout of bird-bench/mini_dev")
    ap.add_argument("--test-suite", type=Path, required=True, help="checkout of taoyds/test-suite-sql-eval")
    ap.add_argument("--official-python", default=sys.executable, help="interpreter for the official scripts")
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data", help="shared data folder")
    ap.add_argument("--timeout", type=float, default=30.0, help="per-query timeout of rose run and the limit")
    ap.add_argument("--only", choices=("spider", "bird"), help="only this half of the workload")
    ap.add_argument("--rose", default=str(REPO / ".venv" / "bin" / "rose"), help="the rose executable")
    ap.add_argument("--rose-args", default="", help="extra rose run options: --rose-args='--workers 1'")
    ap.add_argument("--repeat", type=int, default=1, help="measure every phase this many times; keep the fastest")
    ap.add_argument("--cap", type=float, default=1800.0, help="kill an official invocation after this many s")
    ap.add_argument("--json", type=Path, help="also write the measurements here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (its path is printed)")
    args = ap.parse_args(argv)

    try:
        _require(args.mini_dev / "evaluation" / "evaluation_ex.py", "BIRD mini-dev evaluation_ex.py (--mini-dev)")
        _require(args.test_suite / "evaluation.py", "test-suite evaluation.py (--test-suite)")
        _require(Path(args.official_python), "--official-python")
        _require(Path(args.rose), "rose executable (--rose)")
        for sub in ("spider/dev_gold.sql", "spider/tables.json", "spider/database", "preds/spider"):
            _require(args.shared / sub, f"shared data (--shared) {sub}")
        for sub in (f"bird/{BIRD_DB}/{BIRD_DB}.sqlite", "bird/dev_tables.json", "preds/bird-dev"):
            _require(args.shared / sub, f"shared data (--shared) {sub}")
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="rose-bench-"))
    try:
        datasets = []
        if args.only in (None, "spider"):
            datasets.append(load_spider(args.shared))
        if args.only in (None, "bird"):
            datasets.append(load_bird(args.shared, tmp))
        for ds in datasets:
            print(f"{ds.name}: {len(ds.files)} files, {sum(len(pf.items) for pf in ds.files)} runnable items")
        before = db_hashes(datasets)  # also warms the page cache for every phase alike
        load_before = os.getloadavg()
        res: dict[str, Any] = {"timeout": args.timeout, "cpus": os.cpu_count(), "repeat": args.repeat}
        res["rose_command"] = [args.rose, "run", "...", *shlex.split(args.rose_args)]
        env, nltk_note = _nltk_data(args.official_python, tmp)
        tables = {"spider": args.shared / "spider" / "tables.json", "bird": args.shared / "bird" / "dev_tables.json"}
        phases: dict[str, Callable[[Dataset, Path], dict[str, Any]]] = {
            "limit": lambda ds, d: measure_limit(ds, args.timeout),
            "rose": lambda ds, d: measure_rose(args.rose, shlex.split(args.rose_args), ds, d, args.timeout, args.cap),
            "bird_script": lambda ds, d: measure_bird_script(args.official_python, args.mini_dev, ds, d, args.cap),
            "test_suite": lambda ds, d: measure_test_suite(
                args.official_python, args.test_suite, ds, tables[ds.name], d, args.cap, env
            ),
        }
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for i in range(args.repeat):  # interleaved, so that a change of load hits every phase alike
            for phase, measure in phases.items():
                for ds in datasets:
                    print(f"  run {i + 1}/{args.repeat}: {phase} on {ds.name}", flush=True)
                    d = tmp / f"{phase}-{ds.name}-{i}"
                    d.mkdir()
                    runs.setdefault((phase, ds.name), []).append(measure(ds, d))
        for phase in phases:
            res[phase] = {ds.name: _fastest(runs[(phase, ds.name)]) for ds in datasets}
        res["loadavg"] = {"before": load_before, "after": os.getloadavg()}
        res["readings"] = sorted({r for ds in datasets for run in runs[("rose", ds.name)] for r in run["readings"]})
        notes = [nltk_note] if nltk_note else []
        changed = [p for p, h in db_hashes(datasets).items() if before.get(p) != h]
        if changed:
            notes.append(f"DATABASES CHANGED during the bench: {changed}")
        problems = report(datasets, res, notes)
        if args.json:
            args.json.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
        if args.keep:
            print(f"kept {tmp}")
        for p in problems:
            print(f"MISMATCH {p}", file=sys.stderr)
        return 1 if problems or changed else 0
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
