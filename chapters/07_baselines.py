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
# # Chapter 7 · RLOO, ReMax, REINFORCE++: baselines without a critic
#
# | The five answers | |
# |---|---|
# | **Problem** | Without a value model, the learning signal is the reward itself, and one sampled reward is noisy. A baseline $b$ ("what this prompt usually scores") subtracted from it keeps the gradient's direction and lowers its noise, if $b$ does not depend on the sample it is subtracted from. Which baseline works best, and what does it cost? |
# | **Core formula** | $R_i$ is answer $i$'s score; every token of the answer gets the same advantage. REINFORCE: $A_i = R_i$. RLOO: $A_i = R_i - \frac{1}{G-1}\sum_{j \ne i} R_j$. ReMax: $A_i = R_i - R(\text{greedy answer})$. REINFORCE++: $A = \operatorname{whiten}_{\text{tokens}}(R)$, one mean and one std over all response tokens of the batch, so a longer answer weighs more; REINFORCE++-baseline: $A = \operatorname{whiten}_{\text{tokens}}(R_i - \operatorname{mean}_{\text{group}})$. These are verl's per-token formulas when the reward sits on the last token only and $\gamma = 1$ (section 4 gives the general form). |
# | **Beginner's view** | A baseline is not a reward; it is what you expected to score. After subtracting it, the signal says "better or worse than expected", and a right answer to an easy question teaches less than one to a hard question. |
# | **verl source** | `verl/trainer/ppo/ray_trainer.py::compute_advantage` (every estimator except GAE and GRPO goes through `core_algos.get_adv_estimator_fn`); `core_algos.py::register_adv_est`; `core_algos.py::compute_rloo_outcome_advantage`, `compute_remax_outcome_advantage`, `compute_reinforce_plus_plus_outcome_advantage`, `compute_reinforce_plus_plus_baseline_outcome_advantage`; `ray_trainer.py::RayPPOTrainer.fit` (for `remax`, one greedy response per prompt, scored into `reward_baselines`; the legacy trainer only, section 6); `examples/rloo_trainer/`, `examples/remax_trainer/`, `examples/reinforce_plus_plus_trainer/` (`run_qwen3_8b_fsdp.sh` each, tag v0.9.0). |
# | **Where next** | [Lab D · The GRPO config, key by key](lab_d_grpo_config.ipynb): `adv_estimator`, `rollout.n` and the batch arithmetic in a full verl script; [Chapter 4 · GRPO](04_grpo.ipynb): the group baseline divided by the group's std; [Chapter 2 · GAE](02_gae.ipynb): a learned baseline per token, and its bias. Back to [the reading map](index.md). |
#
# Run time: 3.7 minutes in the run shown here, on 2 otherwise idle CPU cores (a gradient-variance measurement,
# then eighteen short runs: six estimators, three seeds each; the first output names the machine, the last prints
# the time). With `MINIRL_FAST=1` everything shrinks.

# %%
import itertools
import statistics
from functools import partial
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from minirl import models, reinforce_pp, remax, rloo
from minirl.advantage import ADV_ESTIMATOR_REGISTRY, get_adv_estimator_fn, register_adv_est
from minirl.book.notebook import (
    compare_table,
    fast_mode,
    plot_comparison,
    print_run_time,
    run_seeds,
    show_source,
    where_this_ran,
)
from minirl.book.variance import gradient_noise, policy_gradient_draws, sample_responses, score_norms
from minirl.data import load_rl_rows
from minirl.plot import load_metrics
from minirl.rewards import NaiveRewardManager, default_compute_score
from minirl.sft import default_warm_start
from minirl.trainer import train

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "ch07"
VAL = "val-core/minirl/arithmetic/acc/mean@1"


def run(name, *overrides, steps):
    # One seeded run of minirl's trainer (verl's fit loop) from the cached SFT warm start.
    # fast mode (a check that the code runs): one step of 8 prompts, validated once on 8 questions
    fast = (["data.val_max_samples=8", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
             "trainer.val_before_train=false"] if fast_mode() else ["data.val_max_samples=100"])
    steps = 1 if fast_mode() else steps
    train([f"trainer.default_local_dir={RUNS / name}", f"trainer.total_training_steps={steps}",
           f"trainer.test_freq={min(5, steps)}", "trainer.resume_mode=disable", "trainer.logger=[]",
           *fast, *overrides], show_progress=False)
    return load_metrics(RUNS / name)


# %% [markdown]
# ## 1. The problem, shown: a registry, and an estimator with no baseline
#
# verl picks the advantage estimator by name (`algorithm.adv_estimator`). Apart from GAE and GRPO,
# which have their own branches, `compute_advantage` looks the name up in a registry that
# `core_algos.py` fills with a decorator. minirl has the same registry in `minirl/advantage.py`:

# %%
print(sorted(ADV_ESTIMATOR_REGISTRY))

# %% [markdown]
# The plainest estimator is missing: REINFORCE with no baseline, $A_i = R_i$. Registering it takes a
# decorator and verl's keyword signature; the trainer is not edited. (In verl you would write the same
# function, decorated with `verl.trainer.ppo.core_algos.register_adv_est`, in a module your launch imports.)


# %%
@register_adv_est("reinforce")
def reinforce_no_baseline(token_level_rewards, response_mask, config=None, **kwargs):
    """REINFORCE without a baseline: A_i = R_i on every response token. Returns (advantages, returns), (B, L)."""
    scores = token_level_rewards.sum(dim=-1, keepdim=True)  # R_i, the outcome score
    advantages = scores * response_mask
    return advantages, advantages


print(get_adv_estimator_fn("reinforce").__name__, "registered;", "now:", sorted(ADV_ESTIMATOR_REGISTRY))

# %% [markdown]
# Now `algorithm.adv_estimator=reinforce` trains. With 0/1 rewards, $A_i = R_i$ pushes every right
# answer up and never pushes a wrong one down. Is that noisier than a baseline? Instead of arguing, we
# measure it.
#
# ## 2. The variance, measured
#
# Take the SFT warm start and 8 training questions. A *draw* samples $G = 4$ answers per question
# (32 responses), scores them, and computes the policy gradient each estimator would give, with the
# trainer's own loss at ratio 1:
# $g = \nabla_\theta \frac{1}{T}\sum_{i,t} A_{i,t} \log \pi_\theta(a_{i,t} \mid s_{i,t})$ over the
# $T$ response tokens. Every estimator sees the same responses in a draw (equal samples); ReMax also
# gets each question's greedy answer. We repeat for 32 draws and compare with a reference gradient:
# the mean of RLOO over 64 *other* draws (RLOO is unbiased, section 3).
#
# - **relative variance**: the spread of one draw's gradient around the estimator's mean, divided by
#   the squared signal it delivers along the reference. It is free of the estimator's scale (GRPO and
#   REINFORCE++ rescale the advantages; `minirl/book/variance.py::gradient_noise`);
# - **cosine** of one draw's gradient with the reference: how well a single batch aims;
# - **cosine of the mean**: where the estimator points on average.
#
# We measure twice: with the task's reward (1 if right, else 0), and with the same reward plus 1 for
# every answer, as a format bonus would give. A baseline should not care about the second.

# %% tags=["central-figure"]
warm = default_warm_start(show_progress=False)
tokenizer, policy = models.load_tokenizer(warm), models.load_policy(warm)
questions = load_rl_rows(str(warm / "data" / "train.parquet"), tokenizer, 64)[:8]
ESTIMATORS = ["reinforce", "grpo", "rloo", "remax", "reinforce_plus_plus", "reinforce_plus_plus_baseline"]
DRAWS = 4 if fast_mode() else 32
with_bonus = NaiveRewardManager(tokenizer, compute_score=lambda **row: float(default_compute_score(**row)) + 1.0)
measure = partial(policy_gradient_draws, policy, tokenizer, questions, n=4, draws=DRAWS, estimators=ESTIMATORS)
reference = policy_gradient_draws(policy, tokenizer, questions, n=4, draws=2 * DRAWS, estimators=["rloo"],
                                  seed=1)["rloo"].mean(0)  # RLOO ignores the +1, so one reference serves both
gradients = {reward: measure(seed=0, reward_fn=fn)  # {reward: {estimator: (DRAWS, parameters) gradients}}
             for reward, fn in (("reward 0/1", None), ("reward 0/1, +1 for every answer", with_bonus))}
noise = {reward: {name: gradient_noise(g, reference) for name, g in by_name.items()}
         for reward, by_name in gradients.items()}

fig, axes = plt.subplots(1, 2, figsize=(11, 3), sharey=True)
for ax, (reward, by_name) in zip(axes, noise.items()):
    ax.barh(ESTIMATORS, [by_name[n]["relative_variance"] for n in ESTIMATORS], color="C0")
    ax.set(title=f"{reward}: relative variance", xlabel=f"lower is better ({DRAWS} draws of 8 questions x 4)")
    ax.grid(alpha=0.3, axis="x")
axes[0].invert_yaxis()
plt.tight_layout()
plt.show()
for reward, by_name in noise.items():
    print(reward)
    for name in ESTIMATORS:
        m = by_name[name]
        print(f"  {name:30s} relative variance {m['relative_variance']:6.2f}   cosine {m['cosine']:.3f}   "
              f"cosine of the mean {m['cosine_of_mean']:.3f}   scale {m['scale']:.2f}")
for reward, by_name in noise.items():
    variance = {name: by_name[name]["relative_variance"] for name in ESTIMATORS}
    group = [variance[name] for name in ("grpo", "rloo", "reinforce_plus_plus_baseline")]
    means = [by_name[name]["cosine_of_mean"] for name in ESTIMATORS]
    print(f"{reward}: reinforce / rloo relative variance {variance['reinforce'] / variance['rloo']:.1f}; "
          f"grpo, rloo, reinforce_plus_plus_baseline {min(group):.2f}-{max(group):.2f} "
          f"(mean {sum(group) / len(group):.2f}); cosine of the mean {min(means):.3f}-{max(means):.3f}")

# %% [markdown]
# How sure are these numbers? The 32 draws are a sample too. We resample them (a bootstrap: 1000 times,
# 32 draws picked with replacement) and recompute every relative variance, and its ratio to RLOO's on the
# *same* resampled draws: all estimators saw the same responses, so their noise is paired. The ranges
# are the middle 90% of the resamples.

# %%
def relative_variance(gram, along, ref_norm2, pick):
    # gradient_noise's relative variance of the draws `pick`, from the Gram matrix g g^T and g @ reference
    sub = gram[pick][:, pick]
    spread = (sub.diagonal().sum() - sub.sum() / len(pick)) / (len(pick) - 1)  # sum ||g_d - mean||^2 / (D-1)
    return spread / (along[pick].mean() ** 2 / ref_norm2)  # over the signal along the reference, squared


resample = torch.Generator().manual_seed(0)
picks = [torch.randint(0, DRAWS, (DRAWS,), generator=resample) for _ in range(1000)]
ref_norm2 = reference.pow(2).sum()
for reward, by_name in gradients.items():
    boot = {}
    for name, g in by_name.items():
        gram, along = g @ g.T, g @ reference
        everything = torch.arange(DRAWS)
        assert torch.isclose(relative_variance(gram, along, ref_norm2, everything),
                             torch.tensor(noise[reward][name]["relative_variance"]), rtol=1e-3)
        boot[name] = torch.stack([relative_variance(gram, along, ref_norm2, pick) for pick in picks])
    print(f"{reward} (middle 90% of {len(picks)} resamples of the {DRAWS} draws)")
    for name in ESTIMATORS:
        low, high = boot[name].quantile(torch.tensor([0.05, 0.95])).tolist()
        # nanquantile: with few draws a resample can repeat one draw only, a spread of 0 / 0
        ratio = (boot[name] / boot["rloo"]).nanquantile(torch.tensor([0.05, 0.95])).tolist()
        print(f"  {name:30s} relative variance {noise[reward][name]['relative_variance']:6.2f} ({low:.2f}-{high:.2f})"
              f"   / rloo's {ratio[0]:.2f}-{ratio[1]:.2f}")

# %% [markdown]
# Each relative variance on its own is uncertain (RLOO's 3.71 spans 1.48 to 7.22 over the resamples),
# but the paired ratios are much tighter. Two findings in this run hold beyond these error bars:
#
# - **With a reward offset, a baseline is essential.** Add 1 to every answer's reward and REINFORCE
#   without a baseline becomes 10.5 times noisier than RLOO (relative variance 38.86 against 3.71; the
#   resampled ratio spans 6.22 to 24.35; one draw's cosine with the reference falls from 0.769 to 0.193):
#   it now pushes up *every* sampled answer,
#   right or wrong, and only the small difference between those pushes carries the signal. Every
#   baseline removes the offset exactly (REINFORCE++'s batch whitening too), so their numbers do not
#   change at all.
# - **With the task's 0/1 reward, the plain estimator is the quietest.** REINFORCE without a baseline
#   has a relative variance of 0.74, a fifth of RLOO's (the ratio prints as 0.2; resampled, 0.10 to
#   0.46, so at least twice as quiet). A baseline is not a free win; section 2's last cell shows why.
#
# The other differences are within the error bars. RLOO, GRPO and REINFORCE++-baseline are at 3.34 to 3.71
# (mean 3.46), and their ratios to RLOO stay within 0.85 to 1.02: the same noise. ReMax (3.87, ratio 0.53
# to 2.61) and REINFORCE++ (whitening over all response tokens of the batch, 2.29, ratio 0.35 to 1.44)
# cannot be told apart from RLOO with 32 draws.
#
# With the 0/1 reward all estimators point the same way on average: cosine of the mean 0.920 to 0.986
# with the reference, RLOO's own mean (unbiased, so only noise keeps it from 1) at 0.920. At this sample
# size no bias in direction is visible. With the offset, REINFORCE's mean falls to 0.672. It is still
# unbiased; its noise simply does not average away in 32 draws: a mean of 32 draws with relative
# variance 38.86 is expected at a cosine of about $1/\sqrt{1 + 38.86/32} \approx 0.67$. "scale" is how
# much of the reference gradient each delivers on average: 0.94 to 1.04 for the unbiased REINFORCE, RLOO
# and ReMax with the 0/1 reward, more (1.37 to 2.13) for the estimators that divide by a standard
# deviation.
#
# Why does the plain estimator do so well with the 0/1 reward? The constant baseline that minimises
# the variance of $(R - b)\,\nabla\log\pi(o)$ is not the mean reward but the mean reward *weighted by
# how hard each response pulls on the weights*:
#
# $$
# b^* = \frac{\mathbb{E}\big[R\,\lVert\nabla_\theta \log \pi(o)\rVert^2\big]}{\mathbb{E}\big[\lVert\nabla_\theta \log \pi(o)\rVert^2\big]}.
# $$
#
# We measure $\lVert\nabla_\theta \log\pi(o)\rVert^2$ for 128 sampled answers (the same 8 questions,
# 16 answers each):

# %%
answers = sample_responses(policy, tokenizer, questions, 4 if fast_mode() else 16, 20, seed=5)
pull = score_norms(policy, answers, 20)
right = answers["token_level_scores"].sum(-1) == 1
print(f"right answers: {right.float().mean():.2f} of all, mean ||grad log pi||^2 = {pull[right].mean():.1f}")
print(f"wrong answers: mean ||grad log pi||^2 = {pull[~right].mean():.1f}")
print(f"optimal constant baseline b* = {(right.float() * pull).sum() / pull.sum():.3f} "
      f"(the mean reward is {right.float().mean():.3f})")
print(f"wrong / right mean ||grad log pi||^2: {pull[~right].mean() / pull[right].mean():.2f}")
print("distinct right answers:", len({tuple(r.tolist()) for r in answers["responses"][right]}),
      "| distinct wrong answers:", len({tuple(r.tolist()) for r in answers["responses"][~right]}))

# %% [markdown]
# In this sample, 0.32 of the answers are right. A right answer is nearly always the *same* answer (7
# distinct right answers across the 8 questions), and a likely one: its pull is moderate (260.3). Wrong
# answers are diverse (39 distinct) and unlikely, so they pull 12.8 times as hard (3328.1). The best
# constant baseline weights the rewards by that pull: $b^*$ is 0.036, far below the mean reward 0.320. A
# baseline near 0 is close to optimal here, and REINFORCE's $b = 0$ is such a baseline. RLOO's baseline
# is worse on two counts: on average it is the mean reward (about 0.32, far past $b^*$), and it is itself
# noisy, estimated from 3 other answers. ReMax's greedy baseline is 0 or 1, noisy too (3.87 above, close
# to RLOO's 3.71). REINFORCE++'s baseline is a batch mean too (over tokens, so longer answers weigh
# more), estimated from all 32 answers at once, which should add less noise than RLOO's; its 2.29 points
# that way, but within the error bars above. With rewards that are rarely 0 (partial credit,
# format bonuses, a reward model's scores) the balance turns, as the offset panel shows.
#
# ## 3. Unbiased and biased baselines, exactly
#
# Why may a baseline be subtracted at all? Because $\mathbb{E}_{a \sim \pi}[\nabla \log \pi(a)] = 0$:
# for any $b$ that does not depend on the sampled answer $a_i$,
# $\mathbb{E}[(R_i - b)\nabla\log\pi(a_i)] = \mathbb{E}[R_i \nabla\log\pi(a_i)]$. RLOO's baseline, the mean
# of the *other* answers, is independent of answer $i$, so RLOO is unbiased. The group mean including
# answer $i$ is not independent of it:
#
# $$
# R_i - \frac1G \sum_j R_j = \frac{G-1}{G}\Big(R_i - \frac{1}{G-1}\sum_{j\ne i} R_j\Big),
# $$
#
# so the mean baseline (GRPO without the std, i.e. Dr.GRPO) is RLOO times $(G-1)/G$: the same
# direction, a smaller step. Dividing by the group's std (GRPO) or by the batch's std (REINFORCE++)
# multiplies each group by a random factor that depends on the samples, which can tilt the direction.
#
# A toy small enough to compute *exactly*: two questions, each a 3-answer softmax policy, answer 0 is
# right (reward 1). With $G = 4$ samples per question there are $3^4 \times 3^4 = 6561$ possible
# draws; we weigh each by its probability and get the exact mean and variance of every estimator's
# gradient (with respect to the logits), and compare with the exact gradient of the expected reward,
# $\partial J / \partial \theta_k = \pi_k (r_k - J)$.

# %%
logits = torch.tensor([[1.0, 0.0, -1.0], [-1.0, 0.0, 0.5]])  # question 1 is easy, question 2 is hard
answer_reward = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
G = 3 if fast_mode() else 4  # fast mode: 3^3 x 3^3 draws instead of 3^4 x 3^4
pi = logits.softmax(-1)
exact = pi * (answer_reward - (pi * answer_reward).sum(-1, keepdim=True))
print("P(right answer):", [round(p, 3) for p in pi[:, 0].tolist()])


def toy_advantages(R):
    """(questions, G) rewards -> {estimator: (questions, G) advantages}."""
    mean, others = R.mean(1, keepdim=True), (R.sum(1, keepdim=True) - R) / (G - 1)
    return {"reinforce": R, "rloo": R - others, "mean baseline (Dr.GRPO)": R - mean,
            "grpo": (R - mean) / (R.std(1, keepdim=True) + 1e-6),
            "batch whitening (REINFORCE++)": (R - R.mean()) / (R.std() + 1e-8)}


draws = list(itertools.product(range(3), repeat=G))
first, second = {}, {}
for draw in itertools.product(draws, draws):
    answers = torch.tensor(draw)  # (2, G)
    weight = pi.gather(1, answers).prod()
    score = torch.nn.functional.one_hot(answers, 3).float() - pi[:, None, :]  # d log pi(a) / d logits
    for name, A in toy_advantages(answer_reward.gather(1, answers)).items():
        g = (A[..., None] * score).mean(1)  # (1/G) sum_i A_i grad log pi(a_i), per question
        first[name] = first.get(name, 0) + weight * g
        second[name] = second.get(name, 0) + weight * g.pow(2).sum()
print(f"{'estimator':30s} {'E[g] / exact':>12s} {'cos(E[g], exact)':>17s} {'relative variance':>18s}")
for name, mean in first.items():
    scale = (mean * exact).sum() / exact.pow(2).sum()
    cosine = torch.nn.functional.cosine_similarity(mean.flatten(), exact.flatten(), dim=0)
    relative = (second[name] - mean.pow(2).sum()) / mean.pow(2).sum()
    print(f"{name:30s} {scale:12.3f} {cosine:17.4f} {relative:18.2f}")

# %% [markdown]
# The exact numbers confirm the algebra: REINFORCE and RLOO are unbiased (mean gradient = exact
# gradient, scale 1.000); the mean-including baseline delivers exactly $(G-1)/G = 0.75$ of it, in the
# same direction; GRPO's division by the group std changes the scale (1.419) and tilts the direction
# slightly (cosine 0.9999, not 1: each question is weighted by its own $1/\sigma$). REINFORCE++'s
# batch whitening scales everything by one number per batch, which keeps the direction here. (Every
# answer in this toy is a single token, so whitening over tokens, as verl does, and over answers are the
# same thing; section 4 shows where they part.) In
# relative variance (noise per unit of signal) the mean-including baseline equals RLOO: it is the same
# estimator, shrunk. And, as in the tiny model, the plain estimator is the quietest of the unbiased
# ones in this toy, where most sampled rewards are 0.
#
# ## 4. Mechanics: ReMax's baseline, and what the estimators compute per token
#
# For `adv_estimator=remax`, verl's legacy `RayPPOTrainer.fit()` (the v1 trainer has no such step,
# section 6) sends each prompt once more with sampling off, in the same
# generation request as the `rollout.n` sampled copies, scores the greedy answer with the same reward
# function, and stores the score as `reward_baselines` (one per prompt, repeated to the prompt's rows).
# `compute_advantage` passes it to the estimator because the batch has it. minirl generates the greedy
# answers in a second, smaller call in `PPOTrainer._generate_and_score`, inside the `gen` timer, so the extra
# rollout shows up in `timing_s/gen`.
#
# A small batch, by hand: two prompts, $n = 2$; the greedy answers scored 1 and 0.

# %%
token_level_rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 1.0], [1.0, 0.0]])  # scores on the last token
response_mask = torch.tensor([[1, 1], [1, 1], [1, 1], [1, 0]])
reward_baselines = torch.tensor([1.0, 1.0, 0.0, 0.0])  # greedy score of each row's prompt
advantages, returns = remax.compute_remax_outcome_advantage(token_level_rewards, reward_baselines, response_mask)
print("ReMax advantages:", advantages.tolist())
print("RLOO advantages: ", rloo.compute_rloo_outcome_advantage(token_level_rewards, response_mask,
                                                               ["p", "p", "q", "q"])[0].tolist())
with_kl = token_level_rewards - 0.1 * response_mask  # a penalty of 0.1 on every token, as a KL in the reward
advantages, _ = remax.compute_remax_outcome_advantage(with_kl, reward_baselines, response_mask)
print("ReMax, 0.1 taken from every token's reward:", [[round(a, 2) for a in row] for row in advantages.tolist()])

# %% [markdown]
# The first prompt's greedy answer was right, so a right sample gets 0 ("as good as greedy") and a
# wrong one $-1$. The second prompt's greedy answer was wrong: a right sample gets $+1$. RLOO needs no
# extra rollout; its baseline for a row is the other sample of the same prompt.
#
# **Per token.** verl's estimators read `token_level_rewards` $r_{i,t}$ (one value per response token)
# and return one advantage per token. With $m_{i,t}$ the response mask and $b_i$ the greedy answer's score:
#
# $$
# \text{ReMax:}\quad A_{i,t} = \sum_{s \ge t} m_{i,s}\, r_{i,s} - b_i, \qquad
# \text{REINFORCE++:}\quad G_{i,t} = r_{i,t} + \gamma\, G_{i,t+1}, \quad
# A_{i,t} = \frac{G_{i,t} - \mu}{\sigma},
# $$
#
# on the valid tokens, where $\mu$ and $\sigma$ are the mean and the (Bessel-corrected) std of $G$ over
# *all valid tokens of the batch* (`masked_whiten` with the response mask; padding passes $G$ through
# unchanged). ReMax has no discount (it ignores `algorithm.gamma`); REINFORCE++ reads `algorithm.gamma`.
# The table's one-number-per-answer formulas are the special case where the reward sits on the last valid
# token only (verl's reward managers put the score there) and $\gamma = 1$: then every token's
# reward-to-go is $R_i$. Two things break it. A per-token reward: with `algorithm.use_kl_in_reward=True`
# (all three verl examples) each token carries a KL penalty, so the reward-to-go changes along the answer;
# the last line above takes 0.1 from every token, and the first row's two tokens get $-0.2$ and $-0.1$
# instead of 0. (The greedy baseline is the score alone, with no KL.) And $\gamma < 1$: REINFORCE++
# gives token $t$ of an answer of $L_i$ tokens $\gamma^{L_i - 1 - t} R_i$ before whitening, so the
# first tokens of a long answer get less.
#
# Even at $\gamma = 1$ with the reward on the last token, REINFORCE++ is not "whiten the $R_i$": its
# mean is $\mu = \sum_i L_i R_i / \sum_i L_i$, each answer counted once per token. Two answers, a right
# one of 3 tokens and a wrong one of 1 token:

# %%
rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])  # right (3 tokens), wrong (1 token)
mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
scores = rewards.sum(-1)
per_answer = (scores - scores.mean()) / scores.std()
print("whitened per answer, (R - mean) / std:", [round(a, 3) for a in per_answer.tolist()])
for gamma in (1.0, 0.9):
    advantages, returns = reinforce_pp.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma=gamma)
    tokens = returns[mask.bool()]  # the values masked_whiten averages: one per valid token
    print(f"REINFORCE++, gamma {gamma}: returns {[[round(g, 3) for g in row] for row in returns.tolist()]}, "
          f"over the 4 tokens mean {tokens.mean():.3f} std {tokens.std():.3f}\n"
          f"    advantages {[[round(a, 3) + 0.0 for a in row] for row in advantages.tolist()]}")  # + 0.0: no -0.0

# %% [markdown]
# Per answer, the two would get $+0.707$ and $-0.707$. Over tokens, the long right answer fills three
# of the four tokens, so the mean is 0.750 and the std 0.500: each of its tokens gets $+0.5$, the short
# wrong answer's one token $-1.5$. Summed over each answer's tokens, both get 1.5 in size: the whitening
# balances tokens, not answers. With $\gamma = 0.9$ the right answer's returns fall towards its start
# (0.81, 0.9, 1.0), and so do its advantages.
#
# ## 5. The experiment: learning, per step and per second
#
# All six estimators train from the same warm start with minirl's defaults (32 prompts, $n = 8$
# samples each, learning rate 1e-4), 20 steps, 3 seeds. ReMax generates one extra greedy answer per
# prompt, so per step it generates $32 \times 9$ responses instead of $32 \times 8$, and its
# `timing_s/gen` is longer. The middle panel puts the runs on the seconds they took.

# %%
STEPS = 20
learning = {name: run_seeds(partial(run, steps=STEPS), name, f"algorithm.adv_estimator={name}")
            for name in ESTIMATORS}
plot_comparison(learning, [(VAL, "greedy validation accuracy", "step"),
                           (VAL, "the same, per training second", "seconds"),
                           ("critic/score/mean", "training reward (critic/score/mean)", "step")])
print(compare_table(learning, VAL))
for name, runs in learning.items():
    # per step actually run (fast mode runs 1 step, not STEPS)
    gen = [statistics.mean(r["timing_s/gen"] for r in records if "timing_s/gen" in r) for records in runs]
    step = [statistics.mean(r["timing_s/step"] for r in records if "timing_s/step" in r) for records in runs]
    print(f"{name:30s} timing_s/gen {sum(gen) / len(gen):.3f} s   timing_s/step {sum(step) / len(step):.3f} s "
          f"(mean over seeds; seeds {min(gen):.3f}-{max(gen):.3f} s and {min(step):.3f}-{max(step):.3f} s)")

# %% [markdown]
# What the curves say (3 seeds, 20 steps; the table above is this run's):
#
# - **All six learn alike, within noise.** GRPO and REINFORCE++ end at 0.590 (seeds 0.56 to 0.63 and
#   0.54 to 0.66), RLOO at 0.580 (0.57 to 0.59), REINFORCE++-baseline at 0.577 (0.57 to 0.58), and even
#   REINFORCE without a baseline at 0.573 (0.50 to 0.64). The table finds every pair within noise. So
#   REINFORCE's much lower gradient noise in section 2 (0.74 against 3.34 to 3.71) does not show in
#   accuracy here; a likely reason is that Adam normalises each step and 20 steps of 256 responses
#   average a lot of noise away.
# - **ReMax ends lowest, but within noise**: 0.543 (seeds 0.52 to 0.57) against GRPO's 0.590 (0.56 to
#   0.63); the ranges overlap, with every other estimator too. Its gradient noise in section 2 could not
#   be told apart from RLOO's either.
# - **Cost.** ReMax's `timing_s/gen` is 0.168 s per step (seeds 0.167 to 0.169 s) against 0.132 to
#   0.135 s for the others (no seed of theirs above 0.136 s): its greedy answers are a second, smaller
#   generation call (on GPUs verl sends them in the same request as the samples). Its whole step,
#   0.552 s (seeds 0.550 to 0.555 s), is above every other estimator's (0.517 to 0.525 s; no seed above
#   0.530 s) by about that extra call. Per response generated ReMax pays more too: after 20 steps it has
#   generated 5760 responses to the others' 5120.
#
# ## 6. verl ↔ minirl
#
# | | verl 0.9.1 | minirl |
# |---|---|---|
# | registry | `core_algos.py::register_adv_est`, `get_adv_estimator_fn`, `ADV_ESTIMATOR_REGISTRY` | `minirl/advantage.py::register_adv_est`, `get_adv_estimator_fn`, `ADV_ESTIMATOR_REGISTRY` |
# | dispatch | `ray_trainer.py::compute_advantage` (GAE and GRPO inline, the rest by name with keyword arguments) | `minirl/advantage.py::compute_advantage` |
# | RLOO | `core_algos.py::compute_rloo_outcome_advantage` | `minirl/rloo.py::compute_rloo_outcome_advantage` |
# | ReMax | `core_algos.py::compute_remax_outcome_advantage`; the greedy rollout in `ray_trainer.py::RayPPOTrainer.fit` | `minirl/remax.py::compute_remax_outcome_advantage`; `minirl/trainer.py::PPOTrainer._generate_and_score` |
# | REINFORCE++ | `core_algos.py::compute_reinforce_plus_plus_outcome_advantage`, `compute_reinforce_plus_plus_baseline_outcome_advantage` | `minirl/reinforce_pp.py` (same names) |
#
# Which trainer: minirl mirrors verl's legacy `RayPPOTrainer.fit()` (`trainer.use_v1=false`), as
# Chapter 1 explains. The registry and the estimator functions are shared: the default v1 trainer
# (`verl/trainer/ppo/v1/trainer_base.py::_compute_advantage`) calls the same `compute_advantage`, so
# `rloo`, `reinforce_plus_plus`, `reinforce_plus_plus_baseline` and your own registered estimators run on
# both. **ReMax runs on the legacy trainer only.** The greedy request and `reward_baselines` exist only in
# `ray_trainer.py::RayPPOTrainer.fit` (and in the experimental `SeparateRayPPOTrainer`, a subclass of it,
# in `verl/experimental/separation/ray_trainer.py`). The v1 trainer never asks for a greedy answer, and
# its `_compute_advantage` reads a fixed list of fields without `reward_baselines`, so the estimator is
# called without its baseline: `compute_advantage` on such a batch raises
# `TypeError: compute_remax_outcome_advantage() missing 1 required positional argument: 'reward_baselines'`
# (checked against the 0.9.1 wheel on a CPU; a whole v1 run was not tried). verl's ReMax example script
# does not set `trainer.use_v1`, and 0.9.1's default is `true`: add `trainer.use_v1=false` to run it.
# minirl's v1 trainer (`trainer.use_v1=true`) refuses `adv_estimator=remax` with that advice.
#
# | config key (verl = minirl) | value | meaning |
# |---|---|---|
# | `algorithm.adv_estimator` | `rloo`, `remax`, `reinforce_plus_plus`, `reinforce_plus_plus_baseline`, or a registered name | which estimator; none of these creates a critic |
# | `actor_rollout_ref.rollout.n` | verl's examples: 5 (RLOO), 4 (ReMax), 8 (REINFORCE++) | samples per prompt; RLOO and REINFORCE++-baseline need at least 2 |
# | `algorithm.gamma` | 1.0 | REINFORCE++'s discount of the reward-to-go |
# | `algorithm.use_kl_in_reward`, `algorithm.kl_ctrl.kl_coef` | verl's examples: `True`, 0.001 | the three examples put the KL in the reward, not in the loss ([Chapter 3](03_rlhf.ipynb)) |
#
# The scripts are `examples/rloo_trainer/run_qwen3_8b_fsdp.sh`, `examples/remax_trainer/run_qwen3_8b_fsdp.sh`
# and `examples/reinforce_plus_plus_trainer/run_qwen3_8b_fsdp.sh`, read in verl's repository at the v0.9.0
# tag (the 0.9.1 wheel ships no `examples/`; see [the reading map](index.md#which-verl-this-book-reads)).
#
# ## 7. Exercises
#
# Open `exercises/ch07_baselines.py` and grade with `make grade`
# (one exercise, all of its checks: `make grade EX=7.1`).
#
# | # | function | what it checks |
# |---|---|---|
# | 7.1 | `rloo_advantages` | verl's values on ragged groups; a group of one keeps its score; the mean-baseline advantage is $(G-1)/G$ times RLOO's (section 3), and yours must not be; padding |
# | 7.2 | `remax_advantages` | reward-to-go minus the greedy baseline on every token; the returns; padding; shapes |
# | 7.3 | `register_my_estimator` | your estimator "reinforce_median" is in the registry, gives the right numbers through `compute_advantage`, and ignores keyword arguments it does not use |
#
# <details>
# <summary>Hint for 7.1</summary>
# Group the rows by their label: loop over the distinct labels in <code>index</code> and select each
# group's rows with a boolean mask, <code>torch.tensor([label == g for label in index])</code> (the same
# grouping Exercise 4.1, <code>group_advantages</code>, uses). With the group's sum $S$ and size $n$, the
# mean of the others is $(S - R_i)/(n - 1)$.
# </details>
#
# <details>
# <summary>Hint for 7.2</summary>
# The reward-to-go is a reversed cumulative sum: <code>x.flip(-1).cumsum(-1).flip(-1)</code>.
# </details>
#
# <details>
# <summary>Hint for 7.3</summary>
# Section 1's <code>reinforce_no_baseline</code> shows the decorator and the signature; compute a median
# per group with <code>torch.quantile(scores, 0.5)</code>.
# </details>
#
# **Failure-mode question.** You run `algorithm.adv_estimator=rloo` with `actor_rollout_ref.rollout.n=1`.
# What happens in verl, and in minirl?
#
# <details>
# <summary>Answer</summary>
# Every group has one response, so there are no "other" samples to average. verl's `rloo` then keeps
# the raw score as the advantage: the run silently becomes REINFORCE without a baseline, which
# section 2 showed is fine for a 0/1 reward and bad as soon as the rewards have an offset (verl's
# `rloo_vectorized` gives 0 instead, so nothing is learned at all). minirl refuses the config:
# <code>rloo compares the responses to one prompt, so it needs actor_rollout_ref.rollout.n >= 2</code>.
# </details>
#
# ### The library's code, after you tried
#
# minirl's versions of the functions the exercises ask for, read from the library itself. Open them
# after your own answers pass (or after you are stuck with the hints).

# %%
from IPython.display import display

for function in (rloo.compute_rloo_outcome_advantage, remax.compute_remax_outcome_advantage, register_adv_est):
    display(show_source(function, collapsed=True))

# %% [markdown]
# ## 8. Where next
#
# - [Lab D · The GRPO config, key by key](lab_d_grpo_config.ipynb): `adv_estimator`, `rollout.n` and the
#   batch arithmetic in a full verl script.
# - [Chapter 4 · GRPO](04_grpo.ipynb): the group baseline divided by the group's std.
# - [Chapter 2 · GAE](02_gae.ipynb): a learned baseline per token, and its bias.
# - Back to [the reading map](index.md).
# - References: Williams (1992), REINFORCE; Kool et al., *Buy 4 REINFORCE Samples, Get a Baseline for
#   Free!* (2019) and Ahmadian et al., *Back to Basics* (2024), RLOO; Li et al., *ReMax* (2023);
#   Hu, *REINFORCE++* (2025); Greensmith et al., *Variance Reduction Techniques for Gradient Estimates
#   in Reinforcement Learning* (2004), the optimal baseline.

# %%
print_run_time()
