"""Chapter 9's engine options: sources of training/rollout mismatch, and bypass mode's loss."""

import shutil
from pathlib import Path

import pytest
import torch
from cli import minirl_cli  # tests/cli.py: `python -m minirl ...`, forked from a process that imported it

from minirl import rollout_correction as rc
from minirl.config import RolloutCorrectionConfig, load_config
from minirl.ppo import compute_policy_loss
from minirl.trainer import LATEST_FILE, train

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "data" / "verl_scripts"
SMALL = ["trainer.logger=[]", "trainer.resume_mode=disable", "trainer.test_freq=-1", "trainer.val_before_train=false",
         "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4"]
DIFF = "training/rollout_probs_diff_mean"
NOISE_FLOOR = 1e-6  # measured: 3e-7 with the default engine


def run(tmp_path, name, *overrides, steps=2):
    return train([f"trainer.default_local_dir={tmp_path / name}", *SMALL, f"trainer.total_training_steps={steps}",
                  *overrides], show_progress=False)


@pytest.mark.parametrize("source, overrides", [
    ("bfloat16 rollout", ["actor_rollout_ref.rollout.dtype=bfloat16"]),
    ("stale weights", ["actor_rollout_ref.rollout.weight_sync_interval=2"]),
    ("top-k sampler", ["actor_rollout_ref.rollout.top_k=5"]),
    ("top-p sampler", ["actor_rollout_ref.rollout.top_p=0.9"]),
])
def test_each_mismatch_source_shows_in_the_debug_metrics_and_the_default_shows_none(tmp_path, source, overrides):
    default = run(tmp_path, "default")
    # zero up to float32 rounding: the rollout decodes token by token with a KV cache, the actor in one pass
    assert all(record[DIFF] < NOISE_FLOOR and abs(record["rollout_corr/kl"]) < NOISE_FLOOR for record in default)
    mismatched = run(tmp_path, "mismatched", *overrides)
    # stale weights: step 1 samples with fresh weights, step 2 with weights one update old
    assert mismatched[-1][DIFF] > 50 * NOISE_FLOOR, source
    assert mismatched[-1]["rollout_corr/k3_kl"] > 0, source


def test_stale_weights_are_synced_every_k_updates(tmp_path):
    history = run(tmp_path, "stale", "actor_rollout_ref.rollout.weight_sync_interval=2", steps=4)
    fresh = [record[DIFF] < NOISE_FLOOR for record in history]
    assert fresh == [True, False, True, False]  # synced after updates 2 and 4


def test_a_resumed_run_samples_with_the_same_stale_weights(tmp_path):
    stale = ["actor_rollout_ref.rollout.weight_sync_interval=3", "trainer.save_freq=2"]
    full = run(tmp_path, "full", *stale, steps=4)
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(tmp_path / "full" / "global_step_2", resumed_dir / "global_step_2")
    assert (resumed_dir / "global_step_2" / "rollout" / "config.json").exists()  # the engine's own copy is saved
    (resumed_dir / LATEST_FILE).write_text("2")
    resume = [arg for arg in SMALL if arg != "trainer.resume_mode=disable"]
    resumed = train([f"trainer.default_local_dir={resumed_dir}", *resume, "trainer.total_training_steps=4", *stale],
                    show_progress=False)
    assert [record["step"] for record in resumed] == [3, 4]
    for key in (DIFF, "critic/score/mean", "actor/pg_loss"):  # step 3 still samples with the initial weights
        assert resumed[0][key] == pytest.approx(full[2][key], rel=1e-5, abs=1e-8), key


@pytest.mark.parametrize("loss_type", ["ppo_clip", "reinforce"])
def test_bypass_mode_reuses_the_rollout_log_probs(tmp_path, loss_type):
    history = run(tmp_path, loss_type, "actor_rollout_ref.rollout.dtype=bfloat16",
                  "algorithm.rollout_correction.bypass_mode=true",
                  f"algorithm.rollout_correction.loss_type={loss_type}",
                  "algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_rs=token_k1",
                  "algorithm.rollout_correction.rollout_rs_threshold=0.5_2.0")
    last = history[-1]
    assert "timing_s/old_log_prob" not in last and DIFF not in last and "actor/entropy" not in last
    assert 0.5 < last["rollout_corr/rollout_is_mean"] < 2.0 and last["rollout_corr/kl"] != 0
    assert ("actor/pg_clipfrac" in last) == (loss_type == "ppo_clip")


def test_bad_rollout_options_say_what_to_change():
    with pytest.raises(ValueError, match="rollout.dtype='bf16' is not one of float32, bfloat16, float16"):
        load_config(["actor_rollout_ref.rollout.dtype=bf16"])
    with pytest.raises(ValueError, match="weight_sync_interval must be >= 1"):
        load_config(["actor_rollout_ref.rollout.weight_sync_interval=0"])
    with pytest.raises(ValueError, match="loss_type='ppo' is not one of ppo_clip, reinforce"):
        load_config(["algorithm.rollout_correction.loss_type=ppo"])


# ----------------------------------------------------------------------------------------------
# The losses (parity with verl: tests/parity/test_verl_parity.py)
# ----------------------------------------------------------------------------------------------


def test_bypass_ppo_clip_is_ppo_with_the_rollout_as_old_policy_and_reinforce_weights_the_log_prob():
    g = torch.Generator().manual_seed(0)
    rollout = -torch.rand(4, 6, generator=g, dtype=torch.float64) * 2
    log_prob = (rollout + 0.3 * torch.randn(4, 6, generator=g, dtype=torch.float64)).requires_grad_(True)
    adv = torch.randn(4, 6, generator=g, dtype=torch.float64)
    mask = torch.ones(4, 6, dtype=torch.int64)
    clip = RolloutCorrectionConfig(bypass_mode=True, loss_type="ppo_clip", rollout_is="token")
    loss, metrics = rc.compute_policy_loss_bypass_mode(rollout, log_prob, adv, mask, clip)
    expected, _ = compute_policy_loss(rollout, log_prob, adv, mask)
    assert torch.allclose(loss, expected)  # the IS weights are logged, not applied
    assert "rollout_corr/rollout_is_mean" in metrics and "actor/pg_clipfrac" in metrics

    reinforce = RolloutCorrectionConfig(bypass_mode=True, loss_type="reinforce", rollout_is="token",
                                        rollout_is_threshold="2.0")
    loss, _ = rc.compute_policy_loss_bypass_mode(rollout, log_prob, adv, mask, reinforce)
    weights = torch.exp(log_prob.detach() - rollout).clamp(max=2.0)
    assert torch.allclose(loss, (-adv * log_prob * weights).mean())
    (grad,) = torch.autograd.grad(loss, log_prob)
    assert torch.allclose(grad, -adv * weights / adv.numel())  # the weights are constants


def rollout_correction_script_overrides() -> list[list[str]]:
    return [(SCRIPTS / f"{name}.txt").read_text().splitlines()
            for name in ("rollout_correction_rloo", "rollout_correction_multi_rs")]


@pytest.mark.parametrize("lines", rollout_correction_script_overrides(), ids=["rloo", "multi_rs"])
def test_verl_rollout_correction_scripts_pass_config_and_a_tiny_run_completes(tmp_path, lines):
    proc = minirl_cli("config", *lines, timeout=120)
    assert proc.returncode == 0, proc.stderr
    config = load_config(lines, announce=False)
    assert config.algorithm.rollout_correction.bypass_mode is True
    tiny = ["actor_rollout_ref.model.path=tiny", "data.train_files=tiny", "data.val_files=tiny",
            "data.max_prompt_length=32", "data.max_response_length=20", "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.actor.optim.lr=1e-4", "trainer.logger=[]", "data.val_max_samples=16"]
    micro = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
             "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4"]
    history = run(tmp_path, "script", *lines, *tiny, *SMALL[4:6], *micro, "trainer.test_freq=2", steps=2)
    assert [record["step"] for record in history] == [1, 2]
    assert "rollout_corr/rollout_is_mean" in history[-1] and any(key.startswith("val-core/") for key in history[-1])
