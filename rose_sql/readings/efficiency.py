"""BIRD's efficiency readings by their published formulas: VES (BIRD dev) and R-VES (BIRD mini-dev).

Both weigh a correct prediction (BIRD EX 1) by how fast it runs against the gold; an incorrect one
counts 0, and every item is in the denominator:

- **VES** (BIRD dev's ``evaluation_ves.py``): ``100 * mean(sqrt(ratio_i))``, ``ratio_i`` = gold time /
  predicted time, 0 for an incorrect item;
- **R-VES** (mini-dev's ``evaluation/evaluation_ves.py``): ``100 * mean(sqrt(reward_i))``, the ratio put
  in reward buckets (:func:`reward`): 1.25 from 2, 1 from 1, 0.75 from 0.5, 0.5 from 0.25, else 0.25;
  0 for an incorrect item.

The published ratio is a mean of wall-time ratios over 100 iterations with the values beyond 3 sigma
removed (:func:`clean_abnormal`): it depends on the machine and its load (and a server's), so it decides
nothing here. The two scripts time different things: mini-dev's runs each statement, fetches its rows and
closes its connection (``time_ratio``, R-VES), BIRD dev's ``cursor.execute`` alone, the statement run to
its first row, its rows never read (``dev_time_ratio``, VES; SQLite, the only engine BIRD dev's script
reads), each in a pass of its own (:meth:`Executor.time_pass
<rose_sql.engines.execute.Executor.time_pass>`, ``first_row``): reading the rest of a result after the
clock changes what the next execution takes. Off SQLite VES takes mini-dev's ratio. The pass runs on every
engine that times an execution (:attr:`KindInfo.timed <rose_sql.engines.kinds.KindInfo.timed>`), SQLite
and the servers alike, as mini-dev's script times SQLite, PostgreSQL and MySQL.
The deterministic ratio is the SQLite virtual machine's steps (the progress handler called on every
instruction, grain 1, in a pass of its own), gold steps / predicted steps: the same on any machine. It is
defined on SQLite only: elsewhere plan costs depend on sampled statistics.

Both passes run where every statement of an item runs: in the sandbox of the item's worker process, through
:class:`~rose_sql.engines.execute.Executor` (:meth:`~rose_sql.engines.execute.Executor.count_steps`,
:meth:`~rose_sql.engines.execute.Executor.time_pass`), on the sandbox's read-only connections (the
authorizer, ``query_only``, the heap limit), within the step budget (``--max-steps``), the row and byte
caps and the wall clock of one statement (``--timeout``) and under the worker's guard; the timed pass as a
whole within :meth:`Config.time_pass_s <rose_sql.config.Config.time_pass_s>` (by default ``--timeout``
for each iteration, as the published script bounds an item). A pass that does not run to its end gives no
ratio, and the record says why (``steps_reason``, ``time_reason``); the item's other readings stand.

What the sandbox changes in the published timing: each execution opens the sandbox's connection (the
pragmas and the authorizer set, untimed, as the published script opens its own before its clock starts),
and what is timed (running, reading every row, closing) includes the progress handler's call every 1,000
steps. The result is read as the published script's ``fetchall()`` reads it, to its end in the driver,
but in batches, none kept (:meth:`Pooled._drain <rose_sql.engines.base.Pooled._drain>`): the rows were read
and compared before, so the row and byte caps bound what a reading keeps, not what the pass reads, and a
batch is the known result's size plus one (:func:`rose_sql.engines.base.known_batch`), so a result read in
one round trip there is read in one here. On a server (:meth:`Pooled.timed
<rose_sql.engines.base.Pooled.timed>`) the connection is the engine's own, opened untimed with the URL's
role and the session's read-only default and time limit, and the statement is checked (the server's
lexer, the function policy) before the clock starts. The round trips timed are the published script's:
the read-only transaction is opened before the clock on MySQL/MariaDB (with MariaDB's statement limits set
for the session, so the statement is sent as written, on a connection opened with PyMySQL's own TLS
default, as the published script opens its own) and DuckDB; on PostgreSQL ``BEGIN`` goes with the cursor's
declaration (planned as the plain query) in one round trip, as psycopg2 sends ``BEGIN`` before each
statement, and every row comes in the next (libpq's chunked rows); then the connection closed.

A pass that does not run to its end is read as the published script reads it: ``evaluation_ves.py``
gives an item whose pass raised or ran past its bound a ratio of 0 (reward 0, in the denominator). So a
count that a statement's own failure ended (an error, a refusal, the step budget, the memory limit, or a
runaway confirmed by running it again alone with its guard doubled) gives 0, and so does a timed pass
that an execution's failure or a wall clock ended (the published pass's own timeout, as it scores it);
the record says why (``steps_reason``, ``time_reason``), and the item's BIRD EX is unchanged. Only what
is not the statement's, a database that cannot be read (or, for a count, a guard that could not be
confirmed), leaves the ratio out (None, ``no_count``).

A statement whose steps depend on ``random()`` (or ``randomblob()``) would take other steps in each
count, and so give another step ratio in each run: it is counted with both drawn from a fixed seed, the
same in every run (one more call of a function, as SQLite's own, so no other statement's count changes),
and flagged (``steps_random``). The timed pass runs SQLite's own.

A quirk of the published code, kept by :func:`published_ratio`: :func:`clean_abnormal` keeps values
strictly inside mean ± 3 sigma, so 100 identical ratios (sigma 0) keep none, the mean divides by zero,
and the official script scores the item 0. A deterministic ratio is therefore never passed through it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rose_sql.config import EfficiencyBase as Base

if TYPE_CHECKING:
    from rose_sql.engines import Database
    from rose_sql.engines.base import Timed
    from rose_sql.engines.execute import Executor

TIME_ITERATIONS = 100
"""The published script's iterations per item (``evaluation_ves.py``: ``iterate_num=100``)."""
TIME_FIELDS = ("time_ratio", "time_kept", "time_reason", "dev_time_ratio")
"""The wall-time fields of :class:`Efficiency`: machine- and load-dependent, in ``record.EXEMPT``."""
REASONS = ("steps_reason", "time_reason", "steps_random", "dev_time_ratio")
"""The fields of :class:`Efficiency` written only when set (a record without them is as it always was)."""
NOT_THE_STATEMENT = frozenset({"unreadable", "guard"})
"""How a count may end that is not the statement's doing (the database, a guard that could not be
confirmed): no ratio. The timed pass, whose ratio decides nothing, reads a wall clock as the published
script does (a runaway: 0); only a database that cannot be read leaves it out."""


@dataclass(frozen=True, slots=True)
class Efficiency:
    """One item's efficiency ratios (``record.efficiency``), for an item whose BIRD EX is defined.

    Off SQLite the step ratio is None (plan costs there depend on sampled statistics); the wall-time ratio
    is measured on every engine that times an execution (:attr:`KindInfo.timed
    <rose_sql.engines.kinds.KindInfo.timed>`: SQLite, PostgreSQL, MySQL/MariaDB, DuckDB)."""

    steps_ratio: float | None
    """Gold VM steps / predicted VM steps for a correct prediction (BIRD EX 1), 0 for an incorrect one and
    for one whose count a statement's own failure ended (``steps_reason`` says which: an error, the step
    budget, a confirmed runaway); None when not asked, off SQLite, or when the count was stopped by what is
    not the statement's (the database unreadable, an unconfirmed guard). Deterministic: the same on any
    machine and at any load."""
    gold_steps: int | None = None
    """The gold's exact VM steps (counted only for a correct prediction)."""
    pred_steps: int | None = None
    """The prediction's exact VM steps (counted only for a correct prediction)."""
    base: Base = "steps"
    """What was asked (``--efficiency``): ``steps``, ``time`` or ``both``."""
    time_ratio: float | None = None
    """The published ratio: the mean of :data:`TIME_ITERATIONS` wall-time ratios gold / predicted, values
    beyond 3 sigma removed (0 for an incorrect prediction); None when not asked, on an engine that does not
    time an execution, or when the pass was stopped by what is not the statement's (``time_reason`` says
    what). Depends on the machine, the server and their load, on every engine: in ``record.EXEMPT``,
    decides nothing."""
    time_kept: int | None = None
    """Of the iterations, those the 3-sigma rule kept (None where ``time_ratio`` is)."""
    steps_reason: str | None = None
    """Why a count is missing for a correct prediction (its ``steps_ratio`` 0, or None when it was not the
    statement's doing): which query, and what stopped it (an error, the step budget, a confirmed runaway,
    the database)."""
    time_reason: str | None = None
    """Why the timed pass did not run to its end (its ``time_ratio`` 0, as the published script scores it,
    or None when it was not the statement's doing): where it stopped (iteration and query) and what
    stopped it, or the pass's own bound (:meth:`Config.time_pass_s <rose_sql.config.Config.time_pass_s>`)."""
    steps_random: bool | None = None
    """True when the gold or the prediction calls ``random()`` or ``randomblob()``: their steps were counted
    with both drawn from a fixed seed, so the count, and the ratio, is the same in every run (written only
    when set)."""
    dev_time_ratio: float | None = None
    """BIRD dev's published ratio, of a timed pass of its own: BIRD dev's ``evaluation_ves.py`` times
    ``cursor.execute`` alone, the statement run to its first row (its rows never fetched, its connection
    closed after the clock stops), where mini-dev's times the fetch and the close too. 0 for an incorrect
    prediction and for a pass a statement's own outcome stopped (``time_reason`` says where). Measured on
    SQLite, BIRD dev's only engine (written only when set): VES takes it there, and ``time_ratio``
    elsewhere. Wall time: in ``record.EXEMPT``, decides nothing."""


def reward(ratio: float) -> float:
    """mini-dev's reward bucket of a time ratio (gold / predicted; 0 for an incorrect prediction)."""
    if ratio == 0:
        return 0.0
    if ratio >= 2:
        return 1.25
    if ratio >= 1:
        return 1.0
    if ratio >= 0.5:
        return 0.75
    if ratio >= 0.25:
        return 0.5
    return 0.25


def r_ves(ratios: Sequence[float]) -> float | None:
    """R-VES in percent over every item (an incorrect one has ratio 0); None over no item."""
    if not ratios:
        return None
    return 100 * sum(math.sqrt(reward(r)) for r in ratios) / len(ratios)


def ves(ratios: Sequence[float]) -> float | None:
    """BIRD's VES in percent over every item (an incorrect one has ratio 0); None over no item."""
    if not ratios:
        return None
    return 100 * sum(math.sqrt(r) for r in ratios) / len(ratios)


def clean_abnormal(values: Sequence[float]) -> list[float]:
    """The published outlier rule: keep the values strictly inside mean ± 3 population standard deviations."""
    n = len(values)
    if n == 0:
        return []
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    return [v for v in values if mean - 3 * std < v < mean + 3 * std]


def published_ratio(ratios: Sequence[float]) -> float:
    """The published time ratio of one item from its per-iteration ratios: the mean of the values kept by
    :func:`clean_abnormal`; 0 when none is kept (the official script's division by zero scores 0)."""
    kept = clean_abnormal(ratios)
    return sum(kept) / len(kept) if kept else 0.0


def measure(
    executor: Executor, db: Database, gold: str, pred: str | None, correct: bool, base: Base
) -> Efficiency | None:
    """One item's :class:`Efficiency` under ``base`` (None when ``off``), its passes run by ``executor``
    on engines that offer them: the step count where steps are counted (:attr:`KindInfo.python_sqlite3
    <rose_sql.engines.kinds.KindInfo.python_sqlite3>`), the timed pass on every engine that times an
    execution (:attr:`KindInfo.timed <rose_sql.engines.kinds.KindInfo.timed>`); elsewhere that ratio is None."""
    if base == "off":
        return None
    timed = base in ("time", "both") and db.info.timed
    counted = base in ("steps", "both") and db.info.python_sqlite3
    if not timed and not counted:
        return Efficiency(None, base=base)
    if not correct or pred is None:
        zero = 0.0 if timed else None
        return Efficiency(
            0.0 if counted else None,
            base=base,
            time_ratio=zero,
            time_kept=0 if timed else None,
            dev_time_ratio=zero if timed and db.info.python_sqlite3 else None,
        )
    # the passes first (the engine's work), then what they give (no work of its own)
    counted_by = (executor.count_steps(db, gold), executor.count_steps(db, pred)) if counted else None
    timed_by = executor.time_pass(db, (pred, gold), TIME_ITERATIONS) if timed else None
    g = p = None
    steps_reason, counts, random = None, None, None
    if counted_by is not None:
        gc, pc = counted_by
        g, p = gc.steps, pc.steps
        random = True if gc.random or pc.random else None
        failed = [(side, c) for side, c in (("gold", gc), ("prediction", pc)) if c.steps is None]
        steps_reason = "; ".join(f"the {side}: {c.error}" for side, c in failed) or None
        counts = step_ratio(g, p, True)
        if failed and not any(c.status in NOT_THE_STATEMENT for _, c in failed):
            counts = 0.0  # the statement's own failure: the published script's reward 0
    ratio, kept, time_reason, dev = None, None, None, None
    if timed_by is not None:
        ratios, time_reason, ours = pass_ratios(timed_by, TIME_ITERATIONS)
        if ratios is not None:
            ratio, kept = published_ratio(ratios), len(clean_abnormal(ratios))
        elif ours:
            ratio, kept = 0.0, 0
        if db.info.python_sqlite3:  # BIRD dev's timing, in a pass of its own once mini-dev's ran through
            dev = ratio
            if ratios is not None:
                firsts, dev_reason, ours = pass_ratios(
                    executor.time_pass(db, (pred, gold), TIME_ITERATIONS, first_row=True), TIME_ITERATIONS
                )
                dev = published_ratio(firsts) if firsts is not None else 0.0 if ours else None
                if dev_reason is not None:
                    time_reason = f"BIRD dev's timed pass: {dev_reason}"
                if dev is None:  # the database, not the statement: out of both figures, which share their n
                    ratio = kept = None
    return Efficiency(counts, g, p, base, ratio, kept, steps_reason, time_reason, random, dev)


def timed_ratios(
    executor: Executor, db: Database, gold: str, pred: str, iterations: int = TIME_ITERATIONS
) -> tuple[list[float] | None, str | None, bool]:
    """The published script's per-iteration ratios of ``iterations`` timed iterations run by ``executor``
    (:func:`pass_ratios`)."""
    return pass_ratios(executor.time_pass(db, (pred, gold), iterations), iterations)


def pass_ratios(done: Timed, iterations: int) -> tuple[list[float] | None, str | None, bool]:
    """The published script's per-iteration ratios of a timed pass: each iteration runs and fetches the
    prediction, then the gold, each on a connection of its own (opened untimed), and takes gold time /
    predicted time; or, when the pass stopped before its end, None, why (which iteration and query, and
    what stopped it), and whether a statement's own outcome stopped it (its reward is then 0, as published)."""
    if done.error is not None:
        ours = done.status != "unreadable"
        if done.at is None:
            return None, done.error, ours
        iteration, index = done.at
        where = f"iteration {iteration} of {iterations}, the {('prediction', 'gold')[index]}"
        return None, f"{where}: {done.error}", ours
    return [g / p if p > 0 else 0.0 for p, g in done.times], None, False


def step_ratio(gold_steps: int | None, pred_steps: int | None, correct: bool) -> float | None:
    """The deterministic ratio of one item: gold steps / predicted steps for a correct prediction, 0 for an
    incorrect one; None when a count is missing (a query that failed or passed the step bound)."""
    if not correct:
        return 0.0
    if gold_steps is None or pred_steps is None:
        return None
    return gold_steps / max(pred_steps, 1)


def by_difficulty(
    items: Iterable[tuple[str | None, float | None]], formula: Callable[[Sequence[float]], float | None]
) -> dict[str, tuple[float | None, int, int]]:
    """Per difficulty label (and ``all``): ``(value, n, left_out)`` where ``n`` items have a ratio and
    ``left_out`` had none (a count missing); the formula is :func:`r_ves` or :func:`ves`."""
    groups: dict[str, list[float | None]] = {"all": []}
    for difficulty, ratio in items:
        groups["all"].append(ratio)
        if difficulty:
            groups.setdefault(difficulty, []).append(ratio)
    out = {}
    for label, ratios in groups.items():
        known = [r for r in ratios if r is not None]
        out[label] = (formula(known), len(known), len(ratios) - len(known))
    return out
