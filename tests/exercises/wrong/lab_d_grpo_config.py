# A plausible wrong answer to Lab D (tests/test_exercise_harness.py grades it: every exercise must fail).
def batch_arithmetic(cfg, processes=1):
    # mistakes: ppo_mini_batch_size read as responses, epochs forgotten, no checks
    prompts, n = cfg["data.train_batch_size"], cfg["actor_rollout_ref.rollout.n"]
    mini = cfg["actor_rollout_ref.actor.ppo_mini_batch_size"]
    micro = cfg.get("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu") or mini
    return {"prompts": prompts, "responses": prompts * n, "responses_per_mini_batch": mini,
            "mini_batches_per_epoch": prompts * n // mini, "optimizer_steps": prompts * n // mini,
            "responses_per_process": mini // processes, "micro_batches_per_mini_batch": mini // processes // micro}
