"""The reward's bounds: queries run in worker processes that a wall guard can stop, what a guard stop
scores, deadlines, fair sharing of the workers, the partial-credit search.

Each bound is asserted with a margin that holds on a loaded two-core machine: bounds, not speed
targets. The measured times are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from conftest import build_db
from reward_cases import GOLD, INSTR, OTHER_GOLD, RUNAWAY, SCRIPT

from rose_sql.config import MAX_QUERY_THREADS, RewardConfig
from rose_sql.engines import Database
from rose_sql.engines.workers import SLOTS_PER_WORKER
from rose_sql.results import Execution, ResultSet
from rose_sql.reward import RewardItem, RewardScorer, compute_score, execution_outcome
from rose_sql.reward.execution import _alignments
from rose_sql.reward.lanes import FairQueue

MARGIN_S = 0.5
"""The guard's margin past the timeout here (GUARD_MARGIN_S, 5 s, by default): what the guard tests wait for."""
RESTART_MARGIN_S = 20.0
"""Stopping a worker, starting its replacement and sending its chunk again, on a loaded machine."""


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Database:
    return Database.file(build_db(tmp_path_factory.mktemp("dbs") / "music" / "music.sqlite", SCRIPT))


def test_config_keeps_queries_in_worker_processes() -> None:
    assert RewardConfig().processes >= 1
    with pytest.raises(ValueError, match="at least 1"):
        RewardConfig(processes=0)
    with pytest.raises(ValueError, match="between 1 and"):
        RewardConfig(workers=MAX_QUERY_THREADS + 1)
    with pytest.raises(ValueError, match="max_steps"):
        RewardConfig(max_steps=10)
    assert MAX_QUERY_THREADS == SLOTS_PER_WORKER  # each query thread takes one slot of its worker's guard
    cfg = RewardConfig()
    assert (cfg.max_steps, cfg.gold_max_steps, cfg.timeout_s, cfg.gold_timeout_s) == (
        200_000_000,
        3_000_000_000,
        15.0,
        150.0,
    )


@pytest.mark.slow  # waits for a runaway to reach its wall-clock guard, twice
def test_an_uninterruptible_call_is_stopped_with_its_worker_and_confirmed(db: Database) -> None:
    """Its worker is stopped and replaced, and the query runs again alone with the guard doubled: stopped
    again, it gets the reward of a query stopped at its limit (``timeout``), never None: a runaway never
    escapes its reward."""
    with RewardScorer(RewardConfig(timeout_s=1.0, guard_margin_s=MARGIN_S, processes=1)) as scorer:
        start = time.monotonic()
        rewards = scorer.score_batch([RewardItem(INSTR, GOLD, db), RewardItem(OTHER_GOLD, OTHER_GOLD, db)])
        elapsed = time.monotonic() - start
        bound = (1.0 + MARGIN_S) + (2.0 + MARGIN_S) + RESTART_MARGIN_S
        print(f"instr on every row: answered after {elapsed:.2f} s (guard 1 s + {MARGIN_S:g} s, then 2 s)")
        assert elapsed < bound
        stopped, other = rewards
        assert (stopped.status, stopped.execution) == ("timeout", -0.5) and stopped.total is not None
        assert "a runaway, stopped twice" in stopped.detail and "cannot interrupt" in stopped.detail
        assert other.status == "match" and other.total == pytest.approx(1.0)  # the rest of the batch is scored
        assert scorer.stats is not None and scorer.stats.guard_kills == 1
        start = time.monotonic()
        after = scorer.score(RewardItem(f"<answer>{GOLD}</answer>", GOLD, db))
        print(f"the next request: {time.monotonic() - start:.3f} s")
        assert after.status == "match" and time.monotonic() - start < 10.0


def test_a_confirmed_runaway_gets_the_timeout_reward_and_a_gold_one_none(db: Database) -> None:
    """A query its wall clock stopped twice (the second time alone with it doubled) is a runaway: the
    timeout reward, as past its step budget (before, None: a completion could escape its reward by running
    away). A gold that runs away is gold_error: no reward."""
    with RewardScorer(
        RewardConfig(max_steps=10**12, timeout_s=0.5, gold_timeout_s=0.5, guard_margin_s=MARGIN_S, processes=1)
    ) as scorer:
        guarded = scorer.score(RewardItem(RUNAWAY, GOLD, db))
        gold_guarded = scorer.score(RewardItem(GOLD, RUNAWAY, db))
    assert (guarded.status, guarded.execution) == ("timeout", -0.5) and guarded.total is not None
    assert "wall-time guard after 0.5 s" in guarded.detail and "a runaway, stopped twice" in guarded.detail
    assert (gold_guarded.status, gold_guarded.total) == ("gold_error", None) and "gold" in gold_guarded.detail
    with RewardScorer(RewardConfig(max_steps=5_000_000, processes=1)) as scorer:
        budget = scorer.score(RewardItem(RUNAWAY, GOLD, db))
    assert (budget.status, budget.execution) == ("timeout", -0.5) and "5,000,000 steps" in budget.detail


@pytest.mark.slow  # waits for a runaway to reach its wall-clock guard or deadline
def test_the_adapters_run_queries_where_the_guard_can_stop_them(db: Database) -> None:
    start = time.monotonic()
    label = {"gold_sql": GOLD, "db_path": db.target}
    r = compute_score("x", INSTR, json.dumps(label), None, timeout_s=1.0, guard_margin_s=MARGIN_S, processes=1)
    elapsed = time.monotonic() - start
    print(f"verl compute_score on instr: {elapsed:.2f} s")
    assert elapsed < (1.0 + MARGIN_S) + (2.0 + MARGIN_S) + RESTART_MARGIN_S
    assert r["status"] == "timeout" and r["scored"] is True and "wall-time guard" in r["error"]


@pytest.mark.slow  # waits for a runaway to reach its wall-clock guard or deadline
def test_a_deadline_answers_the_slow_items_and_scores_the_others(db: Database) -> None:
    items = [RewardItem(RUNAWAY, GOLD, db), RewardItem(OTHER_GOLD, OTHER_GOLD, db), RewardItem(GOLD, GOLD, db)]
    with RewardScorer(RewardConfig(max_steps=10**12, timeout_s=60.0, processes=2)) as scorer:
        scorer.score_batch(items[1:] * 4)  # both workers up: the deadline is not spent starting them
        start = time.monotonic()
        futures = scorer.submit(items, deadline=start + 2.0)
        rewards = [f.result(timeout=30) for f in futures]
        elapsed = time.monotonic() - start
    print(f"a request with a 2 s deadline and a runaway query: answered after {elapsed:.2f} s")
    assert elapsed < 2.0 + 8.0
    slow, other, same_question = rewards
    assert slow.status == "wall_guard" and "deadline" in slow.detail
    assert other.status == "match"  # another question: its own chunk, scored
    assert same_question.status == "match"  # the runaway's question: its chunk returned at the deadline


def test_later_batches_get_a_worker_before_earlier_ones_finish() -> None:
    sent: list[str] = []
    lock = threading.Lock()
    with ThreadPoolExecutor(4) as pool:

        def send(unit: str) -> Future[str]:
            with lock:
                sent.append(unit)
            return pool.submit(time.sleep, 0.05)  # type: ignore[return-value]

        queue: FairQueue[str, str] = FairQueue(1, send)
        done: list[str] = []
        finished = threading.Event()

        def record(unit: str, _: Future[str] | None) -> None:
            done.append(unit)
            if len(done) == 7:
                finished.set()

        queue.add([f"a{i}" for i in range(5)], None, record)
        time.sleep(0.02)  # a0 is out
        queue.add(["b0", "b1"], None, record)
        assert finished.wait(10)
        queue.close()
    assert sent[:4] == ["a0", "b0", "a1", "b1"]  # one slot, taken in turns


def test_units_past_their_deadline_are_never_sent() -> None:
    sent: list[str] = []
    gone: list[str] = []
    with ThreadPoolExecutor(2) as pool:

        def send(unit: str) -> Future[None]:
            sent.append(unit)
            return pool.submit(time.sleep, 0.5)

        queue: FairQueue[str, None] = FairQueue(1, send)
        queue.add(["slow"], None, lambda u, f: None)
        queue.add(["late1", "late2"], time.monotonic() + 0.1, lambda u, f: gone.append(u) if f is None else None)
        time.sleep(0.7)
        queue.close()
    assert sent == ["slow"] and gone == ["late1", "late2"]


def _result(rows: list[tuple[int, ...]]) -> Execution:
    columns = tuple(f"c{i}" for i in range(len(rows[0])))
    return Execution("ok", 0.0, ResultSet(columns, tuple(rows), len(rows)))


def test_the_partial_credit_search_is_capped() -> None:
    # six columns holding the same values: every one of the 720 permutations is a candidate
    gold = [(i, i, i, i, i, i) for i in range(4000)]
    pred = [(i, i, i, i, i, -i) for i in range(1, 3000)]
    assert sum(1 for _ in _alignments(pred, gold, 6, 6)) <= 121  # columns as given, then at most 120
    start = time.monotonic()
    status, _ = execution_outcome(_result(pred), _result(gold), "SELECT 1", RewardConfig())
    elapsed = time.monotonic() - start
    print(f"partial-credit search, 6 columns, 4,000 and 2,999 rows: {elapsed:.2f} s")
    assert status == "wrong" and elapsed < 30.0


def test_worker_threads_stay_within_the_guards_slots(db: Database) -> None:
    with RewardScorer(RewardConfig(workers=MAX_QUERY_THREADS, processes=1)) as scorer:
        items = [RewardItem(f"SELECT {k} + count(*) FROM singer", GOLD, db) for k in range(50)]
        assert {r.status for r in scorer.score_batch(items)} == {"wrong"}
