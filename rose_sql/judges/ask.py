"""One judge call: lay out the judge's messages, call the model, validate the reply (one re-ask).

What a judge sees is laid out here from the item's :class:`~rose_sql.judges.context.Context`, gathered
once per item; which judge runs when is decided by the walk
over the decision table (:func:`rose_sql.decide.walk`), which :mod:`rose_sql.run.evaluate` drives.

Each ask of a call (the first, then the re-ask) ends its last user message with the call's nonce
(:func:`sealed`, derived from the run key: :mod:`rose_sql.judges.keys`), at the very end so that the
providers' prefix caching keeps every block before it; the reply's schema pins it where it is sent, and
only a verdict object carrying it is read (:func:`rose_sql.judges.replies.parse_reply`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cache
from importlib import resources
from string import Template
from typing import Literal, TypeVar

from rose_sql.decide import Step
from rose_sql.errors import BudgetExhausted, EndpointError, JudgeFailed, ReplyError
from rose_sql.judges.context import Context, Fences
from rose_sql.judges.keys import NONCE_ASK, RunKey
from rose_sql.judges.llm import LLM, ChatReply, Message
from rose_sql.judges.replies import parse_reply, reply_schema
from rose_sql.record import JudgeCall as Call
from rose_sql.verdicts import ProverReply, RefuterReply, ReplyFormat

RecordStage = Literal["prover", "refuter"]
REASK_PROBLEM_CHARS = 300
"""Characters of a validation problem quoted back to the judge when re-asking (the problem may quote the
reply itself)."""
R = TypeVar("R", ProverReply, RefuterReply)
Reply = ProverReply | RefuterReply


def sealed(messages: Sequence[Message], nonce: str) -> list[Message]:
    """``messages`` with the call's nonce asked for at the end of the last one (a user message)."""
    *head, last = messages
    return [*head, {**last, "content": last["content"] + NONCE_ASK.format(nonce=nonce)}]


@cache
def prompt(name: str) -> str:
    """A system prompt from the package's ``prompts/`` folder with the shared criteria filled in."""
    folder = resources.files("rose_sql.judges").joinpath("prompts")
    criteria = folder.joinpath("criteria.md").read_text(encoding="utf-8")
    return Template(folder.joinpath(f"{name}.md").read_text(encoding="utf-8")).substitute(criteria=criteria)


def prompt_hashes() -> dict[str, str]:
    """sha256 of every system prompt, as recorded in summaries and judge cards."""
    return {n: hashlib.sha256(prompt(n).encode()).hexdigest()[:16] for n in ("prover", "refuter", "refuter_matched")}


def _question_blocks(ctx: Context) -> list[str]:
    return [ctx.schema, ctx.question, *([ctx.knowledge] if ctx.knowledge else [])]


def prover_messages(ctx: Context) -> list[Message]:
    """The Prover's messages: no gold anywhere."""
    blocks = _question_blocks(ctx)
    blocks.append("## Predicted SQL\n" + ctx.pred_sql)
    blocks.append("## Its result on the database\n" + ctx.pred_result)
    blocks.append("Judge the predicted SQL now. Reply with the JSON object only.")
    return [{"role": "system", "content": prompt("prover")}, {"role": "user", "content": "\n\n".join(blocks)}]


def refuter_messages(ctx: Context, prover: ProverReply | None, fence: Fences, *, matched: bool) -> list[Message]:
    """The Refuter's messages: the gold as counter-evidence, the Prover's reasoning when it ran (fenced
    with ``fence``, the markers of the item's other blocks)."""
    blocks = _question_blocks(ctx)
    blocks.append("## Predicted SQL\n" + ctx.pred_sql)
    blocks.append("## Reference SQL (noisy)\n" + ctx.gold_sql)
    if matched:
        blocks.append("## Results\n" + ctx.same_result)
    else:
        blocks.append("## Result of the predicted SQL\n" + ctx.pred_result)
        blocks.append("## Result of the reference SQL\n" + ctx.gold_result)
        if ctx.difference is not None:
            blocks.append(f"## How the results differ (computed by the evaluator)\n{ctx.difference}")
    if ctx.evidence:
        blocks.append("## Deterministic evidence (computed by the evaluator)\n" + ctx.evidence)
    if prover is not None:
        blocks.append(
            "## The Prover's judgement (it passed the prediction)\n" + fence("prover", prover.model_dump_json(indent=1))
        )
    blocks.append("Decide now whether to overturn. Reply with the JSON object only.")
    name = "refuter_matched" if matched else "refuter"
    return [{"role": "system", "content": prompt(name)}, {"role": "user", "content": "\n\n".join(blocks)}]


def _call(
    stage: RecordStage,
    llm: LLM,
    messages: list[Message],
    c: ChatReply | None,
    reply: Reply | None,
    error: str | None,
    raw: str = "",
    fmt: ReplyFormat = "text",
) -> Call:
    digest = hashlib.sha256(messages[0]["content"].encode()).hexdigest()[:16]
    return Call(
        stage=stage,
        model=llm.cfg.model,
        reply=reply,
        raw=c.content if c else raw,
        reasoning=c.reasoning if c else None,
        cached=c.cached if c else False,
        prompt_tokens=c.prompt_tokens if c else 0,
        completion_tokens=c.completion_tokens if c else 0,
        reasoning_tokens=c.reasoning_tokens if c else None,
        cost_usd=c.cost_usd if c else None,
        seconds=c.seconds if c else 0.0,
        prompt_sha256=digest,
        params=c.params if c else {},
        error=error,
        cached_tokens=c.cached_tokens if c else 0,
        reply_format=c.reply_format if c else fmt,
        batch_id=c.batch_id if c else None,
    )


async def ask(
    llm: LLM, stage: Step, messages: list[Message], kind: type[R], *, key: RunKey, sample: int = 0
) -> tuple[R, list[Call]]:
    """Call a judge and validate its reply; re-ask once (by default) when the reply is invalid.

    ``key``: the run key, from which each ask's nonce is derived (the stage, the model, the sample, the
    attempt and ``messages`` identify the call). ``sample``: which sample of the stage this is (its seed is
    the configured one plus it).

    With ``retry_invalid``, a cached reply that fails validation is asked again with a fresh call
    (which replaces it in the cache) before any re-ask. Raises :class:`JudgeFailed` (with the calls
    made, raw replies included) when no valid reply came (``invalid``) or the endpoint failed, and
    :class:`~rose_sql.errors.BudgetExhausted` (with the calls made) when the budget forbids a call.
    """
    record_stage: RecordStage = "refuter" if stage == "refuter_matched" else stage
    calls: list[Call] = []
    convo: list[Message] = list(messages)
    for attempt in range(1 + llm.cfg.reask):
        nonce = key.nonce(stage, llm.cfg.model, sample, attempt, messages)
        convo = sealed(convo, nonce)
        schema = reply_schema(kind, nonce)
        try:
            c = await llm.complete(convo, schema=schema, sample=sample)
            reply, problem = _validated(kind, c, nonce)
            if problem is not None and c.cached and llm.cfg.retry_invalid:
                c = await llm.complete(convo, fresh=True, schema=schema, sample=sample)
                reply, problem = _validated(kind, c, nonce)
        except BudgetExhausted as e:
            raise BudgetExhausted(str(e), calls) from None
        except EndpointError as e:
            fmt = llm.reply_format(schema)
            calls.append(_call(record_stage, llm, convo, None, None, str(e), raw=e.raw, fmt=fmt))
            raise JudgeFailed(f"the endpoint failed: {e}", calls) from None
        calls.append(_call(record_stage, llm, convo, c, reply, problem))
        if reply is not None:
            return reply, calls
        convo = reask_messages(convo, c.content, problem or "")
    last = calls[-1].error
    raise JudgeFailed(f"no valid {record_stage} reply after {1 + llm.cfg.reask} attempts: {last}", calls, invalid=True)


def reask_messages(convo: list[Message], reply: str, problem: str) -> list[Message]:
    """The conversation of a re-ask: what was asked, the invalid reply, and what was wrong with it."""
    return [
        *convo,
        {"role": "assistant", "content": reply},
        {
            "role": "user",
            "content": f"That reply could not be used: {problem[:REASK_PROBLEM_CHARS]}. Reply again with only "
            "the JSON object, with every field present and JSON true/false for the booleans.",
        },
    ]


def _validated(kind: type[R], c: ChatReply, nonce: str) -> tuple[R | None, str | None]:
    """The reply validated as ``kind``, or why it cannot be used: the verdict object that carries the call's
    ``nonce`` (the object itself where the schema was sent)."""
    structured = c.reply_format == "json_schema"
    try:
        return parse_reply(kind, c.content, c.reasoning, nonce=nonce, structured=structured), None
    except ReplyError as e:
        if c.finish_reason == "length":  # cut by the cap, not a malformed verdict: say so, with the cap
            cap = c.params.get("max_tokens", c.params.get("max_completion_tokens"))
            at = f" of {cap} tokens" if cap is not None else ""
            return None, f"the reply stopped at its token cap{at} (--judge-max-tokens; finish_reason length): {e}"
        return None, str(e)
