"""The review app's state and its rules: labels committed when given and never overwritten, assignment of
two labels per item (a third where they disagree), consensus and agreement, all without a web server."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest

from rose_sql.errors import UsageError
from rose_sql.items.load import Item
from rose_sql.review.agreement import (
    agreement,
    blind,
    changed_verdicts,
    current,
    first_open,
    is_open,
    majority,
    needed,
    progress,
    status,
)
from rose_sql.review.exchange import export
from rose_sql.review.store import Label, Store, Verdict
from rose_sql.review.work import WorkItem, load_work


def _item(i: int, pred: str | None = None) -> WorkItem:
    return WorkItem(str(i), Item(i, "t", pred or f"SELECT {i}", "SELECT 1", f"question {i}"))


def _items(n: int) -> list[WorkItem]:
    return [_item(i) for i in range(n)]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "state.sqlite")
    s.add_items("p", "test", _items(6))
    return s


def _lab(i: int, who: str, correct: bool, key: str = "k") -> Label:
    return Label(i, key, who, Verdict(correct), "t", None, "web")


@pytest.mark.parametrize(
    ("verdicts", "needs"),
    [
        ([], 2),
        ([True], 2),
        ([True, True], 2),
        ([False, False], 2),
        ([True, False], 3),
        ([False, True, True], 3),
        ([True, False, True, False], 5),  # a tie (claims raced, or a label changed): one more
        ([True, True, False, False], 5),
        ([True, False, True, False, False], 3),  # the tie broken: no more than the rule asks
    ],
)
def test_two_labels_per_item_and_a_third_where_they_disagree(verdicts: list[bool], needs: int) -> None:
    assert needed(verdicts) == needs


def test_a_tie_stays_open_to_a_fifth_annotator() -> None:
    tie = [_lab(i, who, v) for i, (who, v) in enumerate((("ann", True), ("bob", False), ("cid", True), ("dan", False)))]
    assert status(tie) == "disputed" and is_open("eve", tie, set()) and not is_open("eve", tie, {"fay"})
    assert not is_open("fay", [*tie, _lab(9, "eve", True)], set())


@pytest.mark.parametrize(
    ("verdicts", "side", "state"),
    [
        ([], None, "unlabelled"),
        ([True], None, "in progress"),
        ([True, True], True, "agreed"),
        ([False, False], False, "agreed"),
        ([True, False], None, "disputed"),
        ([True, False, False], False, "agreed"),
        ([True, False, True], True, "agreed"),
        ([True, False, True, False], None, "disputed"),
    ],
)
def test_consensus_is_a_strict_majority_of_two_or_more(verdicts: list[bool], side: bool | None, state: str) -> None:
    labels = [_lab(i, f"a{i}", v) for i, v in enumerate(verdicts)]
    got = majority(labels)
    assert (got[0].verdict.correct if got else None) == side
    assert status(labels) == state


def test_an_item_is_open_until_it_has_its_labels_counting_claims_of_others() -> None:
    one = [_lab(1, "ann", True)]
    assert is_open("bob", one, set()) and not is_open("ann", one, set())
    assert not is_open("cid", one, {"bob"})  # bob opened it and owes the second label
    assert is_open("bob", one, {"bob"})  # one's own claim does not count against one
    assert not is_open("cid", [_lab(1, "ann", True), _lab(2, "bob", True)], set())
    assert is_open("cid", [_lab(1, "ann", True), _lab(2, "bob", False)], set())  # the third label


def test_a_changed_label_replaces_the_annotators_verdict_but_keeps_their_place() -> None:
    labels = [_lab(1, "ann", True), _lab(2, "bob", False), _lab(3, "ann", False)]
    got = current(labels)["k"]
    assert [(x.annotator, x.verdict.correct) for x in got] == [("ann", False), ("bob", False)]


def test_agreement_reads_the_labels_given_blind_and_changes_after_the_reveal_count_for_the_consensus() -> None:
    """bob said no, saw ann's yes, then said yes: the consensus takes his yes, agreement his blind no."""
    labels = [_lab(1, "ann", True), _lab(2, "bob", False), _lab(3, "bob", True), _lab(4, "bob", True)]
    assert [(x.annotator, x.verdict.correct) for x in blind(labels)["k"]] == [("ann", True), ("bob", False)]
    assert status(current(labels)["k"]) == "agreed" and changed_verdicts(current(labels), blind(labels)) == 1
    agreed = agreement(blind(labels), ["k"])
    assert (agreed.double, agreed.agreed, [k for k, _ in agreed.disagreements]) == (1, 0, ["k"])
    back = [*labels, _lab(5, "bob", False)]
    assert changed_verdicts(current(back), blind(back)) == 0  # back to the blind verdict


def test_agreement_counts_the_first_two_labels_and_kappa_per_pair() -> None:
    labels = []
    verdicts = {"0": (True, True), "1": (False, False), "2": (True, False), "3": (True, True)}
    for i, (k, (a, b)) in enumerate(verdicts.items()):
        labels += [_lab(2 * i, "ann", a, k), _lab(2 * i + 1, "bob", b, k)]
    labels.append(_lab(99, "cid", True, "2"))
    agreed = agreement(current(labels), list(verdicts))
    assert (agreed.double, agreed.agreed, agreed.raw) == (4, 3, 75.0)
    pair = next(p for p in agreed.pairs if (p.a, p.b) == ("ann", "bob"))
    # confusion (ann, bob): tp 2, tn 1, fp 0, fn 1: po = .75, pe = .5 * ... -> kappa 50
    assert (pair.n, pair.agreed, pair.kappa) == (4, 3, 50.0)
    assert [k for k, _ in agreed.disagreements] == ["2"]
    assert {(p.annotator, p.labelled) for p in progress(labels, current(labels), list(verdicts))} == {
        ("ann", 4),
        ("bob", 4),
        ("cid", 1),
    }


def test_labels_are_committed_and_survive_reopening(store: Store, tmp_path: Path) -> None:
    label = store.add_label("p", "1", "ann", Verdict(True, goldx=True, reason="gold misses DISTINCT"), 3.5)
    # another connection (another process, as after a crash) sees it at once
    conn = sqlite3.connect(tmp_path / "state.sqlite")
    assert conn.execute(
        "SELECT annotator, correct, goldx, reason FROM labels WHERE id = ?", (label.id,)
    ).fetchone() == (
        "ann",
        1,
        1,
        "gold misses DISTINCT",
    )
    conn.close()
    store.close()
    again = Store(tmp_path / "state.sqlite")
    assert again.labels("p") == [label]
    assert again.keys("p") == [str(i) for i in range(6)]


def test_two_annotators_labelling_the_same_item_at_once_both_keep_their_label(store: Store) -> None:
    names = [f"a{i}" for i in range(8)]
    barrier = threading.Barrier(len(names))
    errors: list[BaseException] = []

    def label(name: str) -> None:
        try:
            barrier.wait()
            store.add_label("p", "2", name, Verdict(name.endswith(("0", "2", "4")), reason=f"by {name}"))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=label, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = current(store.labels("p"))["2"]
    assert sorted(x.annotator for x in got) == names
    assert {x.verdict.reason for x in got} == {f"by {n}" for n in names}


def test_claims_hold_an_item_for_who_opened_it(store: Store) -> None:
    store.add_label("p", "0", "ann", Verdict(True))
    store.claim("p", "0", "bob", minutes=5)
    claims = store.claims("p")
    on_item = current(store.labels("p"))["0"]
    assert not is_open("cid", on_item, claims["0"])
    store.add_label("p", "0", "bob", Verdict(True))
    assert "0" not in store.claims("p")  # labelling releases the claim
    store.claim("p", "1", "cid", minutes=-1)
    assert "1" not in store.claims("p")  # expired


def test_items_keep_their_text_and_a_different_copy_is_refused(store: Store) -> None:
    assert store.add_items("p", "again", _items(6)) == 0
    changed = [_item(3, "SELECT 'other'")]
    with pytest.raises(UsageError, match="item 3 is already there with other text"):
        store.add_items("p", "other", changed)
    with pytest.raises(UsageError, match="project name"):
        store.add_items("no spaces please", "x", _items(1))
    with pytest.raises(UsageError, match="no item"):
        store.add_label("p", "404", "ann", Verdict(True))


def test_annotator_names_are_checked(store: Store) -> None:
    assert store.annotator(store.sign_in("  Ann  ")) == "Ann"
    for bad in ("", "   ", "a" * 65, "tab\there"):
        with pytest.raises(UsageError):
            store.sign_in(bad)
    assert store.annotator("not-a-token") is None


def test_export_keeps_every_label_and_marks_the_changed_ones(store: Store, tmp_path: Path) -> None:
    store.add_label("p", "0", "ann", Verdict(True, reason="first"))
    store.add_label("p", "0", "bob", Verdict(True, ambq=True, reason="two readings"))
    store.add_label("p", "0", "ann", Verdict(True, reason="second thoughts"))
    store.add_label("p", "1", "ann", Verdict(False))
    summary = export(store, "p", tmp_path / "out")
    rows = [json.loads(x) for x in (tmp_path / "out" / "p" / "labels.jsonl").read_text().splitlines()]
    assert [(r["annotator"], r["reason"], r["current"]) for r in rows] == [
        ("ann", "first", False),
        ("bob", "two readings", True),
        ("ann", "second thoughts", True),
        ("ann", "", True),
    ]
    consensus = json.loads((tmp_path / "out" / "p" / "p.json").read_text())
    assert consensus == [
        {
            "question_id": 0,
            "db_id": "t",
            "question": "question 0",
            "evidence": "",
            "gold_sql": "SELECT 1",
            "predicted_sql": "SELECT 0",
            "label": True,
            "reason_1": "second thoughts",
            "reason_2": "two readings",
        }
    ]
    assert json.loads((tmp_path / "out" / "p" / "ambq_ids.json").read_text()) == [0]
    assert summary["consensus"] == 1 and summary["labels"] == 4
    assert summary["verdicts_changed_after_reveal"] == 0  # ann gave a new reason, not a new verdict
    store.add_label("p", "0", "bob", Verdict(False, reason="changed my mind"))
    summary = export(store, "p", tmp_path / "out2")
    changed = (summary["verdicts_changed_after_reveal"], summary["verdicts"])
    assert (summary["first_two_agree"], changed, summary["consensus"]) == (1, (1, 3), 0)
    assert summary["agreement_over"].startswith("each annotator's first label")


def test_work_loads_from_run_outputs_and_input_files(tmp_path: Path) -> None:
    jsonl = tmp_path / "items.jsonl"
    jsonl.write_text('{"id": 7, "db_id": "t", "question": "q", "gold_sql": "SELECT 1", "pred_sql": "SELECT 2"}\n')
    work = load_work(jsonl)
    assert [(it.key, it.item.pred_sql, it.record) for it in work.items] == [("7", "SELECT 2", None)]
    twice = tmp_path / "twice.jsonl"
    twice.write_text(
        '{"id": 7, "db_id": "t", "gold_sql": "SELECT 1", "pred_sql": "SELECT 2"}\n'
        '{"id": "7", "db_id": "t", "gold_sql": "SELECT 1", "pred_sql": "SELECT 3"}\n'
    )
    with pytest.raises(Exception, match="7"):
        load_work(twice)


def test_annotators_asking_at_once_are_given_items_two_by_two(store: Store) -> None:
    order = store.keys("p")
    names = [f"a{i}" for i in range(10)]
    barrier = threading.Barrier(len(names))
    given: dict[str, str | None] = {}

    def ask(name: str) -> None:
        barrier.wait()
        given[name] = store.assign("p", name, lambda labels, claims: first_open(order, name, labels, claims), 5)

    threads = [threading.Thread(target=ask, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts: dict[str | None, int] = {}
    for key in given.values():
        counts[key] = counts.get(key, 0) + 1
    assert counts == {"0": 2, "1": 2, "2": 2, "3": 2, "4": 2}
    # asking again gives each the item they hold
    for name, key in given.items():
        assert store.assign("p", name, lambda labels, claims, n=name: first_open(order, n, labels, claims), 5) == key
