"""Step 2: the execution reward, from the prediction's and the gold's executions under our comparator."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Any, Literal

from rose_sql.comparison.comparator import canon, compare
from rose_sql.config import RewardConfig
from rose_sql.results import Execution
from rose_sql.sql import has_top_level_order_by

RewardStatus = Literal[
    "match", "partial", "wrong", "error", "timeout", "gold_error", "undecidable", "invalid", "wall_guard"
]
"""What decided the execution reward. The last four leave the reward unscored (``None``)."""
UNSCORED: frozenset[RewardStatus] = frozenset({"gold_error", "undecidable", "invalid", "wall_guard"})
"""The statuses whose reward is ``None``."""


def execution_outcome(
    pred: Execution, gold: Execution, gold_sql: str, config: RewardConfig
) -> tuple[RewardStatus, str]:
    """Classify a prediction's execution against the gold's.

    - ``wall_guard``: a deadline left the gold or the prediction unrun, or a wall-clock stop could not
      be confirmed: what happened depends on the machine and its load, so the reward is None;
    - ``invalid``: the database could not be read, by the gold, or by the prediction and then by the gold
      run again on a fresh connection (the reward is None);
    - ``gold_error``: the gold failed, ran out of steps or ran away (the reward is None, never a match);
    - ``timeout`` / ``error``: the prediction ran out of steps or memory, or ran away (a wall clock stopped
      it twice, the second time alone with the guard doubled) / failed or was rejected (a failure that
      read as the database's is the prediction's own when the gold, run again, read the database);
    - ``undecidable``: the gold's result was cut at ``max_rows``, or our comparator's bounded column
      search gave up (``undecided``: too many columns look alike), never a guessed ``wrong``;
    - ``match``: equal under our comparator (row multiset; order when the gold's outermost query
      orders; columns matched as whole vectors in any order; numbers by value);
    - ``partial``: the same rows in the wrong order (gold ordered); the gold's columns plus others,
      or a subset of them, rows aligned; or, on multisets of canonical rows of the same width, the
      prediction is a strict sub- or super-multiset of the gold for some column order, both
      non-empty and the larger at most ``partial_max_ratio`` times the smaller;
    - ``wrong``: anything else that ran (including a prediction cut at ``max_rows``).
    """
    failed = gold_outcome(gold)
    if failed is not None:
        return failed
    if pred.status == "guard":
        return "wall_guard", f"the query was {pred.error or 'stopped by the wall-time guard'}"
    if pred.status == "unreadable":  # the gold, run again on a fresh connection, failed the same way
        return "invalid", f"the label's database: {pred.error or pred.status}"
    if pred.status == "timeout":
        return "timeout", pred.error or "timed out"
    if not pred.ok or pred.result is None:
        return "error", pred.error or pred.status
    p, g = pred.result, gold.result
    assert g is not None  # gold_outcome: a gold that ran has a result
    if g.truncated:
        return "undecidable", "the gold's result was cut at the row cap"
    if p.truncated:
        return "wrong", "the prediction returns more rows than the row cap"
    if p.rows == g.rows and len(p.columns) == len(g.columns):
        return "match", "same"  # what compare() concludes first, without canonicalising every cell
    c = compare(p, g, ordered=has_top_level_order_by(gold_sql), digits=config.float_digits)
    if c.equal:
        return "match", c.reason
    if c.reason == "undecided":
        return "undecidable", c.detail
    if c.reason in ("order", "extra_columns", "missing_columns"):
        return "partial", c.reason
    containment = _contained(p.rows, g.rows, config)
    if containment is not None:
        return "partial", containment
    return "wrong", c.reason


def gold_outcome(gold: Execution) -> tuple[RewardStatus, str] | None:
    """``wall_guard``, ``invalid`` (the label's database lacks what the gold reads, or cannot be read: the
    outcome contract's ``db_missing`` and ``db_unreadable``) or ``gold_error`` when the gold did not run to
    a result, else None."""
    if gold.status == "guard":
        return "wall_guard", f"the gold query was {gold.error or 'stopped by the wall-time guard'}"
    if gold.status in ("missing", "unreadable"):
        return "invalid", f"the label's database: {gold.error or gold.status}"
    if not gold.ok or gold.result is None:
        return "gold_error", f"the gold query {status_text(gold)}"
    return None


def status_text(e: Execution) -> str:
    """``timed out: ...`` or ``failed: ...`` with the execution's error, for details."""
    return f"{'timed out' if e.status == 'timeout' else 'failed'}: {e.error or e.status}"


def execution_value(status: RewardStatus, config: RewardConfig) -> float | None:
    """The execution reward of a status (None for the unscored ones)."""
    values: dict[str, float] = {
        "match": config.match,
        "partial": config.partial,
        "wrong": config.wrong,
        "error": config.error,
        "timeout": config.timeout,
    }
    return values.get(status)


def _contained(
    pred_rows: Sequence[tuple[Any, ...]], gold_rows: Sequence[tuple[Any, ...]], config: RewardConfig
) -> str | None:
    """``subset`` / ``superset``: the prediction's rows are strictly inside / around the gold's.

    Multisets of canonical rows (:func:`rose_sql.comparison.comparator.canon`); the prediction's columns may be
    permuted (up to ``partial_max_columns`` wide). Both must be non-empty, of one width, and the
    larger at most ``partial_max_ratio`` times the smaller.
    """
    n_p, n_g = len(pred_rows), len(gold_rows)
    if not n_p or not n_g or n_p == n_g or max(n_p, n_g) > config.partial_max_ratio * min(n_p, n_g):
        return None
    width = len(pred_rows[0])
    if width != len(gold_rows[0]):
        return None
    d = config.float_digits
    p = [tuple(canon(v, d) for v in r) for r in pred_rows]
    g = [tuple(canon(v, d) for v in r) for r in gold_rows]
    small, big = (p, g) if n_p < n_g else (g, p)
    big_bag = Counter(big)
    for perm in _alignments(p, g, width, config.partial_max_columns):
        aligned = p if perm is None else [tuple(r[j] for j in perm) for r in p]
        small_bag = Counter(aligned if small is p else small)
        large_bag = big_bag if big is g else Counter(aligned)
        if small_bag <= large_bag:
            return "subset" if n_p < n_g else "superset"
    return None


_MAX_ALIGNMENTS = 120
"""Column permutations tried at most for partial credit (each costs a pass over the rows)."""


def _alignments(
    p: list[tuple[Any, ...]], g: list[tuple[Any, ...]], width: int, max_width: int
) -> Iterator[tuple[int, ...] | None]:
    """None (columns as given), then permutations ``perm`` (gold column i <- prediction column perm[i]).

    A prediction column may stand for a gold column only when one's value set contains the other's.
    """
    yield None
    if width > max_width or width < 2:
        return
    pcols = [frozenset(r[j] for r in p) for j in range(width)]
    gcols = [frozenset(r[i] for r in g) for i in range(width)]
    cands = [[j for j in range(width) if pcols[j] <= gcols[i] or gcols[i] <= pcols[j]] for i in range(width)]
    identity = tuple(range(width))
    for perm in islice(permutations(cands), _MAX_ALIGNMENTS):
        if perm != identity:
            yield perm


def permutations(cands: list[list[int]]) -> Iterator[tuple[int, ...]]:
    """Each way to give position ``i`` one of ``cands[i]``, no candidate twice, in order."""
    chosen: list[int] = []

    def walk(i: int) -> Iterator[tuple[int, ...]]:
        if i == len(cands):
            yield tuple(chosen)
            return
        for j in cands[i]:
            if j not in chosen:
                chosen.append(j)
                yield from walk(i + 1)
                chosen.pop()

    return walk(0)
