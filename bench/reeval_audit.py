"""The ROSE re-evaluation, audited: every command of docs/reeval.md, run in order, timed, with the load.

Not a test: it runs `rose run` on the 19 systems of BIRD mini-dev (the 140 items whose databases are in the
shared data, with the evidence search) and on ROSE-VEC's BIRD part (77 items), which takes minutes; the rest
is file reading. It writes everything under OUT and prints each command with its wall time and the load
average before it, then the figures the documentation quotes.

    python bench/reeval_audit.py --data ../shared/data --out reeval-audit [--workers 2] [--reuse]

``--reuse`` keeps the `rose run` folders found under OUT (the slow part) and redoes the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

PART = {"bird": "rose-vec-bird", "spider": "rose-vec-spider"}
POOLS = ("o3-class=o3-*,gemini-*", "open-32b=qwen3-30b-*,deepseek-r1-distill-*", "open=qwen3-*,deepseek-r1-*")


def sh(*args: str | Path, quiet: bool = False) -> str:
    """Run ``rose ARGS`` (this checkout's), print the command, its wall time and the load before it."""
    cmd = [sys.executable, "-m", "rose_sql", *map(str, args)]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"}, check=False)
    took = time.perf_counter() - start
    shown = "rose " + " ".join(shlex.quote(str(a)) for a in args)
    print(f"$ {shown}\n  {took:.1f} s, load average {load:.1f} before, exit {done.returncode}", flush=True)
    if done.returncode not in (0, 1):
        print(done.stdout[-3000:], done.stderr[-3000:])
        raise SystemExit(f"failed: {shown}")
    if not quiet:
        print(done.stdout)
    return done.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("../shared/data"))
    ap.add_argument("--out", type=Path, default=Path("reeval-audit"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reuse", action="store_true", help="keep the rose run folders found under OUT")
    a = ap.parse_args()
    d, out = a.data.resolve(), a.out.resolve()
    systems = sorted(p.name for p in (d / "rose-reeval").iterdir() if p.is_dir())
    preds = out / "preds"
    preds.mkdir(parents=True, exist_ok=True)
    for s in systems:  # rose run names each system after its file
        link = preds / f"{s}.json"
        if not link.exists():
            link.symlink_to(d / "preds" / "bird-minidev" / f"{s}-result.json")

    # 1-2: the paper's re-evaluation, imported and compared
    for s in systems:
        sh(
            "import-rose",
            d / "rose-reeval" / s / f"o3-{s}-eval",
            "--benchmark",
            d / "bird",
            "--predictions",
            preds / f"{s}.json",
            "--out",
            out / "reeval" / s,
            "--force",
            quiet=True,
        )
    sh("compare", out / "reeval", "--json", out / "own.json", quiet=True)
    sh("compare", out / "reeval", "--common", "--json", out / "common.json")
    sh(
        "report",
        out / "reeval",
        "--systems",
        Path(__file__).parents[1] / "examples" / "reeval-systems.csv",
        "--group-by",
        "type",
        "--out",
        out / "reeval.html",
        quiet=True,
    )

    # 3: our readings beside theirs
    if not (a.reuse and (out / "ours").is_dir()):
        sh(
            "run",
            *(preds / f"{s}.json" for s in systems),
            "--gold",
            d / "bird" / "mini_dev_sqlite.json",
            "--db-root",
            d / "bird",
            "--out",
            out / "ours",
            "--evidence",
            "--workers",
            str(a.workers),
            quiet=True,
        )
    sh("join", out / "ours", out / "reeval", "--json", out / "join.json")

    # 4: every judge, carded
    rv = d / "rose-vec"
    for part, name in PART.items():
        for folder in sorted((rv / "reference_outputs" / name).glob("*/*")):
            run = out / "rv" / part / f"{folder.parent.name}-{folder.name}"
            sh("import-rose", folder, "--labels", rv / f"{name}.json", "--out", run, "--force", quiet=True)
            if folder.parent.name != "decisive" and "thread" not in folder.name:
                sh(
                    "judge-card",
                    run,
                    "--labels",
                    rv / f"{name}.json",
                    "--validation-set",
                    f"ROSE-VEC {part}",
                    "--date",
                    "2025-06",
                    "--out",
                    out / "cards" / part / f"{run.name}.json",
                    quiet=True,
                )
    o3 = [out / "rv" / "bird" / f"o3-{m}" for m in ("ROSE", "ROSE-thread-4", "ROSE-thread-8")]
    sh(
        "judge-card",
        *o3,
        "--labels",
        rv / "rose-vec-bird.json",
        "--validation-set",
        "ROSE-VEC bird",
        "--date",
        "2025-06",
        "--out",
        out / "cards" / "o3-three-runs.json",
    )

    # 5: panels, and the choice made honestly
    sh("panel", *o3, "--out", out / "panels" / "o3-majority")
    sh(
        "judge-card",
        out / "panels" / "o3-majority",
        "--labels",
        rv / "rose-vec-bird.json",
        "--validation-set",
        "ROSE-VEC bird",
        "--date",
        "2025-06",
        "--out",
        out / "cards" / "o3-majority.json",
    )
    sh("judge-compare", out / "cards" / "o3-three-runs.json", out / "cards" / "o3-majority.json")
    opens = [out / "rv" / "bird" / f"{j}-ROSE" for j in ("qwen3-235b", "qwen3-30b", "deepseek-r1")]
    sh("panel", *opens, "--out", out / "panels" / "open-majority")
    if not (a.reuse and (out / "rvours").is_dir()):
        sh(
            "run",
            rv / "rose-vec-bird.json",
            "--db-root",
            d / "bird",
            "--out",
            out / "rvours",
            "--evidence",
            "--workers",
            str(a.workers),
            quiet=True,
        )
    judged = [p for p in sorted((out / "rv" / "bird").iterdir()) if not p.name.startswith("decisive")]
    theirs = out / "rv-judges" / "bird"
    theirs.mkdir(parents=True, exist_ok=True)
    for p in judged:
        link = theirs / p.name
        if not link.exists():
            link.symlink_to(p)
    sh("join", out / "rvours", theirs, "--out", out / "rvjoined" / "bird", "--json", out / "rvjoin.json", quiet=True)
    spider = out / "rv-judges" / "spider"
    spider.mkdir(parents=True, exist_ok=True)
    for p in sorted((out / "rv" / "spider").iterdir()):
        if not p.name.startswith("decisive") and not (spider / p.name).exists():
            (spider / p.name).symlink_to(p)
    pools = [x for pool in POOLS for x in ("--pool", pool)]
    sh(
        "select",
        out / "rvjoined" / "bird",
        spider,
        "--labels",
        rv / "rose-vec-bird.json",
        rv / "rose-vec-spider.json",
        *pools,
        "--json",
        out / "select.json",
    )
    figures = {
        "common_items": json.loads((out / "common.json").read_text())["common_items"],
        "join": [
            (j["system"], j["joined"], len(j["disagreements"])) for j in json.loads((out / "join.json").read_text())
        ],
    }
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
