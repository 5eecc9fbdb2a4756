"""OPO: the group baseline weighted by answer length, with no std division.

Mirrors `verl/trainer/ppo/core_algos.py::compute_opo_outcome_advantage` (verl 0.9.1),
`algorithm.adv_estimator=opo` ("On-Policy RL with Optimal Reward Baseline", arXiv 2505.23585).
"""

from __future__ import annotations

import torch

from minirl.advantage import register_adv_est
from minirl.core import check_same_shape, group_index


@register_adv_est("opo")
@torch.no_grad()
def compute_opo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    epsilon: float = 1e-6,
    config=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Subtract the length-weighted mean reward of the group; no std, no whitening.

        b_g = sum_{j in g} L_j R_j / sum_{j in g} L_j     L_j = response_mask[j].sum(), the answer's length
        A_i = R_i - b_g                                   (a group of one: b = 0, A_i = R_i)

    Why lengths: the gradient of log pi(answer) is a sum over its L tokens, so its squared norm grows
    roughly with L. The baseline that minimises the gradient's variance weights each reward by that
    norm (arXiv 2505.23585 takes L as the proxy). With equal lengths b_g is the plain group mean, and
    OPO is GRPO without the std (Dr.GRPO's advantage).

    What a beginner must notice:
    - The baseline includes answer i itself (unlike RLOO), weighted by its length: a long answer
      pulls the baseline toward its own reward.
    - A group whose answers are all empty (every L_j = 0) has b = 0 / 0 = NaN, and so do its
      advantages on every position (NaN * 0 is NaN), as in verl.
    - verl's docs pair it with exactly on-policy updates (ppo_mini_batch_size = train_batch_size) and
      no entropy or KL terms; the estimator itself does not check any of that.

    Args:
        token_level_rewards: (B, L).
        response_mask: (B, L).
        index: (B,) group labels.
        epsilon, config, kwargs: unused; verl's signature.
    Returns:
        (advantages, returns), both (B, L) and equal.
    """
    check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    scores = token_level_rewards.sum(dim=-1)  # R_i
    lengths = response_mask.sum(dim=-1).to(scores.dtype)  # L_i
    group, num_groups = group_index(index, device=scores.device)

    def group_sum(values: torch.Tensor) -> torch.Tensor:  # (B,) -> (G,)
        return torch.zeros(num_groups, dtype=scores.dtype, device=scores.device).index_add_(0, group, values)

    size = torch.bincount(group, minlength=num_groups)[group]
    baseline = (group_sum(lengths * scores) / group_sum(lengths))[group]  # sum L R / sum L
    baseline = torch.where(size > 1, baseline, torch.zeros_like(baseline))  # a group of one: no baseline
    advantages = (scores - baseline).unsqueeze(-1) * response_mask
    return advantages, advantages
