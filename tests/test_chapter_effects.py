"""Each chapter's central effect, on a seeded and small run, so that the book's claims cannot rot.

The chapters measure these effects with more seeds and larger runs; here one seed and a small setting
assert the direction of each effect (and, where the chapter quotes one, a margin well inside it).
"""

import json

import pytest
import torch

from minirl import models
from minirl.advantage import ADV_ESTIMATOR_REGISTRY, register_adv_est
from minirl.book.variance import gae_bias_variance, gradient_noise, policy_gradient_draws
from minirl.data import load_rl_rows
from minirl.plot import load_metrics
from minirl.rewards import NaiveRewardManager, default_compute_score
from minirl.sft import default_warm_start
from minirl.trainer import train

VAL = "val-core/minirl/arithmetic/acc/mean@1"
QUIET = ["trainer.logger=[]", "trainer.resume_mode=disable"]


def run(tmp_path, *overrides, name="run"):
    train([f"trainer.default_local_dir={tmp_path / name}", *QUIET, *overrides], show_progress=False)
    return load_metrics(tmp_path / name)


@pytest.fixture(scope="session")  # session: built once per worker, even when xdist interleaves files
def warm():
    """The SFT warm start: tokenizer, policy, a few training questions."""
    path = default_warm_start(show_progress=False)
    tokenizer = models.load_tokenizer(path)
    rows = load_rl_rows(str(path / "data" / "train.parquet"), tokenizer, 64)
    return path, tokenizer, models.load_policy(path), rows


def test_chapter1_without_the_clip_the_policy_collapses(tmp_path):
    """Chapter 1: 4 epochs of 4 mini-batches at lr 3e-4; unclipped collapses, clipped does not (seed 0)."""
    aggressive = ["algorithm.adv_estimator=gae", "actor_rollout_ref.actor.ppo_epochs=4",
                  "actor_rollout_ref.actor.ppo_mini_batch_size=4", "data.train_batch_size=16",
                  "actor_rollout_ref.actor.optim.lr=3e-4", "data.val_max_samples=100",
                  "trainer.total_training_steps=10", "trainer.test_freq=10"]
    unclipped = ["actor_rollout_ref.actor.clip_ratio_low=0.999", "actor_rollout_ref.actor.clip_ratio_high=1000",
                 "actor_rollout_ref.actor.clip_ratio_c=1000"]
    clipped = run(tmp_path, *aggressive, name="clipped")
    collapsed = run(tmp_path, *aggressive, *unclipped, name="unclipped")
    print(f"MEASURED ch1_val_clipped {clipped[-1][VAL]:.3f}\nMEASURED ch1_val_unclipped {collapsed[-1][VAL]:.3f}\n"
          f"MEASURED ch1_ppo_kl_ratio {collapsed[-1]['actor/ppo_kl'] / clipped[-1]['actor/ppo_kl']:.2f}")
    # Over warm starts 1-4 (bench/effect_spread.py; they start at 0.41-0.765): unclipped 0.00-0.06, clipped
    # 0.27-0.55, unclipped ppo_kl 2.5-5.0x the clipped run's. The margins sit inside those ranges.
    assert collapsed[-1][VAL] <= 0.1, f"unclipped PPO did not collapse: {collapsed[-1][VAL]}"
    assert clipped[-1][VAL] >= 0.2, f"clipped PPO fell too: {clipped[-1][VAL]}"
    assert collapsed[-1]["actor/ppo_kl"] > 1.5 * clipped[-1]["actor/ppo_kl"]


def test_chapter2_gae_variance_falls_and_bias_rises_as_lambda_falls(warm):
    """Chapter 2: at fixed (state, token) pairs, Var[A_t] grows with lambda (0 at lambda = 0, since LLM
    transitions are deterministic) and the bias against Monte Carlo shrinks with it."""
    path, tokenizer, policy, rows = warm
    critic = models.load_critic(path)  # an untrained value head: a poor critic, as at the start of PPO
    lams = [0.0, 0.5, 0.95, 1.0]
    measured = gae_bias_variance(policy, critic, tokenizer, rows[:4], lams, samples=16, seed=0)
    variance, bias, noise = measured["variance"], measured["bias_rms"], measured["bias_se_rms"]
    print(f"MEASURED ch2_var_ratio_1_vs_0.5 {variance[-1] / variance[1]:.1f}\n"
          f"MEASURED ch2_bias_gap_in_noise {(bias[0] - bias[2]) / noise[0]:.1f}")
    assert variance[0] < 1e-10, f"lambda = 0 must have no variance given (s_t, a_t): {variance[0]}"
    assert all(a < b for a, b in zip(variance, variance[1:])), f"variance does not grow with lambda: {variance}"
    assert variance[-1] > 10 * variance[1], f"lambda = 1 should be far noisier than lambda = 0.5: {variance}"
    assert bias[0] > bias[2] + 2 * noise[0], f"lambda = 0 should be more biased than 0.95: {bias} (noise {noise})"


def test_chapter7_a_baseline_pays_off_only_when_rewards_have_an_offset(warm):
    """Chapter 7, at equal samples on 8 questions: with a +1 bonus on every answer, REINFORCE without a
    baseline is several times noisier than RLOO (whose advantages ignore the offset); with the task's 0/1
    reward it is about as noisy (right answers are alike, wrong ones diverse and pull harder)."""
    _, tokenizer, policy, rows = warm

    @register_adv_est("test_reinforce_no_baseline")
    def no_baseline(token_level_rewards, response_mask, config=None, **kwargs):
        scores = token_level_rewards.sum(-1, keepdim=True) * response_mask
        return scores, scores

    bonus = NaiveRewardManager(tokenizer, compute_score=lambda **row: float(default_compute_score(**row)) + 1.0)
    names = ["test_reinforce_no_baseline", "rloo"]
    try:
        plain = policy_gradient_draws(policy, tokenizer, rows[:8], n=4, draws=12, estimators=names, seed=0)
        offset = policy_gradient_draws(policy, tokenizer, rows[:8], n=4, draws=12, estimators=names, seed=0,
                                       reward_fn=bonus)
        reference = policy_gradient_draws(policy, tokenizer, rows[:8], n=4, draws=24, estimators=["rloo"],
                                          seed=1)["rloo"].mean(0)
    finally:
        ADV_ESTIMATOR_REGISTRY.pop("test_reinforce_no_baseline")
    noise = {(reward, name): gradient_noise(draws[name], reference)["relative_variance"]
             for reward, draws in (("0/1", plain), ("+1", offset)) for name in names}
    print(f"MEASURED ch7_offset_noise_ratio {noise['+1', 'test_reinforce_no_baseline'] / noise['+1', 'rloo']:.2f}\n"
          f"MEASURED ch7_plain_noise_ratio {noise['0/1', 'test_reinforce_no_baseline'] / noise['0/1', 'rloo']:.2f}")
    assert torch.allclose(plain["rloo"], offset["rloo"], atol=1e-6), "RLOO's advantages must ignore a constant"
    # Over warm starts 1-3 (bench/effect_spread.py) the +1 offset made REINFORCE 5.7-16x noisier than RLOO, while
    # with the 0/1 reward it was 0.30-1.12x: comparable, sometimes quieter. The margins sit between the two.
    assert noise["+1", "test_reinforce_no_baseline"] > 3 * noise["+1", "rloo"], noise
    assert noise["0/1", "test_reinforce_no_baseline"] < 2 * noise["0/1", "rloo"], noise


def test_chapter11_gradient_draws_give_the_optimal_token_baselines_what_they_need(warm):
    """Chapter 11 measures the optimal token baseline's gradient variance with Chapter 7's draws: they must pass
    old_log_probs and sum_pi_squared (compute_advantage refuses the estimator without them)."""
    _, tokenizer, policy, rows = warm
    names = ["rloo", "optimal_token_baseline", "tir_optimal_token_baseline"]
    draws = policy_gradient_draws(policy, tokenizer, rows[:4], n=4, draws=2, estimators=names, seed=0)
    assert all(draws[name].shape == draws["rloo"].shape and torch.isfinite(draws[name]).all() for name in names)
    assert not torch.allclose(draws["rloo"], draws["optimal_token_baseline"]), "a per-position baseline is not RLOO's"
    # single-turn answers: TIR's own-token count is the answer's length, so both baselines agree
    assert torch.allclose(draws["optimal_token_baseline"], draws["tir_optimal_token_baseline"], atol=1e-6)


# ----------------------------------------------------------------------------------------------
# Chapters 3 and 6: the preference task (a reward model, PPO against it with and without the leash, DPO)
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")  # session: built once per worker, even when xdist interleaves files
def preference_setup():
    """The preference task, a reward model trained on it (seeded; cached by its config and training code, see
    reward_model.default_reward_model), its training summary, the held-out prompts and the SFT model."""
    from minirl import data, preference, reward_model

    task = preference.default_preference_task(show_progress=False)
    warm = preference.warm_start_of(task)
    rm_dir = reward_model.default_reward_model(reward_model.RewardModelConfig(num_train_epochs=4), show_progress=False)
    summary = json.loads((rm_dir / "reward_model.json").read_text())
    rows = data.read_parquet(warm / "data" / "test.parquet").to_list()
    return task, warm, rm_dir, summary, rows


def test_chapter3_the_reward_model_learns_the_length_shortcut(preference_setup):
    """Chapter 3, section 3: held-out pair accuracy 0.58 (labels cap it near 0.71); on the pairs the gold
    decides it agrees with the gold 0.73; it prefers the longer answer in 0.99 of the pairs whose styles differ."""
    import numpy as np

    from minirl import data, models, reward_model

    task, _, rm_dir, summary, _ = preference_setup
    assert summary["eval"]["accuracy"] > 0.5, summary["eval"]  # 0.58 in the chapter, 0.534 on an AVX-512 Xeon
    pairs = data.read_preference_pairs(task / "pairs_test.parquet", "test")
    held_out = reward_model.evaluate_pairs(reward_model.load_reward_model(rm_dir), models.load_tokenizer(rm_dir),
                                           pairs, max_length=128)
    picks_chosen = np.array(held_out["chosen_scores"]) > np.array(held_out["rejected_scores"])
    decided = [i for i, p in enumerate(pairs) if p["chosen_gold"] != p["rejected_gold"]]
    gold_agreement = np.mean([picks_chosen[i] == (pairs[i]["chosen_gold"] > pairs[i]["rejected_gold"])
                              for i in decided])
    uneven = [i for i, p in enumerate(pairs) if p["chosen_steps"] != p["rejected_steps"]]
    prefers_longer = np.mean([picks_chosen[i] == (pairs[i]["chosen_steps"] > pairs[i]["rejected_steps"])
                              for i in uneven])
    print(f"MEASURED ch3_rm_gold_agreement {gold_agreement:.3f}\nMEASURED ch3_rm_prefers_longer {prefers_longer:.3f}")
    # (0.63, 0.95) on an AVX-512 Xeon, (0.73, 0.99) where the chapter was run; the reward models of preference tasks
    # built from warm starts 1-3 (bench/effect_spread.py --swap preference) gave (0.59, 0.78), (0.70, 0.85) and
    # (0.71, 0.82): the shortcut is there on every one, not always as strong. The margins sit below those.
    assert gold_agreement > 0.55 and prefers_longer > 0.7, (gold_agreement, prefers_longer)


def test_chapter3_without_the_leash_the_gold_falls_while_the_proxy_does_not(preference_setup, tmp_path):
    """Chapter 3, section 5 (seed 0, 15 steps): without the leash (beta = 0) the gold share of 48 held-out prompts
    falls far below the SFT model's and below the leashed run's (beta = 0.05), at a proxy at least as high: the gap
    proxy gain - gold gain is far larger without the leash."""
    from minirl import models, preference
    from minirl.evaluate import evaluate_against_reference
    from minirl.reward_model import RewardModelScorer

    _, warm, rm_dir, _, rows = preference_setup
    scorer = RewardModelScorer(rm_dir, models.load_tokenizer(warm))
    sft = evaluate_against_reference(warm, warm, rows, 48, scorer)
    measured = {}
    for beta in (0.0, 0.05):
        train([f"trainer.default_local_dir={tmp_path / str(beta)}", *QUIET, "trainer.total_training_steps=15",
               "trainer.save_freq=15", "trainer.test_freq=-1", "trainer.val_before_train=False",
               *preference.ppo_overrides(rm_dir, kl_coef=beta)],
              show_progress=False)
        measured[beta] = evaluate_against_reference(tmp_path / str(beta) / "global_step_15" / "actor", warm, rows,
                                                    48, scorer)
    gap = {beta: (m["proxy"] - sft["proxy"]) - (m["gold"] - sft["gold"]) for beta, m in measured.items()}
    print(f"MEASURED ch3_gold sft {sft['gold']:.3f} beta0 {measured[0.0]['gold']:.3f} "
          f"beta0.05 {measured[0.05]['gold']:.3f}\nMEASURED ch3_proxy sft {sft['proxy']:.3f} "
          f"beta0 {measured[0.0]['proxy']:.3f} beta0.05 {measured[0.05]['proxy']:.3f}\n"
          f"MEASURED ch3_gap_difference {gap[0.0] - gap[0.05]:.3f}")
    # Over preference tasks built from warm starts 0-4 (bench/effect_spread.py --swap preference), at step 15:
    # beta = 0 ended 0.21-0.44 below the SFT model's gold and 0.14-0.25 below beta = 0.05's, at a proxy 0.009-0.61
    # above it; the gap difference was 0.21-0.77. Whether beta = 0.05 keeps the gold at the SFT model's level depends
    # on the task: on warm start 0 (the chapter's) it did, on 1-4 it fell 0.17-0.27, more slowly. Not asserted.
    assert measured[0.0]["gold"] < sft["gold"] - 0.07, (sft, measured)
    assert measured[0.0]["gold"] < measured[0.05]["gold"] - 0.07, measured
    assert measured[0.0]["proxy"] > measured[0.05]["proxy"] - 0.02, measured
    assert gap[0.0] > gap[0.05] + 0.1, gap


def test_chapter6_dpo_raises_the_gold_reward_over_sft(preference_setup, tmp_path):
    """Chapter 6: one epoch of DPO (beta 0.1) on the comparisons; sampled gold 0.51 -> about 0.7 (seed 0)."""
    from minirl import dpo
    from minirl.evaluate import evaluate_against_reference

    _, warm, _, _, rows = preference_setup
    dpo.train_dpo(dpo.DPOConfig(output_dir=str(tmp_path / "dpo"), val_files=None), show_progress=False)
    sft = evaluate_against_reference(warm, warm, rows, 48)
    trained = evaluate_against_reference(tmp_path / "dpo", warm, rows, 48)
    assert trained["gold"] > sft["gold"] + 0.04, (sft, trained)  # 0.225 -> 0.28 on an AVX-512 Xeon


def test_chapter8_thinking_emerges_and_a_lenient_verifier_is_exploited(tmp_path):
    """Chapter 8, sections 3 and 5, on half the chapter's batch (16 prompts x 8), seed 0, 25 steps at lr 3e-4:
    under the strict verifier the share of worked answers rises (0.26 at the warm start, 0.9 by the end) and so
    does accuracy; the lenient verifier pays for wrong answers (it is paid for more answers than are right)."""
    from minirl import rewards, sft

    chain = [*sft.train_overrides(sft.default_warm_start(sft.CHAIN_SFT, show_progress=False), sft.CHAIN_SFT),
             "actor_rollout_ref.actor.optim.lr=3e-4", "data.train_batch_size=16",
             "actor_rollout_ref.actor.ppo_mini_batch_size=8", "trainer.total_training_steps=25",
             "trainer.test_freq=-1", "trainer.val_before_train=False"]
    strict = run(tmp_path, *chain, name="strict")
    lenient = run(tmp_path, *chain, f"reward.custom_reward_function.path={rewards.__file__}",
                  "reward.custom_reward_function.name=lenient_score", name="lenient")

    def late(records, key):  # the mean over the last 10 steps: one step's 128 answers are a noisy sample
        return sum(r[key] for r in records[-10:]) / 10

    worked, acc = late(strict, "minirl/worked/mean"), late(strict, "minirl/acc/mean")
    paid, right = late(lenient, "critic/score/mean"), late(lenient, "minirl/acc/mean")
    print(f"MEASURED ch8_worked {strict[0]['minirl/worked/mean']:.2f}->{worked:.2f}\n"
          f"MEASURED ch8_acc_gain {acc - strict[0]['minirl/acc/mean']:+.3f}\nMEASURED ch8_paid_minus_right "
          f"{paid - right:+.3f}\nMEASURED ch8_strict_minus_lenient_acc {acc - right:+.3f}")
    # Over chain warm starts 0-4 (bench/effect_spread.py --swap chain) at step 25: worked 0.22-0.33 -> 0.88-0.95,
    # accuracy +0.14 to +0.45, paid minus right +0.012 to +0.048. The strictly trained policy's lead in accuracy
    # over the lenient one (the chapter's 3 seeds, 40 steps, twice this batch) was -0.003 to +0.016 here and
    # -0.030 to +0.093 at step 40: it does not hold on every warm start, so it is not asserted.
    assert strict[0]["minirl/worked/mean"] < 0.5 and worked > 0.8, [round(r["minirl/worked/mean"], 2) for r in strict]
    assert acc > strict[0]["minirl/acc/mean"] + 0.08
    assert paid - right > 0.005, (paid, right)  # the lenient rule pays for wrong answers
    assert late(strict, "critic/score/mean") == acc  # the strict rule pays only right ones


def test_chapter5_overlong_shaping_ends_truncation_by_dropping_the_reasoning(tmp_path):
    """Chapter 5, section 6, seed 0 of the chapter's run (the chain task, 16 prompts x 8, 4 mini-batches x 2
    epochs, lr 2e-4, 14 steps, a 44-token budget): DAPO's overlong penalty (the last 4 tokens) takes the share of
    answers at the limit from about 0.1 to about 0.01, by turning worked answers into direct ones."""
    from minirl import sft

    budget = [*sft.train_overrides(sft.default_warm_start(sft.CHAIN_SFT, show_progress=False), sft.CHAIN_SFT),
              "data.max_response_length=44", "data.train_batch_size=16",
              "actor_rollout_ref.actor.ppo_mini_batch_size=4",
              "actor_rollout_ref.actor.ppo_epochs=2", "actor_rollout_ref.actor.optim.lr=2e-4", "data.seed=0",
              "trainer.total_training_steps=14", "trainer.test_freq=-1", "trainer.val_before_train=False"]
    overlong = ["reward.reward_manager.name=dapo", "+reward.reward_kwargs.overlong_buffer_cfg.enable=True",
                "+reward.reward_kwargs.overlong_buffer_cfg.len=4",
                "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0", "+reward.reward_kwargs.max_resp_len=44"]
    plain, shaped = run(tmp_path, *budget, name="plain"), run(tmp_path, *budget, *overlong, name="shaped")

    def late(records, key):  # the mean over the last 5 steps
        return sum(r[key] for r in records[-5:]) / 5

    at_limit = late(plain, "response_length/clip_ratio"), late(shaped, "response_length/clip_ratio")
    worked = late(plain, "minirl/worked/mean"), late(shaped, "minirl/worked/mean")
    print(f"MEASURED ch5_at_limit {at_limit[0]:.3f} {at_limit[1]:.3f}\nMEASURED ch5_worked {worked[0]:.3f} "
          f"{worked[1]:.3f}")
    # Over chain warm starts 0-4 (bench/effect_spread.py --swap chain): at the limit 0.061-0.244 without the penalty,
    # 0.005-0.013 with it; worked 0.123-0.509 without, 0.016-0.028 with. Validation accuracy with the penalty was
    # lower on three, higher on two (the chapter: within the seed spread), so it is not measured here.
    assert at_limit[0] > 0.04 and at_limit[1] < min(0.03, at_limit[0] / 4), at_limit
    assert worked[0] > 0.08 and worked[1] < worked[0] / 3, worked


def test_chapter5_seq_mean_token_mean_pushes_long_wrong_answers_less_per_token():
    """Chapter 5, section 3, on a batch sampled from the chain task's warm start: per token, a short wrong answer
    is pushed down about as hard as a long one under token-mean (ratio 1.1) and Dr.GRPO (1.2), and about 6 times
    harder under seq-mean-token-mean."""
    from minirl import core, data, grpo, models, rewards, sft
    from minirl.rollout import generate_sequences

    warm = sft.default_warm_start(sft.CHAIN_SFT, show_progress=False)
    tokenizer, policy = models.load_tokenizer(warm), models.load_policy(warm)
    rows = [r for r in data.read_parquet(warm / "data" / "train.parquet").to_list()[:16] for _ in range(8)]
    prompts = data.encode_prompts(tokenizer, [r["prompt"] for r in rows], 64)
    out = generate_sequences(policy, prompts["input_ids"], prompts["attention_mask"], tokenizer.eos_token_id,
                             tokenizer.pad_token_id, 48, generator=torch.Generator().manual_seed(0))
    texts = tokenizer.batch_decode([r[:n] for r, n in zip(out["responses"], out["response_length"])],
                                   skip_special_tokens=True)
    right = torch.tensor([rewards.compute_chain_score(t, r["reward_model"]["ground_truth"])["score"]
                          for t, r in zip(texts, rows)])
    mask = out["response_mask"].float()
    lengths, uids = mask.sum(-1), [str(i // 8) for i in range(len(rows))]
    ratios = {}
    for mode, by_std in (("token-mean", True), ("seq-mean-token-mean", True), ("seq-mean-token-sum-norm", False)):
        advantages, _ = grpo.compute_grpo_outcome_advantage(core.place_scores_on_last_token(right, mask), mask, uids,
                                                            norm_adv_by_std_in_grpo=by_std)
        token_losses = torch.zeros_like(mask, requires_grad=True)
        core.agg_loss(token_losses, mask, mode).backward()
        push = (token_losses.grad * advantages).abs().sum(-1) / lengths
        wrong = (right == 0) & (advantages[:, 0] != 0)
        ratios[mode] = (push[wrong & (lengths <= 12)].mean() / push[wrong & (lengths >= 30)].mean()).item()
    assert ratios["seq-mean-token-mean"] > 3 * max(ratios["token-mean"], ratios["seq-mean-token-sum-norm"]), ratios


def test_chapter9_bypass_mode_recovers_a_run_that_stale_weights_degrade(tmp_path):
    """Chapter 9: the engine synced every 8 updates loses validation accuracy; bypass mode's ppo_clip, whose ratio
    is anchored at the engine's policy, recovers it (seed 1: 0.48 on-policy, 0.24 stale, 0.495 bypass)."""
    base = ["data.train_batch_size=16", "actor_rollout_ref.rollout.n=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.optim.lr=3e-4",
            "trainer.total_training_steps=30", "trainer.test_freq=10", "data.val_max_samples=200", "data.seed=1"]
    stale = ["actor_rollout_ref.rollout.weight_sync_interval=8"]
    on_policy = run(tmp_path, *base, name="on_policy")
    degraded = run(tmp_path, *base, *stale, name="stale")
    recovered = run(tmp_path, *base, *stale, "algorithm.rollout_correction.bypass_mode=true", name="bypass")
    print(f"MEASURED ch9_val_on_policy {on_policy[-1][VAL]:.3f}\nMEASURED ch9_val_stale {degraded[-1][VAL]:.3f}\n"
          f"MEASURED ch9_val_bypass {recovered[-1][VAL]:.3f}")
    assert max(r.get("training/rollout_probs_diff_mean", 0) for r in on_policy) < 1e-5
    assert max(r.get("training/rollout_probs_diff_mean", 0) for r in degraded) > 0.01
    # over warm starts 1-4 (bench/effect_spread.py) the stale run lost 0.015-0.10 and bypass regained 0.06-0.17:
    # the direction holds on every one, the size does not, so the direction is asserted (the chapter has 3 seeds)
    assert degraded[-1][VAL] < on_policy[-1][VAL], (degraded[-1][VAL], on_policy[-1][VAL])
    assert recovered[-1][VAL] > degraded[-1][VAL], (recovered[-1][VAL], degraded[-1][VAL])


def test_chapter11_one_ratio_per_answer_is_steadier_the_longer_the_answer():
    """Chapter 11, section 1: after one step's four updates, a token's log-ratio is clipped all over the batch, the
    log of the true sequence ratio spreads more for long answers, and the paper's tiny GSPO range holds almost no
    answer at our learning rate (chapter: 0.062 of tokens but 0.629 of answers clipped; sums 0.52 -> 0.82; 0.984
    outside). Not asserted: that GSPO's length-normalised ratio spreads less for long answers (chapter: 0.066 ->
    0.019). From chain warm starts 0-4 on an AMD EPYC (bench/effect_spread.py --swap chain) its long/short spread
    was 0.49-0.86 in four and 1.59 in one, while the sum's was 2.8-9.5 in all five and answers with a clipped
    token 13-18 times the clipped tokens' share."""
    from minirl.book.variance import log_probs_after_updates, sample_responses
    from minirl.grpo import compute_grpo_outcome_advantage
    from minirl.sft import CHAIN_SFT

    path = default_warm_start(CHAIN_SFT, show_progress=False)
    tokenizer, policy = models.load_tokenizer(path), models.load_policy(path)
    rows = load_rl_rows(str(path / "data" / "train.parquet"), tokenizer, 64)[:32]
    R = CHAIN_SFT.response_length
    batch = sample_responses(policy, tokenizer, rows, 8, R, seed=11)
    mask = batch["response_mask"].float()
    advantages, _ = compute_grpo_outcome_advantage(batch["token_level_scores"], mask, batch["index"].tolist())
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
    with torch.no_grad():
        old, _ = models.compute_log_probs(policy, **inputs, response_length=R)
    log_ratio = (log_probs_after_updates(path, inputs, R, old, advantages, mask) - old) * mask
    lengths = mask.sum(-1)
    short, long = lengths <= 12, lengths >= 31
    assert short.sum() >= 8 and long.sum() >= 8, (short.sum(), long.sum())
    seq_sum, seq_mean = log_ratio.sum(-1), log_ratio.sum(-1) / lengths
    ratio = log_ratio.exp()
    clipped_tokens = ((ratio > 1.2) | (ratio < 0.8)) & mask.bool()
    token_share, answer_share = clipped_tokens.sum() / mask.sum(), clipped_tokens.any(-1).float().mean()
    outside = ((seq_mean.exp() > 1 + 4e-4) | (seq_mean.exp() < 1 - 3e-4)).float().mean()
    print(f"MEASURED ch11 short/long std sum {seq_sum[short].std():.3f}/{seq_sum[long].std():.3f} mean "
          f"{seq_mean[short].std():.4f}/{seq_mean[long].std():.4f} clipped tokens {token_share:.3f} answers "
          f"{answer_share:.3f} outside GSPO range {outside:.3f}")
    assert seq_sum[long].std() > seq_sum[short].std(), (seq_sum[long].std(), seq_sum[short].std())
    assert answer_share > 3 * token_share, (answer_share, token_share)
    assert outside > 0.8, outside


def test_chapter12_a_rollout_further_ahead_trains_older_answers_further_from_the_sampler(tmp_path):
    """Chapter 12, section 4: separate_async's rollout process starts num_warmup_batches ahead, so the trained
    answers' oldest weights are exactly that many syncs old (the bound is structural: a batch is dispatched after
    the sync num_warmup_batches steps earlier), and the gap between pi_old and the sampler grows with it (chapter,
    3 seeds: staleness 1 -> 2, rollout_corr/kl 0.0009 -> 0.0038)."""
    from minirl.sft import CHAIN_SFT, train_overrides

    base = [*train_overrides(default_warm_start(CHAIN_SFT, show_progress=False), CHAIN_SFT),
            "data.train_batch_size=16", "actor_rollout_ref.rollout.n=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "actor_rollout_ref.actor.optim.lr=2e-4", "trainer.total_training_steps=5", "trainer.test_freq=-1",
            "trainer.val_before_train=false", "trainer.use_v1=true", "trainer.v1.trainer_mode=separate_async",
            "trainer.v1.separate_async.parameter_sync_step=2"]
    one = run(tmp_path, *base, name="one_ahead")
    two = run(tmp_path, *base, "trainer.v1.separate_async.num_warmup_batches=2", name="two_ahead")
    worst = [max(r["training/off_policy/trajectory_staleness_worst/max"] for r in h) for h in (one, two)]
    kl = [sum(r["rollout_corr/kl"] for r in h[2:]) / len(h[2:]) for h in (one, two)]
    print(f"MEASURED ch12_staleness_worst {worst}\nMEASURED ch12_rollout_corr_kl {kl[0]:.4f} {kl[1]:.4f}")
    assert worst == [1, 2], worst
    assert kl[1] > kl[0], kl


def test_chapter13_rl_teaches_the_tool_and_masking_the_tool_turns_matters(tmp_path):
    """Chapter 13, sections 5 and 6: from the tool task's warm start, GRPO raises the tool-call rate (a reward that
    never mentions the tool), through a tool file written as a reader writes one; training on the tool's tokens
    too holds the rate back. From warm starts 0-2 (TOOL_SFT's seed; AMD EPYC), after 8 steps: calls per answer rose
    0.27-0.52 from step 1 with the mask, and ended 0.19-0.33 above the unmasked ablation (the bounds ask for 0.15 and
    0.1)."""
    from minirl import data
    from minirl.sft import TOOL_SFT, train_overrides

    imports = [line for line in data.TOOL_FILE.read_text().splitlines() if line.startswith(("import", "from"))]
    assert imports == ["from minirl.tools import function_tool"], imports  # a reader's file: nothing else
    base = [*train_overrides(default_warm_start(TOOL_SFT, show_progress=False), TOOL_SFT),
            "data.train_batch_size=16", "actor_rollout_ref.rollout.n=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "actor_rollout_ref.actor.optim.lr=2e-4", "trainer.total_training_steps=8", "trainer.test_freq=-1",
            "trainer.val_before_train=false"]
    masked = run(tmp_path, *base, name="masked")
    unmasked = run(tmp_path, *base, "actor_rollout_ref.rollout.multi_turn.train_on_tool_responses=true",
                   name="unmasked")
    calls = {name: [r["minirl/tool_calls/mean"] for r in h] for name, h in (("masked", masked), ("unmasked", unmasked))}
    end = {name: (c[-1] + c[-2]) / 2 for name, c in calls.items()}
    turns = masked[-1]["num_turns/mean"]
    print(f"MEASURED ch13_tool_calls {calls['masked'][0]:.2f} -> {end['masked']:.2f} (unmasked {end['unmasked']:.2f}); "
          f"num_turns/mean {turns:.2f}")
    assert turns > 2, "the reader's tool file was called: num_turns/mean counts the tool turns"
    assert end["masked"] > calls["masked"][0] + 0.15, calls
    assert end["masked"] > end["unmasked"] + 0.1, end


def test_chapter14_lora_needs_a_larger_learning_rate_and_the_k3_gradient_is_the_forward_kls():
    """Chapter 14, sections 3 and 6. (a) Exactly, on a small vocabulary: k3 back-propagated on the student's samples
    has the forward KL's expected gradient, k2 and k1-as-a-reward the reverse KL's, k1 back-propagated none.
    (b) Off-policy distillation through a rank-4 adapter: 20 SFT steps of 128 teacher samples at 5e-3 against 1e-3
    (full fine-tuning's best rate in the chapter). Measured on 3 seeds (100 validation questions, Intel AVX-512):
    0.68-0.76 against 0.50-0.56, a gap of 0.18-0.20 on every seed. From warm starts 0-4 (bench/effect_spread.py)
    the gap was 0.08-0.20 (0.08 from warm start 1, which starts at 0.765 and ends at 0.94); the bound asks for
    0.05."""
    from minirl import data, sft
    from minirl.kl import kl_penalty

    theta = torch.randn(7, dtype=torch.float64, generator=torch.Generator().manual_seed(3), requires_grad=True)
    log_p = torch.log_softmax(torch.randn(7, dtype=torch.float64, generator=torch.Generator().manual_seed(4)) * 2, 0)

    def gradient(loss_of_log_q):
        return torch.autograd.grad(loss_of_log_q(torch.log_softmax(theta, 0)), theta)[0]

    def expected(per_token):
        return gradient(lambda lq: (lq.exp().detach() * per_token(lq, log_p)).sum())

    reverse = gradient(lambda lq: (lq.exp() * (lq - log_p)).sum())
    forward = gradient(lambda lq: (log_p.exp() * (log_p - lq)).sum())
    assert torch.allclose(expected(lambda lq, lp: kl_penalty(lq, lp, "k3")), forward, atol=1e-12)
    assert torch.allclose(expected(lambda lq, lp: kl_penalty(lq, lp, "k2")), reverse, atol=1e-12)
    assert torch.allclose(expected(lambda lq, lp: (lq - lp).detach() * lq), reverse, atol=1e-12)
    assert expected(lambda lq, lp: kl_penalty(lq, lp, "k1")).abs().max() < 1e-12

    student, teacher = default_warm_start(show_progress=False), default_warm_start(sft.TEACHER_SFT, show_progress=False)
    demos = sft.sample_demonstrations(teacher, data.read_parquet(student / "data" / "train.parquet").to_list(), 20, 64)
    val_rows = data.read_parquet(student / "data" / "test.parquet").to_list()[:100]
    final = {}
    for lr in (1e-3, 5e-3):
        records = sft.train_on_demonstrations(student, demos, val_rows, sft.SFTConfig(
            steps=20, batch_size=128, lr=lr, warmup_steps=0, seed=0), lora_rank=4, eval_every=100)
        final[lr] = records[-1][VAL]
    print(f"MEASURED ch14_lora_lr r4 after 20 steps: lr 1e-3 {final[1e-3]:.3f}, lr 5e-3 {final[5e-3]:.3f}")
    assert final[5e-3] > final[1e-3] + 0.05, final
