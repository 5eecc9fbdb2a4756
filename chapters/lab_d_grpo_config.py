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
# # Lab D · The GRPO config, key by key
#
# | | |
# |---|---|
# | **What you will do** | Read verl's GRPO launch script for Qwen3-8B key by key: what each key does, its default in verl 0.9.1 and in minirl, and what changes when you change it. Work out the batch arithmetic of one step (prompts, responses, mini-batches, micro-batches, optimizer steps, processes), draw it, and check it against the trainer. Run short ablations of the keys that matter, 3 seeds each. |
# | **What you need** | [Chapter 4 · GRPO](04_grpo.ipynb) for the group advantage. [Lab A](lab_a_gsm8k.ipynb) for a first run through verl's keys. |
# | **verl pages this lab follows** | `examples/grpo_trainer/run_qwen3_8b_fsdp.sh`, `docs/algo/grpo.md` and `docs/examples/config.rst`, read at verl's v0.9.0 tag (0.9.1's wheel ships neither `examples/` nor `docs/`). Section 5 lists where the pages are out of date. |
# | **Run time** | 2.7 minutes in the run shown here, on 2 CPU cores (15 short GRPO runs, two at a time; the first output names the machine, the last prints the run time). With `MINIRL_FAST=1`, a few seconds. |

# %%
import shutil
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

from minirl import batch_math
from minirl.book.notebook import (
    compare_table,
    fast_mode,
    plot_comparison,
    print_run_time,
    run_grid,
    show_source,
    where_this_ran,
)
from minirl.config import load_config

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "lab_d"
SCRIPT = (Path("..") / "tests" / "data" / "verl_scripts" / "grpo_trainer.txt").read_text().splitlines()
print(f"{len(SCRIPT)} overrides in verl's examples/grpo_trainer/run_qwen3_8b_fsdp.sh (DEVICE=gpu):")
print("\n".join(SCRIPT))
script = load_config(SCRIPT, announce=False)  # minirl accepts every line unchanged
print("\nresolved by minirl: adv_estimator", script.algorithm.adv_estimator,
      "| rollout.n", script.actor_rollout_ref.rollout.n, "| use_kl_loss", script.actor_rollout_ref.actor.use_kl_loss)

# %% [markdown]
# ## 1. Every key of the script
#
# The script launches `python3 -m verl.trainer.main_ppo` with the 40 overrides above (read from verl's
# `v0.9.0` tag with its default variables; `tests/data/verl_scripts/README.md` says how). minirl reads the
# same lines: `python -m minirl config` accepts all of them, and lists the ones that only concern verl's
# distributed machinery as "accepted, no effect". Here is every key. "verl default" is the value in verl
# 0.9.1's `verl/trainer/config/_generated_ppo_trainer.yaml` when the script does not set it; "minirl" is
# minirl's twin and default (`minirl/config.py`).
#
# **The algorithm**
#
# | key | script | verl default | minirl | what changing it does |
# |---|---|---|---|---|
# | `algorithm.adv_estimator` | `grpo` | `gae` | same key, default `grpo` | `gae` adds a critic (a second model, its own update); `rloo`, `reinforce_plus_plus`, `remax` are other baselines ([Chapter 7](07_baselines.ipynb)) |
# | `algorithm.use_kl_in_reward` | `False` | `False` | same | `True` subtracts $\beta\,\mathrm{KL}$ from the reward, InstructGPT's leash ([Chapter 3](03_rlhf.ipynb)), with `algorithm.kl_ctrl.kl_coef` |
# | `actor_rollout_ref.actor.use_kl_loss` | `True` | `False` | same | GRPO's way to stay near the reference: a loss term instead of a reward penalty. `False` drops the reference model's pass |
# | `actor_rollout_ref.actor.kl_loss_coef` | `0.001` | `0.001` | same | the KL loss's weight; section 3 measures 0.1 against no KL loss |
# | `actor_rollout_ref.actor.kl_loss_type` | `low_var_kl` | `low_var_kl` | same | the estimator: `low_var_kl` is k3, clamped at 10 ([Chapter 3, section 4](03_rlhf.ipynb#4-the-leash-estimating-kl-from-samples)) |
# | `actor_rollout_ref.actor.entropy_coeff` | `0` | `0` | same | a positive value adds an entropy bonus; it fights entropy collapse but can make answers noisy |
# | `actor_rollout_ref.rollout.n` | `5` | `1` | same key, default 8 | the group size $G$: responses per prompt. GRPO needs $G \ge 2$; section 3 measures 2 against 8 |
# | (not set) `actor_rollout_ref.actor.loss_agg_mode` | — | `token-mean` | same | how token losses become one number ([Chapter 5](05_dapo.ipynb)); section 3 |
# | (not set) `algorithm.norm_adv_by_std_in_grpo` | — | `True` | same | `False` is Dr.GRPO: no division by the group's std ([Chapter 5](05_dapo.ipynb)); section 3 |
# | (not set) `actor_rollout_ref.rollout.temperature` | — | `1.0` | same | sampling temperature; the actor divides its logits by it when it recomputes log-probs. Section 3 |
# | (not set) `actor_rollout_ref.actor.clip_ratio_low` / `clip_ratio_high` | — | `0.2` / `0.2` | same | PPO's clip range ([Chapter 1](01_ppo.ipynb)); DAPO raises the high one ([Chapter 5](05_dapo.ipynb)) |
#
# **The data**
#
# | key | script | verl default | minirl | what changing it does |
# |---|---|---|---|---|
# | `data.train_files`, `data.val_files` | GSM8K and MATH parquet files | GSM8K's files | same keys | a list trains on both; validation reports each `data_source` on its own (`val-core/openai/gsm8k/...`) |
# | `data.train_batch_size` | `1024` | `1024` | same, default 32 | prompts per step (section 2) |
# | `data.max_prompt_length` | `1024` | `512` | same, default 32 | the prompt budget in tokens; memory grows with it |
# | `data.max_response_length` | `2048` | `512` | same, default 20 | the response budget: too small cuts reasoning off (watch `response_length/clip_ratio`), large costs generation time and memory |
# | `data.filter_overlong_prompts` | `True` | `False` | same | drops over-long prompts from the dataset at start, so none reaches the rollout |
# | `data.truncation` | `error` | `error` | same | what to do with an over-long prompt: `error`, `left`, `right`, `middle`. verl 0.9.1 stores it but its agent loop cuts from the left with a warning; minirl applies it (`minirl/README.md`, item 20) |
#
# **The model and the optimiser**
#
# | key | script | verl default | minirl | what changing it does |
# |---|---|---|---|---|
# | `actor_rollout_ref.model.path` | `Qwen/Qwen3-8B` | a local path | same | the policy; also the reference and the rollout weights |
# | `actor_rollout_ref.model.use_remove_padding` | `True` | `True` | accepted, no effect | packs sequences without padding (speed) |
# | `actor_rollout_ref.model.enable_gradient_checkpointing` | `True` | `True` | same key, default false | recompute activations in the backward pass: far less memory, about a third more compute |
# | `actor_rollout_ref.actor.optim.lr` | `1e-6` | `1e-6` | same, default 1e-4 | the step size; an 8B model needs a small one, the tiny one a larger one |
# | `actor_rollout_ref.actor.ppo_mini_batch_size` | `256` | `256` | same, default 16 | prompts per optimizer step (section 2) |
# | `actor_rollout_ref.actor.use_dynamic_bsz`, `ppo_max_token_len_per_gpu` | `True`, `24576` | `False`, `16384` | same | micro-batches by a token budget per GPU instead of a row count (section 2). Memory only |
# | `actor_rollout_ref.actor.fsdp_config.param_offload`, `optimizer_offload` | `False`, `False` | `False`, `False` | accepted, no effect | move the actor's weights or optimizer state to CPU memory between uses |
#
# **Rollout, reference and trainer**
#
# | key | script | verl default | minirl | what changing it does |
# |---|---|---|---|---|
# | `actor_rollout_ref.rollout.name` | `vllm` | must be set | accepted, no effect | the inference engine (vLLM or SGLang). minirl's is a KV-cached decode loop |
# | `actor_rollout_ref.rollout.tensor_model_parallel_size` | `2` | `2` | accepted, no effect | each vLLM replica spans 2 GPUs, so 8 GPUs hold 4 replicas |
# | `actor_rollout_ref.rollout.gpu_memory_utilization` | `0.6` | `0.5` | accepted, no effect | the share of GPU memory vLLM takes for weights and KV cache |
# | `actor_rollout_ref.rollout.log_prob_use_dynamic_bsz`, `log_prob_max_token_len_per_gpu` | `True`, `24576` | follow the actor | same | the token budget of the old-log-prob pass (forward only) |
# | `actor_rollout_ref.ref.log_prob_use_dynamic_bsz`, `log_prob_max_token_len_per_gpu` | `True`, `24576` | follow the actor | same | the same for the reference pass |
# | `actor_rollout_ref.ref.fsdp_config.param_offload` | `True` | `False` | accepted, no effect | the frozen reference waits in CPU memory between its passes |
# | `trainer.balance_batch` | `True` | `True` | same | reorders the batch so that GPUs get similar token counts |
# | `trainer.logger` | `["console","wandb"]` | `["console","wandb"]` | same, default `[console]` | where metrics go; minirl always writes `metrics.jsonl` too |
# | `trainer.project_name`, `experiment_name` | names | names | same | wandb's project and run names (and verl's checkpoint folder) |
# | `trainer.n_gpus_per_node`, `trainer.nnodes` | `8`, `1` | `8`, `1` | same keys, default `null` (whatever the launch started) and `1`; must match the launch | the processes of the run (section 2) |
# | `trainer.save_freq`, `trainer.test_freq` | `20`, `5` | `-1`, `-1` | same, default `-1`, `10` | checkpoint and validate every N steps |
# | `trainer.total_epochs` | `15` | `30` | same | passes over the training set; `trainer.total_training_steps` overrides it |
#
# ## 2. The batch arithmetic
#
# The question people ask most about verl's config is what the batch sizes count (on GitHub, for example,
# verl-project/verl issues #180 "if rollout.n is doubled, will the samples used for training doubled too?", #399,
# issue #1524 "Some doubts about batch size", #2333 and #2793). The rule: **every batch size in the config counts
# prompts; the trainer works on responses.** verl multiplies `ppo_mini_batch_size` by `rollout.n` in
# `verl/trainer/ppo/ray_trainer.py::RayPPOTrainer._update_actor` (and in `_update_critic`, which calls
# `critic_wg.train_mini_batch`), then sends the step's whole batch to the workers, split evenly over their
# data-parallel ranks; each rank cuts its share into its part of every mini-batch
# (`verl/workers/engine_workers.py::TrainingWorker.train_mini_batch`). `minirl/batch_math.py::step_arithmetic`
# counts it (Exercise D.1 asks you to write it):

# %%
def describe(config, processes, title):
    counts = batch_math.step_arithmetic(config, processes)
    n = config.actor_rollout_ref.rollout.n
    print(f"{title}\n  {counts.prompts} prompts x n={n} = {counts.responses} responses "
          f"per step\n  {counts.mini_batches_per_epoch} mini-batches of {counts.responses_per_mini_batch} responses "
          f"x {config.actor_rollout_ref.actor.ppo_epochs} epoch(s) = {counts.optimizer_steps} optimizer steps per "
          f"training step\n  each process (of {processes}): {counts.responses_per_process} responses per mini-batch, "
          f"in {counts.micro_batches_per_mini_batch or 'token-budgeted'} micro-batch(es)")
    return counts


describe(script, 8, "verl's Qwen3-8B GRPO script on 8 GPUs:")
describe(load_config(SCRIPT + ["actor_rollout_ref.actor.use_dynamic_bsz=false",
                               "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"], announce=False), 8,
         "the same with 4 rows per micro-batch instead of a token budget:")
tiny = describe(load_config([], announce=False), 1, "minirl's defaults on one process:")

# %% [markdown]
# With `use_dynamic_bsz`, the number of micro-batches depends on the lengths. Each GPU's 160 responses of one
# mini-batch are cut into groups of at most `ppo_max_token_len_per_gpu` = 24576 tokens (prompt plus
# response). At the longest, 1024 + 2048 = 3072 tokens, 8 fit, so at most 20 micro-batches; with typical GSM8K
# lengths (about 200 + 400 tokens) about 4:

# %%
for label, length in (("every sequence at its budget", 1024 + 2048), ("typical GSM8K lengths", 200 + 400)):
    micro = batch_math.dynamic_micro_batches([length] * 160, 24576)
    print(f"{label:30s}: {micro} micro-batches of at most 24576 tokens")

# %% [markdown]
# The picture of one step of the script (8 GPUs):

# %% tags=["central-figure"]
def box(ax, x, y, w, h, text, color):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02", facecolor=color, edgecolor="k", lw=0.8))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=8)


fig, ax = plt.subplots(figsize=(13, 4.2))
box(ax, 0.0, 1.6, 1.6, 0.8, "1024 prompts\n(data.train_batch_size)", "#cfe2f3")
box(ax, 2.0, 1.6, 1.8, 0.8, "5120 responses\n(x rollout.n = 5)", "#d9ead3")
for i in range(4):
    box(ax, 4.3, 3.0 - i * 0.95, 1.9, 0.75, f"mini-batch {i + 1}: 1280 responses\n(256 prompts x 5)", "#fff2cc")
    ax.annotate("", xy=(4.3, 3.35 - i * 0.95), xytext=(3.8, 2.0), arrowprops={"arrowstyle": "->", "lw": 0.6})
for g in range(8):
    box(ax, 6.7, 3.35 - g * 0.45, 1.5, 0.35, f"GPU {g}: 160 responses", "#f4cccc")
    ax.annotate("", xy=(6.7, 3.52 - g * 0.45), xytext=(6.2, 3.37), arrowprops={"arrowstyle": "->", "lw": 0.4})
box(ax, 8.7, 1.9, 2.2, 1.3, "micro-batches of <= 24576 tokens\n(use_dynamic_bsz): 4-20 passes,\ngradients accumulated",
    "#ead1dc")
box(ax, 11.3, 1.9, 1.6, 1.3, "1 optimizer step\nper mini-batch:\n4 per training step\n(x ppo_epochs = 1)", "#d0e0e3")
ax.annotate("", xy=(8.7, 2.55), xytext=(8.2, 2.55), arrowprops={"arrowstyle": "->"})
ax.annotate("", xy=(11.3, 2.55), xytext=(10.9, 2.55), arrowprops={"arrowstyle": "->"})
ax.text(7.45, -0.4, "each mini-batch in turn (shown for mini-batch 1)", ha="center", fontsize=8, style="italic")
ax.set(xlim=(-0.2, 13.1), ylim=(-0.6, 3.9),
       title="One GRPO training step of verl's Qwen3-8B script: what each batch key counts")
ax.axis("off")
plt.show()

# %% [markdown]
# **Checked against the trainer.** The arithmetic is only useful if it is what the trainer does. Here we run
# one real training step and count the actor's optimizer steps and backward passes (by wrapping the actor's
# `_optimizer_step` and `_backward`; `batch_math.count_actor_passes`), for a few configs:

# %%
checks = [["data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
           "actor_rollout_ref.rollout.n=4"],
          ["data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.rollout.n=4",
           "actor_rollout_ref.actor.ppo_epochs=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=6"]]
if not fast_mode():
    checks.append(["data.train_batch_size=32", "actor_rollout_ref.actor.ppo_mini_batch_size=32",
                   "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64"])
for i, overrides in enumerate(checks):
    shutil.rmtree(RUNS / f"count{i}", ignore_errors=True)
    predicted = batch_math.step_arithmetic(load_config(overrides, announce=False))
    counted = batch_math.count_actor_passes([*overrides, f"trainer.default_local_dir={RUNS / f'count{i}'}"])
    print(f"{' '.join(o.split('.')[-1] for o in overrides):75s} predicted {predicted.optimizer_steps} steps, "
          f"{predicted.optimizer_steps * predicted.micro_batches_per_mini_batch} backward passes | counted "
          f"{counted['optimizer_steps']} steps, {counted['backward_passes']} backward passes")

# %% [markdown]
# And what the validator refuses, with the message it prints. These come from `minirl/config.py::validate_config`
# and from `minirl/config.py::check_split_over_ranks`, the process check the trainer runs at start: verl
# splits a step's responses and a mini-batch's over its ranks without padding, so both must divide by the number
# of processes. Exercise D.1 must refuse them too:

# %%
for overrides, processes in ((["data.train_batch_size=1000", "actor_rollout_ref.actor.ppo_mini_batch_size=256"], 1),
                             (["data.train_batch_size=1024", "actor_rollout_ref.rollout.n=5",
                               "actor_rollout_ref.actor.ppo_mini_batch_size=256"], 6),
                             (["actor_rollout_ref.rollout.n=5", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
                               "data.train_batch_size=32"], 2),
                             (["actor_rollout_ref.rollout.n=1"], 1)):
    try:
        batch_math.step_arithmetic(load_config(overrides, announce=False), processes)
    except ValueError as error:
        print(f"{' '.join(overrides)} on {processes} process(es):\n   {str(error).strip()}\n")

# %% [markdown]
# Two more facts that surprise people:
#
# - **Micro-batches never change the update.** The loss of each micro-batch is normalised by the counts of the
#   whole mini-batch (verl 0.9.1's `global_batch_info`), so 1 or 40 micro-batches give the same gradient
#   within rounding. They change memory and time only.
# - **Several GPUs do not change the step either** (in minirl exactly; README, "Several processes"): the 1280
#   responses of a mini-batch are one optimizer step whether 1 or 8 GPUs hold them. More GPUs mean a larger
#   `train_batch_size` fits in the same time, not more steps.
#
# ## 3. Ablations: the keys that change learning
#
# Short GRPO runs on the tiny arithmetic task, from the cached warm start (30 steps, 32 prompts per step,
# 3 seeds each; the baseline is minirl's defaults: $G = 8$, 2 mini-batches, `token-mean`, temperature 1, no KL
# loss). We compare final validation accuracy (greedy, 200 prompts). One variable changes at a time.

# %%
STEPS = 3 if fast_mode() else 30
VARIANTS = {
    "baseline (n=8)": [],
    "rollout.n=2": ["actor_rollout_ref.rollout.n=2"],
    "kl_loss_coef=0.1": ["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.1"],
    "8 updates a step (mini=4)": ["actor_rollout_ref.actor.ppo_mini_batch_size=4"],
    "temperature=0.6": ["actor_rollout_ref.rollout.temperature=0.6"],
}
COMMON = [f"trainer.total_training_steps={STEPS}", f"trainer.test_freq={min(10, STEPS)}"]
if fast_mode():
    COMMON += ["data.val_max_samples=40"]
results = run_grid(RUNS / "ablations", VARIANTS, *COMMON)
VAL = "val-core/minirl/arithmetic/acc/mean@1"
SHOWN = ("baseline (n=8)", "rollout.n=2", "kl_loss_coef=0.1", "8 updates a step (mini=4)", "temperature=0.6")
plot_comparison({k: results[k] for k in SHOWN},
                [(VAL, "validation accuracy", "step"), (VAL, "against tokens generated", "tokens"),
                 ("actor/entropy", "entropy per token", "step")])
table = compare_table(results, VAL).splitlines()
print("\n".join(line for line in table if " vs " not in line))  # every variant's final accuracy over seeds
for label in list(VARIANTS)[1:]:  # each variant against the baseline only
    print(compare_table({"baseline (n=8)": results["baseline (n=8)"], label: results[label]}, VAL).splitlines()[-1])


def spread(values):
    return f"{sum(values) / len(values):.3f} ({min(values):.3f}-{max(values):.3f})"


EARLY = min(10, STEPS)  # the first validation after step 0
print(f"\nmean (min-max) over seeds: validation at step {EARLY}, actor/entropy at the first and the last step")
for label, runs in results.items():
    early = [[r[VAL] for r in records if r["step"] == EARLY and VAL in r][0] for records in runs]
    entropy = [[r["actor/entropy"] for r in records if "actor/entropy" in r] for records in runs]
    print(f"  {label:28s} validation {spread(early)} | entropy {spread([e[0] for e in entropy])} -> "
          f"{spread([e[-1] for e in entropy])}")

print("validation accuracy against tokens generated (prompt + response; tokens: mean over seeds):")
for label in ("baseline (n=8)", "rollout.n=2"):
    curves = []
    for records in results[label]:
        tokens, curve = 0.0, []
        for r in records:
            tokens += r.get("perf/total_num_tokens", 0.0)
            if VAL in r:
                curve.append((r["step"], tokens, r[VAL]))
        curves.append(curve)
    points = [(seed_points[0][0], sum(p[1] for p in seed_points) / len(seed_points), [p[2] for p in seed_points])
              for seed_points in zip(*curves)]
    print(f"  {label}: " + ", ".join(f"step {step} {tokens / 1000:.0f}k tokens {spread(accs)}"
                                    for step, tokens, accs in points))

n_val = load_config(COMMON, announce=False).data.val_max_samples
finals = [[r[VAL] for r in records if VAL in r][-1] for records in results["baseline (n=8)"]]
accuracy = sum(finals) / len(finals)
print(f"standard error of one accuracy on {n_val} prompts, at the baseline's final {accuracy:.3f}: "
      f"{(accuracy * (1 - accuracy) / n_val) ** 0.5:.3f} (at 0.5: {(0.25 / n_val) ** 0.5:.3f})")

# %% [markdown]
# What this run showed (on this machine; final accuracy after 30 steps, mean and min-max over the 3 seeds, from
# the table above; with 200 validation prompts one accuracy has a standard error of about 0.035, as the cell prints):
#
# - **`rollout.n` is the only key here that changes the result beyond the seed spread, and only per step.** Per
#   step, $G = 8$ ends at 0.598 (seeds 0.580-0.635) and $G = 2$ at 0.545 (0.495-0.575): the ranges do not overlap
#   (the baseline is 0.053 ahead). Eight answers per prompt give a better group baseline and more signal per
#   step. Per token generated (the middle panel) the advantage goes away: $G = 2$ is at 0.545 (0.495-0.575) after
#   49k tokens, $G = 8$ at 0.530 (0.515-0.540) after 65k, within noise. A larger group buys a better step with
#   more generation (196k tokens against 49k over the 30 steps), and on GPUs generation is most of a step's time.
# - **More optimizer steps per training step** (mini-batch of 4 prompts, 8 updates a step) are at 0.558
#   (0.540-0.570) at step 10 against the baseline's 0.530 (0.515-0.540): ahead on average, but the ranges touch,
#   so within noise. They end within noise too, at 0.640 (0.590-0.680). Their entropy falls furthest (right
#   panel): from 0.110 to 0.053 (0.047-0.062) against the baseline's 0.074 (0.071-0.078), beyond the seed
#   spread; that is the price of moving further from the sampling policy each step.
# - **`kl_loss_coef`**: the grid measures 0.1, a hundred times the script's 0.001. It ends within noise of no KL
#   loss in 30 steps, at 0.612 (0.575-0.640), and its final entropy, 0.077 (0.077-0.078), lies within the
#   baseline's range, so this run does not show the stronger leash keeping the entropy up; the script's
#   leash is a hundred times lighter still. [Chapter 3, section 5](03_rlhf.ipynb#5-the-experiment-ppo-against-the-reward-model-with-and-without-the-leash) shows a KL leash at work, against a
#   reward the policy can exploit.
# - **`temperature=0.6`** samples more confident answers: its entropy is lower from the first step, 0.077
#   (0.072-0.082) against 0.110 (0.105-0.113), beyond the seed spread. It ends within noise, at 0.603
#   (0.570-0.625).
# - **`loss_agg_mode` and `norm_adv_by_std_in_grpo`** are not in this grid. They are meant for response lengths
#   that vary and groups that are nearly all right or all wrong; [Chapter 5](05_dapo.ipynb) measures them on the chain task (the mechanism is visible there,
#   while final accuracy stays within noise in its run).
#
# ## 4. verl <-> minirl
#
# | what | verl 0.9.1 | minirl |
# |---|---|---|
# | mini-batch in responses | `verl/trainer/ppo/ray_trainer.py::RayPPOTrainer._update_actor` (`ppo_mini_batch_size * rollout.n`) | `minirl/trainer.py`, `minirl/batch_math.py::step_arithmetic` |
# | micro-batches by rows or tokens | `verl/utils/seqlen_balancing.py::rearrange_micro_batches` | `minirl/seqlen_balancing.py::token_budget_micro_batches`, `row_micro_batches` |
# | the config and its defaults | `verl/trainer/config/_generated_ppo_trainer.yaml` | `minirl/config.py` |
# | the actor's checks | `verl/workers/config/actor.py::ActorConfig` (`validate`), `verl/utils/config.py::validate_config` (`train_batch_size * n` divisible by the GPUs) | `minirl/config.py::validate_config`, `minirl/config.py::check_split_over_ranks` (the trainer's process check) |
#
# ## 5. Where verl's pages are out of date (checked against verl 0.9.1's code)
#
# - **`docs/algo/grpo.md` misspells the group-size key** as `actor_rollout.ref.rollout.n`; the key is
#   `actor_rollout_ref.rollout.n` (a typo there is an error in verl and in minirl).
# - **`grpo.md` says the trajectories are split into mini-batches "with batch_size=ppo_mini_batch_size".** The
#   size counts prompts: a mini-batch holds `ppo_mini_batch_size * rollout.n` trajectories
#   (`RayPPOTrainer._update_actor`).
# - **`grpo.md` calls `actor_rollout_ref.actor.clip_ratio` "the GRPO clip range".** In 0.9.1 the loss reads
#   `clip_ratio_low` and `clip_ratio_high`, which default to 0.2 on their own, so setting only `clip_ratio` changes
#   nothing (`minirl/README.md`, item 1).
# - **`grpo.md` lists three `loss_agg_mode` options;** 0.9.1's `ActorConfig` accepts five (`token-mean`,
#   `token-sum`, `seq-mean-token-sum`, `seq-mean-token-mean`, `seq-mean-token-sum-norm`).
# - **`docs/examples/config.rst` lists the global `ppo_micro_batch_size` as "will be deprecated".** 0.9.1 still
#   reads it but refuses it next to `ppo_micro_batch_size_per_gpu`, and without `use_dynamic_bsz` it requires
#   one of the two (`ActorConfig.__post_init__`). minirl accepts the old key with no effect and says to use the
#   per-GPU one; with neither, it uses each process's whole share as one micro-batch.
#
# ## 6. Exercises
#
# Open `exercises/lab_d_grpo_config.py` and grade with `make grade EX=D.1`.
#
# | exercise | function | graded on |
# |---|---|---|
# | D.1 | `batch_arithmetic` | six configs (verl's script, the quickstart, minirl's defaults, odd sizes, micro-batches that do not divide the share) compared with minirl's counts, and five configs that cannot train, which must raise a `ValueError` naming the keys |
#
# <details><summary>Hints</summary>
#
# `ppo_mini_batch_size` counts prompts: multiply by `n` to get the responses of one optimizer step. One
# optimizer step per mini-batch, per epoch. Each process gets an equal share of each mini-batch, then cuts it
# into micro-batches (round up).
# </details>
#
# **A failure-mode question.** A colleague moves the script from 8 GPUs to 6 and the run fails. Which
# numbers must change, and why?
#
# <details><summary>Answer</summary>
#
# Two counts must split evenly over the 6 data-parallel ranks, and with the script's sizes neither does. The
# step: `train_batch_size * n` = 1024 x 5 = 5120 responses. verl's legacy trainer (the one minirl follows)
# sends the whole step to the actor's workers, and their dispatch (`make_nd_compute_dataproto_dispatch_fn`) splits it without padding:
# `verl/utils/tensordict_utils.py::chunk_tensordict` asserts that the rows divide by the number of ranks, and
# without dynamic batch size `verl/utils/config.py::validate_config` refuses the run before it starts. The
# mini-batch: `ppo_mini_batch_size * n` = 256 x 5 = 1280 responses, of which every rank must take an equal
# share (`TrainingWorker.train_mini_batch` asserts it). Choose `ppo_mini_batch_size` so that
# `ppo_mini_batch_size * n` is divisible by 6 (e.g. 192 prompts, 960 responses, 160 per GPU), and
# `train_batch_size` a multiple of it (1024 is not: use 960 or 1152 prompts, 4800 or 5760 responses, 800 or
# 960 per GPU); then the step splits evenly too. minirl refuses both, with the counts in its message (section
# 2 shows the 6-process case). verl's default v1 trainer pads an uneven step with no-op samples instead
# (`verl/trainer/ppo/padding_utils.py::upsample_batch_to_divisible_size`): it runs, but spends compute on
# padding.
# </details>
#
# ### The library's code, after you tried

# %%
from IPython.display import display

for function in (batch_math.step_arithmetic,):
    display(show_source(function, collapsed=True))

# %% [markdown]
# ## 7. Where next
#
# - [Chapter 4 · GRPO](04_grpo.ipynb) for the group advantage these keys configure.
# - [Chapter 5 · DAPO / Dr.GRPO](05_dapo.ipynb) for `loss_agg_mode`, `norm_adv_by_std_in_grpo` and clip-higher.
# - [Chapter 7 · RLOO / ReMax / REINFORCE++](07_baselines.ipynb) for the other critic-free estimators.
# - [Lab A · GSM8K with PPO](lab_a_gsm8k.ipynb) for the PPO quickstart's keys. Back to [the reading map](index.md).

# %%
print_run_time()
