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
# # Lab A · GSM8K with PPO, end to end
#
# | | |
# |---|---|
# | **What you will do** | Turn GSM8K into verl's parquet files, exactly as verl's script does. Score real reference answers and broken ones with the GSM8K rule. Train PPO (GAE and a critic) with the keys of verl's quickstart on a GSM8K-format tiny task, over 3 seeds. Read a healthy log. Then read the real command for Qwen2.5-0.5B-Instruct, key by key. |
# | **What you need** | [Chapter 1 · PPO](01_ppo.ipynb) and [Chapter 2 · GAE](02_gae.ipynb) explain the loss and the advantages used here. Nothing else: the GSM8K files ship with minirl (`minirl/assets/gsm8k/`, MIT licence). |
# | **verl pages this lab follows** | `docs/start/quickstart.rst` and `docs/examples/gsm8k_example.rst` (tag v0.9.0); `examples/data_preprocess/gsm8k.py`; `verl/utils/reward_score/gsm8k.py::compute_score`. Section 6 lists where these pages are out of date. |
# | **Run time** | 4.5 minutes in the run shown here, on 2 CPU cores that other jobs shared during the run (three PPO runs of 40 steps, two at a time; the first output names the machine, the last prints the run time). With `MINIRL_FAST=1`, a few seconds. |

# %%
import json
import re
from pathlib import Path

import matplotlib.pyplot as plt

from minirl import data, rewards, sft
from minirl.book.notebook import band, compare_table, fast_mode, print_run_time, run_grid, show_source, where_this_ran
from minirl.config import load_config

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "lab_a"
gsm8k_files = data.preprocess_gsm8k(RUNS / "gsm8k", local_dir=data.GSM8K_LOCAL_DIR)
train_rows = data.read_parquet(gsm8k_files["train"]).to_list()
test_rows = data.read_parquet(gsm8k_files["test"]).to_list()
print({split: str(path) for split, path in gsm8k_files.items()})
print(f"{len(train_rows)} training rows, {len(test_rows)} test rows")
print(json.dumps(train_rows[0], indent=1))

# %% [markdown]
# ## 1. The real data, in verl's schema
#
# verl does not read GSM8K's own files. Its script `examples/data_preprocess/gsm8k.py` turns each example
# (`question`, `answer`) into one **row** of a parquet file, and the trainer reads only those rows. minirl's
# `data.preprocess_gsm8k` writes the same rows (here from the copy that ships with minirl; with no
# `local_dir` it downloads `openai/gsm8k` from the hub, as verl does). The row printed above has the five
# columns of verl's schema:
#
# | column | value | who reads it |
# |---|---|---|
# | `data_source` | `"openai/gsm8k"` | the reward manager: it picks the scoring function by this name |
# | `prompt` | one user message: the question, a space, then verl's instruction *Let's think step by step and output the final answer after "####".* | the dataset: it applies the model's chat template to it |
# | `ability` | `"math"` | nobody in the trainer: a tag for you |
# | `reward_model` | `{"style": "rule", "ground_truth": "72"}`: the number after `#### ` in the answer, commas removed, **as a string** | the scoring function |
# | `extra_info` | split, index, and the raw question and answer | your own reward function, if it wants them |
#
# The instruction matters: it is the only thing that tells the model to end with `#### N`, and the reward
# rule reads nothing else. Let us look at the answers' ground truths and at the prompt lengths.

# %%
truths = [row["reward_model"]["ground_truth"] for row in train_rows]
print("ground truths that are not integers:", sorted({t for t in truths if not re.fullmatch(r"-?\d+", t)})[:10])
print("negative ground truths:", sum(t.startswith("-") for t in truths))
print("answers written with a thousands comma:", sum("," in row["extra_info"]["answer"].split("####")[-1]
                                                     for row in train_rows))
lengths = sorted(len(row["prompt"][0]["content"]) for row in train_rows)
print(f"prompt characters: median {lengths[len(lengths) // 2]}, 99th percentile {lengths[int(0.99 * len(lengths))]}, "
      f"max {lengths[-1]}")

# %% [markdown]
# Every ground truth is an integer string (3 are negative; 79 were written with a thousands comma, which the
# script removes). Prompts are a few hundred characters (median 284, at most 1052), so with Qwen's tokenizer
# (about 4 characters per token) they fit the quickstart's `data.max_prompt_length=512`.
#
# ## 2. The reward: GSM8K's rule, on real and broken answers
#
# verl scores GSM8K with `verl/utils/reward_score/gsm8k.py::compute_score` (minirl:
# `rewards.compute_gsm8k_score`, checked against verl in `tests/parity/`). The rule:
#
# 1. keep only the **last 300 characters** of the response (the final answer is at the end; a regex over
#    a very long string is slow);
# 2. **strict** mode (the default): find every `#### <number>` (exactly one space after `####`) and take
#    the last one; **flexible** mode: take the last number anywhere;
# 3. in strict mode, remove commas from it (flexible mode keeps them); compare it with the ground truth
#    **as a string**;
# 4. return `score` (1.0) if equal, `format_score` (0.0 by default) if an answer was found but is wrong,
#    and 0 if no answer was found.
#
# With $y$ the response, $y_{-300:}$ its last 300 characters, $g$ the ground truth and $a(\cdot)$ the extracted
# answer:
#
# $$
# r(y) = \begin{cases} \text{score} & \text{if } a(y_{-300:}) = g, \\
# \text{format\_score} & \text{if } a(y_{-300:}) \text{ exists and } a(y_{-300:}) \neq g, \\
# 0 & \text{if no answer is found.} \end{cases}
# $$
#
# The real reference answers should all score 1. Then some broken answers, each made from a real one.

# %%
references = [rewards.compute_gsm8k_score(row["extra_info"]["answer"], row["reward_model"]["ground_truth"])
              for row in test_rows]
print(f"reference answers scored right by the strict rule: {sum(references)} of {len(references)}")

row = test_rows[0]
truth, answer = row["reward_model"]["ground_truth"], row["extra_info"]["answer"]
work = answer.split("####")[0].strip()
broken = {
    "the reference answer": answer,
    "no space after ####": f"{work}\n####{truth}",
    "'The answer is N.' (no ####)": f"{work}\nThe answer is {truth}.",
    f"'#### {truth}.0' (a float)": f"{work}\n#### {truth}.0",
    "'#### $N' (a dollar sign first)": f"{work}\n#### ${truth}",
    "a wrong number": f"{work}\n#### {int(truth) + 1}",
    "right, then a wrong second answer": f"#### {truth}\n#### {int(truth) + 1}",
    "the answer, then 300 characters of chatter": f"#### {truth}\n" + "I hope this helps! " * 16,
}
print(f"\nquestion: {row['extra_info']['question'][:100]}...  ground truth {truth!r}\n")
print(f"{'response':44s} {'strict':>6s} {'flexible':>8s} {'strict, format_score=0.1':>25s}")
for name, response in broken.items():
    strict = rewards.compute_gsm8k_score(response, truth)
    flexible = rewards.compute_gsm8k_score(response, truth, method="flexible")
    partial = rewards.compute_gsm8k_score(response, truth, format_score=0.1)
    print(f"{name:44s} {strict:6.1f} {flexible:8.1f} {partial:25.1f}")

# %% [markdown]
# What the table teaches:
#
# - **Strict is strict about the format, not about arithmetic.** `####18` and "The answer is 18." score 0,
#   however right they are. This is on purpose: the policy must learn the format, and a rule that only
#   reads a fixed format is hard to fool. Flexible mode accepts `####18`, and takes the *last* number it
#   finds, so a response that lists numbers can hit the answer by chance (Lab B and [Chapter 8](08_r1.ipynb) show
#   policies exploiting lenient rules). It still scores "The answer is 18." 0: its pattern takes the full stop
#   into the number, and "18." is not "18".
# - **Strings, not numbers.** `#### 18.0` is not `18`. Exercise A.2 writes the numeric version.
# - **A dollar sign right after `#### ` is not a number,** so `#### $18` has no strict answer at all (the
#   regex wants a digit, `-`, `.` or `,` after the space). verl's code also deletes dollar signs from the
#   strict answer, but that line never changes anything: the regex cannot capture a dollar sign.
# - **The last 300 characters.** An answer followed by a long sign-off is lost. With a token budget of 512,
#   this is rare, but it happens with chatty models.
# - **`format_score`** gives partial credit to a wrong answer in the right format. verl's default is 0.0;
#   `docs/examples/gsm8k_example.rst` still says 0.1 (section 6). A positive value rewards the format early
#   in training, but it also pays for confident wrong answers.
#
# ## 3. A run you can finish on a laptop: a GSM8K-format tiny task
#
# A 0.3M-parameter model cannot read GSM8K. So the book makes a task with the same format and rule:
# one-step word problems, generated from templates with a seed (`data.word_problem_rows`,
# `data_source="minirl/gsm8k_tiny"`), answered `12+7=19 #### 19` and scored by the same strict GSM8K rule.
# The wording alone says whether to add or subtract. The prompts carry no instruction sentence (it would
# triple their length for a tiny model). As in every chapter, the model starts from an SFT warm start that
# imitated noisy demonstrations (40% of them wrong by 1 to 3).

# %%
WARM = sft.default_warm_start(sft.WORD_SFT)  # built once and cached (about 5 minutes on 2 cores)
warm_info = json.loads((WARM / "warm_start.json").read_text())
word_rows = data.read_parquet(WARM / "data" / "test.parquet").to_list()
for row in word_rows[:4]:
    print(f"{row['prompt'][0]['content']:78s} -> {data.word_response(row)}")
print({key: warm_info[key] for key in ("greedy_acc", "sampled_acc", "seconds")})

# %% [markdown]
# The lines above are four test prompts (the validation file) with their reference responses: the format
# the warm start imitated. The cell does not print the warm start's own responses, only its accuracy on the
# test prompts: 0.245 greedy, 0.175 sampled. About three answers in four are wrong. That is room for RL.
#
# ### verl's quickstart, scaled down
#
# The quickstart runs `python3 -m verl.trainer.main_ppo` with 25 overrides. minirl takes the same keys.
# Here is each one, what it means, and the value this tiny run uses:
#
# | quickstart key | quickstart value | meaning | tiny run |
# |---|---|---|---|
# | (not set) `algorithm.adv_estimator` | verl's default `gae` | PPO with GAE advantages and a critic ([Chapter 2](02_gae.ipynb)) | `gae`, set explicitly: minirl's default is `grpo` |
# | `data.train_files`, `data.val_files` | `~/data/gsm8k/{train,test}.parquet` | the parquet files of section 1 | the word problems' files |
# | `data.train_batch_size` | 256 | prompts per training step | 128 |
# | `data.max_prompt_length`, `data.max_response_length` | 512, 512 | token budgets. verl 0.9.1 stores `data.truncation` (default `error`) but does not apply it: its agent loop cuts an over-long prompt from the left to `rollout.prompt_length` (which follows `max_prompt_length`) and logs a warning. minirl raises the error (`minirl/README.md`, item 20) | 96, 24 |
# | `actor_rollout_ref.model.path` | `Qwen/Qwen2.5-0.5B-Instruct` | the policy; also the reference model's and the rollout's weights | the warm start |
# | `actor_rollout_ref.actor.optim.lr` | 1e-6 | the actor's learning rate | 1e-4 (a tiny model needs larger steps) |
# | `actor_rollout_ref.actor.ppo_mini_batch_size` | 64 | prompts per optimizer step: 256 / 64 = 4 updates per training step | 32 (also 4 updates) |
# | `actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu` | 4 | rows per forward/backward pass; gradients are accumulated over a mini-batch. Memory only: the update is the same | not set (the whole mini-batch at once) |
# | (not set) `actor_rollout_ref.rollout.n` | verl's default 1 | responses per prompt: PPO needs no group | 1, set explicitly: minirl's default is 8 |
# | `actor_rollout_ref.rollout.name`, `tensor_model_parallel_size`, `gpu_memory_utilization` | `vllm`, 1, 0.4 | the inference engine and its GPU share | accepted, no effect (minirl's engine is a plain decode loop) |
# | `actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu`, `actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu` | 8, 4 | rows per forward pass when recomputing old and reference log-probs | not set |
# | `critic.model.path` | the same Qwen model | the critic starts from the policy's weights with a new value head | the warm start |
# | `critic.optim.lr` | 1e-5 | the critic's learning rate (10x the actor's) | minirl's default 1e-3 |
# | `critic.ppo_micro_batch_size_per_gpu` | 4 | the critic's micro-batch | not set |
# | `algorithm.kl_ctrl.kl_coef` | 0.001 | the coefficient of the KL penalty *in the reward*. **It has no effect here**: `algorithm.use_kl_in_reward` defaults to false, and without it no penalty is applied (section 6) | 0.001, to match |
# | `trainer.logger` | `console` | where metrics go; minirl also always writes `metrics.jsonl` | `[]` (the notebook reads `metrics.jsonl`) |
# | `trainer.val_before_train` | False | skip the validation at step 0 | true: we want the starting point |
# | `trainer.n_gpus_per_node`, `trainer.nnodes` | 1, 1 | the processes of the run | one CPU process |
# | `trainer.save_freq`, `trainer.test_freq` | 10, 10 | checkpoint and validate every 10 steps | no checkpoints, validate every 10 |
# | `trainer.total_epochs` | 15 | passes over the training set: 15 x (7473 // 256) = 435 steps | `trainer.total_training_steps=40` |
#
# `python -m minirl config` checks a command without loading anything; the quickstart's 25 overrides pass
# unchanged (`tests/test_lab_a.py`):

# %%
QUICKSTART = (Path("..") / "tests" / "data" / "verl_scripts" / "quickstart_gsm8k_ppo.txt").read_text().split()
resolved = load_config(QUICKSTART, announce=False)
print("the quickstart resolved by minirl: adv_estimator =", resolved.algorithm.adv_estimator,
      "| rollout.n =", resolved.actor_rollout_ref.rollout.n,
      "| use_kl_in_reward =", resolved.algorithm.use_kl_in_reward)
resolved_ppo = load_config(QUICKSTART + ["algorithm.adv_estimator=gae"], announce=False)
epoch_steps = 7473 // resolved_ppo.data.train_batch_size
print("with algorithm.adv_estimator=gae:           adv_estimator =", resolved_ppo.algorithm.adv_estimator,
      "| total steps from 15 epochs =", resolved_ppo.trainer.total_epochs * epoch_steps)

# %% [markdown]
# The first line shows the two traps of running verl's quickstart through minirl: verl's default estimator
# is `gae`, minirl's is `grpo` (the book's flagship), and verl samples one response per prompt by default,
# minirl eight. With `algorithm.adv_estimator=gae actor_rollout_ref.rollout.n=1` the command is verl's PPO.
# (minirl's `total_training_steps` also has its own default; `minirl/README.md`, item 37, lists them all.)
#
# Now the tiny run, three seeds, two at a time. `data.seed` changes the data order, every sampling seed and
# the critic head's initialisation.

# %% tags=["central-figure"]
STEPS = 3 if fast_mode() else 40
TINY_PPO = [*sft.train_overrides(WARM, sft.WORD_SFT), f"critic.model.path={WARM}", "algorithm.adv_estimator=gae",
            "data.train_batch_size=128", "data.max_prompt_length=96", "actor_rollout_ref.actor.optim.lr=1e-4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=32", "actor_rollout_ref.rollout.n=1",
            "algorithm.kl_ctrl.kl_coef=0.001", f"trainer.total_training_steps={STEPS}",
            f"trainer.test_freq={min(10, STEPS)}", "trainer.val_before_train=true"]
if fast_mode():
    TINY_PPO += ["data.val_max_samples=40", "data.train_batch_size=32", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
VAL = "val-core/minirl/gsm8k_tiny/acc/mean@1"
results = run_grid(RUNS, {"PPO (gae + critic)": []}, *TINY_PPO)
ppo = results["PPO (gae + critic)"]

fig, axes = plt.subplots(1, 4, figsize=(14, 3.2))
for ax, (key, title) in zip(axes, [(VAL, "validation accuracy (greedy, 200 prompts)"),
                                   ("critic/score/mean", "training reward (sampled)"),
                                   ("critic/vf_explained_var", "critic: explained variance"),
                                   ("actor/entropy", "actor: entropy per token")]):
    band(ax, ppo, key, "PPO", **({"marker": "o"} if key == VAL else {}))
    ax.set(title=title, xlabel="step")
    ax.grid(alpha=0.3)
axes[0].axhline(warm_info["greedy_acc"], color="gray", linestyle=":", label="warm start")
axes[0].legend(fontsize=7)
plt.suptitle("PPO with the quickstart's keys on the GSM8K-format tiny task (mean and min-max over seeds)")
plt.tight_layout()
plt.show()
start = {"warm start (step 0)": [[r for r in records if r["step"] == 0] for records in ppo]}
print(compare_table({**start, "PPO, last step": ppo}, VAL))

start_acc = [[r[VAL] for r in records if r["step"] == 0][0] for records in ppo]
final_acc = [[r[VAL] for r in records if VAL in r][-1] for records in ppo]
gains = [final - first for final, first in zip(final_acc, start_acc)]
val_max = load_config(TINY_PPO, announce=False).data.val_max_samples
n_val = len(word_rows) if val_max < 0 else min(val_max, len(word_rows))  # the validation prompts
p_val = sum(final_acc) / len(final_acc)
se = (p_val * (1 - p_val) / n_val) ** 0.5
print(f"gain over the warm start, per seed: {min(gains):.3f}-{max(gains):.3f} (mean {sum(gains) / len(gains):.3f}); "
      f"seed spread at the last step: {max(final_acc) - min(final_acc):.3f}")
print(f"standard error of one accuracy on {n_val} prompts: {se:.3f}; mean gain / standard error: "
      f"{sum(gains) / len(gains) / max(se, 1e-9):.1f}")
print(f"\n{'mean (min-max) over seeds':24s} {'first step':>20s} {'last step':>20s} {'mean of last 5 steps':>20s} "
      f"{'all steps, min-max':>20s}")
for key in ("critic/score/mean", "actor/entropy", "critic/vf_explained_var"):
    curves = [[r[key] for r in records if key in r] for records in ppo]
    cells = []
    for values in ([c[0] for c in curves], [c[-1] for c in curves], [sum(c[-5:]) / len(c[-5:]) for c in curves]):
        cells.append(f"{sum(values) / len(values):.3f} ({min(values):.3f}-{max(values):.3f})")
    every = [v for c in curves for v in c]
    cells.append(f"{min(every):.3f}-{max(every):.3f}")
    print(f"{key:24s} " + " ".join(f"{cell:>20s}" for cell in cells))

# %% [markdown]
# In this run (3 seeds, 40 steps, on this machine) validation accuracy rose from the warm start's 0.245 to
# 0.352 (seeds 0.345-0.355) at the last step. The sampled training reward rose from 0.174 (seeds 0.133-0.203)
# at the first step to 0.292 (seeds 0.273-0.314) over the last 5 steps. The gain is modest and slow, but real:
# every seed gains 0.100-0.110 (mean 0.107), far more than the seeds' spread at the last step (0.010). With
# 200 validation prompts the standard error of one accuracy is 0.034, so the mean gain is 3.2 of them. These
# seeds share one warm start; from other warm starts of the word task (they stand in for another CPU:
# `bench/effect_spread.py --swap word`, 20 steps, one seed each) learning was slower still, and on two of five
# validation had risen by only one or two questions after 20 steps. The plot shows why it is slow:
#
# - the **critic explains almost nothing**. `critic/vf_explained_var` starts negative, -0.381 (seeds -0.506
#   to -0.227) at the first step, because the new value head is untrained, and ends near 0: 0.030 (seeds
#   0.011-0.045) at the last step. With one response per prompt and a 0/1 reward, a value per prompt is hard
#   to learn from 128 samples a step; PPO then behaves much like REINFORCE with a learned mean baseline;
# - the **entropy is low from the start**: 0.134 nats per token (seeds 0.131-0.137) at the first step,
#   0.108 (seeds 0.106-0.110) at the last. The warm start is confident, also when it is wrong, so sampling
#   rarely tries another answer.
#
# Faster learners on this task exist (a group of responses per prompt: [Chapter 4 · GRPO](04_grpo.ipynb));
# this lab keeps the quickstart's algorithm.
#
# ### What a healthy log looks like
#
# verl's console logger prints one line per step, `step:N - key:value - ...`. Here are the lines minirl's
# run wrote at a few steps (from `metrics.jsonl`), with the keys a verl engineer reads first:

# %%
WATCH = ["critic/score/mean", "actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy",
         "actor/grad_norm", "critic/vf_loss", "critic/vf_explained_var", "critic/vf_clipfrac",
         "response_length/mean", "response_length/clip_ratio", "timing_s/gen", "timing_s/step"]
records = ppo[0]
for record in [r for r in records if r["step"] in (1, STEPS // 2, STEPS)]:
    print(f"step:{record['step']} - " + " - ".join(f"{key}:{record[key]:.3f}" for key in WATCH if key in record))

# %% [markdown]
# Signs of health, with the numbers of this run:
#
# | metric | healthy here | what a bad value means |
# |---|---|---|
# | `critic/score/mean` | rises slowly, noisy (0.133-0.367 over all steps and seeds) | flat at 0: the reward never fires (format? `data_source`?) |
# | `actor/pg_clipfrac` | near 0 (the updates are small) | above about 0.2: steps too large (learning rate, epochs) |
# | `actor/ppo_kl` | near 0, tiny positive or negative | large: the policy moves far within one step |
# | `actor/entropy` | slowly falling (0.134 to 0.108, means over seeds) | a fast fall towards 0: entropy collapse, exploration is over |
# | `critic/vf_explained_var` | negative at step 1 while the new value head is untrained (-0.381), then near 0 here (a weak critic); rises on easier tasks | strongly negative and staying there: the critic is worse than a constant |
# | `response_length/clip_ratio` | 0: every response ends with EOS | near 1: responses hit `max_response_length` and get cut |
# | `timing_s/gen` vs `timing_s/step` | generation 0.3-0.7 s of a 1.9-4.4 s step in the log above (the tiny model's passes dominate; other jobs shared the CPU cores, so these times are noisy); on GPUs with long responses, most of the step | |
#
# [Lab C · Reading the debug metrics](lab_c_metrics.ipynb) covers every metric and shows broken runs next to healthy ones.
#
# ## 4. The real run: Qwen2.5-0.5B-Instruct on GSM8K (the GPU path)
#
# !!! warning "GPU path"
#     This section is not run by the notebook: it needs a GPU and the model from the hub. The commands are
#     checked by `python -m minirl config` in the test suite, so their keys are valid.
#
# The same code runs the real thing; only the config changes. On one GPU, the quickstart becomes:
#
# ```bash
# .venv/bin/python -c "from minirl.data import preprocess_gsm8k; preprocess_gsm8k('data/gsm8k')"   # from the hub
# .venv/bin/accelerate launch --num_processes 1 --mixed_precision bf16 -m minirl train \
#     algorithm.adv_estimator=gae actor_rollout_ref.rollout.n=1 \
#     data.train_files=data/gsm8k/train.parquet data.val_files=data/gsm8k/test.parquet \
#     data.train_batch_size=256 data.max_prompt_length=512 data.max_response_length=512 \
#     data.filter_overlong_prompts=true data.val_max_samples=-1 \
#     actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
#     actor_rollout_ref.actor.optim.lr=1e-6 actor_rollout_ref.actor.ppo_mini_batch_size=64 \
#     actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
#     actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
#     actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 \
#     critic.model.path=Qwen/Qwen2.5-0.5B-Instruct critic.optim.lr=1e-5 critic.ppo_micro_batch_size_per_gpu=4 \
#     trainer.val_before_train=false trainer.save_freq=10 trainer.test_freq=10 trainer.total_epochs=15 \
#     trainer.total_training_steps=null trainer.logger=[console,tensorboard] trainer.default_local_dir=runs/qwen-gsm8k
# ```
#
# What differs from verl's line: `algorithm.adv_estimator=gae` and `actor_rollout_ref.rollout.n=1` (minirl's
# defaults are GRPO with 8 responses per prompt);
# `data.val_max_samples=-1` (minirl validates on 200 prompts by default, verl on all 1319);
# `trainer.total_training_steps=null` so that `total_epochs` decides (minirl's default is 100 steps);
# `data.filter_overlong_prompts=true`, a safety net for a tokenizer other than Qwen's. The vLLM keys are
# dropped: minirl's rollout is a KV-cached decode loop, much slower than vLLM, so expect generation to
# dominate each step. For several GPUs, `accelerate launch --multi_gpu --num_processes 8`; batch sizes
# stay global (README, "Several processes and GPUs").
#
# **The numbers verl publishes** for this setup (`docs/algo/baseline.md` and `docs/algo/ppo.md`, v0.9.0):
# Qwen2.5-0.5B-Instruct scores 49.6 on GSM8K as released (Qwen's figure; `ppo.md` quotes 36.4 for the
# pretrained model, so the two pages start from different figures), and **56.7 after PPO** with this recipe.
# The metric to watch is `val-core/openai/gsm8k/acc/mean@1`. GSM8K's rule returns a float, verl 0.9.1's reward
# loop logs a float score as `acc` too, and validation's core variable is `acc` when there is one
# ([Chapter 4](04_grpo.ipynb), section 6). `val-aux/openai/gsm8k/reward/mean@1` holds the same number.
# minirl logs both, under the same names.
#
# **The memory knobs**, in the order to try them when a step runs out of memory:
#
# | knob | what it saves | what it costs |
# |---|---|---|
# | `actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu` (and `critic.`, `log_prob_` ones) smaller, e.g. 1 (the quickstart's advice for GPUs under 32 GB) | activations: fewer rows per forward/backward | more passes, same update |
# | `actor_rollout_ref.actor.use_dynamic_bsz=true` with `ppo_max_token_len_per_gpu` | the same, by a token budget instead of a row count: long and short responses share a micro-batch fairly | none for the update; verl's large scripts use it instead of micro-batch sizes |
# | `actor_rollout_ref.model.enable_gradient_checkpointing=true` (and `critic.model.`) | most activation memory: they are recomputed in the backward pass | about a third more compute for the update |
# | `data.max_response_length` smaller | everything scales with it | the policy cannot reason as long; watch `response_length/clip_ratio` |
#
# **Per step on one GPU.** A step generates 256 responses of up to 512 tokens, then runs six passes over
# 256 sequences of up to 1024 tokens (old log-probs, reference, values, and the actor and critic updates,
# each a forward and a backward). For a 0.5B model the passes take seconds on a modern GPU; generation with
# minirl's decode loop takes 512 sequential forward passes of the batch, which is where most of the time
# goes. We did not measure a real step (this machine has no GPU and no network for the weights); measure it
# with `timing_s/gen` against `timing_s/step` in your first steps.
#
# ## 5. verl <-> minirl
#
# | step | verl 0.9.1 | minirl |
# |---|---|---|
# | preprocess | `examples/data_preprocess/gsm8k.py` (a script, not in the wheel) | `minirl/data.py::preprocess_gsm8k`, `gsm8k_rows` |
# | read the rows | `verl/utils/dataset/rl_dataset.py::RLHFDataset` | `minirl/data.py::load_rl_rows` |
# | pick the scorer | `verl/utils/reward_score/__init__.py::default_compute_score` | `minirl/rewards.py::default_compute_score` |
# | GSM8K rule | `verl/utils/reward_score/gsm8k.py::compute_score`, `extract_solution` | `minirl/rewards.py::compute_gsm8k_score`, `extract_solution` |
# | the run | `python3 -m verl.trainer.main_ppo` (`verl/trainer/main_ppo.py`) | `python -m minirl train` |
# | headline metric | `val-core/openai/gsm8k/acc/mean@1` (and the same number as `val-aux/openai/gsm8k/reward/mean@1`) | the same names |
#
# ## 6. Where verl's pages are out of date (checked against verl 0.9.1's code)
#
# - **`algorithm.kl_ctrl.kl_coef=0.001` does nothing in the quickstart.** The KL penalty in the reward
#   needs `algorithm.use_kl_in_reward=true`, and its default is false. The KL loss
#   (`actor_rollout_ref.actor.use_kl_loss`) defaults to false as well, and the quickstart sets neither, so
#   its run has no KL term at all (verl's GRPO scripts switch the KL loss on). The quickstart's sample log
#   shows `actor/reward_kl_penalty`, which 0.9.1 logs only with `use_kl_in_reward=true`.
# - **Metric names in the sample log are old:** `timing/gen` is now `timing_s/gen`, and
#   `val/test_score/openai/gsm8k` is now `val-core/openai/gsm8k/acc/mean@1`. `critic/lr(1e-4)` and
#   `actor/lr(1e-4)` are now `critic/lr` and `actor/lr`.
# - **`gsm8k_example.rst` says a wrong answer scores 0.1.** The rule's `format_score` defaults to 0.0, and
#   `default_compute_score` calls it with the default: a wrong answer scores 0.
# - **`gsm8k_example.rst` runs a DeepSeek-LLM-7B script from `examples/ppo_trainer/`** that no longer exists
#   at v0.9.0; `examples/ppo_trainer/run_qwen3_8b_fsdp.sh` is the PPO example now (it uses dynamic batch size
#   instead of micro-batch sizes).
# - **`trainer.logger=console`** (one name, not a list) is still accepted by verl; minirl now accepts it too.
#
# ## 7. Exercises
#
# Open `exercises/lab_a_gsm8k.py` and grade with `make grade`.
#
# | exercise | function | graded on | grade it |
# |---|---|---|---|
# | A.1 | `gsm8k_row` | 300+ real GSM8K rows of both splits (every answer with a thousands comma among them), and answers with no `####` line | `make grade EX=A.1` |
# | A.2 | `numeric_gsm8k_score` | the same number written differently (`18.0`, `1,600`, `.5`), wrong, malformed and missing answers, the 300-character window, and 300 generated strings it must never crash on | `make grade EX=A.2` |
#
# <details><summary>Hints for A.1</summary>
#
# The prompt is `question + " " + INSTRUCTION`, one space. The ground truth is the number right after
# `#### `, not the last number in the worked solution, and it stays a string. `extra_info` keeps the raw
# question (without the instruction).
# </details>
#
# <details><summary>Hints for A.2</summary>
#
# Find the answers with the strict regex in the last 300 characters, take the last, drop the commas. Then
# check that what is left is a number before calling `float` on it: `"1.2.3"` and `"."` match the regex.
# </details>
#
# **A failure-mode question.** A colleague preprocesses GSM8K with a script that stores `ground_truth` as an
# integer (`72`, not `"72"`). Training runs, no error, and `critic/score/mean` stays at exactly 0 from the
# first step. Why, and which check in minirl stops this before training?
#
# <details><summary>Answer</summary>
#
# The rule compares the extracted answer, a string, with the ground truth: `"72" == 72` is false in Python,
# so every answer is wrong. verl does not check the type. minirl's `data.check_rl_row` refuses a row whose
# `ground_truth` is not a string and says to write `str(72)`.
# </details>
#
# ### The library's code, after you tried

# %%
from IPython.display import display

for function in (data.gsm8k_rows, data.extract_gsm8k_ground_truth, rewards.compute_gsm8k_score):
    display(show_source(function, collapsed=True))

# %% [markdown]
# ## 8. Where next
#
# - [Lab B · Writing reward functions](lab_b_rewards.ipynb): your own `compute_score`, chosen by
#   `data_source`, and how a lenient rule gets exploited.
# - [Lab C · Reading the debug metrics](lab_c_metrics.ipynb): every metric of the log above, and runs that
#   go wrong.
# - [Lab D · The GRPO config, key by key](lab_d_grpo_config.ipynb): the same task with GRPO's keys and the
#   batch arithmetic (prompts, responses, mini- and micro-batches).
# - [Chapter 1 · PPO](01_ppo.ipynb) and [Chapter 2 · GAE](02_gae.ipynb) for the algorithm. Back to
#   [the reading map](index.md).

# %%
print_run_time()
