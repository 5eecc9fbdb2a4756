"""REINFORCE++: REINFORCE with returns normalised over the whole batch (optionally a group baseline).

Mirrors `verl/trainer/ppo/core_algos.py::compute_reinforce_plus_plus_outcome_advantage` and
`compute_reinforce_plus_plus_baseline_outcome_advantage` (verl 0.9.1),
`algorithm.adv_estimator=reinforce_plus_plus` / `reinforce_plus_plus_baseline`. Chapter 7 reads it.
"""

from __future__ import annotations

import torch

from minirl.advantage import register_adv_est
from minirl.core import check_same_shape, group_mean_std, masked_whiten


@register_adv_est("reinforce_plus_plus")
@torch.no_grad()
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float | None = None, config=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Discounted reward-to-go, whitened over all response tokens of the batch (Hu 2025).

        G_t = r_t + gamma * G_{t+1}              (masked tokens carry G through unchanged)
        A   = masked_whiten(G) * mask            one mean / std for the whole batch: the baseline

    The mean and the (unbiased) std are taken over every valid token of the batch, not over answers:
    with gamma = 1 and the score on the last token, G_t = R_i on each of answer i's L_i tokens, and the
    mean is sum_i L_i R_i / sum_i L_i, so a long answer weighs more. With gamma < 1, token t of an
    answer of L_i tokens gets gamma^(L_i - 1 - t) R_i before whitening.

    verl reads gamma from `config.gamma` (`algorithm.gamma`), as the registry call does here; a direct
    call may pass gamma instead (default 1.0).

    Args:
        token_level_rewards: (B, L).
        response_mask: (B, L).
        gamma: discount; None = config.gamma (1.0 without a config).
        config: the algorithm config (for gamma); kwargs: unused.
    Returns:
        (advantages, returns): (B, L) each; returns are G * mask.
    """
    check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    if gamma is None:
        gamma = config.gamma if config is not None else 1.0
    mask = response_mask.to(token_level_rewards.dtype)
    returns = torch.zeros_like(token_level_rewards)
    running_return = torch.zeros_like(token_level_rewards[:, 0])
    for t in reversed(range(token_level_rewards.shape[1])):
        new_return = token_level_rewards[:, t] + gamma * running_return  # G_t = r_t + gamma G_{t+1}
        returns[:, t] = new_return * mask[:, t]
        running_return = new_return * mask[:, t] + running_return * (1 - mask[:, t])
    advantages = masked_whiten(returns, response_mask) * response_mask
    return advantages, returns


@register_adv_est("reinforce_plus_plus_baseline")
@torch.no_grad()
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index, epsilon: float = 1e-6, config=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Subtract the group mean (like GRPO, without the group std), then whiten over the batch.

        a_i = R_i - mean_g                        (group of one: mean 0)
        A   = masked_whiten(a_i broadcast over tokens * mask) * mask

    Unlike GRPO, the scale comes from the whole batch (token-weighted), not from each group, so a
    group with a tiny reward spread is not blown up by a tiny std.

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
    mean, _, size = group_mean_std(scores, index)
    scores = scores - torch.where(size == 1, torch.zeros_like(mean), mean)
    per_token = scores.unsqueeze(-1).expand_as(token_level_rewards) * response_mask
    advantages = masked_whiten(per_token, response_mask) * response_mask
    return advantages, advantages
