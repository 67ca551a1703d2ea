"""The review app, hardened (issue 22, finding 6): an annotator who still owes an item a label is shown
none of its labels, reasons or verdicts on any page the app serves; every malformed body is a 400
with a message, never a 500; non-finite numbers are refused; the export is strict JSON."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch
from urllib.parse import urlencode

import pytest

pytest.importorskip("starlette", reason="rose review's extra is not installed: pip install -e '.[review]'")

from review_support import Client, config, demo_records, load_project, thread_server

from rose_sql.errors import UsageError
from rose_sql.review.exchange import export
from rose_sql.review.store import Store, Verdict

JSON = {"Content-Type": "application/json"}
MARKER = "The prediction filters on the right year."
"""The made-up judges' reasoning on item 1 (the machine's verdict)."""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A server on 6 demo items from a run with judges: (URL, state)."""
    tmp = tmp_path_factory.mktemp("review-strict")
    run, db_root = demo_records(tmp, n=6)
    state = tmp / "state.sqlite"
    load_project(state, "demo", run, db_root)
    with thread_server(config(state)) as base:
        yield base, state


def _signed_in(base: str, name: str) -> Client:
    c = Client(base)
    c.sign_in(name)
    return c


class _NoStore:
    """A store that is never read (only the app's routes are)."""


def _get_paths(project: str, keys: list[str]) -> list[str]:
    """Every page a GET can reach, read from the app's own routing table (a route added later is walked
    too), each item-taking page once per item."""
    from rose_sql.review import app as review_app

    with patch.object(review_app, "Pages", lambda config: None):  # no sandbox workers: only the routes are read
        app = review_app.create_app(config(Path("/nonexistent/unused.sqlite")), store=_NoStore())  # type: ignore[arg-type]
    paths = []
    for route in app.routes:
        path = getattr(route, "path", "")
        methods = getattr(route, "methods", None) or set()
        if "GET" not in methods or path.startswith("/static"):
            continue
        path = path.replace("{project}", project)
        paths.append(path)
        if path.startswith(f"/p/{project}/"):
            paths += [f"{path}?{urlencode({'id': k, 'dir': d})}" for k in keys for d in ("1", "-1")]
    return paths


def _seen(c: Client, paths: list[str]) -> str:
    """Everything the annotator is served on those pages, following redirects within the app."""
    out = []
    for path in paths:
        status, headers, body = c.get(path)
        hops = 0
        while status in (302, 303, 307) and hops < 5:
            out.append(headers["location"])
            status, headers, body = c.get(headers["location"])
            hops += 1
        assert status < 500, (path, status, body[:300])
        out.append(body.decode("utf-8"))
    return "\n".join(out)


def test_whoever_owes_an_item_a_label_sees_none_of_its_labels_on_any_page(served: tuple[str, Path]) -> None:
    """The tie-breaker (two labels disagree) and the second annotator (one label) see neither verdict
    nor reason of the others, nor the machine's, on any page; once they have labelled, they do."""
    base, _ = served
    ann, bea, cid = (_signed_in(base, n) for n in ("ann", "bea", "cid"))
    ann.label("demo", "1", True, reason="ANN-REASON-ONE the year filter is right", goldx=True)
    bea.label("demo", "1", False, reason="BEA-REASON-ONE it misses the tie", ambq=True)
    ann.label("demo", "2", False, reason="ANN-REASON-TWO wrong table")
    secrets = ["ANN-REASON-ONE", "BEA-REASON-ONE", "ANN-REASON-TWO", MARKER, "decided by", "settled:"]
    paths = _get_paths("demo", ["1", "2", "3"])
    assert "/p/demo/overview" in paths and "/p/demo/machine?id=1&dir=1" in paths
    seen = _seen(cid, paths)
    assert [s for s in secrets if s in seen] == []
    assert "Disagreements (1)" in seen and "Waiting for your label" in seen  # item 1 is listed, blind
    status, _, _ = cid.get("/p/demo/machine?id=1")
    assert status == 403
    # bea owes item 2 (one label, ann's): blind to it, while she sees item 1's labels, hers being there
    seen = _seen(bea, paths)
    assert "ANN-REASON-TWO" not in seen and "ANN-REASON-ONE" in seen
    cid.label("demo", "1", True, reason="CID-REASON-ONE agree with ann")
    _, _, overview = cid.get("/p/demo/overview")
    text = overview.decode()
    assert "ANN-REASON-ONE" in text and "BEA-REASON-ONE" in text and "settled: correct" in text
    assert "Waiting for your label" not in text
    status, _, machine = cid.get("/p/demo/machine?id=1")
    assert status == 200 and MARKER in machine.decode() and "BEA-REASON-ONE" in machine.decode()
    # someone who owes item 1 nothing (it has its three labels) may read the settled disagreement
    _, _, overview = _signed_in(base, "dan").get("/p/demo/overview")
    assert "BEA-REASON-ONE" in overview.decode()


def test_a_settled_majority_is_not_shown_to_whoever_still_owes_a_label(tmp_path: Path) -> None:
    """With three labels per item a disagreement needs a fourth: the majority the first three reached is
    not told to the fourth annotator before they label; when the fourth makes a tie, a fifth is asked."""
    run, db_root = demo_records(tmp_path, n=2)
    state = tmp_path / "state.sqlite"
    load_project(state, "demo", run, db_root)
    with thread_server(config(state, labels_per_item=3)) as base:
        for name, verdict in (("ann", True), ("bea", False), ("cid", True)):
            _signed_in(base, name).label("demo", "1", verdict, reason=f"{name.upper()}-SAYS")
        dan = _signed_in(base, "dan")
        seen = _seen(dan, _get_paths("demo", ["1", "2"]))
        assert [s for s in ("settled:", "ANN-SAYS", "BEA-SAYS", "CID-SAYS", MARKER) if s in seen] == []
        assert "Waiting for your label" in seen
        dan.label("demo", "1", False, reason="DAN-SAYS")
        _, _, overview = dan.get("/p/demo/overview")
        assert "settled:" not in overview.decode() and "BEA-SAYS" in overview.decode()  # two against two
        # a tie settles nothing: item 1 asks a fifth annotator, blind to the four before her
        eve = _signed_in(base, "eve")
        _, _, overview = eve.get("/p/demo/overview")
        assert "DAN-SAYS" not in overview.decode() and "Waiting for your label" in overview.decode()
        eve.label("demo", "1", True, reason="EVE-SAYS")
        _, _, overview = _signed_in(base, "fay").get("/p/demo/overview")  # three against two: no sixth
        assert "settled: correct" in overview.decode() and "Waiting for your label" not in overview.decode()


def test_a_verdict_changed_after_the_reveal_is_the_consensus_but_not_the_agreement(tmp_path: Path) -> None:
    run, db_root = demo_records(tmp_path, n=2)
    state = tmp_path / "state.sqlite"
    load_project(state, "demo", run, db_root)
    with thread_server(config(state)) as base:
        ann, bea = _signed_in(base, "ann"), _signed_in(base, "bea")
        ann.label("demo", "1", True, reason="ANN-SAYS")
        bea.label("demo", "1", False, reason="BEA-SAYS")
        bea.label("demo", "1", True, reason="BEA-AGREES-NOW")  # after reading ann's label
        _, _, overview = ann.get("/p/demo/overview")
    text = overview.decode()
    assert "<b>0 of 1</b>" in text and "1 of 2 verdicts (one per annotator and item) changed after the reveal" in text
    assert "settled: correct" in text and "BEA-AGREES-NOW" in text  # the disagreement, settled by the change


BAD_LABELS: list[tuple[str, bytes, str]] = [
    ("a lone surrogate in the reason", b'{"correct": true, "reason": "why \\ud800"}', "lone surrogate"),
    ("a lone low surrogate", b'{"correct": true, "reason": "\\udfff"}', "lone surrogate"),
    ("250 KB of nested [", b"[" * 250_000, "nested too deeply"),
    ("250 KB of nested {", b'{"a":' * 50_000, "nested too deeply"),
    ("seconds beyond a float", b'{"correct": true, "seconds": 1e999}', "beyond the range"),
    ("seconds -1e999", b'{"correct": true, "seconds": -1e999}', "beyond the range"),
    ("seconds NaN", b'{"correct": true, "seconds": NaN}', "NaN"),
    ("seconds Infinity", b'{"correct": true, "seconds": Infinity}', "Infinity"),
    ("an integer beyond a float", b'{"correct": true, "seconds": 1' + b"0" * 400 + b"}", "finite"),
    ("an integer of 5,000 digits", b'{"correct": true, "seconds": 1' + b"0" * 5000 + b"}", "not valid JSON"),
    ("negative seconds", b'{"correct": true, "seconds": -3}', "at least 0"),
    ("seconds as text", b'{"correct": true, "seconds": "12"}', "'seconds' must be a number"),
    ("seconds as true", b'{"correct": true, "seconds": true}', "'seconds' must be a number"),
    ("correct as a number", b'{"correct": 1}', "'correct' must be true or false"),
    ("a flag as text", b'{"correct": true, "goldx": "yes"}', "'goldx' must be true or false"),
    ("a reason as a list", b'{"correct": true, "reason": ["x"]}', "'reason' must be text"),
    ("a reason too long", json.dumps({"correct": True, "reason": "x" * 10_001}).encode(), "at most 10000"),
    ("an unknown field", b'{"correct": true, "gold_x": true}', "unknown field 'gold_x'"),
    ("a list", b"[true]", "a JSON object"),
    ("a string", b'"correct"', "a JSON object"),
    ("bad JSON", b'{"correct": tru', "not valid JSON"),
    ("an empty body", b"", "not valid JSON"),
    ("not UTF-8", b'{"correct": true, "reason": "\xe9"}', "not UTF-8"),
]


@pytest.mark.parametrize(("what", "body", "says"), BAD_LABELS, ids=[b[0] for b in BAD_LABELS])
def test_every_malformed_label_is_a_400_with_a_message(
    served: tuple[str, Path], what: str, body: bytes, says: str
) -> None:
    base, state = served
    c = _signed_in(base, "eve")
    status, headers, answer = c.request("POST", "/p/demo/label?id=3", body, JSON)
    assert status == 400, (what, status, answer[:200])
    assert headers["content-type"].startswith("application/json")
    assert says in json.loads(answer)["error"], answer
    with sqlite3.connect(state) as conn:
        assert conn.execute("SELECT count(*) FROM labels WHERE annotator = 'eve'").fetchone() == (0,)


BAD_QUERIES: list[tuple[bytes, str]] = [
    (b"[" * 250_000, "nested too deeply"),
    (b'{"sql": "SELECT 1", "x": NaN}', "NaN"),
    (b'{"sql": "SELECT 1", "limit": 1}', "unknown field 'limit'"),
    (b"[1]", "a JSON object"),
    (b'{"sql": ', "not valid JSON"),
    (b'{"sql": 1}', "one query"),
]


@pytest.mark.parametrize(("body", "says"), BAD_QUERIES, ids=[s for _, s in BAD_QUERIES])
def test_every_malformed_query_is_a_400_with_a_message(served: tuple[str, Path], body: bytes, says: str) -> None:
    c = _signed_in(served[0], "fay")
    status, _, answer = c.request("POST", "/p/demo/query?id=3", body, JSON)
    assert status == 400 and says in json.loads(answer)["error"], (status, answer[:200])


def test_a_too_large_body_is_refused_with_a_message_the_page_can_show(served: tuple[str, Path]) -> None:
    c = _signed_in(served[0], "gus")
    for path in ("/p/demo/label?id=3", "/p/demo/query?id=3"):
        status, _, answer = c.request("POST", path, b'{"reason": "' + b"x" * 300_000 + b'"}', JSON)
        assert status == 413 and "larger than 256 KiB" in json.loads(answer)["error"]


def test_a_finite_seconds_is_kept(served: tuple[str, Path]) -> None:
    base, state = served
    c = _signed_in(base, "hal")
    for key, seconds in (("4", 12.5), ("5", 0), ("6", None)):
        status, _, _ = c.request(
            "POST", f"/p/demo/label?id={key}", json.dumps({"correct": True, "seconds": seconds}).encode(), JSON
        )
        assert status == 200
    with sqlite3.connect(state) as conn:
        rows = conn.execute("SELECT key, seconds FROM labels WHERE annotator = 'hal' ORDER BY key").fetchall()
    assert rows == [("4", 12.5), ("5", 0.0), ("6", None)]


def test_the_store_refuses_what_json_cannot_hold(tmp_path: Path) -> None:
    from test_review_store import _items

    store = Store(tmp_path / "s.sqlite")
    store.add_items("p", "test", _items(2))
    for seconds in (math.inf, -math.inf, math.nan, -1.0):
        with pytest.raises(UsageError, match="seconds"):
            store.add_label("p", "0", "ann", Verdict(True), seconds)
    with pytest.raises(UsageError, match="lone surrogate"):
        store.add_label("p", "0", "ann", Verdict(True, reason="a\udc80b"))
    assert store.labels("p") == []


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_the_export_is_strict_json_even_from_an_older_state(tmp_path: Path) -> None:
    """A state file written before non-finite seconds were refused exports them as null, never as
    ``Infinity`` or ``NaN`` (which no strict JSON reader takes)."""
    from test_review_store import _items

    state = tmp_path / "s.sqlite"
    store = Store(state)
    store.add_items("p", "test", _items(2))
    store.add_label("p", "0", "ann", Verdict(True, reason="fine"), 3.0)
    store.add_label("p", "0", "bea", Verdict(True), 4.0)
    store.add_label("p", "1", "ann", Verdict(False), 5.0)
    with sqlite3.connect(state) as conn:  # as the old app stored "seconds": 1e999 and NaN
        conn.execute("UPDATE labels SET seconds = 1e999 WHERE annotator = 'ann' AND key = '0'")
        conn.execute("UPDATE labels SET seconds = -1e999 WHERE key = '1'")
    summary = export(store, "p", tmp_path / "out")
    assert summary["labels"] == 3
    folder = tmp_path / "out" / "p"
    lines = (folder / "labels.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [_strict(line) for line in lines]
    assert [(r["annotator"], r["seconds"]) for r in rows] == [("ann", None), ("bea", 4.0), ("ann", None)]
    for name in ("p.json", "agreement.json", "gold_false_ids.json", "ambq_ids.json", "ambs_ids.json"):
        _strict((folder / name).read_text(encoding="utf-8"))


def test_a_per_annotator_file_with_a_lone_surrogate_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rose_sql.cli import main

    row = {"question_id": 1, "db_id": "d", "question": "q", "evidence": "", "predicted_sql": "SELECT 1"}
    good = tmp_path / "annotations_1.json"
    good.write_text(json.dumps([{**row, "gold_sql": "SELECT 1", "label": True, "reason": "fine"}]))
    bad = tmp_path / "annotations_2.json"
    bad.write_text(json.dumps([{**row, "gold_sql": "SELECT 1", "label": False, "reason": "no \udc00"}]))
    state = tmp_path / "s.sqlite"
    args = ["review", str(state), "--project", "p", "--import-annotations", str(good), str(bad), "--no-serve"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "annotations_2.json" in result.output and "lone surrogate" in result.output
    store = Store(state)
    assert store.projects() == [] and result.exception is not None and isinstance(result.exception, SystemExit)
