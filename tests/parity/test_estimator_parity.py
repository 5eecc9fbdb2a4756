"""minirl vs verl 0.9.1: the advantage estimators added after the first six, number for number.

grpo_vectorized, grpo_passk, gdpo, rloo_vectorized, opo, gpg, optimal_token_baseline and
tir_optimal_token_baseline, each called directly and through `compute_advantage` (minirl's and verl's
`ray_trainer.py::compute_advantage`, so the keyword arguments each one receives are compared too), on
random batches: group sizes 1 to 8 with the rows of a group scattered over the batch, ragged and empty
responses, float32 and float64. Run with `.venv-verl/bin/python -m pytest tests/parity/test_estimator_parity.py`.
"""

import numpy as np
import pytest
import torch
from parity import DTYPES, Cfg, assert_close, grouped_uids

try:
    from verl import DataProto as VerlDataProto
    from verl.trainer.ppo import core_algos as V
    from verl.trainer.ppo.ray_trainer import compute_advantage as verl_compute_advantage
except ImportError as error:  # a parity run that compares nothing must not pass
    pytest.fail(f"verl 0.9.1 cannot be imported here ({error}). The parity tests run in their own "
                "environment: use `make parity` (or `make test`), which builds .venv-verl.", pytrace=False)

from minirl import core, gdpo, gpg, grpo, opo, optimal_baseline, rloo
from minirl.advantage import compute_advantage
from minirl.protocol import DataProto

SEEDS = range(3)
GROUP_SIZES = [[1], [2, 3], [4, 1, 8], [5, 5, 5, 2], [8, 7, 6, 1, 3]]
NO_SINGLETONS = [[2], [2, 3], [4, 2, 8], [5, 5, 5, 2], [8, 7, 6, 2, 3]]
LENGTH = 9


def ids(sizes):
    return "groups" + "-".join(map(str, sizes))


def scattered_uids(seed: int, sizes) -> np.ndarray:
    """verl-style uids, the rows of each group shuffled over the batch (grouping must not rely on order)."""
    uids = grouped_uids(seed, sizes)
    return uids[np.random.default_rng(seed + 100).permutation(len(uids))]


def right_padded_mask(g: torch.Generator, batch: int, empty_rows: bool) -> torch.Tensor:
    lengths = torch.randint(0 if empty_rows else 1, LENGTH + 1, (batch,), generator=g)
    lengths[0] = LENGTH
    return (torch.arange(LENGTH)[None] < lengths[:, None]).to(torch.int64)


def multi_turn_mask(g: torch.Generator, batch: int) -> torch.Tensor:
    """Masks with holes (tool output between the model's turns), some rows empty, some right-padded."""
    mask = right_padded_mask(g, batch, empty_rows=True)
    holes = torch.rand(batch, LENGTH, generator=g) < 0.3
    holes[torch.rand(batch, generator=g) < 0.3] = False  # some rows keep a plain right-padded mask
    return mask * ~holes


def outcome_rewards(g, mask, dtype, discrete, dense=False):
    batch = mask.shape[0]
    scores = (torch.randint(0, 2, (batch,), generator=g).to(dtype) if discrete
              else torch.randn(batch, generator=g, dtype=dtype))
    rewards = core.place_scores_on_last_token(scores, mask)
    if dense:  # a per-token reward too (a KL penalty in the reward, a process reward)
        rewards = rewards + 0.1 * torch.randn(mask.shape, generator=g, dtype=dtype) * mask
    return rewards


def compare(name, ours, theirs, dtype):
    assert_close(f"{name} advantages", ours[0], theirs[0], dtype)
    assert_close(f"{name} returns", ours[1], theirs[1], dtype)


# ----------------------------------------------------------------------------------------------
# Outcome estimators: grpo_vectorized, rloo_vectorized, opo, gpg, grpo_passk
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("discrete", [False, True])
@pytest.mark.parametrize("sizes", GROUP_SIZES, ids=ids)
@pytest.mark.parametrize("seed", SEEDS)
def test_group_outcome_estimators(seed, sizes, discrete, dtype):
    uids = scattered_uids(seed, sizes)
    g = torch.Generator().manual_seed(seed)
    mask = right_padded_mask(g, len(uids), empty_rows=True)
    rewards = outcome_rewards(g, mask, dtype, discrete, dense=seed == 2)
    for norm in (True, False):
        ours = grpo.compute_grpo_vectorized_outcome_advantage(rewards, mask, uids, norm_adv_by_std_in_grpo=norm)
        theirs = V.compute_grpo_vectorized_outcome_advantage(rewards.clone(), mask, uids, norm_adv_by_std_in_grpo=norm)
        # verl takes the group mean and std in float32 (verl/utils/groupwise.py::group_mean_std) for any dtype.
        compare("compute_grpo_vectorized_outcome_advantage", ours, theirs, torch.float32)
    ours = rloo.compute_rloo_vectorized_outcome_advantage(rewards, mask, uids)
    compare("compute_rloo_vectorized_outcome_advantage", ours,
            V.compute_rloo_vectorized_outcome_advantage(rewards.clone(), mask, uids), dtype)
    ours = opo.compute_opo_outcome_advantage(rewards, mask, uids)
    compare("compute_opo_outcome_advantage", ours, V.compute_opo_outcome_advantage(rewards.clone(), mask, uids), dtype)
    for f_norm in (1.0, 2.5):
        ours = gpg.compute_gpg_outcome_advantage(rewards, mask, uids, f_norm=f_norm)
        theirs = V.compute_gpg_outcome_advantage(rewards.clone(), mask, uids, f_norm=f_norm)
        compare("compute_gpg_outcome_advantage", ours, theirs, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("discrete", [False, True])
@pytest.mark.parametrize("sizes", NO_SINGLETONS, ids=ids)
@pytest.mark.parametrize("seed", SEEDS)
def test_grpo_passk(seed, sizes, discrete, dtype):
    uids = scattered_uids(seed, sizes)
    g = torch.Generator().manual_seed(seed)
    mask = right_padded_mask(g, len(uids), empty_rows=True)
    rewards = outcome_rewards(g, mask, dtype, discrete)
    for norm in (True, False):
        config = Cfg(norm_adv_by_std_in_grpo=norm)
        ours = grpo.compute_grpo_passk_outcome_advantage(rewards, mask, uids, config=config)
        theirs = V.compute_grpo_passk_outcome_advantage(rewards.clone(), mask, uids, config=config)
        compare("compute_grpo_passk_outcome_advantage", ours, theirs, dtype)


def test_grpo_passk_refuses_a_group_of_one_as_verl_does():
    rewards, mask = torch.tensor([[1.0], [0.0], [1.0]]), torch.ones(3, 1)
    uids = np.array(["a", "a", "b"], dtype=object)
    with pytest.raises(ValueError, match="at least 2"):
        V.compute_grpo_passk_outcome_advantage(rewards.clone(), mask, uids, config=Cfg())
    with pytest.raises(ValueError, match="at least 2"):
        grpo.compute_grpo_passk_outcome_advantage(rewards, mask, uids, config=Cfg())


@pytest.mark.parametrize("dtype", DTYPES)
def test_outcome_estimators_on_edge_groups(dtype):
    """All-equal groups (exact values), all-zero rewards (GPG's alpha clamp), empty answers, singletons."""
    uids = np.array(["a", "a", "a", "b", "b", "c", "d", "d", "e", "e"], dtype=object)
    scores = torch.tensor([0.5, 0.5, 0.5, 1.0, 1.0, 2.0, 0.0, 0.0, -1.0, 3.0], dtype=dtype)
    lengths = torch.tensor([3, 0, 5, 2, 2, 4, 0, 0, 1, 6])  # group d: every answer empty
    mask = (torch.arange(6)[None] < lengths[:, None]).to(torch.int64)
    for rewards in (core.place_scores_on_last_token(scores, mask), torch.zeros(10, 6, dtype=dtype)):
        for norm in (True, False):
            compare("compute_grpo_vectorized_outcome_advantage (edge)",
                    grpo.compute_grpo_vectorized_outcome_advantage(rewards, mask, uids, norm_adv_by_std_in_grpo=norm),
                    V.compute_grpo_vectorized_outcome_advantage(rewards.clone(), mask, uids,
                                                                 norm_adv_by_std_in_grpo=norm), torch.float32)
        compare("compute_rloo_vectorized_outcome_advantage (edge)",
                rloo.compute_rloo_vectorized_outcome_advantage(rewards, mask, uids),
                V.compute_rloo_vectorized_outcome_advantage(rewards.clone(), mask, uids), dtype)
        # Group d (all answers empty): 0 / 0 = NaN in both, on every position.
        ours = opo.compute_opo_outcome_advantage(rewards, mask, uids)
        compare("compute_opo_outcome_advantage (edge)", ours,
                V.compute_opo_outcome_advantage(rewards.clone(), mask, uids), dtype)
        assert ours[0][6:8].isnan().all() and not ours[0][:6].isnan().any()
        compare("compute_gpg_outcome_advantage (edge)", gpg.compute_gpg_outcome_advantage(rewards, mask, uids),
                V.compute_gpg_outcome_advantage(rewards.clone(), mask, uids), dtype)
        passk_uids = np.array(["a", "a", "a", "b", "b", "c", "c", "d", "d", "d"], dtype=object)
        compare("compute_grpo_passk_outcome_advantage (edge)",
                grpo.compute_grpo_passk_outcome_advantage(rewards, mask, passk_uids, config=Cfg()),
                V.compute_grpo_passk_outcome_advantage(rewards.clone(), mask, passk_uids, config=Cfg()), dtype)


# ----------------------------------------------------------------------------------------------
# GDPO
# ----------------------------------------------------------------------------------------------


def gdpo_batch(seed, sizes, dtype):
    """(rewards, mask, uids, tensors, columns): a rollout batch with two reward dimensions per row."""
    uids = scattered_uids(seed, sizes)
    g = torch.Generator().manual_seed(seed)
    batch = len(uids)
    mask = right_padded_mask(g, batch, empty_rows=True)
    prompt_length = 5
    prompt_mask = (torch.arange(prompt_length)[None]
                   >= torch.randint(0, prompt_length, (batch,), generator=g)[:, None]).to(torch.int64)  # left-padded
    tensors = {"prompts": torch.randint(3, 50, (batch, prompt_length), generator=g),
               "attention_mask": torch.cat([prompt_mask, mask], dim=1), "response_mask": mask}
    accuracy = torch.randint(0, 2, (batch,), generator=g).tolist()  # Python ints, as a reward function returns
    format_ = (torch.randint(0, 3, (batch,), generator=g) / 2).tolist()
    columns = {"uid": uids, "accuracy_reward": np.array(accuracy, dtype=object),
               "format_reward": np.array(format_, dtype=object)}
    rewards = outcome_rewards(g, mask, dtype, discrete=False)
    return rewards, mask, uids, tensors, columns


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weights", [None, [0.3, 1.7]], ids=["equal-weights", "weights"])
@pytest.mark.parametrize("sizes", GROUP_SIZES[1:], ids=ids)
@pytest.mark.parametrize("seed", SEEDS)
def test_gdpo_with_two_reward_dimensions(seed, sizes, weights, dtype):
    rewards, mask, uids, tensors, columns = gdpo_batch(seed, sizes, dtype)
    config = Cfg(gdpo_reward_keys=["accuracy_reward", "format_reward"], gdpo_reward_weights=weights)
    ours = gdpo.compute_gdpo_outcome_advantage(rewards, mask, uids, config=config, non_tensor_batch=columns,
                                               batch=tensors)
    theirs = V.compute_gdpo_outcome_advantage(rewards.clone(), mask, uids, config=config, non_tensor_batch=columns,
                                              batch=tensors)
    assert ours[0].dtype == theirs[0].dtype == torch.float32  # both read the columns as float32
    compare("compute_gdpo_outcome_advantage", ours, theirs, torch.float32)
    # Through compute_advantage: verl's passes non_tensor_batch and batch for "gdpo"; so must minirl's.
    ours = compute_advantage(DataProto(batch={**tensors, "token_level_rewards": rewards}, non_tensor_batch=columns),
                             "gdpo", config=config)
    theirs = verl_compute_advantage(VerlDataProto.from_dict(tensors={**tensors, "token_level_rewards": rewards},
                                                            non_tensors=columns), "gdpo", config=config)
    assert_close("compute_advantage(gdpo)", ours["advantages"], theirs.batch["advantages"], torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sizes", GROUP_SIZES, ids=ids)
@pytest.mark.parametrize("seed", SEEDS)
def test_gdpo_without_the_batch_is_grpo_then_whitening(seed, sizes, dtype):
    rewards, mask, uids, _, _ = gdpo_batch(seed, sizes, dtype)
    if mask.sum() < 2:  # one valid token: the unbiased whitening divides by zero in both
        for fn in (gdpo.compute_gdpo_outcome_advantage, V.compute_gdpo_outcome_advantage):
            with pytest.raises(ValueError):
                fn(rewards.clone(), mask, uids)
        return
    ours = gdpo.compute_gdpo_outcome_advantage(rewards, mask, uids)
    theirs = V.compute_gdpo_outcome_advantage(rewards.clone(), mask, uids)
    # A singleton's GRPO advantage is R / (1 + 1e-6) where verl's 1 is a float32 tensor even for float64 input;
    # the whitening spreads that rounding over the whole batch.
    singleton = any((uids == u).sum() == 1 for u in uids)
    compare("compute_gdpo_outcome_advantage (no batch)", ours, theirs, torch.float32 if singleton else dtype)


# ----------------------------------------------------------------------------------------------
# Optimal token baselines
# ----------------------------------------------------------------------------------------------


def token_stats(g, mask, dtype, with_is):
    """old_log_probs, sum_pi_squared in [pi^2, 1], and rollout IS weights (or None)."""
    old_log_probs = -torch.rand(mask.shape, generator=g, dtype=dtype) * 3
    pi_squared = torch.exp(old_log_probs) ** 2
    sum_pi_squared = pi_squared + torch.rand(mask.shape, generator=g, dtype=dtype) * (1 - pi_squared)
    weights = torch.rand(mask.shape, generator=g, dtype=dtype) * 2 if with_is else None
    return old_log_probs, sum_pi_squared, weights


OTB = [("optimal_token_baseline", optimal_baseline.compute_optimal_token_baseline_advantage,
        V.compute_optimal_token_baseline_advantage),
       ("tir_optimal_token_baseline", optimal_baseline.compute_multi_turn_optimal_token_baseline_advantage,
        V.compute_multi_turn_optimal_token_baseline_advantage)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_is", [False, True], ids=["no-is", "is-weights"])
@pytest.mark.parametrize("masks", ["right-padded", "multi-turn"])
@pytest.mark.parametrize("sizes", GROUP_SIZES, ids=ids)
@pytest.mark.parametrize("seed", SEEDS)
def test_optimal_token_baselines(seed, sizes, masks, with_is, dtype):
    uids = scattered_uids(seed, sizes)
    g = torch.Generator().manual_seed(seed)
    mask = right_padded_mask(g, len(uids), empty_rows=True) if masks == "right-padded" \
        else multi_turn_mask(g, len(uids))
    rewards = outcome_rewards(g, mask, dtype, discrete=seed == 1, dense=seed == 2)
    old_log_probs, sum_pi_squared, weights = token_stats(g, mask, dtype, with_is)
    for name, ours_fn, theirs_fn in OTB:
        for tail in (True, False):
            args = dict(index=uids, old_log_probs=old_log_probs, sum_pi_squared=sum_pi_squared,
                        rollout_is_weights=weights, handle_zero_tail=tail)
            compare(theirs_fn.__name__, ours_fn(rewards, mask, **args), theirs_fn(rewards.clone(), mask, **args), dtype)
        # Through compute_advantage: sum_pi_squared, old_log_probs and rollout_is_weights come from the batch.
        tensors = {"token_level_rewards": rewards, "response_mask": mask, "old_log_probs": old_log_probs,
                   "sum_pi_squared": sum_pi_squared}
        if weights is not None:
            tensors["rollout_is_weights"] = weights
        ours = compute_advantage(DataProto(batch=tensors, non_tensor_batch={"uid": uids}), name, config=Cfg())
        theirs = verl_compute_advantage(VerlDataProto.from_dict(tensors=tensors, non_tensors={"uid": uids}), name,
                                        config=Cfg())
        assert_close(f"compute_advantage({name})", ours["advantages"], theirs.batch["advantages"], dtype)
        assert_close(f"compute_advantage({name}) returns", ours["returns"], theirs.batch["returns"], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_optimal_token_baselines_on_edge_groups(dtype):
    """Ties for the longest answer (no tail cut), a unique longest with a hole and an empty sibling, an all-empty
    group, a group with one non-empty answer, a singleton, and all-equal rewards."""
    uids = np.array(["tie", "tie", "tie", "long", "long", "long", "empty", "empty", "lone", "lone", "solo", "eq", "eq"],
                    dtype=object)
    lengths = torch.tensor([6, 6, 2, 7, 0, 4, 0, 0, 0, 5, 5, 4, 2])
    mask = (torch.arange(8)[None] < lengths[:, None]).to(torch.int64)
    mask[3, 1] = 0  # a hole in the unique longest answer of group "long"
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 2.0, 2.0, 0.5, 0.5], dtype=dtype)
    rewards = core.place_scores_on_last_token(scores, mask)
    g = torch.Generator().manual_seed(7)
    old_log_probs, sum_pi_squared, _ = token_stats(g, mask, dtype, with_is=False)
    for _, ours_fn, theirs_fn in OTB:
        for tail in (True, False):
            args = dict(index=uids, old_log_probs=old_log_probs, sum_pi_squared=sum_pi_squared, handle_zero_tail=tail)
            compare(f"{theirs_fn.__name__} (edge)", ours_fn(rewards, mask, **args),
                    theirs_fn(rewards.clone(), mask, **args), dtype)


# ----------------------------------------------------------------------------------------------
# compute_advantage: the same keyword arguments reach every new estimator
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("name", ["grpo_vectorized", "grpo_passk", "rloo_vectorized", "opo", "gpg"])
def test_compute_advantage_calls_each_estimator_as_verl_does(name, norm, dtype):
    """Among them: norm_adv_by_std_in_grpo=False does not reach grpo_vectorized (verl passes it to grpo only),
    and grpo_passk reads it from the config instead."""
    uids = scattered_uids(3, NO_SINGLETONS[4])
    g = torch.Generator().manual_seed(3)
    mask = right_padded_mask(g, len(uids), empty_rows=True)
    rewards = outcome_rewards(g, mask, dtype, discrete=True)
    tensors = {"token_level_rewards": rewards, "response_mask": mask}
    config = Cfg(norm_adv_by_std_in_grpo=norm, gamma=1.0)
    ours = compute_advantage(DataProto(batch=tensors, non_tensor_batch={"uid": uids}), name,
                             norm_adv_by_std_in_grpo=norm, config=config)
    theirs = verl_compute_advantage(VerlDataProto.from_dict(tensors={k: v.clone() for k, v in tensors.items()},
                                                            non_tensors={"uid": uids}),
                                    name, norm_adv_by_std_in_grpo=norm, config=config)
    tolerance_dtype = torch.float32 if name == "grpo_vectorized" else dtype
    assert_close(f"compute_advantage({name})", ours["advantages"], theirs.batch["advantages"], tolerance_dtype)
    assert_close(f"compute_advantage({name}) returns", ours["returns"], theirs.batch["returns"], tolerance_dtype)
