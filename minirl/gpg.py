"""GPG's advantage: the group mean as baseline, scaled up by the share of answers with a reward.

Mirrors `verl/trainer/ppo/core_algos.py::compute_gpg_outcome_advantage` (verl 0.9.1),
`algorithm.adv_estimator=gpg` ("GPG: A Simple and Strong Reinforcement Learning Baseline for Model
Reasoning", arXiv 2504.02546). verl pairs it with the `gpg` policy loss (`-A log pi`, no ratio, no clip:
`actor_rollout_ref.actor.policy_loss.loss_mode=gpg`); the estimator works with any loss.
"""

from __future__ import annotations

import torch

from minirl.advantage import register_adv_est
from minirl.core import check_same_shape, group_mean_std


@register_adv_est("gpg")
@torch.no_grad()
def compute_gpg_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    epsilon: float = 1e-6,
    f_norm: float = 1.0,
    alpha: float = 1.0,
    config=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-mean baseline (no std), times alpha = batch size / number of nonzero rewards.

        alpha = B / max(#{i : R_i != 0}, 1)           over the whole batch, not per group
        A_i   = alpha * (R_i - mean_g) / f_norm       (a group of one: mean 0)

    The loss averages over all B answers, but only some of them carry a gradient; alpha rescales the
    average as if only those counted (the paper's gradient-estimation correction).

    What a beginner must notice:
    - verl counts nonzero *rewards* R_i, not nonzero advantages. With a 0/1 reward, alpha is B over
      the number of right answers, and a group whose answers are all right (advantage 0, no gradient)
      still counts in the denominator; with rewards that are never 0 (say -1/+1), alpha is always 1.
    - The `alpha` argument is ignored: verl overwrites it with the formula above. `f_norm` is 1 unless
      a direct call passes another value (the trainer never does), and `epsilon` is unused.
    - Unlike GRPO there is no std division, so the reward's scale sets the advantage's scale.

    Args:
        token_level_rewards: (B, L).
        response_mask: (B, L).
        index: (B,) group labels.
        epsilon: unused.
        f_norm: divides the advantage (default 1).
        alpha: ignored (recomputed).
        config, kwargs: unused; verl's signature.
    Returns:
        (advantages, returns), both (B, L) and equal.
    """
    check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    scores = token_level_rewards.sum(dim=-1)  # R_i
    alpha = scores.shape[0] / torch.count_nonzero(scores).clamp(min=1)  # B / #nonzero rewards (float32, as verl)
    mean, _, size = group_mean_std(scores, index)
    mean = torch.where(size == 1, torch.zeros_like(mean), mean)  # a group of one: mean 0
    scores = alpha * (scores - mean) / f_norm  # alpha (R_i - mean_g) / f_norm
    advantages = scores.unsqueeze(-1) * response_mask
    return advantages, advantages
