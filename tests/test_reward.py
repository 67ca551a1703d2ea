"""RL rewards: extraction, execution and syntax rewards, schedules, the clause cap, batching, adapters.

Execution cases run on real Spider (``concert_singer``) and BIRD (``superhero``) databases from the
shared data; they skip with a reason when it is absent.
"""

from __future__ import annotations

import inspect
import itertools
import json
import math
import pickle
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import cache, lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rose_sql.config import Config
from rose_sql.engines import Database, Source
from rose_sql.engines.execute import Executor
from rose_sql.engines.workers import Watch
from rose_sql.errors import UsageError
from rose_sql.results import Execution
from rose_sql.reward import (
    Reward,
    RewardConfig,
    RewardItem,
    RewardScorer,
    SyntaxScore,
    bounds,
    build_tree,
    combine,
    compute_score,
    compute_score_batch,
    execution_outcome,
    extract_sql,
    parse,
    parse_label,
    syntax_score,
    tree_edit_distance,
    trl_reward,
    weights,
)
from rose_sql.reward import worker as worker_module
from rose_sql.reward.lanes import balanced, run_in_lanes
from rose_sql.reward.schedule import finish
from rose_sql.reward.syntax import UNPARSED
from rose_sql.reward.worker import Worker

HANG_GUARD_S = 15.0  # only catches a hang; not a performance assertion
RUNAWAY = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"
SINGERS = "SELECT name ,  country ,  age FROM singer ORDER BY age DESC"  # Spider dev item 2
HEIGHTS = "SELECT superhero_name FROM superhero WHERE height_cm > 200"


@pytest.fixture(scope="module")
def scorer() -> Iterator[RewardScorer]:
    with RewardScorer(RewardConfig(workers=4)) as s:
        yield s


@pytest.fixture(scope="module")
def spider_db(shared: Path) -> Database:
    return Database.file(shared / "spider" / "database" / "concert_singer" / "concert_singer.sqlite")


@pytest.fixture(scope="module")
def bird_db(shared: Path) -> Database:
    return Database.file(shared / "bird" / "superhero" / "superhero.sqlite")


@lru_cache(maxsize=1)
def _spider_gold(shared: Path) -> list[tuple[str, str]]:
    lines = (shared / "spider" / "dev_gold.sql").read_text().splitlines()
    return [(sql, db) for sql, _, db in (line.rpartition("\t") for line in lines if line.strip())]


def real_items(shared: Path) -> list[tuple[str, Database]]:
    """A few real gold queries: Spider dev items on databases present here, and BIRD superhero items."""
    out = []
    for sql, db_id in _spider_gold(shared)[:120:6]:
        db = shared / "spider" / "database" / db_id / f"{db_id}.sqlite"
        if db.is_file():
            out.append((sql, Database.file(db)))
    bird = json.loads((shared / "bird" / "dev.json").read_text())
    superhero = Database.file(shared / "bird" / "superhero" / "superhero.sqlite")
    out += [(x["SQL"], superhero) for x in bird if x["db_id"] == "superhero"][:40:4]
    return out


def score(scorer: RewardScorer, completion: Any, gold: str, db: Database, step: int | None = None) -> Reward:
    return scorer.score(RewardItem(completion, gold, db), step)


# --------------------------------------------------------------------------- extremes


@pytest.mark.parametrize("step", [0, 500, None])
def test_gold_as_completion_scores_the_maximum(shared: Path, scorer: RewardScorer, step: int | None) -> None:
    items = real_items(shared)
    assert len(items) >= 20
    high = bounds(scorer.config, step)[1]
    rewards = scorer.score_batch([RewardItem(f"```sql\n{sql}\n```", sql, db) for sql, db in items], step)
    for (sql, _), r in zip(items, rewards, strict=True):
        assert r.status == "match", (sql, r.detail)
        assert r.execution == 1.0 and r.syntax == pytest.approx(1.0)
        assert r.total == pytest.approx(high), sql
    assert high == pytest.approx(1.0)


@pytest.mark.parametrize(
    "completion", ["I cannot answer that.", "```sql\nSELEC name FRM singer\n```", "", "<answer></answer>"]
)
def test_failing_completion_scores_the_minimum(spider_db: Database, scorer: RewardScorer, completion: str) -> None:
    for step in (0, None):
        r = score(scorer, completion, SINGERS, spider_db, step)
        assert r.status == "error" and r.execution == scorer.config.error
        assert r.total == pytest.approx(bounds(scorer.config, step)[0])


def test_sql_that_fails_gets_the_lowest_execution_reward(bird_db: Database, scorer: RewardScorer) -> None:
    r = score(scorer, "SELECT superhero_name FROM superheroes WHERE height_cm > 200", HEIGHTS, bird_db)
    assert r.status == "error" and "no such table" in r.detail
    assert r.execution == scorer.config.error
    assert r.total is not None and r.total < 0  # syntax credit never lifts a failing query above 0 by default


# --------------------------------------------------------------------------- partial credit


PARTIAL_CASES = [  # (completion, gold, expected status, expected detail)
    ("SELECT name, country, age FROM singer ORDER BY age ASC", SINGERS, "partial", "order"),
    ("SELECT name, country, age FROM singer WHERE age > 30 ORDER BY age DESC", SINGERS, "partial", "subset"),
    ("SELECT age, name, country FROM singer WHERE age > 30", SINGERS, "partial", "subset"),  # columns permuted
    ("SELECT name, country, age, singer_id FROM singer ORDER BY age DESC", SINGERS, "partial", "extra_columns"),
    ("SELECT name FROM singer ORDER BY age DESC", SINGERS, "partial", "missing_columns"),
    ("SELECT name FROM singer", "SELECT name FROM singer WHERE country = 'France'", "partial", "superset"),
    ("SELECT country FROM singer", "SELECT DISTINCT country FROM singer", "partial", "superset"),  # duplicates
    ("SELECT name, country, age FROM singer WHERE age > 100", SINGERS, "wrong", "values"),  # empty is no subset
    ("SELECT name FROM singer WHERE age > 50", "SELECT name FROM singer", "wrong", "values"),  # 1 vs 6 rows: ratio
    ("SELECT name, age FROM singer WHERE age > 30", "SELECT name, country FROM singer", "wrong", "values"),
]


@pytest.mark.parametrize(("completion", "gold", "status", "detail"), PARTIAL_CASES)
def test_partial_credit_on_spider(
    spider_db: Database, scorer: RewardScorer, completion: str, gold: str, status: str, detail: str
) -> None:
    r = score(scorer, completion, gold, spider_db)
    assert (r.status, r.detail) == (status, detail)
    assert r.execution == {"partial": 0.5, "wrong": 0.0}[status]


def test_partial_credit_on_bird_superhero(bird_db: Database, scorer: RewardScorer) -> None:
    subset = score(scorer, "SELECT superhero_name FROM superhero WHERE height_cm > 210", HEIGHTS, bird_db)
    superset = score(scorer, "SELECT superhero_name FROM superhero WHERE height_cm > 190", HEIGHTS, bird_db)
    no_filter = score(scorer, "SELECT superhero_name FROM superhero", HEIGHTS, bird_db)
    assert (subset.status, subset.detail) == ("partial", "subset")
    assert (superset.status, superset.detail) == ("partial", "superset")
    assert no_filter.status == "wrong"  # 750 rows for a gold of a few dozen: past partial_max_ratio
    exact = score(scorer, "SELECT T1.superhero_name FROM superhero AS T1 WHERE T1.height_cm > 200", HEIGHTS, bird_db)
    assert exact.status == "match"
    assert subset.total is not None and superset.total is not None and exact.total is not None
    assert no_filter.total is not None and no_filter.total < subset.total < exact.total


def test_partial_ratio_is_a_parameter(spider_db: Database) -> None:
    with RewardScorer(RewardConfig(partial_max_ratio=10.0, workers=2)) as s:
        r = score(s, "SELECT name FROM singer WHERE age > 50", "SELECT name FROM singer", spider_db)
    assert (r.status, r.detail) == ("partial", "subset")


# --------------------------------------------------------------------------- timeouts and failing golds


def test_runaway_completion_returns_the_timeout_reward(spider_db: Database) -> None:
    with RewardScorer(RewardConfig(max_steps=5_000_000, workers=2)) as s:
        start = time.monotonic()
        r = score(s, f"<answer>{RUNAWAY}</answer>", SINGERS, spider_db)
        elapsed = time.monotonic() - start
    assert r.status == "timeout" and r.execution == s.config.timeout
    assert elapsed < HANG_GUARD_S


def test_default_timeout_is_short_and_stops_the_query(spider_db: Database, scorer: RewardScorer) -> None:
    assert (scorer.config.max_steps, scorer.config.timeout_s) == (200_000_000, 15.0)  # steps decide, wall time guards
    rows_forever = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r WHERE x < 0"
    r = score(scorer, rows_forever, SINGERS, spider_db)
    assert r.status == "timeout"  # stopped by its step budget (or the guard, confirmed), never left running


def test_failing_gold_is_reported_never_a_match(spider_db: Database, scorer: RewardScorer) -> None:
    broken = "SELECT nosuchcolumn FROM singer"
    for completion in (broken, SINGERS, "no sql here"):
        r = score(scorer, completion, broken, spider_db)
        assert r.status == "gold_error" and r.total is None and r.execution is None
        assert "no such column" in r.detail


def test_a_gold_reading_a_table_the_database_lacks_is_the_labels_problem(
    spider_db: Database, scorer: RewardScorer
) -> None:
    """The outcome contract: what the gold reads is not in the label's database, so the item is invalid
    (unscored), whatever the completion; never a match, never a 0."""
    missing = "SELECT name FROM no_such_table"
    for completion in (missing, SINGERS):
        r = score(scorer, completion, missing, spider_db)
        assert r.status == "invalid" and r.total is None and "no such table" in r.detail


def test_gold_timeout_is_reported(spider_db: Database) -> None:
    with RewardScorer(RewardConfig(gold_max_steps=5_000_000, workers=2)) as s:
        r = score(s, RUNAWAY, RUNAWAY, spider_db)
    assert r.status == "gold_error" and r.total is None and "timed out" in r.detail


def test_missing_database_is_invalid(tmp_path: Path, scorer: RewardScorer) -> None:
    r = score(scorer, "SELECT 1", "SELECT 1", Database.file(tmp_path / "nope.sqlite"))
    assert r.status == "invalid" and r.total is None


# --------------------------------------------------------------------------- batches


def test_batch_equals_one_by_one_and_scores_duplicates_once(shared: Path, scorer: RewardScorer) -> None:
    items = real_items(shared)
    completions = []
    for k, (sql, db) in enumerate(items):
        wrong = "SELECT 1"
        completions += [
            RewardItem(sql, sql, db),
            RewardItem(wrong, sql, db),
            RewardItem(f"<answer>{sql}</answer>", sql, db),
        ]
        if k % 3 == 0:
            completions.append(RewardItem([{"role": "assistant", "content": sql}], sql, db))
    batch = scorer.score_batch(completions, step=10)
    one_by_one = [scorer.score(it, step=10) for it in completions]
    assert [r.total for r in batch] == pytest.approx([r.total for r in one_by_one])
    assert [r.status for r in batch] == [r.status for r in one_by_one]
    assert scorer.score_batch([], step=1) == []


def test_gold_runs_once_and_repeated_completions_once(spider_db: Database) -> None:
    completions = ["SELECT name FROM singer", f"<answer>{SINGERS}</answer>"] * 20
    worker = Worker(RewardConfig(workers=4))  # what each worker process runs, here
    try:
        first = worker.score([(c, SINGERS, spider_db) for c in completions])
        again = worker.score([(c, SINGERS, spider_db) for c in completions[:3]])
        executed = (worker.gold.executed, worker.pred.executed)
    finally:
        worker.close()
    assert executed == (1, 2)  # one gold, two distinct predictions, whatever the chunks
    assert [o.status for o in first] == ["partial", "match"] * 20
    assert [o.status for o in again] == ["partial", "match", "partial"]


def test_public_surface_is_pinned() -> None:
    from rose_sql import reward

    assert reward.__all__ == sorted(reward.__all__)
    assert all(hasattr(reward, name) for name in reward.__all__)
    assert set(reward.__all__) >= {"RewardConfig", "RewardScorer", "compute_score", "compute_score_batch", "trl_reward"}
    # names that do not collide with the evaluator's: execute.Status, judges.llm.ChatReply
    assert {"RewardStatus", "Completion"} <= set(reward.__all__) and "Status" not in reward.__all__


def test_worker_processes_agree_with_threads(shared: Path, scorer: RewardScorer) -> None:
    items = [RewardItem(c, sql, db) for sql, db in real_items(shared) for c in (sql, "SELECT 1", "nothing")]
    with RewardScorer(RewardConfig(processes=2, workers=2)) as pooled:
        in_processes = pooled.score_batch(items, step=3)
        again = pooled.score_batch(items, step=3)  # the same workers, warm caches
    with RewardScorer(RewardConfig(processes=1, workers=1)) as alone:
        one_process = alone.score_batch(items, step=3)
    here = scorer.score_batch(items, step=3)
    worker = Worker(RewardConfig(workers=4))  # a worker's threads, in this process
    try:
        outcomes = worker.score([(it.completion, it.gold_sql, it.db) for it in items])  # type: ignore[misc]
    finally:
        worker.close()
    in_threads = [finish(o.status, o.detail, o.sql, o.structure, scorer.config, 3) for o in outcomes]
    expected = [r.as_dict() for r in in_threads]
    assert [r.as_dict() for r in in_processes] == expected == [r.as_dict() for r in here]
    assert [r.as_dict() for r in again] == expected == [r.as_dict() for r in one_process]


def test_execution_only_reward(spider_db: Database) -> None:
    with RewardScorer(RewardConfig(syntax=False, workers=2)) as s:
        near = score(s, "SELECT name, country, age FROM singer ORDER BY age ASC", SINGERS, spider_db, step=0)
        wrong = score(s, "SELECT 1", SINGERS, spider_db, step=0)
    assert (near.alpha, near.beta, near.total, near.syntax) == (0.0, 1.0, 0.5, 0.0)
    assert wrong.total == 0.0 and bounds(s.config, 0) == (-1.0, 1.0)


# --------------------------------------------------------------------------- caches and concurrency


def _plain(item: RewardItem, config: RewardConfig, step: int | None) -> tuple[Any, ...]:
    """What a reward is made of, from the plain functions: fresh sandboxes, no scorer, no cache (in this
    process: the worker's guard is not what this compares, and a worker per query would cost 600 processes)."""
    sql = extract_sql(item.completion, item.prompt)
    assert sql is not None
    sandbox = Config(max_rows=config.max_rows, float_digits=config.float_digits, count_past_cap_steps=0)
    gold = _fresh(item.db, item.gold_sql, replace(sandbox, max_steps=config.gold_max_steps))
    pred = _fresh(item.db, sql, replace(sandbox, max_steps=config.max_steps))
    status, detail = execution_outcome(pred, gold, item.gold_sql, config)
    structure = syntax_score(parse(sql, config), parse(item.gold_sql, config), config)
    execution = {"match": 1.0, "partial": 0.5, "wrong": 0.0, "error": -1.0, "timeout": -0.5}[status]
    return status, detail, structure, combine(structure, execution, config, step)


def _fresh(db: Database, sql: str, config: Config) -> Execution:
    """``sql`` on a sandbox of its own (no cache shared with anything), in this process."""
    with Executor(config, watch=Watch()) as ex:
        return ex.run(db, sql)


def _rollouts(shared: Path) -> list[RewardItem]:
    """Several completions per real question, repeating SQL, results and clause trees across items."""
    items = []
    for sql, db in real_items(shared):
        for completion in (sql, f"```sql\n{sql}\n```", "SELECT 1", "select 1", "SELECT 1.0", f"{sql} LIMIT 1"):
            items.append(RewardItem(completion, sql, db))
    return items


def test_caches_change_no_reward(shared: Path) -> None:
    items = _rollouts(shared)
    cold = RewardConfig(workers=2, memo_size=0)  # no parse, syntax or distance memo
    with RewardScorer(RewardConfig(workers=2)) as warm, RewardScorer(cold) as uncached:
        first = warm.score_batch(items, step=5)
        again = warm.score_batch(items[::-1], step=5)[::-1]  # every cache hit
        without = uncached.score_batch(items, step=5)
    assert [r.as_dict() for r in first] == [r.as_dict() for r in again] == [r.as_dict() for r in without]
    for item, r in zip(items, first, strict=True):
        assert (r.status, r.detail, r.structure, (r.total, r.clause_part)) == _plain(item, warm.config, 5), item


def test_each_distinct_sql_is_parsed_once(shared: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: Counter[str] = Counter()

    def counting(sql: str, config: RewardConfig | None = None) -> Any:
        calls[sql] += 1
        return parse(sql, config)

    monkeypatch.setattr(worker_module, "parse", counting)
    items = _rollouts(shared)
    worker = Worker(RewardConfig(workers=2))  # the parses of one worker process, here
    try:
        jobs = [(str(it.completion), it.gold_sql, it.db) for it in items]
        worker.score(jobs[: len(jobs) // 2])
        worker.score(jobs)
    finally:
        worker.close()
    assert calls and max(calls.values()) == 1
    assert set(calls) == {extract_sql(it.completion) for it in items} | {it.gold_sql for it in items}


def test_equal_results_of_other_types_are_compared_apart(make_db: Callable[..., Path]) -> None:
    # The comparison of a batch is reused for predictions with equal rows; -2**63 as an integer and as
    # a float are equal in Python but not to the comparator: both must be compared.
    db = make_db("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (-9223372036854775808), (3);")
    gold = "SELECT x FROM t ORDER BY x DESC"
    completions = [
        "SELECT x FROM t ORDER BY x",
        "SELECT CAST(x AS REAL) FROM t ORDER BY x",
        "SELECT x FROM t ORDER BY -x",
    ]
    with RewardScorer(RewardConfig(workers=2)) as s:
        rewards = s.score_batch([RewardItem(c, gold, Database.file(db)) for c in completions])
    assert [(r.status, r.detail) for r in rewards] == [("partial", "order"), ("wrong", "values"), ("match", "same")]


def test_query_threads_join_only_while_queries_are_slow() -> None:
    def on_thread(pause: float) -> Callable[[int], int]:
        def run(key: int) -> int:
            time.sleep(pause)
            return threading.get_ident()

        return run

    with ThreadPoolExecutor(4) as threads:
        fast = run_in_lanes(threads, on_thread(0.0), range(6), max_lanes=4, patience_s=60.0)
        slow = run_in_lanes(threads, on_thread(0.2), range(6), max_lanes=3, patience_s=0.01)
        assert len(set(fast)) == 1  # fast queries: one thread, no GIL contention
        assert len(set(slow)) == 3  # slow ones overlap, up to max_lanes
        with pytest.raises(ZeroDivisionError):
            run_in_lanes(threads, lambda k: 1 // k, [1, 0, 2], max_lanes=2, patience_s=0.01)


def test_process_chunks_keep_questions_whole_and_balance() -> None:
    groups = [[0, 1, 2, 3, 4], [5], [6, 7], [8, 9, 10], [11], [12, 13]]
    chunks = balanced(groups, 3)
    assert sorted(i for chunk in chunks for i in chunk) == list(range(14))
    assert all(any(set(g) <= set(chunk) for chunk in chunks) for g in groups)
    assert [len(c) for c in chunks] == [5, 5, 4]
    assert balanced([[0]], 8) == [[0]]


def test_what_crosses_to_and_from_a_worker_comes_back_equal() -> None:
    # a chunk is sent packed (each gold and database once) and its outcomes come back as tuples of fields
    a, b = Database.file("/x/a.sqlite"), Database.file("/x/b.sqlite")
    jobs = [("t1", "SELECT 1", a), ("t2", "SELECT 2", b), ("t3", "SELECT 1", Database.file("/x/a.sqlite"))]
    rows, golds, dbs = worker_module.pack(jobs)
    assert (golds, dbs) == (["SELECT 1", "SELECT 2"], [a, b]) and [r[1:] for r in rows] == [(0, 0), (1, 1), (0, 0)]
    assert worker_module.unpack(pickle.loads(pickle.dumps((rows, golds, dbs)))) == jobs
    structure = SyntaxScore(True, 0.5, 0.25, (("select", 1.0), ("where", 0.0)))
    outcomes = [
        worker_module.Outcome("partial", "order", "SELECT 1", structure, None),
        worker_module.Outcome("match", "", None, UNPARSED, 1.5),
    ]
    back = pickle.loads(pickle.dumps(outcomes))
    assert back == outcomes and [type(o.structure) for o in back] == [SyntaxScore, SyntaxScore]


# --------------------------------------------------------------------------- extraction

EXTRACTION_CASES: list[tuple[Any, str | None]] = [
    ("SELECT a FROM t", "SELECT a FROM t"),
    ("SELECT a FROM t;", "SELECT a FROM t"),
    ("```sql\nSELECT a FROM t;\n```", "SELECT a FROM t"),
    ("```SQL\nSELECT a FROM t\n```", "SELECT a FROM t"),
    ("```\nSELECT a FROM t\n```", "SELECT a FROM t"),
    ("First:\n```sql\nSELECT 1\n```\nBetter:\n```sql\nSELECT a FROM t\n```", "SELECT a FROM t"),
    ("```sql\nSELECT a FROM t\n```\nResult:\n```text\n3 rows\n```", "SELECT a FROM t"),
    ("<answer>SELECT a FROM t</answer>", "SELECT a FROM t"),
    ("<answer>\n```sql\nSELECT a FROM t\n```\n</answer>", "SELECT a FROM t"),
    ("<sql>SELECT a FROM t</sql>", "SELECT a FROM t"),
    ("<SOLUTION>SELECT a FROM t</SOLUTION>", "SELECT a FROM t"),
    ("<answer>SELECT 1</answer> on second thought <answer>SELECT a FROM t</answer>", "SELECT a FROM t"),
    ("<think>maybe ```sql\nSELECT 1\n``` no</think>\n<answer>SELECT a FROM t</answer>", "SELECT a FROM t"),
    ("<think>SELECT 1 FROM x</think>```sql\nSELECT a FROM t\n```", "SELECT a FROM t"),
    ("<answer>SELECT a FROM t", "SELECT a FROM t"),  # truncated generation: unclosed tag
    ("```sql\nSELECT a FROM t", "SELECT a FROM t"),  # unclosed fence
    ("The query is: SELECT a FROM t\n\nIt returns a.", "SELECT a FROM t"),
    ("Use this:\nWITH x AS (SELECT a FROM t) SELECT * FROM x", "WITH x AS (SELECT a FROM t) SELECT * FROM x"),
    ("SELECT a -- the column\nFROM t /* table */", "SELECT a FROM t"),
    ("SELECT '--not a comment' FROM t", "SELECT '--not a comment' FROM t"),
    ("<|im_start|>assistant\n```sql\nSELECT a FROM t\n```<|im_end|>", "SELECT a FROM t"),
    (
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "```sql\nSELECT a FROM t\n```"}],
        "SELECT a FROM t",
    ),
    (
        [{"role": "assistant", "content": "SELECT 1"}, {"role": "assistant", "content": "SELECT a FROM t"}],
        "SELECT a FROM t",
    ),
    ([{"role": "assistant", "content": [{"type": "text", "text": "SELECT a FROM t"}]}], "SELECT a FROM t"),
    ({"role": "assistant", "content": "<answer>SELECT a FROM t</answer>"}, "SELECT a FROM t"),
    ("I don't know.", None),
    ("", None),
    ([], None),
    ("<think>SELECT a FROM t", None),  # never left the reasoning
    ("```sql\n-- nothing\n```", None),
]


@pytest.mark.parametrize(("completion", "expected"), EXTRACTION_CASES)
def test_extract_sql(completion: Any, expected: str | None) -> None:
    assert extract_sql(completion) == expected


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("WITH x" + " " * 40_000 + "SELECT 1", "SELECT 1"),
        ("WITH x (" + " " * 40_000 + "SELECT 1", "SELECT 1"),
        ("<answer>" * 20_000, "<answer>" * 19_999),  # an unclosed tag runs to the end
        ("<think>" * 20_000 + "SELECT 1", None),
        ("```" * 20_000, None),
    ],
    ids=["spaces after a CTE name", "unclosed column list", "opening tags", "reasoning tags", "fences"],
)
def test_extract_reads_hostile_completions_in_linear_time(completion: str, expected: str | None) -> None:
    assert extract_sql(completion) == expected  # the suite's time is the guard (this took seconds when quadratic)


def test_extract_cuts_the_prompt_off() -> None:
    prompt = "Example:\n```sql\nSELECT 1\n```\nNow answer:"
    assert extract_sql(prompt + "```sql\nSELECT a FROM t\n```", prompt) == "SELECT a FROM t"
    assert extract_sql(prompt + " no answer", prompt) is None


# --------------------------------------------------------------------------- syntax reward


def test_syntax_of_identical_and_equivalent_spellings() -> None:
    cfg = RewardConfig()
    gold = parse("SELECT T1.name FROM singer AS T1 WHERE T1.age > 30", cfg)
    for same in ("select name from singer where age > 30", "SELECT s.NAME AS n FROM Singer s WHERE s.age > 30.0"):
        s = syntax_score(parse(same, cfg), gold, cfg)
        assert (s.parsed, s.tree, s.clause) == (True, 1.0, 1.0), same


def test_syntax_scores_fall_with_structural_distance() -> None:
    cfg = RewardConfig()
    gold = parse("SELECT name, age FROM singer WHERE age > 30 ORDER BY age", cfg)
    near = syntax_score(parse("SELECT name, age FROM singer WHERE age > 40 ORDER BY age", cfg), gold, cfg)
    far = syntax_score(parse("SELECT count(*) FROM concert GROUP BY year", cfg), gold, cfg)
    unparsed = syntax_score(parse("SELEC name FRM singer", cfg), gold, cfg)
    assert 1.0 > near.tree > far.tree >= 0.0
    assert 1.0 > near.clause > far.clause >= 0.0
    # WHERE is Where(GT(age, 30)): one leaf of four relabelled
    assert dict(near.clauses) == pytest.approx({"select": 1.0, "from": 1.0, "where": 3 / 4, "order": 1.0})
    assert (unparsed.parsed, unparsed.tree, unparsed.clause) == (False, 0.0, 0.0)


def test_select_and_from_weigh_more_than_details() -> None:
    cfg = RewardConfig()
    gold = parse("SELECT name FROM singer WHERE age > 30 ORDER BY age", cfg)
    wrong_select = syntax_score(parse("SELECT country FROM singer WHERE age > 30 ORDER BY age", cfg), gold, cfg)
    wrong_order = syntax_score(parse("SELECT name FROM singer WHERE age > 30 ORDER BY name", cfg), gold, cfg)
    assert wrong_select.tree == wrong_order.tree  # one leaf relabelled either way
    assert wrong_select.clause < wrong_order.clause


def test_gold_that_sqlglot_cannot_parse_leaves_only_parses_or_not() -> None:
    cfg = RewardConfig()
    assert syntax_score(parse("SELECT 1", cfg), None, cfg) == SyntaxScore(True, 1.0, 1.0)
    assert syntax_score(None, None, cfg) == SyntaxScore(False, 0.0, 0.0)


Node = tuple[str, list[Any]]


def _random_tree(rng: random.Random, n: int) -> Node:
    nodes: list[Node] = [(rng.choice("abc"), [])]
    for k in range(1, n):
        child: Node = (rng.choice("abc"), [])
        nodes[rng.randrange(k)][1].append(child)
        nodes.append(child)
    return nodes[0]


def _as_tree(node: Node) -> Any:
    return build_tree(node[0], node[1], lambda n: n)


def _reference_ted(a: Node, b: Node) -> int:
    """The forest edit distance recursion, straight from its definition (slow, obviously right)."""

    def frozen(node: Node) -> tuple[Any, ...]:
        return (node[0], tuple(frozen(c) for c in node[1]))

    def size(f: tuple[Any, ...]) -> int:
        return sum(1 + size(t[1]) for t in f)

    @cache
    def d(f: tuple[Any, ...], g: tuple[Any, ...]) -> int:
        if not f or not g:
            return size(f) + size(g)
        (lf, cf), (lg, cg) = f[-1], g[-1]
        return min(d(f[:-1] + cf, g) + 1, d(f, g[:-1] + cg) + 1, d(cf, cg) + d(f[:-1], g[:-1]) + (lf != lg))

    return d((frozen(a),), (frozen(b),))


def test_zhang_shasha_matches_the_definition_on_random_trees() -> None:
    rng = random.Random(7)
    for _ in range(300):
        a, b = _random_tree(rng, rng.randint(1, 9)), _random_tree(rng, rng.randint(1, 9))
        assert tree_edit_distance(_as_tree(a), _as_tree(b)) == _reference_ted(a, b)


def test_tree_building_needs_no_recursion() -> None:
    deep = " OR ".join(f"age = {k}" for k in range(1500))  # a left-deep chain 1500 levels down
    cfg = RewardConfig()
    parsed = parse(f"SELECT name FROM singer WHERE {deep}", cfg)
    assert parsed is not None and parsed.parts["where"].size > 4000
    s = syntax_score(parsed, parsed, cfg)
    assert (s.tree, s.clause) == (1.0, 1.0)
    other = syntax_score(parse("SELECT name FROM singer WHERE age = 1", cfg), parsed, cfg)  # label-bag bound
    assert 0.0 <= other.tree < 0.1


# --------------------------------------------------------------------------- schedules and the cap


def test_schedules_move_from_syntax_heavy_to_execution_heavy() -> None:
    for schedule in ("linear", "cosine"):
        cfg = RewardConfig(schedule=schedule, alpha_start=0.6, alpha_end=0.1, total_steps=100)  # type: ignore[arg-type]
        alphas = [weights(cfg, t)[0] for t in range(0, 121, 10)]
        assert alphas[0] == pytest.approx(0.6) and alphas[10] == pytest.approx(0.1) and alphas[-1] == pytest.approx(0.1)
        assert all(x >= y for x, y in itertools.pairwise(alphas))
        assert weights(cfg, None) == pytest.approx((0.1, 0.9))
        assert sum(weights(cfg, 37)) == pytest.approx(1.0)
    linear = RewardConfig(schedule="linear", total_steps=100)
    cosine = RewardConfig(schedule="cosine", total_steps=100)
    assert weights(linear, 50)[0] == pytest.approx(0.35) == weights(cosine, 50)[0]
    assert weights(cosine, 10)[0] > weights(linear, 10)[0]  # cosine stays syntax-heavy longer
    constant = RewardConfig(schedule="constant", alpha_start=0.3)
    assert [weights(constant, t) for t in (0, 10**6, None)] == [pytest.approx((0.3, 0.7))] * 3


def test_clause_part_is_capped_at_30_percent_of_the_total() -> None:
    cfg = RewardConfig(schedule="constant", alpha_start=0.9, clause_mix=0.8)
    rng = random.Random(3)
    for _ in range(2000):
        structure = SyntaxScore(True, rng.random(), rng.random())
        execution = rng.choice([cfg.match, cfg.partial, cfg.wrong, cfg.error, cfg.timeout])
        total, part = combine(structure, execution, cfg)
        assert total is not None and part >= 0.0
        if part > 0:
            assert part <= 0.3 * total + 1e-12
    # a wrong query with perfect clauses but no other merit gets nothing from them
    assert combine(SyntaxScore(True, 0.0, 1.0), cfg.wrong, cfg) == (0.0, 0.0)
    # under the cap nothing changes
    low = RewardConfig(schedule="constant", alpha_start=0.5, clause_mix=0.2)
    total, part = combine(SyntaxScore(True, 1.0, 1.0), 1.0, low)
    assert (total, part) == (pytest.approx(1.0), pytest.approx(0.1))


def test_config_validates_and_reads_mappings() -> None:
    with pytest.raises(ValueError):
        RewardConfig(clause_cap=1.0)
    with pytest.raises(ValueError):
        RewardConfig(schedule="exponential")  # type: ignore[arg-type]
    cfg = RewardConfig.from_mapping({"timeout_s": 1, "clause_weights": {"select": 1.0}, "unknown": 3})
    assert cfg.timeout_s == 1 and cfg.clause_weights == (("select", 1.0),)


# --------------------------------------------------------------------------- labels and adapters


def test_parse_label_forms(shared: Path) -> None:
    root = Source.folder(shared / "spider" / "database")
    want = shared / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"
    forms: list[Any] = [
        json.dumps({"gold_sql": "SELECT 1", "db_id": "concert_singer"}),
        {"sql": "SELECT 1", "db_id": "concert_singer"},
        "SELECT 1\tconcert_singer",
        "concert_singer\tSELECT 1",
        {"gold_sql": "SELECT 1", "db_path": "concert_singer/concert_singer.sqlite"},
    ]
    for form in forms:
        gold = parse_label(form, root)
        assert (gold.sql, gold.db.kind, gold.db.path) == ("SELECT 1", "sqlite", want), form
    for bad in ("SELECT 1", "{not json", {"db_id": "x"}, {"gold_sql": "SELECT 1", "db_id": "../etc"}, "a b\tc d"):
        with pytest.raises(ValueError):
            parse_label(bad, root)
    with pytest.raises(ValueError):
        parse_label({"gold_sql": "SELECT 1", "db_path": "/etc/hosts"}, root, confine=True)


def test_verl_signatures() -> None:
    single = list(inspect.signature(compute_score).parameters)
    assert single[:4] == ["data_source", "solution_str", "ground_truth", "extra_info"]
    assert inspect.signature(compute_score).parameters["extra_info"].default is None
    batch = list(inspect.signature(compute_score_batch).parameters)
    assert batch[:4] == ["data_sources", "solution_strs", "ground_truths", "extra_infos"]


def test_verl_compute_score(shared: Path) -> None:
    root = str(shared / "spider" / "database")
    r = compute_score("spider", f"<answer>{SINGERS}</answer>", SINGERS, {"db_id": "concert_singer"}, db_root=root)
    assert r["score"] == pytest.approx(1.0) and r["status"] == "match" and r["scored"] is True
    label = json.dumps({"gold_sql": "SELECT name FROM no_such_table", "db_id": "concert_singer"})
    bad = compute_score("spider", "SELECT 1", label, None, db_root=root, unscored=-0.25)
    assert bad["score"] == -0.25 and bad["scored"] is False and bad["status"] == "invalid"  # the table is not there
    assert set(r) == set(bad)  # verl stacks every key per item: all items carry the same keys
    batch = compute_score_batch(
        ["spider"] * 3,
        [SINGERS, "SELECT 1", "nothing"],
        [SINGERS, f"{SINGERS}\tconcert_singer", SINGERS],
        [{"db_id": "concert_singer", "step": 0}, None, {}],
        db_root=root,
    )
    assert [b["status"] for b in batch] == ["match", "wrong", "invalid"]
    assert all(isinstance(b["score"], float) for b in batch)


class _ArrayLike(list[Any]):
    """Like the numpy object arrays verl passes: truthiness is an error."""

    def __bool__(self) -> bool:
        raise ValueError("The truth value of an array with more than one element is ambiguous")


def test_verl_batch_takes_array_like_columns(shared: Path) -> None:
    root = str(shared / "spider" / "database")
    batch = compute_score_batch(
        _ArrayLike(["spider", "spider"]),
        _ArrayLike([SINGERS, "SELECT 1"]),
        _ArrayLike([SINGERS, SINGERS]),
        _ArrayLike([{"db_id": "concert_singer"}, {"db_id": "concert_singer"}]),
        db_root=root,
    )
    assert [b["status"] for b in batch] == ["match", "wrong"]


def test_verl_reads_db_root_from_the_environment(shared: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROSE_DB_ROOT", str(shared / "spider" / "database"))
    assert compute_score("spider", SINGERS, SINGERS, {"db_id": "concert_singer"})["status"] == "match"


def test_trl_reward_function(shared: Path) -> None:
    root = shared / "spider" / "database"
    total: Callable[..., list[float | None]] = trl_reward(root)
    execution = trl_reward(root, component="execution")
    assert total.__name__ == "rose_sql_total" and execution.__name__ == "rose_sql_execution"
    completions: list[Any] = [
        [{"role": "assistant", "content": f"```sql\n{SINGERS}\n```"}],
        "SELECT 1",
        [{"role": "assistant", "content": "no idea"}],
        SINGERS,
    ]
    columns = {
        "gold_sql": [SINGERS, SINGERS, SINGERS, "SELECT x FROM no_such_table"],
        "db_id": ["concert_singer"] * 4,
        "trainer_state": SimpleNamespace(global_step=0),
    }
    out = total(prompts=["q"] * 4, completions=completions, **columns)
    assert len(out) == 4 and out[3] is None  # failing gold: None, which TRL skips
    assert out[0] == pytest.approx(1.0) and out[2] == pytest.approx(bounds(RewardConfig(), 0)[0])
    assert out[0] > out[1] > out[2]  # type: ignore[operator]
    assert execution(prompts=None, completions=completions, **columns) == [1.0, 0.0, -1.0, None]
    labels = {"label": [f"{SINGERS}\tconcert_singer"] * 4}
    assert total(completions=completions, **labels)[0] == pytest.approx(1.0)
    with pytest.raises(UsageError, match="gold_sql column"):  # no gold column: the whole batch is unusable
        total(completions=["SELECT 1"])
    with pytest.raises(ValueError):
        trl_reward(root, component="bogus")


def test_reward_as_dict_is_json_ready(spider_db: Database, scorer: RewardScorer) -> None:
    d = score(scorer, SINGERS, SINGERS, spider_db).as_dict()
    assert json.loads(json.dumps(d))["structure"]["clauses"]["select"] == 1.0
    assert not math.isnan(d["total"])
