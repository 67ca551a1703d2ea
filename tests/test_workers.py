"""The worker engine: per-process state, results in order, and a hard wall-time guard that holds."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest

from rose_sql.engines import workers as workers_module
from rose_sql.engines.workers import Pool, Watch, statement_key
from rose_sql.errors import Lost


class State:
    def __init__(self, arg: str, watch: Watch) -> None:
        self.pid = os.getpid()
        self.arg = arg
        self.watch = watch
        self.calls = 0


def init(arg: str, watch: Watch) -> State:
    return State(arg, watch)


def double(state: State, x: int) -> tuple[int, str, int]:
    state.calls += 1
    return state.pid, state.arg, 2 * x


def fail_on_three(state: State, x: int) -> int:
    if x == 3:
        raise ValueError("three is not allowed")
    return x


def runaway(state: State, x: int) -> str:
    """Item 2 runs away inside one statement the worker cannot interrupt; the others are quick."""
    key = statement_key("runaway", str(x))
    if key in state.watch.poisoned:
        return "guard"
    state.watch.arm(key, 0.3)
    try:
        time.sleep(60 if x == 2 else 0.01)
    finally:
        state.watch.disarm()
    return f"done {x}"


def die_once(state: State, marker: str) -> str:
    path = Path(marker)
    if not path.exists():
        path.write_text("died once")
        os._exit(3)
    return "survived"


def die_always(state: State, x: int) -> str:
    os._exit(4)


def test_results_in_order_from_a_state_each_worker_builds_once() -> None:
    with Pool(2, init, "cfg") as pool:
        futures = [pool.submit(double, range(i, i + 5)) for i in range(0, 40, 5)]
        results = [r for f in futures for r in f.result(timeout=60)]
    assert [r[2] for r in results] == [2 * x for x in range(40)]
    assert {r[1] for r in results} == {"cfg"} and len({r[0] for r in results}) <= 2
    assert all(pid != os.getpid() for pid, _, _ in results)


def test_an_exception_fails_its_unit_only() -> None:
    with Pool(1, init, "cfg") as pool:
        bad = pool.submit(fail_on_three, [1, 2, 3])
        good = pool.submit(fail_on_three, [4, 5])
        with pytest.raises(RuntimeError, match="ValueError: three is not allowed"):
            bad.result(timeout=60)
        assert good.result(timeout=60) == [4, 5]


def _refuse_to_unpickle() -> None:
    raise TypeError("this value cannot be rebuilt here")


class Unreadable:
    """Pickles in the worker; unpickling it in the pool's process raises."""

    def __reduce__(self) -> tuple[object, tuple[()]]:
        return (_refuse_to_unpickle, ())


def unreadable(state: State, x: int) -> Unreadable:
    return Unreadable()


def test_a_reply_that_does_not_unpickle_fails_its_unit_and_the_pool_goes_on() -> None:
    with Pool(1, init, "cfg") as pool:
        bad = pool.submit(unreadable, [1])
        with pytest.raises(RuntimeError, match="reply could not be read: TypeError: this value cannot be rebuilt"):
            bad.result(timeout=60)
        assert pool.submit(double, [4]).result(timeout=60)[0][2] == 8


def test_the_guard_stops_a_runaway_and_the_unit_completes_without_it() -> None:
    with Pool(1, init, "cfg") as pool:
        start = time.monotonic()
        got = pool.submit(runaway, [1, 2, 3]).result(timeout=60)
        took = time.monotonic() - start
        after = pool.submit(double, [7]).result(timeout=60)
        stats = pool.stats
    assert got == ["done 1", "guard", "done 3"]
    assert stats.guard_kills == 1 and stats.poisoned == [statement_key("runaway", "2")]
    assert took < 0.3 + 10  # the guard's 0.3 s, plus a fresh worker's start on a loaded machine
    assert after[0][2] == 14  # the replacement worker serves later units


def environment(state: State, name: str) -> str | None:
    return os.environ.get(name)


def test_a_replacement_is_forked_from_the_fork_server_with_the_parents_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once the pool's thread runs, a new worker never forks this process, and never spawns: it comes from
    the fork server (started with the modules imported), and takes this process's environment as it is now."""
    methods: list[str] = []
    real = multiprocessing.get_context

    def spy(method: str) -> Any:
        methods.append(method)
        return real(method)

    monkeypatch.setattr(workers_module.multiprocessing, "get_context", spy)
    monkeypatch.setenv("ROSE_TEST_WORKER_ENV", "before")
    with Pool(1, init, "cfg") as pool:
        monkeypatch.setenv("ROSE_TEST_WORKER_ENV", "after")  # the fork server, if it runs, was started before
        assert pool.submit(runaway, [2]).result(timeout=60) == ["guard"]
        assert pool.submit(environment, ["ROSE_TEST_WORKER_ENV"]).result(timeout=60) == ["after"]
    assert methods[1:] == ["forkserver"] and pool.stats.guard_kills == 1


LEFT_BEHIND = """\
import os, sys, threading, time
from rose_sql.engines.workers import Pool
def init(arg, watch):
    return None
def busy(state, folder):
    with open(os.path.join(folder, str(os.getpid())), "w"):
        pass
    time.sleep(600)  # busy: only the worker's watch on its parent can end it
if __name__ == "__main__":
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()  # threads: the fork server's workers
    pool = Pool(2, init, None)
    for _ in range(2):
        pool.submit(busy, [sys.argv[1]])  # one to each worker
    time.sleep(600)
"""


def test_busy_workers_from_the_fork_server_leave_when_the_parent_is_killed(tmp_path: Path) -> None:
    import subprocess
    import sys

    script, folder = tmp_path / "parent.py", tmp_path / "pids"
    script.write_text(LEFT_BEHIND)
    folder.mkdir()
    parent = subprocess.Popen([sys.executable, str(script), str(folder)])
    try:
        deadline = time.monotonic() + 60
        while len(list(folder.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        parent.kill()
        parent.wait()
    pids = {int(p.name) for p in folder.iterdir()}
    assert len(pids) == 2 and parent.pid not in pids
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), "a worker outlived its parent"


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has left


def test_a_unit_whose_worker_died_once_is_sent_again(tmp_path: Path) -> None:
    with Pool(1, init, "cfg") as pool:
        assert pool.submit(die_once, [str(tmp_path / "m")]).result(timeout=60) == ["survived"]
        assert pool.stats.deaths == 1


def test_a_unit_that_kills_its_worker_twice_is_lost_and_the_pool_goes_on() -> None:
    with Pool(1, init, "cfg") as pool:
        with pytest.raises(Lost, match=r"exit code 4\), twice"):
            pool.submit(die_always, [1]).result(timeout=60)
        assert pool.submit(double, [1]).result(timeout=60)[0][2] == 2


def test_outside_a_worker_the_watch_does_nothing() -> None:
    w = Watch()
    w.arm(statement_key("x"), 0.0)
    w.disarm()
    assert w.poisoned == frozenset()


TRAINER = """\
import operator, sys, threading, time
from rose_sql.reward import RewardScorer
from rose_sql.engines.workers import Pool
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # threads: workers are spawned
def main():
    scorer = RewardScorer()
    with open(sys.argv[1], "a") as f:
        f.write("trained\\n")  # the work that must not run twice
    with Pool(1, operator.is_, None) as pool:
        print(pool.submit(operator.add, [1, 2]).result(timeout=60))
"""


@pytest.mark.parametrize("guard", [True, False])
def test_a_script_without_a_main_guard_stops_in_its_worker_before_its_work(tmp_path: Path, guard: bool) -> None:
    """Spawn runs the caller's script again in the worker: without a main guard, the worker's run of
    it stops where it first reaches ROSE-SQL, saying why, and the script's work runs once."""
    import subprocess
    import sys

    script, marker = tmp_path / "train.py", tmp_path / "trained.txt"
    script.write_text(TRAINER + ('if __name__ == "__main__":\n    main()\n' if guard else "main()\n"))
    done = subprocess.run([sys.executable, str(script), str(marker)], capture_output=True, text=True, timeout=120)
    assert marker.read_text() == "trained\n"  # once: no worker ran the script's work
    if guard:
        assert done.returncode == 0 and done.stdout.strip() == "[1, 2]", done.stderr
    else:
        assert done.returncode != 0 and "Lost" in done.stderr  # the parent: its unit's worker kept dying
        assert "UsageError" in done.stderr and 'if __name__ == "__main__":' in done.stderr  # each worker: why
