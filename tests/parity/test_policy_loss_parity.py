"""minirl's policy-loss registry vs verl 0.9.1's, loss for loss: all 12 names, every loss_agg_mode, with and without
rollout-correction weights, with and without global batch counts, random and extreme inputs; loss values, gradients
with respect to log_prob, and metrics (same names, same values)."""

import functools

import pytest
import torch
from parity import COMPARED, DTYPES, Cfg, assert_close, ragged_batch

try:
    from verl.trainer.ppo import core_algos as V
    from verl.workers.config import ActorConfig, PolicyLossConfig
except ImportError as error:  # a parity run that compares nothing must not pass
    pytest.fail(f"verl 0.9.1 cannot be imported here ({error}); use `make parity`.", pytrace=False)

from minirl import core
from minirl.config import load_config
from minirl.policy_loss import POLICY_LOSS_REGISTRY, get_policy_loss_fn, policy_loss_view

SEEDS = range(3)
LOSSES = sorted(set(V.POLICY_LOSS_REGISTRY) - {"bypass_mode"})  # bypass_mode: test_verl_parity.py, Chapter 9

# Settings per loss: verl's defaults first, then values that make the loss's own mechanism act on a small batch
# (Clip-Cov / KL-Cov pick 0.0002 of the tokens, i.e. one; at 0.1 they pick several).
SETTINGS = {
    "vanilla": [{}, {"clip_ratio_high": 0.28, "clip_ratio_c": 1.5}],
    "gspo": [{"clip_ratio_low": 0.0003, "clip_ratio_high": 0.0004}, {}],
    "geo_mean": [{"clip_ratio_low": 0.4, "clip_ratio_high": 0.4}, {}],
    "sapo": [{}, {"tau_pos": 2.0, "tau_neg": 5.0}],
    "cispo": [{}, {"clip_ratio_low": 1.0, "clip_ratio_high": 4.0}],
    "dppo_tv": [{}, {"clip_ratio_low": 0.05, "clip_ratio_high": 0.1, "clip_ratio_c": 1.2}],
    "dppo_kl": [{}, {"clip_ratio_low": 0.01, "clip_ratio_high": 0.02, "clip_ratio_c": 1.2}],
    "gpg": [{}],
    "dro": [{"policy_loss": {"dro_beta": 0.1}}, {"policy_loss": {"dro_beta": 2.0}}],
    "clip_cov": [{}, {"policy_loss": {"clip_cov_ratio": 0.1, "clip_cov_lb": 0.2, "clip_cov_ub": 8.0}}],
    "kl_cov": [{}, {"policy_loss": {"kl_cov_ratio": 0.1, "ppo_kl_coef": 0.5}}],
}


def verl_actor(settings: dict, info: dict) -> ActorConfig:
    policy = dict(settings.get("policy_loss", {}))
    top = {key: value for key, value in settings.items() if key != "policy_loss"}
    config = ActorConfig(strategy="fsdp", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2, rollout_n=1,
                         policy_loss=PolicyLossConfig(**policy), **top)
    config.global_batch_info.update(info)
    return config


@functools.cache
def minirl_actor_config(lines: tuple[str, ...]):
    return load_config(list(lines), announce=False).actor_rollout_ref.actor


def minirl_actor(name: str, settings: dict, info: dict):
    """minirl's actor config, built from verl-style overrides, as the actor's loss sees it."""
    actor = "actor_rollout_ref.actor"
    lines = [f"{actor}.policy_loss.loss_mode={name}"]
    lines += [f"{actor}.{key}={value}" for key, value in settings.items() if key != "policy_loss"]
    lines += [f"{actor}.policy_loss.{key}={value}" for key, value in settings.get("policy_loss", {}).items()]
    return policy_loss_view(minirl_actor_config(tuple(lines)), info)


def batch(seed: int, dtype, extreme: bool):
    """(old, new, advantages, mask): ratios spread around 1; `extreme` adds +-30 log-ratios, probabilities near 1,
    zero advantages and an empty row."""
    adv, mask, g = ragged_batch(seed, dtype, empty_rows=extreme)
    old = -torch.rand(adv.shape, generator=g, dtype=dtype) * 3
    new = old + torch.randn(adv.shape, generator=g, dtype=dtype) * 0.4
    adv = adv * 2
    if extreme:
        new[0, :2] = old[0, :2] + torch.tensor([30.0, -30.0], dtype=dtype)
        old[1, :3], new[1, :3] = -1e-6, -1e-7       # pi close to 1: the DPPO regions' edge
        adv[2] = 0.0
        mask[3] = 0
    return old, new, adv, mask


def compare(name, settings, mode, seed, dtype, extreme, with_is, with_info, bool_mask):
    old, new, adv, mask = batch(seed, dtype, extreme)
    if bool_mask:  # verl's actor passes a bool mask (workers/utils/losses.py::ppo_loss)
        mask = mask.bool()
    g = torch.Generator().manual_seed(seed + 100)
    weights = torch.rand(adv.shape, generator=g, dtype=dtype) * 2 if with_is else None
    tokens, rows = int(mask.sum()), int((mask.sum(-1) > 0).sum())
    info = {"dp_size": 2, "batch_num_tokens": tokens * 2, "global_batch_size": rows * 2} if with_info else {}
    if mode == "seq-mean-token-sum-norm" and with_info:
        info["loss_scale_factor"] = 7

    def run(fn, config, leaf):
        leaf = leaf.detach().clone().requires_grad_(True)
        torch.manual_seed(seed)  # Clip-Cov draws its tokens with torch.randperm on the global generator
        loss, metrics = fn(old, leaf, adv, mask, loss_agg_mode=mode, config=config, rollout_is_weights=weights)
        (grad,) = torch.autograd.grad(loss, leaf, allow_unused=True)
        return loss, metrics, torch.zeros_like(leaf) if grad is None else grad

    theirs = run(V.get_policy_loss_fn(name), verl_actor(settings, info), new)
    for label, config in (("verl's config", verl_actor(settings, info)), ("minirl's config",
                                                                           minirl_actor(name, settings, info))):
        ours = run(get_policy_loss_fn(name), config, new)
        assert_close(f"{name} loss ({label})", ours[0], theirs[0], dtype)
        assert_close(f"{name} grad ({label})", ours[2], theirs[2], dtype)
        assert ours[1].keys() == theirs[1].keys(), f"{name}: metrics {sorted(ours[1])} vs verl {sorted(theirs[1])}"
        for key, value in ours[1].items():
            assert_close(f"{name} {key}", value, theirs[1][key], dtype)


def test_the_registry_has_verl_s_twelve_names():
    assert sorted(POLICY_LOSS_REGISTRY) == sorted(V.POLICY_LOSS_REGISTRY) and len(POLICY_LOSS_REGISTRY) == 12
    COMPARED["policy loss names"] += 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", core.LOSS_AGG_MODES)
@pytest.mark.parametrize("name", LOSSES)
def test_policy_losses_match_verl(name, mode, dtype):
    for seed in SEEDS:
        for index, settings in enumerate(SETTINGS[name]):
            for extreme in (False, True):
                compare(name, settings, mode, seed, dtype, extreme, with_is=index % 2 == 1, with_info=seed == 1,
                        bool_mask=seed == 2)


@pytest.mark.parametrize("name", LOSSES)
def test_rollout_is_weights_and_global_counts_every_combination(name):
    for with_is in (False, True):
        for with_info in (False, True):
            compare(name, SETTINGS[name][-1], "token-mean", 0, torch.float64, True, with_is, with_info, False)


def test_the_mechanisms_act_in_the_tests():
    """The settings above do make each loss's own mechanism act (a parity test on inputs where nothing is clipped
    or picked would compare only the plain policy gradient)."""
    old, new, adv, mask = batch(0, torch.float64, False)
    for name, settings, key in [("gspo", SETTINGS["gspo"][0], "actor/pg_clipfrac"),
                                ("cispo", SETTINGS["cispo"][0], "actor/pg_clipfrac"),
                                ("dppo_tv", SETTINGS["dppo_tv"][1], "actor/pg_clipfrac"),
                                ("dppo_kl", SETTINGS["dppo_kl"][1], "actor/pg_clipfrac"),
                                ("geo_mean", SETTINGS["geo_mean"][0], "actor/pg_clipfrac"),
                                ("clip_cov", SETTINGS["clip_cov"][1], "actor/pg_clipfrac")]:
        _, metrics = get_policy_loss_fn(name)(old, new, adv, mask, config=verl_actor(settings, {}))
        assert 0 < metrics[key] < 1, (name, metrics)
    picked = Cfg(policy_loss=Cfg(kl_cov_ratio=0.1, ppo_kl_coef=0.5))
    with_penalty, _ = get_policy_loss_fn("kl_cov")(old, new, adv, mask, config=picked)
    without, _ = get_policy_loss_fn("kl_cov")(old, new, adv, mask, config=Cfg(policy_loss=Cfg(kl_cov_ratio=0.1,
                                                                                                  ppo_kl_coef=0.0)))
    assert with_penalty > without
