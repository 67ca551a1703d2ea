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
from rose_sql.judges.context import Fences
from rose_sql.judges.replies import reply_schema
from rose_sql.sql import has_top_level_order_by
from rose_sql.verdicts import ProverReply, RefuterReply

KEY = b"pinned fence secret"
"""The fences' secret of these pins (a run's is kept with its cache)."""
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
    "bird_evidence_match/prover": "ae3c480b0fa63649d3d72c72c3e79e4965a5bfe8faaad04d4c255e2187bcdd33",
    "bird_evidence_match/prover/key-auto": "1ee1a5ff1ee500f1dd858df74210317e691be568d342d449ef358eedc29cb4e4",
    "bird_evidence_match/prover/key-off": "d94abfef8127222a10ab36c53e04884e39b9eb35b1a8d8513db89223bf97e1fc",
    "bird_evidence_match/refuter": "4552bd6cead32f743cb33005e9506a36d510e38d635d84d03bece330bfbe626e",
    "bird_evidence_match/refuter/key-auto": "c31492bff59935b4a22656b9b393811704040aeeda337307c3f5e2cc4d09c085",
    "bird_evidence_match/refuter/key-off": "885c931c70eefff4131b6629b7b3be05a5d04b89b57c1b228f7d41db48e139b8",
    "bird_evidence_match/refuter_matched": "e187af5b1548fa0994b7ea1f3aedfd28562eddc19141f5921efce867c1417642",
    "bird_evidence_match/refuter_matched/key-auto": "b1ba2beaba79d973fd2391400ca025eb10c284b82669e23ea7c58b9a83997835",
    "bird_evidence_match/refuter_matched/key-off": "30a583835af7b07c5cf160e1c9a182c09e7960e19f9daec040085a30b3328e94",
    "bird_evidence_mismatch/prover": "3c11b0d57b71a0a4aedc3b9a484b5a566f1d6b7a35601259b89d1c62bda6b79b",
    "bird_evidence_mismatch/prover/key-auto": "697d6e2245c517a134a228fc74f9f29ce22424914e8bfd298b779bbcddad82e9",
    "bird_evidence_mismatch/prover/key-off": "ca5638efd1d4796a4cb9cc2299875e782990678942e014a3dd34e279a41df56e",
    "bird_evidence_mismatch/refuter": "7b96ce677daa0cf9c838203c5e4cdd293801f5eda4fe79bf99dcadbc377576e9",
    "bird_evidence_mismatch/refuter/key-auto": "b46433b245529160988af964dc95b77423d69f3fe1e5c1045711b68eaea13900",
    "bird_evidence_mismatch/refuter/key-off": "24290a71a56b5e21005a60507822ac4c3a32015ea9905d29abba658437206d5f",
    "bird_trimmed_schema/prover": "69592db74e0a731c447be67c2ec4456371f740b7a90729a8b436563c828f0434",
    "bird_trimmed_schema/prover/key-auto": "13557f3c4be15349353f16ec99fcf4c4dc392e2255f8e173a147197fa1550fd6",
    "bird_trimmed_schema/prover/key-off": "3531c9cca0c3783e4bdeb5ebbd6eed7233d5e491790eaa86b5994eb12d669fc0",
    "bird_trimmed_schema/refuter": "ffe2b517c21472cd368a45ad865b53cd18a35c21bab89c5e9e1a1282de49fb21",
    "bird_trimmed_schema/refuter/key-auto": "fba24bb9815f09736ed2d9a23da4ddfbc88af8ac8fbc833e96dd0db66dbbb08b",
    "bird_trimmed_schema/refuter/key-off": "feb0e27488aa7b0a24a12ef33e0d4391a8e8f9645ca19a982500981dfe940839",
    "engine_duckdb/prover": "fcea44e121c103232785e9681aa140c6d154084f8a300aa3093b4607f392d7ed",
    "engine_duckdb/prover/key-auto": "dbbd431bd43e26f965318e42f4cb523b45eb293edba40a01807dbf6ba05b0291",
    "engine_duckdb/prover/key-off": "29b18d313c907db6f7e96488d351646ebb718bd32a9f78b87c6e77338c795ea9",
    "engine_duckdb/refuter": "3c4e6ce228c82326c62daa2c39557850811d2fad413f4804f212e64b64e49d78",
    "engine_duckdb/refuter/key-auto": "26633a9441188b04e86ac6276d0bb8963183ebe020fd60c311822b65d809a123",
    "engine_duckdb/refuter/key-off": "bd652dc069c22c2f557ae2f21a8dc9b5236a5059af168253f331749c391fee63",
    "engine_mysql/prover": "24082f911c754be0778d2c4bb6cdde886c8d8f77c7b594a0dc3287e57e8668ee",
    "engine_mysql/prover/key-auto": "757c57022341722919f3d2c847e3c5946d5a751f30c623f67ff8cc49db528006",
    "engine_mysql/prover/key-off": "89517302af769c4ba9c78ca072f5d9521e26bbf07df1fdfa7ccb01ae1e5529f3",
    "engine_mysql/refuter": "4099b2093dbd915e1bf45fd4a682c43a159b167f9a84d7568d6d34cc9a3f9a6b",
    "engine_mysql/refuter/key-auto": "00b376d06c940631a9030c0fead1f47c20cd73990d17080ef241458336cb319d",
    "engine_mysql/refuter/key-off": "6aceb82113b9547188d3c882629e4ed59c7d55e84ef9f5439ba3836fe2b27df7",
    "engine_postgresql/prover": "ed0df729912a4ea85e4da9211b201a2ed79a62d9610e06e439a60b6791c0bf4c",
    "engine_postgresql/prover/key-auto": "650438da960661ad0aed7ebb6506ed8a6b7520ca69f3567d762bc04b073cf21e",
    "engine_postgresql/prover/key-off": "841c8f6a64dbf294d5f305866369888a0e09a2fabcef91458208c16ff46d2bd0",
    "engine_postgresql/refuter": "fa6ef9bf30c3f040eeaf2248edba00e35172fa8490f30c13b33cff04b8b690a3",
    "engine_postgresql/refuter/key-auto": "7f71d5b0e0c66592dece86e73a4973441d0f0c5a0205481e1a6c61553736c1fb",
    "engine_postgresql/refuter/key-off": "e93a30d899a6fe9de603d820ecdbbd0b32138af76b8f1ae1c0e905195ac1cfd5",
    "kaggle_failed_prediction/prover": "fc6dc0ee7f3e290c5592b3d34d3812b7ecaf0b3ad60cfdddcb39c6728352e790",
    "kaggle_failed_prediction/prover/key-auto": "786b957fe41d926dbaf3387d3af37410723480514830bdd6feb8589bc2e6ac68",
    "kaggle_failed_prediction/prover/key-off": "3537f5b390633b08e7482e6241ed823f702ed7dfbcda3e5ba4b0979f726c23e2",
    "kaggle_failed_prediction/refuter": "e66c81faf282a70be62c48c63344c7ac3a1f7ab681b1375f8014f364ce6af98f",
    "kaggle_failed_prediction/refuter/key-auto": "8a92e5f181279863303bb317ee8171f32380e46ce4ff872fc5d557fad20538ea",
    "kaggle_failed_prediction/refuter/key-off": "7141a77acb386486b477a6224441da0445b363a88ba4e8dc3184d95f35ceefea",
    "spider_match/prover": "fe8d2e4d9c8bab3cc3b50e98dc3c9545640022704fa5319968e51d8376a3bd33",
    "spider_match/prover/key-auto": "2445252c1df421a80034a31dac27e10bbd9dc840dca3b52c49b9bd5580a11278",
    "spider_match/prover/key-off": "1d775037f7d55c48ef54aef8cb3885e295497d8b59696bd3f706aa0995c15e39",
    "spider_match/refuter": "686c539135c822d46b1d90ea262fdc0c68ffe3485fbe5608ff868be31a089211",
    "spider_match/refuter/key-auto": "d900c61976cc0f19f6de2fb9e1d606c703bcbf0bb70dcb14ea9e56699a3c7743",
    "spider_match/refuter/key-off": "473d2292034e38cd5305e8b16ea3d1972eef5f8f37dcfe78b28ffcb525969981",
    "spider_match/refuter_matched": "c91d68928d7edea706cf6cd1ecbd9a6fc28f3160c76d9783cc6933d7d59799d2",
    "spider_match/refuter_matched/key-auto": "5262a4e531485998b8882c546ebc8c93e721f90e5eb88cbb3f72f90f7ac97179",
    "spider_match/refuter_matched/key-off": "a529df8b3e6c4f2f62a7de3ae6596c2a4e2ef1d8b205d420c106e56a6f0ed8ee",
    "spider_mismatch/prover": "7bc451899870124fe96ab10f8e809a3a83f61c0dd1f3311bdb485422586a5d92",
    "spider_mismatch/prover/key-auto": "698ba006e5e077773ead21e0e53515f4727f21b0c9488af4c395c0d6b11f93c6",
    "spider_mismatch/prover/key-off": "659e35ada0ae4d6df1653255f84edfaed63eaedcd18edc6932698f6e789185eb",
    "spider_mismatch/refuter": "c370b2f41332629489d28af1acd7bbe7a6544f26489f52dd79f3d4ad5392ae18",
    "spider_mismatch/refuter/key-auto": "b98f3c7b66f2f8ded72b1271ff5c25ad93156ec5bc8788feb57baeb5c0eb0e59",
    "spider_mismatch/refuter/key-off": "358289a131d5faff46fb2ab2a9a37f7c03f14b373b133bd18b9afdf57aaf1f0e",
}
"""sha256 of every case's messages, and the cache keys of their calls (taken from the code before the judges'
refactor of issue 24: a change here changes judge cards and misses the cache)."""


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
    judges = Judges(pin.judge, executor, fences=Fences(KEY), asks=False)
    ctx = judges.context(case, judges.schema(db))  # gathered once, rendered for each judge
    yield "prover", judges.messages("prover", ctx), ProverReply
    if comparison is not None and comparison.equal:
        yield "refuter_matched", judges.messages("refuter_matched", ctx), RefuterReply
    yield "refuter", judges.messages("refuter", ctx, PASSED), RefuterReply


def digests(pin: Pin, db: Database, executor: Executor) -> dict[str, str]:
    """sha256 of each judge's messages, and the cache key of its call with the reply's schema sent or not."""
    from rose_sql.judges.llm import OpenAILLM

    out: dict[str, str] = {}
    for stage, messages, kind in messages_of(pin, db, executor):
        blob = json.dumps(messages, sort_keys=True, ensure_ascii=False)
        out[f"{pin.name}/{stage}"] = hashlib.sha256(blob.encode()).hexdigest()
        for structured in ("auto", "off"):
            llm = OpenAILLM(replace(pin.judge, structured=structured))
            out[f"{pin.name}/{stage}/key-{structured}"] = llm.key(messages, reply_schema(kind))
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
