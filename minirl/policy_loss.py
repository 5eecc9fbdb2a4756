"""Policy losses by name: the registry the actor looks its loss up in, and the simplest entries.

Mirrors verl 0.9.1: `verl/trainer/ppo/core_algos.py::register_policy_loss` / `get_policy_loss_fn` and the
actor's call in `verl/workers/utils/losses.py::ppo_loss`:

    loss_fn = get_policy_loss_fn(actor.policy_loss.loss_mode)       # "vanilla" by default
    pg_loss, metrics = loss_fn(old_log_prob, log_prob, advantages, response_mask,
                               loss_agg_mode=actor.loss_agg_mode, config=actor, rollout_is_weights=w)

Every loss takes verl's arguments, all tensors (B, L): `old_log_prob` (the policy that sampled, or the rollout's in
bypass mode), `log_prob` (the policy being trained: it carries the gradient), `advantages`, `response_mask`;
`rollout_is_weights` (B, L) detached importance weights of rollout correction, or None. `config` is minirl's actor
config or any object with verl's attribute names (`clip_ratio`, `clip_ratio_low/high/c`, `tau_pos`, `tau_neg`,
`policy_loss.clip_cov_ratio`, ..., `global_batch_info`). It returns `(loss, metrics)`: the scalar to minimise and
floats named as verl logs them (`actor/pg_clipfrac`, `actor/ppo_kl`, `actor/pg_clipfrac_lower`).

The twelve names, by family (Chapter 11 reads them in this order):

    vanilla      PPO's clipped token ratio (minirl/ppo.py)                 Chapter 1
    gpg, dro     no ratio: -A log pi, and -A log pi + beta/2 (log r)^2     this file
    gspo         one length-normalised ratio per sequence                  minirl/sequence_ratio.py
    geo_mean     GMPO: the geometric mean of clipped token ratios          minirl/sequence_ratio.py
    sapo         a smooth sigmoid gate instead of a hard clip              minirl/soft_clip.py
    cispo        clip the (detached) IS weight, keep every token's gradient minirl/soft_clip.py
    dppo_tv      a trust region on |pi - pi_old| (total variation)         minirl/soft_clip.py
    dppo_kl      a trust region on the binary KL of the sampled token      minirl/soft_clip.py
    clip_cov     detach a few tokens whose log-prob and advantage covary   minirl/entropy_cov.py
    kl_cov       penalise |log r| on the most covarying tokens             minirl/entropy_cov.py
    bypass_mode  rollout correction's loss (Chapter 9; minirl/rollout_correction.py)

Adding a loss needs no edit to the actor: decorate a function with `@register_policy_loss(name)` and set
`actor_rollout_ref.actor.policy_loss.loss_mode=name`, as in verl.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch

from minirl.core import agg_loss, check_same_shape, masked_mean
from minirl.ppo import compute_policy_loss
from minirl.rollout_correction import compute_policy_loss_bypass_mode

POLICY_LOSS_REGISTRY: dict[str, Callable] = {}  # verl's name for the same dict


def register_policy_loss(name: str) -> Callable[[Callable], Callable]:
    """Decorator: make `fn` available as `actor_rollout_ref.actor.policy_loss.loss_mode=<name>`.

    verl replaces a name silently; minirl refuses a *different* function under a taken name (a typo would
    otherwise replace GSPO), except one with the same module and qualified name (re-running a notebook cell).
    """

    def decorator(fn: Callable) -> Callable:
        old = POLICY_LOSS_REGISTRY.get(name)
        same_definition = old is not None and (old.__module__, old.__qualname__) == (fn.__module__, fn.__qualname__)
        if old is not None and old is not fn and not same_definition:
            raise ValueError(f"policy loss {name!r} is already registered ({old.__module__}.{old.__qualname__}); "
                             "register yours under another name.")
        POLICY_LOSS_REGISTRY[name] = fn
        return fn

    return decorator


def get_policy_loss_fn(name: str) -> Callable:
    """The loss registered under `name`; a ValueError listing the registered names otherwise."""
    if name not in POLICY_LOSS_REGISTRY:
        raise ValueError(f"unknown policy loss {name!r} (actor_rollout_ref.actor.policy_loss.loss_mode); registered: "
                         f"{', '.join(sorted(POLICY_LOSS_REGISTRY))}. Register your own with "
                         "@register_policy_loss(name) from minirl.policy_loss, in the process that calls train().")
    return POLICY_LOSS_REGISTRY[name]


# ----------------------------------------------------------------------------------------------
# Reading the config the way verl does
# ----------------------------------------------------------------------------------------------


def clip_range(config) -> tuple[float, float]:
    """(eps_low, eps_high): `clip_ratio_low/high`, each falling back to `clip_ratio` when None (verl's rule).

    verl's actor.yaml sets all three to 0.2, so `clip_ratio` alone changes nothing unless low/high are null."""
    low, high = getattr(config, "clip_ratio_low", None), getattr(config, "clip_ratio_high", None)
    base = getattr(config, "clip_ratio", 0.2)
    return (base if low is None else low), (base if high is None else high)


def batch_info(config) -> dict:
    """`config.global_batch_info`: the global token / sequence counts `agg_loss` divides by (empty: this batch)."""
    return dict(getattr(config, "global_batch_info", None) or {})


def policy_loss_view(actor, global_batch_info: dict, rollout_correction=None) -> SimpleNamespace:
    """The `config` a loss receives: the actor config's fields plus this micro-batch's `global_batch_info` (verl
    writes it into the actor config before each call) and, in bypass mode, `policy_loss.rollout_correction` (verl's
    `apply_bypass_mode` copies `algorithm.rollout_correction` there)."""
    fields = dict(vars(actor))
    fields["policy_loss"] = SimpleNamespace(**vars(actor.policy_loss), rollout_correction=rollout_correction)
    return SimpleNamespace(**fields, global_batch_info=dict(global_batch_info))


def policy_setting(config, name: str, default=None):
    """`config.policy_loss.<name>`, or `default` where it is missing or None (verl's `x if x is not None else d`)."""
    policy_loss = getattr(config, "policy_loss", None)
    value = getattr(policy_loss, name, None) if policy_loss is not None else None
    return default if value is None else value


def ppo_kl_metric(log_ratio: torch.Tensor, response_mask: torch.Tensor) -> float:
    """`actor/ppo_kl`: the masked mean of log pi_old - log pi_theta (k1 estimate of KL(pi_old || pi_theta))."""
    return masked_mean(-log_ratio, response_mask).item()


# ----------------------------------------------------------------------------------------------
# The registered losses of this file
# ----------------------------------------------------------------------------------------------


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                                config=None, rollout_is_weights=None) -> tuple[torch.Tensor, dict[str, Any]]:
    """PPO's clipped surrogate (with clip-higher and dual clip): `minirl.ppo.compute_policy_loss` with the clip
    range read from `config`. Mirrors `core_algos.py::compute_policy_loss_vanilla`.

        L_t = max(-A r_t, -A clip(r_t, 1 - eps_low, 1 + eps_high)),  capped at -A c when A < 0
    """
    low, high = clip_range(config)
    return compute_policy_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, low, high,
                               getattr(config, "clip_ratio_c", 3.0), rollout_is_weights, batch_info(config))


@register_policy_loss("bypass_mode")
def compute_policy_loss_bypass(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                               config=None, rollout_is_weights=None) -> tuple[torch.Tensor, dict[str, Any]]:
    """Rollout correction's bypass loss (Chapter 9): `old_log_prob` holds the rollout's log-probs, and
    `config.policy_loss.rollout_correction` says ppo_clip or reinforce. `rollout_is_weights` is ignored: the loss
    computes its own. Mirrors `core_algos.py::compute_policy_loss_bypass_mode`; the maths is in
    `minirl.rollout_correction.compute_policy_loss_bypass_mode`."""
    correction = policy_setting(config, "rollout_correction")
    if correction is None:
        raise ValueError("loss_mode=bypass_mode needs policy_loss.rollout_correction: set "
                         "algorithm.rollout_correction.bypass_mode=true instead of choosing the loss by hand.")
    low, high = clip_range(config)
    return compute_policy_loss_bypass_mode(old_log_prob, log_prob, advantages, response_mask, correction,
                                           loss_agg_mode, low, high, getattr(config, "clip_ratio_c", 3.0),
                                           batch_info(config))


@register_policy_loss("gpg")
def compute_policy_loss_gpg(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                            config=None, rollout_is_weights=None) -> tuple[torch.Tensor, dict[str, Any]]:
    """GPG (Group Policy Gradient, Chu et al. 2025): plain REINFORCE on the group advantages, no ratio, no clip.

        L_t = -A_t log pi_theta(a_t)          (times the IS weight w_t when given)

    `old_log_prob` is not used: with one update per batch the ratio is 1 anyway, and GPG drops the trust region
    that PPO's clip adds for later mini-batches. verl returns no metrics for it. Mirrors
    `core_algos.py::compute_policy_loss_gpg` (pair it with `algorithm.adv_estimator=gpg`).
    """
    check_same_shape(log_prob=log_prob, advantages=advantages, response_mask=response_mask)
    pg_losses = -log_prob * advantages
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    return agg_loss(pg_losses, response_mask, loss_agg_mode, **batch_info(config)), {}


@register_policy_loss("dro")
def compute_policy_loss_dro(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                            config=None, rollout_is_weights=None) -> tuple[torch.Tensor, dict[str, Any]]:
    """DRO (Direct Reward Optimization): REINFORCE plus a quadratic penalty on the log-ratio, a soft trust region.

        L_t = -( A_t log pi_theta(a_t) - beta/2 (log pi_theta(a_t) - log pi_old(a_t))^2 )

    The penalty's gradient, -beta log r_t, pulls each token back toward pi_old in proportion to how far it moved.
    beta is `policy_loss.dro_beta` (no default: verl requires a positive value). Mirrors
    `core_algos.py::compute_policy_loss_dro`.
    """
    check_same_shape(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask)
    beta = policy_setting(config, "dro_beta")
    if beta is None or beta <= 0:
        raise ValueError("loss_mode=dro needs a positive actor_rollout_ref.actor.policy_loss.dro_beta "
                         f"(got {beta}), e.g. policy_loss.dro_beta=0.1.")
    log_ratio = log_prob - old_log_prob
    pg_losses = -(log_prob * advantages - 0.5 * beta * log_ratio.square())
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, **batch_info(config))
    return pg_loss, {"actor/ppo_kl": ppo_kl_metric(log_ratio, response_mask)}


# The other losses register themselves when their modules are imported (at the end: they import
# register_policy_loss and the helpers above from this module).
from minirl import entropy_cov, sequence_ratio, soft_clip  # noqa: E402, F401
