"""Evidence on real predictions: how many EX = 1 items get a witness, which gold smells fire, what it costs.

Runs ``rose run`` (no judge) over the shared Spider prediction files and the BIRD superhero items of
the shared BIRD dev prediction files, twice: with the evidence stage and without it, and prints per
file: items, EX = 1 items, witnesses found among them (by kind), gold smells, evidence seconds
(total, mean, max per item), items over ``--over`` seconds, and the wall-time ratio of the two runs.

``--baseline DIR``: another checkout of this repository (a worktree of the commit to compare with) whose
``rose run --evidence`` runs on the same files in the same invocation, just before this checkout's:
prints the evidence seconds and wall time of both and their ratios, and compares the records item by
item, every field but :data:`rose_sql.record.EXEMPT` (the evidence is counted work, so the records must
be the same); exits 1 when they differ. The load average is printed before and after each run.

``--budget`` is the wall-clock guard of an item's evidence (``--evidence-budget``); by default rose's own
(far behind the counted budgets, so that no record depends on the machine's speed: a guard that fires
cuts a search, and the records then differ between runs).

    python bench/bench_evidence.py [--shared ../shared/data] [--budget S] [--only spider|bird]
        [--baseline ../base]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (5 min {five:.2f})"


def rose(args: list[str], src: Path = ROOT) -> tuple[float, float]:
    """Wall and CPU seconds (its processes', user and system) of ``rose run`` from the checkout ``src`` (its
    package first on the path)."""
    env = dict(os.environ, PYTHONPATH=str(src))
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "rose_sql", "run", *args], check=True, stdout=subprocess.DEVNULL, cwd=src, env=env
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return time.monotonic() - start, cpu


def bird_superhero(shared: Path, tmp: Path) -> list[Path]:
    out = []
    for f in sorted((shared / "preds" / "bird-dev").glob("*.json")):
        items = [x for x in json.loads(f.read_text()) if x["db_id"] == "superhero"]
        path = tmp / f.name
        path.write_text(json.dumps(items))
        out.append(path)
    return out


def summarize(records: Path, over: float) -> dict[str, Any]:
    recs = [json.loads(line) for line in records.read_text().splitlines()]
    ev = [r["evidence"] for r in recs if r.get("evidence")]
    ex1 = [r for r in recs if r["readings"].get("bird_ex") == 1]
    witnessed = [r for r in ex1 if r.get("evidence") and r["evidence"]["witness"]]
    secs = [e["seconds"] for e in ev]
    return {
        "items": len(recs),
        "ex1": len(ex1),
        "matched": sum(1 for r in recs if (r["comparison"] or {}).get("equal") is True),
        "witness": len(witnessed),
        "kinds": Counter(r["evidence"]["witness"]["kind"] for r in witnessed),
        "smells": Counter(s["name"] for e in ev for s in e["gold_smells"]),
        "seconds": sum(secs),
        "mean": sum(secs) / len(secs) if secs else 0.0,
        "max": max(secs, default=0.0),
        "over": sum(1 for s in secs if s > over),
        "guard": sum(1 for e in ev if e.get("guard")),
    }


def comparable_records(records: Path) -> dict[tuple[str, str, int], dict[str, Any]]:
    """The records of a file by item (its id, database and occurrence), without the EXEMPT fields."""
    from rose_sql.record import Record, comparable

    out: dict[tuple[str, str, int], dict[str, Any]] = {}
    for line in records.read_text().splitlines():
        c = comparable(Record.from_dict(json.loads(line)))
        n = 0
        while (key := (json.dumps(c.get("id")), str(c.get("db_id")), n)) in out:
            n += 1
        out[key] = c
    return out


def differences(ours: Path, theirs: Path) -> list[str]:
    """Items whose records differ (or that only one run has), with the first field that differs."""
    a, b = comparable_records(ours), comparable_records(theirs)
    out = [f"{k[0]} ({k[1]}): only in one run" for k in sorted(a.keys() ^ b.keys())]
    for k in sorted(a.keys() & b.keys()):
        if a[k] != b[k]:
            field = next(f for f in sorted(a[k].keys() | b[k].keys()) if a[k].get(f) != b[k].get(f))
            out.append(f"{k[0]} ({k[1]}): {field}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--budget", type=float, help="--evidence-budget of each run (default: rose's own)")
    ap.add_argument("--over", type=float, default=2.0, help="count the items whose evidence took longer (s)")
    ap.add_argument("--only", choices=["spider", "bird"])
    ap.add_argument("--baseline", type=Path, help="another checkout, measured in the same run")
    args = ap.parse_args()
    if not args.shared.is_dir():
        sys.exit(f"shared data not found at {args.shared}")
    if args.baseline is not None and not (args.baseline / "rose_sql").is_dir():
        sys.exit(f"no rose_sql package in {args.baseline}")
    tmp = Path(tempfile.mkdtemp(prefix="rose-bench-evidence-"))
    budget = ["--evidence-budget", str(args.budget)] if args.budget is not None else []
    groups = []
    if args.only in (None, "spider"):
        spider = sorted((args.shared / "preds" / "spider").iterdir())
        groups.append(
            (
                "spider",
                spider,
                [
                    "--gold",
                    str(args.shared / "spider" / "dev.json"),
                    "--db-root",
                    str(args.shared / "spider" / "database"),
                ],
            )
        )
    if args.only in (None, "bird"):
        groups.append(("bird", bird_superhero(args.shared, tmp), ["--db-root", str(args.shared / "bird")]))
    walls = {"on": 0.0, "off": 0.0, "baseline": 0.0}  # over all groups
    cpus = {"on": 0.0, "off": 0.0, "baseline": 0.0}
    summaries: dict[str, list[tuple[str, dict[str, Any]]]] = {"on": [], "baseline": []}
    differ: list[str] = []
    for name, files, extra in groups:
        runs: list[tuple[str, Path]] = [("baseline", args.baseline)] if args.baseline is not None else []
        for run, src in [*runs, ("on", ROOT)]:
            before = load()
            wall, cpu = rose(
                [*map(str, files), *extra, "--out", str(tmp / f"{name}-{run}"), "--evidence", *budget], src
            )
            walls[run] += wall
            cpus[run] += cpu
            print(
                f"{name:6} {run:8}: {wall:7.1f} s wall, {cpu:7.1f} s CPU ({before} before, {load()} after)", flush=True
            )
            for f in files:
                summaries[run].append(
                    (f"{name}/{f.stem}", summarize(tmp / f"{name}-{run}" / f.stem / "records.jsonl", args.over))
                )
        before = load()
        wall, cpu = rose([*map(str, files), *extra, "--out", str(tmp / f"{name}-off"), "--no-evidence"])
        walls["off"] += wall
        cpus["off"] += cpu
        print(f"{name:6} {'off':8}: {wall:7.1f} s wall, {cpu:7.1f} s CPU ({before} before, {load()} after)", flush=True)
        if args.baseline is not None:
            for f in files:
                found = differences(
                    tmp / f"{name}-on" / f.stem / "records.jsonl", tmp / f"{name}-baseline" / f.stem / "records.jsonl"
                )
                differ += [f"{name}/{f.stem} {d}" for d in found]
    print(
        f"\n{'file':28} {'items':>5} {'EX=1':>5} {'match':>5} {'witn.':>5}  {'ev s':>6} {'mean':>5} {'max':>5} "
        f"{'over':>4}  kinds / smells"
    )
    totals: Counter[str] = Counter()
    for label, s in summaries["on"]:
        for k in ("items", "ex1", "matched", "witness", "over", "guard"):
            totals[k] += s[k]
        totals["seconds_x1000"] += int(s["seconds"] * 1000)
        kinds = ",".join(f"{k}:{v}" for k, v in s["kinds"].most_common())
        smells = ",".join(f"{k}:{v}" for k, v in s["smells"].most_common())
        print(
            f"{label:28.28} {s['items']:5} {s['ex1']:5} {s['matched']:5} {s['witness']:5}  "
            f"{s['seconds']:6.1f} {s['mean']:5.3f} {s['max']:5.2f} {s['over']:4}  {kinds} / {smells}"
        )
    seconds = totals["seconds_x1000"] / 1000
    share = 100 * totals["witness"] / max(1, totals["ex1"])
    print(
        f"\nall files: {totals['items']} items, {totals['ex1']} with EX = 1, {totals['witness']} of those with a "
        f"witness ({share:.1f} %); {totals['over']} items over {args.over:g} s; {totals['guard']} stopped by the "
        f"wall-clock guard; evidence time {seconds:.1f} s"
    )
    print(
        f"wall time: with evidence {walls['on']:.1f} s, without {walls['off']:.1f} s "
        f"(ratio {walls['on'] / max(walls['off'], 1e-9):.1f}x); CPU time: with {cpus['on']:.1f} s, without "
        f"{cpus['off']:.1f} s"
    )
    if args.baseline is not None:
        base_seconds = sum(s["seconds"] for _, s in summaries["baseline"])
        base_guard = sum(s["guard"] for _, s in summaries["baseline"])
        print(
            f"baseline ({args.baseline}): evidence time {base_seconds:.1f} s, wall time with evidence "
            f"{walls['baseline']:.1f} s, {base_guard} stopped by the guard\n"
            f"this checkout / baseline: evidence time {seconds / max(base_seconds, 1e-9):.3f}, "
            f"wall time with evidence {walls['on'] / max(walls['baseline'], 1e-9):.3f}, evidence's own wall time "
            f"(with less without) {(walls['on'] - walls['off']) / max(walls['baseline'] - walls['off'], 1e-9):.3f}, "
            f"evidence's own CPU time {(cpus['on'] - cpus['off']) / max(cpus['baseline'] - cpus['off'], 1e-9):.3f} "
            f"(baseline CPU with evidence {cpus['baseline']:.1f} s)"
        )
        print(f"records: {len(differ)} items differ from the baseline's (every field but EXEMPT)")
        for d in differ[:20]:
            print(f"  {d}")
        if differ:
            sys.exit(1)


if __name__ == "__main__":
    main()
