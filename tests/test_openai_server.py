"""The scripted OpenAI-compatible server, exercised with the real ``openai`` SDK over loopback HTTP."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import time
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from rose_sql.testing import (
    Reply,
    ScriptedOpenAI,
    at_cap,
    by_content,
    estimate_tokens,
    latency,
    request_key,
    script,
    with_faults,
)

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You judge SQL."},
    {"role": "user", "content": "Is SELECT 1 right?"},
]


def client(srv: ScriptedOpenAI, *, max_retries: int = 2, timeout: float = 5.0) -> openai.OpenAI:
    """A real SDK client pointed at the scripted server."""
    return openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=max_retries, timeout=timeout)


def ask(srv: ScriptedOpenAI, *, max_retries: int = 2, timeout: float = 5.0, model: str = "judge-1") -> ChatCompletion:
    """One chat completion through the SDK, on a client closed afterwards."""
    with client(srv, max_retries=max_retries, timeout=timeout) as c:
        return c.chat.completions.create(model=model, messages=MESSAGES)


def user(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": text}]


def raw_post(srv: ScriptedOpenAI, body: bytes, path: str = "/v1/chat/completions") -> tuple[int, dict[str, Any]]:
    """POST raw bytes with the stdlib client, bypassing the SDK's validation."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


# --------------------------------------------------------------------------- round trip


def test_round_trip_content_usage_model_and_reasoning() -> None:
    reply = Reply(content="yes", reasoning_content="SELECT 1 returns one row", prompt_tokens=11, completion_tokens=7)
    with ScriptedOpenAI(script([reply])) as srv:
        out = ask(srv, model="deepseek-reasoner")
        message = out.choices[0].message
        assert message.content == "yes"
        assert message.role == "assistant"
        assert (message.model_extra or {})["reasoning_content"] == "SELECT 1 returns one row"
        assert getattr(message, "reasoning_content", None) == "SELECT 1 returns one row"
        assert out.model == "deepseek-reasoner"
        assert out.object == "chat.completion"
        assert out.id.startswith("chatcmpl-")
        assert out.system_fingerprint == "fp_rose_scripted"
        assert out.choices[0].finish_reason == "stop"
        assert out.usage is not None
        assert (out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.total_tokens) == (11, 7, 18)
        assert out.usage.completion_tokens_details is not None
        assert out.usage.completion_tokens_details.reasoning_tokens == estimate_tokens("SELECT 1 returns one row")
        (seen,) = srv.requests
        assert seen.model == "deepseek-reasoner"
        assert seen.messages == MESSAGES
        assert seen.user_text == "Is SELECT 1 right?"
        assert seen.headers["authorization"] == "Bearer test"
        assert seen.headers["x-stainless-retry-count"] == "0"


def test_default_usage_is_estimated_from_text_and_default_reply_is_ok() -> None:
    with ScriptedOpenAI() as srv:
        out = ask(srv)
        assert out.choices[0].message.content == "OK"
        assert out.usage is not None
        assert out.usage.prompt_tokens == estimate_tokens("You judge SQL.\nIs SELECT 1 right?")
        assert out.usage.completion_tokens == estimate_tokens("OK")
        assert out.usage.completion_tokens_details is None


def test_models_endpoint_and_keep_alive() -> None:
    with ScriptedOpenAI(models=("a", "b")) as srv, client(srv) as c:
        assert [m.id for m in c.models.list()] == ["a", "b"]
        assert c.models.retrieve("b").id == "b"
        for _ in range(5):
            c.chat.completions.create(model="a", messages=MESSAGES)
        assert srv.calls == 5
        assert srv.connections == 1  # the SDK's pool reused one keep-alive connection


# --------------------------------------------------------------------------- retries


def test_429_then_success_is_retried() -> None:
    limited = Reply(status=429, error="slow down", headers={"retry-after": "0"})
    with ScriptedOpenAI(script([limited, Reply(content="fine")])) as srv:
        assert ask(srv, max_retries=2).choices[0].message.content == "fine"
        assert srv.calls == 2
        assert [r.headers["x-stainless-retry-count"] for r in srv.requests] == ["0", "1"]


def test_retry_after_ms_is_honoured_by_the_sdk() -> None:
    limited = Reply(status=429, headers={"retry-after-ms": "20"})
    with ScriptedOpenAI(script([limited, Reply(content="fine")])) as srv:
        assert ask(srv).choices[0].message.content == "fine"
        first, second = srv.requests
        assert second.arrived_at - first.arrived_at < 0.3  # well under the SDK's ~0.5 s default backoff


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors_are_retried(status: int) -> None:
    with ScriptedOpenAI(script([Reply(status=status), Reply(content="fine")])) as srv:
        assert ask(srv).choices[0].message.content == "fine"
        assert srv.calls == 2


def test_timeout_is_retried() -> None:
    with ScriptedOpenAI(script([Reply(content="late", delay_s=3.0), Reply(content="fine")])) as srv:
        assert ask(srv, max_retries=1, timeout=0.3).choices[0].message.content == "fine"
        assert srv.calls == 2


def test_dropped_connection_is_retried() -> None:
    with ScriptedOpenAI(script([Reply(drop=True), Reply(content="fine")])) as srv:
        assert ask(srv, max_retries=1).choices[0].message.content == "fine"
        assert srv.calls == 2


def test_without_retries_errors_surface_as_sdk_exceptions() -> None:
    with ScriptedOpenAI(script([Reply(status=429, error="slow down", headers={"retry-after": "0"})])) as srv:
        with pytest.raises(openai.RateLimitError) as caught:
            ask(srv, max_retries=0)
        assert caught.value.status_code == 429
        assert caught.value.body == {
            "message": "slow down",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
        assert srv.calls == 1
    with ScriptedOpenAI(script([Reply(drop=True)])) as srv, pytest.raises(openai.APIConnectionError):
        ask(srv, max_retries=0)
    with ScriptedOpenAI(script([Reply(delay_s=3.0)])) as srv, pytest.raises(openai.APITimeoutError):
        ask(srv, max_retries=0, timeout=0.2)


# --------------------------------------------------------------------------- concurrency and faults


async def _ask_many(srv: ScriptedOpenAI, texts: list[str], *, max_retries: int, timeout: float) -> list[str | None]:
    async with openai.AsyncOpenAI(
        base_url=srv.base_url, api_key="test", max_retries=max_retries, timeout=timeout
    ) as aclient:
        outs = await asyncio.gather(
            *(aclient.chat.completions.create(model="m", messages=user(text)) for text in texts)
        )
    return [out.choices[0].message.content for out in outs]


def test_64_concurrent_slow_requests_are_not_serialized() -> None:
    texts = [f"item {i}" for i in range(64)]
    with ScriptedOpenAI(latency(by_content(lambda text: Reply(content=text.upper())), 0.5)) as srv:
        start = time.monotonic()
        answers = asyncio.run(_ask_many(srv, texts, max_retries=0, timeout=10))
        elapsed = time.monotonic() - start
        assert answers == [text.upper() for text in texts]
        assert srv.calls == 64
        assert elapsed < 8.0, f"64 requests of 0.5 s took {elapsed:.1f} s: the server serializes"


@pytest.mark.slow  # waits out scripted timeouts on the wire
def test_transient_faults_are_all_retried_through() -> None:
    texts = [f"question {i}" for i in range(100)]
    faults = with_faults(by_content(lambda text: Reply(content=f"answer to {text}")), rate=0.3, timeout_delay_s=3.0)
    with ScriptedOpenAI(faults) as srv:
        # 100 requests at once take up to ~0.4 s each on a small machine: 1.5 s leaves a margin
        # against spurious client timeouts, which would add unplanned retries.
        answers = asyncio.run(_ask_many(srv, texts, max_retries=3, timeout=1.5))
        assert answers == [f"answer to {text}" for text in texts]
        assert srv.calls > 100
        assert srv.calls == 100 + faults.injected
        kinds = set(faults.injected_kinds)
        assert {"429", "timeout", "drop"} <= kinds and kinds & {"500", "502", "503"}


def test_fault_plans_are_deterministic_and_bounded() -> None:
    requests = [{"model": "m", "messages": user(f"q{i}")} for i in range(200)]
    a = with_faults(script([Reply()]), rate=0.5, seed=7)
    b = with_faults(script([Reply()]), rate=0.5, seed=7)
    c = with_faults(script([Reply()]), rate=0.5, seed=8)
    assert [a.plan(r) for r in requests] == [b.plan(r) for r in requests]
    assert [a.plan(r) for r in requests] != [c.plan(r) for r in requests]
    assert all(len(a.plan(r)) <= 2 for r in requests)
    always = with_faults(script([Reply(content="x")]), rate=1.0, max_faults=1, kinds=["503"])
    assert always({"messages": user("q")}, 0).status == 503
    assert always({"messages": user("q")}, 1).content == "x"
    assert request_key({"messages": user("q")}) == request_key({"model": "other", "messages": user("q")})


# --------------------------------------------------------------------------- robustness


def test_malformed_requests_get_400_and_the_server_keeps_serving() -> None:
    with ScriptedOpenAI() as srv:
        status, body = raw_post(srv, b"{not json")
        assert status == 400
        assert body["error"]["type"] == "invalid_request_error"
        assert raw_post(srv, b"[1, 2]")[0] == 400
        assert raw_post(srv, json.dumps({"model": "m"}).encode())[1]["error"]["param"] == "messages"
        assert raw_post(srv, b"\xff\xfe")[0] == 400
        assert raw_post(srv, b"{}", path="/v1/nope")[0] == 404
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as sock:
            sock.sendall(b"garbage\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 400")
        with client(srv) as c, pytest.raises(openai.BadRequestError, match="Streaming"):
            c.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        assert srv.calls == 0
        assert ask(srv).choices[0].message.content == "OK"
        assert srv.calls == 1


def test_wrong_api_key_is_refused() -> None:
    with ScriptedOpenAI(api_key="right") as srv, pytest.raises(openai.AuthenticationError):
        ask(srv)


def test_a_broken_responder_answers_500_and_is_recorded() -> None:
    def broken(request: dict[str, Any], index: int) -> Reply:
        raise RuntimeError("bug in test")

    with ScriptedOpenAI(broken) as srv:
        with pytest.raises(openai.InternalServerError, match="bug in test"):
            ask(srv, max_retries=0)
        assert [str(e) for e in srv.errors] == ["bug in test"]


def test_script_repeats_its_last_reply_and_accepts_responders() -> None:
    echo = by_content(lambda text: Reply(content=f"echo {text}"))
    with ScriptedOpenAI(script([Reply(content="first"), echo])) as srv, client(srv) as c:
        got = [c.chat.completions.create(model="m", messages=user(t)).choices[0].message.content for t in "abc"]
        assert got == ["first", "echo b", "echo c"]


# --------------------------------------------------------------------------- protocol faults


def test_a_trickled_reply_defeats_a_per_read_timeout() -> None:
    """Each read returns within the SDK's timeout, so the SDK waits for the whole slow body."""
    reply = Reply(content="slow " * 20, trickle_s=0.05, trickle_bytes=20)
    with ScriptedOpenAI(script([reply])) as srv:
        start = time.monotonic()
        out = ask(srv, max_retries=0, timeout=0.3)
        assert out.choices[0].message.content == "slow " * 20
        assert time.monotonic() - start > 0.6  # well past the 0.3 s "timeout"


def test_a_body_that_is_not_json_and_a_huge_body() -> None:
    replies = script([Reply(body="<html>gateway says hi</html>"), Reply(content="x" * 5_000_000)])
    with ScriptedOpenAI(replies) as srv, client(srv, max_retries=0) as c:
        raw = c.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)
        assert raw.status_code == 200 and raw.text == "<html>gateway says hi</html>"
        big = c.chat.completions.create(model="m", messages=MESSAGES)
        assert len(big.choices[0].message.content or "") == 5_000_000


def test_usage_of_wrong_types_and_negative_counts_are_sent_as_given() -> None:
    wrong = {"prompt_tokens": "many", "completion_tokens": [1], "total_tokens": None}
    negative = {"prompt_tokens": -5_000_000, "completion_tokens": 3, "total_tokens": -4_999_997}
    replies = script([Reply(content="a", usage=wrong), Reply(content="b", usage=negative)])
    with ScriptedOpenAI(replies) as srv, client(srv, max_retries=0) as c:
        first = json.loads(c.chat.completions.with_raw_response.create(model="m", messages=MESSAGES).text)
        assert first["usage"] == wrong
        second = c.chat.completions.create(model="m", messages=MESSAGES)
        assert second.usage is not None and second.usage.prompt_tokens == -5_000_000


def test_at_cap_uses_the_whole_completion_cap() -> None:
    with ScriptedOpenAI(at_cap(script([Reply(content="short")]))) as srv, client(srv) as c:
        capped = c.chat.completions.create(model="m", messages=MESSAGES, max_tokens=700)
        newer = c.chat.completions.create(model="m", messages=MESSAGES, max_completion_tokens=900)
        free = c.chat.completions.create(model="m", messages=MESSAGES)
        assert [x.usage.completion_tokens for x in (capped, newer, free) if x.usage] == [700, 900, 2]


def test_user_text_joins_content_parts() -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": [{"type": "text", "text": "one "}, {"type": "text", "text": "two"}]}
    ]
    with ScriptedOpenAI(by_content(lambda text: Reply(content=text))) as srv, client(srv) as c:
        out = c.chat.completions.create(model="m", messages=messages)
        assert out.choices[0].message.content == "one two"


def test_reply_and_fault_arguments_are_validated() -> None:
    with pytest.raises(ValueError):
        Reply(status=200, error="no")
    with pytest.raises(ValueError):
        Reply(delay_s=-1)
    with pytest.raises(ValueError):
        Reply(trickle_s=0.1, trickle_bytes=0)
    with pytest.raises(ValueError):
        script([])
    with pytest.raises(ValueError):
        with_faults(script([Reply()]), rate=1.5)
    with pytest.raises(ValueError):
        with_faults(script([Reply()]), rate=0.1, kinds=["418"])


def test_stop_is_quick_quiet_and_final(capfd: pytest.CaptureFixture[str]) -> None:
    srv = ScriptedOpenAI(script([Reply(drop=True), Reply(delay_s=30.0)]))
    with pytest.raises(openai.APIConnectionError):
        ask(srv, max_retries=0)
    with pytest.raises(openai.APITimeoutError):
        ask(srv, max_retries=0, timeout=0.2)
    raw_post(srv, b"{bad")
    start = time.monotonic()
    srv.stop()
    srv.stop()
    assert time.monotonic() - start < 2.0  # the 30 s delayed reply was woken up
    with pytest.raises(openai.APIConnectionError):
        ask(srv, max_retries=0)
    assert capfd.readouterr().err == ""


# --------------------------------------------------------------------------- the same endpoint without a socket


def _ask_llm(base_url: str, **cfg: Any) -> Any:
    """One chat call of ROSE-SQL's live client (the real SDK under it): its reply, or the error it raised."""
    from dataclasses import asdict

    from rose_sql.config import JudgeConfig
    from rose_sql.errors import EndpointError, EndpointUnreachable
    from rose_sql.judges.llm import OpenAILLM

    async def go() -> Any:
        llm = OpenAILLM(JudgeConfig(model="judge-1", base_url=base_url, cache_dir=None, max_retries=1, **cfg))
        try:
            reply = await llm.complete(list(MESSAGES))  # type: ignore[arg-type]
            return {k: v for k, v in asdict(reply).items() if k not in ("seconds", "key")}  # the key names the URL
        except (EndpointError, EndpointUnreachable) as e:
            return f"{type(e).__name__}: {e}".replace(base_url, "URL")
        finally:
            await llm.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize(
    "replies",
    [
        [Reply(content="fine", prompt_tokens=7, completion_tokens=3)],
        [Reply(content='{"a": 1}', reasoning_content="thinking", reasoning_tokens=4)],
        [Reply(status=500, error="overloaded"), Reply(content="after a retry")],
        [Reply(status=400, error="Unsupported parameter: 'seed'"), Reply(content="without the seed")],
        [Reply(status=401, error="no such key")],
        [Reply(drop=True), Reply(content="after a dropped connection")],
        [Reply(body="not json")],
    ],
    ids=["content", "reasoning", "retried 500", "refused parameter", "401", "dropped", "not json"],
)
def test_mock_openai_answers_the_real_client_as_the_scripted_server_does(replies: list[Reply]) -> None:
    """The same responder behind the scripted server (the wire) and behind MockOpenAI (the SDK's httpx
    transport): ROSE-SQL's client gets the same reply, or raises the same error, after the same requests."""
    from rose_sql.testing import MockOpenAI

    with ScriptedOpenAI(script(replies)) as srv:
        wired = _ask_llm(srv.base_url)
        wired_bodies = [r.body for r in srv.requests]
    with MockOpenAI(script(replies)) as mock:
        mocked = _ask_llm(mock.base_url)
        assert srv.http_requests == mock.http_requests
    assert mocked == wired and [r.body for r in mock.requests] == wired_bodies


def test_mock_openai_takes_only_its_own_url_and_only_while_open() -> None:
    from rose_sql.judges import llm
    from rose_sql.testing import MockOpenAI

    before = llm.open_client
    with (
        ScriptedOpenAI(script([Reply(content="from the wire")])) as srv,
        MockOpenAI(script([Reply(content="mock")])) as mock,
    ):
        assert _ask_llm(srv.base_url)["content"] == "from the wire" and mock.calls == 0 and srv.calls == 1
        assert _ask_llm(mock.base_url)["content"] == "mock" and mock.calls == 1
    assert llm.open_client is before
    assert _ask_llm(mock.base_url).startswith("EndpointUnreachable: the judge's endpoint URL cannot be reached")
    assert mock.calls == 1  # closed: nothing answers its URL any more
