"""On-policy distillation: the student samples, a teacher scores every token, the student moves toward the teacher.

Mirrors verl 0.9.1's `verl/trainer/distillation/losses.py` (the registry, `distillation_loss`,
`distillation_ppo_loss`) and `verl/trainer/distillation/fsdp/losses.py::compute_forward_kl_topk`. The teacher's
numbers come from `minirl/teacher.py` (verl: `verl/experimental/teacher_loop/`). Chapter 14 reads this file.

A reward says one thing per answer ("right" or "wrong"). A teacher says something about every token the student
wrote: how likely the teacher finds it. With q the student (pi_theta) and p the teacher, on the student's own samples
y ~ q, the per-token reverse KL estimators of KL(q || p) are those of minirl/kl.py, with x_t = log q(y_t) - log p(y_t):

    k1  ("kl")          x_t                  its value estimates KL(q||p); backpropagated, its gradient is 0 in
                                             expectation (verl refuses it without use_policy_gradient)
    k2  ("mse")         x_t^2 / 2            backpropagated: the gradient of the reverse KL
    k3  ("low_var_kl")  e^{-x_t} - 1 + x_t   (verl's default) backpropagated: the gradient of the *forward* KL
                                             E_q[(1 - p/q) grad log q] = -sum_y p(y) grad log q(y)

and with the teacher's top-k tokens at each position (`forward_kl_topk`), a forward KL over those k tokens:

    L_t = sum_{v in topk_p(t)} p(v) (log p(v) - log q(v)),   clamped at >= 0 (top-k masses do not sum to 1)

Two ways to use the per-token loss l_t (`distillation.distillation_loss.use_policy_gradient`):

    false  (supervised)        loss = agg_loss(l_t)                        (arXiv:2306.13649, GKD)
    true   (reward per token)  loss = PPO's clipped loss with advantage A_t = -stop_grad(l_t)
                               (Thinking Machines' on-policy distillation: with k1, A_t = log p - log q)

and `use_task_rewards` adds the usual PPO/GRPO loss on the task's advantages:

    total = ppo_loss + distillation_loss_coef * distillation_loss     (use_task_rewards=true)
    total = distillation_loss                                           (false: no PPO term, no entropy or KL loss)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from minirl.core import agg_loss, check_same_shape
from minirl.kl import KL_PENALTY_MODES, kl_penalty
from minirl.policy_loss import get_policy_loss_fn

# name -> fn(student, teacher, response_mask, loss_config) -> (per-token losses (B, R), metrics)
#   student: {"log_probs": (B, R), "logits": (B, R, V) when the loss uses top-k}
#   teacher: {"teacher_logprobs": (B, R, 1) or (B, R, K), "teacher_ids": (B, R, K) for top-k}
DISTILLATION_LOSS_REGISTRY: dict[str, Callable] = {}
DISTILLATION_SETTINGS_REGISTRY: dict[str, DistillationLossSettings] = {}


@dataclass(frozen=True)
class DistillationLossSettings:
    """What a loss needs from the teacher: its top-k tokens and log-probs (`use_topk`), or only the log-prob of
    each sampled token (`use_estimator`). verl's `DistillationLossSettings`; exactly one is true."""

    use_topk: bool = False
    use_estimator: bool = False

    def __post_init__(self):
        if self.use_topk == self.use_estimator:
            raise ValueError(f"a distillation loss uses top-k or an estimator, exactly one: got {self}")


def register_distillation_loss(names: list[str], use_topk: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: make `fn` available as `distillation.distillation_loss.loss_mode=<name>` for each name.

    Mirrors `losses.py::register_distillation_loss` (which takes a DistillationLossSettings); a name registered
    twice is an error, as in verl.
    """
    settings = DistillationLossSettings(use_topk=use_topk, use_estimator=not use_topk)

    def decorator(fn: Callable) -> Callable:
        for name in names:
            old = DISTILLATION_LOSS_REGISTRY.get(name)
            if old is not None and (old.__module__, old.__qualname__) != (fn.__module__, fn.__qualname__):
                raise ValueError(f"distillation loss {name!r} is already registered ({old.__qualname__}).")
            DISTILLATION_LOSS_REGISTRY[name] = fn
            DISTILLATION_SETTINGS_REGISTRY[name] = settings
        return fn

    return decorator


def get_distillation_loss_fn(name: str) -> Callable:
    """The loss registered under `name`; a ValueError listing the registered names otherwise."""
    if name not in DISTILLATION_LOSS_REGISTRY:
        raise ValueError(f"unknown distillation loss {name!r} (distillation.distillation_loss.loss_mode); registered: "
                         f"{', '.join(DISTILLATION_LOSS_REGISTRY)}")
    return DISTILLATION_LOSS_REGISTRY[name]


def uses_topk(name: str) -> bool:
    """Whether loss `name` needs the teacher's top-k tokens (else: the log-prob of each sampled token)."""
    get_distillation_loss_fn(name)
    return DISTILLATION_SETTINGS_REGISTRY[name].use_topk


def _mean(values: torch.Tensor) -> float:
    """The mean of the valid tokens' values; 0 for none (the metric is token-weighted, so it then weighs nothing)."""
    return values.mean().item() if values.numel() else 0.0


def _range(name: str, values: torch.Tensor) -> dict[str, float]:
    """{name_min, name_max} of the valid tokens' values; with none, +inf and -inf (the neutral elements, so a
    micro-batch without a valid token leaves the mini-batch's minimum and maximum as they are)."""
    if not values.numel():
        return {f"{name}_min": float("inf"), f"{name}_max": float("-inf")}
    return {f"{name}_min": values.min().item(), f"{name}_max": values.max().item()}


# ----------------------------------------------------------------------------------------------
# The per-token losses
# ----------------------------------------------------------------------------------------------


@register_distillation_loss(list(KL_PENALTY_MODES))
def reverse_kl_estimator_loss(student: dict, teacher: dict, response_mask: torch.Tensor,
                              loss_config) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token reverse-KL estimates, KL(student || teacher) on the student's sampled tokens.

    Mirrors `losses.py::compute_distillation_loss_reverse_kl_estimator`:

        l_t = kl_penalty(log q(y_t), log p(y_t), loss_mode)        (minirl/kl.py; k3 clamped to [-10, 10])

    Args:
        student: {"log_probs": (B, R)} with gradient.
        teacher: {"teacher_logprobs": (B, R, 1)}: log p of each sampled token.
        response_mask: (B, R).
        loss_config: `distillation.distillation_loss` (reads loss_mode).
    Returns:
        ((B, R) losses, {"distillation/abs_loss": mean |l_t| over valid tokens}).
    """
    teacher_log_probs = teacher["teacher_logprobs"].squeeze(-1)
    check_same_shape(log_probs=student["log_probs"], teacher_logprobs=teacher_log_probs, response_mask=response_mask)
    losses = kl_penalty(student["log_probs"], teacher_log_probs, loss_config.loss_mode)
    valid = response_mask.bool()
    return losses, {"distillation/abs_loss": _mean(losses[valid].abs())}  # k1 can be negative


def forward_kl_topk_terms(student_logits: torch.Tensor, teacher_topk_log_probs: torch.Tensor,
                          teacher_topk_ids: torch.Tensor, log_prob_min_clamp: float | None) -> dict[str, torch.Tensor]:
    """The forward KL over the teacher's top-k tokens, per position, and its diagnostics.

    Mirrors `verl/trainer/distillation/fsdp/losses.py::compute_forward_kl_topk` (its default, unchunked path):

        log q(v) = log_softmax(student_logits)[v]   for the teacher's k tokens v
        L_t      = sum_v p(v) (log p(v) - log q(v))   (after clamping both log-probs at log_prob_min_clamp, if set)
        mass     = sum_v p(v), sum_v q(v)              how much of each distribution the k tokens hold

    Args:
        student_logits: (B, R, V) float32, at the sampling temperature.
        teacher_topk_log_probs, teacher_topk_ids: (B, R, K).
    Returns:
        {"distillation_losses", "student_mass", "teacher_mass", "overlap_count", "overlap_token_advantage"},
        each (B, R). overlap_count: how many of the teacher's top-k are in the student's top-k.
    """
    student_log_probs = torch.log_softmax(student_logits, dim=-1)
    k = teacher_topk_ids.shape[-1]
    student_topk_ids = torch.topk(student_log_probs, k=k, dim=-1).indices
    student_topk_log_probs = torch.gather(student_log_probs, dim=-1, index=teacher_topk_ids)
    student_mass = student_topk_log_probs.exp().sum(-1)
    teacher_mass = teacher_topk_log_probs.exp().sum(-1)
    if log_prob_min_clamp is not None:
        student_topk_log_probs = student_topk_log_probs.clamp_min(log_prob_min_clamp)
        teacher_topk_log_probs = teacher_topk_log_probs.clamp_min(log_prob_min_clamp)
    p_log, q_log = teacher_topk_log_probs.float(), student_topk_log_probs.float()
    losses = (p_log.exp() * (p_log - q_log)).sum(-1)  # KL(p || q) over the k tokens
    # how much the two top-k sets agree (verl's diagnostics from arXiv:2604.13016)
    overlap = (teacher_topk_ids.unsqueeze(-1) == student_topk_ids.unsqueeze(-2)).any(-1)
    overlap_count = overlap.sum(-1)
    token_kl = teacher_topk_log_probs.exp() * (teacher_topk_log_probs - student_topk_log_probs)
    advantage = (-token_kl * overlap).sum(-1) / overlap_count.clamp_min(1)
    advantage = torch.where(overlap_count > 0, advantage, torch.zeros_like(advantage))
    return {"distillation_losses": losses, "student_mass": student_mass, "teacher_mass": teacher_mass,
            "overlap_count": overlap_count, "overlap_token_advantage": advantage}


@register_distillation_loss(["forward_kl_topk"], use_topk=True)
def forward_kl_topk_loss(student: dict, teacher: dict, response_mask: torch.Tensor,
                         loss_config) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token forward KL over the teacher's top-k tokens (`forward_kl_topk_terms`), clamped at 0.

    Mirrors `losses.py::compute_forward_kl_topk` (metrics: the top-k masses, mean, min and max over valid tokens,
    and the top-k overlap).

    Args:
        student: {"logits": (B, R, V)} with gradient.
        teacher: {"teacher_logprobs": (B, R, K), "teacher_ids": (B, R, K)}.
        response_mask: (B, R).
        loss_config: `distillation.distillation_loss` (reads topk, log_prob_min_clamp).
    """
    terms = forward_kl_topk_terms(student["logits"], teacher["teacher_logprobs"], teacher["teacher_ids"],
                                  loss_config.log_prob_min_clamp)
    valid = response_mask.bool()
    check_same_shape(losses=terms["distillation_losses"], response_mask=response_mask)
    overlap_ratio = terms["overlap_count"][valid].float().mean() / loss_config.topk if valid.any() else torch.zeros(())
    metrics = {"distillation/overlap_ratio": overlap_ratio.item(),
               "distillation/overlap_token_advantage": _mean(
                   terms["overlap_token_advantage"][valid & (terms["overlap_count"] > 0)])}
    for who in ("student", "teacher"):
        mass = terms[f"{who}_mass"][valid]
        metrics.update({f"distillation/{who}_mass": _mean(mass), **_range(f"distillation/{who}_mass", mass)})
    return terms["distillation_losses"].clamp_min(0.0), metrics  # top-k: KL over part of the support can be < 0


# ----------------------------------------------------------------------------------------------
# From per-token losses to the loss that is back-propagated
# ----------------------------------------------------------------------------------------------


def distillation_loss(student: dict, teacher: dict, response_mask: torch.Tensor, loss_config, loss_agg_mode: str,
                      global_batch_info: dict, old_log_prob: torch.Tensor | None = None,
                      rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The scalar distillation loss of a micro-batch and its metrics.

    Mirrors `losses.py::distillation_loss`: the registered per-token loss l_t, its range over valid tokens
    (`distillation/loss_min`, `loss_max`, before clamping), clamped to [-loss_max_clamp, loss_max_clamp] if set,
    then either aggregated like any loss (agg_loss with the actor's loss_agg_mode and the mini-batch's counts), or,
    with use_policy_gradient, fed to the `policy_loss_mode` loss as the advantage A_t = -l_t (detached), with
    `old_log_prob` and the loss config's own clip ratios; its metrics are logged as `distillation/pg_clipfrac`, ...

    Args:
        student: {"log_probs": (B, R)} (and "logits" (B, R, V) for top-k), with gradient.
        teacher: see the registered loss.
        response_mask: (B, R).
        loss_config: `distillation.distillation_loss`.
        loss_agg_mode, global_batch_info: the actor's (global_batch_info: dp_size, batch_num_tokens, ...).
        old_log_prob, rollout_is_weights: (B, R), for use_policy_gradient.
    """
    losses, metrics = get_distillation_loss_fn(loss_config.loss_mode)(student, teacher, response_mask, loss_config)
    metrics.update(_range("distillation/loss", losses.detach()[response_mask.bool()]))
    if loss_config.loss_max_clamp is not None:  # both sides: k1 can be negative
        losses = losses.clamp(min=-loss_config.loss_max_clamp, max=loss_config.loss_max_clamp)
    if not loss_config.use_policy_gradient:  # back-propagate the per-token loss itself
        return agg_loss(losses, response_mask, loss_agg_mode, **global_batch_info), metrics
    view = SimpleNamespace(clip_ratio=loss_config.clip_ratio, clip_ratio_low=loss_config.clip_ratio_low,
                           clip_ratio_high=loss_config.clip_ratio_high, global_batch_info=dict(global_batch_info))
    loss, pg_metrics = get_policy_loss_fn(loss_config.policy_loss_mode)(
        old_log_prob, student["log_probs"], -losses.detach(), response_mask, loss_agg_mode=loss_agg_mode, config=view,
        rollout_is_weights=rollout_is_weights)
    metrics.update({f"distillation/{key.removeprefix('actor/')}": value for key, value in pg_metrics.items()})
    return loss, metrics


def combine_with_policy_loss(policy_loss: torch.Tensor | None, distill_loss: torch.Tensor,
                             loss_config) -> torch.Tensor:
    """The actor's loss with distillation on: verl's `losses.py::distillation_ppo_loss`.

        use_task_rewards=true:   ppo_loss + distillation_loss_coef * distillation_loss
        use_task_rewards=false:  distillation_loss   (ppo_loss, with its entropy and KL terms, is dropped)

    `policy_loss` is the actor's usual loss (pg_loss - entropy bonus + KL loss), or None where it was not computed
    (`needs_policy_loss` is false).
    """
    if not loss_config.use_task_rewards:
        return distill_loss
    return policy_loss + loss_config.distillation_loss_coef * distill_loss


def needs_policy_loss(loss_config) -> bool:
    """Whether verl computes the PPO loss at all (for the loss, or only for its metrics under use_policy_gradient)."""
    return loss_config.use_task_rewards or loss_config.use_policy_gradient
