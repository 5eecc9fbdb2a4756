# SOLUTIONS FILE: the answers. The stubs in exercises/ are generated from it.
"""Lab D exercise: the batch arithmetic of one training step, from the config keys.

Read chapters/lab_d_grpo_config.ipynb first. The twin is minirl/batch_math.py::step_arithmetic; verl does the
same sums in verl/trainer/ppo/ray_trainer.py::RayPPOTrainer._update_actor (ppo_mini_batch_size * rollout.n)
and in its workers' data-parallel split.

Grade all:   make grade
Grade one:   make grade EX=D.1   (or .venv/bin/python -m pytest tests/exercises/test_lab_d_grpo_config.py)
"""


def batch_arithmetic(cfg: dict, processes: int = 1) -> dict:
    """Exercise D.1: count one training step of the actor.

    Args:
        cfg: verl keys -> values: "data.train_batch_size", "actor_rollout_ref.rollout.n",
            "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.ppo_epochs",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" (None: one micro-batch per mini-batch).
        processes: n_gpus_per_node * nnodes.
    Returns:
        {"prompts": train_batch_size,
         "responses": prompts * n,
         "responses_per_mini_batch": ppo_mini_batch_size * n,
         "mini_batches_per_epoch": train_batch_size // ppo_mini_batch_size,
         "optimizer_steps": mini_batches_per_epoch * ppo_epochs,
         "responses_per_process": responses_per_mini_batch // processes,
         "micro_batches_per_mini_batch": ceil(responses_per_process / micro batch size), 1 if it is None}
    Raises:
        ValueError, naming the key(s) involved, when:
          - any of the sizes (train_batch_size, n, ppo_mini_batch_size, ppo_epochs, the micro-batch size if given,
            processes) is below 1;
          - ppo_mini_batch_size does not divide train_batch_size (both count prompts);
          - responses_per_mini_batch is not divisible by processes.
    """
    # BEGIN SOLUTION
    import math

    prompts, n = cfg["data.train_batch_size"], cfg["actor_rollout_ref.rollout.n"]
    mini, epochs = cfg["actor_rollout_ref.actor.ppo_mini_batch_size"], cfg["actor_rollout_ref.actor.ppo_epochs"]
    micro = cfg.get("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
    sizes = {"data.train_batch_size": prompts, "actor_rollout_ref.rollout.n": n,
             "actor_rollout_ref.actor.ppo_mini_batch_size": mini, "actor_rollout_ref.actor.ppo_epochs": epochs,
             "processes": processes}
    if micro is not None:
        sizes["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] = micro
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1 (got {value})")
    if prompts % mini:
        raise ValueError(f"actor_rollout_ref.actor.ppo_mini_batch_size={mini} must divide "
                         f"data.train_batch_size={prompts} (both count prompts)")
    per_mini = mini * n
    if per_mini % processes:
        raise ValueError(f"actor_rollout_ref.actor.ppo_mini_batch_size * rollout.n = {per_mini} responses per "
                         f"mini-batch must be divisible by the number of processes ({processes})")
    per_process = per_mini // processes
    return {"prompts": prompts, "responses": prompts * n, "responses_per_mini_batch": per_mini,
            "mini_batches_per_epoch": prompts // mini, "optimizer_steps": prompts // mini * epochs,
            "responses_per_process": per_process,
            "micro_batches_per_mini_batch": math.ceil(per_process / (micro or per_process))}
    # END SOLUTION
