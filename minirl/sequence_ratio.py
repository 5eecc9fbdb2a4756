"""One importance ratio per answer instead of one per token: GSPO and GMPO.

PPO's ratio r_t = pi_theta(a_t) / pi_old(a_t) is a product's single factor. The reward belongs to the whole answer,
whose probability ratio is the product prod_t r_t; a long answer multiplies many noisy factors, and clipping them one
by one clips at random. Both losses here look at the answer as a whole, through the (length-normalised) geometric
mean of its token ratios:

    s_i = (pi_theta(y_i) / pi_old(y_i)) ^ (1/|y_i|) = exp( mean_t log r_it )

GSPO clips s_i (one decision per answer); GMPO clips each log r_it first and optimises the geometric mean.

Mirrors verl 0.9.1's `verl/trainer/ppo/core_algos.py::compute_policy_loss_gspo` (`loss_mode=gspo`) and
`compute_policy_loss_geo_mean` (`loss_mode=geo_mean`). All tensors (B, L) unless said otherwise.
"""

from __future__ import annotations

from typing import Any

import torch

from minirl.core import agg_loss, check_same_shape, masked_mean
from minirl.policy_loss import batch_info, clip_range, ppo_kl_metric, register_policy_loss


@register_policy_loss("gspo")
def compute_policy_loss_gspo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="seq-mean-token-mean",
                             config=None, rollout_is_weights=None) -> tuple[torch.Tensor, dict[str, Any]]:
    """GSPO (Group Sequence Policy Optimization, Zheng et al. 2025, Qwen3's RL loss): PPO's clip on s_i.

        log s_i   = sum_t m_it log r_it / max(|y_i|, 1)                 the sequence's mean log-ratio
        log s_it  = sg[log s_i] + log pi_theta(a_t) - sg[log pi_theta(a_t)]     (value log s_i, clamped <= 10)
        L_it      = max(-A_it s_it, -A_it clip(s_it, 1 - eps_low, 1 + eps_high))

    The stop-gradient trick: s_it has the *value* of the sequence ratio s_i at every token, but its gradient is
    s_i * grad log pi_theta(a_t), each token's own. So every token of an answer is clipped together (all or none),
    and an unclipped answer pushes each of its tokens with the same weight s_i A_i. The paper aggregates per
    sequence (`seq-mean-token-mean`, this function's default); verl's actor passes `actor.loss_agg_mode`
    (token-mean by default), as minirl's does. No dual clip: `pg_clipfrac_lower` is logged as 0, as in verl.

    Returns (pg_loss, {actor/pg_clipfrac: fraction of valid tokens whose answer is clipped, actor/ppo_kl,
    actor/pg_clipfrac_lower: 0}).
    """
    check_same_shape(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask)
    low, high = clip_range(config)
    log_ratio = log_prob - old_log_prob                                                  # log r_it (not clamped)
    lengths = response_mask.sum(dim=-1).clamp(min=1)
    log_seq_ratio = (log_ratio * response_mask).sum(dim=-1) / lengths                    # log s_i
    log_s = log_prob - log_prob.detach() + log_seq_ratio.detach().unsqueeze(-1)          # value log s_i, grad token's
    s = torch.exp(torch.clamp(log_s, max=10.0))
    pg_losses1 = -advantages * s
    pg_losses2 = -advantages * torch.clamp(s, 1 - low, 1 + high)
    pg_losses = torch.maximum(pg_losses1, pg_losses2)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, **batch_info(config))
    return pg_loss, {
        "actor/pg_clipfrac": masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask).item(),
        "actor/ppo_kl": ppo_kl_metric(log_ratio, response_mask),
        "actor/pg_clipfrac_lower": 0.0,
    }


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                                 config=None, rollout_is_weights=None) -> tuple[torch.Tensor, dict[str, Any]]:
    """GMPO (Geometric-Mean Policy Optimization, Zhao et al. 2025): maximise the geometric mean of the clipped
    token ratios, a sequence-level objective that one outlier token cannot dominate.

        l_it   = sign(A_it) * min(sign(A_it) log r_it, sign(A_it) clip(log r_it, -eps_low, eps_high))
                                       (PPO's pessimistic clip, taken in log space, per token)
        rho_i  = exp( sum_t m_it l_it / (|y_i| + 1e-8) )         the geometric mean of the clipped ratios
        A_i    = sum_t m_it A_it / (|y_i| + 1e-8)                a sequence advantage (GRPO's is constant per row)
        L_i    = -A_i rho_i,    pg_loss = mean_i L_i              over ALL rows, whatever loss_agg_mode says

    Note the clip range is on log r (eps = 0.2 clips r at e^0.2 = 1.22), and the loss is a plain mean over rows:
    verl ignores `loss_agg_mode` and `global_batch_info` here (and so does minirl). With rollout correction, the
    token weights are folded to one per sequence by their geometric mean. Metrics: pg_clipfrac counts clipped
    tokens with A > 0, pg_clipfrac_lower those with A < 0.
    """
    check_same_shape(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask)
    low, high = clip_range(config)
    log_ratio = log_prob - old_log_prob                                                   # log r_it (not clamped)
    sign = torch.sign(advantages)
    log_ratio_clipped = torch.clamp(log_ratio, -low, high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * log_ratio_clipped)         # l_it
    lengths = response_mask.sum(dim=-1)
    rho = torch.exp((pessimistic * response_mask).sum(dim=-1) / (lengths + 1e-8))        # rho_i
    seq_advantage = (advantages * response_mask).sum(dim=-1) / (lengths + 1e-8)          # A_i
    pg_losses = -seq_advantage * rho                                                      # (B,)
    if rollout_is_weights is not None:
        seq_weights = torch.exp((torch.log(rollout_is_weights + 1e-10) * response_mask).sum(dim=-1) / (lengths + 1e-8))
        pg_losses = pg_losses * seq_weights
    clipped = torch.ne(log_ratio, log_ratio_clipped)
    return torch.mean(pg_losses), {
        "actor/pg_clipfrac": masked_mean((clipped * (advantages > 0)).float(), response_mask).item(),
        "actor/ppo_kl": ppo_kl_metric(log_ratio, response_mask),
        "actor/pg_clipfrac_lower": masked_mean((clipped * (advantages < 0)).float(), response_mask).item(),
    }
