#!/usr/bin/env python3
"""Cut BIRD mini-dev's official inputs to the items whose database is here, for the official scripts.

Our own code; it contains none of the official code. BIRD mini-dev's ``evaluation_ex.py``,
``evaluation_f1.py`` and ``evaluation_ves.py`` pair the prediction file's values with the gold file's
lines and the difficulty file's lines by position, and divide by every item they were given. Run on the
published files, items whose database is absent count 0 over 500. This script writes the three inputs
cut to the items of the given db_ids, in their published order, so that the official scripts, run
unchanged, give their figures over the same items ``rose run`` counts (``rose run`` leaves the others
out as ``db_missing``)::

    python bench/official_subset.py --data $D --dialect sqlite --out runs/official-subset \\
        --db-id superhero --db-id student_club --db-id toxicology
    cd runs/official-subset && $OFFICIAL/venv/bin/python $OFFICIAL/mini_dev/evaluation/evaluation_ex.py \\
        --db_root_path $D/bird/ --predicted_sql_path pred_gpt-4.json --ground_truth_path gold.sql \\
        --diff_json_path diff.jsonl --num_cpus 2 --meta_time_out 30.0 --sql_dialect SQLite \\
        --output_log_path ex_gpt-4.txt

Writes ``gold.sql`` (the lines of ``<data>/bird/mini_dev_<dialect>_gold.sql`` kept), ``diff.jsonl`` (the
matching questions of ``mini_dev_<dialect>.json``, which carry ``difficulty``) and, per official
baseline, ``pred_<model>.json`` (the kept values of
``<data>/preds/bird-minidev-official/predict_mini_dev_<model>_<dialect>.json``, keyed ``0..n-1``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MODELS = ("gpt-4", "gpt-35-turbo")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=Path("../shared/data"), type=Path)
    ap.add_argument("--dialect", default="sqlite", choices=("sqlite", "postgresql", "mysql"))
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--db-id", action="append", required=True, help="a db_id to keep (repeat)")
    args = ap.parse_args()

    keep = set(args.db_id)
    gold_path = args.data / "bird" / f"mini_dev_{args.dialect}_gold.sql"
    gold = gold_path.read_text(encoding="utf-8").splitlines()
    questions = json.loads((args.data / "bird" / f"mini_dev_{args.dialect}.json").read_text(encoding="utf-8"))
    if len(questions) != len(gold):
        print(f"{gold_path}: {len(gold)} lines, but {len(questions)} questions", file=sys.stderr)
        return 2
    kept = [i for i, line in enumerate(gold) if line.strip().split("\t")[-1] in keep]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gold.sql").write_text("".join(gold[i] + "\n" for i in kept), encoding="utf-8")
    (args.out / "diff.jsonl").write_text("".join(json.dumps(questions[i]) + "\n" for i in kept), encoding="utf-8")
    for model in MODELS:
        name = f"predict_mini_dev_{model}_{args.dialect}.json"
        values = list(json.loads((args.data / "preds" / "bird-minidev-official" / name).read_text("utf-8")).values())
        cut = {str(j): values[i] for j, i in enumerate(kept)}
        (args.out / f"pred_{model}.json").write_text(json.dumps(cut, indent=1), encoding="utf-8")
    print(f"{args.out}: {len(kept)} of {len(gold)} items ({', '.join(sorted(keep))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
