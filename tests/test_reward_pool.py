"""The RL reward beyond one process: the Ray actor pool, verl's call into it, and OpenRLHF's remote reward
pointed at ``rose serve-reward`` replicas. verl and OpenRLHF cannot run here, so their recipes are checked
at the interface they call, on completions built from the shared predictions."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from test_reward_server import post

from rose_sql.config import RewardConfig, ServeConfig
from rose_sql.distributed.pool import route
from rose_sql.engines import Source
from rose_sql.reward import RewardItem, RewardScorer, compute_score, compute_score_batch
from rose_sql.reward.server import serve_in_thread

SPIDER = ("c3sql.txt", "codes-1b.txt", "codes-7b.txt", "dail-sql-gpt4.txt", "early-baseline.txt")
BIRD = ("alpha-result.json", "c3-result.json", "chess-result.json", "dail-result.json")


def completions(shared: Path, questions: int = 80, superhero: int = 40) -> list[tuple[str, str, str, str]]:
    """(completion, gold SQL, database root, db_id) for each system's answer to the first questions of
    Spider dev and of BIRD's superhero, question by question as a GRPO batch holds them."""
    spider = shared / "spider/database"
    golds = [line.split("\t") for line in (shared / "spider/dev_gold.sql").read_text().splitlines()[:questions]]
    answers = [(shared / "preds/spider" / f).read_text().splitlines()[:questions] for f in SPIDER]
    out = []
    for q, (gold, db_id) in enumerate(golds):
        for k, system in enumerate(answers):
            sql = system[q].split("\t")[0]
            text = f"<think>...</think><answer>```sql\n{sql}\n```</answer>" if k % 2 else sql
            out.append((text, gold, str(spider), db_id.strip()))
    bird = [[x for x in json.loads((shared / "preds/bird-dev" / f).read_text()) if x["db_id"] == "superhero"]
            for f in BIRD]  # fmt: skip
    for q in range(superhero):
        for system in bird:
            x = system[q]
            out.append((x["predicted_sql"], x["gold_sql"], str(shared / "bird"), "superhero"))
    return out


class _ObjectArray(list[Any]):
    """What verl passes where numpy is absent: a sequence whose truth value is an error, as an array's is."""

    def __bool__(self) -> bool:
        raise ValueError("The truth value of an array with more than one element is ambiguous")


def array(values: list[Any]) -> Any:
    """A numpy object array, as verl's ``non_tensor_batch`` holds (a stand-in when numpy is not installed)."""
    try:
        import numpy as np
    except ImportError:
        return _ObjectArray(values)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def reward_items(rows: list[tuple[str, str, str, str]]) -> list[RewardItem]:
    return [RewardItem(c, g, Source.folder(root).locate(db)) for c, g, root, db in rows]


# --------------------------------------------------------------------------- routing (no Ray needed)


def test_route_keeps_a_database_together_and_spreads_a_large_one() -> None:
    small = [(f"db{d}", f"q{d}-{q}") for d in range(8) for q in range(3)]  # 8 databases, 3 questions each
    placed = route(small, 4)
    homes = {db: {w for w, ix in placed.items() for i in ix if small[i][0] == db} for db, _ in small}
    assert all(len(ws) == 1 for ws in homes.values())  # a small database: one actor
    assert sorted(i for ix in placed.values() for i in ix) == list(range(len(small)))
    assert route(small, 4) == placed  # stable: the same batch goes to the same actors every step
    big = [("superhero", f"q{q}") for q in range(40) for _ in range(8)]
    spread = route(big, 4)
    assert len(spread) == 4 and min(map(len, spread.values())) >= 8 * 4  # one database, every actor
    questions = {w: {big[i][1] for i in ix} for w, ix in spread.items()}
    assert sum(map(len, questions.values())) == 40  # a question stays on one actor


# --------------------------------------------------------------------------- the Ray actor pool


@pytest.mark.ray
def test_the_pool_scores_as_one_process(ray_cluster: str, shared: Path) -> None:
    from rose_sql.distributed.pool import RewardPool

    rows = completions(shared)
    items = reward_items(rows)
    with RewardScorer(RewardConfig()) as scorer:
        expected = scorer.score_batch(items, step=300)
    pool = RewardPool(RewardConfig(), size=2)
    try:
        assert pool.score_batch(items, step=300) == expected
        os.kill(pool.pids[0], signal.SIGKILL)  # an actor dies: its part is scored by the other
        assert pool.score_batch(items, step=300) == expected
    finally:
        pool.close()
    assert {r.status for r in expected} >= {"match", "wrong", "error"}


def test_verl_s_module_gives_the_pool_its_keywords_and_the_reward_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Ray (the inner loop's): ``ray_workers``, ``ray_rate`` and ``ray_pool`` make the pool (one per
    name, size and rate), every other keyword goes to the reward, and the per-response form is the batch
    form of one. Scoring on a real pool: the Ray test below."""
    import rose_sql.distributed.verl as verl

    made: list[tuple[str, int | None, float | None]] = []
    calls: list[tuple[Any, ...]] = []

    class Pool:
        def compute_score_batch(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
            calls.append((*args, kwargs))
            return [{"score": float(i)} for i in range(len(args[0]))]

    def pool(name: str, size: int | None, rate: float | None) -> Pool:
        made.append((name, size, rate))
        return Pool()

    monkeypatch.setattr(verl, "_pool", pool)
    got = verl.compute_score_batch(["a", "b"], ["s1", "s2"], ["g1", "g2"], None, ray_workers=3, ray_rate=2.5,
                                   ray_pool="mine", timeout_s=2, db_root="/dbs")  # fmt: skip
    assert got == [{"score": 0.0}, {"score": 1.0}]
    assert made == [("mine", 3, 2.5)]
    assert calls == [(["a", "b"], ["s1", "s2"], ["g1", "g2"], None, {"timeout_s": 2, "db_root": "/dbs"})]
    one = verl.compute_score("a", "s1", "g1", {"db_id": "x"}, timeout_s=1)
    assert one == {"score": 0.0} and made[-1] == ("rose-reward", None, None)
    assert calls[-1] == (["a"], ["s1"], ["g1"], [{"db_id": "x"}], {"timeout_s": 1})


@pytest.mark.ray
def test_verl_batch_reward_manager_calls_the_pool(ray_cluster: str, shared: Path) -> None:
    """verl imports the file at ``custom_reward_function.path`` under its own module name and its batch
    reward manager calls ``compute_score_batch`` with keywords, numpy object arrays and the reward_kwargs."""
    import rose_sql.distributed.verl as verl

    spec = importlib.util.spec_from_file_location("custom_module", verl.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = completions(shared, questions=40, superhero=20)
    kwargs: dict[str, Any] = {"data_sources": array(["spider"] * len(rows))}
    kwargs["solution_strs"] = array([c for c, *_ in rows])
    kwargs["ground_truths"] = array([g for _, g, _, _ in rows])
    kwargs["extra_infos"] = array([{"db_id": db, "db_root": root, "step": 7} for _, _, root, db in rows])
    try:
        got = module.compute_score_batch(**kwargs, timeout_s=2, ray_workers=2)
        one = module.compute_score(
            data_source="spider", solution_str=rows[0][0], ground_truth=rows[0][1], extra_info=kwargs["extra_infos"][0]
        )  # the naive reward manager's call
    finally:
        module._pool("rose-reward", 2, None).close()
        module._pool.cache_clear()
    expected = compute_score_batch(**kwargs, timeout_s=2)
    assert got == expected and len(got) == len(rows)
    assert one == compute_score("spider", rows[0][0], rows[0][1], kwargs["extra_infos"][0])


@pytest.mark.ray
def test_the_rate_limit_holds_for_every_caller(ray_cluster: str, shared: Path) -> None:
    from rose_sql.distributed.pool import RewardPool

    items = reward_items(completions(shared, questions=60, superhero=0))[:250]
    first = RewardPool(RewardConfig(), size=1, rate=200, name="rate-test")
    second = RewardPool(RewardConfig(), size=1, rate=200, name="rate-test")  # another process would do the same
    try:
        assert first.workers[0]._actor_id == second.workers[0]._actor_id  # one set of actors, one limiter
        start = time.monotonic()
        first.score_batch(items)
        second.score_batch(items)
        elapsed = time.monotonic() - start
    finally:
        first.close()
    assert elapsed >= (2 * 250 - 200) / 200 * 0.95  # 500 completions, a burst of 200, then 200 per second


# --------------------------------------------------------------------------- OpenRLHF: serve-reward replicas


def test_openrlhf_remote_reward_on_replicas(shared: Path) -> None:
    """OpenRLHF POSTs ``{"query", "prompts", "labels"}`` to its ``--remote_rm_url`` and reads ``rewards``;
    replicas behind one URL each answer their share of the requests with the in-process rewards."""
    rows = completions(shared, questions=30, superhero=10)
    replicas = [serve_in_thread(ServeConfig(Source.folder(shared), port=0))[0] for _ in range(2)]
    try:
        rewards: list[float] = []
        for n, start in enumerate(range(0, len(rows), 16)):  # micro-batches, spread as a load balancer does
            part = rows[start : start + 16]
            prompts = [f"Question {start + i}: " for i in range(len(part))]
            labels = [{"gold_sql": g, "db_path": str(Path(root).relative_to(shared) / db / f"{db}.sqlite")}
                      for _, g, root, db in part]  # fmt: skip
            body = {"query": [p + c for p, (c, *_) in zip(prompts, part, strict=True)], "prompts": prompts}
            status, answer = post(replicas[n % 2].url, {**body, "labels": labels})
            assert status == 200 and "rewards" in answer  # OpenRLHF asserts the score key is there
            rewards += answer["rewards"]
    finally:
        for r in replicas:
            r.close()
    expected = compute_score_batch(
        ["x"] * len(rows), [c for c, *_ in rows], [g for _, g, _, _ in rows],
        [{"db_id": db, "db_root": root} for _, _, root, db in rows],
    )  # fmt: skip
    assert rewards == [e["score"] for e in expected]
