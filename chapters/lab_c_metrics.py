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
# # Lab C · Reading the debug metrics
#
# | | |
# |---|---|
# | **What you will do** | Read every metric minirl logs, in verl's groups, each with the code that computes it and its healthy range on the tiny task. Then break a run nine ways, one cause at a time, and learn each signature next to a healthy run. Finally write a function that names the cause of runs whose cause is hidden. |
# | **What you need** | [Chapter 1 · PPO](01_ppo.ipynb) (ratio and clip), [Chapter 4 · GRPO](04_grpo.ipynb) (group advantages); [Lab A](lab_a_gsm8k.ipynb) for what one training step does. |
# | **verl pages this lab follows** | `docs/faq/faq.rst`, `docs/algo/rollout_corr.md` (their thresholds) and the metric list in `docs/ascend_tutorial/dev_guide/model_dev/parameter_and_metrics.md` (tag v0.9.0); the code of verl 0.9.1: `verl/trainer/ppo/metric_utils.py`, `verl/workers/utils/losses.py`, `verl/trainer/ppo/ray_trainer.py`. Section 6 lists where the pages are out of date. |
# | **Run time** | 3.3 minutes in the run shown here, on 2 CPU cores (two reference runs and nine broken or comparison cases of 12 steps, each trained with 3 seeds: 33 runs, two at a time; then a 300-step SFT and one 12-step run from it; the first output names the machine, the last prints the run time). With `MINIRL_FAST=1` (one seed, 2 steps), 22 seconds when we measured it. |
#
# A run that does not learn rarely crashes. It prints numbers. This lab teaches you to read them.

# %%
import shutil
import statistics
from pathlib import Path
from unittest import mock

import torch

from minirl import models, sft
from minirl.book import broken_runs
from minirl.book.notebook import fast_mode, plot_comparison, print_run_time, run_grid, where_this_ran
from minirl.config import load_config
from minirl.data import encode_prompts, read_parquet
from minirl.plot import load_metrics, plot_runs, training_steps
from minirl.rollout import generate_sequences
from minirl.trainer import train

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "lab_c"
STEPS = 1 if fast_mode() else broken_runs.GRADED_STEPS  # 12: as long as Exercise C.1's hidden runs
COMMON = [f"trainer.total_training_steps={STEPS}", f"trainer.test_freq={min(6, STEPS)}"]
if fast_mode():
    COMMON += ["data.val_max_samples=12"]
VAL = "val-core/minirl/arithmetic/acc/mean@1"


def show_ranges(runs: dict, prefix: str):
    """Print min, max and last value over the training steps of every metric under `prefix`, per run."""
    for label, records in runs.items():
        steps = training_steps(records) if not prefix.startswith("val") else records
        names = sorted({k for r in steps for k in r if k.startswith(prefix)})
        if not names:
            continue
        print(f"{label}:")
        for name in names:
            values = [r[name] for r in steps if name in r]
            print(f"  {name:52s} min {min(values):10.4g}   max {max(values):10.4g}   last {values[-1]:10.4g}")


# %% [markdown]
# ## 1. Where the metrics come from
#
# One training step of `RayPPOTrainer.fit` (minirl: `minirl/trainer.py::PPOTrainer.train_step`) does these
# things in order. Each one writes its metrics into the step's dictionary, under a group prefix:
#
# | stage | what happens | metrics it writes |
# |---|---|---|
# | generate | the rollout engine samples `rollout.n` responses per prompt | `timing_s/gen`, later `response_length/*`, `prompt_length/*` |
# | reward | the reward function scores each response | `timing_s/reward`, later `critic/score/*`, extra keys as `minirl/<key>/mean` |
# | old log-prob | the actor recomputes the log-probabilities of the sampled tokens | `actor/entropy`, `training/rollout_probs_diff_*` |
# | reference, values | the frozen reference and the critic score the same tokens | `timing_s/ref`, `timing_s/values` |
# | KL in the reward | optional: reward minus beta times KL to the reference | `actor/reward_kl_penalty*`, `critic/rewards/*` |
# | rollout correction | compares the trainer's and the sampler's probabilities | `rollout_corr/*` |
# | advantages | GAE, GRPO, RLOO, ... | `critic/advantages/*`, `critic/returns/*`, `timing_s/adv` |
# | critic update | value loss on mini-batches | `critic/vf_loss`, `critic/vf_clipfrac`, `critic/grad_norm`, ... |
# | actor update | the clipped policy loss on mini-batches | `actor/pg_loss`, `actor/pg_clipfrac`, `actor/ppo_kl`, `actor/grad_norm`, ... |
# | bookkeeping | lengths, timings, throughput, the step counter | `timing_s/*`, `timing_per_token_ms/*`, `perf/*`, `training/*` |
# | validation | every `trainer.test_freq` steps, greedy answers to the test set | `val-core/*`, `val-aux/*` |
#
# minirl writes every step's dictionary as one line of `metrics.jsonl` in the run directory (and to the
# `trainer.logger` backends, as verl does). `minirl.plot.load_metrics(run_dir)` reads it back as a list of dicts.
#
# Two reference runs show every metric. The first is the healthy GRPO run that the gallery in section 3 compares
# against: minirl's defaults on the tiny task, 16 prompts x 8 responses per step, 12 steps
# (`minirl/book/broken_runs.py::BASE`), with one addition that every run of this lab shares: the KL loss is on
# with a coefficient of 0 (`actor.use_kl_loss=true`, `actor.kl_loss_coef=0`). The KL to the reference is then
# measured and logged as `actor/kl_loss` in every run, and adds nothing to the gradient. So every run logs the same
# metrics, and a KL blow-up shows in the value of `actor/kl_loss`, not in whether it is there. The second is PPO
# with a critic (`algorithm.adv_estimator=gae`) with everything optional switched on: the KL in the reward
# (`algorithm.use_kl_in_reward=true`), the KL loss (`actor.use_kl_loss=true` at verl's default
# `kl_loss_coef=0.001`), an entropy bonus (`actor.entropy_coeff=0.001`), four sampled validation answers per
# question (`rollout.val_kwargs.n=4`) and token-level importance weights (`algorithm.rollout_correction.rollout_is=token`).

# %%
EVERYTHING_ON = ["algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true",
                 "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.001",
                 "actor_rollout_ref.actor.entropy_coeff=0.001",
                 "actor_rollout_ref.rollout.val_kwargs.n=4", "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
                 "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
                 "algorithm.rollout_correction.rollout_is=token"]
reference = run_grid(RUNS / "reference", {"grpo (healthy)": [], "ppo, everything on": EVERYTHING_ON},
                     *broken_runs.BASE, *COMMON)
ref = {label: runs[0] for label, runs in reference.items()}
names = sorted({k for records in ref.values() for r in records for k in r} - {"step"})
print(f"{len(names)} metric names in the two runs; groups:",
      sorted({n.split("/")[0] for n in names}))
last = training_steps(ref["ppo, everything on"])[-1]
print({k: round(last[k], 4) for k in ("critic/score/mean", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy")})

# %% [markdown]
# ## 2. Every metric, group by group
#
# Each table gives the metric, what it is (and the code that computes it, in minirl and in verl 0.9.1), what moves
# it, and what to expect. The last column says whose expectation it is. **verl:** what verl's pages document
# (`docs/faq/faq.rst` and `docs/algo/rollout_corr.md`, tag v0.9.0); verl documents few numbers. **book:** this
# book's own rule of thumb, not verl's, with what the book's runs measured on the tiny task (section 3 trains
# every case with 3 seeds and prints the values seed by seed). Under each table, the printout gives the range the
# metric took over the 12 steps of the two runs above, seed 0 of each: that is "healthy" **on the tiny task**, in
# this run. A real run's values differ (longer responses, a bigger vocabulary, a smaller learning rate), but the
# shapes do not: what is flat, what falls, what must stay near zero.
#
# ### `actor/`: the policy update
#
# minirl: `minirl/ppo.py::compute_policy_loss` and `minirl/workers.py::Actor.update_actor`; verl:
# `verl/trainer/ppo/core_algos.py::compute_policy_loss_vanilla`, `verl/workers/utils/losses.py::ppo_loss`,
# `verl/workers/engine_workers.py::TrainingWorker.train_batch`. Values are averaged over the micro-batches of the
# step.
#
# | metric | what it is | what moves it | real runs |
# |---|---|---|---|
# | `actor/pg_loss` | the clipped policy-gradient loss, aggregated by `actor.loss_agg_mode` | advantages are centred, so it hovers around 0; its value means little, its sign even less | do not read it as "lower is better" |
# | `actor/pg_clipfrac` | fraction of tokens whose ratio $r_t = \pi_\theta / \pi_{old}$ left $[1-\epsilon, 1+\epsilon]$ in the direction the clip stops | large learning rate, many epochs or mini-batches per batch; 0 when every mini-batch is the first update on fresh data | **book:** near 0 with one update per batch (the healthy run: at most 0.00141 in 3 seeds), a percent or two when each batch is reused (4 epochs: medians 0.0117 to 0.0139); a clipfrac that keeps rising means each batch is pushed too far |
# | `actor/pg_clipfrac_lower` | fraction of tokens held by dual-clip (`actor.clip_ratio_c`, negative advantages only) | very large ratios on bad tokens | should be near 0 |
# | `actor/ppo_kl` | mean of $\log \pi_{old} - \log \pi_\theta$ over the update: how far the update moved from the sampler | learning rate, `ppo_epochs`, number of mini-batches | **book:** about 1e-3 or below with one update per batch (the healthy run peaks at 0.000452 to 0.00318 over 3 seeds), a few 1e-3 with 4 epochs (medians 0.00263 to 0.00486); near 1 at the first step is a broken update (lr 1e-2: 1.14 to 1.86) |
# | `actor/entropy` | mean token entropy of the policy on the sampled responses, from the old log-prob pass | falls as the policy sharpens; rises when it is knocked off its data | a slow fall is normal; a fast fall to near 0 is entropy collapse |
# | `actor/grad_norm` | the gradient norm **before** clipping to `actor.optim.clip_grad` (1.0) | learning signal size; exactly 0 when every advantage is 0 | **verl:** the FAQ names a grad_norm that keeps rising as a possible sign of a precision mismatch between the rollout engine and the trainer, to be checked with `training/rollout_probs_diff_mean`. **book:** a rise alone says little: the healthy run's also rises, from 0.166 to 0.185 at step 1 to peaks of 0.292 to 0.417, and section 3's stale-weights run stays inside that range |
# | `actor/lr` | the learning rate of the next optimizer step | warm-up and schedule (`actor.optim.*`) | check it is what you asked for |
# | `actor/kl_loss`, `actor/kl_coef` | KL of the policy to the frozen reference (`actor.kl_loss_type`, default `low_var_kl`) and its coefficient, with `actor.use_kl_loss=true` (here in every run, with coefficient 0 unless said) | grows as the policy leaves the reference | **book:** the healthy run (lr 1e-4, a hundred times verl's usual actor lr) peaks at 0.0156 to 0.0294 in 12 steps (3 seeds); the KL blow-up of section 3 passes 0.1 at step 4 or 5 |
# | `actor/entropy_loss` | the entropy term of the loss, with `actor.entropy_coeff > 0` | as `actor/entropy` | |
# | `actor/reward_kl_penalty`, `actor/reward_kl_penalty_coeff` | the KL subtracted from the reward and its beta, with `algorithm.use_kl_in_reward=true` (`minirl/kl.py::apply_kl_penalty`, verl `verl/trainer/ppo/ray_trainer.py::apply_kl_penalty`) | as `actor/kl_loss`; beta moves with `algorithm.kl_ctrl.type=adaptive` | |

# %%
show_ranges(ref, "actor/")

# %% [markdown]
# ### `critic/`: scores, rewards, advantages, and the value model
#
# minirl: `minirl/metrics.py::compute_data_metrics` and `minirl/workers.py::Critic.update_critic`; verl:
# `verl/trainer/ppo/metric_utils.py::compute_data_metrics` and `verl/workers/utils/losses.py::value_loss`. The
# first five rows exist in every run, with or without a critic: verl files the data statistics under `critic/`.
#
# | metric | what it is | what moves it | real runs |
# |---|---|---|---|
# | `critic/score/mean`, `/max`, `/min` | the reward function's score summed per response | the policy getting better; the reward's range | the training curve you watch first; max = min is a warning (section 3) |
# | `critic/rewards/*` | score after the KL in the reward (same as score without it) | `algorithm.use_kl_in_reward` | |
# | `critic/advantages/*` | advantages over valid tokens | GRPO normalises per group: mean near 0, max and min a few units | all 0 means nothing is learned |
# | `critic/returns/*` | GAE's targets for the critic (for GRPO: the advantages) | the reward and `algorithm.gamma`, `lam` | |
# | `critic/values/*` | the critic's predictions over valid tokens (critic runs only) | critic training | **book:** should approach the returns; here `critic/values/mean` follows the mean score and no more (below) |
# | `critic/vf_loss` | clipped value loss, times `critic.loss_agg_mode` | the critic learning | **book:** falls as the critic learns, then stays low. Not here in 12 steps: it stays at what predicting the mean score gives (below) |
# | `critic/vf_clipfrac` | fraction of tokens where the clipped value error was the larger (`critic.cliprange_value`) | big value updates | |
# | `critic/vpred_mean` | mean predicted value in the update | | |
# | `critic/vf_explained_var` | $1 - \mathrm{Var}(R - V) / (\mathrm{Var}(R) + 10^{-5})$: how much of the return the critic predicts | starts near or below 0, rises as the critic learns | **book:** should rise above 0 as the critic learns; negative for long means the critic is no help. Here it stays between -0.352 and 0.0302 (PPO run, 3 seeds) |
# | `critic/grad_norm`, `critic/lr` | as for the actor | | |
#
# The last lines of the printout check the critic rows on the PPO run. Its explained variance never gets clearly
# above 0 (-0.352 to 0.0302 over the 3 seeds), and its `critic/vf_loss` (0.0892 to 0.168) is about what a critic
# that predicts only the mean score p would get, 0.5 p (1 - p), here 0.0832 to 0.125: with one 0/1 score per
# response and 12 steps, the critic learns the average and not yet which response will be right. Its advantages
# are then close to the score minus a running mean, a baseline rather than a learned value. The rules of thumb in
# the table describe a critic that learns; this one has not yet.

# %%
show_ranges(ref, "critic/")
for seed, records in enumerate(reference["ppo, everything on"]):
    steps = training_steps(records)
    explained = [r["critic/vf_explained_var"] for r in steps]
    vf_loss = [r["critic/vf_loss"] for r in steps]
    half_variance = [0.5 * r["critic/score/mean"] * (1 - r["critic/score/mean"]) for r in steps]
    print(f"ppo seed {seed}: vf_explained_var {min(explained):.3g} to {max(explained):.3g}, "
          f"vf_loss {min(vf_loss):.3g} to {max(vf_loss):.3g}; a critic that predicts only the mean score p would "
          f"have vf_loss 0.5 p (1 - p) = {min(half_variance):.3g} to {max(half_variance):.3g}")

# %% [markdown]
# ### `response_length/`, `prompt_length/`, `response/`: lengths
#
# From the attention mask (`minirl/metrics.py::compute_data_metrics`, verl's `_compute_response_info`).
#
# | metric | what it is | what moves it | real runs |
# |---|---|---|---|
# | `response_length/mean`, `/max`, `/min` | response tokens, EOS included | the task; reasoning runs grow it on purpose (Chapter 8) | a sudden jump to the maximum is a broken run |
# | `response_length/clip_ratio` | fraction of responses that used the whole `data.max_response_length` | truncation; a policy that stopped ending its answers | **book:** near 0 on a well-sized budget (the healthy run: at most 0.0156 in any step of 3 seeds); a few percent in long reasoning runs (Chapter 8) |
# | `response_length_non_aborted/*` | the same over responses that are not empty | | |
# | `response/aborted_ratio` | fraction of empty responses (aborted by the engine) | partial rollouts of asynchronous engines | 0 with a synchronous rollout |
# | `prompt_length/mean`, `/max`, `/min`, `/clip_ratio` | prompt tokens; clip ratio = fraction at `data.max_prompt_length` | the data | `clip_ratio` should be 0: verl drops over-long prompts when `data.filter_overlong_prompts=True`, as its scripts set it (the default is False) |

# %%
show_ranges(ref, "response")
show_ranges({"grpo (healthy)": ref["grpo (healthy)"]}, "prompt_length/")

# %% [markdown]
# ### `timing_s/`, `timing_per_token_ms/`, `perf/`: where the time goes
#
# `minirl/metrics.py::compute_timing_metrics` and `compute_throughput_metrics`; verl:
# `verl/trainer/ppo/metric_utils.py::compute_timing_metrics` and `compute_throughout_metrics` (sic). Each
# `timing_s/<stage>` is the wall time of one stage of the table in section 1: `gen`, `reward`, `old_log_prob`,
# `ref`, `values`, `adv`, `update_critic`, `update_actor`, `update_weights` (copying the actor's weights into the
# engine), `step` (all of it), `testing` (validation), `save_checkpoint`. `timing_per_token_ms/<stage>` divides by
# the tokens that stage processed. `perf/total_num_tokens` counts prompt and response tokens of the batch,
# `perf/time_per_step` equals `timing_s/step`, and `perf/throughput` is tokens per second **per device**
# (tokens / (time x processes)). verl also logs memory (`perf/max_memory_allocated_gb`,
# `perf/max_memory_reserved_gb`, `perf/cpu_memory_used_gb`) and MFU (`perf/mfu/*`) on GPUs; minirl logs
# `minirl/peak_rss_gb` instead, the training process's peak resident memory (verl's `perf/cpu_memory_used_gb` is
# the whole machine's used memory).
#
# On a GPU run `timing_s/gen` is usually the largest share (verl's reason for vLLM and SGLang); on this CPU, in
# the PPO run below, the actor update is (at the last step 0.142 s against 0.0689 s for `gen`). A stage that grows
# step after step (for example `gen` while responses lengthen) is the thing to look at.

# %%
show_ranges({"ppo, everything on": ref["ppo, everything on"]}, "timing_s/")
show_ranges({"ppo, everything on": ref["ppo, everything on"]}, "perf/")

# %% [markdown]
# ### `training/`: step counters and the rollout-vs-trainer check
#
# | metric | what it is | real runs |
# |---|---|---|
# | `training/global_step`, `training/epoch` | the step counter (resumes from a checkpoint) and the pass over the data | |
# | `training/rollout_probs_diff_mean`, `_max`, `_std` | $\lvert p_{train} - p_{rollout} \rvert$ per valid token: the trainer's probability of each sampled token against the sampler's (`minirl/metrics.py::compute_debug_metrics`, verl `verl/utils/debug/metrics.py::calculate_debug_metrics`) | **verl** (FAQ): a mean **below 0.005 is normal, above 0.01** means the engine and the trainer disagree; between the two the FAQ says nothing. **book:** judge it against your own run's normal: one seed of section 3's stale-weights run peaks between the two lines |
# | `training/rollout_actor_probs_pearson_corr` | correlation of the two probabilities | near 1 |
# | `training/rollout_probs_diff_valid` | 1 when the batch had valid tokens to compare | |
#
# verl 0.9.1 logs these on every step by default: `actor_rollout_ref.rollout.calculate_log_probs` is `True` in
# `verl/trainer/config/rollout/rollout.yaml`, so the rollout returns its log-probs and `RayPPOTrainer.fit` calls
# `calculate_debug_metrics` after the old log-prob pass (`verl/trainer/ppo/ray_trainer.py`). minirl's engine is the
# actor itself (in float32), so the difference is rounding noise: about 3e-7 here (seed 0 below; over the healthy
# run's 3 seeds, section 3 prints 2.64e-07 to 3.04e-07).

# %%
show_ranges(ref, "training/")

# %% [markdown]
# ### `rollout_corr/`: off-policy diagnostics
#
# `minirl/rollout_correction.py` (verl: `verl/trainer/ppo/rollout_corr_helper.py::compute_offpolicy_metrics`,
# `compute_is_metrics`, `compute_rs_metrics`); [Chapter 9](09_rollout_corr.ipynb) teaches them.
#
# verl's page has a health check (its example `check_rollout_correction_health`) with five alert rules, quoted in the
# last column; a metric without a rule there has none.
#
# | metric | what it is | **verl** (`docs/algo/rollout_corr.md`) |
# |---|---|---|
# | `rollout_corr/kl`, `k3_kl` | KL from the sampler to the trainer, two estimators (`kl` can be negative, `k3_kl` cannot) | alert when `abs(rollout_corr/kl) > 0.1`; no rule for `k3_kl` |
# | `rollout_corr/training_ppl`, `rollout_ppl`, `ppl_ratio`, `*_log_ppl`, `log_ppl_diff*`, `log_ppl_abs_diff` | perplexity of the responses under each policy, and their differences | no rule; a `ppl_ratio` above 1 means the trainer is less confident than the sampler |
# | `rollout_corr/chi2_token`, `chi2_seq` | chi-squared divergence, per token and per sequence | alert when `chi2_token > 1.0` (a severe shift); no rule for `chi2_seq` |
# | `rollout_corr/rollout_is_mean`, `_std`, `_min`, `_max`, `_eff_sample_size`, `_ratio_fraction_high`/`_low`, `rollout_is_seq_*` | the importance weights, with `algorithm.rollout_correction.rollout_is` set | alert when `rollout_is_mean` leaves `[0.5, 2.0]`, when `rollout_is_std > 1.0`, when `rollout_is_eff_sample_size < 0.3` |
# | `rollout_corr/rollout_rs_masked_fraction`, `rollout_rs_seq_masked_fraction`, and per option `rollout_rs_*_masked_fraction`, `rollout_rs_*_seq_masked_fraction` | share of tokens and of sequences rejected, with `rollout_rs` set | no rule |
#
# The off-policy rows (`kl`, `k3_kl`, the perplexities, `chi2_*`) are not opt-in: verl 0.9.1 logs them on every
# step by default. `ppo_trainer.yaml` always includes `algorithm.rollout_correction` (defaults `rollout_is: null`,
# `rollout_rs: null`, `bypass_mode: false`: decoupled mode), the rollout returns its log-probs by default, and
# `RayPPOTrainer.fit` then calls `compute_rollout_correction_and_add_to_batch`
# (`verl/trainer/ppo/rollout_corr_helper.py`) on every step. Only the `rollout_is_*` and `rollout_rs_*` rows need
# their keys. minirl does the same: its healthy run logs `rollout_corr/kl` (section 3). The printout is the PPO
# run's, with `rollout_is=token`: the engine is the trainer, so every weight is 1 and the KL is rounding noise.

# %%
show_ranges({"ppo, everything on": ref["ppo, everything on"]}, "rollout_corr/")

# %% [markdown]
# ### `val-core/`, `val-aux/`: validation
#
# `minirl/metrics.py::process_validation_metrics` (verl: `verl/trainer/ppo/metric_utils.py::process_validation_metrics`).
# Every `trainer.test_freq` steps the trainer answers the test set with `rollout.val_kwargs` (greedy by default)
# and logs `val-core/<data_source>/<variable>/<statistic>` for the headline and `val-aux/...` for the rest.
# `<variable>` is `acc` or `reward` (and any extra key the reward function returns), `<statistic>` is `mean@N`
# (mean over N answers per question), and with N > 1 also `std@N`, `best@k/mean`, `best@k/std`, `worst@k/mean`,
# `worst@k/std` (bootstrapped over k of the N answers) and `maj@k/mean`, `maj@k/std` (majority vote, when the
# reward returns a prediction). The core metric is the largest-N `mean` of `acc` (else of `reward`), plus its
# `best@N` and `maj@N`. The `val-core/.../mean@1` curve is the one to report.

# %%
show_ranges(ref, "val-")

# %% [markdown]
# ### `minirl/`: minirl's own metrics
#
# verl does not log these; they answer questions its metrics leave open.
#
# | metric | what it is | what moves it |
# |---|---|---|
# | `minirl/acc/mean` | the reward function's `acc` on the training batch (a float reward counts as its own `acc`) | learning; compare with `critic/score/mean` when the score has shaping |
# | `minirl/<key>/mean` | any other key a dict-returning reward function returns (Lab B) | |
# | `minirl/response_length/correct_mean`, `wrong_mean` | mean length of right and wrong responses | which answers grow (Chapter 8) |
# | `minirl/zero_spread_group_frac` | fraction of prompt groups whose responses all scored the same: their GRPO advantages are 0 | too easy or too hard prompts; a reward that cannot tell responses apart; low entropy |
# | `minirl/logp_adv_cov` | the batch covariance of the sampled tokens' log-probability and their advantage (`minirl/metrics.py::logp_advantage_covariance`) | positive: the update sharpens the policy, so `actor/entropy` falls next (Chapter 11's entropy mechanism) |
# | `minirl/num_gen_batches`, `minirl/num_dropped_groups` | DAPO's dynamic sampling: generation rounds for one batch, groups dropped (Chapter 5) | `algorithm.filter_groups.enable` |

# %%
show_ranges(ref, "minirl/")

# %% [markdown]
# ## 3. A gallery of broken runs
#
# Now we break the healthy run, one cause at a time. Each case below is a real 12-step run from the same warm
# start, with a few overrides on top of the healthy run's (`minirl/book/broken_runs.py::CASES`), trained with the
# same 3 seeds (0, 1, 2) as the healthy run. Exercise C.1's hidden runs are the same cases, as long, with another
# seed (3). Each plot draws the mean over the 3 seeds as a line and their min-max as a band; the printout under it
# gives each statistic's range over the 3 seeds. The numbers are this run's, on the machine the first output names.
# To draw the checklist's panels for your own runs: `python -m minirl plot RUN_DIR --view debug` (section 5).
# These are the failures people keep asking about in verl's and TRL's issue trackers: "the loss is 0", "the
# reward stays at 0", "grad_norm keeps rising", "the model never stops". Each plot puts the broken run next to
# the healthy one on the metrics that give it away.

# %%
for name, case in broken_runs.CASES.items():
    overrides = " ".join(case.overrides).replace(f"{broken_runs.REWARD_FILE.parents[2]}/", "")
    print(f"{name:20s} {overrides or '(defaults)'}\n{'':20s} {case.cause}")
cases = {name: list(case.overrides) for name, case in broken_runs.CASES.items() if name != "healthy"}
grid = run_grid(RUNS / "gallery", cases, *broken_runs.BASE, *COMMON)  # {case: [records of each seed]}
grid["healthy"] = reference["grpo (healthy)"]  # the reference run of section 1: the same overrides and seeds


def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):  # a step or a count
        return str(value)
    text = f"{value:.3g}"
    return f"{text}.0" if text.lstrip("-").isdigit() else text  # 1.0, not 1: the prose quotes decimals


def span(values: list[float]) -> str:
    """The range of `values` over seeds ("0.1 to 0.3"), or the one value when they agree or there is one seed."""
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low} to {high}"


def print_table(title: str, columns: dict, names: list[str]):
    """One row per (case, seed): each column is a function of the run's training steps."""
    print(title)
    print(f"  {'case':19s}{'seed':>4s}" + "".join(f"{column:>14s}" for column in columns))
    for name in names:
        for seed, records in enumerate(grid[name]):
            steps = training_steps(records)
            row = "".join(f"{fmt(column(steps)):>14s}" for column in columns.values())
            print(f"  {name:19s}{seed:>4d}{row}")


def values(steps: list[dict], key: str) -> list[float]:
    return [r[key] for r in steps if key in r]


def first_step_above(steps: list[dict], key: str, line: float):
    return next((r["step"] for r in steps if r.get(key, 0) > line), None)


def signature(name: str, panels: list[tuple[str, str]]):
    """Plot case `name` against its reference run on a few metrics (over training steps): the mean over the seeds
    as a line, the min-max over the seeds as a band; then print the traces."""
    reference_name = broken_runs.CASES[name].reference
    print(f"{name} ({broken_runs.CASES[name].cause}) against {reference_name}:")
    plot_comparison({reference_name: grid[reference_name], name: grid[name]},
                    [(key, title, "step") for key, title in panels])
    print_traces([reference_name, name], [key for key, _ in panels])


def print_traces(names: list[str], keys: list[str]):
    """Print `key` over each run in `names`: validation at each test step, else the first, min, median, max and
    last value over the training steps; each as its range over the seeds."""
    for key in keys:
        for name in names:
            runs = grid[name]
            per_seed = []
            for records in runs:
                if key.startswith("val-"):
                    per_seed.append({f"step {r['step']}": r[key] for r in records if key in r})
                    continue
                trace = values(training_steps(records), key)
                per_seed.append({"first": trace[0], "min": min(trace), "median": statistics.median(trace),
                                 "max": max(trace), "last": trace[-1]} if trace else {})
            if not per_seed[0]:
                print(f"  {name:18s} {key}: not logged")
                continue
            over = f" (over {len(runs)} seeds)" if len(runs) > 1 else ""
            print(f"  {name:18s} {key}{over}: "
                  + ", ".join(f"{stat} {span([stats[stat] for stats in per_seed])}" for stat in per_seed[0]))


# %% [markdown]
# ### The signatures, seed by seed
#
# First the numbers that name each cause, one row per seed (the prose below quotes them). A signature is robust
# when the three seeds of a case agree and no healthy seed comes near; it varies when the seeds of one case
# disagree. The first two tables hold the robust ones:
#
# - `actor/ppo_kl` at step 1: 1.14 to 1.86 with lr 1e-2; at most 0.000267 in the healthy run; 0.0089 to 0.0145
#   for the KL blow-up.
# - `critic/score/max`: 0.0 on every step of every seed with the reward that is always 0; 0.0 from step 3 on with
#   lr 1e-2, after 1.0 at the start; 1.0 everywhere else.
# - The share of groups with one score (`minirl/zero_spread_group_frac`, median over the steps): 1.0 for both
#   rewards that cannot tell responses apart and for lr 1e-2; 0.125 in every healthy seed.
# - `training/rollout_probs_diff_mean`: at most 4.49e-07 in every run but one; with stale weights 0.00866 to
#   0.0152, above 0.005 from step 5 or 6.
# - Also robust: the truncated run's median clip ratio (0.934 to 0.98); the no-clip run's largest
#   `actor/pg_clipfrac` (at most 0.00212, where the clipped 4-epoch run reaches 0.0184 to 0.0225); the KL
#   blow-up's `actor/kl_loss` (past 0.1 at step 4 or 5, peaks 0.289 to 0.649).
#
# The third table holds what varies from seed to seed, so the prose quotes it as a range or not at all: the
# entropy and the final clip ratio of lr 1e-2, the largest `actor/grad_norm` of the no-clip run (0.491 to 3.3), the
# final training score of most cases.

# %%
UPDATE = {"ppo_kl 1st": lambda st: values(st, "actor/ppo_kl")[0],
          "ppo_kl med": lambda st: statistics.median(values(st, "actor/ppo_kl")),
          "clipfrac max": lambda st: max(values(st, "actor/pg_clipfrac")),
          "kl_loss max": lambda st: max(values(st, "actor/kl_loss")),
          "kl>0.1 at": lambda st: first_step_above(st, "actor/kl_loss", 0.1)}
DATA = {"score/max": lambda st: max(values(st, "critic/score/max")),
        "from step 3": lambda st: max(values(st, "critic/score/max")[2:], default=None),
        "1-score med": lambda st: statistics.median(values(st, "minirl/zero_spread_group_frac")),
        "clip_r med": lambda st: statistics.median(values(st, "response_length/clip_ratio")),
        "pdiff max": lambda st: max(values(st, "training/rollout_probs_diff_mean")),
        "pdiff>.005 at": lambda st: first_step_above(st, "training/rollout_probs_diff_mean", 0.005)}
VARIES = {"entropy 1st": lambda st: values(st, "actor/entropy")[0],
          "entropy min": lambda st: min(values(st, "actor/entropy")),
          "entropy max": lambda st: max(values(st, "actor/entropy")),
          "entropy last": lambda st: values(st, "actor/entropy")[-1],
          "clip_r last": lambda st: values(st, "response_length/clip_ratio")[-1],
          "gnorm max": lambda st: max(values(st, "actor/grad_norm")),
          "gnorm=0 steps": lambda st: sum(v == 0 for v in values(st, "actor/grad_norm")),
          "score last": lambda st: values(st, "critic/score/mean")[-1]}
print_table("The update: actor/ppo_kl at step 1 and its median over the steps, the largest actor/pg_clipfrac and "
            "actor/kl_loss,\nthe first step with actor/kl_loss above 0.1 (- if none)", UPDATE, list(broken_runs.CASES))
print_table("\nThe data: the largest critic/score/max, over all steps and from step 3 on; the median share of groups "
            "with one score\n(minirl/zero_spread_group_frac) and of truncated responses (response_length/clip_ratio); "
            "the largest\ntraining/rollout_probs_diff_mean and the first step above 0.005", DATA,
            list(broken_runs.CASES))
print_table("\nWhat varies from seed to seed: actor/entropy (first, min, max, last), the last clip ratio, the largest "
            "actor/grad_norm\nand the number of steps where it is exactly 0, the last critic/score/mean", VARIES,
            list(broken_runs.CASES))

# %% [markdown]
# ### Learning rate too high (`actor.optim.lr=1e-2`)
#
# **Signature** (the same in all 3 seeds): on the first step `actor/ppo_kl` is 1.14 to 1.86, where the healthy
# run's largest over all its steps is 0.000452 to 0.00318, and `actor/pg_clipfrac` is 0.0818 to 0.169. From step 3
# on, `critic/score/max` is 0.0 in every seed: no response is right, every group has one score
# (`minirl/zero_spread_group_frac` median 1.0), every advantage is 0, and `actor/grad_norm` is exactly 0 on 10 or
# 11 of the 12 steps. **What varies** (do not diagnose from it): `actor/entropy` first jumps up in every seed (its
# peaks: 0.24 to 0.458, the healthy run's 0.11 to 0.121), then goes where the seed takes it: it ends at 0.241, 0.423
# and 0.0999, and one seed touches 0.0278 on the way. The responses run to the length limit in two seeds
# (`response_length/clip_ratio` 1.0 and 0.977 at the last step) and not in the third (0.0781). The run does not
# crash, and its later steps look like a reward that is always 0: only the first steps tell the two apart.
# **Fix:** verl's default actor learning rate is 1e-6 for billion-parameter models; scale it down, or add
# warm-up (`actor.optim.lr_warmup_steps`).

# %% tags=["central-figure"]
signature("lr_too_high", [("critic/score/mean", "score"), ("actor/ppo_kl", "actor/ppo_kl"),
                          ("actor/entropy", "actor/entropy"),
                          ("minirl/zero_spread_group_frac", "groups with one score")])
print_traces(["lr_too_high"], ["actor/pg_clipfrac", "actor/grad_norm", "response_length/clip_ratio"])

# %% [markdown]
# **Why does the run keep changing after `actor/grad_norm` is 0?** For two reasons. The metrics are measured on new
# samples every step, so even a policy that stands still shows some spread: the reward-always-0 run below never
# gets a gradient, and its entropy still ranges over 0.102 to 0.128. And the weights do move. AdamW keeps a running
# mean of past gradients (beta1 0.9) and of their squares (beta2 0.999); with a zero gradient its step is lr times
# the decaying mean over the square root of the slowly decaying squares, about 10% smaller at each optimizer step
# and never 0. The toy below runs AdamW with the actor's settings on a small weight vector: one optimizer step
# after the gradient stops, the weights still move by 84% of lr, ten training steps later by 11%, and in all by
# 6.8 more full steps of lr. At lr 1e-2 that is a large move with `grad_norm` at 0, and the run shows it (the last lines of the
# printout): `actor/grad_norm` is 0 from step 2 or 3 on, yet over those steps each seed's entropy leaves the band of
# a policy that stands still (0.103 to 0.313, 0.256 to 0.458, 0.0278 to 0.109), and in seed 0 the share of
# responses that run to the length limit climbs from 0.0547 to 1.0 without a single gradient.

# %%
# AdamW as the actor uses it (minirl/optim.py::build_optimizer: lr 1e-2 here, betas 0.9/0.999, weight decay 0.01)
# on a toy weight vector: two training steps of two mini-batches with a gradient, then gradients of exactly 0
weights = torch.nn.Parameter(torch.zeros(3))
optimizer = torch.optim.AdamW([weights], lr=1e-2, betas=(0.9, 0.999), weight_decay=0.01)
moved = 0.0
for update in range(1, 25):
    weights.grad = torch.tensor([1.0, -0.5, 2.0]) if update <= 4 else torch.zeros(3)
    before = weights.detach().clone()
    optimizer.step()
    step_size = (weights.detach() - before).abs().max().item()
    moved += step_size if update > 4 else 0.0
    if update in (4, 5, 6, 8, 12, 16, 20, 24):
        print(f"optimizer step {update:2d} (training step {(update + 1) // 2:2d}), gradient "
              f"{'on  ' if update <= 4 else 'zero'}: the largest weight moved by {step_size:.2g} "
              f"({step_size / 1e-2:.0%} of lr)")
print(f"moved in total after the gradient stopped: {moved:.2g}, {moved / 1e-2:.1f} full steps of lr")
for seed, records in enumerate(grid["lr_too_high"]):  # the run itself: what moved while grad_norm was 0
    steps = training_steps(records)
    still = next((i for i in range(len(steps)) if not any(values(steps[i:], "actor/grad_norm"))), None)
    if still is None:
        print(f"lr_too_high seed {seed}: actor/grad_norm is not 0 at the end")
        continue
    print(f"lr_too_high seed {seed}: actor/grad_norm 0 from step {steps[still]['step']} on; over those steps "
          f"actor/entropy {span(values(steps[still:], 'actor/entropy'))}, response_length/clip_ratio "
          f"{span(values(steps[still:], 'response_length/clip_ratio'))}")

# %% [markdown]
# ### No clipping (`ppo_epochs=4` with the clip switched off)
#
# The clip only acts when a batch is reused: on the first mini-batch of fresh data the ratio is 1. So this case
# reuses each batch for 4 epochs (`actor.ppo_epochs=4`) and is read against a healthy run that does the same with
# the clip on. **Signature:** `actor/pg_clipfrac` stays at 0 (median 0.0 in every seed, largest 0.0 to 0.00212)
# where the clipped run's median is 0.0117 to 0.0139, a percent or so. `actor/ppo_kl` is larger, but the ranges
# overlap: medians 0.00389 to 0.00646 against 0.00263 to 0.00486, peaks 0.00821 to 0.0332 against 0.0056 to
# 0.0158. The policy drifts further from the reference: `actor/kl_loss` peaks at 0.0855 to 0.187 (past 0.1 at step
# 7 or 8 in two seeds) against 0.0551 to 0.099 (section 3's first table). Validation accuracy at step 12 is 0.42 in
# every seed against 0.48 to 0.57 with the clip: lower in every seed, on 100 questions and 12 steps. Read this case
# in the clip metrics first. [Chapter 1](01_ppo.ipynb) measures the clip's effect over 3 seeds, with a more
# aggressive update. **Fix:** keep `actor.clip_ratio` at 0.2 (or DAPO's 0.2/0.28).

# %%
signature("no_clip", [("actor/pg_clipfrac", "actor/pg_clipfrac"), ("actor/ppo_kl", "actor/ppo_kl"),
                      (VAL, "validation accuracy"), ("actor/entropy", "actor/entropy")])

# %% [markdown]
# ### Entropy collapse (4 epochs at 3x the learning rate)
#
# Too much optimisation per batch sharpens the policy on what it already samples. **Signature:** `actor/entropy`
# falls further than the healthy run's: lowest 0.046 to 0.0711 against 0.0957 to 0.0998. More groups give one
# score to every sample (their advantages are 0): `minirl/zero_spread_group_frac` has a median of 0.344 to 0.406
# and ends at 0.562 to 0.75, against the healthy run's 0.125 and 0.125 to 0.188. Validation accuracy falls from
# 0.47 to 0.28 to 0.41 at step 12, where the healthy run's is 0.47 to 0.52. The training score does not show it:
# its last value spreads from 0.102 to 0.539 over the seeds. On the tiny task the warm start's entropy is already
# low, so the collapse is a matter of degree, not a fall to 0, and the entropy alone does not single out the higher
# learning rate: the same 4 epochs at the default rate (`healthy_4_epochs`) go about as low, 0.0643 to 0.0746.
# Like the KL blow-up below, this run moves far from the reference (`actor/kl_loss` past 0.1 at step 4 to 6) and
# clips a few percent of its tokens (largest `actor/pg_clipfrac` 0.0313 to 0.0374): both are updates that are too
# big, and their metrics look alike. In long real runs the entropy curve keeps going down. **Fix:** fewer epochs or
# a smaller learning rate; DAPO's clip-higher (`actor.clip_ratio_high=0.28`, [Chapter 5](05_dapo.ipynb)); an
# entropy bonus (`actor.entropy_coeff`) is the blunt tool.

# %%
signature("entropy_collapse", [("actor/entropy", "actor/entropy"),
                               ("minirl/zero_spread_group_frac", "groups with one score"),
                               ("critic/score/mean", "score"), (VAL, "validation accuracy")])
print_traces(["healthy_4_epochs"], ["actor/entropy"])

# %% [markdown]
# ### All-equal rewards: "the loss is 0" (a format-only reward)
#
# The reward function pays 1 for any response with a `#### ` answer (`minirl/book/broken_rewards.py::format_only_score`),
# and the warm start almost always writes one. **Signature:** `critic/score/mean` is 1.0 from the first step, max
# equals min, nearly every group has one score (`minirl/zero_spread_group_frac` median 1.0; it dips to 0.938 on a
# step where one response lacked `#### `, and only that group had something to learn), so nearly every GRPO
# advantage is 0 and `actor/pg_loss`, `actor/pg_clipfrac` and `actor/grad_norm` are exactly 0: `actor/grad_norm` on
# 10, 12 and 11 of the 12 steps in seeds 0, 1 and 2. The policy hardly moves (`actor/kl_loss` at most 0.00476).
# Yet `actor/entropy` is not constant: it ranges over 0.102 to 0.128 across steps and seeds, because each step
# measures it on new samples. That spread is sampling, not learning; keep it in mind when reading entropy curves.
# Validation uses the same reward, so it says 1.0 too, in every seed. **Fix:** a reward must tell responses apart:
# score the answer, not only the format. DAPO's dynamic sampling (`algorithm.filter_groups.enable=true`) drops such
# groups, but it cannot fix a reward that never varies.

# %%
signature("all_equal_rewards", [("critic/score/mean", "score"), ("actor/grad_norm", "actor/grad_norm"),
                                ("actor/pg_loss", "actor/pg_loss"),
                                ("minirl/zero_spread_group_frac", "groups with one score")])
print_traces(["all_equal_rewards"], ["actor/pg_clipfrac", "actor/entropy", VAL])

# %% [markdown]
# ### Truncated responses (`data.max_response_length=15`)
#
# The healthy run's responses are about 16 tokens long and reach 17 (section 2). With a budget of 15 most
# responses are cut before their EOS, and a cut answer `12+7=1` scores 0. **Signature:**
# `response_length/clip_ratio` between 0.75 and 1.0 on every step of every seed (0.875 to 1.0 at the first step,
# medians 0.934 to 0.98), `response_length/max` equal to the budget, and a score below the healthy run's: median
# over the steps 0.145 to 0.172 against 0.297 to 0.32, last step 0.148 to 0.227 against 0.266 to 0.398. More
# groups have one score, too (median share 0.531 to 0.562, against 0.125): a cut response scores 0 whatever it was
# going to say. **Fix:** a budget above the answers you expect; in long reasoning runs, DAPO's overlong shaping
# (`reward.reward_kwargs.overlong_buffer_cfg.*`).

# %%
signature("truncated", [("response_length/clip_ratio", "response_length/clip_ratio"),
                        ("response_length/max", "response_length/max"), ("critic/score/mean", "score")])

# %% [markdown]
# ### A KL blow-up (`kl_loss_coef=0.001` with lr 1e-3)
#
# This case trains on the KL loss at verl's default coefficient (`actor.kl_loss_coef=0.001`, where the other runs
# only measure it) with ten times the learning rate: the policy moves faster than the coefficient can hold it.
# **Signature:** `actor/kl_loss` climbs from 0.0129 to 0.042 at the first step past 0.1 at step 4 or 5 and peaks
# at 0.289 to 0.649 in 12 steps, where the healthy run's peaks at 0.0156 to 0.0294; validation accuracy falls from
# 0.47 to 0.21 to 0.27 at step 12, where the healthy run's is 0.47 to 0.52. A KL past 0.1 is not this case alone:
# the no-clip run's also passes it in two seeds. What tells them apart is the clip: this run clips tokens
# (`actor/pg_clipfrac` peaks at 0.0139 to 0.0179), the no-clip run almost none (at most 0.00212). `actor/grad_norm`
# runs higher than the healthy run's (peaks 0.564 to 0.686 against 0.292 to 0.417), but the no-clip run's peaks
# (0.491 to 3.3) show that a large gradient norm has more than one cause. **Fix:** the learning rate first; a larger
# `kl_loss_coef` pulls harder toward the reference but does not make a step that is too big smaller.

# %%
signature("kl_blowup", [("actor/kl_loss", "actor/kl_loss"), ("actor/pg_clipfrac", "actor/pg_clipfrac"),
                        ("actor/grad_norm", "actor/grad_norm"), (VAL, "validation accuracy")])
print_traces(["no_clip"], ["actor/kl_loss", "actor/pg_clipfrac"])

# %% [markdown]
# ### Rollout/training mismatch (`rollout.weight_sync_interval=16`)
#
# The rollout engine samples with weights up to 15 updates old, as an asynchronous trainer might
# ([Chapter 9](09_rollout_corr.ipynb)). **Signature:** `training/rollout_probs_diff_mean` rises from rounding noise
# (2.81e-07 to 2.89e-07 at step 1) above 0.005 at step 5 or 6 and peaks at 0.00866 to 0.0152. verl's FAQ draws two
# lines: below 0.005 is normal, above 0.01 is a problem. Two seeds pass 0.01; the third peaks at 0.00866, between
# the lines, where the FAQ says nothing. Against this task's normal (the healthy run's 2.64e-07 to 3.04e-07) all
# three are far out: read the metric against your own run's normal, and take 0.005, not 0.01, as the line.
# `rollout_corr/kl` rises with it (peaks 0.0138 to 0.0278), below the 0.1 of verl's alert rule. `actor/grad_norm`
# does not climb: its peaks, 0.274 to 0.335, lie inside the healthy run's 0.292 to 0.417. The FAQ's symptom (a
# grad_norm that keeps rising) is not how this mismatch shows, and a climbing grad_norm alone does not mean a
# mismatch. The training score and validation accuracy stay within the healthy run's noise in 12 steps (validation
# at step 12: 0.37 to 0.51 against 0.47 to 0.52). Nothing but this metric looks wrong, which is why it is worth
# logging; verl 0.9.1 logs it by default (section 2). **Fix:** sync the weights; if the gap is inherent (bfloat16
# engines, asynchronous training), correct for it (`algorithm.rollout_correction.*`, Chapter 9).

# %%
signature("rollout_mismatch", [("training/rollout_probs_diff_mean", "training/rollout_probs_diff_mean"),
                               ("rollout_corr/kl", "rollout_corr/kl"), ("actor/grad_norm", "actor/grad_norm"),
                               ("critic/score/mean", "score")])
print_traces(["healthy", "rollout_mismatch"], [VAL])

# %% [markdown]
# ### A reward that is always 0 (exact match on a task that shows its working)
#
# `minirl/book/broken_rewards.py::exact_match_score` compares the whole response with the ground truth, but the
# responses are `12+7=19 #### 19` and the ground truth is `19`. **Signature:** `critic/score/max` is 0.0 on every
# step of every seed, from the first one; `actor/grad_norm` is exactly 0 on all 12 steps; validation says 0.0. A
# learning rate that is too high also ends at 0, but only after a first step with a score (`critic/score/max` 1.0
# at the start, 0.0 from step 3). **Fix:** print a few responses next to their ground truth and their score before
# training (Lab B); test the reward on the warm start's own answers.

# %%
signature("reward_always_zero", [("critic/score/max", "critic/score/max"), ("actor/grad_norm", "actor/grad_norm"),
                                 (VAL, "validation accuracy")])

# %% [markdown]
# ## 4. The `pad_token_id == eos_token_id` masking bug
#
# Many chat tokenizers have no pad token, and the usual fix is `tokenizer.pad_token = tokenizer.eos_token`. Then a
# mask written as `labels[input_ids == pad_token_id] = -100` (or `attention_mask = input_ids != pad_token_id`)
# removes the padding **and the one real EOS token** of each demonstration: the model is never trained to stop.
# verl's masks look for the first EOS instead (`verl/utils/torch_functional.py::get_response_mask`, minirl
# `minirl/core.py::get_response_mask`), so verl itself is safe; the bug comes in with your own SFT data code. It is
# a data bug, not a config key, so we reproduce it in this process only: for one SFT build we replace
# `sft.tokenize_demonstrations` by a copy that pads with EOS and masks the padding that way
# (`minirl/book/broken_runs.py::pad_is_eos_loss_mask`; the tiny tokenizer itself has a separate pad token). The
# trainer has no switch for it.
#
# First the mask itself, on two demonstrations:

# %%
tokenizer = models.load_tokenizer(sft.default_warm_start())
demos = [{"prompt": [{"role": "user", "content": "12+7="}], "response": "12+7=19 #### 19"},
         {"prompt": [{"role": "user", "content": "3+4="}], "response": "3+4=7 #### 7"}]
right = sft.tokenize_demonstrations(tokenizer, demos, 48)
buggy = broken_runs.pad_is_eos_loss_mask(sft.tokenize_demonstrations)(tokenizer, demos, 48)
for row in range(2):
    targets = right["input_ids"][row, 1:]
    eos_position = int((targets == tokenizer.eos_token_id).nonzero()[0])
    print(f"demo {row}: tokens trained, right mask {int(right['loss_mask'][row].sum())}, with the bug "
          f"{int(buggy['loss_mask'][row].sum())}; the EOS target is trained: right "
          f"{bool(right['loss_mask'][row, eos_position])}, with the bug {bool(buggy['loss_mask'][row, eos_position])}")

# %% [markdown]
# One token per demonstration. Now an SFT warm start built with the bug (the book's recipe, with 300 steps instead of
# its 1000 to save time, 30 in fast mode), its greedy answers to three test questions next to the book's warm
# start's, and the same GRPO run from it:

# %%
PAD_SFT = sft.SFTConfig(steps=30 if fast_mode() else 300)  # the book's recipe, fewer steps (it has 1000)
pad_dir = RUNS / "pad_is_eos_warm_start"
for directory in (pad_dir, RUNS / "pad_is_eos"):  # a fresh build and run each time
    shutil.rmtree(directory, ignore_errors=True)
with mock.patch.object(sft, "tokenize_demonstrations", broken_runs.pad_is_eos_loss_mask(sft.tokenize_demonstrations)):
    pad_info = sft.build_warm_start(pad_dir, PAD_SFT, show_progress=False)
print({key: pad_info[key] for key in ("greedy_acc", "sampled_acc", "final_loss", "seconds")})
DATA_CONFIG = load_config([]).data  # the runs' budgets: max_prompt_length, max_response_length


def greedy_answers(model_dir, rows: list[dict]) -> list[str]:
    """Greedy responses of a model directory, decoded with their special tokens (the EOS shows as </s>)."""
    tokenizer, model = models.load_tokenizer(model_dir), models.load_policy(model_dir)
    prompts = encode_prompts(tokenizer, [row["prompt"] for row in rows], DATA_CONFIG.max_prompt_length)
    out = generate_sequences(model, prompts["input_ids"], prompts["attention_mask"], tokenizer.eos_token_id,
                             tokenizer.pad_token_id, DATA_CONFIG.max_response_length, do_sample=False)
    return [tokenizer.decode(tokens[mask.bool()]) for tokens, mask in zip(out["responses"], out["response_mask"])]


test_rows = read_parquet(pad_dir / "data" / "test.parquet").to_list()[:3]
for row, right_answer, bug_answer in zip(test_rows, greedy_answers(sft.default_warm_start(), test_rows),
                                         greedy_answers(pad_dir, test_rows)):
    print(f"{row['prompt'][-1]['content']:9s} the book's warm start: {right_answer!r:24s} with the bug: {bug_answer!r}")
train([*sft.train_overrides(pad_dir, PAD_SFT), *broken_runs.BASE, *COMMON, "data.seed=0",
       f"trainer.default_local_dir={RUNS / 'pad_is_eos'}", "trainer.resume_mode=disable", "trainer.logger=[]"],
      show_progress=False)
grid["pad_is_eos"] = [load_metrics(RUNS / "pad_is_eos")]
print("pad_is_eos (an SFT mask that drops the EOS token) against healthy:")
plot_comparison({"healthy": grid["healthy"], "pad_is_eos": grid["pad_is_eos"]},
                [("response_length/clip_ratio", "response_length/clip_ratio", "step"),
                 ("response_length/mean", "response length (tokens)", "step"), ("critic/score/mean", "score", "step")])
print_traces(["healthy", "pad_is_eos"], ["response_length/clip_ratio", "response_length/mean", "response_length/max",
                                         "critic/score/mean", VAL])

# %% [markdown]
# **Signature** (one run, seed 0: this case is not in the seed grid): the answers never end (no `</s>`), so
# `response_length/clip_ratio` is 0.992 to 1.0 from the first step although the budget is the healthy run's, and
# `response_length/mean` sits at the maximum (20.0). With more digits after the answer, the strict rule reads a
# longer number: the warm start scores 0.0 (greedy and sampled), the training score is 0.0 on every step and
# validation 0.0 at every test. (The shorter SFT also makes its sums rougher, as the answers above show; the
# missing EOS is what the length metrics show.) It is told apart from a too small budget by the budget itself: the
# healthy model's responses are 16.1 to 16.6 tokens long at the last step, and its clip ratio is at most 0.0156 in
# any step of any seed. **Fix:** build masks from the EOS position (or give the tokenizer a real pad token), and
# check a few SFT labels by hand before training.

# %% [markdown]
# ## 5. A checklist: symptom, first metric, likely causes
#
# | symptom | look first at | likely causes (section) |
# |---|---|---|
# | loss and `grad_norm` exactly 0 | `minirl/zero_spread_group_frac`, `critic/score/max` - `min`, then the first steps | all-equal rewards; a reward always 0; a model broken by a too high learning rate (its first steps had a score) |
# | score 0 from the start | a few responses next to their ground truth | a reward that cannot match (format, types, data_source) |
# | score falls to 0 after a few steps | the first step's `actor/ppo_kl` (near 1 instead of about 1e-3) and `actor/pg_clipfrac` | learning rate too high |
# | responses at the maximum length | `response_length/clip_ratio` at step 1, the budget, a few responses | truncation; pad == eos in the SFT data; a broken policy |
# | `actor/entropy` falling, validation falling | `zero_spread_group_frac`, `pg_clipfrac`, `kl_loss` | entropy collapse (too much optimisation per batch) |
# | `actor/kl_loss` climbing fast | `actor/pg_clipfrac`: tokens clipped, or almost none? | KL blow-up (the learning rate); no clipping, if almost nothing is clipped |
# | `actor/grad_norm` keeps rising | `training/rollout_probs_diff_mean` against the run's normal: above 0.005? | a rollout/training mismatch (verl's FAQ); if the diff is at its normal, not that: a rising grad_norm is also healthy here |
# | validation lags, nothing else looks wrong | `training/rollout_probs_diff_mean`, `rollout_corr/kl` | rollout/training mismatch |
# | `pg_clipfrac` 0 while `ppo_kl` is large | `actor.clip_ratio*`, `ppo_epochs` | no clipping |
#
# The checklist as one figure: `python -m minirl plot RUN_DIR [RUN_DIR ...] --view debug` draws its eight metrics
# for any runs (`minirl/plot.py::DEBUG_KEYS`: `actor/ppo_kl`, `actor/pg_clipfrac`, `actor/entropy`,
# `actor/grad_norm`, the share of one-score groups, `critic/score/max`, `response_length/clip_ratio`, and
# `training/rollout_probs_diff_mean` where the run logs it) and saves `debug.png` in the first run's directory.
# Below, seed 0 of the healthy run and of three broken ones. The first step of `actor/ppo_kl` with lr 1e-2 is so
# large that it flattens the other lines: read that panel's first point.

# %%
debug_view = {"healthy": RUNS / "reference" / "grpo (healthy)" / "seed0",
              **{name: RUNS / "gallery" / name / "seed0" for name in ("lr_too_high", "truncated", "rollout_mismatch")}}
_ = plot_runs(debug_view, view="debug")  # python -m minirl plot RUN_DIR [RUN_DIR ...] --view debug

# %% [markdown]
# ## 6. Where verl's pages are out of date (checked against verl 0.9.1's code)
#
# - The Ascend metric list (`parameter_and_metrics.md`) says `actor/entropy` is logged only with
#   `calculate_entropy=True` or `entropy_coeff != 0`. In 0.9.1 the legacy trainer logs it on every step, from the
#   old log-prob pass (`verl/trainer/ppo/ray_trainer.py::RayPPOTrainer.fit`); minirl does the same.
# - The same page calls `actor/grad_norm` the norm **after** clipping. verl's engines log what
#   `clip_grad_norm_` returns, which is the total norm before clipping (the clipped norm would never exceed 1.0).
# - The same page writes `critic/vf_explained_var` as $1 - \mathrm{Var}(R - V)/\mathrm{Var}(R)$; the code adds
#   $10^{-5}$ to the denominator.
# - The FAQ tells you to set `actor_rollout_ref.rollout.calculate_log_probs=True` to get
#   `training/rollout_probs_diff_*`. In 0.9.1 that is the default (`verl/trainer/config/rollout/rollout.yaml`), so
#   the check is logged on every step. And since `ppo_trainer.yaml` always includes `algorithm.rollout_correction`
#   (decoupled mode by default), so are the `rollout_corr/` off-policy metrics (`kl`, `k3_kl`, the perplexities,
#   `chi2_*`); only the importance weights and the rejection need their keys. minirl logs both on every step too
#   (`minirl/README.md`).
# - `perf/mfu/*` and the memory metrics are GPU metrics; minirl does not log them.
#
# ## 7. verl <-> minirl
#
# | verl 0.9.1 | minirl |
# |---|---|
# | `verl/trainer/ppo/metric_utils.py::compute_data_metrics` | `minirl/metrics.py::compute_data_metrics` |
# | `verl/trainer/ppo/metric_utils.py::compute_timing_metrics`, `compute_throughout_metrics` | `minirl/metrics.py::compute_timing_metrics`, `compute_throughput_metrics` |
# | `verl/trainer/ppo/metric_utils.py::process_validation_metrics` | `minirl/metrics.py::process_validation_metrics` |
# | `verl/utils/debug/metrics.py::calculate_debug_metrics` | `minirl/metrics.py::compute_debug_metrics` |
# | `verl/trainer/ppo/rollout_corr_helper.py::compute_offpolicy_metrics` | `minirl/rollout_correction.py` |
# | `verl/workers/utils/losses.py::ppo_loss`, `value_loss` | `minirl/workers.py` (actor and critic updates) |
# | `verl/utils/tracking.py::Tracking` (`trainer.logger`) | `minirl/metrics.py::Tracking` (plus `metrics.jsonl`) |
#
# ## 8. Exercise
#
# Open `exercises/lab_c_metrics.py` and grade with `make grade EX=C.1`.
#
# | exercise | function | graded on |
# |---|---|---|
# | C.1 | `diagnose(records)` | eight real 12-step runs of the gallery's cases with hidden causes (seed 3, trained once and cached, under a minute), the same runs cut to their first 8 steps, and an empty run (a clear `ValueError`) — `make grade EX=C.1` |
#
# Your function gets the records of one run's `metrics.jsonl` (a list of dicts, the first one holding only the
# validation before step 1) and returns one of `"healthy"`, `"lr_too_high"`, `"no_clip"`, `"all_equal_rewards"`,
# `"truncated"`, `"kl_blowup"`, `"rollout_mismatch"`, `"reward_always_zero"`. The gallery above is your training
# data; the graded runs have another seed. They show behaviour only: every hidden run has the same metric keys
# (`actor/kl_loss` included), and the metrics that state the config or the machine are removed (`actor/lr`,
# `actor/kl_coef`, `timing_s/*` except a 0.0 `timing_s/step` that marks a training step, `timing_per_token_ms/*`,
# `perf/*`; `minirl/book/broken_runs.py::hide_config`).
#
# <details><summary>Hints for C.1</summary>
#
# Read the whole run, not its last line: a run with a too high learning rate ends looking like a reward that is
# always 0. Check the causes in an order where the clearest comes first (a score that is never above 0; a
# first-step `ppo_kl` far above 0.1; groups that all have one score). Use the robust signatures of section 3's
# first two tables, with a wide margin: verl's 0.005 for `training/rollout_probs_diff_mean` (its 0.01 misses a seed
# of the stale-weights run), not the entropy. Two causes share a signature: the no-clip run's `actor/kl_loss` also
# passes 0.1, but it clips almost nothing; decide between them on `actor/pg_clipfrac`.
# </details>
#
# **A failure-mode question.** Your run's `actor/grad_norm` is 0 on every step, but `critic/score/mean` moves
# between 0.3 and 0.5. Which metric settles whether the reward or the estimator is at fault?
#
# <details><summary>Answer</summary>
#
# `minirl/zero_spread_group_frac` (in verl: the spread of scores within each `uid` group). If it is 1, each
# group's responses share a score, so GRPO's advantages are 0 although scores differ between prompts: the reward
# cannot tell one prompt's responses apart (or `rollout.n` is 1 with an estimator that needs groups). If it is
# below 1, the advantages should not be 0: look at `critic/advantages/*` and the estimator's config.
# </details>
#
# ## 9. Where next
#
# - [Chapter 9 · Rollout correction](09_rollout_corr.ipynb): the `rollout_corr/*` metrics and what to do when the
#   mismatch is inherent.
# - [Chapter 1 · PPO](01_ppo.ipynb) for `actor/pg_clipfrac` and `actor/ppo_kl`, measured over 3 seeds.
# - [Lab B · Writing reward functions](lab_b_rewards.ipynb): rewards that cannot fail the way sections 3's last
#   case did. [Lab D · The GRPO config](lab_d_grpo_config.ipynb) for every key used above. Back to
#   [the reading map](index.md).

# %%
print_run_time()
