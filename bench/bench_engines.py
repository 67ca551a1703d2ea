#!/usr/bin/env python3
"""Wall time of ``rose run`` on BIRD mini-dev's superhero items in each dialect, against "the limit" and
the official mini-dev script, measured in one run.

The workload, per engine: the ``superhero`` items of the official GPT-4 and GPT-3.5 mini-dev predictions
(52 each) in the engine's dialect (PostgreSQL, MySQL on MariaDB; DuckDB runs the SQLite-dialect files),
on superhero as ``rose db copy`` builds it, read through a read-only role (``--postgresql`` /
``--mysql`` / ``--duckdb``: URLs of the copies).

Measured, in this order, ``--repeat`` times interleaved (the fastest of each kept):

(b) the limit: every distinct gold and predicted query of the workload executed once, sequentially, with
    the plain driver (psycopg 3, PyMySQL, duckdb) on one connection in this process, ``fetchall()``: no
    process start, no sandbox, no comparison, no output;
(a) ``rose run`` over both prediction files in one command (fresh ``--out``, default workers): wall
    time includes interpreter start, loading, the sandbox, readings, comparator and records;
(c) the official ``evaluation/evaluation_ex.py`` (``--official-python``, from ``--mini-dev``) once per
    prediction file, as its ``run_evaluation.sh`` runs it (``--num_cpus`` = cores, ``--meta_time_out
    30``), its hard-coded connection pointed at the copy by a wrapper of ours (its code is read from the
    path given, never copied); PostgreSQL and MySQL only (it has no DuckDB dialect).

Also printed: the machine's load average before and after, and each side's EX (ours from
``summary.json``, the official script's from its output), which must agree.

    .venv/bin/python bench/bench_engines.py --mini-dev /work/official/mini_dev \\
        --official-python /tmp/official-venv/bin/python --repeat 3 \\
        --postgresql postgresql://rose_reader@127.0.0.1:5432/rose_bird \\
        --mysql mysql://rose_reader@127.0.0.1:3306/rose_bird --duckdb duckdb:///tmp/superhero.duckdb
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SEPARATOR = "\t----- bird -----\t"
MODELS = ("gpt-4", "gpt-35-turbo")
DIALECT_FILES = {"postgresql": "postgresql", "mysql": "mysql", "duckdb": "sqlite"}
OFFICIAL_NAMES = {"postgresql": "PostgreSQL", "mysql": "MySQL"}
WRAPPER = """
import runpy, sys
from urllib.parse import unquote, urlsplit
sys.path.insert(0, {evaluation!r})
import evaluation_utils, psycopg2, pymysql
url = {url!r}
if url.startswith("postgres"):
    evaluation_utils.connect_postgresql = lambda: psycopg2.connect(url)
else:
    p = urlsplit(url)
    kw = dict(host=p.hostname, port=p.port or 3306, user=unquote(p.username or "root"),
              password=unquote(p.password or ""), database=unquote(p.path.lstrip("/")))
    evaluation_utils.connect_mysql = lambda: pymysql.connect(**kw)
sys.argv = [{script!r}] + sys.argv[1:]
runpy.run_path({script!r}, run_name="__main__")
"""


def workload(data: Path, dialect: str, tmp: Path) -> list[dict[str, Any]]:
    """Per model: the filtered prediction file, the matching gold lines and difficulties, and the queries."""
    d = DIALECT_FILES[dialect]
    questions = json.loads((data / "bird" / f"mini_dev_{d}.json").read_text(encoding="utf-8"))
    golds = (data / "bird" / f"mini_dev_{d}_gold.sql").read_text(encoding="utf-8").splitlines()
    out = []
    for model in MODELS:
        preds = json.loads(
            (data / "preds" / "bird-minidev-official" / f"predict_mini_dev_{model}_{d}.json").read_text()
        )
        keep = [i for i, q in enumerate(questions) if q["db_id"] == "superhero"]
        values = list(preds.values())
        stem = f"{model}_{dialect}"
        pred_file = tmp / f"{stem}.json"
        pred_file.write_text(json.dumps({str(i): values[i] for i in keep}), encoding="utf-8")
        official_pred = tmp / f"{stem}.official.json"
        official_pred.write_text(json.dumps({str(n): values[i] for n, i in enumerate(keep)}), encoding="utf-8")
        gold_lines = tmp / f"{stem}_gold.sql"
        gold_lines.write_text("\n".join(golds[i] for i in keep) + "\n", encoding="utf-8")
        diff = tmp / f"{stem}.jsonl"
        diff.write_text("".join(json.dumps({"difficulty": questions[i]["difficulty"]}) + "\n" for i in keep))
        queries = [golds[i].rsplit("\t", 1)[0] for i in keep] + [values[i].split(SEPARATOR)[0] for i in keep]
        out.append(
            {"stem": stem, "pred": pred_file, "official_pred": official_pred, "gold_lines": gold_lines, "diff": diff}
            | {"queries": queries, "gold_json": data / "bird" / f"mini_dev_{d}.json"}
        )
    return out


def limit(dialect: str, url: str, queries: list[str]) -> tuple[float, float, int]:
    """Each distinct query once with the plain driver on one connection: (wall, cpu, queries)."""
    distinct = list(dict.fromkeys(queries))
    t0, c0 = time.perf_counter(), time.process_time()
    if dialect == "postgresql":
        import psycopg

        conn: Any = psycopg.connect(url, autocommit=True)
    elif dialect == "mysql":
        import pymysql

        sys.path.insert(0, str(REPO))
        from rose_sql.engines.mysql import connect_args

        conn = pymysql.connect(**connect_args(url), autocommit=True)
    else:
        import duckdb

        conn = duckdb.connect(url.partition("://")[2], read_only=True)
    for sql in distinct:
        cur = conn.cursor()
        try:
            cur.execute(sql)
            cur.fetchall()
        except Exception:  # a failing prediction costs what it costs
            if dialect == "postgresql":
                conn.rollback()
        finally:
            cur.close()
    conn.close()
    return time.perf_counter() - t0, time.process_time() - c0, len(distinct)


def timed(cmd: list[str], cwd: Path | None = None) -> tuple[float, float, str]:
    """Run a command: (wall, cpu of the children, output)."""
    before = os.times()
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    after = os.times()
    if done.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed:\n{done.stderr[-2000:]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, done.stdout + done.stderr


def rose(
    rose_bin: str, url: str, files: list[dict[str, Any]], tmp: Path, n: int
) -> tuple[float, float, dict[str, float]]:
    out = tmp / f"rose-{n}"
    gold = str(files[0]["gold_json"])
    wall, cpu, _ = timed(
        [rose_bin, "run", *(str(f["pred"]) for f in files), "--gold", gold, "--db", url, "--out", str(out)]
    )
    ex = {f["stem"]: json.loads((out / f["stem"] / "summary.json").read_text())["bird_ex"] for f in files}
    return wall, cpu, ex


def official(
    python: str, mini_dev: Path, dialect: str, url: str, files: list[dict[str, Any]], tmp: Path
) -> tuple[float, float, dict[str, float]]:
    evaluation = mini_dev / "evaluation"
    wrapper = tmp / "official_wrapper.py"
    wrapper.write_text(WRAPPER.format(evaluation=str(evaluation), url=url, script=str(evaluation / "evaluation_ex.py")))
    wall = cpu = 0.0
    ex = {}
    for f in files:
        cmd = [python, str(wrapper), "--predicted_sql_path", str(f["official_pred"]), "--ground_truth_path"]
        cmd += [str(f["gold_lines"]), "--db_root_path", str(tmp) + "/", "--num_cpus", str(os.cpu_count() or 1)]
        cmd += ["--meta_time_out", "30", "--diff_json_path", str(f["diff"]), "--sql_dialect", OFFICIAL_NAMES[dialect]]
        cmd += ["--output_log_path", str(tmp / "official.log")]
        w, c, text = timed(cmd, cwd=evaluation)
        wall, cpu = wall + w, cpu + c
        m = re.search(r"^EX\s+(?:[\d.]+\s+){3}([\d.]+)", text, re.M)
        ex[f["stem"]] = float(m.group(1)) / 100 if m else float("nan")
    return wall, cpu, ex


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--mini-dev", type=Path, required=True)
    ap.add_argument("--official-python", required=True)
    ap.add_argument("--postgresql")
    ap.add_argument("--mysql")
    ap.add_argument("--duckdb")
    ap.add_argument("--rose", default=str(REPO / ".venv" / "bin" / "rose"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    load_before = os.getloadavg()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="rose-bench-engines-") as folder:
        tmp = Path(folder)
        engines = [(d, getattr(args, d)) for d in ("postgresql", "mysql", "duckdb") if getattr(args, d)]
        loads = {d: workload(args.data, d, tmp) for d, _ in engines}
        for n in range(args.repeat):
            for dialect, url in engines:
                files = loads[dialect]
                r = results.setdefault(dialect, {"items": sum(len(f["queries"]) // 2 for f in files)})
                b = limit(dialect, url, [q for f in files for q in f["queries"]])
                a = rose(args.rose, url, files, tmp, n)
                c = (
                    official(args.official_python, args.mini_dev, dialect, url, files, tmp)
                    if dialect in OFFICIAL_NAMES
                    else None
                )
                for key, value in (("limit", b), ("rose", a), ("official", c)):
                    if value is None:
                        continue
                    best = r.get(key)
                    if best is None or value[0] < best[0]:
                        r[key] = value
    load_after = os.getloadavg()
    print(
        f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
        f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; {os.cpu_count()} cores"
    )
    print("| wall time, s (cpu) | " + " | ".join(results) + " |")
    print("|---|" + "---:|" * len(results))
    rows = (
        ("limit", "the limit: each distinct query once, plain driver, one connection"),
        ("rose", "`rose run` (both files, one command)"),
        ("official", "official `evaluation_ex.py` (once per file)"),
    )
    for key, label in rows:
        cells = []
        for r in results.values():
            v = r.get(key)
            cells.append("n/a" if v is None else f"{v[0]:.2f} ({v[1]:.2f})")
        print(f"| {label} | " + " | ".join(cells) + " |")
    status = 0
    for dialect, r in results.items():
        b, a, c = r["limit"], r["rose"], r.get("official")
        line = f"{dialect}: {r['items']} items, {b[2]} distinct queries; rose / limit = {a[0] / b[0]:.1f}x"
        if c is not None:
            line += f", official / rose = {c[0] / a[0]:.1f}x; EX ours {a[2]} official {c[2]}"
            if any(abs(a[2][k] - c[2][k]) > 1e-4 for k in a[2]):
                status = 1
        print(line)
    if args.json:
        args.json.write_text(
            json.dumps(
                {"load_before": load_before, "load_after": load_after, "results": results}, default=str, indent=1
            )
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
