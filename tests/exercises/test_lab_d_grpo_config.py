"""Grades exercises/lab_d_grpo_config.py (or solutions/ with --target solutions) against minirl's own arithmetic."""

from dataclasses import asdict

import pytest
from grading import call, fail, load_chapter, raised

from minirl.batch_math import step_arithmetic
from minirl.config import load_config

KEYS = ("data.train_batch_size", "actor_rollout_ref.rollout.n", "actor_rollout_ref.actor.ppo_mini_batch_size",
        "actor_rollout_ref.actor.ppo_epochs", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
# (train_batch_size, n, ppo_mini_batch_size, ppo_epochs, micro-batch size, processes)
VALID = [(1024, 5, 256, 1, None, 8),   # verl's Qwen3-8B GRPO script (it uses dynamic batch size instead)
         (1024, 5, 256, 1, 4, 8),      # the same with 4 rows per micro-batch: 160 / 4 = 40 passes
         (256, 1, 64, 1, 4, 1),        # the PPO quickstart on one GPU
         (32, 8, 16, 1, None, 1),      # minirl's defaults
         (32, 8, 16, 4, 24, 2),        # 4 epochs; a micro-batch that does not divide the share (64 / 24 -> 3)
         (16, 3, 4, 2, 5, 3)]          # odd numbers: 12 responses per mini-batch over 3 processes
INVALID = [((1000, 5, 256, 1, None, 8), ["ppo_mini_batch_size", "train_batch_size"]),  # 256 does not divide 1000
           ((1024, 5, 256, 1, None, 3), ["processes"]),                               # 1280 responses over 3
           ((32, 0, 16, 1, None, 1), ["rollout.n"]),
           ((32, 8, 16, 0, None, 1), ["ppo_epochs"]),
           ((32, 8, 16, 1, 0, 1), ["ppo_micro_batch_size_per_gpu"])]


ESTIMATOR = ["algorithm.adv_estimator=gae"]  # any estimator: gae also takes rollout.n=1


@pytest.fixture(scope="module")
def lab(request):
    return load_chapter(request.config, "lab_d_grpo_config")


def as_cfg(case):
    return dict(zip(KEYS, case[:5])), case[5]


def minirl_answer(case):
    cfg, processes = as_cfg(case)
    overrides = ESTIMATOR + [f"{key}={'null' if value is None else value}" for key, value in cfg.items()]
    counts = asdict(step_arithmetic(load_config(overrides, announce=False), processes))
    counts.pop("processes")
    return counts


@pytest.mark.exercise("D.1", "batch_arithmetic")
def test_d1_counts_prompts_responses_and_optimizer_steps(lab):
    for case in VALID:
        expected = minirl_answer(case)
        got = call(lab.batch_arithmetic, *as_cfg(case))
        if not isinstance(got, dict):
            fail(f"batch_arithmetic should return a dict, got {type(got).__name__}.")
        for key in ("prompts", "responses", "responses_per_mini_batch", "mini_batches_per_epoch", "optimizer_steps"):
            if got.get(key) != expected[key]:
                hint = " (ppo_mini_batch_size counts PROMPTS: times rollout.n for responses)" if "response" in key \
                    else " (one optimizer step per mini-batch, per epoch)" if key == "optimizer_steps" else ""
                fail(f"{key} for {dict(zip(KEYS, case[:5]))} on {case[5]} process(es): yours {got.get(key)!r}, "
                     f"expected {expected[key]}{hint}.")


@pytest.mark.exercise("D.1", "batch_arithmetic")
def test_d1_splits_each_mini_batch_over_processes_and_micro_batches(lab):
    for case in VALID:
        expected = minirl_answer(case)
        got = call(lab.batch_arithmetic, *as_cfg(case))
        for key in ("responses_per_process", "micro_batches_per_mini_batch"):
            if got.get(key) != expected[key]:
                fail(f"{key} for {dict(zip(KEYS, case[:5]))} on {case[5]} process(es): yours {got.get(key)!r}, "
                     f"expected {expected[key]}. Each process takes its share of ONE mini-batch; a micro-batch size "
                     "that does not divide the share leaves a shorter last micro-batch (ceil).")


@pytest.mark.exercise("D.1", "batch_arithmetic")
def test_d1_refuses_what_the_validator_refuses(lab):
    for case, names in INVALID:
        cfg, processes = as_cfg(case)
        overrides = ESTIMATOR + [f"{key}={'null' if value is None else value}" for key, value in cfg.items()]
        with pytest.raises(ValueError) as minirl_error:  # the validator (or the trainer's process check) refuses it
            step_arithmetic(load_config(overrides, announce=False), processes)
        error = raised(lab.batch_arithmetic, cfg, processes)
        if not isinstance(error, ValueError):
            fail(f"{cfg} on {processes} process(es) cannot train (minirl says: {minirl_error.value}); "
                 "batch_arithmetic must raise ValueError, got "
                 f"{'no error' if error is None else type(error).__name__}.")
        missing = [name for name in names if name not in str(error)]
        if missing:
            fail(f"the message {str(error)!r} should name {missing}, as minirl's does: {minirl_error.value}")
