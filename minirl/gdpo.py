"""GDPO: normalise each reward dimension within its group before adding them up.

Mirrors `verl/trainer/ppo/core_algos.py::compute_gdpo_outcome_advantage` (verl 0.9.1),
`algorithm.adv_estimator=gdpo` (GDPO, arXiv 2601.05242). A reward function that returns several
scores (a format reward and an accuracy reward, say) usually has them added into one number before
GRPO sees it; then the dimension with the larger spread decides every advantage. GDPO runs GRPO on
each dimension separately, so each one contributes advantages of unit scale, and only then adds them.
"""

from __future__ import annotations

import numpy as np
import torch

from minirl import grpo  # the module, not the function: grpo may still be importing (it imports the registry)
from minirl.advantage import algorithm_setting, register_adv_est
from minirl.core import check_same_shape, masked_whiten


@register_adv_est("gdpo")
@torch.no_grad()
def compute_gdpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config=None,
    non_tensor_batch: dict | None = None,
    batch: dict | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages per reward dimension, a weighted sum, then one whitening over the batch.

        A_k,i = (r_k,i - mean_g(r_k)) / (std_g(r_k) + epsilon)   GRPO on dimension k alone (group of one:
                                                                 mean 0, std 1)
        A_i   = sum_k w_k A_k,i                                  w_k = gdpo_reward_weights (default all 1)
        A     = masked_whiten(A_i broadcast over tokens) * mask  mean 0, std 1 over the batch's valid tokens

    Where the dimensions come from: `algorithm.gdpo_reward_keys` names columns of `non_tensor_batch`,
    the values the reward function returned in its dict (`{"score": ..., "format_reward": ...,
    "accuracy_reward": ...}`) beside the score. Each column holds one number per row; it is placed on
    the row's last response token (`attention_mask[:, P:].sum(-1) - 1`, P = `prompts.shape[1]`) and
    read back by GRPO's sum over tokens. The score itself (`token_level_rewards`) is not used then.

    When `config`, `non_tensor_batch` or `batch` is missing (a direct call), the only dimension is
    `token_level_rewards`: GDPO is then GRPO followed by the batch whitening.

    What a beginner must notice:
    - The whitening is over tokens, as in REINFORCE++: a long answer weighs more in the batch mean.
    - `algorithm.norm_adv_by_std_in_grpo=false` does not reach this function through the trainer
      (verl's `compute_advantage` does not pass it): each dimension is always divided by its std.
    - A KL penalty in the reward (use_kl_in_reward) is ignored on the per-dimension path: only the
      named columns count.
    - As in verl, the columns are read as float32, so the result is float32 on that path.

    Args:
        token_level_rewards: (B, L); the single dimension when the batch is not given.
        response_mask: (B, L).
        index: (B,) group labels (uids).
        epsilon: added to each dimension's group std.
        norm_adv_by_std_in_grpo: passed to GRPO for every dimension; only a direct call can change it.
        config: the algorithm config: `gdpo_reward_keys` (required with a batch), `gdpo_reward_weights`.
        non_tensor_batch: the batch's per-row values: one (B,) column per reward key.
        batch: the batch's tensors: `prompts` (B, P) and `attention_mask` (B, P + L).
        kwargs: unused.
    Returns:
        (advantages, returns), both (B, L) and equal.
    Raises:
        ValueError: no `gdpo_reward_keys`, a key that is not a column, a column that is not numbers,
            or weights whose count differs from the keys' (verl: IndexError with fewer weights; more
            weights than keys, verl silently ignores the extra ones, minirl refuses).
    """
    check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    weights = None
    if config is not None and non_tensor_batch is not None and batch is not None:
        keys = algorithm_setting(config, "gdpo_reward_keys")
        if not keys:
            raise ValueError("gdpo needs algorithm.gdpo_reward_keys: the keys of the dict your compute_score returns, "
                             "one per reward dimension, e.g. algorithm.gdpo_reward_keys=[format_reward,accuracy_reward]"
                             " (in verl: +algorithm.gdpo_reward_keys=...).")
        dimensions = [_reward_column(key, non_tensor_batch, batch, response_mask) for key in keys]
        weights = algorithm_setting(config, "gdpo_reward_weights")
        if weights is not None and len(weights) != len(keys):
            raise ValueError(f"algorithm.gdpo_reward_weights has {len(weights)} entries for {len(keys)} "
                             f"gdpo_reward_keys {list(keys)}: give one weight per key (or null for equal weights).")
    else:
        dimensions = [token_level_rewards]
    if weights is None:
        weights = [1.0] * len(dimensions)
    weights = torch.tensor(list(weights), dtype=torch.float32, device=token_level_rewards.device)  # verl's dtype

    total = None
    for weight, rewards in zip(weights, dimensions):
        advantage, _ = grpo.compute_grpo_outcome_advantage(rewards, response_mask, index, epsilon=epsilon,
                                                           norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)
        total = weight * advantage if total is None else total + weight * advantage  # sum_k w_k A_k
    advantages = masked_whiten(total, response_mask) * response_mask  # one mean and std over the batch's tokens
    return advantages, advantages


def _reward_column(key: str, non_tensor_batch: dict, batch: dict, response_mask: torch.Tensor) -> torch.Tensor:
    """One reward dimension as (B, L) float32 token-level scores: the row's value on its last response token."""
    if key not in non_tensor_batch:
        raise ValueError(f"gdpo reward key {key!r} is not in the batch; it has {sorted(non_tensor_batch)}. Make your "
                         f"compute_score return a dict that has {key!r}, or fix algorithm.gdpo_reward_keys.")
    for name in ("prompts", "attention_mask"):
        if name not in batch:
            raise ValueError(f"gdpo places each reward dimension on the last response token and reads it from "
                             f"batch[{name!r}] (the rollout's output), which this batch lacks.")
    try:
        values = np.asarray(non_tensor_batch[key], dtype=np.float32)
    except (TypeError, ValueError):
        raise ValueError(f"gdpo reward key {key!r} must hold one number per row; got "
                         f"{list(non_tensor_batch[key])[:4]}...") from None
    device = response_mask.device
    prompt_length = batch["prompts"].shape[1]
    last = batch["attention_mask"][:, prompt_length:].sum(dim=-1) - 1  # last response token (-1: empty answer)
    scores = torch.zeros(response_mask.shape, dtype=torch.float32, device=device)
    scores[torch.arange(scores.shape[0], device=device), last.to(device)] = torch.as_tensor(values, device=device)
    return scores
