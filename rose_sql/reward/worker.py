"""The reward inside one worker process: a chunk's extractions, executions, comparisons and syntax
scores, each computed once, with caches kept for the process's life.

Every query of the reward runs here, never in the trainer's or the server's process: a call SQLite
cannot interrupt is stopped only by stopping the process (:mod:`rose_sql.engines.workers`). A statement
stopped so, or by its wall clock, is run again alone with its guard doubled when its chunk is sent again
(:mod:`rose_sql.engines.alone`): confirmed, it is a runaway and gets the ``timeout`` reward; only a query
a deadline left unrun makes its item ``wall_guard``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from rose_sql.config import MAX_QUERY_THREADS, RewardConfig
from rose_sql.engines import Database
from rose_sql.engines.execute import Executor
from rose_sql.engines.workers import Watch, limit_memory
from rose_sql.results import Execution, ResultSet, Row
from rose_sql.reward import presets
from rose_sql.reward.clauses import ParsedSQL, parse
from rose_sql.reward.execution import RewardStatus, execution_outcome, gold_outcome
from rose_sql.reward.extract import extract_sql
from rose_sql.reward.lanes import run_in_lanes
from rose_sql.reward.syntax import UNPARSED, SyntaxScore, syntax_score
from rose_sql.reward.trees import Tree, tree_edit_distance

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Job = tuple[str, str, Database]
"""What a worker is sent for one distinct completion: (completion text, gold SQL, database)."""
Packed = tuple[list[tuple[str, int, int]], list[str], list[Database]]
"""A chunk's jobs as they are sent (:func:`pack`): (completion text, gold index, database index), the golds,
the databases."""
_Key = tuple[str | None, str, Database]
"""What a completion's outcome depends on: (extracted SQL, gold SQL, database)."""
_Compared = dict[tuple[Database, str, int, bool, tuple[Row, ...]], tuple[tuple[Row, ...], tuple[RewardStatus, str]]]
"""Execution outcomes of one chunk by (database, gold SQL, width, truncated, rows): see ``_compare``."""

LATE = "stopped at the deadline, before it finished"
"""Why a query has no result: its chunk's deadline passed before it finished (or started)."""
_NOT_RUN = Execution("guard", 0.0, error=LATE)
NOT_FOUND = "database not found"
"""The start of an invalid item's detail when its database does not exist (the adapters name such databases)."""
_NO_DATABASE = Execution("unreadable", 0.0, error=NOT_FOUND)
_NOTHING = Execution("ok", 0.0, ResultSet((), (), 0))
"""What Python's sqlite3 answers to an empty statement (a preset's recipe runs its text as it is)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a completion's reward is made of before the step's weights are applied."""

    status: RewardStatus
    """What decided the execution reward."""
    detail: str
    """The comparator's reason or the error."""
    sql: str | None
    """The SQL extracted from the completion."""
    structure: SyntaxScore
    """Its syntax score against the gold."""
    value: float | None = None
    """A preset's reward (:mod:`rose_sql.reward.presets`); unused by the default reward."""

    def __reduce__(self) -> tuple[type[Outcome], tuple[object, ...]]:
        # sent back from the worker by the thousand: as a plain tuple of fields (a slotted dataclass's
        # default pickling costs about six times as much)
        return Outcome, (self.status, self.detail, self.sql, self.structure, self.value)


class _LRU(Generic[K, V]):
    """A small thread-safe LRU map."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get_or(self, key: K, make: Callable[[], V]) -> V:
        """The value of ``key``, made by ``make()`` and kept when missing."""
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = make()  # computed outside the lock; a race computes twice, harmlessly
        with self._lock:
            self._data[key] = value
            while len(self._data) > self._size:
                self._data.popitem(last=False)
        return value


def _same_types(a: Sequence[Row], b: Sequence[Row]) -> bool:
    """Whether two results that are equal under ``==`` also hold values of the same types, cell by cell."""
    return a is b or all(type(x) is type(y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


class Worker:
    """A worker process's scorer: chunks of jobs in two phases, with caches across chunks.

    First every distinct gold, then every distinct (database, SQL) prediction, runs on the query
    threads: one thread takes them in turn and more join, up to ``workers``, only while queries are
    slow (:func:`~rose_sql.reward.lanes.run_in_lanes`); golds run on their own executor and both
    executors cache results across chunks. Then comparisons and syntax scores are computed in the
    calling thread, which keeps the Python-heavy work off the query threads. What is computed once:

    - each distinct (SQL, gold, database) of a chunk (identical completions score once);
    - each comparison of a gold with a distinct predicted result, within a chunk;
    - up to ``memo_size`` each: the parse of each distinct SQL (the gold's included), the syntax
      score of each (prediction, gold) pair, and the tree edit distance of each pair of clause trees.
    """

    def __init__(self, config: RewardConfig, watch: Watch | None = None) -> None:
        self.config = cfg = config
        self.pred = Executor(cfg.sandbox(gold=False), watch=watch)
        """The predictions' sandbox (its ``executed`` counts what really ran)."""
        self.gold = Executor(cfg.sandbox(gold=True), watch=watch)
        """The golds' sandbox."""
        # twice a chunk's lanes: a chunk that met its deadline leaves its running queries behind (until
        # their guard stops them), and the next chunk still finds threads. Each thread that runs a query
        # takes a slot of the worker's guard, and so may the main thread (a single query runs there).
        threads = min(MAX_QUERY_THREADS - 1, 2 * cfg.workers)
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix="rose-reward")
        self._trees: _LRU[str, ParsedSQL | None] = _LRU(cfg.memo_size)
        self._syntax_scores: _LRU[tuple[str, str], SyntaxScore] = _LRU(cfg.memo_size)
        self._distances: _LRU[tuple[Tree, Tree], int] = _LRU(cfg.memo_size)

    def score(self, jobs: Sequence[Job], deadline: float | None = None) -> list[Outcome]:
        """The outcomes of ``jobs``, in order. Past ``deadline`` (``time.monotonic()``) no query starts
        and this returns: the jobs whose queries did not finish are ``wall_guard``."""
        if self.config.preset != "rose":
            return self._score_preset(jobs, deadline)
        keys: list[_Key] = [(extract_sql(text), gold_sql, db) for text, gold_sql, db in jobs]
        unique = list(dict.fromkeys(keys))
        found = dict(zip(unique, self._score_keys(unique, deadline), strict=True))
        return [found[k] for k in keys]

    def close(self) -> None:
        """Stop the query threads and close every connection."""
        self._threads.shutdown(wait=True, cancel_futures=True)
        self.pred.close()
        self.gold.close()

    def _score_keys(self, keys: Sequence[_Key], deadline: float | None) -> list[Outcome]:
        golds = list(dict.fromkeys((db, gold_sql) for _, gold_sql, db in keys))
        gold_runs = dict(zip(golds, self._map(self._run_gold, golds, deadline), strict=True))
        wanted = []
        for sql, gold_sql, db in keys:
            if sql is not None and gold_runs[db, gold_sql].ok:
                wanted.append((db, sql))
        wanted = list(dict.fromkeys(wanted))
        pred_runs = dict(zip(wanted, self._map(self._run_pred, wanted, deadline), strict=True))
        compared: _Compared = {}
        return [self._outcome(k, gold_runs[k[2], k[1]], pred_runs.get((k[2], k[0] or "")), compared) for k in keys]

    def _score_preset(self, jobs: Sequence[Job], deadline: float | None) -> list[Outcome]:
        """A preset's rewards: each completion read as its recipe reads it, the queries it names run (each
        distinct one once), the recipe's number."""
        preset = self.config.preset
        reads = {text: presets.read(preset, text) for text in dict.fromkeys(text for text, _, _ in jobs)}
        gold_of = {g: presets.gold_query(preset, g) for g in dict.fromkeys(g for _, g, _ in jobs)}
        golds = list(dict.fromkeys((db, gold_of[g]) for _, g, db in jobs))
        gold_runs = dict(zip(golds, self._map(self._run_gold, golds, deadline), strict=True))
        wanted = []
        for text, g, db in jobs:
            sql = reads[text].sql
            if sql is not None and sql.strip() and gold_runs[db, gold_of[g]].ok:
                wanted.append((db, sql))
        wanted = list(dict.fromkeys(wanted))
        pred_runs = dict(zip(wanted, self._map(self._run_pred, wanted, deadline), strict=True))
        out = []
        for text, g, db in jobs:
            r, gold = reads[text], gold_runs[db, gold_of[g]]
            if gold is _NO_DATABASE:
                out.append(Outcome("invalid", f"{NOT_FOUND}: {db}", r.sql, UNPARSED))
                continue
            pred = None if r.sql is None else _NOTHING if not r.sql.strip() else pred_runs.get((db, r.sql))
            if pred is not None and pred.status == "unreadable":
                pred = self.gold.attribute(db, pred, gold_of[g])
            status, detail, v = presets.value(preset, r, pred, gold, g)
            out.append(Outcome(status, detail, r.sql, UNPARSED, v))
        return out

    def _map(
        self,
        fn: Callable[[tuple[Database, str]], Execution],
        keys: list[tuple[Database, str]],
        deadline: float | None,
    ) -> list[Execution]:
        """``fn`` over ``keys`` on the query threads; what the deadline left unfinished is not run."""
        cfg = self.config
        done = run_in_lanes(self._threads, fn, keys, cfg.workers, cfg.slow_query_s, deadline=deadline)
        return [_NOT_RUN if e is None else e for e in done]

    def _run_gold(self, key: tuple[Database, str]) -> Execution:
        db, gold_sql = key
        found = self.gold.exists(db)
        return self.gold.run(db, gold_sql, role="gold") if found else _NO_DATABASE

    def _run_pred(self, key: tuple[Database, str]) -> Execution:
        return self.pred.run(key[0], key[1], role="pred")

    def _outcome(self, key: _Key, gold: Execution, pred: Execution | None, compared: _Compared) -> Outcome:
        sql, gold_sql, db = key
        if gold is _NO_DATABASE:
            return Outcome("invalid", f"{NOT_FOUND}: {db}", sql, UNPARSED)
        failed = gold_outcome(gold)
        if failed is not None:
            return Outcome(*failed, sql, UNPARSED)
        if sql is None or pred is None:
            return Outcome("error", "no SQL found in the completion", None, UNPARSED)
        if pred.status == "unreadable":  # the database's only if the gold, run again, fails the same way
            pred = self.gold.attribute(db, pred, gold_sql)
        status, detail = self._compare(pred, gold, gold_sql, db, compared)
        return Outcome(status, detail, sql, self._syntax(sql, gold_sql) if self.config.syntax else UNPARSED)

    def _compare(
        self, pred: Execution, gold: Execution, gold_sql: str, db: Database, compared: _Compared
    ) -> tuple[RewardStatus, str]:
        """:func:`execution_outcome`, once per gold and distinct predicted result in a chunk.

        Wrong answers to one question often return the same rows; comparing canonicalises every
        cell of both results, so the first comparison is reused for the others. Rows are matched
        with Python's ``==`` and then cell by cell on type, so 1 and 1.0 never share an outcome.
        """
        res = pred.result
        if not pred.ok or res is None:
            return execution_outcome(pred, gold, gold_sql, self.config)
        key = (db, gold_sql, len(res.columns), res.truncated, res.rows)
        seen = compared.get(key)
        if seen is not None and _same_types(seen[0], res.rows):
            return seen[1]
        outcome = execution_outcome(pred, gold, gold_sql, self.config)
        if seen is None:
            compared[key] = (res.rows, outcome)
        return outcome

    def _syntax(self, sql: str, gold_sql: str) -> SyntaxScore:
        """The syntax score of a (prediction, gold) pair, each query parsed once per worker."""
        return self._syntax_scores.get_or((sql, gold_sql), lambda: self._syntax_of(sql, gold_sql))

    def _syntax_of(self, sql: str, gold_sql: str) -> SyntaxScore:
        pred = self._trees.get_or(sql, lambda: parse(sql, self.config))
        gold = self._trees.get_or(gold_sql, lambda: parse(gold_sql, self.config))
        return syntax_score(pred, gold, self.config, distance=self._tree_distance)

    def _tree_distance(self, a: Tree, b: Tree) -> int:
        return self._distances.get_or((a, b), lambda: tree_edit_distance(a, b))


def start_worker(config: RewardConfig, watch: Watch) -> Worker:
    """The scorer a worker process keeps for its whole life (its own caches), under its guard and its
    memory bound (the sandbox's ``worker_memory_bytes``, as every worker's)."""
    limit_memory(config.sandbox(gold=False).worker_memory_bytes)
    return Worker(config, watch)


def pack(jobs: Sequence[Job]) -> Packed:
    """A chunk's jobs as a worker is sent them: each distinct gold and database once, named by index in the
    jobs (a database pickled with every job cost ten times as much)."""
    golds: dict[str, int] = {}
    dbs: dict[Database, int] = {}
    rows = [(text, golds.setdefault(gold, len(golds)), dbs.setdefault(db, len(dbs))) for text, gold, db in jobs]
    return rows, list(golds), list(dbs)


def unpack(packed: Packed) -> list[Job]:
    """The jobs :func:`pack` packed, equal and in order."""
    rows, golds, dbs = packed
    return [(text, golds[g], dbs[d]) for text, g, d in rows]


def score_chunk(worker: Worker, chunk: tuple[Packed, float | None]) -> list[Outcome]:
    """Score a chunk of distinct jobs (packed, with its deadline) in a worker process."""
    packed, deadline = chunk
    jobs = unpack(packed)
    if deadline is not None and time.monotonic() >= deadline:
        return [Outcome("wall_guard", f"the query was {LATE}", None, UNPARSED) for _ in jobs]
    return worker.score(jobs, deadline)
