"""DAPO's recipe pieces: clip-higher, token-level loss, overlong reward shaping, dynamic sampling.

DAPO (Yu et al. 2025) is less a new formula than a set of recipe choices that keep long
chain-of-thought RL stable. Two of them already live elsewhere in minirl:
clip-higher is `clip_ratio_low`/`clip_ratio_high` of `minirl.ppo.compute_policy_loss`, and the
token-level loss is `loss_agg_mode="token-mean"` of `minirl.core.agg_loss`. This file holds the
other two, the reward manager that applies the overlong penalty, and the recipe's defaults.
Chapter 5 (DAPO / Dr.GRPO) reads it.

verl: `verl/experimental/reward_loop/reward_manager/dapo.py::DAPORewardManager.run_single` (overlong
shaping; the older `verl/workers/reward_manager/dapo.py` has the same branch) and the DAPO recipe's
`RayDAPOTrainer.fit` / verl 0.9.1's `v1/replay_buffer.py` (dynamic sampling).
"""

from __future__ import annotations

import numpy as np
import torch

from minirl.core import group_index, place_scores_on_last_token
from minirl.rewards import NaiveRewardManager

# The DAPO recipe's defaults (verl config keys in comments).
CLIP_RATIO_LOW = 0.2  # actor_rollout_ref.actor.clip_ratio_low
CLIP_RATIO_HIGH = 0.28  # actor_rollout_ref.actor.clip_ratio_high: "clip-higher" leaves room to raise rare tokens
LOSS_AGG_MODE = "token-mean"  # actor_rollout_ref.actor.loss_agg_mode: long answers are not down-weighted per token
OVERLONG_BUFFER_LEN = 4096  # reward.reward_kwargs.overlong_buffer_cfg.len (with data.max_response_length=20480)
OVERLONG_PENALTY_FACTOR = 1.0  # reward.reward_kwargs.overlong_buffer_cfg.penalty_factor


def compute_overlong_penalty(
    response_lengths: torch.Tensor, max_response_length: int, overlong_buffer_len: int, penalty_factor: float
) -> torch.Tensor:
    """Soft length penalty added to the score: 0 until the buffer zone, then linear down to -penalty_factor.

        expected = max_response_length - overlong_buffer_len
        penalty  = min(-(length - expected) / overlong_buffer_len * penalty_factor, 0)

    So a response of `expected` tokens or fewer pays nothing, and one that hits
    `max_response_length` (it was cut off) pays `penalty_factor`. Mirrors the overlong branch of
    `verl/experimental/reward_loop/reward_manager/dapo.py::DAPORewardManager.run_single` (one response at a
    time; the older `verl/workers/reward_manager/dapo.py::DAPORewardManager.__call__` is the same), vectorised
    over the batch.

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
    std (np.std, ddof=0) is > 0 or it has a single member. This function tests "not all values equal",
    exactly, with no floating-point tolerance: the same for rewards such as 0/1 or +-1, but not for
    every float (np.std([0.1] * 3) is 1.4e-17 > 0, so verl keeps that constant group; minirl drops it).

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


class DAPORewardManager(NaiveRewardManager):
    """The naive reward manager plus DAPO's overlong penalty (`reward.reward_manager.name=dapo`).

    With an overlong buffer, each row's reward is `score + compute_overlong_penalty(length)`, placed on the
    last valid token; without one, it is the naive manager. The reward function's own values (score, acc,
    ...) are logged unchanged; with `log=True` the penalty and whether it applied are logged too
    (`minirl/overlong_reward/mean`, `minirl/overlong/mean`), the extra values verl's manager returns.

    Args:
        tokenizer, compute_score: as for `NaiveRewardManager`.
        overlong_buffer_len: reward.reward_kwargs.overlong_buffer_cfg.len, or None when the buffer is off.
        max_resp_len: reward.reward_kwargs.max_resp_len (needed with a buffer).
        penalty_factor, log: reward.reward_kwargs.overlong_buffer_cfg.{penalty_factor,log}.
    """

    def __init__(self, tokenizer, compute_score=None, overlong_buffer_len: int | None = None,
                 max_resp_len: int | None = None, penalty_factor: float = 0.0, log: bool = False):
        super().__init__(tokenizer, compute_score)
        if overlong_buffer_len is not None:
            if max_resp_len is None:
                raise ValueError("the overlong buffer needs max_resp_len (reward.reward_kwargs.max_resp_len).")
            compute_overlong_penalty(torch.zeros(1), max_resp_len, overlong_buffer_len, penalty_factor)  # checks
        self.overlong_buffer_len, self.max_resp_len = overlong_buffer_len, max_resp_len
        self.penalty_factor, self.log = penalty_factor, log

    def __call__(self, batch: dict) -> tuple[torch.Tensor, dict[str, list]]:
        """Score a batch (see `NaiveRewardManager.__call__`), then add the overlong penalty per row."""
        token_level_scores, extra = super().__call__(batch)
        if self.overlong_buffer_len is None:
            return token_level_scores, extra
        response_mask = batch["response_mask"].cpu()
        penalty = compute_overlong_penalty(response_mask.sum(-1), self.max_resp_len, self.overlong_buffer_len,
                                           self.penalty_factor)
        token_level_scores = token_level_scores + place_scores_on_last_token(penalty, response_mask)
        if self.log:
            extra["overlong_reward"] = penalty.tolist()
            extra["overlong"] = (penalty < 0).tolist()
        return token_level_scores, extra
