"""The preference task of Chapters 3 (InstructGPT) and 6 (DPO): comparisons labelled by a hidden gold reward.

RLHF optimises a *learned* proxy of what people want. To see what that costs, the "human" here is a
known function, the gold reward, and the learner only ever sees comparisons drawn from it:

    prompts        the tiny arithmetic task ("12+7=?")
    policy         an SFT warm start whose demonstrations are half direct ("12+19=31 #### 31") and half
                   worked ("12+19: 10+10=20, 2+9=11, 20+11=31 #### 31"), equally often wrong
    gold reward    1 if the final answer is right, else 0 (the GSM8K rule); working earns nothing itself
    comparisons    two answers sampled from the warm start per prompt; the label is a Bradley-Terry draw,
                   P(a preferred to b) = sigmoid((gold(a) - gold(b)) / label_noise), so labels are noisy
    the flaw       if worked answers are right more often in the warm start's samples, longer answers win
                   more comparisons, and a reward model can learn "longer is better" instead of "right is
                   better", as reward models learn length from real preference data (Singhal et al. 2023).
                   Length stops paying once an answer runs past its token budget and loses its final answer.

    python -m minirl preference-data          # build (or reuse) the cached task; prints its directory

Files (TRL's conversational preference layout, plus the hidden gold for analysis):

    <dir>/pairs_train.parquet, pairs_test.parquet   prompt, chosen, rejected, chosen_gold, rejected_gold, ...
    <dir>/preference.json    the config, counts that describe the pairs, and the warm start's directory (whose
                             data/ holds the RL prompts in verl's schema)
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from minirl import data as data_lib
from minirl import models
from minirl.rewards import default_compute_score
from minirl.rollout import generate_sequences
from minirl.sft import SFTConfig, build_once, default_cache_dir, default_warm_start

PREFERENCE_SFT = SFTConfig(demo_style="worked", max_length=64, response_length=48)
"""The warm start of the preference task: worked answers need longer sequences."""


@dataclass
class PreferenceConfig:
    """How the comparisons are sampled and labelled."""

    response_length: int = 48
    """Token budget of a sampled answer (the same budget the RL runs use); an answer cut off here has no final
    answer, so its gold reward is 0."""
    temperature: float = 1.0
    """Sampling temperature of the two answers to compare."""
    label_noise: float = 0.5
    """Bradley-Terry temperature of the simulated labeller: a right answer beats a wrong one with probability
    sigmoid(1 / label_noise) (0.88 at 0.5); two right (or two wrong) answers are a coin flip."""
    seed: int = 0
    """Seeds sampling and labels."""
    sft: SFTConfig = field(default_factory=lambda: PREFERENCE_SFT)
    """The warm start that writes the answers."""

    def key(self) -> str:
        """A short hash of the config (and the warm start's key): the cache key of the task it builds."""
        content = json.dumps({"version": 1, **asdict(self), "sft": self.sft.key()}, sort_keys=True)
        return hashlib.sha256(content.encode()).hexdigest()[:12]


def gold_reward(data_source: str, response: str, ground_truth: str) -> float:
    """The hidden "human" preference: 1.0 for the right final answer, else 0.0 (`minirl.rewards`)."""
    return float(default_compute_score(data_source, response, ground_truth))


def count_steps(response: str) -> int:
    """Number of equations an answer writes before "####" (1 for a direct answer, 3 for a worked one)."""
    return response.split("####")[0].count("=")


def bradley_terry_probability(gold_a: float, gold_b: float, label_noise: float) -> float:
    """P(a is preferred to b) = sigmoid((gold_a - gold_b) / label_noise): the Bradley-Terry model."""
    return 1.0 / (1.0 + math.exp(-(gold_a - gold_b) / label_noise))


@torch.no_grad()
def sample_comparisons(model_dir: str | Path, rows: list[dict], config: PreferenceConfig,
                       batch_size: int = 256) -> list[dict]:
    """Two sampled answers per prompt, labelled by a Bradley-Terry draw from the gold reward.

    Prompts whose two answers are the same text are skipped (nothing to compare).

    Returns:
        Rows in TRL's conversational preference layout ({"prompt", "chosen", "rejected"}, the latter two as
        [{"role": "assistant", "content": ...}]) plus `chosen_gold`, `rejected_gold`, `chosen_steps`,
        `rejected_steps`, `data_source`, `reward_model` (ground truth), `extra_info`.
    """
    tokenizer, policy = models.load_tokenizer(model_dir), models.load_policy(model_dir)
    generator = torch.Generator().manual_seed(config.seed)
    rng = random.Random(config.seed)
    pairs = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        prompts = data_lib.encode_prompts(tokenizer, [row["prompt"] for row in chunk] * 2, 64)
        out = generate_sequences(policy, prompts["input_ids"], prompts["attention_mask"], tokenizer.eos_token_id,
                                 tokenizer.pad_token_id, config.response_length, do_sample=True,
                                 temperature=config.temperature, generator=generator)
        lengths = out["response_mask"].sum(-1).tolist()
        texts = tokenizer.batch_decode([r[:n].tolist() for r, n in zip(out["responses"], lengths)],
                                       skip_special_tokens=True)
        for i, row in enumerate(chunk):
            a, b = texts[i], texts[i + len(chunk)]
            if a == b:
                continue
            truth = row["reward_model"]["ground_truth"]
            gold_a, gold_b = (gold_reward(row["data_source"], text, truth) for text in (a, b))
            a_wins = rng.random() < bradley_terry_probability(gold_a, gold_b, config.label_noise)
            (chosen, chosen_gold), (rejected, rejected_gold) = ((a, gold_a), (b, gold_b))[:: 1 if a_wins else -1]
            pairs.append({
                "prompt": row["prompt"],
                "chosen": [{"role": "assistant", "content": chosen}],
                "rejected": [{"role": "assistant", "content": rejected}],
                "chosen_gold": chosen_gold, "rejected_gold": rejected_gold,
                "chosen_steps": count_steps(chosen), "rejected_steps": count_steps(rejected),
                "data_source": row["data_source"], "reward_model": row["reward_model"],
                "extra_info": row["extra_info"]})
    return pairs


def build_preference_task(out_dir: str | Path, config: PreferenceConfig | None = None,
                          show_progress: bool = True) -> dict:
    """Sample and label the comparisons for the warm start's train and test prompts; write them to `out_dir`."""
    config = config or PreferenceConfig()
    out_dir = Path(out_dir)
    warm = default_warm_start(config.sft, show_progress=show_progress)
    summary = {"config": asdict(config), "key": config.key(), "warm_start": str(warm)}
    for split in ("train", "test"):
        rows = data_lib.read_parquet(warm / "data" / f"{split}.parquet").to_list()
        pairs = sample_comparisons(warm, rows, config)
        data_lib.write_parquet(pairs, out_dir / f"pairs_{split}.parquet")
        summary[split] = describe_pairs(pairs)
    (out_dir / "preference.json").write_text(json.dumps(summary, indent=2))
    return summary


def describe_pairs(pairs: list[dict]) -> dict:
    """Counts that show the task: label agreement with the gold, and how often the longer answer wins."""
    def mean(values):
        values = list(values)
        return sum(values) / len(values) if values else float("nan")

    decided = [p for p in pairs if p["chosen_gold"] != p["rejected_gold"]]
    uneven = [p for p in pairs if p["chosen_steps"] != p["rejected_steps"]]
    return {
        "pairs": len(pairs),
        "gold_differs": len(decided),
        "label_agrees_with_gold": mean(p["chosen_gold"] > p["rejected_gold"] for p in decided),
        "longer_wins": mean(p["chosen_steps"] > p["rejected_steps"] for p in uneven),
        "gold_mean": mean((p["chosen_gold"] + p["rejected_gold"]) / 2 for p in pairs),
    }


def default_preference_task(config: PreferenceConfig | None = None, show_progress: bool = True) -> Path:
    """The cached preference task's directory, built on first use (atomically, like the warm start)."""
    config = config or PreferenceConfig()
    return build_once(default_cache_dir() / f"preference-{config.key()}", "preference.json",
                      lambda building: build_preference_task(building, config, show_progress))


def warm_start_of(task_dir: str | Path) -> Path:
    """The warm-start model directory a preference task was sampled from."""
    return Path(json.loads((Path(task_dir) / "preference.json").read_text())["warm_start"])


def resolve_tiny_paths(config) -> tuple[str, str, str | None]:
    """(model_path, train_files, val_files) of a train-rm or dpo config, "tiny" replaced by the cached
    preference task's warm start, training pairs and test pairs."""
    paths = [config.model_path, config.train_files, config.val_files]
    if "tiny" in paths:
        task = default_preference_task()
        tiny = {0: str(warm_start_of(task)), 1: str(task / "pairs_train.parquet"), 2: str(task / "pairs_test.parquet")}
        paths = [tiny[i] if p == "tiny" else p for i, p in enumerate(paths)]
    return tuple(paths)


def ppo_overrides(reward_model_dir: str | Path, kl_coef: float, config: PreferenceConfig | None = None) -> list[str]:
    """Trainer overrides for stage 3 of Chapter 3 on this task: PPO (GAE) against a reward model, KL in the reward.

    The policy, reference and prompts are the task's SFT warm start and its data; the critic starts from the
    reward model (as InstructGPT's value model does); 16 prompts x 8 answers per step, actor learning rate 4e-4.
    Add the run directory, the step count and the seed.
    """
    config = config or PreferenceConfig()
    warm = default_warm_start(config.sft, show_progress=False)
    return [f"actor_rollout_ref.model.path={warm}", f"data.train_files={warm / 'data' / 'train.parquet'}",
            f"data.val_files={warm / 'data' / 'test.parquet'}", f"data.max_response_length={config.response_length}",
            "data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
            "critic.ppo_mini_batch_size=16", "actor_rollout_ref.actor.optim.lr=4e-4", "algorithm.adv_estimator=gae",
            f"critic.model.path={reward_model_dir}", "reward.reward_model.enable=True",
            f"reward.reward_model.model_path={reward_model_dir}", "algorithm.use_kl_in_reward=True",
            f"algorithm.kl_ctrl.kl_coef={kl_coef}"]
