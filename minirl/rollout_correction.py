"""Rollout correction: the policy that sampled the data is not quite the policy being trained.

A fast inference engine (vLLM, SGLang) samples with its own kernels, precision and sometimes stale
weights; the trainer then recomputes log-probs with its own. Their ratio measures the mismatch:

    log_ratio_t = old_log_prob_t - rollout_log_prob_t = log( pi_train(a_t) / pi_rollout(a_t) )

Two remedies, usable together:
    importance sampling (IS): weight each token's loss by a truncated exp(log_ratio)
    rejection sampling (RS):  drop tokens or whole sequences whose divergence is too large

and two ways to run them (`algorithm.rollout_correction.bypass_mode`):
    decoupled (default): three policies. The actor recomputes pi_old; PPO's ratio is pi_theta / pi_old,
        and IS weights pi_old / pi_rollout, computed once per batch, correct for the rollout.
    bypass: two policies. pi_old := pi_rollout (no recomputation); the loss itself compares the
        policy being trained with the rollout (`compute_policy_loss_bypass_mode`), either with PPO's
        clipped ratio (`loss_type=ppo_clip`) or REINFORCE with explicit IS weights (`reinforce`).

Mirrors verl 0.9.1 `verl/trainer/ppo/rollout_corr_helper.py`: `compute_rollout_correction_weights`,
`compute_rollout_rejection_mask`, `compute_offpolicy_metrics`; and `verl/trainer/ppo/core_algos.py`:
`compute_policy_loss_reinforce`, `compute_policy_loss_bypass_mode`. verl's helpers return bare metric
names and their caller adds the `rollout_corr/` prefix; minirl returns the final prefixed names.
verl differs: its rejection mask also logs per-option statistics (`rollout_rs_<option>_mean`, ...);
minirl logs only the masked fractions. Chapter 9 reads this file.
"""

from __future__ import annotations

import math

import torch

from minirl.core import agg_loss, check_same_shape, masked_mean, masked_sum
from minirl.ppo import compute_policy_loss

SAFETY_BOUND = 20.0  # log-ratios are clamped to [-20, 20] before exp, so weights stay finite
ROLLOUT_IS_LEVELS = ("token", "sequence")
BYPASS_LOSS_TYPES = ("ppo_clip", "reinforce")
ROLLOUT_RS_OPTIONS = (
    "token_k1", "token_k2", "token_k3",
    "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3",
    "seq_max_k2", "seq_max_k3",
)  # fmt: skip
PREFIX = "rollout_corr/"


def _parse_is_threshold(threshold: float | str) -> tuple[float, float | None]:
    """2.0 -> (upper 2.0, no lower: truncated IS); "0.5_5.0" -> (5.0, 0.5): IcePop, weights outside -> 0."""
    if isinstance(threshold, bool) or not isinstance(threshold, int | float | str):
        raise ValueError(f"rollout_is_threshold must be a number (e.g. 2.0) or 'lower_upper' (e.g. '0.5_5.0'), "
                         f"got {threshold!r}.")
    lower = None
    try:
        if isinstance(threshold, str) and "_" in threshold:
            lower_text, upper_text = threshold.split("_", 1)
            lower, upper = float(lower_text), float(upper_text)
        else:
            upper = float(threshold)
    except ValueError:
        raise ValueError(f"rollout_is_threshold {threshold!r} is not a number or 'lower_upper'.") from None
    if upper <= 0 or (lower is not None and not 0 < lower <= upper):
        raise ValueError(f"rollout_is_threshold {threshold!r}: bounds must be positive with lower <= upper.")
    return upper, lower


def compute_rollout_correction_weights(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str = "token",
    rollout_is_threshold: float | str = 2.0,
    rollout_is_batch_normalize: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance weights pi_train / pi_rollout, per token or per sequence.

        token:     w_t = exp(clamp(log_ratio_t, -20, 20)) * m_t
        sequence:  w_t = exp(clamp(sum_s m_s log_ratio_s, -20, 20)) * m_t     (one weight per sequence)
        TIS:       w = min(w, threshold)                 threshold a number (default 2.0, upper only)
        IcePop:    w = w if lower <= w <= upper else 0   threshold "lower_upper"
        batch normalise (optional): w / mean(w) over valid tokens (token) or sequences (sequence)

    The weights are detached: they rescale each token's policy-gradient loss
    (`compute_policy_loss(..., rollout_is_weights=w)`), they are not trained through.

    Args:
        log_ratio: (B, L) old_log_prob - rollout_log_prob.
        response_mask: (B, L); must contain at least one valid token.
        rollout_is: "token" or "sequence" (verl's `algorithm.rollout_correction.rollout_is`).
        rollout_is_threshold: see above (`rollout_is_threshold`).
        rollout_is_batch_normalize: `rollout_is_batch_normalize`.
    Returns:
        (weights (B, L), metrics): `rollout_corr/rollout_is_mean`, `_max`, `_min`, `_std`,
        `_eff_sample_size`, `_ratio_fraction_high/low`, `_seq_mean/std/max/min/max_deviation`,
        `_seq_fraction_high/low`, and `_batch_norm_factor` / `_oob_ratio` when they apply.
    """
    if rollout_is not in ROLLOUT_IS_LEVELS:
        raise ValueError(f"invalid rollout_is {rollout_is!r}; valid choices: {ROLLOUT_IS_LEVELS}.")
    check_same_shape(log_ratio=log_ratio, response_mask=response_mask)
    if not response_mask.any():
        raise ValueError("response_mask has no valid token: there is nothing to weight.")
    upper, lower = _parse_is_threshold(rollout_is_threshold)
    if rollout_is == "token":
        log_ratio_for_metrics = log_ratio
        raw = torch.exp(torch.clamp(log_ratio, -SAFETY_BOUND, SAFETY_BOUND))
    else:
        log_ratio_for_metrics = masked_sum(log_ratio, response_mask, axis=-1).unsqueeze(-1)  # (B, 1)
        raw = torch.exp(torch.clamp(log_ratio_for_metrics, -SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    raw = raw * response_mask
    if lower is None:
        weights = raw.clamp(max=upper)  # truncated IS: only large weights are cut
    else:
        weights = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))  # IcePop

    metrics = _is_metrics(weights, raw, log_ratio_for_metrics, response_mask, rollout_is, upper, lower)
    if lower is not None:
        out_of_bounds = (raw < lower) | (raw > upper)
        metrics["rollout_is_oob_ratio"] = masked_mean(out_of_bounds.float(), response_mask).item()
    weights = weights.detach()
    if rollout_is_batch_normalize:
        if rollout_is == "token":
            weights_mean = masked_mean(weights, response_mask)
        else:
            seq_weights = masked_mean(weights, response_mask, axis=-1)
            seq_valid = (response_mask.sum(dim=-1) > 0).to(weights.dtype)
            weights_mean = (seq_weights * seq_valid).sum() / seq_valid.sum().clamp_min(1e-8)
        if weights_mean > 1e-8:
            weights = weights / weights_mean
            metrics["rollout_is_batch_norm_factor"] = weights_mean.item()
        else:
            metrics["rollout_is_batch_norm_factor"] = 1.0
    return weights, {PREFIX + key: value for key, value in metrics.items()}


def _is_metrics(weights, raw, log_ratio_for_metrics, response_mask, rollout_is, upper, lower) -> dict[str, float]:
    """Diagnostics of the IS weights (verl's `compute_is_metrics`), unprefixed."""
    lower_for_metrics = 1.0 / upper if lower is None else lower
    metrics = {"rollout_is_mean": masked_mean(weights, response_mask).item()}
    if rollout_is == "sequence":
        metrics["rollout_is_max"] = math.exp(min(log_ratio_for_metrics.max().item(), SAFETY_BOUND))
        metrics["rollout_is_min"] = math.exp(log_ratio_for_metrics.min().item())
        metrics["rollout_is_ratio_fraction_high"] = (log_ratio_for_metrics > math.log(upper)).float().mean().item()
        metrics["rollout_is_ratio_fraction_low"] = (
            (log_ratio_for_metrics < math.log(lower_for_metrics)).float().mean().item())
    else:
        valid = response_mask.bool()
        metrics["rollout_is_ratio_fraction_high"] = masked_mean((raw > upper).float(), response_mask).item()
        metrics["rollout_is_ratio_fraction_low"] = masked_mean((raw < lower_for_metrics).float(), response_mask).item()
        metrics["rollout_is_max"] = weights.masked_fill(~valid, float("-inf")).max().item()
        metrics["rollout_is_min"] = weights.masked_fill(~valid, float("inf")).min().item()
    clamped = weights.clamp(min=0.0, max=upper)
    mean_clamped = masked_mean(clamped, response_mask)
    if response_mask.sum() > 1:
        variance = masked_mean(clamped.square(), response_mask) - mean_clamped.square()
        metrics["rollout_is_std"] = torch.sqrt(torch.clamp(variance, min=0.0)).item()
    else:
        metrics["rollout_is_std"] = 0.0
    normalized = clamped / (mean_clamped + 1e-8)
    metrics["rollout_is_eff_sample_size"] = 1.0 / masked_mean(normalized.square(), response_mask).item()
    seq_means = masked_mean(weights, response_mask, axis=-1)
    metrics["rollout_is_seq_mean"] = seq_means.mean().item()
    metrics["rollout_is_seq_std"] = seq_means.std().item() if seq_means.numel() > 1 else 0.0
    metrics["rollout_is_seq_max"] = seq_means.max().item()
    metrics["rollout_is_seq_min"] = seq_means.min().item()
    metrics["rollout_is_seq_max_deviation"] = (seq_means - 1.0).abs().max().item()
    raw_seq_means = masked_mean(raw, response_mask, axis=-1)
    metrics["rollout_is_seq_fraction_high"] = (raw_seq_means > upper).float().mean().item()
    metrics["rollout_is_seq_fraction_low"] = (raw_seq_means < lower_for_metrics).float().mean().item()
    return metrics


def _parse_rs_thresholds(options: list[str], threshold: float | str | None) -> dict[str, tuple[float, float]]:
    """One threshold for all options, or one per option (comma separated). k1 options take 'lower_upper'
    or a single upper (then lower = 1 / upper); k2/k3 options take a single positive upper bound."""
    if threshold is None:
        raise ValueError("rollout_rs_threshold is required for rejection sampling, e.g. 2.0 or '0.5_2.0'.")
    specs = [threshold] if isinstance(threshold, int | float) else [s.strip() for s in str(threshold).split(",")]
    specs = [s for s in specs if str(s)]
    if len(specs) == 1:
        specs = specs * len(options)
    if len(specs) != len(options):
        raise ValueError(f"rollout_rs_threshold gives {len(specs)} thresholds for {len(options)} options "
                         f"{options}; give one shared threshold or exactly one per option.")
    bounds = {}
    for option, spec in zip(options, specs):
        text = str(spec)
        try:
            if option.endswith("k1"):
                lower, upper = (float(x) for x in text.split("_", 1)) if "_" in text else (1 / float(text), float(text))
                if not 0 < lower <= upper:
                    raise ValueError
            else:
                lower, upper = 0.0, float(text)
                if upper <= 0 or "_" in text:  # float() would read "0.5_2" as 0.52
                    raise ValueError
        except ValueError:
            form = "'lower_upper' or one positive number" if option.endswith("k1") else "one positive number"
            raise ValueError(f"rollout_rs_threshold {text!r} for option {option!r} must be {form}.") from None
        bounds[option] = (lower, upper)
    return bounds


def compute_rollout_rejection_mask(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_rs: str = "token_k1",
    rollout_rs_threshold: float | str | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Drop tokens or sequences whose train/rollout divergence leaves a trust region.

    With l = clamp(log_ratio, -20, 20), three per-token divergences:

        k1 = -l = log(pi_rollout / pi_train)     kept if log(lower) <= stat <= log(upper)
        k2 = l^2 / 2                             kept if stat <= upper
        k3 = e^l - 1 - l                         kept if stat <= upper

    `token_kN` tests each token; `seq_sum_kN`, `seq_mean_kN`, `seq_max_kN` test one statistic per
    sequence (masked sum / mean / max over its tokens) and keep or drop the whole sequence.
    Several options, comma separated, must all pass.

    Args:
        log_ratio: (B, L) old_log_prob - rollout_log_prob.
        response_mask: (B, L).
        rollout_rs: options from ROLLOUT_RS_OPTIONS, comma separated (`algorithm.rollout_correction.rollout_rs`).
        rollout_rs_threshold: see `_parse_rs_thresholds` (`rollout_rs_threshold`).
    Returns:
        (mask, metrics): the response mask with rejected tokens set to 0 (same dtype), and
        `rollout_corr/rollout_rs_<option>_masked_fraction`, `..._seq_masked_fraction`,
        `rollout_corr/rollout_rs_masked_fraction`, `rollout_corr/rollout_rs_seq_masked_fraction`.
    """
    check_same_shape(log_ratio=log_ratio, response_mask=response_mask)
    options = list(dict.fromkeys(o.strip() for o in str(rollout_rs).split(",") if o.strip()))
    unknown = [o for o in options if o not in ROLLOUT_RS_OPTIONS]
    if not options or unknown:
        raise ValueError(f"invalid rollout_rs option(s) {unknown or rollout_rs!r}; "
                         f"valid choices: {ROLLOUT_RS_OPTIONS}.")
    bounds = _parse_rs_thresholds(options, rollout_rs_threshold)
    if log_ratio.shape[0] == 0:
        return response_mask, {}

    safe = torch.clamp(log_ratio, -SAFETY_BOUND, SAFETY_BOUND)
    per_token = {"k1": -safe, "k2": 0.5 * safe**2, "k3": torch.exp(safe) - 1.0 - safe}
    valid = response_mask.bool()
    seq_valid = valid.any(dim=-1)
    combined = torch.ones_like(log_ratio)
    metrics: dict[str, float] = {}
    for option in options:
        lower, upper = bounds[option]
        estimator = option[-2:]
        stat = per_token[estimator]
        if option.startswith("seq_sum"):
            stat = masked_sum(stat, response_mask, axis=-1).unsqueeze(-1)
        elif option.startswith("seq_mean"):
            stat = masked_mean(stat, response_mask, axis=-1).unsqueeze(-1)
        elif option.startswith("seq_max"):
            stat = stat.masked_fill(~valid, float("-inf")).max(dim=-1, keepdim=True).values
            stat = torch.where(torch.isinf(stat), torch.zeros_like(stat), stat)  # empty row -> 0
        if estimator == "k1":
            keep = (stat >= math.log(lower)) & (stat <= math.log(upper))
        else:
            keep = stat <= upper
        keep = keep.expand_as(log_ratio).to(log_ratio.dtype)
        combined = combined * keep
        seq_kept = ~((keep == 0) & valid).any(dim=-1)
        metrics[f"rollout_rs_{option}_masked_fraction"] = masked_mean(1 - keep, response_mask).item()
        seq_rejected = (1.0 - seq_kept.to(log_ratio.dtype)) * seq_valid.float()
        metrics[f"rollout_rs_{option}_seq_masked_fraction"] = (
            (seq_rejected.sum() / seq_valid.float().sum()).item() if seq_valid.any() else 0.0)
    metrics["rollout_rs_masked_fraction"] = masked_mean(1 - combined, response_mask).item()
    metrics["rollout_rs_seq_masked_fraction"] = ((combined <= 0.5) & valid).any(dim=-1).float().mean().item()
    new_mask = (response_mask * combined).to(response_mask.dtype)
    return new_mask, {PREFIX + key: value for key, value in metrics.items()}


def compute_offpolicy_metrics(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor | None, response_mask: torch.Tensor
) -> dict[str, float]:
    """How far apart the training and rollout policies are on this batch (all under `rollout_corr/`).

        training_ppl / rollout_ppl     mean over sequences of exp(-mean token log-prob)
        kl                             masked mean of rollout_log_prob - old_log_prob   (k1 KL(rollout||train))
        k3_kl                          masked mean of e^r - r - 1 with r = old - rollout
        log_ppl_diff (+ abs/max/min)   per-sequence mean log-prob, rollout minus training
        ppl_ratio                      mean over sequences of exp(log_ppl_diff)
        chi2_token, chi2_seq           E[rho^2] - 1 per token / per sequence (rho = pi_train/pi_rollout)

    Healthy: kl and k3_kl near 0 (below ~1e-3), ppl_ratio near 1. Mirrors
    `verl/trainer/ppo/rollout_corr_helper.py::compute_offpolicy_metrics`.

    Args:
        old_log_prob: (B, L) training-side log-probs.
        rollout_log_prob: (B, L) rollout-side log-probs, or None (then only the training_* metrics).
        response_mask: (B, L) with at least one valid token.
    """
    if not response_mask.any():
        raise ValueError("response_mask has no valid token: off-policy metrics need at least one.")
    mean_train = masked_mean(old_log_prob, response_mask, axis=-1)  # (B,)
    metrics = {
        "training_ppl": torch.exp(-mean_train).mean().item(),
        "training_log_ppl": (-mean_train).mean().item(),
    }
    if rollout_log_prob is not None:
        check_same_shape(old_log_prob=old_log_prob, rollout_log_prob=rollout_log_prob, response_mask=response_mask)
        log_ratio = old_log_prob - rollout_log_prob
        mean_rollout = masked_mean(rollout_log_prob, response_mask, axis=-1)
        log_ppl_diff = mean_rollout - mean_train
        rho = torch.exp(torch.clamp(log_ratio, -SAFETY_BOUND, SAFETY_BOUND))
        seq_log_ratio = torch.clamp(masked_sum(log_ratio, response_mask, axis=-1), -SAFETY_BOUND, SAFETY_BOUND)
        metrics.update({
            "kl": masked_mean(rollout_log_prob - old_log_prob, response_mask).item(),
            "k3_kl": masked_mean(torch.exp(log_ratio) - log_ratio - 1, response_mask).item(),
            "rollout_ppl": torch.exp(-mean_rollout).mean().item(),
            "rollout_log_ppl": (-mean_rollout).mean().item(),
            "log_ppl_diff": log_ppl_diff.mean().item(),
            "log_ppl_abs_diff": log_ppl_diff.abs().mean().item(),
            "log_ppl_diff_max": log_ppl_diff.max().item(),
            "log_ppl_diff_min": log_ppl_diff.min().item(),
            "ppl_ratio": torch.exp(log_ppl_diff).mean().item(),
            "chi2_token": (masked_mean(rho.square(), response_mask) - 1.0).item(),
            "chi2_seq": (torch.exp(2.0 * seq_log_ratio).mean() - 1.0).item(),
        })
    return {PREFIX + key: value for key, value in metrics.items()}


def compute_rollout_correction_and_rejection_mask(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor, correction
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """All of rollout correction on one batch: IS weights, the rejection mask and the off-policy metrics.

    Mirrors `verl/trainer/ppo/rollout_corr_helper.py::compute_rollout_correction_and_rejection_mask`. The
    decoupled mode calls it once per batch (the trainer, before the advantages); bypass mode calls it in
    every micro-batch's loss, with the policy being trained as `old_log_prob`.

    Args:
        old_log_prob, rollout_log_prob, response_mask: (B, L).
        correction: the `algorithm.rollout_correction` config (rollout_is, rollout_is_threshold,
            rollout_is_batch_normalize, rollout_rs, rollout_rs_threshold).
    Returns:
        (weights, mask, metrics): weights (B, L) or None when rollout_is is null; the response mask with
        rejected tokens set to 0 (the same mask when rollout_rs is null); every `rollout_corr/*` metric.
    """
    log_ratio = old_log_prob - rollout_log_prob
    metrics = compute_offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask)
    weights, mask = None, response_mask
    if correction.rollout_is is not None:
        weights, is_metrics = compute_rollout_correction_weights(
            log_ratio, response_mask, correction.rollout_is, correction.rollout_is_threshold,
            correction.rollout_is_batch_normalize)
        metrics.update(is_metrics)
    if correction.rollout_rs is not None:
        mask, rs_metrics = compute_rollout_rejection_mask(log_ratio, response_mask, correction.rollout_rs,
                                                          correction.rollout_rs_threshold)
        metrics.update(rs_metrics)
    return weights, mask, metrics


def compute_policy_loss_reinforce(
    rollout_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-sum",
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: dict | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """REINFORCE's loss with optional IS weights: no ratio, no clip.

        loss_t  = -A_t * log pi_theta(a_t) * w_t          (w_t = 1 without IS; w is detached)
        pg_loss = agg_loss(loss_t, response_mask, loss_agg_mode)
        ppo_kl  = masked mean of rollout_log_prob - log_prob      (k1 KL(rollout || theta))

    Mirrors `verl/trainer/ppo/core_algos.py::compute_policy_loss_reinforce`. All tensors (B, L).
    Returns (pg_loss, {"actor/ppo_kl": ...}).
    """
    check_same_shape(rollout_log_prob=rollout_log_prob, log_prob=log_prob, advantages=advantages,
                     response_mask=response_mask)
    pg_losses = -advantages * log_prob
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, **(global_batch_info or {}))
    ppo_kl = masked_mean(rollout_log_prob - log_prob, response_mask)
    return pg_loss, {"actor/ppo_kl": ppo_kl.item()}


def compute_policy_loss_bypass_mode(
    rollout_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    correction,
    loss_agg_mode: str = "token-mean",
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    global_batch_info: dict | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The policy loss of bypass mode, where the rollout's log-probs stand in for pi_old.

    The IS weights and the rejection mask are computed here, per micro-batch, from the policy
    being trained against the rollout: log_ratio = stopgrad(log_prob) - rollout_log_prob.

        ppo_clip:   PPO's clipped loss with ratio pi_theta / pi_rollout. The ratio already is the
                    importance weight (and the clip bounds it), so IS weights are only logged.
        reinforce:  -A * log pi_theta * w with w the truncated IS weight (none if rollout_is is null).
        Both:       the rejection mask (rollout_rs) removes tokens from the loss.

    Mirrors `verl/trainer/ppo/core_algos.py::compute_policy_loss_bypass_mode`.

    Args:
        rollout_log_prob, log_prob, advantages, response_mask: (B, L); log_prob carries the gradient.
        correction: the `algorithm.rollout_correction` config (loss_type, rollout_is, rollout_is_threshold,
            rollout_is_batch_normalize, rollout_rs, rollout_rs_threshold).
        loss_agg_mode, clip_ratio_*, global_batch_info: as in `minirl.ppo.compute_policy_loss`.
    Returns:
        (pg_loss, metrics): the loss's own metrics (`actor/ppo_kl`, and for ppo_clip `actor/pg_clipfrac`,
        `actor/pg_clipfrac_lower`) plus the `rollout_corr/*` metrics of this micro-batch.
    """
    if correction.loss_type not in BYPASS_LOSS_TYPES:
        raise ValueError(f"algorithm.rollout_correction.loss_type={correction.loss_type!r}; valid choices: "
                         f"{BYPASS_LOSS_TYPES}.")
    check_same_shape(rollout_log_prob=rollout_log_prob, log_prob=log_prob, advantages=advantages,
                     response_mask=response_mask)
    with torch.no_grad():  # pi_theta itself plays pi_old: log_ratio = log(pi_theta / pi_rollout)
        weights, mask, metrics = compute_rollout_correction_and_rejection_mask(
            log_prob.detach(), rollout_log_prob, response_mask, correction)
    if correction.loss_type == "reinforce":
        pg_loss, pg_metrics = compute_policy_loss_reinforce(rollout_log_prob, log_prob, advantages, mask,
                                                            loss_agg_mode, weights, global_batch_info)
    else:  # ppo_clip: no IS weights, the clipped ratio is the correction (weights would count it twice)
        pg_loss, pg_metrics = compute_policy_loss(rollout_log_prob, log_prob, advantages, mask, loss_agg_mode,
                                                  clip_ratio_low, clip_ratio_high, clip_ratio_c,
                                                  global_batch_info=global_batch_info)
    return pg_loss, {**pg_metrics, **metrics}
