"""Who labels what, and how far the annotators agree: pure functions over the stored labels.

**Assignment.** Each item is to get ``per_item`` (two) independent labels; where the first two
disagree it asks for one more, and where its labels then tie (two against two, after a change or a
race between claims) one more again. An item is *open* to an annotator who has not labelled it while its
labels, plus the claims of others who opened it and owe it a label, fall short of what it needs.

**Consensus.** An item's consensus is the verdict of a strict majority of its annotators, at least
two of them (two agreeing labels; two of three after a disagreement). Its flags (GoldX, AmbQ,
ambiguous schema) are raised when any annotator of that majority raised them: on the ROSE authors'
own files this gives exactly their historical GoldX and AmbQ lists.

**Agreement.** Raw agreement counts the items with at least two labels whose first two agree (the
figure the ROSE authors report: 333 of 383 on BIRD); Cohen's kappa is computed per pair of
annotators over the items both labelled, with :mod:`rose_sql.analysis.agree`'s kappa. Both read each
annotator's first label on an item (:func:`blind`), given before the others' were shown: a label changed
after the reveal counts for the consensus, never for agreement, which it would inflate.

**Blind means blind.** Whoever still owes an item a label (:func:`owes`) is shown nothing computed from its
labels, on any page or export: every figure shown to them is computed without the items they owe
(:func:`withheld`, :func:`visible`), which are listed as waiting for their label. A figure over all items
(a per-pair kappa, the raw agreement, the settled disagreements) would let the one who breaks a tie work out
who said what.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations

from rose_sql.analysis.agree import Confusion, kappa, pct
from rose_sql.review.store import Label

FLAG_NAMES = {"goldx": "wrong gold (GoldX)", "ambq": "ambiguous question (AmbQ)", "ambs": "ambiguous schema"}
"""The flags an annotator can raise, and how the pages name them."""


def current(labels: Iterable[Label]) -> dict[str, list[Label]]:
    """Each item's labels that count: every annotator's latest, annotators in the order they first labelled it."""
    latest: dict[str, dict[str, Label]] = {}
    for lab in sorted(labels, key=lambda x: x.id):
        # a dict keeps the annotator's place (their first label) when their later labels replace it
        latest.setdefault(lab.key, {})[lab.annotator] = lab
    return {k: list(by.values()) for k, by in latest.items()}


def blind(labels: Iterable[Label]) -> dict[str, list[Label]]:
    """Each item's labels given blind: every annotator's first, annotators in the order they labelled it."""
    first: dict[str, dict[str, Label]] = {}
    for lab in sorted(labels, key=lambda x: x.id):
        first.setdefault(lab.key, {}).setdefault(lab.annotator, lab)
    return {k: list(by.values()) for k, by in first.items()}


def changed_verdicts(now: dict[str, list[Label]], then: dict[str, list[Label]]) -> int:
    """Annotators' labels whose latest verdict (``now``: :func:`current`) differs from the one they gave
    blind (``then``: :func:`blind`), item by item."""
    was = {(lab.key, lab.annotator): lab.verdict.correct for on in then.values() for lab in on}
    return sum(1 for on in now.values() for lab in on if lab.verdict.correct != was[lab.key, lab.annotator])


def needed(verdicts: Sequence[bool], per_item: int = 2) -> int:
    """Labels an item needs: ``per_item``, one more where the first two disagree, and one more than it has
    while that many leave no strict majority (a tie)."""
    n = per_item + 1 if len(verdicts) >= 2 and verdicts[0] != verdicts[1] else per_item
    yes = sum(verdicts)
    if len(verdicts) >= n and not _strict_majority(yes, len(verdicts) - yes):
        return len(verdicts) + 1
    return n


def _strict_majority(yes: int, no: int) -> bool:
    return max(yes, no) >= 2 and yes != no


def is_open(annotator: str, on_item: Sequence[Label], claimed_by: set[str], per_item: int = 2) -> bool:
    """Whether the item still needs a label from this annotator (see the module's docstring)."""
    if any(lab.annotator == annotator for lab in on_item):
        return False
    others = len(claimed_by - {annotator} - {lab.annotator for lab in on_item})
    return len(on_item) + others < needed([lab.verdict.correct for lab in on_item], per_item)


def owes(annotator: str, on_item: Sequence[Label], per_item: int = 2) -> bool:
    """Whether the annotator has not labelled the item and it still needs a label, whoever holds it (a claim
    runs out, and the item may come to them). Such an annotator is shown none of its labels, reasons or
    verdicts, on any page: blind first, then the reveal."""
    return is_open(annotator, on_item, set(), per_item)


def withheld(labels: Iterable[Label], order: Sequence[str], viewer: str, per_item: int = 2) -> list[str]:
    """The items ``viewer`` still owes a label (:func:`owes`), in ``order``: nothing computed from their labels is
    shown to them until they have labelled."""
    by_item = current(labels)
    return [k for k in order if owes(viewer, by_item.get(k, []), per_item)]


def visible(labels: Iterable[Label], hidden: Iterable[str]) -> list[Label]:
    """The labels of every item but the ``hidden`` ones (:func:`withheld`)."""
    gone = set(hidden)
    return [lab for lab in labels if lab.key not in gone]


def first_open(
    order: Sequence[str], annotator: str, labels: Iterable[Label], claims: dict[str, set[str]], per_item: int = 2
) -> str | None:
    """The item to give an annotator next: one they hold and still owe a label, else the first open to them."""
    by_item = current(labels)
    open_ = [k for k in order if is_open(annotator, by_item.get(k, []), claims.get(k, set()), per_item)]
    return next((k for k in open_ if annotator in claims.get(k, set())), open_[0] if open_ else None)


def majority(on_item: Sequence[Label]) -> list[Label] | None:
    """The labels of the strict majority (two at least) of an item's annotators, or None when there is none."""
    yes = [lab for lab in on_item if lab.verdict.correct]
    no = [lab for lab in on_item if not lab.verdict.correct]
    if not _strict_majority(len(yes), len(no)):
        return None
    return yes if len(yes) > len(no) else no


def status(on_item: Sequence[Label], per_item: int = 2) -> str:
    """``unlabelled``, ``in progress`` (fewer labels than needed), ``agreed``, or ``disputed`` (no majority yet)."""
    if not on_item:
        return "unlabelled"
    if majority(on_item) is not None and len(on_item) >= per_item:
        return "agreed"
    if len(on_item) < needed([lab.verdict.correct for lab in on_item], per_item):
        return "in progress" if len(on_item) < per_item else "disputed"
    return "disputed"


@dataclass(frozen=True, slots=True)
class Pair:
    """How far two annotators agree on the items both labelled."""

    a: str
    """One annotator."""
    b: str
    """The other."""
    n: int
    """Items both labelled."""
    agreed: int
    """Of those, items where their verdicts are the same."""
    kappa: float | None
    """Cohen's kappa in percent (None when undefined: both constant and equal)."""


@dataclass(frozen=True, slots=True)
class Agreement:
    """Inter-annotator agreement over a project."""

    double: int
    """Items with at least two labels."""
    agreed: int
    """Of those, items whose first two labels agree."""
    pairs: list[Pair]
    """Per pair of annotators who share items."""
    disagreements: list[tuple[str, list[Label]]]
    """Items whose first two labels disagree, with every current label."""

    @property
    def raw(self) -> float | None:
        """Raw agreement in percent."""
        return pct(self.agreed / self.double) if self.double else None


def agreement(by_item: dict[str, list[Label]], order: Sequence[str]) -> Agreement:
    """Raw agreement, kappa per pair and the disagreements, items in ``order``; ``by_item``: the labels
    given blind (:func:`blind`), as the module's docstring says."""
    double = agreed = 0
    disagreements = []
    votes: dict[tuple[str, str], list[tuple[bool, bool]]] = {}
    for k in order:
        on_item = by_item.get(k, [])
        if len(on_item) >= 2:
            double += 1
            if on_item[0].verdict.correct == on_item[1].verdict.correct:
                agreed += 1
            else:
                disagreements.append((k, on_item))
        for x, y in combinations(sorted(on_item, key=lambda lab: lab.annotator), 2):
            votes.setdefault((x.annotator, y.annotator), []).append((x.verdict.correct, y.verdict.correct))
    pairs = []
    for (a, b), table in sorted(votes.items()):
        c = Confusion.of(table)
        pairs.append(Pair(a, b, c.n, c.tp + c.tn, pct(kappa(c))))
    return Agreement(double, agreed, pairs, disagreements)


@dataclass(frozen=True, slots=True)
class Progress:
    """One annotator's progress in a project."""

    annotator: str
    """Who."""
    labelled: int
    """Items they labelled."""
    open: int
    """Items still open to them."""
    changed: int
    """Labels they changed after giving them."""


def progress(
    labels: Sequence[Label], by_item: dict[str, list[Label]], order: Sequence[str], per_item: int = 2
) -> list[Progress]:
    """Every annotator's progress (claims are not counted: a held item is still theirs to label)."""
    names = sorted({lab.annotator for lab in labels})
    out = []
    for name in names:
        mine = [lab for lab in labels if lab.annotator == name]
        items = {lab.key for lab in mine}
        still = sum(1 for k in order if is_open(name, by_item.get(k, []), set(), per_item))
        out.append(Progress(name, len(items), still, len(mine) - len(items)))
    return out
