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
# # Chapter 2 · GAE: spreading a final reward over the tokens
#
# | The five answers | |
# |---|---|
# | **Problem** | PPO needs an advantage $A_t$ for every response token, but the task gives one reward at the end. Using that reward for every token is unbiased but noisy: whatever happens later in the response lands on every earlier token. A critic $V(s_t)$ can lower the noise, but its errors add bias. $\gamma$ and $\lambda$ set the trade. |
# | **Core formula** | $\delta_t = r_t + \gamma V(s_{t+1}) - V(s_t)$, $\quad A_t = \delta_t + \gamma\lambda\, \delta_{t+1} + (\gamma\lambda)^2 \delta_{t+2} + \dots$, $\quad R_t = A_t + V(s_t)$ (the critic's target). |
# | **Beginner's view** | The critic is an "expected score" estimator. After each token it guesses the final score. A token whose arrival made the guess go up was a good token ($A_t > 0$); one that made it go down was a bad one. |
# | **verl source** | `verl/trainer/ppo/core_algos.py::compute_gae_advantage_return` (reverse scan over the response tokens, then `masked_whiten`); `verl/trainer/ppo/ray_trainer.py::compute_advantage` (the `algorithm.adv_estimator=gae` branch); `core_algos.py::compute_value_loss` (the critic's loss); `examples/ppo_trainer/run_qwen3_8b_fsdp.sh` (a PPO run with `critic.model.path` and `critic.optim.lr`; the GRPO examples have no critic). |
# | **Where next** | [Lab A · GSM8K with PPO](lab_a_gsm8k.ipynb) for the advantage and the update in a full PPO run; [Chapter 1 · PPO](01_ppo.ipynb) uses these advantages; [Chapter 4 · GRPO](04_grpo.ipynb) and [Chapter 7 · RLOO / ReMax / REINFORCE++](07_baselines.ipynb) drop the critic. |
#
# Run time: 4.2 minutes in the run shown here, on 2 CPU cores (one 40-step run whose critic we inspect, then
# fifteen short runs: five settings, three seeds each; the first cell names the machine, the last prints the
# time). With `MINIRL_FAST=1` every run shrinks to a few steps.

# %%
from functools import partial
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from minirl import core, gae, models
from minirl.book.notebook import (
    compare_table,
    fast_mode,
    plot_comparison,
    print_run_time,
    run_seeds,
    show_source,
    where_this_ran,
)
from minirl.book.variance import gae_bias_variance, sample_responses
from minirl.config import load_config
from minirl.plot import load_metrics
from minirl.ppo import compute_value_loss
from minirl.trainer import PPOTrainer, train

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "ch02"
VAL = "val-core/minirl/arithmetic/acc/mean@1"


def settings(name, *overrides, steps, test_freq=5):
    # One seeded PPO + GAE run of minirl's trainer (verl's fit loop) from the cached SFT warm start.
    fast = ["data.val_max_samples=40"] if fast_mode() else ["data.val_max_samples=100"]
    steps = 2 if fast_mode() else steps
    return [f"trainer.default_local_dir={RUNS / name}", f"trainer.total_training_steps={steps}",
            f"trainer.test_freq={min(test_freq, steps)}", "trainer.resume_mode=disable", "trainer.logger=[]",
            "algorithm.adv_estimator=gae", *fast, *overrides]


def run(name, *overrides, steps):
    train(settings(name, *overrides, steps=steps), show_progress=False)
    return load_metrics(RUNS / name)


# %% [markdown]
# ## 1. The problem, shown: one reward, many tokens
#
# The tiny task asks for a sum, `14+16=?`, and the policy answers `14+16=30 #### 30`. The reward
# is 1 if the final number is right, else 0, and it sits on the last token. Which tokens deserve
# the credit? Only the digits of the result matter; the echo of the question does not.
#
# We train PPO with a critic for 40 steps (verl's defaults $\gamma = \lambda = 1$), then ask the
# trained critic for $V(s_t)$ along a few fresh responses to validation questions: one right and one
# wrong answer to the same question.

# %%
trainer = PPOTrainer(load_config(settings("critic", steps=40, test_freq=10), announce=False), show_progress=False)
history = trainer.fit()
policy, critic, tokenizer = trainer.actor.unwrapped_model, trainer.critic.unwrapped_model, trainer.tokenizer
response_length = trainer.config.data.max_response_length
batch = sample_responses(policy, tokenizer, trainer.val_rows[:40], 8, response_length, seed=7)
with torch.no_grad():  # V(s_t) before each response token (the critic reads position t-1), for all 320 answers
    all_values = models.compute_values(critic, batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                                       response_length, batch["response_mask"])


def value_trace(row):
    # The response's characters and the values before each of them.
    length = int(batch["response_mask"][row].sum())
    tokens = [tokenizer.decode([i]) for i in batch["responses"][row, :length].tolist()]
    return tokens, all_values[row, :length]


scores = batch["token_level_scores"].sum(-1).view(40, 8)
# the first questions whose 8 answers hold both a right and a wrong one
mixed = [q for q in range(40) if 0 < scores[q].sum() < 8][:2]
fig, axes = plt.subplots(1, len(mixed), figsize=(13, 3.2), squeeze=False)
for ax, question in zip(axes[0], mixed):
    traces = []
    for outcome, color in ((1.0, "C2"), (0.0, "C3")):
        row = question * 8 + int((scores[question] == outcome).nonzero()[0])
        tokens, values = value_trace(row)
        traces.append(tokens)
        ax.plot(values.tolist(), marker="o", color=color, label=f"{''.join(tokens[:-1])}  (reward {outcome:.0f})")
    width = max(len(t) for t in traces)
    labels = []
    for i in range(width):  # "right/wrong" where the two answers differ
        chars = [t[i] if i < len(t) else "" for t in traces]
        labels.append(chars[0] if chars[0] == chars[1] else "/".join(chars))
    ax.set_xticks(range(width), [label.replace("</s>", "EOS") for label in labels], fontsize=7)
    ax.set(title=f"V(s_t) along two answers to {trainer.val_rows[question]['prompt'][0]['content']}",
           xlabel="response token t (the value is read before the token)", ylabel="V(s_t)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
plt.tight_layout()
plt.show()

# %% [markdown]
# Two single responses can mislead, so here are the same values over all 320 sampled answers (40
# questions, 8 answers each): does the critic know (a) which questions are hard, before any token is
# written, and (b) whether a finished answer is right, at its last token?

# %%
last = batch["response_mask"].sum(-1) - 1  # the EOS token's position
value_at_eos = all_values[torch.arange(len(last)), last]
reward = batch["token_level_scores"].sum(-1)
first = all_values[:, 0].view(40, 8).mean(1)
success = scores.mean(1)
print(f"(a) correlation of V(s_0) with the question's success rate over 40 questions: "
      f"{torch.corrcoef(torch.stack([first, success]))[0, 1]:.2f}")
print(f"(b) V before EOS: right answers {value_at_eos[reward == 1].mean():.3f}, "
      f"wrong answers {value_at_eos[reward == 0].mean():.3f} (success rate {reward.mean():.2f})")

# %% [markdown]
# What the critic learned in 40 steps, and what it did not (one run, seed 0, so these numbers are this
# run's, with no seed range):
#
# - **It learned a little about which questions are hard.** Before any token is written, $V(s_0)$
#   correlates 0.36 with the question's success rate over the 40 questions.
# - **It barely tells a right answer from a wrong one.** Just before EOS, $V$ averages 0.569 on right
#   answers and 0.526 on wrong ones (half of the 320 answers are right: success rate 0.50), a gap far
#   smaller than the gap of 1 between their rewards. In the two traces, the values of the two answers
#   move together on most tokens; where they part after the differing digit, the wrong answer's value is
#   sometimes the higher one, and in both traces it ends slightly above the right answer's at EOS. To
#   know that `3+4=8` is wrong, the critic has to do the sum: a job as hard as the policy's, for a model
#   of the same size (the warm-start policy answers 0.470 of the validation questions right when greedy,
#   section 5).
#
# This is the problem GAE works with. With $\lambda = 1$, every token's advantage is
# $R - V(s_t)$: the echo `3+4=` gets the same $\pm 1$ outcome signal as the digit that decided it.
# The critic can only help by knowing, token by token, how the outcome became more or less likely.
#
# How well does the critic predict the returns overall? verl logs `critic/vf_explained_var`,
# $1 - \operatorname{Var}(R - V) / (\operatorname{Var}(R) + 10^{-5})$ over the batch's response tokens
# (`metric_utils.py::compute_data_metrics`), with the values computed *before* the step's critic update,
# so on fresh data: 0 means "no better than predicting the batch mean", 1 means perfect.

# %%
fig, ax = plt.subplots(figsize=(6, 2.8))
steps = [r["step"] for r in history if "critic/vf_explained_var" in r]
ax.plot(steps, [r["critic/vf_explained_var"] for r in history if "critic/vf_explained_var" in r], marker=".")
ax.axhline(0, color="grey", linewidth=0.8)
ax.set(title="critic/vf_explained_var (one run, seed 0)", xlabel="step")
ax.grid(alpha=0.3)
plt.tight_layout()
plt.show()
explained = [(r["step"], r["critic/vf_explained_var"]) for r in history if "critic/vf_explained_var" in r]
crossed = next((step for step, value in explained if value >= 0), None)
print(f"critic/vf_explained_var at step {explained[0][0]}: {explained[0][1]:.3f}; first step at or above 0: {crossed}")
after = [value for step, value in explained if crossed is not None and step > crossed]
if after:
    print(f"after step {crossed}: between {min(after):.3f} and {max(after):.3f}")

# %% [markdown]
# In this run (seed 0) it starts at -0.144 (the fresh value head's guesses are off), first reaches 0 at
# step 6, and after that stays between -0.067 and 0.092: the critic has learned the average, and a
# little about each question, not more.
#
# ## 2. The formula and the code
#
# For each response, scan its tokens backwards, $t = L-1, \dots, 0$:
#
# $$
# \delta_t = r_t + \gamma V(s_{t+1}) - V(s_t), \qquad
# A_t = \delta_t + \gamma \lambda A_{t+1}, \qquad R_t = A_t + V(s_t),
# $$
#
# with $V(s_L) = 0$ and $A_L = 0$ after the last token. $r_t$ is `token_level_rewards`: the score on
# the last token, and, when `algorithm.use_kl_in_reward=True`, minus $\beta\,\mathrm{KL}_t$ on every
# token (Chapter 3). Unrolled, $A_t = \sum_k (\gamma\lambda)^k \delta_{t+k}$:
#
# - $\lambda = 1$ (and $\gamma = 1$): the sum telescopes to $A_t = \sum_{k \ge t} r_k - V(s_t)$, the Monte-Carlo
#   return minus a baseline. Unbiased, whatever the critic, but it carries all the noise of the rest of
#   the response.
# - $\lambda = 0$: $A_t = \delta_t = r_t + \gamma V(s_{t+1}) - V(s_t)$, one step, then trust the critic.
#   In an LLM the next state is the prefix plus the token, so given $(s_t, a_t)$ nothing is random: no
#   variance at all. Every error is the critic's, as bias.
#
# **Masks.** Padding is skipped: on a masked token the scan keeps $V(s_{t+1})$ and $A_{t+1}$ from the
# token after it, so a hole in the mask does not break the chain.
#
# **Whitening.** verl then replaces the advantages by `masked_whiten(A, response_mask)`: minus the
# mean and divided by the standard deviation of *all* response tokens of the batch. The returns (the
# critic's targets) are taken before whitening. Why whiten? The policy loss multiplies $A_t$ into the
# gradient, so its scale acts like a learning rate that changes as the critic and the reward change;
# whitening fixes the scale at 1 and centres the signal, which also removes any constant offset the
# critic has not learned yet. (It is a batch-level operation: with several processes, verl and minirl
# compute it on the whole batch, never per GPU.)
#
# `minirl/gae.py::compute_gae_advantage_return` implements exactly this. Exercise 2.1 asks you to write
# the scan, Exercise 2.2 the whitening, so the code is shown after the exercises.
#
# ## 3. A numeric toy you can check by hand
#
# Three tokens, the reward 1 on the last one, critic values $V = (0.5, 0.6, 0.8)$, $\gamma = 1$, $\lambda = 0.5$:
#
# - $t = 2$: $\delta_2 = 1 + 0 - 0.8 = 0.2$, $A_2 = 0.2$;
# - $t = 1$: $\delta_1 = 0 + 0.8 - 0.6 = 0.2$, $A_1 = 0.2 + 0.5 \cdot 0.2 = 0.3$;
# - $t = 0$: $\delta_0 = 0 + 0.6 - 0.5 = 0.1$, $A_0 = 0.1 + 0.5 \cdot 0.3 = 0.25$.
#
# Returns $R = A + V = (0.75, 0.9, 1.0)$. With $\lambda = 1$ every $A_t$ would be $1 - V_t = (0.5, 0.4, 0.2)$;
# with $\lambda = 0$ it would be $\delta = (0.1, 0.2, 0.2)$. A padded fourth column changes nothing.

# %%
rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
values = torch.tensor([[0.5, 0.6, 0.8, 0.0]])
mask = torch.tensor([[1, 1, 1, 0]])
for lam in (0.5, 1.0, 0.0):
    _, returns = gae.compute_gae_advantage_return(rewards, values, mask, gamma=1.0, lam=lam)
    raw = (returns - values) * mask  # the advantages before whitening
    print(f"lam={lam}: A = {[round(a, 3) for a in raw[0, :3].tolist()]}, returns = "
          f"{[round(r, 3) for r in returns[0, :3].tolist()]}")
whitened, _ = gae.compute_gae_advantage_return(rewards, values, mask, gamma=1.0, lam=0.5)
print("after masked_whiten:", [round(a, 3) for a in whitened[0].tolist()], "(mean 0, std 1 over the 3 tokens)")

# %% [markdown]
# ## 4. Bias and variance, measured
#
# The trade-off the GAE paper is about can be measured directly. Fix a state and a token: take a
# prompt, sample one response (the *anchor*), and cut it after token $t$. Then sample 64 continuations
# from there, score each full response, and compute $A_t^\lambda$ for each, with the trained critic.
# Over the continuations:
#
# - the **variance** of $A_t^\lambda$ is how much one estimate moves;
# - its mean minus the mean of $A_t^{\lambda=1}$ is the **bias**: with $\lambda = 1$ the estimate is
#   the Monte-Carlo return minus $V(s_t)$, unbiased for the true advantage whatever the critic.
#
# We do this at every token of one anchor response for each of 12 validation questions (about 180
# (state, token) pairs, 64 continuations each) and average. The bias of one pair is itself estimated
# from 64 samples, so it has a noise floor; the dashed line shows it.

# %% tags=["central-figure"]
LAMS = [0.0, 0.5, 0.9, 0.95, 1.0]
measured = gae_bias_variance(policy, critic, tokenizer, trainer.val_rows[:4 if fast_mode() else 12], LAMS,
                             samples=16 if fast_mode() else 64, response_length=response_length, seed=0)
fig, ax = plt.subplots(figsize=(6.5, 3.2))
ax.plot(LAMS, measured["variance"], marker="o", label="variance of A_t (mean over pairs)")
ax.plot(LAMS, [b**2 for b in measured["bias_rms"]], marker="s", label="squared bias (mean over pairs)")
ax.plot(LAMS, [v + b**2 for v, b in zip(measured["variance"], measured["bias_rms"])], marker="^", color="k",
        label="mean squared error = variance + squared bias")
ax.plot(LAMS, [s**2 for s in measured["bias_se_rms"]], linestyle="--", color="grey",
        label="noise floor of the squared bias")
ax.set(title=f"GAE at {measured['anchors']} fixed (state, token) pairs", xlabel="lambda")
ax.legend(fontsize=7)
ax.grid(alpha=0.3)
plt.tight_layout()
plt.show()
for lam, var, bias, se in zip(LAMS, measured["variance"], measured["bias_rms"], measured["bias_se_rms"]):
    print(f"lambda={lam:4}: variance {var:.4f}   RMS bias {bias:.3f} (noise floor {se:.3f})   "
          f"MSE {var + bias**2:.4f}")
print(f"measured on {measured['anchors']} (state, token) pairs")

# %% [markdown]
# This is the trade-off of the GAE paper, measured on 183 (state, token) pairs with this run's critic
# (one training run, so no seed range):
#
# - **Variance grows with $\lambda$.** It is exactly 0 at $\lambda = 0$ (the next state is fixed by the
#   token), still 0.0000 to four decimals at 0.5, 0.0055 at 0.9, and 0.0195 at 0.95 against 0.0691 at
#   $\lambda = 1$: the Monte-Carlo estimate carries all the randomness of the rest of the response.
# - **Bias falls with $\lambda$.** The root-mean-square bias is 0.457 at $\lambda = 0$, where the estimate
#   is only as good as this weak critic, 0.417 at 0.5, 0.222 at 0.9, 0.135 at 0.95, and 0 at
#   $\lambda = 1$ by definition. The noise floor of these estimates (0.033 at most) is far below.
# - **Their sum, the mean squared error, is smallest at $\lambda = 0.95$** (0.0376, against 0.0546 at
#   0.9, 0.0691 at 1 and 0.2085 at 0). With a better critic the bias shrinks and the best $\lambda$ moves
#   down; with a worse one it moves up.
#
# ### The critic's loss
#
# The critic regresses $V(s_t)$ on the returns with a clip like the policy's
# (`core_algos.py::compute_value_loss`): the new prediction may not move more than
# `critic.cliprange_value` (0.5) from the value seen at rollout time without the loss taking the
# larger, clipped error.
#
# $$
# L^V = \tfrac12\, \operatorname{agg}\Big(\max\big((V_\phi - R)^2,\ (\operatorname{clip}(V_\phi, V_{\text{old}} - c, V_{\text{old}} + c) - R)^2\big)\Big)
# $$

# %%
old_values = torch.tensor([[0.2, 0.2, 0.4]])  # V at rollout time
new_values = torch.tensor([[0.2, 0.9, 0.4]])  # the critic during its update: token 1 moved by 0.7 > 0.5
targets = torch.tensor([[1.0, 1.0, 0.0]])  # returns
vf_loss, vf_clipfrac = compute_value_loss(new_values, targets, old_values, torch.ones(1, 3), cliprange_value=0.5)
print(f"vf_loss {vf_loss.item():.4f}   vf_clipfrac {vf_clipfrac.item():.3f}")
clipped_values = old_values + (new_values - old_values).clamp(-0.5, 0.5)
unclipped_error, clipped_error = (new_values - targets) ** 2, (clipped_values - targets) ** 2
print("clipped values", [round(v, 4) for v in clipped_values[0].tolist()])
print("squared error per token: unclipped", [round(e, 4) for e in unclipped_error[0].tolist()],
      " clipped", [round(e, 4) for e in clipped_error[0].tolist()],
      " kept (the larger)", [round(e, 4) for e in torch.maximum(unclipped_error, clipped_error)[0].tolist()])

# %% [markdown]
# Token 1's prediction moved from 0.2 to 0.9, more than 0.5: the clipped value is 0.7, whose error
# $(0.7 - 1)^2 = 0.09$ is larger than the unclipped $(0.9 - 1)^2 = 0.01$, so the loss keeps 0.09 and
# that token's gradient is 0. With the other two errors, $0.64$ and $0.16$:
# $\tfrac12 \cdot (0.64 + 0.09 + 0.16) / 3 = 0.148$, and `critic/vf_clipfrac` $= 1/3$.
#
# %% [markdown]
# ## 5. The experiment: what lambda, gamma and the critic warm-up do to learning
#
# PPO with GAE from the same warm start, 15 steps, 3 seeds each:
#
# - $\lambda = 1$ (verl's default), $\lambda = 0.95$ (the value the GAE paper and many PPO codes use)
#   and $\lambda = 0$;
# - $\gamma = 0.9$ with $\lambda = 1$: the reward arrives only at the last token, so a token $k$ steps
#   before the end sees $0.9^k$ of it. Early tokens get a smaller signal than late ones;
# - `trainer.critic_warmup=5`: the actor waits while the step number is below 5, so steps 1 to 4 train
#   only the critic (the run still counts them as steps) and the actor updates from step 5 on.

# %%
STEPS = 15
learning = {
    "lambda=1": run_seeds(partial(run, steps=STEPS), "lam1"),
    "lambda=0.95": run_seeds(partial(run, steps=STEPS), "lam095", "algorithm.lam=0.95"),
    "lambda=0": run_seeds(partial(run, steps=STEPS), "lam0", "algorithm.lam=0"),
    "gamma=0.9": run_seeds(partial(run, steps=STEPS), "gamma09", "algorithm.gamma=0.9"),
    "critic_warmup=5": run_seeds(partial(run, steps=STEPS), "warmup5", "trainer.critic_warmup=5"),
}
plot_comparison(learning, [(VAL, "greedy validation accuracy", "step"),
                           ("critic/score/mean", "training reward (critic/score/mean)", "step"),
                           ("critic/vf_explained_var", "critic/vf_explained_var", "step")])
print(compare_table(learning, VAL))


def mean_range(values):  # mean over seeds, and the seeds' range
    return f"{sum(values) / len(values):.3f} (seeds {min(values):.3f} to {max(values):.3f})"


for label, runs in learning.items():
    print(f"{label}: validation accuracy, mean over seeds (range):")
    for step in [r["step"] for r in runs[0] if VAL in r]:
        print(f"  step {step}: {mean_range([[r[VAL] for r in records if r['step'] == step][0] for records in runs])}")
    explained = [[r["critic/vf_explained_var"] for r in records if "critic/vf_explained_var" in r] for records in runs]
    print(f"  critic/vf_explained_var: mean over steps {mean_range([sum(e) / len(e) for e in explained])}, "
          f"peak {mean_range([max(e) for e in explained])}, last {mean_range([e[-1] for e in explained])}")
    score = [[r["critic/score/mean"] for r in records if "critic/score/mean" in r] for records in runs]
    print(f"  critic/score/mean: first step {mean_range([s[0] for s in score])}, "
          f"last step {mean_range([s[-1] for s in score])}")

# %% [markdown]
# What the curves say in this run (3 seeds, 15 steps, all from 0.470 at step 0; greedy validation
# accuracy after 15 steps, mean over seeds with the seeds' range):
#
# - **$\lambda = 0.95$ and $\lambda = 1$ learn alike**: 0.523 (seeds 0.520 to 0.530) and 0.533 (seeds
#   0.520 to 0.550), within noise. The two estimators differ (section 4: less variance, some bias at
#   0.95), but not by enough to show in 15 steps.
# - **$\lambda = 0$ unlearns**: from 0.470 to 0.287 (seeds 0.240 to 0.310), below every other setting
#   by more than the seeds' spread. Each token's advantage is now $\delta_t = V(s_{t+1}) - V(s_t)$, the
#   critic's noise; whitening scales that noise up to unit variance and the actor follows it. The real
#   reward reaches only the last token, the EOS, whose choice decides nothing. Its training reward
#   `critic/score/mean` ends lower too, 0.224 at the last step (seeds 0.172 to 0.293) against 0.277 at
#   the first, though the seeds' ranges overlap. Its `critic/vf_explained_var` is not a
#   sign of health: it starts lowest of all (right panel), then peaks highest of all, at 0.333 (seeds 0.285
#   to 0.362), and falls back to 0.033 at the last step (seeds -0.027 to 0.120). With $\lambda = 0$ the
#   critic's targets are $R_t = r_t + V(s_{t+1})$, its own next value, which it predicts easily whether
#   or not it knows anything about the outcome.
# - **$\gamma = 0.9$ learns like $\gamma = 1$**: 0.537 (seeds 0.520 to 0.550), within noise. The reward
#   sits on the last token, so a token $k$ steps before the end sees $0.9^k$ of it. The answer's digits
#   are among the last 8 tokens, so they keep at least $0.9^8 = 0.43$ of it, and whitening restores the
#   scale. What changes is the critic's job: the returns $0.9^{T-t} R$ now grow towards the end of the
#   response, which the critic can predict, so `critic/vf_explained_var` peaks at 0.136 (seeds 0.124 to
#   0.148), against 0.032 (seeds 0.029 to 0.036) with $\gamma = 1$.
# - **`trainer.critic_warmup=5`** gives the actor 11 updates in 15 steps (steps 5 to 15) and ends at
#   0.527 (seeds 0.510 to 0.540), within noise of the others with $\lambda > 0$. The warmed-up critic is
#   no better by `critic/vf_explained_var` either: its mean over the steps is -0.035 (seeds -0.054 to
#   -0.021) against -0.029 (seeds -0.047 to -0.015) without warm-up. With 3 seeds and 15 steps, this run
#   shows neither a cost nor a gain from the warm-up.
#
# ## 6. verl ↔ minirl
#
# | | verl 0.9.1 | minirl |
# |---|---|---|
# | GAE | `core_algos.py::compute_gae_advantage_return` | `minirl/gae.py::compute_gae_advantage_return` |
# | dispatch | `ray_trainer.py::compute_advantage` (`adv_estimator=gae` branch) | `minirl/advantage.py::compute_advantage` |
# | values | `ray_trainer.py::RayPPOTrainer._compute_values` | `minirl/workers.py::Critic.compute_values` |
# | critic update | `ray_trainer.py::RayPPOTrainer._update_critic`, loss in `workers/utils/losses.py::value_loss` → `core_algos.py::compute_value_loss` | `minirl/workers.py::Critic.update_critic`, `minirl/ppo.py::compute_value_loss` |
# | whitening | `verl/utils/torch_functional.py::masked_whiten` | `minirl/core.py::masked_whiten` |
# | explained variance | `metric_utils.py::compute_data_metrics` | `minirl/metrics.py::compute_data_metrics` |
#
# minirl mirrors verl's legacy trainer (`trainer.use_v1=false`), as Chapter 1 explains; the GAE maths
# is the same in both trainers. One difference: verl leaves $(0 - \mu)/\sigma$ in the padded positions
# of the whitened advantages, minirl multiplies them by the mask. Every loss masks them anyway.
#
# | config key (verl = minirl) | default | meaning |
# |---|---|---|
# | `algorithm.adv_estimator` | verl `gae`, minirl `grpo` | `gae` creates a critic |
# | `algorithm.gamma` | 1.0 | discount $\gamma$ |
# | `algorithm.lam` | 1.0 | GAE $\lambda$ (verl's default keeps the Monte-Carlo estimate) |
# | `critic.model.path` | verl: a placeholder, `~/models/deepseek-llm-7b-chat`, not the policy's path (set it; verl's PPO example sets the policy's model); minirl: `tiny`, the warm start the policy starts from | the critic's starting weights; a token-classification head is added |
# | `critic.optim.lr` | verl 1e-5, minirl 1e-3 | the critic's learning rate |
# | `critic.cliprange_value` | 0.5 | the value clip $c$ |
# | `critic.ppo_mini_batch_size`, `critic.ppo_epochs` | as the actor's | the critic's own update schedule |
# | `trainer.critic_warmup` | 0 | steps that train only the critic |
#
# | metric | healthy | worrying |
# |---|---|---|
# | `critic/vf_explained_var` | rising above 0 | negative for long: the critic is worse than the batch mean |
# | `critic/vf_loss` | falling | rising: the targets move faster than the critic learns |
# | `critic/vf_clipfrac` | small | large: raise `cliprange_value` or lower `critic.optim.lr` |
# | `critic/advantages/mean` | 0 after whitening | |
#
# ## 7. Exercises
#
# Open `exercises/ch02_gae.py` and grade with `make grade`
# (one exercise, all of its checks: `make grade EX=2.1`).
#
# | # | function | what it checks |
# |---|---|---|
# | 2.1 | `gae_scan` | the hand toy; verl's values on padded rows and holes in the mask, for several $\gamma, \lambda$; $\lambda = 1$ is reward-to-go minus $V$ |
# | 2.2 | `whiten_advantages` | batch-wide statistics, unbiased variance, padding set to 0, a single valid token is an error |
#
# <details>
# <summary>Hint for 2.1</summary>
# Loop <code>for t in reversed(range(L))</code> with two running tensors of shape (B,):
# <code>next_value</code> and <code>last_gae</code>. On a masked token, keep the old running values:
# <code>x = new * m + old * (1 - m)</code>.
# </details>
#
# <details>
# <summary>Hint for 2.2</summary>
# Compute one mean and one unbiased variance over all positions where the mask is 1, then
# <code>(A - mean) * torch.rsqrt(var + 1e-8)</code>, then multiply by the mask.
# </details>
#
# **Failure-mode question.** You run PPO with a fresh critic and `algorithm.lam=0`. What does the actor
# learn, and which metric tells you?
#
# <details>
# <summary>Answer</summary>
# With $\lambda = 0$ each token's advantage is $\delta_t = r_t + \gamma V(s_{t+1}) - V(s_t)$. The reward
# $r_t$ is non-zero only on the last token, so every other token is judged by the critic alone. A fresh
# critic's values are noise, so the advantages are noise, and after whitening that noise has unit
# variance: the actor takes full-size steps in random directions. In section 5 this run fell from
# 0.470 to 0.287 in 15 steps (seeds 0.240 to 0.310) while the runs with $\lambda > 0$ rose to between
# 0.523 and 0.537 (means over seeds). The metrics that tell you are the rewards: the training reward
# `critic/score/mean` drifts down (0.277 at the first step, 0.224 at the last, mean over seeds) and the
# validation accuracy falls. `critic/vf_explained_var` does not warn you: after a very negative start it
# rose higher than in any other setting of section 5, because with $\lambda = 0$ the critic's targets
# are its own next values. Use $\lambda$ close to 1 until the critic is good, or warm the critic up
# first (`trainer.critic_warmup`).
# </details>
#
# ### The library's code, after you tried
#
# minirl's versions of the functions the exercises ask for, read from the library itself. Open them
# after your own answers pass (or after you are stuck with the hints): they are the reference the
# graders compare with.

# %%
from IPython.display import display

for function in (gae.compute_gae_advantage_return, core.masked_whiten):
    display(show_source(function, collapsed=True))

# %% [markdown]
# ## 8. Where next
#
# - [Lab A · GSM8K with PPO](lab_a_gsm8k.ipynb): the advantage and the update in a full PPO run.
# - [Chapter 1 · PPO](01_ppo.ipynb): the clipped loss these advantages feed.
# - [Chapter 7 · RLOO / ReMax / REINFORCE++](07_baselines.ipynb): baselines without a critic, and how to
#   measure an estimator's variance.
# - [Chapter 4 · GRPO](04_grpo.ipynb): the group as the baseline.
# - References: Schulman et al., *High-Dimensional Continuous Control Using Generalized Advantage
#   Estimation* (2016); verl docs `docs/algo/ppo.md`.

# %%
print_run_time()
