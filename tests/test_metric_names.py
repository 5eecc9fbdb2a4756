"""Every metric minirl logs is a metric verl 0.9.1 logs, under verl's name, or sits under `minirl/`."""

import fnmatch
from pathlib import Path

import pytest

from minirl.trainer import train

NAMES_FILE = Path(__file__).resolve().parents[1] / "minirl" / "verl_metric_names.txt"
VERL_NAMES = [line.strip() for line in NAMES_FILE.read_text().splitlines() if line.strip() and not line.startswith("#")]


def unknown_names(names) -> list[str]:
    return sorted(name for name in names if name != "step" and not name.startswith("minirl/")
                  and not any(fnmatch.fnmatchcase(name, pattern) for pattern in VERL_NAMES))


def test_the_name_list_is_not_vacuous():
    assert len(VERL_NAMES) > 150
    assert unknown_names(["actor/pg_loss", "val-core/openai/gsm8k/acc/mean@1", "val-aux/x/reward/best@4/std"]) == []
    assert unknown_names(["train/zero_spread_group_frac", "critic/acc/mean", "actor/pg_los", "timing_s/gen_max"]) == [
        "actor/pg_los", "critic/acc/mean", "timing_s/gen_max", "train/zero_spread_group_frac"]


@pytest.mark.parametrize("overrides", [
    ["algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive",
     "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.entropy_coeff=0.01",
     "algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_rs=token_k1",
     "algorithm.rollout_correction.rollout_rs_threshold=2.0", "actor_rollout_ref.rollout.val_kwargs.n=4",
     "actor_rollout_ref.rollout.val_kwargs.do_sample=true", "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
     "trainer.save_freq=2"],
    ["algorithm.adv_estimator=remax", "algorithm.filter_groups.enable=true", "data.gen_batch_size=16"],
    ["trainer.use_v1=true", "algorithm.filter_groups.enable=true",
     "algorithm.filter_groups.max_inflight_gen_batches=2"],
    ["trainer.use_v1=true", "trainer.v1.trainer_mode=colocate_async", "trainer.v1.sampler.max_off_policy_threshold=1"],
], ids=["everything_on", "remax_dapo", "v1_dapo", "v1_colocate_async"])
def test_every_logged_name_is_verls_or_minirls(tmp_path, overrides):
    history = train([f"trainer.default_local_dir={tmp_path}", "trainer.logger=[]", "trainer.resume_mode=disable",
                     "trainer.total_training_steps=2", "trainer.test_freq=2", "data.val_max_samples=16",
                     "data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=8", *overrides],
                    show_progress=False)
    names = {name for record in history for name in record}
    assert unknown_names(names) == []
    assert len(names) > 60
    if "trainer.save_freq=2" in overrides:
        for name in ("timing_s/save_checkpoint", "timing_s/testing", "training/rollout_probs_diff_mean",
                     "val-core/minirl/arithmetic/acc/mean@4", "val-core/minirl/arithmetic/acc/best@4/mean",
                     "val-aux/minirl/arithmetic/acc/worst@2/mean", "val-aux/minirl/arithmetic/reward/mean@4",
                     "actor/reward_kl_penalty_coeff", "actor/kl_loss", "actor/entropy_loss", "critic/vf_explained_var",
                     "rollout_corr/rollout_is_mean", "training/epoch", "actor/lr", "critic/lr"):
            assert name in names, name
    elif "algorithm.filter_groups.enable=true" in overrides and "trainer.use_v1=true" in overrides:
        assert {"training/filter_groups/evicted_samples", "training/off_policy/trajectory_staleness/max"} <= names
    elif "trainer.use_v1=true" in overrides:  # the asynchronous buffer's evictions
        assert "training/off_policy/evicted_samples" in names
    else:
        assert "minirl/num_gen_batches" in names
