# SOLUTIONS FILE: the answers. The stubs in exercises/ are generated from it.
"""Chapter 4 exercises: GRPO's group-relative advantages, and how verl forms the groups.

Read chapters/04_grpo.ipynb first. The twins are minirl/grpo.py (verl's
verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage) and the uid/repeat step of
minirl/trainer.py (verl's RayPPOTrainer.fit).

Grade all:   make grade
Grade one:   .venv/bin/python -m pytest tests/exercises/test_ch04_grpo.py -k group_advantages
"""

import torch


def group_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: list,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
) -> torch.Tensor:
    """Exercise 4.1: GRPO advantages, one scalar per response broadcast over its tokens.

        R_i = sum_t token_level_rewards[i, t]                 (the response's score)
        A_i = (R_i - mean_g) / (std_g + epsilon)              GRPO
        A_i =  R_i - mean_g                                   Dr.GRPO (norm_adv_by_std_in_grpo=False)
        advantages[i, t] = A_i * response_mask[i, t]

    where g is the group of rows sharing index[i] (the responses to one prompt).

    Args:
        token_level_rewards: (B, L) float; the score sits on each response's last valid token.
        response_mask: (B, L) 0/1.
        index: B group labels (e.g. uid strings); rows with equal labels form a group.
        epsilon: added to the std (not to the variance).
        norm_adv_by_std_in_grpo: divide by the group std or not.
    Returns:
        (B, L) advantages.

    Details verl is precise about:
      - std is the UNBIASED standard deviation of the group (divide by n - 1), as torch.std does;
      - a group of one response has mean 0 and std 1 (its advantage is its score / (1 + epsilon));
      - the statistics are per group, never over the whole batch.

    Hint: loop over the distinct labels; `torch.tensor([l == g for l in index])` selects a group's rows.
    """
    # BEGIN SOLUTION
    scores = token_level_rewards.sum(dim=-1)
    advantages = torch.zeros_like(scores)
    for label in set(index):
        rows = torch.tensor([other == label for other in index])
        group = scores[rows]
        if len(group) == 1:
            mean, std = torch.tensor(0.0), torch.tensor(1.0)
        else:
            mean, std = group.mean(), group.std()
        centred = group - mean
        advantages[rows] = centred / (std + epsilon) if norm_adv_by_std_in_grpo else centred
    return advantages.unsqueeze(-1) * response_mask
    # END SOLUTION


def repeat_with_uids(prompts: list[str], n: int) -> tuple[list[str], list[str]]:
    """Exercise 4.2: give each prompt a uid, then repeat prompts and uids n times, copies adjacent.

        prompts ["a", "b"], n = 3  ->  (["a", "a", "a", "b", "b", "b"],  [u_a, u_a, u_a, u_b, u_b, u_b])

    This is what verl's fit() does before generation: `uid = str(uuid.uuid4())` per prompt, then
    `batch.repeat(repeat_times=n, interleave=True)`. The uid is what groups the n responses of one
    prompt for GRPO; the prompt text cannot, because two different rows may hold the same question.

    Args:
        prompts: B prompts.
        n: rollout.n, >= 1.
    Returns:
        (repeated prompts, repeated uids), both of length B * n; the uids of two different prompts
        differ even if their texts are equal.

    Hint: `import uuid; str(uuid.uuid4())` makes a fresh id.
    """
    # BEGIN SOLUTION
    import uuid

    uids = [str(uuid.uuid4()) for _ in prompts]
    repeated_prompts = [p for p in prompts for _ in range(n)]
    repeated_uids = [u for u in uids for _ in range(n)]
    return repeated_prompts, repeated_uids
    # END SOLUTION
