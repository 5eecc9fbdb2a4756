"""Chapter 10's worker groups on Ray: the dispatch modes, and a Ray run that equals the in-process run."""

import pytest
import torch

from minirl.protocol import DataProto
from minirl.single_controller import (
    ActorWorker,
    Dispatch,
    collect_dp_compute_data_proto,
    dispatch_dp_compute_data_proto,
)
from minirl.trainer import train

SMALL = ["trainer.logger=[]", "trainer.resume_mode=disable", "trainer.total_training_steps=2", "trainer.test_freq=2",
         "trainer.val_before_train=false", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
         "actor_rollout_ref.rollout.n=4", "data.val_max_samples=16", "trainer.save_freq=2",
         "algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true"]  # every role: actor, rollout, ref, critic


def test_dp_compute_proto_splits_in_order_and_collects_back():
    data = DataProto(batch={"x": torch.arange(7)}, non_tensor_batch={"uid": [str(i) for i in range(7)]})
    chunks = dispatch_dp_compute_data_proto(data, 3)
    assert [len(chunk) for chunk in chunks] == [3, 2, 2]  # the first ones one row longer
    assert collect_dp_compute_data_proto(chunks)["x"].tolist() == list(range(7))
    with pytest.raises(ValueError, match="cannot be split over 8 ranks"):
        dispatch_dp_compute_data_proto(data, 8)


def test_worker_methods_declare_their_dispatch_mode():
    assert ActorWorker.generate_sequences.dispatch_mode is Dispatch.DP_COMPUTE_PROTO
    assert ActorWorker.compute_log_prob.dispatch_mode is Dispatch.DP_COMPUTE_PROTO
    assert ActorWorker.update_actor.dispatch_mode is Dispatch.ONE_TO_ALL
    assert ActorWorker.save_checkpoint.dispatch_mode is Dispatch.RANK_ZERO


MACHINE_DEPENDENT = ("timing", "perf/", "minirl/peak_rss_gb")  # what the machine decides, not the run


def assert_same_metrics(ours, theirs):
    """Every metric but timings and throughput: relative 1e-4, or 1e-6 absolute for values near 0."""
    assert [r["step"] for r in ours] == [r["step"] for r in theirs]
    for mine, other in zip(ours, theirs):
        keys = {k for k in mine if not k.startswith(MACHINE_DEPENDENT)}
        assert keys == {k for k in other if not k.startswith(MACHINE_DEPENDENT)}
        for key in keys:
            assert mine[key] == pytest.approx(other[key], rel=1e-4, abs=1e-6), (mine["step"], key)


@pytest.fixture(scope="session")  # session: built once per worker, even when xdist interleaves files
def in_process(tmp_path_factory):
    return train([f"trainer.default_local_dir={tmp_path_factory.mktemp('local')}", *SMALL], show_progress=False)


def test_a_colocated_ray_run_equals_the_in_process_run(tmp_path, in_process):
    on_ray = train([f"trainer.default_local_dir={tmp_path}", *SMALL, "trainer.use_ray=true"], show_progress=False)
    assert_same_metrics(on_ray, in_process)
    assert not (tmp_path / "global_step_2" / "rollout").exists()  # the engine shares the actor's weights


def test_the_v1_trainer_on_ray_equals_the_in_process_legacy_run(tmp_path, in_process):
    """trainer.use_v1=true drives the same Ray worker groups through its agent loops: every metric both trainers log
    is the legacy in-process run's (v1 adds its staleness and turn metrics and logs no timing_s/reward)."""
    on_ray = train([f"trainer.default_local_dir={tmp_path}", *SMALL, "trainer.use_ray=true", "trainer.use_v1=true"],
                   show_progress=False)
    for mine, other in zip(on_ray, in_process, strict=True):
        shared = {k for k in mine if k in other and not k.startswith(MACHINE_DEPENDENT)}
        v1_only = {k for k in mine if k.startswith(("training/off_policy/", "num_turns/", "timing_s/agent_loop/"))}
        assert len(shared) > 60 and set(mine) - set(other) <= v1_only
        for key in shared:
            assert mine[key] == pytest.approx(other[key], rel=1e-4, abs=1e-6), (mine["step"], key)


def test_a_separate_rollout_on_two_ranks_equals_the_in_process_run_and_resumes(tmp_path):
    """A rollout group of its own beside the actor's, 2 ranks each: the run equals the in-process run, checkpoints
    the engine's own copy, and resumes from it on Ray. GRPO without a KL needs only these two groups (4 Ray
    processes, each importing torch); every role on Ray is the colocated test's."""
    grpo = [arg.replace("algorithm.adv_estimator=gae", "algorithm.adv_estimator=grpo")
            .replace("use_kl_in_reward=true", "use_kl_in_reward=false") for arg in SMALL]
    in_process = train([f"trainer.default_local_dir={tmp_path / 'local'}", *grpo], show_progress=False)
    layout = ["trainer.use_ray=true", "actor_rollout_ref.hybrid_engine=false", "trainer.n_gpus_per_node=2"]
    on_ray = train([f"trainer.default_local_dir={tmp_path / 'ray'}", *grpo, *layout], show_progress=False)
    assert_same_metrics(on_ray, in_process)
    assert on_ray[-1]["timing_s/update_weights"] > 0 and "critic/vf_loss" not in on_ray[-1]
    checkpoint = tmp_path / "ray" / "global_step_2"
    assert (checkpoint / "actor" / "config.json").exists() and not (checkpoint / "critic").exists()
    assert (checkpoint / "rollout" / "config.json").exists()  # the separate engine's own copy
    # resume on Ray from that checkpoint: every rank loads it, and step 3 runs
    more = [arg.replace("total_training_steps=2", "total_training_steps=3").replace("resume_mode=disable",
                                                                                     "resume_mode=auto")
            for arg in grpo]
    resumed = train([f"trainer.default_local_dir={tmp_path / 'ray'}", *more, *layout], show_progress=False)
    assert [r["step"] for r in resumed] == [3]
