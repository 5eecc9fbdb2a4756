"""The single controller and its worker groups on Ray: verl's `verl/single_controller/`, small.

HybridFlow's split (Chapter 10). One driver process, the trainer's `fit()`, describes the dataflow and
never touches a model. The model work runs in *worker groups*: each a set of processes (ranks), here
Ray actors, that hold one role's model (actor, rollout engine, reference, critic). The ranks of a group
form a torch.distributed group of their own, so an update is data-parallel inside the group.

The driver calls a method on a worker group. The method's *dispatch mode* says how the call's data is
spread over the ranks and how the answers come back (verl's `verl/single_controller/base/decorator.py`):

    DP_COMPUTE_PROTO   split the DataProto into one chunk per rank (rows in order), run each chunk on its
                       rank, concatenate the results in rank order        (forward passes, generation)
    ONE_TO_ALL         every rank gets the same arguments; every rank runs; the driver keeps rank 0's
                       result (the ranks agree: they all-reduced; verl returns the list of all of them)
                                                                            (updates, loading, weight sync)
    RANK_ZERO          only rank 0 runs (verl: `Execute.RANK_ZERO`)         (saving, reading the weights)

verl 0.9.1's workers register every model call, the updates too, with `make_nd_compute_dataproto_dispatch_fn`:
a row split like DP_COMPUTE_PROTO but without padding, so the batch must divide by the data-parallel size
(`_split_args_kwargs_data_proto`; `utils/tensordict_utils.py::chunk_tensordict` asserts it). Each verl rank
cuts its own chunk into mini-batches (`TrainingWorker.train_mini_batch`). minirl sends the updates' batch
ONE_TO_ALL and each rank takes its share of every *global* mini-batch, so a group of N ranks makes exactly
the update of one process (`minirl/parallel.py`); the trainer still refuses batches that would not split
evenly in verl (`minirl/config.py::check_split_over_ranks`).

The rollout engine is either colocated with the actor (verl's hybrid engine: here the same ranks and the
actor's own weights) or a group of its own (`actor_rollout_ref.hybrid_engine=false`) whose weights the driver
copies from the actor's rank 0 after each update (`update_weights`). In verl even a colocated vLLM or SGLang
engine keeps its own copy of the weights (`rollout.dtype`, bfloat16 by default), re-synced every step
(`workers/engine_workers.py::ActorRolloutRefWorker.update_weights` with the `naive` backend hands the actor's
tensors to `rollout.update_weights`): colocation saves GPUs, not the copy (Chapter 10, Chapter 9's precision
mismatch).

Every call is timed on the driver (wall time, including moving the data) and on the ranks (compute
time): `WorkerGroup.timeline` holds one record per call, for Chapter 10's Gantt chart.
"""

from __future__ import annotations

import os
import socket
import time
from enum import Enum
from pathlib import Path

import torch

from minirl import models
from minirl.parallel import apply_thread_policy, chunk_bounds
from minirl.protocol import DataProto
from minirl.workers import (
    Rollout,
    build_actor,
    build_critic,
    build_reference,
    build_rollout,
    generate_rows,
    load_engine_copy,
    save_engine_copy,
    sync_due,
)


class Dispatch(str, Enum):
    """How a worker-group call spreads its arguments over the ranks (verl: `Dispatch`)."""

    ONE_TO_ALL = "ONE_TO_ALL"
    DP_COMPUTE_PROTO = "DP_COMPUTE_PROTO"
    RANK_ZERO = "RANK_ZERO"


def register(dispatch_mode: Dispatch):
    """Mark a worker method as callable from the driver with `dispatch_mode` (verl: `@register`)."""
    def decorator(method):
        method.dispatch_mode = dispatch_mode
        return method
    return decorator


def dispatch_dp_compute_data_proto(data: DataProto, world_size: int) -> list[DataProto]:
    """Split `data` into `world_size` contiguous chunks, the first ones one row longer if needed.

    verl's `Dispatch.DP_COMPUTE_PROTO` pads the batch to a multiple of the group size instead
    (`_split_args_kwargs_data_proto_with_auto_padding`), but 0.9.1's workers use
    `make_nd_compute_dataproto_dispatch_fn`, which neither pads nor accepts uneven chunks (it asserts the batch
    divides). minirl accepts any batch here; its trainer checks the sizes verl needs (`check_split_over_ranks`).
    """
    if len(data) < world_size:
        raise ValueError(f"a batch of {len(data)} rows cannot be split over {world_size} ranks: every rank needs "
                         "at least one row (raise the batch size or lower trainer.n_gpus_per_node).")
    return [data.slice(*chunk_bounds(len(data), rank, world_size)) for rank in range(world_size)]


def collect_dp_compute_data_proto(outputs: list[DataProto]) -> DataProto:
    """Concatenate the ranks' results in rank order: the rows come back in the order they were sent."""
    return DataProto.concat(outputs)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ----------------------------------------------------------------------------------------------
# The ranks: one Ray actor per rank, holding one role's model
# ----------------------------------------------------------------------------------------------


class Worker:
    """One rank of a worker group: it joins its group's process group, then builds what its role holds."""

    def __init__(self, rank: int, world_size: int, master_port: int):
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port))
        if not torch.cuda.is_available():
            os.environ["ACCELERATE_USE_CPU"] = "true"  # a gloo group on CPU (see minirl/parallel.py)
        apply_thread_policy()
        from accelerate import Accelerator

        self.accelerator = Accelerator()
        self.rank = rank

    def ready(self) -> int:
        """Answers once the rank is built."""
        return self.rank

    def call(self, method: str, *args) -> tuple[object, float]:
        """Run one of this worker's methods; returns (result, compute seconds)."""
        start = time.perf_counter()
        result = getattr(self, method)(*args)
        return result, time.perf_counter() - start


class ActorWorker(Worker):
    """The actor's ranks, with the colocated rollout engine (verl: `ActorRolloutRefWorker`, role actor_rollout).

    With `hybrid_engine=false` the engine here serves only validation (the actor's own weights); training
    samples come from the separate RolloutWorker group.
    """

    def __init__(self, rank, world_size, master_port, config, model_path: str, total_training_steps: int):
        super().__init__(rank, world_size, master_port)
        self.actor = build_actor(config, model_path, self.accelerator, total_training_steps)
        tokenizer = models.load_tokenizer(model_path)
        # hybrid_engine=false: training samples come from the RolloutWorker group; this engine only validates
        self.rollout = (build_rollout(self.actor, tokenizer, config) if config.actor_rollout_ref.hybrid_engine
                        else Rollout(self.actor, tokenizer))

    @register(Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        return self.rollout.generate_on_rows(prompts)

    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        return self.actor.compute_log_prob_on_rows(data)

    @register(Dispatch.ONE_TO_ALL)
    def update_actor(self, data: DataProto, rows_per_mini_batch: int) -> dict[str, float]:
        return self.actor.update_actor(data, rows_per_mini_batch)

    @register(Dispatch.ONE_TO_ALL)
    def update_weights(self, actor_updates: int | None = None) -> bool:
        return self.rollout.update_weights(actor_updates)

    @register(Dispatch.RANK_ZERO)
    def state_dict(self) -> dict[str, torch.Tensor]:
        return {key: value.cpu() for key, value in self.actor.unwrapped_model.state_dict().items()}

    @register(Dispatch.RANK_ZERO)
    def save_checkpoint(self, directory: Path, name: str, tokenizer=None) -> None:
        self.actor.save_checkpoint(directory, name, tokenizer)

    @register(Dispatch.RANK_ZERO)
    def save_rollout_checkpoint(self, directory: Path) -> None:
        self.rollout.save_checkpoint(directory)

    @register(Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, directory: Path, name: str) -> None:
        self.actor.load_checkpoint(directory, name)

    @register(Dispatch.ONE_TO_ALL)
    def load_rollout_checkpoint(self, directory: Path) -> None:
        self.rollout.load_checkpoint(directory)


class RolloutWorker(Worker):
    """A rollout engine in a group of its own, with its own copy of the weights (a vLLM server's place)."""

    def __init__(self, rank, world_size, master_port, config, model_path: str, total_training_steps: int):
        super().__init__(rank, world_size, master_port)
        dtype = getattr(torch, config.actor_rollout_ref.rollout.dtype)
        self.model = models.load_policy(model_path, dtype=dtype).to(self.accelerator.device).eval()
        self.model.requires_grad_(False)
        self.tokenizer = models.load_tokenizer(model_path)

    @register(Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        return generate_rows(self.model, self.tokenizer, prompts)

    @register(Dispatch.ONE_TO_ALL)
    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state_dict)  # copies and casts each tensor

    @register(Dispatch.RANK_ZERO)
    def save_checkpoint(self, directory: Path) -> None:
        save_engine_copy(self.model, directory)

    @register(Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, directory: Path) -> bool:
        return load_engine_copy(self.model, directory)


class ReferenceWorker(Worker):
    """The frozen reference policy's ranks (verl: `ActorRolloutRefWorker`, role ref)."""

    def __init__(self, rank, world_size, master_port, config, model_path: str, total_training_steps: int):
        super().__init__(rank, world_size, master_port)
        self.reference = build_reference(config, model_path, self.accelerator)

    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        return self.reference.compute_ref_log_prob_on_rows(data)


class CriticWorker(Worker):
    """The critic's ranks (verl: `TrainingWorker` over a value model)."""

    def __init__(self, rank, world_size, master_port, config, model_path: str, total_training_steps: int,
                 seed: int = 0):
        super().__init__(rank, world_size, master_port)
        self.critic = build_critic(config, model_path, self.accelerator, total_training_steps, seed)

    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_values(self, data: DataProto) -> DataProto:
        return self.critic.compute_values_on_rows(data)

    @register(Dispatch.ONE_TO_ALL)
    def update_critic(self, data: DataProto, rows_per_mini_batch: int) -> dict[str, float]:
        return self.critic.update_critic(data, rows_per_mini_batch)

    @register(Dispatch.RANK_ZERO)
    def save_checkpoint(self, directory: Path, name: str, tokenizer=None) -> None:
        self.critic.save_checkpoint(directory, name, tokenizer)

    @register(Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, directory: Path, name: str) -> None:
        self.critic.load_checkpoint(directory, name)


# ----------------------------------------------------------------------------------------------
# The driver's side: a worker group, and the rollout as the trainer sees it
# ----------------------------------------------------------------------------------------------


class WorkerGroup:
    """`world_size` Ray actors of one worker class; its registered methods become methods of the group.

    `group.compute_log_prob(batch)` splits, calls, waits and concatenates, as verl's `RayWorkerGroup` does.
    """

    def __init__(self, name: str, worker_class: type, world_size: int, *args, **kwargs):
        import ray

        self.name, self.world_size, self.timeline = name, world_size, []
        remote = ray.remote(num_cpus=0)(worker_class)  # num_cpus=0: many ranks may share few cores
        port = _free_port()
        self.workers = [remote.options(name=f"minirl-{name}-{rank}-{port}").remote(rank, world_size, port, *args,
                                                                                      **kwargs)
                        for rank in range(world_size)]
        self.ready = [worker.ready.remote() for worker in self.workers]  # resolved once every rank is built
        self._methods = {name: getattr(worker_class, name).dispatch_mode for name in dir(worker_class)
                         if hasattr(getattr(worker_class, name), "dispatch_mode")}  # inherited ones too

    def __getattr__(self, method: str):
        if method.startswith("_") or method not in self.__dict__.get("_methods", {}):
            raise AttributeError(f"worker group {self.__dict__.get('name')!r} has no registered method {method!r}")
        def call(*args):  # positional arguments only, as the ranks receive them
            return self._call(method, self._methods[method], *args)
        return call

    def _call(self, method: str, mode: Dispatch, *args):
        import ray

        start = time.perf_counter()
        if mode is Dispatch.DP_COMPUTE_PROTO:
            chunks = dispatch_dp_compute_data_proto(args[0], self.world_size)
            futures = [worker.call.remote(method, chunk, *args[1:]) for worker, chunk in zip(self.workers, chunks)]
        elif mode is Dispatch.ONE_TO_ALL:
            shared = [ray.put(arg) for arg in args]  # stored once, read by every rank
            futures = [worker.call.remote(method, *shared) for worker in self.workers]
        else:
            futures = [self.workers[0].call.remote(method, *args)]
        results = ray.get(futures)
        outputs, compute = [result for result, _ in results], max(seconds for _, seconds in results)
        output = collect_dp_compute_data_proto(outputs) if mode is Dispatch.DP_COMPUTE_PROTO else outputs[0]
        self.timeline.append({"group": self.name, "method": method, "start": start, "end": time.perf_counter(),
                              "compute_s": compute})
        return output

    def shutdown(self) -> None:
        import ray

        for worker in self.workers:
            ray.kill(worker)


class ColocatedRollout:
    """The trainer's rollout when the engine lives in the actor's group (verl's hybrid engine).

    Here the engine samples with the actor's own weights (unless rollout.dtype or weight_sync_interval gives it a
    copy, minirl/workers.py::Rollout); verl's colocated engine always holds its own copy, synced every step.
    """

    def __init__(self, actor_group: WorkerGroup):
        self.group = actor_group

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        return self.group.generate_sequences(prompts)

    def update_weights(self, actor_updates: int | None = None) -> bool:
        return self.group.update_weights(actor_updates)

    def save_checkpoint(self, directory: Path) -> None:
        self.group.save_rollout_checkpoint(directory)

    def load_checkpoint(self, directory: Path) -> None:
        self.group.load_rollout_checkpoint(directory)


class SeparateRollout:
    """The trainer's rollout when the engine is a group of its own: generation there, weights synced from the
    actor's rank 0 every `sync_interval` updates. Validation samples with the actor's weights (its colocated engine).
    """

    def __init__(self, actor_group: WorkerGroup, rollout_group: WorkerGroup, sync_interval: int):
        self.actor_group, self.group, self.sync_interval = actor_group, rollout_group, sync_interval

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        use_actor = prompts.meta_info.get("actor_weights")
        return (self.actor_group if use_actor else self.group).generate_sequences(prompts)

    def update_weights(self, actor_updates: int | None = None) -> bool:
        if not sync_due(actor_updates, self.sync_interval):
            return False
        self.group.load_weights(self.actor_group.state_dict())  # verl: checkpoint_manager.update_weights
        return True

    def save_checkpoint(self, directory: Path) -> None:
        self.group.save_checkpoint(directory)

    def load_checkpoint(self, directory: Path) -> None:
        if not self.group.load_checkpoint(directory):
            self.update_weights()


def build_ray_workers(config, model_path: str, critic_path: str | None, use_reference: bool,
                      total_training_steps: int, seed: int) -> dict:
    """Start Ray (if needed) and the worker groups; returns the trainer's {actor, rollout, reference, critic} and
    `groups`, every worker group (to shut down after the run).

    Each group has `trainer.n_gpus_per_node * trainer.nnodes` ranks (1 when n_gpus_per_node is null).
    """
    try:
        import ray
    except ImportError:
        raise ValueError("trainer.use_ray needs Ray, an optional extra: pip install -e '.[ray]' (make test and "
                         "make lab install it), or drop trainer.use_ray.") from None
    if not ray.is_initialized():
        num_cpus = config.ray_kwargs.ray_init.num_cpus or os.cpu_count()
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ranks = (config.trainer.n_gpus_per_node or 1) * config.trainer.nnodes
    args = (config, model_path, total_training_steps)
    actor = WorkerGroup("actor", ActorWorker, ranks, *args)
    if config.actor_rollout_ref.hybrid_engine:
        rollout = ColocatedRollout(actor)
    else:
        rollout = SeparateRollout(actor, WorkerGroup("rollout", RolloutWorker, ranks, *args),
                                  config.actor_rollout_ref.rollout.weight_sync_interval)
    reference = WorkerGroup("reference", ReferenceWorker, ranks, *args) if use_reference else None
    critic = (WorkerGroup("critic", CriticWorker, ranks, config, critic_path, total_training_steps, seed)
              if critic_path is not None else None)
    groups = [actor, *([rollout.group] if isinstance(rollout, SeparateRollout) else []), reference, critic]
    started = [group for group in groups if group is not None]
    try:
        ray.get([ready for group in started for ready in group.ready])  # all groups start in parallel
    except BaseException:  # a rank failed to build (bad path, memory): stop the others, keep no process behind
        for group in started:
            group.shutdown()
        raise
    return {"actor": actor, "rollout": rollout, "reference": reference, "critic": critic,
            "groups": [group for group in groups if group is not None]}
