"""Optimal token baseline (OTB): one baseline per token position, weighted by how much gradient the answer carries.

Mirrors `verl/trainer/ppo/core_algos.py::compute_optimal_token_baseline_advantage`
(`algorithm.adv_estimator=optimal_token_baseline`) and
`compute_multi_turn_optimal_token_baseline_advantage` (`tir_optimal_token_baseline`), verl 0.9.1.
verl's docs/algo/otb.md describes it (arXiv 2602.07078).

The actor must hand over `sum_pi_squared`, sum_v pi(v)^2 of each response token's next-token
distribution (`actor_rollout_ref.actor.calculate_sum_pi_squared=true`; verl computes it from the logits
as exp(logsumexp(2 z) - 2 logsumexp(z)), `verl/utils/torch_functional.py::calculate_sum_pi_squared_from_logits`).
"""

from __future__ import annotations

import torch

from minirl.advantage import register_adv_est
from minirl.core import check_same_shape, group_index


@register_adv_est("optimal_token_baseline")
@torch.no_grad()
def compute_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reward-to-go minus a per-position baseline: the group's returns, weighted by accumulated gradient size.

        G_i,t = sum_{s >= t} r_i,s m_i,s                        reward-to-go
        w_i,t = 1 - 2 pi_i,t + sum_v pi_i,t(v)^2                = ||e_y - pi||^2, the squared gradient of
                                                                  log pi(y_t) with respect to the logits
        W_i,t = sum_{s <= t} rho_i,s^2 w_i,s m_i,s              accumulated up to t (rho: IS weight, 1 without)
        B_t   = sum_i G_i,t W_i,t m_i,t / (sum_i W_i,t m_i,t + epsilon)    over the answers i of the group
        A_i,t = (G_i,t - B_t) m_i,t

    Why: for an estimate sum_t A_t grad log pi(y_t), the baseline that minimises its variance at
    step t is E[G_t |grad|^2] / E[|grad|^2], |grad|^2 being the squared gradient of the answer's log
    prob so far. W_t stands in for it (a sum of per-token logit-gradient norms, computed from the
    forward pass alone). Answers that were uncertain (small pi of the sampled tokens) get more say.

    What a beginner must notice:
    - Position t is the column of the padded tensor: B_t averages the answers that are still running
      at t. This is right when each answer's tokens are contiguous from column 0 (single turn). For
      multi-turn answers with tool output inside (mask 0 in the middle) use `tir_optimal_token_baseline`.
    - The baseline includes answer i itself (not leave-one-out).
    - handle_zero_tail: past the second-longest answer of a group only the longest one is running, so
      B_t = G_t W_t / (W_t + eps) ~ G_t and its advantage would vanish; the baseline is set to 0 there
      instead (those tokens get A = G_t). With two or more answers of the longest length nothing is cut.
    - A group of one answer (rollout.n = 1) has no baseline: A = G.
    - With a score on the last token only, G_i,t = R_i at every token, and B_t is a W-weighted mean of
      the rewards of the answers still running at t.
    - The trainer passes neither handle_zero_tail nor epsilon: the defaults always apply.

    Args:
        token_level_rewards: (B, L).
        response_mask: (B, L).
        index: (B,) group labels (uids).
        old_log_probs: (B, L) log pi_old(y_t); pi_t = exp(old_log_probs).
        sum_pi_squared: (B, L) sum_v pi_old(v)^2 at each response token (between pi_t^2 and 1).
        rollout_is_weights: (B, L) or None: the rollout-correction IS weights rho; W uses rho^2 w.
        handle_zero_tail: zero the baseline on the longest answer's unshared tail.
        epsilon: added to the denominator.
        kwargs: unused (config among them).
    Returns:
        (advantages, returns), each (B, L); returns are G (0 after the last valid token).
    """
    return _token_baseline_advantage(token_level_rewards, response_mask, index, old_log_probs, sum_pi_squared,
                                     rollout_is_weights, handle_zero_tail, epsilon, count_own_tokens=False)


@register_adv_est("tir_optimal_token_baseline")
@torch.no_grad()
def compute_multi_turn_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The optimal token baseline with position t counted over each answer's own tokens (multi-turn).

        k_i,t = (number of valid tokens of answer i up to column t) - 1     the policy's k-th token
        B_k   = sum_i G_i,k W_i,k / (sum_i W_i,k + epsilon)                 over answers with a k-th token
        A_i,t = (G_i,t - B_{k_i,t}) m_i,t

    with G, W as in `compute_optimal_token_baseline_advantage`. In a tool-integrated answer the
    model's tokens are interleaved with tool output (mask 0), so column t means different things in
    different answers; here the k-th generated token of one answer is compared with the k-th of the
    others. For single-turn masks (valid tokens contiguous from column 0) k = t and the result is the
    one of `optimal_token_baseline` (tests/test_estimators.py checks it). Without handle_zero_tail the
    two part in one case: a group whose only non-empty answer has empty siblings (no baseline here; in
    `optimal_token_baseline` the answer is its own baseline, A ~ 0).

    What a beginner must notice: empty answers (no valid token) are left out of their group: a group
    with one non-empty answer has no baseline. handle_zero_tail works on k as above. verl's docstring
    says handle_zero_tail defaults to False; its signature (and this one) says True.

    Args:
        token_level_rewards, response_mask, index, old_log_probs, sum_pi_squared, rollout_is_weights,
        handle_zero_tail, epsilon, kwargs: as in `compute_optimal_token_baseline_advantage`.
    Returns:
        (advantages, returns), each (B, L); returns are the reward-to-go G.
    """
    return _token_baseline_advantage(token_level_rewards, response_mask, index, old_log_probs, sum_pi_squared,
                                     rollout_is_weights, handle_zero_tail, epsilon, count_own_tokens=True)


def _token_baseline_advantage(token_level_rewards, response_mask, index, old_log_probs, sum_pi_squared,
                              rollout_is_weights, handle_zero_tail, epsilon, count_own_tokens):
    """Both estimators: `count_own_tokens` picks what "position t" means (own token count, or column)."""
    tensors = dict(token_level_rewards=token_level_rewards, response_mask=response_mask, old_log_probs=old_log_probs,
                   sum_pi_squared=sum_pi_squared)
    if rollout_is_weights is not None:
        tensors["rollout_is_weights"] = rollout_is_weights
    check_same_shape(**tensors)
    batch_size, length = response_mask.shape
    device = token_level_rewards.device
    returns = (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])  # G_t
    w = 1 - 2 * torch.exp(old_log_probs) + sum_pi_squared  # w_t = 1 - 2 pi_t + sum pi^2
    if rollout_is_weights is not None:
        w = w * rollout_is_weights**2  # rho_t^2 w_t
    big_w = (w * response_mask).cumsum(dim=-1)  # W_t = sum_{s <= t} w_s m_s

    valid = response_mask.bool()
    lengths = valid.sum(dim=-1)
    if count_own_tokens:  # the k-th valid token of the answer (-1 before its first one)
        step = valid.long().cumsum(dim=-1) - 1
    else:  # the column
        step = torch.arange(length, device=device).expand(batch_size, length)
    group, num_groups = group_index(index, device=device)
    member = lengths > 0 if count_own_tokens else torch.ones_like(lengths, dtype=torch.bool)  # TIR drops empties
    size = torch.bincount(group[member], minlength=num_groups)  # answers per group

    # B_t per (group, step), summed over the valid tokens of the group's answers at that step
    rows, cols = valid.nonzero(as_tuple=True)
    cell = group[rows] * length + step[rows, cols]  # (group, step) -> one flat index
    work = torch.promote_types(returns.dtype, big_w.dtype)
    numerator = torch.zeros(num_groups * length, dtype=work, device=device)
    numerator.index_add_(0, cell, (returns * big_w)[rows, cols].to(work))  # sum_i G_i,t W_i,t
    denominator = torch.zeros(num_groups * length, dtype=work, device=device)
    denominator.index_add_(0, cell, big_w[rows, cols].to(work))  # sum_i W_i,t
    per_cell = numerator / (denominator + epsilon)  # B_t
    baseline = per_cell[group[:, None] * length + step.clamp(min=0)].to(returns.dtype)  # (B, L)
    has_baseline = (size[group] > 1)[:, None] & valid  # a group of one answer: no baseline
    if handle_zero_tail:
        has_baseline &= ~_unshared_tail(lengths, group, num_groups, size, step)
    baseline = torch.where(has_baseline, baseline, torch.zeros_like(baseline))
    advantages = (returns - baseline) * response_mask  # A_t = (G_t - B_t) m_t
    return advantages, returns


def _unshared_tail(lengths, group, num_groups, size, step) -> torch.Tensor:
    """(B, L) True on the steps of a group's unique longest answer that no other answer reaches."""
    def group_max(values):  # (B,) -> (G,), 0 for a group with no rows
        return torch.zeros(num_groups, dtype=values.dtype, device=values.device).scatter_reduce(
            0, group, values, reduce="amax", include_self=True)

    longest = group_max(lengths)
    is_longest = lengths == longest[group]
    unique = torch.bincount(group[is_longest], minlength=num_groups) == 1
    second = group_max(torch.where(is_longest, torch.zeros_like(lengths), lengths))  # longest among the others
    cut = is_longest & unique[group] & (size[group] > 1) & (longest[group] > second[group])
    return cut[:, None] & (step >= second[group][:, None])
