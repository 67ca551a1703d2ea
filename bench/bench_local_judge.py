#!/usr/bin/env python3
"""The pinned local judge on ROSE-VEC: seconds and tokens per item, and kappa against the experts.

The workload: the 77 ROSE-VEC BIRD items whose databases are here (superhero 23, student_club 24,
toxicology 30), in the file's order, or the first ``--limit`` of them. Measured, each as a subprocess:

1. ``rose run ITEMS --db <shared>/bird --out OUT/runs --judge-gguf GGUF --cache-dir OUT/cache
   [--limit N] [--judge-max-tokens T]`` (a fresh cache unless ``--out`` is reused): wall seconds of the
   run, and from its records the judge calls, their seconds (the server's wall time per call, as
   recorded) and the prompt and completion tokens the server reported, per judged item;
2. the ROSE authors' o3 run and their EX on the same items, imported from ``reference_outputs`` with
   ``rose import-rose``;
3. ``rose agree RUN --labels LABELS --json`` for each of the three against the experts' labels of the same
   items: Cohen's kappa and accuracy with their 95 % bootstrap intervals (rose's own agreement code),
   the items left unscored counted and left out (``--unscored exclude``, the default).

With SmolLM2-135M (the lane's model) the kappa is a floor set by a 135M model, not a judge: its replies
are often invalid (``judge_invalid``, left out). The same command measures a real judge (a 7B coder
GGUF, say) the day one is at hand. On the 77 items o3 reaches kappa 72.02, accuracy 88.31; EX 39.65.

Usage (the full run takes over an hour of one core with SmolLM2):
    python bench/bench_local_judge.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf
    python bench/bench_local_judge.py --gguf FILE.gguf --limit 6 --out /tmp/bench-local
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = ("superhero", "student_club", "toxicology")
"""The BIRD dev databases of ROSE-VEC that ``<shared>/bird`` holds."""
O3 = "reference_outputs/rose-vec-bird/o3/ROSE"
EX = "reference_outputs/rose-vec-bird/decisive/EX"


def rose(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``rose ARGS`` with this interpreter (exit 3, items left unscored, is an outcome here, not a failure)."""
    done = subprocess.run(
        [sys.executable, "-m", "rose_sql", *map(str, args)], capture_output=True, text=True, check=False
    )
    if done.returncode not in (0, 3):
        sys.exit(f"rose {' '.join(map(str, args[:2]))} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    return done


def agreement(run: Path, labels: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(rose("agree", run, "--labels", labels, "--json").stdout)
    return result


def per_item(records: Path) -> dict[str, float]:
    """Calls, seconds and tokens per judged item (an item with at least one call), from the records."""
    judged = calls = 0
    seconds = prompt = completion = 0.0
    for line in records.read_text(encoding="utf-8").splitlines():
        made = [c for c in json.loads(line)["judges"] if not c["cached"]]
        if made:
            judged += 1
            calls += len(made)
            seconds += sum(c["seconds"] for c in made)
            prompt += sum(c["prompt_tokens"] for c in made)
            completion += sum(c["completion_tokens"] for c in made)
    n = max(judged, 1)
    return {
        "judged": judged,
        "calls": calls / n,
        "seconds": seconds / n,
        "prompt_tokens": prompt / n,
        "completion_tokens": completion / n,
    }


def row(name: str, a: dict[str, Any], cost: dict[str, float] | None) -> str:
    def shown(metric: str) -> str:
        value, ci = a[metric], (a["ci95"] or {}).get(metric)
        if value is None:
            return "undefined"
        return f"{value} [{ci[0]}, {ci[1]}]" if ci else f"{value} [no interval]"

    kappa, acc = shown("kappa"), shown("accuracy")
    left = ", ".join(f"{k} {v}" for k, v in sorted(a["unscored_reasons"].items())) or "0"
    c = (
        f"{cost['seconds']:.1f} | {cost['calls']:.2f} | {cost['prompt_tokens']:.0f} | {cost['completion_tokens']:.0f}"
        if cost
        else "- | - | - | -"
    )
    return f"| {name} | {a['n']} | {left} | {kappa} | {acc} | {c} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", type=Path, default=os.environ.get("ROSE_TEST_GGUF"), help="GGUF file ($ROSE_TEST_GGUF)")
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--limit", type=int, help="the first N of the 77 items (default: all)")
    ap.add_argument("--judge-max-tokens", type=int, default=1024, help="completion cap per call (default 1024)")
    ap.add_argument("--ctx", type=int, default=8192, help="the server's context (--judge-gguf-ctx)")
    ap.add_argument("--out", type=Path, help="work folder (default: a temporary one); reusing it reuses its cache")
    a = ap.parse_args()
    if a.gguf is None or not Path(a.gguf).is_file():
        sys.exit("--gguf FILE (or $ROSE_TEST_GGUF) must name a GGUF file")
    vec = a.shared / "rose-vec"
    if not (vec / "rose-vec-bird.json").is_file():
        sys.exit(f"ROSE-VEC not found under {vec} (give --shared)")
    out = a.out or Path(tempfile.mkdtemp(prefix="bench-local-"))
    out.mkdir(parents=True, exist_ok=True)
    labels = json.loads((vec / "rose-vec-bird.json").read_text(encoding="utf-8"))
    items = [x for x in labels if x["db_id"] in HERE][: a.limit]
    items_path = out / "rose-vec-bird-here.json"  # the items and their labels (ROSE-VEC's own format)
    items_path.write_text(json.dumps(items), encoding="utf-8")

    run = out / "runs" / items_path.stem
    # a run of this folder before: its records kept as they are (the seconds of their calls with them)
    again = ["--resume", "--keep-unscored"] if (run / "records.jsonl").is_file() else []
    start = time.monotonic()
    done = rose(
        "run", items_path, "--db", a.shared / "bird", "--out", out / "runs", "--judge-gguf", a.gguf,
        "--judge-gguf-ctx", a.ctx, "--judge-max-tokens", a.judge_max_tokens, "--cache-dir", out / "cache", *again,
    )  # fmt: skip
    wall = time.monotonic() - start
    for name, folder in (("o3", O3), ("ex", EX)):
        if not (out / name / "records.jsonl").is_file():
            rose("import-rose", vec / folder, "--labels", vec / "rose-vec-bird.json", "--out", out / name)
    cost = per_item(run / "records.jsonl")
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    local = manifest["judge"]["local"]
    print(f"## {manifest['judge']['model']} (sha256 {local['sha256'][:16]}..., {local['runtime']})")
    resumed = " (resumed: the earlier run's records and their seconds kept)" if again else ""
    print(f"{len(items)} items, rose run wall {wall:.0f} s{resumed} (exit {done.returncode}); {out}")
    print()
    print("| judge | items | unscored | kappa [95% CI] | accuracy [95% CI] | s/judged item | calls/item "
          "| prompt tok/item | completion tok/item |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    print(row(manifest["judge"]["model"], agreement(run, items_path), cost))
    print(row("o3 (ROSE authors)", agreement(out / "o3", items_path), None))
    print(row("EX (their decisive/EX)", agreement(out / "ex", items_path), None))


if __name__ == "__main__":
    main()
