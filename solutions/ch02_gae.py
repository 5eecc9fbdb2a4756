# SOLUTIONS FILE: the answers. The stubs in exercises/ are generated from it.
"""Chapter 2 exercises: Generalized Advantage Estimation, the scan and the whitening after it.

Read chapters/02_gae.ipynb first. The twin is minirl/gae.py::compute_gae_advantage_return (verl's
verl/trainer/ppo/core_algos.py::compute_gae_advantage_return): exercise 2.1 is its backward scan,
exercise 2.2 the whitening it applies afterwards.

Grade all:   make grade
Grade one:   make grade EX=2.1   (or .venv/bin/python -m pytest tests/exercises/test_ch02_gae.py -k gae_scan)
"""

import torch


def gae_scan(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exercise 2.1: GAE's backward scan over the response tokens, before any whitening.

    For t = L-1 down to 0, starting from next_value = 0 and last_gae = 0 (per row):

        delta_t = r_t + gamma * next_value - V_t              TD error, next_value = V_{t+1}
        gae_t   = delta_t + gamma * lam * last_gae            A_t = delta_t + gamma lam A_{t+1}
        if response_mask[:, t] == 1:  next_value = V_t,  last_gae = gae_t
        else:                         next_value, last_gae stay as they were (carried over the token)
        advantages_raw[:, t] = last_gae
        returns = advantages_raw + values                     R_t = A_t + V_t, the critic's target

    Args:
        token_level_rewards: (B, L) float; the score on the last valid token (and, with the KL in the
            reward, -beta * KL on every token).
        values: (B, L) float, the critic's V(s_t). Positions where the mask is 0 may hold anything.
        response_mask: (B, L) 0/1. Usually 1s then padding, but it may have holes in the middle.
        gamma: discount, in [0, 1] (verl's algorithm.gamma).
        lam: GAE lambda, in [0, 1] (verl's algorithm.lam).
    Returns:
        (advantages_raw, returns), each (B, L), same dtype as values. No whitening here (that is 2.2).

    Details verl is precise about:
      - the scan runs BACKWARDS: A_t needs A_{t+1};
      - a masked token is skipped, not a step: V_{t+1} and A_{t+1} jump over it unchanged, so a hole
        in the middle of a response does not cut it in two, and values on padding never leak in;
      - the position of a masked token still gets an output: the carried last_gae (0 after the last
        valid token), and returns there are that number + values, as verl writes them;
      - gamma multiplies both V_{t+1} in delta and A_{t+1} in the recursion;
      - returns are computed from the raw advantages, before whitening.

    Hint: loop `for t in reversed(range(L))` over columns, working on whole columns `values[:, t]`;
    `mask * new + (1 - mask) * old` keeps the old value where the mask is 0. Collect the columns in a
    list, reverse it, and `torch.stack(..., dim=1)`.
    """
    # BEGIN SOLUTION
    mask = response_mask.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0])
    last_gae = torch.zeros_like(values[:, 0])
    columns = []
    for t in reversed(range(values.shape[1])):
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        gae = delta + gamma * lam * last_gae
        next_value = mask[:, t] * values[:, t] + (1 - mask[:, t]) * next_value
        last_gae = mask[:, t] * gae + (1 - mask[:, t]) * last_gae
        columns.append(last_gae)
    advantages_raw = torch.stack(columns[::-1], dim=1)
    return advantages_raw, advantages_raw + values
    # END SOLUTION


def whiten_advantages(advantages_raw: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Exercise 2.2: whiten the raw GAE advantages over every valid token of the batch.

        N    = sum(response_mask)                                  valid tokens in the WHOLE batch
        mu   = sum(A * mask) / N
        var  = sum((A - mu)^2 * mask) / (N - 1)                     unbiased
        advantages = (A - mu) / sqrt(var + 1e-8) * response_mask

    Args:
        advantages_raw: (B, L) float, the output of gae_scan.
        response_mask: (B, L) 0/1.
    Returns:
        (B, L) advantages, same dtype as advantages_raw; 0 on padding.
    Raises:
        ValueError: if the mask holds fewer than 2 valid tokens (the unbiased variance would divide
            by N - 1 = 0), as minirl.core.masked_var does.

    Details verl is precise about:
      - ONE mean and ONE variance for the whole batch, never per row (verl's masked_whiten with
        masked_mean over axis=None): a row whose tokens all did better than the batch keeps
        positive advantages;
      - the variance is unbiased (N - 1) and the 1e-8 sits inside the square root;
      - padding is excluded from the statistics.
    One difference: verl returns masked_whiten(A) without multiplying by the mask, so its padding
    holds (A - mu) / sigma; minirl zeroes padding, and so do you here (every loss masks it anyway).

    Hint: this is Chapter 0's masked_whiten (exercise 0.2: subtract the masked mean of the whole batch, divide
    by sqrt(unbiased masked variance + 1e-8)), plus the error for fewer than 2 valid tokens and the final
    multiplication by the mask.
    """
    # BEGIN SOLUTION
    mask = response_mask.to(advantages_raw.dtype)
    n = mask.sum()
    if n < 2:
        raise ValueError(f"whitening needs at least 2 valid tokens for the unbiased variance; the mask has {int(n)}.")
    mean = (advantages_raw * mask).sum() / n
    var = ((advantages_raw - mean) ** 2 * mask).sum() / (n - 1)
    return (advantages_raw - mean) / torch.sqrt(var + 1e-8) * mask
    # END SOLUTION
