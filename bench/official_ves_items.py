#!/usr/bin/env python3
"""BIRD mini-dev's official R-VES item by item (each item's time ratio and reward), beside a run's records.

Our own code; it contains none of the official code. It imports ``evaluation/evaluation_ves.py`` from a
local checkout and runs the items of a folder cut as the official scripts take them (``gold.sql``,
``diff.jsonl``, ``pred_<model>.json``: ``bench/official_subset.py`` writes it for SQLite,
``bench/official_engines.py --ves`` writes ``<out>/ves-<dialect>/`` for the servers) as the published entry
point runs them: its own ``run_sqls_parallel``, a pool of ``--num-cpus`` processes (2 here, as the
official runs in docs/benchmarks.md), 100 iterations, ``meta_time_out`` 30; ``--num-cpus 0`` calls its
``execute_model`` for one item after another in this process instead. On a server the official
``connect_postgresql`` / ``connect_mysql`` are pointed at ``--postgresql`` / ``--mysql`` as
``bench/official_engines.py`` points them. Two official functions are wrapped, neither changed:
``clean_abnormal``, so that the mean it leads to is kept beside the reward (the published
``execute_model`` returns only the reward), and ``execute_model``, to return it.

Each of ``--runs`` runs (a process of its own) writes ``<subset>/ves_items_<model>_<k>.json``
(``{question_id: {"reward", "ratio"}}``) and prints its R-VES. With ``--records`` (a ``rose run``'s
``records.jsonl`` over the same items) it then sets the run's wall-time ratios beside them: where its R-VES
lies against the official runs' lowest and highest, the items whose bucket no official run gave, and the
mean over the items that every run timed of log(ours / the official runs' geometric mean), with its
standard error, beside the same for the first official run against the others: a bias in what is timed
shows there before it shows in a figure that moves by a bucket at a time::

    $OFFICIAL/venv/bin/python bench/official_ves_items.py --mini-dev $OFFICIAL/mini_dev \\
        --subset runs/official-engines/ves-postgresql --dialect postgresql --model gpt-35-turbo --runs 3 \\
        --postgresql "dbname=bird user=rose_reader host=127.0.0.1 port=5432" \\
        --records runs/official-ves/predict_mini_dev_gpt-35-turbo_postgresql/records.jsonl

With ``--bird-dev`` (a checkout of AlibabaResearch/DAMO-ConvAI) instead of ``--mini-dev``, the same for BIRD
dev's VES on SQLite: its ``bird/llm/src/evaluation_ves.py`` imported, its ``run_sqls_parallel`` (100
iterations, ``meta_time_out`` 30) run on the folder's items, each item's ratio kept in
``<subset>/dev_items_<model>_<k>.json``, its VES printed, and set beside the records' ``dev_time_ratio``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from official_engines import _point

DIALECTS = {"sqlite": "SQLite", "postgresql": "PostgreSQL", "mysql": "MySQL"}
CHILD = "--official-ves-items-child"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mini-dev", type=Path, help="a checkout of bird-bench/mini_dev: its R-VES")
    ap.add_argument("--bird-dev", type=Path, help="a checkout of AlibabaResearch/DAMO-ConvAI: BIRD dev's VES")
    ap.add_argument("--subset", required=True, type=Path, help="folder with gold.sql, diff.jsonl, pred_<model>.json")
    ap.add_argument("--dialect", choices=DIALECTS, default="sqlite")
    ap.add_argument("--db-root", type=Path, help="SQLite: folder holding <db_id>/<db_id>.sqlite")
    ap.add_argument("--postgresql", help="libpq connection string of the database holding the db_ids")
    ap.add_argument("--mysql", help="mysql://user[:password]@host:port/database holding the db_ids")
    ap.add_argument("--model", default="gpt-4")
    ap.add_argument("--runs", type=int, default=1, help="official runs, each in a process of its own")
    ap.add_argument("--num-cpus", type=int, default=2, help="the pool's processes; 0: one item after another")
    ap.add_argument("--records", type=Path, help="a rose run's records.jsonl over the same items, to compare")
    args = ap.parse_args()
    if args.runs < 0 or args.num_cpus < 0:
        ap.error("--runs and --num-cpus take 0 or more")
    if (args.mini_dev is None) == (args.bird_dev is None):
        ap.error("give one of --mini-dev (R-VES) and --bird-dev (BIRD dev's VES)")
    script = (
        args.mini_dev / "evaluation" / "evaluation_ves.py"
        if args.mini_dev
        else args.bird_dev / "bird" / "llm" / "src" / "evaluation_ves.py"
    )
    if not script.is_file():
        ap.error(f"no {script} (a checkout of {'bird-bench/mini_dev' if args.mini_dev else 'DAMO-ConvAI'})")
    if args.bird_dev is not None and args.dialect != "sqlite":
        ap.error("BIRD dev's evaluation_ves.py reads SQLite only")
    wanted = [args.subset / name for name in ("gold.sql", "diff.jsonl", f"pred_{args.model}.json")]
    if missing := [str(path) for path in wanted if not path.is_file()]:
        ap.error(f"missing {', '.join(missing)}: bench/official_subset.py or official_engines.py --ves writes them")
    if args.records is not None and not args.records.is_file():
        ap.error(f"--records {args.records}: no such file (a rose run's records.jsonl)")
    if args.dialect == "sqlite" and args.db_root is None:
        ap.error("--dialect sqlite needs --db-root")
    if args.dialect != "sqlite" and getattr(args, args.dialect) is None:
        ap.error(f"--dialect {args.dialect} needs --{args.dialect}")
    spec = {
        "evaluation": str(script.resolve().parent),
        "bird_dev": args.bird_dev is not None,
        "subset": str(args.subset.resolve()),
        "dialect": args.dialect,
        "db_root": str(args.db_root.resolve()) + "/" if args.db_root else str(args.subset.resolve()) + "/",
        "url": getattr(args, args.dialect, None),
        "model": args.model,
        "num_cpus": args.num_cpus,
    }
    outputs = []
    for run in range(1, args.runs + 1):
        out = args.subset / f"{'dev' if args.bird_dev else 'ves'}_items_{args.model}_{run}.json"
        done = subprocess.run([sys.executable, __file__, CHILD, json.dumps({**spec, "out": str(out)})], check=False)
        if done.returncode != 0:
            print(f"run {run}: the official code failed (exit {done.returncode})")
            return 1
        outputs.append(out)
    if args.records:  # this call's runs, or with --runs 0 those an earlier call wrote
        sources = outputs or sorted(args.subset.glob(f"{'dev' if args.bird_dev else 'ves'}_items_{args.model}_*.json"))
        if not sources:
            print(f"no official runs of {args.model} in {args.subset}: run with --runs 1 or more")
            return 1
        runs = [json.loads(p.read_text("utf-8")) for p in sources]
        (compare_dev if args.bird_dev else compare)(args.records, runs)
    return 0


def _child(spec: dict[str, Any]) -> None:
    """One official run: the published pool (or one item after another), each item's ratio kept."""
    multiprocessing.set_start_method("fork")  # the pool's workers inherit the pointed connection and the wrappers
    sys.path.insert(0, spec["evaluation"])
    if spec["bird_dev"]:
        _bird_dev(spec)
        return
    import evaluation_utils  # the official modules
    import evaluation_ves

    if spec["dialect"] != "sqlite":
        _point(evaluation_utils, *((spec["url"], None) if spec["dialect"] == "postgresql" else (None, spec["url"])))
    published_clean, published_model = evaluation_ves.clean_abnormal, evaluation_ves.execute_model
    seen: dict[str, float] = {}

    def clean_abnormal(values: Any) -> Any:
        kept = published_clean(values)
        seen["ratio"] = sum(kept) / len(kept) if len(kept) else 0.0
        return kept

    def execute_model(*a: Any) -> dict[str, Any]:
        seen.clear()
        result: dict[str, Any] = published_model(*a)
        result["ratio"] = seen.get("ratio", 0.0)  # none: the pass raised or was incorrect (ratio 0)
        return result

    execute_model.__module__, execute_model.__qualname__ = "evaluation_ves", "execute_model"  # pickled by name
    evaluation_ves.clean_abnormal, evaluation_ves.execute_model = clean_abnormal, execute_model
    evaluation_ves.exec_result = []  # what the published callback appends to (its __main__ makes it)

    subset = Path(spec["subset"])
    pred, _ = evaluation_ves.package_sqls(str(subset / f"pred_{spec['model']}.json"), spec["db_root"], mode="pred")
    gold, places = evaluation_ves.package_sqls(str(subset / "gold.sql"), spec["db_root"], mode="gt")
    dialect = DIALECTS[spec["dialect"]]
    if spec["num_cpus"]:
        evaluation_ves.run_sqls_parallel(
            list(zip(pred, gold, strict=True)), places, spec["num_cpus"], 100, 30.0, dialect
        )
        results = evaluation_ves.sort_results(evaluation_ves.exec_result)
    else:
        pairs = enumerate(zip(pred, gold, strict=True))
        results = [execute_model(p, g, places[i], i, 100, 30.0, dialect) for i, (p, g) in pairs]
    ids = [json.loads(line)["question_id"] for line in (subset / "diff.jsonl").read_text("utf-8").splitlines()]
    items = {str(ids[r["sql_idx"]]): {"reward": r["reward"], "ratio": r["ratio"]} for r in results}
    Path(spec["out"]).write_text(json.dumps(items, indent=1), encoding="utf-8")
    print(f"{spec['out']}: R-VES {r_ves(r['reward'] for r in items.values()):.2f} over {len(items)} items")


def _bird_dev(spec: dict[str, Any]) -> None:
    """One run of BIRD dev's ``evaluation_ves.py``: its ``package_sqls`` on the folder's files (under the
    names it reads, linked in a temporary folder), its pool, its per-item ``time_ratio`` kept."""
    import tempfile

    import evaluation_ves  # BIRD dev's module

    subset = Path(spec["subset"])
    with tempfile.TemporaryDirectory() as named:
        (Path(named) / "predict_dev.json").symlink_to(subset / f"pred_{spec['model']}.json")
        (Path(named) / "dev_gold.sql").symlink_to(subset / "gold.sql")
        pred, places = evaluation_ves.package_sqls(named + "/", spec["db_root"], mode="gpt", data_mode="dev")
        gold, _ = evaluation_ves.package_sqls(named + "/", spec["db_root"], mode="gt", data_mode="dev")
    evaluation_ves.exec_result = []  # what the published callback appends to (its __main__ makes it)
    pairs = list(zip(pred, gold, strict=True))
    if spec["num_cpus"]:
        evaluation_ves.run_sqls_parallel(pairs, places, spec["num_cpus"], 100, 30.0)
        results = evaluation_ves.sort_results(evaluation_ves.exec_result)
    else:
        results = [evaluation_ves.execute_model(p, g, places[i], i, 100, 30.0) for i, (p, g) in enumerate(pairs)]
    ids = [json.loads(line)["question_id"] for line in (subset / "diff.jsonl").read_text("utf-8").splitlines()]
    items = {str(ids[r["sql_idx"]]): {"ratio": r["time_ratio"]} for r in results}
    Path(spec["out"]).write_text(json.dumps(items, indent=1), encoding="utf-8")
    print(f"{spec['out']}: VES {evaluation_ves.compute_ves(results):.2f} over {len(items)} items")


def _ours(records: Path, field: str, runs: list[dict[str, dict[str, float]]]) -> dict[str, float]:
    """A run's ratios (``efficiency.<field>`` of its records) on the items the official runs timed."""
    ours: dict[str, float] = {}
    for line in records.read_text("utf-8").splitlines():
        record = json.loads(line)
        ratio = (record.get("efficiency") or {}).get(field)
        if str(record["id"]) in runs[0] and ratio is not None:
            ours[str(record["id"])] = ratio
    return ours


def compare_dev(records: Path, runs: list[dict[str, dict[str, float]]]) -> None:
    """BIRD dev's VES of the official runs beside a run's (its records' ``dev_time_ratio``)."""
    ours = _ours(records, "dev_time_ratio", runs)
    ids = [i for i in runs[0] if i in ours]
    figures = [round(r_ves(run[i]["ratio"] for i in ids), 2) for run in runs]
    mine = round(r_ves(ours[i] for i in ids), 2)
    print(f"VES over {len(ids)} items: official runs {_listed(figures)}; ours {mine:.2f} ({_where(mine, figures)})")
    _bias(ours, runs, ids)


def r_ves(rewards: Any) -> float:
    """100 times the mean of the square roots: R-VES of rewards, and BIRD dev's VES of ratios."""
    values = list(rewards)
    return 100 * sum(math.sqrt(r) for r in values) / max(1, len(values))


def bucket(ratio: float) -> float:
    """mini-dev's reward of a ratio (as rose_sql.readings.efficiency.reward gives it)."""
    if ratio == 0:
        return 0.0
    return 1.25 if ratio >= 2 else 1.0 if ratio >= 1 else 0.75 if ratio >= 0.5 else 0.5 if ratio >= 0.25 else 0.25


def compare(records: Path, runs: list[dict[str, dict[str, float]]]) -> None:
    ours = _ours(records, "time_ratio", runs)
    ids = [i for i in runs[0] if i in ours]
    # at the precision the official script prints (two decimals)
    figures = [round(r_ves(run[i]["reward"] for i in ids), 2) for run in runs]
    mine = round(r_ves(bucket(ours[i]) for i in ids), 2)
    print(f"R-VES over {len(ids)} items: official runs {_listed(figures)}; ours {mine:.2f} ({_where(mine, figures)})")
    other = [i for i in ids if bucket(ours[i]) not in {run[i]["reward"] for run in runs}]
    for i in other:
        theirs = " ".join(f"{run[i]['ratio']:.3f}" for run in runs)
        print(f"  question {i}: ours {ours[i]:.3f} (bucket {bucket(ours[i])}), official {theirs}")
    print(f"{len(other)} items in a bucket no official run gave")
    _bias(ours, runs, ids)


def _bias(ours: dict[str, float], runs: list[dict[str, dict[str, float]]], ids: list[str]) -> None:
    """The mean log ratio of ours to the official runs' geometric mean, item by item, and the same for the
    first official run against the others."""
    timed = [i for i in ids if ours[i] > 0 and all(run[i]["ratio"] > 0 for run in runs)]
    if len(timed) < 2:
        return
    gap = [math.log(ours[i]) - statistics.fmean(math.log(run[i]["ratio"]) for run in runs) for i in timed]
    print(f"mean log(ours / official) over {len(timed)} timed items: {_mean_se(gap)}")
    if len(runs) > 1:
        first = [
            math.log(runs[0][i]["ratio"]) - statistics.fmean(math.log(run[i]["ratio"]) for run in runs[1:])
            for i in timed
        ]
        print(f"the same, official run 1 against the others: {_mean_se(first)}")


def _listed(figures: list[float]) -> str:
    return ", ".join(f"{f:.2f}" for f in figures)


def _where(mine: float, figures: list[float]) -> str:
    """Where a figure lies against the lowest and highest of the official runs'."""
    low, high = min(figures), max(figures)
    return "within" if low <= mine <= high else f"{low - mine:.2f} below" if mine < low else f"{mine - high:.2f} above"


def _mean_se(values: list[float]) -> str:
    return f"{statistics.fmean(values):+.4f} (standard error {statistics.stdev(values) / math.sqrt(len(values)):.4f})"


if __name__ == "__main__":
    if sys.argv[1:2] == [CHILD]:
        _child(json.loads(sys.argv[2]))
        sys.exit(0)
    sys.exit(main())
