#!/usr/bin/env python3
"""BIRD mini-dev's official R-VES, item by item, from one process (no pool).

Our own code; it contains none of the official code. It imports ``evaluation/evaluation_ves.py`` from a
local checkout and calls its ``execute_model`` (100 timed iterations of the prediction and the gold,
``func_timeout`` of 30 s x 100) for one item after another, on the inputs ``bench/official_subset.py``
wrote, then prints the R-VES over them and writes each item's reward (by question_id) to
``<subset>/ves_items_<model>.json``, to be set beside a run's ``efficiency.time_ratio``. The official
script's own entry point runs the items from a pool of ``--num_cpus`` processes; this one runs them
alone::

    $OFFICIAL/venv/bin/python bench/official_ves_items.py --mini-dev $OFFICIAL/mini_dev \\
        --subset runs/official-subset --db-root $D/bird --model gpt-4
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SEPARATOR = "\t----- bird -----\t"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mini-dev", required=True, type=Path)
    ap.add_argument("--subset", required=True, type=Path, help="the folder bench/official_subset.py wrote")
    ap.add_argument("--db-root", required=True, type=Path, help="folder holding <db_id>/<db_id>.sqlite")
    ap.add_argument("--model", default="gpt-4")
    args = ap.parse_args()

    sys.path.insert(0, str(args.mini_dev.resolve() / "evaluation"))
    import evaluation_ves  # the official module

    gold = [line.strip().split("\t") for line in (args.subset / "gold.sql").read_text("utf-8").splitlines()]
    questions = [json.loads(line) for line in (args.subset / "diff.jsonl").read_text("utf-8").splitlines()]
    preds = json.loads((args.subset / f"pred_{args.model}.json").read_text("utf-8"))
    rewards: dict[str, float] = {}
    for i, value in enumerate(preds.values()):
        sql = value.split(SEPARATOR)[0] if isinstance(value, str) and SEPARATOR in value else " "
        gold_sql, db_id = gold[i]
        db = str(args.db_root / db_id / f"{db_id}.sqlite")
        rewards[str(questions[i]["question_id"])] = evaluation_ves.execute_model(
            sql, gold_sql, db, i, 100, 30.0, "SQLite"
        )["reward"]
    out = args.subset / f"ves_items_{args.model}.json"
    out.write_text(json.dumps(rewards, indent=1), encoding="utf-8")
    r_ves = 100 * sum(r**0.5 for r in rewards.values()) / max(1, len(rewards))
    print(f"{out}: R-VES {r_ves:.2f} over {len(rewards)} items")
    return 0


if __name__ == "__main__":
    sys.exit(main())
