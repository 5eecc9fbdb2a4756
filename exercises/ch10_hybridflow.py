# EXERCISES FILE: fill in the functions below, then grade them with `make grade`.
# (Maintainers: this file is generated from solutions/; edit there, then run
#  `python -m minirl.book.exercises sync`.)
"""Chapter 10 exercises: HybridFlow, with a single controller, worker groups and their dispatch.

Read chapters/10_hybridflow.ipynb first. The twins are
minirl/single_controller.py::dispatch_dp_compute_data_proto and collect_dp_compute_data_proto (verl 0.9.1's
verl/single_controller/base/decorator.py, the DP_COMPUTE_PROTO dispatch mode) and the stage order of
minirl/trainer.py::PPOTrainer.train_step (verl's verl/trainer/ppo/ray_trainer.py::RayPPOTrainer.fit).

Grade all:   make grade
Grade one:   make grade EX=10.1   (or .venv/bin/python -m pytest tests/exercises/test_ch10_hybridflow.py -k dispatch)
"""

from minirl.config import Config
from minirl.protocol import DataProto


def dp_dispatch(data: DataProto, world_size: int) -> list[DataProto]:
    """Exercise 10.1 (part 1): split a batch over the ranks of a worker group (verl's DP_COMPUTE_PROTO).

    The driver holds the whole batch. A worker group has world_size ranks. A DP_COMPUTE_PROTO call
    (generation, log-probs, values) gives each rank one chunk of the rows. Each rank runs its chunk.
    The driver then joins the results (dp_collect, below).

    The chunks are contiguous blocks of rows, in row order. Their sizes are as equal as possible.
    The first (n % world_size) chunks get one row more (numpy's array_split sizes):

        n = len(data)                        (the number of rows)
        base, extra = divmod(n, world_size)
        size_r = base + 1   if r < extra     (rank r, from 0 to world_size - 1)
               = base       otherwise
        chunk r = rows [start_r, start_r + size_r), where start_r = size_0 + ... + size_(r-1)

    Example: 7 rows over 3 ranks give the rows [0, 1, 2], [3, 4] and [5, 6].

    A DataProto has three parts, and every chunk needs all of them:
      - batch: tensors, the rows along dim 0. Cut each one with the same rows.
      - non_tensor_batch: numpy arrays of Python objects (uids, ground truths). Cut them the same way.
      - meta_info: a dict of settings for the worker (temperature, ...). Every chunk gets all of it.
    data.slice(start, end) does all three at once.

    verl 0.9.1's code is verl/single_controller/base/decorator.py::dispatch_dp_compute_data_proto.
    One difference: verl pads the batch to a multiple of world_size (it repeats some rows), and drops
    the padding after the call. minirl does not pad: its chunks differ by at most one row.

    Args:
        data: the batch, a DataProto with n rows.
        world_size: the number of ranks in the group, an int >= 1.
    Returns:
        a list of world_size DataProtos, the chunk of rank 0 first.
    Raises:
        ValueError when n < world_size: some rank would get no row. Say in the message how many
        ranks there are (and how many rows).

    Details verl is precise about:
      - the blocks are contiguous: rank 0 gets the first rows. Rows are not dealt one by one
        (round-robin), so that joining the chunks in rank order gives back the original order;
      - no row is lost: the sizes add up to n, even when world_size does not divide n;
      - the extra rows go to the FIRST chunks, not to the last ones.

    Hint: the helper chunk_bounds(n, rank, world) in minirl/parallel.py computes [start, end) this way;
    write it yourself here. len(data) is the number of rows.
    """
    raise NotImplementedError("dp_dispatch: not written yet. Replace this line with your code.")


def dp_collect(outputs: list[DataProto]) -> DataProto:
    """Exercise 10.1 (part 2): join the ranks' results into one batch (verl's DP_COMPUTE_PROTO collect).

    outputs[r] is the result of rank r, for the chunk that dp_dispatch gave it. Join them in rank
    order: rank 0's rows first. Then the rows come back in the order they were sent. The driver can
    add the new fields (old_log_probs, values, ...) to its batch row by row.

    verl 0.9.1's code is verl/single_controller/base/decorator.py::collect_dp_compute_data_proto
    (it calls DataProto.concat).

    Args:
        outputs: a list of DataProtos, one per rank, in rank order. They have the same fields.
    Returns:
        one DataProto with all their rows, in order. Its meta_info is the meta_info of outputs[0].

    Hint: DataProto.concat(parts) joins the rows of every field.
    """
    raise NotImplementedError("dp_collect: not written yet. Replace this line with your code.")


def step_stages(config: Config, step: int = 1) -> list[tuple[str, str]]:
    """Exercise 10.2: the stages of one training step, in order, and the worker group that runs each one.

    The driver (the trainer's fit loop) runs one step as a list of calls. Each call goes to one worker
    group, or runs on the driver itself. Return that list as (stage, who) pairs. The stage names are
    the trainer's timing names (it logs timing_s/<stage> for each one). "who" is one of "rollout",
    "actor", "reference", "critic" or "driver".

    The full list, in this order. Some stages run only under a condition:

        ("gen", "rollout")               always: sample n responses per prompt
        ("reward", "driver")             always: score the responses
        ("old_log_prob", "actor")        unless algorithm.rollout_correction.bypass_mode is true
        ("ref", "reference")             if algorithm.use_kl_in_reward or actor_rollout_ref.actor.use_kl_loss
        ("values", "critic")             if a critic is used
        ("adv", "driver")                always: KL in the reward (if on), then the advantages
        ("update_critic", "critic")      if a critic is used
        ("update_actor", "actor")        if trainer.critic_warmup <= step
        ("update_weights", "rollout")    if trainer.critic_warmup <= step: the engine gets the new weights

    A critic is used when critic.enable is true. When critic.enable is None (null), the estimator
    decides: a critic is used for algorithm.adv_estimator == "gae" only.

    verl 0.9.1's loop is verl/trainer/ppo/ray_trainer.py::RayPPOTrainer.fit. minirl's is
    minirl/trainer.py::PPOTrainer.train_step.

    Args:
        config: a minirl.config.Config, e.g. minirl.config.load_config(["algorithm.adv_estimator=gae"]).
        step: the number of the step, from 1 (the trainer's global_step).
    Returns:
        a list of (stage, who) tuples of two strings, in the order the trainer runs them.

    Details to get right:
      - the reference runs only when a KL term needs its log-probs;
      - in bypass mode the actor does not compute old_log_prob again: the rollout's log-probs stand in;
      - the critic is updated BEFORE the actor (as in verl);
      - while step < trainer.critic_warmup, only the critic trains: no update_actor, and in minirl no
        update_weights (the actor did not change; verl still calls its weight sync there).

    Hint: read config.algorithm, config.actor_rollout_ref.actor, config.critic and config.trainer.
    """
    raise NotImplementedError("step_stages: not written yet. Replace this line with your code.")
