"""The review app over HTTP on loopback: who may drive it (Host, Origin, sign-in), what a page shows and
hides (the machine's verdict only after labelling), the annotators' sandboxed queries, untrusted text
rendered as text, and the command's help."""

from __future__ import annotations

import json
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from click.testing import CliRunner

pytest.importorskip("starlette", reason="rose review's extra is not installed: pip install -e '.[review]'")

from conftest import make_record, sha256, write_records
from review_support import Client, config, demo_inputs, demo_records, load_project, thread_server

from rose_sql.cli import main

HOSTILE = '</textarea></pre><script>window.__pwned=1</script>"\'><img src=x onerror="window.__pwned=1">'
"""Text that breaks out of an element, an attribute or a textarea if it is not escaped."""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """A server on a project of 12 demo items from a run with evidence and judges: (URL, state, database root)."""
    tmp = tmp_path_factory.mktemp("review-http")
    run, db_root = demo_records(tmp, n=12)
    state = tmp / "state.sqlite"
    load_project(state, "demo", run, db_root)
    with thread_server(config(state)) as base:
        yield base, state, db_root


def _signed_in(base: str, name: str) -> Client:
    c = Client(base)
    c.sign_in(name)
    return c


def test_only_the_apps_own_host_and_origin_may_drive_it(demo: tuple[str, Path, Path]) -> None:
    base = demo[0]
    c = _signed_in(base, "ann")
    status, headers, _ = c.request("GET", "/", headers={"Host": "evil.example:80"})
    assert status == 403  # DNS rebinding: another name pointed at 127.0.0.1
    assert "default-src 'none'" in headers["content-security-policy"]
    label = json.dumps({"correct": True}).encode()
    path = "/p/demo/label?id=1"
    for origin in (None, "http://evil.example", "http://127.0.0.1:1", "null"):
        other = Client(base, origin=origin)
        other.cookie = c.cookie
        status, _, body = other.request("POST", path, label, {"Content-Type": "application/json"})
        assert status == 403 and b"refused" in body, origin
    status, _, _ = c.request("POST", path, label, {"Content-Type": "application/json"})
    assert status == 200
    status, _, _ = c.request("POST", path, b"x" * 300_000, {"Content-Type": "application/json"})
    assert status == 413


def test_host_names_are_read_as_browsers_send_them() -> None:
    from rose_sql.review.guard import Guard, host_name

    assert [host_name(h) for h in ("[::1]:8765", "LocalHost:80", "127.0.0.1", "::1")] == [
        "::1",
        "localhost",
        "127.0.0.1",
        "::1",
    ]
    guard = Guard(lambda *a: None, {"127.0.0.1", "::1"}, 8765)  # type: ignore[arg-type,return-value]
    assert guard.refusal("GET", {"host": "[::1]:8765"}) is None
    assert guard.refusal("POST", {"host": "[::1]:8765", "origin": "http://[::1]:8765"}) is None
    assert guard.refusal("POST", {"host": "127.0.0.1:8765", "sec-fetch-site": "same-origin"}) is None
    assert guard.refusal("POST", {"host": "127.0.0.1:8765", "origin": "http://127.0.0.1:8766"}) is not None


def test_sign_in_is_needed_and_has_no_password(demo: tuple[str, Path, Path]) -> None:
    c = Client(demo[0])
    status, headers, _ = c.get("/p/demo/item?id=1")
    assert status == 303 and headers["location"].startswith("/?next=")
    status, _, body = c.get("/")
    assert status == 200 and b"There is no password" in body
    status, _, _ = c.request("POST", "/p/demo/label?id=1", b'{"correct": true}', {"Content-Type": "application/json"})
    assert status == 401
    c.sign_in("bea")
    assert c.cookie is not None
    status, headers, _ = c.request("POST", "/signout")
    assert status == 303 and "rose_review=" in headers["set-cookie"]
    assert c.get("/p/demo/item?id=1")[0] == 303


def test_the_machines_verdict_is_revealed_only_after_labelling(demo: tuple[str, Path, Path]) -> None:
    c = _signed_in(demo[0], "cid")
    marker = b"The prediction filters on the right year."  # the made-up judges' reasoning (items 1, 4, 7...)
    status, _, page = c.get("/p/demo/item?id=1")
    assert status == 200 and marker not in page and b"Hidden until you label" in page
    assert b"decided by" not in page and b"bird_ex" not in page
    status, _, body = c.get("/p/demo/machine?id=1")
    assert status == 403 and marker not in body
    c.label("demo", "1", False, "it misses the tie")
    status, _, body = c.get("/p/demo/machine?id=1")
    assert status == 200 and marker in body and b"machine" in body and b"prover" in body and b"refuter" in body
    status, _, page = c.get("/p/demo/item?id=1")
    assert b'data-labelled="yes"' in page and b"it misses the tie" in page


def test_the_page_shows_what_an_expert_needs(demo: tuple[str, Path, Path]) -> None:
    c = _signed_in(demo[0], "dan")
    _, _, page = c.get("/p/demo/item?id=10")  # the tie: the results differ, the diff names the missing rider
    text = page.decode()
    for element in ('id="question"', 'id="pred-sql"', 'id="gold-sql"', 'id="pred-result"', 'id="gold-result"'):
        assert element in text
    assert 'id="diff"' in text and "Lena Fischer" in text and "subset" in text
    assert 'id="schema"' in text and "riders" in text and "birth_year" in text and "Joris Vermeulen" in text
    assert '<span class="k">SELECT</span>' in text  # highlighted on the server
    assert "1 row" in text and "2 rows" in text


def test_annotators_queries_run_read_only_in_the_sandbox(demo: tuple[str, Path, Path]) -> None:
    base, _, db_root = demo
    db = next(db_root.rglob("*.sqlite"))
    before = sha256(db)
    c = _signed_in(base, "eve")

    def run(sql: str) -> str:
        status, _, body = c.request(
            "POST", "/p/demo/query?id=2", json.dumps({"sql": sql}).encode(), {"Content-Type": "application/json"}
        )
        assert status == 200
        return body.decode()

    assert "Lena Fischer" in run("SELECT name FROM riders ORDER BY name")
    assert "rejected" in run("DELETE FROM riders")
    assert "rejected" in run("ATTACH DATABASE ':memory:' AS x")
    assert "rejected" in run("SELECT 1; DROP TABLE riders")
    slow = run("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n")
    assert "timeout" in slow
    assert sha256(db) == before


def _hostile_project(tmp: Path) -> tuple[Path, Path]:
    """Untrusted text in every field an item shows: question, evidence, both SQL texts, result values and
    column names, the judges' reasoning, the record's explanation, evidence and the item id."""
    demo_inputs(tmp)
    lit = HOSTILE.replace("'", "''")
    sql = f"SELECT '{lit}' AS \"{HOSTILE.replace(chr(34), chr(34) * 2)}\", name FROM riders LIMIT 2"
    item = {"id": HOSTILE, "db_id": "cycling_league", "question": HOSTILE, "evidence": HOSTILE}
    generic = tmp / "hostile.jsonl"
    generic.write_text(json.dumps({**item, "gold_sql": sql + " -- " + HOSTILE, "pred_sql": sql}) + "\n")
    reply = {"reasoning": HOSTILE, "expected_answer": HOSTILE, "sql_behaviour": HOSTILE, "checks": {HOSTILE: HOSTILE}}
    record = make_record(
        {
            "id": HOSTILE,
            "db_id": "cycling_league",
            "score": 1,
            "why": HOSTILE,
            "question": HOSTILE,
            "pred_sql": sql,
            "gold_sql": sql,
            "pred": {"status": "ok", "seconds": 0.0, "columns": [HOSTILE], "row_count": 1, "preview": [[HOSTILE]]},
            "gold": {"status": "error", "seconds": 0.0, "error": HOSTILE},
            "comparison": {"equal": False, "reason": "values", "detail": HOSTILE, "notes": [HOSTILE]},
            "doubts": [HOSTILE],
            "labels": {"goldx": True, "ambq": True, "diagnostic": HOSTILE},
            "judges": [
                {"stage": "prover", "reply": reply, "raw": HOSTILE, "model": HOSTILE},
                {"stage": "refuter", "reply": {"reasoning": HOSTILE, "label": HOSTILE}, "raw": HOSTILE},
                {"stage": "refuter", "reply": None, "raw": HOSTILE, "error": HOSTILE},
            ],
            "evidence": {
                "diff": {
                    "pred_only": [[HOSTILE]],
                    "gold_only": [[HOSTILE]],
                    "pred_only_count": 1,
                    "gold_only_count": 1,
                    "shape": [HOSTILE],
                },
                "gold_smells": [{"name": HOSTILE, "detail": HOSTILE}],
                "witness": {
                    "kind": HOSTILE,
                    "reason": HOSTILE,
                    "label": HOSTILE,
                    "changes": [
                        {"op": "update", "table": HOSTILE, "rowid": 1, "column": HOSTILE, "old": HOSTILE, "new": None}
                    ],
                    "pred_result": {"columns": [HOSTILE], "row_count": 1, "rows": [[HOSTILE]]},
                    "gold_result": {"columns": [HOSTILE], "row_count": 1, "rows": [[HOSTILE]]},
                    "comparison": HOSTILE,
                    "caveats": [HOSTILE],
                },
            },
        }
    )
    run = write_records(tmp / "runs" / "hostile", [record])
    return generic, run


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, Any]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _assert_inert(html: str, shown: bool = True) -> None:
    """No markup came from the data: only our script, no event handler, no image, and the text shown as text."""
    parser = _Tags()
    parser.feed(html)
    scripts = [a for t, a in parser.tags if t == "script"]
    assert all(a.get("src") == "/static/review.js" for a in scripts), scripts
    assert not [t for t, _ in parser.tags if t in ("img", "iframe", "object", "embed")]
    assert not [(t, k) for t, a in parser.tags for k in a if k.startswith("on")]
    assert ("<script>window.__pwned=1</script>" in "".join(parser.text)) == shown


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("review-hostile")
    generic, run = _hostile_project(tmp)
    state = tmp / "state.sqlite"
    load_project(state, "live", generic, tmp / "db")
    load_project(state, "recorded", run, None)
    with thread_server(config(state)) as base:
        yield base, state


def test_untrusted_text_in_every_field_renders_as_text(hostile: tuple[str, Path]) -> None:
    base, _ = hostile
    c = _signed_in(base, HOSTILE[:60])
    key = urlencode({"id": HOSTILE})
    for project in ("live", "recorded"):
        status, _, page = c.get(f"/p/{project}/item?{key}")
        assert status == 200
        _assert_inert(page.decode())
        c.label(project, HOSTILE, False, reason=HOSTILE, goldx=True)
        status, _, fragment = c.get(f"/p/{project}/machine?{key}")
        assert status == 200
        _assert_inert("<body>" + fragment.decode(), shown=project == "recorded")
        status, _, overview = c.get(f"/p/{project}/overview")
        _assert_inert(overview.decode())
        status, _, home = c.get("/")
        _assert_inert(home.decode())
    other = _signed_in(base, "second")
    other.label("live", HOSTILE, True, reason=HOSTILE)
    _, _, overview = other.get("/p/live/overview")
    assert b"Disagreements (1)" in overview
    _assert_inert(overview.decode())
    status, _, result = c.request(
        "POST",
        f"/p/live/query?{key}",
        json.dumps({"sql": f"SELECT '{HOSTILE.replace(chr(39), chr(39) * 2)}' AS x"}).encode(),
        {"Content-Type": "application/json"},
    )
    _assert_inert("<body>" + result.decode())


def test_review_help_lists_its_options() -> None:
    result = CliRunner().invoke(main, ["review", "--help"])
    assert result.exit_code == 0
    for option in (
        "--project",
        "--load",
        "--gold",
        "--format",
        "--db-root",
        "--import-annotations",
        "--export",
        "--host",
        "--port",
        "--allow-host",
        "--labels-per-item",
        "--no-serve",
    ):
        assert option in result.output, option
    assert "Examples:" in result.output and "rose review review.sqlite" in result.output
    assert "no password" in result.output


def test_serving_without_the_extra_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("rose_sql.cli.review.missing_extras", lambda: ["starlette", "uvicorn"])
    result = CliRunner().invoke(main, ["review", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2
    assert "pip install 'rose-sql[review]'" in result.output


def test_the_command_loads_a_run_and_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    run, db_root = demo_records(tmp_path, n=3, evidence=False)
    state = tmp_path / "s.sqlite"
    args = ["review", str(state), "--load", str(run), "--db-root", str(db_root), "--no-serve"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0 and "project demo: 3 new items of 3" in result.output, result.output
    result = CliRunner().invoke(main, args)
    assert "project demo: 0 new items of 3" in result.output
    result = CliRunner().invoke(main, ["review", str(state), "--export", str(tmp_path / "out")])
    assert result.exit_code == 2 and "--export needs --project" in result.output
    result = CliRunner().invoke(main, ["review", str(state), "--load", str(tmp_path / "runs"), "--no-serve"])
    assert result.exit_code == 0  # a --out folder with one system is that system


@pytest.mark.slow  # waits for a runaway to reach its wall-clock guard
def test_an_annotators_runaway_call_is_stopped_with_its_worker(tmp_path: Path) -> None:
    """A query SQLite cannot interrupt (instr over megabytes) is stopped by the worker engine's guard."""
    import time
    from dataclasses import replace

    from rose_sql.config import console_config as query_config

    run, db_root = demo_records(tmp_path, n=3)
    state = tmp_path / "state.sqlite"
    load_project(state, "demo", run, db_root)
    query = replace(query_config(), timeout_s=1.0, guard_margin_s=0.5, max_value_bytes=16 * 2**20)  # the former limit
    cfg = config(state, query=query)
    with thread_server(cfg) as base:
        c = _signed_in(base, "eve")
        sql = "SELECT instr(printf('%.4000000c', 'a') || 'b', printf('%.400000c', 'a') || 'b')"
        start = time.monotonic()
        status, _, body = c.request(
            "POST", "/p/demo/query?id=2", json.dumps({"sql": sql}).encode(), {"Content-Type": "application/json"}
        )
        took = time.monotonic() - start
        assert status == 200 and "guard" in body.decode()
        assert took < 1.0 + 0.5 + 15  # the guard, its margin, and a fresh worker's start on a loaded machine
        status, _, body = c.request(
            "POST", "/p/demo/query?id=2", json.dumps({"sql": "SELECT 1"}).encode(), {"Content-Type": "application/json"}
        )
        assert status == 200 and "1 row" in body.decode()  # the fresh worker answers the next query


def test_items_whose_database_is_at_hand_are_served_first_in_id_order(tmp_path: Path) -> None:
    """A run's records come in the order they finished, those without a database among the first: the
    annotators get the items they can query first, each part in id order, whatever order the run wrote."""
    _, db_root = demo_inputs(tmp_path)
    finished = [
        (3, "gone"),
        (12, "cycling_league"),
        (1, "gone"),
        (10, "cycling_league"),
        (2, "gone"),
        (11, "cycling_league"),
    ]
    records = [
        make_record(
            {
                "id": i,
                "db_id": db,
                "question": f"Q{i}",
                "gold_sql": "SELECT 1",
                "pred_sql": "SELECT 1",
                "unscored_reason": "db_missing" if db == "gone" else None,
                "score": None if db == "gone" else 1,
            }
        )
        for i, db in finished
    ]
    run = write_records(tmp_path / "runs" / "mixed", records)
    state = tmp_path / "s.sqlite"
    result = CliRunner().invoke(
        main, ["review", str(state), "--load", str(run), "--db-root", str(db_root), "--no-serve"]
    )
    assert result.exit_code == 0, result.output
    served = ["10", "11", "12", "1", "2", "3"]
    with thread_server(config(state)) as base:
        c = _signed_in(base, "ann")
        for n, key in enumerate(served, start=1):
            status, headers, _ = c.get("/p/mixed/todo")
            assert status == 303 and headers["location"] == f"/p/mixed/item?id={key}", (n, headers["location"])
            _, _, page = c.get(headers["location"])
            assert f"· {n} of {len(served)}</span>".encode() in page
            c.label("mixed", key, True)
