"""Ordering and cutting a batch by sequence length: verl's balance_batch and dynamic micro-batches.

Mirrors `verl/utils/seqlen_balancing.py` and `verl/trainer/ppo/ray_trainer.py::RayPPOTrainer._balance_batch`.
Both are about time, not maths: a forward pass costs roughly

    workload(L) = 24576 * L + L^2        (linear layers + attention, L = prompt + response tokens)

so verl orders and groups sequences to even out the work.

    balance_order(lengths)              the order RayPPOTrainer._balance_batch gives one data-parallel rank
    token_budget_micro_batches(...)     micro-batches whose token sum stays under a budget (use_dynamic_bsz)
    row_micro_batches(n, size)          fixed-size micro-batches (ppo_micro_batch_size_per_gpu)

Micro-batching never changes an update: the loss of each micro-batch is normalised by the counts of
the whole mini-batch (see `minirl.core.agg_loss`) and their gradients add up.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import torch


def calculate_workload(lengths: torch.Tensor) -> torch.Tensor:
    """verl's cost model of a sequence of L tokens: 24576 * L + L^2. (B,) -> (B,) int64."""
    lengths = lengths.long()
    return 24576 * lengths + lengths * lengths


def balance_order(lengths: torch.Tensor) -> list[int]:
    """The row order verl's `_balance_batch` produces for one data-parallel partition.

    Sorted by workload (ties by index), then interleaved so short sequences sit at both ends and
    long ones in the middle ("pipeline bubble" reorder): sorted[0], sorted[2], ..., sorted[3], sorted[1].
    verl first splits the batch into dp_size partitions of equal token sums (Karmarkar-Karp) and
    reorders each; with one partition this is all it does. minirl applies it to the whole batch on
    any number of processes, so that the mini-batches (and so the run) do not depend on the process
    count (see minirl/README.md).

    Args:
        lengths: (B,) valid tokens per row (attention_mask.sum(-1)).
    Returns:
        A permutation of range(B).
    """
    workload = calculate_workload(lengths).tolist()
    ranked = sorted(range(len(workload)), key=lambda i: (workload[i], i))
    return ranked[::2] + ranked[1::2][::-1]


def row_micro_batches(num_rows: int, micro_batch_size: int | None) -> list[list[int]]:
    """Consecutive micro-batches of `micro_batch_size` rows (the last may be shorter); None = one batch."""
    if num_rows == 0:
        return []
    size = num_rows if micro_batch_size is None else micro_batch_size
    return [list(range(start, min(start + size, num_rows))) for start in range(0, num_rows, size)]


def token_budget_micro_batches(lengths: torch.Tensor, max_token_len: int,
                               agree: Callable[[int], int] | None = None) -> list[list[int]]:
    """Split rows into as few micro-batches as possible whose token sums are <= max_token_len.

    verl's `rearrange_micro_batches`: start from k = ceil(total tokens / budget) micro-batches,
    partition the rows into k groups of balanced workload, and add a micro-batch until every group
    fits. verl partitions with Karmarkar-Karp; minirl with the simpler greedy rule "next longest row
    into the lightest group" (the same constraint, the same update). Like verl, it orders the
    micro-batches light-heavy-light and keeps rows in their original order inside each.

    Args:
        lengths: (B,) valid tokens per row.
        max_token_len: the budget (`ppo_max_token_len_per_gpu`, `log_prob_max_token_len_per_gpu`, ...).
        agree: with several processes that train together, the maximum of an integer over all of them
            (an all-reduce): every process then cuts the same number of micro-batches, as verl does,
            so their forward and backward passes stay in step.
    Returns:
        Lists of row indices; every row appears once.
    Raises:
        ValueError: a single row is longer than the budget (raise the budget).
    """
    agree = agree or (lambda value: value)
    lengths = lengths.long().tolist()
    if max(lengths, default=0) > max_token_len:
        raise ValueError(f"a sequence has {max(lengths)} tokens, more than the micro-batch token budget "
                         f"{max_token_len}: raise ppo_max_token_len_per_gpu (or log_prob_max_token_len_per_gpu) "
                         "to at least max_prompt_length + max_response_length.")
    workload = calculate_workload(torch.tensor(lengths, dtype=torch.long)).tolist()
    order = sorted(range(len(lengths)), key=lambda i: (-workload[i], i))
    k = min(len(lengths), math.ceil(sum(lengths) / max_token_len))
    while True:
        k = agree(k)
        heap = [(0, g) for g in range(k)]  # (workload so far, group)
        groups, tokens = [[] for _ in range(k)], [0] * k
        for i in order:
            load, g = heapq.heappop(heap)
            groups[g].append(i)
            tokens[g] += lengths[i]
            heapq.heappush(heap, (load + workload[i], g))
        if not agree(int(max(tokens, default=0) > max_token_len)):
            break
        k += 1
    groups = sorted((sorted(g) for g in groups if g), key=lambda g: (-sum(workload[i] for i in g), g[0]))
    return groups[::2][::-1] + groups[1::2]
