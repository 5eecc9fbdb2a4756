# SOLUTIONS FILE: the answers. The stubs in exercises/ are generated from it.
"""Chapter 3 exercises: InstructGPT's pipeline, the reward model's loss and the KL leash of PPO.

Read chapters/03_rlhf.ipynb first. The twins are minirl/reward_model.py::bradley_terry_loss (TRL 1.16's
trl/trainer/reward_trainer.py::RewardTrainer.compute_loss), minirl/kl.py::apply_kl_penalty (verl 0.9.1's
verl/trainer/ppo/ray_trainer.py::apply_kl_penalty, with a FixedKLController) and
minirl/kl.py::kl_penalty_forward (verl's verl/trainer/ppo/core_algos.py::kl_penalty_forward).

Grade all:   make grade
Grade one:   make grade EX=3.1   (or .venv/bin/python -m pytest tests/exercises/test_ch03_rlhf.py -k bradley_terry)
"""

import torch


def bradley_terry_loss(
    chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor, margin: torch.Tensor | None = None
) -> tuple[torch.Tensor, float, float]:
    """Exercise 3.1: the reward model's pairwise loss, and the two numbers TRL logs beside it.

    Bradley-Terry: P(y_w preferred to y_l) = sigmoid(r_w - r_l). Maximising its log-likelihood gives

        loss        = mean_i( -log sigmoid(r_w,i - r_l,i - m_i) )        m = margin, 0 when None
        accuracy    = share of pairs with r_w,i > r_l,i                   (strictly greater)
        mean_margin = mean_i( r_w,i - r_l,i )                             (the margin argument not subtracted)

    Args:
        chosen_rewards: (B,) the reward model's scores of the preferred answers (r_w), with gradient.
        rejected_rewards: (B,) the scores of the other answers (r_l).
        margin: (B,) optional required gap per pair (e.g. from a graded preference "much better"), or None.
    Returns:
        (loss, accuracy, mean_margin): loss a 0-dim tensor that carries the gradient; accuracy and
        mean_margin Python floats (TRL logs them as "accuracy" and "margin").

    Details TRL is precise about:
      - -log sigmoid(d) is computed as -F.logsigmoid(d): torch.log(torch.sigmoid(d)) underflows to
        log(0) = -inf once d < -104 or so (float32), and a reward model meets such pairs early on;
      - only the DIFFERENCE r_w - r_l matters: adding a constant to every score changes nothing;
      - a tie (r_w == r_l) is not a correct ranking: accuracy counts r_w > r_l only;
      - the margin is subtracted inside the sigmoid (the pair must be won by at least m), not added.

    Hint: `import torch.nn.functional as F` for F.logsigmoid; difference = chosen_rewards - rejected_rewards;
    .item() turns a 0-dim tensor into a Python float.
    """
    # BEGIN SOLUTION
    import torch.nn.functional as F

    difference = chosen_rewards - rejected_rewards
    shifted = difference if margin is None else difference - margin
    loss = -F.logsigmoid(shifted).mean()
    with torch.no_grad():
        accuracy = (difference > 0).float().mean().item()
        mean_margin = difference.mean().item()
    return loss, accuracy, mean_margin
    # END SOLUTION


def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    beta: float,
    kl_penalty: str = "kl",
) -> tuple[torch.Tensor, float]:
    """Exercise 3.2: InstructGPT's reward, the score minus beta times a per-token KL to the reference.

        kld_t        = KL_estimate(old_log_probs, ref_log_probs)_t * response_mask_t
        rewards_t    = token_level_scores_t - beta * kld_t
        kl_i         = sum_t kld_i,t / (sum_t response_mask_i,t + 1e-8)     one number per sequence
        current_kl   = mean_i kl_i                                          a Python float

    KL_estimate is the estimator named by kl_penalty: "kl" (k1 = old - ref), "mse" (k2) or
    "low_var_kl" (k3); exercise 3.3 writes them. Here you may use minirl's (verl's) estimator, or write
    the three formulas: `from minirl.kl import kl_penalty as kl_estimate` (renamed, since the argument
    kl_penalty hides the name), then kl_estimate(old_log_probs, ref_log_probs, kl_penalty).

    Args:
        token_level_scores: (B, L) the reward model's score on each response's last valid token, 0 elsewhere.
        old_log_probs: (B, L) log-probs of the sampled tokens under the actor that generated them.
        ref_log_probs: (B, L) the same tokens under the frozen reference (the SFT model).
        response_mask: (B, L) 0/1. Padded positions may hold anything in the log-probs.
        beta: the KL coefficient (verl's algorithm.kl_ctrl.kl_coef; fixed here).
        kl_penalty: the estimator, "kl", "mse" or "low_var_kl" (verl's algorithm.kl_penalty).
    Returns:
        (token_level_rewards, current_kl): (B, L) rewards, and the batch's KL as a Python float (verl
        logs it as actor/reward_kl_penalty; an adaptive controller steers beta with it).

    Details verl is precise about:
      - the KL is dense: every response token pays beta * kld_t, while the score sits on the last one;
      - kld is multiplied by the mask, so a padded position gets exactly its score (junk log-probs
        there must not leak in);
      - current_kl averages within each sequence first, then over the sequences: a long response
        does not weigh more than a short one. It is not the mean over all valid tokens of the batch.

    Hint: x.sum(dim=-1) / (response_mask.sum(dim=-1) + 1e-8) is one mean per row (minirl.core.masked_mean
    with axis=-1); .item() turns a 0-dim tensor into a float.
    """
    # BEGIN SOLUTION
    from minirl.kl import kl_penalty as kl_estimate

    kld = kl_estimate(old_log_probs, ref_log_probs, kl_penalty) * response_mask
    token_level_rewards = token_level_scores - beta * kld
    per_sequence = kld.sum(dim=-1) / (response_mask.sum(dim=-1) + 1e-8)
    return token_level_rewards, per_sequence.mean().item()
    # END SOLUTION


def kl_estimators(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> dict[str, torch.Tensor]:
    """Exercise 3.3: three one-sample estimators of KL(pi || pi_ref), from the sampled tokens' log-probs.

    With x = logprob - ref_logprob = log pi(a)/pi_ref(a) for a token a sampled from pi:

        k1 = x                                          verl's "kl"          unbiased, can be < 0
        k2 = x^2 / 2                                    verl's "mse"         >= 0, BIASED
        k3 = e^r - r - 1,   r = ref_logprob - logprob   verl's "low_var_kl"  >= 0, unbiased, low variance

    (J. Schulman, "Approximating KL divergence", 2020.) E_pi[k1] = KL by definition; E_pi[e^r] = 1, so
    E_pi[k3] = 1 + KL - 1 = KL as well; k2 only agrees with KL to second order in x.

    Args:
        logprob: (B, L) log pi of the sampled tokens.
        ref_logprob: (B, L) log pi_ref of the same tokens.
    Returns:
        {"k1": ..., "k2": ..., "k3": ...}, each a (B, L) tensor.

    Details verl is precise about (k3):
      - the log-ratio is r = ref_logprob - logprob (pi_ref over pi), not the other way round;
      - r is clamped to [-20, 20] before the exp, and k3 to [-10, 10] after it, so one token the
        reference finds absurd (log-ratio 100) gives 10, not inf or e^100.

    Hint: torch.clamp(t, min=..., max=...).
    """
    # BEGIN SOLUTION
    x = logprob - ref_logprob
    r = torch.clamp(ref_logprob - logprob, min=-20, max=20)
    k3 = torch.clamp(torch.exp(r) - r - 1, min=-10, max=10)
    return {"k1": x, "k2": 0.5 * x.square(), "k3": k3}
    # END SOLUTION
