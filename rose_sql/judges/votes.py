"""Votes: several replies per judge stage, a panel of models, and the cheap-first policy.

A stage that votes asks each of its models ``samples`` times (seed = the configured seed + the sample's
index, so each sample is its own call and its own cache entry) and turns the valid replies into one
verdict with an aggregation rule. A vote *passes* the prediction when the Prover accepts it or the
Refuter upholds it. The rules (:data:`rose_sql.config.Aggregate`), over the counted votes:

- ``majority``: a pass needs a strict majority; **a tie fails the prediction** (a score of 1 needs more
  judges for it than against it, the conservative reading);
- ``unanimous``: the votes must agree; a split leaves the item unscored ``judges_split``;
- ``any-fail``: one failing vote fails the prediction;
- ``strong-only``: only the strong model's votes (a stage it never saw cannot be decided by this rule).

The counted votes are the strong model's when the stage escalated and it gave a valid vote, else the
first tier's (the judge model, or the panel). With ``--escalate-to``, the first tier is the cheap model
and the strong one is asked only where :func:`escalation` finds a reason: the cheap votes split or are
unsure (confidence below ``escalate_below``), they disagree with the deterministic evidence (they fail a
prediction whose result matched the gold's, or pass a match that a witness database separates), or
they flag GoldX or AmbQ. Every call stays on the record (``sample``, ``tier``), with the stage's tally
(:class:`rose_sql.record.StageVotes`), so ``rose replay --aggregate`` can re-decide under another rule.

The aggregation is pure (:func:`aggregate`, :func:`tally`); :class:`Votes` asks the models.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from rose_sql.config import Aggregate, JudgeConfig
from rose_sql.decide import JudgeOutcome, Step
from rose_sql.record import JudgeCall, StageVotes, Tier, Verdict
from rose_sql.verdicts import ProverReply, RefuterReply

if TYPE_CHECKING:
    from rose_sql.judges.keys import RunKey
    from rose_sql.judges.llm import LLM, Message

Reply = ProverReply | RefuterReply
Problem = Literal["failed", "invalid", "no_budget"]


@dataclass(frozen=True, slots=True)
class Vote:
    """One sample of one model at one stage: its valid reply, or how it failed."""

    model: str
    """The model asked."""
    sample: int
    """The sample's index (its seed is the configured seed plus it)."""
    tier: Tier
    """``first`` (the judge model or panel) or ``escalated`` (the strong model)."""
    reply: Reply | None
    """The valid reply (None: see ``problem``)."""
    problem: Problem | None = None
    """Why there is no reply."""

    @property
    def passes(self) -> bool:
        """Whether the vote passes the prediction (the Prover accepts, the Refuter upholds)."""
        return passes(self.reply) if self.reply is not None else False


def passes(reply: Reply) -> bool:
    """Whether a reply passes the prediction: the Prover accepts it, or the Refuter does not overturn."""
    return reply.answers_question if isinstance(reply, ProverReply) else not reply.overturn


def counted(votes: Sequence[Vote], rule: Aggregate) -> list[Vote] | None:
    """The valid votes a rule counts: the strong model's when it voted validly, else the first tier's.
    ``strong-only`` counts the strong model's alone; None when the strong model was never asked."""
    valid = [v for v in votes if v.reply is not None]
    strong = [v for v in valid if v.tier == "escalated"]
    if rule == "strong-only":
        return strong if any(v.tier == "escalated" for v in votes) else None
    return strong or [v for v in valid if v.tier == "first"]


def aggregate(votes: Sequence[Vote], rule: Aggregate) -> Verdict | None:
    """The verdict of valid votes under a rule (None without any). See the module's docstring."""
    if not votes:
        return None
    yes = sum(v.passes for v in votes)
    no = len(votes) - yes
    if rule == "unanimous":
        return "pass" if no == 0 else "fail" if yes == 0 else "split"
    if rule == "any-fail":
        return "fail" if no else "pass"
    return "pass" if yes > no else "fail"  # majority (and strong-only): a tie fails the prediction


def _own_verdict(votes: Sequence[Vote]) -> Verdict:
    yes = sum(v.passes for v in votes)
    return "pass" if 2 * yes > len(votes) else "fail" if 2 * yes < len(votes) else "split"


def tally(stage: Step, votes: Sequence[Vote], rule: Aggregate, escalation_reasons: Sequence[str] = ()) -> StageVotes:
    """The record of a stage's votes: what the rule counted, its verdict, and each model's verdict."""
    pool = counted(votes, rule) or []
    verdict = aggregate(pool, rule)
    yes = sum(v.passes for v in pool)
    agreement = round(max(yes, len(pool) - yes) / len(pool), 4) if pool else None
    said = [v.reply.confidence for v in pool if v.reply is not None and v.reply.confidence is not None]
    stated = round(sum(said) / len(said), 4) if said else None
    confidence = min(x for x in (agreement, stated) if x is not None) if pool else None
    by_model: dict[str, list[Vote]] = {}
    for v in votes:
        if v.reply is not None:
            by_model.setdefault(v.model, []).append(v)
    return StageVotes(
        stage="prover" if stage == "prover" else "refuter",
        rule=rule,
        verdict=verdict,
        votes=len(pool),
        passes=yes,
        invalid=sum(v.reply is None for v in votes),
        agreement=agreement,
        stated=stated,
        confidence=confidence,
        models={m: _own_verdict(vs) for m, vs in by_model.items()},
        escalated=any(v.tier == "escalated" for v in votes),
        escalation=list(escalation_reasons),
    )


def escalation(step: Step, first: Sequence[Vote], below: float, *, witness: bool) -> list[str]:
    """Why the cheap model's votes at a stage call for the strong model (empty: they stand).

    ``witness``: a witness database separates the prediction from the gold (the results matched)."""
    valid = [v for v in first if v.reply is not None]
    if not valid:
        return ["no valid vote from the first model"] if any(v.problem == "invalid" for v in first) else []
    t = tally(step, valid, "majority")
    why = []
    if t.agreement is not None and t.agreement < 1:
        why.append(f"its votes split ({t.passes} of {t.votes} pass)")
    if t.confidence is not None and t.confidence < below:
        why.append(f"unsure: confidence {t.confidence:g} < {below:g}")
    if step == "refuter_matched" and t.verdict == "fail":
        why.append("it fails a prediction whose result matched the gold's")
    if step == "refuter_matched" and t.verdict == "pass" and witness:
        why.append("it passes a match that a witness database separates from the gold")
    refuters = [v.reply for v in valid if isinstance(v.reply, RefuterReply)]
    if any(not r.gold_correct for r in refuters):
        why.append("it flags the gold as wrong (GoldX)")
    if any(r.ambiguity == "question" for r in refuters):
        why.append("it flags the question as ambiguous (AmbQ)")
    return why


def outcome(votes: Sequence[Vote], rule: Aggregate) -> Reply | JudgeOutcome | None:
    """What the decision table is told of a stage: a reply carrying the verdict (the first counted one
    that agrees with it), ``split``, or how the stage failed. None: the rule cannot be applied to these
    votes (``strong-only`` where the strong model was never asked)."""
    pool = counted(votes, rule)
    if pool is None:
        return None
    verdict = aggregate(pool, rule)
    if verdict == "split":
        return "split"
    for v in pool:
        if v.reply is not None and (verdict == "pass") == v.passes:
            return v.reply
    deciding = [v for v in votes if v.tier == "escalated"] if rule == "strong-only" else votes
    problems = {v.problem for v in deciding if v.problem is not None}
    if "no_budget" in problems:
        return "no_budget"
    return "invalid" if problems <= {"invalid"} else "failed"


def _stage_problem(votes: Sequence[Vote]) -> JudgeOutcome | None:
    """A stage whose endpoint failed, or whose budget ran out, on any sample is not decided on the rest:
    it is unscored (and ``--resume`` asks again, the samples that came back read from the cache)."""
    problems = {v.problem for v in votes}
    if "no_budget" in problems:
        return "no_budget"
    return "failed" if "failed" in problems else None


# --------------------------------------------------------------------------- asking


def _split(spec: str) -> tuple[str, str | None]:
    """A panel entry: ``MODEL`` or ``MODEL=URL`` (its own endpoint)."""
    model, _, url = spec.partition("=")
    return model.strip(), (url.strip() or None)


class Votes:
    """The models a voting stage asks, and how: the panel (or the judge model), the strong model to
    escalate to, the samples, the rule. Every client shares the run's ledger (one budget)."""

    def __init__(
        self, cfg: JudgeConfig, primary: LLM, key: RunKey, connect: Callable[[JudgeConfig], LLM] | None = None
    ) -> None:
        """``key``: the run key (each vote's call gets its own nonce); ``connect``: the client of another model
        of the panel, or of the strong one (default: a live client sharing ``primary``'s ledger)."""
        from rose_sql.errors import UsageError
        from rose_sql.judges.llm import OpenAILLM

        if cfg.aggregate == "strong-only":  # a stage the strong model never saw would have no verdict
            raise UsageError("the aggregation rule strong-only is for replay: a run decides with another rule")
        self.cfg = cfg
        self.primary = primary
        self.key = key
        temperature = cfg.samples_temperature if cfg.samples > 1 else cfg.temperature
        made: dict[tuple[str, str | None], LLM] = {}

        def client(spec: str) -> LLM:
            model, url = _split(spec)
            c = replace(cfg, model=model, base_url=url or cfg.base_url, temperature=temperature)
            if (model, c.base_url) not in made:
                same = c == primary.cfg
                other = connect(c) if connect is not None else OpenAILLM(c, ledger=primary.ledger)
                made[(model, c.base_url)] = primary if same else other
            return made[(model, c.base_url)]

        self.first = [client(m) for m in (cfg.panel or (cfg.model,))]
        self.strong = client(cfg.escalate_to) if cfg.escalate_to else None
        self._clients = [c for c in made.values() if c is not primary]

    async def stage(
        self, step: Step, messages: list[Message], kind: type[Reply], *, witness: bool
    ) -> tuple[Reply | JudgeOutcome, list[JudgeCall], StageVotes]:
        """Ask a stage's votes (escalating where the policy says), and aggregate them under the rule."""
        calls: list[JudgeCall] = []
        votes = await self._tier(self.first, "first", step, messages, kind, calls)
        why: list[str] = []
        if self.strong is not None and _stage_problem(votes) is None:
            why = escalation(step, votes, self.cfg.escalate_below, witness=witness)
            if why:
                votes += await self._tier([self.strong], "escalated", step, messages, kind, calls)
        record = tally(step, votes, self.cfg.aggregate, why)
        problem = _stage_problem(votes)
        answer = problem if problem is not None else outcome(votes, self.cfg.aggregate)
        return (answer if answer is not None else "failed"), calls, record

    async def _tier(
        self,
        models: Sequence[LLM],
        tier: Tier,
        step: Step,
        messages: list[Message],
        kind: type[Reply],
        calls: list[JudgeCall],
    ) -> list[Vote]:
        from rose_sql.errors import BudgetExhausted, JudgeFailed
        from rose_sql.judges.ask import ask

        async def one(llm: LLM, i: int) -> tuple[Vote, list[JudgeCall]]:
            try:
                reply, made = await ask(llm, step, messages, kind, key=self.key, sample=i)  # type: ignore[type-var]
            except JudgeFailed as e:
                problem: Problem = "invalid" if e.invalid else "failed"
                return Vote(llm.cfg.model, i, tier, None, problem), list(e.calls)
            except BudgetExhausted as e:
                return Vote(llm.cfg.model, i, tier, None, "no_budget"), list(e.calls)
            return Vote(llm.cfg.model, i, tier, reply), made

        done = await asyncio.gather(*(one(llm, i) for llm in models for i in range(self.cfg.samples)))
        for v, made in done:
            calls.extend(replace(c, sample=v.sample, tier=tier) for c in made)
        return [v for v, _ in done]

    async def aclose(self) -> None:
        """Close the clients this made (the primary one is its owner's to close)."""
        for c in self._clients:
            await c.aclose()
