"""GRPO: the group of answers to one prompt is the baseline; no critic.

Mirrors `verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage` (verl 0.9.1), the
`algorithm.adv_estimator=grpo` branch. Chapter 4 (DeepSeekMath / GRPO) reads it.
"""

from __future__ import annotations

import torch

from minirl.advantage import register_adv_est
from minirl.core import check_same_shape, group_mean_std


@register_adv_est("grpo")
@torch.no_grad()
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-relative advantages: each response is scored against the other answers to its prompt.

        R_i = sum_t token_level_rewards[i, t]                 (the outcome score)
        A_i = (R_i - mean_g) / (std_g + epsilon)              GRPO
        A_i =  R_i - mean_g                                   Dr.GRPO (norm_adv_by_std_in_grpo=False)

    over the group g of rows sharing index[i] (verl's uid: the rollout.n samples of one prompt).
    std is the unbiased standard deviation (n - 1), epsilon is added to the std. A group of one
    has mean 0 and std 1 (its advantage is its raw score / (1 + epsilon)). A group whose rewards are
    all equal gets A = 0: nothing to learn from it, which is why DAPO filters such groups out.
    The scalar A_i is broadcast over the response tokens.

    Args:
        token_level_rewards: (B, L).
        response_mask: (B, L).
        index: (B,) group labels (uid strings, or ints / an int tensor).
        epsilon: added to the std.
        norm_adv_by_std_in_grpo: divide by the group std (GRPO) or not (Dr.GRPO).
        config: unused (verl reads nothing from it either; the trainer passes the flag).
    Returns:
        (advantages, returns), both (B, L) and equal, as in verl.
    """
    check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    scores = token_level_rewards.sum(dim=-1)  # R_i (verl sums all L positions, mask or not)
    mean, std, size = group_mean_std(scores, index)
    singleton = size == 1
    mean = torch.where(singleton, torch.zeros_like(mean), mean)  # a group of one: mean 0, std 1
    std = torch.where(singleton, torch.ones_like(std), std)
    if norm_adv_by_std_in_grpo:
        scores = (scores - mean) / (std + epsilon)
    else:
        scores = scores - mean
    advantages = scores.unsqueeze(-1) * response_mask
    return advantages, advantages
