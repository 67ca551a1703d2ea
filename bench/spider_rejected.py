#!/usr/bin/env python3
"""Which constructs make the official Spider parser reject the shared predictions (docs/spider-match.md).

Reads the official verdicts (``tests/data/official/spider-match``: an item with ``pred_error`` was
rejected, EM 0) and puts each rejected prediction in the first construct of :data:`CONSTRUCTS` that its
text shows (a heuristic on the text: the official error names only the token where parsing stopped).
Prints a Markdown table, per file and in all.

    python bench/spider_rejected.py --data ../shared/data
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

from rose_sql.items.load import load_items

EXPECTED = Path(__file__).resolve().parent.parent / "tests" / "data" / "official" / "spider-match"
_FUNCS = (
    "CASE|CAST|COALESCE|IFNULL|STRFTIME|SUBSTR|LENGTH|ROUND|ABS|UPPER|LOWER|JULIANDAY|IIF|INSTR|REPLACE|NULLIF|TRIM"
)
_CLAUSE = "AS|ON|WHERE|JOIN|GROUP|ORDER|LIMIT|UNION|INTERSECT|EXCEPT|HAVING"
CONSTRUCTS: list[tuple[str, re.Pattern[str]]] = [
    ("backtick-quoted identifier", re.compile(r"`")),
    (
        "LEFT / INNER / CROSS / NATURAL JOIN",
        re.compile(r"\b(LEFT|RIGHT|INNER|CROSS|NATURAL|FULL)\s+(OUTER\s+)?JOIN\b", re.I),
    ),
    ("`<>` (read as `<` then a value `>`)", re.compile(r"<>")),
    ("IS [NOT] NULL", re.compile(r"\bIS\s+(NOT\s+)?NULL\b", re.I)),
    ("SQL functions other than the five aggregates", re.compile(rf"\b({_FUNCS})\s*\(", re.I)),
    ("WITH (common table expression)", re.compile(r"^\s*WITH\b", re.I)),
    ("comma join (FROM a, b)", re.compile(r"\bFROM\s+\w+(\s+AS\s+\w+)?\s*,", re.I)),
    ("column alias (expr AS name)", re.compile(r"(\)|\w)\s+AS\s+\w+\s*(,|\bFROM\b)", re.I)),
    ("table alias without AS", re.compile(rf"\b(JOIN|FROM)\s+\w+\s+(?!(?:{_CLAUSE})\b)[A-Za-z_]\w*", re.I)),
    ("IN with a list of values: IN (1, 2)", re.compile(r"\bIN\s*\(\s*(['\"\d])", re.I)),
    ("double-quoted identifier", re.compile(r'"')),
]
OTHER = "other (a name the schema lacks, a sub-query as left operand, NOT before a condition, ...)"


def construct(sql: str) -> str:
    return next((name for name, rx in CONSTRUCTS if rx.search(sql)), OTHER)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="../shared/data")
    data = Path(ap.parse_args().data)
    total: Counter[str] = Counter()
    files: dict[str, Counter[str]] = {}
    for path in sorted(EXPECTED.glob("*.json")):
        want = json.loads(path.read_text())["items"]
        name = path.name.removesuffix(".json")
        loaded = load_items(data / "preds" / "spider" / name, data / "spider" / "dev_gold.sql")
        c: Counter[str] = Counter(
            construct(it.pred_sql or "") for it in loaded.items if "pred_error" in want.get(str(it.id), {})
        )
        files[name] = c
        total += c
    names = list(files)
    print("| construct | all | " + " | ".join(names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    for label in [n for n, _ in CONSTRUCTS] + [OTHER]:
        print(f"| {label} | {total[label]} | " + " | ".join(str(files[n][label]) for n in names) + " |")
    print(f"| **rejected** | {sum(total.values())} | " + " | ".join(str(sum(files[n].values())) for n in names) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
