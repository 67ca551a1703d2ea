"""Beyond one machine, on a local 2-CPU Ray instance: the same records from a local run, a ``--ray`` run
and merged shards, and what happens when a Ray worker or the driver is killed mid-run.

The workload is real: the first questions of three shared Spider prediction files and the BIRD dev
``superhero`` items of three shared BIRD files, judged by a deterministic scripted judge (its verdicts
follow a hash of what it reads, so any change in a prompt shows) on the scripted server's wire: the
judges run on Ray's workers, processes that only a real port reaches. Every run asks the judge itself
(a cache folder of its own).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import rose
from test_trust import hashed_verdict

from rose_sql.config import Config, JudgeConfig
from rose_sql.engines import Source
from rose_sql.items.load import load_items
from rose_sql.record import Record, comparable, read_records
from rose_sql.testing import ScriptedOpenAI, by_content

pytestmark = pytest.mark.ray

SPIDER = ("c3sql.txt", "dail-sql-gpt4.txt", "codes-7b.txt")
BIRD = ("alpha-result.json", "c3-result.json", "chess-result.json")
ENV = {"OPENAI_API_KEY": "t"}


@dataclass(frozen=True)
class Workload:
    """Two ``rose run`` invocations (Spider and BIRD differ in gold and database root) over six files."""

    spider: list[Path]
    gold: Path
    bird: list[Path]
    shared: Path

    def runs(self) -> list[list[Any]]:
        """The arguments of each invocation, before --out and the judge."""
        return [
            [*self.spider, "--gold", self.gold, "--db-root", self.shared / "spider/database"],
            [*self.bird, "--db-root", self.shared / "bird"],
        ]

    @property
    def systems(self) -> list[str]:
        return [p.stem for p in (*self.spider, *self.bird)]


def make_workload(shared: Path, folder: Path, questions: int = 60, superhero: int = 30) -> Workload:
    folder.mkdir(parents=True, exist_ok=True)
    gold = folder / "gold.json"  # the questions too: the judges are never asked without them
    gold.write_text(json.dumps(json.loads((shared / "spider/dev.json").read_text())[:questions]))
    spider = []
    for name in SPIDER:
        spider.append(folder / name)
        lines = (shared / "preds/spider" / name).read_text().splitlines(keepends=True)[:questions]
        spider[-1].write_text("".join(lines))
    bird = []
    for name in BIRD:
        items = [x for x in json.loads((shared / "preds/bird-dev" / name).read_text()) if x["db_id"] == "superhero"]
        bird.append(folder / f"bird-{name}")
        bird[-1].write_text(json.dumps(items[:superhero]))
    return Workload(spider, gold, bird, shared)


def records(out: Path, systems: list[str]) -> dict[str, Record]:
    """Every record under ``out``, by system and id; an item recorded twice fails the test."""
    found: dict[str, Record] = {}
    for name in systems:
        for r in read_records(out / name / "records.jsonl"):
            key = f"{name}/{r.id_key}"
            assert key not in found, f"{key} recorded twice"
            found[key] = r
    return found


def different(a: dict[str, Record], b: dict[str, Record]) -> list[str]:
    """Keys whose records differ beyond the fields that may (:data:`rose_sql.record.EXEMPT`)."""
    assert a.keys() == b.keys(), (sorted(a.keys() - b.keys())[:5], sorted(b.keys() - a.keys())[:5])
    return [k for k in a if comparable(a[k]) != comparable(b[k])]


def judge(srv: ScriptedOpenAI, cache: Path) -> list[Any]:
    """The judge options, with a cache of its own that shares the fence secret (the prompts must be the same)."""
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "fence.key").write_text("5e" * 32)
    return ["--judge-model", "m", "--judge-base-url", srv.base_url, "--cache-dir", cache]


@pytest.fixture(scope="module")
def judged(ray_cluster: str, shared: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The workload, the scripted judge, and the records of a local run (no Ray) of it."""
    folder = tmp_path_factory.mktemp("ray-workload")
    work = make_workload(shared, folder / "inputs")
    with ScriptedOpenAI(by_content(hashed_verdict)) as srv:
        for args in work.runs():
            res = rose("run", *args, "--out", folder / "local", *judge(srv, folder / "cache-local"), env=ENV)
            assert res.exit_code == 0, res.output
        local = records(folder / "local", work.systems)
        yield work, srv, local


@pytest.mark.slow
def test_a_ray_run_and_merged_shards_record_what_a_local_run_does(judged: Any, tmp_path: Path) -> None:
    work, srv, local = judged
    assert len(local) == 3 * 60 + 3 * 30
    assert sum(1 for r in local.values() if r.judges) > 60  # the judges were asked
    assert sum(1 for r in local.values() if r.evidence is not None and r.evidence.witness is not None) > 0
    assert not [k for k, r in local.items() if r.unscored_reason in ("internal_error", "wall_guard")]
    for args in work.runs():
        res = rose("run", *args, "--out", tmp_path / "ray", *judge(srv, tmp_path / "cache-ray"), "--ray", env=ENV)
        assert res.exit_code == 0, res.output
    assert different(local, records(tmp_path / "ray", work.systems)) == []
    for i in range(4):
        for args in work.runs():
            out = tmp_path / f"shard-{i}"
            res = rose("run", *args, "--out", out, *judge(srv, tmp_path / f"cache-{i}"), "--shard", f"{i}/4", env=ENV)
            assert res.exit_code == 0, res.output
    res = rose("merge", *(tmp_path / f"shard-{i}" for i in range(4)), "--out", tmp_path / "merged")
    assert res.exit_code == 0, res.output
    assert different(local, records(tmp_path / "merged", work.systems)) == []
    for name in work.systems:  # a normal, complete run for every other command
        summary = json.loads((tmp_path / "merged" / name / "summary.json").read_text())
        assert summary["manifest"]["complete"] is True and summary["judge"]["model"] == "m"


def test_a_ray_worker_killed_mid_run_has_its_batches_redone(judged: Any, tmp_path: Path) -> None:
    from rose_sql.distributed.cluster import RayBackend
    from rose_sql.run.runner import plan, run

    work, srv, local = judged
    judge(srv, tmp_path / "cache")  # the same fence secret as the local run's
    config = Config(evidence=True).with_(
        judge=JudgeConfig(model="m", base_url=srv.base_url, api_key="t", cache_dir=tmp_path / "cache")
    )
    db_root = Source.folder(work.shared / "spider/database")
    loaded = [load_items(p, work.gold) for p in work.spider]
    systems = plan(loaded, tmp_path / "out", db_root=db_root, config=config, gold=work.gold)
    backend = RayBackend(config, workers=2, databases=systems[0].manifest.databases)
    victim = backend.pids[0]
    written = [0]

    def progress(name: str, ledger: Any) -> None:
        written[0] += 1
        if written[0] == 15:  # both actors have batches in flight: kill one of them, hard
            os.kill(victim, signal.SIGKILL)

    summaries = run(systems, db_root, config, progress=progress, backend=backend)
    assert backend.stats.deaths >= 1 and backend.stats.redone >= 1 and backend.stats.lost == 0
    assert all(s.manifest is not None and s.manifest.complete for s in summaries)
    spider = {k: r for k, r in local.items() if k.split("/")[0] in {p.stem for p in work.spider}}
    assert different(spider, records(tmp_path / "out", [p.stem for p in work.spider])) == []


def test_a_killed_driver_resumes_on_ray_with_every_item_once(judged: Any, ray_cluster: str, tmp_path: Path) -> None:
    work, srv, local = judged
    out = tmp_path / "out"
    args = [sys.executable, "-m", "rose_sql", "run", *map(str, work.runs()[0]), "--out", str(out)]
    args += [*map(str, judge(srv, tmp_path / "cache")), "--ray", ray_cluster]
    env = {**os.environ, **ENV}
    driver = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = out / work.spider[0].stem / "records.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not first.exists() or first.read_bytes().count(b"\n") < 10):
        time.sleep(0.05)
    driver.kill()  # kill -9: no handler runs, the manifest stays incomplete
    driver.communicate(timeout=60)
    systems = [p.stem for p in work.spider]
    before = sum(1 for name in systems for _ in read_records(out / name / "records.jsonl"))
    assert 10 <= before < len(systems) * 60
    done = subprocess.run([*args, "--resume"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "resuming" in done.stdout
    spider = {k: r for k, r in local.items() if k.split("/")[0] in systems}
    assert different(spider, records(out, systems)) == []  # every item once, as a local run records it


def test_judge_calls_share_one_concurrency_limit_and_one_budget(judged: Any, tmp_path: Path) -> None:
    """Two workers judge at once, but every call goes through the one actor that owns the LLM client."""
    import threading

    from rose_sql.testing import Reply

    work, _, _ = judged
    lock, now, peak = threading.Lock(), [0], [0]

    def tracked(request: dict[str, Any], index: int) -> Reply:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.05)  # in flight while it thinks
        with lock:
            now[0] -= 1
        return by_content(hashed_verdict)(request, index)

    spider = work.runs()[0]
    with ScriptedOpenAI(tracked) as srv:
        args = ["--judge-model", "gpt-4o-mini", "--judge-base-url", srv.base_url, "--cache-dir", tmp_path / "cache"]
        res = rose("run", *spider, "--out", tmp_path / "out", *args, "--concurrency", "2", "--ray", env=ENV)
        assert res.exit_code == 0, res.output
        assert peak[0] == 2  # reached, never passed, across both workers
        calls = srv.calls
        budget = ["--budget", "0.002", "--cache-dir", tmp_path / "cache-2"]  # about 9 calls of gpt-4o-mini
        budget += ["--judge-max-tokens", "200"]  # each call reserves its worst case: a prompt's bytes, 200 out
        res = rose("run", *spider, "--out", tmp_path / "out-2", *args, "--concurrency", "2", *budget, "--ray", env=ENV)
        assert res.exit_code == 3 and "budget_exhausted" in res.output, res.output  # the spent budget is said
        made = srv.calls - calls
    cost = (1000 * 0.15 + 100 * 0.6) / 1e6
    assert made >= 1 and made * cost <= 0.002  # one budget, never passed: two would have spent twice as much
    found = records(tmp_path / "out-2", [p.stem for p in work.spider])
    assert sum(1 for r in found.values() if r.unscored_reason == "budget_exhausted") > 20
