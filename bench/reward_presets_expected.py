#!/usr/bin/env python3
"""The values the published text-to-SQL RL rewards give a fixed set of completions, for the reward presets'
tests (``tests/test_reward_presets.py``), computed by running the published code itself.

This script is our driver: it builds the completions, imports each published reward function from the
checkout given on the command line (never from this repository, which holds none of their code), calls
it as its training loop does, and writes ``tests/data/reward_presets_expected.json``. It needs the
published code's own dependencies (``func_timeout``, ``sqlparse``, ``loguru``, ``nl2sqlevaluator``, which
needs Python 3.12), so it runs in its own interpreter, not the project's::

    python3.12 -m venv VENV && VENV/bin/pip install nl2sqlevaluator==1.3.4 func_timeout sqlparse loguru
    VENV/bin/python bench/reward_presets_expected.py --shared ../shared/data \\
        --sql-r1 SQL_R1/verl/utils/reward_score \\
        --think2sql THINK2SQL/src \\
        --skyrl SKYRL/skyrl-gym/skyrl_gym/envs/sql/utils.py \\
        --verl-recipe MAIR_HUB/rl-tutorial/text2sql/text2sql_reward_func.py \\
        --commits sql-r1=SHA think2sql=SHA skyrl=SHA verl-recipe=SHA

What is called, per preset:

- ``sql-r1``: ``synsql.compute_score(solution_str, {"db_id", "sql"})`` (SQL-R1's verl reward), the
  completion after ``<|im_start|>assistant``, from a scratch folder where its fixed database path
  (``data/NL2SQL/SynSQL-2.5M/databases/<db_id>/<db_id>.sqlite``) links to the database;
- ``arctic``: Think2SQL's ``reward_arctic_sql`` (Arctic-Text2SQL-R1's training code is not published) with
  ``BirdEXEvaluator``, as Think2SQL's ``get_reward_funcs`` builds it;
- ``think2sql``: Think2SQL's ``nl2sql_reward`` with ``QATCHEvaluator`` and ``metric="cp_cr_tc"`` (its
  ``qatch_reward``); ``torch``, imported by Think2SQL for its GPU count only, is a stub answering 0 GPUs;
- ``skyrl-sql``: SkyRL-gym's ``compute_score_single(completion, gold, db_file)``;
- ``verl-text2sql``: verl's text-to-SQL recipe's ``compute_sql_score(completion, gold, db_file)``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import sys
import tempfile
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
REASON = "The question names the tables and the filter; I write one SELECT over them."
PRESETS = ("sql-r1", "arctic", "skyrl-sql", "verl-text2sql", "think2sql")


# --------------------------------------------------------------------------- the completions


def _formats(sql: str) -> list[str]:
    """The completion shapes the recipes ask for, and some they refuse."""
    return [
        f"<think>\n{REASON}\n</think>\n<answer>\n```sql\n{sql}\n```\n</answer>",  # SQL-R1 / Think2SQL
        f"<reasoning>\n{REASON}\n</reasoning>\n<answer>\n```sql\n{sql}\n```\n</answer>",  # Think2SQL's tags
        f"<think>\n{REASON}\n</think>\n<solution>\n{sql}\n</solution>",  # SkyRL-SQL
        f"<think>\n{REASON}\n</think>\n<answer>\n{sql}\n</answer>",  # verl's recipe
        f"```sql\n{sql}\n```",  # no tags at all
        f"<think>\n{REASON * 30}\n</think>\n<answer>\nThe query:\n```sql\n{sql}\n```\n</answer>",  # past 2,048
        f"<think>{REASON}</think><answer>```sql\n{sql}\n```</answer><answer>again</answer>",  # two answers
    ]


def _mutants(gold: str) -> list[str]:
    out = []
    if gold.upper().startswith("SELECT ") and not gold.upper().startswith("SELECT DISTINCT"):
        out.append("SELECT DISTINCT " + gold[7:])
    out.append(gold.replace("SELECT", "SELEC", 1))  # fails
    return out


def build_items(shared: Path) -> list[dict[str, str]]:
    """Spider dev questions (every 35th) and BIRD superhero ones (every 8th), each with the gold, two real
    systems' predictions and mutants, in rotating shapes; then hand-made edge cases."""
    items: list[dict[str, str]] = []
    spider = shared / "spider"
    golds = [line.rstrip("\n").split("\t") for line in (spider / "dev_gold.sql").read_text().splitlines()]
    preds_a = (shared / "preds" / "spider" / "c3sql.txt").read_text().splitlines()
    preds_b = (shared / "preds" / "spider" / "early-baseline.txt").read_text().splitlines()
    k = 0
    for i in range(0, len(golds), 35):
        gold, db_id = golds[i]
        db = f"spider/database/{db_id}/{db_id}.sqlite"
        if not (shared / db).is_file():
            continue
        for sql in [gold, preds_a[i], preds_b[i], *_mutants(gold)]:
            items.append({"db": db, "gold": gold, "completion": _formats(sql)[k % 7]})
            k += 1
    bird_a = json.loads((shared / "preds" / "bird-dev" / "chess-result.json").read_text())
    bird_b = json.loads((shared / "preds" / "bird-dev" / "c3-result.json").read_text())
    hero = [(a, b) for a, b in zip(bird_a, bird_b, strict=True) if a["db_id"] == "superhero"]
    for a, b in hero[::8]:
        db = "bird/superhero/superhero.sqlite"
        gold = a["gold_sql"]
        for sql in [gold, a["predicted_sql"], b["predicted_sql"], *_mutants(gold)]:
            items.append({"db": db, "gold": gold, "completion": _formats(sql)[k % 7]})
            k += 1
    singer = "spider/database/concert_singer/concert_singer.sqlite"
    ordered = "SELECT name, country, age FROM singer ORDER BY age DESC"
    edge = [
        (ordered, "SELECT name, country, age FROM singer ORDER BY age ASC"),  # order matters
        (ordered, "SELECT country, name, age FROM singer ORDER BY age DESC"),  # columns permuted
        (ordered, "SELECT age, name, country FROM singer ORDER BY age DESC;"),
        ("SELECT name FROM singer WHERE age >= 30", "SELECT name FROM singer WHERE age > = 30"),
        ("SELECT count(DISTINCT country) FROM singer", "SELECT count(country) FROM singer"),
        ("SELECT name FROM singer WHERE age > 1000", "SELECT country FROM singer WHERE age > 2000"),  # both empty
        ("SELECT name, country FROM singer", "SELECT name, country FROM singer WHERE age > 30"),  # a subset
        ("SELECT name, age FROM singer", "SELECT name, age, country FROM singer"),
        ("SELECT count(*) FROM singer", "SELECT count(*) FROM singer; SELECT 1"),  # two statements
        ("SELECT count(*) FROM singer", "SELECT count(*)\n  FROM   singer"),
    ]
    for gold, sql in edge:
        for shape in _formats(sql)[:4]:
            items.append({"db": singer, "gold": gold, "completion": shape})
    for text in [
        "<think>x</think><answer></answer>",
        "<think>x</think>\n<ANSWER>\nSELECT count(*) FROM singer\n</ANSWER>",
        "<think>x</think><solution>```sql\nSELECT count(*) FROM singer\n```</solution>",
        "<think>x</think></answer>SELECT count(*) FROM singer<answer>",
        "<think>x</think><answer><think>y</think>SELECT count(*) FROM singer</answer>",
        "nothing here",
    ]:
        items.append({"db": singer, "gold": "SELECT count(*) FROM singer", "completion": text})
    return items


# --------------------------------------------------------------------------- the published code


def _load(name: str, path: Path, package: bool = False) -> types.ModuleType:
    if package:
        spec = importlib.util.spec_from_file_location(
            name, path / "__init__.py", submodule_search_locations=[str(path)]
        )
    else:
        spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _quiet(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


def sql_r1_values(folder: Path, items: list[dict[str, str]], shared: Path, scratch: Path) -> list[float]:
    _load("published_sql_r1", folder, package=True)
    synsql = importlib.import_module("published_sql_r1.synsql")
    for it in items:
        db = shared / it["db"]
        link = scratch / "data" / "NL2SQL" / "SynSQL-2.5M" / "databases" / db.parent.name / db.name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(db.resolve())
    out = []
    with contextlib.chdir(scratch):
        for it in items:
            truth = {"db_id": Path(it["db"]).parent.name, "sql": it["gold"]}
            out.append(float(_quiet(synsql.compute_score, "<|im_start|>assistant\n" + it["completion"], truth)))
    return out


def think2sql_values(src: Path, items: list[dict[str, str]], shared: Path, scratch: Path) -> dict[str, list[float]]:
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(device_count=lambda: 0)  # type: ignore[attr-defined]
    sys.modules.setdefault("torch", torch)
    sys.path.insert(0, str(src))
    rewards = importlib.import_module("think2sql.grpo.rewards.rewards_answer_content")
    from NL2SQLEvaluator.evaluator_nodes import BirdEXEvaluator
    from NL2SQLEvaluator.evaluator_nodes.qatch_metrics import QATCHEvaluator

    out: dict[str, list[float]] = {"arctic": [0.0] * len(items), "think2sql": [0.0] * len(items)}
    roots: dict[Path, list[int]] = {}
    for i, it in enumerate(items):
        roots.setdefault((shared / it["db"]).parent.parent, []).append(i)
    (scratch / ".nl2sql_cache").mkdir(exist_ok=True)  # where Think2SQL keeps its result cache
    with contextlib.chdir(scratch):
        for root, index in roots.items():
            cols: dict[str, Any] = {
                "completions": [[{"role": "assistant", "content": items[i]["completion"]}] for i in index],
                "target_sql": [items[i]["gold"] for i in index],
                "db_id": [Path(items[i]["db"]).parent.name for i in index],
                "sql_execution_time": [30.0] * len(index),
                "relative_db_base_path": str(root),
            }
            arctic = rewards.reward_arctic_sql(evaluator=BirdEXEvaluator(), **cols)
            dense = rewards.nl2sql_reward(evaluator=QATCHEvaluator(), metric="cp_cr_tc", **cols)
            for i, a, d in zip(index, arctic, dense, strict=True):
                out["arctic"][i], out["think2sql"][i] = float(a), float(d)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    p.add_argument("--sql-r1", type=Path, required=True, help="SQL-R1's verl/utils/reward_score folder")
    p.add_argument("--think2sql", type=Path, required=True, help="Think2SQL's src folder")
    p.add_argument("--skyrl", type=Path, required=True, help="SkyRL's skyrl-gym/skyrl_gym/envs/sql/utils.py")
    p.add_argument("--verl-recipe", type=Path, required=True, help="the recipe's text2sql_reward_func.py")
    p.add_argument("--commits", nargs="*", default=[], help="NAME=SHA of each checkout, recorded in the output")
    p.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "reward_presets_expected.json")
    args = p.parse_args(argv)

    shared = args.shared.resolve()
    items = build_items(shared)
    skyrl = _load("published_skyrl_sql", args.skyrl.resolve())
    recipe = _load("published_verl_text2sql", args.verl_recipe.resolve())
    with tempfile.TemporaryDirectory(prefix="presets-expected-") as tmp:
        sql_r1 = sql_r1_values(args.sql_r1.resolve(), items, shared, Path(tmp))
        t2s = think2sql_values(args.think2sql.resolve(), items, shared, Path(tmp))
    for i, it in enumerate(items):
        db = str(shared / it["db"])
        it["expected"] = {  # type: ignore[assignment]
            "sql-r1": sql_r1[i],
            "arctic": t2s["arctic"][i],
            "skyrl-sql": float(_quiet(skyrl.compute_score_single, it["completion"], it["gold"], db)),
            "verl-text2sql": float(_quiet(recipe.compute_sql_score, it["completion"], it["gold"], db)),
            "think2sql": t2s["think2sql"][i],
        }
    commits = dict(c.split("=", 1) for c in args.commits)
    data = {
        "about": "values of the published rewards on these completions: bench/reward_presets_expected.py",
        "published": commits,
        "python": sys.version.split()[0],
        "items": items,
    }
    args.out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    counts = {name: sorted({it["expected"][name] for it in items})[:12] for name in PRESETS}  # type: ignore[index]
    print(f"{len(items)} completions written to {args.out}")
    for name, values in counts.items():
        print(f"  {name}: values {values}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
