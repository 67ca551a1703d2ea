#!/usr/bin/env python3
"""How often the pinned local judge writes its call's nonce into its verdict, with the reply's schema and without.

Every judge call ends with a nonce the judge must write inside its verdict object (the first field), and only
an object carrying it is read (``rose_sql.judges.keys``). With the schema sent (``--judge-structured on``),
llama.cpp's grammar pins the nonce as a one-value enum; without it (``off``, or an endpoint that ignores the
schema) the model must copy it. This measures both on real prompts: the Prover's messages of the first
``--limit`` ROSE-VEC BIRD items whose databases are here (their SQL executed and their context gathered as
``rose run`` does), each asked once with the schema and once without, of the GGUF served as ``--judge-gguf``
serves it (temperature 0, one slot, one thread), each reply at most ``--max-tokens``.

Each reply is put in one class: a valid verdict carrying the call's nonce (``valid``: the reader takes it), the
nonce written as a ``"nonce"`` field of an object that is cut at the cap or invalid (``written``), the nonce
copied elsewhere (``elsewhere``), a ``nonce`` field of another value (``wrong``), JSON without the nonce
(``missing``), or no JSON at all (``none``). The judge wrote its nonce in the first two.

Usage (a call takes 15-140 s of one core with SmolLM2, depending on the load):
    python bench/bench_local_nonce.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf --limit 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = ("superhero", "student_club", "toxicology")
_NONCE_FIELD = re.compile(r'"nonce"\s*:\s*"([^"]*)"')


CLASSES = ("valid", "written", "elsewhere", "wrong", "missing", "none")


def classify(text: str, nonce: str) -> str:
    """One of :data:`CLASSES` (see the module's text)."""
    from rose_sql.errors import ReplyError
    from rose_sql.judges.replies import parse_reply
    from rose_sql.verdicts import ProverReply

    try:
        parse_reply(ProverReply, text, nonce=nonce)
        return "valid"
    except ReplyError:
        pass
    fields = [m.group(1) for m in _NONCE_FIELD.finditer(text)]
    if nonce in fields:
        return "written"
    if nonce in text:
        return "elsewhere"
    if fields:
        return "wrong"
    return "missing" if "{" in text else "none"


async def ask(gguf: Path, limit: int, max_tokens: int, shared: Path) -> list[dict[str, Any]]:
    from rose_sql.config import Config, JudgeConfig
    from rose_sql.engines import Source
    from rose_sql.engines.execute import Executor
    from rose_sql.items.load import Item
    from rose_sql.judges.ask import sealed
    from rose_sql.judges.judges import Judges
    from rose_sql.judges.keys import RunKey
    from rose_sql.judges.llm import OpenAILLM
    from rose_sql.judges.local import local_model
    from rose_sql.judges.replies import reply_schema
    from rose_sql.run.evaluate import case_of, execute_item
    from rose_sql.verdicts import ProverReply

    labels = json.loads((shared / "rose-vec" / "rose-vec-bird.json").read_text(encoding="utf-8"))
    rows = [x for x in labels if x["db_id"] in HERE][:limit]
    items = [
        Item(r["question_id"], r["db_id"], r["predicted_sql"], r["gold_sql"], r["question"], r.get("evidence"))
        for r in rows
    ]
    local = local_model(gguf)
    base = JudgeConfig(model="smollm2", local=local, cache_dir=None, concurrency=1, max_tokens=max_tokens)
    key = RunKey.fresh()
    out = []
    with Executor(Config(workers=1)) as executor:
        judges = Judges(base, executor, key=key, asks=False)
        source = Source.folder(shared / "bird")
        prompts = []
        for it in items:
            ex = execute_item(it, source, executor)
            ctx = judges.context(case_of(ex), judges.schema(ex.db))
            prompts.append((it.id, judges.messages("prover", ctx)))
        for structured in ("on", "off"):
            llm = OpenAILLM(replace(base, structured=structured))  # type: ignore[arg-type]
            try:
                for item_id, messages in prompts:
                    nonce = key.nonce("prover", base.model, 0, 0, messages)
                    start = time.monotonic()
                    c = await llm.complete(sealed(messages, nonce), schema=reply_schema(ProverReply, nonce))
                    kind = classify(c.content, nonce)
                    seconds = time.monotonic() - start
                    out.append({"item": item_id, "schema": structured, "class": kind, "seconds": seconds,
                                "completion_tokens": c.completion_tokens, "reply": c.content[:200]})  # fmt: skip
                    print(f"{structured:3} item {item_id}: {kind} ({time.monotonic() - start:.0f} s)", file=sys.stderr)
            finally:
                await llm.aclose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--json", type=Path, help="Write every reply's class here too.")
    a = ap.parse_args()
    replies = asyncio.run(ask(a.gguf, a.limit, a.max_tokens, a.shared))
    for structured in ("on", "off"):
        mine = [r for r in replies if r["schema"] == structured]
        counts = {k: sum(r["class"] == k for r in mine) for k in CLASSES}
        wrote = counts["valid"] + counts["written"]
        print(f"schema {structured}: {wrote} of {len(mine)} replies carry the call's nonce ({counts})")
    if a.json:
        a.json.write_text(json.dumps(replies, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
