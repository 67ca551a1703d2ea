"""The judges of a run, as one object: opened from the judge configuration, asked item by item, closed.

:class:`Judges` holds every judge part a run has: its model (an :class:`~rose_sql.judges.llm.LLM`: the
live client unless the caller brings the Batch API's, inspect's or a Ray actor's forwarder), the panel
and the strong model to escalate to (:class:`~rose_sql.judges.votes.Votes`), the matched-results
policy, the schemas read once per database through the caller's executor, and the run key (kept with
the cache, or given) that keys the prompts' fences and every call's verdict nonce. The cache and the
budget live in the model (one ledger, shared by the panel). :meth:`Judges.judge` walks one item's
decision table; :meth:`Judges.close` closes what it opened. Evaluation, ``rose run`` (here, on a Ray
actor, with ``--batch``), the inspect scorer, the dry run and the review page all use it; nothing else
builds judge parts.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import TYPE_CHECKING

from rose_sql.config import JudgeConfig, MatchedRefuter
from rose_sql.decide import Facts, JudgeOutcome, Step, walk
from rose_sql.record import JudgeCall, Judged, StageVotes

if TYPE_CHECKING:  # loaded when the judges are opened: a judge-free run, which only records Judged, starts faster
    from rose_sql.engines import Database
    from rose_sql.engines.execute import Executor
    from rose_sql.judges.budget import Ledger, Message
    from rose_sql.judges.context import Case, Context, Schema
    from rose_sql.judges.keys import RunKey
    from rose_sql.judges.llm import LLM
    from rose_sql.judges.votes import Votes
    from rose_sql.verdicts import ProverReply, RefuterReply

__all__ = ["Judged", "Judges"]


class Judges:
    """A run's judges (see the module's text). ``llm``: the model to ask (default: the live client of
    ``cfg``); it is the judges' from now on, closed with them. ``key``: the run key, which keys the
    prompts' fence markers and every call's nonce (default: ``cfg``'s, :func:`~rose_sql.judges.keys.run_key`).
    ``connect``: the client of each other model a vote asks (the panel's, the strong one's; default: live
    clients sharing the model's ledger). ``asks``: False for the prompts alone (the dry run, the review
    page): no client is made and :meth:`judge` may not be called.

    Raises :class:`~rose_sql.errors.UsageError` for a budget on a model without a price, and for the
    aggregation rule ``strong-only`` (for replay only).
    """

    def __init__(
        self,
        cfg: JudgeConfig,
        catalogue: Executor,
        *,
        llm: LLM | None = None,
        key: RunKey | None = None,
        asks: bool = True,
        connect: Callable[[JudgeConfig], LLM] | None = None,
    ) -> None:
        from rose_sql.judges.context import Fences, Schemas
        from rose_sql.judges.keys import run_key
        from rose_sql.judges.votes import Votes

        self.cfg = cfg
        self.schemas = Schemas(catalogue)
        """The databases' schemas, read once each through ``catalogue``'s engines."""
        self.key = key or run_key(cfg, create=asks)
        """The run key: the fences' secret and every call's nonce are derived from it."""
        self.fences = Fences(self.key.derive("fence"))
        self.policy: MatchedRefuter = cfg.effective_matched_refuter
        """When the Refuter reads matched results."""
        self.llm: LLM | None = llm
        if asks and self.llm is None:
            from rose_sql.judges.llm import OpenAILLM

            self.llm = OpenAILLM(cfg)
        voting = asks and cfg.votes and self.llm is not None
        self.votes: Votes | None = Votes(cfg, self.llm, self.key, connect) if voting and self.llm is not None else None
        """The stages' votes (samples, panel, escalation), when configured."""

    def asking(self, llm: LLM) -> Judges:
        """These judges' schemas and run key with another model, configured as ``llm.cfg`` says, one reply a
        stage (the inspect scorer: each sample's grader). Closing it closes ``llm`` only."""
        twin = copy.copy(self)
        twin.cfg, twin.llm, twin.votes, twin.policy = llm.cfg, llm, None, llm.cfg.effective_matched_refuter
        return twin

    @property
    def ledger(self) -> Ledger | None:
        """The calls made and cached and their cost so far (None for the prompts alone)."""
        return self.llm.ledger if self.llm is not None else None

    def schema(self, db: Database) -> Schema:
        """The judges' view of a database (read on first use)."""
        return self.schemas.get(db)

    def context(self, case: Case, schema: Schema) -> Context:
        """An item's context, gathered once for every judge it meets."""
        from rose_sql.judges.context import gather

        return gather(case, schema, self.cfg, self.fences)

    def messages(self, step: Step, ctx: Context, passed: ProverReply | None = None) -> list[Message]:
        """The messages of a judge (``passed``: the Prover's pass, which the Refuter reads)."""
        from rose_sql.judges.ask import prover_messages, refuter_messages

        if step == "prover":
            return prover_messages(ctx)
        return refuter_messages(ctx, passed, self.fences, matched=step == "refuter_matched")

    async def judge(self, case: Case, facts: Facts) -> Judged:
        """Walk an item's decision table, asking each judge it calls for: the decision with the calls made.

        One reply decides each stage, or the stage votes (samples, a panel, the cheap-first policy) when
        configured. A judge's failure is data on the item (``invalid``, ``failed``, ``no_budget``);
        :class:`~rose_sql.errors.EndpointUnreachable` (no item can be judged) and the batch client's
        :class:`~rose_sql.errors.Pending` go through."""
        from rose_sql.errors import BudgetExhausted, JudgeFailed
        from rose_sql.judges.ask import ask
        from rose_sql.verdicts import ProverReply, RefuterReply

        llm = self.llm
        assert llm is not None, "Judges(asks=False) builds prompts only"
        calls: list[JudgeCall] = []
        tallies: list[StageVotes] = []
        passed: ProverReply | None = None  # the Prover's pass, which the Refuter reads
        ctx: Context | None = None

        async def answer(step: Step) -> ProverReply | RefuterReply | JudgeOutcome:
            nonlocal passed, ctx
            if ctx is None:
                ctx = self.context(case, await asyncio.to_thread(self.schema, case.db))
            msgs = self.messages(step, ctx, passed)
            kind = ProverReply if step == "prover" else RefuterReply
            reply: ProverReply | RefuterReply | JudgeOutcome
            if self.votes is not None:
                reply, made, tally = await self.votes.stage(step, msgs, kind, witness=case.witness)
                tallies.append(tally)
            else:
                try:
                    reply, made = await ask(llm, step, msgs, kind, key=self.key)  # type: ignore[type-var,assignment]
                except (JudgeFailed, BudgetExhausted) as e:
                    calls.extend(e.calls)
                    if isinstance(e, JudgeFailed):
                        return "invalid" if e.invalid else "failed"
                    return "no_budget"
            calls.extend(made)
            if isinstance(reply, ProverReply):
                passed = reply
            return reply

        steps = walk(facts)
        try:
            step = next(steps)
            while True:
                step = steps.send(await answer(step))
        except StopIteration as done:
            return Judged(done.value, calls, tallies or None)  # no stage asked: no tally, as in any run

    async def aclose(self) -> None:
        """Close the panel's clients and the model."""
        if self.votes is not None:
            await self.votes.aclose()
        if self.llm is not None:
            await self.llm.aclose()
