# SOLUTIONS FILE: the answers. The stubs in exercises/ are generated from it.
"""Chapter 5 exercises: DAPO's overlong reward shaping and its dynamic sampling (the group filter).

Read chapters/05_dapo.ipynb first. The twins are minirl/dapo.py::compute_overlong_penalty (verl 0.9.1's
verl/experimental/reward_loop/reward_manager/dapo.py::DAPORewardManager.run_single, its overlong branch,
one response at a time) and minirl/dapo.py::filter_groups (the DAPO recipe's rule "np.std(values) > 0 or
len(values) == 1" per uid; verl 0.9.1 applies it inside its replay buffer,
verl/trainer/ppo/v1/replay_buffer.py::ReplayBuffer._dapo_filtered_keys, with no callable twin).

Grade all:   make grade
Grade one:   make grade EX=5.1   (or .venv/bin/python -m pytest tests/exercises/test_ch05_dapo.py -k overlong)
"""

import torch


def compute_overlong_penalty(
    response_lengths: torch.Tensor, max_response_length: int, overlong_buffer_len: int, penalty_factor: float
) -> torch.Tensor:
    """Exercise 5.1: DAPO's soft overlong punishment, a length penalty added to each response's score.

    A response cut off at max_response_length never reached its answer, and its reward of 0 cannot tell
    "wrong" from "too long". DAPO (Yu et al. 2025, "Overlong Reward Shaping") grades length softly instead:
    nothing before a buffer zone at the end of the budget, then a penalty growing linearly to penalty_factor:

        expected = max_response_length - overlong_buffer_len        (the zone starts after this many tokens)
        exceed   = length - expected
        penalty  = min(-exceed / overlong_buffer_len * penalty_factor, 0)

            length <= expected                ->  0.0
            length == max_response_length     ->  -penalty_factor
            in between                        ->  linear, from 0 down to -penalty_factor

    The reward is then score + penalty, on the response's last token. verl 0.9.1 adds it in its "dapo" reward
    manager (reward.reward_manager.name=dapo, reward.reward_kwargs.overlong_buffer_cfg.{enable,len,
    penalty_factor,log}, reward.reward_kwargs.max_resp_len), one response at a time; here the whole batch at once.

    Args:
        response_lengths: (B,) valid tokens per response (response_mask.sum(-1)), each in
            [0, max_response_length]: an integer tensor (what .sum gives) or a floating one.
        max_response_length: data.max_response_length (verl's reward.reward_kwargs.max_resp_len).
        overlong_buffer_len: the width of the penalty zone, 0 < overlong_buffer_len <= max_response_length.
        penalty_factor: the penalty at max_response_length, >= 0 (DAPO's 1.0).
    Returns:
        (B,) floating-point penalties, each <= 0.
    Raises:
        ValueError: unless 0 < overlong_buffer_len <= max_response_length (verl asserts the same when it builds
            the manager): a zone of width 0 would divide by 0, and one wider than the budget makes no sense.

    Details verl is precise about:
      - it is min(..., 0), a clamp at 0: a short response earns no bonus (the formula alone is positive
        there), and it is not abs(): a short response is not punished like a long one;
      - the zone is the LAST overlong_buffer_len tokens of the budget: DAPO trains with a budget of 20480 tokens
        and a 4096-token buffer, so responses of up to 16384 tokens pay nothing;
      - lengths are counts, often int64, but the penalty is fractional: return floats (in torch, / is true
        division; // would floor);
      - the penalty is a reward, a constant for the policy gradient: no gradient flows through it.

    Hint: torch.clamp(x, max=0.0) is min(x, 0) elementwise; .float() turns an integer tensor into a float one.
    """
    # BEGIN SOLUTION
    if not 0 < overlong_buffer_len <= max_response_length:
        raise ValueError(f"overlong_buffer_len must be in (0, max_response_length={max_response_length}], "
                         f"got {overlong_buffer_len}.")
    expected_len = max_response_length - overlong_buffer_len
    lengths = response_lengths if response_lengths.is_floating_point() else response_lengths.float()
    exceed_len = lengths - expected_len
    return torch.clamp(-exceed_len / overlong_buffer_len * penalty_factor, max=0.0)
    # END SOLUTION


def filter_groups(metric_values, index) -> tuple[torch.Tensor, int]:
    """Exercise 5.2: DAPO's dynamic sampling: drop the groups whose responses all scored the same.

    GRPO compares each response with the others to the same prompt. When they all got the same reward (all
    right, or all wrong) every advantage in the group is 0: the group costs a forward and a backward pass and
    teaches nothing, and the better the policy, the more prompts it gets all right. DAPO (Yu et al. 2025,
    "Dynamic Sampling") drops those groups and samples more prompts until the batch is full of groups that vary:

        a group = the rows that share one index label (verl's uid, one per prompt)
        keep a group  iff  its values are not all equal,  or  it has a single member
        kept_rows          = the rows of the kept groups, in their original order
        num_dropped_groups = how many groups were dropped

    The DAPO recipe writes the rule as `np.std(values) > 0 or len(values) == 1` per uid. verl 0.9.1's keys:
    algorithm.filter_groups.enable=True, algorithm.filter_groups.metric (reward, the default, or a value the
    reward function returns, e.g. acc) and algorithm.filter_groups.max_num_gen_batches (0 = no limit).
    minirl/trainer.py calls this filter on every generated batch and keeps generating until
    data.train_batch_size groups have survived.

    Args:
        metric_values: (B,) one number per response (its reward, or its acc): a torch tensor, a numpy array
            or a list.
        index: B group labels, a list or numpy array of hashables (uid strings in the trainer). A group's rows
            need NOT be adjacent: labels can come in any order.
    Returns:
        (kept_rows, num_dropped_groups): kept_rows a 1-D int64 tensor of row numbers, ascending (the trainer
        passes it to batch.select_idxs); num_dropped_groups a Python int.
    Raises:
        ValueError: if metric_values is not 1-D, or its length differs from len(index).

    Details minirl is precise about:
      - "all equal" is exact: 1.0 and 1.0 + 1e-12 differ, so their group is kept. No tolerance, and no
        float32 on the way (it rounds both to 1.0): compare the values as given, or as float64;
      - a group of ONE response is kept: its np.std is 0, but the recipe keeps it (`or len == 1`). Beware
        torch.std: of one value it is nan (it divides by n - 1 = 0), and nan > 0 is False;
      - a group is dropped whatever value it shares, not only 0 and 1: a group all 0.5 teaches nothing either,
        so "keep if 0 < mean < 1" is right only for 0/1 rewards;
      - the rows keep their order: ascending row numbers, not grouped by label;
      - an empty batch gives an empty int64 tensor and 0 (torch.tensor([]) is float32: pass dtype=torch.long).
      (np.std can come out a rounding error above 0 for equal values, e.g. np.std([0.1] * 3) = 1.4e-17, so the
      recipe keeps that group; minirl tests equality. The grader uses values on which the two agree.)

    Hint: np.asarray(values, dtype=np.float64) reads an array or a list (a tensor: .detach().cpu() first);
    collect each label's row numbers in a dict; a group varies iff max(values) > min(values).
    """
    # BEGIN SOLUTION
    import numpy as np

    if isinstance(metric_values, torch.Tensor):
        metric_values = metric_values.detach().cpu()
    values = np.asarray(metric_values, dtype=np.float64)
    if values.ndim != 1 or len(values) != len(index):
        raise ValueError(f"metric_values must be (B,) with one entry per index label; got shape {values.shape} "
                         f"and {len(index)} labels.")
    rows_of: dict = {}
    for row, label in enumerate(index):
        rows_of.setdefault(label, []).append(row)
    keep = np.zeros(len(values), dtype=bool)
    num_dropped = 0
    for rows in rows_of.values():
        group = values[rows]
        if len(rows) == 1 or group.max() > group.min():
            keep[rows] = True
        else:
            num_dropped += 1
    return torch.as_tensor(np.flatnonzero(keep), dtype=torch.long), num_dropped
    # END SOLUTION
