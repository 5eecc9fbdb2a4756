"""Lab B: custom reward functions load by verl 0.9.1's keys and their extra keys become metrics; the legacy top-level
keys, which verl 0.9.1's main_ppo ignores, are refused; the length bonus the lab attacks is not exploited by GRPO on
the tiny task (it is nearly constant within groups)."""

from pathlib import Path

import pytest

from minirl.plot import load_metrics
from minirl.trainer import train

REPO = Path(__file__).resolve().parents[1]
QUICK = ["trainer.total_training_steps=1", "trainer.test_freq=1", "data.val_max_samples=16",
         "trainer.val_before_train=false", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
         "actor_rollout_ref.rollout.n=4", "trainer.logger=[]", "trainer.resume_mode=disable"]
REWARD = '''
def my_score(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": 0.25, "marker": 7.0}
'''


def test_a_custom_reward_function_loads_by_verls_keys_and_logs_its_extra_key(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(REWARD)
    prefix = "reward.custom_reward_function"
    train([f"{prefix}.path={path}", f"{prefix}.name=my_score", f"trainer.default_local_dir={tmp_path / 'run'}",
           *QUICK], show_progress=False)
    last = load_metrics(tmp_path / "run")[-1]
    assert last["critic/score/mean"] == pytest.approx(0.25)  # the custom function scored, not the built-in rule
    assert last["minirl/marker/mean"] == 7.0 and last["val-aux/minirl/arithmetic/marker/mean@1"] == 7.0


def test_lab_b_the_legacy_keys_are_refused_before_anything_runs(tmp_path):
    """Lab B, section 1: verl 0.9.1's main_ppo ignores the top-level custom_reward_function.* (it would score with
    default_compute_score), so minirl refuses the key and names the one to write, before loading any model."""
    path = tmp_path / "my_reward.py"
    path.write_text(REWARD)
    with pytest.raises(ValueError, match="main_ppo ignores this legacy key") as error:
        train([f"custom_reward_function.path={path}", "custom_reward_function.name=my_score",
               f"trainer.default_local_dir={tmp_path / 'run'}", *QUICK], show_progress=False)
    assert "reward.custom_reward_function.path" in str(error.value)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_lab_b_the_length_bonus_is_paid_but_not_exploited(tmp_path):
    """Lab B's finding: the tiny policy's answers to one prompt have (nearly) equal lengths, so a length bonus is
    (nearly) constant within every group and GRPO's advantage cancels it: the policy is paid more, but does not
    pad its answers (the lab saw 16.35 tokens under both rewards after 30 steps, 3 seeds)."""
    runs = {}
    for name, extra in (("rule", []), ("bonus", [f"reward.custom_reward_function.path={REPO / 'minirl/rewards.py'}",
                                                  "reward.custom_reward_function.name=length_bonus_score"])):
        train([*extra, "trainer.total_training_steps=8", "trainer.test_freq=8", "data.max_response_length=40",
               f"trainer.default_local_dir={tmp_path / name}", "trainer.logger=[]", "trainer.resume_mode=disable"],
              show_progress=False)
        runs[name] = load_metrics(tmp_path / name)
    rule, bonus = runs["rule"][-1], runs["bonus"][-1]
    val = "val-core/minirl/arithmetic/acc/mean@1"
    print(f"MEASURED labB_score {rule['critic/score/mean']:.3f} {bonus['critic/score/mean']:.3f}\n"
          f"MEASURED labB_length {rule['response_length/mean']:.2f} {bonus['response_length/mean']:.2f}\n"
          f"MEASURED labB_val {rule[val]:.3f} {bonus[val]:.3f}")
    assert bonus["critic/score/mean"] > rule["critic/score/mean"] + 0.2  # the policy is paid the bonus ...
    assert abs(bonus["response_length/mean"] - rule["response_length/mean"]) < 0.5  # ... but does not pad
    assert bonus["response_length/clip_ratio"] == 0.0
    assert abs(bonus["val-core/minirl/arithmetic/acc/mean@1"] - rule["val-core/minirl/arithmetic/acc/mean@1"]) < 0.05
