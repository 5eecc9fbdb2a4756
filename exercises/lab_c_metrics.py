# EXERCISES FILE: fill in the functions below, then grade them with `make grade`.
# (Maintainers: this file is generated from solutions/; edit there, then run
#  `python -m minirl.book.exercises sync`.)
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
    raise NotImplementedError("diagnose: not written yet. Replace this line with your code.")
