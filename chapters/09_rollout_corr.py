# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Chapter 9 · Rollout correction: when the policy that sampled is not the policy you train
#
# | The five answers | |
# |---|---|
# | **Problem** | A fast inference engine (vLLM, SGLang) samples the responses, often in lower precision, sometimes with weights a few updates old, sometimes with a truncated sampler. The trainer then recomputes the log-probs with its own kernels and the newest weights. The two policies differ, so the "on-policy" data is a little off-policy, and PPO's assumptions weaken. |
# | **Core formula** | $\log r_t = \log\pi_{\text{old}}(a_t) - \log\pi_{\text{rollout}}(a_t)$. Importance sampling (IS) weights the loss by a truncated ratio, $w_t = \min(e^{\log r_t}, C)$ per token, or one weight $\min(e^{\sum_t \log r_t}, C)$ per sequence. Rejection sampling (RS) drops the tokens or sequences whose divergence (e.g. $k_3 = e^{\log r} - 1 - \log r$) is too large. |
# | **Beginner's view** | You train on answers that you believe the current model wrote. In fact an approximate copy of the model wrote them: rounded, or a little out of date. The correction asks, for each answer, "how far is this sample from the policy I am training?", then trusts it less (IS) or throws it away (RS). |
# | **verl source** | `verl/trainer/ppo/rollout_corr_helper.py::compute_rollout_correction_and_add_to_batch` (IS weights, rejection mask, off-policy metrics); `verl/trainer/ppo/ray_trainer.py::RayPPOTrainer.fit` (applied after `token_level_rewards`, before the advantages; `apply_bypass_mode` in bypass mode); `verl/trainer/ppo/core_algos.py::compute_policy_loss_bypass_mode`; `verl/utils/debug/metrics.py::calculate_debug_metrics` (`training/rollout_probs_diff_*`); `docs/algo/rollout_corr.md`. |
# | **Where next** | [Lab C · Reading the debug metrics](lab_c_metrics.ipynb) for the `rollout_corr/*` metrics in context; [Chapter 1 · PPO](01_ppo.ipynb) for the ratio and the clip that bypass mode reuses; [Chapter 10 · HybridFlow](10_hybridflow.ipynb) for why the rollout engine is a separate engine at all. Back to [the reading map](index.md). |
#
# Run time: 3.2 minutes in this run on 2 CPU cores, with no other job running (24 training runs of
# 30 steps, two at a time, and 12 short ones). With `MINIRL_FAST=1` everything shrinks to a few steps.

# %%
from pathlib import Path

import numpy as np

from minirl import rollout_correction
from minirl.book.notebook import (
    compare_table,
    fast_mode,
    plot_comparison,
    print_run_time,
    run_grid,
    show_source,
    where_this_ran,
)

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "ch09"
STEPS = 3 if fast_mode() else 30
RC = "algorithm.rollout_correction"
VAL = "val-core/minirl/arithmetic/acc/mean@1"
DIFF = "training/rollout_probs_diff_mean"
# The tiny arithmetic task from the cached warm start (Chapters 1-4): 16 prompts x 8 answers per step,
# 4 mini-batches (4 optimizer steps per training step) at a learning rate that moves the policy quickly.
BASE = ["data.train_batch_size=16", "actor_rollout_ref.rollout.n=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.optim.lr=3e-4", f"trainer.total_training_steps={STEPS}",
        f"trainer.test_freq={1 if fast_mode() else 10}", f"data.val_max_samples={20 if fast_mode() else 200}",
        "trainer.val_before_train=true"]

# %% [markdown]
# ## 1. Three policies
#
# One PPO step in verl touches up to three versions of the policy:
#
# | name | what it is | where its log-probs come from |
# |---|---|---|
# | $\pi_{\text{rollout}}$ | the inference engine that sampled the answers | `rollout_log_probs`, returned by the engine with each token |
# | $\pi_{\text{old}}$ | the trainer's copy before this step's updates | `old_log_probs`, recomputed by the actor (`compute_log_prob`) |
# | $\pi_\theta$ | the trainer's copy being updated | `log_prob`, recomputed in every mini-batch, with gradient |
#
# PPO's ratio $\pi_\theta / \pi_{\text{old}}$ assumes the answers were sampled from $\pi_{\text{old}}$.
# In verl they were sampled from $\pi_{\text{rollout}}$. In theory the two are the same model. In practice
# they differ, for three reasons, each now an engine option of minirl (off by default):
#
# | source of mismatch | in production | minirl's option |
# |---|---|---|
# | **precision** | vLLM samples in bfloat16; FSDP trains in float32 | `actor_rollout_ref.rollout.dtype=bfloat16` (the engine gets its own bfloat16 copy of the weights) |
# | **stale weights** | asynchronous and one-step-off-policy trainers (`verl/experimental/one_step_off_policy/`, `verl/experimental/fully_async_policy/`) sample with weights a few updates old | `actor_rollout_ref.rollout.weight_sync_interval=k` (minirl's own key: sync the engine after every k-th update) |
# | **sampler** | top-k / top-p sampling renormalises over fewer tokens; the trainer scores with the full softmax | `actor_rollout_ref.rollout.top_k`, `top_p` (verl's keys) |
#
# Precision is there even in verl's synchronous runs with a colocated engine: colocation puts the engine on
# the trainer's GPUs, but vLLM or SGLang still keeps its own copy of the weights, in `rollout.dtype`
# (bfloat16 by default), re-synced at every step ([Chapter 10, section 4](10_hybridflow.ipynb#4-see-the-flow)).
#
# minirl's default engine shares the actor's float32 weights. Its mismatch is zero up to rounding: the
# engine decodes token by token with a KV cache, the actor scores the whole answer in one pass, and the
# two round differently (about $3\cdot10^{-7}$ in probability).
#
# ## 2. The formulas
#
# **The mismatch.** Per token, $\log r_t = \log\pi_{\text{old}}(a_t) - \log\pi_{\text{rollout}}(a_t)$.
# verl logs it two ways:
#
# - `training/rollout_probs_diff_mean` (`verl/utils/debug/metrics.py::calculate_debug_metrics`): the mean
#   of $\lvert \pi_{\text{old}}(a_t) - \pi_{\text{rollout}}(a_t)\rvert$ over valid tokens, in
#   *probability*. verl's FAQ (`docs/faq/faq.rst`): below about 0.005 is normal, above 0.01 is a problem.
# - `rollout_corr/kl` $= \overline{-\log r}$ (k1), `rollout_corr/k3_kl` $= \overline{e^{\log r} - 1 - \log r}$,
#   `rollout_corr/chi2_token` $= \overline{r^2} - 1$, and per-sequence perplexity gaps (`log_ppl_abs_diff`).
#
# **Importance sampling** (`rollout_is`, `rollout_is_threshold` $C$, default 2.0):
#
# $$\text{token: } w_t = \min\big(e^{\log r_t}, C\big), \qquad
#   \text{sequence: } w_t = \min\big(e^{\sum_s \log r_s}, C\big) \text{ for every token of the answer.}$$
#
# The PPO loss of each token is multiplied by $w_t$ (a constant: no gradient flows through it). Token
# weights are biased (they correct each token as if the earlier tokens had been sampled right) but tame;
# sequence weights are unbiased for the whole answer but vary far more. The effective sample size
# $\text{ESS} = 1/\overline{(w/\bar w)^2}$, a fraction between 0 and 1, says how much of the batch still
# counts (`rollout_corr/rollout_is_eff_sample_size`).
#
# **Rejection sampling** (`rollout_rs`, `rollout_rs_threshold`): drop a token (`token_k1`, ...) or a whole
# answer (`seq_mean_k3`, `seq_max_k2`, ...) whose divergence leaves a bound: for k1 a ratio range
# `lower_upper` (e.g. `0.5_2.0`), for k2/k3 an upper bound. Rejected tokens leave the loss.
#
# **Decoupled mode vs bypass mode** (`bypass_mode`, `loss_type`):
#
# | | decoupled (default) | bypass |
# |---|---|---|
# | policies | three: $\pi_{\text{rollout}}$, $\pi_{\text{old}}$, $\pi_\theta$ | two: $\pi_{\text{old}} := \pi_{\text{rollout}}$ |
# | $\pi_{\text{old}}$ | recomputed by the actor (one forward pass) | not computed: `old_log_probs = rollout_log_probs` |
# | PPO ratio | $\pi_\theta / \pi_{\text{old}}$, IS weights $\pi_{\text{old}}/\pi_{\text{rollout}}$ on top | `ppo_clip`: $\pi_\theta / \pi_{\text{rollout}}$, clipped (the ratio *is* the correction); `reinforce`: $-A\,w\log\pi_\theta$ with $w = \pi_\theta/\pi_{\text{rollout}}$ truncated |
#
# ## 3. See it: how large is each mismatch?
#
# Two training steps per source, 3 seeds, the default engine as the control. Staleness needs a few
# updates to build up, so it comes from the runs of section 4.

# %%
SOURCES = {"none (default engine)": [], "bfloat16 rollout": ["actor_rollout_ref.rollout.dtype=bfloat16"],
           "top-k 5 sampler": ["actor_rollout_ref.rollout.top_k=5"],
           "top-p 0.9 sampler": ["actor_rollout_ref.rollout.top_p=0.9"]}
SHORT = [*BASE[:4], "trainer.total_training_steps=2", "trainer.test_freq=-1", "trainer.val_before_train=false"]
see = run_grid(RUNS / "see", SOURCES, *SHORT, workers=1)  # short runs: in this process, one after the other

STALE = "actor_rollout_ref.rollout.weight_sync_interval"
VARIANTS = {
    "on-policy": [],
    "stale 4": [f"{STALE}=4"],
    "stale 8": [f"{STALE}=8"],
    "stale 8 + token TIS": [f"{STALE}=8", f"{RC}.rollout_is=token"],
    "stale 8 + sequence TIS": [f"{STALE}=8", f"{RC}.rollout_is=sequence"],
    "stale 8 + token RS": [f"{STALE}=8", f"{RC}.rollout_rs=token_k1", f"{RC}.rollout_rs_threshold=0.5_2.0"],
    "stale 8 + bypass ppo_clip": [f"{STALE}=8", f"{RC}.bypass_mode=true"],
    "stale 8 + bypass reinforce": [f"{STALE}=8", f"{RC}.bypass_mode=true", f"{RC}.loss_type=reinforce",
                                   f"{RC}.rollout_is=sequence"],
}
runs = run_grid(RUNS / "grid", VARIANTS, *BASE)  # 24 runs of 30 steps, two at a time


def mismatch(records, key, behind_only=False):
    """Mean of `key` over a run's training steps (only the steps where the engine was behind, if asked)."""
    return np.mean([r[key] for r in records if key in r and (not behind_only or r[DIFF] > 1e-5)])


table = [(name, seed_runs, False) for name, seed_runs in see.items()]
table += [(f"{name} (steps behind)", runs[name], True) for name in ("stale 4", "stale 8")]
print(f"{'source':32s} {'rollout_probs_diff_mean (range)':>34s} {'rollout_corr/k3_kl (range)':>30s}")
for name, seed_runs, behind_only in table:
    diffs = [mismatch(records, DIFF, behind_only) for records in seed_runs]
    k3 = [mismatch(records, "rollout_corr/k3_kl", behind_only) for records in seed_runs]
    print(f"{name:32s} {np.mean(diffs):13.5f} ({min(diffs):.5f}-{max(diffs):.5f}) "
          f"{np.mean(k3):10.5f} ({min(k3):.5f}-{max(k3):.5f})")
default_diffs = [mismatch(records, DIFF) for records in see["none (default engine)"]]
print(f"default engine, rollout_probs_diff_mean: {np.mean(default_diffs):.1e} "
      f"(seeds {min(default_diffs):.1e}-{max(default_diffs):.1e})")

# %% [markdown]
# What we measured in this run (`training/rollout_probs_diff_mean`, mean over 3 seeds, the seeds' range in
# brackets):
#
# - **The default engine** shows no mismatch: $2.8\cdot 10^{-7}$ (every seed), rounding only.
# - **bfloat16 sampling** moves the probabilities by 0.00035 on average (seeds 0.00028-0.00044): real, but
#   far below verl's "normal" line of 0.005. A tiny model with short answers keeps precision errors small;
#   long answers and large vocabularies make them larger (the FAQ's conditions).
# - **A truncating sampler** gives 0.00089 (top-k 5, seeds 0.00079-0.00096) and 0.00297 (top-p 0.9, seeds
#   0.00265-0.00345): the engine renormalises over the kept tokens, so every sampled token looks more
#   likely to the engine than to the trainer.
# - **Stale weights** dominate: one to three updates behind (sync every 4), the gap is already 0.0145
#   (seeds 0.0133-0.0167), above verl's "problem" line of 0.01 in every seed; up to seven updates behind
#   (sync every 8) it is 0.0204 (seeds 0.0180-0.0245), and `rollout_corr/k3_kl` is 0.065 nats per token
#   (seeds 0.045-0.097).
#
# On a GPU the order can differ (verl's FAQ is about kernels, not staleness), but the lesson holds: look
# at `training/rollout_probs_diff_mean` and `rollout_corr/kl` before trusting an "on-policy" run.
#
# ## 4. Feel it: learning while the engine falls behind
#
# The same GRPO run, 3 seeds, with the engine synced after every update (on-policy), after every 4th,
# and after every 8th. An "update" is one training step's `update_actor`: here 4 mini-batches, so 4
# optimizer steps. Synced every 8, the engine can be 7 updates (28 optimizer steps) behind. Validation always samples with the actor's own weights, so it measures the policy
# being trained, not the engine's stale copy.

# %% tags=["central-figure"]
feel = {name: runs[name] for name in ("on-policy", "stale 4", "stale 8")}
plot_comparison(feel, [(VAL, "validation accuracy (greedy, actor's weights)", "step"),
                       ("critic/score/mean", "reward of the sampled answers", "step"),
                       (DIFF, "training/rollout_probs_diff_mean", "step")])
print(compare_table(feel, VAL))

# %% [markdown]
# What happened in this run (3 seeds, validation after 30 steps, 200 prompts, greedy; mean, seeds' range
# in brackets):
#
# - **On-policy:** 0.508 (seeds 0.485-0.530), rising from the warm start (left panel).
# - **Sync every 4 updates:** 0.388 (seeds 0.315-0.465), below on-policy beyond the seed spread. Even this
#   smaller gap hurt here: the curve falls below the warm start instead of rising.
# - **Sync every 8 updates:** 0.413 (seeds 0.365-0.465), also below on-policy beyond the seed spread, and
#   within noise of sync-every-4 (the larger staleness did not measurably hurt more in this run). The
#   reward of the sampled answers of both stale runs mostly stays below on-policy's in the second half of
#   the run, and the probability gap (right panel) rises between syncs and drops to 0 at each sync: a
#   saw-tooth that is the signature of stale weights.
#
# Why does staleness hurt? In decoupled mode the actor recomputes $\pi_{\text{old}}$ with its *current*
# weights, so PPO's ratio starts at 1 and its clip measures the distance from $\pi_{\text{old}}$, not from
# the policy that sampled. Nothing in the loss knows the data came from a policy up to 7 updates
# older: the gradient is a policy gradient for the wrong policy, and it keeps pushing as if it were
# right.
#
# ## 5. Fix it: five corrections for the stale-8 run
#
# Each fix changes only what its name says; the engine is synced every 8 updates in all of them.

# %%
fixes = {name: runs[name] for name in VARIANTS if name.startswith("stale 8") or name == "on-policy"}
plot_comparison(fixes, [(VAL, "validation accuracy (greedy, actor's weights)", "step"),
                        ("critic/score/mean", "reward of the sampled answers", "step"),
                        ("rollout_corr/rollout_is_eff_sample_size", "effective sample size of the IS weights",
                         "step")])
print(compare_table(fixes, VAL))

# %% [markdown]
# verl's troubleshooting guide (`docs/algo/rollout_corr.md`, "Conditional alerting") flags a batch when
# the mean IS weight leaves [0.5, 2.0], the effective sample size falls below 0.3, the weights' standard
# deviation exceeds 1.0, $\lvert$`rollout_corr/kl`$\rvert$ exceeds 0.1, or `chi2_token` exceeds 1.0. The
# share of steps each rule flags, per run (mean over seeds):

# %%
RULES = {"IS mean outside [0.5, 2]": ("rollout_corr/rollout_is_mean", lambda v: v < 0.5 or v > 2.0),
         "ESS < 0.3": ("rollout_corr/rollout_is_eff_sample_size", lambda v: v < 0.3),
         "IS std > 1": ("rollout_corr/rollout_is_std", lambda v: v > 1.0),
         "|kl| > 0.1": ("rollout_corr/kl", lambda v: abs(v) > 0.1),
         "chi2_token > 1": ("rollout_corr/chi2_token", lambda v: v > 1.0)}
print(f"{'run':28s}" + "".join(f"{rule:>26s}" for rule in RULES))
for name, seed_runs in runs.items():
    shares = []
    for key, flagged in RULES.values():
        per_seed = [np.mean([flagged(r[key]) for r in records if key in r]) for records in seed_runs
                    if any(key in r for r in records)]
        shares.append(f"{np.mean(per_seed):26.2f}" if per_seed else f"{'-':>26s}")
    print(f"{name:28s}" + "".join(shares))

# What each correction costs (means over steps and seeds; "-" where the run logs no such metric)
COSTS = {"IS mean": "rollout_corr/rollout_is_mean", "ESS": "rollout_corr/rollout_is_eff_sample_size",
         "RS drops (tokens)": "rollout_corr/rollout_rs_masked_fraction", "s per step": "timing_s/step"}
print(f"\n{'run':28s}" + "".join(f"{label:>20s}" for label in COSTS) + f"{'lowest IS mean':>16s}")
for name, seed_runs in runs.items():
    cells = []
    for key in COSTS.values():
        values = [r[key] for records in seed_runs for r in records if key in r]
        cells.append(f"{np.mean(values):20.3f}" if values else f"{'-':>20s}")
    lowest = [r["rollout_corr/rollout_is_mean"] for records in seed_runs for r in records
              if "rollout_corr/rollout_is_mean" in r]
    print(f"{name:28s}" + "".join(cells) + (f"{min(lowest):16.3f}" if lowest else f"{'-':>16s}"))

# The token-TIS run of the failure-mode question (section 7): its weights over all steps, and its probability gap
tis = runs["stale 8 + token TIS"]
print()
for label, key in (("IS mean", "rollout_corr/rollout_is_mean"), ("ESS", "rollout_corr/rollout_is_eff_sample_size")):
    values = [r[key] for records in tis for r in records if key in r]
    print(f"stale 8 + token TIS, {label} over all steps and seeds: mean {np.mean(values):.3f}, "
          f"range {min(values):.3f}-{max(values):.3f}")
behind = [mismatch(records, DIFF, behind_only=True) for records in tis]
print(f"stale 8 + token TIS, rollout_probs_diff_mean (steps behind): {np.mean(behind):.3f} "
      f"(seeds {min(behind):.3f}-{max(behind):.3f})")

# %% [markdown]
# What we saw (3 seeds, validation after 30 steps):
#
# What we saw in this run (3 seeds, validation after 30 steps; mean, seeds' range in brackets). The
# uncorrected stale-8 run ends at 0.413 (0.365-0.465), on-policy at 0.508 (0.485-0.530). With 3 seeds
# and spreads this wide, only the worst fix separates from the uncorrected run:
#
# - **Bypass mode with `ppo_clip`:** 0.485 (0.425-0.585), within noise of on-policy but also within noise
#   of the uncorrected run: this run does not show that it recovers the curve. Its ratio is $\pi_\theta/\pi_{\text{rollout}}$, so the clip is anchored at the engine's
#   weights: between two syncs the policy cannot move far from the policy that samples, and the data stay
#   close to on-policy (`rollout_corr/kl` above 0.1 in 1% of its steps, against 18% uncorrected, means
#   over seeds; in bypass mode this metric is measured inside the loss, between the policy being trained
#   and the engine). It is also the cheapest: no recomputation of $\pi_{\text{old}}$, 0.253 s per step
#   against 0.316-0.340 s for the decoupled runs (cost table above, means over steps and seeds; no other job
#   shared the two CPU cores during this run).
# - **Decoupled IS and RS: within noise of the uncorrected run.** Token TIS 0.482 (0.465-0.505), sequence
#   TIS 0.413 (0.305-0.485) and token RS 0.373 (0.315-0.435) all overlap it. Token TIS is also within
#   noise of on-policy, and above token RS beyond the seed spread; token RS stays below on-policy beyond
#   the spread. Their cost is small (token TIS keeps an effective sample size of 0.98, sequence TIS 0.73,
#   token RS drops 2.6% of the tokens). They reweight or drop samples, but PPO's clip still measures the
#   distance from the current weights, so nothing anchors the policy to the data. They are made for small,
#   steady gaps such as precision (a probability gap near 0.00035), not for a policy 7 updates old.
# - **Bypass mode with `reinforce` is worse than nothing:** 0.237 (0.195-0.315), below the uncorrected run
#   and below on-policy, both beyond the seed spread. REINFORCE has no clip, so nothing bounds the step;
#   as the policy drifts from the engine, the sequence IS weights fall (their batch mean drops as low as
#   0.136, and leaves [0.5, 2] in 17% of its steps, the first alert of the table) and the effective batch
#   shrinks (ESS 0.60 on average, below 0.3 in 10% of its steps). verl's example pairs it with batch
#   normalisation (`rollout_is_batch_normalize=true`) and a small learning rate; an IS weight corrects a
#   distribution, it does not limit a step.
#
# The alerts of verl's guide find the broken runs: `|kl| > 0.1` fires in 37% of the `reinforce` run's
# steps, 18% of the uncorrected stale run's, and never on-policy (means over seeds). But the weight alerts
# (IS mean, ESS, std) never fire for the decoupled token-TIS run, although its engine is as far behind as
# the uncorrected run's (`training/rollout_probs_diff_mean` 0.020, seeds 0.016-0.025, on the steps
# behind); only the gap alert (`|kl| > 0.1`, 14% of its steps) shows it. Look at the gap and the learning
# curve, not only at the weights.
#
# ## 6. verl ↔ minirl
#
# | | verl 0.9.1 | minirl |
# |---|---|---|
# | IS weights | `verl/trainer/ppo/rollout_corr_helper.py::compute_rollout_correction_weights` (+ `compute_is_metrics`) | `minirl/rollout_correction.py::compute_rollout_correction_weights` |
# | rejection mask | `rollout_corr_helper.py::compute_rollout_rejection_mask` | `minirl/rollout_correction.py::compute_rollout_rejection_mask` |
# | off-policy metrics | `rollout_corr_helper.py::compute_offpolicy_metrics` | `minirl/rollout_correction.py::compute_offpolicy_metrics` |
# | where it runs (decoupled) | `rollout_corr_helper.py::compute_rollout_correction_and_add_to_batch`, called in `ray_trainer.py::RayPPOTrainer.fit` after the KL in the reward, before `compute_advantage` | `minirl/trainer.py::PPOTrainer._rollout_correction`, same place |
# | bypass mode | `rollout_corr_helper.py::apply_bypass_mode`; `core_algos.py::compute_policy_loss_bypass_mode`, `compute_policy_loss_reinforce` | `minirl/trainer.py::PPOTrainer.train_step`; `minirl/rollout_correction.py::compute_policy_loss_bypass_mode`, `compute_policy_loss_reinforce` |
# | the probability gap | `verl/utils/debug/metrics.py::calculate_debug_metrics` | `minirl/metrics.py::compute_debug_metrics` |
# | weight sync to the engine | `ray_trainer.py::RayPPOTrainer.fit` (`checkpoint_manager.update_weights`, timed as `update_weights`) | `minirl/workers.py::Rollout.update_weights` |
#
# | config key | verl default | meaning |
# |---|---|---|
# | `algorithm.rollout_correction.rollout_is` | `null` | `token` or `sequence` IS weights; `null` = metrics only |
# | `algorithm.rollout_correction.rollout_is_threshold` | `2.0` | TIS cap $C$; `"0.5_5.0"` zeroes weights outside [0.5, 5] (IcePop) |
# | `algorithm.rollout_correction.rollout_is_batch_normalize` | `false` | rescale the weights to mean 1 over the batch |
# | `algorithm.rollout_correction.rollout_rs` | `null` | rejection options, comma separated (`token_k1`, `seq_mean_k3`, `seq_max_k2`, ...) |
# | `algorithm.rollout_correction.rollout_rs_threshold` | `null` | one bound per option (`0.5_2.0` for k1, a number for k2/k3) |
# | `algorithm.rollout_correction.bypass_mode` | `false` | reuse the engine's log-probs as $\pi_{\text{old}}$ (two policies) |
# | `algorithm.rollout_correction.loss_type` | `ppo_clip` | bypass mode's loss: `ppo_clip` or `reinforce` |
# | `actor_rollout_ref.rollout.dtype` | `bfloat16` (minirl: `float32`) | the engine's precision |
# | `actor_rollout_ref.rollout.top_k`, `top_p` | `-1`, `1.0` | the engine's sampler |
# | `actor_rollout_ref.rollout.weight_sync_interval` | (minirl only) | sync the engine after every k-th update |
#
# verl's two example scripts, `examples/rollout_correction/run_qwen2_5_7b_fsdp.sh` (RLOO, bypass mode,
# `reinforce` with batch-normalised sequence IS) and `run_qwen2_5_7b_fsdp_multi_rs.sh` (GRPO, bypass
# `ppo_clip`, `rollout_rs=token_k1,seq_max_k2`), pass `python -m minirl config` unchanged, and a tiny run
# with all their keys completes (`tests/test_rollout_mismatch.py`).
#
# **Where the docs are out of date.** The example workflow in `docs/algo/rollout_corr.md` sets
# `rollout_rs: sequence` (or `geometric`). verl 0.9.1's code no longer accepts those names: its options
# are the `token_*`, `seq_sum_*`, `seq_mean_*` and `seq_max_*` families (`seq_mean_k1` is the old
# geometric mean). The doc's "Additional configurations for bypass mode" (`use_rollout_log_probs`,
# `policy_loss.loss_mode`) are set for you by `apply_bypass_mode`: `bypass_mode=true` is enough.
#
# ## 7. Exercises
#
# Open `exercises/ch09_rollout_corr.py` and grade with `make grade` (one exercise, all of its checks:
# `make grade EX=9.1`).
#
# | # | function | what it checks |
# |---|---|---|
# | 9.1 | `truncated_is_weights` | token-level truncated IS weights and their effective sample size, as verl reports it |
# | 9.2 | `sequence_rejection_mask` | verl's `seq_mean_k3` rejection: a whole answer leaves the loss when its mean k3 is too large |
#
# <details>
# <summary>Hint for 9.1</summary>
# Clamp the log-ratio to [-20, 20] <em>before</em> <code>exp</code> (padding may hold anything), multiply by
# the mask, then <code>clamp(max=threshold)</code>. The ESS uses the truncated weights and means over the
# valid tokens only.
# </details>
#
# <details>
# <summary>Hint for 9.2</summary>
# k3 per token, then its masked <em>mean</em> per row; keep the row if that mean is at most the threshold,
# and multiply the whole row of the mask by the verdict. A row with no valid token has nothing to reject.
# </details>
#
# **Failure-mode question.** Your asynchronous run uses `rollout_is=token` with the default threshold.
# `rollout_corr/rollout_is_mean` stays near 0.99 and the effective sample size near 0.98 for the whole run,
# so the IS-weight alerts of verl's guide stay green, yet the validation accuracy falls behind the synchronous
# run.
# How can the weights look perfect while the correction fails, and what do you look at instead?
#
# <details>
# <summary>Answer</summary>
# Section 5's token-TIS run has such weights: IS mean 0.990 (range over all steps and seeds
# 0.952-1.002), ESS 0.977 (0.940-1.000). Its accuracy, 0.482 (seeds 0.465-0.505), is within noise of
# both on-policy and the uncorrected run in this run, so the weights neither prove nor disprove that the
# correction worked. Each token's ratio is close to 1, so the weights look healthy, but
# the gap compounds over the answer (the sequence's ratio is the product of its tokens' ratios), and
# token weights never see that. The gap metrics do: `rollout_corr/kl`, `log_ppl_abs_diff`, `chi2_seq` and
# `training/rollout_probs_diff_mean` (0.020 on the steps behind here, seeds 0.016-0.025, twice verl's 0.01
# line). And in decoupled mode PPO's clip is anchored at the current weights, so nothing keeps
# the policy near the one that sampled the data. Reduce the gap itself (sync more often: in this run only
# syncing after every update beat the stale runs; every 4th was within noise of every 8th), or anchor the trust region at the engine with bypass mode (`bypass_mode=true`,
# `loss_type=ppo_clip`). A mean weight of 1.0 proves nothing: with `rollout_is_batch_normalize=true` it is
# 1.0 by construction.
# </details>
#
# ### The library's code, after you tried

# %%
from IPython.display import display

for function in (rollout_correction.compute_rollout_correction_weights,
                 rollout_correction.compute_rollout_rejection_mask,
                 rollout_correction.compute_policy_loss_bypass_mode):
    display(show_source(function, collapsed=True))

# %% [markdown]
# ## 8. Where next
#
# - [Chapter 1 · PPO](01_ppo.ipynb): the ratio and the clip, which bypass mode's `ppo_clip` turns into a
#   trust region around the engine's policy.
# - [Chapter 10 · HybridFlow](10_hybridflow.ipynb): why the rollout engine is a separate engine with its
#   own copy of the weights, and what the weight sync costs.
# - [Lab C · Reading the debug metrics](lab_c_metrics.ipynb): the `rollout_corr/*` and `training/*` metrics
#   among all the others.
# - References: Yao et al. (2025), *Your Efficient RL Framework Secretly Brings You Off-Policy RL Training*
#   (truncated IS for the vLLM/FSDP gap); Liu, Li, Fu, Wang, Liu, Shen (2025), *When Speed Kills Stability:
#   Demystifying RL Collapse from the Training-Inference Mismatch*; Espeholt et al. (2018), *IMPALA*
#   (V-trace: truncated IS for stale actors); verl's `docs/algo/rollout_corr.md` and
#   `docs/algo/rollout_corr_math.md`.

# %%
print_run_time()
