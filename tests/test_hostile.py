"""Hostile SQL against the sandbox: nothing is written, nothing escapes, everything is bounded.

Each case runs on a small database built for the test and, read in place (never copied), on the
real Spider ``concert_singer`` database, in this process (``watch=Watch()``: the memory measured is the
sandbox's). For every case: ``Executor.run`` does not raise, the
status is what the kind of attack demands, the database file is byte-identical, no ``-journal``,
``-wal`` or ``-shm`` file appears, no file named by the SQL is created, the process's peak memory
grows by less than 500 MB and the call returns (a generous hang guard, not a timing assertion).
The whole set then goes through the real ``rose run`` command. The cases are data:
``tests/cases/hostile.json``.

Kinds: ``write`` (a write or side effect: rejected or an error), ``bomb`` (a read that must be
stopped: timeout, error, rejected, or guard when the wall-clock guard came first), ``capped`` (a read
SQLite or the caps cut down: any status, but a bounded result), ``inert`` (harmless text that looks
hostile: runs as the plain SELECT it is).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import peak_rss_growth, sha256, write_items

import rose_sql.engines.base
import rose_sql.sql
from rose_sql.config import Config
from rose_sql.engines import Database
from rose_sql.engines.execute import Executor
from rose_sql.engines.workers import Watch
from rose_sql.results import Execution
from rose_sql.sql import gate, has_top_level_order_by, strip_comments

TIMEOUT_S = 0.5
MAX_SQL_CHARS = Config().max_sql_chars
CONFIG = Config(max_steps=10_000_000, timeout_s=TIMEOUT_S, count_past_cap_steps=5_000_000, workers=2)
HANG_GUARD_S = 10.0  # catches a hang only
MEMORY_BOUND_MB = 500
SIDE_FILES = ("-journal", "-wal", "-shm")

SMALL_DB = """
CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT);
CREATE INDEX t_b ON t (b);
CREATE VIEW v AS SELECT a FROM t;
CREATE TABLE log (x);
CREATE TRIGGER t_ins AFTER INSERT ON t BEGIN INSERT INTO log VALUES (new.a); END;
INSERT INTO t VALUES (1, 'x'), (2, 'y'), (3, 'z');
"""


@dataclass(frozen=True)
class Case:
    id: str
    sql: str
    """With ``{t}`` for a table of the database and ``{evil}`` for a path that must not appear."""
    kind: str


def sql_of(spec: str | list[Any]) -> str:
    """A case's SQL as the data file gives it: its text, or (the long ones) its parts, each a text or
    ``[text, times]``, joined."""
    return spec if isinstance(spec, str) else "".join(p if isinstance(p, str) else p[0] * p[1] for p in spec)


CASES = [
    Case(c["id"], sql_of(c["sql"]), c["kind"])
    for c in json.loads((Path(__file__).parent / "cases" / "hostile.json").read_text(encoding="utf-8"))
]
"""The corpus, in tests/cases/hostile.json (escapes keep its NUL and lone surrogates as they are)."""
WRITES = [c for c in CASES if c.kind == "write"]
REAL_DB = Path("spider/database/concert_singer/concert_singer.sqlite")


def bounded_result(e: Execution, config: Config) -> bool:
    if e.result is None:
        return True
    r = e.result
    size = sum(16 * len(row) + sum(len(v) for v in row if isinstance(v, str | bytes)) for row in r.rows)
    return len(r.rows) <= config.max_rows and size <= config.max_result_bytes


def check_case(case: Case, db: Path, table: str, tmp: Path, executor: Executor) -> None:
    """Run one hostile case and check everything the sandbox promises."""
    evil = tmp / "evil.db"
    sql = case.sql.replace("{t}", table).replace("{evil}", str(evil))
    listing = sorted(p.name for p in db.parent.iterdir())
    digest = sha256(db)
    lite = Database.file(db)
    count = executor.run(lite, f"SELECT count(*) FROM {table}").result
    assert count is not None
    with peak_rss_growth() as growth:
        start = time.monotonic()
        e = executor.run(lite, sql)  # must not raise
        elapsed = time.monotonic() - start
    assert elapsed < HANG_GUARD_S
    assert growth[0] < MEMORY_BOUND_MB, f"peak RSS grew by {growth[0]} MB"
    if case.kind == "write":
        assert e.status in ("rejected", "error"), (e.status, e.error)
    elif case.kind == "bomb":
        assert e.status in ("timeout", "error", "rejected", "guard"), (e.status, e.result)
    elif case.kind == "inert":
        assert e.status == "ok" and e.result is not None, (e.status, e.error)
        assert e.result.rows == ((1,),)
    assert e.ok == (e.status == "ok") and (e.result is not None) == e.ok
    assert e.ok or e.error
    assert bounded_result(e, executor.config)
    assert sha256(db) == digest
    assert sorted(p.name for p in db.parent.iterdir()) == listing
    assert not any(db.with_name(db.name + s).exists() for s in SIDE_FILES)
    assert not evil.exists()
    # the connection is as locked-down and as usable as before
    again = executor.run(lite, f"SELECT count(*) FROM {table} WHERE 1 = 1")
    assert again.result is not None and again.result.rows == count.rows, (again.status, again.error)


@pytest.fixture
def small_db(make_db: Callable[..., Path]) -> Path:
    return make_db(SMALL_DB, db_id="hostile")


@pytest.fixture(scope="module")
def real_db(shared: Path) -> Path:
    """The shared Spider concert_singer database, read in place."""
    path = shared / REAL_DB
    if not path.is_file():
        pytest.skip(f"the real Spider database {path} is absent (shared data sits beside the repository in CI)")
    return path


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_sql_on_a_small_db(case: Case, small_db: Path, tmp_path: Path) -> None:
    with Executor(CONFIG, watch=Watch()) as ex:
        check_case(case, small_db, "t", tmp_path, ex)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_sql_on_the_real_spider_db(case: Case, real_db: Path, tmp_path: Path) -> None:
    before = sha256(real_db)
    with Executor(CONFIG, watch=Watch()) as ex:
        check_case(case, real_db, "singer", tmp_path, ex)
    assert sha256(real_db) == before


@pytest.mark.parametrize("case", WRITES, ids=[c.id for c in WRITES])
def test_the_sandbox_alone_stops_writes(
    case: Case, small_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defence in depth: with the lexical gate switched off, SQLite's own locks still refuse every write."""
    monkeypatch.setattr(rose_sql.engines.base, "gate", lambda sql, max_chars, dialect: None)
    with Executor(CONFIG, watch=Watch()) as ex:
        check_case(case, small_db, "t", tmp_path, ex)


def test_denied_statements_leave_no_journal_even_when_sqlite_sees_them(small_db: Path, tmp_path: Path) -> None:
    """Every write, gate off, one connection in a row: still no -journal/-wal and the same bytes."""
    digest = sha256(small_db)
    with Executor(CONFIG, watch=Watch()) as ex:
        for case in WRITES:
            sql = case.sql.replace("{t}", "t").replace("{evil}", str(tmp_path / "evil.db"))
            conn = ex.engine("sqlite").conn(Database.file(small_db), "pred").conn  # type: ignore[attr-defined]
            with pytest.raises(Exception):  # noqa: B017 - any refusal will do, as long as nothing is written
                conn.execute(sql).fetchall()
    assert sha256(small_db) == digest
    assert sorted(p.name for p in small_db.parent.iterdir()) == [small_db.name]


# --------------------------------------------------------------------------- the lexical gate


WEIRD = [
    "SELECT 'abc",
    'SELECT "abc',
    "SELECT /* abc",
    "SELECT [abc",
    "SELECT x'zz'",
    "SELECT '\udcff'",
    "\ud800",
    "SELECT $$; DROP TABLE t; $$",
    "SELECT \u2028 1 \ufeff",
    "SELECT " + "(" * 100_000,
    "SELECT " + "/*" * 90_000,
    "x" * 300_000,
    "",
    "   \n\t ",
    "-- only a comment",
    ";;;",
]


@pytest.mark.parametrize("sql", WEIRD, ids=range(len(WEIRD)))
def test_gate_and_helpers_never_raise(sql: str) -> None:
    reason = gate(sql, max_chars=MAX_SQL_CHARS)
    assert reason is None or isinstance(reason, str)
    assert isinstance(strip_comments(sql), str)
    assert isinstance(has_top_level_order_by(sql), bool)


def test_gate_survives_random_text() -> None:
    rng = random.Random(20260101)
    alphabet = "'\"`[]()/*-;\\$#@?:xX0123 \n\t\x01\udcff\u00e9SELECTWITH"
    for _ in range(3000):
        sql = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        gate(sql, max_chars=MAX_SQL_CHARS)
        strip_comments(sql)
        has_top_level_order_by(sql)


@pytest.mark.parametrize("exc", [RecursionError, KeyError, IndexError, AttributeError, MemoryError, TypeError])
def test_gate_survives_any_tokenizer_exception(exc: type[Exception], monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def tokenize(self, sql: str) -> Any:
            raise exc("tokenizer broke")

    monkeypatch.setattr(rose_sql.sql, "_tools", lambda dialect: (Broken(), None))
    caches = (rose_sql.sql._memo, has_top_level_order_by, rose_sql.sql.tables_read)
    for cache in caches:
        cache.cache_clear()
    try:
        assert gate("SELECT 1; SELECT 2", max_chars=MAX_SQL_CHARS) is None  # SQLite decides, and the sandbox holds
        assert strip_comments("SELECT 1 -- x").strip() == "SELECT 1"  # our own lexer, then
        assert has_top_level_order_by("SELECT a FROM t ORDER BY a") is True
        assert rose_sql.sql.tables_read("SELECT a FROM t") == frozenset()
        assert (rose_sql.sql.parse("SELECT 1").error or "").startswith(f"{exc.__name__}: ")
    finally:
        for cache in caches:
            cache.cache_clear()


def test_the_gates_shortcut_agrees_with_the_tokenizer(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(20261130)
    words = [
        "SELECT",
        "select",
        "WITH",
        "values",
        "(",
        ")",
        ";",
        " ",
        "\n",
        "--",
        "/*",
        "*/",
        "'",
        '"',
        "x",
        "1",
        "DROP",
    ]
    texts = [*WEIRD, *(c.sql for c in CASES), "SELECT 1;", "select 1 ; \n", "(SELECT 1)", "selectx 1", "WITH$ 1"]
    texts += ["".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(3000)]
    fast = [gate(sql, max_chars=MAX_SQL_CHARS) for sql in texts]
    assert rose_sql.sql._plainly_one_select("SELECT a FROM t WHERE b = ';' ;") is False
    assert rose_sql.sql._plainly_one_select("  select a from t;  ") is True  # the common case takes it
    monkeypatch.setattr(rose_sql.sql, "_plainly_one_select", lambda sql: False)
    assert [gate(sql, max_chars=MAX_SQL_CHARS) for sql in texts] == fast


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT '\udcff'", "not valid Unicode"),
        ("SELECT 1\x00", "NUL"),
        ("SELECT 1; SELECT 2", "2 statements"),
        ("DROP TABLE t", "not a SELECT"),
        ("", "empty"),
        ("-- nothing", "only comments"),
        ("SELECT " + "1" * 200_001, "longer than"),
    ],
)
def test_gate_reasons(sql: str, reason: str) -> None:
    assert reason in (gate(sql, max_chars=MAX_SQL_CHARS) or "")


# --------------------------------------------------------------------------- through the real CLI


def rose_command() -> list[str]:
    script = Path(sys.executable).with_name("rose")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rose_sql"]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def has_surrogate(sql: str) -> bool:
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


CLI_CASES = [c for c in CASES if not has_surrogate(c.sql)]
SURROGATE_CASES = [c for c in CASES if has_surrogate(c.sql)]


def run_cli(cases: list[Case], db: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``rose run`` on a generic JSONL of the cases (gold: a simple count) with a small step budget."""
    evil = tmp_path / "evil.db"
    items = [
        {
            "id": c.id,
            "db_id": db.parent.name,
            "question": "How many rows does t have?",
            "evidence": "",
            "gold_sql": "SELECT count(*) FROM t",
            "pred_sql": c.sql.replace("{t}", "t").replace("{evil}", str(evil)),
        }
        for c in cases
    ]
    preds = tmp_path / "hostile.jsonl"
    write_items(preds, items)
    out = tmp_path / "out"
    cmd = [*rose_command(), "run", str(preds), "--db-root", str(db.parent.parent), "--out", str(out)]
    cmd += ["--max-steps", str(CONFIG.max_steps), "--timeout", "30", "--workers", "2"]  # stopped by steps: a 0
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"})
    return proc, out / "hostile"


def check_cli_records(cases: list[Case], out: Path) -> None:
    records = read_jsonl(out / "records.jsonl")
    by_id = {r["id"]: r for r in records}
    assert len(records) == len(cases) == len(by_id)
    assert set(by_id) == {c.id for c in cases}
    for c in cases:
        r = by_id[c.id]
        assert r["gold"]["status"] == "ok", (c.id, r["gold"])
        if c.kind in ("write", "bomb"):
            assert (r["score"], r["decided_by"]) == (0, "execution"), (c.id, r["pred"]["status"], r["why"])
            assert r["pred"]["status"] in ("rejected", "error", "timeout"), (c.id, r["pred"])
        elif c.kind == "inert":
            assert r["pred"]["status"] == "ok" and r["pred"]["preview"] == [[1]], (c.id, r["pred"])
        else:
            assert r["score"] != 1, (c.id, r)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == len(cases)


@pytest.mark.slow
def test_hostile_set_through_rose_run(make_db: Callable[..., Path], tmp_path: Path) -> None:
    db = make_db(SMALL_DB, db_id="hostile")
    digest = sha256(db)
    proc, out = run_cli(CLI_CASES, db, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_cli_records(CLI_CASES, out)
    assert sha256(db) == digest
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name]
    assert not (tmp_path / "evil.db").exists()


def test_lone_surrogates_through_rose_run(make_db: Callable[..., Path], tmp_path: Path) -> None:
    db = make_db(SMALL_DB, db_id="hostile")
    digest = sha256(db)
    proc, out = run_cli(SURROGATE_CASES, db, tmp_path)
    assert sha256(db) == digest
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_cli_records(SURROGATE_CASES, out)


# --------------------------------------------------------------------------- a million rows


MILLION = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 1000000) SELECT x, 'some text' FROM c"
MILLION_GROWTH_MB = 200
"""Peak-RSS growth allowed over the same run of a trivial item. Calibrated on this machine: keeping all
the million rows (``--max-rows 2000000``) grows the peak by about 360 MB; the capped run by about 20 MB."""


_LAUNCH = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""
"""Runs a command as the child of a fresh small interpreter and writes down its peak RSS (KiB). Measured
from here directly, a child's ``ru_maxrss`` starts at the pytest process's own size at the fork (Linux
carries the high-water mark across ``exec``), hundreds of MB late in a full run, which would hide
the growth measured below; a child of a fresh interpreter starts from that interpreter's few MB."""


def run_measured(cmd: list[str], tmp_path: Path, name: str) -> tuple[int, int, str]:
    """Run a command; its exit code, its own peak RSS in MB (from wait4, in a fresh parent) and its stderr."""
    peak = tmp_path / f"{name}.peak"
    launch = [sys.executable, "-c", _LAUNCH, str(peak), *cmd]
    with (tmp_path / f"{name}.out").open("wb") as out, (tmp_path / f"{name}.err").open("wb") as err:
        proc = subprocess.Popen(
            launch, stdout=out, stderr=err, env={**os.environ, "NO_COLOR": "1"}, start_new_session=True
        )
        try:
            proc.wait(timeout=120)  # a hang guard only
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            raise
    return proc.returncode, int(peak.read_text()) // 1024, (tmp_path / f"{name}.err").read_text(errors="replace")


@pytest.mark.slow
def test_a_million_row_prediction_is_truncated_counted_and_bounded(
    make_db: Callable[..., Path], tmp_path: Path
) -> None:
    db = make_db("CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2);", db_id="m")
    peaks = {}
    for name, pred in (("trivial", "SELECT 1"), ("million", MILLION)):
        preds = tmp_path / f"{name}.jsonl"
        item = {"id": 1, "db_id": "m", "question": "q", "evidence": "", "gold_sql": "SELECT a FROM t", "pred_sql": pred}
        write_items(preds, [item])
        cmd = [*rose_command(), "run", str(preds), "--db-root", str(db.parent.parent), "--out", str(tmp_path / "out")]
        code, peaks[name], stderr = run_measured(cmd, tmp_path, name)
        assert code == 0, stderr[-3000:]
    growth = peaks["million"] - peaks["trivial"]
    assert growth < MILLION_GROWTH_MB, f"peak RSS {peaks}: grew by {growth} MB"
    (r,) = read_jsonl(tmp_path / "out" / "million" / "records.jsonl")
    max_rows = Config().max_rows
    assert r["pred"]["status"] == "ok"
    assert (r["pred"]["row_count"], r["pred"]["truncated"], r["pred"]["count_exact"]) == (1_000_000, True, True)
    assert max_rows < 1_000_000
    assert r["comparison"]["equal"] is None and r["comparison"]["reason"] == "truncated"
    assert r["readings"]["bird_ex"] is None and r["readings"]["soft_f1"] is None
    assert r["readings"]["ts_ex"] is None and r["readings"]["ts_ex_keep_distinct"] is None
    assert r["score"] is None  # undecidable here, never a wrong 0 or 1
    with Executor(watch=Watch()) as ex:  # the rows kept are exactly the first max_rows
        kept = ex.run(Database.file(db), MILLION).result
        assert kept is not None and kept.truncated and len(kept.rows) == max_rows
        assert kept.rows[-1] == (max_rows, "some text")
