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
# # Chapter 5 · DAPO and Dr.GRPO: the recipe details that keep reasoning RL stable
#
# | The five answers | |
# |---|---|
# | **Problem** | GRPO on long chains of thought meets four practical problems: the policy's entropy collapses (it stops exploring), more and more groups are all right or all wrong (advantage 0: compute spent, nothing learned), answers hit the length limit and are cut off, and the way the loss is averaged treats long and short answers differently. DAPO (Yu et al., 2025) is a recipe of four fixes; Dr.GRPO (Liu et al., 2025) removes two normalisations of GRPO that bias it. |
# | **Core formula** | DAPO: $\mathcal{J} = \mathbb{E}\Big[\frac{1}{\sum_i \lvert o_i\rvert}\sum_{i=1}^{G}\sum_{t}\min\big(\rho_{i,t}\hat A_{i},\ \operatorname{clip}(\rho_{i,t}, 1-\varepsilon_{\text{low}}, 1+\varepsilon_{\text{high}})\hat A_{i}\big)\Big]$ subject to $0 < \lvert\{o_i \text{ right}\}\rvert < G$. Dr.GRPO: $\hat A_i = R_i - \operatorname{mean}(R)$ (no division by the std) and the token losses summed, divided by a constant. |
# | **Beginner's view** | Four pieces of advice for a long exam: count every written word equally when grading (token-level loss); let unlikely good ideas grow faster than the usual limit (clip-higher); skip the questions where the whole class got the same mark, they teach nothing (dynamic sampling); and take off marks gently as an answer nears the page limit instead of tearing the page off (overlong shaping). |
# | **verl source** | `verl/trainer/ppo/core_algos.py::agg_loss` (`actor_rollout_ref.actor.loss_agg_mode`), `compute_policy_loss_vanilla` (`clip_ratio_low`, `clip_ratio_high`), `compute_grpo_outcome_advantage` (`algorithm.norm_adv_by_std_in_grpo`); `verl/experimental/reward_loop/reward_manager/dapo.py::DAPORewardManager.run_single` (overlong shaping); `verl/trainer/ppo/v1/replay_buffer.py::ReplayBuffer._dapo_filtered_keys` (dynamic sampling, `algorithm.filter_groups.*`); `docs/algo/dapo.md` (tag v0.9.0). |
# | **Where next** | [Lab D · The GRPO config, key by key](lab_d_grpo_config.ipynb): `loss_agg_mode` and `norm_adv_by_std_in_grpo` in a whole verl config; [Chapter 8 · DeepSeek-R1](08_r1.ipynb): the chain task, thinking that emerges, and verifiers; [Chapter 4 · GRPO](04_grpo.ipynb): the group baseline these ingredients adjust; [Chapter 1 · PPO](01_ppo.ipynb): the clipped objective clip-higher changes. Back to [the reading map](index.md). |
#
# Run time: 4.0 minutes in the run shown here, on 2 CPU cores with no other job (24 short training
# runs, two at a time; the first output names the machine, the last prints the run time). With `MINIRL_FAST=1`
# everything shrinks to a few steps.

# %%
from pathlib import Path

import numpy as np
import torch

from minirl import core, dapo, data, grpo, models, rewards, sft
from minirl.book.notebook import (
    compare_table,
    fast_mode,
    plot_comparison,
    print_run_time,
    run_grid,
    show_source,
    where_this_ran,
)
from minirl.rollout import generate_sequences

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "ch05"
WARM = sft.default_warm_start(sft.CHAIN_SFT)  # Chapter 8's task: sums of 3-4 one-digit numbers, 30% worked demos
STEPS = 2 if fast_mode() else 14
PROMPTS, SAMPLES = 16, 8                      # data.train_batch_size, actor_rollout_ref.rollout.n

# %% [markdown]
# ## 1. The setting, and the problems shown
#
# This chapter runs on [Chapter 8](08_r1.ipynb)'s chain task, where a worked answer
# (`<think>7+5=12, 12+8=20, 20+6=26</think> #### 26`, 35-48 tokens) is right about twice as often
# as a direct one (`#### 26`, 8 tokens), so answers can be long and length matters. The plain GRPO run
# (`grpo`) is the baseline every ingredient is compared with:
#
# - 16 prompts x 8 answers per step, strict verifier (`rewards.compute_chain_score`), response budget
#   48 tokens (`data.max_response_length`);
# - 4 mini-batches x 2 epochs per step (`ppo_mini_batch_size=4`, `ppo_epochs=2`), so the later updates
#   of a step are off-policy and the PPO clip can act (DAPO's runs take 16 mini-batches per step);
# - lr 2e-4, 14 steps, 3 seeds; validation samples 8 answers for each of 60 held-out prompts at temperature 1
#   (`val_kwargs.n=8`, `do_sample=True`, `temperature=1.0`; verl's `val_kwargs.temperature` defaults to 0,
#   which would make all 8 answers the greedy one). `mean@8` is the mean accuracy of the 8 answers;
#   `best@8` estimates whether at least one of 8 answers is right (by bootstrap, drawing with replacement;
#   Chapter 8's pass@k is the exact version).
#
# Every variant changes only what its name says. All 24 runs are trained here, two at a time; the
# sections read them.

# %%
BASE = [*sft.train_overrides(WARM, sft.CHAIN_SFT), f"data.train_batch_size={PROMPTS}",
        f"actor_rollout_ref.rollout.n={SAMPLES}", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        f"actor_rollout_ref.actor.ppo_epochs={1 if fast_mode() else 2}", "actor_rollout_ref.actor.optim.lr=2e-4",
        f"trainer.total_training_steps={STEPS}", f"trainer.test_freq={STEPS}", "trainer.val_before_train=False",
        f"data.val_max_samples={10 if fast_mode() else 60}", "actor_rollout_ref.rollout.val_kwargs.n=8",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=True", "actor_rollout_ref.rollout.val_kwargs.temperature=1.0"]
TIGHT = ["data.max_response_length=44"]  # a budget that 4-term worked answers (42-48 tokens) often exceed
OVERLONG = ["reward.reward_manager.name=dapo", "+reward.reward_kwargs.overlong_buffer_cfg.enable=True",
            "+reward.reward_kwargs.overlong_buffer_cfg.len=4",
            "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
            "+reward.reward_kwargs.max_resp_len=44", "+reward.reward_kwargs.overlong_buffer_cfg.log=True"]
CLIP_HIGHER = ["actor_rollout_ref.actor.clip_ratio_high=0.28"]
DYNAMIC = ["algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=acc"]
VARIANTS = {
    "grpo": [],
    "seq_mean_token_mean": ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"],
    "dr_grpo": ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm",
                "algorithm.norm_adv_by_std_in_grpo=False"],
    "clip_higher": CLIP_HIGHER,
    "dynamic_sampling": DYNAMIC,
    "grpo_44": TIGHT,
    "overlong_44": TIGHT + OVERLONG,
    "dapo_44": TIGHT + OVERLONG + CLIP_HIGHER + DYNAMIC,
}
runs = run_grid(RUNS, VARIANTS, *BASE)
plot_comparison({"grpo": runs["grpo"]},
                [("minirl/zero_spread_group_frac", "groups with no signal (all right / all wrong)", "step"),
                 ("actor/entropy", "entropy of the policy (per token)", "step"),
                 ("response_length/clip_ratio", "answers at the length limit", "step")])


def curve(records, key):
    """The logged values of `key` over a run, one per step that logs it."""
    return [r[key] for r in records if key in r]


def spread(values):
    """'mean (seeds min-max)' of one number per seed."""
    return f"{np.mean(values):.3f} (seeds {min(values):.3f}-{max(values):.3f})"


for key in ("minirl/zero_spread_group_frac", "actor/entropy", "response_length/clip_ratio"):
    print(f"grpo {key}: first step {spread([curve(r, key)[0] for r in runs['grpo']])}, "
          f"last step {spread([curve(r, key)[-1] for r in runs['grpo']])}, "
          f"highest step {spread([max(curve(r, key)) for r in runs['grpo']])}")

# %% [markdown]
# The three problems DAPO names, in the plain run (3 seeds; the printout above, from this run):
#
# - **Groups with no signal.** When all 8 answers to a prompt are right (or all wrong), every advantage in
#   the group is 0. As the policy improves, more groups are all right: the share tends to rise over
#   training, unevenly, from 0.042 of the groups at the first step (seeds 0.000-0.125) to 0.250 at the last
#   (seeds 0.125-0.312), and those answers cost generation time and teach nothing.
# - **Entropy collapse.** The per-token entropy falls from 0.162 (seeds 0.152-0.179) to 0.041 (seeds
#   0.035-0.048) in 14 steps: the policy becomes nearly deterministic, and a nearly deterministic policy
#   samples the same answer 8 times (which also makes more groups uninformative).
# - **Answers at the limit.** A 4-term worked answer is 42-48 tokens, so some answers reach the 48-token
#   budget: 0.060 of them at the first step (seeds 0.031-0.086), 0.154 at the last (seeds 0.094-0.211), and
#   0.362 at each seed's worst step (seeds 0.328-0.414). verl's `response_length/clip_ratio` counts answers
#   whose length equals the budget, cut off or not; with a tighter budget (section 6) they are cut off.
#
# ## 2. The formulas, ingredient by ingredient
#
# **Loss aggregation** (`actor_rollout_ref.actor.loss_agg_mode`, `core_algos.py::agg_loss`). With
# $\ell_{i,t}$ the per-token PPO loss and $m_{i,t}$ the response mask, $L_i = \sum_t m_{i,t}$:
#
# | mode | loss | weight of one token of answer $i$ |
# |---|---|---|
# | `token-mean` (DAPO, verl's default) | $\dfrac{\sum_{i,t} m_{i,t}\ell_{i,t}}{\sum_{i,t} m_{i,t}}$ | $1/\sum_j L_j$: every token the same |
# | `seq-mean-token-mean` (GRPO paper) | $\dfrac{1}{B}\sum_i \dfrac{\sum_t m_{i,t}\ell_{i,t}}{L_i}$ | $1/(B\,L_i)$: a long answer's tokens count less |
# | `seq-mean-token-sum-norm` (Dr.GRPO) | $\dfrac{\sum_{i,t} m_{i,t}\ell_{i,t}}{B\cdot C}$ | $1/(B\,C)$, $C$ a constant (verl: the response budget) |
#
# Under `seq-mean-token-mean`, a wrong answer ($\hat A < 0$) of 45 tokens is pushed down 45/8 times less
# per token than a wrong answer of 8 tokens. Dr.GRPO's argument: this favours long wrong answers (and
# short right ones). Dr.GRPO also removes GRPO's division by the group's std
# (`algorithm.norm_adv_by_std_in_grpo=False`). That division gives a large weight to the prompts whose
# rewards barely vary (nearly all right or nearly all wrong).
#
# **Clip-higher** (`clip_ratio_low=0.2`, `clip_ratio_high=0.28`). The PPO clip stops a token's ratio
# $\rho$ at $1+\varepsilon$ when $\hat A > 0$. A token with probability 0.01 can then only reach 0.012 in
# one step, while one at 0.9 reaches 1: the clip limits exactly the rare tokens that exploration needs.
# DAPO raises the upper limit only.
#
# **Dynamic sampling** (`algorithm.filter_groups.enable`, `.metric`, and a limit, section 8). Drop every
# group whose metric (here `acc`) has no spread, and generate more prompts until `train_batch_size` groups
# remain: every trained group carries a signal.
#
# **Overlong shaping** (`reward.reward_manager.name=dapo`, `reward.reward_kwargs.overlong_buffer_cfg.*`).
# Add a soft penalty as an answer enters the last `len` tokens of the budget $L_{\max}$:
#
# $$R_{\text{length}}(y) = \min\Big(0,\ -\frac{\lvert y\rvert - (L_{\max} - \text{len})}{\text{len}}\cdot \text{penalty\_factor}\Big).$$
#
# ## 3. Token-level loss vs the sequence mean, and Dr.GRPO
#
# First the mechanism, exactly, on a real batch: sample 8 answers to 16 prompts from the warm start,
# give each answer its GRPO advantage, and ask each aggregation mode how much gradient one token of each
# answer receives (the derivative of the aggregated loss with respect to that token's loss, times the
# advantage).

# %%
tokenizer, policy = models.load_tokenizer(WARM), models.load_policy(WARM)
rows = data.read_parquet(WARM / "data" / "train.parquet").to_list()[:PROMPTS]
prompts = data.encode_prompts(tokenizer, [r["prompt"] for r in rows for _ in range(SAMPLES)], 64)
out = generate_sequences(policy, prompts["input_ids"], prompts["attention_mask"], tokenizer.eos_token_id,
                         tokenizer.pad_token_id, sft.CHAIN_SFT.response_length,
                         generator=torch.Generator().manual_seed(0))
texts = tokenizer.batch_decode([r[:n] for r, n in zip(out["responses"], out["response_length"])],
                               skip_special_tokens=True)
right = torch.tensor([rewards.compute_chain_score(t, r["reward_model"]["ground_truth"])["score"]
                      for t, r in zip(texts, [r for r in rows for _ in range(SAMPLES)])])
uids = [str(i) for i in range(PROMPTS) for _ in range(SAMPLES)]
mask = out["response_mask"].float()
lengths = mask.sum(-1)
scores = core.place_scores_on_last_token(right, mask)
wrong_short = (right == 0) & (lengths <= 12)  # wrong direct answers
wrong_long = (right == 0) & (lengths >= 30)   # wrong worked answers
for mode, by_std in (("token-mean", True), ("seq-mean-token-mean", True), ("seq-mean-token-sum-norm", False)):
    advantages, _ = grpo.compute_grpo_outcome_advantage(scores, mask, uids, norm_adv_by_std_in_grpo=by_std)
    token_losses = torch.zeros_like(mask, requires_grad=True)
    core.agg_loss(token_losses, mask, mode).backward()  # d(loss)/d(token loss): the weight of each token
    push = (token_losses.grad * advantages).abs().sum(-1) / lengths  # |gradient weight| per token of each answer
    informative = advantages[:, 0] != 0  # answers in groups with a spread
    short, long = push[wrong_short & informative].mean(), push[wrong_long & informative].mean()
    print(f"{mode:24s} wrong answers, push per token: short (<= 12 tokens) {short:.5f}, "
          f"long (>= 30 tokens) {long:.5f}, short / long = {short / long:.2f}")

# %% [markdown]
# Under `token-mean` the push per token of a wrong answer depends only on its advantage; under
# `seq-mean-token-mean` a short wrong answer's tokens are pushed several times harder than a long
# wrong answer's. That is the length bias, exactly. Does it change what the policy learns here? The
# training runs, 3 seeds each:

# %%
loss_modes = {"token-mean (grpo)": runs["grpo"], "seq-mean-token-mean": runs["seq_mean_token_mean"],
              "Dr.GRPO": runs["dr_grpo"]}
plot_comparison(loss_modes, [("minirl/response_length/wrong_mean", "length of the wrong answers", "step"),
                             ("minirl/response_length/correct_mean", "length of the right answers", "step"),
                             ("minirl/acc/mean", "accuracy of the sampled answers", "step")])
print(compare_table(loss_modes, "minirl/response_length/wrong_mean"))
print(compare_table(loss_modes, "val-core/minirl/chain_sum/acc/mean@8"))

# %% [markdown]
# What we saw (3 seeds, 14 steps, in this run):
#
# - **The mechanism is there:** on the sampled batch above, `seq-mean-token-mean` pushes a short wrong
#   answer's tokens 5.78 times harder than a long wrong answer's; `token-mean` and Dr.GRPO's constant
#   treat them about the same (ratios 1.11 and 1.09; the small difference comes from the advantages).
# - **The training effect is not visible here.** The length of the wrong answers ends at 37.7 tokens on
#   average under `token-mean` (seeds 36.3-39.1), 38.4 under `seq-mean-token-mean` (seeds 37.8-38.8) and
#   36.6 under Dr.GRPO (seeds 35.7-38.5): the ranges overlap, so within noise. On this task a wrong answer's
#   length is set by its style (worked, about 40 tokens, or direct, 8) and every mode moves the policy to
#   the worked style at about the same pace (left panel). The length bias matters when an answer can grow
#   *within* a style, as a real model's reasoning can (the Dr.GRPO paper's long, repetitive wrong answers);
#   a 48-token budget and a task with one way to work leave no room for it.
# - Validation accuracy (`mean@8`) ends at 0.572 (token-mean, seeds 0.554-0.604), 0.596
#   (seq-mean-token-mean, seeds 0.569-0.619) and 0.599 (Dr.GRPO, seeds 0.531-0.646). The ranges overlap:
#   no aggregation mode is better than another beyond the seed spread here.
#
# ## 4. Clip-higher: does it keep the policy exploring?

# %%
clips = {"clip 0.2 / 0.2 (grpo)": runs["grpo"], "clip 0.2 / 0.28": runs["clip_higher"]}
plot_comparison(clips, [("actor/entropy", "entropy (per token)", "step"),
                        ("actor/pg_clipfrac", "share of tokens clipped", "step"),
                        ("minirl/acc/mean", "accuracy of the sampled answers", "step")])
print(compare_table(clips, "actor/entropy"))
for key in ("val-core/minirl/chain_sum/acc/mean@8", "val-core/minirl/chain_sum/acc/best@8/mean"):
    print(compare_table(clips, key))
for label, seeds_runs in clips.items():
    print(f"{label}: entropy first step {spread([curve(r, 'actor/entropy')[0] for r in seeds_runs])}, "
          f"last step {spread([curve(r, 'actor/entropy')[-1] for r in seeds_runs])}; "
          f"actor/pg_clipfrac mean over steps {spread([np.mean(curve(r, 'actor/pg_clipfrac')) for r in seeds_runs])}")

# %% [markdown]
# What we saw (3 seeds, 14 steps, in this run): the entropy collapses under both settings, from 0.162 (seeds
# 0.152-0.179) to 0.041 in 14 steps, and clip-higher changes none of the three beyond the seed spread: the
# last step's entropy (0.041, seeds 0.035-0.048, vs 0.041, seeds 0.034-0.048), `mean@8` (0.572, seeds
# 0.554-0.604, vs 0.608, seeds 0.552-0.665) and `best@8` (0.858, seeds 0.845-0.869, vs 0.878, seeds
# 0.845-0.942). The clip rarely binds here: averaged over the steps, 1.3% of the tokens meet the clip under
# 0.2 / 0.2 (seeds 1.2-1.4%) and 1.2% under 0.2 / 0.28 (seeds 1.0-1.3%) (`actor/pg_clipfrac`), so raising
# its upper edge has little to act on. Clip-higher matters when many tokens are clipped, that is when each batch is cut into many mini-batches (DAPO: 16
# per step) and the policy moves far within a step, on a model whose exploration is worth preserving.
# What this run does show is the problem DAPO names: entropy collapses fast under plain GRPO.
#
# ## 5. Dynamic sampling: every trained group carries a signal
#
# With `filter_groups`, the trainer drops the groups whose 8 answers are all right or all wrong and
# generates more prompts until 16 informative groups remain. `minirl/num_gen_batches` counts the
# generation rounds a step took. A step now costs more generation, so we count the answers *generated*
# and the seconds, not only the steps. One caution when reading the metrics: with the filter on,
# `critic/score/mean` and `minirl/acc/mean` describe the *filtered* batch, from which every all-right and
# every all-wrong group was removed; they are pulled toward the middle by construction and not comparable
# with plain GRPO's. Compare on validation.


# %%
def generated(records):
    """Cumulative answers generated up to each step (a dynamic-sampling step may take several rounds)."""
    return np.cumsum([r.get("minirl/num_gen_batches", 1) * PROMPTS * SAMPLES for r in records])


dynamic = {"grpo": runs["grpo"], "dynamic sampling": runs["dynamic_sampling"]}
plot_comparison(dynamic, [("minirl/zero_spread_group_frac", "trained groups with no signal", "step"),
                          ("timing_s/step", "seconds per step", "step"),
                          ("response_length/mean", "mean response length", "step")])
plot_comparison({"dynamic sampling": runs["dynamic_sampling"]},
                [("minirl/num_gen_batches", "generation rounds per step", "step"),
                 ("minirl/num_dropped_groups", "groups dropped per step", "step"),
                 ("minirl/acc/mean", "accuracy of the filtered batch", "step")])
for label, seeds_runs in dynamic.items():
    print(f"{label:18s} answers generated in {STEPS} steps: {np.mean([generated(r)[-1] for r in seeds_runs]):.0f}, "
          f"training seconds: {np.mean([sum(x['timing_s/step'] for x in r) for r in seeds_runs]):.1f}")
for key in ("val-core/minirl/chain_sum/acc/mean@8", "val-core/minirl/chain_sum/acc/best@8/mean"):
    print(compare_table(dynamic, key))
for label, seeds_runs in dynamic.items():
    print(f"{label:18s} trained groups with no signal at the last step: "
          f"{spread([curve(r, 'minirl/zero_spread_group_frac')[-1] for r in seeds_runs])}, generation rounds per "
          f"step: {spread([np.mean([x.get('minirl/num_gen_batches', 1) for x in r]) for r in seeds_runs])}")
seconds = {label: [sum(x["timing_s/step"] for x in r) for r in seeds_runs] for label, seeds_runs in dynamic.items()}
print("training seconds, dynamic sampling / grpo: "
      f"{np.mean(seconds['dynamic sampling']) / np.mean(seconds['grpo']):.2f}"
      f" (per seed: {spread(seconds['dynamic sampling'])} s against {spread(seconds['grpo'])} s)")

# %% [markdown]
# What we saw (3 seeds, 14 steps, in this run):
#
# - With the filter, no trained group is uninformative at the last step (0.000 in every seed, against 0.250
#   for plain GRPO, seeds 0.125-0.312), at the cost of 1.786 generation rounds per step on average (seeds
#   1.571-1.929): 3200 answers generated in 14 steps against 1792.
# - Here the extra generation is cheap: the training time of the 14 steps grows by a factor of 1.16 (16.2 s
#   against 14.0 s; seeds 14.3-17.2 s against 13.8-14.1 s, two runs at a time on an otherwise idle machine),
#   because 8 update passes per step cost more than generating 128 short answers. With long answers on a
#   real model, generation dominates and dynamic sampling roughly doubles the cost of a step.
# - Validation accuracy after 14 steps is within the seed spread: `mean@8` 0.580 (seeds 0.540-0.610)
#   against 0.572 (seeds 0.554-0.604), `best@8` 0.839 (seeds 0.824-0.868) against 0.858 (seeds
#   0.845-0.869). DAPO's own ablation credits dynamic sampling with 2 points of AIME accuracy (50% to 52%,
#   `docs/algo/dapo.md`) over thousands of steps; 14 steps of a tiny model cannot resolve an effect of that
#   size.
#
# ## 6. Overlong shaping, with a budget the worked answers exceed
#
# Now the response budget is 44 tokens (`data.max_response_length=44`): a 3-term worked answer (35-39
# tokens) fits, a 4-term one (42-48 tokens) often does not, and an answer cut off has no final answer
# (reward 0). `overlong_44` adds DAPO's penalty over the last 4 tokens of the budget (from 40 to 44 tokens,
# down to -1 at the limit).

# %%
overlong = {"budget 44 (grpo_44)": runs["grpo_44"], "budget 44 + overlong penalty": runs["overlong_44"]}
plot_comparison(overlong, [("response_length/clip_ratio", "answers at the limit (cut off)", "step"),
                           ("minirl/worked/mean", "share of worked answers", "step"),
                           ("minirl/acc/mean", "accuracy of the sampled answers", "step")])
for key in ("response_length/clip_ratio", "minirl/worked/mean", "minirl/acc/mean",
            "val-core/minirl/chain_sum/acc/mean@8"):
    print(compare_table(overlong, key))

# %% [markdown]
# What we saw (3 seeds, 14 steps, in this run; values at the last step):
#
# - The penalty does what it says: answers at the limit fall from 0.099 (seeds 0.070-0.133) to 0.008 (seeds
#   0.000-0.016), beyond the seed spread.
# - It does so by **dropping the reasoning**: the share of worked answers ends at 0.016 (seeds 0.000-0.031)
#   against 0.339 (seeds 0.219-0.547) without the penalty, also beyond the seed spread (middle panel: without
#   the penalty the share grows over the run, with it the share falls to almost none). Here the only way to
#   be short is to answer directly.
# - Accuracy does **not** fall beyond the seed spread in this run: 0.367 (seeds 0.359-0.383) against 0.383
#   (seeds 0.320-0.438) on the training samples, and 0.354 (seeds 0.342-0.373) against 0.395 (seeds
#   0.373-0.423) on validation (`mean@8`): lower on average, but the ranges touch, so within noise. A direct
#   answer is less often right on this task, so fewer worked answers should cost accuracy; here, where even
#   without the penalty only a minority of the answers end up worked (0.339), 14 steps and 3 seeds do not
#   resolve that cost.
#
# DAPO's setting differs in the one way that matters: its answers can be shortened without losing the
# reasoning (a long chain of thought has slack), and its budget (20480 tokens) is rarely reached, so the
# penalty trims rambling. When the needed reasoning does not fit the budget, the penalty teaches the
# model to stop reasoning. Check `minirl/overlong/mean` and the accuracy together, and raise the budget
# before adding the penalty if right answers are being cut off.
#
# ## 7. The full recipe vs plain GRPO, same budget
#
# `dapo_44` is the DAPO recipe on the 44-token budget: token-level loss (verl's default), clip-higher
# 0.28, dynamic sampling on `acc`, overlong shaping. `grpo_44` is plain GRPO with the same budget and the
# same number of steps (dynamic sampling generates more answers per step; the count is printed below).

# %% tags=["central-figure"]
recipe = {"grpo_44": runs["grpo_44"], "dapo_44": runs["dapo_44"]}
plot_comparison(recipe, [("minirl/acc/mean", "accuracy of the sampled answers", "step"),
                         ("response_length/mean", "mean response length", "step"),
                         ("actor/entropy", "entropy (per token)", "step")])
for key in ("minirl/acc/mean", "val-core/minirl/chain_sum/acc/mean@8", "val-core/minirl/chain_sum/acc/best@8/mean"):
    print(compare_table(recipe, key))
print("answers generated:", {label: int(np.mean([generated(r)[-1] for r in seeds_runs]))
                             for label, seeds_runs in recipe.items()})

# %% [markdown]
# What we saw (3 seeds, 14 steps, in this run): at this budget, the full recipe is **worse** on validation
# `mean@8`, 0.337 (seeds 0.304-0.358) against 0.395 (seeds 0.373-0.423), beyond the seed spread; on `best@8`
# it is within noise (0.734, seeds 0.665-0.816, against 0.776, seeds 0.721-0.814). It generated nearly twice
# the answers (3285 against 1792). Its higher accuracy on the training samples (0.479 against 0.383, within
# noise anyway) is not comparable: with dynamic sampling on, that metric describes the filtered batch
# (section 5). Sections 3-6 do not single out a cause: alone, no ingredient moved validation accuracy beyond
# the seed spread here, the overlong penalty came closest (section 6: 0.354 against 0.395, ranges touching),
# and the four together end lower. A recipe is a set of choices made for a setting (long
# answers with slack, large models, thousands of steps); this chapter's point is to test each choice in
# yours, with the metric that shows its purpose, before adopting the set.
#
# ## 8. verl ↔ minirl
#
# | | verl 0.9.1 | minirl |
# |---|---|---|
# | loss aggregation | `verl/trainer/ppo/core_algos.py::agg_loss` | `minirl/core.py::agg_loss` |
# | clip-higher | `core_algos.py::compute_policy_loss_vanilla` | `minirl/ppo.py::compute_policy_loss` |
# | Dr.GRPO's advantage | `core_algos.py::compute_grpo_outcome_advantage` (`norm_adv_by_std_in_grpo`) | `minirl/grpo.py::compute_grpo_outcome_advantage` |
# | overlong shaping | `verl/experimental/reward_loop/reward_manager/dapo.py::DAPORewardManager.run_single` (the older `verl/workers/reward_manager/dapo.py` has the same branch) | `minirl/dapo.py::compute_overlong_penalty`, `DAPORewardManager` |
# | dynamic sampling | `verl/trainer/ppo/v1/replay_buffer.py::ReplayBuffer._dapo_filtered_keys` (the v1 trainer; the legacy trainer has none, the DAPO recipe had `RayDAPOTrainer.fit`) | `minirl/dapo.py::filter_groups`, the loop in `minirl/trainer.py::PPOTrainer` |
#
# Which trainer: in verl 0.9.1 dynamic sampling lives in the default v1 trainer's replay buffer
# (`ReplayBuffer.sample`: it drops groups as they finish and asks for fresh prompts to replace them).
# The legacy `RayPPOTrainer.fit()` that minirl mirrors has no dynamic sampling; the DAPO recipe (now in
# the separate verl-recipe repository) had its own `RayDAPOTrainer.fit`, a loop of whole generation
# batches. minirl's legacy trainer keeps that loop (`filter_groups`, then generate again until the batch is
# full); minirl's v1 trainer (`trainer.use_v1=true`, [Chapter 12](12_v1_trainer.ipynb)) has the buffer. The two
# differ in their limit. The recipe's loop, and minirl's, stop with an error after
# `filter_groups.max_num_gen_batches` rounds. The v1 buffer ignores that key (it logs a warning that says
# so); its only limit is `filter_groups.max_inflight_gen_batches`, how many prompt batches (in units of
# `data.train_batch_size`) may be generating at once while it refills. That caps the extra generation in
# flight, not the total: v1 keeps refilling until enough groups with a spread have finished.
#
# | config key (verl 0.9.1 = minirl) | default | DAPO | meaning |
# |---|---|---|---|
# | `actor_rollout_ref.actor.loss_agg_mode` | `token-mean` | `token-mean` | how token losses become one number (section 2) |
# | `algorithm.norm_adv_by_std_in_grpo` | `True` | `True` | divide GRPO's advantage by the group std (Dr.GRPO: `False`) |
# | `actor_rollout_ref.actor.clip_ratio_low` / `clip_ratio_high` | `0.2` / `0.2` | `0.2` / `0.28` | the PPO clip below and above 1 |
# | `algorithm.filter_groups.enable` | `False` | `True` | dynamic sampling |
# | `algorithm.filter_groups.metric` | `reward` in 0.9.1 | `acc` | the per-answer value whose spread decides |
# | `algorithm.filter_groups.max_num_gen_batches` | `0` (no limit) | `10` | give up after this many generation rounds: the DAPO recipe's trainer and minirl's legacy trainer (verl 0.9.1's v1 buffer ignores it with a warning, and minirl's v1 refuses it; verl's legacy trainer has no dynamic sampling) |
# | `algorithm.filter_groups.max_inflight_gen_batches` | `1` | not set | v1 only: how many prompt batches (in `data.train_batch_size` units) may be generating at once while the buffer refills; it bounds concurrency, not the total (minirl's v1 applies it; its legacy trainer refuses a value other than 1) |
# | `reward.reward_manager.name` | `naive` | `dapo` | the manager that adds the overlong penalty |
# | `reward.reward_kwargs.overlong_buffer_cfg.enable`, `.len`, `.penalty_factor`, `.log` | absent | `True`, `4096`, `1.0`, `False` | the penalty zone and its depth (verl's scripts add them with `+`) |
# | `reward.reward_kwargs.max_resp_len` | absent | `data.max_response_length` | where the zone ends |
#
# | metric | meaning |
# |---|---|
# | `actor/entropy` | mean token entropy of the sampled answers (aggregated with `loss_agg_mode`) |
# | `actor/pg_clipfrac`, `actor/pg_clipfrac_lower` | share of tokens where the clip was active (either side) / where the dual clip was |
# | `response_length/clip_ratio` | share of answers whose length equals the budget |
# | `minirl/num_gen_batches`, `minirl/num_dropped_groups` | generation rounds per step and groups dropped (the DAPO recipe logged `train/num_gen_batches`) |
# | `minirl/zero_spread_group_frac` | share of the trained groups with no reward spread |
# | `minirl/overlong_reward/mean`, `minirl/overlong/mean` | the mean penalty and the share penalised (`overlong_buffer_cfg.log=True`) |
# | `minirl/response_length/wrong_mean`, `correct_mean` | lengths of wrong and right answers (minirl only) |
#
# verl's DAPO scripts (read in the repository at the v0.9.0 tag, as [the reading map](index.md#which-verl-this-book-reads)
# explains; for example the colocated 7B math script of its one-step-off-policy
# recipe) set clip-higher, the token-level loss and the overlong
# buffer together: `clip_ratio_high=0.28`, `loss_agg_mode=token-mean`, `reward.reward_manager.name=dapo`, a
# 4096-token buffer on an 8192-token budget. `docs/algo/dapo.md` shows the `filter_groups` block (`metric: acc`, `max_num_gen_batches: 10`).
#
# ## 9. Exercises
#
# Open `exercises/ch05_dapo.py` and grade with `make grade` (one exercise, all of its checks:
# `make grade EX=5.1`).
#
# | # | function | what it checks |
# |---|---|---|
# | 5.1 | `compute_overlong_penalty` | 0 before the zone, linear inside, `-penalty_factor` at the limit; never positive; bad buffers refused |
# | 5.2 | `filter_groups` | groups found by uid in any order, all-equal groups dropped exactly, singletons kept, row order kept |
#
# <details>
# <summary>Hint for 5.1</summary>
# <code>torch.clamp(x, max=0.0)</code> keeps the negative part; lengths may arrive as integers.
# </details>
#
# <details>
# <summary>Hint for 5.2</summary>
# A group has a spread when its maximum is larger than its minimum; map each uid to a group number first
# (<code>core.group_index</code> does it), then reduce per group.
# </details>
#
# **Failure-mode question.** Late in a run, every group of a batch is all right (8 of 8 correct). What
# does each ingredient do with that batch: the token-level loss, clip-higher, dynamic sampling,
# overlong shaping, and Dr.GRPO's advantage without the std?
#
# <details>
# <summary>Answer</summary>
# With a right/wrong reward, every advantage in the batch is 0 (GRPO subtracts the group mean: 1 - 1 = 0;
# Dr.GRPO's advantage is the same difference without the division). So the policy loss is 0 whatever the
# aggregation and the clip: the token-level loss and clip-higher weigh and bound a signal, and there is
# none. The step costs a full generation and changes nothing (a KL loss, if on, still pulls toward the
# reference). Dynamic sampling on `acc` drops all 16 groups and generates again until 16 informative
# groups exist; if the task has become too easy it may never find them. minirl (like the DAPO recipe's
# trainer) stops with an error after <code>filter_groups.max_num_gen_batches</code> rounds, if you set it;
# verl 0.9.1's v1 buffer ignores that key and only bounds how much it generates at once
# (<code>max_inflight_gen_batches</code>), so watch its refills. Either way, move to harder prompts. Overlong shaping is the one ingredient that can change the rewards themselves: right
# answers that enter the penalty zone get less than 1, so a group of 8 right answers of different lengths
# has a spread (in the reward, not in `acc`) and a signal toward shorter answers.
# </details>
#
# ### The library's code, after you tried

# %%
from IPython.display import display

for function in (dapo.compute_overlong_penalty, dapo.filter_groups):
    display(show_source(function, collapsed=True))

# %% [markdown]
# ## 10. Where next
#
# - [Lab D · The GRPO config, key by key](lab_d_grpo_config.ipynb): `loss_agg_mode` and
#   `norm_adv_by_std_in_grpo` in a whole verl config.
# - [Chapter 8 · DeepSeek-R1](08_r1.ipynb): the chain task, thinking that emerges, and verifiers.
# - [Chapter 4 · GRPO](04_grpo.ipynb): the group baseline these ingredients adjust.
# - [Chapter 1 · PPO](01_ppo.ipynb): the clipped objective clip-higher changes.
# - Back to [the reading map](index.md).
# - References: Yu et al. (2025), *DAPO: An Open-Source LLM Reinforcement Learning System at Scale*; Liu et
#   al. (2025), *Understanding R1-Zero-Like Training: A Critical Perspective* (Dr.GRPO); Shao et al. (2024),
#   *DeepSeekMath* (GRPO); verl's `docs/algo/dapo.md`.

# %%
print_run_time()
