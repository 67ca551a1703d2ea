"""The judges' prompts of real items, pinned byte for byte: their sha256, and the LLM cache key of each call.

Judge cards record the prompts' hashes and the LLM cache is keyed by the messages, so a change to how a
prompt is built must show here and be meant. The cases cover real items of Spider, BIRD (external
knowledge, column descriptions) and KaggleDBQA, matched and mismatched results, the deterministic
evidence block, the Prover's reasoning read by the Refuter, a trimmed schema, fewer example values, each
engine's dialect note, and the reply's schema sent or not (``--judge-structured``). A server's version
is left out of its note (the engine's name stands in), so the pins hold on any machine.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from servers import superhero_fixture  # noqa: F401  (the session fixture superhero_on)

from rose_sql.comparison.comparator import compare
from rose_sql.config import Config, JudgeConfig
from rose_sql.engines import Database, Source
from rose_sql.engines.base import Engine
from rose_sql.engines.execute import Executor
from rose_sql.items.load import Item
from rose_sql.judges.keys import RunKey
from rose_sql.judges.replies import reply_schema
from rose_sql.sql import has_top_level_order_by
from rose_sql.verdicts import ProverReply, RefuterReply

KEY = b"pinned run key"
"""The run key of these pins (a run's is kept with its cache, or given with --run-key)."""
BASE = JudgeConfig(model="judge-model", base_url="http://judge.invalid/v1", cache_dir=None)
PASSED = ProverReply(
    expected_answer="the powers of 3-D Man", sql_behaviour="lists them", reasoning="it joins", answers_question=True
)
EVIDENCE = "Witness database: the prediction returns 2 rows where the gold returns 3.\nGold smell: none."


@dataclass(frozen=True)
class Pin:
    """One item as the judges are shown it."""

    name: str
    path: str
    """The database under the shared data folder (SQLite), or the engine's kind for the superhero copy."""
    item: Item
    judge: JudgeConfig = BASE
    evidence: str | None = None


def _bird(i: int) -> dict[str, Any]:
    return {
        717: {
            "question": "Please list all the superpowers of 3-D Man.",
            "evidence": "3-D Man refers to superhero_name = '3-D Man'; superpowers refers to power_name",
            "SQL": "SELECT T3.power_name FROM superhero AS T1 INNER JOIN hero_power AS T2 ON T1.id = T2.hero_id "
            "INNER JOIN superpower AS T3 ON T2.power_id = T3.id WHERE T1.superhero_name = '3-D Man'",
        },
        718: {
            "question": 'How many superheroes have the super power of "Super Strength"?',
            "evidence": "super power of \"Super Strength\" refers to power_name = 'Super Strength'",
            "SQL": "SELECT COUNT(T1.hero_id) FROM hero_power AS T1 INNER JOIN superpower AS T2 ON T1.power_id = "
            "T2.id WHERE T2.power_name = 'Super Strength'",
        },
    }[i]


B717, B718 = _bird(717), _bird(718)
HERO = "bird/superhero/superhero.sqlite"
PINS = [
    Pin(
        "spider_mismatch",
        "spider/database/concert_singer/concert_singer.sqlite",
        Item(
            0,
            "concert_singer",
            "SELECT name, age FROM singer ORDER BY age",
            "SELECT name ,  country ,  age FROM singer ORDER BY age DESC",
            question="Show name, country, age for all singers ordered by age from the oldest to the youngest.",
        ),
    ),
    Pin(
        "spider_match",
        "spider/database/concert_singer/concert_singer.sqlite",
        Item(
            1,
            "concert_singer",
            "SELECT count(*) FROM singer -- all",
            "SELECT count(*) FROM singer",
            question="How many singers do we have?",
        ),
    ),
    Pin(
        "bird_evidence_mismatch",
        HERO,
        Item(
            717,
            "superhero",
            B717["SQL"].replace("'3-D Man'", "'A-Bomb'"),
            B717["SQL"],
            B717["question"],
            B717["evidence"],
        ),
        evidence=EVIDENCE,
    ),
    Pin(
        "bird_evidence_match",
        HERO,
        Item(718, "superhero", B718["SQL"].replace("T1.hero_id", "*"), B718["SQL"], B718["question"], B718["evidence"]),
        evidence=EVIDENCE,
    ),
    Pin(
        "bird_trimmed_schema",
        HERO,
        Item(717, "superhero", "SELECT power_name FROM superpower", B717["SQL"], B717["question"]),
        judge=replace(BASE, small_schema_chars=500, examples_per_column=1, result_rows=3, cell_chars=8),
    ),
    Pin(
        "kaggle_failed_prediction",
        "kaggledbqa/databases/GeoNuclearData/GeoNuclearData.sqlite",
        Item(
            3,
            "GeoNuclearData",
            "SELECT Country FROM nuclear_power_plant",
            'SELECT Country FROM nuclear_power_plants WHERE Status = "Operational" GROUP BY Country '
            "ORDER BY count(Name) DESC LIMIT 10",
            question="What are the top 10 countries with most number of operational plants?",
        ),
    ),
]
ENGINE_ITEM = Item(
    717, "superhero", B717["SQL"].replace("'3-D Man'", "'A-Bomb'"), B717["SQL"], B717["question"], B717["evidence"]
)

PINNED: dict[str, str] = {
    "bird_evidence_match/prover": "70e28abe4e8c8f7719b0c85245affc04d80fd9ed3e84210ecea26fe2acf6b091",
    "bird_evidence_match/prover/key-auto": "7b5301890410bc5dcdb2477b960d9053c756e52f7006f4c662b54342baf00332",
    "bird_evidence_match/prover/key-off": "a91bd50f36742925686e9641f01e6bb9cd3750553929d4ee59ba61a7c2327207",
    "bird_evidence_match/refuter": "76574da539b61a6ca61948ecefcefdea6b539dd0b9acfe4fe3df936cefeed279",
    "bird_evidence_match/refuter/key-auto": "2b166403698268ae9c9dc4d175a7dcfed254609aa7a0cbd452e07dff115e1216",
    "bird_evidence_match/refuter/key-off": "5969b11dfc86ea1968f4eeefb437b43628ed3bbfa2b71d8c2327ad9854d1047e",
    "bird_evidence_match/refuter_matched": "2e3a6611883675941295c509b76d37309005824c9c06df8d81280c93a56b1373",
    "bird_evidence_match/refuter_matched/key-auto": "2ee8f8b56ef9263f7806cd7974fdc18b03c12c5c303ac14be1f1591cef50ab03",
    "bird_evidence_match/refuter_matched/key-off": "aedc10d0d03a5097f6c75fb3eda2ee032c9790cfd9d4720103e0683bccf67dca",
    "bird_evidence_mismatch/prover": "009e47a751f078e7bd614b8a2f9bf097f81f7adfaaca75b531a33342744959e3",
    "bird_evidence_mismatch/prover/key-auto": "c69463dc6cecca0fc769b8d39e1dc32e5d0b23eed000501ea5d81495529795f5",
    "bird_evidence_mismatch/prover/key-off": "f39b9055ce0da36ad2e34cccf51d56051c5d764545a6f78c45b1d495c2a21bdf",
    "bird_evidence_mismatch/refuter": "06253da90184e53097e8df5bd3c6dc631b2735116c263ac6066f9df0d9a00096",
    "bird_evidence_mismatch/refuter/key-auto": "b943c219cdc898ff47b38ec897361c143b6c683d1d7d175afd71dec4e5739269",
    "bird_evidence_mismatch/refuter/key-off": "5686ec3b1dfa45fce8e66e82698b22b685eb98e552ccf9a36de1b30f41031531",
    "bird_trimmed_schema/prover": "321e6578937258d373ce7cafb87194ae254ef714dee3701ad59fba2c60a5f13a",
    "bird_trimmed_schema/prover/key-auto": "0cee02f4bab5f3a63debef57652f83ce712376df5a60c2e94e1ac0f56567b6c3",
    "bird_trimmed_schema/prover/key-off": "4d38100304578470970735112604ba2b3afc0ddebfaf93772d59d215cad52390",
    "bird_trimmed_schema/refuter": "c9efe57b93933b52a7db22d0dcedbca169719420f0988a687e179242840c3ee5",
    "bird_trimmed_schema/refuter/key-auto": "c5cdb92b6c6738991281f2cf9ef6c1c5d39d18bb0ed55b269d796f4efd6e617d",
    "bird_trimmed_schema/refuter/key-off": "2e2344a424b96a8fac9385087f80ebdd7c5e4728a111102da19d4839a31645d1",
    "engine_duckdb/prover": "493a5ec382f9412c116738f6023aadb5e9710d308083938ee371bb83943cb52a",
    "engine_duckdb/prover/key-auto": "059c9ecc701bf8a407955de830a9ca9cae2f7b749cfdc4c2009b7e3891b478e8",
    "engine_duckdb/prover/key-off": "84809329d784c2fb0aefe250b25a81f38755944667d69c465a88f7544c3dae53",
    "engine_duckdb/refuter": "38b68f1ef067a10950e24f9dd0b10490628f43dd60a9c99f47c140a8c6712559",
    "engine_duckdb/refuter/key-auto": "b001e4d45bdf7a9fdd95c14a9aebd13d576df660c813deb5bd43e85332e43dbb",
    "engine_duckdb/refuter/key-off": "a5d4e81cad9c33fed17962f30d7d20dbf5ada6dc0f4a9f0351ea52514e92d064",
    "engine_mysql/prover": "f4ff610f122715fffa126fae0422c9ecf390978eed5fad0018fc2c6345367f19",
    "engine_mysql/prover/key-auto": "2e185987073662b31dd6b64d26bf197ebf77de70a56397b2e37b97c9aabbe707",
    "engine_mysql/prover/key-off": "d0b6738649f909cd29ca969c4fbc28f49a6d160c1e47f5257a12668d82e95ba9",
    "engine_mysql/refuter": "09a83f4cb4ef51460040bfe685457649abe3af68107ff0f67bc4937219ca7f98",
    "engine_mysql/refuter/key-auto": "9ca687ed958ca8afcff8dd30d639746877649ba744114895ac0b7cffa9dfe046",
    "engine_mysql/refuter/key-off": "10bde1280e93a137f3fdab1752789cb3c09798fe234a1406b950815e309b9405",
    "engine_postgresql/prover": "b6bcf00fab5995df0c953a3eb55f7f26415992bbd6d911d8fb609cf6e2fe9d6d",
    "engine_postgresql/prover/key-auto": "7ebf4e419e443b3eecee5ea79da9086366ae1d54fc2ed453fc403f8706e50acc",
    "engine_postgresql/prover/key-off": "b3e8f6254a5dd7ba62c132f3fd4f962b6123f27f5c3019bd91ae21e6657757bf",
    "engine_postgresql/refuter": "4ef89a42a2ea628f87ed07ab2e381f7d6574858620b346e8f18fcc467150dcbb",
    "engine_postgresql/refuter/key-auto": "eaf5f5db0ffc7b8598cbccb519813de7098dd04a836f12adc35853fe374893c5",
    "engine_postgresql/refuter/key-off": "c4a228dfacfce3399bc0fffe82a62487b9b260258116a348a0d52a3e2d3fafa3",
    "kaggle_failed_prediction/prover": "d7e764a8eee4bccee6dbab84031846b8851b2dc31e5aa6e59dce15acb44f7f1e",
    "kaggle_failed_prediction/prover/key-auto": "a7fbaeade2030e42a2f8178214d604550862a8d0805672296118f4c32ad9926d",
    "kaggle_failed_prediction/prover/key-off": "bbc3c1181b25e1a64d676b22a9e94f965292184a1281c45136ab4d7b4089e376",
    "kaggle_failed_prediction/refuter": "8da6a75b4aa8087d2f5f363f08e40ca4b43e60b164fcea9f139183121e4071ab",
    "kaggle_failed_prediction/refuter/key-auto": "67fd806bca8328ef1f42dfa074152b29dbac8792fb104fd241a170632ff60068",
    "kaggle_failed_prediction/refuter/key-off": "245ebfbc386041af8d49ee331d5c53f8c7c9426a5c9a25fcf5ee4f31794ef61f",
    "spider_match/prover": "12cc7439bf2689a4b20443075e2df543f9cdc67951f996bbf8e6b149169cef2f",
    "spider_match/prover/key-auto": "18aaa94ecbe759d4b422701d5453fb6aa2d97ceba4c3d80b7b3f9768aa3fd3d5",
    "spider_match/prover/key-off": "289bb98a29f576a8a9b16c30330a9a7ae3532dc2ec60ccd471794e4607d66c24",
    "spider_match/refuter": "1ed43323a2c463ee037904f364aecb0e115ab935b3346dfba0364725336c37bb",
    "spider_match/refuter/key-auto": "ff7e4b9a1997d73588ed6eacb5f74a3926ac00871ce971d5b09af67340620899",
    "spider_match/refuter/key-off": "ac63608049c98b3cc978cc01b570a2de0890aeece90bc0845ffc4d973c414b6f",
    "spider_match/refuter_matched": "0abf895383f8bca60e80db2a14da43a148ea101d81fad6d73e9a22a47db471d8",
    "spider_match/refuter_matched/key-auto": "8b7dd424f82876fae0e3a5e4d7bad763562c621e79cc78b52f487899e6c4b1ee",
    "spider_match/refuter_matched/key-off": "646337278597c9b79773b493c11b2b750c7dac3dc457a060c296bac3fa8b8551",
    "spider_mismatch/prover": "9498d217f8e0200e459e9dbe1b33f20ad913c4778c94838bb40be9aebc4fe42e",
    "spider_mismatch/prover/key-auto": "ca1c023455a38a3e4d7f21c0de360c6016eff0d0ab8854ec99517006c935dddf",
    "spider_mismatch/prover/key-off": "764f416cf81f39a93b0c618b969caf14b197b05e191128dfe134a7bb3365fc4d",
    "spider_mismatch/refuter": "ab32c7f9acdac4682b0c6b83c91b8cb83391c0e030bcc9c2d635e7ab6001ec6d",
    "spider_mismatch/refuter/key-auto": "98368449b921e9196b84b0440806ee76297e8bdc61a9ffdfa50ffa1842017990",
    "spider_mismatch/refuter/key-off": "3c9a1530997a01f9b142fb73db761f291b4976c06404dbc9d128df89cef175dc",
}
"""sha256 of every case's messages, and the cache keys of their calls (taken when each call's verdict nonce
joined the prompts, a new prompt version: a change here changes judge cards and misses the cache)."""


def messages_of(pin: Pin, db: Database, executor: Executor) -> Iterator[tuple[str, list[dict[str, str]], type[Any]]]:
    """Each judge's messages for ``pin``: the Prover, the Refuter on mismatch or on matched results."""
    from rose_sql.judges.context import Case
    from rose_sql.judges.judges import Judges

    it = pin.item
    assert it.pred_sql is not None and it.gold_sql is not None
    gold, pred = executor.run(db, it.gold_sql, role="gold"), executor.run(db, it.pred_sql, role="pred")
    comparison = None
    if gold.result is not None and pred.result is not None:
        comparison = compare(pred.result, gold.result, ordered=has_top_level_order_by(it.gold_sql))
    case = Case(it, db, gold, pred, comparison, evidence=pin.evidence)
    judges = Judges(pin.judge, executor, key=RunKey(KEY), asks=False)
    ctx = judges.context(case, judges.schema(db))  # gathered once, rendered for each judge
    yield "prover", judges.messages("prover", ctx), ProverReply
    if comparison is not None and comparison.equal:
        yield "refuter_matched", judges.messages("refuter_matched", ctx), RefuterReply
    yield "refuter", judges.messages("refuter", ctx, PASSED), RefuterReply


def digests(pin: Pin, db: Database, executor: Executor) -> dict[str, str]:
    """sha256 of each judge's messages as its first call sends them (its nonce at the end), and the cache key
    of that call with the reply's schema (which pins the nonce) sent or not."""
    from rose_sql.judges.ask import sealed
    from rose_sql.judges.llm import OpenAILLM

    out: dict[str, str] = {}
    for stage, laid_out, kind in messages_of(pin, db, executor):
        nonce = RunKey(KEY).nonce(stage, pin.judge.model, 0, 0, laid_out)
        messages = sealed(laid_out, nonce)
        blob = json.dumps(messages, sort_keys=True, ensure_ascii=False)
        out[f"{pin.name}/{stage}"] = hashlib.sha256(blob.encode()).hexdigest()
        for structured in ("auto", "off"):
            llm = OpenAILLM(replace(pin.judge, structured=structured))
            out[f"{pin.name}/{stage}/key-{structured}"] = llm.key(messages, reply_schema(kind, nonce))
    return out


def check(got: dict[str, str]) -> None:
    name = next(iter(got)).partition("/")[0]
    pinned = {k: v for k, v in PINNED.items() if k.startswith(name + "/")}
    assert sorted(got) == sorted(pinned)  # the same judges are asked
    changed = {k: v for k, v in got.items() if pinned[k] != v}
    assert not changed, f"prompts changed: {changed}"


@pytest.mark.parametrize("pin", PINS, ids=[p.name for p in PINS])
def test_the_prompts_of_real_items_are_unchanged(shared: Path, pin: Pin) -> None:
    with Executor(Config(workers=1)) as executor:
        check(digests(pin, Database.file(shared / pin.path), executor))


@pytest.mark.parametrize("kind", ["postgresql", "mysql", "duckdb"])
def test_the_prompts_on_each_engine_are_unchanged(
    kind: str, superhero_on: Callable[[str], tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's dialect note comes first in the schema block; its version (the machine's) is left out."""
    with Executor(Config(workers=1)) as executor:
        engine: Engine = executor.engine(kind)  # type: ignore[arg-type]
        monkeypatch.setattr(type(engine), "version", lambda self, db: None)
        db = Source.parse(superhero_on(kind)[1]).locate("superhero")
        check(digests(Pin(f"engine_{kind}", kind, ENGINE_ITEM, evidence=EVIDENCE), db, executor))
