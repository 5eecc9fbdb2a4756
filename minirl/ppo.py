"""PPO's losses: the clipped policy surrogate (with decoupled and dual clip), the clipped value loss,
and the entropy bonus.

Mirrors `verl/trainer/ppo/core_algos.py` (verl 0.9.1): `compute_policy_loss_vanilla`,
`compute_value_loss`, `compute_entropy_loss`. Chapter 1 (PPO) reads this file.

Notation, per response token t (all tensors (B, L)):
    r_t = pi_theta(a_t | s_t) / pi_old(a_t | s_t) = exp(log_prob - old_log_prob)     the ratio
    A_t                                                                               the advantage
"""

from __future__ import annotations

import torch

from minirl.core import agg_loss, check_same_shape, clip_by_value, entropy_from_logits, masked_mean


def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: dict | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate loss (to minimise), with decoupled clip range and dual clip.

    Mirrors `verl/trainer/ppo/core_algos.py::compute_policy_loss_vanilla` (verl's `loss_mode=vanilla`;
    verl reads the clip ratios from `actor_rollout_ref.actor.clip_ratio_low/high/c`).

        r      = exp(clamp(log_prob - old_log_prob, -20, 20))      (clamped so exp cannot overflow)
        L1     = -A * r
        L2     = -A * clip(r, 1 - clip_ratio_low, 1 + clip_ratio_high)
        C1     = max(L1, L2)                                        the PPO clip (pessimistic bound)
        C2     = min(C1, -A * clip_ratio_c)                         dual clip: only used when A < 0
        loss_t = C2 if A < 0 else C1,   times rollout_is_weights if given
        pg_loss = agg_loss(loss_t, response_mask, loss_agg_mode)

    Where a token is clipped, its loss does not depend on log_prob: its gradient is 0. That is the
    "safety rope": a token whose ratio already moved past 1 +- eps in the helpful direction stops
    pulling. Dual clip caps the loss of a bad token (A < 0) whose ratio exploded above c.

    Args:
        old_log_prob: (B, L) log-probs of the sampled tokens under the policy that generated them
            (recomputed by the actor before the update).
        log_prob: (B, L) log-probs under the policy being trained (carries the gradient).
        advantages: (B, L).
        response_mask: (B, L) tokens that count.
        loss_agg_mode: see `minirl.core.agg_loss`.
        clip_ratio_low, clip_ratio_high: eps below and above 1 (DAPO's clip-higher: 0.2 / 0.28).
        clip_ratio_c: dual-clip bound, must be > 1.
        rollout_is_weights: (B, L) optional importance weights from rollout correction (detached).
        global_batch_info: {"dp_size", "batch_num_tokens", "global_batch_size"} for several processes,
            passed on to `agg_loss` (verl's `config.global_batch_info`); None for one process.
    Returns:
        (pg_loss, metrics): a scalar tensor, and floats `actor/pg_clipfrac` (fraction of tokens where
        the clip was active), `actor/ppo_kl` (mean of old - new log-prob, an estimate of KL(old||new))
        and `actor/pg_clipfrac_lower` (fraction where the dual clip was active).
    """
    check_same_shape(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask)
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 (dual-clip PPO bound), got {clip_ratio_c}.")
    negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)  # log r
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)

    pg_losses1 = -advantages * ratio                                                     # L1 = -A r
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)  # L2 = -A clip(r)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)                              # C1 = max(L1, L2)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)

    pg_losses3 = -advantages * clip_ratio_c                                              # L3 = -A c
    clip_pg_losses2 = torch.minimum(pg_losses3, clip_pg_losses1)                         # C2 = min(L3, C1)
    pg_clipfrac_lower = masked_mean(torch.gt(clip_pg_losses1, pg_losses3) * (advantages < 0).float(), response_mask)

    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, **(global_batch_info or {}))
    metrics = {
        "actor/pg_clipfrac": pg_clipfrac.item(),
        "actor/ppo_kl": ppo_kl.item(),
        "actor/pg_clipfrac_lower": pg_clipfrac_lower.item(),
    }
    return pg_loss, metrics


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    dp_size: int = 1,
    batch_num_tokens: float | None = None,
    global_batch_size: float | None = None,
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The critic's clipped value loss.

    Mirrors `verl/trainer/ppo/core_algos.py::compute_value_loss` (verl 0.9.1).

        V_clip  = clip(vpreds, values - c, values + c)          c = cliprange_value (critic.cliprange_value)
        vf_loss = 0.5 * agg_loss(max((vpreds - R)^2, (V_clip - R)^2))

    Like the policy clip, it keeps the new value prediction from moving more than c away from the
    value seen at rollout time, by taking the larger (pessimistic) of the two errors.

    Args:
        vpreds: (B, L) current critic predictions (carry the gradient).
        returns: (B, L) targets R (from GAE: advantages + values).
        values: (B, L) critic predictions made at rollout time.
        response_mask: (B, L).
        cliprange_value: c.
        loss_agg_mode, dp_size, batch_num_tokens, global_batch_size, loss_scale_factor: see
            `minirl.core.agg_loss`.
    Returns:
        (vf_loss, vf_clipfrac): scalar loss and the fraction of tokens where the clipped error was larger.
    """
    check_same_shape(vpreds=vpreds, returns=returns, values=values, response_mask=response_mask)
    vpredclipped = clip_by_value(vpreds, values - cliprange_value, values + cliprange_value)
    vf_losses1 = (vpreds - returns) ** 2
    vf_losses2 = (vpredclipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(torch.max(vf_losses1, vf_losses2), response_mask, loss_agg_mode, dp_size,
                             batch_num_tokens, global_batch_size, loss_scale_factor)
    vf_clipfrac = masked_mean(torch.gt(vf_losses2, vf_losses1).float(), response_mask)
    return vf_loss, vf_clipfrac


def compute_entropy_loss(logits: torch.Tensor, response_mask: torch.Tensor, loss_agg_mode: str = "token-mean"):
    """Mean entropy of the next-token distributions over the response tokens.

    Mirrors `verl/trainer/ppo/core_algos.py::compute_entropy_loss`. The actor's total loss subtracts
    `entropy_coeff * entropy` (a bonus for staying exploratory); verl logs it as `actor/entropy`.

    Args:
        logits: (B, L, V).
        response_mask: (B, L).
    Returns:
        Scalar tensor: agg_loss(entropy_from_logits(logits), response_mask, loss_agg_mode).
    """
    if logits.shape[:-1] != response_mask.shape:
        raise ValueError(f"shape mismatch: logits {tuple(logits.shape)} should be response_mask "
                         f"{tuple(response_mask.shape)} plus a vocabulary dimension.")
    return agg_loss(entropy_from_logits(logits), response_mask, loss_agg_mode)
