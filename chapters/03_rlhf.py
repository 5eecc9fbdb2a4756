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
# # Chapter 3 · InstructGPT: SFT → reward model → PPO with a KL leash
#
# | The five answers | |
# |---|---|
# | **Problem** | A pretrained model continues text; it does not follow instructions the way people want. People cannot write a reward function for "helpful", but they can compare two answers. InstructGPT chains three stages: imitate demonstrations (SFT), learn a reward model from comparisons, then optimise the policy against that reward model with PPO, with a KL term that keeps it near the SFT model. |
# | **Core formula** | Reward model (Bradley-Terry): $\mathcal{L}_{RM} = -\log\sigma\big(r(x, y_w) - r(x, y_l)\big)$. PPO's reward: $R(x, y) = r(x, y) - \beta\,\mathrm{KL}\big(\pi(\cdot\mid x)\,\Vert\,\pi_{\text{ref}}(\cdot\mid x)\big)$, paid per token in verl: $r_t = \text{score}_t - \beta\,\mathrm{kl}_t$. |
# | **Beginner's view** | First teach a judge what people like, then let the model write answers and have the judge grade them. The judge is only a model of people, so a student who studies the judge instead of the subject finds its blind spots. The KL term is a leash: stay close to how you answered before. |
# | **verl source** | `verl/trainer/ppo/ray_trainer.py::apply_kl_penalty` ($r_t = \text{score}_t - \beta\,\mathrm{kl}_t$); `verl/trainer/ppo/core_algos.py::kl_penalty` (`kl`, `abs`, `mse`, `low_var_kl`, `full`), `FixedKLController`, `AdaptiveKLController`; the reward model in `verl/experimental/reward_loop/reward_loop.py::RewardLoopWorker.compute_score_disrm`; `docs/examples/config.rst` (`algorithm.use_kl_in_reward` vs `actor_rollout_ref.actor.use_kl_loss`); `examples/grpo_trainer/run_mistral_nemo_12b_skyworkrm_fsdp.sh` (a run scored by a reward model). |
# | **Where next** | [Chapter 6 · DPO](06_dpo.ipynb): the same comparisons, no reward model and no rollout; [Chapter 4 · GRPO](04_grpo.ipynb): the KL as a loss term instead of a reward term; [Lab B · Writing reward functions](lab_b_rewards.ipynb) and the KL part of [Lab C · Reading the debug metrics](lab_c_metrics.ipynb). Back to [the reading map](index.md). |
#
# Run time: 4.2 minutes in the run shown here, on 2 CPU cores (a reward model, a numeric experiment, nine
# short PPO runs; the first output names the machine, the last prints the run time). With `MINIRL_FAST=1`
# everything shrinks.

# %%
import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from minirl import data, kl, models, preference, reward_model
from minirl.book.notebook import (
    compare_table,
    fast_mode,
    plot_comparison,
    print_run_time,
    run_seeds,
    seeds,
    show_source,
    where_this_ran,
)
from minirl.evaluate import measure_policy
from minirl.plot import load_metrics
from minirl.trainer import train

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "ch03"
TASK = preference.default_preference_task()  # built once (about 2 minutes), then cached like the warm start
WARM = preference.warm_start_of(TASK)        # the SFT model: stage 1, done
RESPONSE_LENGTH = preference.PreferenceConfig().response_length
print(json.dumps(json.loads((TASK / "preference.json").read_text())["train"], indent=1))

# %% [markdown]
# ## 1. The problem, shown: a preference task whose "human" we can read
#
# RLHF's risk is that the policy optimises a *learned* stand-in for what people want. To measure the
# cost we need a task where what people want is known exactly. `minirl/preference.py` builds one on
# the tiny arithmetic prompts:
#
# - **The policy (stage 1, SFT).** Its demonstrations are half *direct* answers (`12+19=31 #### 31`)
#   and half *worked* answers that add tens and units first (`12+19: 10+10=20, 2+9=11, 20+11=31 #### 31`).
#   40% of both kinds are wrong. Both styles are in the SFT model.
# - **The gold reward** (the hidden "human"): 1 if the final answer is right, else 0. Working earns
#   nothing by itself.
# - **The comparisons.** Two answers sampled from the SFT model per prompt. The label is a
#   Bradley-Terry draw from the gold reward: a right answer beats a wrong one with probability
#   $\sigma(1/0.5) = 0.88$; two right (or two wrong) answers are a coin flip. Labels are noisy, as
#   human labels are.
#
# The comparisons are in TRL's preference layout (`prompt`, `chosen`, `rejected`), the hidden gold
# beside them for our analysis only. The printout above: of the 1863 training pairs, 590 have one
# right and one wrong answer, and there the label agrees with the gold in 0.86 of them. The SFT model
# is weak in this run: 0.19 of its answers in the pairs are right (`gold_mean`), so most pairs are two
# wrong answers, labelled by a coin.
#
# The premise, measured on the SFT model's own answers in these pairs: does working pay?

# %%
pairs = data.read_preference_pairs(TASK / "pairs_train.parquet", "train")
test_pairs = data.read_preference_pairs(TASK / "pairs_test.parquet", "test")
answers = [(p[f"{side}_steps"], p[f"{side}_gold"]) for p in pairs for side in ("chosen", "rejected")]
for steps, style in ((1, "direct"), (3, "worked")):
    golds = [gold for s, gold in answers if s == steps]
    print(f"{style:7s} answers: {len(golds):5d}, right: {np.mean(golds):.3f}")
uneven = [p for p in pairs if p["chosen_steps"] != p["rejected_steps"]]
print(f"pairs with one worked and one direct answer: {len(uneven)}; the longer one is chosen in "
      f"{np.mean([p['chosen_steps'] > p['rejected_steps'] for p in uneven]):.3f} of them")
for p in pairs[2:6]:
    print(f"  chosen {p['chosen'][0]['content']!r:48} (gold {p['chosen_gold']:.0f})   rejected "
          f"{p['rejected'][0]['content']!r:48} (gold {p['rejected_gold']:.0f})")

# %% [markdown]
# Working pays a little for this model in this run: worked answers are right 0.227 of the time, direct
# ones 0.147. So where a worked and a direct answer meet, **the longer answer is chosen in 0.532 of the
# pairs**, a slight lean, although nobody rewards length (most of these pairs are two wrong answers and
# a coin decides). This is the realistic flaw: in human preference data longer answers win more often
# too (Singhal et al., 2023, "A Long Way to Go"), and a reward model can learn "longer is better"
# instead of "right is better". Length helps here only up to a point: an answer cut off at the token
# budget (48 tokens) has no final answer and scores 0.
#
# ## 2. The formulas
#
# **Stage 2, the reward model.** A scalar $r_\phi(x, y)$ trained so that the chosen answer scores
# higher, under the Bradley-Terry model $P(y_w \succ y_l) = \sigma(r_\phi(x, y_w) - r_\phi(x, y_l))$:
#
# $$\mathcal{L}_{RM}(\phi) = -\,\mathbb{E}_{(x, y_w, y_l)}\big[\log \sigma\big(r_\phi(x, y_w) - r_\phi(x, y_l)\big)\big].$$
#
# Only differences of $r$ are learned; a constant can be added to every score.
#
# **Stage 3, PPO against it, on a leash.** The objective is the reward model's score minus a KL penalty
# to the SFT model $\pi_{\text{ref}}$:
#
# $$\max_\pi\; \mathbb{E}_{x,\, y \sim \pi}\big[r_\phi(x, y)\big] - \beta\, \mathrm{KL}\big(\pi(\cdot\mid x) \,\Vert\, \pi_{\text{ref}}(\cdot\mid x)\big).$$
#
# verl pays the KL per token, inside the reward (`algorithm.use_kl_in_reward=True`), in
# `ray_trainer.py::apply_kl_penalty`:
#
# $$r_t = \text{score}_t - \beta\, \mathrm{kl}_t, \qquad \mathrm{kl}_t = \widehat{\mathrm{KL}}\big(\log\pi_{\text{old}}(y_t), \log\pi_{\text{ref}}(y_t)\big),$$
#
# where $\text{score}_t$ is the reward model's score on the last token of the answer (0 elsewhere) and
# $\widehat{\mathrm{KL}}$ is one of the estimators of section 4 (`algorithm.kl_penalty`, default `kl`).
# Then GAE turns $r_t$ into advantages and PPO updates the policy (Chapters 1 and 2).
#
# ## 3. Stage 2: train the reward model
#
# `python -m minirl train-rm` (`minirl/reward_model.py`) trains a reward model the way TRL's
# `RewardTrainer` does, and saves it as a Hugging Face directory that verl could serve. The model is
# the SFT model's backbone with a new scalar head (`AutoModelForSequenceClassification` with one
# label, as InstructGPT starts its reward model from the SFT model). The score is read at the last
# token of prompt + answer, the EOS that closes the answer: only there has the model read it all.
# verl 0.9.1 asks its inference server to *classify* that same text.

# %%
rm_dir = RUNS / "reward_model"
rm_config = reward_model.RewardModelConfig(output_dir=str(rm_dir), num_train_epochs=4, progress_bar=False,
                                           max_steps=5 if fast_mode() else -1)
rm_summary = reward_model.train_reward_model(rm_config)
print(f"trained on {rm_summary['train_pairs']} pairs in {rm_summary['seconds']} s; held-out pairs: "
      f"{rm_summary['eval']['pairs']}, accuracy {rm_summary['eval']['accuracy']:.3f}, "
      f"loss {rm_summary['eval']['loss']:.3f}")
ties = np.mean([p["chosen_gold"] == p["rejected_gold"] for p in test_pairs])
print(f"held-out pairs with two right or two wrong answers (labelled by a coin): {ties:.3f} of {len(test_pairs)}")
fig, ax = plt.subplots(figsize=(6, 2.8))
ax.plot([h["loss"] for h in rm_summary["history"]], label="loss")
ax.plot([h["accuracy"] for h in rm_summary["history"]], label="batch accuracy")
ax.set(xlabel="step", title="reward model training (TRL's metric names: loss, accuracy)")
ax.legend()
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# A held-out accuracy of 0.534 (and a loss of 0.691, close to a coin's $\ln 2$) looks like nothing was
# learned, but the labels cap it: 0.644 of the held-out pairs are two right or two wrong answers,
# labelled by a coin. Split the held-out pairs by what separates them:

# %%
rm = reward_model.load_reward_model(rm_dir)
rm_tokenizer = models.load_tokenizer(rm_dir)
held_out = reward_model.evaluate_pairs(rm, rm_tokenizer, test_pairs, max_length=128)
rm_picks_chosen = np.array(held_out["chosen_scores"]) > np.array(held_out["rejected_scores"])


def rm_agrees(select, truth):
    # share of the selected pairs where the reward model ranks first the answer `truth` says is better
    rows = [i for i, p in enumerate(test_pairs) if select(p)]
    return len(rows), np.mean([rm_picks_chosen[i] == truth(test_pairs[i]) for i in rows])


for name, select, truth in [
    ("gold decides (one right, one wrong): picks the right one", lambda p: p["chosen_gold"] != p["rejected_gold"],
     lambda p: p["chosen_gold"] > p["rejected_gold"]),
    ("styles differ: picks the longer one", lambda p: p["chosen_steps"] != p["rejected_steps"],
     lambda p: p["chosen_steps"] > p["rejected_steps"]),
    ("longer is right, shorter wrong: picks the right one",
     lambda p: p["chosen_gold"] != p["rejected_gold"] and p["chosen_steps"] != p["rejected_steps"]
     and (p["chosen_steps"] > p["rejected_steps"]) == (p["chosen_gold"] > p["rejected_gold"]),
     lambda p: p["chosen_gold"] > p["rejected_gold"]),
    ("shorter is right, longer wrong: picks the right one",
     lambda p: p["chosen_gold"] != p["rejected_gold"] and p["chosen_steps"] != p["rejected_steps"]
     and (p["chosen_steps"] > p["rejected_steps"]) != (p["chosen_gold"] > p["rejected_gold"]),
     lambda p: p["chosen_gold"] > p["rejected_gold"]),
]:
    count, share = rm_agrees(select, truth)
    print(f"{name:55s} {count:4d} pairs   {share:.2f}")

# %% [markdown]
# **Where the reward model is wrong.** When a worked answer and a direct one meet, the reward model
# prefers the worked one in 0.95 of the 92 held-out pairs, whatever the gold says. When the longer
# answer is the right one it is always right (19 of 19); when the shorter answer is right it is always
# wrong (0 of 8). It learned the shortcut the comparisons offered, and sharpened it: a lean of 0.532 in
# the training labels became *longer is better* in 0.95 of its rankings. On the 68 pairs the gold
# decides it agrees with the gold in 0.63 of them, below the labellers' 0.86.
#
# ## 4. The leash: estimating KL from samples
#
# PPO never sees whole distributions, only the sampled tokens and their log-probs under the policy
# and the reference. With $x = \log\pi(a) - \log\pi_{\text{ref}}(a)$ for a token $a \sim \pi$,
# verl's `core_algos.py::kl_penalty` offers (J. Schulman, "Approximating KL divergence", 2020):
#
# | `kl_penalty` | estimate | |
# |---|---|---|
# | `kl` (k1) | $x$ | unbiased, noisy, can be negative |
# | `abs` | $\lvert x\rvert$ | biased upward |
# | `mse` (k2) | $\tfrac12 x^2$ | biased, low variance, never negative; its gradient is the KL's |
# | `low_var_kl` (k3) | $e^{-x} - 1 + x$ | unbiased, low variance, never negative (verl clamps it to $[-10, 10]$) |
# | `full` | $\sum_a \pi(a) \log\frac{\pi(a)}{\pi_{\text{ref}}(a)}$ over the vocabulary | exact; needs whole distributions. verl 0.9.1's `kl_penalty_forward` raises `NotImplementedError` for it; minirl does not offer it (a `ValueError` naming the valid modes, already when the config is read) |
#
# A numeric check against the exact KL between two known distributions over 50 tokens, moving the
# reference further away:

# %%
generator = torch.Generator().manual_seed(0)
vocab, draws = 50, 200_000
logits_p = torch.randn(vocab, generator=generator)
rows = []
for distance in (0.1, 0.5, 1.0, 2.0):
    logits_q = logits_p + distance * torch.randn(vocab, generator=generator)
    log_p, log_q = logits_p.log_softmax(-1), logits_q.log_softmax(-1)
    exact = (log_p.exp() * (log_p - log_q)).sum().item()
    tokens = torch.multinomial(log_p.exp(), draws, replacement=True, generator=generator)
    sample_p, sample_q = log_p[tokens][None], log_q[tokens][None]
    for mode in ("kl", "abs", "mse", "low_var_kl"):
        estimates = kl.kl_penalty_forward(sample_p, sample_q, mode)
        rows.append((distance, exact, mode, estimates.mean().item(), estimates.std().item()))
print(f"{'distance':>8s} {'exact KL':>9s}  {'mode':10s} {'mean':>8s} {'bias':>8s} {'std':>7s}")
for distance, exact, mode, mean, std in rows:
    print(f"{distance:8.1f} {exact:9.4f}  {mode:10s} {mean:8.4f} {mean - exact:+8.4f} {std:7.3f}")
stds = {(distance, mode): std for distance, _, mode, _, std in rows}
for distance in sorted({distance for distance, *_ in rows}):
    print(f"distance {distance}: std of k1 / std of k3 (low_var_kl) = "
          f"{stds[distance, 'kl'] / stds[distance, 'low_var_kl']:.1f}")

# %% [markdown]
# Read the columns. `kl` (k1) is unbiased at every distance. `low_var_kl` (k3) is unbiased while the
# distributions are close, with a standard deviation 18.1 times smaller than k1's at distance 0.1 and
# 4.6 times smaller at 0.5, the regime RL runs in. Far apart (distance 2) it falls short by 0.47:
# verl clamps each token's k3 to 10, and the rare tokens that $\pi_{\text{ref}}$ likes far more than
# $\pi$ carry the mean. `mse` (k2) matches the KL to second order, so it is close when the
# distributions are close and drifts away as they separate (+0.10 at distance 1, +1.32 at 2); `abs`
# is biased upward everywhere. One sample of k1 can be negative; k2 and k3 never are.
#
# **Where verl uses which.** Two different places, two different defaults (`docs/examples/config.rst`):
#
# | | KL in the reward | KL in the loss |
# |---|---|---|
# | switch | `algorithm.use_kl_in_reward=True` | `actor_rollout_ref.actor.use_kl_loss=True` |
# | estimator | `algorithm.kl_penalty` (default `kl`) | `actor_rollout_ref.actor.kl_loss_type` (default `low_var_kl`) |
# | coefficient | `algorithm.kl_ctrl.kl_coef` (0.001), `kl_ctrl.type` fixed or adaptive | `actor_rollout_ref.actor.kl_loss_coef` (0.001) |
# | what it does | InstructGPT's: each token's reward pays $\beta\,\mathrm{kl}_t$, the advantage carries it | GRPO's (Chapter 4): a separate loss term, $\beta$ times the mean KL, added to the policy loss |
# | metrics | `actor/reward_kl_penalty`, `actor/reward_kl_penalty_coeff` | `actor/kl_loss`, `actor/kl_coef` |
#
# In the reward the value of the estimate matters (it is part of the return), so k1's unbiasedness
# is what counts. In the loss the *gradient* matters; a trailing `+` (`low_var_kl+`) keeps the value of
# the estimator and uses k2's gradient, which is the true KL's (Chapter 1 has the straight-through
# trick). The adaptive controller (`kl_ctrl.type=adaptive`, Ziegler et al. 2019, used by InstructGPT)
# moves $\beta$ each step so that the measured KL tracks `kl_ctrl.target_kl`.
#
# ## 5. The experiment: PPO against the reward model, with and without the leash
#
# Stage 3 runs minirl's trainer (verl's fit loop) with the reward model as the only reward,
# `reward.reward_model.enable=True`, and the KL in the reward. PPO with GAE, its critic initialised
# from the reward model (as InstructGPT does), 16 prompts × 8 answers per step, 20 steps, learning rate
# 4e-4 (`minirl/preference.py::ppo_overrides` lists the keys), for $\beta \in \{0, 0.01, 0.05\}$,
# 3 seeds each. The trainer also scores every answer with the gold rule, which it never trains on,
# and logs it as `minirl/gold_score/mean`.

# %% tags=["central-figure"]
STEPS = 2 if fast_mode() else 20
BETAS = (0.0, 0.01, 0.05)


def run(name, *overrides):
    # One seeded PPO run of minirl's trainer against the reward model; returns its metrics.jsonl records.
    train([f"trainer.default_local_dir={RUNS / name}", f"trainer.total_training_steps={STEPS}",
           f"trainer.save_freq={STEPS if fast_mode() else STEPS // 2}", "trainer.test_freq=-1",
           "trainer.val_before_train=False",
           "trainer.resume_mode=disable", "trainer.logger=[]", *overrides], show_progress=False)
    return load_metrics(RUNS / name)


leash = {f"beta={beta}": run_seeds(run, f"beta{beta}", *preference.ppo_overrides(rm_dir, kl_coef=beta))
         for beta in BETAS}
plot_comparison(leash, [("critic/score/mean", "proxy: the reward model's score", "step"),
                        ("minirl/gold_score/mean", "gold: share of right answers", "step"),
                        ("actor/reward_kl_penalty", "KL to the SFT model (k1, per token)", "step")])
print(compare_table(leash, "minirl/gold_score/mean"))
for label, runs in leash.items():
    proxy = [[r["critic/score/mean"] for r in records if "critic/score/mean" in r] for records in runs]
    first, last = [p[0] for p in proxy], [p[-1] for p in proxy]
    print(f"{label}: critic/score/mean at the first step {np.mean(first):+.3f} (seeds {min(first):+.3f} to "
          f"{max(first):+.3f}), at the last {np.mean(last):+.3f} (seeds {min(last):+.3f} to {max(last):+.3f})")

# %% [markdown]
# The curves are the answers the policy wrote while training (the same prompts the trainer sees).
# For a cleaner picture, each run's checkpoints (steps 10 and 20) answer the 200 held-out prompts;
# proxy, gold and the KL to the SFT model per answer (summed over its tokens) are measured on those
# answers, and plotted against $\sqrt{\mathrm{KL}}$, the axis of Gao et al. (2022), "Scaling Laws for
# Reward Model Overoptimization".

# %%
test_rows = data.read_parquet(WARM / "data" / "test.parquet").to_list()[: 40 if fast_mode() else 200]
reference, tokenizer = models.load_policy(WARM), models.load_tokenizer(WARM)
scorer = reward_model.RewardModelScorer(rm_dir, tokenizer)  # the proxy, loaded once for every checkpoint
reference_point = measure_policy(reference, reference, tokenizer, test_rows, RESPONSE_LENGTH, scorer)
points = {}  # beta -> [(seed, step, measurements)]
for beta in BETAS:
    for seed in seeds():
        for checkpoint in (RUNS / f"beta{beta}" / f"seed{seed}").glob("global_step_*"):
            step = int(checkpoint.name.removeprefix("global_step_"))
            measured = measure_policy(models.load_policy(checkpoint / "actor"), reference, tokenizer, test_rows,
                                      RESPONSE_LENGTH, scorer, seed=seed)
            points.setdefault(beta, []).append((seed, step, measured))
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharex=True)
for beta, measured in points.items():
    all_points = [reference_point] + [m for _, _, m in measured]
    x = [np.sqrt(max(m["kl"], 0.0)) for m in all_points]
    for ax, key in zip(axes, ("proxy", "gold")):
        ax.scatter(x, [m[key] for m in all_points], label=f"beta={beta}", s=18)
for ax, title in zip(axes, ("proxy (reward model) on held-out prompts", "gold (right answers) on held-out prompts")):
    ax.set(xlabel="sqrt(KL(policy || SFT)) per answer", title=title)
    ax.grid(alpha=0.3)
axes[0].legend(fontsize=8)
plt.tight_layout()
plt.show()
print(f"SFT model: proxy {reference_point['proxy']:+.3f}, gold {reference_point['gold']:.3f}, "
      f"length {reference_point['response_length']:.1f} tokens")
for beta, measured in points.items():
    finals = [m for seed, step, m in sorted(measured, key=lambda t: t[:2]) if step == STEPS]
    print(f"beta={beta}, step {STEPS}, per seed: gold {[round(m['gold'], 3) for m in finals]}, "
          f"proxy {[round(m['proxy'], 2) for m in finals]}, KL {[round(m['kl'], 2) for m in finals]}, "
          f"length {[round(m['response_length'], 1) for m in finals]}")
standard_error = np.sqrt(reference_point["gold"] * (1 - reference_point["gold"]) / len(test_rows))
print(f"standard error of one gold share on {len(test_rows)} prompts (at the SFT model's share): "
      f"{standard_error:.3f}")
for beta, measured in points.items():
    gains = [m["gold"] - reference_point["gold"] for seed, step, m in measured if step == STEPS]
    if gains:
        print(f"beta={beta}, step {STEPS}: gold minus the SFT model's {np.mean(gains):+.3f} (seeds {min(gains):+.3f} "
              f"to {max(gains):+.3f}), {np.mean(gains) / standard_error:+.1f} standard errors")
print("every checkpoint on the held-out prompts, by KL:")
for beta, seed, step, m in sorted(((beta, seed, step, m) for beta, measured in points.items()
                                   for seed, step, m in measured), key=lambda point: point[3]["kl"]):
    print(f"  beta={beta} seed {seed} step {step}: KL {m['kl']:.2f}, proxy {m['proxy']:+.3f}, gold {m['gold']:.3f}")

# %% [markdown]
# What happened in this run, 3 seeds each (the printouts above):
#
# - **The proxy rises in every run, and further the weaker the leash.** `critic/score/mean` starts at
#   -0.168 (seeds -0.173 to -0.166) and ends at -0.105 for $\beta = 0$ (seeds -0.119 to -0.082), -0.121
#   for $\beta = 0.01$ (-0.126 to -0.115) and -0.129 for $\beta = 0.05$ (-0.133 to -0.127): $\beta = 0$
#   ends above $\beta = 0.05$ beyond the seed spread, while $\beta = 0$ and $\beta = 0.01$ overlap. All
#   policies write longer answers, toward the worked form the reward model likes (on the held-out prompts 30.2
#   tokens for the SFT model; at step 20, 34.4 to 35.9 with $\beta = 0.05$, 37.9 to 38.4 with
#   $\beta = 0.01$, 38.3 to 46.8 with $\beta = 0$). The leash does not stop that move; it is cheap in KL.
# - **Without the leash the gold collapses.** On the answers written during training, the share of
#   right answers ends at 0.034 for $\beta = 0$ (seeds 0.000 to 0.094) against 0.250 for $\beta = 0.01$
#   (0.219 to 0.281) and 0.221 for $\beta = 0.05$ (0.211 to 0.227): $\beta = 0$ is below both beyond
#   the seed spread; the two leashes are within noise of each other. On the held-out prompts at step 20,
#   the unleashed policies are 20.8 to 148 nats (per answer) away from the SFT model and right 0.000 to
#   0.065 of the time, against the SFT model's 0.225; with $\beta = 0.05$ they are 0.70 to 1.00 nats away
#   and right 0.265 to 0.285 of the time. A share of 200 answers has a standard error of 0.030: the
#   unleashed fall (-0.202, seeds -0.225 to -0.160) is -6.8 standard errors, far outside it. The leashed
#   gains over the SFT model, +0.052 for $\beta = 0.05$ (seeds +0.040 to +0.060, 1.7 standard errors)
#   and +0.035 for $\beta = 0.01$ (1.2 standard errors), are within noise: the leash kept the gold,
#   and this run does not show that it raised it.
# - **One preference task.** These seeds share one preference task and one reward model, built from one
#   warm start. Built from other warm starts instead (they stand in for another CPU:
#   `bench/effect_spread.py --swap preference`, 15 steps, 48 held-out prompts, one seed each), the
#   unleashed gold collapsed every time and stayed below the leashed run's, but $\beta = 0.05$ kept the
#   gold at the SFT model's level only on this task; on the four others it fell too, more slowly. The
#   leash slows the hack down; at this $\beta$ it does not always stop it. Their reward models also
#   preferred the longer answer in most pairs whose styles differ, but less often than this one. The seeded
#   tests (`tests/test_chapter_effects.py`) assert only what held on all five.
# - **The figure of Gao et al., on a laptop.** Against $\sqrt{\mathrm{KL}}$, on the held-out prompts:
#   the proxy moves from the SFT model's -0.157 to between -0.141 and -0.121 for every leashed
#   checkpoint (KL up to 3.30 nats), and the unleashed checkpoints (8.18 nats and beyond) score -0.139
#   to -0.074, most of them in the same band and the farthest one highest. The gold goes the other way:
#   0.185 to 0.285 for the leashed checkpoints, 0.000 to 0.155 for the unleashed ones, every one of them
#   below the SFT model's 0.225. The unleashed policies' extra distance bought little proxy and cost
#   almost all the gold: they wander where the reward model does not look.
# - **What the unleashed policy writes.** The samples below (seed 0, step 20): all eight imitate the
#   worked form (several sums in a row), which the reward model rewards; the arithmetic inside is garbled
#   (`3+4: 0+0+0=20, 3+5=9, 0+19=29 #### 1`), some even copy the question wrong (`3+28` becomes `4+28`),
#   and all eight are wrong, because the reward model barely checks the arithmetic.

# %%
from minirl.rollout import generate_sequences

unleashed = sorted((RUNS / "beta0.0" / "seed0").glob("global_step_*"))[-1] / "actor"
policy, tokenizer = models.load_policy(unleashed), models.load_tokenizer(unleashed)
sample_rows = test_rows[:8]
prompts = data.encode_prompts(tokenizer, [r["prompt"] for r in sample_rows], 64)
out = generate_sequences(policy, prompts["input_ids"], prompts["attention_mask"], tokenizer.eos_token_id,
                         tokenizer.pad_token_id, RESPONSE_LENGTH, generator=torch.Generator().manual_seed(0))
texts = tokenizer.batch_decode([r[:n] for r, n in zip(out["responses"], out["response_length"])],
                               skip_special_tokens=True)
scores = reward_model.reward_scores(rm, **reward_model.encode_conversations(
    rm_tokenizer, [r["prompt"] for r in sample_rows], texts))
for row, text, score in zip(sample_rows, texts, scores.tolist()):
    truth = row["reward_model"]["ground_truth"]
    print(f"{row['prompt'][0]['content']:8s} -> {text!r:48} proxy {score:+.2f}  gold "
          f"{preference.gold_reward(row['data_source'], text, truth):.0f}")

# %% [markdown]
# ## 6. verl ↔ minirl
#
# | | verl 0.9.1 | minirl |
# |---|---|---|
# | KL in the reward | `verl/trainer/ppo/ray_trainer.py::apply_kl_penalty` | `minirl/kl.py::apply_kl_penalty` |
# | estimators | `verl/trainer/ppo/core_algos.py::kl_penalty`, `kl_penalty_forward` | `minirl/kl.py::kl_penalty`, `kl_penalty_forward` |
# | controllers | `core_algos.py::FixedKLController`, `AdaptiveKLController` | `minirl/kl.py` (same names) |
# | reward model scoring | `verl/experimental/reward_loop/reward_loop.py::RewardLoopWorker.compute_score_disrm` (a vLLM/SGLang server classifies prompt + answer); `experimental/reward_loop/reward_manager/base.py::RewardManagerBase.assemble_rm_scores` (score on the last response token) | `minirl/reward_model.py::RewardModelScorer` (the model in-process) |
# | legacy top-level keys (`reward_model.*`, `custom_reward_function.*`) | accepted and ignored by `main_ppo` (nulls in `trainer/config/legacy_reward_impl.yaml`; only the fully asynchronous trainer calls `experimental/reward_loop/reward_loop.py::migrate_legacy_reward_impl`), so the run scores with `default_compute_score` | refused with a `ValueError` naming the `reward.` key (`minirl/config.py::legacy_reward_key_error`) |
# | reward model training | none in verl (it serves a trained one); TRL's `RewardTrainer` | `minirl/reward_model.py::train_reward_model`, `python -m minirl train-rm` |
#
# | config key (verl 0.9.1 = minirl) | default | meaning |
# |---|---|---|
# | `reward.reward_model.enable` | `False` | score with a reward model; with no `reward.custom_reward_function`, it is the only reward. The old top-level `reward_model.enable` is ignored by verl 0.9.1's `main_ppo` (the run uses the rule reward, with no error), and minirl refuses it |
# | `reward.reward_model.model_path` | `null` | the reward model (not the ignored top-level `reward_model.model.path`) |
# | `algorithm.use_kl_in_reward` | `False` | subtract $\beta\,\mathrm{kl}_t$ from each token's reward; creates the reference model |
# | `algorithm.kl_penalty` | `kl` | estimator of the in-reward KL (section 4) |
# | `algorithm.kl_ctrl.type` | `fixed` | or `adaptive` (then `kl_ctrl.target_kl`, `kl_ctrl.horizon`) |
# | `algorithm.kl_ctrl.kl_coef` | `0.001` | $\beta$ (the initial one when adaptive) |
# | `critic.model.path` | verl: a placeholder, `~/models/deepseek-llm-7b-chat`, not the actor's path: set it; minirl: `tiny`, the same warm start as the actor's default | InstructGPT initialises the value model from the reward model |
#
# | metric | meaning |
# |---|---|
# | `critic/score/mean` | the reward model's score (before the KL): the proxy |
# | `critic/rewards/mean` | the score minus the KL penalty: what PPO maximises |
# | `actor/reward_kl_penalty`, `actor/reward_kl_penalty_coeff` | the batch's KL estimate and the $\beta$ used |
# | `minirl/gold_score/mean` | minirl only: the rule reward of the same answers, when the data source has one |
#
# verl's example scored by a reward model is `examples/grpo_trainer/run_mistral_nemo_12b_skyworkrm_fsdp.sh`
# (read at verl's v0.9.0 tag: the 0.9.1 wheel ships no `examples/`): `reward.reward_model.enable=True`, `reward.reward_model.model_path=Skywork/Skywork-Reward-Llama-3.1-8B`
# and the reward model's own inference engine (`reward.reward_model.rollout.*`, which minirl accepts and
# ignores: it runs the reward model in-process). The same run in minirl is the config of section 5 with
# the real paths.
#
# ## 7. Exercises
#
# Open `exercises/ch03_rlhf.py` and grade with `make grade` (one exercise, all of its checks:
# `make grade EX=3.1`).
#
# | # | function | what it checks |
# |---|---|---|
# | 3.1 | `bradley_terry_loss` | the loss, pair accuracy and margin, against TRL's formula; stable for huge score gaps; a tie is not a win |
# | 3.2 | `apply_kl_penalty` | scores minus $\beta\,\mathrm{kl}_t$ on valid tokens only, and verl's per-sequence averaging of the batch KL |
# | 3.3 | `kl_estimators` | k1, k2, k3 against verl's, k3's clamps, and which of them is unbiased on samples |
#
# <details>
# <summary>Hint for 3.1</summary>
# <code>-torch.nn.functional.logsigmoid(d)</code> is a stable $-\log\sigma(d)$; <code>torch.log(torch.sigmoid(d))</code> is not.
# </details>
#
# <details>
# <summary>Hint for 3.2</summary>
# The KL of a sequence is the masked mean over its own valid tokens; the batch value is the mean of those
# per-sequence numbers, not the mean over all valid tokens of the batch.
# </details>
#
# <details>
# <summary>Hint for 3.3</summary>
# With $k = \log\pi_{\text{ref}} - \log\pi$, k3 $= e^k - k - 1$; clamp $k$ to $[-20, 20]$ before the exponential
# and the result to $[-10, 10]$.
# </details>
#
# **Failure-mode question.** In your RLHF run `critic/score/mean` rises steadily for 200 steps, but the
# answers you read get worse. What is happening, and which two metrics (and which config keys) do you
# check first?
#
# <details>
# <summary>Answer</summary>
# The policy is optimising the reward model's blind spots (section 5): the proxy rises while the true
# quality falls. Check the KL to the reference (<code>actor/reward_kl_penalty</code>, or
# <code>actor/kl_loss</code> with <code>use_kl_loss</code>): if it grows without bound the leash is too weak,
# so raise <code>algorithm.kl_ctrl.kl_coef</code> or use <code>kl_ctrl.type=adaptive</code> with a
# <code>target_kl</code>. Check <code>response_length/mean</code>: a steady rise is the classic length
# hack. Then stop early at the best checkpoint by a held-out judgement (people, or a second reward
# model), collect comparisons on the new policy's answers and retrain the reward model (InstructGPT
# iterated this way).
# </details>
#
# ### The library's code, after you tried

# %%
from IPython.display import display

for function in (reward_model.bradley_terry_loss, kl.apply_kl_penalty, kl.kl_penalty_forward):
    display(show_source(function, collapsed=True))

# %% [markdown]
# ## 8. Where next
#
# - [Chapter 6 · DPO](06_dpo.ipynb): the same comparisons, optimised directly with no reward model and no
#   rollout; compared with this chapter's reward model + PPO on the gold reward.
# - [Chapter 4 · GRPO](04_grpo.ipynb): the KL as a loss term (`use_kl_loss`) instead of a reward term.
# - [Lab B · Writing reward functions](lab_b_rewards.ipynb): rule rewards, and what verl passes to your own
#   reward function (also beside a reward model); [Lab C · Reading the debug metrics](lab_c_metrics.ipynb)
#   for the KL metrics.
# - References: Ouyang et al. (2022), *Training language models to follow instructions with human feedback*
#   (InstructGPT); Stiennon et al. (2020), *Learning to summarize from human feedback*; Ziegler et al. (2019),
#   *Fine-Tuning Language Models from Human Preferences* (the adaptive KL controller); Gao et al. (2022),
#   *Scaling Laws for Reward Model Overoptimization*; Singhal et al. (2023), *A Long Way to Go:
#   Investigating Length Correlations in RLHF*; J. Schulman (2020), *Approximating KL divergence*.

# %%
print_run_time()
