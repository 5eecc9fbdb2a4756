"""verl 0.9.1's v1 trainer (minirl/v1/): agent-loop sessions, the LLM server's batching, the replay buffer's
group semantics and DAPO refills, and v1 sync against the legacy trainer."""

import asyncio
import math

import pytest
import torch

from minirl import config as config_lib
from minirl.plot import load_metrics
from minirl.protocol import DataProto
from minirl.trainer import train
from minirl.v1.agent_loop import (
    AGENT_LOOP_REGISTRY,
    AgentLoopBase,
    AgentLoopManager,
    AgentLoopOutput,
    LLMServer,
    outputs_to_batch,
    register_agent_loop,
)
from minirl.v1.replay_buffer import PromptGroup, ReplayBuffer, Trajectory

PAD, EOS = 0, 2
QUIET = ["trainer.logger=[]", "trainer.resume_mode=disable", "data.train_batch_size=8",
         "actor_rollout_ref.actor.ppo_mini_batch_size=4"]


# ----------------------------------------------------------------------------------------------
# The server and the agent loops, with a stand-in engine
# ----------------------------------------------------------------------------------------------

class EchoRollout:
    """A stand-in engine: answers each row with (seed % 7 + 1) tokens of value seed % 97 + 3, then EOS (= 2); records
    each batched call's prompts."""

    def __init__(self):
        self.calls = []

    def generate_sequences(self, batch: DataProto) -> DataProto:
        self.calls.append((batch["input_ids"].clone(), batch["attention_mask"].clone(), dict(batch.meta_info)))
        rows, length = len(batch), batch.meta_info["response_length"]
        responses = torch.full((rows, length), PAD)
        mask = torch.zeros((rows, length), dtype=torch.long)
        for row, seed in enumerate(batch["row_seed"].tolist()):
            n = min(seed % 7 + 1, length - 1)
            responses[row, :n], responses[row, n] = seed % 97 + 3, 2
            mask[row, :n + 1] = 1
        return DataProto(batch={"responses": responses, "response_mask": mask,
                                "rollout_log_probs": -0.5 * mask.float()})


class Tokenizer:
    pad_token_id = PAD


@register_agent_loop("test_two_turns")
class TwoTurns(AgentLoopBase):
    """Generates, waits on something else (a tool call stand-in), appends an observation, generates again."""

    async def run(self, sampling_params, **kwargs):
        prompt = list(kwargs["prompt_ids"])
        first = await self.server.generate(prompt, sampling_params, kwargs["seed"])
        await asyncio.sleep(0.002 * (kwargs["session_id"] % 3))  # sessions wait different times
        observation = [9, 9]
        second = await self.server.generate(prompt + first.token_ids + observation, sampling_params, kwargs["seed"] + 1)
        response = first.token_ids + observation + second.token_ids
        return AgentLoopOutput(prompt, response, [1] * len(first.token_ids) + [0, 0] + [1] * len(second.token_ids),
                               first.log_probs + [0.0, 0.0] + second.log_probs, num_turns=4)


def test_the_server_answers_waiting_sessions_in_one_batch_per_turn():
    rollout = EchoRollout()
    server = LLMServer(rollout, PAD, EOS, response_length=16)
    manager = AgentLoopManager(server, Tokenizer(), max_prompt_length=8)
    sessions = [{"agent_name": "test_two_turns", "prompt_ids": [5] * (1 + i), "session_id": i, "seed": 10 * i}
                for i in range(4)]
    outputs = manager.run_sessions(sessions, {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": -1})
    assert len(rollout.calls) == 2  # one batched call per turn, although the sessions resumed at different times
    first_ids, first_mask, meta = rollout.calls[0]
    assert first_ids.shape == (4, 4) and first_mask[0].tolist() == [0, 0, 0, 1]  # left-padded to the longest
    assert meta["response_length"] == 16 and meta["do_sample"] is True
    for i, output in enumerate(outputs):
        first = [10 * i % 97 + 3] * min(10 * i % 7 + 1, 15) + [2]
        assert output.response_ids[:len(first)] == first and output.response_ids[len(first):len(first) + 2] == [9, 9]
        assert sum(output.response_mask) == len(output.response_ids) - 2 and output.num_turns == 4


def test_a_session_answer_does_not_depend_on_its_batch():
    """Each request carries its seed: the same session alone or among others gets the same tokens."""
    def answer(sessions):
        server = LLMServer(EchoRollout(), PAD, EOS, response_length=16)
        manager = AgentLoopManager(server, Tokenizer(), max_prompt_length=8)
        return manager.run_sessions(sessions, {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": -1})

    target = {"agent_name": "test_two_turns", "prompt_ids": [4, 4], "session_id": 0, "seed": 33}
    others = [{"agent_name": "test_two_turns", "prompt_ids": [6], "session_id": 1, "seed": 5}]
    assert answer([target])[0] == answer([*others, target])[1]


def test_an_unknown_agent_loop_and_a_failing_session_are_clear_errors():
    server = LLMServer(EchoRollout(), PAD, EOS, response_length=8)
    manager = AgentLoopManager(server, Tokenizer(), max_prompt_length=8)
    with pytest.raises(ValueError, match="not a registered agent loop"):
        manager.run_sessions([{"agent_name": "tool_agnet", "seed": 0}], {})
    with pytest.raises(ValueError, match="default_agent_loop"):
        AgentLoopManager(server, Tokenizer(), 8, default_agent_loop="nope")

    @register_agent_loop("test_failing")
    class Failing(AgentLoopBase):
        async def run(self, sampling_params, **kwargs):
            raise RuntimeError("the tool crashed")

    try:
        with pytest.raises(RuntimeError, match="the tool crashed"):
            manager.run_sessions([{"agent_name": "test_failing", "seed": 0}], {})
    finally:
        AGENT_LOOP_REGISTRY.pop("test_failing")


class CountRollout:
    """A stand-in engine that ends every answer (EOS) when prompt plus answer reach 12 tokens, whatever the seed."""

    def generate_sequences(self, batch: DataProto) -> DataProto:
        rows, length = len(batch), batch.meta_info["response_length"]
        responses = torch.full((rows, length), PAD)
        mask = torch.zeros((rows, length), dtype=torch.long)
        for row, used in enumerate(batch["attention_mask"].sum(-1).tolist()):
            for t in range(length):
                responses[row, t] = EOS if used + t + 1 >= 12 else 5
                mask[row, t] = 1
                if responses[row, t] == EOS:
                    break
        return DataProto(batch={"responses": responses, "response_mask": mask, "rollout_log_probs": -mask.float()})


@register_agent_loop("test_one_turn")
class OneTurn(AgentLoopBase):
    async def run(self, sampling_params, **kwargs):
        output = await self.server.generate(kwargs["prompt_ids"], sampling_params, kwargs["seed"])
        return AgentLoopOutput(kwargs["prompt_ids"], output.token_ids, [1] * len(output.token_ids),
                               output.log_probs, extra_fields={"min_global_steps": output.min_global_steps,
                                                               "max_global_steps": output.max_global_steps})


def test_a_partial_rollout_resumes_with_the_new_weights():
    """Stopped after one piece of 3 tokens, the request waits in the server; after a weight sync it resumes from
    prompt + its tokens, and the answer records both weight versions."""
    server = LLMServer(CountRollout(), PAD, EOS, response_length=16)
    manager = AgentLoopManager(server, Tokenizer(), max_prompt_length=8)
    (task,) = manager.start_sessions([{"agent_name": "test_one_turn", "prompt_ids": [7] * 4, "seed": 1}], {})
    polls = []
    manager.drive(until=lambda: polls.append(1) or len(polls) > 1, max_new_tokens=3)  # one piece, then stop
    assert not task.done() and server.waiting[0].token_ids == [5, 5, 5]
    server.global_steps = 1  # the weight sync
    manager.drive(max_new_tokens=3)
    output = task.result()
    assert output.response_ids == [5] * 7 + [EOS]  # what one uninterrupted call gives
    assert (output.extra_fields["min_global_steps"], output.extra_fields["max_global_steps"]) == (0, 1)


def test_outputs_become_the_legacy_layout():
    outputs = [AgentLoopOutput([7, 8, 9], [4, 2], [1, 1], [-0.1, -0.2]),
               AgentLoopOutput([7], [5, 9, 9, 6], [1, 0, 0, 1], [-0.3, 0.0, 0.0, -0.4])]
    batch = outputs_to_batch(outputs, response_length=5, pad_token_id=PAD)
    assert batch["prompts"].tolist() == [[7, 8, 9], [PAD, PAD, 7]]
    assert batch["responses"].tolist() == [[4, 2, PAD, PAD, PAD], [5, 9, 9, 6, PAD]]
    assert batch["response_mask"].tolist() == [[1, 1, 0, 0, 0], [1, 0, 0, 1, 0]]  # observations are not trained
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1, 1, 0]]
    assert batch["position_ids"][1].tolist()[2:7] == [0, 1, 2, 3, 4]
    assert torch.allclose(batch["rollout_log_probs"][1], torch.tensor([-0.3, 0.0, 0.0, -0.4, 0.0]))


# ----------------------------------------------------------------------------------------------
# The replay buffer
# ----------------------------------------------------------------------------------------------

class Stream:
    """Dispatches prompts 0, 1, 2, ...; prompt p's group of 4 scores all right when p % 3 == 0 (no spread), else
    half right."""

    def __init__(self, dispatch_step=1):
        self.next, self.dispatched, self.step = 0, [], dispatch_step
        self.buffer = None

    def refill(self, count):
        self.dispatched.append(count)
        for _ in range(count):
            self.buffer.add(PromptGroup(str(self.next), {}, self.step, [0, 1, 2, 3]))
            self.next += 1

    def generate(self, groups):
        for group in groups:
            uniform = int(group.uid) % 3 == 0
            group.trajectories = [Trajectory(s, None, 1.0 if uniform or s < 2 else 0.0, {"acc": uniform or s < 2})
                                  for s in range(4)]
            group.status = "finished"


def buffer_for(stream, **kwargs):
    stream.buffer = ReplayBuffer(stream.generate, stream.refill, train_batch_size=6, **kwargs)
    return stream.buffer


def test_the_buffer_returns_whole_groups_oldest_first():
    stream = Stream()
    buffer = buffer_for(stream)
    buffer.add(PromptGroup("99", {}, 2, [0, 1, 2, 3]))  # dispatched at a later step
    stream.refill(6)
    groups, metrics = buffer.sample(2, 6)
    assert [g.uid for g in groups] == ["0", "1", "2", "3", "4", "5"] and metrics == {}
    assert all(len(g.trajectories) == 4 for g in groups) and len(buffer) == 1  # the later group stays
    with pytest.raises(RuntimeError, match="nothing in flight"):
        buffer.sample(3, 6)


def test_dapo_in_the_buffer_evicts_refills_two_per_group_and_discards_the_surplus():
    stream = Stream()
    buffer = buffer_for(stream, filter_groups_metric="acc", max_inflight_gen_batches=1)
    stream.refill(6)  # prompts 0-5: 0 and 3 have no spread
    groups, metrics = buffer.sample(1, 6)
    # round 1: 2 evicted -> 4 dispatched (6, 7, 8, 9; 6 and 9 evicted) -> 8 finished >= 6: drain, take 6 oldest
    assert stream.dispatched == [6, 4]
    assert [g.uid for g in groups] == ["1", "2", "4", "5", "7", "8"]
    assert metrics == {"training/filter_groups/evicted_samples": 4,
                       "training/filter_groups/discarded_surplus_samples": 0}
    assert len(buffer) == 0


def test_dapo_refills_are_capped_by_the_inflight_limit():
    """Every prompt without a spread: each round evicts all, refills twice as many, capped at one train batch."""
    class Uniform(Stream):
        def generate(self, groups):
            for group in groups:
                group.trajectories = [Trajectory(s, None, 1.0) for s in range(4)]
                group.status = "finished"

    stream = Uniform()
    buffer = buffer_for(stream, filter_groups_metric="reward", max_prompts_per_sample=30)
    stream.refill(6)
    with pytest.raises(RuntimeError, match="turn algorithm.filter_groups.enable off"):
        buffer.sample(1, 6)
    assert stream.dispatched[:3] == [6, 6, 6]  # 2 * 6 = 12 wanted, capped at 1 * train_batch_size = 6


def test_a_missing_filter_metric_names_the_fix():
    stream = Stream()
    buffer = buffer_for(stream, filter_groups_metric="pass")
    stream.refill(6)
    with pytest.raises(ValueError, match="returns no such value"):
        buffer.sample(1, 6)


# ----------------------------------------------------------------------------------------------
# The trainer
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("estimator", ["grpo", "gae"])
def test_v1_sync_trains_the_legacy_run_number_for_number(tmp_path, estimator):
    """Without DAPO the sessions sample with the legacy trainer's row seeds and the step is the legacy step: every
    metric both log is equal. v1 adds verl's staleness metrics (sync mode: spans 1, staleness 0) and logs no
    timing_s/reward (its reward loop scores inside the sampling)."""
    common = [*QUIET, "trainer.total_training_steps=3", "trainer.test_freq=3", "data.val_max_samples=16",
              f"algorithm.adv_estimator={estimator}"]
    legacy = train([*common, f"trainer.default_local_dir={tmp_path / 'legacy'}"], show_progress=False)
    v1 = train([*common, f"trainer.default_local_dir={tmp_path / 'v1'}", "trainer.use_v1=true"], show_progress=False)
    compared = 0
    for a, b in zip(legacy, v1, strict=True):
        for key in set(a) & set(b):
            if not key.startswith(("timing_s/", "timing_per_token_ms/", "perf/", "minirl/peak_rss_gb")):
                assert a[key] == b[key] or (math.isnan(a[key]) and math.isnan(b[key])), (a["step"], key)
                compared += 1
        assert set(a) - set(b) <= {"timing_s/reward"}
    assert compared > 150
    last = v1[-1]
    assert last["training/off_policy/trajectory_spans/max"] == 1
    assert last["training/off_policy/trajectory_staleness/max"] == 0
    assert last["training/off_policy/trajectory_staleness/min"] == 0


def test_v1_dapo_and_resume(tmp_path):
    """DAPO in the buffer logs verl's filter_groups metrics; a v1 run resumes from its checkpoint to the run it
    would have been (sync mode keeps nothing in the buffer between steps)."""
    common = [*QUIET, "trainer.use_v1=true", "algorithm.filter_groups.enable=true",
              "algorithm.filter_groups.metric=acc", "algorithm.filter_groups.max_inflight_gen_batches=2",
              "trainer.test_freq=-1", "trainer.save_freq=2", "trainer.val_before_train=false"]
    full = train([*common, f"trainer.default_local_dir={tmp_path / 'full'}", "trainer.total_training_steps=3"],
                 show_progress=False)
    assert all(r["training/filter_groups/evicted_samples"] >= 0 for r in full)
    assert "training/filter_groups/discarded_surplus_samples" in full[-1]
    run = tmp_path / "cut"
    train([*common, f"trainer.default_local_dir={run}", "trainer.total_training_steps=2"], show_progress=False)
    resumed = train([*common, f"trainer.default_local_dir={run}", "trainer.total_training_steps=3",
                     "trainer.resume_mode=auto"], show_progress=False)
    assert [r["step"] for r in resumed] == [3] and [r["step"] for r in load_metrics(run)] == [1, 2, 3]
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "training/filter_groups/evicted_samples"):
        assert resumed[-1][key] == pytest.approx(full[-1][key], rel=1e-5, abs=1e-7), key


@pytest.mark.parametrize(("overrides", "message"), [
    (["trainer.use_v1=true", "algorithm.adv_estimator=remax"], "set trainer.use_v1=false for ReMax"),
    (["trainer.use_v1=true", "algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=3"],
     "bound DAPO with max_inflight_gen_batches"),
    (["algorithm.filter_groups.max_inflight_gen_batches=2"], "read only by the v1 trainer"),
    (["trainer.use_v1=true", "algorithm.filter_groups.max_inflight_gen_batches=0"], "must be >= 1"),
    (["trainer.use_v1=true", "trainer.v1.trainer_mode=separate_async", "data.train_batch_size=8"],
     "must equal trainer.v1.separate_async.parameter_sync_step"),
    (["trainer.use_v1=true", "trainer.v1.trainer_mode=separate_async", "trainer.use_ray=true"],
     "does not run on Ray worker groups"),
    (["trainer.use_v1=true", "trainer.v1.trainer_mode=separate_async",
      "trainer.v1.separate_async.parameter_sync_step=0"], "parameter_sync_step must be >= 1"),
    (["trainer.use_v1=true", "trainer.v1.trainer_mode=separate_async",
      "trainer.v1.separate_async.hybrid_rollout.enable_switch=true"], "lending the trainer's GPUs"),
    (["trainer.v1.trainer_mode=colocate_async"], "read only by the v1 trainer"),
    (["trainer.use_v1=true", "trainer.v1.sampler.max_off_policy_strategy=keep"], "not one of drop, wait"),
    (["trainer.use_v1=true", "trainer.v1.sampler.max_off_policy_threshold=0"], "positive integer or null"),
])
def test_v1_settings_minirl_cannot_honour_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        config_lib.load_config(overrides)


def test_colocate_async_trains_on_answers_from_earlier_weights_within_the_limit(tmp_path):
    """colocate_async on the chain task: warm-up prompts run ahead, so a batch holds answers begun under earlier
    weights (staleness > 0, partial answers spanning two versions); with max_off_policy_threshold=1 every group
    dispatched a step earlier is dropped instead, and what is trained is fresh. A run resumes with its buffer."""
    from minirl import sft

    chain = sft.train_overrides(sft.default_warm_start(sft.CHAIN_SFT, show_progress=False), sft.CHAIN_SFT)
    common = [*chain, *QUIET, "trainer.use_v1=true", "trainer.v1.trainer_mode=colocate_async", "trainer.test_freq=-1",
              "trainer.val_before_train=false", "trainer.total_training_steps=3"]  # answers of 7 to 48 tokens
    ahead = train([*common, f"trainer.default_local_dir={tmp_path / 'ahead'}", "trainer.save_freq=2"],
                  show_progress=False)
    assert ahead[0]["training/off_policy/trajectory_staleness/max"] == 0  # step 1: all from the first weights
    assert max(r["training/off_policy/trajectory_staleness_worst/max"] for r in ahead) >= 1
    assert max(r["training/off_policy/trajectory_spans/max"] for r in ahead) >= 2  # a resumed partial answer
    assert all(r["training/off_policy/trajectory_staleness_worst/max"] <= 8 for r in ahead)
    assert (tmp_path / "ahead" / "global_step_2" / "replay_buffer.json").exists()
    resumed = train([*common, f"trainer.default_local_dir={tmp_path / 'ahead'}", "trainer.resume_mode=auto",
                     "trainer.total_training_steps=4"], show_progress=False)
    assert [r["step"] for r in resumed] == [4]

    fresh = train([*common, f"trainer.default_local_dir={tmp_path / 'fresh'}",
                   "trainer.v1.sampler.max_off_policy_threshold=1"], show_progress=False)
    assert sum(r["training/off_policy/evicted_samples"] for r in fresh) > 0
    assert all(r["training/off_policy/trajectory_staleness_worst/max"] == 0 for r in fresh)


def _chain_overrides() -> list[str]:
    from minirl import sft

    return sft.train_overrides(sft.default_warm_start(sft.CHAIN_SFT, show_progress=False), sft.CHAIN_SFT)


def test_separate_async_trains_while_its_rollout_process_runs_ahead(tmp_path):
    """separate_async on the chain task: the rollout process answers the warm-up prompts with the first weights, so
    later batches are one sync old; each step makes parameter_sync_step local updates (one optimizer step each),
    never past the staleness limit; the process is gone after the run; a run resumes with its buffer. (The
    staleness bound itself: stale_evictions' tests and the colocate_async test; how far ahead the rollout runs:
    test_chapter_effects.py's Chapter 12 test.)"""
    common = [*_chain_overrides(), *QUIET, "trainer.use_v1=true", "trainer.v1.trainer_mode=separate_async",
              "trainer.v1.separate_async.parameter_sync_step=2", "trainer.test_freq=-1",
              "trainer.val_before_train=false", "trainer.total_training_steps=3"]
    run = tmp_path / "ahead"
    ahead = train([*common, f"trainer.default_local_dir={run}", "trainer.save_freq=2"], show_progress=False)
    assert ahead[0]["training/off_policy/trajectory_staleness/max"] == 0  # step 1: all from the first weights
    assert max(r["training/off_policy/trajectory_staleness_worst/max"] for r in ahead) >= 1
    assert all(r["training/off_policy/trajectory_staleness_worst/max"] <= 8 for r in ahead)
    assert all(r["training/rollout_probs_diff_valid"] == 1.0 for r in ahead)
    optimizer = torch.load(run / "global_step_2" / "actor_optimizer.pt", weights_only=False)["optimizer"]
    assert {s["step"].item() for s in optimizer["state"].values()} == {4.0}  # 2 steps x 2 local updates
    assert (run / "global_step_2" / "replay_buffer.json").exists()
    import multiprocessing

    assert not [p for p in multiprocessing.active_children() if p.name == "minirl-rollout"]
    resumed = train([*common, f"trainer.default_local_dir={run}", "trainer.resume_mode=auto",
                     "trainer.total_training_steps=4"], show_progress=False)
    assert [r["step"] for r in resumed] == [4]


def test_separate_async_keeps_the_steps_first_weights_as_pi_old(tmp_path):
    """Decoupled PPO: local update 0 computes pi_old with the weights it has and keeps them; a later local update of
    the same step computes pi_old with those kept weights, not the ones it was updated to, and leaves the actor's
    weights as they were."""
    from minirl.config import load_config
    from minirl.v1.trainer import PPOTrainerV1

    config = load_config([*_chain_overrides(), *QUIET, "trainer.use_v1=true",
                          "trainer.v1.trainer_mode=separate_async", "trainer.v1.separate_async.parameter_sync_step=2",
                          f"trainer.default_local_dir={tmp_path}"])
    trainer = PPOTrainerV1(config, show_progress=False)
    try:
        rows = trainer.train_rows[:2]
        batch = trainer._prompt_batch(rows, ["a", "b"])
        batch = trainer._generate(batch, 1, trainer._sampling(), (0,))
        first = trainer._compute_old_log_prob(batch)["old_log_probs"]
        model = trainer.actor.unwrapped_model
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.05 * torch.randn_like(parameter))
        moved = {k: v.clone() for k, v in model.state_dict().items()}
        trainer.local_trigger_step = 1
        again = trainer._compute_old_log_prob(batch)["old_log_probs"]
        assert torch.equal(again, first)
        assert all(torch.equal(v, moved[k]) for k, v in model.state_dict().items())
        trainer.local_trigger_step = 0  # the next step's first local update takes the moved weights
        assert not torch.allclose(trainer._compute_old_log_prob(batch)["old_log_probs"], first)
    finally:
        trainer.server.shutdown()
        trainer.agent_loops.shutdown()


def test_local_updates_aggregate_as_verls_metrics_aggregator():
    from minirl.v1.trainer import aggregate_local_updates

    parts = [({"actor/pg_loss": 1.0, "response_length/max": 5, "response_length/min": 3, "actor/lr": 0.1,
               "training/off_policy/evicted_samples": 2, "training/global_step": 7}, 1),
             ({"actor/pg_loss": 4.0, "response_length/max": 9, "response_length/min": 1, "actor/lr": 0.2,
               "training/off_policy/evicted_samples": 3, "training/global_step": 7}, 3)]
    assert aggregate_local_updates(parts) == {"actor/pg_loss": 3.25, "response_length/max": 9,
                                              "response_length/min": 1, "actor/lr": 0.2,
                                              "training/off_policy/evicted_samples": 5, "training/global_step": 7}
