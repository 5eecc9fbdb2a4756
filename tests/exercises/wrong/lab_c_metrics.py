# A plausible wrong answer to Lab C (tests/test_exercise_harness.py grades it: every exercise must fail).
CAUSES = ("healthy", "lr_too_high", "no_clip", "all_equal_rewards", "truncated", "kl_blowup", "rollout_mismatch",
          "reward_always_zero")


def diagnose(records):
    # mistakes: only the last record is read, and an empty run is called healthy
    if not records:
        return "healthy"
    last = records[-1]
    if last.get("critic/score/max", 1) == 0:
        return "reward_always_zero"
    if last.get("minirl/zero_spread_group_frac", 0) == 1:
        return "all_equal_rewards"
    if last.get("response_length/clip_ratio", 0) > 0.5:
        return "truncated"
    if last.get("training/rollout_probs_diff_mean", 0) > 0.005:
        return "rollout_mismatch"
    if last.get("actor/kl_loss", 0) > 0.1:
        return "kl_blowup"
    return "healthy"
