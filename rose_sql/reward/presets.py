"""Named rewards that compute what published text-to-SQL RL recipes compute, on our sandbox.

Each preset reads a completion as its recipe does (:func:`read`), runs the queries it names through the
same worker processes, sandbox and caches as the default reward, and turns the executions into the
recipe's number (:func:`value`). Every formula, and where a preset departs from its recipe (a gold that
fails is unscored, never a number; a query's time limit is our step budget), is in ``docs/rewards.md``:

- ``sql-r1``: SQL-R1's format (+1 / -1), execution (+2 / -2), result (+3 / -3) and length terms;
  the comparison is the test-suite's (column permutations, bag of rows, order when the gold says
  ``order by``) after dropping every ``DISTINCT`` from both queries;
- ``arctic``: Arctic-Text2SQL-R1's 1 / 0.1 / 0 (1 for the gold's set of rows, 0.1 for another result
  when both the reasoning and the answer tags are there, 0 otherwise), as Think2SQL's implementation,
  the one published, computes it;
- ``skyrl-sql``: SkyRL-SQL's -1 (format) / 0 / 1 (the gold's set of rows), the SQL inside ``<solution>``;
- ``verl-text2sql``: the -1 / 0 / 1 of verl's text-to-SQL recipe, the SQL inside ``<answer>``;
- ``think2sql``: Think2SQL's dense execution reward, the mean of cell precision, cell recall and tuple
  cardinality of the result rows (QATCH's ``cp_cr_tc``), each rounded to three decimals.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain

import sqlparse

from rose_sql.config import Preset
from rose_sql.results import Execution, Row
from rose_sql.reward.execution import RewardStatus, gold_outcome, permutations

SQL_R1_LIMIT_LENGTH = 2048
"""SQL-R1's length term: the reasoning and answer characters counted up to this."""
_MAX_PERMUTATIONS = 100_000
"""Column permutations the test-suite comparison tries at most (each one a pass over the rows)."""


@dataclass(frozen=True, slots=True)
class Read:
    """What a preset reads from a completion's text."""

    sql: str | None
    """The query to run exactly as the recipe would run it; None when there is none to run."""
    formatted: bool
    """Whether the completion passes the recipe's format check."""
    length: float = 0.0
    """SQL-R1's length term, earned only on a match."""


# --------------------------------------------------------------------------- reading completions

_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_SQL_FENCE = re.compile(r"```sql(.*?)```", re.S)
_WHITESPACE = re.compile(r"\s+")
_CUR_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.I)


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    found = None
    for found in pattern.finditer(text):  # noqa: B007 (the last one is kept)
        pass
    return found


def _read_sql_r1(text: str) -> Read:
    """SQL-R1: the response after the assistant's header (the whole text when it has none); exactly one of
    each ``<think>``, ``</think>``, ``<answer>``, ``</answer>`` in that order, and a non-empty last
    ```` ```sql ```` block in the last answer; the SQL with its whitespace runs made one space."""
    for header in ("Assistant:", "<|im_start|>assistant"):
        if header in text:
            text = text.split(header, 1)[1]
            break
    tags = ("<think>", "</think>", "<answer>", "</answer>")
    positions = [text.find(t) for t in tags]
    if any(text.count(t) != 1 for t in tags) or positions != sorted(positions):
        return Read(None, False)
    answer, think = _last(_ANSWER, text), _last(_THINK, text)
    assert answer is not None and think is not None  # each tag once, in order
    answer_text, think_text = answer.group(1).strip(), think.group(1).strip()
    fence = _last(_SQL_FENCE, answer_text)
    sql = fence.group(1).strip() if fence else ""
    if not sql:
        return Read(None, False)
    sql = _WHITESPACE.sub(" ", sql)
    seen = len(think_text) + len(answer_text)
    share = len(sql) / len(answer_text)
    length = share + (seen / SQL_R1_LIMIT_LENGTH * 0.5 if seen <= SQL_R1_LIMIT_LENGTH else 0.5)
    return Read(sql_r1_query(sql), True, length)


def _sql_r1_prepared(sql: str) -> str:
    """``> =`` (and ``< =``, ``! =``) joined, then every ``DISTINCT`` token of the first statement dropped
    (sqlparse's tokens; what follows a first statement is dropped with it)."""
    sql = sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")
    if not sql.strip():
        return sql
    try:
        tokens = sqlparse.parse(sql)[0].flatten()
    except Exception:  # sqlparse gives up on some deep nestings: the query as it is (SQL-R1 would fail)
        return sql
    return "".join(t.value for t in tokens if t.value.lower() != "distinct")


def sql_r1_query(sql: str) -> str:
    """What SQL-R1 runs for a predicted query: :func:`_sql_r1_prepared`, ``YEAR(CURDATE())`` read as 2020."""
    return _CUR_YEAR.sub("2020", _sql_r1_prepared(sql))


@lru_cache(maxsize=4096)
def sql_r1_gold(gold_sql: str) -> tuple[str, bool]:
    """The gold as SQL-R1 runs it (its whitespace runs made one space first), and whether rows are compared
    in order (``order by`` in it)."""
    prepared = _sql_r1_prepared(_WHITESPACE.sub(" ", gold_sql))
    return _CUR_YEAR.sub("2020", prepared), "order by" in prepared.lower()


_REASONING = re.compile(r"<reasoning>\n(.*?)\n</reasoning>", re.S)
_ANSWER_LINES = re.compile(r"<answer>\n(.*?)\n</answer>", re.S)


def think2sql_sql(text: str) -> str:
    """Think2SQL's extraction (``extract_sql_or_same``): the last ``<answer>`` block, in it the last
    ```` ```sql ```` block, in that the last ```` ``` ```` block, each stripped (the text as it is where
    one is missing, any case of the tags), then backticks stripped from both ends."""
    for pattern in (r"<answer>(.*?)</answer>", r"```sql(.*?)```", r"```(.*?)```"):
        found = re.findall(pattern, text, re.S | re.I)
        if found:
            text = found[-1].strip()
    return text.strip().strip("`").strip()


def _read_arctic(text: str) -> Read:
    formatted = _REASONING.search(text) is not None and _ANSWER_LINES.search(text) is not None
    return Read(think2sql_sql(text), formatted)


_SOLUTION_FORBIDDEN = re.compile(r"</?(think|sql|observation)\b", re.I)
_OBSERVATION_END = re.compile(r"</observation>", re.I)


def _read_skyrl(text: str) -> Read:
    """SkyRL-SQL: one ``<solution>``, one ``</solution>`` after it, no think/sql/observation tag inside, a
    ``<think>...</think>`` somewhere, and a ``<think>`` after every ``</observation>`` before the solution."""
    if text.count("<solution>") != 1:
        return Read(None, False)
    before, tail = text.split("<solution>", 1)
    if tail.count("</solution>") != 1:
        return Read(None, False)
    solution = tail.split("</solution>", 1)[0]
    if _SOLUTION_FORBIDDEN.search(solution) or not _THINK.search(text):
        return Read(None, False)
    for m in _OBSERVATION_END.finditer(before):
        if not before[m.end() :].lstrip().lower().startswith("<think>"):
            return Read(None, False)
    return Read(solution.strip(), True)


_ANSWER_FORBIDDEN = re.compile(r"</?(think|tool_call|tool_response)\b", re.I)


def _read_verl(text: str) -> Read:
    """verl's text-to-SQL recipe: one ``<answer>`` and one ``</answer>`` (the first before the second), no
    think/tool tag inside; the SQL is the answer's text."""
    if text.count("<answer>") != 1 or text.count("</answer>") != 1:
        return Read(None, False)
    tail = text.split("<answer>", 1)[1]
    if "</answer>" not in tail:
        return Read(None, False)
    answer = tail.split("</answer>", 1)[0]
    if _ANSWER_FORBIDDEN.search(answer):
        return Read(None, False)
    return Read(answer.strip(), True)


def read(preset: Preset, text: str) -> Read:
    """What ``preset`` reads from a completion's text (``rose`` is not a preset: see :func:`extract_sql`)."""
    if preset == "sql-r1":
        return _read_sql_r1(text)
    if preset == "arctic":
        return _read_arctic(text)
    if preset == "skyrl-sql":
        return _read_skyrl(text)
    if preset == "verl-text2sql":
        return _read_verl(text)
    if preset == "think2sql":
        return Read(think2sql_sql(text), True)
    raise ValueError(f"{preset!r} is not a reward preset")


def gold_query(preset: Preset, gold_sql: str) -> str:
    """The gold as ``preset`` runs it."""
    return sql_r1_gold(gold_sql)[0] if preset == "sql-r1" else gold_sql


# --------------------------------------------------------------------------- values


def value(
    preset: Preset, r: Read, pred: Execution | None, gold: Execution, gold_sql: str
) -> tuple[RewardStatus, str, float | None]:
    """``(status, detail, reward)`` of a completion read as ``r`` whose query ran as ``pred`` (None: nothing
    ran) against the gold's run. A gold that did not run to a full result leaves the reward None."""
    failed = gold_outcome(gold)
    if failed is not None:
        return failed[0], failed[1], None
    assert gold.result is not None
    if gold.result.truncated:
        return "undecidable", "the gold's result was cut at the row cap", None
    if not r.formatted and preset in ("sql-r1", "skyrl-sql", "verl-text2sql"):
        return "error", f"the completion fails {preset}'s format check", -1.0
    if pred is not None and pred.status in ("guard", "unreadable"):
        status: RewardStatus = "wall_guard" if pred.status == "guard" else "invalid"
        return status, pred.error or pred.status, None
    ran = pred is not None and pred.ok and pred.result is not None
    if not ran:
        status = "timeout" if pred is not None and pred.status == "timeout" else "error"
        why = "no SQL found in the completion" if pred is None else (pred.error or pred.status)
        return status, why, {"sql-r1": -1.0}.get(preset, 0.0)  # SQL-R1: format +1, execution -2
    assert pred is not None and pred.result is not None
    p, g = pred.result, gold.result
    if preset == "think2sql":
        if p.truncated:
            return "wrong", "the prediction returns more rows than the row cap", 0.0
        v = qatch_cp_cr_tc(p.rows, g.rows)
        return ("match" if v == 1.0 else "partial" if v > 0 else "wrong"), "cp_cr_tc", v
    if p.truncated:
        equal = False
    elif preset == "sql-r1":
        equal = suite_equal(g.rows, p.rows, ordered=sql_r1_gold(gold_sql)[1])
    else:
        equal = frozenset(p.rows) == frozenset(g.rows)
    if preset == "sql-r1":
        return ("match", "same", 6.0 + r.length) if equal else ("wrong", "other rows", 0.0)
    if equal:
        return "match", "same set of rows", 1.0
    return "wrong", "other rows", 0.1 if preset == "arctic" and r.formatted else 0.0


def qatch_cp_cr_tc(pred: Sequence[Row], gold: Sequence[Row]) -> float:
    """QATCH's cell precision, cell recall and tuple cardinality, each rounded to 3 decimals, and their
    mean rounded to 3 (1 when both results are empty, 0 when only one is)."""
    if not pred and not gold:
        return 1.0
    if not pred or not gold:
        return 0.0
    p, g = set(chain.from_iterable(pred)), set(chain.from_iterable(gold))
    both = len(p & g)
    precision = round(both / len(p), 3) if p else 0.0
    recall = round(both / len(g), 3) if g else 0.0
    cardinality = round(min(len(pred), len(gold)) / max(len(pred), len(gold)), 3)
    return round((precision + recall + cardinality) / 3, 3)


def _unordered(row: Row) -> Row:
    return tuple(sorted(row, key=lambda x: str(x) + str(type(x))))


def suite_equal(gold: Sequence[Row], pred: Sequence[Row], *, ordered: bool) -> bool:
    """The test-suite's denotation equality: the same rows (in order when ``ordered``, else as bags) for
    some order of the prediction's columns."""
    if not gold and not pred:
        return True
    if len(gold) != len(pred) or len(gold[0]) != len(pred[0]):
        return False
    g_rows, p_rows = [_unordered(r) for r in gold], [_unordered(r) for r in pred]
    if (g_rows != p_rows) if ordered else (set(g_rows) != set(p_rows)):
        return False
    width = len(gold[0])
    gold_columns = [{r[i] for r in gold} for i in range(width)]
    pred_columns = [{r[j] for r in pred} for j in range(width)]
    cands = [[j for j in range(width) if pred_columns[j] <= gold_columns[i]] for i in range(width)]
    gold_bag = None if ordered else Counter(gold)
    for k, perm in enumerate(permutations(cands)):
        if k >= _MAX_PERMUTATIONS:
            return False
        moved = list(pred) if perm == tuple(range(width)) else [tuple(r[j] for j in perm) for r in pred]
        if ordered and moved == list(gold):
            return True
        if not ordered and set(moved) == set(gold) and Counter(moved) == gold_bag:
            return True
    return False
