"""minirl vs verl 0.9.1, number for number, on random ragged batches.

Runs in its own environment (.venv-verl, built by `make test` / `make parity`), where verl 0.9.1 is
installed beside minirl. Each test calls a minirl function and its verl twin on the same inputs
(float32 and float64, ragged masks, group sizes 1 to 8) and compares outputs, metrics and gradients.
Where minirl differs from verl on purpose (see minirl/README.md), only the agreed part is compared.
"""

import itertools

import numpy as np
import pytest
import torch
from parity import (
    COMPARED,
    DTYPES,
    Cfg,
    actor_config,
    assert_close,
    assert_metrics_close,
    grouped_uids,
    ragged_batch,
)

try:
    import verl
    from verl import DataProto
    from verl.trainer.ppo import core_algos as V
    from verl.trainer.ppo import rollout_corr_helper as VRC
    from verl.trainer.ppo.ray_trainer import apply_kl_penalty as verl_apply_kl_penalty
    from verl.utils import torch_functional as VF
    from verl.workers.reward_manager.dapo import DAPORewardManager
except ImportError as error:  # say so loudly: a parity run that compares nothing must not pass
    pytest.fail(f"verl 0.9.1 cannot be imported here ({error}). The parity tests run in their own "
                "environment: use `make parity` (or `make test`), which builds .venv-verl.", pytrace=False)

from minirl import core, dapo, gae, grpo, kl, ppo, reinforce_pp, remax, rloo
from minirl import rollout_correction as rc

SEEDS = range(4)
GROUP_SIZES = [[1], [2, 3], [4, 1, 8], [5, 5, 5, 2], [8, 7, 6, 1, 3]]


def test_it_is_verl_0_9_1():
    assert verl.__version__ == "0.9.1", f"parity is against verl 0.9.1, found {verl.__version__}"


# ----------------------------------------------------------------------------------------------
# verl/utils/torch_functional.py
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_torch_functional(seed, dtype):
    values, mask, g = ragged_batch(seed, dtype, empty_rows=True)
    values = values.masked_fill(~mask.bool(), float("nan"))  # NaN in padding must not leak
    for axis in (None, -1):
        assert_close("masked_sum", core.masked_sum(values, mask, axis), VF.masked_sum(values, mask, axis), dtype)
        assert_close("masked_mean", core.masked_mean(values, mask, axis), VF.masked_mean(values, mask, axis), dtype)
    clean, mask, g = ragged_batch(seed, dtype)
    for unbiased in (True, False):
        assert_close("masked_var", core.masked_var(clean, mask, unbiased), VF.masked_var(clean, mask, unbiased), dtype)
    for shift in (True, False):
        assert_close("masked_whiten", core.masked_whiten(clean, mask, shift), VF.masked_whiten(clean, mask, shift),
                     dtype)
    logits = torch.randn(4, 6, 33, generator=g, dtype=dtype)
    labels = torch.randint(0, 33, (4, 6), generator=g)
    for scale in (1.0, 100.0):
        assert_close("logprobs_from_logits", core.logprobs_from_logits(logits * scale, labels),
                     VF.logprobs_from_logits(logits * scale, labels), dtype)
        assert_close("entropy_from_logits", core.entropy_from_logits(logits * scale),
                     VF.entropy_from_logits(logits * scale), dtype)
    ids = torch.randint(0, 5, (10, 8), generator=g)
    for eos in (2, [2, 3]):
        assert torch.equal(core.get_response_mask(ids, eos), VF.get_response_mask(ids, eos))
        assert_close("get_response_mask", core.get_response_mask(ids, eos), VF.get_response_mask(ids, eos))
    lo, hi = clean - 0.5, clean + 0.5
    x = clean + torch.randn(clean.shape, generator=g, dtype=dtype)
    assert_close("clip_by_value", core.clip_by_value(x, lo, hi), VF.clip_by_value(x, lo, hi), dtype)


# ----------------------------------------------------------------------------------------------
# agg_loss, policy / value / entropy losses (values and gradients)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", core.LOSS_AGG_MODES)
def test_agg_loss(mode, seed, dtype):
    loss_mat, mask, _ = ragged_batch(seed, dtype, empty_rows=True)
    for factor in (None, 64):
        assert_close("agg_loss", core.agg_loss(loss_mat, mask, mode, loss_scale_factor=factor),
                     V.agg_loss(loss_mat, mask, mode, loss_scale_factor=factor), dtype)
    # data-parallel form: this rank holds part of a mini-batch with global counts T and G
    info = dict(dp_size=4, batch_num_tokens=int(mask.sum()) * 3, global_batch_size=mask.shape[0] * 3)
    assert_close("agg_loss (dp_size, global counts)", core.agg_loss(loss_mat, mask, mode, **info),
                 V.agg_loss(loss_mat, mask, mode, **info), dtype)


def grad_of(fn, leaf):
    leaf = leaf.detach().clone().requires_grad_(True)
    out = fn(leaf)
    loss = out[0] if isinstance(out, tuple) else out
    (grad,) = torch.autograd.grad(loss, leaf)
    return out, grad


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", core.LOSS_AGG_MODES)
@pytest.mark.parametrize("low, high, c, with_is",
                         [(0.2, 0.2, 3.0, False), (0.2, 0.28, 3.0, False), (0.1, 0.3, 1.5, True)])
def test_policy_loss_values_metrics_and_gradients(low, high, c, with_is, mode, seed, dtype):
    adv, mask, g = ragged_batch(seed, dtype)
    old = -torch.rand(adv.shape, generator=g, dtype=dtype) * 3
    new = old + torch.randn(adv.shape, generator=g, dtype=dtype) * 0.4  # ratios spread around 1: clipping happens
    new[0, :2] = old[0, :2] + torch.tensor([30.0, -30.0], dtype=dtype)  # exercise the +-20 clamp
    weights = torch.rand(adv.shape, generator=g, dtype=dtype) * 2 if with_is else None
    info = {"dp_size": 2, "batch_num_tokens": int(mask.sum()) * 2, "global_batch_size": mask.shape[0] * 2} \
        if with_is else {}
    (ours, ours_m), ours_g = grad_of(lambda lp: ppo.compute_policy_loss(
        old, lp, adv, mask, mode, low, high, c, rollout_is_weights=weights, global_batch_info=info), new)
    config = actor_config(low, high, c)
    config.global_batch_info = info
    (theirs, theirs_m), theirs_g = grad_of(lambda lp: V.compute_policy_loss_vanilla(
        old, lp, adv, mask, mode, config, rollout_is_weights=weights), new)
    assert_close("compute_policy_loss", ours, theirs, dtype)
    assert_close("compute_policy_loss grad", ours_g, theirs_g, dtype)
    assert_metrics_close("compute_policy_loss", ours_m, theirs_m, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", core.LOSS_AGG_MODES)
def test_value_and_entropy_losses(mode, seed, dtype):
    returns, mask, g = ragged_batch(seed, dtype)
    values = torch.randn(returns.shape, generator=g, dtype=dtype)
    vpreds = values + torch.randn(returns.shape, generator=g, dtype=dtype)
    info = {} if seed % 2 else dict(dp_size=2, batch_num_tokens=int(mask.sum()) + 5, global_batch_size=mask.shape[0])
    (ours, ours_frac), ours_g = grad_of(lambda v: ppo.compute_value_loss(v, returns, values, mask, 0.5, mode, **info),
                                        vpreds)
    (theirs, theirs_frac), theirs_g = grad_of(
        lambda v: V.compute_value_loss(v, returns, values, mask, 0.5, mode, **info), vpreds)
    assert_close("compute_value_loss", ours, theirs, dtype)
    assert_close("compute_value_loss vf_clipfrac", ours_frac, theirs_frac, dtype)
    assert_close("compute_value_loss grad", ours_g, theirs_g, dtype)
    logits = torch.randn(*mask.shape, 17, generator=g, dtype=dtype) * 3
    ours, ours_g = grad_of(lambda z: ppo.compute_entropy_loss(z, mask, mode), logits)
    theirs, theirs_g = grad_of(lambda z: V.compute_entropy_loss(z, mask, mode), logits)
    assert_close("compute_entropy_loss", ours, theirs, dtype)
    assert_close("compute_entropy_loss grad", ours_g, theirs_g, dtype)


# ----------------------------------------------------------------------------------------------
# KL
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", kl.KL_PENALTY_CHOICES)
def test_kl_penalty_values_and_gradients(mode, seed, dtype):
    ref, mask, g = ragged_batch(seed, dtype)
    logp = ref + torch.randn(ref.shape, generator=g, dtype=dtype) * 2
    logp[0, :2] = ref[0, :2] + torch.tensor([40.0, -40.0], dtype=dtype)  # exercise the clamps
    ours, ours_g = grad_of(lambda lp: kl.kl_penalty(lp, ref, mode).sum(), logp)
    theirs, theirs_g = grad_of(lambda lp: V.kl_penalty(lp, ref, mode).sum(), logp)
    assert_close("kl_penalty", kl.kl_penalty(logp, ref, mode), V.kl_penalty(logp, ref, mode), dtype)
    assert_close("kl_penalty grad", ours_g, theirs_g, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["kl", "abs", "mse", "low_var_kl", "k3+"])
@pytest.mark.parametrize("controller", ["fixed", "adaptive"])
def test_apply_kl_penalty_and_controllers(controller, mode, dtype):
    scores_seq, mask, g = ragged_batch(0, dtype)
    scores = core.place_scores_on_last_token(scores_seq[:, 0], mask)
    ours_ctrl = kl.FixedKLController(0.05) if controller == "fixed" else kl.AdaptiveKLController(0.05, 0.01, 500)
    theirs_ctrl = V.FixedKLController(0.05) if controller == "fixed" else V.AdaptiveKLController(0.05, 0.01, 500)
    for step in range(3):  # several steps: the adaptive coefficient must evolve identically
        old = -torch.rand(mask.shape, generator=g, dtype=dtype) * 3
        ref = old + torch.randn(mask.shape, generator=g, dtype=dtype) * 0.3 * (step + 1)
        ours, ours_m = kl.apply_kl_penalty(scores, old, ref, mask, ours_ctrl, mode)
        data = DataProto.from_dict(tensors={"response_mask": mask, "token_level_scores": scores,
                                            "old_log_probs": old, "ref_log_prob": ref})
        data, theirs_m = verl_apply_kl_penalty(data, theirs_ctrl, kl_penalty=mode)
        assert_close("apply_kl_penalty", ours, data.batch["token_level_rewards"], dtype)
        assert_metrics_close("apply_kl_penalty", ours_m, theirs_m, dtype)
        assert_close(f"{type(ours_ctrl).__name__}.value", ours_ctrl.value, theirs_ctrl.value, torch.float64)


# ----------------------------------------------------------------------------------------------
# Advantage estimators
# ----------------------------------------------------------------------------------------------


def outcome_batch(seed, sizes, dtype, discrete):
    uids = grouped_uids(seed, sizes)
    g = torch.Generator().manual_seed(seed)
    batch = len(uids)
    lengths = torch.randint(1, 10, (batch,), generator=g)
    mask = (torch.arange(9)[None] < lengths[:, None]).to(torch.int64)
    scores = (torch.randint(0, 2, (batch,), generator=g).to(dtype) if discrete
              else torch.randn(batch, generator=g, dtype=dtype))
    return core.place_scores_on_last_token(scores, mask), mask, uids


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("discrete", [False, True])
@pytest.mark.parametrize("sizes", GROUP_SIZES, ids=lambda s: "groups" + "-".join(map(str, s)))
def test_group_estimators(sizes, discrete, dtype):
    rewards, mask, uids = outcome_batch(len(sizes), sizes, dtype, discrete)
    singleton = torch.as_tensor([(uids == u).sum() == 1 for u in uids])[:, None].expand_as(mask)
    for norm in (True, False):
        ours = grpo.compute_grpo_outcome_advantage(rewards, mask, uids, norm_adv_by_std_in_grpo=norm)
        theirs = V.compute_grpo_outcome_advantage(rewards.clone(), mask, uids, norm_adv_by_std_in_grpo=norm)
        assert_close("compute_grpo_outcome_advantage", ours[0], theirs[0], dtype, where=~singleton)
        assert_close("compute_grpo_outcome_advantage returns", ours[1], theirs[1], dtype, where=~singleton)
        # Singletons: verl divides by a float32 1 + 1e-6 even for float64 input; agree to float32 precision.
        assert_close("compute_grpo_outcome_advantage singletons", ours[0], theirs[0], torch.float32, where=singleton)
    ours = rloo.compute_rloo_outcome_advantage(rewards, mask, uids)
    theirs = V.compute_rloo_outcome_advantage(rewards.clone(), mask, uids)
    assert_close("compute_rloo_outcome_advantage", ours[0], theirs[0], dtype)
    if mask.sum() > 1:
        ours = reinforce_pp.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, uids)
        theirs = V.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards.clone(), mask, uids)
        assert_close("compute_reinforce_plus_plus_baseline_outcome_advantage", ours[0], theirs[0], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_dense_reward_estimators(seed, dtype):
    rewards, mask, g = ragged_batch(seed, dtype)
    rewards = rewards * mask
    values = torch.randn(rewards.shape, generator=g, dtype=dtype) * mask
    for gamma, lam in [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0)]:
        ours_adv, ours_ret = gae.compute_gae_advantage_return(rewards, values, mask, gamma, lam)
        theirs_adv, theirs_ret = V.compute_gae_advantage_return(rewards, values, mask, gamma, lam)
        # Deliberate difference: minirl zeroes the whitened advantages on padding; compare valid tokens.
        assert_close("compute_gae_advantage_return advantages", ours_adv, theirs_adv, dtype, where=mask.bool())
        assert_close("compute_gae_advantage_return returns", ours_ret, theirs_ret, dtype)
        ours = reinforce_pp.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma)
        theirs = V.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config=Cfg(gamma=gamma))
        assert_close("compute_reinforce_plus_plus_outcome_advantage", ours[0], theirs[0], dtype)
        assert_close("compute_reinforce_plus_plus_outcome_advantage returns", ours[1], theirs[1], dtype)
    baselines = torch.randn(mask.shape[0], generator=g, dtype=dtype)
    ours = remax.compute_remax_outcome_advantage(rewards, baselines, mask)
    theirs = V.compute_remax_outcome_advantage(rewards, baselines, mask)
    assert_close("compute_remax_outcome_advantage", ours[0], theirs[0], dtype)
    assert_close("compute_remax_outcome_advantage returns", ours[1], theirs[1], dtype)


# ----------------------------------------------------------------------------------------------
# DAPO
# ----------------------------------------------------------------------------------------------


class _SilentTokenizer:
    eos_token = "</s>"

    def decode(self, ids, skip_special_tokens=True):
        return ""

    def batch_decode(self, rows, skip_special_tokens=True):
        return ["" for _ in rows]


@pytest.mark.parametrize("max_len, buffer, factor", [(12, 4, 1.0), (12, 12, 0.5), (20, 3, 2.0)])
def test_overlong_penalty_matches_dapo_reward_manager(max_len, buffer, factor):
    g = torch.Generator().manual_seed(max_len + buffer)
    batch = 16
    lengths = torch.randint(1, max_len + 1, (batch,), generator=g)
    prompt_len = 3
    attention_mask = torch.cat([torch.ones(batch, prompt_len, dtype=torch.long),
                                (torch.arange(max_len)[None] < lengths[:, None]).long()], dim=1)
    data = DataProto.from_dict(
        tensors={"prompts": torch.ones(batch, prompt_len, dtype=torch.long),
                 "responses": torch.ones(batch, max_len, dtype=torch.long), "attention_mask": attention_mask},
        non_tensors={"reward_model": np.array([{"ground_truth": "0"}] * batch, dtype=object),
                     "data_source": np.array(["tiny"] * batch, dtype=object)})
    manager = DAPORewardManager(_SilentTokenizer(), num_examine=0, compute_score=lambda **kw: 0.0,
                                max_resp_len=max_len,
                                overlong_buffer_cfg=Cfg(enable=True, len=buffer, penalty_factor=factor, log=False))
    verl_rewards = manager(data)[torch.arange(batch), lengths - 1]  # score 0 + overlong penalty, on the last token
    ours = dapo.compute_overlong_penalty(lengths, max_len, buffer, factor)
    assert_close("compute_overlong_penalty", ours, verl_rewards, torch.float32)
    # the whole manager: token_level_scores (score 0.5 + penalty on the last valid token), tensor for tensor
    verl_manager = DAPORewardManager(_SilentTokenizer(), num_examine=0, compute_score=lambda **kw: 0.5,
                                     max_resp_len=max_len,
                                     overlong_buffer_cfg=Cfg(enable=True, len=buffer, penalty_factor=factor, log=False))
    ours_manager = dapo.DAPORewardManager(_SilentTokenizer(), lambda **kw: 0.5, buffer, max_len, factor)
    scores, _ = ours_manager({"responses": data.batch["responses"], "response_mask": attention_mask[:, prompt_len:],
                              "reward_model": list(data.non_tensor_batch["reward_model"]),
                              "data_source": list(data.non_tensor_batch["data_source"])})
    assert_close("DAPORewardManager", scores, verl_manager(data), torch.float32)


@pytest.mark.parametrize("sizes", GROUP_SIZES, ids=lambda s: "groups" + "-".join(map(str, s)))
def test_filter_groups_matches_the_recipe_rule(sizes):
    """verl 0.9.1 embeds dynamic sampling in its replay buffer (no callable twin); compare with the
    recipe's rule as written there: keep a uid iff np.std(values) > 0 or the group has one member."""
    uids = grouped_uids(7, sizes)
    rng = np.random.default_rng(len(sizes))
    values = rng.integers(0, 2, len(uids)).astype(float)
    kept, dropped = dapo.filter_groups(values, uids)
    keep_uid = {u: (np.std(values[uids == u]) > 0 or (uids == u).sum() == 1) for u in set(uids)}
    expected = [i for i, u in enumerate(uids) if keep_uid[u]]
    assert kept.tolist() == expected and dropped == sum(not k for k in keep_uid.values())
    assert_close("filter_groups (recipe rule)", kept, torch.tensor(expected))


# ----------------------------------------------------------------------------------------------
# Rollout correction
# ----------------------------------------------------------------------------------------------


def mismatch_batch(seed, dtype, scale=0.3):
    rollout, mask, g = ragged_batch(seed, dtype, empty_rows=True)
    rollout = -rollout.abs()
    old = rollout + torch.randn(rollout.shape, generator=g, dtype=dtype) * scale
    old[0, 0] = rollout[0, 0] + 30.0  # one wild token: exercise the safety clamp
    return old, rollout, mask


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("level, threshold, normalize",
                         list(itertools.product(["token", "sequence"], [2.0, 5, "0.5_5.0"], [False, True])))
def test_rollout_correction_weights(level, threshold, normalize, seed, dtype):
    old, rollout, mask = mismatch_batch(seed, dtype, scale=0.05 if level == "sequence" else 0.3)
    log_ratio = old - rollout
    ours, ours_m = rc.compute_rollout_correction_weights(log_ratio, mask, level, threshold, normalize)
    theirs, theirs_m = VRC.compute_rollout_correction_weights(log_ratio, mask, level, threshold, normalize)
    assert_close("compute_rollout_correction_weights", ours, theirs, dtype)
    assert_metrics_close("compute_rollout_correction_weights", ours_m, theirs_m, dtype, prefix=rc.PREFIX)


RS_CASES = [(option, "2.0" if option.endswith("k1") else "0.05") for option in rc.ROLLOUT_RS_OPTIONS] + [
    ("token_k1", "0.8_1.25"), ("seq_mean_k1", "0.999_1.001"), ("seq_sum_k1,token_k3", "0.5_2.0,0.1"),
    ("seq_max_k2,seq_mean_k3", 0.02)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("option, threshold", RS_CASES)
def test_rollout_rejection_mask(option, threshold, seed, dtype):
    old, rollout, mask = mismatch_batch(seed, dtype)
    log_ratio = old - rollout
    ours, ours_m = rc.compute_rollout_rejection_mask(log_ratio, mask, option, threshold)
    theirs, theirs_m = VRC.compute_rollout_rejection_mask(log_ratio, mask, option, threshold)
    assert ours.dtype == theirs.dtype
    assert_close("compute_rollout_rejection_mask", ours, theirs, dtype)
    assert_metrics_close("compute_rollout_rejection_mask", ours_m, theirs_m, dtype, prefix=rc.PREFIX)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_offpolicy_metrics(seed, dtype):
    old, rollout, mask = mismatch_batch(seed, dtype)
    old[0, 0] = rollout[0, 0] + 2.0  # keep exp(log_ratio) of the unclamped k3_kl moderate
    for rollout_log_prob in (rollout, None):
        ours = rc.compute_offpolicy_metrics(old, rollout_log_prob, mask)
        theirs = VRC.compute_offpolicy_metrics(old, rollout_log_prob, mask)
        assert_metrics_close("compute_offpolicy_metrics", ours, theirs, dtype, prefix=rc.PREFIX)
        assert len(ours) == len(theirs), f"verl reports {set(theirs) - {k[len(rc.PREFIX):] for k in ours}} too"


BYPASS_CASES = [("ppo_clip", None, None, None), ("ppo_clip", "token", "token_k1", "0.5_2.0"),
                ("reinforce", None, None, None), ("reinforce", "token", None, None),
                ("reinforce", "sequence", "seq_max_k2", "2.5"),
                ("reinforce", "token", "token_k1,seq_mean_k3", "0.6_1.6,0.5")]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("loss_type, level, rs, rs_threshold", BYPASS_CASES)
def test_bypass_mode_policy_loss_values_metrics_and_gradients(loss_type, level, rs, rs_threshold, mode, seed, dtype):
    """Bypass mode: pi_old := pi_rollout; the loss computes IS weights and the RS mask from pi_theta itself."""
    new, rollout, mask = mismatch_batch(seed, dtype, scale=0.05)
    new[0, 0] = rollout[0, 0] + 0.5  # keep the sequence weights finite and varied (no +30 outlier here)
    mask[:, 0] = 1  # verl requires a valid token in every micro-batch; keep every row non-empty
    adv = torch.randn(new.shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    correction = Cfg(bypass_mode=True, loss_type=loss_type, rollout_is=level, rollout_is_threshold=2.0,
                     rollout_is_batch_normalize=False, rollout_rs=rs, rollout_rs_threshold=rs_threshold)
    (ours, ours_m), ours_g = grad_of(lambda lp: rc.compute_policy_loss_bypass_mode(
        rollout, lp, adv, mask, correction, mode), new)
    config = actor_config()
    config.policy_loss = {"rollout_correction": correction}
    (theirs, theirs_m), theirs_g = grad_of(lambda lp: V.compute_policy_loss_bypass_mode(
        rollout, lp, adv, mask, mode, config), new)
    assert_close("compute_policy_loss_bypass_mode", ours, theirs, dtype)
    assert_close("compute_policy_loss_bypass_mode grad", ours_g, theirs_g, dtype)
    assert_metrics_close("compute_policy_loss_bypass_mode", ours_m, theirs_m, dtype)


# ----------------------------------------------------------------------------------------------
# Rewards (verl/utils/reward_score/gsm8k.py) and the naive reward manager's placement
# ----------------------------------------------------------------------------------------------


def test_gsm8k_score_matches_verl_on_tricky_and_random_strings():
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from verl.utils.reward_score import gsm8k as verl_gsm8k

    from minirl import rewards

    tricky = ["#### 19", "####19", "#### 1,9", "#### $19", "19.", ".", "a . b", "#### -3.5 and #### 4",
              "x" * 400 + "#### 19", "#### 19" + "y" * 300, "", "no digits", "12+7=19 #### 19"]
    for text in tricky:
        for method in ("strict", "flexible"):
            for truth in ("19", "4", "."):
                ours = rewards.compute_gsm8k_score(text, truth, method, format_score=0.1)
                theirs = verl_gsm8k.compute_score(text, truth, method, format_score=0.1)
                assert ours == theirs, (text, method, truth)
                assert_close("compute_gsm8k_score", ours, theirs)

    @settings(max_examples=300, deadline=None)
    @given(text=st.text(alphabet="0123456789#.,$- ab\n", max_size=60))
    def random_strings(text):
        for method in ("strict", "flexible"):
            assert rewards.extract_solution(text, method) == verl_gsm8k.extract_solution(text, method)
            COMPARED["extract_solution"] += 1

    random_strings()


def test_reward_manager_matches_verl_naive_manager():
    from verl.workers.reward_manager.naive import NaiveRewardManager as VerlNaive

    from minirl import models, rewards
    from minirl.core import get_response_mask

    tokenizer = models.build_tokenizer()
    texts = ["1+2=3 #### 3", "1+2=4 #### 4", "3", "#### 3 #### 3", ""]
    responses = [tokenizer(t + tokenizer.eos_token)["input_ids"] for t in texts]
    width = max(map(len, responses)) + 2
    responses = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in responses])
    response_mask = get_response_mask(responses, tokenizer.eos_token_id)
    prompts = torch.full((len(texts), 4), tokenizer.pad_token_id)
    prompt_mask = torch.tensor([[0, 0, 1, 1]] * len(texts))
    batch = {"responses": responses, "response_mask": response_mask, "data_source": ["openai/gsm8k"] * len(texts),
             "reward_model": [{"ground_truth": "3"}] * len(texts)}
    ours, _ = rewards.NaiveRewardManager(tokenizer)(batch)
    data = DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses,
                 "attention_mask": torch.cat([prompt_mask, response_mask], dim=1)},
        non_tensors={"data_source": np.array(batch["data_source"], dtype=object),
                     "reward_model": np.array(batch["reward_model"], dtype=object)})
    theirs = VerlNaive(tokenizer, num_examine=0)(data)
    assert_close("NaiveRewardManager token_level_scores", ours, theirs)


# ----------------------------------------------------------------------------------------------
# sum_pi_squared and the variance-proxy metrics (the optimal token baselines' inputs)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_sum_pi_squared_and_variance_proxy_metrics(seed, dtype):
    from verl.trainer.ppo.metric_utils import compute_variance_proxy_metrics

    from minirl import metrics as minirl_metrics
    from minirl.protocol import DataProto as MiniProto

    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, 5, 11, generator=g, dtype=dtype) * (1 + 5 * seed)  # sharper with the seed
    assert_close("sum_pi_squared_from_logits", core.sum_pi_squared_from_logits(logits),
                 VF.calculate_sum_pi_squared_from_logits(logits), dtype)
    advantages, mask, _ = ragged_batch(seed, dtype, batch=6, length=5)
    old_log_probs = torch.log_softmax(logits, -1)[..., 0]
    tensors = {"old_log_probs": old_log_probs, "sum_pi_squared": core.sum_pi_squared_from_logits(logits),
               "advantages": advantages, "response_mask": mask}
    for weights in (None, torch.rand(6, 5, generator=g, dtype=dtype) * 2):
        for grad_norm in (None, 0.3):
            batch = dict(tensors) if weights is None else {**tensors, "rollout_is_weights": weights}
            ours = minirl_metrics.compute_variance_proxy_metrics(MiniProto(batch=dict(batch)), grad_norm)
            theirs = compute_variance_proxy_metrics(DataProto.from_dict(tensors=batch), grad_norm)
            assert ours.keys() == theirs.keys()
            for key in ours:
                assert_close(f"compute_variance_proxy_metrics {key}", ours[key], theirs[key], dtype)
