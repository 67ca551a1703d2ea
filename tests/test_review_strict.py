"""The review app, hardened (issue 22, finding 6): an annotator who still owes an item a label is shown
none of its labels, reasons or verdicts on any page the app serves; every malformed body is a 400
with a message, never a 500; non-finite numbers are refused; the export is strict JSON."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from unittest.mock import patch
from urllib.parse import urlencode

import pytest

pytest.importorskip("starlette", reason="rose review's extra is not installed: pip install -e '.[review]'")

from review_support import Client, config, demo_records, load_project, thread_server

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
    assert "Disagreements (1)" in seen and "Waiting for your label" in seen  # item 1 is listed, blind
    assert [s for s in secrets if s in seen] == []
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
