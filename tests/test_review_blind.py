"""Blind means blind (issue 35): whoever still owes an item a label learns nothing of its labels from any figure.

Pages already hid the owed item's labels, yet the overview's per-pair Cohen's kappa and the settled disagreements
it listed were computed over every item, so the tie-breaker could work out which annotator said yes (the kappa of
ann and bea moved with their hidden verdicts). Here the tie-breaker walks every route the app serves (read from
its routing table, each item-taking route for every item) and the export made for her; then the hidden labels
are flipped in the state file (who said yes now said no, and the reverse) and she walks again: every byte she is
served is the same. An annotator who owes nothing there is served figures that do change (the walk can see them).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from unittest.mock import patch
from urllib.parse import urlencode

import pytest

pytest.importorskip("starlette", reason="rose review's extra is not installed: pip install -e '.[review]'")

from review_support import Client, config, demo_records, load_project, thread_server

from rose_sql.review.exchange import export
from rose_sql.review.store import Store

pytestmark = pytest.mark.slow  # an attack test: every route walked for three annotators, five times (14 s)

ITEMS = [str(i) for i in range(1, 9)]
SETTLED = {"1": (True, False, True), "2": (False, True, True), "3": (True, False, False), "4": (True, True, None)}
"""Item -> (ann's verdict, bea's, cid's): disagreements cid settled, and one ann and bea agree on."""
HIDDEN = {"5": (True, False), "6": (True, None)}
"""Item -> (ann's verdict, bea's) on the items cid still owes: 5 awaits her as the tie-breaker, 6 a second label."""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The demo's first eight items, labelled as :data:`SETTLED` and :data:`HIDDEN` say: (URL, state)."""
    tmp = tmp_path_factory.mktemp("review-blind")
    run, db_root = demo_records(tmp, n=len(ITEMS), evidence=False)
    state = tmp / "state.sqlite"
    load_project(state, "demo", run, db_root)
    with thread_server(config(state)) as base:
        clients = {name: _signed_in(base, name) for name in ("ann", "bea", "cid")}
        for key, verdicts in {**SETTLED, **HIDDEN}.items():
            for name, verdict in zip(("ann", "bea", "cid"), verdicts, strict=False):
                if verdict is not None:
                    clients[name].label("demo", key, verdict, reason=f"{name} on {key}", goldx=verdict)
        yield base, state


def _signed_in(base: str, name: str) -> Client:
    c = Client(base)
    c.sign_in(name)
    return c


def _paths(project: str) -> list[str]:
    """Every page a GET can reach, from the app's own routing table (a route added later is walked too), each
    item-taking page once per item (the step between items both ways)."""
    from rose_sql.review import app as review_app

    with patch.object(review_app, "Pages", lambda config: None):  # only the routes are read
        app = review_app.create_app(config(Path("/nonexistent/unused.sqlite")), store=object())  # type: ignore[arg-type]
    paths = []
    for route in app.routes:
        path = getattr(route, "path", "")
        if "GET" not in (getattr(route, "methods", None) or set()) or path.startswith("/static"):
            continue
        path = path.replace("{project}", project)
        paths.append(path)
        if path.startswith(f"/p/{project}/"):
            ways = ("1", "-1") if path.endswith("/step") else ("1",)
            paths += [f"{path}?{urlencode({'id': k, 'dir': d})}" for k in ITEMS for d in ways]
    return paths


def walk(c: Client) -> dict[str, bytes]:
    """What the annotator is served on every page, redirects followed within the app."""
    out = {}
    for path in _paths("demo"):
        status, headers, body = c.get(path)
        hops = [path]
        while status in (302, 303, 307) and len(hops) < 6:
            hops.append(headers["location"])
            status, headers, body = c.get(headers["location"])
        assert status < 500, (path, status, body[:300])
        out[" -> ".join(hops)] = str(status).encode() + b"\n" + body
    return out


def exported(state: Path, out: Path, viewer: str | None) -> dict[str, bytes]:
    store = Store(state)
    try:
        export(store, "demo", out, viewer=viewer)
    finally:
        store.close()
    return {p.name: p.read_bytes() for p in sorted((out / "demo").iterdir())}


def flip(state: Path, keys: list[str]) -> None:
    """Every label of those items says the opposite: who said yes said no, and the reverse."""
    with sqlite3.connect(state) as conn:
        marks = ",".join("?" * len(keys))
        conn.execute(f"UPDATE labels SET correct = 1 - correct, goldx = 1 - goldx WHERE key IN ({marks})", keys)


def test_no_figure_the_tie_breaker_is_served_moves_with_the_labels_she_has_not_seen(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    base, state = served
    cid, ann = _signed_in(base, "cid"), _signed_in(base, "ann")
    before, again = walk(cid), walk(cid)
    assert before == again  # nothing on the pages changes by itself
    overview = next(v for k, v in before.items() if k.endswith("/overview")).decode()
    assert "Cohen's kappa" in overview and "ann · bea" in overview and "Waiting for your label" in overview
    assert "leaves out the 4 items waiting for your label" in overview  # 5 and 6, and 7 and 8 (no label yet)
    export_before = exported(state, tmp_path / "a", "cid")
    ann_before = walk(ann)
    operator_before = exported(state, tmp_path / "c", None)

    flip(state, list(HIDDEN))
    try:
        after = walk(cid)
        assert [k for k in before if before[k] != after.get(k)] == [], "a page the tie-breaker is served changed"
        assert before == after
        assert exported(state, tmp_path / "b", "cid") == export_before
        # the control: ann labelled them, so her figures and the operator's export do move with them
        assert walk(ann) != ann_before
        assert exported(state, tmp_path / "d", None) != operator_before
    finally:
        flip(state, list(HIDDEN))


def test_the_export_for_an_annotator_leaves_out_what_she_owes_and_says_so(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    _, state = served
    import json

    files = exported(state, tmp_path / "for-cid", "cid")
    summary = json.loads(files["agreement.json"])
    assert (summary["for"], summary["withheld_items"]) == ("cid", 4)  # 5 and 6, and 7 and 8 (no label yet)
    labelled = {row["question_id"] for row in map(json.loads, files["labels.jsonl"].decode().splitlines())}
    assert labelled == {1, 2, 3, 4}
    everything = json.loads(exported(state, tmp_path / "all", None)["agreement.json"])
    assert everything["labels"] > summary["labels"] and "withheld_items" not in everything
