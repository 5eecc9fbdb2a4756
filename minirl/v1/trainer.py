"""verl 0.9.1's v1 trainer (`trainer.use_v1=true`): agent loops feed a replay buffer; sync, colocate_async and
separate_async.

What changes against the legacy loop (`minirl/trainer.py`, verl's `ray_trainer.py::RayPPOTrainer.fit`):

    legacy                                             v1 (trainer/ppo/v1/trainer_base.py::PPOTrainer)
    batch.repeat(n) -> one generate_sequences call     dispatch prompts; each sample is an agent-loop session
    reward on the generated batch                      the reward loop scores each finished group
    DAPO: generate whole batches until enough pass     DAPO inside the replay buffer: evict, refill, drain
    ReMax: a greedy answer per prompt                  no greedy request: ReMax is legacy-only
    weight sync right after the actor update           weight sync in on_step_end, after the checkpoint
    no hooks                                           on_init_end, on_train_begin, on_step_begin/end,
                                                       on_sample_begin/end, on_validate_begin/end

Everything between sampling and the update (old log-probs, reference, values, advantages, the updates) is the
legacy trainer's code: only how a batch is collected, and when the weights are synced, differ.

    sync            dispatch train_batch_size prompts, run them to the end, train on them: on-policy. Without
                    DAPO the sessions use the legacy trainer's row seeds, so the run equals the legacy run
                    number for number (tests/test_v1.py).
    colocate_async  num_warmup_batches of prompts are dispatched ahead; each step dispatches one more batch and
                    the engine decodes only until train_batch_size groups are finished. The rest stay in flight
                    and resume after the weight sync with the new weights (partial rollout), so a batch holds
                    answers from earlier weights (`training/off_policy/*` measures how much).
    separate_async  the rollout is a process of its own (`minirl/v1/rollout_server.py`) that generates all the
                    time, with the weights of the last sync. A step makes parameter_sync_step local updates, each
                    on train_batch_size / parameter_sync_step groups, then sends the weights (on_step_end).
                    pi_old of every local update is the step's first weights (verl's decoupled PPO), so the
                    ratio pi/pi_old stays a trust region while the rollout's answers are older still.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import torch

from minirl.config import Config
from minirl.core import place_scores_on_last_token
from minirl.metrics import process_validation_metrics, timer
from minirl.protocol import DataProto
from minirl.run_dir import CHECKPOINT_PREFIX
from minirl.tools import load_all_tools
from minirl.trainer import TRAIN, VALIDATION, PPOTrainer, _seed_for
from minirl.v1.agent_loop import AgentLoopManager, AgentLoopOutput, LLMServer, outputs_to_batch
from minirl.v1.replay_buffer import PromptGroup, ReplayBuffer, ReplayBufferAsync, Trajectory
from minirl.v1.rollout_server import StandaloneLLMServer
from minirl.v1.tool_agent_loop import ToolAgentLoop  # noqa: F401  (registers "tool_agent")

# The asynchronous trainer checks the replay buffer every POLL_TOKENS decoded tokens (verl's polls every 2 s of
# wall time; a token count keeps minirl's runs reproducible). Answers still running at the check are left in flight.
POLL_TOKENS = 4


class PPOTrainerV1(PPOTrainer):
    """The v1 trainer: the legacy step's maths, fed by agent loops through a replay buffer (sync, colocate_async,
    separate_async)."""

    SYNC_AFTER_UPDATE = False  # v1 syncs the rollout's weights in on_step_end, after the checkpoint

    def __init__(self, config: Config, show_progress: bool | None = None):
        super().__init__(config, show_progress)
        cfg = self.config
        self.mode = cfg.trainer.v1.trainer_mode
        self.local_trigger_step = 0  # which local update of the step is running (separate_async)
        self._pi_old: dict[str, torch.Tensor] | None = None  # the step's first weights (separate_async)
        if self.mode == "separate_async" and self.world > 1:
            raise ValueError("trainer.v1.trainer_mode=separate_async takes a process of its own for the rollout; "
                             f"launch the trainer as one process (this launch has {self.world}): 1 rollout + 1 "
                             "trainer process")
        if self.mode == "separate_async":  # the rollout in its own process, with its own copy of the weights
            self.server = StandaloneLLMServer(self.model_path, cfg.actor_rollout_ref.rollout.dtype,
                                              self.tokenizer.pad_token_id, self.tokenizer.eos_token_id,
                                              cfg.data.max_response_length)
        else:
            self.server = LLMServer(self.rollout, self.tokenizer.pad_token_id, self.tokenizer.eos_token_id,
                                    cfg.data.max_response_length)
        multi_turn = cfg.actor_rollout_ref.rollout.multi_turn
        tools = {tool.name: tool for tool in load_all_tools(multi_turn.tool_config_path, multi_turn.function_tool_path)}
        loop_settings = dict(response_length=cfg.data.max_response_length, multi_turn=multi_turn, tools=tools)
        default_loop = cfg.actor_rollout_ref.rollout.agent.default_agent_loop
        self.agent_loops = AgentLoopManager(self.server, self.tokenizer, cfg.data.max_prompt_length,
                                            cfg.data.truncation, default_loop, **loop_settings)
        # Validation runs the rows' own loops when any is not single-turn (a tool loop must validate with its
        # tools), on an engine in this process with the actor's weights; single-turn rows keep the legacy
        # batched path (the same tensors, so v1 sync validates exactly as legacy does).
        self.multi_turn_validation = any((row.get("agent_name") or default_loop) != "single_turn_agent"
                                         for row in self.val_rows)
        self.val_agent_loops = AgentLoopManager(
            LLMServer(self.rollout, self.tokenizer.pad_token_id, self.tokenizer.eos_token_id,
                      cfg.data.max_response_length), self.tokenizer, cfg.data.max_prompt_length, cfg.data.truncation,
            default_loop, **loop_settings) if self.multi_turn_validation else None
        dapo = cfg.algorithm.filter_groups
        metric = dapo.metric if dapo.enable else None
        if self.mode == "sync":
            self.replay_buffer = ReplayBuffer(
                self._run_groups, self._add_prompts_to_generate, cfg.data.train_batch_size, metric,
                dapo.max_inflight_gen_batches, max_prompts_per_sample=len(self.train_rows))
        else:  # colocate_async, separate_async
            sampler = cfg.trainer.v1.sampler
            self.replay_buffer = ReplayBufferAsync(
                lambda ready: self.agent_loops.drive(ready, max_new_tokens=POLL_TOKENS), self._score_done_groups,
                self._add_prompts_to_generate, cfg.data.train_batch_size, metric, sampler.max_off_policy_threshold,
                sampler.max_off_policy_strategy, self.mode)
        self.dispatches: dict[int, int] = {}  # step -> prompt dispatches made at it (each has its own seeds)
        self.session_outputs: dict[str, list] = {}  # uid -> its sessions' outputs, as they finish

    def updates_per_step(self) -> int:
        """separate_async: parameter_sync_step local updates per step (verl: the lr schedule counts them all)."""
        v1 = self.config.trainer.v1
        return v1.separate_async.parameter_sync_step if v1.trainer_mode == "separate_async" else 1

    def fit(self) -> list[dict[str, float]]:
        """Train as the legacy trainer's `fit`, with v1's hooks; answers still in flight at the end are dropped."""
        try:
            return super().fit()
        finally:
            self.agent_loops.shutdown()
            if self.val_agent_loops is not None:
                self.val_agent_loops.shutdown()
            if self.mode == "separate_async":
                self.server.shutdown()

    # ------------------------------------------------------------------------------------------
    # Hooks (verl's PPOTrainerSync and PPOTrainerColocateAsync)
    # ------------------------------------------------------------------------------------------

    def on_init_end(self) -> None:
        """The first weight sync: the engine gets the actor's weights, version = the (resumed) step."""
        if self.mode == "separate_async":
            self.server.update_weights(self.actor.unwrapped_model.state_dict(), self.global_step)
        else:
            self.rollout.update_weights()  # an engine with its own copy takes the actor's (a resumed one too)
            self.server.global_steps = self.global_step

    def on_train_begin(self) -> None:
        """Async modes: dispatch num_warmup_batches train batches of prompts ahead of the first step (fewer by
        the groups a resumed run brought back), so the rollout runs ahead of the trainer."""
        if self.mode != "sync":
            warmup_batches = getattr(self.config.trainer.v1, self.mode).num_warmup_batches
            warmup = int(warmup_batches * self.config.data.train_batch_size)
            if warmup - len(self.replay_buffer) > 0:
                self._add_prompts_to_generate(warmup - len(self.replay_buffer), step=self.global_step + 1)

    def on_sample_begin(self) -> None:
        """Before the trainer waits for groups (verl's async modes start counting idle time here)."""

    def on_sample_end(self) -> None:
        """The batch is taken. verl sleeps the rollout replicas here (sync), or first aborts their unfinished
        requests (colocate_async). minirl's engine decodes only while `sample` drives it, so unfinished requests
        simply wait in the server, and resume after the weight sync."""

    def on_step_end(self, timing: dict) -> None:
        """The weight sync, after the checkpoint: the engine's version becomes this step (verl's colocate_async
        then resumes the aborted requests, which continue with the new weights; separate_async's rollout
        process loads them between two chunks of tokens)."""
        if self.mode == "separate_async":
            with timer("update_weights", timing):
                self.server.update_weights(self.actor.unwrapped_model.state_dict(), self.global_step)
            return
        if self._actor_turn():
            self.update_rollout_weights(timing)
        self.server.global_steps = self.global_step

    def validate(self) -> dict[str, float]:
        """The legacy batched validation, or, when the rows run multi-turn loops, val_kwargs.n sessions per
        validation prompt through those loops (each sampled with the legacy validation row seed, on the actor's
        weights), scored and named as the legacy validation does, plus verl's `val-aux/num_turns/{min,max,mean}`."""
        if self.val_agent_loops is None:
            return super().validate()
        cfg = self.config
        n = cfg.actor_rollout_ref.rollout.val_kwargs.n
        rollout_seed = cfg.actor_rollout_ref.rollout.seed
        sessions = [{**row, "raw_prompt": row["prompt"], "uid": str(i), "session_id": s,
                     "seed": _seed_for(rollout_seed, self.seed, VALIDATION, self.global_step, i * n + s)}
                    for i, row in enumerate(self.val_rows) for s in range(n)]
        outputs = self.val_agent_loops.run_sessions(sessions, {**self._sampling(validation=True),
                                                               "actor_weights": True})
        batch = self._with_row_fields(outputs_to_batch(outputs, cfg.data.max_response_length,
                                                       self.tokenizer.pad_token_id), sessions, outputs)
        scored = self._reward(batch)
        infos = {"reward": scored["token_level_scores"].sum(-1).tolist(),
                 **{k: list(v) for k, v in scored.non_tensor_batch.items()}}
        metrics = process_validation_metrics(list(batch["data_source"]), list(batch["uid"]), infos)
        turns = np.array([o.num_turns for o in outputs], dtype=np.float64)
        metrics.update({"val-aux/num_turns/min": float(turns.min()), "val-aux/num_turns/max": float(turns.max()),
                        "val-aux/num_turns/mean": float(turns.mean())})
        return metrics

    # ------------------------------------------------------------------------------------------
    # Dispatching prompts and running their sessions
    # ------------------------------------------------------------------------------------------

    def _add_prompts_to_generate(self, count: int, step: int | None = None) -> None:
        """Dispatch the next `count` prompts of the data stream as groups (verl's `_add_batch_to_generate`);
        colocate_async starts their sessions at once (verl dispatches fire-and-forget).

        Session s of the i-th prompt of the d-th dispatch at `step` (default: this step) samples with seed
        (rollout.seed, data.seed, TRAIN, step, d, i * n + s): for a step's first dispatch, the legacy trainer's
        seed for that row.
        """
        step = self.global_step if step is None else step
        n = self.config.actor_rollout_ref.rollout.n
        rows, positions, _ = self._next_prompts(count)
        rollout_seed, d = self.config.actor_rollout_ref.rollout.seed, self.dispatches.get(step, 0)
        self.dispatches[step] = d + 1
        groups = [PromptGroup(str(position), row, step,
                              [_seed_for(rollout_seed, self.seed, TRAIN, step, d, i * n + s) for s in range(n)])
                  for i, (row, position) in enumerate(zip(rows, positions))]
        for group in groups:
            self.replay_buffer.add(group)
        if self.mode != "sync":
            self._start_groups(groups)

    def _start_groups(self, groups: list[PromptGroup]) -> None:
        """Start every session of `groups`; a group is "done" when its last session finishes."""
        def session_done(session: dict, output) -> None:
            outputs = self.session_outputs[session["uid"]]
            outputs[session["session_id"]] = output
            if all(o is not None for o in outputs):
                self.replay_buffer.groups[session["uid"]].status = "done"

        for group in groups:
            self.session_outputs[group.uid] = [None] * len(group.seeds)
            group.status = "running"
        sessions = [{**group.row, "raw_prompt": group.row["prompt"], "uid": group.uid, "session_id": s, "seed": seed}
                    for group in groups for s, seed in enumerate(group.seeds)]
        self.agent_loops.start_sessions(sessions, self._sampling(), on_done=session_done)

    def _score_done_groups(self) -> None:
        """The reward loop: score every group whose sessions have all finished (in one batch); mark them finished."""
        done = [g for g in self.replay_buffer.groups.values() if g.status == "done"]
        if not done:
            return
        outputs = [o for g in done for o in self.session_outputs.pop(g.uid)]
        sessions = [{**g.row, "uid": g.uid} for g in done for _ in g.seeds]
        scored = self._reward(self._with_row_fields(outputs_to_batch(
            outputs, self.config.data.max_response_length, self.tokenizer.pad_token_id), sessions, outputs))
        scores = scored["token_level_scores"].sum(-1).tolist()
        index = 0
        for group in done:
            for s in range(len(group.seeds)):
                extra = {k: v[index] for k, v in scored.non_tensor_batch.items()}
                group.trajectories.append(Trajectory(s, outputs[index], scores[index], extra))
                index += 1
            group.status = "finished"

    def _run_groups(self, groups: list[PromptGroup]) -> None:
        """sync: run every session of `groups` to its end, then score them."""
        self._start_groups(groups)
        self.agent_loops.drive()
        self._score_done_groups()

    def _with_row_fields(self, batch: DataProto, sessions: list[dict],
                         outputs: list[AgentLoopOutput] | None = None) -> DataProto:
        """Add each session's dataset fields (what a reward function reads) and uid to a padded batch. With the
        sessions' `outputs`, extra_info also gets each loop's extra fields (tool calls, tool rewards, ...) and
        `num_turns`, as verl's reward loop adds them (`reward_loop/reward_manager/naive.py::run_single`)."""
        infos = [s.get("extra_info") for s in sessions]
        if outputs is not None:
            infos = [{**(info or {}), **o.extra_fields, "num_turns": o.num_turns} for info, o in zip(infos, outputs)]
        fields = {"data_source": [s["data_source"] for s in sessions],
                  "reward_model": [s["reward_model"] for s in sessions],
                  "extra_info": infos,
                  "raw_prompt": [s["prompt"] for s in sessions], "uid": [s["uid"] for s in sessions]}
        return batch.union(DataProto(non_tensor_batch=fields))

    # ------------------------------------------------------------------------------------------
    # The step's batch: sample whole groups from the replay buffer
    # ------------------------------------------------------------------------------------------

    def train_step(self, timing: dict) -> tuple[dict[str, float], DataProto]:
        """verl's `PPOTrainer.step`: dispatch train_batch_size prompts (prepare_step), then parameter_sync_step
        local updates (1 but in separate_async), each sampling its share of groups and running the legacy
        pipeline on them. Returns the local updates' metrics, aggregated as verl's MetricsAggregator does, and
        their batches' lengths (for the timing and throughput metrics)."""
        self._add_prompts_to_generate(self.config.data.train_batch_size)
        parts = []
        for trigger in range(self.updates_per_step()):
            self.local_trigger_step = trigger
            parts.append(super().train_step(timing))
        metrics, batch = parts[0] if len(parts) == 1 else (
            aggregate_local_updates([(m, len(b)) for m, b in parts]), lengths_batch([b for _, b in parts]))
        if self.mode == "separate_async":  # minirl's: how long the rollout process generated since the last step
            metrics["minirl/rollout_busy_s"] = self.server.take_busy_seconds()
        return metrics, batch

    def _compute_old_log_prob(self, batch: DataProto) -> DataProto:
        """separate_async: every local update of a step computes pi_old with the step's first weights (verl's
        `PPOTrainerSeparateAsync._compute_old_log_prob`: save them at local update 0, swap them in after)."""
        if self.mode != "separate_async" or self.updates_per_step() == 1:
            return super()._compute_old_log_prob(batch)
        model = self.actor.unwrapped_model
        current = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if self.local_trigger_step == 0:
            self._pi_old = current
            return super()._compute_old_log_prob(batch)
        model.load_state_dict(self._pi_old)
        try:
            return super()._compute_old_log_prob(batch)
        finally:
            model.load_state_dict(current)

    def _collect_batch(self, timing: dict, metrics: dict) -> tuple[DataProto, int]:
        """Sample this local update's finished groups (train_batch_size / parameter_sync_step of them)."""
        cfg = self.config
        with timer("gen", timing):  # verl: on_sample_begin + the wait in the buffer + on_sample_end
            self.on_sample_begin()
            groups, buffer_metrics = self.replay_buffer.sample(
                self.global_step, cfg.data.train_batch_size // self.updates_per_step())
            self.on_sample_end()
        metrics.update(buffer_metrics)
        trajectories = [t for group in groups for t in group.trajectories]
        sessions = [{**group.row, "uid": group.uid} for group in groups for _ in group.trajectories]
        batch = self._with_row_fields(outputs_to_batch([t.output for t in trajectories], cfg.data.max_response_length,
                                                       self.tokenizer.pad_token_id), sessions)
        scores = torch.tensor([t.score for t in trajectories], dtype=torch.float32)
        extras = {key: [t.extra[key] for t in trajectories] for key in trajectories[0].extra}
        response_length = batch["responses"].shape[1]  # the score sits on the last token, tool results counted
        batch = batch.union(DataProto(batch={"token_level_scores": place_scores_on_last_token(
            scores, batch["attention_mask"][:, -response_length:])}, non_tensor_batch=extras))
        metrics.update(staleness_metrics(trajectories, self.global_step))
        metrics.update(turn_metrics([t.output for t in trajectories], timing))
        return batch, (self.global_step - 1) // self.steps_per_epoch

    # ------------------------------------------------------------------------------------------
    # Checkpoints: the async modes also keep the replay buffer (verl saves its TransferQueue)
    # ------------------------------------------------------------------------------------------

    def _write_checkpoint(self) -> Path:
        tmp = super()._write_checkpoint()
        if self.mode != "sync" and self.accelerator.is_main_process:
            state = [{"uid": g.uid, "row": g.row, "dispatch_step": g.dispatch_step, "seeds": g.seeds,
                      "finished": g.status == "finished",
                      "trajectories": [{"session_id": t.session_id, "output": dataclasses.asdict(t.output),
                                        "score": t.score, "extra": t.extra} for t in g.trajectories]}
                     for g in self.replay_buffer.groups.values()]
            (tmp / REPLAY_BUFFER_FILE).write_text(json.dumps(state, default=_plain))
        self.accelerator.wait_for_everyone()
        return tmp

    def load_checkpoint(self) -> bool:
        """Resume; the async modes also restore the buffer: finished groups as they were, groups that were in flight
        dispatched again from their prompt at the next step (verl's `_reissue_inflight_prompts`: a partial answer is
        not kept)."""
        resumed = super().load_checkpoint()
        path = self.run_dir / f"{CHECKPOINT_PREFIX}{self.global_step}" / REPLAY_BUFFER_FILE
        if resumed and self.mode != "sync" and path.exists():
            reissued = []
            for saved in json.loads(path.read_text()):
                group = PromptGroup(saved["uid"], saved["row"], saved["dispatch_step"], saved["seeds"])
                if saved["finished"]:
                    group.status = "finished"
                    group.trajectories = [Trajectory(t["session_id"], AgentLoopOutput(**t["output"]), t["score"],
                                                     t["extra"]) for t in saved["trajectories"]]
                else:
                    group.dispatch_step = self.global_step + 1
                    reissued.append(group)
                self.replay_buffer.add(group)
            if reissued:
                self._start_groups(reissued)
        return resumed


REPLAY_BUFFER_FILE = "replay_buffer.json"

# verl's MetricsAggregator (trainer/ppo/v1/utils.py) reduces the local updates' metrics by name: these are summed,
# these keep the last value, and otherwise a name with max/min/sum/total takes that, and the rest are averaged,
# weighted by each update's rows.
SUMMED = {f"training/{kind}/evicted_samples" for kind in ("off_policy", "filter_groups", "rollout_failure")} | {
    "training/filter_groups/discarded_surplus_samples"}
LAST = {"training/global_step", "training/rollout_probs_diff_valid"}


def aggregate_local_updates(parts: list[tuple[dict[str, float], int]]) -> dict[str, float]:
    """One step's metrics from its local updates' (metrics, rows) (verl: `MetricsAggregator`)."""
    values: dict[str, list[tuple[float, int]]] = {}
    for metrics, rows in parts:
        for key, value in metrics.items():
            values.setdefault(key, []).append((float(value), rows))
    out = {}
    for key, pairs in values.items():
        numbers, lower = [v for v, _ in pairs], key.lower()
        if key in LAST or lower.endswith("/lr") or lower.endswith("_lr"):
            out[key] = numbers[-1]
        elif key in SUMMED:
            out[key] = sum(numbers)
        elif "max" in lower:
            out[key] = max(numbers)
        elif "min" in lower:
            out[key] = min(numbers)
        elif "sum" in lower or "total" in lower:
            out[key] = sum(numbers)
        else:
            weight = sum(r for _, r in pairs)
            out[key] = sum(v * r for v, r in pairs) / weight if weight else sum(numbers) / len(numbers)
    return out


def lengths_batch(batches: list[DataProto]) -> DataProto:
    """The rows of several batches, reduced to what the timing and throughput metrics read (responses and the
    attention mask; each batch's prompt side left-padded to the widest)."""
    width = max(b["prompts"].shape[1] for b in batches)
    masks = []
    for b in batches:
        prompt_mask = b["attention_mask"][:, :b["prompts"].shape[1]]
        pad = torch.zeros((len(b), width - prompt_mask.shape[1]), dtype=prompt_mask.dtype)
        masks.append(torch.cat([pad, prompt_mask, b["attention_mask"][:, b["prompts"].shape[1]:]], dim=1))
    return DataProto(batch={"responses": torch.cat([b["responses"] for b in batches]),
                            "attention_mask": torch.cat(masks)})


def _plain(value):
    """JSON for numpy scalars and arrays in a reward function's extra values."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot save {type(value).__name__} in the replay buffer checkpoint")


def turn_metrics(outputs: list[AgentLoopOutput], timing: dict) -> dict[str, float]:
    """What the sessions did: verl's `num_turns/{min,max,mean}` (`metric_utils.py::compute_data_metrics`) and its
    agent-loop timings (`timing_s/agent_loop/{generate_sequences,tool_calls}/{min,max,mean}`, seconds per sample, put
    into `timing`); with tools, minirl's per-answer means of tool calls, dropped malformed calls and tool errors."""
    turns = np.array([o.num_turns for o in outputs], dtype=np.float64)
    metrics = {"num_turns/min": float(turns.min()), "num_turns/max": float(turns.max()),
               "num_turns/mean": float(turns.mean())}
    for phase in ("generate_sequences", "tool_calls"):
        seconds = [o.metrics[phase] for o in outputs if phase in o.metrics]
        if seconds:
            timing.update({f"agent_loop/{phase}/min": min(seconds), f"agent_loop/{phase}/max": max(seconds),
                           f"agent_loop/{phase}/mean": float(np.mean(seconds))})
    for key in ("tool_calls", "malformed_tool_calls", "tool_errors"):
        values = [o.extra_fields[key] for o in outputs if key in o.extra_fields]
        if values:
            metrics[f"minirl/{key}/mean"] = float(np.mean(values))
    return metrics


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
