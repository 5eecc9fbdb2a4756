"""The advantage estimators verl 0.9.1 registers beyond the first six: hand-computed toys, the vectorized
versions against their loop versions, the refusals, and compute_advantage's extra keyword arguments.

Number-for-number parity with verl is in tests/parity/test_estimator_parity.py (run in .venv-verl).
"""

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from minirl import core, gdpo, gpg, grpo, opo, optimal_baseline, rloo
from minirl.advantage import ADV_ESTIMATOR_REGISTRY, algorithm_setting, compute_advantage
from minirl.protocol import DataProto

VERL_0_9_1_ESTIMATORS = {  # verl/trainer/ppo/core_algos.py::AdvantageEstimator
    "gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "rloo", "opo", "grpo_passk",
    "gpg", "rloo_vectorized", "grpo_vectorized", "optimal_token_baseline", "tir_optimal_token_baseline", "gdpo"}


@dataclass
class Algo:  # stands in for minirl's AlgorithmConfig plus the keys these estimators read
    norm_adv_by_std_in_grpo: bool = True
    gdpo_reward_keys: list | None = None
    gdpo_reward_weights: list | None = None


def outcome(scores, lengths, length=None):
    """(token_level_rewards, response_mask) with each score on its answer's last token."""
    lengths = torch.tensor(lengths)
    mask = (torch.arange(length or int(lengths.max()))[None] < lengths[:, None]).to(torch.float32)
    return core.place_scores_on_last_token(torch.tensor(scores, dtype=torch.float32), mask), mask


def per_answer(advantages, mask):
    """The one advantage each answer carries on its tokens (0 for an empty answer)."""
    return (advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1)


def test_every_verl_0_9_1_estimator_is_registered():
    assert set(ADV_ESTIMATOR_REGISTRY) >= VERL_0_9_1_ESTIMATORS


def test_algorithm_setting_reads_dataclasses_dicts_and_none():
    assert algorithm_setting(Algo(gdpo_reward_keys=["a"]), "gdpo_reward_keys") == ["a"]
    assert algorithm_setting(Algo(), "no_such_key", 3) == 3
    assert algorithm_setting({"norm_adv_by_std_in_grpo": False}, "norm_adv_by_std_in_grpo", True) is False
    assert algorithm_setting(None, "gdpo_reward_keys", "default") == "default"


# ----------------------------------------------------------------------------------------------
# Hand-computed toys
# ----------------------------------------------------------------------------------------------


def test_grpo_vectorized_toy_and_equals_grpo():
    rewards, mask = outcome([1.0, 0.0, 1.0, 1.0, 3.0], [2, 3, 1, 2, 2])
    uids = ["a", "a", "a", "a", "solo"]
    adv, ret = grpo.compute_grpo_vectorized_outcome_advantage(rewards, mask, uids)
    std = torch.tensor([1.0, 0.0, 1.0, 1.0]).std()  # 0.5, unbiased
    expected = torch.tensor([0.25, -0.75, 0.25, 0.25]) / (std + 1e-6)
    assert torch.allclose(per_answer(adv, mask)[:4], expected)
    assert torch.allclose(per_answer(adv, mask)[4], torch.tensor(3.0 / (1 + 1e-6)))  # a group of one: R / (1 + eps)
    assert torch.equal(adv, ret)
    g = torch.Generator().manual_seed(0)
    rewards, mask = torch.randn(12, 5, generator=g), torch.ones(12, 5)
    uids = np.array(list("aabbbcdddddd"), dtype=object)
    for norm in (True, False):  # the loop version (grpo) and the vectorized one give the same numbers
        ours = grpo.compute_grpo_vectorized_outcome_advantage(rewards, mask, uids, norm_adv_by_std_in_grpo=norm)
        assert torch.equal(ours[0], grpo.compute_grpo_outcome_advantage(rewards, mask, uids,
                                                                        norm_adv_by_std_in_grpo=norm)[0])


def test_grpo_passk_toy():
    rewards, mask = outcome([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.2, 0.9, 0.5], [2] * 9)
    uids = ["one_right"] * 3 + ["two_right"] * 3 + ["graded"] * 3
    adv, _ = grpo.compute_grpo_passk_outcome_advantage(rewards, mask, uids, config=Algo())
    got = per_answer(adv, mask)
    assert torch.allclose(got[:3], torch.tensor([1.0 / (3 ** -0.5 + 1e-6), 0.0, 0.0]))  # std of (1, 0, 0) = 1/sqrt 3
    assert torch.equal(got[3:6], torch.zeros(3))  # the top is tied: nobody is credited
    graded_std = torch.tensor([0.2, 0.9, 0.5]).std()
    assert torch.allclose(got[6:], torch.tensor([0.0, (0.9 - 0.5) / (graded_std + 1e-6), 0.0]))
    # norm_adv_by_std_in_grpo comes from the config (the argument is overwritten, as in verl)
    adv, _ = grpo.compute_grpo_passk_outcome_advantage(rewards, mask, uids, norm_adv_by_std_in_grpo=True,
                                                       config=Algo(norm_adv_by_std_in_grpo=False))
    assert torch.allclose(per_answer(adv, mask), torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0.4, 0]))


def test_rloo_vectorized_toy_and_equals_rloo_except_for_a_group_of_one():
    rewards, mask = outcome([1.0, 0.0, 0.0, 5.0], [1, 2, 3, 2])
    adv, _ = rloo.compute_rloo_vectorized_outcome_advantage(rewards, mask, ["a", "a", "a", "solo"])
    assert torch.allclose(per_answer(adv, mask), torch.tensor([1.0, -0.5, -0.5, 0.0]))  # R_i - mean of the others
    loop, _ = rloo.compute_rloo_outcome_advantage(rewards, mask, ["a", "a", "a", "solo"])
    assert torch.allclose(per_answer(loop, mask), torch.tensor([1.0, -0.5, -0.5, 5.0]))  # rloo keeps a singleton's R
    g = torch.Generator().manual_seed(1)
    rewards, mask = torch.randn(14, 6, generator=g, dtype=torch.float64), torch.ones(14, 6)
    uids = np.array(list("aabbbccccddddd"), dtype=object)[torch.randperm(14, generator=g).numpy()]
    vectorized, _ = rloo.compute_rloo_vectorized_outcome_advantage(rewards, mask, uids)
    assert torch.allclose(vectorized, rloo.compute_rloo_outcome_advantage(rewards, mask, uids)[0], atol=1e-12)


def test_opo_toy():
    rewards, mask = outcome([1.0, 0.0, 1.0, 1.0, 2.0], [1, 3, 2, 2, 4])
    adv, _ = opo.compute_opo_outcome_advantage(rewards, mask, ["a", "a", "b", "b", "solo"])
    # group a: b = (1*1 + 3*0) / 4 = 0.25; group b: all equal -> 0; a group of one: no baseline
    assert torch.allclose(per_answer(adv, mask), torch.tensor([0.75, -0.25, 0.0, 0.0, 2.0]))
    assert torch.equal(adv[1], torch.tensor([-0.25, -0.25, -0.25, 0.0]))  # the scalar on the valid tokens only


def test_gpg_toy():
    rewards, mask = outcome([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], [2] * 6)
    adv, _ = gpg.compute_gpg_outcome_advantage(rewards, mask, ["a", "a", "b", "b", "c", "c"], alpha=123.0)
    alpha = 6 / 3  # batch size / nonzero rewards; the alpha argument is ignored
    assert torch.allclose(per_answer(adv, mask), alpha * torch.tensor([0.5, -0.5, 0.0, 0.0, 0.0, 0.0]))
    adv, _ = gpg.compute_gpg_outcome_advantage(rewards, mask, ["a", "a", "b", "b", "c", "c"], f_norm=2.0)
    assert torch.allclose(per_answer(adv, mask)[:2], torch.tensor([0.5, -0.5]))  # / f_norm
    zero, _ = gpg.compute_gpg_outcome_advantage(torch.zeros(2, 2), torch.ones(2, 2), ["a", "b"])
    assert torch.equal(zero, torch.zeros(2, 2))  # no nonzero reward: alpha = B / 1, advantages 0


def gdpo_batch():
    """Two prompts, two answers each, two tokens per answer, and two reward dimensions."""
    mask = torch.ones(4, 2, dtype=torch.int64)
    tensors = {"prompts": torch.ones(4, 3, dtype=torch.int64),
               "attention_mask": torch.cat([torch.ones(4, 3, dtype=torch.int64), mask], dim=1),
               "response_mask": mask, "token_level_rewards": torch.zeros(4, 2)}
    columns = {"uid": np.array(["p", "p", "q", "q"], dtype=object),
               "format_reward": np.array([1.0, 0.0, 1.0, 1.0], dtype=object),
               "accuracy_reward": np.array([True, True, False, True], dtype=object)}
    return tensors, columns


def test_gdpo_toy_two_reward_dimensions():
    tensors, columns = gdpo_batch()
    mask, uids = tensors["response_mask"], columns["uid"]
    args = dict(non_tensor_batch=columns, batch=tensors)
    adv, ret = gdpo.compute_gdpo_outcome_advantage(
        tensors["token_level_rewards"], mask, uids, config=Algo(gdpo_reward_keys=["format_reward", "accuracy_reward"]),
        **args)
    # format: GRPO on (1, 0 | 1, 1) = (+a, -a | 0, 0); accuracy: (1, 1 | 0, 1) = (0, 0 | -a, +a), where
    # a = (1 - 0.5) / (std + 1e-6) and std = sqrt(0.5) (two answers, n - 1)
    one = 0.5 / (2 ** -0.5 + 1e-6)
    summed = torch.tensor([one, -one, -one, one])
    # whitened over the 8 valid tokens: mean 0, unbiased variance 8 one^2 / 7
    expected = summed / (8 * one**2 / 7 + 1e-8) ** 0.5
    assert torch.allclose(adv, expected[:, None].expand(4, 2)) and torch.equal(adv, ret)
    assert adv.dtype == torch.float32
    adv, _ = gdpo.compute_gdpo_outcome_advantage(
        tensors["token_level_rewards"], mask, uids,
        config=Algo(gdpo_reward_keys=["format_reward", "accuracy_reward"], gdpo_reward_weights=[2.0, 0.0]), **args)
    weighted = torch.tensor([2 * one, -2 * one, 0.0, 0.0])  # only the format dimension, doubled
    expected = weighted / (16 * one**2 / 7 + 1e-8) ** 0.5
    assert torch.allclose(adv, expected[:, None].expand(4, 2))


def test_gdpo_uses_the_score_when_no_batch_is_given():
    rewards, mask = outcome([1.0, 0.0, 1.0, 1.0], [2, 2, 2, 2])
    uids = ["p", "p", "q", "q"]
    adv, _ = gdpo.compute_gdpo_outcome_advantage(rewards, mask, uids)
    grpo_adv, _ = grpo.compute_grpo_outcome_advantage(rewards, mask, uids)
    assert torch.allclose(adv, core.masked_whiten(grpo_adv, mask) * mask)


def test_gdpo_puts_each_dimension_on_the_last_response_token_by_attention_mask():
    tensors, columns = gdpo_batch()
    tensors["attention_mask"][1, -1] = 0  # answer 1 is one token long
    tensors["response_mask"] = tensors["attention_mask"][:, 3:]
    column = gdpo._reward_column("accuracy_reward", columns, tensors, tensors["response_mask"])
    assert torch.equal(column, torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]))


def otb_inputs(mask, scores, pi=0.5, sum_pi_squared=0.5):
    """Every token with pi_t = 0.5 and sum pi^2 = 0.5: w_t = 1 - 2 * 0.5 + 0.5 = 0.5."""
    rewards = core.place_scores_on_last_token(torch.tensor(scores), mask)
    stats = dict(old_log_probs=torch.full(mask.shape, float(np.log(pi))),
                 sum_pi_squared=torch.full(mask.shape, sum_pi_squared))
    return rewards, stats


def test_optimal_token_baseline_toy():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    rewards, stats = otb_inputs(mask, [0.0, 1.0])
    # G = [[0, 0, .], [1, 1, 1]]; W_t = 0.5 (t + 1) for both answers while they run
    # B_0 = (0 * .5 + 1 * .5) / 1 = 0.5, B_1 = (0 * 1 + 1 * 1) / 2 = 0.5, B_2 = 1 * 1.5 / 1.5 = 1 (only answer 2)
    adv, ret = optimal_baseline.compute_optimal_token_baseline_advantage(rewards, mask, ["g", "g"], **stats,
                                                                         handle_zero_tail=False)
    assert torch.allclose(adv, torch.tensor([[-0.5, -0.5, 0.0], [0.5, 0.5, 0.0]]), atol=1e-6)
    assert torch.equal(ret, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]))
    # handle_zero_tail (the default): past the second-longest answer the baseline is 0, so the tail keeps G
    adv, _ = optimal_baseline.compute_optimal_token_baseline_advantage(rewards, mask, ["g", "g"], **stats)
    assert torch.allclose(adv, torch.tensor([[-0.5, -0.5, 0.0], [0.5, 0.5, 1.0]]), atol=1e-6)
    # W weighs the answers: answer 2 sampled surer tokens (pi = 0.9: w = 1 - 1.8 + 0.81 = 0.01), so B ~ answer 1's G
    stats["old_log_probs"][1] = float(np.log(0.9))
    stats["sum_pi_squared"][1] = 0.81
    adv, _ = optimal_baseline.compute_optimal_token_baseline_advantage(rewards, mask, ["g", "g"], **stats)
    assert torch.allclose(adv[:, 0], torch.tensor([0 - 0.01 / 0.51, 1 - 0.01 / 0.51]), atol=1e-6)
    # A group of one answer has no baseline: A = G
    adv, _ = optimal_baseline.compute_optimal_token_baseline_advantage(rewards, mask, ["g", "h"], **stats)
    assert torch.equal(adv, ret * mask)


def test_rollout_is_weights_scale_w_by_rho_squared():
    mask = torch.ones(2, 2, dtype=torch.int64)
    rewards, stats = otb_inputs(mask, [0.0, 1.0])
    rho = torch.tensor([[1.0, 1.0], [3.0, 3.0]])  # answer 2's w counts 9 times
    adv, _ = optimal_baseline.compute_optimal_token_baseline_advantage(rewards, mask, ["g", "g"], **stats,
                                                                       rollout_is_weights=rho)
    assert torch.allclose(adv[:, 0], torch.tensor([-0.9, 0.1]), atol=1e-6)  # B_0 = (0 * .5 + 1 * 4.5) / 5


def test_tir_counts_each_answers_own_tokens():
    mask = torch.tensor([[1, 0, 1], [1, 1, 0]])  # answer 1: a tool output at column 1
    _, stats = otb_inputs(mask, [1.0, 0.0])
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])  # answer 1 is right: 1 on its last token
    # answer 1's tokens are its 1st and 2nd (columns 0 and 2); W = 0.5, 1.0 for both answers' 1st and 2nd tokens
    adv, _ = optimal_baseline.compute_multi_turn_optimal_token_baseline_advantage(rewards, mask, ["g", "g"], **stats)
    assert torch.allclose(adv, torch.tensor([[0.5, 0.0, 0.5], [-0.5, -0.5, 0.0]]), atol=1e-6)
    # optimal_token_baseline compares columns instead: column 2 has only answer 1, so its advantage vanishes there
    adv, _ = optimal_baseline.compute_optimal_token_baseline_advantage(rewards, mask, ["g", "g"], **stats)
    assert torch.allclose(adv, torch.tensor([[0.5, 0.0, 0.0], [-0.5, 0.0, 0.0]]), atol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_tir_equals_otb_on_single_turn_masks(seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 8, (12,), generator=g)
    lengths[4:6] = 0  # group b: two empty answers beside two others
    mask = (torch.arange(8)[None] < lengths[:, None]).to(torch.int64)
    rewards = torch.randn(12, 8, generator=g, dtype=torch.float64) * mask
    old_log_probs = -torch.rand(12, 8, generator=g, dtype=torch.float64) * 2
    sum_pi_squared = torch.exp(old_log_probs) ** 2 + 0.1
    uids = np.array(list("aaabbbbccdde"), dtype=object)[torch.randperm(12, generator=g).numpy()]
    args = dict(old_log_probs=old_log_probs, sum_pi_squared=sum_pi_squared)
    single = optimal_baseline.compute_optimal_token_baseline_advantage(rewards, mask, uids, **args)
    multi = optimal_baseline.compute_multi_turn_optimal_token_baseline_advantage(rewards, mask, uids, **args)
    assert torch.allclose(single[0], multi[0], atol=1e-12) and torch.equal(single[1], multi[1])
    # Without the tail cut they part only where a group has a single non-empty answer beside empty ones: tir
    # leaves empty answers out (no baseline), optimal_token_baseline counts them (the answer is its own baseline).
    args["handle_zero_tail"] = False
    single = optimal_baseline.compute_optimal_token_baseline_advantage(rewards, mask, uids, **args)[0]
    multi = optimal_baseline.compute_multi_turn_optimal_token_baseline_advantage(rewards, mask, uids, **args)[0]
    nonempty = {u: int(sum((uids == u) & (lengths.numpy() > 0))) for u in set(uids)}
    lone = torch.tensor([nonempty[u] == 1 and (uids == u).sum() > 1 for u in uids])
    assert torch.allclose(single[~lone], multi[~lone], atol=1e-12)


# ----------------------------------------------------------------------------------------------
# Refusals
# ----------------------------------------------------------------------------------------------


def test_grpo_passk_refusals():
    rewards, mask = outcome([1.0, 0.0, 1.0], [1, 1, 1])
    with pytest.raises(ValueError, match="pass config="):
        grpo.compute_grpo_passk_outcome_advantage(rewards, mask, ["a", "a", "b"])
    with pytest.raises(ValueError, match="at least 2 answers per prompt.*'b' has 1"):
        grpo.compute_grpo_passk_outcome_advantage(rewards, mask, ["a", "a", "b"], config=Algo())


def test_gdpo_refusals():
    tensors, columns = gdpo_batch()
    args = (tensors["token_level_rewards"], tensors["response_mask"], columns["uid"])
    with pytest.raises(ValueError, match="needs algorithm.gdpo_reward_keys"):
        gdpo.compute_gdpo_outcome_advantage(*args, config=Algo(), non_tensor_batch=columns, batch=tensors)
    with pytest.raises(ValueError, match="'length_reward' is not in the batch.*accuracy_reward"):
        gdpo.compute_gdpo_outcome_advantage(*args, config=Algo(gdpo_reward_keys=["length_reward"]),
                                            non_tensor_batch=columns, batch=tensors)
    with pytest.raises(ValueError, match="2 entries for 1 gdpo_reward_keys"):
        gdpo.compute_gdpo_outcome_advantage(*args, config=Algo(gdpo_reward_keys=["format_reward"],
                                                               gdpo_reward_weights=[1.0, 2.0]),
                                            non_tensor_batch=columns, batch=tensors)
    bad = {**columns, "format_reward": np.array(["yes", "no", "yes", None], dtype=object)}
    with pytest.raises(ValueError, match="one number per row"):
        gdpo.compute_gdpo_outcome_advantage(*args, config=Algo(gdpo_reward_keys=["format_reward"]),
                                            non_tensor_batch=bad, batch=tensors)
    no_prompts = {k: v for k, v in tensors.items() if k != "prompts"}
    with pytest.raises(ValueError, match="'prompts'"):
        gdpo.compute_gdpo_outcome_advantage(*args, config=Algo(gdpo_reward_keys=["format_reward"]),
                                            non_tensor_batch=columns, batch=no_prompts)


def test_optimal_token_baseline_refusals():
    mask = torch.ones(2, 3, dtype=torch.int64)
    rewards, stats = otb_inputs(mask, [0.0, 1.0])
    data = DataProto(batch={"token_level_rewards": rewards, "response_mask": mask,
                            "old_log_probs": stats["old_log_probs"]},
                     non_tensor_batch={"uid": np.array(["g", "g"], dtype=object)})
    for name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        with pytest.raises(ValueError, match="actor_rollout_ref.actor.calculate_sum_pi_squared=true"):
            compute_advantage(data, name, config=Algo())
    no_old = DataProto(batch={"token_level_rewards": rewards, "response_mask": mask,
                              "sum_pi_squared": stats["sum_pi_squared"]}, non_tensor_batch=data.non_tensor_batch)
    with pytest.raises(ValueError, match="needs old_log_probs"):
        compute_advantage(no_old, "optimal_token_baseline", config=Algo())
    with pytest.raises(ValueError, match="shape mismatch"):
        optimal_baseline.compute_optimal_token_baseline_advantage(rewards, mask, ["g", "g"], **stats,
                                                                  rollout_is_weights=torch.ones(2, 2))


# ----------------------------------------------------------------------------------------------
# compute_advantage passes what verl passes
# ----------------------------------------------------------------------------------------------


def test_compute_advantage_passes_the_batch_to_gdpo():
    tensors, columns = gdpo_batch()
    config = Algo(gdpo_reward_keys=["format_reward", "accuracy_reward"])
    out = compute_advantage(DataProto(batch=tensors, non_tensor_batch=columns), "gdpo", config=config)
    direct, _ = gdpo.compute_gdpo_outcome_advantage(tensors["token_level_rewards"], tensors["response_mask"],
                                                    columns["uid"], config=config, non_tensor_batch=columns,
                                                    batch=tensors)
    assert torch.equal(out["advantages"], direct) and out["advantages"].abs().sum() > 0


def test_compute_advantage_passes_sum_pi_squared_and_is_weights_to_the_token_baselines():
    mask = torch.ones(2, 2, dtype=torch.int64)
    rewards, stats = otb_inputs(mask, [0.0, 1.0])
    rho = torch.tensor([[1.0, 1.0], [3.0, 3.0]])
    uids = np.array(["g", "g"], dtype=object)
    batch = {"token_level_rewards": rewards, "response_mask": mask, **stats}
    for name, fn in (("optimal_token_baseline", optimal_baseline.compute_optimal_token_baseline_advantage),
                     ("tir_optimal_token_baseline",
                      optimal_baseline.compute_multi_turn_optimal_token_baseline_advantage)):
        plain = compute_advantage(DataProto(batch=batch, non_tensor_batch={"uid": uids}), name, config=Algo())
        assert torch.equal(plain["advantages"], fn(rewards, mask, uids, **stats)[0])
        weighted = compute_advantage(DataProto(batch={**batch, "rollout_is_weights": rho},
                                               non_tensor_batch={"uid": uids}), name, config=Algo())
        assert torch.equal(weighted["advantages"], fn(rewards, mask, uids, **stats, rollout_is_weights=rho)[0])
        assert not torch.equal(weighted["advantages"], plain["advantages"])


def test_the_grpo_flag_reaches_only_grpo_and_passk():
    rewards, mask = outcome([1.0, 0.0, 0.0, 1.0, 1.0, 0.5], [2] * 6)
    data = DataProto(batch={"token_level_rewards": rewards, "response_mask": mask},
                     non_tensor_batch={"uid": np.array(list("aaabbb"), dtype=object)})
    config = Algo(norm_adv_by_std_in_grpo=False)
    grpo_out = compute_advantage(data, "grpo", norm_adv_by_std_in_grpo=False, config=config)["advantages"]
    vectorized = compute_advantage(data, "grpo_vectorized", norm_adv_by_std_in_grpo=False, config=config)
    normalised = compute_advantage(data, "grpo", norm_adv_by_std_in_grpo=True, config=config)["advantages"]
    assert torch.equal(vectorized["advantages"], normalised)  # verl: the flag does not reach grpo_vectorized
    assert not torch.equal(grpo_out, normalised)
    passk = compute_advantage(data, "grpo_passk", norm_adv_by_std_in_grpo=True, config=config)["advantages"]
    assert torch.allclose(per_answer(passk, mask), torch.tensor([1.0, 0, 0, 0, 0, 0]))  # read from the config


def test_the_gdpo_reward_manager_adds_the_experiment_name_to_extra_info():
    """verl's `gdpo` manager is the naive one plus trainer.experiment_name in each row's extra_info."""
    from minirl.rewards import GDPORewardManager

    class Digits:  # a stand-in tokenizer: ids are digits
        def batch_decode(self, rows, skip_special_tokens=True):
            return ["".join(map(str, row)) for row in rows]

    seen = []

    def score(data_source, solution_str, ground_truth, extra_info):
        seen.append(extra_info)
        return {"score": float(solution_str == ground_truth), "format": 1.0}

    manager = GDPORewardManager(Digits(), score, experiment_name="run_a")
    scores, extra = manager({"responses": torch.tensor([[1, 2], [3, 0]]),
                             "response_mask": torch.tensor([[1, 1], [1, 0]]),
                             "reward_model": [{"ground_truth": "12"}, {"ground_truth": "4"}],
                             "data_source": ["toy", "toy"], "extra_info": [{"index": 7}, None]})
    assert seen == [{"index": 7, "experiment_name": "run_a"}, {"experiment_name": "run_a"}]
    assert scores.tolist() == [[0.0, 1.0], [0.0, 0.0]] and extra == {"score": [1.0, 0.0], "format": [1.0, 1.0]}


def test_a_gdpo_run_normalises_two_reward_dimensions_of_the_chain_task(tmp_path):
    """verl's GDPO example line (adv_estimator=gdpo, gdpo_reward_keys, reward_manager.name=gdpo) trains: the chain
    task's reward returns acc and worked, and each step logs both dimensions' gdpo/* statistics."""
    from minirl import sft
    from minirl.trainer import train

    warm = sft.default_warm_start(sft.CHAIN_SFT, show_progress=False)
    history = train([*sft.train_overrides(warm, sft.CHAIN_SFT), f"trainer.default_local_dir={tmp_path / 'run'}",
                     "trainer.total_training_steps=2", "trainer.test_freq=-1", "trainer.val_before_train=false",
                     "trainer.logger=[]", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                     "algorithm.adv_estimator=gdpo", "+algorithm.gdpo_reward_keys=[acc,worked]",
                     "+algorithm.gdpo_reward_weights=[1.0,0.5]", "reward.reward_manager.name=gdpo"],
                    show_progress=False)
    assert len(history) == 2
    for key in ("acc", "worked"):
        assert {f"gdpo/{key}/{stat}" for stat in ("mean", "std", "max", "min")} <= set(history[-1]), sorted(history[-1])
    assert history[-1]["actor/pg_loss"] != 0.0
