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
# # Chapter 12 · verl's v1 trainer: agent loops, a replay buffer, asynchronous RL
#
# | The five answers | |
# |---|---|
# | **Problem** | The legacy trainer (Chapters 1-11) makes one batched `generate_sequences` call per step and trains only when the slowest answer has ended. That shape cannot hold an answer that calls a tool and waits, cannot keep an unfinished answer for later, and leaves the trainer's hardware idle while the rollout generates (and the rollout's idle while the trainer trains). verl 0.9.1's default trainer, `trainer.use_v1=true`, breaks the step into pieces: one agent-loop session per sample, a replay buffer that collects finished groups, and three ways to schedule rollout and training. What changes, what stays, and what does running ahead cost? |
# | **Core formula** | Staleness: an answer generated with the weights of sync $v$ and trained at step $s$ is $(s-1)-v$ updates old (`training/off_policy/trajectory_staleness`). `colocate_async` and `separate_async` trade it for speed: a sync step takes $t_\text{gen}+t_\text{train}$, a separate one about $\max(t_\text{gen}, t_\text{train})$ plus the weight sync. The policy-gradient ratio stays a trust region because $\pi_\text{old}$ is the step's first weights, and the gap to the sampler, $\pi_\text{old}/\pi_\text{rollout}$, is what Chapter 9's rollout correction measures and reweights. |
# | **Beginner's view** | The legacy trainer is a kitchen where the cook waits for every dish of an order before starting the next order. v1 gives each dish its own ticket (a session), a pass where finished dishes wait (the replay buffer), and the choice of letting the next order start before this one is served (async). Food that waits on the pass too long goes stale: the buffer throws it out. |
# | **verl source** | `verl/trainer/ppo/v1/trainer_base.py::PPOTrainer` (`fit`, `step`, `_step_once`, the hooks, `_compute_metrics`), `trainer_sync.py::PPOTrainerSync`, `trainer_colocate_async.py::PPOTrainerColocateAsync`, `trainer_separate_async.py::PPOTrainerSeparateAsync`, `replay_buffer.py::ReplayBuffer`, `ReplayBufferAsync`, `utils.py::MetricsAggregator`; `verl/experimental/agent_loop/agent_loop.py::AgentLoopBase`, `single_turn_agent_loop.py::SingleTurnAgentLoop`; `verl/trainer/main_ppo.py::TaskRunnerV1` (TransferQueue on). |
# | **Where next** | [Chapter 9 · Rollout correction](09_rollout_corr.ipynb): the correction async training leans on; [Chapter 10 · HybridFlow](10_hybridflow.ipynb): the single controller and the weight sync underneath; [Chapter 5 · DAPO](05_dapo.ipynb): the group filter that moved into the buffer; [Lab C · Reading the metrics](lab_c_metrics.ipynb): `rollout_probs_diff` and `rollout_corr/*`, which async runs log every step. Back to [the reading map](index.md). |
#
# Run time: printed at the end (a two-step trace, then 21 short training runs, one at a time so the timings are
# clean). With `MINIRL_FAST=1` everything shrinks.

# %%
import contextlib
import dataclasses
import os
import statistics
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from minirl import sft
from minirl.book.notebook import (
    compare_table,
    fast_mode,
    plot_comparison,
    print_run_time,
    run_grid,
    seeds,
    show_source,
    where_this_ran,
)
from minirl.config import load_config
from minirl.v1.replay_buffer import PromptGroup, ReplayBuffer, Trajectory
from minirl.v1.trainer import PPOTrainerV1

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "ch12"
WARM = sft.default_warm_start(sft.CHAIN_SFT)  # Chapters 5, 8 and 11's task: sums of 3-4 one-digit numbers
PROMPTS, SAMPLES = (4, 4) if fast_mode() else (16, 8)
ACTOR = "actor_rollout_ref.actor"
STEPS = 2 if fast_mode() else 10
BASE = [*sft.train_overrides(WARM, sft.CHAIN_SFT), f"data.train_batch_size={PROMPTS}",
        f"actor_rollout_ref.rollout.n={SAMPLES}", f"{ACTOR}.ppo_mini_batch_size={PROMPTS // 2}",
        f"{ACTOR}.optim.lr=2e-4", f"trainer.total_training_steps={STEPS}", f"trainer.test_freq={STEPS // 2}",
        f"data.val_max_samples={4 if fast_mode() else 40}", "actor_rollout_ref.rollout.val_kwargs.n=8",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=True", "actor_rollout_ref.rollout.val_kwargs.temperature=1.0"]
VAL = "val-core/minirl/chain_sum/acc/mean@8"

# %% [markdown]
# ## 1. Why verl left one `fit()` for agent loops and a replay buffer
#
# The legacy loop (`ray_trainer.py::RayPPOTrainer.fit`, which 0.9.1 marks deprecated) has one line that
# generates: the batch goes to the rollout, and comes back when every answer has ended. Three things do not fit
# through that line:
#
# - **an answer that waits for something else**: a tool call, a sandbox, a second model. The batch would wait
#   for its slowest member at every turn (Chapter 13 builds on this);
# - **an answer that is not finished yet**: if the trainer wants to start, the unfinished answers must be kept
#   somewhere and resumed later, with newer weights (a *partial rollout*);
# - **a rollout that runs while the trainer trains**: on separate hardware the two can overlap, if the trainer
#   takes its batch from a store the rollout keeps filling.
#
# So v1 splits the step. The trainer **dispatches** prompts; each sample becomes a **session** of an agent loop
# (`AgentLoopBase.run`: a coroutine that calls the LLM server as often as it likes and returns an
# `AgentLoopOutput`); the reward loop scores finished groups; the **replay buffer** holds them, per `uid`, until
# the trainer **samples** whole groups. verl keeps the buffer's rows in **TransferQueue**, a distributed store the
# workers read directly (the trainer passes `KVBatchMeta`: keys and tags, not tensors), always on in v1
# (`main_ppo.py::TaskRunnerV1` sets `transfer_queue.enable = True`). What it carries per sample is what an
# `AgentLoopOutput` holds (prompt and response ids, the response mask, the rollout's log-probs, the weight
# versions) plus the scores and, later, every tensor the step adds (old log-probs, values, advantages).
#
# Everything between sampling and the update is the legacy step. minirl's v1 trainer
# (`minirl/v1/trainer.py::PPOTrainerV1`) is a subclass of the legacy one that changes only how a batch is
# collected and when the weights are synced, and it calls verl's hooks. Here is their order in a two-step run
# (sync mode, validation before training and at the end), recorded by a subclass:

# %%
HOOKS = [name for name in dir(PPOTrainerV1) if name.startswith("on_")]
calls = []


def traced(name):
    """The v1 trainer's hook `name`, recording the step it was called at."""
    def hook(self, *args):
        calls.append(f"step {self.global_step}: {name}")
        return getattr(PPOTrainerV1, name)(self, *args)
    return hook


HookTrace = type("HookTrace", (PPOTrainerV1,), {name: traced(name) for name in HOOKS})


trace_config = load_config([*BASE, "trainer.use_v1=true", "trainer.total_training_steps=2", "trainer.test_freq=2",
                            f"trainer.default_local_dir={RUNS / 'trace'}", "trainer.resume_mode=disable",
                            "trainer.logger=[]", "data.val_max_samples=8"], announce=False)
tracer = HookTrace(trace_config, show_progress=False)
trace_history = tracer.fit()
print("\n".join(calls))

# %% [markdown]
# (verl's `fit` calls the same hooks in the same places; `on_train_end` is defined but the loop returns after the
# last step without calling it, so minirl has none.) One of those sessions, as the agent loop returned it:

# %%
row = tracer.train_rows[0]
session = {**row, "raw_prompt": row["prompt"], "uid": "demo", "session_id": 0, "seed": 1234}
tracer.agent_loops = type(tracer.agent_loops)(tracer.server, tracer.tokenizer, 64)  # fit() closed the old one
output = tracer.agent_loops.run_sessions([session], tracer._sampling())[0]
tracer.agent_loops.shutdown()
for field in dataclasses.fields(output):
    value = getattr(output, field.name)
    shown = value if not isinstance(value, list) or len(value) <= 8 else f"[{len(value)} values] {value[:6]} ..."
    print(f"{field.name:18s} {shown}")
print("\nprompt  :", tracer.tokenizer.decode(output.prompt_ids))
print("response:", tracer.tokenizer.decode(output.response_ids))

# %% [markdown]
# `response_mask` is 1 on every token because the single-turn loop writes only the model's tokens; a tool loop
# puts 0 on the tool's text (Chapter 13). `min_global_steps` and `max_global_steps` are the weight versions that
# generated the answer: equal here, two different ones after a partial rollout.
#
# ## 2. The three modes, one step each
#
# `trainer.v1.trainer_mode` picks how rollout and training share the machine (verl: one trainer class each):
#
# | mode | what runs where | a batch is generated with |
# |---|---|---|
# | `sync` | dispatch `train_batch_size` prompts, run them to the end, train: the legacy step | the weights after step $s-1$: on-policy |
# | `colocate_async` | the same engine (verl: the trainer's GPUs); `num_warmup_batches` of prompts run ahead, the trainer takes the first `train_batch_size` groups that finish; the rest are aborted at the weight sync and resume with the new weights | weights up to a step or two old, and some answers by two versions (partial rollout) |
# | `separate_async` | the rollout on its own resources (here a process of its own: `minirl/v1/rollout_server.py`), generating all the time; the trainer makes `parameter_sync_step` local updates per step, each on one mini-batch, then sends the weights | the weights of the last sync (one step old, or more with more warm-up) |
#
# In `separate_async` every local update computes $\pi_\text{old}$ with the **step's first weights** (verl's
# "decoupled PPO", `PPOTrainerSeparateAsync._compute_old_log_prob`), not with the weights the previous local
# update left: the clip then bounds the whole step's move, while the sampler's older weights are Chapter 9's
# business (`rollout_corr/*`).
#
# The experiment: the chain task from its warm start, 16 prompts x 8 answers per step, 2 mini-batches (so 2
# optimizer steps per step in every mode: `separate_async` uses `parameter_sync_step=2`), 10 steps, 3 seeds,
# validation by 8 sampled answers on 40 held-out prompts at steps 0, 5, 10. Every run trains alone, one after
# the other, with one thread per process (minirl's default). `separate_async` then uses both cores (one
# trainer + one rollout process), the others one, so a fifth variant gives the legacy trainer two threads.

# %%
MODES = {
    "legacy": [],
    "v1_sync": ["trainer.use_v1=true"],
    "colocate_async": ["trainer.use_v1=true", "trainer.v1.trainer_mode=colocate_async"],
    "separate_async": ["trainer.use_v1=true", "trainer.v1.trainer_mode=separate_async",
                       "trainer.v1.separate_async.parameter_sync_step=2"],
}


@contextlib.contextmanager
def torch_threads(count: int):
    """Train with `count` intra-op threads (minirl's runs use 1 unless OMP_NUM_THREADS says otherwise)."""
    os.environ["OMP_NUM_THREADS"] = str(count)
    torch.set_num_threads(count)
    try:
        yield
    finally:
        del os.environ["OMP_NUM_THREADS"]
        torch.set_num_threads(1)


runs = run_grid(RUNS, MODES, *BASE, workers=1)  # one run at a time: the timings are the point
with torch_threads(2):
    runs.update(run_grid(RUNS, {"legacy_2_threads": []}, *BASE, workers=1))


def trained(records):
    """The training steps of a run, the first left out (it warms up: the rollout process starts then)."""
    return [r for r in records if "timing_s/step" in r][1:]


def per_seed(name, value):
    """value(step record) -> the median over a run's steps, one number per seed."""
    return [statistics.median(value(r) for r in trained(records)) for records in runs[name]]


def spread(values, digits=3):
    return f"{np.mean(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


print(f"{'mode':18s} {'s/step':>20s} {'s/step waiting (gen)':>22s} {'tokens/s':>20s} {'staleness':>20s}")
for name in runs:
    step = per_seed(name, lambda r: r["timing_s/step"])
    gen = per_seed(name, lambda r: r["timing_s/gen"])
    tokens = per_seed(name, lambda r: r["perf/total_num_tokens"] / r["timing_s/step"])
    stale = per_seed(name, lambda r: r.get("training/off_policy/trajectory_staleness/mean", 0.0))
    print(f"{name:18s} {spread(step):>20s} {spread(gen):>22s} {spread(tokens, 0):>20s} {spread(stale, 2):>20s}")

# %% [markdown]
# A step's time, phase by phase (seed 0, median over steps 2 on, verl's `timing_s/*`). The trainer's phases run one
# after the other; in `separate_async` the rollout process works beside them (its generating time per step is
# `minirl/rollout_busy_s`, reported by the process; where in the step it fell is not recorded, so its bar starts
# at 0):

# %% tags=["central-figure"]
PHASES = ["gen", "old_log_prob", "adv", "update_actor", "update_weights"]
COLORS = dict(zip(PHASES + ["rollout"], plt.cm.tab10.colors))
shown = ["legacy", "v1_sync", "colocate_async", "separate_async"]
fig, ax = plt.subplots(figsize=(11, 3.2))
for row, name in enumerate(shown):
    steps = trained(runs[name][0])
    left = 0.0
    for phase in PHASES:
        seconds = statistics.median(r.get(f"timing_s/{phase}", 0.0) for r in steps)
        ax.barh(row, seconds, left=left, height=0.35, color=COLORS[phase], label=phase if row == 0 else None)
        left += seconds
    ax.text(left + 0.005, row, f"{left:.2f} s", va="center", fontsize=8)
    if name == "separate_async":
        busy = statistics.median(r["minirl/rollout_busy_s"] for r in steps)
        ax.barh(row + 0.4, busy, height=0.3, color=COLORS["rollout"], label="rollout process (generating)")
        ax.text(busy + 0.005, row + 0.4, f"{busy:.2f} s", va="center", fontsize=8)
ax.set(yticks=range(len(shown)), yticklabels=shown, xlabel="seconds in one step (median over steps 2 on, seed 0)",
       title="one step of each mode: the trainer's phases, and separate_async's rollout beside them")
ax.invert_yaxis()
ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
plt.tight_layout()
plt.show()

# %% [markdown]
# What the two outputs above say (this machine; the timings are printed by the cells, the ranges are over 3 seeds):
#
# - **v1 `sync` costs about what the legacy trainer costs**: 0.715 (0.700-0.743) s per step against 0.706
#   (0.684-0.731), for the same batch and the same maths (the sessions, the per-request padding and the buffer
#   add a little around the same engine calls; the bench, with larger batches, measures the gap).
# - **`colocate_async` does not pay on one engine**: 0.799 (0.699-0.989) s per step. Its engine is the trainer's
#   core, so running ahead means generating more while the trainer waits, not generating while it trains. On
#   verl's GPUs it pays where a batch has a long tail (a few answers much longer than the rest), which a 48-token
#   budget does not have.
# - **`separate_async` overlaps**: the trainer waits 0.084 (0.081-0.086) s per step for generation against
#   v1 sync's 0.275, and a step takes 0.541 (0.528-0.551) s: the rollout process generates on the second core
#   while the trainer trains. The price is in the last column: staleness 1.00, every batch after the first was
#   generated with the weights of the sync before.
# - **The fair comparison is two cores against two cores.** The legacy trainer with two threads takes 0.437
#   (0.430-0.450) s per step, faster than `separate_async`, and trains on-policy. At this size the trainer's
#   phases, not generation, take most of a step; section 5 puts numbers on when that turns around.
#
# ## 3. Does it learn the same? Accuracy against steps and against wall-clock
#
# First the claim that v1 `sync` *is* the legacy step: every metric both trainers log, step by step, compared.

# %%
skip = ("timing_s/", "timing_per_token_ms/", "perf/")
worst = 0.0
for legacy_run, v1_run in zip(runs["legacy"], runs["v1_sync"]):
    for mine, theirs in zip(legacy_run, v1_run):
        shared = [k for k in mine.keys() & theirs.keys() if not k.startswith(skip)]
        worst = max([worst] + [abs(mine[k] - theirs[k]) for k in shared])
print(f"legacy vs v1 sync, {len(seeds())} seed(s): largest difference over every shared metric and step: {worst}")
print(f"metrics only v1 logs: {sorted(set(runs['v1_sync'][0][1]) - set(runs['legacy'][0][1]))[:6]} ...")

plot_comparison({k: runs[k] for k in ("legacy", "colocate_async", "separate_async", "legacy_2_threads")},
                [(VAL, "validation mean@8 against steps", "step"),
                 (VAL, "... against training seconds", "seconds"),
                 ("training/off_policy/trajectory_staleness/mean", "staleness of the trained answers", "step")])
print(compare_table(runs, VAL))
print()
for name, seed_runs in runs.items():
    seconds = [sum(r.get("timing_s/step", 0.0) for r in records) for records in seed_runs]
    finals = [[r[VAL] for r in records if VAL in r][-1] for records in seed_runs]
    print(f"{name:18s} final mean@8 {spread(finals)} after {spread(seconds, 1)} training seconds")

# %% [markdown]
# - **v1 sync is the legacy run**: the largest difference over every metric both log, every step, 3 seeds, is 0.0.
#   The legacy trainer on two threads ends at the same accuracy too (0.385, seeds 0.378-0.394): the threads
#   change the speed, not the result.
# - **Both asynchronous modes end lower after 10 steps, beyond the seed spread**: `colocate_async` 0.355
#   (0.338-0.369) and `separate_async` 0.352 (0.347-0.356) against 0.385.
# - **Against wall-clock, 10 steps do not pay the rollout process back.** `separate_async` needed 9.1 training
#   seconds against the legacy run's 7.0: its shorter steps do not make up for the first one, which waits while
#   the rollout process starts and loads the model. The two-thread legacy run needed 4.3 s and ends higher. On
#   this machine and at this size, asynchrony buys nothing that the second core does not buy more simply.
#
# ## 4. Staleness, and what rollout correction does with it
#
# Staleness grows with how far the rollout runs ahead. With `num_warmup_batches=2` the rollout process starts two
# batches ahead, so most trained answers are two syncs old. Chapter 9's correction does not make them fresher:
# it measures the gap between $\pi_\text{old}$ (the step's first weights) and the sampler, and reweights each token
# by $\min(\pi_\text{old}/\pi_\text{rollout}, 2)$ (token-level truncated IS, `rollout_is=token`). Three seeds each,
# without and with it:

# %%
AHEAD = MODES["separate_async"] + ["trainer.v1.separate_async.num_warmup_batches=2"]
CORRECTED = AHEAD + ["algorithm.rollout_correction.rollout_is=token",
                     "algorithm.rollout_correction.rollout_is_threshold=2.0"]
runs.update(run_grid(RUNS, {"two_ahead": AHEAD, "two_ahead_tis": CORRECTED}, *BASE, workers=1))
KEYS = {"staleness mean": "training/off_policy/trajectory_staleness/mean",
        "staleness_worst max": "training/off_policy/trajectory_staleness_worst/max",
        "rollout_corr/kl": "rollout_corr/kl", "probs_diff_mean": "training/rollout_probs_diff_mean",
        "actor/ppo_kl": "actor/ppo_kl"}
print("median over steps 2 on, then mean (min-max) over seeds")
print(f"{'variant':16s}" + "".join(f"{label:>28s}" for label in KEYS))
for name in ("separate_async", "two_ahead", "two_ahead_tis"):
    cells = [spread(per_seed(name, lambda r, k=k: r.get(k, 0.0)), 4) for k in KEYS.values()]
    print(f"{name:16s}" + "".join(f"{c:>28s}" for c in cells))
print()
print(compare_table({k: runs[k] for k in ("separate_async", "two_ahead", "two_ahead_tis")}, VAL))
is_means = per_seed("two_ahead_tis", lambda r: r["rollout_corr/rollout_is_mean"])
print(f"\ntwo_ahead_tis: mean IS weight per step {spread(is_means, 4)}")

fig, ax = plt.subplots(figsize=(6, 3))
for name in ("separate_async", "two_ahead"):
    values = [r["training/off_policy/trajectory_staleness/mean"] for records in runs[name] for r in trained(records)]
    ax.hist(values, bins=np.arange(-0.125, 3.2, 0.25), alpha=0.6, label=name)
ax.set(xlabel="staleness of a step's batch (mean over its answers)", ylabel="steps (all seeds)",
       title="how old the trained answers were")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# - **Two batches ahead, every trained answer is two syncs old** (staleness 2.0000 on every seed against
#   1.0000), and the sampler is further from $\pi_\text{old}$: `rollout_corr/kl` 0.0033 (0.0023-0.0040) against
#   0.0009 (0.0000-0.0015), `rollout_probs_diff_mean` 0.0072 against 0.0040, both beyond the seed spread. The
#   histogram shows no middle ground: the rollout process finishes each batch before the next sync, so a batch
#   is exactly as old as the warm-up makes it.
# - **Rollout correction leaves the staleness as it is and has little to reweight here**: the mean IS weight
#   is 0.9999 (0.9996-1.0004). With TIS on, the gap is 0.0021 (0.0016-0.0030), within noise of the uncorrected
#   run's, and the staleness is the same 2.0000.
# - **We did not find a cost of one more step of staleness at this size**: two ahead ends at 0.373 (0.362-0.388)
#   without correction and 0.371 (0.344-0.397) with it, within noise of each other, and the uncorrected run
#   ends above `separate_async` one ahead (0.352), beyond the seed spread. So section 3's drop of the asynchronous modes against sync is not
#   a simple function of staleness; with 3 seeds and 10 steps on a tiny model we cannot say more. Chapter 9 shows
#   a setting (weights 8 updates stale) where staleness does cost accuracy and bypass mode recovers it.
#
# ## 5. Where asynchrony starts to pay
#
# The phase times say when running the rollout beside the trainer is worth it. Let $t_g$ be the time the engine
# needs to generate one batch and $t_t$ the time the trainer needs for the rest of a step (log-probs, advantages,
# updates, the weight sync). A sync step takes $t_g + t_t$ on one core; a separate one takes about
# $\max(t_g, t_t)$ when each has a core of its own. With the medians measured above (sync's `gen` for $t_g$,
# separate_async's whole step minus its wait for $t_t$), here is the predicted speed-up as generation gets
# longer relative to training (longer answers, a larger model, more samples per prompt), with this run's point
# marked:

# %%
t_gen = statistics.median(per_seed("v1_sync", lambda r: r["timing_s/gen"]))
t_train = statistics.median(per_seed("separate_async", lambda r: r["timing_s/step"] - r["timing_s/gen"]))
t_sync_train = statistics.median(per_seed("v1_sync", lambda r: r["timing_s/step"] - r["timing_s/gen"]))
measured = statistics.median(per_seed("v1_sync", lambda r: r["timing_s/step"])) / statistics.median(
    per_seed("separate_async", lambda r: r["timing_s/step"]))
print(f"t_gen (sync) {t_gen:.3f} s, t_train (separate) {t_train:.3f} s, t_train (sync) {t_sync_train:.3f} s, "
      f"measured speed-up {measured:.2f}x at a generation share of {t_gen / (t_gen + t_sync_train):.2f}")
scale = np.linspace(0.1, 6, 200)
predicted = (scale * t_gen + t_sync_train) / np.maximum(scale * t_gen, t_train)
fig, ax = plt.subplots(figsize=(6.5, 3))
ax.plot(scale * t_gen / (scale * t_gen + t_sync_train), predicted, label="predicted: (t_g + t_t) / max(t_g, t_t')")
ax.scatter([t_gen / (t_gen + t_sync_train)], [measured], color="black", zorder=3, label="this run (measured)")
ax.axhline(1, color="gray", lw=0.8)
ax.set(xlabel="generation's share of a sync step", ylabel="speed-up of separate_async over sync",
       title="the crossover")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()
best_share = t_train / (t_train + t_sync_train)
print(f"the predicted speed-up peaks at {max(predicted):.2f}x when generation takes t_t' = {t_train:.3f} s, a share of "
      f"{best_share:.2f} of the sync step")

# %% [markdown]
# This run sits left of the peak: generation takes about a third of a sync step, and the measured speed-up over
# v1 sync is 1.29x (a generation share of 0.38). The prediction peaks at 1.95x when generation takes as long as
# the trainer's phases (a share of 0.51); to the right, where long reasoning answers from a large model put most of the time in generation,
# the speed-up falls back toward 1 on one rollout device, and the lever becomes more rollout devices (verl's
# `rollout.nnodes x n_gpus_per_node`). The second core is worth a speed-up only up to the peak; a second thread for
# the trainer (section 2) was worth more here.
#
# ## 6. Failure modes
#
# **Staleness without correction.** Section 4's numbers: the further the rollout runs ahead, the larger the
# gap between the sampler and $\pi_\text{old}$; nothing in the loss sees it unless `rollout_corr/*` is read (Lab C)
# or a correction is on. verl bounds it in the buffer (`trainer.v1.sampler.max_off_policy_threshold`, default 8
# steps: `drop` evicts older finished groups, `wait` holds sampling until old groups finish; exercise 12.2).
#
# **A replay buffer that starves.** The trainer waits in `sample` until enough groups are sampleable. If DAPO's
# filter evicts every group (the model answers every prompt all right or all wrong), the buffer keeps
# dispatching; minirl stops after a whole pass over the training set with a message instead of waiting forever:

# %%
def all_right(groups):
    """A stand-in rollout: every answer of every group is right, so DAPO keeps nothing."""
    for group in groups:
        group.trajectories = [Trajectory(s, None, 1.0) for s in range(4)]
        group.status = "finished"


positions = iter(range(10_000))
buffer = ReplayBuffer(all_right, lambda count: [buffer.add(PromptGroup(str(next(positions)), {}, 1, [0] * 4))
                                               for _ in range(count)], train_batch_size=4,
                      filter_groups_metric="reward", max_prompts_per_sample=64)
for _ in range(4):
    buffer.add(PromptGroup(str(next(positions)), {}, 1, [0] * 4))
try:
    buffer.sample(1, 4)
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# **Partial rollouts mixing weights inside one answer.** In `colocate_async` an answer that was unfinished at the
# weight sync resumes with the new weights: its first tokens come from one policy, its last from the next.
# `training/off_policy/trajectory_spans/max` counts the versions inside one answer, and the rollout's log-probs
# are still the right ones to correct with (each token's probability under the weights that sampled it, which is
# why the server keeps them per token):

# %%
for name in ("colocate_async", "separate_async"):
    spans = [r["training/off_policy/trajectory_spans/max"] for records in runs[name] for r in trained(records)]
    mixed = [r["training/off_policy/trajectory_spans/mean"] - 1 for records in runs[name] for r in trained(records)]
    print(f"{name:16s} steps whose batch holds an answer from two versions: {sum(s > 1 for s in spans)} of "
          f"{len(spans)}; share of such answers per step: {spread(mixed, 3)}")

# %% [markdown]
# In `colocate_async`, 25 of 27 steps (all seeds) trained a batch holding an answer generated by two versions,
# about a fifth of the answers per step (0.195, steps from 0.000 to 0.422). `separate_async` had none: its
# process finishes every answer before the next sync reaches it at this size. With long answers it would not.
#
# **A line that does not fit the mode.** `separate_async` trains each local update on exactly one mini-batch, so
# verl asserts `train_batch_size == parameter_sync_step x ppo_mini_batch_size`; minirl says so before starting:

# %%
try:
    load_config(["trainer.use_v1=true", "trainer.v1.trainer_mode=separate_async"], announce=False)
except ValueError as error:
    print("ValueError:", error)

# %% [markdown]
# ## 7. verl ↔ minirl
#
# | concept | verl 0.9.1 | minirl |
# |---|---|---|
# | the switch | `trainer.use_v1` (default true), `main_ppo.py::TaskRunnerV1` | `trainer.use_v1` (default false: item 12 of `minirl/README.md` says why); `minirl config` prints which trainer a line selects |
# | the loop and its hooks | `v1/trainer_base.py::PPOTrainer.fit`, `step`, `_step_once`; `on_init_end`, `on_train_begin`, `on_step_begin/end`, `on_sample_begin/end`, `on_validate_begin/end` | `minirl/v1/trainer.py::PPOTrainerV1` (the step itself is `minirl/trainer.py::PPOTrainer.train_step`) |
# | modes | `trainer_sync.py`, `trainer_colocate_async.py`, `trainer_separate_async.py` | `trainer.v1.trainer_mode`, one class |
# | sessions | `experimental/agent_loop/agent_loop.py::AgentLoopBase`, `AgentLoopOutput`, `single_turn_agent_loop.py::SingleTurnAgentLoop` | `minirl/v1/agent_loop.py` (same names) |
# | the server | vLLM/SGLang replicas behind `workers/rollout/llm_server.py::LLMServerManager`; `FullyAsyncLLMServerClient` resumes aborted requests | `LLMServer` (batches waiting requests), `minirl/v1/rollout_server.py::StandaloneLLMServer` (separate_async's process) |
# | the buffer | `v1/replay_buffer.py::ReplayBuffer`, `ReplayBufferAsync` over TransferQueue | `minirl/v1/replay_buffer.py` (an object; `dapo_evictions`, `stale_evictions`) |
# | keys | `trainer.v1.{trainer_mode, colocate_async.num_warmup_batches, separate_async.{num_warmup_batches, parameter_sync_step}, sampler.{max_off_policy_threshold, max_off_policy_strategy}}`, `algorithm.filter_groups.max_inflight_gen_batches` | the same keys; `separate_async.hybrid_rollout.*` and custom samplers refused |
# | metrics | `training/off_policy/trajectory_{spans,staleness,staleness_worst}/{mean,max,min}`, `training/{off_policy,filter_groups}/evicted_samples`, `timing_s/{gen,update_weights,...}` | the same names; `minirl/rollout_busy_s` is minirl's |
# | weight sync | `checkpoint_manager.update_weights` in `on_step_end` (separate_async: NCCL/NIXL/Mooncake, never `naive`) | `on_step_end`; separate_async sends the state dict through a queue |
#
# What minirl does differently (all listed in `minirl/README.md`, item 12): colocate_async's engine decodes only
# while the trainer waits in `sample`, 4 tokens between polls (verl polls every 2 s of wall time); the separate
# rollout is one CPU process that reads its queue every 4 tokens, so a `separate_async` run repeats its sampling
# seeds but not which token a sync lands on; ReMax is legacy-only, as in verl.
#
# ## 8. Exercises
#
# Open `exercises/ch12_v1_trainer.py` and grade with `make grade`
# (one exercise, all of its checks: `make grade EX=12.1`).
#
# | # | function | what it checks |
# |---|---|---|
# | 12.1 | `dapo_evictions` | DAPO's group filter in the buffer: no spread means `np.std == 0` exactly, groups of one stay, sync refills two prompts per eviction and the async modes one, an unknown mode is refused |
# | 12.2 | `stale_evictions` | the staleness bound: span counts both ends, `drop` evicts only finished groups past the threshold, `wait` holds sampling for in-flight groups at it, `null` switches it off |
#
# <details>
# <summary>Hint for 12.1</summary>
# <code>float(np.std(values)) == 0.0</code> and <code>len(values) > 1</code>; count the evicted groups, then multiply.
# </details>
#
# <details>
# <summary>Hint for 12.2</summary>
# Compute <code>span = global_steps - dispatch_step + 1</code> once per group; <code>drop</code> uses
# <code>&gt;</code> on finished groups, <code>wait</code> uses <code>&gt;=</code> on groups in flight.
# </details>
#
# **Failure-mode question.** A verl user switches a working GRPO line (`train_batch_size=256`,
# `ppo_mini_batch_size=32`) to `trainer.v1.trainer_mode=separate_async` and keeps everything else. What happens,
# and what is the smallest change that runs?
#
# <details>
# <summary>Answer</summary>
# verl asserts <code>train_batch_size == parameter_sync_step * ppo_mini_batch_size</code>: the default
# <code>parameter_sync_step</code> is 4, and 4 x 32 = 128, so the run stops at start-up. Set
# <code>trainer.v1.separate_async.parameter_sync_step=8</code> (8 local updates of 32 prompts, as the sync line made 8
# optimizer steps per step), or the mini-batch to 64 (4 larger updates). Then read <code>training/off_policy/trajectory_staleness</code> and <code>rollout_corr/kl</code>: the
# batches are now generated with older weights, and verl also needs a non-<code>naive</code> checkpoint engine and
# rollout GPUs of their own (<code>rollout.nnodes</code>, <code>rollout.n_gpus_per_node</code>).
# </details>
#
# The library's answers, after you have tried:

# %%
from minirl.v1 import replay_buffer  # noqa: E402

for function in (replay_buffer.dapo_evictions, replay_buffer.stale_evictions):
    display(show_source(function, collapsed=True))  # noqa: F821

# %% [markdown]
# ## 9. Where next
#
# - [Chapter 9 · Rollout correction](09_rollout_corr.ipynb): the IS weights and rejection that make stale batches
#   usable.
# - [Chapter 10 · HybridFlow](10_hybridflow.ipynb): worker groups, colocation and the weight sync.
# - [Chapter 5 · DAPO](05_dapo.ipynb): the group filter that now lives in the replay buffer (exercise 12.1).
# - [Lab C · Reading the metrics](lab_c_metrics.ipynb): `rollout_probs_diff_*` and `rollout_corr/*` on a live run.
# - Back to [the reading map](index.md).

# %%
print_run_time()
