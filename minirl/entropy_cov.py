"""Clip-Cov and KL-Cov: keep the policy's entropy from collapsing by restraining the few tokens that drive it down.

Cui et al. 2025 ("The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models") show that under
policy gradient the entropy's change per step is, to first order, minus the covariance between a token's
log-probability and its advantage: a confident token (high log pi) that is rewarded (A > 0) gets more confident,
and an unlikely one that is penalised gets less likely; both sharpen the distribution.
A handful of tokens with a large covariance

    cov_t = (A_t - mean(A)) * (log pi_theta(a_t) - mean(log pi_theta))      (means over the batch's valid tokens)

account for most of the entropy drop. The two losses act on those tokens only:

    Clip-Cov  picks a random few with cov in (clip_cov_lb, clip_cov_ub) and detaches them (no gradient at all)
    KL-Cov    picks the top kl_cov_ratio by cov and adds a penalty ppo_kl_coef * |log r| that pulls them back

Mirrors verl 0.9.1's `verl/trainer/ppo/core_algos.py::compute_policy_loss_clip_cov` (`loss_mode=clip_cov`) and
`compute_policy_loss_kl_cov` (`kl_cov`), with verl's `policy_loss.*` defaults: clip_cov_ratio 0.0002, clip_cov_lb 1.0,
clip_cov_ub 5.0, kl_cov_ratio 0.0002, ppo_kl_coef 0.1. The ratios are fractions of the batch's tokens: at 0.0002 a
batch needs 5000 tokens before more than one is picked (at least one always is). All tensors (B, L).
"""

from __future__ import annotations

from typing import Any

import torch

from minirl.core import agg_loss, check_same_shape, masked_mean
from minirl.policy_loss import batch_info, clip_range, policy_setting, register_policy_loss


def clip_cov_selection(advantages: torch.Tensor, log_prob: torch.Tensor, response_mask: torch.Tensor,
                       already_clipped: torch.Tensor, clip_cov_ratio: float, clip_cov_lb: float,
                       clip_cov_ub: float) -> torch.Tensor:
    """The (B, L) bool mask of the tokens Clip-Cov detaches.

    Candidates: valid tokens not already clipped by PPO, with clip_cov_lb < cov_t < clip_cov_ub. Of these,
    max(int(clip_cov_ratio * valid tokens), 1) are drawn at random (`torch.randperm` on the global generator, as
    verl, so seeding torch reproduces verl's pick).
    """
    valid = response_mask > 0
    with torch.no_grad():
        cov = (advantages - masked_mean(advantages, response_mask)) * (log_prob - masked_mean(log_prob, response_mask))
        cov = cov.masked_fill(~valid | already_clipped, -torch.inf)
    budget = max(int(clip_cov_ratio * response_mask.sum().item()), 1)
    candidates = torch.nonzero((cov < clip_cov_ub) & (cov > clip_cov_lb) & valid)           # (N, 2) row, column
    picked = torch.zeros_like(valid)
    if len(candidates) > 0:
        candidates = candidates[torch.randperm(len(candidates))[:budget]]
        picked[candidates[:, 0], candidates[:, 1]] = True
    return picked


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                                 config=None, rollout_is_weights=None) -> tuple[torch.Tensor, dict[str, Any]]:
    """Clip-Cov: PPO's clipped loss (no dual clip), with the gradient of a few high-covariance tokens removed.

        L_t = max(-A_t r_t, -A_t clip(r_t, 1 - eps_low, 1 + eps_high)) * (0 if t is picked else 1)

    (r_t is not clamped here, as in verl.) `actor/pg_clipfrac` is the fraction of tokens Clip-Cov picked, not the
    PPO clip fraction; no `pg_clipfrac_lower` (verl logs none).
    """
    check_same_shape(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask)
    ratio_setting = policy_setting(config, "clip_cov_ratio", 0.0002)
    if ratio_setting <= 0:
        raise ValueError(f"policy_loss.clip_cov_ratio must be > 0 (got {ratio_setting}).")
    low, high = clip_range(config)
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    already_clipped = (pg_losses2 > pg_losses1) & (response_mask > 0)
    bounds = policy_setting(config, "clip_cov_lb", 1.0), policy_setting(config, "clip_cov_ub", 5.0)
    picked = clip_cov_selection(advantages, log_prob, response_mask, already_clipped, ratio_setting, *bounds)
    pg_losses = torch.maximum(pg_losses1, pg_losses2) * (~picked).to(advantages.dtype)        # picked: no gradient
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, **batch_info(config))
    return pg_loss, {"actor/pg_clipfrac": masked_mean(picked.float(), response_mask).item(),
                     "actor/ppo_kl": masked_mean(-log_ratio, response_mask).item()}


def kl_cov_selection(advantages: torch.Tensor, log_prob: torch.Tensor, response_mask: torch.Tensor,
                     kl_cov_ratio: float) -> torch.Tensor:
    """The (B, L) bool mask of the tokens KL-Cov penalises: the max(1, int(valid tokens * kl_cov_ratio)) valid
    tokens with the largest cov_t (means over valid tokens, `torch.topk` as verl)."""
    valid = response_mask > 0
    adv = advantages[valid].detach()
    logp = log_prob[valid].detach()
    picked = torch.zeros_like(valid)
    if len(adv) == 0:
        return picked
    cov = (adv - adv.mean()) * (logp - logp.mean())
    top = torch.topk(cov, max(1, int(len(cov) * kl_cov_ratio)), largest=True).indices
    flat_valid = torch.nonzero(valid.reshape(-1), as_tuple=True)[0]
    picked.view(-1)[flat_valid[top]] = True
    return picked


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                               config=None, rollout_is_weights=None) -> tuple[torch.Tensor, dict[str, Any]]:
    """KL-Cov: the unclipped policy gradient, plus a KL-like penalty on the highest-covariance tokens.

        L_t = -A_t r_t + (ppo_kl_coef * |log r_t| if t is picked else 0)

    No clip at all (r_t is not clamped either): the penalty on the few picked tokens is the only restraint.
    verl logs only `actor/ppo_kl`, here the mean |log r| over valid tokens (an absolute value, unlike the other
    losses' signed mean).
    """
    check_same_shape(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask)
    ratio_setting = policy_setting(config, "kl_cov_ratio", 0.0002)
    if ratio_setting <= 0:
        raise ValueError(f"policy_loss.kl_cov_ratio must be > 0 (got {ratio_setting}).")
    coef = policy_setting(config, "ppo_kl_coef", 1.0)
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    picked = kl_cov_selection(advantages, log_prob, response_mask, ratio_setting)
    pg_losses = torch.where(picked, -advantages * ratio + coef * log_ratio.abs(), -advantages * ratio)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, **batch_info(config))
    return pg_loss, {"actor/ppo_kl": masked_mean(log_ratio.abs(), response_mask).item()}
