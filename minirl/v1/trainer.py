"""verl 0.9.1's v1 trainer (`trainer.use_v1=true`), sync mode: agent loops feed a replay buffer.

What changes against the legacy loop (`minirl/trainer.py`, verl's `ray_trainer.py::RayPPOTrainer.fit`):

    legacy                                             v1 (trainer/ppo/v1/trainer_base.py::PPOTrainer)
    batch.repeat(n) -> one generate_sequences call     dispatch prompts; each sample is an agent-loop session
    reward on the generated batch                      the reward loop scores each finished session
    DAPO: generate whole batches until enough pass     DAPO inside the replay buffer: evict, refill 2k, drain
    ReMax: a greedy answer per prompt                  no greedy request: ReMax is legacy-only
    weight sync right after the actor update           weight sync in on_step_end, after the checkpoint
    no hooks                                           on_init_end, on_train_begin, on_step_begin/end,
                                                       on_sample_begin/end, on_validate_begin/end

Everything between sampling and the update (old log-probs, reference, values, advantages, the updates) is the
legacy trainer's code: only how a batch is collected, and when the weights are synced, differ. For settings
without DAPO, the sessions sample with the legacy trainer's per-row seeds, so a v1 sync run equals the legacy
run number for number (tests/test_v1.py).

verl's trainer modes: `sync` (here); `colocate_async` and `separate_async` are refused for now (Chapter 12).
"""

from __future__ import annotations

import numpy as np
import torch

from minirl.config import Config
from minirl.core import place_scores_on_last_token
from minirl.metrics import timer
from minirl.protocol import DataProto
from minirl.trainer import TRAIN, PPOTrainer, _seed_for
from minirl.v1.agent_loop import AgentLoopManager, LLMServer, outputs_to_batch
from minirl.v1.replay_buffer import PromptGroup, ReplayBuffer, Trajectory


class PPOTrainerV1(PPOTrainer):
    """The v1 trainer in sync mode: the legacy step's maths, fed by agent loops through a replay buffer."""

    SYNC_AFTER_UPDATE = False  # v1 syncs the rollout's weights in on_step_end, after the checkpoint

    def __init__(self, config: Config, show_progress: bool | None = None):
        super().__init__(config, show_progress)
        cfg = self.config
        self.server = LLMServer(self.rollout, self.tokenizer.pad_token_id, cfg.data.max_response_length)
        self.agent_loops = AgentLoopManager(self.server, self.tokenizer, cfg.data.max_prompt_length,
                                            cfg.data.truncation)
        dapo = cfg.algorithm.filter_groups
        self.replay_buffer = ReplayBuffer(
            self._run_groups, self._add_prompts_to_generate, cfg.data.train_batch_size,
            filter_groups_metric=dapo.metric if dapo.enable else None,
            max_inflight_gen_batches=dapo.max_inflight_gen_batches, max_prompts_per_sample=len(self.train_rows))
        self.dispatches_this_step = 0

    # ------------------------------------------------------------------------------------------
    # Hooks (verl's PPOTrainerSync)
    # ------------------------------------------------------------------------------------------

    def on_init_end(self) -> None:
        """The first weight sync: the engine gets the actor's weights, version = the (resumed) step."""
        self.rollout.update_weights()  # an engine with its own copy takes the actor's (a resumed one too)
        self.server.global_steps = self.global_step

    def on_sample_begin(self) -> None:
        """Before the trainer waits for groups (verl's async modes start counting idle time here)."""

    def on_sample_end(self) -> None:
        """The batch is taken; verl sleeps the rollout replicas (frees their weights and KV cache) here."""

    def on_step_end(self, timing: dict) -> None:
        """The weight sync, after the checkpoint: the engine's version becomes this step."""
        if self._actor_turn():
            self.update_rollout_weights(timing)
        self.server.global_steps = self.global_step

    # ------------------------------------------------------------------------------------------
    # Dispatching prompts and running their sessions
    # ------------------------------------------------------------------------------------------

    def _add_prompts_to_generate(self, count: int) -> None:
        """Dispatch the next `count` prompts of the data stream as pending groups (verl's `_add_batch_to_generate`).

        Session s of the i-th prompt of the step's d-th dispatch samples with seed
        (rollout.seed, data.seed, TRAIN, step, d, i * n + s): the legacy trainer's seed for that row.
        """
        n = self.config.actor_rollout_ref.rollout.n
        rows, positions, _ = self._next_prompts(count)
        rollout_seed = self.config.actor_rollout_ref.rollout.seed
        for i, (row, position) in enumerate(zip(rows, positions)):
            seeds = [_seed_for(rollout_seed, self.seed, TRAIN, self.global_step, self.dispatches_this_step, i * n + s)
                     for s in range(n)]
            self.replay_buffer.add(PromptGroup(str(position), row, self.global_step, seeds))
        self.dispatches_this_step += 1

    def _run_groups(self, groups: list[PromptGroup]) -> None:
        """Run every session of `groups` (the agent loops), then score them (the reward loop); mark them finished."""
        sessions = [{**group.row, "raw_prompt": group.row["prompt"], "uid": group.uid, "session_id": s, "seed": seed}
                    for group in groups for s, seed in enumerate(group.seeds)]
        outputs = self.agent_loops.run_sessions(sessions, self._sampling())
        scored = self._reward(self._with_row_fields(outputs_to_batch(
            outputs, self.config.data.max_response_length, self.tokenizer.pad_token_id), sessions))
        scores = scored["token_level_scores"].sum(-1).tolist()
        extras = scored.non_tensor_batch
        index = 0
        for group in groups:
            for s in range(len(group.seeds)):
                group.trajectories.append(Trajectory(s, outputs[index], scores[index],
                                                     {k: v[index] for k, v in extras.items()}))
                index += 1
            group.status = "finished"

    def _with_row_fields(self, batch: DataProto, sessions: list[dict]) -> DataProto:
        """Add each session's dataset fields (what a reward function reads) and uid to a padded batch."""
        fields = {"data_source": [s["data_source"] for s in sessions],
                  "reward_model": [s["reward_model"] for s in sessions],
                  "extra_info": [s.get("extra_info") for s in sessions],
                  "raw_prompt": [s["prompt"] for s in sessions], "uid": [s["uid"] for s in sessions]}
        return batch.union(DataProto(non_tensor_batch=fields))

    # ------------------------------------------------------------------------------------------
    # The step's batch: sample whole groups from the replay buffer
    # ------------------------------------------------------------------------------------------

    def _collect_batch(self, timing: dict, metrics: dict) -> tuple[DataProto, int]:
        """Dispatch train_batch_size prompts (verl's prepare_step), then sample as many finished groups."""
        cfg = self.config
        self.dispatches_this_step = 0
        self._add_prompts_to_generate(cfg.data.train_batch_size)
        with timer("gen", timing):  # verl: on_sample_begin + the wait in the buffer + on_sample_end
            self.on_sample_begin()
            groups, buffer_metrics = self.replay_buffer.sample(self.global_step, cfg.data.train_batch_size)
            self.on_sample_end()
        metrics.update(buffer_metrics)
        trajectories = [t for group in groups for t in group.trajectories]
        sessions = [{**group.row, "uid": group.uid} for group in groups for _ in group.trajectories]
        batch = self._with_row_fields(outputs_to_batch([t.output for t in trajectories], cfg.data.max_response_length,
                                                       self.tokenizer.pad_token_id), sessions)
        scores = torch.tensor([t.score for t in trajectories], dtype=torch.float32)
        extras = {key: [t.extra[key] for t in trajectories] for key in trajectories[0].extra}
        batch = batch.union(DataProto(batch={"token_level_scores": place_scores_on_last_token(
            scores, batch["response_mask"])}, non_tensor_batch=extras))
        metrics.update(staleness_metrics(trajectories, self.global_step))
        return batch, (self.global_step - 1) // self.steps_per_epoch


def staleness_metrics(trajectories: list[Trajectory], global_steps: int) -> dict[str, float]:
    """verl's off-policy metrics from the weight versions each answer was generated with:

        span           = max_global_steps - min_global_steps + 1     versions inside one answer (partial rollout)
        staleness      = (global_steps - 1) - max_global_steps       updates since its newest token's weights
        staleness_worst= (global_steps - 1) - min_global_steps       ... since its oldest token's weights

    (verl: `trainer/ppo/v1/trainer_base.py::PPOTrainer._compute_metrics`.) In sync mode every answer is
    generated with the weights after step - 1: span 1, staleness 0.
    """
    low = np.array([t.output.extra_fields["min_global_steps"] for t in trajectories], dtype=np.float64)
    high = np.array([t.output.extra_fields["max_global_steps"] for t in trajectories], dtype=np.float64)
    metrics = {}
    for name, values in (("trajectory_spans", high - low + 1), ("trajectory_staleness", global_steps - 1 - high),
                         ("trajectory_staleness_worst", global_steps - 1 - low)):
        metrics.update({f"training/off_policy/{name}/mean": float(values.mean()),
                        f"training/off_policy/{name}/max": float(values.max()),
                        f"training/off_policy/{name}/min": float(values.min())})
    return metrics
