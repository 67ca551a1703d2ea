#!/usr/bin/env python3
"""Ray on one machine, measured against its in-process baseline in the same run, on loopback only.

1. **Rewards per second** on the shared completions (``bench_reward.py``'s workload: one completion per
   system for every Spider dev question and every BIRD dev ``superhero`` question, about 10,500, in
   batches of ``--batch`` as a GRPO batch holds them), every method from cold caches:

   - ``compute_score, one process``: verl's naive reward manager, :func:`rose_sql.reward.compute_score`
     called once per completion (the baseline the ratios are against);
   - ``compute_score_batch, one process``: verl's batch reward manager in one process;
   - ``RewardPool, N actors``: :meth:`rose_sql.distributed.pool.RewardPool.compute_score_batch` (the same
     arguments, results checked equal to the baseline's), on a local Ray instance of ``--cpus`` CPUs
     started before the clock (its start-up is printed apart).

2. **The overhead of** ``rose run --ray`` against a local run: one ``rose run`` subprocess each, on the
   Spider prediction files (judge-free; ``--questions`` first questions of each) and on three of them
   judged by a deterministic scripted judge on loopback (``rose_sql.testing.ScriptedOpenAI``, a fresh
   cache each run), as ``local``, ``--ray`` (a local Ray instance started by the run itself: start-up
   included) and ``--ray ADDRESS`` (joining an instance already running). The records of every run are
   checked equal (:func:`rose_sql.record.comparable`). Also printed: the CPU time of the ``rose``
   process and its children; joining a running instance, that is the driver's alone (the actors belong
   to the instance), and per item it bounds how many items per second one driver can take in.

The load average of the machine is printed before and after. Exact command (repository root)::

    .venv/bin/python bench/bench_ray.py --repeat 2

Options: ``--shared`` (default ``../shared/data``), ``--cpus`` (2), ``--batch`` (256), ``--limit`` (first N
completions), ``--questions`` (Spider questions per file for part 2, default all), ``--judged-questions``
(200), ``--repeat`` (best of N), ``--skip rewards|run``, ``--json`` (write the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench_reward import Rollout, _cpu_seconds, _load, batches, load_workload

from rose_sql.config import RewardConfig
from rose_sql.record import comparable, read_records
from rose_sql.reward import compute_score, compute_score_batch

REPO = Path(__file__).resolve().parent.parent
SPIDER = ("c3sql.txt", "codes-1b.txt", "codes-7b.txt", "dail-sql-gpt4-sc.txt", "dail-sql-gpt4.txt",
          "early-baseline.txt", "ta-sql.sql")  # fmt: skip
JUDGED = ("c3sql.txt", "dail-sql-gpt4.txt", "codes-7b.txt")


def _verl_args(batch: Sequence[Rollout]) -> tuple[list[str], list[str], list[str], list[dict[str, Any]]]:
    return (["spider"] * len(batch), [r.completion for r in batch], [r.gold for r in batch],
            [{"db_path": str(r.db)} for r in batch])  # fmt: skip


def _fresh(k: int) -> RewardConfig:
    """A config no earlier method used: its in-process scorer (one per config) starts cold."""
    return RewardConfig(memo_size=50_000 + k)


def rewards(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    from rose_sql.distributed.pool import RewardPool

    rollouts = load_workload(args.shared)[: args.limit]
    parts = batches(rollouts, args.batch)
    kwargs = {"timeout_s": 2.0}
    out: dict[str, Any] = {"completions": len(rollouts)}
    expected: list[Any] = []

    def timed(name: str, fn: Callable[[int], list[Any]], setup: Callable[[int], Any] = lambda k: None) -> None:
        """Best of ``--repeat`` runs of ``fn(k)``, each after ``setup(k)`` (off the clock), all from cold caches."""
        best = None
        for k in range(args.repeat):
            state = setup(k)
            cpu, start = _cpu_seconds(), time.perf_counter()
            got = fn(k)
            wall, used = time.perf_counter() - start, _cpu_seconds() - cpu
            if state is not None:
                state.close()
            if not expected:
                expected.extend(got)
            assert got == expected, f"{name}: other results than the baseline"
            if best is None or wall < best[0]:
                best = (wall, used)
        assert best is not None
        out[name] = {"s": round(best[0], 3), "rewards_per_s": round(len(rollouts) / best[0]),
                     "cpu_s_here": round(best[1], 2)}  # fmt: skip
        print(f"  {name:40} {best[0]:7.2f} s  {len(rollouts) / best[0]:8,.0f} rewards/s", flush=True)

    def one_by_one(k: int) -> list[Any]:
        cfg = _fresh(100 + k)
        return [compute_score(*(a[0] for a in _verl_args([r])), config=cfg, **kwargs) for r in rollouts]

    def batched(k: int) -> list[Any]:
        cfg = _fresh(200 + k)
        return [x for b in parts for x in compute_score_batch(*_verl_args(b), config=cfg, **kwargs)]

    print(f"rewards: {len(rollouts)} completions, batches of {args.batch}, load {_load()}", flush=True)
    timed("compute_score, one process", one_by_one)
    timed("compute_score_batch, one process", batched)
    start = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    print(f"  (Ray started in {time.perf_counter() - start:.1f} s)", flush=True)
    pools: list[RewardPool] = []

    def start_pool(_: int) -> RewardPool:
        begin = time.perf_counter()
        pools.append(RewardPool(size=args.cpus))
        print(f"  ({args.cpus} fresh actors started in {time.perf_counter() - begin:.1f} s, off the clock)", flush=True)
        return pools[-1]

    def on_pool(_: int) -> list[Any]:
        return [x for b in parts for x in pools[-1].compute_score_batch(*_verl_args(b), **kwargs)]

    try:
        timed(f"RewardPool, {args.cpus} actors", on_pool, start_pool)
    finally:
        ray.shutdown()
    base = out["compute_score, one process"]["rewards_per_s"]
    for name in ("compute_score_batch, one process", f"RewardPool, {args.cpus} actors"):
        out[name]["vs_compute_score"] = round(out[name]["rewards_per_s"] / base, 2)
    pool_rate = out[f"RewardPool, {args.cpus} actors"]["rewards_per_s"]
    out["pool_vs_batch"] = round(pool_rate / out["compute_score_batch, one process"]["rewards_per_s"], 2)
    return out


def _inputs(shared: Path, folder: Path, files: Sequence[str], questions: int | None) -> tuple[list[Path], Path]:
    lines = (shared / "spider/dev_gold.sql").read_text().splitlines(keepends=True)[:questions]
    gold = folder / "gold.sql"
    gold.write_text("".join(lines))
    preds = []
    for name in files:
        preds.append(folder / name)
        lines = (shared / "preds/spider" / name).read_text().splitlines(keepends=True)[:questions]
        preds[-1].write_text("".join(lines))
    return preds, gold


def _children_cpu() -> float:
    """User + system CPU of the finished children of this process (a ``rose run`` with its workers; joining
    a running Ray instance, the driver alone)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def overhead(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    sys.path.insert(0, str(REPO / "tests"))
    from test_trust import hashed_verdict

    from rose_sql.testing import ScriptedOpenAI, by_content

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, ScriptedOpenAI(by_content(hashed_verdict)) as srv:
        work = Path(tmp)
        context = ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False,
                           _node_ip_address="127.0.0.1")  # fmt: skip
        address = str(context.address_info["address"])
        try:
            for label, files, questions, judged in (
                ("judge-free", SPIDER, args.questions, False),
                ("judged", JUDGED, args.judged_questions, True),
            ):
                folder = work / label
                folder.mkdir()
                preds, gold = _inputs(args.shared, folder, files, questions)
                base = ["run", *map(str, preds), "--gold", str(gold), "--db-root", str(args.shared / "spider/database")]
                n = sum(len(p.read_text().splitlines()) for p in preds)
                print(f"rose run, {label}: {len(preds)} files, {n} items, load {_load()}", flush=True)
                figures: dict[str, Any] = {"items": n}
                runs: dict[str, dict[str, Any]] = {}
                for mode, extra in (("local", []), ("--ray", ["--ray"]), ("--ray ADDRESS", ["--ray", address])):
                    best = None
                    for k in range(args.repeat):
                        run_out = folder / f"out-{mode.replace(' ', '-')}-{k}"
                        cmd = [str(REPO / ".venv/bin/rose"), *base, "--out", str(run_out), *extra]
                        if judged:
                            cmd += ["--judge-model", "m", "--judge-base-url", srv.base_url, "--cache-dir",
                                    str(folder / f"cache-{mode}-{k}")]  # fmt: skip
                        start, before = time.perf_counter(), _children_cpu()
                        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ,
                                              "OPENAI_API_KEY": "t"})  # fmt: skip
                        wall, cpu = time.perf_counter() - start, _children_cpu() - before
                        assert done.returncode == 0, done.stderr[-2000:]
                        runs[mode] = {f"{p.stem}/{r.id_key}": comparable(r) for p in preds
                                      for r in read_records(run_out / p.stem / "records.jsonl")}  # fmt: skip
                        best = (wall, cpu) if best is None or wall < best[0] else best
                    assert best is not None
                    figures[mode] = round(best[0], 2)
                    figures[f"{mode} cpu_s"] = round(best[1], 2)
                    print(f"  {mode:16} {best[0]:7.2f} s, {best[1]:6.2f} CPU s in the rose process", flush=True)
                assert runs["local"] == runs["--ray"] == runs["--ray ADDRESS"], "the records differ"
                figures["ray_vs_local"] = round(figures["--ray"] / figures["local"], 2)
                figures["joined_vs_local"] = round(figures["--ray ADDRESS"] / figures["local"], 2)
                # joining a running instance, the rose process is the driver alone (the actors are the cluster's)
                figures["driver_us_per_item"] = round(figures["--ray ADDRESS cpu_s"] / n * 1e6)
                out[label] = figures
        finally:
            ray.shutdown()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--questions", type=int, default=None)
    p.add_argument("--judged-questions", type=int, default=200)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--skip", nargs="*", default=[], choices=["rewards", "run"])
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if not args.shared.is_dir():
        print(f"shared data not found at {args.shared}", file=sys.stderr)
        return 2
    figures: dict[str, Any] = {"cpus": os.cpu_count(), "load_before": _load()}
    if "rewards" not in args.skip:
        figures["rewards"] = rewards(args)
    if "run" not in args.skip:
        figures["run"] = overhead(args)
    figures["load_after"] = _load()
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
