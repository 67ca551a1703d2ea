"""The pinned local judge's plumbing, without a model: identity, refusals, a server that cannot start.

The real model runs in tests/test_llama_server.py (the real-server lane); these run everywhere in seconds.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rose_sql.cli import main
from rose_sql.config import JudgeConfig
from rose_sql.errors import InputError, UsageError
from rose_sql.judges.llm import OpenAILLM
from rose_sql.judges.local import endpoint_of, local_model
from rose_sql.testing.gguf import write_gguf


def _fake_gguf(path: Path, body: bytes = b"not really a model") -> Path:
    """A GGUF header that reads, and no model in it (llama.cpp cannot load it)."""
    return write_gguf(path, {"general.name": body.decode()})


def test_identity_is_the_files_hash_and_the_cache_key_ignores_the_port(tmp_path: Path) -> None:
    pytest.importorskip("xllamacpp", reason="the optional extra rose-sql[local] is not installed")
    one = local_model(_fake_gguf(tmp_path / "a.gguf"))
    assert one.sha256 == hashlib.sha256((tmp_path / "a.gguf").read_bytes()).hexdigest()
    assert one.runtime.startswith("xllamacpp ")
    other = local_model(_fake_gguf(tmp_path / "b.gguf", b"another model"))
    llm = OpenAILLM(JudgeConfig(model="m", local=one, cache_dir=None))
    assert llm.endpoint == endpoint_of(one) == f"gguf:sha256:{one.sha256}"
    messages = [{"role": "user", "content": "q"}]
    key = llm.key(messages)  # type: ignore[arg-type]
    llm.client.base_url = "http://127.0.0.1:1/v1"  # where the server of the day listens
    assert llm.key(messages) == key  # type: ignore[arg-type]
    assert OpenAILLM(JudgeConfig(model="m", local=other, cache_dir=None)).key(messages) != key  # type: ignore[arg-type]


def test_a_file_that_is_no_gguf_is_refused_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"PK\x03\x04 a zip, say")
    with pytest.raises(InputError, match=r"model\.bin: is not a GGUF file"):
        local_model(bad)


def test_options_that_cannot_work_with_judge_gguf_are_refused(tmp_path: Path) -> None:
    gguf = _fake_gguf(tmp_path / "m.gguf")
    args = ["run", str(tmp_path / "p.json"), "--db", str(tmp_path), "--out", str(tmp_path / "o")]
    (tmp_path / "p.json").write_text("[]")
    res = CliRunner().invoke(main, [*args, "--judge-gguf", str(gguf), "--judge-base-url", "http://x/v1"])
    assert res.exit_code == 2 and "--judge-gguf is the judges' endpoint and model" in res.output
    res = CliRunner().invoke(main, [*args, "--judge-model", "m", "--judge-gguf-ctx", "4096"])
    assert res.exit_code == 2 and "--judge-gguf-ctx configures --judge-gguf's server" in res.output


def test_an_option_the_pinned_server_sets_is_refused(tmp_path: Path) -> None:
    """llama.cpp's server takes ``cache_prompt`` or ``seed`` from a request: with --judge-gguf they would change
    what the manifest's ``judge.local.sampling`` says the server does, so they are refused; others pass."""
    pytest.importorskip("xllamacpp", reason="the optional extra rose-sql[local] is not installed")
    gguf = _fake_gguf(tmp_path / "m.gguf")
    args = ["run", str(tmp_path / "p.json"), "--db", str(tmp_path), "--out", str(tmp_path / "o")]
    (tmp_path / "p.json").write_text("[]")
    for option in ("cache_prompt=true", "seed=7"):
        res = CliRunner().invoke(main, [*args, "--judge-gguf", str(gguf), "--judge-option", option])
        key = option.partition("=")[0]
        assert res.exit_code == 2 and f"--judge-option {key}=... is not allowed with --judge-gguf" in res.output
    with pytest.raises(UsageError, match="cache_prompt"):
        JudgeConfig(model="m", local=local_model(gguf), options={"cache_prompt": True, "top_k": 1})
    assert JudgeConfig(model="m", local=local_model(gguf), options={"top_k": 1}).options == {"top_k": 1}


def test_a_server_that_cannot_start_stops_the_run_and_scores_nothing(shared: Path, tmp_path: Path) -> None:
    """A GGUF whose header reads but holds no model: llama.cpp's child exits at load; the run stops with exit 2
    naming the file and the end of the child's log, before any item is judged (infrastructure is never a score)."""
    pytest.importorskip("xllamacpp", reason="the optional extra rose-sql[local] is not installed")
    gguf = _fake_gguf(tmp_path / "broken.gguf", b"no architecture, no tensors")
    labels = json.loads((shared / "rose-vec" / "rose-vec-bird.json").read_text(encoding="utf-8"))
    items = tmp_path / "vec.json"
    items.write_text(json.dumps([x for x in labels if x["db_id"] == "toxicology"][:1]))
    res = CliRunner().invoke(
        main,
        ["run", str(items), "--db", str(shared / "bird"), "--out", str(tmp_path / "o"), "--judge-gguf", str(gguf)],
    )
    assert res.exit_code == 2, res.output
    assert "could not be started" in res.output and "broken.gguf" in res.output
    records = tmp_path / "o" / "vec" / "records.jsonl"
    assert not records.exists() or all(json.loads(line)["score"] is None for line in records.read_text().splitlines())
