"""Step 3: the syntax reward, how close the predicted query's structure is to the gold's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from rose_sql.config import RewardConfig
from rose_sql.reward.clauses import ParsedSQL, Part
from rose_sql.reward.trees import Tree, sequence_distance, tree_edit_distance


@dataclass(frozen=True, slots=True)
class SyntaxScore:
    """How close the predicted SQL's structure is to the gold's, each in [0, 1]."""

    parsed: bool
    """Whether sqlglot parsed the prediction as one statement."""
    tree: float
    """1 - TED / max(nodes) of the two normalised ASTs (0 when unparsed)."""
    clause: float
    """Weighted mean of the per-clause similarities."""
    clauses: tuple[tuple[str, float], ...] = ()
    """Similarity of each clause present in either query (0 when present in one only)."""

    def __reduce__(self) -> tuple[type[SyntaxScore], tuple[object, ...]]:
        # pickled with every outcome a worker sends back: as a plain tuple of fields (see ``Outcome``)
        return SyntaxScore, (self.parsed, self.tree, self.clause, self.clauses)

    def value(self, mix: float) -> float:
        """The syntax reward: ``(1 - mix) * tree + mix * clause``."""
        return (1.0 - mix) * self.tree + mix * self.clause


UNPARSED = SyntaxScore(False, 0.0, 0.0)
"""The syntax score of a prediction that does not parse (or was not parsed)."""


def _part_distance(
    p: Part | None, g: Part | None, distance: Callable[[Tree, Tree], int], max_nodes: int
) -> tuple[int, int]:
    """(edit distance, larger size) of two clauses; a clause on one side only costs its size."""
    if p is None or g is None:
        only = p if p is not None else g
        size = only.size if only is not None else 0
        return size, size
    size = max(p.size, g.size)
    if p.tree == g.tree:
        return 0, size
    if size > max_nodes:  # too large for the exact distance: its label-bag lower bound
        return size - sum((Counter(p.tree[0][:-1]) & Counter(g.tree[0][:-1])).values()), size
    return distance(p.tree, g.tree), size


def syntax_score(
    pred: ParsedSQL | None,
    gold: ParsedSQL | None,
    config: RewardConfig,
    distance: Callable[[Tree, Tree], int] = tree_edit_distance,
) -> SyntaxScore:
    """Tree and clause similarity of a parsed prediction to the parsed gold.

    The tree distance is the edit distance of the skeletons (root to outermost SELECT) plus, per
    clause, the Zhang–Shasha distance of the two clause trees (a clause on one side only costs its
    size): the tree edit distance restricted to mappings that keep clauses aligned (SELECT items
    are never matched with WHERE items), so never below the unrestricted one. ``tree`` is
    ``1 - distance / max(sizes)``; each clause's similarity is the same ratio on that clause, and
    ``clause`` their weighted mean over the clauses present in either query.

    An unparsed prediction scores 0. When only the gold does not parse (sqlglot cannot read it but
    SQLite can), nothing can be compared and a parsed prediction scores 1. ``distance`` computes the
    tree edit distance (the scorer passes a memoised one).
    """
    if pred is None:
        return SyntaxScore(False, 0.0, 0.0)
    if gold is None:
        return SyntaxScore(True, 1.0, 1.0)
    total_d = sequence_distance(pred.skeleton, gold.skeleton)
    clause_sims: dict[str, float] = {}
    for name in dict.fromkeys([*pred.parts, *gold.parts]):
        d, size = _part_distance(pred.parts.get(name), gold.parts.get(name), distance, config.max_ted_nodes)
        total_d += d
        both = name in pred.parts and name in gold.parts
        clause_sims[name] = max(0.0, 1.0 - d / size) if both and size else float(both)
    tree = max(0.0, 1.0 - total_d / max(pred.size, gold.size, 1))
    per = [(name, clause_sims[name], w) for name, w in config.clause_weights if name in clause_sims]
    total_w = sum(w for _, _, w in per)
    clause = sum(s * w for _, s, w in per) / total_w if total_w else tree
    return SyntaxScore(True, tree, clause, tuple((name, s) for name, s, _ in per))
