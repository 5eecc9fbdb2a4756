# EXERCISES FILE: fill in the functions below, then grade them with `make grade`.
# (Maintainers: this file is generated from solutions/; edit there, then run
#  `python -m minirl.book.exercises sync`.)
"""Chapter 9 exercises: rollout correction, with truncated importance weights and sequence rejection.

Read chapters/09_rollout_corr.ipynb first. The twins are
minirl/rollout_correction.py::compute_rollout_correction_weights with rollout_is="token" and a number as
threshold (verl 0.9.1's verl/trainer/ppo/rollout_corr_helper.py::compute_rollout_correction_weights, and
compute_is_metrics for the effective sample size) and
minirl/rollout_correction.py::compute_rollout_rejection_mask with rollout_rs="seq_mean_k3" (verl's
verl/trainer/ppo/rollout_corr_helper.py::compute_rollout_rejection_mask).

Grade all:   make grade
Grade one:   make grade EX=9.1   (or .venv/bin/python -m pytest tests/exercises/test_ch09_rollout_corr.py -k truncated)
"""

import torch


def truncated_is_weights(
    log_ratio: torch.Tensor, response_mask: torch.Tensor, threshold: float
) -> tuple[torch.Tensor, float]:
    """Exercise 9.1: token-level truncated importance sampling (TIS), and its effective sample size.

    The inference engine samples the tokens. The trainer computes their log-probs again, with its own
    kernels. The two policies differ a little. The log-ratio measures the gap, token by token:

        log_ratio_t = old_log_prob_t - rollout_log_prob_t = log( pi_train(a_t) / pi_rollout(a_t) )

    Each token's loss is weighted by the ratio. A large ratio would make the gradient noisy, so the
    weight is cut at a threshold (truncated IS). Padding gets weight 0:

        l_t = clamp(log_ratio_t, -20, 20)                   (a safety bound: exp stays finite)
        w_t = min(exp(l_t), threshold) * m_t                (m = response_mask)

    The weights are detached: they rescale the loss, they are not trained through.

    verl also reports how evenly the weights spread, as rollout_corr/rollout_is_eff_sample_size.
    It is a fraction of the valid tokens, between 0 and 1 (1 when all weights are equal):

        mean_w = masked mean of w over the valid tokens     (sum_t m_t w_t / (sum_t m_t + 1e-8))
        ess    = 1 / (masked mean of (w / (mean_w + 1e-8))^2)

    verl 0.9.1 runs this with algorithm.rollout_correction.rollout_is=token and
    rollout_is_threshold=2.0 (a number: TIS). Its code is
    verl/trainer/ppo/rollout_corr_helper.py::compute_rollout_correction_weights, and compute_is_metrics
    for the ESS.

    Args:
        log_ratio: (B, L) float tensor, old_log_prob - rollout_log_prob. Padding may hold any finite value.
        response_mask: (B, L), 1 for a valid token, 0 for padding (float, int or bool). At least one
            token is valid.
        threshold: the cap, a float > 0. It can be below 1.
    Returns:
        (weights, ess): weights a (B, L) float tensor like log_ratio, detached; ess a Python float.

    Details verl is precise about:
      - only large weights are cut: a weight below the threshold stays as it is (no lower bound);
      - clamp the log-ratio BEFORE exp: exp(1000) is inf, and inf * 0 is NaN, even in padding;
      - the ESS uses the truncated weights, the ones the loss uses, not the raw ratios;
      - the two means in the ESS run over the valid tokens only, not over all B * L positions.

    Hint: torch.clamp(x, min=-20.0, max=20.0); w.clamp(max=threshold); .detach(); .item() gives a float.
    """
    raise NotImplementedError("truncated_is_weights: not written yet. Replace this line with your code.")


def sequence_rejection_mask(log_ratio: torch.Tensor, response_mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """Exercise 9.2: sequence rejection sampling (verl's seq_mean_k3): drop the sequences too far off-policy.

    Weights can only scale a token. Rejection removes a whole sequence from the loss instead. The test
    is per sequence. It uses k3, a KL estimate that is never negative, averaged over the valid tokens:

        l_t   = clamp(log_ratio_t, -20, 20)
        k3_t  = exp(l_t) - 1 - l_t
        stat  = sum_t m_t k3_t / (sum_t m_t + 1e-8)         (one number per sequence; m = response_mask)
        new_m = m           where stat <= threshold
              = 0 (the whole row)   where stat >  threshold

    verl 0.9.1 runs this with algorithm.rollout_correction.rollout_rs=seq_mean_k3 and
    rollout_rs_threshold (a number > 0). Its code is
    verl/trainer/ppo/rollout_corr_helper.py::compute_rollout_rejection_mask.

    Args:
        log_ratio: (B, L) float tensor, old_log_prob - rollout_log_prob. Padding may hold any finite value.
        response_mask: (B, L), 1 for a valid token, 0 for padding (float, int or bool).
        threshold: a float > 0.
    Returns:
        the new mask, (B, L), with the same dtype as response_mask.

    Details verl is precise about:
      - the statistic is the MEAN over valid tokens, not the sum: a long sequence is not punished
        for its length;
      - a rejected sequence loses ALL its tokens, not only the tokens with a large k3;
      - it is k3, not k1 (-l) or l itself: k3 is >= 0 and grows on both sides of l = 0;
      - padding does not count in the mean, and stays 0 in the new mask;
      - a row with no valid token has stat 0 (the 1e-8 avoids 0 / 0). It stays all 0, with no NaN.

    Hint: torch.where(response_mask.bool(), k3, 0.0).sum(-1) sums the valid tokens;
    keep.unsqueeze(-1) spreads one decision per row over its tokens; .to(response_mask.dtype).
    """
    raise NotImplementedError("sequence_rejection_mask: not written yet. Replace this line with your code.")
