"""Witness grades: each rule of the plausibility table on a database that shows it, the policy that only a
plausible witness doubts a match, witnesses that add rows (a symmetric relation's pair the other way round),
and the record layout that carries the grade."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_evidence import gather, workspace

from rose_sql.engines.spaces import Change
from rose_sql.evidence.features import Features
from rose_sql.evidence.findings import Evidence, ResultSample, Witness, questions_match, render
from rose_sql.evidence.plausibility import BY_NAME, RULES, grade
from rose_sql.record import SCHEMA_VERSION, UNGRADED, Record

ROOT = Path(__file__).resolve().parents[1]

PEOPLE = (
    "CREATE TABLE city (id INTEGER PRIMARY KEY, name TEXT NOT NULL);"
    "CREATE TABLE person (id INTEGER PRIMARY KEY, name TEXT, nick TEXT, sex TEXT, age INTEGER, city_id INTEGER"
    " REFERENCES city(id), note TEXT);"
    "INSERT INTO city VALUES (1, 'Paris'), (2, 'Rome');"
    "INSERT INTO person VALUES"
    " (1, 'Ann Lee', '-', 'F', 30, 1, NULL), (2, 'Bob Ray', '-', 'M', 41, 1, 'x'),"
    " (3, 'Cy Dunn', 'cd', 'M', 25, 2, 'y'),"
    " (4, 'Di Fox', 'df', 'F', 52, 2, 'z'), (5, 'Ed Gray', 'eg', 'M', 33, 1, 'w'), (6, 'Fay Hu', 'fh', 'F', 47, 2, 'v')"
)
V = "CREATE TABLE v (id INTEGER PRIMARY KEY, k TEXT, w INTEGER); INSERT INTO v VALUES "
LINKS = (
    "CREATE TABLE tag (id INTEGER PRIMARY KEY, label TEXT NOT NULL);"
    "CREATE TABLE link (a INTEGER NOT NULL REFERENCES tag(id), b INTEGER NOT NULL REFERENCES tag(id),"
    " PRIMARY KEY (a, b));"
    "INSERT INTO tag VALUES (1, 'p'), (2, 'q'), (3, 'r');"
)
PERSON = ["id", "name", "nick", "sex", "age", "city_id", "note"]


def row(i: int, name: str, nick: str, sex: str, age: int, city: int, note: str | None) -> dict[str, Any]:
    return dict(zip(PERSON, [i, name, nick, sex, age, city, note], strict=True))


ANN = row(1, "Ann Lee", "-", "F", 30, 1, None)
# rule -> (schema and data, witness kind, changes, columns the queries read, literals), one per rule
CASES: dict[str, tuple[str, str, list[Change], set[str], dict[str, set[object]]]] = {
    "null_seen": (PEOPLE, "null", [Change("update", "person", 2, "note", "x", None)], {"note"}, {}),
    "null_marker": (PEOPLE, "null", [Change("update", "person", 3, "nick", "cd", None)], {"nick"}, {}),
    "null_never": (PEOPLE, "null", [Change("update", "person", 1, "sex", "F", None)], {"sex"}, {}),
    "value_seen": (
        V + "(1,'a',1),(2,'a',2),(3,'a',1),(4,'a',2),(5,'b',1)",
        "predicate",
        [Change("update", "v", 5, "k", "b", "a")],
        {"k"},
        {},
    ),
    "value_key": (PEOPLE, "predicate", [Change("update", "person", 1, "name", "Ann Lee", "Bob Ray")], {"name"}, {}),
    "value_capped": (
        V + "(1,'a',1),(2,'a',2),(3,'b',1),(4,'b',2),(5,'c',1)",
        "predicate",
        [Change("update", "v", 5, "k", "c", "a")],
        {"k"},
        {},
    ),
    "value_format": (PEOPLE, "predicate", [Change("update", "person", 1, "name", "Ann Lee", "Al Bo")], {"name"}, {}),
    "value_closed": (PEOPLE, "predicate", [Change("update", "person", 1, "sex", "F", "X")], {"sex"}, {}),
    "value_foreign": (PEOPLE, "numeric", [Change("update", "person", 1, "age", 30, 121)], {"age"}, {}),
    "copy_dup": (
        V + "(1,'a',1),(2,'a',1),(3,'b',1)",
        "duplicate_row",
        [Change("insert", "v", 9, copy_of=3, values={"id": 9}, row={"id": 9, "k": "b", "w": 1})],
        {"k"},
        {},
    ),
    "copy_key": (
        PEOPLE,
        "duplicate_row",
        [Change("insert", "person", 9, copy_of=1, values={"id": 9}, row={**ANN, "id": 9})],
        {"age"},
        {},
    ),
    "copy_unique": (
        V + "(1,'a',1),(2,'a',2),(3,'b',1)",
        "duplicate_row",
        [Change("insert", "v", 9, copy_of=1, values={"id": 9}, row={"id": 9, "k": "a", "w": 1})],
        {"k"},
        {},
    ),
    "row_new": (
        V + "(1,'a',1),(2,'a',2),(3,'b',1)",
        "new_row",
        [Change("insert", "v", 9, copy_of=1, values={"id": 9, "w": 2}, row={"id": 9, "k": "a", "w": 2})],
        {"w"},
        {},
    ),
    "delete_kind": (PEOPLE, "deletion", [Change("delete", "person", 1, row=ANN)], {"sex"}, {}),
    "delete_only": (PEOPLE, "deletion", [Change("delete", "person", 1, row=ANN)], {"name"}, {}),
    "pair_reverse": (
        LINKS + "INSERT INTO link VALUES (1, 2), (2, 1), (1, 3);",
        "reverse_pair",
        [Change("insert", "link", 9, copy_of=3, values={"a": 3, "b": 1}, row={"a": 3, "b": 1})],
        {"a", "b"},
        {},
    ),
    "pair_directed": (
        LINKS + "INSERT INTO link VALUES (1, 2), (1, 3);",
        "reverse_pair",
        [Change("insert", "link", 9, copy_of=2, values={"a": 3, "b": 1}, row={"a": 3, "b": 1})],
        {"a", "b"},
        {"a": {1}, "b": {3}},
    ),
}


def test_every_rule_of_the_table_has_its_case_and_its_row_in_the_docs() -> None:
    assert set(CASES) | {"ungraded"} == set(BY_NAME)
    page = (ROOT / "docs" / "witness-grades.md").read_text()
    for rule in RULES:
        assert f"`{rule.name}`" in page, rule.name


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_rule_grades_the_change_it_names(name: str, make_db: Callable[..., Path]) -> None:
    schema, kind, changes, columns, literals = CASES[name]
    ws = workspace(make_db(schema + ";"))
    try:
        g = grade(ws, kind, changes, Features(columns=columns, literals=literals))
    finally:
        ws.close()
    assert (g.rule, g.plausible) == (name, BY_NAME[name].plausible), g.reason
    assert g.text.startswith(f"[{name}] ")


def test_a_probe_out_of_the_items_budget_leaves_the_witness_ungraded_never_implausible(
    make_db: Callable[..., Path],
) -> None:
    values = ",".join(f"({i}, {i % 7})" for i in range(20_000))
    ws = workspace(make_db(f"CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER); INSERT INTO t VALUES {values};"))
    try:
        change = [Change("update", "t", 1, "v", 1, None)]
        assert grade(ws, "null", change, Features()).rule == "null_never"  # with the budget: graded
        ws.start(1_000, time.monotonic() + 60)  # a counted budget far below one COUNT(*) of 20,000 rows
        starved = grade(ws, "null", change, Features())
        ws.stop()
    finally:
        ws.close()
    assert (starved.rule, starved.plausible) == ("ungraded", True)


def _witness(plausible: bool) -> Witness:
    empty = ResultSample(["n"], 0, [])
    return Witness(
        "null", "why", "t.v = NULL on row 1", [], empty, empty, "values: differ", [], plausible, "[null_never] never"
    )


def test_only_a_plausible_witness_doubts_a_match_an_implausible_one_is_a_fragility_note() -> None:
    doubting, fragile = Evidence(_witness(True)), Evidence(_witness(False))
    assert questions_match(None, doubting) and not questions_match(None, fragile)
    assert "WITNESS DATABASE" in (render(None, doubting) or "")
    note = render(None, fragile) or ""
    assert "FRAGILITY NOTE" in note and "WITNESS DATABASE" not in note and "[null_never] never" in note


def test_a_witness_of_layout_4_reads_as_plausible_so_a_replay_decides_as_the_run_did() -> None:
    line = (ROOT / "tests" / "data" / "v1" / "judged-records.jsonl").read_text().splitlines()[0]
    data = json.loads(line)
    w = _witness(True).to_dict()
    del w["plausible"], w["plausibility"]
    data |= {"schema": 4, "evidence": {**Evidence().to_dict(), "witness": w}}
    rec = Record.from_dict(data)
    assert rec.schema == SCHEMA_VERSION
    assert rec.evidence is not None and rec.evidence.witness is not None
    assert rec.evidence.witness.plausible and rec.evidence.witness.plausibility == UNGRADED
    again = Record.from_dict(json.loads(rec.to_json()))
    assert again.evidence == rec.evidence


def test_a_record_of_layout_5_keeps_its_test_suite_reading_and_gets_its_witness_graded() -> None:
    """Layout 5 already names the one-database reading spider_ex and ts_ex the variants' one: lifting it to 6
    grades its witness (ungraded, doubt) and renames nothing."""
    line = (ROOT / "tests" / "data" / "v1" / "judged-records.jsonl").read_text().splitlines()[0]
    data = json.loads(line)
    w = _witness(True).to_dict()
    del w["plausible"], w["plausibility"]
    readings = {**data["readings"], "spider_ex": 1, "spider_ex_keep_distinct": 1, "ts_ex": 0, "ts_databases": 3}
    readings.pop("ts_ex_keep_distinct", None)
    data |= {"schema": 5, "readings": readings, "evidence": {**Evidence().to_dict(), "witness": w}}
    rec = Record.from_dict(data)
    assert rec.schema == SCHEMA_VERSION
    assert (rec.readings.spider_ex, rec.readings.ts_ex, rec.readings.ts_databases) == (1, 0, 3)
    assert rec.evidence is not None and rec.evidence.witness is not None
    assert rec.evidence.witness.plausible and rec.evidence.witness.plausibility == UNGRADED
    data |= {"schema": 4}  # the same readings read as layout 4: its ts_ex was the one-database reading
    old = Record.from_dict(data)
    assert (old.readings.spider_ex, old.readings.ts_ex) == (0, None)


def test_a_pair_of_a_symmetric_relation_stored_one_way_gets_its_reverse_as_a_plausible_witness(
    make_db: Callable[..., Path],
) -> None:
    db = make_db(LINKS + "INSERT INTO link VALUES (1, 2), (1, 3);")
    gold = "SELECT b FROM link WHERE (a = 1 AND b = 2) OR (a = 2 AND b = 1)"  # reads the pair both ways
    pred = "SELECT b FROM link WHERE a = 1 AND b = 2"
    ev, equal = gather(db, gold, pred)
    assert equal is True
    w = ev.witness
    assert w is not None and w.kind == "reverse_pair", ev.search
    assert w.plausible and w.plausibility.startswith("[pair_reverse]"), w.plausibility
    assert any(c.op == "insert" and c.row == {"a": 2, "b": 1} for c in w.changes)


def test_results_that_differ_only_in_multiplicity_get_a_witness_on_their_distinct_rows(
    make_db: Callable[..., Path],
) -> None:
    db = make_db(LINKS + "INSERT INTO link VALUES (1, 2), (2, 1), (1, 3), (3, 1);")  # every pair both ways
    gold = "SELECT 'bond' FROM link WHERE (a = 1 AND b = 2) OR (a = 2 AND b = 1)"  # 2 rows
    pred = "SELECT 'bond' FROM link WHERE a = 1 AND b = 2"  # 1 row: the same distinct rows (BIRD's EX: 1)
    ev, equal = gather(db, gold, pred)
    assert equal is False and ev.diff is not None and "multiplicity" in ev.diff.shape
    assert ev.search is not None and ev.search.distinct
    w = ev.witness
    assert w is not None and w.kind == "reverse_pair" and w.plausible, (ev.search, w)
    assert w.pred_result.row_count == 0 and w.gold_result.row_count == 1  # (1, 2) stored only as (2, 1)
