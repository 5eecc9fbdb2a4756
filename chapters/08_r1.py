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
# # Chapter 8 · DeepSeek-R1: RL with verifiable rewards
#
# | The five answers | |
# |---|---|
# | **Problem** | Nobody can label good reasoning at scale, but for maths and code a program can check the final answer. Can reinforcement learning against such a checker alone teach a model to reason? DeepSeek-R1-Zero says yes: GRPO with a rule reward (right answer, right format) on a base model, and long chains of thought appear by themselves. DeepSeek-R1 adds a small "cold start" SFT on readable reasoning first. |
# | **Core formula** | A rule reward, no reward model: $r(x, y) = \mathbb{1}[\text{verifier}(y) = \text{answer}(x)] + w\cdot\mathbb{1}[y \text{ has the } \texttt{<think>} \text{ format}]$, optimised with GRPO ([Chapter 4](04_grpo.ipynb)). Sampling quality is reported as pass@k $= 1 - \binom{n-c}{k}\big/\binom{n}{k}$. |
# | **Beginner's view** | The teacher grades only the final answer. Nobody tells the student to show their work. If showing the work makes the answer right more often, the student who happens to do it gets better grades, and slowly always does it. But the teacher's answer checker is now the whole curriculum: if it can be fooled, the student learns to fool it. |
# | **verl source** | The rule scorers in `verl/utils/reward_score/` (`gsm8k.py::compute_score`, `math_reward.py::compute_score`, `math_dapo.py::compute_score`, `math_verify.py::compute_score`), chosen by `data_source` in `verl/utils/reward_score/__init__.py::default_compute_score`; your own through `reward.custom_reward_function.path`; data in verl's schema from `examples/data_preprocess/gsm8k.py` and `examples/data_preprocess/math_dataset.py`; GRPO in `verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage`; the minimal RLVR run `examples/grpo_trainer/run_qwen3_8b_fsdp.sh` (scripts: tag v0.9.0). |
# | **Where next** | [Lab A · GSM8K with PPO](lab_a_gsm8k.ipynb) and [Lab B · Writing reward functions](lab_b_rewards.ipynb) for the data, the verifier and your own reward; [Chapter 4 · GRPO](04_grpo.ipynb) for the optimiser; [Chapter 5 · DAPO / Dr.GRPO](05_dapo.ipynb) for the recipe details that keep long-reasoning RL stable; [Chapter 3 · InstructGPT](03_rlhf.ipynb) for a *learned* reward, and how a policy exploits it. Back to [the reading map](index.md). |
#
# Run time: 4.5 minutes in this run (the last cell prints it) on 2 CPU cores with no other job. It covers 12
# training runs of 20-40 steps (two at a time) and a cold-start SFT; both warm starts were already cached (a first
# run builds them in the first cell, about three more minutes). With `MINIRL_FAST=1` everything shrinks to a few steps.

# %%
import json
from pathlib import Path

import numpy as np
import torch

from minirl import data, metrics, models, rewards, sft
from minirl.book.notebook import (
    compare_table,
    fast_mode,
    final_spread,
    plot_comparison,
    print_run_time,
    run_grid,
    show_source,
    where_this_ran,
)
from minirl.evaluate import evaluate
from minirl.rollout import generate_sequences

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "ch08"
MIXED = sft.default_warm_start(sft.CHAIN_SFT)      # 30% worked demonstrations (built once, about 2 minutes)
ZERO = sft.default_warm_start(sft.CHAIN_ZERO_SFT)  # 2% worked demonstrations (built once, about 2 minutes)
RESPONSE_LENGTH = sft.CHAIN_SFT.response_length    # 48 tokens
test_rows = data.read_parquet(MIXED / "data" / "test.parquet").to_list()
print(json.dumps({k: v for k, v in json.loads((MIXED / "warm_start.json").read_text()).items()
                  if k in ("greedy_acc", "sampled_acc", "seconds")}, indent=1))
print(test_rows[0])

# %% [markdown]
# ## 1. The problem, shown: a tiny task where thinking pays
#
# R1's claim is about behaviour that *pays*: writing intermediate steps makes the final answer right
# more often, so a reward that checks only the answer still favours the steps. To see this on a laptop
# we need a task where that is true for a tiny model. The book's arithmetic task (`a+b=?`, Chapters 1-4)
# is too short. The **chain task** (`minirl/data.py::chain_rows`, `data_source="minirl/chain_sum"`) asks
# for the sum of 3 or 4 one-digit numbers, in verl's parquet schema (the row printed above):
#
# - a **direct** answer: `#### 26`;
# - a **worked** answer writes the running sums in R1's `<think>` format first:
#   `<think>7+5=12, 12+8=20, 20+6=26</think> #### 26`.
#
# The warm start (stage "SFT") learned from a noisy mix: 30% of its demonstrations are worked, 70%
# direct, and 30% of both kinds contain a slip. Its verifier (`rewards.compute_chain_score`) is verl's
# strict GSM8K rule: the number after the last `####` must equal the sum. It also *logs*, without
# rewarding, whether the response is worked (`worked`) and in the `<think>` format (`format`).
#
# The premise, measured before building on it: sample answers from the warm start and compare the
# accuracy of its worked and its direct answers.


# %%
def sample_answers(model_dir, rows, samples_per_prompt, seed=0):
    """Sample answers from a model; returns (row, response text, compute_chain_score result) triples."""
    policy, tokenizer = models.load_policy(model_dir), models.load_tokenizer(model_dir)
    rows = [row for row in rows for _ in range(samples_per_prompt)]
    prompts = data.encode_prompts(tokenizer, [row["prompt"] for row in rows], 64)
    out = generate_sequences(policy, prompts["input_ids"], prompts["attention_mask"], tokenizer.eos_token_id,
                             tokenizer.pad_token_id, RESPONSE_LENGTH, generator=torch.Generator().manual_seed(seed))
    texts = tokenizer.batch_decode([r[:n] for r, n in zip(out["responses"], out["response_length"])],
                                   skip_special_tokens=True)
    return [(row, text, rewards.compute_chain_score(text, row["reward_model"]["ground_truth"]))
            for row, text in zip(rows, texts)]


premise_rows = test_rows[:50] if fast_mode() else test_rows
answers = sample_answers(MIXED, premise_rows, samples_per_prompt=2 if fast_mode() else 8)
style_acc = {}
for style, worked in (("worked", 1.0), ("direct", 0.0)):
    right = [result["acc"] for _, _, result in answers if result["worked"] == worked]
    style_acc[style] = np.mean(right)
    print(f"{style:6s} answers: {len(right):5d} ({len(right) / len(answers):.2f} of all), right: {np.mean(right):.3f}")
print(f"worked answers are right {style_acc['worked'] / style_acc['direct']:.1f} times as often as direct ones")
for row, text, result in answers[:16:2]:
    print(f"  {row['prompt'][0]['content']:12s} -> {text!r:58} right={result['acc']}")

# %% [markdown]
# In this run (200 test prompts, 8 samples each, from this one warm start) 0.22 of the warm start's answers
# are worked, and **worked answers are right 1.6 times as often as direct ones** (0.401 against 0.243).
# The premise holds for this task and this warm start; it is a measurement, not a law, and the chapter
# builds on it only here. A reward can only favour a behaviour that already pays *and* that the policy
# already produces sometimes.
#
# ## 2. The formulas
#
# **The reward is a program.** For a prompt $x$ with known answer $a(x)$ and a response $y$:
#
# $$r_{\text{acc}}(x, y) = \mathbb{1}\big[\operatorname{extract}(y) = a(x)\big], \qquad
#   r_{\text{R1}}(x, y) = r_{\text{acc}}(x, y) + w \cdot \mathbb{1}\big[y \text{ is } \texttt{<think>}\ldots\texttt{</think>}\ \texttt{\#\#\#\# } N\big].$$
#
# `extract` is the verifier: here verl's strict GSM8K rule (the number after the last `####`, read in
# the last 300 characters). DeepSeek-R1-Zero used an accuracy reward and a format reward with no
# learned reward model, to avoid reward hacking of a neural judge. minirl's `rewards.r1_score` is
# $r_{\text{R1}}$ with $w = 0.1$.
#
# **The optimiser** is GRPO (Chapter 4): $G$ answers per prompt, advantage $A_i = (r_i - \bar r)/(\sigma_r + \epsilon)$
# for every token of answer $i$. Nothing rewards the steps themselves. If worked answers are right more
# often, they get positive advantages more often, and the probability of starting with `<think>` rises.
#
# **Measuring a sampler: pass@k.** With $n$ samples of which $c$ are right, the unbiased estimate of "one
# of $k$ samples is right" is $\text{pass@}k = 1 - \binom{n-c}{k}\big/\binom{n}{k}$ (Chen et al., 2021;
# `minirl/metrics.py::pass_at_k`). verl's validation reports `best@k/mean`, the same question estimated
# by bootstrap (drawing with replacement)
# (`actor_rollout_ref.rollout.val_kwargs.n` > 1). Exercise 8.3 writes it.
#
# ## 3. Thinking emerges because it pays
#
# GRPO from the mixed warm start, rewarded by the strict verifier only (no format reward at all: the
# purest form of the claim), 3 seeds. The learning rate is 3e-4, higher than Chapter 4's 1e-4, to fit the
# chapter's time budget.
# `run_grid` trains the
# seeds as separate `python -m minirl train` processes, two at a time, one per core.
#
# The same grid also trains with a **too-lenient verifier** (section 5 reads it): we run both now, as
# their runs share everything but the reward.

# %% tags=["central-figure"]
STEPS = 2 if fast_mode() else 40
COMMON = [*sft.train_overrides(MIXED, sft.CHAIN_SFT), "actor_rollout_ref.actor.optim.lr=3e-4",
          f"trainer.total_training_steps={STEPS}", f"trainer.test_freq={STEPS}", f"trainer.save_freq={STEPS}",
          "trainer.val_before_train=False", f"data.val_max_samples={20 if fast_mode() else 100}"]
LENIENT = ["reward.custom_reward_function.path=../minirl/rewards.py",
           "reward.custom_reward_function.name=lenient_score"]
verifiers = run_grid(RUNS, {"strict": [], "lenient": LENIENT}, *COMMON)
emergence = {"strict verifier": verifiers["strict"]}
plot_comparison(emergence, [("minirl/acc/mean", "accuracy of the sampled answers", "step"),
                            ("minirl/worked/mean", "share of worked answers", "step"),
                            ("response_length/mean", "mean response length (tokens)", "step")])
print(f"{'final value over the seeds':38s} {'mean':>6s} {'min':>6s} {'max':>6s}")
for key in ("minirl/worked/mean", "minirl/acc/mean", "response_length/mean", "val-core/minirl/chain_sum/acc/mean@1"):
    print(f"{key:38s} " + " ".join(f"{v:6.3f}" for v in final_spread(emergence["strict verifier"], key)))
print(f"{'first step (the warm start samples)':38s} {'mean':>6s} {'min':>6s} {'max':>6s}")
for key in ("minirl/worked/mean", "minirl/acc/mean", "response_length/mean"):
    firsts = [[r[key] for r in records if key in r][0] for records in emergence["strict verifier"]]
    print(f"{key:38s} {np.mean(firsts):6.3f} {min(firsts):6.3f} {max(firsts):6.3f}")

# %% [markdown]
# The values at the first and the last step, mean / min / max over the 3 seeds. In this run, over 40 steps:
#
# - **The share of worked answers** rises from 0.22 at the first step (seeds 0.20-0.25) to 0.99 at the
#   last (seeds 0.98-0.99), in every seed. Nobody rewarded it: the verifier reads only the number after `####`.
# - **Accuracy** of the sampled answers rises from 0.30 (seeds 0.28-0.32) to 0.77 (seeds 0.71-0.85), and
#   greedy validation accuracy ends at 0.87 (seeds 0.85-0.89); the warm start's greedy accuracy, printed at
#   the top, is 0.38.
# - **Responses get longer**, from 15.7 tokens (seeds 14.8-16.5) to 41.6 (seeds 41.2-41.9): the R1 paper's
#   "thinking time grows" in miniature. Here the growth has a cause you can read: worked answers are longer.
#
# The R1 story in miniature: the reward checks only the answer, and the policy shifts toward the
# behaviour that earns it. What the tiny task cannot show is R1's "aha moment" of *new* behaviour
# (re-checking, backtracking): GRPO here amplifies a style the warm start already samples in about a
# fifth of its answers (0.22 above).
# What it writes, before and after:

# %%
final_actor = sorted((RUNS / "strict" / "seed0").glob("global_step_*"))[-1] / "actor"
for label, model_dir in (("warm start", MIXED), ("after RL", final_actor)):
    print(label)
    for row, text, result in sample_answers(model_dir, test_rows[:4], samples_per_prompt=1, seed=1):
        print(f"  {row['prompt'][0]['content']:12s} -> {text!r:58} right={result['acc']}")

# %% [markdown]
# **Did RL teach new answers, or sharpen old ones?** pass@k asks whether *one of k samples* is right. We
# sample 8 answers per test prompt from the warm start and from seed 0's final policy, and estimate
# pass@k per prompt with `metrics.pass_at_k`, averaged over prompts:

# %%
SAMPLES = 2 if fast_mode() else 8
for label, model_dir in (("warm start", MIXED), ("after RL", final_actor)):
    sampled = sample_answers(model_dir, premise_rows, samples_per_prompt=SAMPLES, seed=3)
    right = np.array([result["acc"] for _, _, result in sampled]).reshape(len(premise_rows), SAMPLES).sum(1)
    print(f"{label:10s} " + "  ".join(f"pass@{k}={np.mean([metrics.pass_at_k(SAMPLES, int(c), k) for c in right]):.3f}"
                                     for k in (1, 2, 4, 8) if k <= SAMPLES))

# %% [markdown]
# In this run (seed 0 only) pass@1 rises from 0.28 to 0.76, pass@8 only from 0.84 to 0.96: the warm start
# already gets most prompts right in *some* of its 8 samples, and RL mostly makes the right answer the
# *likely* one. This is the pattern
# Yue et al. (2025) report for RLVR on real models ("Does reinforcement learning really incentivize
# reasoning capacity beyond the base model?"): large gains at small k, small ones at large k.
#
# ## 4. R1-Zero vs R1: where does the format come from?
#
# DeepSeek-R1-Zero started RL straight from the base model with the format reward; its reasoning worked
# but was hard to read (mixed languages, no structure). DeepSeek-R1 first fine-tunes on a few thousand
# readable chains of thought (the **cold start**), then runs the same RL. In miniature, both start from a
# warm start that almost never shows the format (`sft.CHAIN_ZERO_SFT`: 2% worked demonstrations), and
# both are trained with the R1 reward ($r_{\text{acc}} + 0.1\cdot$format):
#
# - **R1-Zero:** RL directly.
# - **R1:** first a cold start, SFT on 1000 correct worked demonstrations (`sft.fine_tune`), then RL.

# %%
zero_train = data.read_parquet(ZERO / "data" / "train.parquet").to_list()
cold_demos = data.chain_sft_rows(zero_train[:1000], worked_fraction=1.0, wrong_fraction=0.0, seed=1)
COLD = sft.fine_tune(ZERO, cold_demos, RUNS / "cold_start",
                     sft.SFTConfig(steps=10 if fast_mode() else 150, lr=1e-3, batch_size=32, warmup_steps=5,
                                   max_length=64), show_progress=False)
tokenizer = models.load_tokenizer(ZERO)
eval_rows = test_rows[:40] if fast_mode() else test_rows
for label, model_dir in (("zero warm start", ZERO), ("after the cold start", COLD)):
    greedy = evaluate(models.load_policy(model_dir), tokenizer, eval_rows, RESPONSE_LENGTH)
    print(f"{label:22s} greedy accuracy {greedy['acc']:.3f}, format {greedy['format']:.3f}, "
          f"length {greedy['response_length']:.1f}")

# %%
ZERO_STEPS = 2 if fast_mode() else 20
R1_REWARD = ["reward.custom_reward_function.path=../minirl/rewards.py", "reward.custom_reward_function.name=r1_score",
             "actor_rollout_ref.actor.optim.lr=3e-4", f"trainer.total_training_steps={ZERO_STEPS}",
             f"trainer.test_freq={ZERO_STEPS}", "trainer.val_before_train=False",
             f"data.val_max_samples={20 if fast_mode() else 100}"]
starts = run_grid(RUNS, {"r1_zero": sft.train_overrides(ZERO, sft.CHAIN_ZERO_SFT),
                         "r1_cold_start": sft.train_overrides(COLD, sft.CHAIN_ZERO_SFT, ZERO / "data")}, *R1_REWARD)
starts = {"R1-Zero": starts["r1_zero"], "R1 (cold start)": starts["r1_cold_start"]}
plot_comparison(starts, [("minirl/acc/mean", "accuracy of the sampled answers", "step"),
                         ("minirl/format/mean", "share in the <think> format", "step"),
                         ("response_length/mean", "mean response length (tokens)", "step")])
print(compare_table(starts, "minirl/format/mean"))
print(compare_table(starts, "val-core/minirl/chain_sum/acc/mean@1"))
for label, seed_runs in starts.items():
    firsts = [[r["minirl/format/mean"] for r in records if "minirl/format/mean" in r][0] for records in seed_runs]
    print(f"{label}: format share at the first step {np.mean(firsts):.3f} (seeds {min(firsts):.3f}-{max(firsts):.3f})")

# %% [markdown]
# What this run shows (3 seeds, 20 steps each):
#
# - **R1-Zero never finds the format.** The format reward is 0.1 for every `<think>` answer, but the
#   policy almost never samples one: a format share of 0.005 at the first step (seeds 0.000-0.012) and
#   0.000 at the last step in every seed. GRPO can only reinforce what the policy samples: a group in which
#   nobody writes `<think>` gives the format reward no gradient. The direct answers still improve (left
#   panel): greedy validation ends at 0.89 (seeds 0.84-0.93), against the zero warm start's greedy accuracy of
#   0.74 before RL (printed above, on all 200 test prompts; validation reads 100 of them).
# - **The cold start installs the format at once** (0.97 at the first step, seeds 0.95-0.98; 0.99 at the
#   last, seeds 0.98-0.99), but 150 SFT steps on 1000 demonstrations teach the *format* faster than the
#   running-sum *arithmetic*: greedy accuracy falls from the zero warm start's 0.74 to 0.34 after the cold
#   start (printed above), and after 20 RL steps validation accuracy is 0.43 (seeds 0.36-0.53). At this
#   budget, R1-Zero's direct answers are more accurate: the ranges do not overlap (the second table).
#
# So in miniature: the cold start buys **readability** (every answer shows its work in the expected
# format), and R1-Zero gains accuracy on its direct answers but never the format, which it could not sample. Which one ends more accurate depends on
# how good the cold start's reasoning is, which is R1's own argument for curating it carefully (and the
# reason section 3's warm start, whose worked answers were already better than its direct ones, is the
# setting where thinking emerges).
#
# ## 5. The verifier is the reward
#
# With a rule reward, the verifier *is* the specification: whatever it accepts, the policy is paid for.
# verl ships several rule scorers. They differ in what they accept:
#
# | verl 0.9.1 scorer | reads | used for `data_source` |
# |---|---|---|
# | `utils/reward_score/gsm8k.py::compute_score` | the number after the last `####` (strict) or the last number (flexible), in the last 300 characters | `openai/gsm8k` |
# | `utils/reward_score/math_reward.py::compute_score` | the last `\boxed{...}`, string-normalised | `lighteval/MATH`, `DigitalLearningGmbH/MATH-lighteval`, `HuggingFaceH4/MATH-500` |
# | `utils/reward_score/math_dapo.py::compute_score` | `\boxed{}` or an `Answer:` line in the last 300 characters; +1 / -1 | `math_dapo`, `math`, `aime*` |
# | `utils/reward_score/math_verify.py::compute_score` | the `math-verify` library: the last expression, compared *mathematically* (`26.0` = `\frac{52}{2}` = `26`) | yours to choose (not in the default dispatch of 0.9.1) |
#
# And one we wrote to be attacked, `rewards.lenient_score`: "the right number appears anywhere in the
# response". Each of them on a few hand-written answers to `3+9+5=?` (the sum is 17):

# %%
crafted = ["<think>3+9=12, 12+5=17</think> #### 17", "#### 17", "The answer is 17.", "#### 17.0",
           "<think>3+9=12, 12+5=17</think> #### 71", "12 13 14 15 16 17 18 19 #### 15", "#### 16 #### 17"]
print(f"{'response':42s} {'gsm8k':>6s} {'math-verify':>11s} {'lenient':>7s} {'format':>6s} {'R1 reward':>9s}")
for text in crafted:
    print(f"{text!r:42s} {rewards.compute_gsm8k_score(text, '17'):6.0f} "
          f"{rewards.compute_math_verify_score(text, '17'):11.0f} "
          f"{rewards.lenient_score('minirl/chain_sum', text, '17')['score']:7.0f} {rewards.think_format(text):6.0f} "
          f"{rewards.r1_score('minirl/chain_sum', text, '17')['score']:9.1f}")

# %% [markdown]
# - The strict GSM8K rule wants `#### 17` exactly; `17.0` fails it (string match), and of two answers
#   the *last* one counts.
# - math-verify is mathematically smarter (`17.0` is right) and does not need `####`; it also reads the
#   last answer-like expression, so "The answer is 17." passes.
# - The lenient rule pays for the detached answer (`... 12+5=17</think> #### 71`) and for a list of
#   numbers. Both are wrong answers.
#
# **The experiment.** Section 3's grid trained the same policy with the lenient rule. Below, the reward
# each run was paid (`critic/score/mean`) and the strict accuracy of the same answers (`minirl/acc/mean`;
# `lenient_score` logs the strict verdict as `acc`, so both runs report the truth under the same name).

# %%
verifier_runs = {"strict": verifiers["strict"], "lenient": verifiers["lenient"]}
plot_comparison(verifier_runs, [("critic/score/mean", "reward paid (the verifier's score)", "step"),
                                ("minirl/acc/mean", "strict accuracy of the same answers", "step"),
                                ("minirl/worked/mean", "share of worked answers", "step")])
print(compare_table(verifier_runs, "minirl/acc/mean"))
lenient_run = verifiers["lenient"]
gap = [records[-1]["critic/score/mean"] - records[-1]["minirl/acc/mean"] for records in lenient_run]
print(f"lenient run, last step: paid minus right = {np.mean(gap):.3f} (seeds: {', '.join(f'{g:.3f}' for g in gap)})")
wrong_share = [g / max(records[-1]["critic/score/mean"], 1e-9) for g, records in zip(gap, lenient_run)]
print(f"lenient run, last step: share of the paid answers that are wrong = {np.mean(wrong_share):.2f} "
      f"(seeds {min(wrong_share):.2f}-{max(wrong_share):.2f})")
paid_by_step = [{r["step"]: r["critic/score/mean"] - r["minirl/acc/mean"] for r in records
                 if "critic/score/mean" in r} for records in lenient_run]
worked_by_step = [{r["step"]: r["minirl/worked/mean"] for r in records if "minirl/worked/mean" in r}
                  for records in verifiers["strict"]]
print("by step, mean over seeds: the lenient run's paid minus right, and the strict run's share of worked answers")
for step in sorted({*range(5, STEPS + 1, 5), STEPS}):
    print(f"  step {step:3d}: paid minus right {np.mean([g[step] for g in paid_by_step if step in g]):.3f}, "
          f"worked share {np.mean([w[step] for w in worked_by_step if step in w]):.3f}")

# %% [markdown]
# In this run (3 seeds, 40 steps):
#
# - Under the lenient rule the reward climbs as under the strict one (left panel), but the strict accuracy
#   of the same answers lags: 0.65 at step 40 (seeds 0.62-0.67) against 0.77 (seeds 0.71-0.85) for the
#   strictly trained policy. The ranges do not overlap. At the last step the lenient run is paid for 0.13
#   more answers than are right (seeds 0.08-0.17): about one paid answer in six is wrong (0.17, seeds
#   0.10-0.22).
# - The gap grows with the worked style: 0.03 at step 5, when 0.43 of the answers are worked, 0.11 at
#   step 20 (0.92 worked), then 0.12-0.14 (the worked share printed is the strict run's; the lenient run's
#   follows the same curve, right panel). The worked answer contains the right running sum, so the lenient
#   rule pays whether or not the final answer matches. Nothing pushes the final answer to stay tied to the
#   chain, so it drifts.
# - These are 3 seeds of one warm start. From other warm starts, which stand in for another CPU
#   (`bench/effect_spread.py --swap chain`, at half this batch), the lenient rule paid for wrong answers every
#   time, but the strict run's lead in accuracy was sometimes absent or reversed. So
#   `tests/test_chapter_effects.py` asserts only that the lenient rule pays for wrong answers.
#
# The hack is not the one we expected when we wrote the rule ("list many numbers"): the policy did not
# learn to enumerate, because writing the right chain already pays. What follows `</think>` stops
# mattering: in the paid-but-wrong answers below (4 of seed 0's answers to 100 test prompts), the chain is
# right and the final answer is one off its last sum, or further:

# %%
hacked = sorted((RUNS / "lenient" / "seed0").glob("global_step_*"))[-1] / "actor"
shown = 0
for row, text, result in sample_answers(hacked, test_rows[:100], samples_per_prompt=1, seed=2):
    lenient = rewards.lenient_score(row["data_source"], text, row["reward_model"]["ground_truth"])
    if lenient["score"] == 1.0 and not result["acc"] and shown < 6:
        print(f"  {row['prompt'][0]['content']:12s} -> {text!r:58} paid 1, right 0")
        shown += 1
if shown == 0:
    print("(no paid-but-wrong answer among these 100 prompts)")

# %% [markdown]
# The lesson carries over to real RLVR: a verifier with a loophole is optimised *into* the loophole,
# quietly (the reward curve looks healthy). Log the strict check beside the reward you train on, read
# samples, and prefer a verifier that rejects anything it cannot parse. This is why verl's GSM8K rule
# has a strict mode, why `math_dapo.py` scores a missing answer -1 and not 0, and why the R1 paper
# avoided neural reward models for reasoning.
#
# ## 6. Data preparation as verl does it
#
# verl trains on parquet files with one row per prompt: `data_source` (which picks the scorer),
# `prompt` (chat messages), `ability`, `reward_model` (`{"style": "rule", "ground_truth": ...}`) and
# `extra_info`. The preprocessing scripts write them (`examples/data_preprocess/`, tag v0.9.0):
#
# - `gsm8k.py`: appends `Let's think step by step and output the final answer after "####".` to each
#   question, keeps the number after `####` of the reference solution as `ground_truth`,
#   `data_source="openai/gsm8k"`;
# - `examples/data_preprocess/math_dataset.py`: appends `Let's think step by step and output the final
#   answer within \boxed{}.`, keeps the last `\boxed{}` of the reference solution,
#   `data_source="DigitalLearningGmbH/MATH-lighteval"` (scored by `math_reward.py`).
#
# minirl's `data.preprocess_gsm8k` writes the same GSM8K rows (here from the 20 real GSM8K examples per split
# that the repository ships for its tests, read offline), and the chain task's rows have the same columns:

# %%
gsm8k_sample = Path("..") / "tests" / "data" / "gsm8k_sample"  # 20 real GSM8K rows per split (MIT licence)
rows = data.gsm8k_rows([json.loads(line) for line in (gsm8k_sample / "train.jsonl").read_text().splitlines()[:1]],
                       "train")
print(json.dumps(rows[0], indent=1))
print(json.dumps(data.chain_rows(1, "train", seed=0)[0], indent=1))

# %% [markdown]
# The real path is a config change. The tiny chain task runs as in section 3; GSM8K with
# Qwen2.5-0.5B-Instruct is the README's command with the R1-style pieces added:
#
# ```bash
# python -c "from minirl.data import preprocess_gsm8k; preprocess_gsm8k('data/gsm8k')"
# accelerate launch --multi_gpu --num_processes 8 --mixed_precision bf16 -m minirl train \
#     actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
#     data.train_files=data/gsm8k/train.parquet data.val_files=data/gsm8k/test.parquet \
#     data.max_prompt_length=512 data.max_response_length=1024 \
#     algorithm.adv_estimator=grpo actor_rollout_ref.rollout.n=8 actor_rollout_ref.actor.optim.lr=1e-6 \
#     actor_rollout_ref.rollout.val_kwargs.n=4 actor_rollout_ref.rollout.val_kwargs.do_sample=true \
#     actor_rollout_ref.rollout.val_kwargs.temperature=1.0 \
#     reward.custom_reward_function.path=path/to/your_verifier   # optional: a Python file with compute_score
# ```
#
# `val_kwargs.n=4` with sampling makes validation report `best@4/mean` (pass@4 estimated by bootstrap) beside
# `mean@4`.
#
# ## 7. verl ↔ minirl
#
# | | verl 0.9.1 | minirl |
# |---|---|---|
# | rule scorers | `verl/utils/reward_score/gsm8k.py`, `math_reward.py`, `math_dapo.py`, `math_verify.py` (`compute_score` in each) | `minirl/rewards.py::compute_gsm8k_score`, `compute_math_score`, `compute_math_verify_score` |
# | dispatch by `data_source` | `verl/utils/reward_score/__init__.py::default_compute_score` | `minirl/rewards.py::default_compute_score` |
# | your own reward | `verl/trainer/ppo/reward.py::get_custom_reward_fn` (`reward.custom_reward_function.*`) | `minirl/rewards.py::load_custom_reward_function` |
# | extra values logged | a dict result's other keys (`reward_extra_info`), e.g. `acc` | the same, as `minirl/<key>/mean` |
# | data preparation | `examples/data_preprocess/gsm8k.py`, `examples/data_preprocess/math_dataset.py` | `minirl/data.py::preprocess_gsm8k`, `chain_rows` |
# | validation sampling | `RayPPOTrainer._validate`, `metric_utils.py::process_validation_metrics` (`best@k`, `maj@k`) | `minirl/trainer.py::PPOTrainer.validate`, `minirl/metrics.py::process_validation_metrics`, `pass_at_k` |
# | R1's format reward | `verl/utils/reward_score/geo3k.py::format_reward` (`<think>...</think>...\boxed{}`, for Geometry3K; a greedy pattern), or your custom reward function | `minirl/rewards.py::think_format`, `r1_score` |
#
# | config key | default | meaning |
# |---|---|---|
# | `reward.custom_reward_function.path` | `null` | a Python file with your `compute_score(data_source, solution_str, ground_truth, extra_info)` |
# | `reward.custom_reward_function.name` | `compute_score` | the function's name in that file |
# | `actor_rollout_ref.rollout.val_kwargs.n` | `1` | answers per validation prompt; above 1, `best@k`, `worst@k`, `maj@k` |
# | `actor_rollout_ref.rollout.val_kwargs.do_sample` | `False` | sample (with `val_kwargs.temperature`) instead of greedy |
# | `data.max_response_length` | `512` in verl (48 here) | the thinking budget: an answer cut off here has no final answer |
#
# | metric | meaning |
# |---|---|
# | `critic/score/mean` | the verifier's score (the reward, before any KL) |
# | `minirl/acc/mean`, `minirl/format/mean`, `minirl/worked/mean` | what the chain verifier logs beside the score |
# | `response_length/mean`, `response_length/clip_ratio` | thinking length, and the share cut off at the budget |
# | `val-core/<data_source>/acc/mean@1` | greedy validation accuracy |
#
# ## 8. Exercises
#
# Open `exercises/ch08_r1.py` and grade with `make grade` (one exercise, all of its checks:
# `make grade EX=8.1`). The verifiers are graded on hundreds of generated strings: a reward function
# sees whatever the policy writes, and must never raise.
#
# | # | function | what it checks |
# |---|---|---|
# | 8.1 | `think_format` | R1's format reward: one `<think>` block, then `#### N`, nothing else; agrees with the library on generated strings |
# | 8.2 | `extract_answer` | verl's strict GSM8K extraction: the last `#### N` in the last 300 characters; never raises |
# | 8.3 | `pass_at_k` | the unbiased estimator, exact on small cases, stable for large n |
#
# <details>
# <summary>Hint for 8.1</summary>
# <code>re.fullmatch</code> on the stripped string, with a non-greedy <code>(.*?)</code> for the thinking and
# <code>re.DOTALL</code> so that it may span lines; then check that the captured thinking holds no tag.
# </details>
#
# <details>
# <summary>Hint for 8.2</summary>
# Cut the string to its last 300 characters first, then <code>re.findall</code> and keep the last match.
# </details>
#
# <details>
# <summary>Hint for 8.3</summary>
# $\binom{n-c}{k}/\binom{n}{k} = \prod_{i=n-c+1}^{n} (1 - k/i)$; if $n - c < k$, every draw of $k$ holds a
# right answer.
# </details>
#
# **Failure-mode question.** Your R1-style run on GSM8K shows `critic/score/mean` rising for 300 steps,
# but `val-core/openai/gsm8k/acc/mean@1` stays flat. What could be happening, and what do you check?
#
# <details>
# <summary>Answer</summary>
# Three common causes. (1) The reward pays for something other than accuracy: a format reward (the
# policy learned the format, not the maths), or a lenient verifier with a loophole (section 5). Log the
# score's parts separately (return a dict with <code>acc</code> and <code>format</code>) and read samples
# where the score is high but <code>acc</code> is 0. (2) Training and validation score differently: a
# different <code>data_source</code> or verifier for the validation file, or a validation prompt without
# the instruction the training prompts have. (3) The answers are cut off: check
# <code>response_length/clip_ratio</code>; a truncated answer has no final answer, and greedy validation
# may be truncated more often than sampled training. Fix the verifier (strict, parse-or-reject), not the
# optimiser.
# </details>
#
# ### The library's code, after you tried

# %%
from IPython.display import display

for function in (rewards.think_format, rewards.extract_solution, metrics.pass_at_k):
    display(show_source(function, collapsed=True))

# %% [markdown]
# ## 9. Where next
#
# - [Lab A · GSM8K with PPO](lab_a_gsm8k.ipynb) and [Lab B · Writing reward functions](lab_b_rewards.ipynb):
#   the data, the verifier and your own reward, on GSM8K.
# - [Chapter 5 · DAPO / Dr.GRPO](05_dapo.ipynb): the recipe details that keep long-reasoning RL stable, on this chapter's
#   task (token-level loss and length, clip-higher, dynamic sampling, the overlong penalty).
# - [Chapter 4 · GRPO](04_grpo.ipynb): the optimiser used here.
# - [Chapter 3 · InstructGPT](03_rlhf.ipynb): a *learned* reward, and how a policy exploits it.
# - Back to [the reading map](index.md).
# - References: DeepSeek-AI (2025), *DeepSeek-R1: Incentivizing Reasoning Capability in LLMs via
#   Reinforcement Learning*; Shao et al. (2024), *DeepSeekMath* (GRPO); Chen et al. (2021), *Evaluating
#   Large Language Models Trained on Code* (pass@k); Lambert et al. (2024), *Tülu 3* (RL with verifiable
#   rewards); Kydlíček et al., *Math-Verify* (Hugging Face).

# %%
print_run_time()
