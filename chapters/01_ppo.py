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
# # Chapter 1 · PPO: keep each policy update from stepping too far
#
# | The five answers | |
# |---|---|
# | **Problem** | A policy-gradient step computed on a batch is only trustworthy near the policy that sampled the batch. Reusing the batch for several updates, or taking a large step, lets the policy run away from it: the update optimises a stale estimate, and the model can collapse. |
# | **Core formula** | $r_t(\theta) = \dfrac{\pi_\theta(a_t \mid s_t)}{\pi_{\text{old}}(a_t \mid s_t)}$, $\quad L^{\text{clip}} = \mathbb{E}_t\big[\min(r_t A_t,\ \operatorname{clip}(r_t, 1-\epsilon, 1+\epsilon) A_t)\big]$. In an LLM, $a_t$ is the $t$-th response token. |
# | **Beginner's view** | Good answers may become more likely, bad ones less likely, but never by much in one go: `clip_ratio` is the safety rope. |
# | **verl source** | `verl/trainer/ppo/ray_trainer.py::RayPPOTrainer.fit` (rollout, recompute `old_log_probs`, update; verl's legacy trainer, see section 5); `verl/trainer/ppo/core_algos.py::compute_policy_loss_vanilla` (ratio, `actor/pg_clipfrac`, `actor/ppo_kl`); `core_algos.py::agg_loss`; `examples/ppo_trainer/run_qwen3_8b_fsdp.sh` (tag v0.9.0; verl's FSDP PPO example: GAE with a critic, `rollout.n=1`). |
# | **Where next** | [Lab A · GSM8K with PPO](lab_a_gsm8k.ipynb) to run PPO end to end, then [Lab C · Reading the debug metrics](lab_c_metrics.ipynb) for `actor/pg_clipfrac` and `actor/ppo_kl`; [Chapter 2 · GAE](02_gae.ipynb) for the advantages $A_t$; [Chapter 4 · GRPO](04_grpo.ipynb) to drop the critic. Back to [the reading map](index.md). |
#
# Run time: 4.5 minutes in the run shown here, on 2 CPU cores (twelve small training runs: four settings, three
# seeds each; the first cell names the machine, the last prints the time). With `MINIRL_FAST=1` every run
# shrinks to a few steps.

# %%
from functools import partial
from pathlib import Path

import torch

from minirl import core, ppo
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
from minirl.trainer import train

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "ch01"
VAL = "val-core/minirl/arithmetic/acc/mean@1"


def run(name, *overrides, steps, test_freq=10):
    # One seeded run of minirl's trainer (verl's fit loop) from the cached SFT warm start.
    fast = ["data.val_max_samples=40"] if fast_mode() else []
    steps = 2 if fast_mode() else steps
    train([f"trainer.default_local_dir={RUNS / name}", f"trainer.total_training_steps={steps}",
           f"trainer.test_freq={min(test_freq, steps)}", "trainer.resume_mode=disable", "trainer.logger=[]",
           "algorithm.adv_estimator=gae", *fast, *overrides], show_progress=False)
    return load_metrics(RUNS / name)


# %% [markdown]
# ## 1. The problem, shown: an update that steps too far
#
# We train PPO with a critic (`algorithm.adv_estimator=gae`, as in verl's PPO examples) from the
# SFT warm start, reusing each batch for 4 epochs of 4 mini-batches with a high learning rate
# (`actor.ppo_epochs=4`, `ppo_mini_batch_size=4` of 16 prompts, `optim.lr=3e-4`). After the first
# mini-batch the policy has moved, so the later updates are computed on data from an older policy.
#
# Two runs differ only in the clip. The unclipped run sets the clip range so wide that it almost
# never acts (`clip_ratio_low=0.999`, `clip_ratio_high=1000`, `clip_ratio_c=1000`: only ratios below
# 0.001 are still clipped). Each runs 15 steps with 3 seeds; the plots show the mean over seeds and,
# shaded, their range. (Validation uses the first 100 questions here, to keep the chapter fast.)

# %% tags=["central-figure"]
aggressive = ["actor_rollout_ref.actor.ppo_epochs=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
              "data.train_batch_size=16", "actor_rollout_ref.actor.optim.lr=3e-4", "data.val_max_samples=100"]
unclipped = ["actor_rollout_ref.actor.clip_ratio_low=0.999", "actor_rollout_ref.actor.clip_ratio_high=1000",
             "actor_rollout_ref.actor.clip_ratio_c=1000"]
problem = {
    "clipped (eps = 0.2)": run_seeds(partial(run, steps=15, test_freq=5), "clipped", *aggressive),
    "unclipped": run_seeds(partial(run, steps=15, test_freq=5), "unclipped", *aggressive, *unclipped),
}
plot_comparison(problem, [(VAL, "greedy validation accuracy", "step"),
                          ("actor/ppo_kl", "actor/ppo_kl (old vs new policy)", "step"),
                          ("actor/pg_clipfrac", "actor/pg_clipfrac", "step")])
print(compare_table(problem, VAL))
for label, runs in problem.items():
    starts = [[r[VAL] for r in records if VAL in r][0] for records in runs]
    print(f"{label}: accuracy at step 0, mean {sum(starts) / len(starts):.3f} (seeds {min(starts):.3f} to "
          f"{max(starts):.3f})")
    for seed, records in enumerate(runs):
        accuracy = ", ".join(f"step {r['step']}: {r[VAL]:.3f}" for r in records if VAL in r)
        peak_kl = max(r["actor/ppo_kl"] for r in records if "actor/ppo_kl" in r)
        print(f"  seed {seed}: validation accuracy {accuracy}; peak actor/ppo_kl {peak_kl:.3f}")

# %% [markdown]
# Without the clip, the reused batches push the policy further and further from the one that
# sampled them: `actor/ppo_kl`, an estimate of KL(old ‖ new) over the batch (how such estimates work:
# [Chapter 3, section 4](03_rlhf.ipynb#4-the-leash-estimating-kl-from-samples)), peaks at 0.671 to
# 0.819 (range over seeds), and every seed's accuracy collapses: from 0.470 at step 0 to 0.040-0.080 at
# step 5 and 0.000 at step 15. With the clip, the same settings also lose much of their accuracy in this
# run: from 0.470 to 0.157 at step 15 on average (seeds 0.090 to 0.230), with a peak `actor/ppo_kl` of
# 0.194 to 0.473. A learning rate of 3e-4 with 4 epochs is too much even for PPO: the clip slows the
# fall but does not stop it within 15 steps. Still, no clipped seed reaches 0, and the gap to the
# unclipped runs (+0.157) is beyond the seed spread.
# Tokens whose ratio has already left $[1-\epsilon, 1+\epsilon]$ in the helpful direction stop
# contributing (`actor/pg_clipfrac` is the share of such tokens), so each batch can only move the
# policy so far.
#
# ## 2. The formula and the code
#
# For each response token $t$ with advantage $A_t$:
#
# $$
# r_t = \exp\big(\log \pi_\theta(a_t) - \log \pi_{\text{old}}(a_t)\big), \qquad
# \text{loss}_t = \max\big(-A_t\, r_t,\ -A_t \operatorname{clip}(r_t, 1-\epsilon_{\text{low}}, 1+\epsilon_{\text{high}})\big)
# $$
#
# The loss is the negative of the objective, so PPO's $\min$ becomes a $\max$. Read it case by case:
#
# | case | what the clip does |
# |---|---|
# | $A_t > 0$, $r_t > 1 + \epsilon_{\text{high}}$ | the token is already more likely enough: loss flat, gradient 0 |
# | $A_t > 0$, $r_t < 1 - \epsilon_{\text{low}}$ | the token became *less* likely though it was good: not clipped, full gradient to fix it |
# | $A_t < 0$, $r_t < 1 - \epsilon_{\text{low}}$ | the bad token is already less likely enough: gradient 0 |
# | $A_t < 0$, $r_t > 1 + \epsilon_{\text{high}}$ | the bad token became *more* likely: not clipped, and the loss $-A_t r_t$ grows with $r_t$ |
#
# The last case is unbounded, so verl adds a **dual clip**: for $A_t < 0$ the loss is capped at
# $-A_t \cdot c$ (`clip_ratio_c`, default 3). **Decoupled clip**: $\epsilon_{\text{low}}$ and
# $\epsilon_{\text{high}}$ are separate keys (`clip_ratio_low`, `clip_ratio_high`); DAPO raises only
# the upper one ("clip-higher"). verl also clamps the log-ratio to $[-20, 20]$ before `exp`.
#
# `minirl/ppo.py::compute_policy_loss` implements exactly this. Exercise 1.1 asks you to write its core
# (without the dual clip), so its code is shown after the exercises.

# %% [markdown]
# ### Aggregation: from per-token losses to one number
#
# `agg_loss` reduces the $(B, L)$ loss matrix. The choice decides how much each token and each
# sequence weighs:
#
# $$
# \text{token-mean} = \frac{\sum_{i,t} m_{it} \ell_{it}}{\sum_{i,t} m_{it}}, \qquad
# \text{seq-mean-token-mean} = \frac{1}{G} \sum_i \frac{\sum_t m_{it} \ell_{it}}{\sum_t m_{it}}
# $$
#
# With token-mean every token counts the same, so long responses weigh more in total; with
# seq-mean-token-mean every response counts the same, so each token of a short response weighs more.
# `minirl/core.py::agg_loss` (Exercise 1.2) is shown after the exercises.

# %% [markdown]
# ## 3. A numeric toy you can check by hand
#
# Four tokens, $\epsilon = 0.2$: ratios $(1.5, 0.5, 0.5, 5.0)$ and advantages $(+1, +1, -1, -1)$.
#
# - token 1: $A>0$, $r = 1.5 > 1.2$: clipped, loss $= -1.2$;
# - token 2: $A>0$, $r = 0.5$: not clipped, loss $= -0.5$;
# - token 3: $A<0$, $r = 0.5 < 0.8$: clipped, loss $= 0.8$;
# - token 4: $A<0$, $r = 5$: PPO's clip does not act ($-A r = 5 > 1.2$), the dual clip caps it at $c = 3$.
#
# token-mean loss $= (-1.2 - 0.5 + 0.8 + 3)/4 = 0.525$; `pg_clipfrac` $= 2/4$; `pg_clipfrac_lower` $= 1/4$.

# %%
ratio = torch.tensor([[1.5, 0.5, 0.5, 5.0]])
advantages = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
log_prob = ratio.log().requires_grad_(True)
loss, metrics = ppo.compute_policy_loss(torch.zeros(1, 4), log_prob, advantages, torch.ones(1, 4))
loss.backward()
print("loss", round(loss.item(), 4), {k: round(v, 4) for k, v in metrics.items()})
print("gradient per token:", [round(g, 3) for g in log_prob.grad[0].tolist()], "(0 where a clip acts)")

loss_mat = torch.tensor([[1.0, 1.0, 1.0, 1.0], [3.0, 0.0, 0.0, 0.0]])
mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
    print(f"{mode:20s}", core.agg_loss(loss_mat, mask, mode).item())

# %% [markdown]
# The aggregation toy: a long response with loss 1 per token and a one-token response with loss 3.
# token-mean gives $(4 + 3)/5 = 1.4$; seq-mean-token-mean gives $(1 + 3)/2 = 2$: the short response
# counts as much as the long one.
#
# ## 4. The experiment: PPO on the tiny task
#
# Now PPO with verl-like settings (one epoch, two mini-batches per step, learning rate 1e-4): the first
# mini-batch of each step is on-policy (ratio 1), the second is slightly off-policy, and the clip rarely
# acts. We compare one and two epochs, 20 steps, 3 seeds each.

# %%
experiment = {
    "PPO, 1 epoch": run_seeds(partial(run, steps=20), "ppo-1epoch"),
    "PPO, 2 epochs": run_seeds(partial(run, steps=20), "ppo-2epochs", "actor_rollout_ref.actor.ppo_epochs=2"),
}
plot_comparison(experiment, [(VAL, "greedy validation accuracy", "step"),
                             ("critic/score/mean", "training reward (critic/score/mean)", "step"),
                             ("actor/pg_clipfrac", "actor/pg_clipfrac", "step")])
print(compare_table(experiment, VAL))
for label, runs in experiment.items():
    starts = [[r[VAL] for r in records if VAL in r][0] for records in runs]
    clipfracs = [[r["actor/pg_clipfrac"] for r in records if "actor/pg_clipfrac" in r] for records in runs]
    means = [sum(c) / len(c) for c in clipfracs]
    peaks = [max(c) for c in clipfracs]
    print(f"{label}: accuracy at step 0, mean {sum(starts) / len(starts):.3f} (seeds {min(starts):.3f} to "
          f"{max(starts):.3f}); actor/pg_clipfrac over the run: mean {min(means):.4f} to {max(means):.4f}, "
          f"peak {min(peaks):.4f} to {max(peaks):.4f} (range over seeds)")

# %% [markdown]
# Both learn in this run: from 0.450 at step 0 to 0.590 after 20 steps with 1 epoch (seeds 0.555 to
# 0.640) and 0.585 with 2 epochs (seeds 0.575 to 0.600); every seed ends above its start. The ranges
# overlap, so the difference is within noise: with 3 seeds we cannot say that the second epoch helps
# or hurts. `actor/pg_clipfrac` stays near 0 with one epoch (mean over the run 0.0001 to 0.0002, peak
# 0.0005 to 0.0012, ranges over seeds) and is higher with two (mean 0.0034 to 0.0036, peak 0.0062 to
# 0.0071; the ranges do not overlap): the clip starts to act on the second epoch's off-policy passes,
# though on under 1% of the tokens here.
#
# ## 5. verl ↔ minirl
#
# | | verl 0.9.1 | minirl |
# |---|---|---|
# | policy loss | `core_algos.py::compute_policy_loss_vanilla` (`loss_mode=vanilla`) | `minirl/ppo.py::compute_policy_loss` |
# | aggregation | `core_algos.py::agg_loss` | `minirl/core.py::agg_loss` |
# | old log-probs recomputed | `ray_trainer.py::RayPPOTrainer._compute_old_log_prob`: `actor_rollout_wg.compute_log_prob` | `minirl/workers.py::Actor.compute_log_prob` |
# | epochs and mini-batches | `engine_workers.py::TrainingWorker.train_mini_batch`, with the loss in `losses.py::ppo_loss` | `minirl/workers.py::Actor.update_actor` |
#
# **Which verl trainer.** minirl mirrors verl's legacy trainer, `RayPPOTrainer.fit()` in
# `verl/trainer/ppo/ray_trainer.py`. verl 0.9.1 runs it only with `trainer.use_v1=false` and marks it
# deprecated. The default, `trainer.use_v1: true`, is the v1 trainer in `verl/trainer/ppo/v1/`
# (`trainer_base.py`). There an agent loop generates the responses and a replay buffer
# (`v1/replay_buffer.py`) hands them to the trainer. Each prompt gets a uid and `rollout.n`
# sessions, instead of `batch.repeat(n, interleave=True)` copying its row. The stages of a step come
# in the same order: generate, reward, balance, old log-probs, reference, values, advantages, critic
# update, actor update.
# minirl has both trainers. Its default, which every number in these chapters comes from, is the legacy loop;
# `trainer.use_v1=true` runs `minirl/v1/` (sync and colocate_async modes), which without DAPO trains exactly the
# same run, metric for metric (`tests/test_v1.py`; `minirl/README.md`, item 12).
# Older verl and many blog posts put the epoch loop in
# `verl/workers/actor/dp_actor.py::DataParallelPPOActor.update_policy`; verl 0.9 removed that file
# and moved the loop to `engine_workers.py::TrainingWorker.train_mini_batch`.
#
# | config key (verl = minirl) | default | meaning |
# |---|---|---|
# | `actor_rollout_ref.actor.clip_ratio_low` / `clip_ratio_high` | 0.2 / 0.2 | $\epsilon_{\text{low}}$, $\epsilon_{\text{high}}$ (setting only `clip_ratio` does nothing in verl) |
# | `actor_rollout_ref.actor.clip_ratio_c` | 3.0 | dual-clip cap for $A<0$ |
# | `actor_rollout_ref.actor.ppo_epochs` | 1 | passes over each batch |
# | `actor_rollout_ref.actor.ppo_mini_batch_size` | verl 256, minirl 16 | prompts per optimizer step |
# | `actor_rollout_ref.actor.loss_agg_mode` | `token-mean` | see `agg_loss` |
# | `algorithm.adv_estimator` | verl `gae` | PPO with a critic ([Chapter 2](02_gae.ipynb)) |
#
# | metric | healthy | worrying |
# |---|---|---|
# | `actor/pg_clipfrac` | 0 to ~0.2 | above ~0.3: updates too large (lower the learning rate or the epochs) |
# | `actor/ppo_kl` | near 0, below ~0.05 | growing steadily: the policy runs away from its data |
# | `actor/pg_clipfrac_lower` | ~0 | large: bad tokens' ratios explode (dual clip busy) |
#
# ## 6. Exercises
#
# Open `exercises/ch01_ppo.py` and grade with `make grade`
# (one exercise, all of its checks: `make grade EX=1.1`).
#
# | # | function | what it checks |
# |---|---|---|
# | 1.1 | `clipped_policy_loss` | the hand toy, verl's value, gradient and clip fraction, ratio 1 on-policy |
# | 1.2 | `aggregate_loss` | token-mean, seq-mean-token-sum, seq-mean-token-mean; empty rows; unknown modes |
#
# <details>
# <summary>Hint for 1.1</summary>
# Work in log space: <code>ratio = torch.exp(log_prob - old_log_prob)</code>. Build both losses,
# take <code>torch.maximum</code>, then a masked mean. The clip fraction is the masked mean of
# <code>(clipped > unclipped).float()</code>.
# </details>
#
# <details>
# <summary>Hint for 1.2</summary>
# <code>S = (loss_mat * mask).sum(-1)</code> and <code>n = mask.sum(-1)</code>; keep only rows with
# <code>n > 0</code> for the two seq-mean modes.
# </details>
#
# **Failure-mode question.** In minirl, the metrics of the first mini-batch of the first epoch of
# every PPO step show a ratio of 1 (`actor/ppo_kl` about 0, nothing clipped), whatever the
# learning rate. Why, why is that not a sign that the update does nothing, and why does verl show a
# ratio only close to 1 there?
#
# <details>
# <summary>Answer</summary>
# `old_log_probs` are recomputed by the actor right before the update, with the same weights, so on
# the first mini-batch log_prob equals old_log_prob: the ratio is 1, no token is clipped and the
# gradient is the plain policy gradient $-A_t \nabla \log \pi$. The update happens; only after it does
# the policy differ from the one that sampled the batch. The ratio and the clip matter for the later
# mini-batches and epochs (and for rollout engines whose log-probs differ from the trainer's,
# Chapter 9). In minirl the ratio is 1 up to float32 rounding (about 1e-7): both passes use the same weights,
# in float32, on the same padded rows (only batched differently). verl also recomputes with the same weights, but in bf16, and the update packs the
# sequences into other micro-batches than the log-prob pass did. The rounding differs a little, so
# the ratio is only close to 1 and `actor/ppo_kl` is small but not 0.
# </details>
#
# ### The library's code, after you tried
#
# minirl's versions of the functions the exercises ask for, read from the library itself. Open them
# after your own answers pass (or after you are stuck with the hints): they are the reference the
# graders compare with.

# %%
from IPython.display import display

for function in (ppo.compute_policy_loss, core.agg_loss):
    display(show_source(function, collapsed=True))

# %% [markdown]
# ## 7. Where next
#
# - [Lab A · GSM8K with PPO](lab_a_gsm8k.ipynb): PPO end to end, from verl's data to its quickstart command.
# - [Lab C · Reading the debug metrics](lab_c_metrics.ipynb): `actor/pg_clipfrac`, `actor/ppo_kl` and the
#   other metrics of a run, with their healthy ranges.
# - [Chapter 2 · GAE](02_gae.ipynb): where $A_t$ comes from when there is a critic.
# - [Chapter 4 · DeepSeekMath / GRPO](04_grpo.ipynb): the same clipped loss, with group baselines instead of a critic.
# - Back to [the reading map](index.md).
# - References: Schulman et al., *Proximal Policy Optimization Algorithms* (2017); Ye et al., dual-clip
#   PPO (2019); verl docs `docs/algo/ppo.md`.

# %%
print_run_time()
