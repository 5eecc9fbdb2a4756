"""GRPO: the group of answers to one prompt is the baseline; no critic.

Mirrors `verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage` (verl 0.9.1), the
`algorithm.adv_estimator=grpo` branch, and its two relatives registered beside it in verl:
`grpo_vectorized` (the same numbers, computed without a Python loop) and `grpo_passk` (only the best
answer of each group learns). Chapter 4 (DeepSeekMath / GRPO) reads it.
"""

from __future__ import annotations

import torch

from minirl.advantage import algorithm_setting, register_adv_est
from minirl.core import check_same_shape, group_index, group_mean_std


@register_adv_est("grpo")
@torch.no_grad()
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-relative advantages: each response is scored against the other answers to its prompt.

        R_i = sum_t token_level_rewards[i, t]                 (the outcome score)
        A_i = (R_i - mean_g) / (std_g + epsilon)              GRPO
        A_i =  R_i - mean_g                                   Dr.GRPO (norm_adv_by_std_in_grpo=False)

    over the group g of rows sharing index[i] (verl's uid: the rollout.n samples of one prompt).
    std is the unbiased standard deviation (n - 1), epsilon is added to the std. A group of one
    has mean 0 and std 1 (its advantage is its raw score / (1 + epsilon)). A group whose rewards are
    all equal gets A = 0: nothing to learn from it, which is why DAPO filters such groups out.
    The scalar A_i is broadcast over the response tokens.

    Args:
        token_level_rewards: (B, L).
        response_mask: (B, L).
        index: (B,) group labels (uid strings, or ints / an int tensor).
        epsilon: added to the std.
        norm_adv_by_std_in_grpo: divide by the group std (GRPO) or not (Dr.GRPO).
        config: unused (verl reads nothing from it either; the trainer passes the flag).
    Returns:
        (advantages, returns), both (B, L) and equal, as in verl.
    """
    check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    scores = token_level_rewards.sum(dim=-1)  # R_i (verl sums all L positions, mask or not)
    mean, std, size = group_mean_std(scores, index)
    singleton = size == 1
    mean = torch.where(singleton, torch.zeros_like(mean), mean)  # a group of one: mean 0, std 1
    std = torch.where(singleton, torch.ones_like(std), std)
    if norm_adv_by_std_in_grpo:
        scores = (scores - mean) / (std + epsilon)
    else:
        scores = scores - mean
    advantages = scores.unsqueeze(-1) * response_mask
    return advantages, advantages


@register_adv_est("grpo_vectorized")
@torch.no_grad()
def compute_grpo_vectorized_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO under the name `grpo_vectorized`: the same formula, the same numbers as `grpo`.

        A_i = (R_i - mean_g) / (std_g + epsilon)      (a group of one: mean 0, std 1)

    Mirrors `verl/trainer/ppo/core_algos.py::compute_grpo_vectorized_outcome_advantage`. verl's `grpo`
    loops over the rows in Python; its `grpo_vectorized` computes the group statistics with index_add
    (`verl/utils/groupwise.py::group_mean_std`). minirl's `grpo` is already written that way
    (`minirl.core.group_mean_std`), so this function simply calls it: the loop version and the
    vectorized version give the same advantages (tests/test_estimators.py checks it).

    What a beginner must notice:
    - Through the trainer, `algorithm.norm_adv_by_std_in_grpo=false` has no effect here: verl's
      `compute_advantage` passes the flag only to `grpo`, and this function does not read `config`,
      so it always divides by the std (its default). Use `grpo` for Dr.GRPO.
    - verl computes the group mean and std in float32 even for float64 rewards; minirl keeps the
      rewards' dtype. The two agree to float32 precision (identical for float32 rewards).

    Args:
        token_level_rewards: (B, L).
        response_mask: (B, L).
        index: (B,) group labels (uids).
        epsilon: added to the std.
        norm_adv_by_std_in_grpo: divide by the group std (default) or not; only a direct call can set it.
        config, kwargs: unused (verl's signature).
    Returns:
        (advantages, returns), both (B, L) and equal.
    """
    return compute_grpo_outcome_advantage(token_level_rewards, response_mask, index, epsilon=epsilon,
                                          norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)


@register_adv_est("grpo_passk")
@torch.no_grad()
def compute_grpo_passk_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k training: credit only the answer that makes the group's best score (arXiv 2503.19595).

    The objective is the best reward among the k answers of a group, max_j R_j (pass@k for a 0/1
    reward). Answer i's leave-one-out advantage is how much the maximum drops without it:

        A_i = max_j R_j - max_{j != i} R_j
            = R_max - R_second     for the best answer (if it is strictly the best)
            = 0                    for every other answer, and for all answers when the top is tied
        A_i = A_i / (std_g + epsilon)     if norm_adv_by_std_in_grpo (std over the group, n - 1)

    Mirrors `verl/trainer/ppo/core_algos.py::compute_grpo_passk_outcome_advantage`.

    What a beginner must notice:
    - Wrong answers get no negative advantage: nothing pushes them down. With a 0/1 reward, a group
      with exactly one right answer gives it (1 - 0) / std; two or more right answers tie at the top,
      so the whole group gets 0.
    - The flag is read from `config.norm_adv_by_std_in_grpo` (default True), as verl does; the
      `norm_adv_by_std_in_grpo` argument is overwritten by it, and a call without `config` fails.
    - Every group needs at least 2 answers (rollout.n >= 2).

    Args:
        token_level_rewards: (B, L).
        response_mask: (B, L).
        index: (B,) group labels.
        epsilon: added to the std.
        norm_adv_by_std_in_grpo: ignored (verl reads the config's value instead).
        config: the algorithm config; required.
        kwargs: unused.
    Returns:
        (advantages, returns), both (B, L) and equal.
    Raises:
        ValueError: no config, or a group of fewer than 2 answers.
    """
    check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    if config is None:
        raise ValueError("grpo_passk reads norm_adv_by_std_in_grpo from the algorithm config: pass config= "
                         "(the trainer passes config.algorithm).")
    norm_adv_by_std_in_grpo = algorithm_setting(config, "norm_adv_by_std_in_grpo", True)
    scores = token_level_rewards.sum(dim=-1)  # R_i
    advantages = torch.zeros_like(scores)
    group, num_groups = group_index(index, device=scores.device)
    for g in range(num_groups):
        rows = (group == g).nonzero().squeeze(-1)  # the rows of this group, in batch order
        if rows.numel() < 2:
            raise ValueError(f"grpo_passk needs at least 2 answers per prompt (actor_rollout_ref.rollout.n >= 2); "
                             f"group {index[rows[0].item()]!r} has {rows.numel()}.")
        top2, where = torch.topk(scores[rows], 2)
        advantage = top2[0] - top2[1]  # R_max - R_second: 0 when the top is tied
        if norm_adv_by_std_in_grpo:
            advantage = advantage / (scores[rows].std() + epsilon)
        advantages[rows[where[0]]] = advantage  # only the best answer; the others keep 0
    advantages = advantages.unsqueeze(-1) * response_mask
    return advantages, advantages
