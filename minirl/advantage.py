"""Advantage estimators by name: the registry and the dispatch the trainer calls.

Mirrors verl 0.9.1: `verl/trainer/ppo/core_algos.py::register_adv_est` / `get_adv_estimator_fn` (a dict
from a name to a function) and `verl/trainer/ppo/ray_trainer.py::compute_advantage` (GAE and GRPO get
their own branches; every other name is looked up in the registry and called with keyword arguments).

Adding an estimator needs no edit to the trainer: decorate a function and use its name.

    from minirl.advantage import register_adv_est

    @register_adv_est("reinforce")
    def reinforce_no_baseline(token_level_rewards, response_mask, config=None, **kwargs):
        scores = token_level_rewards.sum(-1, keepdim=True)         # A_i = R_i
        return scores * response_mask, scores * response_mask      # (advantages, returns)

    train(["algorithm.adv_estimator=reinforce", ...])              # same process as the decorator

The function receives verl's keyword arguments: `token_level_rewards` (B, L), `response_mask` (B, L),
`config` (the `algorithm` section), `index` (B,) the uids of the groups, and `reward_baselines` (B,)
when the batch has them (ReMax). Two names get more, as in verl: `gdpo` also receives the batch itself
(`non_tensor_batch`, `batch`), and the optimal token baselines receive `sum_pi_squared`, `old_log_probs`
and `rollout_is_weights` (B, L). It returns `(advantages, returns)`, each (B, L). Accept `**kwargs` so
that arguments you do not use are ignored; a function written this way also runs in verl.

The registered names are verl 0.9.1's fourteen:

    gae                          minirl/gae.py              a learned critic V(s_t)
    grpo, grpo_vectorized        minirl/grpo.py             group mean (and std)
    grpo_passk                   minirl/grpo.py             only the best answer of a group learns
    gdpo                         minirl/gdpo.py             GRPO per reward dimension, then summed
    rloo, rloo_vectorized        minirl/rloo.py             mean of the other answers
    opo                          minirl/opo.py              length-weighted group mean
    gpg                          minirl/gpg.py              group mean, rescaled by B / #nonzero rewards
    reinforce_plus_plus(_baseline)  minirl/reinforce_pp.py  batch whitening (after a group mean)
    remax                        minirl/remax.py            the greedy answer's reward
    optimal_token_baseline, tir_optimal_token_baseline
                                 minirl/optimal_baseline.py one baseline per token position
Chapter 7 (critic-free baselines) reads this file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from minirl.protocol import DataProto

ADV_ESTIMATOR_REGISTRY: dict[str, Callable] = {}  # verl's name for the same dict


def register_adv_est(name: str) -> Callable[[Callable], Callable]:
    """Decorator: make `fn` available as `algorithm.adv_estimator=<name>`.

    As in verl, registering a *different* function under a taken name raises. One difference: a
    function with the same module and qualified name replaces the old one, so re-running the notebook
    cell that defines it works (verl would raise there too).
    """

    def decorator(fn: Callable) -> Callable:
        old = ADV_ESTIMATOR_REGISTRY.get(name)
        same_definition = old is not None and (old.__module__, old.__qualname__) == (fn.__module__, fn.__qualname__)
        if old is not None and old is not fn and not same_definition:
            raise ValueError(f"advantage estimator {name!r} is already registered "
                             f"({old.__module__}.{old.__qualname__}); register yours under another name.")
        ADV_ESTIMATOR_REGISTRY[name] = fn
        return fn

    return decorator


def get_adv_estimator_fn(name: str) -> Callable:
    """The function registered under `name`; a ValueError that lists the registered names otherwise."""
    if name not in ADV_ESTIMATOR_REGISTRY:
        registered = ", ".join(sorted(ADV_ESTIMATOR_REGISTRY))
        raise ValueError(f"unknown advantage estimator {name!r}; registered: {registered}. Register your own"
                         " with @register_adv_est(name) from minirl.advantage, in the process that calls train().")
    return ADV_ESTIMATOR_REGISTRY[name]


def algorithm_setting(config, key: str, default=None):
    """`config.get(key, default)` as verl writes it, for any config an estimator may receive.

    verl's estimators read optional keys with `config.get(...)` (an OmegaConf DictConfig or verl's
    AlgoConfig). minirl's `AlgorithmConfig` is a plain dataclass without `.get`, so read it as an
    attribute; a key the config does not have gives `default`, as in verl.
    """
    if config is None:
        return default
    if isinstance(config, Mapping):  # a dict, or an OmegaConf DictConfig
        return config.get(key, default)
    return getattr(config, key, default)


def compute_advantage(data: DataProto, adv_estimator: str, gamma: float = 1.0, lam: float = 1.0,
                      norm_adv_by_std_in_grpo: bool = True, config=None) -> DataProto:
    """Add `advantages` and `returns` (B, L) to the whole batch with the named estimator.

    Mirrors `ray_trainer.py::compute_advantage`: GAE (needs `values`) and GRPO take their arguments
    explicitly; any other name is called as `fn(token_level_rewards=, response_mask=, config=, index=,
    reward_baselines=)`, the last two only when the batch has uids / baselines. Two names get more:

        gdpo                          non_tensor_batch=, batch=  (each reward dimension is a column of
                                      non_tensor_batch; batch["prompts"] and ["attention_mask"] say where
                                      a response's last token is)
        optimal_token_baseline,       sum_pi_squared=, old_log_probs=, rollout_is_weights= (None when the
        tir_optimal_token_baseline    batch has no IS weights)

    What a beginner must notice: `norm_adv_by_std_in_grpo` reaches only `grpo`. verl passes it to no
    registered estimator, so `grpo_vectorized` and `gdpo` always divide by the group std (their own
    default), whatever `algorithm.norm_adv_by_std_in_grpo` says; `grpo_passk` reads it from `config`.

    Raises:
        ValueError: an optimal token baseline without `sum_pi_squared` (verl asserts) or `old_log_probs`
            (verl: KeyError) in the batch.
    """
    rewards, mask = data["token_level_rewards"], data["response_mask"]
    if adv_estimator == "gae":
        advantages, returns = gae.compute_gae_advantage_return(rewards, data["values"], mask, gamma, lam)
    elif adv_estimator == "grpo":
        advantages, returns = grpo.compute_grpo_outcome_advantage(rewards, mask, data["uid"],
                                                                  norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)
    else:
        kwargs = {"token_level_rewards": rewards, "response_mask": mask, "config": config}
        if "uid" in data.non_tensor_batch:
            kwargs["index"] = data["uid"]
        if "reward_baselines" in data.batch:
            kwargs["reward_baselines"] = data["reward_baselines"]
        if adv_estimator == "gdpo":  # the per-dimension rewards are columns of the batch
            kwargs["non_tensor_batch"] = data.non_tensor_batch
            kwargs["batch"] = data.batch
        if adv_estimator in OPTIMAL_TOKEN_BASELINES:
            kwargs.update(token_baseline_inputs(data, adv_estimator))
        advantages, returns = get_adv_estimator_fn(adv_estimator)(**kwargs)
    return data.union(DataProto(batch={"advantages": advantages, "returns": returns}))


OPTIMAL_TOKEN_BASELINES = ("optimal_token_baseline", "tir_optimal_token_baseline")


def token_baseline_inputs(data: DataProto, adv_estimator: str) -> dict:
    """The actor's per-token statistics an optimal token baseline needs, or a ValueError naming the fix."""
    if "sum_pi_squared" not in data.batch:
        raise ValueError(f"algorithm.adv_estimator={adv_estimator} needs sum_pi_squared (sum over the vocabulary "
                         "of pi(v)^2 at each response token) from the actor's log-prob pass: set "
                         "actor_rollout_ref.actor.calculate_sum_pi_squared=true. In rollout_correction.bypass_mode "
                         "there is no such pass and no sum_pi_squared (verl 0.9.1 fails there too).")
    if "old_log_probs" not in data.batch:
        raise ValueError(f"algorithm.adv_estimator={adv_estimator} needs old_log_probs (log pi_old of each sampled "
                         "token) in the batch: compute them before the advantages, as the trainer does.")
    return {"sum_pi_squared": data["sum_pi_squared"], "old_log_probs": data["old_log_probs"],
            "rollout_is_weights": data.batch.get("rollout_is_weights")}


# The built-in estimators register themselves when their modules are imported (at the end: they import
# register_adv_est from this module).
from minirl import gae, gdpo, gpg, grpo, opo, optimal_baseline, reinforce_pp, remax, rloo  # noqa: E402, F401
