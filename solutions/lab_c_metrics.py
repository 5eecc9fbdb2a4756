# SOLUTIONS FILE: the answers. The stubs in exercises/ are generated from it.
"""Lab C exercise: name the cause of a broken run from its metrics.jsonl.

Read chapters/lab_c_metrics.ipynb first: its gallery (section 3) shows the signature of every cause. The graded
runs are real 12-step runs of the same cases with another seed (minirl/book/broken_runs.py::graded_runs). Every
hidden run has the same metric keys, and none states its config (no actor/lr, no timings): read what the run did.

Grade all:   make grade
Grade one:   make grade EX=C.1   (or .venv/bin/python -m pytest tests/exercises/test_lab_c_metrics.py)
"""

CAUSES = ("healthy", "lr_too_high", "no_clip", "all_equal_rewards", "truncated", "kl_blowup", "rollout_mismatch",
          "reward_always_zero")


def diagnose(records: list[dict]) -> str:
    """Exercise C.1: the cause of a run, one of CAUSES, from the records of its metrics.jsonl.

    records: one dict per line of metrics.jsonl, in order (minirl.plot.load_metrics(run_dir)). The first record
    usually holds only the validation before step 1; training steps have "timing_s/step". Every training step of
    a hidden run logs the same metrics ("actor/kl_loss" included: the KL to the reference is measured in every run).
    Returns one of CAUSES.
    Raises:
        ValueError: records holds no training step (nothing to diagnose); say so in the message.
    Hint: read the whole run, not its last record, and check the clearest signatures first.
    """
    # BEGIN SOLUTION
    steps = [r for r in records if "timing_s/step" in r]
    if not steps:
        raise ValueError("these records hold no training step (no 'timing_s/step'): pass the records of a run's "
                         "metrics.jsonl, e.g. minirl.plot.load_metrics(run_dir), after at least one step")

    def series(key):
        return [r[key] for r in steps if key in r]

    def median(values):
        return sorted(values)[len(values) // 2] if values else 0.0

    if max(series("critic/score/max")) == 0:  # never a single right answer, from the first step
        return "reward_always_zero"
    if max(series("actor/ppo_kl")) > 0.2:  # one update moved the policy far from its data
        return "lr_too_high"
    if median(series("minirl/zero_spread_group_frac")) == 1:  # every group one score, on most steps
        return "all_equal_rewards"
    if median(series("response_length/clip_ratio")) > 0.5:
        return "truncated"
    if max(series("training/rollout_probs_diff_mean")) > 0.005:  # verl's FAQ: normal is below 0.005
        return "rollout_mismatch"
    if median(series("actor/ppo_kl")) > 0.002 and max(series("actor/pg_clipfrac")) < 0.005:
        return "no_clip"  # big steps and yet almost no token clipped (a clipped 4-epoch run: a percent or two)
    if max(series("actor/kl_loss")) > 0.1:  # after no_clip: its unclipped drift also leaves the reference
        return "kl_blowup"
    return "healthy"
    # END SOLUTION
