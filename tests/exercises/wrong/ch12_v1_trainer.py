# A plausible wrong answer to Chapter 12 (tests/test_exercise_harness.py grades it: every exercise must fail).
import numpy as np


def dapo_evictions(values_by_uid, mode):
    # mistakes: a group of one is evicted (its std is 0), and every mode refills one for one
    evicted = [uid for uid, values in values_by_uid.items() if float(np.std(values)) == 0.0]
    return evicted, len(evicted)


def stale_evictions(groups, global_steps, threshold, strategy):
    # mistakes: span without the +1, and groups in flight are dropped too
    if threshold is None:
        return [], False
    if strategy == "drop":
        return [uid for uid, step, _ in groups if global_steps - step > threshold], False
    return [], any(not finished and global_steps - step >= threshold for _, step, finished in groups)
