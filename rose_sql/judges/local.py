"""The pinned local judge: llama.cpp's server for a GGUF file, in a child process, on loopback.

``rose run --judge-gguf FILE`` makes the judges' endpoint a server that rose starts itself: the
judge client (:class:`rose_sql.judges.llm.LLM`) is unchanged and talks to it over the OpenAI
protocol. The server runs in a child process (``python -m rose_sql.judges.local``) so that
llama.cpp's threads and memory never live in rose's own process, whose workers fork. It is started
at the first call the cache cannot answer (a fully cached rerun starts nothing) and stopped when the
client closes; the child also exits when its standard input closes, so it never outlives rose, even
when rose is killed.

Everything that decides a reply is pinned and recorded: the file's SHA-256 (the cache key's endpoint,
so the port does not matter), the runtime's version, temperature 0, a fixed seed, one slot, the
prompt cache off, one thread, no context shift (:meth:`rose_sql.config.LocalModel.sampling`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import IO

from rose_sql.config import LOCAL_CTX, LocalModel
from rose_sql.errors import EndpointUnreachable, UsageError

__all__ = ["RUNTIME", "LocalServer", "endpoint_of", "local_model", "sha256_of"]

RUNTIME = "xllamacpp"
"""The Python distribution that carries llama.cpp's server."""
_STDERR_TAIL = 2000
"""Characters of the child's log shown when it fails to start."""


HASHES_FILE = "gguf-sha256.json"
"""The GGUF files hashed before, in the cache folder: their SHA-256 by path, size and modification time."""
Progress = Callable[[int, int], None]
"""Told the bytes hashed so far and the file's size, as hashing goes."""


def sha256_of(path: Path, fd: int | None = None, progress: Progress | None = None) -> str:
    """The SHA-256 of a file (open at ``fd`` when given), read in blocks (a 7B GGUF of 4 GB takes about 10 s);
    ``progress`` is told how far it is."""
    h = hashlib.sha256()
    with os.fdopen(os.dup(fd), "rb") if fd is not None else path.open("rb") as f:
        f.seek(0)
        total = os.fstat(f.fileno()).st_size
        done = 0
        while block := f.read(2**22):
            h.update(block)
            done += len(block)
            if progress is not None:
                progress(done, total)
    return h.hexdigest()


def _known_hash(hashes: Path | None, key: str) -> str | None:
    if hashes is None:
        return None
    try:
        with (hashes / HASHES_FILE).open("rb") as f:
            known = json.loads(f.read(2**20))
    except (OSError, ValueError, RecursionError):
        return None
    value = known.get(key) if isinstance(known, dict) else None
    return value if isinstance(value, str) and len(value) == 64 else None


def _remember_hash(hashes: Path | None, key: str, digest: str) -> None:
    if hashes is None:
        return
    path = hashes / HASHES_FILE
    try:
        with path.open("rb") as f:
            known = json.loads(f.read(2**20))
    except (OSError, ValueError, RecursionError):
        known = {}
    known = {k: v for k, v in (known.items() if isinstance(known, dict) else []) if k != key}
    known = dict(list(known.items())[-(_KEPT_HASHES - 1) :]) | {key: digest}
    with contextlib.suppress(OSError):
        hashes.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)


_KEPT_HASHES = 64
"""GGUF files whose hash is remembered at most (the most recent)."""


def runtime_version() -> str:
    """``xllamacpp <version>``, read from its metadata (the runtime is never imported in rose's process).

    Raises :class:`~rose_sql.errors.UsageError` when it is not installed."""
    try:
        return f"{RUNTIME} {metadata.version(RUNTIME)}"
    except metadata.PackageNotFoundError:
        raise UsageError(
            f"--judge-gguf needs llama.cpp's server from the {RUNTIME} package: pip install 'rose-sql[local]'"
        ) from None


def local_model(
    path: Path,
    *,
    n_ctx: int = LOCAL_CTX,
    threads: int = 1,
    hashes: Path | None = None,
    progress: Progress | None = None,
) -> LocalModel:
    """The pinned local judge of a GGUF file: its hash and the runtime's version.

    The file must be a regular file whose GGUF header reads and declares its size
    (:func:`rose_sql.judges.gguf.check_gguf`), checked before a byte of it is hashed; the hash is kept in
    ``hashes`` (a cache folder: ``gguf-sha256.json``) by the file's path, size and modification time, so a rerun
    does not hash it again. ``progress`` is told how far the hashing is.

    Raises :class:`~rose_sql.errors.InputError` naming the file when it is no GGUF file (or not a regular file),
    and :class:`~rose_sql.errors.UsageError` when the runtime is missing or a setting is out of range."""
    from rose_sql.judges.gguf import check_gguf, open_regular

    if n_ctx < 512 or threads < 1:
        raise UsageError("--judge-gguf-ctx must be at least 512 and the threads at least 1")
    fd, st = open_regular(path, "--judge-gguf")
    try:
        check_gguf(path, fd, st.st_size)
        runtime = runtime_version()
        key = json.dumps([str(path.resolve()), st.st_size, st.st_mtime_ns])
        digest = _known_hash(hashes, key)
        if digest is None:
            digest = sha256_of(path, fd, progress)
            _remember_hash(hashes, key, digest)
    finally:
        os.close(fd)
    return LocalModel(path=path, sha256=digest, runtime=runtime, n_ctx=n_ctx, threads=threads)


def endpoint_of(model: LocalModel) -> str:
    """The endpoint in the cache key of a local judge's calls: the file's hash, not the port of the day."""
    return f"gguf:sha256:{model.sha256}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LocalServer:
    """llama.cpp's server for one GGUF file in a child process (started by :meth:`start`, once)."""

    def __init__(self, model: LocalModel, alias: str) -> None:
        self.model = model
        self.alias = alias
        """The model name the server answers to (the judge's ``--judge-model``)."""
        self.url: str | None = None
        """``http://127.0.0.1:PORT/v1`` once started."""
        self._child: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> str:
        """Start the child, wait until it answers ``/v1/models``, and return its base URL (the same URL
        when already started). Raises :class:`~rose_sql.errors.EndpointUnreachable` with the end of
        the child's log when it exits or does not answer within ``startup_s``."""
        if self.url is not None:
            return self.url
        m = self.model
        port = _free_port()
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop): a pipe nobody reads would block llama.cpp
        command = [sys.executable, "-m", "rose_sql.judges.local", "--model", str(m.path), "--alias", self.alias]
        command += ["--port", str(port), "--ctx", str(m.n_ctx), "--threads", str(m.threads), "--seed", str(m.seed)]
        self._child = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,  # the child exits when this closes: rose gone, server gone
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C reaches rose, which stops the child itself
            env={**os.environ, "OMP_NUM_THREADS": str(m.threads)},
        )
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + m.startup_s
        while True:
            if self._child.poll() is not None:
                self.stop()
                raise EndpointUnreachable(f"the local judge's server for {m.path} exited at start: {self._tail()}")
            if _answers(url + "/models"):
                self.url = url
                return url
            if time.monotonic() > deadline:
                tail = self._tail()
                self.stop()
                raise EndpointUnreachable(
                    f"the local judge's server for {m.path} did not answer within {m.startup_s:g} s: {tail}"
                )
            time.sleep(0.2)

    def _tail(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0, os.SEEK_END)
        size = self._log.tell()
        self._log.seek(max(0, size - _STDERR_TAIL))
        return self._log.read().decode("utf-8", "replace").strip() or "(no output)"

    def stop(self) -> None:
        """Stop the child (politely, then for sure) and forget it; safe to call twice."""
        child, self._child, self.url = self._child, None, None
        if child is not None:
            with contextlib.suppress(OSError):
                if child.stdin is not None:
                    child.stdin.close()
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __del__(self) -> None:  # a client dropped without aclose() still stops its server
        with contextlib.suppress(Exception):
            self.stop()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return 200 <= int(r.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _serve(argv: list[str] | None = None) -> None:
    """The child: llama.cpp's server with every sampling setting pinned, until standard input closes."""
    ap = argparse.ArgumentParser(prog="python -m rose_sql.judges.local")
    ap.add_argument("--model", required=True)
    ap.add_argument("--alias", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ctx", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, required=True)
    a = ap.parse_args(argv)
    import xllamacpp  # type: ignore[import-untyped, import-not-found, unused-ignore]

    p = xllamacpp.CommonParams()
    p.model.path = a.model
    p.model_alias = {a.alias}  # a set of names
    p.hostnames = ["127.0.0.1"]
    p.port = a.port
    p.n_ctx = a.ctx
    p.n_parallel = 1  # one slot: no batch of several requests changes a reply's arithmetic
    p.cpuparams.n_threads = a.threads
    p.cpuparams_batch.n_threads = a.threads
    p.use_jinja = True  # the GGUF's own chat template
    p.cache_prompt = False  # every request is computed from its first token
    p.cache_ram_mib = 0
    p.ctx_shift = False  # a request past the context fails rather than dropping its beginning
    p.warmup = False
    p.sampling.temp = 0.0
    p.sampling.seed = a.seed
    server = xllamacpp.Server(p)  # serves in its own threads until freed
    sys.stdin.buffer.read()  # until the parent closes the pipe (or dies)
    del server
    os._exit(0)  # llama.cpp's threads need no orderly interpreter shutdown


if __name__ == "__main__":
    _serve()
