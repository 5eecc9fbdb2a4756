"""Generalized Advantage Estimation: spread the reward over the tokens with a critic's help.

Mirrors `verl/trainer/ppo/core_algos.py::compute_gae_advantage_return` (verl 0.9.1), the
`algorithm.adv_estimator=gae` branch of `ray_trainer.py::compute_advantage`. Chapter 2 reads it.
"""

from __future__ import annotations

import torch

from minirl.advantage import register_adv_est
from minirl.core import check_same_shape, masked_whiten


@register_adv_est("gae")
@torch.no_grad()
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE advantages and the critic's regression targets (returns).

    A backward scan over the response tokens, t = L-1 ... 0:

        delta_t = r_t + gamma * V_{t+1} - V_t               TD error: better or worse than the critic expected?
        A_t     = delta_t + gamma * lam * A_{t+1}           = sum_k (gamma lam)^k delta_{t+k}
        R_t     = A_t + V_t                                 the return the critic learns to predict
        advantages = masked_whiten(A) * response_mask       zero mean, unit variance over the batch's tokens

    lam trades variance for bias: lam = 1 uses the real reward-to-go (unbiased, noisy); lam = 0
    trusts the critic's one-step estimate (low variance, biased by the critic's errors). Masked
    tokens are skipped: the next value and the running A are carried over them unchanged.

    verl differs: it does not multiply the whitened advantages by the mask, so padded positions hold
    (0 - mu) / sigma there. minirl zeroes them; every loss masks them anyway, so training is the
    same, and a printed advantage tensor no longer shows numbers where there are no tokens.

    Args:
        token_level_rewards: (B, L) rewards per token (the outcome score on the last token, minus
            beta * KL on every token when the KL is in the reward).
        values: (B, L) critic values V(s_t), 0 on padding.
        response_mask: (B, L).
        gamma: discount (verl's `algorithm.gamma`, default 1.0).
        lam: GAE lambda (verl's `algorithm.lam`, default 1.0).
    Returns:
        (advantages, returns), each (B, L). Returns are computed before whitening.
    """
    check_same_shape(token_level_rewards=token_level_rewards, values=values, response_mask=response_mask)
    mask = response_mask.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0])  # V_{t+1}, 0 after the last token
    last_gae = torch.zeros_like(values[:, 0])  # A_{t+1}
    advantages_reversed = []
    for t in reversed(range(token_level_rewards.shape[-1])):
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]  # delta_t = r_t + g V_{t+1} - V_t
        gae = delta + gamma * lam * last_gae  # A_t = delta_t + g lam A_{t+1}
        # On a masked token keep what we had: it is not a step of the response.
        next_value = values[:, t] * mask[:, t] + (1 - mask[:, t]) * next_value
        last_gae = gae * mask[:, t] + (1 - mask[:, t]) * last_gae
        advantages_reversed.append(last_gae)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)
    returns = advantages + values  # R_t = A_t + V_t
    advantages = masked_whiten(advantages, response_mask) * response_mask
    return advantages, returns
