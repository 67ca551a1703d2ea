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


def system_name(f: Path) -> str:
    """A mini-dev system's name: its file's stem without ``-result`` (``gpt-4o-result.json``: gpt-4o)."""
    return f.stem.removesuffix("-result")


def minidev(shared: Path, tmp: Path, systems: list[str] | None = None) -> list[Path]:
    """Mini-dev's own prediction files (``preds/bird-minidev``), cut to the items on :data:`DBS`; only the
    named systems with ``systems``."""
    out = []
    files = sorted((shared / "preds" / "bird-minidev").glob("*.json"))
    if systems:
        unknown = sorted(set(systems) - {system_name(f) for f in files})
        if unknown:
            sys.exit(f"unknown mini-dev system(s): {', '.join(unknown)}")
        files = [f for f in files if system_name(f) in systems]
    for f in files:
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


def cheap_doubts(r: dict[str, Any]) -> list[str]:
    """The record's cheap doubts (:mod:`rose_sql.evidence.doubts`). A run without a judge does not note them
    (``doubts`` is null): then they are found here as a run with a judge would, from the record."""
    if r.get("doubts") is not None:
        return list(r["doubts"])
    from rose_sql.evidence.doubts import EMPTY, OTHER_TABLES
    from rose_sql.sql import tables_read

    if (r.get("comparison") or {}).get("equal") is not True:
        return []
    out = []
    if (r.get("gold") or {}).get("row_count") == 0:
        out.append(EMPTY)
    if tables_read(r.get("pred_sql")) != tables_read(r.get("gold_sql")):
        out.append(OTHER_TABLES)
    return out


def refuter_calls(recs: list[dict[str, Any]], graded: bool | None) -> int:
    """Matched items the policy ``evidence`` sends to the Refuter: a cheap doubt, a gold smell or a witness
    (only a plausible one with the grade; none with ``graded=None``: the calls the grade cannot change)."""
    n = 0
    for r in recs:
        if (r.get("comparison") or {}).get("equal") is not True:
            continue
        w = witness(r)
        smells = (r.get("evidence") or {}).get("gold_smells") or []
        doubted = False if graded is None else plausible(w) if graded else w is not None
        n += bool(cheap_doubts(r) or smells or doubted)
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
    """Mini-dev (no labels): per group, the EX-credited predictions with a witness, by kind and grade
    (every witness: before the grade; plausible ones: after), and the Refuter calls of policy ``evidence``."""
    names = ", ".join(system_name(f) for f in files)
    print(f"\n== mini-dev, {len(files)} systems ({names}): EX-credited predictions with a witness")
    recs = {f: records(out / f.stem / "records.jsonl") for f in files}
    for group in sorted({group_of(r["db_id"]) for rs in recs.values() for r in rs}):
        kinds: Counter[str] = Counter()
        pk: Counter[str] = Counter()
        items = credited = 0
        calls_g = calls_u = calls_n = equal = 0
        per_system = []
        for f, rs in recs.items():
            rs = [r for r in rs if group_of(r["db_id"]) == group]
            m = [r for r in rs if ex_credited(r)]
            items += len(rs)
            credited += len(m)
            equal += sum((r.get("comparison") or {}).get("equal") is True for r in rs)
            g, u = refuter_calls(rs, True), refuter_calls(rs, False)
            calls_g += g
            calls_u += u
            calls_n += refuter_calls(rs, None)
            ws = [witness(r) for r in m]
            per_system.append(
                (system_name(f), len(rs), len(m), sum(w is not None for w in ws), sum(map(plausible, ws)), u, g)
            )
            for w in ws:
                if w is not None:
                    kinds[w["kind"]] += 1
                    pk[w["kind"]] += plausible(w)
        total, ptotal = sum(kinds.values()), sum(pk.values())
        print(
            f"{group}: {items} items, {credited} EX-credited; "
            f"witness {total} ({100 * total / max(1, credited):.1f} %), "
            f"plausible {ptotal} ({100 * ptotal / max(1, credited):.1f} %)"
        )
        print(
            "  by kind (every witness / plausible): " + ", ".join(f"{k} {v} / {pk[k]}" for k, v in kinds.most_common())
        )
        print(
            f"  Refuter calls of policy 'evidence' on {equal} results that match: "
            f"{calls_u} without the grade, {calls_g} with it ({calls_n} of them for a cheap doubt or a gold smell "
            "alone, which the grade does not touch)"
        )
        print(f"  {'system':16} {'items':>5} {'EX':>4} {'w':>4} {'p':>4} {'calls':>5} {'graded':>6}")
        for row in per_system:
            print(f"  {row[0]:16} " + " ".join(f"{x:>{w}}" for x, w in zip(row[1:], (5, 4, 4, 4, 5, 6), strict=True)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--minidev", action="store_true", help="also the 19 mini-dev systems (the slowest part)")
    ap.add_argument("--out", type=Path, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--reuse", action="store_true", help="analyse the records already in --out (no new run)")
    ap.add_argument(
        "--systems", help="with --minidev: only these systems, comma-separated (gpt-4o,chessv1...; default all 19)"
    )
    ap.add_argument("--minidev-only", action="store_true", help="with --minidev: skip ROSE-VEC and NL2SQL-Bugs")
    args = ap.parse_args()
    if not args.shared.is_dir():
        sys.exit(f"shared data not found at {args.shared}")
    tmp = args.out or Path(tempfile.mkdtemp(prefix="rose-bench-witness-"))
    tmp.mkdir(parents=True, exist_ok=True)
    sets = (("rose-vec", rose_vec(args.shared, tmp)), ("nl2sql-bugs", nl2sql_bugs(args.shared, tmp)))
    for name, (path, labels) in sets if not (args.minidev and args.minidev_only) else ():
        secs = rose([path], args.shared, tmp / "runs", args.workers, args.reuse)
        print(f"\n{name}: rose run --evidence, {secs:.0f} s with {args.workers} worker(s)")
        labelled(name, records(tmp / "runs" / path.stem / "records.jsonl"), labels)
    if args.minidev:
        systems = [x.strip() for x in args.systems.split(",") if x.strip()] if args.systems else None
        files = minidev(args.shared, tmp, systems)
        secs = rose(files, args.shared, tmp / "minidev-runs", args.workers, args.reuse)
        print(f"\nmini-dev: rose run --evidence, {secs:.0f} s with {args.workers} worker(s)")
        unlabelled(files, tmp / "minidev-runs")


if __name__ == "__main__":
    main()
