# SOLUTIONS FILE: the answers. The stubs in exercises/ are generated from it.
"""Chapter 7 exercises: critic-free baselines (RLOO, ReMax) and an estimator of your own in the registry.

Read chapters/07_baselines.ipynb first. The twins are minirl/rloo.py (verl's
verl/trainer/ppo/core_algos.py::compute_rloo_outcome_advantage), minirl/remax.py (verl's
compute_remax_outcome_advantage) and minirl/advantage.py (verl's register_adv_est /
get_adv_estimator_fn in core_algos.py and compute_advantage in verl/trainer/ppo/ray_trainer.py).

Grade all:   make grade
Grade one:   make grade EX=7.1   (or .venv/bin/python -m pytest tests/exercises/test_ch07_baselines.py -k rloo)
"""

import torch


def rloo_advantages(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: list) -> torch.Tensor:
    """Exercise 7.1: RLOO, REINFORCE with a leave-one-out baseline from the same prompt's other samples.

        R_i = sum_t token_level_rewards[i, t]                      (the response's score)
        A_i = R_i - mean_{j in g, j != i} R_j                      group g of size n >= 2
        A_i = R_i                                                  group of one (no other sample)
        advantages[i, t] = A_i * response_mask[i, t]

    where g is the group of rows sharing index[i] (the n responses to one prompt).

    Args:
        token_level_rewards: (B, L) float.
        response_mask: (B, L) 0/1.
        index: B group labels (uid strings); rows with equal labels form a group, wherever they sit.
    Returns:
        (B, L) advantages (verl also returns them as the returns).

    Details verl is precise about:
      - the baseline leaves sample i OUT, so it does not depend on i's own reward and the gradient
        stays unbiased; the full group mean (i included) gives R_i - mean_g = (n - 1) / n * A_i, too small;
      - a group of one keeps its raw score R_i (verl's `rloo`; its `rloo_vectorized` gives 0);
      - no division by a std: RLOO only centres.

    Hint: loop over the distinct labels; torch.tensor([label == g for label in index]) selects group g's
    rows (the grouping of Exercise 4.1, group_advantages). Sum of the others = group sum - R_i.
    """
    # BEGIN SOLUTION
    scores = token_level_rewards.sum(dim=-1)
    advantages = torch.zeros_like(scores)
    for label in set(index):
        rows = torch.tensor([other == label for other in index])
        group = scores[rows]
        n = len(group)
        advantages[rows] = group if n == 1 else group - (group.sum() - group) / (n - 1)
    return advantages.unsqueeze(-1) * response_mask
    # END SOLUTION


def remax_advantages(
    token_level_rewards: torch.Tensor, reward_baselines: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exercise 7.2: ReMax, reward-to-go minus the reward of the greedy answer to the same prompt.

        G_t = sum_{s >= t} token_level_rewards[:, s] * response_mask[:, s]      reward-to-go
        advantages[:, t] = G_t - b * response_mask[:, t]                           b = reward_baselines[i]
        returns = G

    Args:
        token_level_rewards: (B, L) float.
        reward_baselines: (B,) float, the score of the greedy response to each row's prompt (the
            trainer generates it with do_sample=False and scores it).
        response_mask: (B, L) 0/1.
    Returns:
        (advantages, returns), each (B, L); both 0 on padding.
    Raises:
        ValueError: if reward_baselines is not of shape (B,). verl does not check: a (B, 1) tensor
            would broadcast silently into a (B, B, L) result.

    Details verl is precise about:
      - rewards on padded positions are multiplied out BEFORE the reverse cumulative sum;
      - no discount and no whitening; the baseline is subtracted on every valid token.

    Hint: reward-to-go is a reversed cumulative sum: x.flip(-1).cumsum(-1).flip(-1).
    """
    # BEGIN SOLUTION
    if reward_baselines.shape != token_level_rewards.shape[:1]:
        raise ValueError(f"reward_baselines must have shape ({token_level_rewards.shape[0]},), "
                         f"got {tuple(reward_baselines.shape)}")
    returns = (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
    advantages = returns - reward_baselines.unsqueeze(-1) * response_mask
    return advantages, returns
    # END SOLUTION


def register_my_estimator():
    """Exercise 7.3: write a new advantage estimator and register it as "reinforce_median".

    REINFORCE with the MEDIAN of the group as the baseline:

        R_i = sum_t token_level_rewards[i, t]
        A_i = R_i - median_g                      g: the rows sharing index[i]
        advantages[i, t] = A_i * response_mask[i, t],    returns = advantages

    The median here is the ordinary one: the middle value of an odd-sized group, the MEAN of the two
    middle values of an even-sized group (torch.quantile(x, 0.5) computes it). Beware torch.median:
    for an even count it returns the LOWER of the two middle values, which is not what is asked.
    A group of one has itself as median (A = 0). index=None means the whole batch is one group.

    Inside this function, define the estimator with verl's keyword signature and register it:

        from minirl.advantage import register_adv_est

        @register_adv_est("reinforce_median")
        def reinforce_median(token_level_rewards, response_mask, index=None, config=None, **kwargs):
            ...
            return advantages, returns                       # each (B, L)

    The trainer (minirl.advantage.compute_advantage, like verl's) finds it by name and calls it with
    keyword arguments only: token_level_rewards=, response_mask=, config=, index= (the uids, a numpy
    object array), and reward_baselines= when the batch has them. `**kwargs` swallows the arguments
    you do not use.

    Returns:
        the registered function.

    Hint: `set(index)` gives the labels (numpy string arrays work as lists do); for a float tensor
    x of one group, torch.quantile(x, 0.5) is its median.
    """
    # BEGIN SOLUTION
    from minirl.advantage import register_adv_est

    @register_adv_est("reinforce_median")
    def reinforce_median(token_level_rewards, response_mask, index=None, config=None, **kwargs):
        scores = token_level_rewards.sum(dim=-1)
        labels = [0] * len(scores) if index is None else list(index)
        advantages = torch.zeros_like(scores)
        for label in set(labels):
            rows = torch.tensor([other == label for other in labels])
            advantages[rows] = scores[rows] - torch.quantile(scores[rows], 0.5)
        advantages = advantages.unsqueeze(-1) * response_mask
        return advantages, advantages

    return reinforce_median
    # END SOLUTION
