"""Hostile input files: each one is an InputError naming the file and the line or key, never a crash,
never an item silently scored or lost. The shapes kept here include the nastiest the fuzz test found."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from rose_sql.cli import main
from rose_sql.errors import InputError
from rose_sql.items.load import load_items

GOLD3 = [{"question_id": i, "db_id": "a", "question": f"q{i}", "SQL": f"SELECT {i}"} for i in range(3)]
ROW = b'{"id": 1, "db_id": "a", "pred_sql": "SELECT 1"}\n'
BIRD = b'{"0": "SELECT 1\\t----- bird -----\\ta", '
HEADER = b"id,db_id,pred_sql\n"
DIN = b"NLQ,PREDICTED SQL,GOLD SQL,DATABASE\n"

# (file name, content, needs the BIRD gold, where the error must point, what it must say)
CASES = [
    ("nan.jsonl", ROW + b'{"id": NaN, "db_id": "a", "pred_sql": "x"}\n', False, 2, "'id': NaN is not a number"),
    ("inf.jsonl", b'{"id": 1, "db_id": "a", "pred_sql": "x", "score": -Infinity}\n', False, 1, "'score': -Infinity"),
    ("inf_bird.json", BIRD + b'"1": Infinity}', True, "'1'", "Infinity is not a number"),
    (
        "nan_deep.json",
        b'[{"question_id": 1, "db_id": "a", "predicted_sql": "x", "m": {"s": [NaN]}}]',
        False,
        "[0]",
        "'m.s[0]': NaN",
    ),
    ("huge_float.jsonl", b'{"id": 1, "db_id": "a", "pred_sql": "x", "s": 1e999}\n', False, 1, "beyond the range"),
    ("huge_int.jsonl", b'{"id": 1' + b"0" * 5000 + b', "db_id": "a", "pred_sql": "x"}\n', False, 1, "5001 digits"),
    (
        "list_id.jsonl",
        b'{"id": [1], "db_id": "a", "pred_sql": "x"}\n',
        False,
        1,
        "'id' must be a string or an integer, not a list",
    ),
    ("object_id.jsonl", b'{"id": {"a": 1}, "db_id": "a", "pred_sql": "x"}\n', False, 1, "not an object"),
    ("bool_id.jsonl", b'{"id": true, "db_id": "a", "pred_sql": "x"}\n', False, 1, "not true/false"),
    ("float_id.jsonl", b'{"id": 1.5, "db_id": "a", "pred_sql": "x"}\n', False, 1, "not the number 1.5"),
    ("null_id.jsonl", b'{"id": null, "db_id": "a", "pred_sql": "x"}\n', False, 1, "not null"),
    ("blank_id.jsonl", b'{"id": "  ", "db_id": "a", "pred_sql": "x"}\n', False, 1, "'id' is empty"),
    ("surrogate_id.jsonl", b'{"id": "\\ud800", "db_id": "a", "pred_sql": "x"}\n', False, 1, "unpaired surrogate"),
    ("nul_id.jsonl", b'{"id": "a\\u0000", "db_id": "a", "pred_sql": "x"}\n', False, 1, "NUL character"),
    ("deep.json", b"[" * 100_000 + b"]" * 100_000, False, 1, "nested 100000 levels deep"),
    ("deep.jsonl", ROW + b'{"id": 2, "d": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n", False, 2, "nested"),
    ("repeated_key.json", BIRD + b'\n"0": "SELECT 2"}', True, 2, "the key '0' occurs twice"),
    (
        "repeated_field.jsonl",
        b'{"id": 1, "db_id": "a", "pred_sql": "x", "pred_sql": "y"}\n',
        False,
        1,
        "'pred_sql' occurs twice",
    ),
    ("long_header.csv", b"id,db_id,pred_sql," + b"x" * 140_000 + b"\n1,a,b,c\n", False, 1, "longer than 131,072"),
    ("long_field.csv", HEADER + b'1,a,"' + b"x" * 140_000 + b'"\n', False, 2, "longer than 131,072"),
    ("short_din_row.csv", DIN + b"q,SELECT 1,SELECT 1\n", False, 2, "3 fields but the header has 4"),
    ("long_row.csv", HEADER + b"1,a,SELECT 1,extra\n", False, 2, "4 fields but the header has 3"),
    ("short_generic_row.csv", HEADER + b"1,a,SELECT 1\n2,a\n", False, 3, "2 fields but the header has 3"),
    ("no_pred_column.csv", b"id,db_id,gold_sql\n1,a,SELECT 1\n", False, 1, "missing column 'pred_sql'"),
    ("twice_column.csv", b"id,db_id,pred_sql,id\n1,a,x,2\n", False, 1, "column 'id' occurs twice"),
    ("unterminated.csv", HEADER + b'1,a,"SELECT 1\n2,a,SELECT 2\n3,a,SELECT 3\n', False, 2, "never closed"),
    ("quote_then_text.csv", HEADER + b'1,a,"SELECT" 1\n', False, 2, "invalid CSV"),
    ("nul_header.csv", b"id,db_id,pred\x00_sql\n1,a,x\n", False, 1, "NUL byte at column 14"),
    ("nul_line.txt", b"SELECT 1\nSELECT\x00 2\nSELECT 3\n", True, 2, "NUL byte"),
    ("latin1.jsonl", ROW + b'{"id": 2, "db_id": "a", "pred_sql": "caf\xe9"}\n', False, 2, "not UTF-8 text (byte 0xe9"),
    ("bom_latin1.jsonl", b'\xef\xbb\xbf{"id": 1, "db_id": "a", "pred_sql": "caf\xe9"}\n', False, 1, "at column 41"),
    ("utf16.jsonl", '{"id": 1}\n'.encode("utf-16"), False, 1, "UTF-16"),
    ("gzip.json", b"\x1f\x8b\x08\x00\x00\x00", False, 1, "gzip-compressed"),
    ("sqlite.csv", b"SQLite format 3\x00" + b"\x00" * 84, False, 1, "a SQLite database"),
    ("json_named.txt", BIRD + b'"1": "x"}', True, 1, "looks like JSON"),
    ("jsonl_named.json", ROW + ROW, False, 2, "name the file .jsonl"),
    ("travel.jsonl", b'{"id": 1, "db_id": "../../etc", "pred_sql": "x"}\n', False, 1, "not a database folder name"),
    ("number_db.jsonl", b'{"id": 1, "db_id": 7, "pred_sql": "x"}\n', False, 1, "'db_id' must be text"),
    ("list_sql.jsonl", b'{"id": 1, "db_id": "a", "pred_sql": ["x"]}\n', False, 1, "'pred_sql' must be text"),
    (
        "list_question.jsonl",
        b'{"id": 1, "db_id": "a", "pred_sql": "x", "question": [1]}\n',
        False,
        1,
        "'question' must be text",
    ),
    (
        "missing_pred.json",
        b'[{"question_id": 1, "db_id": "a", "predicted_sql": "x"}, {"question_id": 2, "db_id": "a"}]',
        False,
        "[1]",
        "missing field 'predicted_sql'",
    ),
    ("line_not_object.jsonl", ROW + b"[1, 2]\n", False, 2, "must be a JSON object"),
    ("twice_position.json", b'{"1": "SELECT 1", "01": "SELECT 2"}', True, "'01'", "both name question 1"),
    ("arabic_digit.json", '{"\u0663": "SELECT 1"}'.encode(), True, "'\u0663'", "not a question position"),
    ("long_key.json", b'{"' + b"9" * 5000 + b'": "SELECT 1"}', True, "'9999", "out of range"),
    ("bird_list_value.json", b'{"0": ["SELECT 1"]}', True, "'0'", "not a list"),
    ("bird_top_list.json", b"[1, 2]", True, 1, "cannot tell the format"),
    ("truncated.json", BIRD[:-2], True, 1, "invalid JSON"),
    ("dup_ids.jsonl", ROW + ROW, False, 2, "item id 1 occurs more than once (dup_ids.jsonl:1 and dup_ids.jsonl:2)"),
    ("empty.jsonl", b"", False, None, "no items"),
    ("blank_lines.jsonl", b"\n  \n\n", False, None, "no items"),
    ("header_only.csv", HEADER, False, None, "no items"),
    ("empty.csv", b"", False, None, "empty CSV file"),
    ("empty_bird.json", b"{}", True, None, "no items"),
    # shapes the fuzz test found: a value the strict parser rejects, then a syntax error or deep nesting after it
    ("number_then_syntax.json", b'{"0": ' + b"9" * 5000 + b', "1" "x"}', True, 1, "invalid JSON: Expecting ':'"),
    ("nan_then_deep.jsonl", b'{"id": NaN, "d": ' + b"[" * 100_000 + b"}\n", False, 1, "nested"),
    ("repeat_then_truncated.json", BIRD + b'"0": "x", "1": "SELECT', True, 1, "invalid JSON: Unterminated string"),
    ("only_infinity.json", b"\n Infinity", True, 2, "Infinity is not a number JSON allows"),
    ("truncated_row.csv", HEADER + b'1,a,"SELECT 1"\n2,a,"SELECT', False, 3, "never closed"),
]


def write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


@pytest.mark.parametrize(("name", "data", "bird", "where", "message"), CASES, ids=[c[0] for c in CASES])
def test_hostile_file_is_an_input_error_at_its_place(
    tmp_path: Path, name: str, data: bytes, bird: bool, where: str | int | None, message: str
) -> None:
    gold = None
    if bird:
        gold = write(tmp_path / "dev.json", json.dumps(GOLD3)) if name.endswith(".json") else None
        gold = gold or write(tmp_path / "gold.sql", "SELECT 1\ta\nSELECT 2\ta\nSELECT 3\ta\n")
    path = write(tmp_path / name, data)
    with pytest.raises(InputError) as e:
        load_items(path, gold)
    assert e.value.path == str(path)
    assert message in str(e.value)
    if where is None:
        assert str(e.value).startswith(f"{path}: ")
    else:
        assert str(e.value).startswith(f"{path}:{where}")


def test_gold_file_problems_name_the_gold(tmp_path: Path) -> None:
    pred = write(tmp_path / "p.json", '{"0": "SELECT 1"}')
    cases = [
        ('[{"question_id": 0, "db_id": "a", "SQL": NaN}]', "[0]", "'SQL': NaN"),
        ('[{"question_id": [0], "db_id": "a", "SQL": "x"}]', "[0]", "'question_id' must be a string or an integer"),
        ('[{"question_id": 0, "db_id": "a/b", "SQL": "x"}]', "[0]", "not a database folder name"),
        ('[{"question_id": 0, "db_id": "a", "SQL": null}]', "[0]", "'SQL' is null"),
        ("[]", None, "no questions"),
    ]
    for text, where, message in cases:
        gold = write(tmp_path / "dev.json", text)
        with pytest.raises(InputError, match=message) as e:
            load_items(pred, gold)
        assert e.value.path == str(gold) and e.value.where == where


def test_size_limit_is_checked_before_parsing(tmp_path: Path) -> None:
    rows = b"".join(b'{"id": %d, "db_id": "a", "pred_sql": "SELECT 1"}\n' % i for i in range(1000))
    path = write(tmp_path / "big.jsonl", rows)
    assert len(load_items(path, max_bytes=len(rows)).items) == 1000
    with pytest.raises(InputError, match=r"big\.jsonl: .*larger than the input limit of 4,000 bytes.*--max-input-mb"):
        load_items(path, max_bytes=4000)


def test_gold_size_is_bounded_too(tmp_path: Path) -> None:
    gold = write(tmp_path / "dev.json", json.dumps(GOLD3 * 100))
    with pytest.raises(InputError, match=r"dev\.json: .*larger than the input limit"):
        load_items(write(tmp_path / "p.json", '{"0": "SELECT 1"}'), gold, max_bytes=1000)


def test_empty_predictions_are_kept_and_counted(tmp_path: Path) -> None:
    text = b"id,db_id,pred_sql\n1,a,SELECT 1\n2,a,\n3,a,  \n"
    loaded = load_items(write(tmp_path / "g.csv", text))
    assert [it.pred_sql for it in loaded.items] == ["SELECT 1", "", "  "]
    assert any("2 of 3 items have an empty prediction (g.csv:3, g.csv:4)" in w for w in loaded.warnings)


def test_sql_keeps_what_the_sandbox_handles(tmp_path: Path) -> None:
    """A NUL or a lone surrogate inside a query is the query's problem: it reaches the sandbox, which records it."""
    row = {"id": 1, "db_id": "a", "pred_sql": "SELECT 1\x00; DROP TABLE t", "gold_sql": "SELECT '\udcff'"}
    loaded = load_items(write(tmp_path / "g.jsonl", json.dumps(row)))
    assert loaded.items[0].pred_sql == row["pred_sql"] and loaded.items[0].gold_sql == row["gold_sql"]


def test_crlf_and_line_separators(tmp_path: Path) -> None:
    row = {"id": 1, "db_id": "a", "pred_sql": "SELECT 1\u2028-- x", "question": "a\u2029b"}
    jsonl = write(tmp_path / "g.jsonl", json.dumps(row, ensure_ascii=False) + "\r\n\r\n")
    assert load_items(jsonl).items[0].pred_sql == "SELECT 1\u2028-- x"
    csv_text = 'id,db_id,pred_sql\r\n1,a,"SELECT 1\r\nFROM t"\r\n'
    assert load_items(write(tmp_path / "g.csv", csv_text)).items[0].pred_sql == "SELECT 1\nFROM t"


def test_generic_json_list(tmp_path: Path) -> None:
    rows = [{"id": "x", "db_id": "a", "pred_sql": "SELECT 1"}, {"id": "y", "db_id": "b", "pred_sql": "SELECT 2"}]
    loaded = load_items(write(tmp_path / "g.json", json.dumps(rows)))
    assert loaded.format == "generic" and [it.id for it in loaded.items] == ["x", "y"]
    assert loaded.items[1].source == "g.json[1]"


def _timed(path: Path) -> float:
    """Best of three, in CPU seconds of this process (other processes on the machine do not count)."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        load_items(path)
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.slow  # a scaling test: loads files of growing size (3 s)
def test_loading_stays_linear(tmp_path: Path) -> None:
    """Four times the items take about four times as long (a quadratic step would take sixteen)."""

    def jsonl(n: int) -> Path:
        row = (
            '{"id": %d, "db_id": "db", "question": "How many?", "pred_sql": "SELECT count(*) FROM t", "gold_sql": "x"}'
        )
        return write(tmp_path / f"g{n}.jsonl", "\n".join(row % i for i in range(n)))

    def csv(n: int) -> Path:
        rows = "".join(f'{i},db,"SELECT count(*)\nFROM t",x\n' for i in range(n))
        return write(tmp_path / f"g{n}.csv", "id,db_id,pred_sql,gold_sql\n" + rows)

    for make in (jsonl, csv):
        small, large = _timed(make(5_000)), _timed(make(20_000))
        assert large < 8 * small, (make.__name__, small, large)


def test_rose_run_refuses_a_file_over_max_input_mb(tmp_path: Path) -> None:
    rows = b"".join(b'{"id": %d, "db_id": "a", "pred_sql": "SELECT 1"}\n' % i for i in range(100))
    path = write(tmp_path / "g.jsonl", rows)
    (tmp_path / "dbs").mkdir()
    args = ["run", str(path), "--db-root", str(tmp_path / "dbs"), "--out", str(tmp_path / "out")]
    res = CliRunner().invoke(main, [*args, "--max-input-mb", "0.001"])
    assert res.exit_code == 2 and "larger than the input limit of 1,048 bytes" in res.output
    assert not (tmp_path / "out" / "g").exists()
