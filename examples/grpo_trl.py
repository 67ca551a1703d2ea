"""GRPO with TRL on ROSE-SQL's reward: a causal LM learns to answer Spider questions in SQL.

The wiring is what a TRL user writes: a dataset with a ``prompt`` column (chat messages) and the
columns the reward reads (``gold_sql``, ``db_id``), ``trl_reward`` from ``rose_sql.reward`` as
``GRPOTrainer(reward_funcs=...)``, and a model loaded by transformers. Here the model is
SmolLM2-135M-Instruct read from a GGUF file (transformers dequantises it through the ``gguf``
package), so that two steps run on a CPU in a few minutes::

    pip install torch==2.13.0 && pip install -e '.[rl]'     # torch first: see docs/trl.md
    python examples/grpo_trl.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf --spider ../shared/data/spider

Options name everything the run depends on; ``--summary FILE`` writes what it did as JSON (the
steps, each step's mean reward, the last batch's completions with their rewards), which
``tests/test_trl_grpo.py`` reads. For a real run, raise ``--max-steps``, ``--questions`` and
``--max-completion-length`` and take a larger model (``--model`` for a Hugging Face folder).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

SYSTEM = "You translate questions into SQLite queries. Answer with one SQL query in a ```sql code block."
EXAMPLE = [  # one worked turn before the question: a small chat model imitates it far more than an instruction
    {"role": "user", "content": "Tables:\nbook(id, title, year)\n\nQuestion: How many books are from 1990?"},
    {"role": "assistant", "content": "```sql\nSELECT count(*) FROM book WHERE year = 1990\n```"},
]


def schema_text(tables: dict[str, Any]) -> str:
    """One line per table, ``name(column, ...)``, from a Spider ``tables.json`` entry."""
    columns: dict[int, list[str]] = {}
    for table, name in tables["column_names_original"]:
        if table >= 0:
            columns.setdefault(table, []).append(name)
    return "\n".join(f"{t}({', '.join(columns.get(i, []))})" for i, t in enumerate(tables["table_names_original"]))


def spider_questions(spider: Path, n: int) -> list[dict[str, Any]]:
    """The first question of each of the first ``n`` Spider dev databases present, as TRL rows: a chat
    ``prompt`` (the schema and the question) and the reward's columns ``gold_sql`` and ``db_id``."""
    dev = json.loads((spider / "dev.json").read_text())
    schemas = {t["db_id"]: t for t in json.loads((spider / "tables.json").read_text())}
    rows: list[dict[str, Any]] = []
    for q in dev:
        db_id = q["db_id"]
        if len(rows) == n:
            break
        if any(r["db_id"] == db_id for r in rows) or not (spider / "database" / db_id / f"{db_id}.sqlite").is_file():
            continue
        user = f"Tables:\n{schema_text(schemas[db_id])}\n\nQuestion: {q['question']}"
        prompt = [{"role": "system", "content": SYSTEM}, *EXAMPLE, {"role": "user", "content": user}]
        rows.append({"prompt": prompt, "gold_sql": q["query"], "db_id": db_id})
    if len(rows) < n:
        raise SystemExit(f"error: {spider} has {len(rows)} usable databases, fewer than --questions {n}")
    return rows


def load_model(args: argparse.Namespace) -> tuple[Any, Any]:
    """The causal LM and its tokenizer: from a GGUF file (``gguf_file``) dequantised to a plain float32
    model that can be trained, or from a folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not args.gguf:
        tokenizer = AutoTokenizer.from_pretrained(args.model)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype="float32")
    else:
        gguf = Path(args.gguf)
        if not gguf.is_file():
            raise SystemExit(f"error: --gguf {gguf} is not a file")
        kwargs: dict[str, Any] = {"gguf_file": gguf.name}
        try:  # transformers 5 can keep GGUF blocks packed (inference only): ask for dense weights
            from transformers import GgufConfig

            kwargs["quantization_config"] = GgufConfig(dequantize=True)
        except ImportError:  # transformers 4 always dequantises
            pass
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype="float32", **kwargs)
        quantizer = getattr(model, "hf_quantizer", None)
        if quantizer is not None:
            # The weights are dense float32 now; the quantizer's mark alone makes Trainer refuse to train.
            dense = all(p.is_floating_point() for p in model.parameters())
            if not dense:
                raise SystemExit(f"error: {gguf} loaded with packed weights, which cannot be trained")
            quantizer.remove_quantization_config(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    model = p.add_mutually_exclusive_group()
    model.add_argument("--gguf", default=os.environ.get("ROSE_TEST_GGUF"), help="a GGUF file (default $ROSE_TEST_GGUF)")
    model.add_argument("--model", help="a Hugging Face model folder instead of --gguf")
    p.add_argument("--spider", type=Path, default=Path("../shared/data/spider"), help="Spider: dev.json, database/")
    p.add_argument("--questions", type=int, default=6, help="how many questions (one per database)")
    p.add_argument("--max-steps", type=int, default=2)
    p.add_argument("--num-generations", type=int, default=2, help="completions per question (GRPO's group)")
    p.add_argument("--questions-per-step", type=int, default=1)
    p.add_argument("--max-completion-length", type=int, default=64)
    p.add_argument("--learning-rate", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (more than the free cores slows it down)")
    p.add_argument("--output-dir", type=Path, default=Path("grpo-trl-out"))
    p.add_argument("--summary", type=Path, help="write what the run did as JSON")
    args = p.parse_args(argv)
    if not args.gguf and not args.model:
        p.error("give --gguf FILE (or set $ROSE_TEST_GGUF) or --model DIR")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rose_sql.reward import RewardConfig, trl_reward

    torch.set_num_threads(args.threads)
    started = time.monotonic()
    rows = spider_questions(args.spider, args.questions)
    model, tokenizer = load_model(args)
    loaded = time.monotonic()
    # One worker process for the queries (the reward in one process beside the trainer); the schedule
    # moves from syntax-heavy to execution-heavy over this run's steps.
    reward = trl_reward(args.spider / "database", RewardConfig(processes=1, total_steps=args.max_steps))
    config = GRPOConfig(
        output_dir=str(args.output_dir),
        max_steps=args.max_steps,
        num_generations=args.num_generations,
        per_device_train_batch_size=args.num_generations * args.questions_per_step,
        max_completion_length=args.max_completion_length,
        learning_rate=args.learning_rate,
        seed=args.seed,
        use_cpu=True,
        gradient_checkpointing=False,  # a 135M model fits: recomputing activations only costs time
        bf16=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    trainer.train()
    trained = time.monotonic()
    logs = trainer._logs  # the last generation batch, as TRL keeps it for its completions table
    summary = {
        "global_step": trainer.state.global_step,
        "reward_name": reward.__name__,
        "steps": [h for h in trainer.state.log_history if "loss" in h],
        "last_batch": [
            {"prompt": p, "completion": c, "reward": r, "status": status}
            for p, c, r, status in zip(
                logs["prompt"],
                logs["completion"],
                logs["rewards"][reward.__name__],
                logs["extra"][f"{reward.__name__}_status"],  # the reward's log_extra column
                strict=True,
            )
        ],
        "advantages": list(logs["advantages"]),
        "rows": rows,
        "seconds": {"load": round(loaded - started, 1), "train": round(trained - loaded, 1)},
    }
    for h in summary["steps"]:
        print(f"step {h['step']}: mean {reward.__name__} {h.get(f'rewards/{reward.__name__}/mean')}, loss {h['loss']}")
    print(f"loaded in {summary['seconds']['load']} s, {args.max_steps} steps in {summary['seconds']['train']} s")
    if args.summary:
        args.summary.write_text(json.dumps(summary, indent=1, default=str))
    return summary


if __name__ == "__main__":  # the reward's worker processes import this module: keep the work under the guard
    main()
