"""Unit tests of the algorithm files: hand-checked toys, properties, stability and bad input.

Parity with verl itself is in tests/parity/ (run in its own environment by `make test`).
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minirl import core, dapo, dpo, gae, grpo, kl, ppo, reinforce_pp, remax, rloo
from minirl import rollout_correction as rc

# A 2x3 batch used by several hand-checked cases: row 0 has 3 valid tokens, row 1 has 2.
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def ragged(seed, batch=6, length=7, dtype=torch.float64, min_len=1):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(batch, length, generator=g, dtype=dtype)
    lengths = torch.randint(min_len, length + 1, (batch,), generator=g)
    mask = (torch.arange(length)[None] < lengths[:, None]).long()
    return values, mask, g


# ----------------------------------------------------------------------------------------------
# agg_loss
# ----------------------------------------------------------------------------------------------


def test_agg_loss_modes_by_hand():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    # S = [6, 9], T = 5, G = 2, L = 3
    assert core.agg_loss(loss, MASK, "token-mean").item() == pytest.approx(15 / 5)
    assert core.agg_loss(loss, MASK, "token-sum").item() == pytest.approx(15)
    assert core.agg_loss(loss, MASK, "seq-mean-token-sum").item() == pytest.approx((6 + 9) / 2)
    assert core.agg_loss(loss, MASK, "seq-mean-token-mean").item() == pytest.approx((6 / 3 + 9 / 2) / 2, rel=1e-6)
    assert core.agg_loss(loss, MASK, "seq-mean-token-sum-norm").item() == pytest.approx((6 + 9) / 2 / 3)
    assert core.agg_loss(loss, MASK, "seq-mean-token-sum-norm", loss_scale_factor=10).item() == pytest.approx(0.75)


@pytest.mark.parametrize("mode", core.LOSS_AGG_MODES)
def test_agg_loss_split_over_processes_averages_to_the_whole_batch(mode):
    """Two 'processes' with global counts and dp_size=2: the mean of their losses is the whole-batch loss."""
    loss, mask, _ = ragged(4, batch=6)
    whole = core.agg_loss(loss, mask, mode)
    info = dict(dp_size=2, batch_num_tokens=mask.sum(), global_batch_size=(mask.sum(-1) > 0).sum())
    parts = [core.agg_loss(loss[rows], mask[rows], mode, **info) for rows in (slice(0, 2), slice(2, 6))]
    assert torch.allclose((parts[0] + parts[1]) / 2, whole)
    with pytest.raises(ValueError, match="dp_size > 1"):
        core.agg_loss(loss, mask, mode if mode != "token-sum" else "token-mean", dp_size=2)


def test_agg_loss_leaves_fully_masked_rows_out_of_the_sequence_count():
    loss = torch.ones(3, 4)
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    assert core.agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(1.0, rel=1e-6)
    assert core.agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx(1.5)


def test_agg_loss_rejects_bad_mode_and_shapes():
    with pytest.raises(ValueError, match="token-mean"):
        core.agg_loss(torch.ones(2, 3), MASK, "mean")
    with pytest.raises(ValueError, match=r"\(2, 4\).*\(2, 3\)"):
        core.agg_loss(torch.ones(2, 4), MASK, "token-mean")
    for mode in ("token-mean", "seq-mean-token-mean"):
        with pytest.raises(ValueError, match="no valid token"):
            core.agg_loss(torch.ones(2, 3), torch.zeros(2, 3), mode)
    assert core.agg_loss(torch.ones(2, 3), torch.zeros(2, 3), "token-sum").item() == 0


# ----------------------------------------------------------------------------------------------
# PPO
# ----------------------------------------------------------------------------------------------


def test_policy_loss_by_hand():
    # One token per case; eps = 0.2, c = 3.
    #  A=+1, r=1.5  -> clipped at 1.2:  loss -1.2, clipped
    #  A=+1, r=0.5  -> unclipped:       loss -0.5
    #  A=-1, r=0.5  -> clipped at 0.8:  loss  0.8, clipped
    #  A=-1, r=5.0  -> dual clip at 3:  loss  3.0, dual-clipped
    ratio = torch.tensor([[1.5, 0.5, 0.5, 5.0]])
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    old = torch.zeros(1, 4)
    loss, metrics = ppo.compute_policy_loss(old, ratio.log(), adv, torch.ones(1, 4))
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 0.8 + 3.0) / 4, rel=1e-6)
    # PPO's clip does not catch the A<0, r=5 token (max(-A r, -A clip(r)) picks the unclipped 5.0):
    # only the dual clip does. So 2 tokens are clipped and 1 is dual-clipped.
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 4)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(1 / 4)
    assert metrics["actor/ppo_kl"] == pytest.approx(-ratio.log().mean().item(), rel=1e-6)


def test_clipped_tokens_get_zero_gradient():
    log_ratio = torch.tensor([[0.5, -0.5, 0.05, 2.0]])
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0]])
    log_prob = log_ratio.clone().requires_grad_(True)
    loss, _ = ppo.compute_policy_loss(torch.zeros(1, 4), log_prob, adv, torch.ones(1, 4), loss_agg_mode="token-sum")
    loss.backward()
    # Tokens 0 (r > 1.2, A > 0), 1 (r < 0.8, A < 0) and 3 (dual clip) are clipped: no gradient.
    assert log_prob.grad[0, [0, 1, 3]].abs().max() == 0
    # Token 2 is inside the trust region: gradient -A * r.
    assert log_prob.grad[0, 2].item() == pytest.approx(-math.exp(0.05), rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), low=st.floats(0.05, 0.5), high=st.floats(0.05, 0.5))
def test_policy_loss_equals_unclipped_surrogate_on_policy(seed, low, high):
    """With log_prob == old_log_prob the ratio is 1: nothing is clipped and the gradient is -A."""
    _, mask, g = ragged(seed)
    adv = torch.randn(mask.shape, generator=g, dtype=torch.float64)
    old = torch.randn(mask.shape, generator=g, dtype=torch.float64)
    log_prob = old.clone().requires_grad_(True)
    loss, metrics = ppo.compute_policy_loss(old, log_prob, adv, mask, clip_ratio_low=low, clip_ratio_high=high)
    loss.backward()
    assert metrics["actor/pg_clipfrac"] == 0 and metrics["actor/ppo_kl"] == 0
    assert torch.allclose(log_prob.grad, -adv * mask / mask.sum())


def test_policy_loss_is_finite_for_extreme_log_ratios():
    old = torch.zeros(2, 3)
    log_prob = torch.tensor([[50.0, -50.0, 0.0], [1000.0, -1000.0, 0.0]], requires_grad=True)
    adv = torch.tensor([[1.0, -1.0, 1.0], [-1.0, 1.0, 0.0]])
    loss, metrics = ppo.compute_policy_loss(old, log_prob, adv, MASK)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(log_prob.grad).all()
    assert all(math.isfinite(v) for v in metrics.values())


def test_policy_loss_rejects_bad_dual_clip():
    with pytest.raises(ValueError, match="clip_ratio_c"):
        ppo.compute_policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), MASK, clip_ratio_c=1.0)


def test_value_loss_by_hand():
    # values 0, returns 1, cliprange 0.5: vpred 2.0 -> clipped to 0.5: max((2-1)^2, (0.5-1)^2) = 1
    #                                      vpred 0.2 -> inside: (0.2-1)^2 = 0.64
    vpreds = torch.tensor([[2.0, 0.2]])
    loss, clipfrac = ppo.compute_value_loss(vpreds, torch.ones(1, 2), torch.zeros(1, 2), torch.ones(1, 2), 0.5)
    assert loss.item() == pytest.approx(0.5 * (1.0 + 0.64) / 2)
    assert clipfrac.item() == 0.0  # the clipped error (0.25) was smaller than the unclipped one
    vpreds = torch.tensor([[0.9, 0.2]])  # 0.9 -> clip 0.5 -> error 0.25 > 0.01
    _, clipfrac = ppo.compute_value_loss(vpreds, torch.ones(1, 2), torch.zeros(1, 2), torch.ones(1, 2), 0.5)
    assert clipfrac.item() == pytest.approx(0.5)


def test_entropy_loss_of_uniform_logits_is_log_vocab():
    assert ppo.compute_entropy_loss(torch.zeros(2, 3, 8), MASK).item() == pytest.approx(math.log(8), rel=1e-6)
    with pytest.raises(ValueError, match="vocabulary"):
        ppo.compute_entropy_loss(torch.zeros(2, 4, 8), MASK)


# ----------------------------------------------------------------------------------------------
# GAE
# ----------------------------------------------------------------------------------------------


def test_gae_by_hand():
    # One row, 3 tokens, reward 1 at the end, values [0.5, 0.5, 0.5], gamma = 1, lam = 0.5.
    # delta = [0, 0, 0.5]: delta_2 = 1 - 0.5; delta_1 = 0 + 0.5 - 0.5; delta_0 = 0
    # A_2 = 0.5, A_1 = 0 + 0.5 * 0.5 = 0.25, A_0 = 0.125; returns = A + V.
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.full((1, 3), 0.5)
    mask = torch.ones(1, 3)
    adv, ret = gae.compute_gae_advantage_return(rewards, values, mask, gamma=1.0, lam=0.5)
    assert torch.allclose(ret, torch.tensor([[0.625, 0.75, 1.0]]))
    raw = torch.tensor([0.125, 0.25, 0.5])
    assert torch.allclose(adv[0], (raw - raw.mean()) / raw.std(), atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_gae_with_gamma_lam_one_and_zero_values_is_reward_to_go(seed):
    rewards, mask, _ = ragged(seed, min_len=2)
    rewards = rewards * mask
    _, returns = gae.compute_gae_advantage_return(rewards, torch.zeros_like(rewards), mask, gamma=1.0, lam=1.0)
    reward_to_go = rewards.flip(-1).cumsum(-1).flip(-1)
    assert torch.allclose(returns * mask, reward_to_go * mask)


def test_gae_advantages_are_whitened_and_zero_on_padding():
    rewards, mask, g = ragged(3, min_len=2)
    values = torch.randn(rewards.shape, generator=g, dtype=torch.float64) * mask
    adv, _ = gae.compute_gae_advantage_return(rewards * mask, values, mask, gamma=0.99, lam=0.95)
    valid = adv[mask.bool()]
    assert valid.mean().abs() < 1e-10 and (valid.std() - 1).abs() < 1e-6
    assert (adv[~mask.bool()] == 0).all()


# ----------------------------------------------------------------------------------------------
# KL
# ----------------------------------------------------------------------------------------------


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])  # x = log 2
    x = math.log(2)
    assert kl.kl_penalty(logp, ref, "kl").item() == pytest.approx(x)
    assert kl.kl_penalty(logp, ref, "abs").item() == pytest.approx(x)
    assert kl.kl_penalty(logp, ref, "mse").item() == pytest.approx(x * x / 2)
    assert kl.kl_penalty(logp, ref, "low_var_kl").item() == pytest.approx(0.5 - 1 + x)  # e^{-x} - 1 + x


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-60, 60), min_size=2, max_size=20))
def test_k2_and_k3_are_non_negative_and_finite(xs):
    logp = torch.tensor(xs, dtype=torch.float64)
    ref = torch.zeros_like(logp)
    for mode in ("k2", "k3", "mse", "low_var_kl", "abs"):
        out = kl.kl_penalty(logp, ref, mode)
        # >= 0 up to rounding: for x ~ 1e-12, e^-x - 1 + x evaluates to -1e-16 in float64 (in verl too)
        assert (out >= -1e-12).all() and torch.isfinite(out).all(), mode


def test_straight_through_modes_have_k2_gradient_and_base_value():
    logp = torch.tensor([0.3, -1.2, 2.0], requires_grad=True)
    ref = torch.tensor([0.0, 0.1, -0.5])
    for base in ("kl", "k1", "abs", "k3", "low_var_kl", "mse"):
        out = kl.kl_penalty(logp, ref, base + "+")
        assert torch.allclose(out, kl.kl_penalty(logp, ref, base))
        (grad,) = torch.autograd.grad(out.sum(), logp)
        assert torch.allclose(grad, (logp - ref).detach()), base


def test_kl_penalty_rejects_unknown_mode():
    with pytest.raises(ValueError, match="low_var_kl"):
        kl.kl_penalty(torch.zeros(2), torch.zeros(2), "full")


def test_adaptive_kl_controller_moves_toward_target():
    ctrl = kl.AdaptiveKLController(init_kl_coef=0.1, target_kl=1.0, horizon=100)
    ctrl.update(current_kl=2.0, n_steps=10)  # error clipped to 0.2: beta *= 1 + 0.2 * 10 / 100
    assert ctrl.value == pytest.approx(0.1 * 1.02)
    ctrl.update(current_kl=0.5, n_steps=10)  # error -0.5 clipped to -0.2
    assert ctrl.value == pytest.approx(0.1 * 1.02 * 0.98)
    fixed = kl.FixedKLController(0.3)
    fixed.update(5.0, 10)
    assert fixed.value == 0.3
    with pytest.raises(ValueError, match="horizon"):
        kl.AdaptiveKLController(0.1, 1.0, 0)


def test_apply_kl_penalty_by_hand():
    scores = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    old = torch.tensor([[0.0, -1.0, -1.0], [-2.0, 0.0, 5.0]])
    ref = torch.tensor([[-1.0, -1.0, -2.0], [-2.0, -1.0, 0.0]])
    rewards, metrics = kl.apply_kl_penalty(scores, old, ref, MASK, kl.FixedKLController(0.5))
    # kld = old - ref on valid tokens: [[1, 0, 1], [0, 1, (masked)]]
    assert torch.allclose(rewards, torch.tensor([[-0.5, 0.0, 0.5], [0.0, 0.5, 0.0]]))
    assert metrics["actor/reward_kl_penalty"] == pytest.approx((2 / 3 + 1 / 2) / 2, rel=1e-6)
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.5


# ----------------------------------------------------------------------------------------------
# GRPO, RLOO, REINFORCE++, ReMax
# ----------------------------------------------------------------------------------------------


def grouped_batch(draw_seed, sizes, length=5, discrete=False):
    g = torch.Generator().manual_seed(draw_seed)
    batch = sum(sizes)
    index = np.repeat([f"uid-{i}" for i in range(len(sizes))], sizes)
    scores = torch.randint(0, 2, (batch,), generator=g).double() if discrete else torch.randn(batch, generator=g,
                                                                                               dtype=torch.float64)
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    mask = (torch.arange(length)[None] < lengths[:, None]).long()
    return core.place_scores_on_last_token(scores, mask), mask, index, scores


def test_grpo_by_hand():
    rewards = core.place_scores_on_last_token(torch.tensor([1.0, 0.0, 1.0, 1.0, 0.5]),
                                              torch.ones(5, 2, dtype=torch.long))
    adv, ret = grpo.compute_grpo_outcome_advantage(rewards, torch.ones(5, 2), ["a", "a", "b", "b", "c"])
    # group a: mean 0.5, unbiased std sqrt(0.5); group b: all equal -> 0; group c (singleton): 0.5 / (1 + 1e-6)
    s = math.sqrt(0.5)
    assert adv[:, 0].tolist() == pytest.approx([0.5 / (s + 1e-6), -0.5 / (s + 1e-6), 0, 0, 0.5 / (1 + 1e-6)])
    assert torch.equal(adv, ret)
    dr, _ = grpo.compute_grpo_outcome_advantage(rewards, torch.ones(5, 2), ["a", "a", "b", "b", "c"],
                                                norm_adv_by_std_in_grpo=False)
    assert dr[:, 0].tolist() == pytest.approx([0.5, -0.5, 0, 0, 0.5])


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), sizes=st.lists(st.integers(2, 8), min_size=1, max_size=6),
       discrete=st.booleans())
def test_grpo_is_zero_mean_per_group_and_zero_for_equal_rewards(seed, sizes, discrete):
    rewards, mask, index, scores = grouped_batch(seed, sizes, discrete=discrete)
    adv, _ = grpo.compute_grpo_outcome_advantage(rewards, mask, index)
    per_row = adv.sum(-1) / mask.sum(-1)  # the broadcast scalar
    for uid in np.unique(index):
        rows = torch.as_tensor(index == uid)
        assert per_row[rows].mean().abs() < 1e-9
        if scores[rows].unique().numel() == 1:
            assert (per_row[rows] == 0).all()
        else:  # normalised by the group's unbiased std (+ epsilon): the result has std s / (s + 1e-6)
            group_std = scores[rows].std().item()
            assert per_row[rows].std().item() == pytest.approx(group_std / (group_std + 1e-6), rel=1e-6)
    assert (adv[~mask.bool()] == 0).all()


def test_grpo_accepts_integer_tensor_index_and_rejects_bad_shapes():
    rewards, mask, index, _ = grouped_batch(0, [3, 4])
    as_ints = torch.as_tensor([int(u.split("-")[1]) for u in index])
    assert torch.allclose(grpo.compute_grpo_outcome_advantage(rewards, mask, index)[0],
                          grpo.compute_grpo_outcome_advantage(rewards, mask, as_ints)[0])
    with pytest.raises(ValueError, match="index"):
        grpo.compute_grpo_outcome_advantage(rewards, mask, index[:-1])
    with pytest.raises(ValueError, match="shape mismatch"):
        grpo.compute_grpo_outcome_advantage(rewards, mask[:, :-1], index)


def test_rloo_by_hand():
    rewards = core.place_scores_on_last_token(torch.tensor([1.0, 0.0, 0.0, 3.0]), torch.ones(4, 1, dtype=torch.long))
    adv, _ = rloo.compute_rloo_outcome_advantage(rewards, torch.ones(4, 1), [0, 0, 0, 1])
    # row 0: 1 - mean(0, 0) = 1; rows 1, 2: 0 - mean(1, 0) = -0.5; singleton row 3: raw score 3
    assert adv[:, 0].tolist() == pytest.approx([1.0, -0.5, -0.5, 3.0])


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), sizes=st.lists(st.integers(2, 8), min_size=1, max_size=6))
def test_rloo_baseline_excludes_the_sample_itself(seed, sizes):
    rewards, mask, index, scores = grouped_batch(seed, sizes)
    adv, _ = rloo.compute_rloo_outcome_advantage(rewards, mask, index)
    per_row = adv.sum(-1) / mask.sum(-1)
    for i in range(len(scores)):
        others = torch.as_tensor((index == index[i]) & (np.arange(len(index)) != i))
        assert per_row[i].item() == pytest.approx((scores[i] - scores[others].mean()).item(), abs=1e-9)


def test_reinforce_plus_plus_returns_by_hand():
    rewards = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
    adv, ret = reinforce_pp.compute_reinforce_plus_plus_outcome_advantage(rewards, MASK, gamma=0.5)
    assert torch.allclose(ret, torch.tensor([[1.5, 1.0, 2.0], [1.5, 3.0, 0.0]]))
    valid = ret[MASK.bool()]
    assert torch.allclose(adv[MASK.bool()], (valid - valid.mean()) / valid.std(), atol=1e-6)
    assert adv[1, 2] == 0


def test_reinforce_plus_plus_baseline_by_hand():
    rewards = core.place_scores_on_last_token(torch.tensor([1.0, 0.0, 2.0]), torch.ones(3, 2, dtype=torch.long))
    adv, _ = reinforce_pp.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, torch.ones(3, 2),
                                                                                 ["a", "a", "b"])
    centred = torch.tensor([0.5, -0.5, 2.0]).repeat_interleave(2)  # singleton keeps its raw score
    assert torch.allclose(adv.flatten(), (centred - centred.mean()) / centred.std(), atol=1e-6)


def test_remax_by_hand():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    adv, ret = remax.compute_remax_outcome_advantage(rewards, torch.tensor([0.5, 2.0]), MASK)
    assert torch.allclose(ret, torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]]))
    assert torch.allclose(adv, torch.tensor([[0.5, 0.5, 0.5], [0.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="reward_baselines"):
        remax.compute_remax_outcome_advantage(rewards, torch.zeros(3), MASK)


def test_estimators_are_finite_with_empty_rows_and_singletons():
    rewards = torch.zeros(3, 4)
    rewards[0, 1] = 1.0
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]])
    index = ["a", "b", "b"]
    for adv, _ in (grpo.compute_grpo_outcome_advantage(rewards, mask, index),
                   rloo.compute_rloo_outcome_advantage(rewards, mask, index),
                   reinforce_pp.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, index),
                   reinforce_pp.compute_reinforce_plus_plus_outcome_advantage(rewards, mask),
                   remax.compute_remax_outcome_advantage(rewards, torch.zeros(3), mask),
                   gae.compute_gae_advantage_return(rewards, torch.zeros(3, 4), mask, 1.0, 1.0)):
        assert torch.isfinite(adv).all()


# ----------------------------------------------------------------------------------------------
# DAPO
# ----------------------------------------------------------------------------------------------


def test_overlong_penalty_by_hand():
    lengths = torch.tensor([10, 16, 18, 20])
    penalty = dapo.compute_overlong_penalty(lengths, max_response_length=20, overlong_buffer_len=4, penalty_factor=1.0)
    assert penalty.tolist() == pytest.approx([0.0, 0.0, -0.5, -1.0])
    with pytest.raises(ValueError, match="overlong_buffer_len"):
        dapo.compute_overlong_penalty(lengths, 20, 0, 1.0)


def test_filter_groups_by_hand():
    kept, dropped = dapo.filter_groups(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.0, 0.0]),
                                       ["a", "a", "b", "b", "c", "d", "d"])
    assert kept.tolist() == [2, 3, 4] and dropped == 2  # a (all 1) and d (all 0) go; c is a singleton
    kept, dropped = dapo.filter_groups([], [])
    assert kept.numel() == 0 and dropped == 0


def test_dapo_recipe_defaults():
    assert (dapo.CLIP_RATIO_LOW, dapo.CLIP_RATIO_HIGH, dapo.LOSS_AGG_MODE) == (0.2, 0.28, "token-mean")


# ----------------------------------------------------------------------------------------------
# DPO
# ----------------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-50, 0), min_size=1, max_size=8), st.floats(0.01, 1.0))
def test_dpo_loss_is_log2_when_policy_equals_reference(logps, beta):
    chosen = torch.tensor(logps, dtype=torch.float64)
    rejected = chosen.flip(0) - 1.0
    losses, chosen_rewards, rejected_rewards = dpo.dpo_loss(chosen, rejected, chosen, rejected, beta=beta)
    assert torch.allclose(losses, torch.full_like(losses, math.log(2)))
    assert (chosen_rewards == 0).all() and (rejected_rewards == 0).all()


def test_dpo_loss_by_hand_and_direction():
    # h = (-1 - -2) - (-3 - -2) = 2; beta = 0.5 -> loss = -log sigmoid(1)
    losses, chosen_r, rejected_r = dpo.dpo_loss(torch.tensor([-1.0]), torch.tensor([-3.0]),
                                                torch.tensor([-2.0]), torch.tensor([-2.0]), beta=0.5)
    assert losses.item() == pytest.approx(-math.log(1 / (1 + math.exp(-1))))
    assert chosen_r.item() == pytest.approx(0.5) and rejected_r.item() == pytest.approx(-0.5)
    smooth, _, _ = dpo.dpo_loss(torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]),
                                torch.tensor([-2.0]), beta=0.5, label_smoothing=0.2)
    assert smooth.item() == pytest.approx(0.8 * losses.item() + 0.2 * -math.log(1 / (1 + math.exp(1))))
    big, _, _ = dpo.dpo_loss(torch.tensor([0.0]), torch.tensor([-1e4]), torch.tensor([-1e4]), torch.tensor([0.0]))
    assert torch.isfinite(big).all()


def test_sequence_log_probs_sums_valid_tokens():
    logits = torch.randn(2, 3, 5)
    labels = torch.randint(0, 5, (2, 3))
    expected = (core.logprobs_from_logits(logits, labels) * MASK).sum(-1)
    assert torch.allclose(dpo.sequence_log_probs(logits, labels, MASK), expected)


# ----------------------------------------------------------------------------------------------
# Rollout correction
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_importance_weights_are_one_when_policies_agree(level):
    _, mask, _ = ragged(0)
    weights, metrics = rc.compute_rollout_correction_weights(torch.zeros(mask.shape), mask, rollout_is=level)
    assert torch.allclose(weights, mask.float())
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(1.0)
    assert metrics["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(1.0)


def test_importance_weights_by_hand():
    log_ratio = torch.tensor([[math.log(3.0), math.log(0.5), 0.0], [math.log(1.5), 0.0, 9.0]])
    weights, _ = rc.compute_rollout_correction_weights(log_ratio, MASK, "token", 2.0)
    assert torch.allclose(weights, torch.tensor([[2.0, 0.5, 1.0], [1.5, 1.0, 0.0]]))  # TIS caps 3 at 2
    weights, _ = rc.compute_rollout_correction_weights(log_ratio, MASK, "sequence", 2.0)
    assert torch.allclose(weights, torch.tensor([[1.5, 1.5, 1.5], [1.5, 1.5, 0.0]]))  # exp(sum of log-ratios)
    weights, metrics = rc.compute_rollout_correction_weights(log_ratio, MASK, "token", "0.6_2.0")
    assert torch.allclose(weights, torch.tensor([[0.0, 0.0, 1.0], [1.5, 1.0, 0.0]]))  # IcePop zeroes outliers
    assert metrics["rollout_corr/rollout_is_oob_ratio"] == pytest.approx(2 / 5)


def test_importance_weights_are_finite_for_huge_log_ratios():
    log_ratio = torch.tensor([[50.0, -50.0, 0.0], [1e4, -1e4, 0.0]])
    for level in ("token", "sequence"):
        weights, metrics = rc.compute_rollout_correction_weights(log_ratio, MASK, level, 2.0, True)
        assert torch.isfinite(weights).all() and all(math.isfinite(v) for v in metrics.values())


def test_rejection_mask_by_hand():
    log_ratio = torch.tensor([[0.0, 1.0, -0.1], [0.05, 0.0, 0.0]])
    mask, metrics = rc.compute_rollout_rejection_mask(log_ratio, MASK, "token_k1", 2.0)
    # keep log(1/2) <= -log_ratio <= log 2: the token with log_ratio 1.0 (-1 < -0.69) goes
    assert mask.tolist() == [[1, 0, 1], [1, 1, 0]]
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1 / 5)
    assert metrics["rollout_corr/rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 2)
    mask, _ = rc.compute_rollout_rejection_mask(log_ratio, MASK, "seq_sum_k2", 0.1)
    assert mask.tolist() == [[0, 0, 0], [1, 1, 0]]  # row 0: 0.5 + 0.005 > 0.1
    mask, _ = rc.compute_rollout_rejection_mask(log_ratio, MASK, "seq_mean_k3,token_k2", "1.0,0.4")
    assert mask.tolist() == [[1, 0, 1], [1, 1, 0]]  # k2 of 1.0 is 0.5 > 0.4
    assert mask.dtype == MASK.dtype


def test_offpolicy_metrics_are_neutral_when_policies_agree():
    logp, mask, _ = ragged(1)
    logp = -logp.abs()
    metrics = rc.compute_offpolicy_metrics(logp, logp.clone(), mask)
    for key in ("kl", "k3_kl", "log_ppl_diff", "chi2_token", "chi2_seq"):
        assert metrics[f"rollout_corr/{key}"] == pytest.approx(0.0, abs=1e-12)
    assert metrics["rollout_corr/ppl_ratio"] == pytest.approx(1.0)
    only_training = rc.compute_offpolicy_metrics(logp, None, mask)
    assert set(only_training) == {"rollout_corr/training_ppl", "rollout_corr/training_log_ppl"}


@pytest.mark.parametrize("call, match", [
    (lambda: rc.compute_rollout_correction_weights(torch.zeros(2, 3), MASK, "geometric"), "token"),
    (lambda: rc.compute_rollout_correction_weights(torch.zeros(2, 3), MASK, "token", "abc"), "number"),
    (lambda: rc.compute_rollout_rejection_mask(torch.zeros(2, 3), MASK, "token_k9", 2.0), "seq_mean_k1"),
    (lambda: rc.compute_rollout_rejection_mask(torch.zeros(2, 3), MASK, "token_k1", None), "required"),
    (lambda: rc.compute_rollout_rejection_mask(torch.zeros(2, 3), MASK, "token_k2", "0.5_2"), "one positive"),
    (lambda: rc.compute_rollout_correction_weights(torch.zeros(2, 3), torch.zeros(2, 3), "token"), "no valid"),
    (lambda: rc.compute_offpolicy_metrics(torch.zeros(2, 3), torch.zeros(2, 4), MASK), "shape mismatch"),
])
def test_rollout_correction_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ----------------------------------------------------------------------------------------------
# The estimator registry (verl's register_adv_est / get_adv_estimator_fn / compute_advantage)
# ----------------------------------------------------------------------------------------------


def test_builtin_estimators_are_registered_under_verls_names():
    from minirl.advantage import ADV_ESTIMATOR_REGISTRY, get_adv_estimator_fn

    expected = {"gae": gae.compute_gae_advantage_return, "grpo": grpo.compute_grpo_outcome_advantage,
                "rloo": rloo.compute_rloo_outcome_advantage, "remax": remax.compute_remax_outcome_advantage,
                "reinforce_plus_plus": reinforce_pp.compute_reinforce_plus_plus_outcome_advantage,
                "reinforce_plus_plus_baseline": reinforce_pp.compute_reinforce_plus_plus_baseline_outcome_advantage}
    assert set(expected) <= set(ADV_ESTIMATOR_REGISTRY)
    for name, fn in expected.items():
        assert get_adv_estimator_fn(name) is fn
    with pytest.raises(ValueError, match="registered: gae, gdpo, gpg, grpo"):
        get_adv_estimator_fn("no_such_estimator")


def test_register_refuses_a_different_function_under_a_taken_name_but_allows_a_rerun():
    from minirl.advantage import ADV_ESTIMATOR_REGISTRY, register_adv_est

    with pytest.raises(ValueError, match="already registered"):
        register_adv_est("rloo")(lambda **kwargs: None)
    assert ADV_ESTIMATOR_REGISTRY["rloo"] is rloo.compute_rloo_outcome_advantage

    def define():  # the same definition twice, as when a notebook cell is run again
        def rerun_estimator(token_level_rewards, response_mask, **kwargs):
            return token_level_rewards, token_level_rewards
        return rerun_estimator

    try:
        first, second = define(), define()
        register_adv_est("test_rerun")(first)
        register_adv_est("test_rerun")(second)
        assert ADV_ESTIMATOR_REGISTRY["test_rerun"] is second
    finally:
        ADV_ESTIMATOR_REGISTRY.pop("test_rerun", None)


def test_compute_advantage_passes_verls_keyword_arguments():
    from minirl.advantage import ADV_ESTIMATOR_REGISTRY, compute_advantage, register_adv_est
    from minirl.config import AlgorithmConfig
    from minirl.protocol import DataProto

    seen = {}

    @register_adv_est("test_kwargs")
    def spy(token_level_rewards, response_mask, config=None, **kwargs):
        seen.update(kwargs, config=config)
        return token_level_rewards * 2, token_level_rewards

    rewards, mask = torch.tensor([[0.0, 1.0], [0.0, 0.5]]), torch.ones(2, 2)
    data = DataProto(batch={"token_level_rewards": rewards, "response_mask": mask,
                            "reward_baselines": torch.tensor([1.0, 0.0])}, non_tensor_batch={"uid": ["a", "b"]})
    config = AlgorithmConfig(gamma=0.5)
    try:
        out = compute_advantage(data, "test_kwargs", config=config)
    finally:
        ADV_ESTIMATOR_REGISTRY.pop("test_kwargs")
    assert list(seen["index"]) == ["a", "b"] and seen["config"] is config
    assert torch.equal(seen["reward_baselines"], torch.tensor([1.0, 0.0]))
    assert torch.equal(out["advantages"], rewards * 2) and torch.equal(out["returns"], rewards)
    # REINFORCE++ reads gamma from the config when called through the registry, as verl's does.
    ours = compute_advantage(data, "reinforce_plus_plus", config=config)["returns"]
    assert torch.allclose(ours, reinforce_pp.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, 0.5)[1])


def test_a_registered_estimator_trains_without_editing_the_trainer(tmp_path):
    from minirl.advantage import ADV_ESTIMATOR_REGISTRY, register_adv_est
    from minirl.trainer import train

    calls = []

    @register_adv_est("test_reinforce")
    def reinforce(token_level_rewards, response_mask, config=None, **kwargs):
        calls.append(token_level_rewards.shape)
        scores = token_level_rewards.sum(-1, keepdim=True) * response_mask
        return scores, scores

    try:
        history = train([f"trainer.default_local_dir={tmp_path}", "algorithm.adv_estimator=test_reinforce",
                         "trainer.total_training_steps=1", "trainer.test_freq=-1", "trainer.val_before_train=false",
                         "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                         "actor_rollout_ref.rollout.n=2", "trainer.logger=[]"], show_progress=False)
    finally:
        ADV_ESTIMATOR_REGISTRY.pop("test_reinforce")
    assert calls == [torch.Size([8, 20])]
    assert history[-1]["critic/advantages/min"] >= 0  # A = R >= 0: no baseline
    with pytest.raises(ValueError, match="register_adv_est"):
        train([f"trainer.default_local_dir={tmp_path}", "algorithm.adv_estimator=test_reinforce"])
