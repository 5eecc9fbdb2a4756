"""Data parallelism the way verl's single controller sees it: one global batch, workers on shards.

verl's driver holds the whole batch. A worker group call such as `compute_log_prob` splits it into
one chunk per data-parallel rank, runs the chunk on that rank, and concatenates the results back
into one batch (`verl/single_controller/base/decorator.py`, `Dispatch.DP_COMPUTE_PROTO`). Every
batch-level quantity (advantages and their whitening, the KL controller, metrics) is computed by
the driver on the whole batch.

minirl has no separate driver process: every process plays the driver on an identical copy of the
global batch (all built from the same seeds), and the model work is sharded with the helpers
below. So N processes compute exactly what one process computes, only faster:

    dp_chunk(data)           this process's rows of the global batch
    all_gather(data)         the global batch again, from every process's rows (in rank order)
    dp_compute(fn, data)     dp_chunk -> fn -> all_gather   (verl's DP_COMPUTE_PROTO)
    all_reduce_sum(values)   sums over processes (counts, loss pieces)
    all_reduce_max(value)    the maximum over processes (how many micro-batches to cut)

On one process they cost nothing. `check_launch` refuses a launch that started several processes
which did not form one group (two copies of the same run overwriting each other).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
import torch.distributed as dist

from minirl.protocol import DataProto

CPU_LAUNCH = "ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 -m minirl train ..."


def apply_thread_policy() -> int:
    """Use one intra-op thread per process unless OMP_NUM_THREADS says otherwise; returns the count.

    The book's models are tiny, so torch's default (one thread per core) buys little and costs a lot
    as soon as anything else runs. Measured on a 2-core machine, 15 GRPO steps of the default run:
    quiet, 10.2 s with torch's 2 threads vs 12.6 s with 1; beside one other busy process, 33.5 s vs
    19.4 s. A second notebook, the test suite or an install is always running somewhere, so minirl
    takes the predictable option. Set OMP_NUM_THREADS (e.g. OMP_NUM_THREADS=2) to choose yourself;
    real models on a GPU are not affected.
    """
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    return torch.get_num_threads()


def check_launch(accelerator) -> None:
    """Raise if the environment says N processes were launched but accelerate sees a different number.

    `accelerate launch --cpu --num_processes 2` starts one process (accelerate 1.x runs several CPU
    processes only through mpirun), and `accelerate launch --multi_gpu` on a machine without GPUs
    starts two processes that each think they are alone. Both would silently train the wrong run.
    """
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched != accelerator.num_processes:
        raise ValueError(
            f"the launcher started {launched} processes (WORLD_SIZE={launched}) but accelerate sees "
            f"{accelerator.num_processes}: they did not form one process group and would overwrite each other's "
            f"run. On CPUs launch with `{CPU_LAUNCH}` (or `ACCELERATE_USE_CPU=true torchrun --nproc_per_node 2 "
            "-m minirl train ...`); on GPUs with `accelerate launch --multi_gpu --num_processes N -m minirl train`.")


def chunk_bounds(num_rows: int, rank: int, world: int) -> tuple[int, int]:
    """Rows [start, end) of rank `rank` when `num_rows` rows are split into `world` near-equal chunks.

    The first num_rows % world chunks get one row more (numpy's array_split), so any batch size works.
    """
    base, extra = divmod(num_rows, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)


def dp_chunk(data: DataProto, accelerator) -> DataProto:
    """This process's contiguous chunk of the global batch `data` (all of it on one process)."""
    if accelerator.num_processes == 1:
        return data
    start, end = chunk_bounds(len(data), accelerator.process_index, accelerator.num_processes)
    return data.slice(start, end)


def all_gather(data: DataProto, accelerator) -> DataProto:
    """Concatenate every process's `data` in rank order; every process gets the result."""
    if accelerator.num_processes == 1:
        return data
    parts = [None] * accelerator.num_processes
    dist.all_gather_object(parts, data)
    return DataProto.concat([part for part in parts if len(part)])


def dp_compute(fn: Callable[[DataProto], DataProto], data: DataProto, accelerator) -> DataProto:
    """Run `fn` on this process's chunk of the global batch and return the gathered global result."""
    return all_gather(fn(dp_chunk(data, accelerator)), accelerator)


def all_reduce_sum(values: list[float], accelerator) -> list[float]:
    """Sum each value over all processes (float64)."""
    if accelerator.num_processes == 1:
        return [float(v) for v in values]
    tensor = torch.tensor(values, dtype=torch.float64, device=accelerator.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def all_reduce_max(value: float, accelerator) -> float:
    """The maximum of `value` over all processes."""
    if accelerator.num_processes == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=accelerator.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.item()
