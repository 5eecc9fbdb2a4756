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
when the batch has them (ReMax). It returns `(advantages, returns)`, each (B, L). Accept `**kwargs` so
that arguments you do not use are ignored; a function written this way also runs in verl.
Chapter 7 (critic-free baselines) reads this file.
"""

from __future__ import annotations

from collections.abc import Callable

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


def compute_advantage(data: DataProto, adv_estimator: str, gamma: float = 1.0, lam: float = 1.0,
                      norm_adv_by_std_in_grpo: bool = True, config=None) -> DataProto:
    """Add `advantages` and `returns` (B, L) to the whole batch with the named estimator.

    Mirrors `ray_trainer.py::compute_advantage`: GAE (needs `values`) and GRPO take their arguments
    explicitly; any other name is called as `fn(token_level_rewards=, response_mask=, config=, index=,
    reward_baselines=)`, the last two only when the batch has uids / baselines.
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
        advantages, returns = get_adv_estimator_fn(adv_estimator)(**kwargs)
    return data.union(DataProto(batch={"advantages": advantages, "returns": returns}))


# The built-in estimators register themselves when their modules are imported (at the end: they import
# register_adv_est from this module).
from minirl import gae, grpo, reinforce_pp, remax, rloo  # noqa: E402, F401
