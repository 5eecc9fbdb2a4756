"""RLOO: REINFORCE with a leave-one-out baseline from the other samples of the same prompt.

Mirrors `verl/trainer/ppo/core_algos.py::compute_rloo_outcome_advantage` (verl 0.9.1),
`algorithm.adv_estimator=rloo`, and `compute_rloo_vectorized_outcome_advantage` (`rloo_vectorized`),
which differs from it only for a prompt with a single answer. Chapter 7 (critic-free baselines) reads it.
"""

from __future__ import annotations

import torch

from minirl.advantage import register_adv_est
from minirl.core import check_same_shape, group_index, group_mean_std


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

    Read the other way (Chapter 7's direction): the mean baseline's advantage R_i - mean_g is (n - 1) / n
    times RLOO's. The baseline for sample i is the mean reward of the *other* samples of its prompt, so it does
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


@register_adv_est("rloo_vectorized")
@torch.no_grad()
def compute_rloo_vectorized_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    epsilon: float = 1e-6,
    config=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO from group sums, in one pass: the same numbers as `rloo`, except for a group of one.

        A_i = (n R_i - S_g) / (n - 1)   =  R_i - mean_{j in g, j != i} R_j       S_g = sum_{j in g} R_j
        A_i = 0                            for a group of one (n = 1)

    Mirrors `verl/trainer/ppo/core_algos.py::compute_rloo_vectorized_outcome_advantage`. For every
    group of two or more answers it gives the advantages of `rloo` (tests/test_estimators.py checks
    it); the two are rounded differently, so they agree to float precision, not bit for bit.

    What a beginner must notice: a prompt with one answer gets 0 here but its raw score R_i in `rloo`.
    With rollout.n = 1 every group is a singleton: `rloo` degenerates to REINFORCE without a baseline,
    `rloo_vectorized` learns nothing at all. Neither is RLOO; use n >= 2.

    Args:
        token_level_rewards: (B, L).
        response_mask: (B, L).
        index: (B,) group labels.
        epsilon, config, kwargs: unused; verl's signature.
    Returns:
        (advantages, returns), both (B, L) and equal.
    """
    check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    scores = token_level_rewards.sum(dim=-1)
    group, num_groups = group_index(index, device=scores.device)
    group_sum = torch.zeros(num_groups, dtype=scores.dtype, device=scores.device).index_add_(0, group, scores)
    n = torch.bincount(group, minlength=num_groups)[group].to(scores.dtype)  # size of each row's group
    leave_one_out = (n * scores - group_sum[group]) / (n - 1).clamp_min(1)  # (n R_i - S_g) / (n - 1)
    scores = leave_one_out * (n > 1)  # a group of one: 0
    advantages = scores.unsqueeze(-1) * response_mask
    return advantages, advantages
