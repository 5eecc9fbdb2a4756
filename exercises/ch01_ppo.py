# EXERCISES FILE: fill in the functions below, then grade them with `make grade`.
# (Maintainers: this file is generated from solutions/; edit there, then run
#  `python -m minirl.book.exercises sync`.)
"""Chapter 1 exercises: PPO's clipped policy loss and how per-token losses become one number.

Read chapters/01_ppo.ipynb first. The twins are minirl/ppo.py::compute_policy_loss (verl's
verl/trainer/ppo/core_algos.py::compute_policy_loss_vanilla) and minirl/core.py::agg_loss.

Grade all:   make grade
Grade one:   .venv/bin/python -m pytest tests/exercises/test_ch01_ppo.py -k clipped_policy_loss
"""

import torch


def clipped_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exercise 1.1: PPO's clipped surrogate loss (token-mean) and its clip fraction.

        r_t    = exp(log_prob_t - old_log_prob_t)
        L1_t   = -A_t * r_t
        L2_t   = -A_t * clip(r_t, 1 - clip_ratio, 1 + clip_ratio)
        loss_t = max(L1_t, L2_t)                          (the pessimistic of the two)
        loss   = masked mean of loss_t over response tokens
        clipfrac = masked mean of [L2_t > L1_t]           (tokens where the clip decided)

    Args:
        old_log_prob, log_prob, advantages, response_mask: (B, L); log_prob carries the gradient.
        clip_ratio: epsilon.
    Returns:
        (loss, clipfrac): two scalar tensors.

    Hint: minimising max(-A r, -A clip(r)) is maximising min(A r, A clip(r)), the objective of the
    PPO paper. `torch.clamp` clips; `torch.maximum` takes the element-wise max. Use the mask for both
    means (sum of masked values / number of valid tokens). No dual clip here.
    """
    raise NotImplementedError("clipped_policy_loss: not written yet. Replace this line with your code.")


def aggregate_loss(loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str) -> torch.Tensor:
    """Exercise 1.2: turn a (B, L) per-token loss into one number, in three of verl's modes.

    With S_i = sum_t m_it * l_it (sequence i's token sum) and G = the number of sequences with at
    least one valid token:

        "token-mean"           sum_i S_i / sum_it m_it        every token weighs the same
        "seq-mean-token-sum"   sum_i S_i / G                   every sequence weighs the same, long ones count more
        "seq-mean-token-mean"  sum_i [S_i / sum_t m_it] / G    every sequence weighs the same, per-token average

    Fully masked rows are left out of G (and out of the seq-mean-token-mean sum).

    Args:
        loss_mat: (B, L) per-token losses.
        loss_mask: (B, L) 0/1.
        loss_agg_mode: one of the three names above.
    Returns:
        A scalar tensor.
    Raises:
        ValueError: for any other mode, naming the three valid ones.

    Hint: compute S = (loss_mat * loss_mask).sum(-1) and the per-row token counts first.
    """
    raise NotImplementedError("aggregate_loss: not written yet. Replace this line with your code.")
