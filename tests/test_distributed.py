"""Several processes make exactly the run of one: the launch, the update, and whole training runs.

The README's CPU launch (`ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2`)
must start two ranks of one process group; a launch whose processes did not form a group must be
refused; and a 2-process run must write the same metrics.jsonl as a 1-process run.
"""

import json
import math
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator

from minirl import models

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from dp_update import main as update_in_one_process  # noqa: E402
from dp_update import update  # noqa: E402

LAUNCH = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
          "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
CPU_ENV = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
PROBE = "from accelerate import Accelerator; a = Accelerator(); print(f'rank {a.process_index} of {a.num_processes}')"


def free_port() -> list[str]:
    """`--main_process_port` with a port no one holds: accelerate's default, 29500, may be taken (another launch, a
    launch that has not released it yet), and torchrun then fails with EADDRINUSE."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return ["--main_process_port", str(sock.getsockname()[1])]


def launch(*args, env=CPU_ENV, timeout=600):
    return subprocess.run([*LAUNCH, *free_port(), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_readme_cpu_launch_forms_one_group_of_two(tmp_path):
    """Run the README's two-process CPU command, with a probe script in place of `-m minirl train`."""
    line = next(line for line in (REPO / "README.md").read_text().splitlines()
                if line.startswith("ACCELERATE_USE_CPU=true .venv/bin/accelerate launch"))
    words = shlex.split(line.split("#")[0])
    assert words[:3] == ["ACCELERATE_USE_CPU=true", ".venv/bin/accelerate", "launch"] and words[-3:] == ["-m", "minirl",
                                                                                                       "train"]
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    proc = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", *words[3:-3], *free_port(), str(probe)],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=CPU_ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(re.findall(r"rank \d of \d", proc.stdout)) == ["rank 0 of 2", "rank 1 of 2"], proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine this launch does form a group")
def test_trainer_refuses_processes_that_are_not_one_group(tmp_path):
    env = {k: v for k, v in CPU_ENV.items() if k != "ACCELERATE_USE_CPU"}  # two lone "rank 0 of 1" processes
    proc = launch("-m", "minirl", "train", f"trainer.default_local_dir={tmp_path / 'run'}", env=env, timeout=300)
    assert proc.returncode != 0
    assert "did not form one process group" in proc.stderr and "ACCELERATE_USE_CPU=true" in proc.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_every_process_stops_with_the_same_message_on_a_busy_directory(tmp_path):
    """Process 0 takes the run directory's lock and broadcasts the refusal: both processes exit with the message
    (none waits at a barrier for a peer that left), and nothing is written to the directory."""
    from minirl.run_dir import RunLock

    run_dir = tmp_path / "busy"
    with RunLock(run_dir):  # this test process is the first run
        proc = launch("-m", "minirl", "train", f"trainer.default_local_dir={run_dir}", "trainer.total_training_steps=1",
                      "trainer.val_before_train=false", "trainer.logger=[]", timeout=300)
    refusals = re.findall(r"error: another minirl run .*?default_local_dir\.", proc.stderr)
    assert proc.returncode != 0 and len(refusals) == 2 and refusals[0] == refusals[1], proc.stderr[-3000:]
    assert f"pid {os.getpid()}" in refusals[0]
    assert sorted(p.name for p in run_dir.iterdir()) == [".minirl.lock"]


# ----------------------------------------------------------------------------------------------
# One actor update on a fixed batch: micro-batches, dynamic batches and processes change nothing
# ----------------------------------------------------------------------------------------------

SPLITS = {
    "whole": [],
    "micro_batches": ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"],
    "dynamic": ["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=40"],
    "checkpointing": ["actor_rollout_ref.model.enable_gradient_checkpointing=true",
                      "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"],
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return models.save_tiny_model(tmp_path_factory.mktemp("model"))


def _assert_same_update(reference: dict, other: dict, label: str):
    moved = max((reference["weights"][k] - reference["before"][k]).abs().max().item() for k in reference["weights"])
    assert moved > 1e-3, "the update did not change the weights"
    for key, value in reference["weights"].items():
        assert torch.allclose(value, other["weights"][key], atol=1e-5, rtol=1e-4), f"{label}: {key}"
    for key, value in reference["metrics"].items():
        assert other["metrics"][key] == pytest.approx(value, rel=1e-4, abs=1e-6), f"{label}: {key}"


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_micro_batches_token_budgets_and_checkpointing_make_the_same_update(model_dir, agg):
    before = models.load_policy(model_dir).state_dict()
    results = {}
    for name, overrides in SPLITS.items():
        actor, metrics = update(model_dir, [*overrides, f"actor_rollout_ref.actor.loss_agg_mode={agg}"], Accelerator())
        results[name] = {"weights": actor.unwrapped_model.state_dict(), "metrics": metrics, "before": before}
    for name in ("micro_batches", "dynamic", "checkpointing"):
        _assert_same_update(results["whole"], results[name], name)


def test_micro_batch_layouts_differ():
    """The invariance test above is not vacuous: the three settings really cut the batch differently."""
    from dp_update import fixed_batch

    from minirl.workers import make_micro_batches
    batch = fixed_batch(models.build_tokenizer()).slice(0, 8)
    layouts = [make_micro_batches(batch, None, False, 0), make_micro_batches(batch, 3, False, 0),
               make_micro_batches(batch, None, True, 40)]
    assert [len(layout) for layout in layouts][:2] == [1, 3] and len(layouts[2]) > 1
    assert all(sum(batch["attention_mask"][rows].sum().item() for rows in [g]) <= 40 for g in layouts[2])


@pytest.mark.parametrize("split", ["whole", "dynamic"])
def test_two_process_update_equals_one_process_update(tmp_path, model_dir, split):
    outputs = {}
    for world in (1, 2):
        out = tmp_path / f"{world}.pt"
        if world == 1:  # in this process: a process start fewer
            update_in_one_process(str(model_dir), str(out), *SPLITS[split])
        else:
            proc = launch("tests/dp_update.py", str(model_dir), str(out), *SPLITS[split])
            assert proc.returncode == 0, proc.stderr[-3000:]
        outputs[world] = torch.load(out)
        assert outputs[world]["world_size"] == world
    outputs[1]["before"] = models.load_policy(model_dir).state_dict()
    _assert_same_update(outputs[1], outputs[2], f"2 processes, {split}")


# ----------------------------------------------------------------------------------------------
# Whole runs through the CLI: 1 vs 2 processes, 3 steps, the same metrics.jsonl
# ----------------------------------------------------------------------------------------------

RUN = ["trainer.resume_mode=disable", "trainer.total_training_steps=3", "trainer.test_freq=3", "trainer.logger=[]",
       "trainer.progress_bar=false", "data.val_max_samples=40"]
TIME_DEPENDENT = ("timing_s/", "timing_per_token_ms/", "perf/time_per_step", "perf/throughput",
                  "minirl/peak_rss_gb")  # the machine's, not the run's


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("overrides", [
    ["algorithm.adv_estimator=grpo"],
    # the critic, the adaptive KL controller (batch means of the KL) and batch-normalised IS weights in one run
    ["algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive",
     "algorithm.kl_ctrl.horizon=100", "algorithm.rollout_correction.rollout_is=token",
     "algorithm.rollout_correction.rollout_is_batch_normalize=true"],
    ["algorithm.adv_estimator=reinforce_plus_plus"],
    ["algorithm.adv_estimator=grpo", "trainer.use_v1=true", "trainer.v1.trainer_mode=colocate_async"],
], ids=["grpo", "gae_critic_adaptive_kl_in_reward_is_batch_norm", "reinforce_plus_plus_whitening",
        "v1_colocate_async"])
def test_one_and_two_processes_write_the_same_metrics(tmp_path, overrides):
    from minirl.trainer import train

    # the 1-process run in this process (its one thread, as the CLI's): a process start fewer than through the CLI
    train([f"trainer.default_local_dir={tmp_path / 'one'}", *RUN, *overrides], show_progress=False)
    two = launch("-m", "minirl", "train", f"trainer.default_local_dir={tmp_path / 'two'}", *RUN, *overrides)
    assert two.returncode == 0, two.stderr[-3000:]
    assert "minirl: 2 processes in one group" in two.stderr
    a, b = _records(tmp_path / "one"), _records(tmp_path / "two")
    assert [r["step"] for r in a] == [r["step"] for r in b] == [0, 1, 2, 3]
    compared = 0
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys(), ra.keys() ^ rb.keys()
        for key, value in ra.items():
            if key.startswith(TIME_DEPENDENT) or (isinstance(value, float) and math.isnan(value)):
                continue
            # relative 1e-4; absolute 1e-5 for quantities that are rounding noise (e.g. rollout-vs-trainer
            # probability differences of ~1e-6, which depend on how the forward passes were batched)
            assert rb[key] == pytest.approx(value, rel=1e-4, abs=1e-5), f"step {ra['step']}: {key}"
            compared += 1
    assert compared > 150
    if "gae" in overrides[0]:
        assert "critic/vf_loss" in a[-1]
    if "algorithm.use_kl_in_reward=true" in overrides:
        assert a[-1]["actor/reward_kl_penalty_coeff"] != 0.001  # the adaptive controller moved, identically


def test_dpo_and_reward_model_training_run_in_two_processes(tmp_path):
    """`accelerate launch ... -m minirl dpo` / `train-rm`: each process takes a share of every batch (TRL's
    per-device batch), gradients are averaged, metrics gathered; process 0 saves the model."""
    from minirl import data

    model_dir = models.save_tiny_model(tmp_path / "model")
    pairs = [{"prompt": [{"role": "user", "content": f"{a}+{a}=?"}],
              "chosen": [{"role": "assistant", "content": f"#### {2 * a}"}],
              "rejected": [{"role": "assistant", "content": f"#### {2 * a + 1}"}]} for a in range(16)]
    path = data.write_parquet(pairs, tmp_path / "pairs.parquet")
    common = [f"model_path={model_dir}", f"train_files={path}", "val_files=null", "per_device_train_batch_size=4",
              "num_train_epochs=3", "learning_rate=3e-3"]
    for command, out, summary_name in (("dpo", "dpo", "dpo.json"), ("train-rm", "rm", "reward_model.json")):
        proc = launch("-m", "minirl", command, *common, f"output_dir={tmp_path / out}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        history = json.loads((tmp_path / out / summary_name).read_text())["history"]
        assert len(history) == 6  # 16 pairs / (2 processes x 4) = 2 steps per epoch, 3 epochs
        assert history[-1]["loss"] < history[0]["loss"]
    first = json.loads((tmp_path / "dpo" / "dpo.json").read_text())["history"][0]
    assert math.isclose(first["loss"], math.log(2), abs_tol=1e-4)  # policy = reference at the first step
