"""Other ways to keep an update near the sampling policy: a smooth gate (SAPO), a clipped weight that keeps every
token's gradient (CISPO), and trust regions measured on probabilities instead of ratios (DPPO).

PPO's hard clip sets a token's gradient to exactly 0 once its ratio leaves [1 - eps, 1 + eps] in the direction the
advantage pushes. Each loss here changes that rule; Chapter 11 draws the gradient weight each gives a token as a
function of its ratio. With r_t = pi_theta(a_t) / pi_old(a_t), the gradient of every loss below is
w(r_t) * A_t * grad log pi_theta(a_t), and the losses differ only in w:

    PPO (vanilla)  w = r inside the clip range, 0 outside (on the side A pushes toward)
    SAPO           w = r * 4 sigma(tau (r - 1)) (1 - sigma(tau (r - 1)))   a bump at r = 1 that decays smoothly
    CISPO          w = clip(r, 1 - eps_low, 1 + eps_high)                  never 0: bounded, not cut
    DPPO-TV/KL     w = min(r, c) inside the trust region, 0 outside        the region is on pi - pi_old, not r

Mirrors verl 0.9.1's `verl/trainer/ppo/core_algos.py::compute_policy_loss_sapo` (`loss_mode=sapo`),
`compute_policy_loss_cispo` (`cispo`), `compute_policy_loss_dppo_tv` (`dppo_tv`), `compute_policy_loss_dppo_kl`
(`dppo_kl`). All tensors (B, L).
"""

from __future__ import annotations

from typing import Any

import torch

from minirl.core import agg_loss, check_same_shape, masked_mean
from minirl.policy_loss import batch_info, clip_range, ppo_kl_metric, register_policy_loss


def sapo_gate(ratio: torch.Tensor, tau: torch.Tensor | float) -> torch.Tensor:
    """SAPO's gate f(r) = sigma(tau (r - 1)) * 4 / tau: f(1) = 2/tau, slope 1 at r = 1 (like r itself), flat far
    away. Its derivative, the gradient weight per unit of r, is 4 sigma (1 - sigma) <= 1."""
    return torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)


@register_policy_loss("sapo")
def compute_policy_loss_sapo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="seq-mean-token-mean",
                             config=None, rollout_is_weights=None) -> tuple[torch.Tensor, dict[str, Any]]:
    """SAPO (Soft Adaptive Policy Optimization, Gao et al. 2025): replace the clip by a temperature-controlled gate.

        r_t    = exp(clamp(log pi_theta - log pi_old, -20, 20))
        tau_t  = tau_pos if A_t > 0 else tau_neg          (`actor.tau_pos` 1.0, `actor.tau_neg` 1.05)
        L_t    = -f(r_t; tau_t) A_t,     f(r; tau) = sigma(tau (r - 1)) 4 / tau

    d L / d log pi = -A r 4 sigma (1 - sigma): the full PPO gradient at r = 1, fading smoothly as r moves away
    (a larger tau fades faster). tau_neg > tau_pos damps tokens with negative advantage sooner, which the paper
    finds stabilises training. No hard clip, so pg_clipfrac and pg_clipfrac_lower are logged as 0 (as verl).

    verl aggregates SAPO with `seq-mean-token-mean` whatever `loss_agg_mode` says (the argument is ignored), and
    so does minirl; `loss_agg_mode` still applies to the entropy and KL losses.
    """
    check_same_shape(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask)
    tau_pos = torch.as_tensor(getattr(config, "tau_pos", 1.0), dtype=advantages.dtype, device=advantages.device)
    tau_neg = torch.as_tensor(getattr(config, "tau_neg", 1.05), dtype=advantages.dtype, device=advantages.device)
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    taus = torch.where(advantages > 0, tau_pos, tau_neg)
    pg_losses = -sapo_gate(ratio, taus) * advantages
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, "seq-mean-token-mean", **batch_info(config))
    return pg_loss, {"actor/pg_clipfrac": 0.0, "actor/ppo_kl": ppo_kl_metric(log_ratio, response_mask),
                     "actor/pg_clipfrac_lower": 0.0}


@register_policy_loss("cispo")
def compute_policy_loss_cispo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                              config=None, rollout_is_weights=None) -> tuple[torch.Tensor, dict[str, Any]]:
    """CISPO (Clipped IS-weight Policy Optimization, MiniMax-M1 2025): clip the importance weight, not the update.

        r_t  = exp(clamp(log pi_theta - log pi_old, -20, 20))
        L_t  = -sg[clip(r_t, 1 - eps_low, 1 + eps_high)] A_t log pi_theta(a_t)

    The clipped ratio is a detached weight, so a token outside the range still gets gradient clip(r) A grad log pi:
    bounded, never zero. PPO drops those tokens entirely, and the paper's point is that the dropped ones are often
    the rare "reflection" tokens (however, wait, ...) that long reasoning needs. pg_clipfrac counts tokens whose
    weight was clipped; pg_clipfrac_lower is 0 (as verl).
    """
    check_same_shape(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask)
    low, high = clip_range(config)
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1 - low, 1 + high)
    pg_losses = -clipped_ratio.detach() * advantages * log_prob                       # sg[clip(r)] A log pi
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, **batch_info(config))
    return pg_loss, {"actor/pg_clipfrac": masked_mean((ratio != clipped_ratio).float(), response_mask).item(),
                     "actor/ppo_kl": ppo_kl_metric(log_ratio, response_mask), "actor/pg_clipfrac_lower": 0.0}


def _dppo_loss(log_ratio, log_prob, advantages, response_mask, valid_mask, loss_agg_mode, config, rollout_is_weights):
    """DPPO's shared tail: L_t = -A_t sg[min(r_t, c)] log pi_theta(a_t) on tokens inside the trust region.

    c is `actor.clip_ratio_c` (3.0 by default: verl's comment recommends a large value such as 20, "to avoid the
    truncation bias", and falls back to 20 only when the key is absent, which it never is in verl's config)."""
    ratio = torch.exp(log_ratio)
    clip_ratio_c = getattr(config, "clip_ratio_c", 20.0)
    truncated = torch.clamp(ratio, max=clip_ratio_c).detach()
    valid_mask = valid_mask.detach().float()
    pg_losses = -advantages * truncated * log_prob * valid_mask
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, **batch_info(config))
    return pg_loss, {
        "actor/pg_clipfrac": masked_mean(1.0 - valid_mask, response_mask).item(),            # outside the region
        "actor/ppo_kl": ppo_kl_metric(log_ratio, response_mask),
        "actor/pg_clipfrac_lower": masked_mean((ratio > clip_ratio_c).float() * valid_mask, response_mask).item(),
    }


@register_policy_loss("dppo_tv")
def compute_policy_loss_dppo_tv(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                                config=None, rollout_is_weights=None) -> tuple[torch.Tensor, dict[str, Any]]:
    """DPPO-Binary-TV (Divergence PPO, 2026): a trust region on the sampled token's probability, not its ratio.

        valid_t = (pi_theta - pi_old <= delta_high) if A_t > 0 else (pi_theta - pi_old >= -delta_low)
        L_t     = -A_t sg[min(r_t, c)] log pi_theta(a_t) * valid_t

    A ratio clip treats a rare token (pi_old = 0.001 -> 0.002, r = 2) as a big move and a common one (0.5 -> 0.9,
    r = 1.8) as a smaller one; in probability, the second moved 400 times more. The thresholds delta are read from
    `clip_ratio_low/high` (here they are differences of probability, not ratios). pg_clipfrac: tokens outside the
    region; pg_clipfrac_lower: valid tokens whose ratio exceeded c.
    """
    check_same_shape(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask)
    low, high = clip_range(config)
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    moved = torch.exp(log_prob) - torch.exp(old_log_prob)                                 # pi_theta - pi_old
    valid = torch.where(advantages > 0, moved <= high, moved >= -low)
    return _dppo_loss(log_ratio, log_prob, advantages, response_mask, valid, loss_agg_mode, config,
                      rollout_is_weights)


@register_policy_loss("dppo_kl")
def compute_policy_loss_dppo_kl(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                                config=None, rollout_is_weights=None) -> tuple[torch.Tensor, dict[str, Any]]:
    """DPPO-Binary-KL: as `dppo_tv`, with the region measured by the KL of the two-outcome distribution
    "this token / any other token":

        D_t     = p log(p / q) + (1 - p) log((1 - p + 1e-8) / (1 - q + 1e-8)),   p = pi_old(a_t), q = pi_theta(a_t)
        valid_t = (D_t <= delta_high or q <= p) if A_t > 0 else (D_t <= delta_low or q >= p)

    Only a move in the direction the advantage pushes is limited (a positive-advantage token that lost probability
    always stays in the region).
    """
    check_same_shape(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask)
    low, high = clip_range(config)
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    prob, old_prob = torch.exp(log_prob), torch.exp(old_log_prob)
    binary_kl = old_prob * (old_log_prob - log_prob) + (1 - old_prob) * torch.log(
        (1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8))
    valid = torch.where(advantages > 0, (binary_kl <= high) | (prob <= old_prob),
                        (binary_kl <= low) | (prob >= old_prob))
    return _dppo_loss(log_ratio, log_prob, advantages, response_mask, valid, loss_agg_mode, config,
                      rollout_is_weights)
