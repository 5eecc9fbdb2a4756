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
# # Chapter 4 · DeepSeekMath / GRPO: the group is the baseline
#
# | The five answers | |
# |---|---|
# | **Problem** | PPO needs a critic, a second model as large as the policy, trained alongside it, only to estimate how good a response "should" be. It costs memory and time, and its errors bias the advantages. |
# | **Core formula** | Sample $G$ = `rollout.n` responses per prompt, score them, and compare each with its own group: $A_i = \dfrac{R_i - \operatorname{mean}(R_1..R_G)}{\operatorname{std}(R_1..R_G) + \varepsilon}$. No value model. |
# | **Beginner's view** | Ask the model the same question 8 times. The answers that did better than the model's own average get pushed up, the worse ones pushed down. |
# | **verl source** | `verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage`; `verl/trainer/ppo/ray_trainer.py::RayPPOTrainer.fit` (a `uid` per prompt, then `repeat(rollout.n, interleave=True)`; verl's legacy trainer, see section 6); `examples/grpo_trainer/run_qwen3_8b_fsdp.sh` (tag v0.9.0). |
# | **Where next** | [Lab D · The GRPO config, key by key](lab_d_grpo_config.ipynb): every key of verl's GRPO script and the batch arithmetic; [Chapter 5 · DAPO / Dr.GRPO](05_dapo.ipynb): what to do with groups that carry no signal, and how the loss is normalised; [Chapter 7 · RLOO / ReMax / REINFORCE++](07_baselines.ipynb): other baselines without a critic, and your own estimator. Back to [the reading map](index.md). |
#
# Run time: 5.0 minutes in the run shown here, on 2 CPU cores (the code below trains 14 small runs; the first
# output names the machine, the last prints the run time). With `MINIRL_FAST=1` every run shrinks to a few steps.

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from minirl import core, grpo
from minirl.book.notebook import (
    compare_table,
    fast_mode,
    plot_comparison,
    print_run_time,
    run_seeds,
    show_source,
    where_this_ran,
)
from minirl.plot import load_metrics
from minirl.ppo import compute_policy_loss
from minirl.protocol import DataProto
from minirl.trainer import train

where_this_ran()  # the machine behind this notebook's outputs

STEPS = 3 if fast_mode() else 60
RUNS = Path("..") / "runs" / "ch04"
VAL = "val-core/minirl/arithmetic/acc/mean@1"


def run(name, *overrides, steps=STEPS, test_freq=10):
    # One seeded training run of minirl's trainer (verl's fit loop) from the cached SFT warm start.
    fast = ["data.val_max_samples=40"] if fast_mode() else []
    train([f"trainer.default_local_dir={RUNS / name}", f"trainer.total_training_steps={steps}",
           f"trainer.test_freq={min(test_freq, steps)}", "trainer.resume_mode=disable", "trainer.logger=[]",
           *fast, *overrides], show_progress=False)
    return load_metrics(RUNS / name)


# %% [markdown]
# ## 1. The problem, shown: what the critic costs
#
# PPO with GAE ([Chapter 2](02_gae.ipynb)) learns a value $V(s_t)$ for every response token with a second network,
# the critic. In verl that is a second model of the policy's size (`critic.model.path`), with its own
# optimizer, its own forward pass to compute values, and its own update. We run 20 steps of each on
# the tiny task and compare where the time goes.

# %%
timing_steps = 3 if fast_mode() else 20
gae = run("gae", "algorithm.adv_estimator=gae", steps=timing_steps, test_freq=timing_steps)
grpo_run = run("grpo-timing", "algorithm.adv_estimator=grpo", steps=timing_steps, test_freq=timing_steps)

stages = ["gen", "reward", "old_log_prob", "values", "adv", "update_critic", "update_actor"]
fig, ax = plt.subplots(figsize=(8, 2.8))
for row, records in enumerate([gae, grpo_run]):
    left = 0.0
    for color, stage in enumerate(stages):
        seconds = sum(r.get(f"timing_s/{stage}", 0.0) for r in records) / timing_steps
        ax.barh(row, seconds, left=left, color=f"C{color}", label=stage if row == 0 else None)
        left += seconds
ax.set_yticks([0, 1], ["PPO + critic (gae)", "GRPO (no critic)"])
ax.set_xlabel("seconds per step (2 CPU cores)")
ax.legend(ncol=1, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
plt.tight_layout()
plt.show()
for label, records in [("gae", gae), ("grpo", grpo_run)]:
    per_step = sum(r["timing_s/step"] for r in records if "timing_s/step" in r) / timing_steps
    print(f"{label:5s} {per_step:.3f} s/step; models trained: {'actor + critic' if label == 'gae' else 'actor'}")

# %% [markdown]
# In this run, on this machine, PPO with a critic took 1.150 s per step and GRPO 0.695 s (one 20-step run
# each). The critic adds two stages, `values` (a forward pass) and `update_critic` (a backward pass and an
# optimizer step), and a second set of weights and optimizer state. On a GPU cluster that second model
# is what limits the batch size. GRPO removes it: the baseline comes from the other samples of the same
# prompt, which the rollout produces anyway.
#
# ## 2. The formula and the code
#
# For one prompt, the rollout samples $G$ responses $o_1..o_G$ with scores $R_1..R_G$ (the sum of
# `token_level_rewards`, i.e. the verifier's score on the last token). Then
#
# $$
# A_i = \frac{R_i - \operatorname{mean}(R_1, \dots, R_G)}{\operatorname{std}(R_1, \dots, R_G) + \varepsilon},
# \qquad \varepsilon = 10^{-6},
# $$
#
# and every token of response $i$ gets the same $A_i$. The details, as verl implements them:
#
# - the std is **unbiased** (divides by $G-1$: `torch.std`);
# - $\varepsilon$ is added to the **std**, so a group whose rewards are all equal gets $0 / \varepsilon = 0$;
# - a group of **one** response has mean 0 and std 1: its advantage is its raw score;
# - `algorithm.norm_adv_by_std_in_grpo=False` drops the division: $A_i = R_i - \operatorname{mean}$.
#   That is **Dr.GRPO** ("GRPO done right"), which argues that dividing by a small std over-weights
#   prompts that are almost always solved or almost never solved.
#
# `minirl/grpo.py::compute_grpo_outcome_advantage` implements this, with the group statistics of
# `minirl/core.py::group_mean_std` (verl's function loops over the batch in Python; `grpo_vectorized`
# computes them for all groups at once, as minirl does). Exercise 4.1 asks you to write it, so both are
# shown after the exercises.

# %% [markdown]
# ## 3. A numeric toy you can check by hand
#
# One prompt, $G = 4$ answers, two right and two wrong: $R = (1, 0, 0, 1)$.
# The mean is $0.5$; the squared deviations are all $0.25$, so the unbiased variance is
# $4 \times 0.25 / 3 = 1/3$ and the std is $0.577$. So $A = \pm 0.5 / 0.577 = \pm 0.866$.
# A second prompt whose 4 answers are all right gets $A = 0$ everywhere, and a third prompt sampled
# only once gets its raw score.

# %%
scores = torch.tensor([1.0, 0.0, 0.0, 1.0,   1.0, 1.0, 1.0, 1.0,   0.3])
index = ["p1"] * 4 + ["p2"] * 4 + ["p3"]
mask = torch.ones(9, 3, dtype=torch.long)
token_level_rewards = core.place_scores_on_last_token(scores, mask)
advantages, _ = grpo.compute_grpo_outcome_advantage(token_level_rewards, mask, index)
print("per-response advantage:", [round(a, 3) for a in advantages[:, 0].tolist()])
dr, _ = grpo.compute_grpo_outcome_advantage(token_level_rewards, mask, index, norm_adv_by_std_in_grpo=False)
print("Dr.GRPO (no std):      ", [round(a, 3) for a in dr[:, 0].tolist()])

# %% [markdown]
# ## 4. Mechanics: uids and the interleaved repeat
#
# How does verl know which responses belong to the same prompt? Before generation, the legacy
# trainer's `RayPPOTrainer.fit()` gives every prompt row a fresh `uid` (a `uuid4` string), then
# repeats the batch `rollout.n` times with `interleave=True`, so the copies of a prompt are adjacent
# and carry its uid. The advantage estimator groups rows by uid. (verl's v1 trainer keeps the uid but
# runs `rollout.n` sessions per uid instead of repeating rows; see section 6.) Here is the same step
# on a toy batch, with minirl's `DataProto`:

# %%
import uuid

prompts = DataProto(batch={"input_ids": torch.tensor([[11, 12], [21, 22], [11, 12]])},
                    non_tensor_batch={"question": ["2+2=?", "3+5=?", "2+2=?"]})
prompts.non_tensor_batch["uid"] = [str(uuid.uuid4())[:8] for _ in range(len(prompts))]  # one per row
repeated = prompts.repeat(repeat_times=3, interleave=True)
for row in range(len(repeated)):
    print(row, repeated["input_ids"][row].tolist(), repeated["question"][row], repeated["uid"][row])

# %% [markdown]
# Rows 0 and 2 ask the same question, yet they get different uids: a group is "the responses to this
# prompt row", not "to this text". With `interleave=False` the copies would be tiled (row order
# p0 p1 p2 p0 p1 p2); the grouping by uid would still work, but verl keeps the copies adjacent.
# Adjacent copies do not mean that a mini-batch holds whole groups: with `trainer.balance_batch=True`
# (the default), verl reorders the batch by sequence length before computing the old log-probs, so
# that every GPU gets a similar number of tokens. The advantages are still grouped by uid.
#
# ### Why "the loss is 0" is not a bug
#
# When every group of a batch has equal rewards (all solved, or all failed), every advantage is 0, so
# the policy loss is exactly 0 and so is its gradient, whatever the ratio:

# %%
equal = core.place_scores_on_last_token(torch.ones(8), torch.ones(8, 4, dtype=torch.long))
adv, _ = grpo.compute_grpo_outcome_advantage(equal, torch.ones(8, 4), ["a"] * 4 + ["b"] * 4)
log_prob = (torch.randn(8, 4) * 0.1 - 1).requires_grad_(True)
loss, _ = compute_policy_loss(log_prob.detach() - 0.05, log_prob, adv, torch.ones(8, 4))
loss.backward()
print("advantages all zero:", bool((adv == 0).all()))
print("pg_loss:", loss.item(), "| gradient norm:", log_prob.grad.norm().item())

# %% [markdown]
# Such groups cost a full rollout and teach nothing. minirl logs their share as
# `minirl/zero_spread_group_frac` (a minirl metric); DAPO's dynamic sampling (Chapter 5) drops them and
# samples more prompts instead.
#
# ## 5. The experiment: GRPO on the tiny task
#
# All runs start from the same noisy-SFT warm start (greedy accuracy 0.450 at step 0 in this run, the same
# checkpoint for every seed) and train 40 steps
# with 32 prompts per step. We vary `actor_rollout_ref.rollout.n`, the group size, and compare GRPO
# with Dr.GRPO. Each configuration runs with 3 seeds (`data.seed` = 0, 1, 2: data order, sampling);
# the plots show the mean and, shaded, the range over seeds. A group of 8 generates 4 times as many
# responses per step as a group of 2, so the middle panel puts the same curves on a fair axis: the
# tokens processed so far. The validation set has 200 questions, so one accuracy has a standard
# error of about 0.035 on its own (the cell prints it).

# %% tags=["central-figure"]
EXPERIMENT_STEPS = 3 if fast_mode() else 40
results = {}
for n in (2, 4, 8):
    results[f"GRPO n={n}"] = run_seeds(run, f"grpo-n{n}", "algorithm.adv_estimator=grpo",
                                       f"actor_rollout_ref.rollout.n={n}",
                                       f"trainer.total_training_steps={EXPERIMENT_STEPS}")
results["Dr.GRPO n=8"] = run_seeds(run, "drgrpo-n8", "algorithm.adv_estimator=grpo",
                                   "algorithm.norm_adv_by_std_in_grpo=false",
                                   f"trainer.total_training_steps={EXPERIMENT_STEPS}")

plot_comparison(results, [(VAL, "greedy validation accuracy", "step"),
                          (VAL, "the same, per tokens processed", "tokens"),
                          ("minirl/zero_spread_group_frac", "groups with no reward spread (fraction)", "step")])

print(compare_table(results, VAL))


def spread(values):  # "mean (seeds min-max)" of one number per seed
    return f"{sum(values) / len(values):.3f} (seeds {min(values):.3f}-{max(values):.3f})"


warm = [records[0][VAL] for runs in results.values() for records in runs if records[0]["step"] == 0]
n_val = 40 if fast_mode() else 200  # data.val_max_samples: 40 in fast mode (run() above), minirl's default 200
print(f"warm start greedy accuracy (step 0): {spread(warm)}")
final = [[r[VAL] for r in records if VAL in r][-1] for runs in results.values() for records in runs]
for p in (min(warm), 0.5, max(final)):  # sqrt(p (1 - p) / n): the warm start, the largest, the best final accuracy
    print(f"standard error of one accuracy of {p:.3f} on {n_val} prompts: {(p * (1 - p) / n_val) ** 0.5:.3f}")


def val_by_tokens(records):  # (step, cumulative tokens, accuracy) at each validation, as the middle panel's x axis
    tokens, points = 0.0, []
    for r in records:
        tokens += r.get("perf/total_num_tokens", 0.0)
        if VAL in r:
            points.append((r["step"], tokens, r[VAL]))
    return points


small = [val_by_tokens(records)[-1] for records in results["GRPO n=2"]]
budget = sum(tokens for _, tokens, _ in small) / len(small)
print(f"GRPO n=2 at its last step: {budget / 1000:.1f} thousand tokens (mean over seeds), "
      f"accuracy {spread([acc for _, _, acc in small])}")
nearest = [min(val_by_tokens(records), key=lambda point: abs(point[1] - budget)) for records in results["GRPO n=8"]]
print(f"GRPO n=8 at the validation nearest that ({', '.join(f'step {step}: {t / 1000:.1f}' for step, t, _ in nearest)} "
      f"thousand tokens, per seed): accuracy {spread([acc for _, _, acc in nearest])}")

ZERO = "minirl/zero_spread_group_frac"
for label, runs in results.items():  # the right panel: mean of the first and of the last 5 steps, per seed
    fracs = [[r[ZERO] for r in records if ZERO in r] for records in runs]
    first = [sum(f[:5]) / len(f[:5]) for f in fracs]
    last = [sum(f[-5:]) / len(f[-5:]) for f in fracs]
    print(f"{label}: zero-spread group fraction, first 5 steps {spread(first)}, last 5 steps {spread(last)}")

# %% [markdown]
# What to read in these curves (3 seeds each, 40 steps; the numbers are the printouts above, from this run):
#
# - **Per step, $n = 4$ beats $n = 2$; $n = 8$ adds nothing measurable.** After 40 steps GRPO with $n = 2$ reaches
#   0.555 on average (seeds 0.485 to 0.595), $n = 4$ reaches 0.622 (0.610 to 0.640) and $n = 8$ reaches 0.623
#   (0.590 to 0.640). $n = 4$ beats $n = 2$ beyond the seed spread. $n = 8$ is as far above $n = 2$ on
#   average (0.068), but its worst seed (0.590) is below the best seed of $n = 2$ (0.595), so the table
#   calls that difference within noise. Between $n = 4$ and $n = 8$ there is nothing to measure (0.002).
#   With $n = 2$ a group has only two answers; whenever both are right or both wrong it carries no
#   signal. In the first 5 steps that is 0.667 of the groups at $n = 2$, against 0.319 at $n = 4$ and
#   0.106 at $n = 8$ (right panel; the seed ranges below do not overlap).
# - **Per token, neither wins.** A step of $n = 8$ generates four times the responses of $n = 2$. On the
#   middle panel's fair axis, $n = 2$ after its 40 steps (65.5 thousand tokens) is at 0.555 (seeds 0.485 to
#   0.595), and $n = 8$ after the same tokens (step 10) is at 0.530 (0.515 to 0.540): the ranges overlap,
#   so within noise. In this run, at the same compute, more prompts with small groups do about as well as
#   fewer prompts with large groups. Which wins depends on how hard the prompts are: a group needs a
#   spread of rewards to teach anything.
# - **Zero-spread groups rise as the model improves** for $n = 4$ (from 0.319 of the groups in the first
#   5 steps, seeds 0.306-0.344, to 0.419 in the last 5, seeds 0.394-0.463) and for $n = 8$ (from 0.106,
#   seeds 0.087-0.138, to 0.221, seeds 0.200-0.250): more prompts become "always solved". That is the
#   waste DAPO's dynamic sampling targets. At $n = 2$ they stay high and do not rise (0.667, seeds
#   0.631-0.713, then 0.633, seeds 0.600-0.700).
# - **Dr.GRPO** ends within the seed spread of GRPO with the same group size (0.630, seeds 0.615-0.645,
#   vs 0.623, seeds 0.590-0.640): here, dropping the division by the group std changes nothing we can
#   measure. Its advantages are not rescaled per group, so the gradient's size depends on the reward
#   scale; verl pairs it with `loss_agg_mode=seq-mean-token-sum-norm`.
#
# ## 6. verl ↔ minirl
#
# | | verl 0.9.1 | minirl |
# |---|---|---|
# | advantage | `core_algos.py::compute_grpo_outcome_advantage` | `minirl/grpo.py::compute_grpo_outcome_advantage` |
# | group statistics | a Python loop per uid (`grpo_vectorized`: `groupwise.group_mean_std`) | `minirl/core.py::group_mean_std` |
# | uid + repeat | `ray_trainer.py::RayPPOTrainer.fit`: `uid = uuid4()`, `batch.repeat(n, interleave=True)` | `minirl/trainer.py::PPOTrainer._prompt_batch` (uid = the prompt's position in the data stream, the same on every process), `_generate_and_score` |
# | dispatch | `ray_trainer.py::compute_advantage` (`adv_estimator=grpo`) | `minirl/advantage.py::compute_advantage` |
#
# **Which verl trainer.** minirl mirrors verl's legacy trainer, `RayPPOTrainer.fit()` in
# `verl/trainer/ppo/ray_trainer.py`. verl 0.9.1 runs it only with `trainer.use_v1=false` and marks it
# deprecated. The default, `trainer.use_v1: true`, is the v1 trainer in `verl/trainer/ppo/v1/`
# (`trainer_base.py`). There an agent loop generates the responses and a replay buffer
# (`v1/replay_buffer.py`) hands them to the trainer. Each prompt gets a uid and `rollout.n`
# sessions, instead of `batch.repeat(n, interleave=True)` copying its row; a group is still "the
# responses with this uid". The stages of a step come in the same order: generate, reward, balance,
# old log-probs, reference, advantages, actor update.
# minirl has both trainers. Its default, which every number in these chapters comes from, is the legacy loop;
# `trainer.use_v1=true` runs `minirl/v1/` (sync and colocate_async modes), which without DAPO trains exactly the
# same run, metric for metric (`tests/test_v1.py`; `minirl/README.md`, item 12).
#
# **Metrics to watch.** `critic/score/mean` should rise; `critic/advantages/mean` stays near 0 by
# construction; `actor/pg_clipfrac` stays small (below ~0.1) with one update per batch;
# `response_length/mean` should not drift to `data.max_response_length` (`response_length/clip_ratio`
# near 0). The number you report is the greedy validation score of each data source. verl names it `val-core/<data_source>/acc/mean@1` when the reward function reports an accuracy, else `val-core/<data_source>/reward/mean@1`. In verl 0.9.1 the trainer scores through its reward loop (`verl/experimental/reward_loop/reward_manager/naive.py::NaiveRewardManager.run_single`): a scorer that returns a float, as GSM8K's does, has that float logged as `acc` too, so GSM8K's headline is `val-core/openai/gsm8k/acc/mean@1` (and `val-aux/openai/gsm8k/reward/mean@1` holds the same number). A scorer that returns a dict has `acc` only if the dict holds one, as `math_dapo.py`'s does. (The older `verl/workers/reward_manager/naive.py` adds no `acc`; blog posts that read it report `reward/mean@1`.) minirl's reward manager does what the reward loop does, which is why the tiny task reports `val-core/minirl/arithmetic/acc/mean@1`.
#
# ### The GRPO config, key by key
#
# verl's GRPO example for Qwen3-8B (`examples/grpo_trainer/run_qwen3_8b_fsdp.sh`, tag v0.9.0) trains
# on GSM8K and MATH together. Here are all the keys it sets on GPUs (its default, `DEVICE=gpu`), in
# the script's order, and what each one means. minirl uses the same key names (`minirl/config.py`).
# [Lab D · The GRPO config, key by key](lab_d_grpo_config.ipynb) adds each key's default in verl and minirl, the
# batch arithmetic checked against the trainer, and ablations.
#
# | key | value in the script | what it does |
# |---|---|---|
# | `algorithm.adv_estimator` | `grpo` | group-relative advantages; no critic is created |
# | `algorithm.use_kl_in_reward` | `False` | no InstructGPT-style KL in the reward |
# | `data.train_files` / `val_files` | the GSM8K and MATH parquet files (`~/data/gsm8k/`, `~/data/math/`) | two datasets in one run; validation reports each `data_source` on its own |
# | `data.train_batch_size` | `1024` | prompts per step, so 1024 × 5 responses |
# | `data.max_prompt_length` / `max_response_length` | `1024` / `2048` | token budgets of a prompt and of a response |
# | `data.filter_overlong_prompts` | `True` | drop prompts longer than `max_prompt_length` from the dataset before training |
# | `data.truncation` | `'error'` | stored but not applied by verl 0.9.1: its agent loop cuts an over-long prompt from the left and logs a warning (minirl raises the error: `minirl/README.md`, item 20); after the filter, none is left |
# | `actor_rollout_ref.model.path` | `Qwen/Qwen3-8B` | the policy, which also starts the reference model |
# | `actor_rollout_ref.model.use_remove_padding`, `enable_gradient_checkpointing` | `True`, `True` | speed and memory: pack sequences without padding; recompute activations in the backward pass |
# | `actor_rollout_ref.actor.optim.lr` | `1e-6` | small, for an 8B model (minirl's tiny model uses 1e-4) |
# | `actor_rollout_ref.actor.ppo_mini_batch_size` | `256` | prompts per optimizer step: 1024 / 256 = 4 updates per step |
# | `actor_rollout_ref.actor.use_dynamic_bsz`, `ppo_max_token_len_per_gpu` | `True`, `24576` | memory only: micro-batches are filled up to 24576 tokens per GPU. The script sets no `ppo_micro_batch_size_per_gpu`. |
# | `actor_rollout_ref.actor.use_kl_loss` | `True` | GRPO's KL: a loss term toward the reference model, not a reward penalty |
# | `actor_rollout_ref.actor.kl_loss_coef` / `kl_loss_type` | `0.001` / `low_var_kl` | its weight and estimator (k3; [Chapter 3, section 4](03_rlhf.ipynb#4-the-leash-estimating-kl-from-samples) compares the estimators) |
# | `actor_rollout_ref.actor.entropy_coeff` | `0` | no entropy bonus |
# | `actor_rollout_ref.actor.fsdp_config.param_offload` / `optimizer_offload` | `False` / `False` | keep the actor's weights and optimizer state on the GPU |
# | `actor_rollout_ref.rollout.name` | `vllm` | the inference engine that generates the responses |
# | `actor_rollout_ref.rollout.tensor_model_parallel_size`, `gpu_memory_utilization` | `2`, `0.6` | vLLM settings: the model split over 2 GPUs, 60% of GPU memory for vLLM |
# | `actor_rollout_ref.rollout.n` | `5` | responses per prompt = the group size $G$ |
# | `actor_rollout_ref.rollout.log_prob_use_dynamic_bsz`, `log_prob_max_token_len_per_gpu` | `True`, `24576` | the same token budget for the old log-prob pass |
# | `actor_rollout_ref.ref.log_prob_use_dynamic_bsz`, `log_prob_max_token_len_per_gpu` | `True`, `24576` | the same token budget for the reference pass |
# | `actor_rollout_ref.ref.fsdp_config.param_offload` | `True` | keep the frozen reference model in CPU memory between uses |
# | `trainer.balance_batch` | `True` | reorder the batch so every GPU gets a similar number of tokens (section 4) |
# | `trainer.logger`, `project_name`, `experiment_name` | `["console","wandb"]`, `verl_grpo_gsm8k_math`, `qwen3_8b_grpo_vllm_fsdp_<date>` | where the metrics go |
# | `trainer.n_gpus_per_node`, `nnodes` | `8`, `1` | hardware |
# | `trainer.save_freq`, `test_freq` | `20`, `5` | checkpoint and validation frequency, in steps |
# | `trainer.total_epochs` | `15` | passes over the training prompts (minirl's runs set `total_training_steps` instead) |
#
# Defaults that the script leaves alone: `loss_agg_mode=token-mean`, `clip_ratio_low/high=0.2`,
# `ppo_epochs=1`, `norm_adv_by_std_in_grpo=True`. There is no `trainer.critic_warmup` either: GRPO
# has no critic.
#
# ## 7. Exercises
#
# Open `exercises/ch04_grpo.py` and grade with `make grade`
# (one exercise, all of its checks: `make grade EX=4.1`).
#
# | # | function | what it checks |
# |---|---|---|
# | 4.1 | `group_advantages` | verl's values; unbiased std per group (not the batch's); epsilon on the std; singletons; the mask; Dr.GRPO |
# | 4.2 | `repeat_with_uids` | one fresh uid per prompt row, copies adjacent (interleaved), equal texts kept apart |
#
# <details>
# <summary>Hint for 4.1</summary>
# Sum each row of <code>token_level_rewards</code> to get its score. For each distinct label, take the
# rows of that group, subtract <code>group.mean()</code> and divide by <code>group.std() + epsilon</code>
# (<code>torch.std</code> is unbiased). Broadcast back with <code>unsqueeze(-1)</code> and multiply by the mask.
# </details>
#
# <details>
# <summary>Hint for 4.2</summary>
# Make the uids first, one per prompt, then repeat both lists with a nested comprehension
# <code>[x for x in xs for _ in range(n)]</code>.
# </details>
#
# **Failure-mode question.** You launch verl with `algorithm.adv_estimator=grpo` and forget to set
# `actor_rollout_ref.rollout.n` (verl's default is 1). What advantages does verl compute, what does
# the run then optimise, and what does minirl do with the same config?
#
# <details>
# <summary>Answer</summary>
# Every group has one response, so verl uses mean 0 and std 1: each advantage is the raw score
# divided by 1 + 1e-6. The run becomes plain REINFORCE with no baseline: with 0/1 rewards, right
# answers are pushed up and wrong ones are not pushed down at all, and the gradient is noisy. It
# still "trains", so nothing crashes and nothing warns. minirl refuses the config:
# <code>grpo compares the responses to one prompt, so it needs actor_rollout_ref.rollout.n >= 2</code>.
# </details>
#
# ### The library's code, after you tried
#
# minirl's versions of the functions the exercises ask for, read from the library itself. Open them
# after your own answers pass (or after you are stuck with the hints): they are the reference the
# graders compare with.

# %%
from IPython.display import display

for function in (grpo.compute_grpo_outcome_advantage, core.group_mean_std):
    display(show_source(function, collapsed=True))

# %% [markdown]
# ## 8. Where next
#
# - [Lab D · The GRPO config, key by key](lab_d_grpo_config.ipynb): every key of verl's GRPO script and
#   the batch arithmetic.
# - [Chapter 5 · DAPO / Dr.GRPO](05_dapo.ipynb): dynamic sampling of zero-spread groups, clip-higher, and
#   the loss normalisation behind `norm_adv_by_std_in_grpo=False`.
# - [Chapter 7 · RLOO / ReMax / REINFORCE++](07_baselines.ipynb): other baselines without a critic, their
#   gradient variance measured, and how to register your own estimator.
# - Back to [the reading map](index.md).
# - References: Shao et al., *DeepSeekMath* (2024), section 4 (GRPO); Liu et al., *Understanding
#   R1-Zero-Like Training: A Critical Perspective* (2025, Dr.GRPO); verl docs `docs/algo/grpo.md`.

# %%
print_run_time()
