#!/usr/bin/env python3
"""Per-item expected Spider hardness and exact-set match (EM) of the *official* ``evaluation.py``.

Our own driver code, none of the official code: it imports ``process_sql`` and ``evaluation`` from a
local checkout of taoyds/test-suite-sql-eval (path on the command line) and, for every item, makes the
calls ``evaluation.py --etype match`` makes inside its ``evaluate()`` loop (re-expressed here because
they live inside that loop):

* ``schema = Schema(get_schema(<db_id>/<db_id>.sqlite))`` (the schema is read from the database file);
* ``g_sql = get_sql(schema, gold)`` and ``Evaluator().eval_hardness(g_sql)`` -> ``hardness``;
* ``p_sql = get_sql(schema, pred)`` where ``pred`` is the prediction after the script's line handling
  (``strip()``, cut at the first tab, ``"value"`` -> ``"1"``); any exception gives the script's empty
  sql dict (recorded here as ``pred_error``: the exception type and message);
* ``build_valid_col_units`` / ``rebuild_sql_val`` / ``rebuild_sql_col`` on both, with the foreign-key map
  ``build_foreign_key_map_from_json(tables.json)[db_id]``, then ``Evaluator().eval_exact_match`` ->
  ``em`` (0/1; ``null`` plus ``em_error`` if that call raised, which would abort the official run).

NLTK's ``punkt_tab`` model (which ``word_tokenize`` loads for sentence splitting) is on no reachable
registry: pass ``--nltk-data`` pointing at a folder with an *empty* ``tokenizers/punkt_tab/english/``
model (four empty files: ``collocations.tab sent_starters.txt abbrev_types.txt ortho_context.tab``).
The header records that stand-in.

Usage (see ``tests/data/official/README.md``)::

    python bench/official_em_expected.py --test-suite /work/official/test-suite-sql-eval \\
        --nltk-data /work/official/nltk_data --data ../shared/data --out tests/data/official
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from official_expected import _commit, spider_items, write_json

GENERATED_BY = "bench/official_em_expected.py"
LEVELS = ("easy", "medium", "hard", "extra")


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:120]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--test-suite", required=True, help="checkout of taoyds/test-suite-sql-eval")
    ap.add_argument("--test-suite-commit", help="commit of the checkout (else git or COMMIT file)")
    ap.add_argument("--nltk-data", required=True, help="NLTK data folder (with the punkt_tab stand-in)")
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--out", default="tests/data/official")
    ap.add_argument("--only", nargs="*", help="only these prediction file names")
    args = ap.parse_args(argv)

    os.environ["NLTK_DATA"] = os.path.abspath(args.nltk_data)
    sys.path.insert(0, os.path.abspath(args.test_suite))
    import evaluation  # the official modules
    import nltk
    import process_sql

    punkt = Path(args.nltk_data) / "tokenizers" / "punkt_tab" / "english"
    stand_in = {p.name: p.stat().st_size for p in sorted(punkt.iterdir())}
    data, out = Path(args.data), Path(args.out)
    commit = _commit(args.test_suite, args.test_suite_commit)
    kmaps = evaluation.build_foreign_key_map_from_json(str(data / "spider" / "tables.json"))
    env = {
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "nltk": nltk.__version__,
        "sqlparse": importlib.metadata.version("sqlparse"),
        "punkt_tab_english": f"empty stand-in {stand_in} (no reachable registry has the model)",
    }
    source = (
        f"taoyds/test-suite-sql-eval@{commit} process_sql.get_sql, evaluation.Evaluator.eval_hardness / "
        "eval_exact_match after rebuild_sql_val + rebuild_sql_col (kmaps from spider/tables.json), "
        "as evaluation.py --etype match calls them"
    )
    schemas: dict[str, Any] = {}
    for pred_file in sorted((data / "preds" / "spider").iterdir()):
        if args.only and pred_file.name not in args.only:
            continue
        t0 = time.monotonic()
        notes: dict[str, Any] = {}
        results: dict[str, dict[str, Any]] = {}
        for item in spider_items(data, pred_file, notes):
            db_id = Path(item.db).stem
            if item.db not in schemas:
                schemas[item.db] = process_sql.Schema(process_sql.get_schema(item.db))
            schema = schemas[item.db]
            g_sql = process_sql.get_sql(schema, item.ts_gold)
            res: dict[str, Any] = {"hardness": evaluation.Evaluator().eval_hardness(g_sql)}
            try:
                p_sql = process_sql.get_sql(schema, item.ts_pred)
            except Exception as exc:  # the official bare except
                res["pred_error"] = _short(exc)
                p_sql = {
                    "except": None,
                    "from": {"conds": [], "table_units": []},
                    "groupBy": [],
                    "having": [],
                    "intersect": None,
                    "limit": None,
                    "orderBy": [],
                    "select": [False, []],
                    "union": None,
                    "where": [],
                }
            kmap = kmaps[db_id]
            try:
                g_valid = evaluation.build_valid_col_units(g_sql["from"]["table_units"], schema)
                g_sql = evaluation.rebuild_sql_col(g_valid, evaluation.rebuild_sql_val(g_sql), kmap)
                p_valid = evaluation.build_valid_col_units(p_sql["from"]["table_units"], schema)
                p_sql = evaluation.rebuild_sql_col(p_valid, evaluation.rebuild_sql_val(p_sql), kmap)
                res["em"] = int(evaluation.Evaluator().eval_exact_match(p_sql, g_sql))
            except Exception as exc:
                res["em"] = None
                res["em_error"] = _short(exc)
            results[item.id] = res
        summary: dict[str, Any] = {"n": len(results), "pred_errors": sum("pred_error" in r for r in results.values())}
        for level in (*LEVELS, "all"):
            rs = [r for r in results.values() if level == "all" or r["hardness"] == level]
            ems = [r["em"] for r in rs if r["em"] is not None]
            summary[level] = {"count": len(rs), "em": round(sum(ems) / len(ems), 6) if ems else None}
        header = {
            "source": source,
            "generated_by": GENERATED_BY,
            "prediction_file": f"preds/spider/{pred_file.name}",
            "gold": "spider/dev_gold.sql (id = 0-based line number)",
            "environment": env,
            "notes": {"skipped_missing_db": notes["skipped_missing_db"]},
            "summary": summary,
        }
        write_json(out / "spider-match" / f"{pred_file.name}.json", header, results)
        print(f"{pred_file.name}: {json.dumps(summary)} ({time.monotonic() - t0:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
