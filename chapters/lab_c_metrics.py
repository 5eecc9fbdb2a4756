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
# | **Run time** | 7.2 minutes in the run shown here, on 2 CPU cores (two reference runs and nine broken or comparison cases of 20 steps, each trained with 3 seeds: 33 runs, two at a time; then one small SFT and one 20-step run from it; the first output names the machine, the last prints the run time). With `MINIRL_FAST=1` (one seed, 2 steps), about 30 seconds. |
#
# A run that does not learn rarely crashes. It prints numbers. This lab teaches you to read them.

# %%
import shutil
import statistics
from pathlib import Path
from unittest import mock

from minirl import models, sft
from minirl.book import broken_runs
from minirl.book.notebook import fast_mode, plot_comparison, print_run_time, run_grid, where_this_ran
from minirl.plot import load_metrics, training_steps
from minirl.trainer import train

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "lab_c"
STEPS = 2 if fast_mode() else 20
COMMON = [f"trainer.total_training_steps={STEPS}", f"trainer.test_freq={min(5, STEPS)}"]
if fast_mode():
    COMMON += ["data.val_max_samples=20"]
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
# against: minirl's defaults on the tiny task, 16 prompts x 8 responses per step
# (`minirl/book/broken_runs.py::BASE`). The second is PPO with a critic (`algorithm.adv_estimator=gae`) with
# everything optional switched on: the KL in the reward (`algorithm.use_kl_in_reward=true`), the KL loss
# (`actor.use_kl_loss=true`), an entropy bonus (`actor.entropy_coeff=0.001`), four sampled validation answers per
# question (`rollout.val_kwargs.n=4`) and token-level importance weights (`algorithm.rollout_correction.rollout_is=token`).

# %%
EVERYTHING_ON = ["algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true",
                 "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.entropy_coeff=0.001",
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
# it, and what to expect in real runs: what verl documents where it documents anything (named as verl's), and
# otherwise this book's own rules of thumb (marked *rule of thumb*: not verl's, and not measured here). Under each
# table, the printout gives the range the metric took over the steps of the two runs above, seed 0 of each: that
# is "healthy" **on the tiny task**, in this run (section 3 prints the healthy run's ranges over its 3 seeds). A
# real run's values differ (longer responses, a bigger vocabulary, a smaller learning rate), but the shapes do
# not: what is flat, what falls, what must stay near zero.
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
# | `actor/pg_clipfrac` | fraction of tokens whose ratio $r_t = \pi_\theta / \pi_{old}$ left $[1-\epsilon, 1+\epsilon]$ in the direction the clip stops | large learning rate, many epochs or mini-batches per batch; 0 when every mini-batch is the first update on fresh data | *rule of thumb:* a few percent is usual; a rising clipfrac means each batch is pushed too far |
# | `actor/pg_clipfrac_lower` | fraction of tokens held by dual-clip (`actor.clip_ratio_c`, negative advantages only) | very large ratios on bad tokens | should be near 0 |
# | `actor/ppo_kl` | mean of $\log \pi_{old} - \log \pi_\theta$ over the update: how far the update moved from the sampler | learning rate, `ppo_epochs`, number of mini-batches | *rule of thumb:* around 1e-3 or below; 0.01 and above is a big step |
# | `actor/entropy` | mean token entropy of the policy on the sampled responses, from the old log-prob pass | falls as the policy sharpens; rises when it is knocked off its data | a slow fall is normal; a fast fall to near 0 is entropy collapse |
# | `actor/grad_norm` | the gradient norm **before** clipping to `actor.optim.clip_grad` (1.0) | learning signal size; exactly 0 when every advantage is 0 | a steady climb is verl's FAQ's sign of a rollout/training mismatch |
# | `actor/lr` | the learning rate of the next optimizer step | warm-up and schedule (`actor.optim.*`) | check it is what you asked for |
# | `actor/kl_loss`, `actor/kl_coef` | KL of the policy to the frozen reference (`actor.kl_loss_type`, default `low_var_kl`) and its coefficient, with `actor.use_kl_loss=true` | grows as the policy leaves the reference | on the tiny task (lr 1e-4, a hundred times verl's usual actor lr) it reached at most 0.038 in the 20 steps of the PPO run above (seed 0); a climb without bound is a KL blow-up |
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
# | `critic/values/*` | the critic's predictions over valid tokens (critic runs only) | critic training | should approach the returns |
# | `critic/vf_loss` | clipped value loss, times `critic.loss_agg_mode` | the critic learning | falls, then stays low |
# | `critic/vf_clipfrac` | fraction of tokens where the clipped value error was the larger (`critic.cliprange_value`) | big value updates | |
# | `critic/vpred_mean` | mean predicted value in the update | | |
# | `critic/vf_explained_var` | $1 - \mathrm{Var}(R - V) / (\mathrm{Var}(R) + 10^{-5})$: how much of the return the critic predicts | starts near or below 0, rises as the critic learns | negative for long means the critic is no help |
# | `critic/grad_norm`, `critic/lr` | as for the actor | | |

# %%
show_ranges(ref, "critic/")

# %% [markdown]
# ### `response_length/`, `prompt_length/`, `response/`: lengths
#
# From the attention mask (`minirl/metrics.py::compute_data_metrics`, verl's `_compute_response_info`).
#
# | metric | what it is | what moves it | real runs |
# |---|---|---|---|
# | `response_length/mean`, `/max`, `/min` | response tokens, EOS included | the task; reasoning runs grow it on purpose (Chapter 8) | a sudden jump to the maximum is a broken run |
# | `response_length/clip_ratio` | fraction of responses that used the whole `data.max_response_length` | truncation; a policy that stopped ending its answers | *rule of thumb:* near 0 on a well-sized budget; a few percent in long reasoning runs |
# | `response_length_non_aborted/*` | the same over responses that are not empty | | |
# | `response/aborted_ratio` | fraction of empty responses (aborted by the engine) | partial rollouts of asynchronous engines | 0 with a synchronous rollout |
# | `prompt_length/mean`, `/max`, `/min`, `/clip_ratio` | prompt tokens; clip ratio = fraction at `data.max_prompt_length` | the data | `clip_ratio` should be 0: verl filters over-long prompts (`data.filter_overlong_prompts`) |

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
# `perf/max_memory_reserved_gb`, `perf/cpu_memory_used_gb`) and MFU (`perf/mfu/*`) on GPUs; minirl does not.
#
# On a GPU run `timing_s/gen` is usually the largest share (verl's reason for vLLM and SGLang); on this CPU, in
# the PPO run below, the actor update is (at the last step 0.221 s against 0.1246 s for `gen`). A stage that grows
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
# | `training/rollout_probs_diff_mean`, `_max`, `_std` | $\lvert p_{train} - p_{rollout} \rvert$ per valid token: the trainer's probability of each sampled token against the sampler's (`minirl/metrics.py::compute_debug_metrics`, verl `verl/utils/debug/metrics.py::calculate_debug_metrics`) | verl's FAQ: a mean **below 0.005 is normal, above 0.01** means the engine and the trainer disagree |
# | `training/rollout_actor_probs_pearson_corr` | correlation of the two probabilities | near 1 |
# | `training/rollout_probs_diff_valid` | 1 when the batch had valid tokens to compare | |
#
# minirl's engine is the actor itself (in float32), so the difference is rounding noise: about 3e-7 here (seed 0
# below; over the healthy run's 3 seeds, section 3 prints 2.64e-07 to 3.04e-07).

# %%
show_ranges(ref, "training/")

# %% [markdown]
# ### `rollout_corr/`: off-policy diagnostics
#
# `minirl/rollout_correction.py` (verl: `verl/trainer/ppo/rollout_corr_helper.py::compute_offpolicy_metrics`,
# `compute_is_metrics`, `compute_rs_metrics`); [Chapter 9](09_rollout_corr.ipynb) teaches them.
#
# | metric | what it is | real runs (verl's `docs/algo/rollout_corr.md`) |
# |---|---|---|
# | `rollout_corr/kl`, `k3_kl` | KL from the sampler to the trainer, two estimators | below 0.1 in absolute value |
# | `rollout_corr/training_ppl`, `rollout_ppl`, `ppl_ratio`, `*_log_ppl`, `log_ppl_diff*`, `log_ppl_abs_diff` | perplexity of the responses under each policy, and their differences | ratio near 1 |
# | `rollout_corr/chi2_token`, `chi2_seq` | chi-squared divergence, per token and per sequence | above 1.0 is a severe shift |
# | `rollout_corr/rollout_is_mean`, `_std`, `_min`, `_max`, `_eff_sample_size`, `_ratio_fraction_high`/`_low`, `rollout_is_seq_*` | the importance weights, with `algorithm.rollout_correction.rollout_is` set | mean within 0.5-2.0, std below 1.0, effective sample size above 0.3 |
# | `rollout_corr/rollout_rs_masked_fraction`, `rollout_rs_seq_masked_fraction`, and per option `rollout_rs_*_masked_fraction`, `rollout_rs_*_seq_masked_fraction` | share of tokens and of sequences rejected, with `rollout_rs` set | |

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
# | `minirl/num_gen_batches`, `minirl/num_dropped_groups` | DAPO's dynamic sampling: generation rounds for one batch, groups dropped (Chapter 5) | `algorithm.filter_groups.enable` |

# %%
show_ranges(ref, "minirl/")

# %% [markdown]
# ## 3. A gallery of broken runs
#
# Now we break the healthy run, one cause at a time. Each case below is a real run of the same length from the
# same warm start, with a few overrides on top of the healthy run's (`minirl/book/broken_runs.py::CASES`), trained
# with the same 3 seeds as the healthy run. The plots show seed 0; the printout under each plot gives seed 0's
# value, then [the min-max over the 3 seeds]. The numbers below are this run's, on the machine the first output
# names.
# These are the failures people keep asking about in verl's and TRL's issue trackers: "the loss is 0", "the
# reward stays at 0", "grad_norm keeps rising", "the model never stops". Each plot puts the broken run next to
# the healthy one on the metrics that give it away.

# %%
for name, case in broken_runs.CASES.items():
    overrides = " ".join(case.overrides).replace(f"{broken_runs.REWARD_FILE.parents[2]}/", "")
    print(f"{name:20s} {overrides or '(defaults)'}\n{'':20s} {case.cause}")
cases = {name: list(case.overrides) for name, case in broken_runs.CASES.items() if name != "healthy"}
grid = run_grid(RUNS / "gallery", cases, *broken_runs.BASE, *COMMON)  # every seed; the plots show the first
gallery = {name: runs[0] for name, runs in grid.items()}
gallery["healthy"] = ref["grpo (healthy)"]  # the reference run of section 1: same overrides and seed
grid["healthy"] = reference["grpo (healthy)"]


def signature(name: str, panels: list[tuple[str, str]]):
    """Plot case `name` against its reference run on a few metrics (over training steps)."""
    reference_name = broken_runs.CASES[name].reference
    runs = {reference_name: [gallery[reference_name]], name: [gallery[name]]}
    print(f"{name} ({broken_runs.CASES[name].cause}) against {reference_name}:")
    plot_comparison(runs, [(key, title, "step") for key, title in panels])
    print_traces([reference_name, name], [key for key, _ in panels])


def fmt(value: float) -> str:
    text = f"{value:.3g}"
    return f"{text}.0" if text.lstrip("-").isdigit() else text  # 1.0, not 1: the prose quotes decimals


def print_traces(names: list[str], keys: list[str]):
    """Print `key` over each run in `names`: validation at each test step, else the first, min, median, max and
    last value over the training steps. Each value is the plotted run's (seed 0), then [min-max over seeds]."""
    for key in keys:
        for name in names:
            runs = grid.get(name, [gallery[name]])
            per_seed = []
            for records in runs:
                if key.startswith("val-"):
                    per_seed.append({f"step {r['step']}": r[key] for r in records if key in r})
                    continue
                values = [r[key] for r in training_steps(records) if key in r]
                per_seed.append({"first": values[0], "min": min(values), "median": statistics.median(values),
                                 "max": max(values), "last": values[-1]} if values else {})
            if not per_seed[0]:
                print(f"  {name:18s} {key}: not logged")
                continue
            parts = []
            for stat, value in per_seed[0].items():
                text = f"{stat} {fmt(value)}"
                if len(runs) > 1:
                    seed_values = [stats[stat] for stats in per_seed]
                    text += f" [{fmt(min(seed_values))}-{fmt(max(seed_values))}]"
                parts.append(text)
            seeds_note = f" (seed 0 [min-max over {len(runs)} seeds])" if len(runs) > 1 else ""
            print(f"  {name:18s} {key}{seeds_note}: " + ", ".join(parts))


def final(name: str, key: str) -> float:
    return [r[key] for r in gallery[name] if key in r][-1]


# %% [markdown]
# ### Learning rate too high (`actor.optim.lr=1e-2`)
#
# **Signature:** on the first step `actor/ppo_kl` is 1.79 (seeds 1.14-1.86; the healthy run's peaks at 0.000452,
# seeds 0.000452-0.00318) and `actor/pg_clipfrac` 0.169 (seeds 0.0818-0.169). Within a step or two the score is 0
# for every response (its median over the steps is 0.0 in every seed): the model is broken, every group has the
# same score, so `minirl/zero_spread_group_frac` is 1.0 and `actor/grad_norm` exactly 0.0 (medians, every seed).
# `actor/entropy` rises instead of falling: 0.113 at the first step, 0.204 at the last (seeds 0.15-0.464), where
# the healthy run ends at 0.0843 (0.0843-0.0935). In seed 0 the responses end up running to the maximum length
# (`response_length/clip_ratio` 0.992 at the last step), but not in every seed (the lowest ends at 0.00781). The
# run does not crash, and its later steps look like a reward that is always 0: only the first steps tell the two
# apart.
# **Fix:** verl's default actor learning rate is 1e-6 for billion-parameter models; scale it down, or add
# warm-up (`actor.optim.lr_warmup_steps`).

# %% tags=["central-figure"]
signature("lr_too_high", [("critic/score/mean", "score"), ("actor/ppo_kl", "actor/ppo_kl"),
                          ("actor/entropy", "actor/entropy"),
                          ("minirl/zero_spread_group_frac", "groups with one score")])
print_traces(["lr_too_high"], ["actor/pg_clipfrac", "actor/grad_norm", "response_length/clip_ratio"])

# %% [markdown]
# ### No clipping (`ppo_epochs=4` with the clip switched off)
#
# The clip only acts when a batch is reused: on the first mini-batch of fresh data the ratio is 1. So this case
# reuses each batch for 4 epochs (`actor.ppo_epochs=4`) and is read against a healthy run that does the same with
# the clip on. **Signature:** `actor/pg_clipfrac` stays at 0 (median over the steps 0.0 in every seed, at most
# 0.00117, seeds 0.000854-0.00212) while the clipped run's median is 0.0134 (seeds 0.0124-0.0143), about 1.3%.
# `actor/ppo_kl` is larger: its median over the steps is 0.00646 (seeds 0.00463-0.00646) against 0.00455
# (0.0044-0.00461), and at the last step 0.0181 (0.0123-0.0181) against 0.00417 (0.00417-0.00653); the peaks
# overlap (0.035, seeds 0.0235-0.035, against 0.0158, 0.0158-0.0271). Validation accuracy does not show it in 20
# steps: 0.55 at step 20 (seeds 0.42-0.55) against 0.54 (0.47-0.54), within noise. Read this case in the clip
# and KL metrics, not in the accuracy. [Chapter 1](01_ppo.ipynb) measures the clip's effect over 3 seeds, with
# a more aggressive update. **Fix:** keep `actor.clip_ratio` at 0.2 (or DAPO's 0.2/0.28).

# %%
signature("no_clip", [("actor/pg_clipfrac", "actor/pg_clipfrac"), ("actor/ppo_kl", "actor/ppo_kl"),
                      (VAL, "validation accuracy"), ("actor/entropy", "actor/entropy")])

# %% [markdown]
# ### Entropy collapse (4 epochs at 3x the learning rate)
#
# Too much optimisation per batch sharpens the policy on what it already samples. **Signature:** `actor/entropy`
# falls from 0.113 to a low of 0.0564 (seeds 0.046-0.0564) and ends at 0.0727 (0.0675-0.0727), where the healthy
# run's lowest is 0.0843 (0.0827-0.0853). More groups give one score to every sample (their advantages are 0):
# `minirl/zero_spread_group_frac` has a median over the steps of 0.375 (seeds 0.375-0.5) and peaks at 0.562
# (0.562-0.75), against the healthy run's 0.125 (0.125-0.188) and 0.25 (0.25-0.312). The training score even
# peaks higher than the healthy run's (0.594, seeds 0.516-0.594, against 0.469, 0.469-0.508), while validation
# accuracy falls from 0.47 to 0.35 at step 20 (seeds 0.35-0.37); the healthy run's rises to 0.56 (0.54-0.56).
# On the tiny task the warm start's entropy is already low, so the collapse is a matter of degree, not a fall to
# 0. The entropy alone does not single out the higher learning rate here: the same 4 epochs at the default
# learning rate (`healthy_4_epochs`) end as low, at 0.0534 (seeds 0.0534-0.0711), within noise of this case.
# What sets the two apart in this run is validation accuracy: `healthy_4_epochs` ends at 0.54 (0.47-0.54). In long
# real runs the entropy curve keeps going down. **Fix:** fewer epochs or a smaller learning rate; DAPO's
# clip-higher (`actor.clip_ratio_high=0.28`, [Chapter 5](05_dapo.ipynb)); an entropy bonus
# (`actor.entropy_coeff`) is the blunt tool.

# %%
signature("entropy_collapse", [("actor/entropy", "actor/entropy"),
                               ("minirl/zero_spread_group_frac", "groups with one score"),
                               ("critic/score/mean", "score"), (VAL, "validation accuracy")])
print_traces(["healthy_4_epochs"], ["actor/entropy"])

# %% [markdown]
# ### All-equal rewards: "the loss is 0" (a format-only reward)
#
# The reward function pays 1 for any response with a `#### ` answer (`minirl/book/broken_rewards.py::format_only_score`),
# and the warm start almost always writes one. **Signature:** `critic/score/mean` is 1 from the first step, max
# equals min, every group has one score (`minirl/zero_spread_group_frac` = 1), so every GRPO advantage is 0 and
# `actor/pg_loss`, `actor/pg_clipfrac` and `actor/grad_norm` are exactly 0: on 18, 20 and 19 of the 20 steps in
# seeds 0, 1 and 2 (on the other steps one group had a response without `#### `: `minirl/zero_spread_group_frac`
# dips to 0.938, and only that group had something to learn). The policy does not move. Validation uses the same
# reward, so it says 1.0 too, in every seed. **Fix:** a reward must tell responses apart: score the answer, not only
# the format. DAPO's dynamic sampling (`algorithm.filter_groups.enable=true`) drops such groups, but it cannot
# fix a reward that never varies.

# %%
signature("all_equal_rewards", [("critic/score/mean", "score"), ("actor/grad_norm", "actor/grad_norm"),
                                ("actor/pg_loss", "actor/pg_loss"),
                                ("minirl/zero_spread_group_frac", "groups with one score")])
print_traces(["all_equal_rewards"], ["actor/pg_clipfrac", VAL])
for seed, records in enumerate(grid["all_equal_rewards"]):
    steps = training_steps(records)
    print(f"  all_equal_rewards seed {seed}: actor/grad_norm exactly 0 on "
          f"{sum(r['actor/grad_norm'] == 0 for r in steps)} of {len(steps)} steps")

# %% [markdown]
# ### Truncated responses (`data.max_response_length=15`)
#
# The healthy run's responses are about 16 tokens long and reach 17 (section 2). With a budget of 15 most
# responses are cut before their EOS, and a cut answer `12+7=1` scores 0. **Signature:**
# `response_length/clip_ratio` between 0.75 and 1.0 on every step of every seed (0.875 at the first step, seeds
# 0.875-1.0), `response_length/max` equal to the budget, and a score below the healthy run's: median over the
# steps 0.191 (seeds 0.184-0.191) against 0.312 (0.312-0.348), last step 0.195 (0.164-0.195) against 0.43
# (0.344-0.453). **Fix:** a budget above the answers
# you expect; in long reasoning runs, DAPO's overlong shaping (`reward.reward_kwargs.overlong_buffer_cfg.*`).

# %%
signature("truncated", [("response_length/clip_ratio", "response_length/clip_ratio"),
                        ("response_length/max", "response_length/max"), ("critic/score/mean", "score")])

# %% [markdown]
# ### A KL blow-up (`use_kl_loss=true` with lr 1e-3)
#
# With the KL loss on, `actor/kl_loss` measures how far the policy is from the reference. At ten times the
# learning rate the policy moves faster than `actor.kl_loss_coef=0.001` (verl's default) can hold it.
# **Signature:** `actor/kl_loss` climbs, with ups and downs, from 0.02 at the first step (seeds 0.0129-0.042) to
# a peak of 0.536 (0.536-0.996) in 20 steps (with the default learning rate it reached 0.038, section 2), and
# validation accuracy falls from 0.47 to 0.29 at step 20 (seeds 0.05-0.29), where the healthy run's rises to 0.56
# (0.54-0.56). `actor/grad_norm` is no reliable warning: in seed 0 it jumps to 3.65, but only at the last step,
# and in another seed it peaks at 0.696, inside the healthy run's range (its peaks: 0.449-0.913). **Fix:** the
# learning rate first; a larger `kl_loss_coef` only slows the drift.

# %%
signature("kl_blowup", [("actor/kl_loss", "actor/kl_loss"), ("actor/grad_norm", "actor/grad_norm"),
                        (VAL, "validation accuracy")])

# %% [markdown]
# ### Rollout/training mismatch (`rollout.weight_sync_interval=16`)
#
# The rollout engine samples with weights up to 15 updates old, as an asynchronous trainer might
# ([Chapter 9](09_rollout_corr.ipynb)). **Signature:** `training/rollout_probs_diff_mean` rises from rounding noise
# (2.89e-07 at the first step) to a peak of 0.0144 (seeds 0.0144-0.0207), above verl's 0.01 line in every seed,
# and falls back when the weights are synced; `rollout_corr/kl` rises with it (peak 0.0389, seeds 0.0389-0.058).
# The training score stays with the healthy run's (last step 0.438, seeds 0.367-0.438, against 0.43,
# 0.344-0.453: within noise), but validation accuracy falls behind: 0.49 at step 20 (seeds 0.39-0.49) against
# the healthy 0.56 (0.54-0.56), from 0.47 for both; the ranges do not overlap.
# Nothing else looks wrong at first, which is why verl's FAQ asks you to log this metric. **Fix:** sync the weights;
# if the gap is inherent (bfloat16 engines, asynchronous training), correct for it
# (`algorithm.rollout_correction.*`, Chapter 9).

# %%
signature("rollout_mismatch", [("training/rollout_probs_diff_mean", "training/rollout_probs_diff_mean"),
                               ("rollout_corr/kl", "rollout_corr/kl"), ("critic/score/mean", "score")])
print_traces(["healthy", "rollout_mismatch"], [VAL])

# %% [markdown]
# ### A reward that is always 0 (exact match on a task that shows its working)
#
# `minirl/book/broken_rewards.py::exact_match_score` compares the whole response with the ground truth, but the
# responses are `12+7=19 #### 19` and the ground truth is `19`. **Signature:** `critic/score/max` is 0 on every
# step, from the first one; `actor/grad_norm` is 0; validation says 0.0. A learning rate that is too high also ends
# at 0, but only after a first step with a score. **Fix:** print a few responses next to their ground truth and
# their score before training (Lab B); test the reward on the warm start's own answers.

# %%
signature("reward_always_zero", [("critic/score/max", "critic/score/max"), ("actor/grad_norm", "actor/grad_norm"),
                                 (VAL, "validation accuracy")])
print({name: round(final(name, "critic/score/mean"), 3) for name in broken_runs.CASES})

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
# One token per demonstration. Now an SFT warm start built with the bug (the same recipe as the book's warm start,
# fewer steps in fast mode), and the same GRPO run from it:

# %%
PAD_SFT = sft.SFTConfig(steps=60) if fast_mode() else sft.SFTConfig()
pad_dir = RUNS / "pad_is_eos_warm_start"
shutil.rmtree(pad_dir, ignore_errors=True)
with mock.patch.object(sft, "tokenize_demonstrations", broken_runs.pad_is_eos_loss_mask(sft.tokenize_demonstrations)):
    pad_info = sft.build_warm_start(pad_dir, PAD_SFT, show_progress=False)
print({key: pad_info[key] for key in ("greedy_acc", "sampled_acc", "final_loss", "seconds")})
train([*sft.train_overrides(pad_dir, PAD_SFT), *broken_runs.BASE, *COMMON, "data.seed=0",
       f"trainer.default_local_dir={RUNS / 'pad_is_eos'}", "trainer.resume_mode=disable", "trainer.logger=[]"],
      show_progress=False)
gallery["pad_is_eos"] = load_metrics(RUNS / "pad_is_eos")
print("pad_is_eos (an SFT mask that drops the EOS token) against healthy:")
plot_comparison({"healthy": [gallery["healthy"]], "pad_is_eos": [gallery["pad_is_eos"]]},
                [("response_length/clip_ratio", "response_length/clip_ratio", "step"),
                 ("response_length/mean", "response length (tokens)", "step"), ("critic/score/mean", "score", "step")])
print("clip ratio, healthy vs pad_is_eos:", round(final("healthy", "response_length/clip_ratio"), 3),
      round(final("pad_is_eos", "response_length/clip_ratio"), 3))
print_traces(["healthy", "pad_is_eos"], ["response_length/clip_ratio", "response_length/mean", "response_length/max",
                                         "critic/score/mean", VAL])

# %% [markdown]
# **Signature** (one run, seed 0: this case is not in the seed grid): `response_length/clip_ratio` is 1.0 from
# the first step, although the budget is the healthy run's, and `response_length/mean` sits at the maximum (20).
# The model writes its answer and keeps going, so the strict rule reads a longer number: the warm start already
# scores 0.0 (greedy and sampled), the score is 0.0 on every step and validation 0.0 at every test. It is told
# apart from a too small budget by the budget itself: the healthy model's responses are 16.3 tokens long at the
# last step (seeds 16.0-16.5), and `response_length/clip_ratio` is at most 0.0156 in any seed. **Fix:** build
# masks from the EOS position (or give the tokenizer a real pad token), and check a few SFT labels by hand before
# training.

# %% [markdown]
# ## 5. A checklist: symptom, first metric, likely causes
#
# | symptom | look first at | likely causes (section) |
# |---|---|---|
# | loss and `grad_norm` exactly 0 | `minirl/zero_spread_group_frac`, `critic/score/max` - `min` | all-equal rewards; a reward always 0 |
# | score 0 from the start | a few responses next to their ground truth | a reward that cannot match (format, types, data_source) |
# | score falls to 0 after a few steps | the first steps' `actor/ppo_kl`, `actor/entropy` | learning rate too high |
# | responses at the maximum length | `response_length/clip_ratio` at step 1, the budget | truncation; pad == eos in the SFT data; a broken policy |
# | `actor/entropy` falling fast, accuracy flat | `zero_spread_group_frac`, `pg_clipfrac` | entropy collapse |
# | `actor/kl_loss` rising without bound | the learning rate, `kl_loss_coef` | KL blow-up |
# | `actor/grad_norm` rising slowly, no other sign | `training/rollout_probs_diff_mean` (> 0.01?) | rollout/training mismatch |
# | `pg_clipfrac` 0 while `ppo_kl` is large | `actor.clip_ratio*`, `ppo_epochs` | no clipping |
#
# ## 6. Where verl's pages are out of date (checked against verl 0.9.1's code)
#
# - The Ascend metric list (`parameter_and_metrics.md`) says `actor/entropy` is logged only with
#   `calculate_entropy=True` or `entropy_coeff != 0`. In 0.9.1 the legacy trainer logs it on every step, from the
#   old log-prob pass (`verl/trainer/ppo/ray_trainer.py::RayPPOTrainer.fit`); minirl does the same.
# - The same page calls `actor/grad_norm` the norm **after** clipping. verl's engines log what
#   `clip_grad_norm_` returns, which is the total norm before clipping (the clipped norm would never exceed 1.0).
# - The same page writes `critic/vf_explained_var` as $1 - \mathrm{Var}(R - V)/\mathrm{Var}(R)$; the code adds
#   $10^{-5}$ to the denominator.
# - The FAQ's `training/rollout_probs_diff_*` check needs `actor_rollout_ref.rollout.calculate_log_probs=True` in
#   verl (the metrics exist only when the rollout returns log-probs). minirl's engine always returns them, so
#   minirl always logs the check (`minirl/README.md`).
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
# | C.1 | `diagnose(records)` | eight real 12-step runs of the tiny task with hidden causes (seed 1, trained once and cached, about 30 s), the same runs cut to their first 8 steps, and an empty run (a clear `ValueError`) — `make grade EX=C.1` |
#
# Your function gets the records of one run's `metrics.jsonl` (a list of dicts, the first one holding only the
# validation before step 1) and returns one of `"healthy"`, `"lr_too_high"`, `"no_clip"`, `"all_equal_rewards"`,
# `"truncated"`, `"kl_blowup"`, `"rollout_mismatch"`, `"reward_always_zero"`. The gallery above is your training
# data; the graded runs have another seed.
#
# <details><summary>Hints for C.1</summary>
#
# Read the whole run, not its last line: a run with a too high learning rate ends looking like a reward that is
# always 0. Check the causes in an order where the clearest comes first (a score that is never above 0; a
# first-step `ppo_kl` far above 0.1; groups that all have one score). Not every run logs every metric
# (`actor/kl_loss` needs the KL loss): use `r.get(...)` or filter. Use thresholds with a wide margin, such as
# verl's own 0.005 for `training/rollout_probs_diff_mean`.
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
