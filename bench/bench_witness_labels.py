"""Witnesses against human labels: does a plausible witness doubt matches the experts accept?

Evaluates with ``rose run --evidence`` (no judge), on the three BIRD dev databases of the shared data:

- ROSE-VEC's BIRD items on superhero, student_club and toxicology (77; expert labels);
- NL2SQL-Bugs' (question, SQL) pairs on the same databases (535; gold from BIRD dev by question);
- with ``--minidev``, BIRD mini-dev's 19 systems on the same databases (no labels: the witness rate).

and prints, per data set, per database group (superhero + student_club, the items the grade was developed
on; toxicology, the check it was not tuned on) and per witness kind: matches the experts accept that get a
witness, and a *plausible* one (the only kind that doubts a match); matches they reject that get one; and
the Refuter calls the default matched-results policy (``evidence``) makes with the grade (plausible
witnesses, cheap doubts, gold smells) and without it (every witness). Every plausible witness on an
accepted match is listed with its reason, so each can be explained.

    .venv/bin/python bench/bench_witness_labels.py [--shared ../shared/data] [--workers 1] [--minidev]
        [--out DIR [--reuse]]
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
DBS = ("superhero", "student_club", "toxicology")
DEVELOPED_ON = ("superhero", "student_club")


def rose(files: list[Path], shared: Path, out: Path, workers: int, reuse: bool = False) -> float:
    if reuse and all((out / f.stem / "records.jsonl").exists() for f in files):
        return 0.0  # --reuse: the records of an earlier run in --out
    start = time.monotonic()
    cmd = [sys.executable, "-m", "rose_sql", "run", *map(str, files), "--db-root", str(shared / "bird")]
    cmd += ["--out", str(out), "--evidence", "--workers", str(workers), "--format", "sqlexam"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def rose_vec(shared: Path, tmp: Path) -> tuple[Path, dict[Any, bool]]:
    items = [x for x in json.loads((shared / "rose-vec" / "rose-vec-bird.json").read_text()) if x["db_id"] in DBS]
    path = tmp / "rose-vec.json"
    path.write_text(
        json.dumps(
            [
                {k: x[k] for k in ("question_id", "db_id", "question", "evidence", "predicted_sql", "gold_sql")}
                for x in items
            ]
        )
    )
    return path, {x["question_id"]: bool(x["label"]) for x in items}


def nl2sql_bugs(shared: Path, tmp: Path) -> tuple[Path, dict[Any, bool]]:
    dev = json.loads((shared / "bird" / "dev.json").read_text())
    gold = {(d["db_id"], d["question"].strip()): d for d in dev if d["db_id"] in DBS}
    bugs = json.loads((shared / "nl2sql-bugs" / "NL2SQL-Bugs-with-evidence.json").read_text())
    items = []
    for b in bugs:
        g = gold.get((b["db_id"], b["question"].strip()))
        if g is None:
            continue
        items.append(
            {
                "question_id": b["id"],
                "db_id": b["db_id"],
                "question": b["question"],
                "evidence": b["evidence"],
                "predicted_sql": b["sql"],
                "gold_sql": g["SQL"],
            }
        )
    path = tmp / "nl2sql-bugs.json"
    path.write_text(json.dumps(items))
    return path, {b["id"]: bool(b["label"]) for b in bugs if b["db_id"] in DBS}


def minidev(shared: Path, tmp: Path) -> list[Path]:
    out = []
    for f in sorted((shared / "preds" / "bird-minidev").glob("*.json")):
        items = [x for x in json.loads(f.read_text()) if x["db_id"] in DBS]
        path = tmp / "minidev" / f.name
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(items))
        out.append(path)
    return out


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def witness(r: dict[str, Any]) -> dict[str, Any] | None:
    ev = r.get("evidence") or {}
    w: dict[str, Any] | None = ev.get("witness")
    return w


def plausible(w: dict[str, Any] | None) -> bool:
    return w is not None and w.get("plausible", True) is not False  # ungraded (older runs) counts as doubt


def _rows(result: dict[str, Any]) -> tuple[int, list[str]]:
    rows = result.get("rows", result.get("preview")) or []
    return result.get("row_count", 0), sorted(json.dumps(x) for x in rows[:5])


def moved(r: dict[str, Any], w: dict[str, Any]) -> str:
    """Which result the witness changes (first rows and row count, against the real database's)."""
    gold = _rows(w["gold_result"]) != _rows(r.get("gold") or {})
    pred = _rows(w["pred_result"]) != _rows(r.get("pred") or {})
    if gold and not pred:
        return "explained: only the reference's result moves: the witness exposes the gold, not the prediction"
    if pred and not gold:
        return "explained: only the prediction's result moves: data the prediction would answer differently"
    return "explained: both results move, differently: the two readings of the question part on such data"


def refuter_calls(recs: list[dict[str, Any]], graded: bool) -> int:
    """Matched items the policy ``evidence`` sends to the Refuter: a cheap doubt, a gold smell or a witness
    (only a plausible one with the grade)."""
    n = 0
    for r in recs:
        if (r.get("comparison") or {}).get("equal") is not True:
            continue
        w = witness(r)
        doubts = r.get("doubts") or []
        smells = (r.get("evidence") or {}).get("gold_smells") or []
        n += bool(doubts or smells or (plausible(w) if graded else w is not None))
    return n


def ex_credited(r: dict[str, Any]) -> bool:
    """A match as BIRD's EX counts it (the same set of rows): the issue's matches."""
    return (r.get("readings") or {}).get("bird_ex") == 1


def group_of(db: str) -> str:
    return "dev:" + "+".join(DEVELOPED_ON) if db in DEVELOPED_ON else "check:" + db


def labelled(name: str, recs: list[dict[str, Any]], labels: dict[Any, bool]) -> list[dict[str, Any]]:
    """One table per group: accepted/rejected matches with a witness and a plausible one, per kind."""
    rows = []
    listing = []
    for group in sorted({group_of(r["db_id"]) for r in recs}):
        rs = [r for r in recs if group_of(r["db_id"]) == group]
        matched = [r for r in rs if ex_credited(r)]
        acc = [r for r in matched if labels.get(r["id"]) is True]
        rej = [r for r in matched if labels.get(r["id"]) is False]
        kinds: dict[str, Counter[str]] = {}
        for label, part in (("acc", acc), ("rej", rej)):
            for r in part:
                w = witness(r)
                if w is None:
                    continue
                c = kinds.setdefault(w["kind"], Counter())
                c[f"{label}_w"] += 1
                c[f"{label}_p"] += plausible(w)
                if label == "acc" and plausible(w):
                    listing.append((group, r, w))
        tot: Counter[str] = sum(kinds.values(), Counter())
        rows.append(
            {
                "set": name,
                "group": group,
                "items": len(rs),
                "matched": len(matched),
                "accepted": len(acc),
                "rejected": len(rej),
                "kinds": kinds,
                "total": tot,
                "equal": sum((r.get("comparison") or {}).get("equal") is True for r in rs),
                "calls_graded": refuter_calls(rs, True),
                "calls_ungraded": refuter_calls(rs, False),
            }
        )
    print(f"\n== {name}: matches the experts accept (acc) or reject (rej): witnesses (w) and plausible ones (p)")
    print(f"{'group':28} {'kind':14} {'acc':>5} {'acc w':>5} {'acc p':>5} {'rej':>5} {'rej w':>5} {'rej p':>5}")
    for row in rows:
        for kind, c in [*sorted(row["kinds"].items()), ("all", row["total"])]:
            print(
                f"{row['group']:28} {kind:14} {row['accepted'] if kind == 'all' else '':>5} {c['acc_w']:5} "
                f"{c['acc_p']:5} {row['rejected'] if kind == 'all' else '':>5} {c['rej_w']:5} {c['rej_p']:5}"
            )
        print(
            f"{row['group']:28} Refuter calls of policy 'evidence' on {row['equal']} results that match: "
            f"{row['calls_ungraded']} without the grade, {row['calls_graded']} with it"
        )
    if listing:
        print(f"-- {name}: each plausible witness on an accepted match, and why it is plausible")
        for group, r, w in listing:
            print(f"  [{group}] {r['db_id']} #{r['id']} {w['kind']}: {w['label']}\n      {w.get('plausibility')}")
            print(f"      {moved(r, w)}")
    rej_listing = [(r, witness(r)) for r in recs if labels.get(r["id"]) is False and ex_credited(r)]
    for r, w in rej_listing:
        grade = (
            "no witness"
            if w is None
            else f"{w['kind']} ({'plausible' if plausible(w) else 'implausible'}): "
            f"{w['label']}; {w.get('plausibility')}"
        )
        print(f"  rejected match {r['db_id']} #{r['id']}: {grade}")
    return rows


def unlabelled(files: list[Path], out: Path) -> None:
    print("\n== mini-dev, 19 systems: EX-credited (matched) predictions with a witness, by kind (plausible / all)")
    kinds: Counter[str] = Counter()
    pk: Counter[str] = Counter()
    matched = calls_g = calls_u = 0
    for f in files:
        recs = records(out / f.stem / "records.jsonl")
        m = [r for r in recs if (r.get("comparison") or {}).get("equal") is True]
        matched += len(m)
        calls_g += refuter_calls(m, True)
        calls_u += refuter_calls(m, False)
        for r in m:
            w = witness(r)
            if w is not None:
                kinds[w["kind"]] += 1
                pk[w["kind"]] += plausible(w)
    total, ptotal = sum(kinds.values()), sum(pk.values())
    print(
        f"matched {matched}; witness {total} ({100 * total / max(1, matched):.1f} %), plausible {ptotal} "
        f"({100 * ptotal / max(1, matched):.1f} %): " + ", ".join(f"{k} {pk[k]}/{v}" for k, v in kinds.most_common())
    )
    print(f"Refuter calls of policy 'evidence': {calls_u} without the grade, {calls_g} with it")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--minidev", action="store_true", help="also the 19 mini-dev systems (the slowest part)")
    ap.add_argument("--out", type=Path, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--reuse", action="store_true", help="analyse the records already in --out (no new run)")
    args = ap.parse_args()
    if not args.shared.is_dir():
        sys.exit(f"shared data not found at {args.shared}")
    tmp = args.out or Path(tempfile.mkdtemp(prefix="rose-bench-witness-"))
    tmp.mkdir(parents=True, exist_ok=True)
    sets = (("rose-vec", rose_vec(args.shared, tmp)), ("nl2sql-bugs", nl2sql_bugs(args.shared, tmp)))
    for name, (path, labels) in sets:
        secs = rose([path], args.shared, tmp / "runs", args.workers, args.reuse)
        print(f"\n{name}: rose run --evidence, {secs:.0f} s with {args.workers} worker(s)")
        labelled(name, records(tmp / "runs" / path.stem / "records.jsonl"), labels)
    if args.minidev:
        files = minidev(args.shared, tmp)
        secs = rose(files, args.shared, tmp / "minidev-runs", args.workers, args.reuse)
        print(f"\nmini-dev: rose run --evidence, {secs:.0f} s with {args.workers} worker(s)")
        unlabelled(files, tmp / "minidev-runs")


if __name__ == "__main__":
    main()
