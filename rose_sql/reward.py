"""RL rewards from the same sandbox and comparator as ``rose run``: execution- and syntax-aware.

A reward is computed in four steps, each a plain function here:

1. :func:`extract_sql` takes the SQL out of a model completion (a string or a list of chat messages):
   ``<think>`` blocks are dropped, then the last ``<answer>`` / ``<sql>`` / ``<solution>`` tag wins,
   inside it the last fenced code block wins, and comments are stripped.
2. :func:`execution_outcome` compares the prediction's result with the gold's under our comparator
   (:func:`rose_sql.compare.compare`): ``match`` (1), ``partial`` (0.5), ``wrong`` (0), ``error``
   (-1: SQLite raised, the sandbox rejected it, or no SQL was found), ``timeout`` (-0.5). A gold that
   fails is ``gold_error`` and the reward is ``None``: never a match, never a 0.
3. :func:`syntax_score`: 0 when the prediction does not parse (sqlglot, SQLite dialect); otherwise a
   mix of the normalised tree-edit-distance similarity of the two ASTs (Zhang–Shasha) and weighted
   per-clause similarities (SELECT and FROM weigh most).
4. :func:`combine`: ``alpha(t) * syntax + beta(t) * execution`` with ``beta = 1 - alpha`` moving
   from syntax-heavy to execution-heavy over training steps; the clause part may make up at most
   ``clause_cap`` (30 %) of the total.

:class:`RewardScorer` runs this for batches concurrently with a result cache; :func:`compute_score`,
:func:`compute_score_batch` and :func:`trl_reward` adapt it to verl and TRL. Every constant is a field
of :class:`RewardConfig`. See ``docs/rewards.md`` for the definitions with examples.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from itertools import islice
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from sqlglot import exp
from sqlglot.dialects.sqlite import SQLite

from rose_sql.compare import canon, compare
from rose_sql.config import Config
from rose_sql.execute import Execution, Executor
from rose_sql.sql import has_top_level_order_by, strip_comments

__all__ = [
    "Completion",
    "Gold",
    "LabelError",
    "ParsedSQL",
    "Reward",
    "RewardConfig",
    "RewardItem",
    "RewardScorer",
    "Schedule",
    "Status",
    "SyntaxScore",
    "bounds",
    "build_tree",
    "combine",
    "compute_score",
    "compute_score_batch",
    "execution_outcome",
    "extract_sql",
    "invalid",
    "parse",
    "parse_label",
    "syntax_score",
    "tree_edit_distance",
    "trl_reward",
    "weights",
]

Status = Literal["match", "partial", "wrong", "error", "timeout", "gold_error", "undecidable", "invalid"]
"""What decided the execution reward. The last three leave the reward unscored (``None``)."""
Schedule = Literal["constant", "linear", "cosine"]
Completion = str | Mapping[str, Any] | Sequence[Mapping[str, Any]]
"""A completion: text, one chat message, or a list of chat messages (``{"role", "content"}``)."""


def _default_workers() -> int:
    return max(2, 2 * (os.cpu_count() or 1))


@dataclass(frozen=True, slots=True)
class RewardConfig:
    """Every constant of the reward, with its default. Built once and passed down."""

    match: float = 1.0
    """Execution reward when the results are equal under our comparator."""
    partial: float = 0.5
    """Execution reward for a near miss (see :func:`execution_outcome`)."""
    wrong: float = 0.0
    """Execution reward for a query that runs but returns other rows."""
    error: float = -1.0
    """Execution reward for a query that fails, is rejected by the sandbox, or when no SQL is found."""
    timeout: float = -0.5
    """Execution reward for a query interrupted at ``timeout_s``."""
    partial_max_ratio: float = 4.0
    """Partial credit only when the larger row count is at most this times the smaller one: dropping a
    filter and returning the whole table is a superset of almost any gold."""
    partial_max_columns: int = 6
    """Column permutations are searched for partial credit up to this width (else columns as given)."""
    clause_weights: tuple[tuple[str, float], ...] = (
        ("select", 3.0),
        ("from", 3.0),
        ("where", 2.0),
        ("group", 1.0),
        ("having", 1.0),
        ("order", 1.0),
        ("limit", 0.5),
    )
    """Weight of each clause in the clause score (only clauses present in either query count)."""
    clause_mix: float = 0.4
    """Share of the clause score in the syntax reward; the rest is the whole-tree similarity."""
    max_ted_nodes: int = 300
    """Exact tree edit distance for clauses up to this many nodes; larger ones use the label-bag bound."""
    syntax: bool = True
    """Compute the syntax reward; False skips parsing and tree edit distance and weighs execution
    alone (alpha = 0, beta = 1): the cheapest reward, for when only results matter."""
    schedule: Schedule = "linear"
    """How alpha (the syntax weight) moves from ``alpha_start`` to ``alpha_end``; constant keeps alpha_start."""
    alpha_start: float = 0.6
    """Syntax weight at step 0 (syntax-heavy); beta = 1 - alpha weighs execution."""
    alpha_end: float = 0.1
    """Syntax weight from ``total_steps`` on, and when no step is known (execution-heavy)."""
    total_steps: int = 1000
    """Training steps over which the schedule moves."""
    clause_cap: float = 0.3
    """The clause part of the total may be at most this share of the total (none when the rest is <= 0)."""
    unscored: float = 0.0
    """What adapters that need a number (verl, OpenRLHF) give an unscored item; TRL gets None."""
    timeout_s: float = 2.0
    """Wall-clock limit of one predicted query, enforced inside SQLite."""
    gold_timeout_s: float = 30.0
    """Wall-clock limit of one gold query (run once, then cached); past it the item is ``gold_error``."""
    max_rows: int = 20_000
    """Rows kept per result; a gold past it is ``undecidable``, a prediction past it is ``wrong``."""
    max_sql_chars: int = 20_000
    """Longer extracted SQL is rejected (reward ``error``)."""
    float_digits: int = 12
    """Numbers compare after rounding to this many significant digits."""
    workers: int = field(default_factory=_default_workers)
    """Threads running a batch's queries; SQLite releases the GIL while a query runs."""
    processes: int = 0
    """Worker processes sharing a batch's comparisons and syntax scores (0: all in this process).
    Use the number of cores for training-size batches; each worker keeps its own caches."""
    memo_size: int = 50_000
    """Parsed trees and clause distances kept (LRU) so repeated completions cost nothing."""
    cache_cells: int = 2_000_000
    """Result cells each of the two executors (gold, prediction) keeps cached (LRU beyond it)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.clause_cap < 1.0:
            raise ValueError("clause_cap must be in [0, 1)")
        if not 0.0 <= self.clause_mix <= 1.0:
            raise ValueError("clause_mix must be in [0, 1]")
        if self.schedule not in ("constant", "linear", "cosine"):
            raise ValueError(f"unknown schedule {self.schedule!r}")
        if self.total_steps <= 0 or self.workers <= 0 or self.processes < 0:
            raise ValueError("total_steps and workers must be positive, processes not negative")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> RewardConfig:
        """A config from the keys of ``values`` that name fields (others are ignored)."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in values.items() if k in names}
        if isinstance(kw.get("clause_weights"), Mapping):
            kw["clause_weights"] = tuple(kw["clause_weights"].items())
        return cls(**kw)


# --------------------------------------------------------------------------- records


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

    def value(self, mix: float) -> float:
        """The syntax reward: ``(1 - mix) * tree + mix * clause``."""
        return (1.0 - mix) * self.tree + mix * self.clause


@dataclass(frozen=True, slots=True)
class Reward:
    """A reward and everything it is made of."""

    total: float | None
    """``alpha * syntax + beta * execution`` after the clause cap; None when unscored."""
    execution: float | None
    """The execution reward; None when unscored (gold failed, result undecidable, invalid item)."""
    syntax: float
    """The syntax reward in [0, 1]."""
    clause_part: float
    """What the clause score contributes to ``total`` after the cap."""
    status: Status
    """What decided the execution reward."""
    detail: str
    """One line: the comparator's reason or the error."""
    alpha: float
    """Syntax weight used."""
    beta: float
    """Execution weight used."""
    sql: str | None
    """The SQL extracted from the completion (None when none was found)."""
    structure: SyntaxScore
    """Tree and per-clause similarities."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (per-clause scores as an object)."""
        d = asdict(self)
        d["structure"]["clauses"] = dict(self.structure.clauses)
        return d


@dataclass(frozen=True, slots=True)
class RewardItem:
    """One completion to score against one gold query on one database."""

    completion: Completion
    """The model's output."""
    gold_sql: str
    """The reference SQL."""
    db: Path
    """The SQLite database file."""
    prompt: str | None = None
    """When given and ``completion`` is text that starts with it, the prompt is cut off first."""


# --------------------------------------------------------------------------- extraction

_THINK = re.compile(r"<(think|thinking|reasoning)>.*?(?:</\1>|\Z)", re.S | re.I)
_TAG = re.compile(r"<(answer|sql|solution|final_answer|final)>(.*?)(?:</\1>|\Z)", re.S | re.I)
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n`]*\n?(.*?)(?:```|\Z)", re.S)
_SPECIAL = re.compile(r"<\|[\w.-]{1,40}\|>|</?s>|<eos>|<pad>")
_SQL_LANGS = {"", "sql", "sqlite", "mysql", "postgresql", "postgres", "sqlite3", "plsql"}
_SELECT = re.compile(r"\bSELECT\b", re.I)
_CTE = re.compile(r"\bWITH\s+(?:RECURSIVE\s+)?[\w\"`\[\]]+\s*(?:\([^()]*\))?\s+AS\s*\(", re.I)


def _completion_text(completion: Completion) -> str:
    """The text of a completion: the string itself, or the last assistant message's content."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return _content(completion.get("content"))
    messages = [m for m in completion if isinstance(m, Mapping)]
    chosen = [m for m in messages if m.get("role") == "assistant"] or messages
    return _content(chosen[-1].get("content")) if chosen else ""


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):  # OpenAI-style parts: [{"type": "text", "text": ...}]
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


def _strip_prompt(text: str, prompt: str | None) -> str:
    """``text`` without a leading ``prompt`` (OpenRLHF sends prompt + response as one query)."""
    if prompt and text.startswith(prompt):
        return text[len(prompt) :]
    return text


def extract_sql(completion: Completion, prompt: str | None = None) -> str | None:
    """The SQL a completion answers with, comments stripped; None when there is none.

    Order: drop ``<think>`` blocks and special tokens; if an ``<answer>``, ``<sql>``, ``<solution>``
    or ``<final_answer>`` tag exists, keep the last one's content (an unclosed last tag runs to the
    end); if fenced code blocks exist there, the last SQL (or unlabelled) block wins; otherwise, in
    untagged prose, the text from its first SELECT (or the WITH that opens a CTE before it) up to
    the first blank line, and nothing when there is no SELECT.
    """
    text = _SPECIAL.sub("", _strip_prompt(_completion_text(completion), prompt))
    text = _THINK.sub("", text)
    tags = list(_TAG.finditer(text))
    if tags:
        text = tags[-1].group(2)
    fences = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]
    if fences:
        sql_fences = [body for lang, body in fences if lang in _SQL_LANGS]
        text = sql_fences[-1] if sql_fences else fences[-1][1]
    elif not tags:
        text = _from_prose(text)
    return _clean(text)


def _from_prose(text: str) -> str:
    m = _SELECT.search(text)
    if m is None:  # no SELECT anywhere: SQL only if the text is a bare VALUES (or parenthesised) query
        return text if re.match(r"\s*(VALUES\b|\()", text, re.I) else ""
    cte = _CTE.search(text, 0, m.start())
    start = cte.start() if cte else m.start()
    return re.split(r"\n\s*\n", text[start:], maxsplit=1)[0]


def _clean(sql: str) -> str | None:
    if "--" in sql or "/*" in sql:
        sql = strip_comments(sql)
    sql = sql.strip()
    while sql.endswith(";"):
        sql = sql[:-1].rstrip()
    return sql or None


# --------------------------------------------------------------------------- schedules and combination


def weights(config: RewardConfig, step: int | None = None) -> tuple[float, float]:
    """``(alpha, beta)`` at training ``step``: alpha weighs syntax, beta = 1 - alpha execution.

    ``constant``: alpha_start throughout. ``linear`` and ``cosine`` go from alpha_start at step 0 to
    alpha_end at ``total_steps`` (and stay there). ``step=None`` means the end of the schedule.
    Without the syntax reward (``config.syntax`` false) it is always ``(0, 1)``.
    """
    if not config.syntax:
        return 0.0, 1.0
    if config.schedule == "constant":
        alpha = config.alpha_start
    else:
        progress = 1.0 if step is None else min(max(step / config.total_steps, 0.0), 1.0)
        if config.schedule == "cosine":
            progress = (1.0 - math.cos(math.pi * progress)) / 2.0
        alpha = config.alpha_start + (config.alpha_end - config.alpha_start) * progress
    return alpha, 1.0 - alpha


def combine(
    structure: SyntaxScore, execution: float | None, config: RewardConfig, step: int | None = None
) -> tuple[float | None, float]:
    """``(total, clause_part)``: alpha * syntax + beta * execution, the clause part capped.

    The clause part ``alpha * clause_mix * clause`` may be at most ``clause_cap`` of the total:
    when it is more, it is cut to ``cap / (1 - cap) * rest`` (rest = the total without it), and to
    0 when the rest is not positive, so a query cannot earn its way up on clause overlap alone.
    """
    alpha, beta = weights(config, step)
    clause_part = alpha * config.clause_mix * structure.clause
    if execution is None:
        return None, clause_part
    rest = alpha * (1.0 - config.clause_mix) * structure.tree + beta * execution
    cap = config.clause_cap
    if clause_part > cap * (rest + clause_part):
        clause_part = max(0.0, cap / (1.0 - cap) * rest)
    return rest + clause_part, clause_part


def bounds(config: RewardConfig, step: int | None = None) -> tuple[float, float]:
    """The lowest and highest total at ``step``: no SQL at all, and the gold itself."""
    worst = SyntaxScore(False, 0.0, 0.0)
    best = SyntaxScore(True, 1.0, 1.0)
    low = combine(worst, min(config.error, config.timeout, config.wrong, config.partial), config, step)[0]
    high = combine(best, config.match, config, step)[0]
    assert low is not None and high is not None
    return low, high


# --------------------------------------------------------------------------- execution reward


def execution_outcome(pred: Execution, gold: Execution, gold_sql: str, config: RewardConfig) -> tuple[Status, str]:
    """Classify a prediction's execution against the gold's.

    - ``gold_error``: the gold failed or timed out (the reward is None, never a match);
    - ``timeout`` / ``error``: the prediction was interrupted / failed or was rejected;
    - ``undecidable``: the gold's result was cut at ``max_rows``;
    - ``match``: equal under our comparator (row multiset; order when the gold's outermost query
      orders; columns matched as whole vectors in any order; numbers by value);
    - ``partial``: the same rows in the wrong order (gold ordered); the gold's columns plus others,
      or a subset of them, rows aligned; or, on multisets of canonical rows of the same width, the
      prediction is a strict sub- or super-multiset of the gold for some column order, both
      non-empty and the larger at most ``partial_max_ratio`` times the smaller;
    - ``wrong``: anything else that ran (including a prediction cut at ``max_rows``).
    """
    if not gold.ok or gold.result is None:
        return "gold_error", f"the gold query {_status_text(gold)}"
    if pred.status == "timeout":
        return "timeout", pred.error or "timed out"
    if not pred.ok or pred.result is None:
        return "error", pred.error or pred.status
    p, g = pred.result, gold.result
    if g.truncated:
        return "undecidable", "the gold's result was cut at the row cap"
    if p.truncated:
        return "wrong", "the prediction returns more rows than the row cap"
    if p.rows == g.rows and len(p.columns) == len(g.columns):
        return "match", "same"  # what compare() concludes first, without canonicalising every cell
    c = compare(p, g, ordered=has_top_level_order_by(gold_sql), digits=config.float_digits)
    if c.equal:
        return "match", c.reason
    if c.reason in ("order", "extra_columns", "missing_columns"):
        return "partial", c.reason
    containment = _contained(p.rows, g.rows, config)
    if containment is not None:
        return "partial", containment
    return "wrong", c.reason


def _status_text(e: Execution) -> str:
    return f"{'timed out' if e.status == 'timeout' else 'failed'}: {e.error or e.status}"


def _execution_value(status: Status, config: RewardConfig) -> float | None:
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

    Multisets of canonical rows (:func:`rose_sql.compare.canon`); the prediction's columns may be
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
    chosen: list[int] = []

    def walk(i: int) -> Iterator[tuple[int, ...]]:
        if i == width:
            yield tuple(chosen)
            return
        for j in cands[i]:
            if j not in chosen:
                chosen.append(j)
                yield from walk(i + 1)
                chosen.pop()

    identity = tuple(range(width))
    for perm in islice(walk(0), _MAX_ALIGNMENTS):
        if perm != identity:
            yield perm


# --------------------------------------------------------------------------- syntax reward: trees

_Tree = tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]
"""A tree in postorder: labels, leftmost-leaf index of each node, keyroots."""
N = TypeVar("N")

_SKIP_ARGS = {"alias", "comments"}
_CLAUSE_OF = {
    "distinct": "select",
    "expressions": "select",
    "from": "from",
    "from_": "from",
    "joins": "from",
    "laterals": "from",
    "where": "where",
    "group": "group",
    "having": "having",
    "order": "order",
    "limit": "limit",
    "offset": "limit",
    "with": "with",
    "with_": "with",
}
"""Which clause each argument of the outermost SELECT belongs to (others: ``other``)."""
_AROUND = {"order": "order", "limit": "limit", "offset": "limit", "with": "with", "with_": "with"}
"""The same for the nodes above it (UNION ...); their other arguments form ``compound``."""
_WRAPPERS = (exp.Union, exp.Intersect, exp.Except, exp.Subquery)


def _unwrap(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Alias) and isinstance(node.this, exp.Expression):
        node = node.this
    return node


def _describe(node: exp.Expression) -> tuple[str, list[tuple[str, exp.Expression]]]:
    """A node's label and its (argument, child) pairs.

    Names are lower-cased; column qualifiers, table aliases and select aliases are dropped (they
    do not change what a query means); boolean flags and other plain values join the label.
    """
    node = _unwrap(node)
    if isinstance(node, exp.Column):
        return "col:" + node.name.lower(), []
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
        return "table:" + node.name.lower(), []
    if isinstance(node, exp.Identifier):
        return "id:" + node.name.lower(), []
    if isinstance(node, exp.Literal):
        return ("str:" + node.name) if node.is_string else ("num:" + _number(node.name)), []
    label = [type(node).__name__]
    children: list[tuple[str, exp.Expression]] = []
    for key in type(node).arg_types:
        value = node.args.get(key)
        if value is None or value is False or key in _SKIP_ARGS:
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, exp.TableAlias):
                continue
            if isinstance(v, exp.Expression):
                children.append((key, v))
            elif v is True:
                label.append(key)
            else:
                label.append(f"{key}={v}")
    return ":".join(label), children


def _number(text: str) -> str:
    try:
        return repr(canon(float(text)))
    except ValueError:
        return text


def _sql_node(node: exp.Expression) -> tuple[str, list[exp.Expression]]:
    label, children = _describe(node)
    return label, [c for _, c in children]


def build_tree(label: str, children: Sequence[N], describe: Callable[[N], tuple[str, Sequence[N]]]) -> _Tree:
    """A tree in postorder with leftmost leaves and keyroots, in one pass without recursion.

    The root is ``label`` over ``children``; ``describe`` gives any other node's label and children.
    """
    labels: list[str] = []
    leftmost: list[int] = []
    # frames: [label, children, next child, leftmost leaf of the first finished child]
    stack: list[list[Any]] = [[label, children, 0, -1]]
    while stack:
        frame = stack[-1]
        kids = frame[1]
        if frame[2] < len(kids):
            child_label, grandchildren = describe(kids[frame[2]])
            frame[2] += 1
            stack.append([child_label, grandchildren, 0, -1])
            continue
        stack.pop()
        i = len(labels)
        labels.append(frame[0])
        leftmost.append(frame[3] if frame[3] >= 0 else i)
        if stack and stack[-1][3] < 0:
            stack[-1][3] = leftmost[i]
    last: dict[int, int] = {}
    for i, lm in enumerate(leftmost):
        last[lm] = i
    return tuple(labels), tuple(leftmost), tuple(sorted(last.values()))


def tree_edit_distance(a: _Tree, b: _Tree) -> int:
    """Zhang–Shasha ordered tree edit distance with unit costs (insert, delete, relabel)."""
    la, ma, ka = a
    lb, mb, kb = b
    td = [[0] * len(lb) for _ in la]
    for i in ka:
        for j in kb:
            _treedist(i, j, la, ma, lb, mb, td)
    return td[-1][-1]


def _treedist(
    i: int, j: int, la: Sequence[str], ma: Sequence[int], lb: Sequence[str], mb: Sequence[int], td: list[list[int]]
) -> None:
    """Forest distances for keyroots ``i`` and ``j``; fills ``td`` for the subtree pairs on their paths."""
    li, lj = ma[i], mb[j]
    if li == i or lj == j:  # one side is a single node: map it onto an equal label if there is one
        _leaf_dist(i, j, la, ma, lb, mb, td) if li == i else _leaf_dist_rev(i, j, la, ma, lb, mb, td)
        return
    rows, cols = i - li + 2, j - lj + 2
    fd = [list(range(cols))] + [[x] + [0] * (cols - 1) for x in range(1, rows)]
    for x in range(1, rows):
        ii = li + x - 1
        mi, lab, prev, cur, tdi = ma[ii], la[ii], fd[x - 1], fd[x], td[ii]
        base = fd[mi - li]
        whole_i = mi == li
        for y in range(1, cols):
            jj = lj + y - 1
            mj = mb[jj]
            best = prev[y] + 1
            if cur[y - 1] + 1 < best:
                best = cur[y - 1] + 1
            if whole_i and mj == lj:
                rel = prev[y - 1] + (lab != lb[jj])
                if rel < best:
                    best = rel
                tdi[jj] = best
            else:
                sub = base[mj - lj] + tdi[jj]
                if sub < best:
                    best = sub
            cur[y] = best


def _leaf_dist(
    i: int, j: int, la: Sequence[str], ma: Sequence[int], lb: Sequence[str], mb: Sequence[int], td: list[list[int]]
) -> None:
    """Node ``i`` against each subtree on ``j``'s leftmost path: its size, less one if a label equals."""
    lj, lab, found, row = mb[j], la[i], 0, td[i]
    for jj in range(lj, j + 1):
        if lb[jj] == lab:
            found = 1
        if mb[jj] == lj:
            row[jj] = jj - lj + 1 - found


def _leaf_dist_rev(
    i: int, j: int, la: Sequence[str], ma: Sequence[int], lb: Sequence[str], mb: Sequence[int], td: list[list[int]]
) -> None:
    """The same with the single node on the second tree's side."""
    li, lab, found = ma[i], lb[j], 0
    for ii in range(li, i + 1):
        if la[ii] == lab:
            found = 1
        if ma[ii] == li:
            td[ii][j] = ii - li + 1 - found


def _sequence_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance of two short label sequences."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


# --------------------------------------------------------------------------- syntax reward: clauses


@dataclass(frozen=True, slots=True)
class _Part:
    """One clause of a parsed query as a tree under a synthetic root named after the clause."""

    tree: _Tree
    """The tree in postorder."""

    @property
    def size(self) -> int:
        """Nodes, not counting the synthetic root."""
        return len(self.tree[0]) - 1


@dataclass(frozen=True, slots=True)
class ParsedSQL:
    """A query parsed by sqlglot, cut into clauses: the unit of the syntax reward."""

    skeleton: tuple[str, ...]
    """Labels of the nodes from the root down to the outermost (leftmost) SELECT."""
    parts: dict[str, _Part]
    """Every other node, in the clause it belongs to."""
    size: int
    """Nodes in all."""


def parse(sql: str, config: RewardConfig | None = None) -> ParsedSQL | None:
    """The query as clause trees, or None when sqlglot (SQLite dialect) does not read it as one query."""
    cfg = config or RewardConfig()
    if len(sql) > cfg.max_sql_chars:
        return None
    root = _sqlglot_parse(sql)
    if not isinstance(root, exp.Query | exp.Values) or not isinstance(root, exp.Expression):
        return None  # not one SELECT / WITH / VALUES query, the only statements the sandbox runs
    skeleton, clauses = _decompose(root)
    parts: dict[str, _Part] = {}
    for name, roots in clauses.items():
        parts[name] = _Part(build_tree(name, roots, _sql_node))
    return ParsedSQL(tuple(skeleton), parts, len(skeleton) + sum(p.size for p in parts.values()))


_SQLITE = SQLite()
_PARSERS = threading.local()
"""One sqlglot parser per thread (making one costs about as much as parsing a short query)."""


def _sqlglot_parse(sql: str) -> object:
    """sqlglot's tree of a single statement, or None (no statement, several, or a parse error)."""
    parser = getattr(_PARSERS, "parser", None)
    if parser is None:
        parser = _PARSERS.parser = _SQLITE.parser()
    try:
        statements = [s for s in parser.parse(_SQLITE.tokenize(sql), sql) if s is not None]
    except Exception:  # sqlglot raises several error types on untrusted text
        return None
    return statements[0] if len(statements) == 1 else None


def _decompose(root: exp.Expression) -> tuple[list[str], dict[str, list[exp.Expression]]]:
    """Walk down ``.this`` through UNION / INTERSECT / EXCEPT / parentheses to the outermost SELECT;
    every argument met on the way goes to its clause."""
    skeleton: list[str] = []
    clauses: dict[str, list[exp.Expression]] = {}
    node: exp.Expression | None = root
    while node is not None:
        node = _unwrap(node)
        label, children = _describe(node)
        skeleton.append(label)
        is_select = isinstance(node, exp.Select)
        down = node.this if isinstance(node, _WRAPPERS) and isinstance(node.this, exp.Expression) else None
        for key, child in children:
            if child is not down:
                name = _CLAUSE_OF.get(key, "other") if is_select else _AROUND.get(key, "compound")
                clauses.setdefault(name, []).append(child)
        node = None if is_select else down
    return skeleton, clauses


def _part_distance(
    p: _Part | None, g: _Part | None, distance: Callable[[_Tree, _Tree], int], max_nodes: int
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
    distance: Callable[[_Tree, _Tree], int] = tree_edit_distance,
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
    total_d = _sequence_distance(pred.skeleton, gold.skeleton)
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


# --------------------------------------------------------------------------- the scorer

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
R = TypeVar("R")


class _LRU(Generic[K, V]):
    """A small thread-safe LRU map."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get_or(self, key: K, make: Callable[[], V]) -> V:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = make()  # computed outside the lock; a race computes twice, harmlessly
        with self._lock:
            self._data[key] = value
            while len(self._data) > self._size:
                self._data.popitem(last=False)
        return value


_Key = tuple[str | None, str, Path]
"""What a completion's outcome depends on: (extracted SQL, gold SQL, database)."""


class RewardScorer:
    """Scores completions against gold queries: concurrently, with every execution cached.

    A batch is scored in two phases. First every distinct gold, then every distinct (database, SQL)
    prediction, runs in a pool of ``workers`` threads (SQLite releases the GIL while it works);
    golds run on their own executor (``gold_timeout_s``) and both executors cache across batches.
    Then comparisons and syntax scores are computed in the calling thread: keeping the Python-heavy
    work off the query threads avoids the GIL convoy that slows mixed thread pools down. With
    ``processes`` > 0 the distinct completions of a batch are sharded by (gold, database) over that
    many worker processes, each running this same two-phase scorer, so all cores do Python work too.
    Thread-safe. Use as a context manager or call :meth:`close`.
    """

    def __init__(self, config: RewardConfig | None = None) -> None:
        self.config = cfg = config or RewardConfig()
        self._pred = Executor(self._executor_config(cfg.timeout_s))
        self._gold = Executor(self._executor_config(cfg.gold_timeout_s))
        self._threads = ThreadPoolExecutor(cfg.workers, thread_name_prefix="rose-reward")
        self._trees: _LRU[str, ParsedSQL | None] = _LRU(cfg.memo_size)
        self._distances: _LRU[tuple[_Tree, _Tree], int] = _LRU(cfg.memo_size)
        self._processes: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor_config(self, timeout_s: float) -> Config:
        cfg = self.config
        return Config(
            timeout_s=timeout_s,
            max_rows=cfg.max_rows,
            max_sql_chars=cfg.max_sql_chars,
            float_digits=cfg.float_digits,
            count_past_cap_s=0.0,  # a result past the cap is never equal: its exact size does not matter
            workers=cfg.workers,
            cache_cells=cfg.cache_cells,
        )

    def score(self, item: RewardItem, step: int | None = None) -> Reward:
        """Score one completion (in this process)."""
        key = (extract_sql(item.completion, item.prompt), item.gold_sql, item.db)
        return self._finish(self._score_keys([key])[0], step)

    def score_batch(self, items: Sequence[RewardItem], step: int | None = None) -> list[Reward]:
        """Score many completions concurrently; identical (SQL, gold, database) triples are scored once."""
        keys = [(extract_sql(it.completion, it.prompt), it.gold_sql, it.db) for it in items]
        unique = list(dict.fromkeys(keys))
        many = self.config.processes > 0 and len(unique) >= 2 * self.config.processes
        found = dict(zip(unique, self._in_processes(unique) if many else self._score_keys(unique), strict=True))
        return [self._finish(found[k], step) for k in keys]

    def close(self) -> None:
        """Stop the threads and worker processes and close every connection."""
        with self._lock:
            procs, self._processes = self._processes, None
        if procs is not None:
            procs.shutdown(wait=True, cancel_futures=True)
        self._threads.shutdown(wait=True)
        self._pred.close()
        self._gold.close()

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _score_keys(self, keys: Sequence[_Key]) -> list[_Outcome]:
        """The outcomes of distinct keys, scored in this process (the two phases)."""
        golds = list(dict.fromkeys((db, gold_sql) for _, gold_sql, db in keys))
        gold_runs = dict(zip(golds, self._map(self._run_gold, golds), strict=True))
        wanted = []
        for sql, gold_sql, db in keys:
            gold = gold_runs[db, gold_sql]
            if sql is not None and gold is not None and gold.ok:
                wanted.append((db, sql))
        wanted = list(dict.fromkeys(wanted))
        pred_runs = dict(zip(wanted, self._map(self._run_pred, wanted), strict=True))
        return [self._outcome(k, gold_runs[k[2], k[1]], pred_runs.get((k[2], k[0] or ""))) for k in keys]

    def _map(self, fn: Callable[[tuple[Path, str]], R], keys: list[tuple[Path, str]]) -> list[R]:
        """``fn`` over ``keys`` on the query threads, a few chunks per thread (fewer hand-offs)."""
        if len(keys) <= 1:
            return [fn(k) for k in keys]
        size = -(-len(keys) // (4 * self.config.workers))
        chunks = [keys[i : i + size] for i in range(0, len(keys), size)]
        return [r for done in self._threads.map(lambda chunk: [fn(k) for k in chunk], chunks) for r in done]

    def _in_processes(self, keys: list[_Key]) -> list[_Outcome]:
        n = self.config.processes
        shards: list[list[_Key]] = [[] for _ in range(n)]
        where = []
        for key in keys:
            shard = hash((key[1], key[2])) % n  # one question's golds always meet the same cache
            where.append((shard, len(shards[shard])))
            shards[shard].append(key)
        try:
            pool = self._process_pool()
            futures = [pool.submit(_worker_outcomes, shard) if shard else None for shard in shards]
            results = [f.result() if f is not None else [] for f in futures]
        except BrokenProcessPool:  # a worker died (out of memory, killed): start afresh next time
            with self._lock:
                self._processes = None
            return self._score_keys(keys)
        return [results[s][i] for s, i in where]

    def _process_pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._processes is None:
                self._processes = ProcessPoolExecutor(
                    self.config.processes,
                    mp_context=_worker_context(),
                    initializer=_start_worker,
                    initargs=(replace(self.config, processes=0),),
                )
            return self._processes

    def _run_gold(self, key: tuple[Path, str]) -> Execution | None:
        """The gold's execution, or None when the database file does not exist."""
        db, gold_sql = key
        return self._gold.run(db, gold_sql, role="gold") if db.is_file() else None

    def _run_pred(self, key: tuple[Path, str]) -> Execution:
        return self._pred.run(key[0], key[1], role="pred")

    def _outcome(self, key: _Key, gold: Execution | None, pred: Execution | None) -> _Outcome:
        sql, gold_sql, db = key
        if gold is None:
            return _Outcome("invalid", f"database not found: {db}", sql, _UNPARSED)
        if not gold.ok:
            return _Outcome("gold_error", f"the gold query {_status_text(gold)}", sql, _UNPARSED)
        if sql is None or pred is None:
            return _Outcome("error", "no SQL found in the completion", None, _UNPARSED)
        status, detail = execution_outcome(pred, gold, gold_sql, self.config)
        return _Outcome(status, detail, sql, self._syntax(sql, gold_sql) if self.config.syntax else _UNPARSED)

    def _syntax(self, sql: str, gold_sql: str) -> SyntaxScore:
        pred = self._trees.get_or(sql, lambda: parse(sql, self.config))
        gold = self._trees.get_or(gold_sql, lambda: parse(gold_sql, self.config))
        return syntax_score(pred, gold, self.config, distance=self._tree_distance)

    def _tree_distance(self, a: _Tree, b: _Tree) -> int:
        return self._distances.get_or((a, b), lambda: tree_edit_distance(a, b))

    def _finish(self, outcome: _Outcome, step: int | None) -> Reward:
        cfg = self.config
        execution = _execution_value(outcome.status, cfg)
        total, clause_part = combine(outcome.structure, execution, cfg, step)
        alpha, beta = weights(cfg, step)
        syntax = outcome.structure.value(cfg.clause_mix)
        o = outcome
        return Reward(total, execution, syntax, clause_part, o.status, o.detail, alpha, beta, o.sql, o.structure)


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What a completion's score is made of before the step's weights are applied."""

    status: Status
    detail: str
    sql: str | None
    structure: SyntaxScore


_UNPARSED = SyntaxScore(False, 0.0, 0.0)
_WORKER: RewardScorer | None = None
"""The scorer of a worker process (set by its initializer; the parent never has one)."""


def _worker_context() -> multiprocessing.context.BaseContext:
    """forkserver where there is one: workers fork from a clean process that imported this module once
    (forking the caller, which may hold threads or CUDA, is unsafe); spawn elsewhere."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def _start_worker(config: RewardConfig) -> None:
    global _WORKER
    _WORKER = RewardScorer(config)


def _worker_outcomes(keys: list[_Key]) -> list[_Outcome]:
    assert _WORKER is not None, "not a reward worker process"
    return _WORKER._score_keys(keys)


# --------------------------------------------------------------------------- labels and adapters


class LabelError(ValueError):
    """A label or column that does not say which gold SQL and database an item has."""


@dataclass(frozen=True, slots=True)
class Gold:
    """Where a completion is checked: the gold SQL and the database file."""

    sql: str
    """The reference SQL."""
    db: Path
    """The SQLite file."""


_DB_ID = re.compile(r"^[\w.-]+$")


def parse_label(label: Any, db_root: Path | str | None = None, *, confine: bool = False) -> Gold:
    """Read a label: a mapping or JSON object ``{"gold_sql", "db_id" | "db_path"}``, or ``SQL<TAB>db_id``.

    The tab form takes either order (Spider's ``dev_gold.sql`` lines are ``SQL<TAB>db_id``): the
    part that is a bare name is the db_id. ``db_id`` resolves to ``<db_root>/<db_id>/<db_id>.sqlite``;
    a relative ``db_path`` to ``<db_root>/<db_path>``. With ``confine``, the file must lie under
    ``db_root`` (the server's rule: clients cannot name arbitrary files). Raises :class:`LabelError`.
    """
    if isinstance(label, str) and label.lstrip().startswith("{"):
        try:
            label = json.loads(label)
        except json.JSONDecodeError as e:
            raise LabelError(f"label is not valid JSON: {e}") from None
    if isinstance(label, Mapping):
        sql = label.get("gold_sql", label.get("sql"))
        db_id, db_path = label.get("db_id"), label.get("db_path")
    elif isinstance(label, str) and "\t" in label:
        sql, db_id = _split_tab(label.strip())
        db_path = None
    else:
        raise LabelError('label must be {"gold_sql": ..., "db_id": ...} (JSON) or "SQL<TAB>db_id"')
    if not isinstance(sql, str) or not sql.strip():
        raise LabelError("label has no gold_sql")
    return Gold(sql, _resolve_db(db_id, db_path, db_root, confine=confine))


def _split_tab(label: str) -> tuple[str, str]:
    head, _, tail = label.rpartition("\t")
    if _DB_ID.match(tail.strip()):
        return head, tail.strip()
    head, _, tail = label.partition("\t")
    if _DB_ID.match(head.strip()):
        return tail, head.strip()
    raise LabelError("a tab-separated label needs a bare db_id on one side of the tab")


def _resolve_db(db_id: Any, db_path: Any, db_root: Path | str | None, *, confine: bool = False) -> Path:
    """The database file named by ``db_path`` or by ``db_id`` under ``db_root``."""
    root = Path(db_root) if db_root is not None else None
    if isinstance(db_path, str | Path) and str(db_path):
        path = Path(db_path) if root is None or Path(db_path).is_absolute() else root / db_path
    elif isinstance(db_id, str) and _DB_ID.match(db_id) and db_id not in (".", ".."):
        if root is None:
            raise LabelError(f"db_id {db_id!r} needs a db_root (the folder holding <db_id>/<db_id>.sqlite)")
        path = root / db_id / f"{db_id}.sqlite"
    else:
        raise LabelError("label names no database: give db_id (a bare name) or db_path")
    if confine and (root is None or not path.resolve().is_relative_to(root.resolve())):
        raise LabelError("db_path must lie under the server's --db-root")
    return path


def invalid(detail: str, config: RewardConfig, step: int | None = None) -> Reward:
    """The reward of an item that could not be scored at all (bad label, missing column)."""
    alpha, beta = weights(config, step)
    return Reward(None, None, 0.0, 0.0, "invalid", detail, alpha, beta, None, SyntaxScore(False, 0.0, 0.0))


@lru_cache(maxsize=8)
def _shared_scorer(config: RewardConfig) -> RewardScorer:
    """One long-lived scorer per config for function-style adapters (verl, TRL): its caches persist."""
    return RewardScorer(config)


def _config_from(kwargs: Mapping[str, Any], config: RewardConfig | None = None) -> RewardConfig:
    return config if config is not None else RewardConfig.from_mapping(kwargs)


def _verl_dict(r: Reward, config: RewardConfig) -> dict[str, Any]:
    """verl's result: ``score`` plus the same keys for every item (verl stacks them per key)."""
    return {
        "score": r.total if r.total is not None else config.unscored,
        "execution": r.execution if r.execution is not None else config.unscored,
        "syntax": r.syntax,
        "clause": r.clause_part,
        "scored": r.total is not None,
        "status": r.status,
    }


def _verl_items(
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None],
    db_root: str | None,
) -> tuple[list[RewardItem | str], int | None]:
    out: list[RewardItem | str] = []
    step: int | None = None
    for solution, truth, extra in zip(solution_strs, ground_truths, extra_infos, strict=True):
        info = extra or {}
        step = info.get("step", info.get("global_step", step))
        try:
            if isinstance(truth, str) and not truth.lstrip().startswith("{") and "\t" not in truth:
                gold = Gold(truth, _resolve_db(info.get("db_id"), info.get("db_path"), info.get("db_root", db_root)))
            else:
                gold = parse_label(truth, info.get("db_root", db_root))
            out.append(RewardItem(solution, gold.sql, gold.db))
        except LabelError as e:
            out.append(str(e))
    return out, step


def _score_mixed(scorer: RewardScorer, items: Sequence[RewardItem | str], step: int | None) -> list[Reward]:
    good = [it for it in items if isinstance(it, RewardItem)]
    scored = iter(scorer.score_batch(good, step))
    return [next(scored) if isinstance(it, RewardItem) else invalid(it, scorer.config, step) for it in items]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    *,
    db_root: str | None = None,
    config: RewardConfig | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """verl's ``compute_score``: one response against its gold, as ``{"score": ..., ...}``.

    ``ground_truth`` is the gold SQL with ``extra_info["db_id"]`` (or ``db_path``), or a label
    (:func:`parse_label`). ``db_root`` comes from verl's ``custom_reward_function.reward_kwargs``,
    ``extra_info["db_root"]`` or ``$ROSE_DB_ROOT``; other reward_kwargs set :class:`RewardConfig`
    fields. ``extra_info["step"]`` (if present) drives the schedule. Unscored items get
    ``config.unscored`` with ``scored: False``.
    """
    return compute_score_batch(
        [data_source], [solution_str], [ground_truth], [extra_info], db_root=db_root, config=config, **kwargs
    )[0]


def compute_score_batch(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
    *,
    db_root: str | None = None,
    config: RewardConfig | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """verl's batch form (``reward_manager=batch``): the same for a whole batch, scored concurrently."""
    cfg = _config_from(kwargs, config)
    root = db_root or os.environ.get("ROSE_DB_ROOT")
    infos = [None] * len(solution_strs) if extra_infos is None else extra_infos  # verl passes numpy arrays
    items, step = _verl_items(solution_strs, ground_truths, infos, root)
    return [_verl_dict(r, cfg) for r in _score_mixed(_shared_scorer(cfg), items, step)]


RewardFn = Callable[..., list[float | None]]
_COMPONENTS = ("total", "execution", "syntax")


def trl_reward(
    db_root: str | Path | None = None, config: RewardConfig | None = None, component: str = "total"
) -> RewardFn:
    """A TRL reward function ``f(prompts, completions, **columns) -> list[float | None]``.

    Columns (dataset fields TRL passes by name): ``gold_sql`` plus ``db_id`` (under ``db_root``) or
    ``db_path``; or one ``label`` column in :func:`parse_label`'s forms. Completions may be strings
    or lists of chat messages. The schedule follows ``trainer_state.global_step`` when TRL passes
    it. ``component`` picks ``total``, ``execution`` or ``syntax``; the function's ``__name__`` is
    ``rose_sql_<component>`` (TRL logs each reward under it). Unscored items are None.
    """
    if component not in _COMPONENTS:
        raise ValueError(f"component must be one of {_COMPONENTS}")
    cfg = config or RewardConfig()
    root = db_root or os.environ.get("ROSE_DB_ROOT")

    def reward(
        prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **columns: Any
    ) -> list[float | None]:
        state = columns.get("trainer_state")
        step = getattr(state, "global_step", None)
        items = [_trl_item(c, i, columns, root) for i, c in enumerate(completions)]
        rewards = _score_mixed(_shared_scorer(cfg), items, step)
        return [_pick(r, component) for r in rewards]

    reward.__name__ = reward.__qualname__ = f"rose_sql_{component}"
    return reward


def _trl_item(completion: Any, i: int, columns: Mapping[str, Any], root: str | Path | None) -> RewardItem | str:
    def col(name: str) -> Any:
        values = columns.get(name)
        return values[i] if isinstance(values, Sequence) and not isinstance(values, str) and i < len(values) else None

    try:
        if col("label") is not None:
            gold = parse_label(col("label"), root)
        else:
            sql = col("gold_sql")
            if not isinstance(sql, str) or not sql.strip():
                raise LabelError("no gold_sql column (or label column) for this completion")
            gold = Gold(sql, _resolve_db(col("db_id"), col("db_path"), root))
    except LabelError as e:
        return str(e)
    return RewardItem(completion, gold.sql, gold.db)


def _pick(r: Reward, component: str) -> float | None:
    if component == "execution":
        return r.execution
    if component == "syntax":
        return r.syntax if r.total is not None else None
    return r.total
