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
# # Chapter 11 · The policy-loss family: GSPO, SAPO, CISPO, GMPO, DPPO, Clip-Cov / KL-Cov
#
# | The five answers | |
# |---|---|
# | **Problem** | PPO's loss clips one importance ratio per token, while the reward belongs to the whole answer. For long answers the token ratios are noisy, the clip throws away the gradient of exactly the rare tokens that matter, and the policy's entropy collapses. Since 2025 a family of losses changes one piece each: what the ratio is (per answer), how the update is bounded (a smooth gate, a clipped weight, a trust region on probabilities), or which tokens are restrained (those that drive entropy down). Which piece does what, and what shows on a small task? |
# | **Core formula** | Every loss here has the gradient $w_{i,t}\,A_{i,t}\,\nabla\log\pi_\theta(a_{i,t})$ and differs only in the weight $w$, a function of the ratio $r_{i,t} = \pi_\theta(a_{i,t})/\pi_{\text{old}}(a_{i,t})$. PPO: $w = r$ inside $[1-\varepsilon, 1+\varepsilon]$, 0 outside (on the side $A$ pushes toward). GSPO: $w = s_i$ for every token of answer $i$, with $s_i = \exp\big(\frac{1}{\lvert y_i\rvert}\sum_t \log r_{i,t}\big)$, clipped as one. SAPO: $w = r \cdot 4\sigma(\tau(r-1))(1-\sigma(\tau(r-1)))$. CISPO: $w = \operatorname{clip}(r, 1-\varepsilon_l, 1+\varepsilon_h)$, never 0. Clip-Cov / KL-Cov: PPO, except on the few tokens with the largest $(\log\pi - \overline{\log\pi})(A - \bar A)$. |
# | **Beginner's view** | PPO's clip is a safety rope tied to every token separately. GSPO ties one rope per answer; SAPO makes the rope elastic; CISPO lets the rope limit how hard a token pulls but never cut it loose; Clip-Cov and KL-Cov hold back only the few tokens that would make the model over-confident. |
# | **verl source** | `verl/trainer/ppo/core_algos.py::register_policy_loss`, `get_policy_loss_fn` and the twelve registered losses (`compute_policy_loss_vanilla`, `_gspo`, `_sapo`, `_cispo`, `_geo_mean`, `_dppo_tv`, `_dppo_kl`, `_gpg`, `_dro`, `_clip_cov`, `_kl_cov`, `_bypass_mode`); `verl/workers/utils/losses.py::ppo_loss` (the actor calls `get_policy_loss_fn(config.policy_loss.loss_mode)`); the estimators `compute_gdpo_outcome_advantage`, `compute_grpo_passk_outcome_advantage`, `compute_opo_outcome_advantage`, `compute_optimal_token_baseline_advantage`; `examples/gspo_trainer/`, `examples/sapo_trainer/`, `examples/cispo_trainer/`, `examples/gmpo_trainer/` (tag v0.9.0). |
# | **Where next** | [Chapter 1 · PPO](01_ppo.ipynb): the clip every loss here modifies; [Chapter 5 · DAPO](05_dapo.ipynb): clip-higher and the entropy collapse these losses address; [Lab C · Reading the metrics](lab_c_metrics.ipynb): `pg_clipfrac`, `ppo_kl` and entropy, which mean something different under each loss; [Lab D · The GRPO config](lab_d_grpo_config.ipynb): where `policy_loss.loss_mode` sits in a full script. Back to [the reading map](index.md). |
#
# Run time: printed at the end (one batch measured, then twenty-one short training runs: seven variants, three seeds
# each, two at a time). With `MINIRL_FAST=1` everything shrinks.

# %%
import collections
import functools
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from minirl import core, data, grpo, models, rewards, sft
from minirl.advantage import ADV_ESTIMATOR_REGISTRY, get_adv_estimator_fn
from minirl.book.notebook import (
    compare_table,
    fast_mode,
    plot_comparison,
    print_run_time,
    run_grid,
    show_source,
    where_this_ran,
)
from minirl.book.variance import gradient_noise, log_probs_after_updates, policy_gradient_draws
from minirl.config import load_config
from minirl.entropy_cov import clip_cov_selection, kl_cov_selection
from minirl.metrics import logp_advantage_covariance
from minirl.policy_loss import POLICY_LOSS_REGISTRY, get_policy_loss_fn, policy_loss_view
from minirl.rollout import generate_sequences

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "ch11"
WARM = sft.default_warm_start(sft.CHAIN_SFT)  # Chapters 5 and 8's task: sums of 3-4 one-digit numbers
PROMPTS, SAMPLES = (8, 4) if fast_mode() else (32, 8)
ACTOR = "actor_rollout_ref.actor"


@functools.cache
def actor_config(*overrides):
    """minirl's actor config from verl-style overrides, as a policy loss receives it (no global batch counts)."""
    return policy_loss_view(load_config([f"{ACTOR}.{o}" for o in overrides], announce=False).actor_rollout_ref.actor,
                            {})


# %% [markdown]
# ## 1. The problem, shown: one ratio per token, one reward per answer
#
# verl picks the policy loss by name (`actor_rollout_ref.actor.policy_loss.loss_mode`). Its actor calls
# `get_policy_loss_fn(name)` with the same arguments for every loss. minirl's registry has the same twelve names:

# %%
print(len(POLICY_LOSS_REGISTRY), "policy losses:", sorted(POLICY_LOSS_REGISTRY))

# %% [markdown]
# Now the ratios themselves, on a real batch. Sample answers from the chain task's warm start (the policy that
# sampled, $\pi_{\text{old}}$), then make the update a PPO step makes: four mini-batches of the vanilla loss at
# lr 2e-4, each an AdamW step. The last mini-batch sees a policy three steps away from the one that sampled.
# For every answer we compare three log-ratios against $\pi_{\text{old}}$:
#
# - a token's $\log r_{i,t}$, which PPO clips;
# - the answer's $\sum_t \log r_{i,t}$, the log of the true sequence ratio $\pi_\theta(y_i)/\pi_{\text{old}}(y_i)$;
# - GSPO's $\frac{1}{\lvert y_i\rvert}\sum_t \log r_{i,t}$, the same, divided by the length.

# %%
tokenizer, policy = models.load_tokenizer(WARM), models.load_policy(WARM)
rows = data.read_parquet(WARM / "data" / "train.parquet").to_list()[:PROMPTS]
prompts = data.encode_prompts(tokenizer, [r["prompt"] for r in rows for _ in range(SAMPLES)], 64)
out = generate_sequences(policy, prompts["input_ids"], prompts["attention_mask"], tokenizer.eos_token_id,
                         tokenizer.pad_token_id, sft.CHAIN_SFT.response_length,
                         generator=torch.Generator().manual_seed(0))
texts = tokenizer.batch_decode([r[:n] for r, n in zip(out["responses"], out["response_length"])],
                               skip_special_tokens=True)
truths = [r["reward_model"]["ground_truth"] for r in rows for _ in range(SAMPLES)]
scored = [rewards.compute_chain_score(t, g) for t, g in zip(texts, truths)]
right = torch.tensor([s["score"] for s in scored])
worked = torch.tensor([s["worked"] for s in scored])
uids = [str(i) for i in range(PROMPTS) for _ in range(SAMPLES)]
mask = out["response_mask"].float()
lengths = mask.sum(-1)
inputs = {k: out[k] for k in ("input_ids", "attention_mask", "position_ids")}
R = sft.CHAIN_SFT.response_length
advantages, _ = grpo.compute_grpo_outcome_advantage(core.place_scores_on_last_token(right, mask), mask, uids)
with torch.no_grad():
    old_log_prob, _ = models.compute_log_probs(policy, **inputs, response_length=R)

# four AdamW steps of the vanilla loss, one per mini-batch (ppo_mini_batch_size = batch / 4), on a fresh copy
new_log_prob = log_probs_after_updates(WARM, inputs, R, old_log_prob, advantages, mask, lr=2e-4, mini_batches=4)

log_ratio = (new_log_prob - old_log_prob) * mask
token_lr = log_ratio[mask.bool()]
seq_sum = log_ratio.sum(-1)
seq_mean = seq_sum / lengths
print(f"{len(mask)} answers, {int(mask.sum())} tokens; lengths {int(lengths.min())}-{int(lengths.max())}")
print(f"{'answer length':>14s} {'answers':>8s} {'std log r (token)':>18s} {'std sum (sequence)':>19s} "
      f"{'std mean (GSPO)':>16s}")
for low, high in ((1, 12), (13, 30), (31, 48)):
    rows_in = (lengths >= low) & (lengths <= high)
    if rows_in.sum() < 2:
        continue
    tokens_in = log_ratio[rows_in][mask[rows_in].bool()]
    print(f"{f'{low}-{high}':>14s} {int(rows_in.sum()):8d} {tokens_in.std():18.4f} {seq_sum[rows_in].std():19.4f} "
          f"{seq_mean[rows_in].std():16.4f}")
eps = 0.2
token_clipped = ((token_lr.exp() > 1 + eps) | (token_lr.exp() < 1 - eps)).float().mean()
seq_clipped = ((seq_mean.exp() > 1 + 4e-4) | (seq_mean.exp() < 1 - 3e-4)).float().mean()
answers_with_clipped_token = (((log_ratio.exp() > 1 + eps) | (log_ratio.exp() < 1 - eps)) & mask.bool()).any(-1)
print(f"tokens outside PPO's [0.8, 1.2]: {token_clipped:.3f}; answers with at least one such token: "
      f"{answers_with_clipped_token.float().mean():.3f}; answers whose GSPO ratio is outside [1 - 3e-4, 1 + 4e-4]: "
      f"{seq_clipped:.3f}")

# %% [markdown]
# Read the table by columns (the chain task's answers are either direct, up to 12 tokens, or worked, 31 tokens or
# more; none falls between). A token's log-ratio spreads 0.18 in the short answers and 0.11 in the long ones, and
# PPO clips tokens wherever they fall: only 0.062 of the tokens leave $[0.8, 1.2]$, but 0.629 of the answers hold at
# least one such token. The log of the true sequence ratio is a sum, and its spread grows with the length (0.52,
# then 0.82): an importance weight $\pi_\theta(y)/\pi_{\text{old}}(y)$ over a whole long answer is too noisy to
# use. GSPO's length-normalised ratio spreads least (0.066 for the short answers, 0.019 for the long ones here).
# That the long answers' spread is the smaller one belongs to this warm start: from five other warm starts (built
# on an AMD EPYC, `bench/effect_spread.py --swap chain`) it was smaller in four and larger in one. Dividing by the
# length takes the length out of the spread, not the noise.
# GSPO's clip range is therefore tiny: verl's GSPO example uses $[1 - 3\cdot10^{-4}, 1 + 4\cdot10^{-4}]$
# (`examples/gspo_trainer/run_qwen3_8b_fsdp.sh`, from the paper), with lr 1e-6 on an 8B model. After our update
# at lr 2e-4, 0.984 of the answers are outside that range: section 3 trains with it, and with a range sized to
# these ratios.
#
# GSPO's loss gives every token of answer $i$ the value $s_i$ but its own gradient, with a stop-gradient trick:
# $\log s_{i,t} = \operatorname{sg}[\log s_i] + \log\pi_\theta(a_{i,t}) - \operatorname{sg}[\log\pi_\theta(a_{i,t})]$.
# The value is $\log s_i$; the gradient is that of $\log\pi_\theta(a_{i,t})$. (Exercise 11.1 writes it; the
# library's version is shown after the exercises.)
#
# ## 2. Soft gates and gradient-preserving clips, drawn from the functions
#
# The clearest way to compare the losses is the weight $w$ each puts on one token's $A\,\nabla\log\pi$, as the
# ratio moves. Below, each registered loss is called on a single token (probability 0.3 under $\pi_{\text{old}}$,
# $r\,0.3$ under $\pi_\theta$) and autograd gives $w = -\partial L/\partial \log\pi_\theta \,/\, A$. Nothing is
# drawn by hand: these are the functions the trainer calls.

# %% tags=["central-figure"]
old_p = 0.3
ratios = torch.linspace(0.5, 2.0, 61, dtype=torch.float64)
LOSSES = {"vanilla (PPO)": ("vanilla", ()), "cispo": ("cispo", ("clip_ratio_low=10",)),
          "sapo": ("sapo", ()), "dppo_tv": ("dppo_tv", ()), "dppo_kl": ("dppo_kl", ()),
          "geo_mean (1-token answer)": ("geo_mean", ()), "gspo (1-token answer)": ("gspo", ())}


def gradient_weight(name, overrides, advantage):
    """w(r) for one token of a one-token answer: -dL/dlog pi / A, for every ratio in `ratios`."""
    weights = []
    for r in ratios:
        new = torch.log(torch.tensor([[old_p * r]], dtype=torch.float64)).requires_grad_(True)
        old = torch.log(torch.tensor([[old_p]], dtype=torch.float64))
        loss, _ = get_policy_loss_fn(name)(old, new, torch.tensor([[advantage]], dtype=torch.float64),
                                           torch.ones(1, 1), config=actor_config(*overrides))
        (grad,) = torch.autograd.grad(loss, new)
        weights.append(-grad.item() / advantage)
    return torch.tensor(weights)


fig, axes = plt.subplots(1, 2, figsize=(12, 3.6), sharey=True)
curves = {}
for ax, advantage in zip(axes, (1.0, -1.0)):
    for label, (name, overrides) in LOSSES.items():
        curves[label, advantage] = gradient_weight(name, overrides, advantage)
        ax.plot(ratios, curves[label, advantage], label=label)
    ax.set(title=f"A = {advantage:+.0f}", xlabel="ratio r = pi_theta / pi_old", ylabel="gradient weight w")
    ax.axvline(1.0, color="grey", lw=0.5)
    ax.grid(alpha=0.3)
axes[0].legend(fontsize=8)
plt.tight_layout()
plt.show()
at = {r: int(torch.argmin((ratios - r).abs())) for r in (0.7, 1.0, 1.5)}
for advantage in (1.0, -1.0):
    print(f"A = {advantage:+.0f}: " + "; ".join(
        f"{label} " + ", ".join(f"w({r})={curves[label, advantage][i]:.2f}" for r, i in at.items())
        for label in LOSSES))

# %% [markdown]
# What the curves show (values printed above):
#
# - **PPO** follows $w = r$ until the clip, then drops to 0 on the side the advantage pushes toward (above 1.2
#   for $A > 0$: $w(1.5) = 0$; below 0.8 for $A < 0$: $w(0.7) = 0$) and keeps $w = r$ on the other side, until the
#   dual clip at 3.
# - **CISPO** never drops to 0: it holds the weight at $1 + \varepsilon_h = 1.2$ above the clip (verl's CISPO
#   example sets `clip_ratio_low=10`, so there is no lower bound). The token keeps pulling, at a bounded strength.
# - **SAPO**'s gate equals PPO's weight at $r = 1$ and has no cliff. With verl's default temperatures
#   ($\tau_{\text{pos}} = 1.0$, $\tau_{\text{neg}} = 1.05$) it barely damps inside $[0.5, 2]$: $w(1.5) = 1.41$
#   where PPO gives 0, and $w(0.7) = 0.68$ against $r = 0.7$. The gate acts on larger moves, or with a larger
#   $\tau$ (the paper's point is the smooth shape; its temperatures are tuned for its models).
# - **DPPO-TV** measures the move in probability: with $\pi_{\text{old}} = 0.3$ the trust region
#   $\lvert\pi_\theta - \pi_{\text{old}}\rvert \le 0.2$ ends at $r = 1.67$ (and $r = 0.33$), far wider than PPO's
#   for this token, narrower for a token at 0.9. The weight inside is $\min(r, c)$ applied to $\log\pi$.
#   **DPPO-KL** bounds the binary KL between the old and new probability of the token instead; for this token
#   its region also holds the whole plotted range ($w(1.5) = 1.50$ for both signs).
# - **GMPO** (`geo_mean`) clips the geometric mean of an answer's ratios, in log space. For a one-token answer
#   that is one ratio, and its weight is PPO's ($w(1.5) = 0$ for $A > 0$, $w(0.7) = 0$ for $A < 0$); like
#   GSPO, it differs only across the tokens of longer answers.
# - **GSPO** on a one-token answer is PPO with GSPO's tiny range: for one token the sequence ratio is the token
#   ratio. The difference appears only across the tokens of longer answers (section 1).
#
# ## 3. Training with each loss (3 seeds)
#
# Seven runs per seed, from the chain task's warm start, as in Chapter 5: GRPO advantages, 32 prompts x 8 answers,
# 4 mini-batches x 2 epochs per step (so the later updates are off-policy and the losses differ), lr 2e-4, 8 steps,
# validation by 8 sampled answers on 40 held-out prompts. Each variant sets only its loss, with the settings of
# verl's example script for it (GSPO: $\varepsilon = 3\cdot10^{-4}/4\cdot10^{-4}$ and `seq-mean-token-mean`;
# CISPO: `clip_ratio_low=10`, `clip_ratio_high=0.2`; SAPO: $\tau$ 1.0/1.05). `gspo_0.05` is GSPO with a range
# sized to section 1's ratios ($\varepsilon = 0.05$ on each side). Clip-Cov and KL-Cov use a larger token share
# than verl's 0.0002 (0.02: a batch here has about 4000 tokens, so 0.0002 would pick one), with verl's covariance
# window $(1, 5)$.

# %%
STEPS = 1 if fast_mode() else 8
BASE = [*sft.train_overrides(WARM, sft.CHAIN_SFT), f"data.train_batch_size={PROMPTS}",
        f"actor_rollout_ref.rollout.n={SAMPLES}", f"{ACTOR}.ppo_mini_batch_size={PROMPTS // 4}",
        f"{ACTOR}.ppo_epochs={1 if fast_mode() else 2}", f"{ACTOR}.optim.lr=2e-4",
        f"trainer.total_training_steps={STEPS}", f"trainer.test_freq={STEPS}", "trainer.val_before_train=False",
        f"data.val_max_samples={8 if fast_mode() else 40}", "actor_rollout_ref.rollout.val_kwargs.n=8",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=True", "actor_rollout_ref.rollout.val_kwargs.temperature=1.0"]
VARIANTS = {
    "vanilla": [],
    "gspo": [f"{ACTOR}.policy_loss.loss_mode=gspo", f"{ACTOR}.clip_ratio_low=3e-4", f"{ACTOR}.clip_ratio_high=4e-4",
             f"{ACTOR}.loss_agg_mode=seq-mean-token-mean"],
    "gspo_0.05": [f"{ACTOR}.policy_loss.loss_mode=gspo", f"{ACTOR}.clip_ratio_low=0.05",
                  f"{ACTOR}.clip_ratio_high=0.05", f"{ACTOR}.loss_agg_mode=seq-mean-token-mean"],
    "cispo": [f"{ACTOR}.policy_loss.loss_mode=cispo", f"{ACTOR}.clip_ratio_low=10", f"{ACTOR}.clip_ratio_high=0.2"],
    "sapo": [f"{ACTOR}.policy_loss.loss_mode=sapo", f"{ACTOR}.loss_agg_mode=seq-mean-token-mean"],
    "clip_cov": [f"{ACTOR}.policy_loss.loss_mode=clip_cov", f"{ACTOR}.policy_loss.clip_cov_ratio=0.02"],
    "kl_cov": [f"{ACTOR}.policy_loss.loss_mode=kl_cov", f"{ACTOR}.policy_loss.kl_cov_ratio=0.02"],
}
runs = run_grid(RUNS, VARIANTS, *BASE)
VAL = "val-core/minirl/chain_sum/acc/mean@8"
plot_comparison({k: runs[k] for k in ("vanilla", "gspo", "gspo_0.05", "cispo", "sapo")},
                [("actor/pg_clipfrac", "pg_clipfrac (what each loss counts)", "step"),
                 ("actor/entropy", "entropy (per token)", "step"),
                 ("critic/score/mean", "training reward", "step")])
for key in (VAL, "actor/entropy", "actor/pg_clipfrac", "critic/score/mean"):
    logged = {name: seeds for name, seeds in runs.items() if any(key in r for r in seeds[0])}  # kl_cov: no clipfrac
    print(compare_table(logged, key), "\n")

# %% [markdown]
# What we saw (3 seeds, 8 steps; the tables above, in the order validation `mean@8`, entropy, `pg_clipfrac`,
# training reward):
#
# - **GSPO with the paper's range barely learns here.** Its validation accuracy ends at 0.390 (seeds
#   0.347-0.412) against vanilla PPO's 0.522 (seeds 0.512-0.537), its entropy stays at 0.187 against 0.061, and it
#   clips 0.562 of the tokens (whole answers) against PPO's 0.005. Section 1 said why: at our learning rate the
#   sequence ratios leave $[1 - 3\cdot10^{-4}, 1 + 4\cdot10^{-4}]$ after the first optimizer step, so only the
#   first mini-batch of each step trains. With a range sized to the ratios (`gspo_0.05`) it clips 0.058 of the
#   tokens and reaches 0.503 (seeds 0.456-0.562): within noise of PPO, with a higher entropy (0.137). The range is
#   a property of the learning rate and the model, not a constant to copy.
# - **CISPO ends above PPO, beyond the seed spread**: 0.556 (seeds 0.553-0.559) against 0.522. One task, 8
#   steps, 3 seeds: a hint in CISPO's favour, not a ranking.
# - **SAPO, Clip-Cov and KL-Cov are within noise of PPO** in accuracy (0.535, 0.502, 0.493; KL-Cov's seeds spread
#   from 0.338 to 0.572).
# - **The clip fractions mean different things.** GSPO's counts the tokens of clipped answers; CISPO's counts
#   tokens whose weight was capped (their gradient is kept, 0.003); SAPO logs 0 (it has no clip); Clip-Cov's
#   counts the tokens it detached (0.011). A Lab C reading of `pg_clipfrac` must know the loss.
#
# ## 4. The entropy mechanism: Clip-Cov and KL-Cov
#
# Cui et al. (2025) show that, to first order, a policy-gradient step changes the entropy by minus the covariance
# of the sampled tokens' log-probability and their advantage: a confident token that is rewarded becomes more
# confident, an unlikely one that is penalised less likely. minirl logs that covariance as `minirl/logp_adv_cov`
# (`minirl/metrics.py::logp_advantage_covariance`). Clip-Cov removes the gradient of a few tokens with a large
# covariance (chosen at random in a window); KL-Cov adds a penalty $\text{coef}\cdot\lvert\log r\rvert$ to the
# top share. First, where the covariances of our batch lie (the window verl uses is $(1, 5)$):

# %%
with torch.no_grad():
    centred_logp = old_log_prob - core.masked_mean(old_log_prob, mask)
    centred_adv = advantages - core.masked_mean(advantages, mask)
    cov = (centred_logp * centred_adv)[mask.bool()]
print(f"token covariances: max {cov.max():.3f}, 99th percentile {cov.quantile(0.99):.3f}, "
      f"share above 1: {(cov > 1).float().mean():.4f}, share above 0.05: {(cov > 0.05).float().mean():.4f}; "
      f"batch covariance {logp_advantage_covariance(old_log_prob, advantages, mask):.4f}")
# the tokens each loss would single out on this batch, with the runs' share 0.02 (on-policy: nothing PPO-clipped)
torch.manual_seed(0)  # Clip-Cov draws its tokens with torch.randperm on the global generator, as verl
clip_pick = clip_cov_selection(advantages, old_log_prob, mask, torch.zeros_like(mask, dtype=torch.bool),
                               clip_cov_ratio=0.02, clip_cov_lb=1.0, clip_cov_ub=5.0)
kl_pick = kl_cov_selection(advantages, old_log_prob, mask, kl_cov_ratio=0.02)
for name, picked in (("every token", mask.bool()), ("Clip-Cov's picks", clip_pick), ("KL-Cov's picks", kl_pick)):
    chosen_p, chosen_a = old_log_prob[picked].exp(), advantages[picked]
    characters = collections.Counter(tokenizer.convert_ids_to_tokens(out["responses"][picked].tolist()))
    print(f"{name:17s} {int(picked.sum()):5d} tokens: mean pi_old {chosen_p.mean():.3f}, "
          f"mean A {chosen_a.mean():+.3f}, share with A > 0 {(chosen_a > 0).float().mean():.3f}; "
          f"most common: {characters.most_common(4)}")
print(f"picked by both: {int((clip_pick & kl_pick).sum())} tokens")
ENTROPY_RUNS = {k: runs[k] for k in ("vanilla", "clip_cov", "kl_cov")}
plot_comparison(ENTROPY_RUNS, [("minirl/logp_adv_cov", "cov(log pi, A) of the batch", "step"),
                               ("actor/entropy", "entropy (per token)", "step"),
                               (VAL, "validation mean@8", "step")])
print(compare_table(ENTROPY_RUNS, "minirl/logp_adv_cov"))

# %% [markdown]
# On the sampled batch the covariance is positive (0.0293): the mechanism that lowers entropy is at work. A few
# tokens carry it: 0.0223 of them have a covariance above verl's lower bound of 1, the largest 5.331. With
# `clip_cov_ratio=0.02` the budget is about as many tokens as the window holds, so Clip-Cov detaches nearly all of
# them; at verl's 0.0002 it would detach one token per batch of this size (it was tuned for batches of millions of
# tokens).
#
# **Which tokens they pick.** Both pick 76 tokens here, and mostly the same ones (68 in common): unlikely tokens
# (mean $\pi_{\text{old}}$ 0.134 for Clip-Cov, 0.118 for KL-Cov, against 0.917 over all tokens) in answers that
# failed (every pick has $A < 0$; mean $A = -0.797$), mostly digits. A covariance is large when both factors are
# far below their means: a rare token in a wrong answer. The plain gradient pushes such a token further down,
# which makes the already likely tokens likelier: that is the entropy falling. Clip-Cov stops that push for the
# picked tokens; KL-Cov lets it happen, but pays $\text{coef}\cdot\lvert\log r\rvert$ for moving them. The two
# differ in how they pick (a random draw inside the window, or the top share), not, on this batch, in what.
#
# And it shows: **Clip-Cov keeps the entropy higher**, 0.073 (seeds 0.070-0.076) against PPO's 0.061 (seeds
# 0.058-0.067), beyond the seed spread (section 3's entropy table), while its accuracy, 0.502 (seeds
# 0.450-0.528), stays within noise of PPO's. KL-Cov's entropy (0.060) does not differ from PPO's in 8 steps. The
# batch covariance at the last step (the table just above) is within noise of PPO's for both (Clip-Cov's is a
# little above KL-Cov's): what Clip-Cov changes is which tokens get to lower the entropy, not the batch-wide
# average.
#
# ## 5. New estimators, on the same batch
#
# verl 0.9.1 registers fourteen advantage estimators; Chapter 7 measured five. The others change what the
# baseline is, and one batch shows each one's rule (`minirl/gdpo.py`, `grpo.py`, `opo.py`, `optimal_baseline.py`):

# %%
print(len(ADV_ESTIMATOR_REGISTRY), "estimators:", sorted(ADV_ESTIMATOR_REGISTRY))
scores = core.place_scores_on_last_token(right, mask)
algo = load_config(["+algorithm.gdpo_reward_keys=[acc,worked]", "+algorithm.gdpo_reward_weights=[1.0,0.1]",
                    "algorithm.adv_estimator=gdpo"], announce=False).algorithm
combined = core.place_scores_on_last_token(right + 0.1 * worked, mask)  # one reward: acc + 0.1 * worked
grpo_adv, _ = grpo.compute_grpo_outcome_advantage(combined, mask, uids)
gdpo_adv, _ = get_adv_estimator_fn("gdpo")(
    token_level_rewards=combined, response_mask=mask, index=uids, config=algo,
    non_tensor_batch={"acc": right.numpy(), "worked": worked.numpy()},
    batch={"prompts": out["input_ids"][:, :-R], "attention_mask": out["attention_mask"]})


def worked_push(adv, acc_varies):
    """Mean advantage of worked minus direct answers with the same correctness in the same group, over the groups
    whose correctness varies (acc_varies=True) or does not."""
    gaps = []
    for uid in sorted(set(uids)):
        group = torch.tensor([u == uid for u in uids])
        if bool(right[group].min() != right[group].max()) != acc_varies:
            continue
        for correct in (0.0, 1.0):
            rows_in = group & (right == correct)
            if (worked[rows_in] == 1).any() and (worked[rows_in] == 0).any():
                a = adv[rows_in, 0]
                gaps.append((a[worked[rows_in] == 1].mean() - a[worked[rows_in] == 0].mean()).item())
    return (sum(gaps) / len(gaps) if gaps else float("nan")), len(gaps)


for name, adv in (("grpo on acc + 0.1 worked", grpo_adv), ("gdpo [acc, worked] x [1, 0.1]", gdpo_adv)):
    for acc_varies in (True, False):
        gap, cells = worked_push(adv, acc_varies)
        print(f"{name:30s} groups where correctness {'varies' if acc_varies else 'is constant':11s}: worked-minus-"
              f"direct advantage at equal correctness {gap:+.3f} ({cells} cells)")

passk, _ = get_adv_estimator_fn("grpo_passk")(token_level_rewards=scores, response_mask=mask, index=uids,
                                               config=algo)
plain, _ = grpo.compute_grpo_outcome_advantage(scores, mask, uids)
print(f"grpo: {(plain[:, 0] != 0).float().mean():.3f} of the answers get a non-zero advantage; grpo_passk: "
      f"{(passk[:, 0] != 0).float().mean():.3f} (only the best answer of a group, and only if the rest fail)")
opo, _ = get_adv_estimator_fn("opo")(token_level_rewards=scores, response_mask=mask, index=uids)
centred, _ = grpo.compute_grpo_outcome_advantage(scores, mask, uids, norm_adv_by_std_in_grpo=False)
print(f"opo vs grpo without std: largest baseline difference {(opo[:, 0] - centred[:, 0]).abs().max():.3f} "
      f"(OPO weights each answer's reward by its length: long worked answers move the baseline more)")
with torch.no_grad():
    logits = models.response_logits(policy, **inputs, response_length=R)
sum_pi_squared = core.sum_pi_squared_from_logits(logits)
otb, _ = get_adv_estimator_fn("optimal_token_baseline")(
    token_level_rewards=scores, response_mask=mask, index=uids, old_log_probs=old_log_prob,
    sum_pi_squared=sum_pi_squared)
w_scores = ((1 - 2 * old_log_prob.exp() + sum_pi_squared) * mask)  # verl's per-token score-norm proxy W
for name, adv in (("grpo without std", centred), ("optimal_token_baseline", otb)):
    proxy = ((adv ** 2) * w_scores).sum(-1).mean()  # E[sum_t A_t^2 W_t]: the gradient's second moment, proxied
    print(f"{name:24s} variance proxy E[sum_t A_t^2 W_t] = {proxy:.4f}")

# the gradient variance itself, measured as in Chapter 7: fresh batches of 8 questions x 4 answers, each
# estimator's policy gradient on the same answers, against a reference (RLOO's mean over other draws); 3 sets
DRAWS = 4 if fast_mode() else 16
COMPARED = ["grpo", "rloo", "optimal_token_baseline"]
measure = functools.partial(policy_gradient_draws, policy, tokenizer, rows[:8], n=4, response_length=R)
reference = measure(draws=2 * DRAWS, estimators=["rloo"], seed=100)["rloo"].mean(0)
relative_variance = {name: [] for name in COMPARED}
for draw_set in range(3):
    draws = measure(draws=DRAWS, estimators=COMPARED, seed=draw_set)
    for name in COMPARED:
        relative_variance[name].append(gradient_noise(draws[name], reference)["relative_variance"])
for name, values in relative_variance.items():
    print(f"{name:24s} relative variance {sum(values) / 3:.2f} (sets of {DRAWS} draws: "
          f"{min(values):.2f}-{max(values):.2f})")

# %% [markdown]
# - **GDPO** normalises each reward dimension within its group before weighting them. The test: reward the worked
#   style with weight 0.1 beside correctness, and measure how much more advantage a worked answer gets than a
#   direct one of the same correctness in the same group. Where correctness varies within the group, GRPO on the
#   summed reward and GDPO give similar pushes (0.209 and 0.245, over 32 cells). Where correctness is constant
#   (one group here), GRPO divides the 0.1 differences by their own tiny std and the small reward becomes the
#   whole signal (2.828), while GDPO keeps its weight (0.308). GDPO makes the small reward's weight mean the same
#   in every group.
# - **pass@k training** (`grpo_passk`) rewards a group only through its best answer: 0.027 of the answers get a
#   non-zero advantage against GRPO's 0.938, in exchange for optimising "one of k is right".
# - **OPO** replaces the group mean by a length-weighted mean; with direct and worked answers in one group the
#   baseline moves toward the long answers' rewards, by up to 0.347 here.
# - **The optimal token baseline** (OTB) chooses, per token position, the baseline that minimises verl's
#   variance proxy; it needs `actor_rollout_ref.actor.calculate_sum_pi_squared=true`. On this batch the proxy falls
#   from 0.2120 (group mean, no std) to 0.1819. The proxy is verl's estimate; measured as in Chapter 7 (the last
#   lines above: three sets of 16 fresh draws, relative variance against RLOO's mean gradient over 32 other
#   draws), OTB's 2.62 (sets 1.77-3.45) is within noise of GRPO's 3.04 (2.48-3.51) and RLOO's 3.09 (2.51-3.56).
#   Lower on average, as the proxy says, but not by more than the draws blur on this task.
#
# Does pass@k training do what it promises when trained? Three more runs, `algorithm.adv_estimator=grpo_passk`,
# everything else as section 3's vanilla runs; validation reports `mean@8` (one answer right) and `best@8/mean`
# (one of 8 right, verl's bootstrap) beside `best@2/mean`:

# %%
runs["grpo_passk"] = run_grid(RUNS, {"grpo_passk": ["algorithm.adv_estimator=grpo_passk"]}, *BASE)["grpo_passk"]
PASSK = {k: runs[k] for k in ("vanilla", "grpo_passk")}
for key in (VAL, "val-core/minirl/chain_sum/acc/best@8/mean", "val-aux/minirl/chain_sum/acc/best@2/mean",
            "actor/entropy"):
    print(compare_table(PASSK, key), "\n")

# %% [markdown]
# What pass@k training did in 8 steps (3 seeds each):
#
# - **It kept the entropy high**: 0.166 (seeds 0.149-0.180) against GRPO's 0.061. Only a group's best answer
#   is pushed, and only when the rest fail, so far fewer tokens are sharpened.
# - **It did not raise pass@8 above GRPO's**: `best@8` 0.822 (seeds 0.768-0.900) against 0.868 (0.849-0.893),
#   within noise. What it gave up is beyond the spread: `mean@8` 0.330 (0.287-0.372) against 0.522, and `best@2`
#   0.508 against 0.680.
#
# The paper's claim (pass@k training keeps exploring and wins at large k) is about long runs where GRPO's
# entropy collapses. In 8 steps the entropy difference is there; the pass@8 payoff is not, and GRPO's pass@8
# of 0.868 leaves little room. We state what we saw.
#
# ## 6. Which one when
#
# | loss | the papers' claim | what this chapter's runs show |
# |---|---|---|
# | `gspo` | stable training of long answers and mixture-of-experts models (Qwen3); sequence-level clipping | its sequence ratio spreads least for long answers (section 1); with the paper's range at our learning rate it barely learns, with a range sized to the ratios it matches PPO (section 3) |
# | `cispo` | keeps the gradient of rare "reflection" tokens that PPO clips; faster long-CoT RL (MiniMax-M1) | the weight never drops to 0 (section 2); the only loss above PPO beyond the seed spread here (section 3) |
# | `sapo` | smooth, asymmetric gating stabilises RL (Qwen) | no cliff, but with the default temperatures little damping inside $[0.5, 2]$ (section 2); within noise of PPO (section 3) |
# | `geo_mean` (GMPO) | a geometric mean is robust to outlier token ratios | on a one-token answer PPO's weight (section 2); not trained here; clip on $\log r$ with $\varepsilon = 0.4$ in verl's example |
# | `dppo_tv`, `dppo_kl` | a trust region in probability treats rare and common tokens fairly | section 2: for $\pi_{\text{old}} = 0.3$ both regions are far wider than PPO's clip; not trained here |
# | `clip_cov`, `kl_cov` | prevent entropy collapse, better exploration | Clip-Cov keeps the entropy higher beyond the seed spread, accuracy within noise; KL-Cov within noise on both (sections 3 and 4) |
# | `gpg`, `dro` | drop the ratio altogether (REINFORCE), with or without a quadratic trust region | not trained here |
# | `grpo_passk` (an estimator) | optimising pass@k keeps exploring and wins at large k | entropy kept high beyond the spread; pass@8 within noise of GRPO's, mean@8 lower (section 5) |
#
# The losses are one line to switch in verl and here, and their settings (GSPO's range above all) do not transfer
# between learning rates and models. Pick by the problem: long answers with noisy ratios (GSPO), clipped rare tokens (CISPO, DAPO's
# clip-higher), entropy collapse (Clip-Cov / KL-Cov, or Chapter 5's clip-higher), and check `pg_clipfrac` with the
# loss's own meaning in mind.
#
# ## 7. verl ↔ minirl
#
# | concept | verl 0.9.1 | minirl |
# |---|---|---|
# | the registry | `core_algos.py::register_policy_loss`, `get_policy_loss_fn` | `minirl/policy_loss.py` (same names) |
# | the call | `workers/utils/losses.py::ppo_loss` | `minirl/workers.py::Actor.update_actor` |
# | GSPO, GMPO | `compute_policy_loss_gspo`, `compute_policy_loss_geo_mean` | `minirl/sequence_ratio.py` |
# | SAPO, CISPO, DPPO | `compute_policy_loss_sapo`, `_cispo`, `_dppo_tv`, `_dppo_kl` | `minirl/soft_clip.py` |
# | Clip-Cov, KL-Cov | `compute_policy_loss_clip_cov`, `_kl_cov` | `minirl/entropy_cov.py` |
# | config | `actor.policy_loss.{loss_mode, clip_cov_ratio, clip_cov_lb, clip_cov_ub, kl_cov_ratio, ppo_kl_coef, dro_beta}`, `actor.{tau_pos, tau_neg}` | the same keys |
# | GDPO's line | `algorithm.adv_estimator=gdpo`, `+algorithm.gdpo_reward_keys=[...]`, `reward.reward_manager.name=gdpo` (naive, plus the experiment name in `extra_info`) | the same keys; `minirl/rewards.py::GDPORewardManager` |
#
# Two verl details a reader trips on: SAPO aggregates with `seq-mean-token-mean` whatever `loss_agg_mode` says
# (minirl does the same, and prints a notice); and verl's SAPO example writes
# `+actor_rollout_ref.actor.policy_loss.tau_pos` (and `tau_neg`), which the loss never reads: it reads
# `actor.tau_pos`. verl's `PolicyLossConfig` has no such field (building one with it raises `TypeError`, and merging
# it into the structured config raises too; we checked both, we did not run the script). minirl refuses the
# misplaced key and names the right one:

# %%
try:
    load_config(["+actor_rollout_ref.actor.policy_loss.tau_pos=2.0"])
except ValueError as error:
    print("error:", error)

# %% [markdown]
# ## 8. Exercises
#
# Open `exercises/ch11_policy_losses.py` and grade with `make grade`
# (one exercise, all of its checks: `make grade EX=11.1`).
#
# | # | function | what it checks |
# |---|---|---|
# | 11.1 | `gspo_token_ratios` | the value is the length-normalised sequence ratio on every token, the gradient is each token's own (the stop-gradient trick), padding and empty answers |
# | 11.2 | `clip_cov_selection` | only valid, not-yet-clipped tokens in the covariance window are candidates; the means are over valid tokens; the pick is random (not the top-k, which is KL-Cov's) |
# | 11.3 | `opo_advantages` | OPO's length-weighted group baseline, groups of one, padding |
#
# <details>
# <summary>Hint for 11.1</summary>
# Compute the mean log-ratio per answer with the mask, detach it, and add <code>log_prob - log_prob.detach()</code>:
# the sum has the sequence value and each token's gradient.
# </details>
#
# <details>
# <summary>Hint for 11.2</summary>
# Set the covariance of padding and of already-clipped tokens to minus infinity before comparing it with the
# window; draw with <code>torch.randperm</code> among the candidates.
# </details>
#
# <details>
# <summary>Hint for 11.3</summary>
# Per group, the baseline is $\sum_j \lvert y_j\rvert R_j / \sum_j \lvert y_j\rvert$.
# </details>
#
# **Failure-mode question.** A verl run sets `policy_loss.loss_mode=gspo` and
# `algorithm.rollout_correction.bypass_mode=true`. Which loss trains?
#
# <details>
# <summary>Answer</summary>
# Not GSPO. verl's <code>apply_bypass_mode</code> overwrites <code>policy_loss.loss_mode</code> with
# <code>bypass_mode</code>, which is PPO's clipped loss (or REINFORCE) against the rollout's log-probs, without a
# message. minirl refuses the combination and says to use one or the other.
# </details>
#
# The library's answers, after you have tried:

# %%
from minirl import entropy_cov, opo, sequence_ratio  # noqa: E402

for function in (sequence_ratio.compute_policy_loss_gspo, entropy_cov.clip_cov_selection,
                 opo.compute_opo_outcome_advantage):
    display(show_source(function, collapsed=True))  # noqa: F821

# %% [markdown]
# ## 9. Where next
#
# - [Chapter 1 · PPO](01_ppo.ipynb): the clip every loss here modifies.
# - [Chapter 5 · DAPO](05_dapo.ipynb): clip-higher, the other answer to clipped rare tokens and entropy collapse.
# - [Lab C · Reading the metrics](lab_c_metrics.ipynb): what `pg_clipfrac`, `ppo_kl` and entropy look like when
#   training goes wrong.
# - [Lab D · The GRPO config](lab_d_grpo_config.ipynb): `policy_loss.loss_mode` beside the rest of a verl script.
# - Back to [the reading map](index.md).

# %%
print_run_time()
