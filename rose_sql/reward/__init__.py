"""RL rewards from the same sandbox and comparator as ``rose run``: execution- and syntax-aware.

A reward is computed in four steps, each a plain function in its own module (the file list follows
one completion through them):

1. :func:`extract_sql` (``extract``) takes the SQL out of a model completion (a string or a list of
   chat messages): ``<think>`` blocks are dropped, then the last ``<answer>`` / ``<sql>`` /
   ``<solution>`` tag wins, inside it the last fenced code block wins, and comments are stripped.
2. :func:`execution_outcome` (``execution``) compares the prediction's result with the gold's under
   our comparator (:func:`rose_sql.comparison.comparator.compare`): ``match`` (1), ``partial`` (0.5), ``wrong``
   (0), ``error`` (-1: SQLite raised, the sandbox rejected it, or no SQL was found), ``timeout``
   (-0.5: past its step budget, or a runaway: stopped by its wall-clock guard twice, the second time
   alone with the guard doubled). A gold that fails is ``gold_error``, and a query a deadline left unrun
   ``wall_guard``: the reward is ``None``, never a match, never a 0.
3. :func:`syntax_score` (``syntax``, over ``clauses`` and ``trees``): 0 when the prediction does not
   parse (sqlglot, SQLite dialect); otherwise a mix of the normalised tree-edit-distance similarity
   of the two ASTs (Zhang–Shasha) and weighted per-clause similarities (SELECT and FROM weigh most).
4. :func:`combine` (``schedule``): ``alpha(t) * syntax + beta(t) * execution`` with ``beta = 1 -
   alpha`` moving from syntax-heavy to execution-heavy over training steps; the clause part may make
   up at most ``clause_cap`` (30 %) of the total.

:class:`RewardScorer` (``scorer``) runs this for batches in worker processes (``worker``, fed
fairly by ``lanes``), where a guard can stop any query, computing each execution, comparison, parse
and distance once; the server (``server``, ``payload``) serves it over HTTP;
:func:`compute_score`, :func:`compute_score_batch` and :func:`trl_reward` (``adapters``) adapt it to
verl and TRL, reading labels with :func:`parse_label` (``gold``). Every constant is a field of
:class:`RewardConfig` (in :mod:`rose_sql.config`, with every other default). See ``docs/rewards.md``
for the definitions with examples.
"""

from rose_sql.config import RewardConfig, Schedule
from rose_sql.errors import LabelError
from rose_sql.reward.adapters import compute_score, compute_score_batch, trl_reward
from rose_sql.reward.clauses import ParsedSQL, parse
from rose_sql.reward.execution import RewardStatus, execution_outcome
from rose_sql.reward.extract import Completion, extract_sql
from rose_sql.reward.gold import Gold, parse_label
from rose_sql.reward.schedule import Reward, bounds, combine, invalid, weights
from rose_sql.reward.scorer import RewardItem, RewardScorer
from rose_sql.reward.syntax import SyntaxScore, syntax_score
from rose_sql.reward.trees import build_tree, tree_edit_distance

__all__ = [
    "Completion",
    "Gold",
    "LabelError",
    "ParsedSQL",
    "Reward",
    "RewardConfig",
    "RewardItem",
    "RewardScorer",
    "RewardStatus",
    "Schedule",
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
