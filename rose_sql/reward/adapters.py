"""Framework adapters over one long-lived scorer: verl's ``compute_score`` (and its batch form) and
TRL reward functions. The OpenRLHF-style HTTP server is :mod:`rose_sql.reward.server`."""

from __future__ import annotations

import atexit
import os
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

from rose_sql.config import RewardConfig
from rose_sql.engines import Source
from rose_sql.errors import LabelError, UsageError
from rose_sql.reward.gold import Gold, parse_label, resolve_db
from rose_sql.reward.schedule import Reward, invalid
from rose_sql.reward.scorer import RewardItem, RewardScorer
from rose_sql.reward.worker import NOT_FOUND

_SCORERS: dict[RewardConfig, RewardScorer] = {}
"""The function-style adapters' scorers, one per config (their worker processes and caches persist)."""
_MAX_SCORERS = 8
_LOCK = threading.Lock()


def _shared_scorer(config: RewardConfig) -> RewardScorer:
    """One long-lived scorer per config for function-style adapters (verl, TRL); past eight configs the
    oldest is closed, and all are at exit (their worker processes stop cleanly)."""
    with _LOCK:
        scorer = _SCORERS.get(config)
        if scorer is None:
            if len(_SCORERS) >= _MAX_SCORERS:
                _SCORERS.pop(next(iter(_SCORERS))).close()
            scorer = _SCORERS[config] = RewardScorer(config)
        return scorer


@atexit.register
def _close_scorers() -> None:
    with _LOCK:
        scorers = list(_SCORERS.values())
        _SCORERS.clear()
    for scorer in scorers:
        scorer.close()


def _config_from(kwargs: Mapping[str, Any], config: RewardConfig | None = None) -> RewardConfig:
    return config if config is not None else RewardConfig.from_mapping(kwargs)


def _root(root: str | Path | None, where: str) -> Source | None:
    """Where the databases are (a folder or a URL), checked: a db_root that is not a folder makes every item
    unusable, so it is an error."""
    if root is None:
        return None
    source = Source.parse(str(root))
    folder = source.folder_path
    if folder is not None and not folder.is_dir():
        raise UsageError(f"db_root {str(root)!r} ({where}) is not a folder: it must hold <db_id>/<db_id>.sqlite")
    return source


def _verl_dict(r: Reward, config: RewardConfig) -> dict[str, Any]:
    """verl's result: ``score`` plus the same keys for every item (verl stacks them per key); ``error``
    says why an item is unscored or failed (empty otherwise). The position names the item: the same
    result wherever it is scored (a pool scores parts of a batch)."""
    return {
        "score": r.total if r.total is not None else config.unscored,
        "execution": r.execution if r.execution is not None else config.unscored,
        "syntax": r.syntax,
        "clause": r.clause_part,
        "scored": r.total is not None,
        "status": r.status,
        "error": _error(r),
    }


def _error(r: Reward) -> str:
    """Why an item is unscored or failed; empty when it ran and was compared."""
    if r.status in ("match", "partial", "wrong"):
        return ""
    if r.total is not None:
        return f"{r.status}: {r.detail}"
    return f"{r.status}, unscored: {r.detail}"


_NO_ROOT = (
    "set +custom_reward_function.reward_kwargs.db_root=DIR (the folder holding <db_id>/<db_id>.sqlite) or $ROSE_DB_ROOT"
)


def _verl_items(
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None],
    db_root: Source | None,
) -> tuple[list[RewardItem | str], int | None]:
    out: list[RewardItem | str] = []
    step: int | None = None
    for i, (solution, truth, extra) in enumerate(zip(solution_strs, ground_truths, extra_infos, strict=True)):
        info = extra if isinstance(extra, Mapping) else {}
        value = info.get("step", info.get("global_step", step))
        step = int(value) if isinstance(value, Integral) and not isinstance(value, bool) else step
        try:
            root = Source.parse(str(info["db_root"])) if info.get("db_root") else db_root
            if isinstance(truth, str) and not truth.lstrip().startswith("{") and "\t" not in truth:
                gold = Gold(truth, resolve_db(info.get("db_id"), info.get("db_path"), root))
            else:
                gold = parse_label(truth, root)
            out.append(RewardItem(solution, gold.sql, gold.db))
        except LabelError as e:
            out.append(f"{e} (ground_truth and extra_info of item {i})")
        except UsageError as e:
            raise UsageError(f"verl compute_score, item {i}: {e}; {_NO_ROOT}") from None
    return out, step


def _score_mixed(scorer: RewardScorer, items: Sequence[RewardItem | str], step: int | None) -> list[Reward]:
    good = [it for it in items if isinstance(it, RewardItem)]
    scored = iter(scorer.score_batch(good, step))
    rewards = [next(scored) if isinstance(it, RewardItem) else invalid(it, scorer.config, step) for it in items]
    _name_missing(items, rewards)
    return rewards


def _name_missing(items: Sequence[RewardItem | str], rewards: Sequence[Reward]) -> None:
    """Name the databases a batch's items could not find: a UsageError when the batch has several items
    and none could be scored because no database it names exists (a misspelt db_id column, a db_root one
    level off), else a warning per database (Python shows each once), the other items scored as usual."""
    missing: dict[str, int] = {}
    for it, r in zip(items, rewards, strict=True):
        if isinstance(it, RewardItem) and r.status == "invalid" and r.detail.startswith(NOT_FOUND):
            missing[it.db.shown] = missing.get(it.db.shown, 0) + 1
    if not missing:
        return
    shown = "; ".join(f"{where} ({n} item{'s' if n > 1 else ''})" for where, n in sorted(missing.items()))
    if len(items) > 1 and sum(missing.values()) == len(items):
        raise UsageError(
            f"no item of the batch could be scored: no database it names exists ({shown}); check the db_id column "
            "and db_root (<db_root>/<db_id>/<db_id>.sqlite)"
        )
    for where in sorted(missing):
        warnings.warn(f"rose_sql reward: {NOT_FOUND}: {where}; its items are unscored", RuntimeWarning, stacklevel=4)


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
    ``config.unscored`` with ``scored: False``; ``error`` says why (and what to do), naming the item.

    Raises :class:`~rose_sql.errors.UsageError` at the first call when no item can be scored: no
    db_root while an item names a ``db_id``, or a db_root that is not a folder.
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
    where = "reward_kwargs.db_root" if db_root else "$ROSE_DB_ROOT"
    root = _root(db_root or os.environ.get("ROSE_DB_ROOT") or None, where)
    infos = [None] * len(solution_strs) if extra_infos is None else extra_infos  # verl passes numpy arrays
    items, step = _verl_items(solution_strs, ground_truths, infos, root)
    return [_verl_dict(r, cfg) for r in _score_mixed(_shared_scorer(cfg), items, step)]


RewardFn = Callable[..., list[float | None]]
_COMPONENTS = ("total", "execution", "syntax")
_TRL_ARGUMENTS = frozenset({"trainer_state", "completion_ids", "log_extra", "log_metric", "environments"})
"""What GRPOTrainer passes beside the dataset's columns (trl 1.16, ``GRPOTrainer._calculate_rewards``)."""


def trl_reward(
    db_root: str | Path | None = None, config: RewardConfig | None = None, component: str = "total"
) -> RewardFn:
    """A TRL reward function ``f(prompts, completions, **columns) -> list[float | None]``.

    Columns (dataset fields TRL passes by name): ``gold_sql`` plus ``db_id`` (under ``db_root``) or
    ``db_path``; or one ``label`` column in :func:`parse_label`'s forms. Completions may be strings
    or lists of chat messages. The schedule follows ``trainer_state.global_step`` when TRL passes
    it. ``component`` picks ``total``, ``execution`` or ``syntax``; the function's ``__name__`` is
    ``rose_sql_<component>`` (TRL logs each reward under it). Unscored items are None. When TRL passes
    ``log_extra``, each completion's status (``match``, ``error``, ...) goes into TRL's completions
    table as the column ``rose_sql_<component>_status``.

    What makes a whole batch unusable raises :class:`~rose_sql.errors.UsageError`: a db_root that is
    not a folder (here), and, at the first call, no ``gold_sql`` or ``label`` column, ``gold_sql``
    without ``db_id`` or ``db_path``, a column shorter than the completions, or ``db_id`` without a
    db_root. A problem of one item (an empty gold, a bad label, a missing database) leaves that item
    None.
    """
    if component not in _COMPONENTS:
        raise ValueError(f"component must be one of {_COMPONENTS}")
    cfg = config or RewardConfig()
    where = "trl_reward(db_root)" if db_root else "$ROSE_DB_ROOT"
    root = _root(db_root or os.environ.get("ROSE_DB_ROOT") or None, where)

    def reward(
        prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **columns: Any
    ) -> list[float | None]:
        state = columns.get("trainer_state")
        step = getattr(state, "global_step", None)
        _check_columns(columns, len(completions))
        items = [_trl_item(c, i, columns, root) for i, c in enumerate(completions)]
        rewards = _score_mixed(_shared_scorer(cfg), items, step)
        log_extra = columns.get("log_extra")
        if callable(log_extra):
            log_extra(f"{name}_status", [r.status for r in rewards])
        return [_pick(r, component) for r in rewards]

    name = f"rose_sql_{component}"
    reward.__name__ = reward.__qualname__ = name
    return reward


def _check_columns(columns: Mapping[str, Any], n: int) -> None:
    """Raise :class:`UsageError` when the dataset's columns cannot say what any completion is checked against."""
    if not n:
        return
    given = sorted(k for k in columns if k not in _TRL_ARGUMENTS)
    if "label" not in columns and "gold_sql" not in columns:
        raise UsageError(
            f"the TRL dataset needs a gold_sql column (with db_id or db_path) or a label column; it has {given}"
        )
    if "label" not in columns and "db_id" not in columns and "db_path" not in columns:
        raise UsageError(
            f"the TRL dataset has gold_sql but no db_id or db_path column to name each database; it has {given}"
        )
    for name in ("label", "gold_sql", "db_id", "db_path"):
        values = columns.get(name)
        if values is not None and (not isinstance(values, Sequence) or isinstance(values, str) or len(values) < n):
            raise UsageError(f"the TRL column {name!r} must hold one value per completion ({n})")


def _trl_item(completion: Any, i: int, columns: Mapping[str, Any], root: Source | None) -> RewardItem | str:
    def col(name: str) -> Any:
        values = columns.get(name)
        return values[i] if values is not None else None

    try:
        if col("label") is not None:
            gold = parse_label(col("label"), root)
        else:
            sql = col("gold_sql")
            if not isinstance(sql, str) or not sql.strip():
                raise LabelError(f"completion {i} has no gold_sql (or label)")
            gold = Gold(sql, resolve_db(col("db_id"), col("db_path"), root))
    except LabelError as e:
        return str(e)
    except UsageError as e:
        raise UsageError(
            f"TRL reward, completion {i}: {e}: pass trl_reward(db_root=DIR) or set $ROSE_DB_ROOT"
        ) from None
    return RewardItem(completion, gold.sql, gold.db)


def _pick(r: Reward, component: str) -> float | None:
    if component == "execution":
        return r.execution
    if component == "syntax":
        return r.syntax if r.total is not None else None
    return r.total
