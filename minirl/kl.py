"""KL between the policy and a reference model: estimators, coefficient controllers, KL-in-reward.

Mirrors verl 0.9.1: `verl/trainer/ppo/core_algos.py::kl_penalty`, `kl_penalty_forward`,
`FixedKLController`, `AdaptiveKLController`, and `verl/trainer/ppo/ray_trainer.py::apply_kl_penalty`.
Chapter 3 (InstructGPT) reads it: reward = score - beta * KL(pi || pi_ref).

The estimators take per-token log-probs of the *sampled* tokens, x = log pi(a) - log pi_ref(a), and
estimate KL(pi || pi_ref) = E_{a ~ pi}[log pi(a) - log pi_ref(a)] from one sample per token
(J. Schulman, "Approximating KL divergence", 2020):

    k1  ("kl")          x                      unbiased, high variance, can be negative
    abs                 |x|
    k2  ("mse")         x^2 / 2                biased, low variance, >= 0; its gradient is the KL's
    k3  ("low_var_kl")  e^{-x} - 1 + x         unbiased, low variance, >= 0
"""

from __future__ import annotations

import numpy as np
import torch

from minirl.core import check_choice, check_same_shape, masked_mean

KL_PENALTY_MODES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
KL_PENALTY_CHOICES = KL_PENALTY_MODES + tuple(mode + "+" for mode in KL_PENALTY_MODES)


def kl_penalty_forward(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate (no straight-through trick). See the module docstring for the modes.

    Mirrors `verl/trainer/ppo/core_algos.py::kl_penalty_forward`. For k3, the log-ratio is clamped
    to [-20, 20] and the result to [-10, 10], as in verl, so one wild token cannot blow up the loss.

    Args:
        logprob, ref_logprob: (B, L) log-probs of the sampled tokens under the policy and the reference.
        kl_penalty: one of KL_PENALTY_MODES. verl's "full" (needs whole distributions) is not provided.
    Returns:
        (B, L) estimates.
    """
    check_choice("kl_penalty", kl_penalty, KL_PENALTY_MODES)
    check_same_shape(logprob=logprob, ref_logprob=ref_logprob)
    if kl_penalty in ("kl", "k1"):
        return logprob - ref_logprob
    if kl_penalty == "abs":
        return (logprob - ref_logprob).abs()
    if kl_penalty in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob).square()
    # k3 / low_var_kl: with k = log(pi_ref / pi), e^k - k - 1 >= 0
    kl = torch.clamp(ref_logprob - logprob, min=-20, max=20)
    return torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate; a trailing "+" (e.g. "k3+") adds the straight-through k2 gradient.

    Mirrors `verl/trainer/ppo/core_algos.py::kl_penalty` (verl 0.9.1; older verl raised on "+").
    k1 and k3 have the right *value* in expectation but not the right *gradient*; k2's gradient
    (x = logprob - ref_logprob) is the one of the true KL. "<mode>+" returns the value of <mode> with
    the gradient of k2:

        out = k2 - stop_grad(k2) + stop_grad(forward(<mode>))

    Args:
        logprob, ref_logprob: (B, L).
        kl_penalty: one of KL_PENALTY_CHOICES (the modes, each optionally followed by "+").
    Returns:
        (B, L) estimates.
    """
    check_choice("kl_penalty", kl_penalty, KL_PENALTY_CHOICES)
    straight_through = kl_penalty.endswith("+")
    forward_score = kl_penalty_forward(logprob, ref_logprob, kl_penalty.rstrip("+"))
    if not straight_through:
        return forward_score
    backward_score = 0.5 * (logprob - ref_logprob).square()
    return backward_score - backward_score.detach() + forward_score.detach()


_estimate_kl = kl_penalty  # apply_kl_penalty's argument is also called kl_penalty (as in verl)


class FixedKLController:
    """A constant KL coefficient beta. Mirrors `verl/trainer/ppo/core_algos.py::FixedKLController`.

    verl config: `algorithm.kl_ctrl.type=fixed`, `algorithm.kl_ctrl.kl_coef` (default 0.001).
    """

    def __init__(self, kl_coef: float):
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op: the coefficient is fixed."""


class AdaptiveKLController:
    """Adapt beta so that the measured KL tracks a target (Ziegler et al. 2019, used by InstructGPT).

    Mirrors `verl/trainer/ppo/core_algos.py::AdaptiveKLController`.

        e     = clip(current_kl / target_kl - 1, -0.2, 0.2)      proportional error, bounded
        beta <- beta * (1 + e * n_steps / horizon)

    KL above target -> beta grows (pull harder toward the reference); below -> beta shrinks.
    verl config: `algorithm.kl_ctrl.type=adaptive`, `kl_coef` (initial beta), `target_kl`, `horizon`.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: float):
        if horizon <= 0:
            raise ValueError(f"horizon must be > 0, got {horizon}; it is the number of samples over which beta adapts.")
        self.value = init_kl_coef
        self.target = target_kl
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = np.clip(current_kl / self.target - 1, -0.2, 0.2)
        self.value *= 1 + proportional_error * n_steps / self.horizon


def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    kl_ctrl: FixedKLController | AdaptiveKLController,
    kl_penalty: str = "kl",
) -> tuple[torch.Tensor, dict[str, float]]:
    """InstructGPT's reward: the score minus beta times the per-token KL to the reference model.

    Mirrors `verl/trainer/ppo/ray_trainer.py::apply_kl_penalty` (used when
    `algorithm.use_kl_in_reward=True`), with tensors instead of a DataProto.

        kld_t                 = kl_penalty(old_log_probs, ref_log_probs)_t * m_t
        token_level_rewards_t = token_level_scores_t - beta * kld_t          beta read BEFORE the update
        current_kl            = mean over sequences of (masked mean of kld over the sequence's tokens)
        kl_ctrl.update(current_kl, n_steps=B)

    The KL is dense (every response token pays), while the score sits on the last token only.

    Args:
        token_level_scores: (B, L).
        old_log_probs: (B, L) log-probs of the actor that generated the batch.
        ref_log_probs: (B, L) log-probs of the frozen reference model.
        response_mask: (B, L).
        kl_ctrl: a FixedKLController or AdaptiveKLController (updated in place).
        kl_penalty: estimator, see `kl_penalty` (verl's `algorithm.kl_penalty`, default "kl").
    Returns:
        (token_level_rewards, metrics) with metrics `actor/reward_kl_penalty` (current_kl) and
        `actor/reward_kl_penalty_coeff` (beta used).
    """
    check_same_shape(token_level_scores=token_level_scores, old_log_probs=old_log_probs,
                     ref_log_probs=ref_log_probs, response_mask=response_mask)
    kld = _estimate_kl(old_log_probs, ref_log_probs, kl_penalty) * response_mask
    beta = kl_ctrl.value
    token_level_rewards = token_level_scores - beta * kld
    current_kl = torch.mean(masked_mean(kld, response_mask, axis=-1), dim=0).item()
    kl_ctrl.update(current_kl=current_kl, n_steps=token_level_scores.shape[0])
    return token_level_rewards, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}
