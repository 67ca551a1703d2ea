"""Evidence on real predictions: how many EX = 1 items get a witness, which gold smells fire, what it costs.

Runs ``rose run`` (no judge) over the shared Spider prediction files and the BIRD superhero items of
the shared BIRD dev prediction files, twice: with the evidence stage and without it, and prints per
file: items, EX = 1 items, witnesses found among them (by kind), gold smells, evidence seconds
(total, mean, max per item), items over the per-item budget, and the wall-time ratio of the two runs.

    python bench/bench_evidence.py [--shared ../shared/data] [--budget 2.0] [--only spider|bird]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def rose(args: list[str]) -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "rose_sql", "run", *args], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def bird_superhero(shared: Path, tmp: Path) -> list[Path]:
    out = []
    for f in sorted((shared / "preds" / "bird-dev").glob("*.json")):
        items = [x for x in json.loads(f.read_text()) if x["db_id"] == "superhero"]
        path = tmp / f.name
        path.write_text(json.dumps(items))
        out.append(path)
    return out


def summarize(records: Path, budget: float) -> dict[str, Any]:
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
        "over": sum(1 for s in secs if s > budget + 0.25),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--budget", type=float, default=2.0)
    ap.add_argument("--only", choices=["spider", "bird"])
    args = ap.parse_args()
    if not args.shared.is_dir():
        sys.exit(f"shared data not found at {args.shared}")
    tmp = Path(tempfile.mkdtemp(prefix="rose-bench-evidence-"))
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
    print(
        f"{'file':28} {'items':>5} {'EX=1':>5} {'match':>5} {'witn.':>5}  {'ev s':>6} {'mean':>5} {'max':>5} "
        f"{'over':>4}  kinds / smells"
    )
    totals: Counter[str] = Counter()
    walls = {"on": 0.0, "off": 0.0}
    for name, files, extra in groups:
        walls["on"] += rose(
            [
                *map(str, files),
                *extra,
                "--out",
                str(tmp / f"{name}-on"),
                "--evidence",
                "--evidence-budget",
                str(args.budget),
            ]
        )
        walls["off"] += rose([*map(str, files), *extra, "--out", str(tmp / f"{name}-off"), "--no-evidence"])
        for f in files:
            s = summarize(tmp / f"{name}-on" / f.stem / "records.jsonl", args.budget)
            for k in ("items", "ex1", "matched", "witness", "over"):
                totals[k] += s[k]
            totals["seconds_x1000"] += int(s["seconds"] * 1000)
            kinds = ",".join(f"{k}:{v}" for k, v in s["kinds"].most_common())
            smells = ",".join(f"{k}:{v}" for k, v in s["smells"].most_common())
            print(
                f"{name + '/' + f.stem:28.28} {s['items']:5} {s['ex1']:5} {s['matched']:5} {s['witness']:5}  "
                f"{s['seconds']:6.1f} {s['mean']:5.2f} {s['max']:5.2f} {s['over']:4}  {kinds} / {smells}"
            )
    share = 100 * totals["witness"] / max(1, totals["ex1"])
    print(
        f"\nall files: {totals['items']} items, {totals['ex1']} with EX = 1, {totals['witness']} of those with a "
        f"witness ({share:.1f} %); {totals['over']} items over the {args.budget:g} s budget; "
        f"evidence time {totals['seconds_x1000'] / 1000:.1f} s"
    )
    print(
        f"wall time: with evidence {walls['on']:.1f} s, without {walls['off']:.1f} s "
        f"(ratio {walls['on'] / max(walls['off'], 1e-9):.1f}x)"
    )


if __name__ == "__main__":
    main()
