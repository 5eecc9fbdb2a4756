"""DAPO's recipe pieces: clip-higher, token-level loss, overlong reward shaping, dynamic sampling.

DAPO (Yu et al. 2025) is less a new formula than a set of recipe choices that keep long
chain-of-thought RL stable. Two of them already live elsewhere in minirl:
clip-higher is `clip_ratio_low`/`clip_ratio_high` of `minirl.ppo.compute_policy_loss`, and the
token-level loss is `loss_agg_mode="token-mean"` of `minirl.core.agg_loss`. This file holds the
other two and the recipe's defaults. Chapter 5 (DAPO / Dr.GRPO) reads it.

verl: `verl/workers/reward_manager/dapo.py::DAPORewardManager.__call__` (overlong shaping) and
the DAPO recipe's `RayDAPOTrainer.fit` / verl 0.9.1's `v1/replay_buffer.py` (dynamic sampling).
"""

from __future__ import annotations

import numpy as np
import torch

from minirl.core import group_index

# The DAPO recipe's defaults (verl config keys in comments).
CLIP_RATIO_LOW = 0.2  # actor_rollout_ref.actor.clip_ratio_low
CLIP_RATIO_HIGH = 0.28  # actor_rollout_ref.actor.clip_ratio_high: "clip-higher" leaves room to raise rare tokens
LOSS_AGG_MODE = "token-mean"  # actor_rollout_ref.actor.loss_agg_mode: long answers are not down-weighted per token
OVERLONG_BUFFER_LEN = 4096  # reward_model.overlong_buffer.len (with data.max_response_length=20480)
OVERLONG_PENALTY_FACTOR = 1.0  # reward_model.overlong_buffer.penalty_factor


def compute_overlong_penalty(
    response_lengths: torch.Tensor, max_response_length: int, overlong_buffer_len: int, penalty_factor: float
) -> torch.Tensor:
    """Soft length penalty added to the score: 0 until the buffer zone, then linear down to -penalty_factor.

        expected = max_response_length - overlong_buffer_len
        penalty  = min(-(length - expected) / overlong_buffer_len * penalty_factor, 0)

    So a response of `expected` tokens or fewer pays nothing, and one that hits
    `max_response_length` (it was cut off) pays `penalty_factor`. Mirrors the overlong branch of
    `verl/workers/reward_manager/dapo.py::DAPORewardManager.__call__`, vectorised over the batch.

    Args:
        response_lengths: (B,) number of valid response tokens (response_mask.sum(-1)).
        max_response_length: data.max_response_length.
        overlong_buffer_len: width of the penalty zone (> 0, <= max_response_length).
        penalty_factor: the penalty at max_response_length.
    Returns:
        (B,) float penalties (<= 0).
    """
    if not 0 < overlong_buffer_len <= max_response_length:
        raise ValueError(f"overlong_buffer_len must be in (0, max_response_length={max_response_length}], "
                         f"got {overlong_buffer_len}.")
    expected_len = max_response_length - overlong_buffer_len
    lengths = response_lengths if response_lengths.is_floating_point() else response_lengths.float()
    exceed_len = lengths - expected_len
    return torch.clamp(-exceed_len / overlong_buffer_len * penalty_factor, max=0.0)


def filter_groups(metric_values, index) -> tuple[torch.Tensor, int]:
    """DAPO's dynamic sampling: keep only the groups whose metric varies (or that have one member).

    A group whose responses all got the same reward (all right or all wrong) has GRPO advantage 0
    for every member: it costs compute and teaches nothing. verl keeps a group iff its population
    std (np.std, ddof=0) is > 0 or it has a single member; a std > 0 is the same as "not all values
    equal", which is what this function tests (exactly, with no floating-point tolerance).

    Mirrors the filter in the DAPO recipe's `RayDAPOTrainer.fit` (`algorithm.filter_groups.enable`,
    `algorithm.filter_groups.metric`); the trainer keeps sampling until enough groups survive.

    Args:
        metric_values: (B,) per-response metric (e.g. the score or `acc`), tensor or array.
        index: (B,) group labels.
    Returns:
        (kept_rows, num_dropped_groups): kept_rows is an int64 tensor of row indices in their
        original order; num_dropped_groups counts the groups removed.
    """
    if isinstance(metric_values, torch.Tensor):
        metric_values = metric_values.detach().cpu()
    values = torch.as_tensor(np.asarray(metric_values, dtype=np.float64))
    if values.dim() != 1 or values.shape[0] != len(index):
        raise ValueError(f"metric_values must be (B,) with one entry per index label; got {tuple(values.shape)} "
                         f"and {len(index)} labels.")
    if values.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long), 0
    inverse, num_groups = group_index(index)
    group_max = torch.full((num_groups,), -torch.inf, dtype=values.dtype).scatter_reduce(0, inverse, values, "amax")
    group_min = torch.full((num_groups,), torch.inf, dtype=values.dtype).scatter_reduce(0, inverse, values, "amin")
    size = torch.bincount(inverse, minlength=num_groups)
    keep_group = (group_max > group_min) | (size == 1)
    kept_rows = torch.nonzero(keep_group[inverse]).squeeze(-1)
    return kept_rows, int((~keep_group).sum().item())
