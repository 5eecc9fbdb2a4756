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
# # Chapter 6 · DPO: preference optimisation with no rollout
#
# | The five answers | |
# |---|---|
# | **Problem** | RLHF with PPO (Chapter 3) needs a reward model, sampling during training, a critic or group advantages, a reference model and a KL term: many moving parts, each a source of bugs and cost. Can the policy learn from the comparisons directly? |
# | **Core formula** | $\mathcal{L}_{DPO} = -\log\sigma\Big(\beta\big[\log\frac{\pi_\theta(y_w\mid x)}{\pi_{\text{ref}}(y_w\mid x)} - \log\frac{\pi_\theta(y_l\mid x)}{\pi_{\text{ref}}(y_l\mid x)}\big]\Big)$ |
# | **Beginner's view** | For each prompt, make the chosen answer more likely *relative to the reference model* than the rejected one, and do not drift far from the reference. No judge model, no sampling: a supervised loss on pairs. |
# | **verl source** | None in the PPO trainer: DPO does not go through `RayPPOTrainer.fit()` (no rollout, no reward, no advantage). verl 0.9.1's wheel has no DPO loss; `docs/advance/dpo_extension.rst` shows how to write an online DPO with verl's single-controller API, and the SPIN recipe in the `recipe` submodule that verl's repository pins has an online DPO loss and trainer (`spin/core_algos.py::compute_online_dpo_loss`, `spin/spin_trainer.py::RaySPINTrainer`; section 7). The reference implementation for offline DPO is TRL's `DPOTrainer`, which `minirl/dpo.py` matches number for number. |
# | **Where next** | [Chapter 3 · InstructGPT](03_rlhf.ipynb) for the reward model and PPO this replaces; [Chapter 4 · GRPO](04_grpo.ipynb) for online RL with a verifiable reward instead of preferences; [Chapter 7 · RLOO / ReMax / REINFORCE++](07_baselines.ipynb) for online methods without a critic. Back to [the reading map](index.md). |
#
# Run time: 4.7 minutes in the run shown here, on 2 CPU cores, run alone (a
# reward model and three PPO runs to compare with, DPO runs with three seeds, a beta sweep; the first
# output names the machine, the last prints the run time). With `MINIRL_FAST=1` everything shrinks.

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from minirl import data, dpo, models, preference, reward_model
from minirl.book.notebook import fast_mode, print_run_time, seeds, show_source, where_this_ran
from minirl.evaluate import evaluate_against_reference, measure_policy
from minirl.trainer import train

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "ch06"
TASK = preference.default_preference_task()  # Chapter 3's comparisons (cached)
WARM = preference.warm_start_of(TASK)        # the SFT model: DPO's starting point and its reference
RESPONSE_LENGTH = preference.PreferenceConfig().response_length
test_rows = data.read_parquet(WARM / "data" / "test.parquet").to_list()[: 40 if fast_mode() else 200]
reference, tokenizer = models.load_policy(WARM), models.load_tokenizer(WARM)
sft = measure_policy(reference, reference, tokenizer, test_rows, RESPONSE_LENGTH)
print(f"SFT model on {len(test_rows)} held-out prompts (sampled answers): gold {sft['gold']:.3f}, "
      f"{sft['response_length']:.1f} tokens per answer")

# %% [markdown]
# ## 1. The problem: everything PPO needed
#
# Chapter 3's stage 3 ran, at every step: sampling ($16 \times 8$ answers), the reward model on each,
# the reference model for the KL, a critic for GAE, then the policy and critic updates. Four models in
# memory, and the reward model's blind spots to guard against. DPO (Rafailov et al., 2023) needs the
# policy and the reference, and the reference's log-probs of the pairs can be computed once before
# training. The data are the same comparisons as in Chapter 3: two answers of the SFT model per
# prompt, labelled by a noisy Bradley-Terry draw from the hidden gold reward, with a flaw: the longer
# (worked) answer tends to win (Chapter 3, section 1, measures the lean; it is slight in this run). The
# SFT model is weak in this run: 0.225 of its sampled answers to the held-out prompts are right (the
# first output), so most pairs are two wrong answers, and a coin decides their label.
#
# ## 2. The formula, derived in four lines
#
# Start from Chapter 3's objective, a reward $r$ and a KL leash to the reference:
#
# $$\max_\pi\; \mathbb{E}_{y \sim \pi(\cdot\mid x)}\big[r(x, y)\big] - \beta\,\mathrm{KL}\big(\pi(\cdot\mid x)\,\Vert\,\pi_{\text{ref}}(\cdot\mid x)\big).$$
#
# 1. Its maximiser has a closed form: $\pi^*(y\mid x) = \frac{1}{Z(x)}\,\pi_{\text{ref}}(y\mid x)\, e^{r(x, y)/\beta}$, with $Z(x)$ the normaliser.
# 2. Solve for the reward: $r(x, y) = \beta \log\frac{\pi^*(y\mid x)}{\pi_{\text{ref}}(y\mid x)} + \beta\log Z(x)$.
# 3. Put it into the Bradley-Terry model of the comparisons: $P(y_w \succ y_l) = \sigma\big(r(x, y_w) - r(x, y_l)\big)$. The $\beta\log Z(x)$ terms cancel, because both answers share the prompt.
# 4. Fit $\pi_\theta$ in place of $\pi^*$ by maximum likelihood of the labels: that is $\mathcal{L}_{DPO}$ above.
#
# So DPO fits the reward model and the policy at once: the policy *is* the reward model, with the
# **implicit reward** $\hat r(x, y) = \beta \log\frac{\pi_\theta(y\mid x)}{\pi_{\text{ref}}(y\mid x)}$. TRL logs it as
# `rewards/chosen` and `rewards/rejected`; their difference is `rewards/margins`, and `rewards/accuracies`
# is the share of pairs where the chosen answer's implicit reward is higher.
#
# Variants, by TRL's `loss_type` (with $h = \hat r_w/\beta - \hat r_l/\beta$, $s$ = `label_smoothing`):
#
# | `loss_type` | per-pair loss | idea |
# |---|---|---|
# | `sigmoid` | $-\log\sigma(\beta h)$ | DPO |
# | `sigmoid`, $s > 0$ | $-(1-s)\log\sigma(\beta h) - s\log\sigma(-\beta h)$ | cDPO: labels flipped with probability $s$, so the loss has a finite optimum (TRL 1.16 ignores $s$ here; minirl keeps cDPO, see `minirl/README.md`) |
# | `robust` | $\frac{-(1-s)\log\sigma(\beta h) + s\log\sigma(-\beta h)}{1 - 2s}$ | rDPO: unbiased under label flips |
# | `ipo` | $\big(\frac{h_w}{\lvert y_w\rvert} - \frac{h_l}{\lvert y_l\rvert} - \frac{1}{2\beta}\big)^2$ | IPO: a squared loss toward a fixed margin, per-token log-ratios (TRL's normalisation) |
#
# ## 3. A toy you can check by hand
#
# When the policy equals the reference, $h = 0$ and every pair's loss is $\log 2 = 0.693$. Move the
# policy so that the chosen answer gains one nat and the rejected one loses one: $h = 2$, and with
# $\beta = 0.5$ the loss is $-\log\sigma(1) = 0.313$.

# %%
one = torch.tensor
same = dpo.dpo_loss(one([-5.0]), one([-7.0]), one([-5.0]), one([-7.0]), beta=0.5)[0]
moved, chosen_reward, rejected_reward = dpo.dpo_loss(one([-4.0]), one([-8.0]), one([-5.0]), one([-7.0]), beta=0.5)
print(f"policy = reference: {same.item():.3f}   moved: {moved.item():.3f}   implicit rewards: "
      f"chosen {chosen_reward.item():+.2f}, rejected {rejected_reward.item():+.2f}")

# %% [markdown]
# ## 4. Training: `python -m minirl dpo`
#
# `minirl/dpo.py::train_dpo` is the offline trainer behind `python -m minirl dpo`: the reference's
# log-probs of every pair are computed once (TRL's `precompute_ref_log_probs`), then each step takes
# 64 pairs, runs chosen and rejected answers through the policy in one forward pass, and logs TRL's
# metrics. It runs through accelerate like the RL trainer. Here: $\beta = 0.1$, learning rate 1e-4,
# 3 epochs over the 1863 training pairs (30 steps an epoch, 90 in all), 3 seeds (the seed changes the
# order of the pairs). Every 24 steps, and at the end, the policy answers the 200 held-out prompts, and
# the gold reward and the KL to the SFT model (per answer) are measured on those answers; step 24 is the
# evaluation nearest to one epoch.

# %% tags=["central-figure"]
EPOCHS = 1 if fast_mode() else 3
EVAL_STEPS = 2 if fast_mode() else 24


def gold_and_kl(model, step):
    # What the hidden "human" thinks of the policy's own answers, and how far it moved.
    measured = measure_policy(model, reference, tokenizer, test_rows, RESPONSE_LENGTH)
    return {"gold": measured["gold"], "kl": measured["kl"], "length": measured["response_length"],
            "own_logp": measured["logp"]}


PAIRS = TASK / "pairs_train.parquet"
if fast_mode():  # a few steps on 256 pairs: the reference log-probs of all 1585 would dominate
    PAIRS = data.write_parquet(data.read_parquet(PAIRS, ("prompt",)).to_list()[:256], RUNS / "pairs_256.parquet")


def run_dpo(name, seed, **config):
    settings = dict(output_dir=str(RUNS / name / f"seed{seed}"), seed=seed, progress_bar=False, train_files=str(PAIRS),
                    eval_steps=EVAL_STEPS, max_steps=4 if fast_mode() else -1) | config
    return dpo.train_dpo(dpo.DPOConfig(**settings), on_evaluate=gold_and_kl)["history"]


main = {seed: run_dpo("beta0.1", seed, beta=0.1, num_train_epochs=EPOCHS) for seed in seeds()}
reference_logps = dpo.pair_log_probs(reference, dpo.encode_preference_pairs(
    tokenizer, data.read_preference_pairs(TASK / "pairs_test.parquet", "test"), 128)).chunk(2)
start = {"eval_logps/chosen": reference_logps[0].mean().item(), "eval_logps/rejected": reference_logps[1].mean().item()}
panels = [("rewards/margins", "rewards/margins (training)"), ("eval_rewards/accuracies", "eval_rewards/accuracies"),
          ("eval_logps/chosen", "held-out logps: chosen, rejected (--)"), ("gold", "gold of the policy's answers")]
fig, axes = plt.subplots(1, 4, figsize=(15, 3.3))
for ax, (key, title) in zip(axes, panels):
    for seed, history in main.items():
        records = [{"step": 0, **start}] + history if key == "eval_logps/chosen" else history
        points = [(r["step"], r[key]) for r in records if key in r]
        line, = ax.plot(*zip(*points), marker="o", markersize=3, label=f"seed {seed}")
        if key == "eval_logps/chosen":
            points = [(r["step"], r["eval_logps/rejected"]) for r in records if "eval_logps/rejected" in r]
            ax.plot(*zip(*points), linestyle="--", color=line.get_color())
    ax.set(title=title, xlabel="step")
    ax.grid(alpha=0.3)
axes[-1].axhline(sft["gold"], color="grey", linestyle=":", label="SFT model")
axes[-1].legend(fontsize=7)
plt.tight_layout()
plt.show()
print(f"held-out pairs under the SFT model: logps/chosen {start['eval_logps/chosen']:.2f}, "
      f"logps/rejected {start['eval_logps/rejected']:.2f}")
for seed, history in main.items():
    evals = [r for r in history if "gold" in r]
    best = max(evals, key=lambda r: r["gold"])
    print(f"seed {seed}: gold {evals[0]['gold']:.3f} at step 0, best {best['gold']:.3f} at step {best['step']}, "
          f"{evals[-1]['gold']:.3f} at step {evals[-1]['step']} (KL {evals[-1]['kl']:.2f}, "
          f"{evals[-1]['length']:.1f} tokens); eval_logps/chosen {evals[-1]['eval_logps/chosen']:.2f}, "
          f"eval_logps/rejected {evals[-1]['eval_logps/rejected']:.2f}, margin "
          f"{evals[-1]['eval_rewards/margins']:.3f}")
for seed, history in main.items():
    trained = [r for r in history if "loss" in r]
    per_epoch = max(1, len(trained) // EPOCHS)
    margins = [np.mean([r["rewards/margins"] for r in trained[e * per_epoch:(e + 1) * per_epoch]])
               for e in range(EPOCHS)]
    held_out = [f"{r['eval_rewards/accuracies']:.3f} (step {r['step']})" for r in history
                if "eval_rewards/accuracies" in r]
    print(f"seed {seed}: training rewards/margins, mean per epoch: {', '.join(f'{m:.2f}' for m in margins)}; "
          f"held-out eval_rewards/accuracies: {', '.join(held_out)}")

# %% [markdown]
# What the curves show in this run (3 seeds; the printouts are this run's numbers):
#
# - **The gold reward rises a little, then falls back.** Every seed's best evaluation scores 0.280
#   (step 24 for seeds 0 and 2, step 48 for seed 1), against the SFT model's 0.225, with no reward
#   model and no sampling during training. The best of four evaluations flatters: at a fixed step the
#   gain is within noise (section 5).
# - **Likelihood displacement** (Razin et al., 2024). The training margin grows all along (its mean per
#   epoch is 0.00, then 0.05-0.07, then 0.11 in every seed), while the held-out one ends barely above
#   zero (0.006-0.017). Yet *both* held-out log-probs fall from the first evaluation on: the chosen
#   answers go from -3.53 under the SFT model to -4.96 to -5.04, the rejected ones from -4.07 to -5.63
#   to -5.69. DPO only constrains the difference; the probability went to answers that were in no pair.
#   Here that is partly what we want (the policy moves toward worked answers in general, not toward
#   these exact strings) and partly not (the next point).
# - **Training longer fits the training pairs, not the held-out ones.** The training margins keep
#   growing, but the held-out accuracy stays near a coin's, 0.476 to 0.565 over all evaluations and
#   0.518-0.534 at the end (most held-out pairs are two right or two wrong answers, labelled by a coin:
#   Chapter 3, section 3). The KL keeps growing: 0.46 (seeds 0.38-0.55) at step 24, 1.79 (1.69-1.84)
#   after three epochs. The gold after three epochs, 0.240 (seeds 0.230-0.250), is below the 0.267 (0.240-0.280) at
#   step 24, but not in every seed (-0.040, +0.010, -0.050), and by less than one standard error
#   (0.035, below): within noise. The growing KL is the clear part. `rewards/accuracies` on the training
#   batches says nothing about either.
# - **The answers get longer.** From 30.2 tokens (SFT model) to 31.3 at step 24 and 33.6 (seeds
#   33.4-33.7) after three epochs: the comparisons lean toward worked answers (Chapter 3, section 1),
#   and DPO fits that lean as the reward model does (reward model + PPO: 34.9 tokens, section 5).
#
# ## 5. The experiment: SFT, reward model + PPO, and DPO on the same comparisons
#
# Reward model + PPO is Chapter 3's stage 3 with its leash, $\beta = 0.05$, 20 steps (PPO with GAE, the
# critic from the reward model), 3 seeds. DPO is the run above, after about one epoch (the evaluation
# at step 24) and after three. All are measured the same way: 200 held-out prompts, one sampled answer each, gold
# reward and KL to the SFT model per answer.

# %%
rm_dir = RUNS / "reward_model"
reward_model.train_reward_model(reward_model.RewardModelConfig(
    output_dir=str(rm_dir), num_train_epochs=4, progress_bar=False, max_steps=5 if fast_mode() else -1))
PPO_STEPS = 2 if fast_mode() else 20
ppo = {}
for seed in seeds():
    run_dir = RUNS / "ppo" / f"seed{seed}"
    train([f"trainer.default_local_dir={run_dir}", f"trainer.total_training_steps={PPO_STEPS}",
           f"trainer.save_freq={PPO_STEPS}", "trainer.test_freq=-1", "trainer.val_before_train=False",
           "trainer.resume_mode=disable", "trainer.logger=[]",
           *preference.ppo_overrides(rm_dir, kl_coef=0.05), f"data.seed={seed}"], show_progress=False)
    ppo[seed] = evaluate_against_reference(run_dir / f"global_step_{PPO_STEPS}" / "actor", WARM, test_rows,
                                           RESPONSE_LENGTH, seed=seed)


def at_step(history, step):
    # the evaluation record nearest to `step`
    return min((r for r in history if "gold" in r), key=lambda r: abs(r["step"] - step))


one_epoch = len([r for r in main[seeds()[0]] if "loss" in r]) // EPOCHS
one_epoch_step = at_step(main[seeds()[0]], one_epoch)["step"]  # the evaluation nearest to one epoch
rows = {"SFT model": [sft],
        f"RM + PPO, beta 0.05, {PPO_STEPS} steps": list(ppo.values()),
        f"DPO, beta 0.1, 1 epoch (step {one_epoch_step})":
            [at_step(h, one_epoch_step) | {"response_length": at_step(h, one_epoch_step)["length"]}
             for h in main.values()],
        f"DPO, beta 0.1, {EPOCHS} epochs": [[r for r in h if "gold" in r][-1] | {"response_length": [
            r for r in h if "gold" in r][-1]["length"]} for h in main.values()]}
print(f"{'':36s} {'gold mean':>9s} {'(min-max)':>13s} {'KL mean':>8s} {'(min-max)':>13s} {'tokens':>7s}")
for name, measured in rows.items():
    gold, kls = [m["gold"] for m in measured], [m["kl"] for m in measured]
    print(f"{name:36s} {np.mean(gold):9.3f} ({min(gold):.3f}-{max(gold):.3f}) {np.mean(kls):8.2f} "
          f"({min(kls):5.2f}-{max(kls):5.2f}) {np.mean([m['response_length'] for m in measured]):7.1f}")
se = (0.5 * 0.5 / len(test_rows)) ** 0.5  # binomial standard error of a share near 0.5
print(f"standard error of one gold number on {len(test_rows)} answers (at 0.5): {se:.3f}; two standard errors: "
      f"{2 * se:.3f}")
gold_mean = {name: np.mean([m["gold"] for m in measured]) for name, measured in rows.items()}
sft_name, ppo_name, dpo_name = list(rows)[:3]
for a, b in ((ppo_name, sft_name), (dpo_name, sft_name), (dpo_name, ppo_name)):
    print(f"gold, {a} minus {b}: {gold_mean[a] - gold_mean[b]:+.3f} ({(gold_mean[a] - gold_mean[b]) / se:+.1f} "
          f"standard errors)")
for seed, history in main.items():
    one, last = at_step(history, one_epoch_step), [r for r in history if "gold" in r][-1]
    print(f"seed {seed}: DPO gold after one epoch {one['gold']:.3f}, after {EPOCHS} epochs {last['gold']:.3f} "
          f"({last['gold'] - one['gold']:+.3f})")

# %% [markdown]
# **How precise these numbers are.** Each gold number is the share of right answers among 200 sampled
# answers, so it carries a binomial standard error of about $\sqrt{0.5 \cdot 0.5 / 200} \approx 0.035$
# on top of the seed spread (every policy is evaluated on the same prompts with the same sampling seed,
# which is why seeds can agree exactly: seeds 0 and 2 of DPO both score 0.280 at step 24). Only
# differences of about two standard errors (0.07) or more are claimed below.
#
# **What this comparison shows, and what it does not.** In this run neither method moves the gold
# beyond the noise. After one epoch DPO scores 0.267 (seeds 0.240-0.280) against the SFT model's 0.225:
# +0.042, 1.2 standard errors. Reward model + PPO scores 0.277 (seeds 0.265-0.285): +0.052, 1.5
# standard errors. DPO minus PPO is -0.010 (-0.3 standard errors): the two are within noise of each
# other. Every seed of both ends above the SFT model, so a small gain is likely, but this run does not
# establish it. What does differ beyond the seed spread is the distance: after one epoch DPO is 0.46
# nats per answer from the SFT model (seeds 0.38-0.55), PPO 0.89 (0.70-1.00), and DPO after three
# epochs 1.79 (1.69-1.84), for no more gold (0.240, seeds 0.230-0.250). What DPO gained, it gained
# from the comparisons alone: no reward model and no sampling during training.
#
# It does **not** show that one method is better in general: one tiny model, one task, one budget, and
# hyperparameters (PPO's learning rate, steps and $\beta$, DPO's $\beta$ and epochs) that were not tuned
# for each. Here the SFT model is weak, so most comparisons are two wrong answers decided by a coin,
# and both methods learn from little signal. The SFT warm start itself changes with the seed and the
# CPU (`minirl/README.md`, "The same seed on another CPU"), and this comparison changes with it.
# Chapter 3 shows the reward model's own errors, which PPO inherits and DPO, fitting the labels
# directly, does not. Published comparisons disagree for the same reasons (Xu et al., 2024, "Is DPO
# Superior to PPO for LLM Alignment?").
#
# ## 6. Known failure modes, shown
#
# **The beta sweep.** $\beta$ is DPO's leash, as in Chapter 3: it sets how far the implicit reward may
# pull from the reference. One epoch (the main run's step-24 evaluation; 24 steps for the others) at
# $\beta \in \{0.03, 0.1, 0.3\}$, 3 seeds each:

# %%
sweep = {0.1: main}
for beta in (0.03, 0.3):
    sweep[beta] = {seed: run_dpo(f"beta{beta}", seed, beta=beta, max_steps=one_epoch_step, eval_steps=-1)
                   for seed in seeds()}
fig, ax = plt.subplots(figsize=(5.5, 3.5))
for beta, histories in sorted(sweep.items()):
    finals = [at_step(h, one_epoch_step) for h in histories.values()]
    ax.scatter([f["kl"] for f in finals], [f["gold"] for f in finals], label=f"beta={beta}", s=25)
    golds, kls = [f["gold"] for f in finals], [f["kl"] for f in finals]
    print(f"beta={beta}: gold {np.mean(golds):.3f} ({min(golds):.3f}-{max(golds):.3f}), KL {np.mean(kls):.2f} "
          f"({min(kls):.2f}-{max(kls):.2f}) after one epoch")
for seed in seeds():
    print(f"seed {seed}: gold after one epoch at beta 0.03, 0.1, 0.3: "
          + ", ".join(f"{at_step(sweep[beta][seed], one_epoch_step)['gold']:.3f}" for beta in (0.03, 0.1, 0.3)))
sweep_gold = {beta: np.mean([at_step(h, one_epoch_step)["gold"] for h in histories.values()])
              for beta, histories in sweep.items()}
for a, b in ((0.3, 0.1), (0.1, 0.03), (0.3, 0.03)):
    print(f"gold, beta={a} minus beta={b}: {sweep_gold[a] - sweep_gold[b]:+.3f} "
          f"({(sweep_gold[a] - sweep_gold[b]) / se:+.1f} standard errors)")
ax.scatter([0], [sft["gold"]], color="grey", label="SFT model", s=25)
ax.set(xlabel="KL(policy || SFT) per answer", ylabel="gold reward", title="DPO after one epoch, by beta")
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# In this run $\beta$ changed the distance, not the gold. Smaller $\beta$ moved the policy further from
# the SFT model: KL 0.31 (seeds 0.24-0.40) for $\beta = 0.3$, 0.46 (0.38-0.55) for $\beta = 0.1$, 0.74
# (0.44-1.04) for $\beta = 0.03$ nats per answer; only the two ends are apart beyond the seed spread.
# The gold is the same within noise: 0.263 (0.245-0.290), 0.267 (0.240-0.280) and 0.258 (0.240-0.285),
# pairwise differences of 0.1 to 0.2 standard errors, and no ordering holds across seeds (seed 0 does
# best at $\beta = 0.3$, seed 2 at $\beta = 0.03$). The extra distance bought no measurable gold. Which
# $\beta$ is best depends on the data, the learning rate and the number of epochs: sweep it, and judge
# by held-out answers, not by the training margins.
#
# **Offline data, a moving policy.** The pairs were sampled from the SFT model. As DPO trains, the
# policy writes answers of its own that are not in any pair. Compare, at the end of the main runs, the
# log-probability the policy gives its own answers with the one it gives the pairs' chosen answers:

# %%
for seed, history in main.items():
    first, last = [r for r in history if "gold" in r][0], [r for r in history if "gold" in r][-1]
    print(f"seed {seed}: own answers log pi(y): {first['own_logp']:.2f} -> {last['own_logp']:.2f};   "
          f"held-out chosen answers: {reference_logps[0].mean():.2f} -> {last['eval_logps/chosen']:.2f}")

# %% [markdown]
# At the start the pairs are the policy's own kind of answer: its own answers have a log-probability
# of -3.63, the held-out chosen answers -3.53. After three epochs its own answers keep about the same
# (-3.64 to -3.74), while the pairs' chosen answers have fallen to -4.96 to -5.04, more than a nat below:
# the comparisons describe a policy that no longer exists, and nothing tells DPO where its new answers
# go wrong. Online and iterative DPO (sample new pairs from the current policy, label them, train again;
# `docs/advance/dpo_extension.rst` builds that loop with verl's workers) and RLHF with a reward model
# both collect judgements on the policy's *current* answers.
#
# ## 7. Where DPO sits relative to verl
#
# The reading map says DPO does not go through `RayPPOTrainer.fit()`. Precisely, for verl 0.9.1:
#
# - The installed package (the wheel) has no DPO loss and no DPO trainer: `verl/trainer/ppo/core_algos.py`
#   holds PPO-family policy losses and advantage estimators only (its `gdpo` is an advantage estimator, not
#   DPO).
# - `docs/advance/dpo_extension.rst` (last updated February 2025) is a tutorial: it writes an *online*
#   DPO with verl's single-controller API (a sample generator, a reference, a DPO actor as Ray worker
#   groups) as an example of extending verl, not a shipped trainer.
# - **The SPIN recipe has an online DPO trainer.** verl's git repository pins a `recipe` submodule
#   (`verl-project/verl-recipe`; at the v0.9.0 tag, commit `e7f8895`, the same as at v0.8.0), documented in
#   `docs/algo/spin.md`. Its `spin/core_algos.py::compute_online_dpo_loss` has `loss_type` `sigmoid` with
#   `label_smoothing`, the same cDPO formula as minirl's `sigmoid`, and `ipo`, on summed log-probs (TRL and
#   minirl divide IPO's log-ratios by the answer's length). `spin/spin_trainer.py::RaySPINTrainer` samples two
#   answers per prompt, picks the chosen one with a reward function (`compute_onlinedpo_pref`), and updates
#   the actor with that loss against a reference that can be refreshed from the actor. What we checked: that
#   code, at the pinned commit. We did not run it. It imports verl's old actor package and FSDP-worker module,
#   which the 0.9.1 wheel no longer has (their successor is `verl/workers/engine_workers.py`), and its
#   `spin/REQUIRED_VERL.txt` names an older verl commit to install.
# - Offline DPO, on a fixed set of pairs as in this chapter, is done with TRL (or OpenRLHF); minirl's
#   `python -m minirl dpo` follows TRL's loss and metric names, checked by the parity tests in
#   `tests/parity_trl/`.
#
# | | TRL 1.16 | minirl |
# |---|---|---|
# | loss | `trl/trainer/dpo_trainer.py::DPOTrainer._compute_loss` (`loss_type` sigmoid, robust, ipo, and more) | `minirl/dpo.py::dpo_loss` (sigmoid with cDPO, robust, ipo) |
# | metrics | `rewards/chosen`, `rewards/rejected`, `rewards/accuracies`, `rewards/margins`, `logps/chosen`, `logps/rejected`; `eval_` prefix on held-out data | `minirl/dpo.py::dpo_metrics` (the same names) |
# | reference | `precompute_ref_log_probs=True` | always precomputed (`minirl/dpo.py::pair_log_probs`) |
# | config | `beta` (0.1), `loss_type`, `label_smoothing`, `learning_rate` (1e-6), `num_train_epochs`, `per_device_train_batch_size` | `DPOConfig`, the same names (learning rate 1e-4 for the tiny model) |
#
# ## 8. Exercises
#
# Open `exercises/ch06_dpo.py` and grade with `make grade` (one exercise, all of its checks:
# `make grade EX=6.1`).
#
# | # | function | what it checks |
# |---|---|---|
# | 6.1 | `dpo_loss` | log 2 at the reference, by hand, cDPO's label smoothing, against TRL's formula; detached rewards; stability |
# | 6.2 | `implicit_reward_metrics` | TRL's six metric names and values, ties, a likelihood-displacement batch |
#
# <details>
# <summary>Hint for 6.1</summary>
# Work with log-ratios: <code>h = (pc - rc) - (pr - rr)</code>, then <code>F.logsigmoid(beta * h)</code>.
# </details>
#
# <details>
# <summary>Hint for 6.2</summary>
# The implicit rewards are <code>beta * (policy - reference)</code> per answer; every metric is a batch mean
# (accuracy: of the booleans <code>chosen &gt; rejected</code>).
# </details>
#
# **Failure-mode question.** Your DPO run shows `rewards/accuracies` = 1.0 and a growing
# `rewards/margins`, yet the model's answers got worse than the SFT model's. How can both be true, and
# what do you look at?
#
# <details>
# <summary>Answer</summary>
# <code>rewards/accuracies</code> on training batches only says the policy separates the pairs it was
# trained on; with enough epochs it memorises them (section 4: the training margin keeps rising while
# the held-out accuracy stays near a coin's). The margin can grow while both log-probs fall (likelihood
# displacement), so the probability goes to answers that were in no pair, possibly worse ones. Look at
# the held-out pairs (<code>eval_rewards/accuracies</code>, <code>eval_logps/chosen</code>), at
# <code>logps/chosen</code> falling, and above all at an evaluation of the policy's own answers (a judge,
# people, or a verifier, like the gold here). Then train fewer epochs, raise <code>beta</code>, or sample
# new pairs from the current policy.
# </details>
#
# ### The library's code, after you tried

# %%
from IPython.display import display

for function in (dpo.dpo_loss, dpo.dpo_metrics):
    display(show_source(function, collapsed=True))

# %% [markdown]
# ## 9. Where next
#
# - [Chapter 3 · InstructGPT](03_rlhf.ipynb): the reward model and PPO with the KL leash, on the same data.
# - [Chapter 4 · GRPO](04_grpo.ipynb): online RL with a verifiable reward instead of preferences.
# - [Chapter 7 · RLOO / ReMax / REINFORCE++](07_baselines.ipynb): online methods without a critic.
# - References: Rafailov et al. (2023), *Direct Preference Optimization*; Azar et al. (2023), *A General
#   Theoretical Paradigm to Understand Learning from Human Preferences* (IPO); Mitchell (2023), *A note on
#   DPO with noisy preferences* (cDPO); Chowdhury et al. (2024), *Provably Robust DPO*; Razin et al. (2024),
#   *Unintentional Unalignment: Likelihood Displacement in Direct Preference Optimization*; Xu et al.
#   (2024), *Is DPO Superior to PPO for LLM Alignment?*

# %%
print_run_time()
