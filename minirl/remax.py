"""ReMax: REINFORCE with the reward of the greedy response as the baseline.

Mirrors `verl/trainer/ppo/core_algos.py::compute_remax_outcome_advantage` (verl 0.9.1),
`algorithm.adv_estimator=remax`. The trainer generates one extra greedy response per prompt and
scores it (`reward_baselines`). In verl 0.9.1 only the legacy `ray_trainer.py::RayPPOTrainer.fit`
(`trainer.use_v1=false`) does that; the v1 trainer never sets `reward_baselines`, so `remax` fails
there with a TypeError (a missing argument). Chapter 7 reads it.
"""

from __future__ import annotations

import torch

from minirl.advantage import register_adv_est
from minirl.core import check_same_shape


@register_adv_est("remax")
@torch.no_grad()
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor, reward_baselines: torch.Tensor, response_mask: torch.Tensor, config=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reward-to-go minus the greedy response's reward (Li et al. 2023).

        G_t = sum_{s >= t} r_s m_s                 (reward-to-go; no discount, no whitening)
        A_t = G_t - b * m_t                        b = reward of the greedy answer to the same prompt

    A sampled answer that beats what the model would say greedily gets a positive advantage. With the
    score on the last valid token only, G_t = R_i on every token, so A_t = R_i - b; a per-token reward
    (a KL penalty in the reward) makes A_t change along the answer. There is no discount (gamma unused).

    Args:
        token_level_rewards: (B, L).
        reward_baselines: (B,) the greedy response's score for each row's prompt.
        response_mask: (B, L).
        config, kwargs: unused; verl's signature (the registry passes them).
    Returns:
        (advantages, returns): (B, L) each; returns are G.
    """
    check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    if reward_baselines.shape != token_level_rewards.shape[:1]:
        raise ValueError(f"shape mismatch: reward_baselines {tuple(reward_baselines.shape)} must be "
                         f"({token_level_rewards.shape[0]},), one baseline per row of token_level_rewards "
                         f"{tuple(token_level_rewards.shape)}.")
    returns = (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
    advantages = returns - reward_baselines.unsqueeze(-1) * response_mask
    return advantages, returns
