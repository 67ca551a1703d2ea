"""Every file and reply that comes in is read within bounds (issue 35), measured.

- The Batch API's output and error files are streamed line by line, each line at most the chat reply's cap plus
  its envelope, each file at most its requests' worth of lines: 512 MiB of padding in them kept ``rose run
  --batch`` at a peak RSS of 1.68 GB; a line past the cap is that request's ``judge_error``.
- A run folder's ``records.jsonl`` is read line by line, each line at most 64 MiB: one line of 1 GiB made ``rose
  compare`` and ``rose diff`` take 4.27 GB; now it is refused naming the file and line (exit 2). ``summary.json``
  and ``manifest.json`` are read at most their cap, labels files line by line.
- A record outside the layout's ranges (a score of 100 or -1, a negative count, a reading past 1) is refused,
  naming the file, line and field (a score of 100 showed as ROSE 10000.00).
- ``--judge-gguf`` takes a regular file whose GGUF header reads and declares its size, checked before it is
  hashed: a FIFO blocked forever, a sparse 8 GiB file starting with the magic was hashed for 48 s. The hash is
  kept by (path, size, modification time).

Peak memory is measured as ``tests/test_worker_memory.py`` does: a fresh interpreter runs the command and reports
its own ``VmHWM`` (and its children's ``ru_maxrss``). Large files are sparse (no disk is written for their
holes), and the padding is made as it is sent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import make_record, write_records

from rose_sql.cli import main
from rose_sql.errors import InputError
from rose_sql.judges.batch import _Lines, _Long, _result_line
from rose_sql.judges.local import local_model
from rose_sql.record import Record, read_records
from rose_sql.testing import Reply, ScriptedOpenAI, by_content
from rose_sql.testing.batches import BatchScript
from rose_sql.testing.gguf import write_gguf

linux = pytest.mark.skipif(sys.platform != "linux", reason="peak memory is read from Linux's /proc")

GIB = 2**30
SCHEMA = """
CREATE TABLE player (id INTEGER PRIMARY KEY, name TEXT NOT NULL, age INTEGER);
INSERT INTO player VALUES (1, 'Ana', 23), (2, 'Ben', 31), (3, 'Cleo', 27), (4, 'Dan', 19);
"""
GOLD = "SELECT name FROM player WHERE age > 25"
PROVER_NO = {"expected_answer": "e", "sql_behaviour": "b", "reasoning": "misses the filter", "answers_question": False}

MEASURED = """
import json, resource, sys
from rose_sql.cli import main
code = 0
try:
    main(json.loads(sys.argv[1]), standalone_mode=False)
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else 1
except Exception as e:
    print(f"{type(e).__name__}: {e}", file=sys.stderr)
    code = 1
own = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"code": code, "peak_mb": own // 1024, "children_mb": children // 1024}))
"""
"""``rose`` in a fresh interpreter (its peak is its own: Linux carries a process's high-water mark across exec, so
``ru_maxrss`` would report the pytest process's), with its exit code and peaks."""


def measured(args: list[str], timeout: float = 300) -> tuple[dict[str, Any], str]:
    """Run ``rose ARGS`` in a fresh interpreter: its exit code and peak RSS in MB (its own and its workers'),
    and what it printed on standard error."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "OPENAI_API_KEY": "test"}
    done = subprocess.run(
        [sys.executable, "-c", MEASURED, json.dumps([str(a) for a in args])],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def sparse_line_file(path: Path, head: bytes, hole: int, tail: bytes = b"") -> Path:
    """A file of ``head``, ``hole`` bytes the file system does not store (they read as NUL), and ``tail``."""
    with path.open("wb") as f:
        f.write(head)
        f.truncate(len(head) + hole)
        f.seek(len(head) + hole)
        f.write(tail)
    return path


# --------------------------------------------------------------------------- the Batch API's result files


@pytest.fixture
def league(make_db: Callable[..., Path]) -> Path:
    return make_db(SCHEMA, db_id="league").parent.parent


def batch_items(tmp_path: Path, n: int = 2) -> Path:
    rows = [
        {"id": i, "db_id": "league", "question": f"Q{i}: older than 25?", "gold_sql": GOLD,
         "pred_sql": f"SELECT name FROM player WHERE id <> {i}"}
        for i in range(1, n + 1)
    ]  # fmt: skip
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def batch_args(items: Path, league: Path, out: Path, srv: ScriptedOpenAI, cache: Path) -> list[str]:
    return [
        "run", str(items), "--db-root", str(league), "--out", str(out), "--judge-model", "gpt-4o-mini",
        "--judge-base-url", srv.base_url, "--cache-dir", str(cache), "--batch", "--batch-poll", "0.01",
        "--max-retries", "0", "--workers", "1",
    ]  # fmt: skip


def records_of(out: Path) -> dict[Any, dict[str, Any]]:
    return {r["id"]: r for r in map(json.loads, (out / "items" / "records.jsonl").read_text().splitlines())}


def first_request_fails_once(cid: str, body: dict[str, Any], sent_before: int) -> str | None:
    """The error file has a line too: Q1's first request fails once (a 500 from the model)."""
    return "the model is overloaded" if sent_before == 0 and "Q1:" in json.dumps(body) else None


@linux
@pytest.mark.slow  # a load test: a run's peak memory on files padded to many megabytes (5 s)
@pytest.mark.parametrize("pad_line", [0, 4096], ids=["inside a line", "in lines after"])
def test_padded_batch_result_files_keep_the_runs_memory_bounded(tmp_path: Path, league: Path, pad_line: int) -> None:
    """512 MiB of padding in each output and error file, inside the first line or in lines after the real ones:
    the run's peak RSS stays under 400 MB (it was 1.68 GB). Padding inside the first line makes it longer than
    any line may be, and the file longer than its requests may fill: what was not read is not answered, the
    requests fail as a batch's unanswered requests do (judge_error once their attempts are spent); padding after
    the lines leaves every request answered."""
    items = batch_items(tmp_path)
    script = BatchScript(fail=first_request_fails_once, pad_bytes=512 * 2**20, pad_line=pad_line)
    with ScriptedOpenAI(by_content(lambda _text: Reply(content=json.dumps(PROVER_NO))), batch=script) as srv:
        peak, stderr = measured(batch_args(items, league, tmp_path / "out", srv, tmp_path / "cache"))
        batches = srv.batch.batches
    files = {b.get(name) for b in batches for name in ("output_file_id", "error_file_id")} - {None}
    assert len(files) >= 2, "the padded files were not sent"
    assert peak["peak_mb"] < 400 and peak["children_mb"] < 400, (peak, stderr[-2000:])
    records = records_of(tmp_path / "out")
    if pad_line:
        assert peak["code"] == 0 and all((r["score"], r["decided_by"]) == (0, "prover") for r in records.values())
    else:
        assert peak["code"] == 3 and all(r["unscored_reason"] == "judge_error" for r in records.values())
        errors = [c["error"] for r in records.values() for c in r["judges"]]
        assert all("read no further" in e for e in errors), errors


def test_a_result_line_past_the_cap_is_that_requests_judge_error(tmp_path: Path, league: Path) -> None:
    """A first line of 4 MiB (padding inside it, the file still within its cap): its request fails (each attempt,
    then judge_error, saying why); the other request, on the next line, is answered and scored."""
    items = batch_items(tmp_path)
    script = BatchScript(pad_bytes=4 * 2**20, pad_line=0)
    with ScriptedOpenAI(by_content(lambda _text: Reply(content=json.dumps(PROVER_NO))), batch=script) as srv:
        result = CliRunner().invoke(main, batch_args(items, league, tmp_path / "out", srv, tmp_path / "cache"))
    assert result.exit_code == 3, result.output
    records = records_of(tmp_path / "out")
    failed = [r for r in records.values() if r["unscored_reason"] == "judge_error"]
    scored = [r for r in records.values() if r["score"] == 0]
    assert len(failed) == len(scored) == 1, records
    (call,) = failed[0]["judges"]
    assert "the result line has more than" in call["error"] and "read no further" in call["error"]


def test_long_lines_are_cut_with_their_custom_id_and_memory_holds_one_line() -> None:
    cap = 100
    cid = "rose-" + "0" * 32
    long = b'{"id": "x", "custom_id": "' + cid.encode() + b'", "response": {"body": "' + b"y" * 500 + b'"}}'
    short = json.dumps({"custom_id": "rose-" + "1" * 32, "response": None}).encode()
    lines = _Lines(cap)
    got: list[Any] = []
    data = long + b"\n" + short + b"\n" + b"z" * 1000
    for i in range(0, len(data), 7):  # in pieces that cut the custom id
        got += list(lines.feed(data[i : i + 7]))
        assert len(lines.buf) <= cap
    got += list(lines.end())
    assert isinstance(got[0], _Long) and got[0].custom_id == cid and got[0].size == len(long)
    assert got[1] == short and isinstance(got[2], _Long) and got[2].custom_id is None
    assert (
        _result_line(got[0], cap) == f"{cid}\0the result line has more than {cap} bytes ({len(long)}), read no further"
    )
    assert _result_line(got[2], cap) is None and _result_line(b"   ", cap) is None


# --------------------------------------------------------------------------- run folders


def run_folder(path: Path, *scores: int | None) -> Path:
    return write_records(path, [make_record({"id": i, "score": s}) for i, s in enumerate(scores, start=1)])


def with_huge_line(folder: Path, size: int = GIB) -> Path:
    """``folder``'s records.jsonl with a second line of ``size`` bytes (a hole of NULs inside a JSON string)."""
    records = folder / "records.jsonl"
    first = records.read_bytes().splitlines()[0] + b"\n"
    sparse_line_file(records, first + b'{"id": 2, "pad": "', size, b'"}\n')
    return records


@linux
@pytest.mark.parametrize("command", ["compare", "diff"])
def test_a_one_gib_record_line_is_refused_in_bounded_memory(tmp_path: Path, command: str) -> None:
    """``rose compare`` and ``rose diff`` on a run whose records.jsonl holds a line of 1 GiB: refused (exit 2)
    naming the file and line, under 500 MB of peak RSS (it was 4.27 GB, and 24.6 s / 15.6 s)."""
    huge = with_huge_line(run_folder(tmp_path / "huge", 1, 0))
    other = run_folder(tmp_path / "other", 1, 0)
    args = ["compare", str(huge.parent)] if command == "compare" else ["diff", str(other), str(huge.parent)]
    start = time.monotonic()
    peak, stderr = measured(args)
    seconds = time.monotonic() - start
    assert peak["code"] == 2, (peak, stderr)
    assert f"{huge}:2: a line longer than 64 MiB" in " ".join(stderr.split()), stderr
    assert peak["peak_mb"] < 500, (peak, f"{seconds:.1f} s")


@pytest.mark.parametrize(
    ("name", "cap"), [("summary.json", "64 MiB"), ("manifest.json", "16 MiB")], ids=["summary", "manifest"]
)
def test_an_oversize_summary_or_manifest_is_refused_unread(tmp_path: Path, name: str, cap: str) -> None:
    folder = run_folder(tmp_path / "run", 1, 0)
    sparse_line_file(folder / name, b"{", GIB)
    result = CliRunner().invoke(main, ["compare", str(folder)])
    assert result.exit_code == 2 and f"larger than {cap}" in result.output and name in result.output, result.output


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"score": 100}, "score: 100 is not 0, 1 or null"),
        ({"score": -1}, "score: -1 is not 0, 1 or null"),
        ({"score": True}, "score: True is not 0, 1 or null"),
        ({"llm_calls": -3}, "llm_calls: -3 is not a count of at least 0"),
        ({"readings": {"bird_ex": 2}}, "readings.bird_ex: 2 is not 0, 1 or null"),
        ({"readings": {"soft_f1": 1.5}}, "readings.soft_f1: 1.5 is not a number from 0 to 1, or null"),
        ({"pred": {"status": "ok", "seconds": 0.1, "row_count": -4}}, "pred.row_count: -4 is not a count"),
    ],
    ids=["score 100", "score -1", "score true", "negative calls", "bird_ex 2", "soft_f1 1.5", "negative rows"],
)
def test_a_record_outside_the_layouts_ranges_is_refused_naming_file_line_and_field(
    tmp_path: Path, change: dict[str, Any], said: str
) -> None:
    """A score of 100 showed as ROSE 10000.00, -1 as -100.00: the layout's ranges are checked as records are
    read, and the command stops naming the file, line and field (exit 2)."""
    folder = run_folder(tmp_path / "run", 1, 0)
    lines = (folder / "records.jsonl").read_text().splitlines()
    data = {**json.loads(lines[1]), **change}
    (folder / "records.jsonl").write_text(lines[0] + "\n" + json.dumps(data) + "\n")
    result = CliRunner().invoke(main, ["compare", str(folder)])
    assert result.exit_code == 2, result.output
    assert f"records.jsonl:2: not a valid record: {said}" in " ".join(result.output.split()), result.output


def test_records_of_every_range_edge_are_read(tmp_path: Path) -> None:
    """The ranges refuse only what rose never writes: nulls, 0 and 1, shares of 0 and 1, zero counts are read."""
    edges = make_record({"id": 1, "score": None, "readings": {"soft_f1": 0.0, "bird_ex": 1}, "llm_calls": 0})
    folder = write_records(tmp_path / "run", [edges, make_record({"id": 2, "score": 0})])
    assert [r.score for r in read_records(folder / "records.jsonl")] == [None, 0]
    assert Record.from_dict(json.loads(edges.to_json())) == edges


def test_a_labels_file_with_an_oversize_line_is_refused_naming_it(tmp_path: Path) -> None:
    run = run_folder(tmp_path / "run", 1, 0)
    labels = sparse_line_file(tmp_path / "labels.jsonl", b'{"id": 1, "label": true}\n{"id": 2, "pad": "', GIB, b'"}\n')
    result = CliRunner().invoke(main, ["agree", str(run), "--labels", str(labels)])
    assert result.exit_code == 2, result.output
    assert f"{labels}:2: a line longer than 16 MiB" in " ".join(result.output.split()), result.output


def test_a_torn_tail_is_dropped_without_reading_the_file_whole(tmp_path: Path) -> None:
    from rose_sql.record import RecordWriter

    folder = run_folder(tmp_path / "run", 1, 0)
    path = folder / "records.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"id": 3, "torn')
    RecordWriter(path).close()
    assert path.read_bytes() == whole


# --------------------------------------------------------------------------- --judge-gguf


@pytest.fixture
def gguf_run(tmp_path: Path) -> Callable[[Path], tuple[int, str, float]]:
    """``rose run --judge-gguf FILE`` in a fresh process, stopped after 15 s: its exit code, output and time."""
    (tmp_path / "p.json").write_text("[]")

    def run(model: Path) -> tuple[int, str, float]:
        args = ["run", str(tmp_path / "p.json"), "--db", str(tmp_path), "--out", str(tmp_path / "o")]
        start = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "rose_sql", *args, "--judge-gguf", str(model), "--no-cache"],
            capture_output=True,
            text=True,
            timeout=15,
            env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
        )
        return done.returncode, " ".join((done.stdout + done.stderr).split()), time.monotonic() - start

    return run


def test_a_fifo_is_refused_at_once(tmp_path: Path, gguf_run: Callable[[Path], tuple[int, str, float]]) -> None:
    """A FIFO blocked the run forever with no output; it is refused before it is opened."""
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    code, output, _seconds = gguf_run(fifo)
    assert code == 2 and "model.gguf: is not a regular file" in output, output


def test_a_sparse_file_that_only_starts_like_a_gguf_is_refused_before_hashing(
    tmp_path: Path, gguf_run: Callable[[Path], tuple[int, str, float]]
) -> None:
    """8 GiB of which only the magic is written was hashed for 48 s before the run failed; the header's check
    refuses it first. So does a header that reads but declares less than the file holds."""
    sparse = sparse_line_file(tmp_path / "sparse.gguf", b"GGUF", 8 * GIB)
    code, output, _seconds = gguf_run(sparse)
    assert code == 2 and "sparse.gguf: GGUF version 0 is not one this reads" in output, output
    padded = write_gguf(tmp_path / "padded.gguf", {"general.name": "m"}, [("w", 16)], sparse=True, extra=8 * GIB)
    code, output, _seconds = gguf_run(padded)
    assert code == 2 and "but its GGUF header declares" in output, output


def test_a_cut_or_wrong_gguf_is_refused_naming_what_is_wrong(tmp_path: Path) -> None:
    pytest.importorskip("xllamacpp", reason="the optional extra rose-sql[local] is not installed")
    whole = write_gguf(tmp_path / "m.gguf", {"general.name": "m"}, [("w", 64), ("v", 10)])
    local_model(whole)  # reads
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole.read_bytes()[:-8])
    with pytest.raises(InputError, match=r"cut\.gguf: is \d+ bytes, but its GGUF header declares"):
        local_model(cut)
    header = tmp_path / "header.gguf"
    header.write_bytes(whole.read_bytes()[:40])
    with pytest.raises(InputError, match="header is cut short"):
        local_model(header)
    big = tmp_path / "big.gguf"
    big.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (2**40).to_bytes(8, "little") + bytes(8))
    with pytest.raises(InputError, match="declares 1,099,511,627,776 tensors"):
        local_model(big)
    with pytest.raises(InputError, match="is a folder"):
        local_model(tmp_path)


def test_the_hash_is_kept_by_path_size_and_time_and_shown_as_it_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("xllamacpp", reason="the optional extra rose-sql[local] is not installed")
    import rose_sql.judges.local as local

    model = write_gguf(tmp_path / "m.gguf", {"general.name": "m"}, [("w", 3 * 2**20)])
    hashed: list[Path] = []
    real = local.sha256_of

    def counting(path: Path, fd: int | None = None, progress: Any = None) -> str:
        hashed.append(path)
        return real(path, fd, progress)

    monkeypatch.setattr(local, "sha256_of", counting)
    seen: list[tuple[int, int]] = []
    first = local_model(model, hashes=tmp_path / "cache", progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (model.stat().st_size, model.stat().st_size) and len(seen) == 4  # 4 MiB blocks
    assert local_model(model, hashes=tmp_path / "cache").sha256 == first.sha256 and len(hashed) == 1  # kept
    os.utime(model, ns=(model.stat().st_atime_ns, model.stat().st_mtime_ns + 10**9))  # the file touched
    assert local_model(model, hashes=tmp_path / "cache").sha256 == first.sha256 and len(hashed) == 2
    assert local_model(model).sha256 == first.sha256 and len(hashed) == 3  # no cache folder: hashed each time
