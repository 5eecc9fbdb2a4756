# EXERCISES FILE: fill in the functions below, then grade them with `make grade`.
# (Maintainers: this file is generated from solutions/; edit there, then run
#  `python -m minirl.book.exercises sync`.)
"""Chapter 11 exercises: the policy-loss family (GSPO's sequence ratio, Clip-Cov's pick, OPO's baseline).

Read chapters/11_policy_losses.ipynb first. The twins are minirl/sequence_ratio.py::compute_policy_loss_gspo (the
ratio it clips; verl 0.9.1's verl/trainer/ppo/core_algos.py::compute_policy_loss_gspo, loss_mode=gspo),
minirl/entropy_cov.py::clip_cov_selection (the pick inside verl's compute_policy_loss_clip_cov, loss_mode=clip_cov)
and minirl/opo.py::compute_opo_outcome_advantage (verl's compute_opo_outcome_advantage, adv_estimator=opo).

Grade all:   make grade
Grade one:   make grade EX=11.1   (or .venv/bin/python -m pytest tests/exercises/test_ch11_policy_losses.py -k gspo)
"""

import torch


def gspo_token_ratios(log_prob: torch.Tensor, old_log_prob: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Exercise 11.1: GSPO's ratio, one per answer, spread over its tokens with the stop-gradient trick.

    PPO clips each token's ratio r_it = pi_theta(a_it) / pi_old(a_it). GSPO (Zheng et al. 2025) clips one ratio
    per answer: the geometric mean of its token ratios, the answer's probability ratio normalised by its length.
    Every token of row i then carries that ratio, with its own token's gradient:

        log s_i  = sum_t m_it (log_prob_it - old_log_prob_it) / max(|y_i|, 1)      |y_i| = sum_t m_it
        log s_it = sg[log s_i] + log_prob_it - sg[log_prob_it]                      sg: stop-gradient (.detach())
        s_it     = exp(min(log s_it, 10))

    The value of s_it is s_i on every position of row i (padding included: the loss's mask removes padding
    later), so all the tokens of an answer are clipped together. Its gradient w.r.t. log_prob_it is s_i, and 0
    w.r.t. the other tokens and w.r.t. old_log_prob: each token is pushed along its own log-prob, weighted by its
    answer's ratio.

    Args:
        log_prob: (B, L) float, the policy being trained; it may require grad.
        old_log_prob: (B, L) float, the policy that sampled the answers. Padding may hold any finite value.
        response_mask: (B, L), 1 for a valid token, 0 for padding (float, int or bool).
    Returns:
        (B, L) s_it, with log_prob's dtype, differentiable w.r.t. log_prob.

    Details verl is precise about:
      - the MEAN of the log-ratios over the answer's valid tokens, not their sum: the sum is the log of the
        whole answer's ratio, which explodes (or vanishes) with the length;
      - padding counts neither in the sum nor in the length; a row with no valid token divides by
        max(0, 1) = 1, so its s is exp(0) = 1 (no NaN);
      - the clamp at 10 is on log s_it, after the stop-gradient trick: beyond it s = e^10 and, torch.clamp
        passing no gradient there, the gradient is 0;
      - the sequence ratio is detached: without the trick, token t's gradient would mix in the whole answer's.

    Hint: (x * response_mask).sum(-1) / response_mask.sum(-1).clamp(min=1); v.unsqueeze(-1) spreads one value
    per row over its tokens; torch.clamp(x, max=10.0).
    """
    raise NotImplementedError("gspo_token_ratios: not written yet. Replace this line with your code.")


def clip_cov_selection(
    advantages: torch.Tensor,
    log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    already_clipped: torch.Tensor,
    clip_cov_ratio: float,
    clip_cov_lb: float,
    clip_cov_ub: float,
) -> torch.Tensor:
    """Exercise 11.2: Clip-Cov's pick, the few tokens whose gradient is removed to keep the entropy up.

    Under policy gradient, the entropy falls mostly through the tokens whose log-prob and advantage covary: a
    likely token that is rewarded gets likelier still. Clip-Cov (Cui et al. 2025) scores each valid token by

        cov_t = (A_t - mean(A)) * (log_prob_t - mean(log_prob))       both means over the batch's VALID tokens,
                                                                       masked_mean: sum m x / (sum m + 1e-8)

    The candidates are the valid tokens that PPO's clip did not already clip, with clip_cov_lb < cov_t < clip_cov_ub.
    Of them, k = max(int(clip_cov_ratio * number of valid tokens), 1) are drawn at random, without replacement.
    The loss then multiplies the picked tokens' terms by 0; this function returns only the pick.

    Args:
        advantages: (B, L) float.
        log_prob: (B, L) float (it may require grad; the pick carries none).
        response_mask: (B, L), 1 for a valid token, 0 for padding (float, int or bool).
        already_clipped: (B, L) bool, the tokens PPO's clip already clipped (pg_losses2 > pg_losses1).
        clip_cov_ratio: the fraction of the valid tokens to pick, > 0 (verl's default 0.0002).
        clip_cov_lb, clip_cov_ub: the open interval of eligible covariances (verl's defaults 1.0 and 5.0).
    Returns:
        (B, L) bool, True on the picked tokens: min(k, number of candidates) of them.

    Details verl is precise about:
      - the two means run over the valid tokens of the whole batch (not per row, not over the padding);
      - both bounds are strict, and a token PPO already clipped is never a candidate;
      - k counts the VALID tokens, and at least one token is picked when there is a candidate (max(..., 1));
      - the pick is random, not the largest covariances (that is KL-Cov's rule). Draw it as verl does, so that
        the grader can replay it: list the candidates in row-major order (torch.nonzero), draw ONE permutation
        torch.randperm(number of candidates) from torch's global generator, keep the candidates perm[:k]. When
        there is no candidate, draw nothing and pick nothing.

    Hint: torch.nonzero(bool_mask) is an (N, 2) tensor of (row, column); picked[rows, cols] = True sets them;
    compute the covariances under torch.no_grad().
    """
    raise NotImplementedError("clip_cov_selection: not written yet. Replace this line with your code.")


def opo_advantages(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index) -> torch.Tensor:
    """Exercise 11.3: OPO's baseline, the group's mean reward weighted by the answers' lengths.

        R_i = sum_t token_level_rewards[i, t]                  the answer's score
        L_i = sum_t response_mask[i, t]                        its length (valid tokens)
        b_g = sum_{j in g} L_j R_j / sum_{j in g} L_j          g: the rows sharing index[i], i included
        A_i = R_i - b_g                                        a group of one has no baseline: A_i = R_i
        advantages[i, t] = A_i * response_mask[i, t]

    Why lengths: the gradient of log pi(y_i) is a sum over its L_i tokens, so its squared norm grows roughly
    like L_i, and the baseline that minimises the gradient's variance weights each reward by that norm (OPO,
    arXiv 2505.23585, takes L_i as the proxy). With equal lengths, b_g is the plain group mean: OPO is then GRPO
    without the std.

    Args:
        token_level_rewards: (B, L) float (0 on padding).
        response_mask: (B, L) 0/1 (float or int).
        index: B group labels (a list or a numpy array of uids); rows with equal labels form a group, wherever
            they sit.
    Returns:
        (B, L) advantages, with token_level_rewards' dtype (verl returns them as the returns too).

    Details verl is precise about:
      - answer i is IN its own group's baseline (unlike RLOO), weighted by its length;
      - no division by a std, no whitening;
      - a group of one keeps its raw score, A = R (verl sets its baseline to 0);
      - an empty answer (L_j = 0) weighs nothing in its group's baseline, and its row of advantages is 0;
      - a group of two or more whose answers are ALL empty has b = 0 / 0 = NaN, and so do its rows, as in verl:
        no epsilon in the division.

    Hint: the grouping loop of Exercise 7.1 (rloo_advantages): torch.tensor([label == g for label in index])
    selects group g's rows; response_mask.sum(-1).to(scores.dtype) gives the lengths.
    """
    raise NotImplementedError("opo_advantages: not written yet. Replace this line with your code.")
