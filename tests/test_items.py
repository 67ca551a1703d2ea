"""Loaders: every format yields the same items, paired by key or line, and bad input names its place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rose_sql.errors import InputError, UsageError
from rose_sql.items.load import detect_format, load_items

BIRD_GOLD = [
    {"question_id": 0, "db_id": "a", "question": "q0", "evidence": "e0", "SQL": "SELECT 0", "difficulty": "simple"},
    {"question_id": 1, "db_id": "a", "question": "q1", "evidence": "", "SQL": "SELECT 1", "difficulty": "moderate"},
    {"question_id": 2, "db_id": "b", "question": "q2", "evidence": "e2", "SQL": "SELECT 2", "difficulty": "simple"},
]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def bird_pred(sql: str, db: str) -> str:
    return f"{sql}\t----- bird -----\t{db}"


def test_bird_pairs_by_key_not_position(tmp_path: Path) -> None:
    gold = write(tmp_path / "dev.json", json.dumps(BIRD_GOLD))
    preds = {"2": bird_pred("SELECT 'two'", "b"), "0": bird_pred("SELECT 'zero'", "a"), "1": bird_pred("x", "a")}
    loaded = load_items(write(tmp_path / "p.json", json.dumps(preds)), gold)
    assert loaded.format == "bird"
    by_id = {it.id: it for it in loaded.items}
    assert by_id[2].pred_sql == "SELECT 'two'" and by_id[2].gold_sql == "SELECT 2" and by_id[2].db_id == "b"
    assert by_id[0].evidence == "e0" and by_id[1].evidence is None and by_id[0].difficulty == "simple"
    assert any("not in order" in w for w in loaded.warnings)


def test_bird_missing_keys_warn(tmp_path: Path) -> None:
    gold = write(tmp_path / "dev.json", json.dumps(BIRD_GOLD))
    loaded = load_items(write(tmp_path / "p.json", json.dumps({"0": bird_pred("SELECT 1", "a")})), gold)
    # a gold question without a prediction is an item without SQL: counted wrong, never dropped
    assert [(it.id, it.pred_sql) for it in loaded.items] == [(0, "SELECT 1"), (1, None), (2, None)]
    assert [it.source for it in loaded.items[1:]] == ["dev.json[1]", "dev.json[2]"]
    (warning,) = [w for w in loaded.warnings if "2 of 3 questions" in w]
    assert "(ids 1, 2)" in warning and "no_prediction, scored 0" in warning


@pytest.mark.parametrize(
    ("preds", "message"),
    [
        ({"zero": bird_pred("SELECT 1", "a")}, "'zero'"),
        ({"7": bird_pred("SELECT 1", "a")}, "out of range"),
        ({"0": bird_pred("SELECT 1", "b")}, "db_id 'b'"),
        ({"0": 5}, "must be a string"),
    ],
)
def test_bird_bad_keys_name_the_key(tmp_path: Path, preds: dict[str, object], message: str) -> None:
    gold = write(tmp_path / "dev.json", json.dumps(BIRD_GOLD))
    with pytest.raises(InputError, match=message) as e:
        load_items(write(tmp_path / "p.json", json.dumps(preds)), gold)
    assert "p.json" in str(e.value)


def test_bird_needs_gold(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--gold"):
        load_items(write(tmp_path / "p.json", json.dumps({"0": bird_pred("SELECT 1", "a")})))


def test_malformed_json_names_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"p\.json:3: invalid JSON"):
        load_items(write(tmp_path / "p.json", '{\n"0": "a",\n"1" "b"\n}'), tmp_path / "dev.json")


def test_spider_lines_tabs_and_db_ids(tmp_path: Path) -> None:
    gold = write(tmp_path / "gold.sql", "SELECT 1\tdb1\nSELECT 2\tdb2\nSELECT 3\tdb1\n")
    preds = write(tmp_path / "p.txt", "SELECT a\tFROM t\nSELECT b\tdb2\n\n")
    loaded = load_items(preds, gold)
    assert loaded.format == "spider"
    assert [(it.id, it.db_id, it.pred_sql) for it in loaded.items] == [
        (0, "db1", "SELECT a\tFROM t"),  # a tab inside the SQL is kept (the test suite cuts there)
        (1, "db2", "SELECT b"),
        (2, "db1", ""),  # an empty line is an empty prediction, never a shift of later lines
    ]


def test_spider_line_count_mismatch_is_an_error(tmp_path: Path) -> None:
    gold = write(tmp_path / "gold.sql", "SELECT 1\tdb1\nSELECT 2\tdb2\n")
    with pytest.raises(InputError, match="1 prediction lines but 2 gold"):
        load_items(write(tmp_path / "p.txt", "SELECT 1\n"), gold)


def test_spider_wrong_db_id_names_line(tmp_path: Path) -> None:
    gold = write(tmp_path / "gold.sql", "SELECT 1\tdb1\nSELECT 2\tdb2\n")
    with pytest.raises(InputError, match=r"p\.sql:2: db_id 'db1'"):
        load_items(write(tmp_path / "p.sql", "SELECT 1\tdb1\nSELECT 2\tdb1\n"), gold)


def test_sqlexam_keeps_ids_as_given(tmp_path: Path) -> None:
    data = [
        {
            "question_id": "q-7",
            "db_id": "a",
            "question": "q",
            "evidence": "",
            "predicted_sql": "SELECT 1",
            "gold_sql": "SELECT 1",
            "difficulty": "simple",
        },
        {
            "question_id": 12,
            "db_id": "a",
            "question": "q",
            "evidence": "e",
            "predicted_sql": None,
            "gold_sql": "SELECT 2",
            "difficulty": "moderate",
        },
    ]
    loaded = load_items(write(tmp_path / "r.json", json.dumps(data)))
    assert loaded.format == "sqlexam"
    assert [it.id for it in loaded.items] == ["q-7", 12]
    assert loaded.items[1].pred_sql == "" and loaded.items[1].evidence == "e"


def test_duplicate_ids_rejected(tmp_path: Path) -> None:
    rows = [{"id": 1, "db_id": "a", "pred_sql": "SELECT 1"}, {"id": 1, "db_id": "a", "pred_sql": "SELECT 2"}]
    with pytest.raises(InputError, match="occurs more than once"):
        load_items(write(tmp_path / "g.jsonl", "\n".join(json.dumps(r) for r in rows)))


def test_generic_jsonl_and_csv(tmp_path: Path) -> None:
    row = {"id": "x1", "db_id": "a", "question": "q", "evidence": "", "gold_sql": "SELECT 1", "pred_sql": "SELECT 2"}
    j = load_items(write(tmp_path / "g.jsonl", json.dumps(row) + "\n\n"))
    c = load_items(
        write(tmp_path / "g.csv", "id,db_id,question,evidence,gold_sql,pred_sql\nx1,a,q,,SELECT 1,SELECT 2\n")
    )
    for loaded in (j, c):
        it = loaded.items[0]
        assert (it.id, it.db_id, it.gold_sql, it.pred_sql, it.evidence) == ("x1", "a", "SELECT 1", "SELECT 2", None)


def test_generic_jsonl_bad_line_named(tmp_path: Path) -> None:
    good = json.dumps({"id": 1, "db_id": "a", "pred_sql": "SELECT 1"})
    with pytest.raises(InputError, match=r"g\.jsonl:2"):
        load_items(write(tmp_path / "g.jsonl", good + "\n{not json\n"))
    with pytest.raises(InputError, match=r"g\.jsonl:1: missing field 'db_id'"):
        load_items(write(tmp_path / "g.jsonl", json.dumps({"id": 1, "pred_sql": "x"})))


def test_dincsv(tmp_path: Path) -> None:
    text = (
        'NLQ,PREDICTED SQL,GOLD SQL,DATABASE\n"How many, really?",SELECT COUNT(*) FROM t,SELECT count(*) FROM t,db1\n'
    )
    loaded = load_items(write(tmp_path / "d.csv", text))
    assert loaded.format == "dincsv"
    it = loaded.items[0]
    assert (it.id, it.question, it.db_id, it.pred_sql) == (0, "How many, really?", "db1", "SELECT COUNT(*) FROM t")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        load_items(tmp_path / "nope.jsonl")


# --------------------------------------------------------------------------- real files


def test_real_spider_files_pair_with_gold(shared: Path) -> None:
    gold = shared / "spider" / "dev_gold.sql"
    for name in ("c3sql.txt", "dail-sql-gpt4.txt", "ta-sql.sql", "din-sql-gpt4.csv"):
        loaded = load_items(shared / "preds" / "spider" / name, gold)
        assert len(loaded.items) == 1034, name
        assert loaded.items[0].db_id == "concert_singer"
        assert loaded.items[-1].gold_sql is not None


def test_real_bird_official_format(shared: Path) -> None:
    loaded = load_items(shared / "preds" / "bird-dev-official-format" / "ta-sql.json", shared / "bird" / "dev.json")
    assert detect_format(shared / "preds" / "bird-dev-official-format" / "ta-sql.json") == "bird"
    assert len(loaded.items) == 1534 and not loaded.warnings
    first = loaded.items[0]
    assert first.db_id == "california_schools" and first.difficulty == "simple" and first.evidence


def test_real_sqlexam(shared: Path) -> None:
    loaded = load_items(shared / "preds" / "bird-dev" / "c3-result.json")
    assert loaded.format == "sqlexam" and len(loaded.items) == 1534
    assert sum(it.db_id == "superhero" for it in loaded.items) == 129


# --------------------------------------------------------------------------- repeated question ids, --gold notes


def test_repeated_question_ids_get_stable_unique_ids(tmp_path: Path) -> None:
    rows = [*BIRD_GOLD, {**BIRD_GOLD[1]}, {**BIRD_GOLD[0], "SQL": "SELECT 'again'"}]
    gold = write(tmp_path / "mini.json", json.dumps(rows))
    preds = {str(i): bird_pred(f"SELECT {i}", r["db_id"]) for i, r in enumerate(rows)}
    pred = write(tmp_path / "p.json", json.dumps(preds))
    first, again = load_items(pred, gold), load_items(pred, gold)
    assert [it.id for it in first.items] == [0, 1, 2, "1@3", "0@4"] == [it.id for it in again.items]
    assert [it.pred_sql for it in first.items] == [f"SELECT {i}" for i in range(5)]  # paired by key = position
    assert first.items[4].gold_sql == "SELECT 'again'"
    (warning,) = [w for w in first.warnings if "repeats" in w]
    assert "mini.json" in warning and "1 at positions 1, 3" in warning and "'0@4'" in warning


def test_sqlexam_with_gold_says_what_the_gold_did(tmp_path: Path) -> None:
    gold = write(tmp_path / "dev.json", json.dumps(BIRD_GOLD))
    rows = [
        {"question_id": 2, "db_id": "b", "predicted_sql": "SELECT 2", "gold_sql": "SELECT 2"},
        {"question_id": 0, "db_id": "a", "predicted_sql": "SELECT 0", "gold_sql": "SELECT 'old'"},
        {"question_id": 9, "db_id": "a", "predicted_sql": "SELECT 9", "gold_sql": "SELECT 9"},
    ]
    loaded = load_items(write(tmp_path / "r.json", json.dumps(rows)), gold)
    assert [it.gold_sql for it in loaded.items] == ["SELECT 2", "SELECT 0", "SELECT 9", "SELECT 1"]
    assert loaded.items[1].question == "q0"
    assert (loaded.items[3].id, loaded.items[3].pred_sql) == (1, None)  # the gold's question 1 has no prediction
    note, missing = loaded.warnings
    assert missing.startswith("r.json: 1 of 3 questions in dev.json have no prediction (ids 1)")
    assert note.startswith("r.json carries its own gold_sql; --gold dev.json replaced it for 2 of 3 items")
    assert "(1 of them differ" in note and "question_id 9 (1) not in it keep their own" in note


def test_sqlexam_cannot_match_gold_lines(tmp_path: Path) -> None:
    gold = write(tmp_path / "gold.sql", "SELECT 1\ta\n")
    rows = [{"question_id": 0, "db_id": "a", "predicted_sql": "SELECT 1", "gold_sql": "SELECT 1"}]
    with pytest.raises(UsageError, match=r"r\.json: .*by question_id, and .*gold\.sql .*has none"):
        load_items(write(tmp_path / "r.json", json.dumps(rows)), gold)


def test_own_gold_formats_say_how_much_gold_they_took(tmp_path: Path) -> None:
    gold = write(tmp_path / "gold.sql", "SELECT 1\tdb1\nSELECT 2\tdb2\n")
    din = write(tmp_path / "d.csv", "NLQ,PREDICTED SQL,GOLD SQL,DATABASE\nq,SELECT 1,SELECT 1,db1\nr,SELECT 2,,db2\n")
    loaded = load_items(din, gold)
    assert [it.gold_sql for it in loaded.items] == ["SELECT 1", "SELECT 2"]
    assert loaded.warnings == [
        "d.csv carries gold SQL for 1 of 2 items; --gold gold.sql filled the other 1, paired by position"
    ]
    full = write(
        tmp_path / "f.csv", "NLQ,PREDICTED SQL,GOLD SQL,DATABASE\nq,SELECT 1,SELECT 1,db1\nr,SELECT 2,SELECT 2,db2\n"
    )
    (note,) = load_items(full, gold).warnings
    assert note.startswith("f.csv carries gold SQL for all 2 items: --gold gold.sql gave none")
    jsonl = write(
        tmp_path / "g.jsonl", '{"id": 1, "db_id": "db1", "pred_sql": "x"}\n{"id": 2, "db_id": "db2", "pred_sql": "y"}'
    )
    (note,) = load_items(jsonl, gold).warnings
    assert note == "g.jsonl: gold SQL of all 2 items from --gold gold.sql, paired by position"


def test_gold_by_position_must_agree_on_db_id(tmp_path: Path) -> None:
    gold = write(tmp_path / "gold.sql", "SELECT 1\tdb1\nSELECT 2\tdb2\n")
    din = write(tmp_path / "d.csv", "NLQ,PREDICTED SQL,GOLD SQL,DATABASE\nr,SELECT 2,,db2\nq,SELECT 1,,db1\n")
    with pytest.raises(InputError, match=r"d\.csv:2: db_id 'db2' but question 0 of .*gold\.sql is on 'db1'"):
        load_items(din, gold)


# --------------------------------------------------------------------------- BIRD mini-dev as published

DIALECTS = ("sqlite", "mysql", "postgresql")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_real_minidev_official_predictions_load_paired_by_key(shared: Path, dialect: str) -> None:
    gold_json, gold_sql = shared / "bird" / f"mini_dev_{dialect}.json", shared / "bird" / f"mini_dev_{dialect}_gold.sql"
    questions = json.loads(gold_json.read_text(encoding="utf-8"))
    for model in ("gpt-4", "gpt-35-turbo"):
        pred = shared / "preds" / "bird-minidev-official" / f"predict_mini_dev_{model}_{dialect}.json"
        raw = json.loads(pred.read_text(encoding="utf-8"))
        by_json, by_lines = load_items(pred, gold_json), load_items(pred, gold_sql)
        assert by_json.format == by_lines.format == "bird"
        ids = [it.id for it in by_json.items]
        assert len(ids) == len(set(ids)) == 500
        assert ids[:484] == [q["question_id"] for q in questions[:484]]
        assert ids[484:490] == [
            137,
            138,
            questions[486]["question_id"],
            "137@487",
            "138@488",
            questions[489]["question_id"],
        ]
        assert [it.id for it in by_lines.items] == list(range(500))  # SQL<TAB>db_id lines have no question_id
        for i, (a, b) in enumerate(zip(by_json.items, by_lines.items, strict=True)):
            assert a.pred_sql == b.pred_sql == raw[str(i)].split("\t----- bird -----\t")[0]
            assert a.db_id == b.db_id == questions[i]["db_id"]
            assert a.gold_sql == questions[i]["SQL"] and " ".join(b.gold_sql.split()) == " ".join(a.gold_sql.split())
        assert by_json.items[487].question == by_json.items[484].question  # the same question, asked twice
        (warning,) = by_json.warnings
        assert (
            f"mini_dev_{dialect}.json repeats question ids (137 at positions 484, 487; 138 at positions 485, 488)"
            in warning
        )
        assert "'137@487', '138@488'" in warning
        assert not by_lines.warnings


def test_real_sqlexam_minidev_with_gold_is_told(shared: Path) -> None:
    pred = shared / "preds" / "bird-minidev" / "gpt-4-result.json"
    plain, golded = load_items(pred), load_items(pred, shared / "bird" / "mini_dev_sqlite.json")
    assert [it.id for it in plain.items] == [it.id for it in golded.items]
    assert len(golded.items) == 500 and not plain.warnings
    note = next(w for w in golded.warnings if "carries its own gold_sql" in w)
    assert "replaced it for 498 of 500 items" in note and "question_id 119, 120 (2) not in it" in note
    with pytest.raises(UsageError, match="by question_id"):
        load_items(pred, shared / "bird" / "mini_dev_sqlite_gold.sql")


def test_real_din_csv_with_gold_is_told(shared: Path) -> None:
    loaded = load_items(shared / "preds" / "spider" / "din-sql-gpt4.csv", shared / "spider" / "dev_gold.sql")
    assert loaded.warnings == [
        "din-sql-gpt4.csv carries gold SQL for all 1034 items: --gold dev_gold.sql gave none "
        "(it fills only what items lack, paired by position)"
    ]
