"""Structured replies, providers' prompt caching and provider options, end to end through the real
openai client against a scripted endpoint (which enforces, ignores or refuses the reply's schema), served
under the client's transport (:class:`~rose_sql.testing.MockOpenAI`): what is tested is what each request
carries and how each reply is read. Prompt caching, which the scripted server imitates, stays on its wire."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import rose, write_items

from rose_sql.judges.keys import nonce_asked
from rose_sql.judges.replies import reply_schema
from rose_sql.record import Record
from rose_sql.testing import (
    MockOpenAI,
    Reply,
    ScriptedOpenAI,
    by_content,
    conform,
    enforce_schema,
    refuse_params,
    refuse_schema,
    with_reasoning,
)
from rose_sql.verdicts import ProverReply, RefuterReply

GOLD = "SELECT name FROM player WHERE age > 25"
PROVER_NO = {
    "expected_answer": "players older than 25",
    "sql_behaviour": "every player",
    "checks": {"requirements": "the age filter is missing"},
    "reasoning": "misses the filter",
    "answers_question": False,
}
REFUTER_UPHOLD = {"reasoning": "no hard evidence", "overturn": False, "ambiguity": "none", "gold_correct": True}
REASKED = "That reply could not be used"
N_ITEMS = 20


def item(i: int, pred: str = "SELECT name FROM player") -> dict[str, Any]:
    return {"id": i, "db_id": "league", "question": f"Question {i}: players older than 25?", "gold_sql": GOLD,
            "pred_sql": pred}  # fmt: skip


def number(text: str) -> int:
    m = re.search(r"Question (\d+)", text)
    assert m is not None, text[:200]
    return int(m.group(1))


def plain(text: str) -> Reply:
    """A judge that always replies with a valid verdict as plain JSON."""
    return Reply(content=json.dumps(REFUTER_UPHOLD if "Reference SQL" in text else PROVER_NO))


def sloppy(text: str) -> Reply:
    """A judge whose first reply is malformed on three items of five (as models without constrained
    decoding do), and valid when re-asked."""
    if REASKED in text:
        return Reply(content=json.dumps(PROVER_NO))
    kind = number(text) % 5
    if kind == 1:  # a bool as a string
        return Reply(content=json.dumps({**PROVER_NO, "answers_question": "false"}))
    if kind == 2:  # a required field left out
        return Reply(content=json.dumps({k: v for k, v in PROVER_NO.items() if k != "sql_behaviour"}))
    if kind == 3:  # cut short
        return Reply(content=json.dumps(PROVER_NO)[:60])
    if kind == 4:  # reasoning around the object: the tolerant parser reads it
        return Reply(content="Let me think. The filter is missing.\n" + json.dumps(PROVER_NO) + "\nThat is all.")
    return Reply(content=json.dumps(PROVER_NO))


def run(
    srv: MockOpenAI,
    tmp: Path,
    league: Path,
    items: list[dict[str, Any]],
    *extra: str,
    out: str = "out",
    code: int = 0,
) -> dict[Any, dict[str, Any]]:
    """``rose run`` of ``items`` judged by ``srv``; the records by id."""
    tmp.mkdir(parents=True, exist_ok=True)
    path = write_items(tmp / "items.jsonl", items)
    args = ["run", str(path), "--db-root", str(league), "--out", str(tmp / out), "--judge-base-url", srv.base_url]
    args += ["--max-retries", "0", "--judge-timeout", "10"]
    if "--judge-model" not in extra:
        args += ["--judge-model", "gpt-4o-mini"]
    if "--cache-dir" not in extra and "--no-cache" not in extra:
        args += ["--cache-dir", str(tmp / "cache")]
    rose(*args, *extra, code=code)
    lines = (tmp / out / "items" / "records.jsonl").read_text().splitlines()
    return {r["id"]: r for r in map(json.loads, lines)}


def calls_of(records: dict[Any, dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for r in records.values() for c in r["judges"]]


# --------------------------------------------------------------------------- the schemas


@pytest.mark.parametrize("kind", [ProverReply, RefuterReply])
def test_reply_schema_is_strict_and_matches_the_model(kind: type[ProverReply | RefuterReply]) -> None:
    name, schema = reply_schema(kind)
    assert name in ("prover_reply", "refuter_reply")
    assert set(schema["properties"]) == set(kind.model_fields)

    def strict(node: dict[str, Any]) -> None:  # what OpenAI's strict mode wants of every object
        if "properties" in node:
            assert node["additionalProperties"] is False and node["required"] == list(node["properties"])
            for sub in node["properties"].values():
                strict(sub)

    strict(schema)
    assert kind is ProverReply or next(iter(schema["properties"])) == "reasoning"  # the verdict comes after it
    # whatever a model writes, constrained to the schema, validates as the reply
    for meant in ({}, {"answers_question": "true", "overturn": 1}, {**PROVER_NO, **REFUTER_UPHOLD}):
        kind.model_validate(conform(meant, schema))


# --------------------------------------------------------------------------- enforced, ignored, refused


def test_enforced_schema_replies_parse_with_no_reask(tmp_path: Path, league: Path) -> None:
    with MockOpenAI(enforce_schema(by_content(sloppy))) as srv:
        records = run(srv, tmp_path, league, [item(i) for i in range(N_ITEMS)])
        requests = srv.requests
    calls = calls_of(records)
    assert len(requests) == len(calls) == N_ITEMS  # one Prover call an item, none re-asked
    assert all(c["error"] is None and c["reply_format"] == "json_schema" for c in calls)
    assert all(r["score"] == 0 and r["decided_by"] == "prover" for r in records.values())
    for req in requests:
        rf = req.body["response_format"]
        assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
        nonce = nonce_asked(req.messages)  # the schema pins the call's nonce
        assert (rf["json_schema"]["name"], rf["json_schema"]["schema"]) == reply_schema(ProverReply, nonce)


def test_malformed_reply_rate_enforced_vs_ignored(tmp_path: Path, league: Path) -> None:
    """The same sloppy judge, its schema ignored and then enforced: the share of first replies that
    could not be used (each cost a re-ask), measured from the records."""
    rates = {}
    for mode, responder in (("ignored", by_content(sloppy)), ("enforced", enforce_schema(by_content(sloppy)))):
        with MockOpenAI(responder) as srv:
            records = run(srv, tmp_path / mode, league, [item(i) for i in range(N_ITEMS)], "--no-cache")
            sent = srv.calls
        calls = calls_of(records)
        reasks = sum(c["error"] is not None for c in calls)
        assert sent == len(calls) == N_ITEMS + reasks
        assert all(r["score"] == 0 for r in records.values())  # re-asked or constrained, every item is judged
        rates[mode] = reasks / N_ITEMS
    print(f"malformed first replies: ignored {rates['ignored']:.0%}, enforced {rates['enforced']:.0%}")
    assert rates == {"ignored": 0.6, "enforced": 0.0}  # kinds 1, 2, 3 of 5 are malformed; kind 4 is read


def test_refused_response_format_falls_back_to_text_for_the_client_life(tmp_path: Path, league: Path) -> None:
    items = [item(i) for i in range(4)] + [item(9, "SELECT name, age FROM player WHERE age > 25")]
    with MockOpenAI(refuse_schema(by_content(plain))) as srv:
        records = run(srv, tmp_path, league, items, "--concurrency", "1")
        requests = srv.requests
    calls = calls_of(records)
    assert ["response_format" in r.body for r in requests] == [True] + [False] * len(calls)  # refused once
    assert all(c["reply_format"] == "text" and c["error"] is None for c in calls)
    assert [c["stage"] for c in records[9]["judges"]] == ["prover"] and records[9]["score"] == 0
    assert all(r["score"] == 0 for r in records.values())


def test_concurrent_calls_refused_together_never_cache_text_under_the_schema_key(tmp_path: Path, league: Path) -> None:
    items = [item(i) for i in range(12)]
    with MockOpenAI(refuse_schema(by_content(plain))) as srv:
        first = run(srv, tmp_path, league, items, "--concurrency", "8", out="first")
        refused = sum("response_format" in r.body for r in srv.requests)
        assert 1 <= refused <= 8 and srv.calls == refused + len(items)
        srv.reset()
        again = run(srv, tmp_path, league, items, "--concurrency", "1", out="again")
        # a new client tries the schema once (no reply is cached under its key), then reads the text replies
        assert ["response_format" in r.body for r in srv.requests] == [True]
    assert {c["reply_format"] for c in calls_of(first) + calls_of(again)} == {"text"}
    assert all(c["cached"] for c in calls_of(again))


def test_refusal_message_shapes_are_recognised(tmp_path: Path, league: Path) -> None:
    """llama.cpp's server answers some builds' response_format with this 400 (ggml-org/llama.cpp#11847)."""
    message = 'Either "json_schema" or "grammar" can be specified, but not both'
    with MockOpenAI(refuse_schema(by_content(plain), message)) as srv:
        records = run(srv, tmp_path, league, [item(1)], "--concurrency", "1")
        assert srv.calls == 2
    assert records[1]["judges"][0]["reply_format"] == "text" and records[1]["score"] == 0


def test_structured_on_insists_and_a_refusal_is_a_judge_error(tmp_path: Path, league: Path) -> None:
    with MockOpenAI(refuse_schema(by_content(plain))) as srv:
        records = run(srv, tmp_path, league, [item(1)], "--judge-structured", "on", code=3)
    (call,) = records[1]["judges"]
    assert records[1]["unscored_reason"] == "judge_error" and "--judge-structured auto" in call["error"]
    assert call["reply_format"] == "json_schema"


def test_reply_format_is_in_the_cache_key(tmp_path: Path, league: Path) -> None:
    items = [item(i) for i in range(3)]
    with MockOpenAI(enforce_schema(by_content(sloppy))) as srv:
        off = run(srv, tmp_path, league, items, "--judge-structured", "off", out="off")
        assert srv.calls == 3 + 2 and not any("response_format" in r.body for r in srv.requests)  # 2 re-asks
        srv.reset()
        auto = run(srv, tmp_path, league, items, out="auto")  # the text replies are not served for it
        assert srv.calls == 3
        srv.reset()
        again = run(srv, tmp_path, league, items, out="again")
        assert srv.calls == 0
    assert {c["reply_format"] for c in calls_of(off)} == {"text"}
    assert (
        {c["reply_format"] for c in calls_of(auto)} == {c["reply_format"] for c in calls_of(again)} == {"json_schema"}
    )
    assert all(c["cached"] for c in calls_of(again))


def test_records_without_the_new_fields_read_back(tmp_path: Path, league: Path) -> None:
    with ScriptedOpenAI(by_content(plain), prompt_cache=True) as srv:
        records = run(srv, tmp_path, league, [item(1)])
    data = records[1]
    assert Record.from_dict(data).judges[0].reply_format == "json_schema"
    for call in data["judges"]:
        del call["reply_format"], call["cached_tokens"]
    old = Record.from_dict(data).judges[0]
    assert (old.reply_format, old.cached_tokens) == ("text", 0)


# --------------------------------------------------------------------------- prompt caching


def test_two_items_on_one_database_get_cached_tokens_at_the_cached_rate(tmp_path: Path, league: Path) -> None:
    with ScriptedOpenAI(by_content(plain), prompt_cache=True) as srv:
        path = write_items(tmp_path / "items.jsonl", [item(1), item(2)])
        result = rose(
            "run", str(path), "--db-root", str(league), "--out", str(tmp_path / "out"), "--judge-model",
             "gpt-4o-mini", "--judge-base-url", srv.base_url, "--cache-dir", str(tmp_path / "cache"),
             "--concurrency", "1", code=0
        )  # fmt: skip
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "out/items/records.jsonl").read_text().splitlines())}
    first, second = records[1]["judges"][0], records[2]["judges"][0]
    assert first["cached_tokens"] == 0  # nothing before it
    cached, prompt, completion = second["cached_tokens"], second["prompt_tokens"], second["completion_tokens"]
    assert cached > 0 and cached % 128 == 0 and cached < prompt
    # the shared part (system prompt, then the database's schema) comes first: most of the prompt is cached
    assert cached >= 0.8 * prompt - 128
    price = (0.15, 0.6, 0.075)  # gpt-4o-mini in the bundled table: input, output, cached input
    assert second["cost_usd"] == pytest.approx(
        ((prompt - cached) * price[0] + cached * price[2] + completion * price[1]) / 1e6
    )
    assert second["cost_usd"] < (prompt * price[0] + completion * price[1]) / 1e6
    summary = json.loads((tmp_path / "out/items/summary.json").read_text())["llm"]
    assert summary["cached_tokens"] == cached
    assert summary["cache_hit_share"] == round(cached / (first["prompt_tokens"] + prompt), 4)
    share = f"{summary['cache_hit_share']:.0%} of prompt tokens from the provider's cache"
    assert share in result.output
    print(f"cache-hit share of the two-item run: {summary['cache_hit_share']:.1%}")


def test_scripted_prompt_cache_follows_openai_rules() -> None:
    """Blocks of 128 tokens, from 1024 prompt tokens, the longest prefix shared with an earlier request."""
    import openai

    long = "x" * 8000  # 2000 tokens at 4 characters a token
    with ScriptedOpenAI(prompt_cache=True) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0)

        def cached(text: str) -> int:
            out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
            details = out.usage.prompt_tokens_details if out.usage else None
            return (details.cached_tokens or 0) if details else 0

        assert cached(long + "a") == 0
        assert cached(long + "b") == 1920  # 8000 characters shared: 2000 tokens, 15 whole blocks
        assert cached("short" * 10) == 0
        assert cached("y" + long) == 0  # no shared prefix
        assert cached(("x" * 3000) + "z" * 5000) == 640  # 750 tokens shared, 5 blocks (the prompt is long enough)


# --------------------------------------------------------------------------- options and reasoning models


def test_judge_options_reach_the_body_the_manifest_and_the_cache_key(tmp_path: Path, league: Path) -> None:
    opts = ["--judge-option", "top_k=20", "--judge-option", 'chat_template_kwargs={"enable_thinking": false}',
            "--judge-option", "note=plain words"]  # fmt: skip
    with MockOpenAI(by_content(plain)) as srv:
        records = run(srv, tmp_path, league, [item(1)], *opts, out="with")
        body = srv.requests[0].body
        srv.reset()
        run(srv, tmp_path, league, [item(1)], out="without")
        assert srv.calls == 1  # other options, another call
        srv.reset()
        run(srv, tmp_path, league, [item(1)], *opts, out="again")
        assert srv.calls == 0
    assert (body["top_k"], body["chat_template_kwargs"], body["note"]) == (
        20,
        {"enable_thinking": False},
        "plain words",
    )
    manifest = json.loads((tmp_path / "with/items/manifest.json").read_text())
    assert manifest["judge"]["settings"]["options"] == {"top_k": 20, "chat_template_kwargs": {"enable_thinking": False},
                                            "note": "plain words"}  # fmt: skip
    assert records[1]["judges"][0]["params"]["top_k"] == 20


def test_schema_placeholder_in_an_option_sends_the_schema(tmp_path: Path, league: Path) -> None:
    """vLLM's guided_json (older servers take the schema there, not in response_format)."""
    responder = refuse_schema(enforce_schema(by_content(sloppy), via=("guided_json",)))
    items = [item(i) for i in range(5)]
    with MockOpenAI(responder) as srv:
        records = run(
            srv, tmp_path, league, items, "--judge-structured", "off", "--judge-option", "guided_json=$schema"
        )
        bodies = [r.body for r in srv.requests]
    pinned = [reply_schema(ProverReply, nonce_asked(b["messages"]))[1] for b in bodies]
    assert all(b["guided_json"] == p and "response_format" not in b for b, p in zip(bodies, pinned, strict=True))
    calls = calls_of(records)
    assert len(bodies) == len(calls) == 5 and all(c["error"] is None for c in calls)
    assert {c["reply_format"] for c in calls} == {"json_schema"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--judge-option", "top_k"], "KEY=VALUE"),
        (["--judge-option", "=3"], "KEY=VALUE"),
        (["--judge-option", "max_tokens=5"], "--judge-max-tokens"),
        (["--judge-option", "response_format={}"], "--judge-structured"),
        (["--judge-option", "reasoning_effort=low"], "--reasoning-effort"),
        (["--reasoning-effort", "extreme"], "--reasoning-effort"),
        (["--judge-structured", "maybe"], "--judge-structured"),
    ],
)
def test_bad_judge_options_are_refused_by_name(tmp_path: Path, league: Path, args: list[str], message: str) -> None:
    path = write_items(tmp_path / "items.jsonl", [item(1)])
    result = rose("run", str(path), "--db-root", str(league), "--out", str(tmp_path / "o"), "--judge-model", "m",
                   *args, code=2)  # fmt: skip
    assert message in result.output and not (tmp_path / "o").exists()


def test_judge_options_without_a_judge_are_refused(tmp_path: Path, league: Path) -> None:
    path = write_items(tmp_path / "items.jsonl", [item(1)])
    result = rose("run", str(path), "--db-root", str(league), "--out", str(tmp_path / "o"), "--judge-option",
                   "top_k=1", code=2)  # fmt: skip
    assert "--judge-model" in result.output


def test_openai_reasoning_model_gets_no_temperature_and_its_cap_name(tmp_path: Path, league: Path) -> None:
    """o-series models refuse temperature and max_tokens: neither is sent, so not one request is refused."""
    responder = refuse_params(by_content(plain), ["temperature", "max_tokens"])
    with MockOpenAI(responder) as srv:
        records = run(srv, tmp_path, league, [item(1), item(2)], "--judge-model", "o4-mini",
                      "--reasoning-effort", "high")  # fmt: skip
        bodies = [r.body for r in srv.requests]
    assert len(bodies) == 2 and all(b["reasoning_effort"] == "high" and "temperature" not in b for b in bodies)
    call = records[1]["judges"][0]
    assert call["params"] == {"seed": 20260101, "reasoning_effort": "high", "max_completion_tokens": 8192}
    assert call["error"] is None and records[1]["score"] == 0


def test_local_reasoning_model_refusing_temperature_drops_it_once(tmp_path: Path, league: Path) -> None:
    responder = with_reasoning(refuse_params(by_content(plain), ["temperature"]))
    with MockOpenAI(responder) as srv:
        records = run(srv, tmp_path, league, [item(i) for i in range(3)], "--judge-model", "qwq-32b",
                      "--concurrency", "1")  # fmt: skip
        assert ["temperature" in r.body for r in srv.requests] == [True, False, False, False]
    for r in records.values():
        (call,) = r["judges"]
        assert "temperature" not in call["params"] and call["reasoning"].startswith("<reasoning>")
        assert call["reasoning_tokens"] and call["reasoning_tokens"] > 0 and r["score"] == 0
    summary = json.loads((tmp_path / "out/items/summary.json").read_text())["llm"]
    assert summary["reasoning_tokens"] == sum(r["judges"][0]["reasoning_tokens"] for r in records.values())
    assert summary["by_stage"]["prover"]["reasoning_tokens"] == summary["reasoning_tokens"]


# --------------------------------------------------------------------------- the recipes of docs/judges.md

PAGE = Path(__file__).resolve().parent.parent / "docs" / "judges.md"
RECIPES_SECTION = "## Judges on local servers and reasoning models"


def page_recipes() -> dict[str, list[str]]:
    """Each recipe of the page's section, by its comment's name: the arguments of its ``rose run``."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split(RECIPES_SECTION, 1)[1].split("\n## ", 1)[0]
    recipes = {}
    for block in re.findall(r"```bash\n(.*?)```", section, re.DOTALL):
        name = block.splitlines()[0].removeprefix("# ").split(":")[0]
        command = re.search(r"^rose run .*?(?<!\\)$", block.replace("\\\n", " "), re.MULTILINE)
        assert command is not None, block
        recipes[name] = shlex.split(command.group())[1:]  # after "rose"
    return recipes


QUIRKS: dict[str, tuple[Callable[[Callable[[str], Reply]], Any], float]] = {
    # name: (the imitated server around a judge, the share of items re-asked)
    "vLLM": (lambda j: enforce_schema(by_content(j), via=("response_format", "guided_json")), 0.0),
    "vLLM without response_format": (lambda j: refuse_schema(enforce_schema(by_content(j), via=("guided_json",))), 0.0),
    "SGLang": (lambda j: enforce_schema(by_content(j)), 0.0),
    "Ollama": (lambda j: by_content(j), 0.6),  # accepted, not enforced
    "llama.cpp": (
        lambda j: refuse_schema(
            enforce_schema(by_content(j), via=("json_schema",)),
            'Either "json_schema" or "grammar" can be specified, but not both',
        ),
        0.0,
    ),
    "OpenAI o-series": (lambda j: refuse_params(enforce_schema(by_content(j)), ["temperature", "max_tokens"]), 0.0),
    "DeepSeek-R1 on DeepSeek's API": (lambda j: with_reasoning(refuse_schema(by_content(j))), 0.6),
    "DeepSeek-R1 distilled, on vLLM with its reasoning parser, at the sampling its authors recommend": (
        lambda j: with_reasoning(enforce_schema(by_content(j))),
        0.0,
    ),
}


def test_every_recipe_of_the_judges_page_has_its_imitation() -> None:
    assert set(page_recipes()) == set(QUIRKS)


@pytest.mark.parametrize("name", sorted(QUIRKS))
def test_each_recipe_of_the_judges_page_runs_against_its_imitation(tmp_path: Path, league: Path, name: str) -> None:
    args = page_recipes()[name]
    make, reasked = QUIRKS[name]
    items = write_items(tmp_path / "items.jsonl", [item(i) for i in range(10)])
    mine = {"preds.json": str(items), "dbs": str(league), "runs": str(tmp_path / "out")}
    gold = args.index("--gold")  # our items carry their gold and questions
    with MockOpenAI(make(sloppy)) as srv:
        swapped = [mine.get(a, a) for a in args[:gold] + args[gold + 2 :]]
        swapped[swapped.index("--judge-base-url") + 1] = srv.base_url
        rose(*swapped, "--cache-dir", str(tmp_path / "cache"), "--max-retries", "0", code=0)
        bodies = [r.body for r in srv.requests]
    lines = (tmp_path / "out" / "items" / "records.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    calls = [c for r in records for c in r["judges"]]
    assert all(r["score"] == 0 and r["decided_by"] == "prover" for r in records), name  # every item judged
    assert len(bodies) == len(calls)  # not one request refused
    assert sum(c["error"] is not None for c in calls) / len(records) == reasked
    formats = {c["reply_format"] for c in calls}
    assert formats == ({"text"} if "--judge-structured off" in " ".join(args) and "$schema" not in args[-1] else
                       {"json_schema"})  # fmt: skip
    if "reasoning" in name or "R1" in name:
        assert all(c["reasoning"] and c["reasoning_tokens"] for c in calls)
    if "distilled" in name:
        assert {b["temperature"] for b in bodies} == {0.6} and calls[0]["params"]["temperature"] == 0.6


# --------------------------------------------------------------------------- prices and usage, as units


@pytest.mark.parametrize(
    ("price", "tokens", "usd"),
    [
        ((2.0, 8.0, 0.5), (1000, 100, 800), (200 * 2.0 + 800 * 0.5 + 100 * 8.0) / 1e6),
        ((2.0, 8.0, None), (1000, 100, 800), (1000 * 2.0 + 100 * 8.0) / 1e6),  # no cached rate: all input
        ((2.0, 8.0, 0.5), (1000, 100, 5000), (1000 * 0.5 + 100 * 8.0) / 1e6),  # never more cached than sent
    ],
)
def test_cached_tokens_are_priced_at_the_cached_rate(
    price: tuple[float, float, float | None], tokens: tuple[int, int, int], usd: float
) -> None:
    from rose_sql.judges.budget import Price, cost

    assert cost(Price(*price), *tokens) == pytest.approx(usd)


def test_price_table_checks_the_cached_rate(tmp_path: Path) -> None:
    from rose_sql.errors import InputError
    from rose_sql.judges.budget import load_prices

    good = tmp_path / "good.json"
    good.write_text(json.dumps({"local": {"input": 1, "output": 2, "cached_input": 0.1}}))
    assert load_prices(good)["local"].cached_input == 0.1 and load_prices(good)["gpt-4o"].cached_input == 1.25
    for bad in ("free", -1):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps({"local": {"input": 1, "output": 2, "cached_input": bad}}))
        with pytest.raises(InputError, match="local"):
            load_prices(path)
    assert load_prices(good)["gpt-4o"].batch_discount == 0.5 and load_prices(good)["local"].batch_discount == 0
    for bad in ("half", 1, True):
        path.write_text(json.dumps({"local": {"input": 1, "output": 2, "batch_discount": bad}}))
        with pytest.raises(InputError, match="batch_discount of 'local'"):
            load_prices(path)


def test_more_cached_tokens_than_prompt_tokens_is_an_endpoint_error() -> None:
    from rose_sql.errors import EndpointError
    from rose_sql.judges.wire import read_completion

    def body(cached: object) -> bytes:
        usage = {"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": cached}}
        return json.dumps({"choices": [{"message": {"content": "{}"}}], "usage": usage}).encode()

    assert read_completion(body(64), limit=10**6, cut=False).cached_tokens == 64
    assert read_completion(body(None), limit=10**6, cut=False).cached_tokens == 0
    for wrong in (101, -1, "64"):
        with pytest.raises(EndpointError):
            read_completion(body(wrong), limit=10**6, cut=False)


def test_resume_with_other_options_is_refused(tmp_path: Path, league: Path) -> None:
    with MockOpenAI(by_content(plain)) as srv:
        run(srv, tmp_path, league, [item(1)], "--judge-option", "top_k=20", "--reasoning-effort", "low")
        path = tmp_path / "items.jsonl"
        base = ["run", str(path), "--db-root", str(league), "--out", str(tmp_path / "out"), "--resume",
                "--judge-model", "gpt-4o-mini", "--judge-base-url", srv.base_url,
                "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
        refused = rose(*base, "--judge-option", "top_k=40", "--reasoning-effort", "low", code=2)
        assert "options" in refused.output
        refused = rose(*base, "--judge-option", "top_k=20", code=2)
        assert "reasoning_effort" in refused.output
        rose(*base, "--judge-option", "top_k=20", "--reasoning-effort", "low", code=0)


def test_request_schema_is_found_where_each_server_takes_it() -> None:
    from rose_sql.testing import request_schema

    schema = {"type": "object", "properties": {"a": {"type": "boolean"}}}
    openai_style = {"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}}
    assert request_schema(openai_style) == schema
    assert request_schema({"response_format": {"type": "json_object", "schema": schema}}) == schema  # llama.cpp
    assert request_schema({"guided_json": json.dumps(schema)}) == schema  # vLLM takes a string too
    assert request_schema({"format": schema}) == schema  # Ollama's native field
    assert request_schema({"response_format": {"type": "json_object"}}) is None
    assert request_schema(openai_style, via=("guided_json",)) is None
