"""The reward in the trainers' own hands: TRL's GRPOTrainer trains a real causal LM on it for two
steps (examples/grpo_trl.py), and the reward functions take the calls TRL, verl and OpenRLHF make.

Checked against: trl 1.16.0 as installed (``GRPOTrainer._calculate_rewards`` read at test time);
verl at b178a3cd56f58b2d502255daba591e92833930a7 (``verl/workers/reward_manager/naive.py`` and
``batch.py``, ``verl/trainer/ppo/reward.py``'s ``_call_with_kwargs``,
``verl/experimental/reward_loop/reward_manager/naive.py``); OpenRLHF at
3c3be6234e0cb353e76bb8019947db9dfe99fca7 (``openrlhf/utils/agent.py``: ``_fetch_rewards_via_http``
and how its answer is read). verl and OpenRLHF are not installed here (they need GPUs and vLLM): their
calls are reproduced as those files make them.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import build_db

from rose_sql.engines import Source
from rose_sql.reward import RewardConfig, RewardItem, RewardScorer, compute_score, compute_score_batch, trl_reward
from rose_sql.reward.server import ServeConfig, serve_in_thread

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "grpo_trl.py"
GOLD = "SELECT count(*) FROM singer"
CFG = RewardConfig(processes=1)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("trainers")
    build_db(
        folder / "music" / "music.sqlite", "CREATE TABLE singer (name TEXT); INSERT INTO singer VALUES ('a'), ('b');"
    )
    return folder


def _missing(*modules: str) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


# --------------------------------------------------------------------------- TRL's call


@pytest.mark.slow  # imports TRL and transformers
def test_trl_reward_takes_every_argument_grpo_trainer_passes(root: Path) -> None:
    """GRPOTrainer calls ``f(prompts=, completions=, completion_ids=, **reward_kwargs)``, reward_kwargs being the
    dataset's columns plus the names it sets itself; read those names from the installed TRL's source."""
    trl = pytest.importorskip("trl", reason="trl is not installed: pip install -e '.[rl]' (torch first, docs/trl.md)")
    from transformers import TrainerState
    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.utils import get_callable_name

    source = inspect.getsource(GRPOTrainer._calculate_rewards)
    assert "prompts=prompts, completions=completions, completion_ids=completion_ids_list, **reward_kwargs" in source
    extra = set(re.findall(r'reward_kwargs\["(\w+)"\]', source))
    assert extra >= {"trainer_state", "log_extra", "log_metric"}, f"trl {trl.__version__} passes {extra}"

    logged: dict[str, list[Any]] = {}
    state = TrainerState()
    state.global_step = 3
    passed: dict[str, Any] = {
        "trainer_state": state,
        "log_extra": lambda column, values: logged.setdefault(column, []).extend(values),
        "log_metric": lambda name, value: None,
        "environments": None,
    }
    reward = trl_reward(root, CFG)
    assert get_callable_name(reward) == "rose_sql_total"  # the name TRL logs it under
    completions = [[{"role": "assistant", "content": f"```sql\n{GOLD}\n```"}], [{"role": "assistant", "content": "hm"}]]
    got = reward(
        prompts=[[{"role": "user", "content": "How many singers?"}]] * 2,
        completions=completions,
        completion_ids=[[1, 2], [3]],
        gold_sql=[GOLD] * 2,
        db_id=["music"] * 2,
        **{k: passed[k] for k in extra if k in passed},
    )
    with RewardScorer(CFG) as scorer:
        expected = [
            r.total
            for r in scorer.score_batch(
                [RewardItem(c, GOLD, Source.folder(root).locate("music")) for c in completions], step=3
            )
        ]
    assert got == pytest.approx(expected) and got[0] == pytest.approx(1.0) and got[1] < 0
    assert logged == {"rose_sql_total_status": ["match", "error"]}  # TRL's completions table says why


def test_trl_errors_list_the_dataset_columns_not_trls_arguments(root: Path) -> None:
    from rose_sql.errors import UsageError

    with pytest.raises(UsageError, match=r"it has \['gold'\]$"):
        trl_reward(root, CFG)(
            prompts=["q"], completions=["SELECT 1"], completion_ids=[[1]], gold=["SELECT 1"], log_metric=print
        )


# --------------------------------------------------------------------------- verl's calls


def test_verl_naive_and_reward_loop_call(root: Path) -> None:
    """verl's naive managers call ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`` with
    ``custom_reward_function.reward_kwargs`` merged in as keywords (``_call_with_kwargs``), and add ``num_turns`` and
    ``rollout_reward_scores`` to extra_info."""
    reward_kwargs = {"db_root": str(root), "processes": 1}
    extra_info = {"db_id": "music", "num_turns": None, "rollout_reward_scores": {}}
    inspect.signature(compute_score).bind(
        data_source="spider", solution_str="", ground_truth=GOLD, extra_info=extra_info, **reward_kwargs
    )
    result = compute_score(
        data_source="spider",
        solution_str=f"<answer>{GOLD}</answer>",
        ground_truth=GOLD,
        extra_info=extra_info,
        **reward_kwargs,
    )
    assert result["score"] == pytest.approx(1.0) and result["status"] == "match"
    assert all(isinstance(v, int | float | str | bool) for v in result.values())  # reward_extra_info[key].append(v)


def test_verl_batch_call(root: Path) -> None:
    """verl's BatchRewardManager calls ``compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=,
    **reward_kwargs)``: data_sources and extra_infos are numpy object arrays (``non_tensor_batch``)."""
    np = pytest.importorskip("numpy")
    infos = np.array([{"db_id": "music", "rollout_reward_scores": {}} for _ in range(2)], dtype=object)
    results = compute_score_batch(
        data_sources=np.array(["spider", "spider"], dtype=object),
        solution_strs=[GOLD, "SELECT name FROM singer"],
        ground_truths=[GOLD, GOLD],
        extra_infos=infos,
        db_root=str(root),
        processes=1,
    )
    assert [r["status"] for r in results] == ["match", "wrong"]
    assert [set(r) for r in results] == [set(results[0])] * 2  # verl stacks every key


# --------------------------------------------------------------------------- OpenRLHF's call


def test_openrlhf_agent_request(root: Path) -> None:
    """OpenRLHF's SingleTurnExecutor posts one rollout at a time, ``{"query": [decoded with special tokens],
    "prompts": [prompt], "labels": [label]}``, and reads ``scores`` (else ``rewards``) and ``extra_logs``."""
    srv, _ = serve_in_thread(ServeConfig(Source.folder(root), port=0, reward=CFG))
    try:
        prompt = "<|im_start|>user\nHow many singers?<|im_end|>\n<|im_start|>assistant\n"
        payload = {
            "query": [prompt + f"```sql\n{GOLD}\n```<|im_end|>"],
            "prompts": [prompt],
            "labels": [f"{GOLD}\tmusic"],
        }
        request = urllib.request.Request(srv.url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            info = json.loads(answer.read())
    finally:
        srv.close()
    assert info["rewards"] == [pytest.approx(1.0)] and info["scores"] == [1.0]
    assert all(len(v) == 1 for v in info["extra_logs"].values())


# --------------------------------------------------------------------------- two real GRPO steps


def test_grpo_trains_two_steps_on_the_reward(gguf: Path, shared: Path, tmp_path: Path) -> None:
    """examples/grpo_trl.py as a user runs it: two GRPO steps of SmolLM2-135M on Spider questions, completions
    cut at 32 tokens. The rewards TRL logged for the last batch (and the statuses in its completions table) are
    exactly what ROSE-SQL computes for those completions, and a step whose group had different rewards moved the
    weights (a gradient norm above 0)."""
    missing = _missing("trl", "transformers", "gguf", "datasets")
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: pip install torch==2.13.0 && pip install -e '.[rl]'")
    spider = shared / "spider"
    summary_file = tmp_path / "summary.json"
    command = [sys.executable, str(EXAMPLE), "--gguf", str(gguf), "--spider", str(spider), "--questions", "4"]
    # completions of 32 tokens at most, half the example's cap: generating them token by token was 15.5 s of the
    # two steps' 34 s, 8.3 s of 22 s at 32, and the last group still scores apart (advantages not 0)
    command += ["--max-completion-length", "32"]
    command += ["--output-dir", str(tmp_path / "out"), "--summary", str(summary_file)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # everything is local: no look-up of the hub, even a failing one
    run = subprocess.run(command, capture_output=True, text=True, timeout=1500, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(summary_file.read_text())
    assert summary["global_step"] == 2 and summary["reward_name"] == "rose_sql_total"
    steps = summary["steps"]
    assert [s["step"] for s in steps] == [1, 2]
    assert all(math.isfinite(s["rewards/rose_sql_total/mean"]) for s in steps)

    last = summary["last_batch"]
    assert len(last) == 2  # one question, num_generations=2
    golds = {json.dumps(r["prompt"]): r for r in summary["rows"]}
    items = []
    for entry in last:
        row = golds[json.dumps(entry["prompt"])]
        db = Source.folder(spider / "database").locate(row["db_id"])
        items.append(RewardItem(entry["completion"], row["gold_sql"], db))
    # the last batch was generated and scored at global_step 1, by the example's config
    with RewardScorer(RewardConfig(processes=1, total_steps=2)) as scorer:
        expected = scorer.score_batch(items, step=1)
    assert [e["reward"] for e in last] == pytest.approx([r.total for r in expected])
    assert [e["status"] for e in last] == [r.status for r in expected]  # through TRL's log_extra
    if any(a != 0 for a in summary["advantages"]):
        assert steps[-1]["grad_norm"] > 0
