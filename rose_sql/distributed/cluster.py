"""``rose run --ray``: a run's batches evaluated by Ray actors, its records written by the driver alone.

The driver (the ``rose run`` process) plans, writes and summarises exactly as a local run does
(:func:`rose_sql.run.runner.run` with this module's :class:`RayBackend`); only where a batch is evaluated
changes:

- **Evaluator actors**, one per CPU of the cluster by default (``--workers``), each run the
  :class:`rose_sql.run.runner.Evaluator` of a local run: the deterministic stages and the evidence search
  in one guarded worker process of its own (:class:`rose_sql.engines.workers.Pool`, so a statement that
  runs away is stopped and poisoned there as it is here), then the judge cascade.
- **Placement by database.** Batches hold one database's items (a question's items together); each
  database gets a home actor (the largest first, each to the actor with the least work), so an actor
  keeps its databases open and its execution cache warm. An actor whose own batches are done takes
  the last batch of the actor with the most left (work stealing), so one large database does not
  leave the other actors idle.
- **One actor owns the LLM client** (its on-disk cache, accounting, budget and concurrency limit),
  on the driver's node: every judge call of every actor goes through it, so ``--concurrency`` and
  ``--budget`` hold for the whole cluster as they do for one machine, and the cache is the driver's.
- **Records stream back** batch by batch as each finishes, already serialised; the driver appends them
  to ``records.jsonl`` and flushes, as a local run does after each batch. ``--resume``, the manifest
  and the summary are untouched.
- **A dead actor's batches are redone elsewhere.** A batch's records are written only when its actor
  returns them, and an actor that dies returns nothing: its batch goes to the next actor that asks
  (Ray restarts the dead actor once; one it cannot restart gets no more work), so no item is lost and
  none is recorded twice. An actor with nothing left to take waits while batches are in flight on
  others, so a batch that comes back is redone even when its own actor does not return. A batch whose
  actor dies a second time is recorded as lost (``internal_error``, retried by ``--resume``), as the
  local worker pool does.

What must be on every node: the same rose-sql (and Python) as the driver, and the databases under
the same ``--db-root`` path (each actor checks the fingerprint of every database it opens against the
driver's and stops the run if one differs or is missing where the driver has it).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from rose_sql.config import Config, JudgeConfig
from rose_sql.distributed import LOOPBACK, require_ray
from rose_sql.engines import Source
from rose_sql.engines.execute import Executor
from rose_sql.errors import BudgetExhausted, EndpointError, EndpointUnreachable, Lost, UsageError
from rose_sql.items.load import Item
from rose_sql.judges.keys import RunKey, run_key
from rose_sql.judges.llm import ChatReply, Ledger, Message, OpenAILLM, ReplySchema, Request
from rose_sql.provenance import DatabaseId
from rose_sql.run.evaluate import failed_record
from rose_sql.run.runner import BATCH, Evaluator, Flush, Stage1, Write, _batches, task_size
from rose_sql.summary import Brief
from rose_sql.verdicts import ReplyFormat

DEPTH = 2
"""Batches sent to an actor at once: the next one waits in its queue while the first runs."""
START_S = 180.0
"""Seconds the actors may take to start (a cluster without free CPUs never starts them)."""

Fingerprints = dict[str, tuple[bool, str | None]]
"""Each database the driver saw: whether it was found, and its fingerprint."""
Finished = tuple[str, str, Brief]
"""A finished record: its system's name, its JSON line, what the summary needs of it."""


@dataclass
class _Batch:
    entries: list[tuple[str, Item]]
    db_id: str
    deaths: int = 0


@dataclass
class Stats:
    """What happened on the cluster during a run."""

    actors: int = 0
    """Evaluator actors started."""
    deaths: int = 0
    """Batches whose actor died before returning them."""
    redone: int = 0
    """Batches sent again after their actor died."""
    lost: int = 0
    """Batches recorded as lost (their actor died twice)."""
    stolen: int = 0
    """Batches an actor took from another's databases."""


def batches_by_database(queue: list[tuple[str, Item]], config: Config) -> list[_Batch]:
    """Batches of one database each, a question's items together (:func:`rose_sql.run.runner._batches`), of
    :func:`~rose_sql.run.runner.task_size` items but at most :data:`~rose_sql.run.runner.BATCH` (an idle
    actor steals whole batches): single items when the run times them, as the published pool hands them."""
    size = min(task_size(config), BATCH)
    by_db: dict[str, list[tuple[str, Item]]] = {}
    for entry in queue:
        by_db.setdefault(entry[1].db_id, []).append(entry)
    return [_Batch(b, db) for db in sorted(by_db) for b in _batches(by_db[db], size)]


class Placement:
    """Which actor evaluates which batch: placed by database, stolen when idle, redone when lost.

    :meth:`next` hands a batch out and :meth:`finished` or :meth:`redo` takes it back; an actor with
    nothing to take waits while any batch is out, since a batch whose actor dies comes back.
    """

    def __init__(self, batches: Sequence[_Batch], actors: int, stats: Stats | None = None) -> None:
        self.queues: list[deque[_Batch]] = [deque() for _ in range(actors)]
        self.again: deque[_Batch] = deque()
        self.stats = stats or Stats()
        self.out = 0
        """Batches handed out and not yet finished or sent back."""
        self.changed = asyncio.Condition()  # a batch finished or came back
        by_db: dict[str, list[_Batch]] = {}
        for b in batches:
            by_db.setdefault(b.db_id, []).append(b)
        load = [0] * actors
        size = {db: sum(len(b.entries) for b in bs) for db, bs in by_db.items()}
        for db in sorted(by_db, key=lambda d: (-size[d], d)):  # largest first, to the least loaded
            home = min(range(actors), key=lambda i: (load[i], i))
            self.queues[home].extend(by_db[db])
            load[home] += size[db]

    def take(self, actor: int) -> _Batch | None:
        """The next batch for ``actor``: one to redo, else its own, else the last of the longest queue."""
        if self.again:
            return self.again.popleft()
        if self.queues[actor]:
            return self.queues[actor].popleft()
        victim = max(range(len(self.queues)), key=lambda i: (len(self.queues[i]), -i))
        if self.queues[victim]:
            self.stats.stolen += 1
            return self.queues[victim].pop()  # from the tail: the victim keeps the databases it works on
        return None

    async def next(self, actor: int) -> _Batch | None:
        """The next batch for ``actor`` (:meth:`take`), waiting while none is queued but some are out;
        None once every batch is done."""
        async with self.changed:
            while (batch := self.take(actor)) is None and self.out:
                await self.changed.wait()
            if batch is not None:
                self.out += 1
            return batch

    async def finished(self) -> None:
        """A batch handed out came back with its records (or was recorded as failed)."""
        async with self.changed:
            self.out -= 1
            self.changed.notify_all()

    async def redo(self, batch: _Batch) -> None:
        """Send a batch whose actor died to the next actor that asks."""
        async with self.changed:
            self.stats.redone += 1
            self.again.append(batch)
            self.out -= 1
            self.changed.notify_all()

    def left(self) -> int:
        """Items not handed out yet."""
        return sum(len(b.entries) for q in (self.again, *self.queues) for b in q)


# --------------------------------------------------------------------------- actors


class _RemoteLLM:
    """The judges' LLM in an evaluator actor: every call forwarded to the actor that owns the client.

    The owner answers with the reply, or with what went wrong, which is raised here as the judges
    expect it (:class:`BudgetExhausted` or :class:`EndpointError`). An :class:`LLM` that keeps no state of
    the live client's: the owner's ledger is the run's (this one counts nothing).
    """

    def __init__(self, cfg: JudgeConfig, owner: Any) -> None:  # no client here: it lives in the owner
        import ray

        self.cfg = cfg
        self.ledger = Ledger(budget_usd=cfg.budget_usd)
        self._owner = owner
        # the owner's run key: every actor, on any node, builds the very messages a local run builds
        self.key = RunKey(ray.get(owner.run_key.remote()))
        self._request = Request(cfg, "")  # what a failed call records; the owner decides

    def reply_format(self, schema: ReplySchema | None) -> ReplyFormat:
        """How the owner asks a call with this schema, as far as the configuration says."""
        return self._request.reply_format(schema)

    async def complete(
        self, messages: list[Message], *, fresh: bool = False, schema: ReplySchema | None = None, sample: int = 0
    ) -> ChatReply:
        from ray.exceptions import RayActorError

        try:
            answer = await self._owner.complete.remote(messages, fresh, schema, sample)
        except RayActorError:
            raise EndpointError("the Ray actor owning the LLM client died") from None
        if answer[0] == "ok":
            reply: ChatReply = answer[1]
            return reply
        if answer[0] == "budget":
            raise BudgetExhausted(answer[1])
        if answer[0] == "unreachable":
            raise EndpointUnreachable(answer[1])
        raise EndpointError(answer[1], answer[2])

    async def aclose(self) -> None:
        return None


class LLMOwner:
    """The Ray actor that owns the run's LLM client: its cache, ledger, budget and concurrency limit."""

    def __init__(self, judge: JudgeConfig) -> None:
        self.llm = OpenAILLM(judge)
        self._run_key = run_key(judge).secret

    async def complete(
        self, messages: list[Message], fresh: bool = False, schema: ReplySchema | None = None, sample: int = 0
    ) -> tuple[Any, ...]:
        try:
            return ("ok", await self.llm.complete(messages, fresh=fresh, schema=schema, sample=sample))
        except BudgetExhausted as e:
            return ("budget", str(e))
        except EndpointUnreachable as e:
            return ("unreachable", str(e))
        except EndpointError as e:
            return ("endpoint", str(e), e.raw)

    async def run_key(self) -> bytes:
        """The run key the judges' fences and nonces are derived from (kept with the driver's cache, or given)."""
        return self._run_key

    async def totals(self) -> tuple[int, int, float]:
        """Calls made, replies served from the cache, and their cost so far."""
        ledger = self.llm.ledger
        return ledger.calls, ledger.cached, ledger.cost_usd


class EvaluatorActor:
    """A Ray actor that evaluates batches as a local run does (:class:`rose_sql.run.runner.Evaluator`)."""

    def __init__(self, config: Config, cwd: str, owner: str | None, databases: Fingerprints) -> None:
        """``owner``: the name of the actor that owns the LLM client (a name, not a handle: Ray can restart an
        actor only when its constructor's arguments hold no reference)."""
        import ray

        if os.path.isdir(cwd):  # relative paths (--db-root) read as on the driver
            os.chdir(cwd)
        cells = max(1_000_000, config.cache_cells // max(1, os.cpu_count() or 1))
        self.config = config.with_(workers=1, cache_cells=cells)
        llm = None
        if config.judge is not None and owner is not None:
            llm = _RemoteLLM(config.judge, ray.get_actor(owner))
        key = llm.key if llm is not None else None
        self.evaluator = Evaluator(self.config, Stage1(self.config), llm, key)
        self.databases = databases
        self.checked: set[str] = set()

    async def ready(self) -> int:
        """This actor's process id (it has started)."""
        return os.getpid()

    async def evaluate(self, entries: list[tuple[str, Item]], db_root: Source) -> tuple[str, Any]:
        """``("ok", finished records)``, or ``("mismatch", why)`` when a database here differs from the driver's."""
        for db_id in {it.db_id for _, it in entries} - self.checked:
            why = self._check(db_root, db_id)
            if why is not None:
                return ("mismatch", why)
            self.checked.add(db_id)
        out: list[Finished] = []
        try:
            await self.evaluator.batch(entries, db_root, lambda name, line, brief: out.append((name, line, brief)))
        except EndpointUnreachable as e:  # the run stops: the driver says so
            return ("unreachable", str(e))
        return ("ok", out)

    def _check(self, db_root: Source, db_id: str) -> str | None:
        expected = self.databases.get(db_id)
        if expected is None:
            return None
        with Executor(self.config) as ex:
            here = DatabaseId.of(db_id, ex.fingerprint(db_root.locate(db_id)))
        if (here.found, here.fingerprint) == expected:
            return None
        import socket

        state = "is missing" if not here.found else "differs (another fingerprint)"
        return (
            f"database {db_id} {state} on Ray node {socket.gethostname()} at {here.path}: every node must hold "
            "the databases the driver has, at the same --db-root path"
        )


# --------------------------------------------------------------------------- the backend


class RayBackend:
    """Evaluates a run's batches on a Ray cluster (a :class:`rose_sql.run.runner.Backend`); see the module."""

    def __init__(
        self,
        config: Config,
        *,
        address: str | None = None,
        workers: int | None = None,
        databases: Sequence[DatabaseId] = (),
    ) -> None:
        ray = require_ray()
        self._config = config
        self.stats = Stats()
        self.actors: list[Any] = []
        self._owner: Any = None
        self._owner_name: str | None = None
        self._started = False
        if not ray.is_initialized():
            if address is None:  # a local instance: no dashboard (it starts faster)
                ray.init(include_dashboard=False, log_to_driver=False, logging_level="ERROR", _node_ip_address=LOOPBACK)
            else:
                ray.init(address=address, log_to_driver=False, logging_level="ERROR")
            self._started = True
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        n = workers or max(1, int(cpus))
        per_actor = min(1.0, cpus / n)
        self._ledger: Ledger | None = None
        if config.judge is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            j = config.judge
            judge = replace(j, api_key=j.api_key or os.environ.get("OPENAI_API_KEY"))
            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
            self._owner_name = f"rose-llm-{uuid.uuid4().hex}"
            owner = ray.remote(LLMOwner).options(
                name=self._owner_name, num_cpus=0, max_concurrency=1000, scheduling_strategy=here
            )
            self._owner = owner.remote(judge)
            self._ledger = Ledger(budget_usd=j.budget_usd)
        known = {d.db_id: (d.found, d.fingerprint) for d in databases}
        actor = ray.remote(EvaluatorActor).options(num_cpus=per_actor, max_restarts=1, max_task_retries=0)
        self.actors = [actor.remote(config, os.getcwd(), self._owner_name, known) for _ in range(n)]
        self.stats.actors = n
        try:
            self.pids: list[int] = ray.get([a.ready.remote() for a in self.actors], timeout=START_S)
        except ray.exceptions.GetTimeoutError:
            self.close(now=True)
            raise UsageError(
                f"Ray could not start {n} workers within {START_S:.0f} s (the cluster has {cpus:g} CPUs, some may "
                "be taken): pass fewer --workers"
            ) from None

    @property
    def ledger(self) -> Ledger | None:
        return self._ledger

    async def evaluate(self, queue: list[tuple[str, Item]], db_root: Source, write: Write, flush: Flush) -> None:
        if db_root.folder_path is None:  # the actors check and place databases by their files
            raise UsageError(f"--ray evaluates folders of SQLite files; {db_root} is a URL: use --shard on each node")
        placement = Placement(batches_by_database(queue, self._config), len(self.actors), self.stats)
        feeders = [a for a in range(len(self.actors)) for _ in range(DEPTH)]
        tasks = [asyncio.create_task(self._feed(a, placement, db_root, write, flush)) for a in feeders]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if placement.left():
            raise UsageError(
                f"every Ray worker died: {placement.left()} items were not evaluated (the records written are "
                "kept; --resume evaluates the rest)"
            )

    async def _feed(self, actor: int, placement: Placement, db_root: Source, write: Write, flush: Flush) -> None:
        """Keeps one batch at a time going to ``actor`` until no batch is left (:data:`DEPTH` of these per actor)."""
        from ray.exceptions import RayActorError, RayTaskError

        while (batch := await placement.next(actor)) is not None:
            try:
                tag, value = await self.actors[actor].evaluate.remote(batch.entries, db_root)
            except RayActorError:  # the actor died: nothing of this batch was written, so redo it
                self.stats.deaths += 1
                batch.deaths += 1
                if batch.deaths > 1:
                    self.stats.lost += 1
                    _fail(batch, Lost("the Ray worker evaluating it died, twice on the same work"), write, flush)
                    await placement.finished()
                else:
                    await placement.redo(batch)
                if not await self._restarted(actor):  # no more work for it: the others take its batches
                    return
                continue
            except RayTaskError as e:  # a bug of ours in the actor: its items say so, the run goes on
                _fail(batch, e.cause if isinstance(e.cause, Exception) else e, write, flush)
                await placement.finished()
                continue
            except BaseException:
                await placement.finished()
                raise
            await placement.finished()
            if tag == "mismatch":
                raise UsageError(value)
            if tag == "unreachable":
                raise EndpointUnreachable(value)
            for name, line, brief in value:
                write(name, line, brief)
            flush({name for name, _ in batch.entries})
            if self._owner is not None and self._ledger is not None:
                self._ledger.calls, self._ledger.cached, self._ledger.cost_usd = await self._owner.totals.remote()

    async def _restarted(self, actor: int) -> bool:
        """Whether ``actor`` answers again within :data:`START_S` after a death (Ray restarts it once); while
        it restarts, Ray may say it is unavailable, which is not yet an answer."""
        from ray.exceptions import ActorUnavailableError, RayActorError

        deadline = asyncio.get_running_loop().time() + START_S
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            try:
                await asyncio.wait_for(self.actors[actor].ready.remote(), left)
                return True
            except ActorUnavailableError:
                await asyncio.sleep(0.2)  # restarting: ask again (the deadline bounds the waits)
            except (RayActorError, TimeoutError):
                return False
        return False

    def close(self, *, now: bool = False) -> None:
        """Stop the actors (and the local Ray instance this backend started)."""
        import ray

        for a in [*self.actors, *([self._owner] if self._owner is not None else [])]:
            ray.kill(a, no_restart=True)
        if self._started:
            ray.shutdown()


def _fail(batch: _Batch, error: BaseException, write: Write, flush: Flush) -> None:
    for name, item in batch.entries:
        record = failed_record(item, error)
        write(name, record.to_json(), Brief.of(record))
    flush({name for name, _ in batch.entries})
