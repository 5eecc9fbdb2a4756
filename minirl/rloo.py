"""RLOO: REINFORCE with a leave-one-out baseline from the other samples of the same prompt.

Mirrors `verl/trainer/ppo/core_algos.py::compute_rloo_outcome_advantage` (verl 0.9.1),
`algorithm.adv_estimator=rloo`. Chapter 7 (critic-free baselines) reads it.
"""

from __future__ import annotations

import torch

from minirl.advantage import register_adv_est
from minirl.core import check_same_shape, group_mean_std


@register_adv_est("rloo")
@torch.no_grad()
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    epsilon: float = 1e-6,
    config=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Leave-one-out advantages (Ahmadian et al. 2024, "Back to Basics").

        A_i = R_i - mean_{j in g, j != i} R_j  =  (R_i - mean_g) * n / (n - 1)

    The baseline for sample i is the mean reward of the *other* samples of its prompt, so it does
    not depend on sample i itself and the gradient estimate stays unbiased. A group of one has no
    other sample: its advantage is its raw score R_i (as in verl's `rloo`; verl's
    `rloo_vectorized` gives 0 there instead).

    Args:
        token_level_rewards: (B, L).
        response_mask: (B, L).
        index: (B,) group labels.
        epsilon, config, kwargs: unused; verl's signature (the registry passes them).
    Returns:
        (advantages, returns), both (B, L) and equal.
    """
    check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    scores = token_level_rewards.sum(dim=-1)
    mean, _, n = group_mean_std(scores, index)
    leave_one_out = scores * n / (n - 1) - mean * n / (n - 1)  # = R_i - mean of the others
    scores = torch.where(n > 1, leave_one_out, scores)
    advantages = scores.unsqueeze(-1) * response_mask
    return advantages, advantages
