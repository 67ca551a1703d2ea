"""Ordered labelled trees in postorder and their Zhang–Shasha tree edit distance (unit costs).

Plain data and plain functions, nothing SQL-specific: :mod:`rose_sql.reward.clauses` turns a query
into such trees, :mod:`rose_sql.reward.syntax` compares them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

Tree = tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]
"""A tree in postorder: labels, leftmost-leaf index of each node, keyroots."""
N = TypeVar("N")


def build_tree(label: str, children: Sequence[N], describe: Callable[[N], tuple[str, Sequence[N]]]) -> Tree:
    """A tree in postorder with leftmost leaves and keyroots, in one pass without recursion.

    The root is ``label`` over ``children``; ``describe`` gives any other node's label and children.
    """
    labels: list[str] = []
    leftmost: list[int] = []
    # frames: [label, iterator over its children, leftmost leaf of its first child (-1: none yet)]
    stack: list[list[Any]] = [[label, iter(children), -1]]
    while stack:
        frame = stack[-1]
        child: Any = next(frame[1], _END)
        if child is not _END:
            child_label, grandchildren = describe(child)
            if grandchildren:
                stack.append([child_label, iter(grandchildren), -1])
                continue
            i = len(labels)  # a leaf: finished at once
            labels.append(child_label)
            leftmost.append(i)
            if frame[2] < 0:
                frame[2] = i
            continue
        stack.pop()
        i = len(labels)
        first = frame[2] if frame[2] >= 0 else i
        labels.append(frame[0])
        leftmost.append(first)
        if stack and stack[-1][2] < 0:
            stack[-1][2] = first
    last: dict[int, int] = {}
    for i, lm in enumerate(leftmost):
        last[lm] = i
    return tuple(labels), tuple(leftmost), tuple(sorted(last.values()))


_END = object()


def tree_edit_distance(a: Tree, b: Tree) -> int:
    """Zhang–Shasha ordered tree edit distance with unit costs (insert, delete, relabel)."""
    la, ma, ka = a
    lb, mb, kb = b
    td = [[0] * len(lb) for _ in la]
    columns = [_columns(j, lb, mb) for j in kb]
    for i in ka:
        for j, cols in zip(kb, columns, strict=True):
            if ma[i] == i:  # one side is a single node: map it onto an equal label if there is one
                _leaf_dist(i, j, la, lb, mb, td)
            elif not cols:
                _leaf_dist_rev(i, j, la, ma, lb, td)
            else:
                _forest_dist(i, cols, la, ma, td)
    return td[-1][-1]


_Column = tuple[int, int, int, str]


def _columns(j: int, lb: Sequence[str], mb: Sequence[int]) -> list[_Column]:
    """The columns of keyroot ``j``'s forest-distance table (none for a single node): the column's
    index, node jj, the offset of jj's leftmost leaf (0: jj's subtree is a whole prefix of the
    forest) and jj's label."""
    lj = mb[j]
    if lj == j:
        return []
    offsets = [m - lj for m in mb[lj : j + 1]]
    return list(zip(range(1, j - lj + 2), range(lj, j + 1), offsets, lb[lj : j + 1], strict=True))


def _forest_dist(i: int, cols: list[_Column], la: Sequence[str], ma: Sequence[int], td: list[list[int]]) -> None:
    """Forest distances for keyroot ``i`` against one keyroot of the other tree (its ``cols``); fills
    ``td`` for the subtree pairs on their leftmost paths. The hot loop of the syntax reward: rows
    are built as they are filled, ``left`` is the cell just computed."""
    li = ma[i]
    prev = list(range(len(cols) + 1))
    fd = [prev]
    for x, ii in enumerate(range(li, i + 1), 1):
        tdi = td[ii]
        cur = [x]
        fd.append(cur)
        left = x
        if ma[ii] == li:  # ii's subtree is a whole prefix too: relabel, and td[ii][jj] is final
            lab = la[ii]
            for y, jj, o, lab_b in cols:
                best = prev[y] + 1
                if left + 1 < best:
                    best = left + 1
                if o:
                    if o + tdi[jj] < best:
                        best = o + tdi[jj]
                else:
                    if prev[y - 1] + (lab != lab_b) < best:
                        best = prev[y - 1] + (lab != lab_b)
                    tdi[jj] = best
                cur.append(best)
                left = best
        else:
            base = fd[ma[ii] - li]
            for y, jj, o, _ in cols:
                best = prev[y] + 1
                if left + 1 < best:
                    best = left + 1
                if base[o] + tdi[jj] < best:
                    best = base[o] + tdi[jj]
                cur.append(best)
                left = best
        prev = cur


def _leaf_dist(i: int, j: int, la: Sequence[str], lb: Sequence[str], mb: Sequence[int], td: list[list[int]]) -> None:
    """Node ``i`` against each subtree on ``j``'s leftmost path: its size, less one if a label equals."""
    lj, lab, found, row = mb[j], la[i], 0, td[i]
    for jj in range(lj, j + 1):
        if lb[jj] == lab:
            found = 1
        if mb[jj] == lj:
            row[jj] = jj - lj + 1 - found


def _leaf_dist_rev(
    i: int, j: int, la: Sequence[str], ma: Sequence[int], lb: Sequence[str], td: list[list[int]]
) -> None:
    """The same with the single node on the second tree's side."""
    li, lab, found = ma[i], lb[j], 0
    for ii in range(li, i + 1):
        if la[ii] == lab:
            found = 1
        if ma[ii] == li:
            td[ii][j] = ii - li + 1 - found


def sequence_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance of two short label sequences."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]
