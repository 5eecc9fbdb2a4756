"""The batch arithmetic of one training step: prompts, responses, mini-batches, micro-batches, optimizer steps.

verl's config counts **prompts**; the trainer works on **responses**. One step of the legacy trainer
(`verl/trainer/ppo/ray_trainer.py::RayPPOTrainer.fit`, and minirl's `trainer.py`):

    responses per step          = data.train_batch_size * rollout.n
    responses per mini-batch    = actor.ppo_mini_batch_size * rollout.n      (RayPPOTrainer._update_actor)
    mini-batches per epoch      = train_batch_size / ppo_mini_batch_size     (one optimizer step each)
    optimizer steps per step    = mini-batches per epoch * actor.ppo_epochs
    per process, per mini-batch = responses per mini-batch / (n_gpus_per_node * nnodes)
    micro-batches per process   = ceil(per process / ppo_micro_batch_size_per_gpu)   (gradient accumulation)
                                  or, with use_dynamic_bsz, enough to keep each under ppo_max_token_len_per_gpu tokens

Micro-batches change memory, never the update: their gradients add up to the mini-batch's. The critic has
the same arithmetic with its own `critic.ppo_mini_batch_size`, `ppo_epochs` and micro-batch size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from minirl.config import Config, check_split_over_ranks, validate_config


@dataclass
class StepArithmetic:
    """What one training step does, counted (each field is per training step unless it says otherwise)."""

    prompts: int
    """data.train_batch_size."""
    responses: int
    """prompts * rollout.n: the rows every stage after generation works on."""
    responses_per_mini_batch: int
    """ppo_mini_batch_size * rollout.n: the rows of one optimizer step."""
    mini_batches_per_epoch: int
    """train_batch_size / ppo_mini_batch_size."""
    optimizer_steps: int
    """mini_batches_per_epoch * ppo_epochs: how often the actor's weights change in one training step."""
    processes: int
    """n_gpus_per_node * nnodes (or the launch's process count)."""
    responses_per_process: int
    """responses_per_mini_batch / processes: each process's share of one mini-batch."""
    micro_batches_per_mini_batch: int | None
    """ceil(responses_per_process / ppo_micro_batch_size_per_gpu): the forward/backward passes of each process per
    optimizer step (gradient accumulation steps). 1 with no micro-batch size; None with use_dynamic_bsz (it depends
    on the lengths; see `dynamic_micro_batches`)."""


def step_arithmetic(config: Config, processes: int = 1) -> StepArithmetic:
    """Count one training step of the actor for `config` run on `processes` processes.

    Raises:
        ValueError: the validator's message (minirl/config.py::validate_config) for sizes that cannot train, or
            `check_split_over_ranks`'s when a step's or a mini-batch's responses do not split evenly over the processes.
    """
    validate_config(config)
    check_split_over_ranks(config, processes)
    actor, n = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout.n
    per_mini = actor.ppo_mini_batch_size * n
    per_process = per_mini // processes
    mini_batches = config.data.train_batch_size // actor.ppo_mini_batch_size
    if actor.use_dynamic_bsz:
        micro = None
    else:
        micro = math.ceil(per_process / (actor.ppo_micro_batch_size_per_gpu or per_process))
    return StepArithmetic(prompts=config.data.train_batch_size, responses=config.data.train_batch_size * n,
                          responses_per_mini_batch=per_mini, mini_batches_per_epoch=mini_batches,
                          optimizer_steps=mini_batches * actor.ppo_epochs, processes=processes,
                          responses_per_process=per_process, micro_batches_per_mini_batch=micro)


def dynamic_micro_batches(lengths: list[int], max_token_len: int) -> int:
    """How many micro-batches a token budget cuts one process's rows into (use_dynamic_bsz).

    At least ceil(sum(lengths) / max_token_len), and more when the rows do not pack; minirl's
    `seqlen_balancing.token_budget_micro_batches` (verl: `verl/utils/seqlen_balancing.py::rearrange_micro_batches`)
    gives the exact number. lengths: valid tokens (prompt + response) of each row.
    """
    import torch

    from minirl.seqlen_balancing import token_budget_micro_batches

    return len(token_budget_micro_batches(torch.tensor(lengths), max_token_len))


def count_actor_passes(overrides: list[str]) -> dict[str, int]:
    """Run one training step with `overrides` and count what the actor really did (to check `step_arithmetic`).

    Returns {"optimizer_steps": ..., "backward_passes": ...} of the actor over that step, counted by wrapping
    minirl/workers.py's `Actor._optimizer_step` and `Actor._backward` for the duration of the run.
    """
    from minirl.trainer import train
    from minirl.workers import Actor

    counts = {"optimizer_steps": 0, "backward_passes": 0}
    step, backward = Actor._optimizer_step, Actor._backward

    def counted_step(self):
        counts["optimizer_steps"] += 1
        return step(self)

    def counted_backward(self, loss, last):
        counts["backward_passes"] += 1
        return backward(self, loss, last)

    Actor._optimizer_step, Actor._backward = counted_step, counted_backward
    try:
        train([*overrides, "trainer.total_training_steps=1", "trainer.test_freq=-1", "trainer.val_before_train=false",
               "trainer.logger=[]", "trainer.resume_mode=disable", "trainer.save_freq=-1"], show_progress=False)
    finally:
        Actor._optimizer_step, Actor._backward = step, backward
    return counts
