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
# # Chapter 10 · HybridFlow / verl: why the trainer, the workers and the rollout engine are split
#
# | The five answers | |
# |---|---|
# | **Problem** | RLHF and RLVR are not one model's training. An actor, a critic, a reference, a reward model and a rollout engine must work together, and training and generation want different parallel layouts (sharded training, a fast inference engine). Writing all of that as one program that runs on every GPU (SPMD) mixes the algorithm with the distribution and makes both hard to change. |
# | **Core idea** | HybridFlow (Sheng et al., 2024): a **single controller** describes the dataflow of a step in plain sequential code (generate, score, compute log-probs and values, advantages, update); **worker groups** do the model work, each a set of processes that run SPMD inside the group; a call's **dispatch mode** says how its data is split over a group's ranks and how the results come back; the rollout engine and the trainer are connected by a **weight sync**. |
# | **Beginner's view** | `RayPPOTrainer.fit()` is the director. The worker groups are the departments: each has its own crew and does one kind of work. vLLM or SGLang is the location crew that shoots the footage (generates). The director does not shoot a single frame, but decides when to shoot, when to review, and when the crew gets the new script (the weights). |
# | **verl source** | `verl/trainer/ppo/ray_trainer.py::RayPPOTrainer.fit` (the dataflow); `verl/single_controller/base/decorator.py::register`, `Dispatch`, `dispatch_dp_compute_data_proto`, `collect_dp_compute_data_proto`, `make_nd_compute_dataproto_dispatch_fn`; `verl/single_controller/ray/base.py::RayWorkerGroup`, `create_colocated_worker_cls`; `verl/workers/engine_workers.py::ActorRolloutRefWorker`, `TrainingWorker`; `verl/checkpoint_engine/base.py::CheckpointEngineManager.update_weights` (the weight sync); `examples/ppo_trainer/run_qwen3_8b_fsdp.sh` and `examples/ppo_trainer/run_qwen3_8b_megatron.sh` (the same algorithm on two training engines). |
# | **Where next** | The reading map's advice: do the labs first ([Lab A · GSM8K with PPO](lab_a_gsm8k.ipynb), [Lab B · Writing reward functions](lab_b_rewards.ipynb), [Lab D · The GRPO config, key by key](lab_d_grpo_config.ipynb)), then come back here; [Chapter 9 · Rollout correction](09_rollout_corr.ipynb) for what happens when the engine's weights or precision differ from the trainer's; [Chapter 1 · PPO](01_ppo.ipynb) and [Chapter 4 · GRPO](04_grpo.ipynb) for the algorithms this dataflow runs. Back to [the reading map](index.md). |
#
# Run time: 2.4 minutes in this run, on 2 CPU cores that other jobs shared while it ran (the same PPO run
# three times: in one process, and twice on Ray). With `MINIRL_FAST=1` the runs are 2 steps and only one Ray
# layout runs.

# %%
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import ray
import torch

from minirl import models, sft
from minirl.book.notebook import fast_mode, print_run_time, show_source, where_this_ran
from minirl.config import load_config
from minirl.protocol import DataProto
from minirl.single_controller import (
    ActorWorker,
    CriticWorker,
    ReferenceWorker,
    RolloutWorker,
    collect_dp_compute_data_proto,
    dispatch_dp_compute_data_proto,
)
from minirl.trainer import PPOTrainer

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "ch10"
STEPS = 2 if fast_mode() else 6
# PPO with a critic and the KL in the reward: every role works (actor, rollout engine, reference, critic).
# (Fast mode: GRPO without a KL, so only the actor's group starts; Ray's start-up dominates a 2-step run.)
ROLES = ["algorithm.adv_estimator=grpo"] if fast_mode() else ["algorithm.adv_estimator=gae",
                                                                  "algorithm.use_kl_in_reward=true"]
BASE = [*ROLES, "data.train_batch_size=16",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        f"trainer.total_training_steps={STEPS}", "trainer.test_freq=-1", "trainer.val_before_train=false",
        "trainer.logger=[]", "trainer.resume_mode=disable", "trainer.progress_bar=false"]

# %% [markdown]
# ## 1. One step, stage by stage: who does what
#
# `minirl/trainer.py::PPOTrainer.train_step` is the single controller's dataflow, in verl's order. Each
# model stage is a call on one worker group; the driver itself only moves batches and computes the
# batch-level quantities (rewards by rule, advantages, metrics).
#
# | stage (`timing_s/...`) | runs on | minirl's dispatch | what verl 0.9.1 calls |
# |---|---|---|---|
# | `gen` | rollout engine | DP_COMPUTE_PROTO | `verl/experimental/agent_loop/agent_loop.py::AgentLoopManager.generate_sequences` (requests to vLLM/SGLang servers) |
# | `reward` | driver (rule) or reward workers | | the reward loop (`RewardLoopWorker`) or your reward function |
# | `old_log_prob` | actor | DP_COMPUTE_PROTO | `verl/workers/engine_workers.py::ActorRolloutRefWorker.compute_log_prob` |
# | `ref` | reference | DP_COMPUTE_PROTO | `verl/workers/engine_workers.py::ActorRolloutRefWorker.compute_ref_log_prob` |
# | `values` | critic | DP_COMPUTE_PROTO | `verl/workers/engine_workers.py::TrainingWorker.infer_batch` |
# | `adv` | driver | | `compute_advantage` in `ray_trainer.py` |
# | `update_critic` | critic | ONE_TO_ALL | `verl/workers/engine_workers.py::TrainingWorker.train_mini_batch` (`RayPPOTrainer._update_critic` calls `critic_wg.train_mini_batch`) |
# | `update_actor` | actor | ONE_TO_ALL | `verl/workers/engine_workers.py::ActorRolloutRefWorker.update_actor` |
# | `update_weights` | actor → rollout engine | | `verl/workers/engine_workers.py::ActorRolloutRefWorker.update_weights`, through `CheckpointEngineManager` |
#
# verl 0.9.1's model methods, the updates included, are registered with
# `make_nd_compute_dataproto_dispatch_fn(mesh_name)`: a row split generalised to a device mesh, where the
# ranks that share one tensor- or pipeline-parallel group receive the same chunk. On a data-parallel-only
# group it splits like DP_COMPUTE_PROTO, but without its padding (section 2). Its workers also take a
# `TensorDict` rather than a `DataProto`. The ONE_TO_ALL of the two updates is minirl's choice (section 2
# says why).
#
# minirl runs the same roles in two ways, chosen by one key (`trainer.use_ray`):
#
# - **in this process** (the default): each role is a Python object (`minirl/workers.py`). With
#   `accelerate launch`, every process holds one of each and plays the driver on an identical batch.
# - **as Ray worker groups** (`minirl/single_controller.py`): each role is a group of Ray actor
#   processes (`trainer.n_gpus_per_node` ranks), with a torch.distributed group of its own. The driver
#   (this notebook's process) holds no model at all.
#
# ## 2. Dispatch: how a call's data reaches the ranks
#
# The heart of the single controller is small. A worker method is registered with a dispatch mode;
# calling it on the group splits the data, calls every rank, and collects. DP_COMPUTE_PROTO on 7 rows and
# 3 ranks:

# %%
batch = DataProto(batch={"input_ids": torch.arange(7)[:, None].repeat(1, 3)},
                  non_tensor_batch={"uid": [f"prompt{i // 2}" for i in range(7)]}, meta_info={"temperature": 1.0})
chunks = dispatch_dp_compute_data_proto(batch, world_size=3)
for rank, chunk in enumerate(chunks):
    print(f"rank {rank}: rows {chunk['input_ids'][:, 0].tolist()}, uids {list(chunk['uid'])}, meta {chunk.meta_info}")
back = collect_dp_compute_data_proto(chunks)
print("collected:", back["input_ids"][:, 0].tolist())
for worker in (ActorWorker, RolloutWorker, ReferenceWorker, CriticWorker):
    modes = {name: method.dispatch_mode.value for name, method in vars(worker).items()
             if hasattr(method, "dispatch_mode")}
    print(f"{worker.__name__:16s} {modes}")

# %% [markdown]
# With $n$ rows and $N$ ranks, let $b = \lfloor n/N \rfloor$ and $e = n \bmod N$. Rank $r$ gets the rows
# $[s_r,\ s_r + b + \mathbb{1}[r < e])$ with $s_r = r\,b + \min(r, e)$: here $n = 7$, $N = 3$, so $b = 2$,
# $e = 1$, and the chunks have 3, 2 and 2 rows.
#
# Two things to notice. Rows stay in order: rank 0 gets the first rows, and collecting in rank order
# gives the batch back as it was sent, so the driver never has to track which row went where. And the
# split ignores prompts: `prompt1`'s two answers may land on different ranks. That is fine for a forward
# pass (each row is independent) but it is why group statistics (GRPO's mean and std per prompt) are
# computed on the driver, on the whole batch, never inside a worker.
#
# A batch that does not divide by the number of ranks is where minirl and verl part. verl's
# `Dispatch.DP_COMPUTE_PROTO` would pad it (`_split_args_kwargs_data_proto_with_auto_padding`), but 0.9.1's
# workers do not use that mode: `make_nd_compute_dataproto_dispatch_fn` splits without padding
# (`_split_args_kwargs_data_proto`), and `verl/utils/tensordict_utils.py::chunk_tensordict` asserts that the
# rows divide evenly. So in the legacy trainer a step's `train_batch_size * rollout.n` responses must divide
# by the data-parallel size (the default v1 trainer pads a step with no-op samples instead,
# `verl/trainer/ppo/padding_utils.py::upsample_batch_to_divisible_size`; without dynamic batch size
# `verl/utils/config.py::validate_config` refuses an uneven step at start-up for both), and in both trainers a
# mini-batch's `ppo_mini_batch_size * rollout.n` must (`TrainingWorker.train_mini_batch` asserts it).
# minirl's split gives the first chunks one row more, so it can split any batch (the 7 rows above), but its
# trainer refuses a step or a mini-batch that does not split evenly over the ranks, as verl's legacy trainer
# does (`minirl/config.py::check_split_over_ranks`).
#
# verl splits the *updates'* data over the ranks too: each rank cuts its own chunk into mini-batches
# (`TrainingWorker.train_mini_batch`), so a verl run changes a little with the number of GPUs. minirl
# sends the whole batch to every rank (ONE_TO_ALL) and each rank takes its share of every global
# mini-batch, so N ranks make exactly the update of one (`minirl/README.md`, items 13 and 36).
#
# ## 3. The same run, three ways
#
# The same seeded PPO run: in this process; on Ray with the rollout engine **colocated** in the actor's
# group (verl's hybrid engine, `actor_rollout_ref.hybrid_engine=true`: the engine runs on the actor's GPUs;
# in minirl it also shares the actor's processes and float32 weights, while verl's engine keeps a copy of
# its own, section 4); and on Ray with a **separate** rollout group that has its own copy of the weights,
# synced from the actor after every update (`hybrid_engine=false`), with 2 ranks per group.
#
# Why can two ranks give the run of one? Each rank computes the loss of its rows of a mini-batch, divided
# by the token count $T$ of the *whole* mini-batch: $L_r = \frac{1}{T}\sum_{t \in r} \ell_t$. The
# all-reduce sums the ranks' gradients, $\sum_r \nabla L_r = \nabla \frac{1}{T}\sum_t \ell_t$, which is the
# gradient one process computes on the whole mini-batch; only the order of the float additions differs.

# %%
LAYOUTS = {
    "one process": [],
    "Ray, colocated, 1 rank": ["trainer.use_ray=true"],
    "Ray, separate rollout, 2 ranks": ["trainer.use_ray=true", "actor_rollout_ref.hybrid_engine=false",
                                       "trainer.n_gpus_per_node=2"],
}
if fast_mode():
    LAYOUTS.pop("Ray, separate rollout, 2 ranks")
results = {}
for name, layout in LAYOUTS.items():
    started = time.perf_counter()
    trainer = PPOTrainer(load_config([*BASE, *layout, f"trainer.default_local_dir={RUNS / name.replace(' ', '_')}"],
                                     announce=False))
    built = time.perf_counter()
    history = trainer.fit()
    results[name] = {"history": history, "startup_s": built - started, "fit_s": time.perf_counter() - built,
                     "timeline": [record for group in trainer.worker_groups for record in group.timeline]}
ray.shutdown()  # fit() stopped the worker groups; the timelines stay on this side

reference = results["one process"]["history"]
print(f"{'layout':32s} {'start-up s':>10s} {'s per step':>11s} {'largest metric difference':>28s}")
for name, result in results.items():
    per_step = np.mean([r["timing_s/step"] for r in result["history"][1:]])  # step 1 warms up
    worst, worst_key = 0.0, "-"
    for mine, theirs in zip(result["history"], reference):
        for key, value in theirs.items():
            if key.startswith(("timing", "perf/")) or key == "step":
                continue
            gap = abs(mine[key] - value) / max(abs(value), 1e-2)  # relative, or absolute near 0
            if gap > worst:
                worst, worst_key = gap, key
    print(f"{name:32s} {result['startup_s']:10.1f} {per_step:11.3f} {worst:17.1e} ({worst_key})")

# Where a step's time goes, stage by stage (verl's timing_s/* keys; mean over steps 2 on)
STAGES = ["gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor", "update_weights"]
fig, ax = plt.subplots(figsize=(11, 2.6))
for row, result in enumerate(results.values()):
    left = 0.0
    for i, stage in enumerate(STAGES):
        seconds = np.mean([r.get(f"timing_s/{stage}", 0.0) for r in result["history"][1:]])
        ax.barh(row, seconds, left=left, color=plt.cm.tab10(i), label=stage if row == 0 else None)
        left += seconds
ax.set(yticks=range(len(results)), yticklabels=list(results), xlabel="seconds per step (mean over steps 2 on)",
       title="where a step's time goes, by stage")
ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
plt.tight_layout()
plt.show()

# %% [markdown]
# What the table shows. The metrics do not depend on the machine; the timings are this run's, on two CPU
# cores that other jobs shared while it ran, so read them as rough:
#
# - **The same run.** Every metric of both Ray runs matches the in-process run: exactly with one rank
#   per group, and within $10^{-4}$ with two ranks (the largest gap, 8.3e-05 in
#   `training/rollout_probs_diff_max`, is float32 rounding: two ranks sum their gradients in another order).
#   `tests/test_ray_workers.py` asserts this on every test run, and that a Ray run resumes from its
#   checkpoint.
# - **Start-up is the price you see first:** 45.8 s for the colocated run (3 worker processes: actor,
#   reference, critic) and 85.5 s for the separate one (4 groups of 2 ranks, 8 worker processes),
#   against 0.5 s in one process. Every process imports torch and loads its model.
# - **Per step, Ray cost more in this run:** a step took 0.457 s in one process, 0.660 s colocated and
#   0.715 s with the separate rollout. Moving the data between processes accounts for 0.070 s and 0.119 s
#   of a Ray step (next section). The bar chart shows the rest spread over the model stages: each is
#   longer on Ray than in one process. With other jobs on the same two cores, part of that may be the
#   machine's load rather than Ray; this one run cannot tell the two apart. The second rank per group
#   bought no speed here: compute per call is close to that of one rank, not half of it (`update_actor`:
#   0.171 s with two ranks, 0.152 s with one), likely because two ranks on two busy cores do not get a
#   core each. Between the two Ray layouts the bar chart shows the same stages; the weight sync
#   (`update_weights`) is the stage that grows visibly when the engine is separate (0.041 s per step,
#   against 0.006 s colocated). The next section measures the cost of each call directly.
#
# ## 4. See the flow
#
# Every call on a worker group is timed twice: by the driver (from sending the data to having the
# result) and by the ranks (the compute alone). The difference is what the split costs: serialising the
# batch, moving it between processes, and collecting. The last step of each Ray run, drawn as a Gantt
# chart (dark: compute on the ranks; light: the call's extra time on the driver):

# %% tags=["central-figure"]
COLORS = {"actor": "tab:red", "rollout": "tab:orange", "reference": "tab:olive", "critic": "tab:cyan"}
ray_layouts = [name for name in results if name.startswith("Ray")]
fig, axes = plt.subplots(len(ray_layouts), 1, figsize=(12, 2.2 * len(ray_layouts)), squeeze=False)
for ax, name in zip(axes[:, 0], ray_layouts):
    timeline = sorted(results[name]["timeline"], key=lambda r: r["start"])
    last_step = max(r["start"] for r in timeline if r["method"] == "generate_sequences")
    step = [r for r in timeline if r["start"] >= last_step]
    rows = [group for group in COLORS if any(r["group"] == group for r in step)]
    for record in step:
        y, x0 = rows.index(record["group"]), record["start"] - last_step
        ax.barh(y, record["end"] - record["start"], left=x0, color=COLORS[record["group"]], alpha=0.35)
        ax.barh(y, record["compute_s"], left=x0, color=COLORS[record["group"]])
        ax.text(x0, y + 0.3, record["method"], fontsize=7)
    ax.set(yticks=range(len(rows)), yticklabels=rows, title=f"{name}: the last step",
           xlabel="seconds since the step's generation started")
    ax.grid(alpha=0.3, axis="x")
plt.tight_layout()
plt.show()

print(f"{'layout':32s} {'call':34s} {'calls':>5s} {'wall s':>8s} {'compute s':>9s} {'moving s':>8s}  "
      "(means, first call left out)")
moving = {}
for name in ray_layouts:
    calls = {}
    for record in results[name]["timeline"]:
        calls.setdefault(f"{record['group']}.{record['method']}", []).append(record)
    for call, records in sorted(calls.items()):
        records = records[1:] or records  # the first call of each kind warms up (imports, allocations)
        wall = np.mean([r["end"] - r["start"] for r in records])
        compute = np.mean([r["compute_s"] for r in records])
        print(f"{name:32s} {call:34s} {len(records):5d} {wall:8.3f} {compute:9.3f} {wall - compute:8.3f}")
        moving.setdefault(name, []).append(wall - compute)
print()
for name in ray_layouts:  # every kind of call runs once per step
    history = results[name]["history"][1:]
    per_step = np.mean([r["timing_s/step"] for r in history])
    sync = np.mean([r.get("timing_s/update_weights", 0.0) for r in history])
    print(f"{name}: moving {1000 * min(moving[name]):.0f}-{1000 * max(moving[name]):.0f} ms per call, "
          f"{sum(moving[name]):.3f} s per step for its {len(moving[name])} calls "
          f"({sum(moving[name]) / per_step:.0%} of a {per_step:.3f} s step); weight sync (timing_s/update_weights) "
          f"{sync:.3f} s")
state = models.load_policy(sft.default_warm_start()).state_dict()
print(f"\nOne weight sync moves the actor's whole state dict: "
      f"{sum(t.numel() * t.element_size() for t in state.values()) / 2**20:.1f} MiB (float32).")

# %% [markdown]
# What the flow shows:
#
# - **The driver runs the stages one after the other**, as `fit()` says: a worker group is busy only
#   during its own stages and waits the rest of the step. With one GPU pool per role, that waiting is
#   idle hardware; it is why verl colocates the roles on the same GPUs (the hybrid engine) and why its
#   asynchronous trainers overlap generation with training.
# - **Moving the data costs 6-14 ms per call in the colocated run and 12-20 ms with two ranks per
#   group** (the light part of each bar: serialising the batch, the object store, collecting). Per step
#   that is 0.070 s for the colocated run's 7 calls (11% of its 0.660 s step) and 0.119 s for the
#   separate run's 8 calls (17% of its 0.715 s step), with this tiny model, in this run. With a real
#   model the compute grows by orders of magnitude and the batch only with the number of tokens, so the
#   share falls.
# - **The weight sync is one more stage.** With a separate engine the driver reads the actor's state dict
#   (`actor.state_dict`) and sends it to every rollout rank (`rollout.load_weights`): 0.041 s per step
#   here (`timing_s/update_weights`) for 1.4 MiB. Almost all of it is moving: the two calls take 0.018 s
#   and 0.022 s, of which 0.001 s each is compute. A sync moves $P \times$ (bytes per parameter): a 7B
#   model in bfloat16 is $7\cdot 10^9 \times 2$ bytes $= 14$ GB; that is why verl streams the weights with NCCL or CUDA
#   IPC (`CheckpointEngineManager`) instead of passing them through the driver.
# - **Colocation saves GPUs, not the copy.** In verl a colocated engine (vLLM, SGLang) also holds weights
#   of its own, in `actor_rollout_ref.rollout.dtype` (bfloat16 by default), re-synced after every update.
#   With the default `checkpoint_engine.backend=naive`, `CheckpointEngineManager.update_weights` has every
#   actor rank run `verl/workers/engine_workers.py::ActorRolloutRefWorker.update_weights`: it gathers the
#   actor's tensors (`engine.get_per_tensor_param`) and hands them to `rollout.update_weights`, which for
#   vLLM (`vllm_rollout.py::ServerAdapter.update_weights`) streams them in buckets over CUDA IPC into the
#   engine on the same GPU. What colocation saves is a second pool of GPUs (the engine sleeps while the
#   actor trains) and a trip over the network. The engine's copy, in another precision and with other
#   kernels, gives log-probs slightly different from the trainer's even in a synchronous run: that is
#   [Chapter 9](09_rollout_corr.ipynb)'s precision mismatch. minirl's colocated engine samples with the
#   actor's own float32 weights, so it has that mismatch only when you ask for it (`rollout.dtype=bfloat16`).
#
# ## 5. Where verl goes further
#
# minirl keeps one implementation of each role and runs it in-process or in a Ray group. verl 0.9.1
# keeps the *worker API* fixed and swaps what is behind it:
#
# - **Training engines.** The Hydra config group `model_engine` picks FSDP (`dp`, the default:
#   `verl/workers/engine/fsdp/transformer_impl.py::FSDPEngine`) or Megatron-LM (`model_engine=megatron`:
#   `verl/workers/engine/megatron/transformer_impl.py::MegatronEngine`), both behind
#   `verl/workers/engine/base.py::BaseEngine`, which `TrainingWorker` drives. The group swaps the actor's,
#   the reference's and the critic's whole config blocks (`ppo_trainer.yaml` loads `${model_engine}_actor`
#   and so on); setting `actor_rollout_ref.actor.strategy` alone does not switch the engine.
#   `examples/ppo_trainer/run_qwen3_8b_fsdp.sh` and `examples/ppo_trainer/run_qwen3_8b_megatron.sh` run the
#   same PPO with the same `fit()`: only the engine keys differ (`model_engine=megatron` and its parallel sizes).
# - **Rollout servers.** Generation is a server, not a method: `verl/workers/rollout/replica.py::RolloutReplica`
#   with vLLM (`verl/workers/rollout/vllm_rollout/vllm_async_server.py::vLLMReplica`), SGLang or
#   TensorRT-LLM behind it (`actor_rollout_ref.rollout.name`). Weights reach it through
#   `verl/checkpoint_engine/base.py::CheckpointEngineManager` (NCCL, CUDA IPC), the fast version of
#   minirl's `state_dict` copy.
# - **Colocation.** verl colocates roles by fusing their worker classes into one Ray actor
#   (`verl/single_controller/ray/base.py::create_colocated_worker_cls`), so the actor, the rollout
#   engine and the reference share GPUs and take turns, each with weights of its own (section 4); minirl's
#   colocated layout shares one process per rank, and the weights, between the actor and its engine only.
# - **The v1 trainer.** verl 0.9.1's default trainer (`verl/trainer/ppo/v1/trainer_base.py::PPOTrainer.fit`,
#   `trainer.use_v1=true`) keeps the same stages but generates through an agent loop
#   (`verl/experimental/agent_loop/agent_loop.py::AgentLoopManager`: multi-turn, tools), buffers the
#   results (`verl/trainer/ppo/v1/replay_buffer.py::ReplayBuffer`, also the home of DAPO's group filter),
#   and can overlap generation with training (`verl/trainer/ppo/v1/trainer_separate_async.py`), which is
#   where Chapter 9's stale weights come from. minirl's v1 trainer is `minirl/v1/` (`trainer.use_v1=true`:
#   agent-loop sessions, the replay buffer, all three modes; Chapter 12).
# - **TransferQueue.** The v1 trainer does not send batches through the driver: it keeps them in a
#   distributed store that the workers read directly, and hands the workers keys into it (`KVBatchMeta`)
#   instead of tensors. This is always on: `verl/trainer/main_ppo.py::TaskRunnerV1.run` sets
#   `config.transfer_queue.enable = True` whatever `trainer/config/transfer_queue/transfer_queue.yaml` says
#   (`enable: False`), and the default agent-loop manager, `verl/trainer/ppo/v1/agent_loop_tq.py::AgentLoopManagerTQ`,
#   writes the generated responses there. The "moving" column above leaves the driver's path.
#
# ## 6. verl ↔ minirl
#
# | | verl 0.9.1 | minirl |
# |---|---|---|
# | the dataflow | `verl/trainer/ppo/ray_trainer.py::RayPPOTrainer.fit` | `minirl/trainer.py::PPOTrainer.fit`, `train_step` |
# | dispatch modes | `verl/single_controller/base/decorator.py::Dispatch`, `register` | `minirl/single_controller.py::Dispatch`, `register` |
# | split / collect | `decorator.py::dispatch_nd_compute_dataproto`, `collect_nd_compute_dataproto` (what the workers use, no padding); `dispatch_dp_compute_data_proto`, `collect_dp_compute_data_proto` (DP_COMPUTE_PROTO, padded) | `minirl/single_controller.py::dispatch_dp_compute_data_proto`, `collect_dp_compute_data_proto` |
# | a worker group | `verl/single_controller/ray/base.py::RayWorkerGroup` | `minirl/single_controller.py::WorkerGroup` |
# | the workers | `verl/workers/engine_workers.py::ActorRolloutRefWorker`, `TrainingWorker` | `minirl/single_controller.py::ActorWorker`, `RolloutWorker`, `ReferenceWorker`, `CriticWorker` (around `minirl/workers.py`) |
# | weight sync | `verl/checkpoint_engine/base.py::CheckpointEngineManager.update_weights` | `minirl/single_controller.py::SeparateRollout.update_weights`, `minirl/workers.py::Rollout.update_weights` |
#
# | config key | minirl default | meaning |
# |---|---|---|
# | `trainer.use_ray` | `false` (minirl only) | run the roles as Ray worker groups driven by this process |
# | `actor_rollout_ref.hybrid_engine` | `true` (as verl) | the rollout engine is colocated with the actor (minirl's samples with the actor's own weights; verl's keeps its own copy, synced every step); `false`: a group of its own with its own copy, synced after each update (verl's legacy trainer asserts `true`; its v1 separate-async trainer reads `false`) |
# | `trainer.n_gpus_per_node`, `trainer.nnodes` | `null` (verl: `8`), `1` | with `use_ray`, the ranks of each worker group (null: one) |
# | `ray_kwargs.ray_init.num_cpus` | `null` | CPUs Ray may use (null: all) |
#
# ## 7. Exercises
#
# Open `exercises/ch10_hybridflow.py` and grade with `make grade` (one exercise, all of its checks:
# `make grade EX=10.1`).
#
# | # | function | what it checks |
# |---|---|---|
# | 10.1 | `dp_dispatch`, `dp_collect` | DP_COMPUTE_PROTO: contiguous chunks in row order, and the round trip |
# | 10.2 | `step_stages` | the stages of one step and who runs each, for a config; checked against the real trainer |
#
# <details>
# <summary>Hint for 10.1</summary>
# Rank r gets rows <code>[start, end)</code> with <code>base, extra = divmod(n, world)</code>,
# <code>start = r * base + min(r, extra)</code>; <code>DataProto.slice</code> keeps every field together.
# </details>
#
# <details>
# <summary>Hint for 10.2</summary>
# Read <code>PPOTrainer.train_step</code> top to bottom and write down each <code>timer(...)</code> with the
# condition around it.
# </details>
#
# **Failure-mode question.** You moved the rollout engine to its own GPUs (`hybrid_engine=false`), and
# after a refactor the weight sync is never called. Training runs, but the reward stops improving after
# the first steps. Which metric shows the cause directly, and what does it look like?
#
# <details>
# <summary>Answer</summary>
# <code>training/rollout_probs_diff_mean</code> (and <code>rollout_corr/kl</code>): the engine keeps sampling
# with the initial weights while the actor moves on, so the gap between the engine's log-probs and the
# actor's grows every step instead of returning to ~0 after each sync (Chapter 9's saw-tooth, without the
# teeth). <code>timing_s/update_weights</code> near 0 confirms no sync happens. The actor is trained on
# ever more off-policy data; Chapter 9 shows what that does to learning.
# </details>
#
# ### The library's code, after you tried

# %%
from IPython.display import display

from minirl import single_controller

for function in (single_controller.dispatch_dp_compute_data_proto, single_controller.collect_dp_compute_data_proto,
                 single_controller.WorkerGroup):
    display(show_source(function, collapsed=True))

# %% [markdown]
# ## 8. Where next
#
# - If you have not done them yet, the labs the reading map puts first: [Lab A · GSM8K with PPO](lab_a_gsm8k.ipynb),
#   [Lab B · Writing reward functions](lab_b_rewards.ipynb), [Lab D · The GRPO config, key by key](lab_d_grpo_config.ipynb).
# - [Chapter 9 · Rollout correction](09_rollout_corr.ipynb): when the engine's weights or precision differ
#   from the trainer's.
# - [Chapter 1 · PPO](01_ppo.ipynb) and [Chapter 4 · GRPO](04_grpo.ipynb): the algorithms this dataflow
#   runs.
# - References: Sheng et al. (2024), *HybridFlow: A Flexible and Efficient RLHF Framework* (EuroSys 2025);
#   Moritz et al. (2018), *Ray: A Distributed Framework for Emerging AI Applications*; verl's
#   `docs/hybrid_flow.rst`.

# %%
print_run_time()
