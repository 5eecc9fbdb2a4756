# SOLUTIONS FILE: the answers. The stubs in exercises/ are generated from it.
"""Chapter 12 exercises: the v1 replay buffer's two gates (DAPO's group filter, the staleness bound).

Read chapters/12_v1_trainer.ipynb first. The twins are minirl/v1/replay_buffer.py::dapo_evictions (verl 0.9.1's
verl/trainer/ppo/v1/replay_buffer.py::ReplayBuffer._dapo_filtered_keys and the refill in `sample`) and
minirl/v1/replay_buffer.py::stale_evictions (verl's ReplayBufferAsync._stale_terminal_keys, _has_enough_samples).

Grade all:   make grade
Grade one:   make grade EX=12.1   (or .venv/bin/python -m pytest tests/exercises/test_ch12_v1_trainer.py -k dapo)
"""


def dapo_evictions(values_by_uid: dict[str, list[float]], mode: str) -> tuple[list[str], int]:
    """Exercise 12.1: DAPO's group filter, as the v1 replay buffer runs it on finished groups.

    A group is one prompt's n answers (one uid). GRPO's advantage is zero for every answer of a group whose
    answers all scored the same, so DAPO evicts such a group and dispatches new prompts in its place:

        evict the group  if  it has more than one answer  and  np.std(its values) == 0
        prompts to dispatch = 2 x evicted groups   in sync mode (refill 2k)
                            = 1 x evicted groups   in colocate_async and separate_async (refill k)

    Args:
        values_by_uid: uid -> the filter metric (algorithm.filter_groups.metric, e.g. acc) of each answer of
            that group, in the buffer's order (dicts keep insertion order).
        mode: "sync", "colocate_async" or "separate_async" (trainer.v1.trainer_mode).
    Returns:
        (the evicted uids, in the order of values_by_uid; the number of prompts to dispatch).

    Details verl is precise about:
      - a group of one answer has std 0 but is kept: there is no spread to measure;
      - "no spread" is exact (std == 0), not "small": scores 0.1 + 0.2 and 0.3 differ;
      - an unknown mode is a mistake the caller should hear about: raise ValueError naming the three modes.
    Hint: float(np.std(values)) == 0.0.
    """
    # BEGIN SOLUTION
    import numpy as np

    if mode not in ("sync", "colocate_async", "separate_async"):
        raise ValueError(f"mode={mode!r} is not one of sync, colocate_async, separate_async")
    evicted = [uid for uid, values in values_by_uid.items() if len(values) > 1 and float(np.std(values)) == 0.0]
    return evicted, (2 if mode == "sync" else 1) * len(evicted)
    # END SOLUTION


def stale_evictions(groups: list[tuple[str, int, bool]], global_steps: int, threshold, strategy: str
                    ) -> tuple[list[str], bool]:
    """Exercise 12.2: the staleness bound of the asynchronous replay buffer, at one poll of step `global_steps`.

    Each group was dispatched at some step; by step `global_steps` it has lived

        span = global_steps - dispatch_step + 1          (a group dispatched at this very step has span 1)

    trainer.v1.sampler.max_off_policy_strategy decides what happens to old groups:
        "drop": every FINISHED group with span > threshold is evicted (a new prompt replaces it); a group still
                in flight is never evicted;
        "wait": nothing is evicted; instead sampling must wait while some group IN FLIGHT has span >= threshold,
                so that it finishes and is trained before it would be too old.
    threshold None (trainer.v1.sampler.max_off_policy_threshold=null) switches the bound off.

    Args:
        groups: (uid, dispatch_step, finished) for every group in the buffer.
        global_steps: the step that is sampling (1, 2, ...).
        threshold: a positive int, or None.
        strategy: "drop" or "wait".
    Returns:
        (the evicted uids, in the order of `groups`; whether sampling must wait).

    Details: the comparison is strict for drop (span == threshold is still trainable) and inclusive for wait
    (a group at the threshold must not be left to grow older); drop never waits, wait never evicts.
    """
    # BEGIN SOLUTION
    if threshold is None:
        return [], False
    span = {uid: global_steps - step + 1 for uid, step, _ in groups}
    if strategy == "drop":
        return [uid for uid, _, finished in groups if finished and span[uid] > threshold], False
    return [], any(not finished and span[uid] >= threshold for uid, _, finished in groups)
    # END SOLUTION
