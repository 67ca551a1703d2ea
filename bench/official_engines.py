#!/usr/bin/env python3
"""Per-item values of the official BIRD mini-dev script on PostgreSQL and MySQL/MariaDB servers.

Our own driver code, like ``bench/official_expected.py``: it contains none of the official code. It
imports ``evaluation/evaluation_ex.py`` and ``evaluation/evaluation_f1.py`` from a local checkout of
bird-bench/mini_dev whose path is given, points the official ``connect_postgresql`` /
``connect_mysql`` (hard-coded credentials in ``evaluation_utils.py``) at the databases named by
``--postgresql`` / ``--mysql``, and calls the official ``execute_model`` item by item: it opens a new
connection, runs the prediction then the gold on it, ``fetchall()`` each, and applies ``calculate_ex``
/ ``calculate_f1_score``; an exception or its 30 s ``func_timeout`` gives 0.

Items: the items of the ``--db-id`` databases (repeat it; ``superhero`` by default) of the official GPT-4
and GPT-3.5 mini-dev predictions in each dialect
(``<data>/preds/bird-minidev-official/predict_mini_dev_{gpt-4,gpt-35-turbo}_{postgresql,mysql}.json``),
paired by position with ``<data>/bird/mini_dev_<dialect>_gold.sql`` as the official script pairs
them; id = the gold's question_id. The databases must hold those db_ids as ``rose db copy`` builds them.

Output: ``<out>/bird-minidev-<dialect>/<prediction file>.json``, ``{"source", "server", "items": {id:
{"bird_ex", "soft_f1"}}}``. Run with an interpreter that has what the official code imports
(``psycopg2``, ``pymysql``, ``func_timeout``)::

    /tmp/official-venv/bin/python bench/official_engines.py --mini-dev /work/official/mini_dev \\
        --data ../shared/data --out tests/data/official \\
        --postgresql "dbname=rose_bird user=postgres host=127.0.0.1 port=5432" \\
        --mysql "mysql://root@127.0.0.1:3306/rose_bird"

``--ves N`` runs, instead, the official ``evaluation/evaluation_ves.py`` as published, N times per dialect
and model, against the same databases: its own entry point (its ``__main__``, run by ``runpy`` in a
process of its own per run), with its pool of ``--num-cpus`` processes (2, as ``run_evaluation.sh``
sets), 100 iterations and ``--meta_time_out`` 30, on the inputs cut to the items of the ``--db-id``
databases as ``bench/official_subset.py`` cuts them (written to ``<out>/ves-<dialect>/``); only its
``connect_postgresql`` / ``connect_mysql`` are pointed at our databases, and the pool is started by
``fork`` so that its workers inherit that. Each run's R-VES per difficulty is printed as the script prints
it (and appended to ``<out>/ves-<dialect>/ves_<model>.txt``, its ``--output_log_path``). ``--limit K``
keeps the first K of those items of each difficulty, to check the setup (the official script divides by
each difficulty's count, so it fails on a cut without one; the figures are then over those items)::

    $OFFICIAL/venv/bin/python bench/official_engines.py --mini-dev $OFFICIAL/mini_dev --data $D \\
        --out runs/official-engines --db-id superhero --db-id student_club --db-id toxicology --ves 3 \\
        --postgresql "dbname=bird user=rose_reader host=127.0.0.1 port=5432" \\
        --mysql mysql://rose_reader@127.0.0.1:3306/bird
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

SEPARATOR = "\t----- bird -----\t"
MODELS = ("gpt-4", "gpt-35-turbo")
DIALECTS = {"postgresql": "PostgreSQL", "mysql": "MySQL"}


def _point(evaluation_utils: Any, postgresql: str | None, mysql: str | None) -> None:
    """Point the official connect functions at our databases (their code is otherwise untouched)."""
    import psycopg2
    import pymysql

    if postgresql:
        evaluation_utils.connect_postgresql = lambda: psycopg2.connect(postgresql)
    if mysql:
        kw = _mysql_args(mysql)
        evaluation_utils.connect_mysql = lambda: pymysql.connect(**kw)


def _mysql_args(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    return {
        "host": parts.hostname,
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "database": unquote(parts.path.lstrip("/")),
    }


def _server(dialect: str, evaluation_utils: Any) -> str:
    conn = evaluation_utils.connect_postgresql() if dialect == "postgresql" else evaluation_utils.connect_mysql()
    try:
        cur = conn.cursor()
        cur.execute("SELECT version()")
        return str(cur.fetchone()[0])
    finally:
        conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mini-dev", required=True, type=Path)
    ap.add_argument("--data", default=Path("../shared/data"), type=Path)
    ap.add_argument("--out", default=Path("tests/data/official"), type=Path)
    ap.add_argument("--postgresql", help="libpq connection string of the database holding the db_ids")
    ap.add_argument("--mysql", help="mysql://user[:password]@host:port/database holding the db_ids")
    ap.add_argument("--db-id", action="append", help="a db_id whose items are run (repeat; default superhero)")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--mini-dev-commit", default="unknown", help="the checkout's commit, when it is not a git clone")
    ap.add_argument("--ves", type=_at_least(0), default=0, metavar="N", help="run evaluation_ves.py N times instead")
    ap.add_argument("--num-cpus", type=int, default=2, help="evaluation_ves.py's --num_cpus (its pool)")
    ap.add_argument("--model", action="append", choices=MODELS, help="a system (repeat; default both)")
    ap.add_argument(
        "--limit", type=_at_least(1), help="with --ves: the first K items of each difficulty (a check; at least 1)"
    )
    args = ap.parse_args()
    if args.ves:
        return _ves_runs(args)

    sys.path.insert(0, str(args.mini_dev.resolve() / "evaluation"))
    import evaluation_ex  # the official modules
    import evaluation_f1
    import evaluation_utils

    db_ids = args.db_id or ["superhero"]
    _point(evaluation_utils, args.postgresql, args.mysql)
    commit = _commit(args.mini_dev, args.mini_dev_commit)
    for dialect, official_name in DIALECTS.items():
        if not getattr(args, dialect):
            continue
        gold_path = args.data / "bird" / f"mini_dev_{dialect}_gold.sql"
        golds = [line.strip().split("\t") for line in gold_path.read_text(encoding="utf-8").splitlines()]
        server = _server(dialect, evaluation_utils)
        for model in MODELS:
            name = f"predict_mini_dev_{model}_{dialect}.json"
            preds = json.loads((args.data / "preds" / "bird-minidev-official" / name).read_text(encoding="utf-8"))
            qids = _question_ids(args.data / "bird" / f"mini_dev_{dialect}.json")
            items: dict[str, Any] = {}
            for i, value in enumerate(preds.values()):  # by position, as the official script pairs them
                gold_sql, db_id = golds[i]
                if db_id not in db_ids:
                    continue
                pred_sql = value.split(SEPARATOR)[0] if isinstance(value, str) and SEPARATOR in value else " "
                run = (pred_sql, gold_sql, "", i, args.timeout, official_name)
                ex = evaluation_ex.execute_model(*run)["res"]
                f1 = evaluation_f1.execute_model(*run)["res"]
                items[str(qids[i])] = {"bird_ex": ex, "soft_f1": f1}
            out = args.out / f"bird-minidev-{dialect}" / name
            out.parent.mkdir(parents=True, exist_ok=True)
            header = {
                "source": f"bird-bench/mini_dev@{commit} evaluation/evaluation_ex.py, evaluation/evaluation_f1.py "
                f"execute_model ({official_name}), connect_{dialect} pointed at the test database",
                "generated_by": "bench/official_engines.py",
                "prediction_file": f"preds/bird-minidev-official/{name}",
                "gold": f"bird/mini_dev_{dialect}_gold.sql, db_id in {db_ids!r} (id = question_id)"
                if len(db_ids) > 1
                else f"bird/mini_dev_{dialect}_gold.sql, db_id == {db_ids[0]!r} (id = question_id)",
                "database": ", ".join(f"{d} as `rose db copy` builds it from bird/{d}/{d}.sqlite" for d in db_ids),
                "server": server,
                "environment": _environment(),
                "bird_ex_mean": round(sum(v["bird_ex"] for v in items.values()) / max(1, len(items)), 6),
                "soft_f1_mean": round(sum(v["soft_f1"] for v in items.values()) / max(1, len(items)), 6),
            }
            lines = [f'"{k}": {json.dumps(v)}' for k, v in items.items()]
            head = ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in header.items())
            out.write_text("{\n" + head + ',\n"items": {\n' + ",\n".join(lines) + "\n}}\n", encoding="utf-8")
            means = f"bird_ex mean {header['bird_ex_mean']}, soft_f1 mean {header['soft_f1_mean']}"
            print(f"{out}: {len(items)} items, {means}")
    return 0


def _ves_runs(args: argparse.Namespace) -> int:
    """The official ``evaluation_ves.py`` run as published, ``args.ves`` times per dialect and model."""
    db_ids = set(args.db_id or ["superhero"])
    evaluation = args.mini_dev.resolve() / "evaluation"
    for dialect, official_name in DIALECTS.items():
        url = getattr(args, dialect)
        if not url:
            continue
        folder = (args.out / f"ves-{dialect}").resolve()
        folder.mkdir(parents=True, exist_ok=True)
        gold = (args.data / "bird" / f"mini_dev_{dialect}_gold.sql").read_text(encoding="utf-8").splitlines()
        questions = json.loads((args.data / "bird" / f"mini_dev_{dialect}.json").read_text(encoding="utf-8"))
        kept = [i for i, line in enumerate(gold) if line.strip().split("\t")[-1] in db_ids]
        if args.limit is not None:  # the first K of each difficulty: the official script divides by each one's count
            kept = _first_of_each(kept, [q["difficulty"] for q in questions], args.limit)
        (folder / "gold.sql").write_text("".join(gold[i] + "\n" for i in kept), encoding="utf-8")
        diff = "".join(json.dumps(questions[i]) + "\n" for i in kept)
        (folder / "diff.jsonl").write_text(diff, encoding="utf-8")
        for model in args.model or MODELS:
            name = f"predict_mini_dev_{model}_{dialect}.json"
            published = args.data / "preds" / "bird-minidev-official" / name
            values = list(json.loads(published.read_text(encoding="utf-8")).values())
            pred = folder / f"pred_{model}.json"
            pred.write_text(json.dumps({str(j): values[i] for j, i in enumerate(kept)}, indent=1), encoding="utf-8")
            argv = [
                str(evaluation / "evaluation_ves.py"),
                *("--predicted_sql_path", str(pred), "--ground_truth_path", str(folder / "gold.sql")),
                *("--db_root_path", str(folder) + "/", "--diff_json_path", str(folder / "diff.jsonl")),
                *("--num_cpus", str(args.num_cpus), "--meta_time_out", "30.0", "--sql_dialect", official_name),
                *("--output_log_path", str(folder / f"ves_{model}.txt")),
            ]
            child = {"evaluation": str(evaluation), "dialect": dialect, "url": url, "argv": argv}
            for run in range(1, args.ves + 1):
                started = time.monotonic()
                done = subprocess.run(
                    [sys.executable, __file__, CHILD, json.dumps(child)], capture_output=True, text=True, check=False
                )
                seconds = time.monotonic() - started
                figures = _printed_r_ves(done.stdout)
                if done.returncode != 0 or figures is None:
                    print(done.stdout + done.stderr, file=sys.stderr)
                    print(f"{dialect} {model} run {run}: evaluation_ves.py failed (exit {done.returncode})")
                    return 1
                cells = ", ".join(f"{level} {value} ({count})" for level, (value, count) in figures.items())
                print(f"{dialect} {model} run {run} of {args.ves}: R-VES {cells}; {seconds:.0f} s, {len(kept)} items")
    return 0


def _at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``low`` (the official script divides by each difficulty's count)."""

    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{text} is less than {low}")
        return value

    return parse


def _first_of_each(kept: list[int], difficulty: list[str], k: int) -> list[int]:
    """The first ``k`` of ``kept`` of each difficulty, in their order."""
    seen: dict[str, int] = {}
    out = []
    for i in kept:
        seen[difficulty[i]] = seen.get(difficulty[i], 0) + 1
        if seen[difficulty[i]] <= k:
            out.append(i)
    return out


CHILD = "--official-ves-child"
"""The argument that runs one official ``evaluation_ves.py`` in this script's child process."""
LEVELS = ("simple", "moderate", "challenging", "total")


def _ves_child(spec: dict[str, Any]) -> None:
    """One run of the official ``evaluation_ves.py``'s own ``__main__``, its connection pointed at ours."""
    import multiprocessing
    import runpy

    multiprocessing.set_start_method("fork")  # the pool's workers inherit the pointed connection
    sys.path.insert(0, spec["evaluation"])
    import evaluation_utils  # the official module

    _point(evaluation_utils, *((spec["url"], None) if spec["dialect"] == "postgresql" else (None, spec["url"])))
    sys.argv = spec["argv"]
    runpy.run_path(spec["argv"][0], run_name="__main__")


def _printed_r_ves(stdout: str) -> dict[str, tuple[str, str]] | None:
    """Each difficulty's R-VES and count, as the official ``print_data`` printed them."""
    counts = values = None
    for line in stdout.splitlines():
        words = line.split()
        if words[:1] == ["count"]:
            counts = words[1:]
        elif words[:1] == ["R-VES"] and len(words) == 5:
            values = words[1:]
    if counts is None or values is None:
        return None
    return {level: (v, c) for level, v, c in zip(LEVELS, values, counts, strict=True)}


def _question_ids(path: Path) -> list[Any]:
    return [q["question_id"] for q in json.loads(path.read_text(encoding="utf-8"))]


def _commit(checkout: Path, given: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.strip()
    except OSError:
        pass
    marker = checkout / "COMMIT"
    return marker.read_text().strip() if marker.is_file() else given


def _environment() -> dict[str, str]:
    import func_timeout
    import psycopg2
    import pymysql

    return {
        "python": sys.version.split()[0],
        "psycopg2": psycopg2.__version__.split()[0],
        "pymysql": ".".join(map(str, pymysql.VERSION[:3])),
        "func_timeout": getattr(func_timeout, "__version__", "?"),
    }


if __name__ == "__main__":
    if sys.argv[1:2] == [CHILD]:
        _ves_child(json.loads(sys.argv[2]))
        sys.exit(0)
    sys.exit(main())
