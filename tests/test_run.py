"""``rose_sql.run.runner`` in this process: batching, worker start methods, predictions several systems share."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rose_sql.config import Config, JudgeConfig
from rose_sql.engines import Source
from rose_sql.engines import workers as workers_module
from rose_sql.items.load import Item, load_items
from rose_sql.record import dumps
from rose_sql.run.evaluate import evaluate_items, record_data_for, record_for
from rose_sql.run.runner import BATCH, BATCH_FINAL, Evaluator, _batches, plan, run, task_size

GOLDS = ["SELECT count(*) FROM t", "SELECT a FROM t ORDER BY a", "SELECT DISTINCT b FROM t"]
PREDS = [
    "SELECT count(a) FROM t",
    "SELECT a FROM t ORDER BY a DESC",
    "SELECT b FROM t",
    "SELECT nope FROM t",
    "SELECT count(*) FROM t",
]


def item(i: int, db: str = "d", gold: str | None = "g", pred: str = "p") -> tuple[str, Item]:
    return ("sys", Item(i, db, pred, gold))


def test_batches_hold_every_item_once_and_keep_a_question_together() -> None:
    queue = [item(i, db=f"db{i % 3}", gold=f"g{i % 7}", pred=f"p{i % 4}") for i in range(300)]
    batches = _batches(queue)
    assert sorted(e[1].id for b in batches for e in b) == list(range(300))
    assert all(0 < len(b) <= BATCH for b in batches)
    where = {}
    for n, b in enumerate(batches):
        for _, it in b:
            where.setdefault((it.db_id, it.gold_sql), set()).add(n)
    # 21 questions of about 14 items each: every one fits a batch, so none is split
    assert all(len(batches_of_question) == 1 for batches_of_question in where.values())


def test_a_question_asked_more_often_than_a_batch_is_split() -> None:
    batches = _batches([item(i) for i in range(5 * BATCH + 3)])
    assert [len(b) for b in batches] == [BATCH] * 5 + [3]


def test_a_timed_run_hands_its_workers_one_item_at_a_time_as_the_published_pool_does(
    two_systems: tuple[list[Path], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every worker times until the last item, as each process of the published pool does, so that no
    item's wall time is measured on a machine left idle by a worker done with a 64-item task."""
    assert task_size(Config(efficiency="time")) == task_size(Config(efficiency="both")) == 1
    assert task_size(Config(efficiency="steps")) == task_size(Config()) == BATCH_FINAL
    assert task_size(Config(judge=JudgeConfig(model="m"))) == BATCH
    sizes: dict[str, list[int]] = {"time": [], "steps": []}
    batch = Evaluator.batch
    base = "time"

    async def noted(self: Evaluator, entries: list[tuple[str, Item]], *args: Any) -> None:
        sizes[base].append(len(entries))
        await batch(self, entries, *args)

    monkeypatch.setattr(Evaluator, "batch", noted)
    files, db_root = two_systems
    for base in ("time", "steps"):
        config = Config(workers=2, evidence=False, efficiency=base)
        systems = plan([load_items(f) for f in files], tmp_path / base, db_root=Source.folder(db_root), config=config)
        summaries = run(systems, Source.folder(db_root), config)
        assert [s.n for s in summaries] == [40, 40]
    assert sizes["time"] == [1] * 80  # the two systems' 80 items, each a task of its own
    steps = sizes["steps"]  # without a clock: two tasks of whole questions, each within BATCH_FINAL
    assert len(steps) == 2 and sum(steps) == 80 and max(steps) <= BATCH_FINAL


@pytest.fixture
def two_systems(make_db: Callable[..., Path], tmp_path: Path) -> tuple[list[Path], Path]:
    db = make_db("CREATE TABLE t (a INTEGER, b TEXT); INSERT INTO t VALUES (1, 'x'), (2, 'x'), (3, 'y');", db_id="d")
    files = []
    for name, shift in (("alpha", 0), ("beta", 1)):
        rows = [
            {"id": i, "db_id": "d", "gold_sql": GOLDS[i % 3], "pred_sql": PREDS[(i + shift * (i % 2)) % 5]}
            for i in range(40)
        ]
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        files.append(path)
    return files, db.parent.parent


def records(out: Path, name: str) -> dict[Any, dict[str, Any]]:
    lines = (out / name / "records.jsonl").read_text(encoding="utf-8").splitlines()
    found = {}
    for line in lines:
        r = json.loads(line)
        for side in ("pred", "gold"):
            r[side].pop("seconds")
        found[r["id"]] = r
    assert len(found) == len(lines) == 40
    return found


def evaluate(files: list[Path], db_root: Path, out: Path, workers: int) -> dict[str, dict[Any, dict[str, Any]]]:
    config = Config(workers=workers, evidence=False)
    systems = plan([load_items(f) for f in files], out, db_root=Source.folder(db_root), config=config)
    summaries = run(systems, Source.folder(db_root), config)
    assert [s.n for s in summaries] == [40, 40]
    for s in summaries:  # the summary written is the one returned, made from the records written
        assert json.loads((out / s.system / "summary.json").read_text())["n"] == 40
    return {name: records(out, name) for name in ("alpha", "beta")}


@contextmanager
def another_thread() -> Iterator[None]:
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def test_workers_are_forked_only_from_a_single_threaded_process_on_linux() -> None:
    alone = subprocess.run(
        [sys.executable, "-c", "from rose_sql.engines.workers import can_fork; print(can_fork())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert alone.stdout.strip() == str(sys.platform == "linux")
    with another_thread():
        assert workers_module.can_fork() is False


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"], ids=["forked", "fork server", "spawned"])
def test_worker_processes_write_the_records_one_process_writes(
    method: str, two_systems: tuple[list[Path], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forked from this process (one thread), from the fork server (threads), or spawned (no fork server)."""
    if method == "fork" and sys.platform != "linux":
        pytest.skip("workers are forked on Linux only")
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    files, db_root = two_systems
    methods: list[str] = []
    real_get_context = multiprocessing.get_context

    def spy(method: str) -> Any:
        methods.append(method)
        return real_get_context(method)

    monkeypatch.setattr(workers_module.multiprocessing, "get_context", spy)
    # whether the test process has other threads depends on the tests before: decide it here
    monkeypatch.setattr(workers_module, "can_fork", lambda: method == "fork")
    if method == "spawn":  # a platform without a fork server
        monkeypatch.setattr(workers_module.multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    in_workers = evaluate(files, db_root, tmp_path / "workers", workers=2)
    assert methods == [method] * 2
    # the library's own path, in this process, gives the same records
    in_process = {}
    for f in files:
        recs = evaluate_items(load_items(f).items, Source.folder(db_root), Config(workers=1, evidence=False))
        in_process[f.stem] = {r.id: json.loads(r.to_json()) for r in recs}
        for r in in_process[f.stem].values():
            for side in ("pred", "gold"):
                r[side].pop("seconds")
    for found in (in_workers, in_process):  # which executions a worker's cache served varies
        for r in (r for system in found.values() for r in system.values()):
            del r["pred"]["cached"], r["gold"]["cached"], r["source"]
    assert in_workers == in_process


def test_systems_that_predict_alike_get_the_same_outcome_with_cached_executions(
    two_systems: tuple[list[Path], Path], tmp_path: Path
) -> None:
    files, db_root = two_systems
    found = evaluate(files, db_root, tmp_path / "out", workers=1)
    alike = [i for i in range(40) if found["alpha"][i]["pred_sql"] == found["beta"][i]["pred_sql"]]
    assert len(alike) == 20
    for i in alike:
        a, b = found["alpha"][i], found["beta"][i]
        # run once, for whichever came first (a question's items may be split over concurrent batches)
        assert (a["pred"]["cached"] or b["pred"]["cached"]) and (a["gold"]["cached"] or b["gold"]["cached"])
        for r in (a, b):
            del r["source"], r["pred"]["cached"], r["gold"]["cached"]
        assert a == b
    assert {r["comparison"]["reason"] for r in found["alpha"].values() if r["comparison"]} >= {"same", "values"}
    assert any(r["pred"]["status"] == "error" for r in found["beta"].values())


def test_an_alike_items_line_is_made_from_the_first_ones_data_as_from_its_record(
    two_systems: tuple[list[Path], Path],
) -> None:
    """The worker writes the line of an item that repeats another system's prediction from the first item's
    data: the very line its own record would give (every field, in order), executions cached or skipped."""
    _, db_root = two_systems
    firsts = [
        Item(1, "d", "SELECT b FROM t", GOLDS[2]),  # both executions ran
        Item(2, "d", None, GOLDS[0], difficulty="hard"),  # no prediction: it is skipped
        Item(3, "absent", "SELECT 1", "SELECT 1"),  # no database: both skipped
    ]
    records = evaluate_items(firsts, Source.folder(db_root), Config(workers=1, evidence=False))
    assert {r.pred.status for r in records} >= {"ok", "skipped"}
    for r in records:
        for other in (
            Item("x-7", r.db_id, r.pred_sql, r.gold_sql, question="Which?", source="other.jsonl:7"),
            Item(8, r.db_id, r.pred_sql, r.gold_sql, difficulty="simple"),
        ):
            assert dumps(record_data_for(r.to_dict(), other)) == record_for(r, other).to_json()


def test_a_run_without_a_judge_imports_none_of_the_judges(make_db: Callable[..., Path], tmp_path: Path) -> None:
    """Starting up is most of a small run's time: the judges' modules (pydantic, openai) stay unimported."""
    db = make_db("CREATE TABLE t (a INT); INSERT INTO t VALUES (1);")
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": 1, "db_id": "t", "pred_sql": "SELECT a FROM t", "gold_sql": "SELECT 1"}) + "\n")
    script = (
        "import sys\nfrom rose_sql.cli import main\n"
        f"sys.argv = ['rose', 'run', {str(items)!r}, '--db-root', {str(db.parent.parent)!r}, "
        f"'--out', {str(tmp_path / 'out')!r}, '--workers', '1']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print(sorted(m for m in sys.modules if m.startswith(('rose_sql.judges', 'openai', 'pydantic'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "out" / "items" / "records.jsonl").is_file()
