#!/usr/bin/env python3
"""Pin what the official test-suite script gives on the variant fixture of ``tests/ts_variants.py``.

Our own driver: it contains none of the official code. It imports ``exec_eval`` from a local checkout of
taoyds/test-suite-sql-eval (fetched, never committed) and calls ``exec_eval.eval_exec_match`` per item
with the arguments ``evaluation.py --etype exec`` passes (``plug_value=False``,
``progress_bar_for_each_datapoint=False``; ``keep_distinct`` False, its default, and True), the
prediction after ``evaluation.py``'s line handling (``strip()``, cut at the first tab, ``"value"`` ->
``"1"``), the gold stripped. Twice: on the fixture with its variant databases (``ts_ex``: the script
compares on every file of the db_id's folder whose name contains ``.sqlite``) and on the originals alone
(``one_db_ts_ex``: what our ``spider_ex`` reproduces). A call that raises (the script's assertion that
the gold runs on every database) is recorded as null with the error.

Usage (the interpreter needs sqlparse and tqdm, which ``exec_eval`` imports)::

    /work/official/venv-ts/bin/python bench/official_ts_variants.py \\
        --test-suite /work/official/test-suite-sql-eval --out tests/data/official/ts-variants.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import ts_variants  # noqa: E402  (the fixture, shared with the test)


def _official(test_suite: str) -> Any:
    sys.path.insert(0, os.path.abspath(test_suite))  # its parse.py must win over any PyPI "parse"
    import exec_eval

    return exec_eval


def _call(exec_eval: Any, root: Path, db_id: str, gold: str, pred: str, keep: bool) -> tuple[int | None, str | None]:
    db = str(root / db_id / f"{db_id}.sqlite")
    p = pred.strip().split("\t")[0].replace("value", "1")
    g = gold.strip()
    try:
        return int(exec_eval.eval_exec_match(db, p, g, False, keep, False)), None
    except Exception as e:  # the official run would abort here
        return None, f"{type(e).__name__}: {e}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--test-suite", required=True, help="checkout of taoyds/test-suite-sql-eval")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    exec_eval = _official(args.test_suite)
    commit = subprocess.run(
        ["git", "-C", args.test_suite, "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    items: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        full = ts_variants.build(Path(tmp) / "variants")
        alone = ts_variants.build(Path(tmp) / "originals", variants=False)
        for item_id, db_id, gold, pred in ts_variants.ITEMS:
            rec: dict[str, Any] = {}
            for root, prefix in ((full, ""), (alone, "one_db_")):
                for keep, name in ((False, "ts_ex"), (True, "ts_ex_keep_distinct")):
                    value, error = _call(exec_eval, root, db_id, gold, pred, keep)
                    rec[prefix + name] = value
                    if error:
                        rec[prefix + name + "_error"] = error
            items[str(item_id)] = rec
    out = {
        "source": "tests/ts_variants.py",
        "generated_by": "bench/official_ts_variants.py",
        "test_suite_commit": commit,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "items": items,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {len(items)} items")


if __name__ == "__main__":
    main()
