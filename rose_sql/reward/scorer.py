"""Batches: every distinct gold and prediction executed once, then the comparisons and syntax
scores, each computed once; optionally spread over worker processes."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Generic, TypeVar, cast

from rose_sql.config import Config, RewardConfig, steps_for
from rose_sql.errors import Lost
from rose_sql.execute import Execution, Executor, Row
from rose_sql.reward.clauses import ParsedSQL, parse
from rose_sql.reward.execution import RewardStatus, execution_outcome, status_text
from rose_sql.reward.extract import Completion, extract_sql
from rose_sql.reward.lanes import CHUNKS_PER_PROCESS, balanced, run_in_lanes
from rose_sql.reward.schedule import Reward, finish
from rose_sql.reward.syntax import UNPARSED, SyntaxScore, syntax_score
from rose_sql.reward.trees import Tree, tree_edit_distance
from rose_sql.workers import Pool, Watch


@dataclass(frozen=True, slots=True)
class RewardItem:
    """One completion to score against one gold query on one database."""

    completion: Completion
    """The model's output."""
    gold_sql: str
    """The reference SQL."""
    db: Path
    """The SQLite database file."""
    prompt: str | None = None
    """When given and ``completion`` is text that starts with it, the prompt is cut off first."""


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
R = TypeVar("R")


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


_Key = tuple[str | None, str, Path]
"""What a completion's outcome depends on: (extracted SQL, gold SQL, database)."""
_Compared = dict[tuple[Path, str, int, bool, tuple[Row, ...]], tuple[tuple[Row, ...], tuple[RewardStatus, str]]]
"""Execution outcomes of one batch by (database, gold SQL, width, truncated, rows): see ``_compare``."""


def _same_types(a: Sequence[Row], b: Sequence[Row]) -> bool:
    """Whether two results that are equal under ``==`` also hold values of the same types, cell by cell."""
    return a is b or all(type(x) is type(y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


class RewardScorer:
    """Scores completions against gold queries: concurrently, computing everything once.

    A batch is scored in two phases. First every distinct gold, then every distinct (database, SQL)
    prediction, runs on the query threads: one thread takes them in turn and more join, up to
    ``workers``, only while queries are slow (:func:`~rose_sql.reward.lanes.run_in_lanes`); golds
    run on their own executor (``gold_timeout_s``) and both executors cache results across batches.
    Then comparisons and syntax scores are computed in the calling thread, which keeps the
    Python-heavy work off the query threads. What is computed once:

    - each distinct (SQL, gold, database) of a batch (identical completions score once);
    - each comparison of a gold with a distinct predicted result, within a batch;
    - across batches, up to ``memo_size`` each: the parse of each distinct SQL (the gold's
      included), the syntax score of each (prediction, gold) pair, and the tree edit distance of
      each pair of clause trees.

    With ``processes`` > 0 a batch's distinct completions go to that many worker processes in
    balanced chunks, a question's completions together; each worker runs this same two-phase
    scorer with its own caches, so all cores do Python work too. Thread-safe. Use as a context
    manager or call :meth:`close`.
    """

    def __init__(self, config: RewardConfig | None = None, *, watch: Watch | None = None) -> None:
        self.config = cfg = config or RewardConfig()
        self._pred = Executor(self._executor_config(cfg.timeout_s), watch=watch)
        self._gold = Executor(self._executor_config(cfg.gold_timeout_s), watch=watch)
        self._threads = ThreadPoolExecutor(cfg.workers, thread_name_prefix="rose-reward")
        self._trees: _LRU[str, ParsedSQL | None] = _LRU(cfg.memo_size)
        self._syntax_scores: _LRU[tuple[str, str], SyntaxScore] = _LRU(cfg.memo_size)
        self._distances: _LRU[tuple[Tree, Tree], int] = _LRU(cfg.memo_size)
        self._processes: Pool[RewardScorer] | None = None
        self._lock = threading.Lock()

    def _executor_config(self, timeout_s: float) -> Config:
        cfg = self.config
        return Config(
            max_steps=steps_for(timeout_s),  # the deterministic limit: a timeout reward
            timeout_s=5 * timeout_s + 5,  # the wall-time guard, far behind it
            max_rows=cfg.max_rows,
            max_sql_chars=cfg.max_sql_chars,
            float_digits=cfg.float_digits,
            count_past_cap_steps=0,  # a result past the cap is never equal: its exact size does not matter
            workers=cfg.workers,
            cache_cells=cfg.cache_cells,
        )

    def score(self, item: RewardItem, step: int | None = None) -> Reward:
        """Score one completion (in this process)."""
        key = (extract_sql(item.completion, item.prompt), item.gold_sql, item.db)
        return self._finish(self._score_keys([key])[0], step)

    def score_batch(self, items: Sequence[RewardItem], step: int | None = None) -> list[Reward]:
        """Score many completions concurrently; identical (SQL, gold, database) triples are scored once."""
        if self.config.processes > 0 and len(items) >= 2 * self.config.processes:
            return self._in_processes(items, step)
        keys = _keys(items, range(len(items)))
        unique = list(dict.fromkeys(keys))
        found = self._finish_all(unique, self._score_keys(unique), step)
        return [found[k] for k in keys]

    def close(self) -> None:
        """Stop the threads and worker processes and close every connection."""
        with self._lock:
            procs, self._processes = self._processes, None
        if procs is not None:
            procs.close()
        self._threads.shutdown(wait=True)
        self._pred.close()
        self._gold.close()

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _score_keys(self, keys: Sequence[_Key]) -> list[_Outcome]:
        """The outcomes of distinct keys, scored in this process (the two phases)."""
        golds = list(dict.fromkeys((db, gold_sql) for _, gold_sql, db in keys))
        gold_runs = dict(zip(golds, self._map(self._run_gold, golds), strict=True))
        wanted = []
        for sql, gold_sql, db in keys:
            gold = gold_runs[db, gold_sql]
            if sql is not None and gold is not None and gold.ok:
                wanted.append((db, sql))
        wanted = list(dict.fromkeys(wanted))
        pred_runs = dict(zip(wanted, self._map(self._run_pred, wanted), strict=True))
        compared: _Compared = {}
        return [self._outcome(k, gold_runs[k[2], k[1]], pred_runs.get((k[2], k[0] or "")), compared) for k in keys]

    def _map(self, fn: Callable[[tuple[Path, str]], R], keys: list[tuple[Path, str]]) -> list[R]:
        """``fn`` over ``keys`` on the query threads (more of them only while queries are slow)."""
        return run_in_lanes(self._threads, fn, keys, self.config.workers, self.config.slow_query_s)

    def _in_processes(self, items: Sequence[RewardItem], step: int | None) -> list[Reward]:
        """A batch's rewards, its distinct keys scored in chunks that idle worker processes take in turn.

        A question's completions share a chunk (its gold runs once); chunks are balanced by size and
        more numerous than the workers, so one slow chunk does not leave the other workers idle. A
        chunk is sent as soon as its completions are extracted and finished as soon as it is back,
        so this process works while the workers do.
        """
        groups: dict[tuple[str, Path], list[int]] = {}
        for i, it in enumerate(items):
            groups.setdefault((it.gold_sql, it.db), []).append(i)
        pool = self._process_pool()
        sent = []
        for chunk in balanced(list(groups.values()), CHUNKS_PER_PROCESS * self.config.processes):
            keys = _keys(items, chunk)
            unique = list(dict.fromkeys(keys))
            sent.append((chunk, keys, unique, pool.submit(_score_chunk, [unique])))
        rewards: list[Reward | None] = [None] * len(items)
        for chunk, keys, unique, future in sent:
            try:
                (outcomes,) = future.result()
            except Lost as e:  # the chunk's worker kept dying: its completions say so, unscored
                outcomes = [_Outcome("invalid", str(e), k[0], UNPARSED) for k in unique]
            found = self._finish_all(unique, outcomes, step)
            for i, k in zip(chunk, keys, strict=True):
                rewards[i] = found[k]
        return cast(list[Reward], rewards)

    def _process_pool(self) -> Pool[RewardScorer]:
        with self._lock:
            if self._processes is None:
                self._processes = Pool(self.config.processes, _worker_scorer, replace(self.config, processes=0))
            return self._processes

    def _run_gold(self, key: tuple[Path, str]) -> Execution | None:
        """The gold's execution, or None when the database file does not exist."""
        db, gold_sql = key
        return self._gold.run(db, gold_sql, role="gold") if db.is_file() else None

    def _run_pred(self, key: tuple[Path, str]) -> Execution:
        return self._pred.run(key[0], key[1], role="pred")

    def _outcome(self, key: _Key, gold: Execution | None, pred: Execution | None, compared: _Compared) -> _Outcome:
        sql, gold_sql, db = key
        if gold is None:
            return _Outcome("invalid", f"database not found: {db}", sql, UNPARSED)
        if not gold.ok:
            return _Outcome("gold_error", f"the gold query {status_text(gold)}", sql, UNPARSED)
        if sql is None or pred is None:
            return _Outcome("error", "no SQL found in the completion", None, UNPARSED)
        status, detail = self._compare(pred, gold, gold_sql, db, compared)
        return _Outcome(status, detail, sql, self._syntax(sql, gold_sql) if self.config.syntax else UNPARSED)

    def _compare(
        self, pred: Execution, gold: Execution, gold_sql: str, db: Path, compared: _Compared
    ) -> tuple[RewardStatus, str]:
        """:func:`execution_outcome`, once per gold and distinct predicted result in a batch.

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
        """The syntax score of a (prediction, gold) pair, each query parsed once per scorer."""
        return self._syntax_scores.get_or((sql, gold_sql), lambda: self._syntax_of(sql, gold_sql))

    def _syntax_of(self, sql: str, gold_sql: str) -> SyntaxScore:
        pred = self._trees.get_or(sql, lambda: parse(sql, self.config))
        gold = self._trees.get_or(gold_sql, lambda: parse(gold_sql, self.config))
        return syntax_score(pred, gold, self.config, distance=self._tree_distance)

    def _tree_distance(self, a: Tree, b: Tree) -> int:
        return self._distances.get_or((a, b), lambda: tree_edit_distance(a, b))

    def _finish(self, outcome: _Outcome, step: int | None) -> Reward:
        o = outcome
        return finish(o.status, o.detail, o.sql, o.structure, self.config, step)

    def _finish_all(self, keys: list[_Key], outcomes: list[_Outcome], step: int | None) -> dict[_Key, Reward]:
        return {k: self._finish(o, step) for k, o in zip(keys, outcomes, strict=True)}


def _worker_scorer(config: RewardConfig, watch: Watch) -> RewardScorer:
    """The scorer a worker process keeps for its whole life (its own caches), under its guard."""
    return RewardScorer(config, watch=watch)


def _score_chunk(scorer: RewardScorer, keys: list[_Key]) -> list[_Outcome]:
    """Score a chunk of distinct keys in a worker process, with that process's scorer."""
    return scorer._score_keys(keys)


def _keys(items: Sequence[RewardItem], which: Iterable[int]) -> list[_Key]:
    """The keys of ``items[i]`` for ``i`` in ``which``: what each completion's outcome depends on."""
    return [(extract_sql(items[i].completion, items[i].prompt), items[i].gold_sql, items[i].db) for i in which]


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What a completion's score is made of before the step's weights are applied."""

    status: RewardStatus
    detail: str
    sql: str | None
    structure: SyntaxScore
