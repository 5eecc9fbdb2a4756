"""The single controller: verl's `RayPPOTrainer.fit()` in one readable file.

This file mirrors verl 0.9.1's legacy trainer, `verl/trainer/ppo/ray_trainer.py::RayPPOTrainer.fit`
(`trainer.use_v1=false`, minirl's default; 0.9.1 marks it deprecated). verl's default v1 trainer
(`verl/trainer/ppo/v1/trainer_base.py`; here `minirl/v1/trainer.py`, a subclass of this one) keeps the step
but collects its batch from per-sample agent-loop sessions through a replay buffer (which also hosts DAPO's
group filter) instead of `batch.repeat(n, interleave=True)`. One training step, in verl's order and names:

    uid per prompt -> repeat n (interleaved) -> generate -> (ReMax: greedy baseline) -> reward
    -> (DAPO: keep groups with a reward spread, generate more if needed) -> balance_batch
    -> (distillation: the teacher's log-probs of the sampled tokens)
    -> old log-probs (actor; bypass mode reuses the rollout's) -> reference log-probs (if a KL is used)
    -> values (if a critic is used) -> KL in the reward (optional) -> rollout correction -> advantages
    -> critic update -> actor update (after trainer.critic_warmup) -> weight sync to the rollout -> checkpoint
    -> validation -> metrics
(verl saves the checkpoint before the weight sync; minirl syncs first, so a saved stale engine copy is the one
the next step samples with.)

The trainer decides *what* happens *when*; the workers do the model work: objects in this process
(`minirl/workers.py`) or Ray worker groups (`minirl/single_controller.py`, `trainer.use_ray`).
That split is HybridFlow's idea, and Chapter 10 reads this file beside verl's. Every process holds
the same global batch and computes every batch-level quantity (advantages, whitening, the KL
controller, metrics) on all of it, as verl's driver does; only the model work is sharded
(`minirl/parallel.py`), so N processes make exactly the run of one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list
from tqdm.auto import tqdm

from minirl import data as data_lib
from minirl import machine, models
from minirl.advantage import compute_advantage
from minirl.config import TINY, Config, check_split_over_ranks, load_config, to_yaml
from minirl.core import agg_loss
from minirl.dapo import DAPORewardManager, filter_groups
from minirl.kl import AdaptiveKLController, FixedKLController, apply_kl_penalty
from minirl.metrics import (
    Tracking,
    compute_data_metrics,
    compute_debug_metrics,
    compute_throughput_metrics,
    compute_timing_metrics,
    compute_variance_proxy_metrics,
    logp_advantage_covariance,
    peak_rss_gb,
    process_validation_metrics,
    timer,
)
from minirl.parallel import apply_thread_policy, check_launch, dp_compute
from minirl.protocol import DataProto
from minirl.reward_model import RewardModelScorer
from minirl.rewards import GDPORewardManager, NaiveRewardManager, load_custom_reward_function
from minirl.rollout_correction import compute_rollout_correction_and_rejection_mask
from minirl.run_dir import CHECKPOINT_PREFIX, LATEST_FILE, RunDirectoryBusy, RunLock, set_aside
from minirl.seqlen_balancing import balance_order
from minirl.sft import default_warm_start, warm_start_dir
from minirl.teacher import build_teacher
from minirl.workers import build_actor, build_critic, build_reference, build_rollout

TRAIN, VALIDATION = 0, 1  # tags that keep training and validation sampling seeds apart


class CheckpointError(RuntimeError):
    """The latest checkpoint cannot be loaded; the message names the earlier ones and how to go on."""


def _seed_for(*parts: int) -> int:
    """A reproducible 63-bit seed from integers (seeds, step, row, ...): resuming replays the same randomness."""
    return int.from_bytes(np.random.SeedSequence(list(parts)).generate_state(2, np.uint32).tobytes(), "little") >> 1


class PPOTrainer:
    """Builds the workers from a Config and runs `fit()`; one process or several (see README)."""

    ROW_FIELDS = ("data_source", "reward_model", "extra_info", "raw_prompt")  # per-row fields a reward reads
    SYNC_AFTER_UPDATE = True  # legacy: the weight sync follows the actor update; v1 syncs in on_step_end

    def __init__(self, config: Config, show_progress: bool | None = None):
        self.config = cfg = config
        apply_thread_policy()
        trackers = [name for name in cfg.trainer.logger if name in ("tensorboard", "wandb")]
        for name in trackers:
            if importlib.util.find_spec(name) is None:
                raise ValueError(f"trainer.logger asks for {name}, which is not installed: pip install {name}, or "
                                 f"drop it (e.g. trainer.logger=[console]).")
        self.run_dir = Path(cfg.trainer.default_local_dir)
        self.accelerator = Accelerator(log_with=trackers or None, project_dir=str(self.run_dir))
        check_launch(self.accelerator)
        self.world = self.accelerator.num_processes
        if self.world > 1 and self.accelerator.is_main_process:
            print(f"minirl: {self.world} processes in one group ({self.accelerator.distributed_type.value})",
                  file=sys.stderr)
        self.show_progress = cfg.trainer.progress_bar if show_progress is None else show_progress
        self.seed = 0 if cfg.data.seed is None else cfg.data.seed
        # Everything random is seeded from data.seed by its own generator (data order, each row's sampling, the
        # critic head). torch's global generator, which an import seeds at random, is seeded too: Clip-Cov draws
        # its tokens from it (verl's torch.randperm), and a run must repeat. (A resumed run restarts that draw.)
        torch.manual_seed(self.seed + self.accelerator.process_index)
        self._check_world_size()

        # Models and data. "tiny" means the cached SFT warm start and its dataset (built once).
        model_path, train_files, val_files = self._resolve_paths()
        self.tokenizer = models.load_tokenizer(model_path)
        data = cfg.data
        self.train_rows = data_lib.load_rl_rows(train_files, self.tokenizer, data.max_prompt_length,
                                                data.filter_overlong_prompts, data.train_max_samples, data.shuffle,
                                                data.seed)
        self.val_rows = data_lib.load_rl_rows(val_files, self.tokenizer, data.max_prompt_length,
                                              data.filter_overlong_prompts, data.val_max_samples, False,
                                              key="data.val_files")
        # verl 0.9.1: a custom reward function, if set, scores; else a reward model, if enabled, scores alone;
        # else the rules of minirl/rewards.py, chosen by data_source
        custom = cfg.reward.custom_reward_function
        compute_score = load_custom_reward_function(custom.path, custom.name) if custom.path else None
        if cfg.reward.reward_model.enable and not custom.path:
            self.reward_fn = RewardModelScorer(cfg.reward.reward_model.model_path, self.tokenizer)
        elif cfg.reward.reward_manager.name == "dapo":  # the rule or custom score plus DAPO's overlong penalty
            kwargs = cfg.reward.reward_kwargs
            overlong = kwargs.overlong_buffer_cfg
            self.reward_fn = DAPORewardManager(self.tokenizer, compute_score, overlong.len if overlong.enable else None,
                                               kwargs.max_resp_len, overlong.penalty_factor, overlong.log)
        elif cfg.reward.reward_manager.name == "gdpo":  # naive, plus the experiment name in extra_info
            self.reward_fn = GDPORewardManager(self.tokenizer, compute_score, cfg.trainer.experiment_name)
        else:
            self.reward_fn = NaiveRewardManager(self.tokenizer, compute_score)
        # verl's dataloader yields batches of gen_batch_size (or train_batch_size) prompts and drops the last
        # partial batch of each epoch; total_training_steps defaults to total_epochs passes over it.
        self.loader_batch_size = data.gen_batch_size or data.train_batch_size
        self.steps_per_epoch = len(self.train_rows) // self.loader_batch_size
        if self.steps_per_epoch == 0:
            raise ValueError(f"the training set has {len(self.train_rows)} prompts, fewer than one batch of "
                             f"{self.loader_batch_size}: lower data.train_batch_size or add data.")
        by_epochs = cfg.trainer.total_epochs * self.steps_per_epoch
        self.total_training_steps = min(cfg.trainer.total_training_steps or by_epochs, by_epochs)

        algo = cfg.algorithm
        self.use_reference = algo.use_kl_in_reward or cfg.actor_rollout_ref.actor.use_kl_loss
        self.use_critic = cfg.critic.enable if cfg.critic.enable is not None else algo.adv_estimator == "gae"
        critic_path = (model_path if cfg.critic.model.path == TINY else cfg.critic.model.path) \
            if self.use_critic else None
        self.model_path = model_path
        optim_steps = self.total_training_steps * self.updates_per_step()  # the lr schedule's horizon
        if cfg.trainer.use_ray:  # the same roles as Ray worker groups, driven from here (Chapter 10)
            from minirl.single_controller import build_ray_workers

            roles = build_ray_workers(cfg, model_path, critic_path, self.use_reference, optim_steps, self.seed)
        else:  # the same roles as objects in this process (every process of a launch holds one of each)
            actor = build_actor(cfg, model_path, self.accelerator, optim_steps)
            roles = {"actor": actor, "rollout": build_rollout(actor, self.tokenizer, cfg),
                     "reference": build_reference(cfg, model_path, self.accelerator, actor) if self.use_reference
                     else None,
                     "critic": build_critic(cfg, critic_path, self.accelerator, optim_steps, self.seed)
                     if self.use_critic else None}
        self.actor, self.rollout, self.reference, self.critic = (roles[k] for k in ("actor", "rollout", "reference",
                                                                                     "critic"))
        self.worker_groups = roles.get("groups", [])  # Ray's processes, stopped when fit() ends
        # on-policy distillation: a frozen teacher scores the student's tokens (verl: a teacher server pool)
        self.teacher = build_teacher(cfg, self.tokenizer, self.accelerator) if cfg.distillation.enabled else None
        self.kl_ctrl = (AdaptiveKLController(algo.kl_ctrl.kl_coef, algo.kl_ctrl.target_kl, algo.kl_ctrl.horizon)
                        if algo.kl_ctrl.type == "adaptive" else FixedKLController(algo.kl_ctrl.kl_coef))
        self.global_step = 0
        self.data_position = 0  # prompts consumed so far, so a resumed run continues the same order

    # ------------------------------------------------------------------------------------------
    # Setup helpers
    # ------------------------------------------------------------------------------------------

    def updates_per_step(self) -> int:
        """Local updates (each one pass of the pipeline on its own batch) per training step: 1 here; the v1
        trainer's separate_async makes parameter_sync_step of them, and its lr schedule counts them all."""
        return 1

    def _check_world_size(self) -> None:
        """The data-parallel size: the launch's processes, or with trainer.use_ray the ranks of each worker group."""
        cfg = self.config
        if cfg.trainer.use_ray:
            if self.world > 1:
                raise ValueError("trainer.use_ray drives the worker groups from one process: start it with "
                                 "`python -m minirl train ...`, not with accelerate launch or torchrun.")
            self.world = (cfg.trainer.n_gpus_per_node or 1) * cfg.trainer.nnodes  # ranks per worker group
        elif cfg.trainer.n_gpus_per_node is not None and cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes != self.world:
            raise ValueError(f"trainer.n_gpus_per_node * trainer.nnodes = {cfg.trainer.n_gpus_per_node} * "
                             f"{cfg.trainer.nnodes} but the launch started {self.world} process(es): make them agree "
                             "(or drop trainer.n_gpus_per_node to use whatever the launch started).")
        check_split_over_ranks(cfg, self.world)

    def _resolve_paths(self) -> tuple:
        cfg = self.config
        paths = [cfg.actor_rollout_ref.model.path, cfg.data.train_files, cfg.data.val_files]
        if TINY in paths:
            if self.accelerator.num_processes > 1 and not (warm_start_dir() / "warm_start.json").exists():
                # Building it here would run SFT's own data-parallel training inside this launch.
                raise ValueError("the tiny warm start is not built yet: run `python -m minirl warm-start` once "
                                 "(one process), then launch the processes.")
            warm = default_warm_start(show_progress=self.accelerator.is_main_process)
            tiny = {0: str(warm), 1: str(warm / "data" / "train.parquet"), 2: str(warm / "data" / "test.parquet")}
            paths = [tiny[i] if p == TINY else p for i, p in enumerate(paths)]
        return tuple(paths)

    def _next_prompts(self, count: int) -> tuple[list[dict], list[int], int]:
        """The next `count` prompts of the seeded, epoch-wise shuffled stream, their stream positions, and the epoch."""
        rows, positions, orders = [], [], {}
        usable = self.steps_per_epoch * self.loader_batch_size  # verl's drop_last: a partial batch is skipped
        first_epoch = self.data_position // usable
        for position in range(self.data_position, self.data_position + count):
            epoch, offset = divmod(position, usable)
            if epoch not in orders:
                orders[epoch] = (np.random.default_rng(_seed_for(self.seed, epoch)).permutation(len(self.train_rows))
                                 if self.config.data.shuffle else np.arange(len(self.train_rows)))
            rows.append(self.train_rows[orders[epoch][offset]])
            positions.append(position)
        self.data_position += count
        return rows, positions, first_epoch

    def _prompt_batch(self, rows: list[dict], uids: list[str]) -> DataProto:
        """The global batch of prompts: tokenised prompts plus the per-row fields (uid = one per prompt)."""
        data = self.config.data
        encoded = data_lib.encode_prompts(self.tokenizer, [r["prompt"] for r in rows], data.max_prompt_length,
                                          data.truncation)
        return DataProto(batch=encoded, non_tensor_batch={
            "data_source": [r["data_source"] for r in rows], "reward_model": [r["reward_model"] for r in rows],
            "extra_info": [r.get("extra_info") for r in rows], "raw_prompt": [r["prompt"] for r in rows],
            "uid": uids})

    def _generate(self, prompts: DataProto, n: int, sampling: dict, seed_parts: tuple) -> DataProto:
        """n responses per prompt row; row i of the repeated batch is sampled with seed (rollout.seed, data.seed,
        *seed_parts, i), so the responses do not depend on the number of processes."""
        gen_batch = DataProto(batch={k: prompts[k] for k in ("input_ids", "attention_mask")}).repeat(n, interleave=True)
        rollout_seed = self.config.actor_rollout_ref.rollout.seed
        gen_batch.batch["row_seed"] = torch.tensor(
            [_seed_for(rollout_seed, self.seed, *seed_parts, i) for i in range(len(gen_batch))], dtype=torch.long)
        gen_batch.meta_info = {"response_length": self.config.data.max_response_length, **sampling}
        return self.rollout.generate_sequences(gen_batch)

    def _sampling(self, validation: bool = False) -> dict:
        rollout = self.config.actor_rollout_ref.rollout
        source = rollout.val_kwargs if validation else rollout
        return {"do_sample": source.do_sample and source.temperature > 0, "temperature": source.temperature,
                "top_p": source.top_p, "top_k": source.top_k}

    def _reward(self, batch: DataProto) -> DataProto:
        """token_level_scores and the reward function's extra values (acc, pred, ...) per row, computed in shards."""
        def score(chunk: DataProto) -> DataProto:
            scores, extra = self.reward_fn({
                "responses": chunk["responses"], "response_mask": chunk["response_mask"],
                "response_attention_mask": chunk["response_attention_mask"],
                **{key: list(chunk[key]) for key in self.ROW_FIELDS}})
            return DataProto(batch={"token_level_scores": scores}, non_tensor_batch=extra)

        response_length = batch["responses"].shape[1]  # a multi-turn answer's tool results are attended, not trained
        view = DataProto(batch={"responses": batch["responses"], "response_mask": batch["response_mask"],
                                "response_attention_mask": batch["attention_mask"][:, -response_length:]},
                         non_tensor_batch={k: batch[k] for k in self.ROW_FIELDS})
        return dp_compute(score, view, self.accelerator)

    # ------------------------------------------------------------------------------------------
    # One generation round: prompts -> scored responses
    # ------------------------------------------------------------------------------------------

    def _generate_and_score(self, count: int, round_index: int, timing: dict) -> tuple[DataProto, int]:
        cfg = self.config
        n = cfg.actor_rollout_ref.rollout.n
        rows, positions, epoch = self._next_prompts(count)
        batch = self._prompt_batch(rows, [str(p) for p in positions])  # a prompt's stream position is its uid
        with timer("gen", timing):
            gen_output = self._generate(batch, n, self._sampling(), (TRAIN, self.global_step, round_index))
            if cfg.algorithm.adv_estimator == "remax":  # the greedy answer to each prompt is the baseline
                greedy = self._generate(batch, 1, {**self._sampling(), "do_sample": False}, ())
                greedy.non_tensor_batch = dict(batch.non_tensor_batch)
                batch.batch["reward_baselines"] = self._reward(greedy)["token_level_scores"].sum(-1)
        batch = batch.repeat(n, interleave=True)
        for key in ("input_ids", "attention_mask", "position_ids"):  # the rollout returns prompt + response
            batch.batch.pop(key)
        batch = batch.union(gen_output)
        with timer("reward", timing):
            batch = batch.union(self._reward(batch))
        return batch, epoch

    def _filter_metric(self, batch: DataProto) -> torch.Tensor:
        metric = self.config.algorithm.filter_groups.metric
        if metric in ("reward", "seq_reward"):
            return batch["token_level_scores"].sum(-1)
        if metric == "seq_final_reward":
            raise ValueError("filter_groups.metric=seq_final_reward needs the KL-penalised reward, which minirl "
                             "computes after filtering: use reward (verl 0.9.1's default).")
        if metric not in batch:
            raise ValueError(f"algorithm.filter_groups.metric={metric!r}: the reward function returns no such "
                             "value. Use reward, or a key your compute_score returns in its dict (e.g. acc).")
        return torch.tensor([float(v) for v in batch[metric]])

    def _collect_batch(self, timing: dict, metrics: dict) -> tuple[DataProto, int]:
        """Generate (and, with DAPO's filter_groups, keep generating) until the batch is complete."""
        cfg = self.config
        if not cfg.algorithm.filter_groups.enable:
            return self._generate_and_score(cfg.data.train_batch_size, 0, timing)
        n, kept, rounds, dropped = cfg.actor_rollout_ref.rollout.n, [], 0, 0
        while True:
            batch, epoch = self._generate_and_score(self.loader_batch_size, rounds, timing)
            rounds += 1
            rows, num_dropped = filter_groups(self._filter_metric(batch), batch["uid"])
            kept.append(batch.select_idxs(rows))
            dropped += num_dropped
            have = sum(len(part) for part in kept) // n
            if have >= cfg.data.train_batch_size:
                break
            limit = cfg.algorithm.filter_groups.max_num_gen_batches
            if 0 < limit <= rounds:
                raise RuntimeError(f"filter_groups: after {rounds} generation rounds only {have} of "
                                   f"{cfg.data.train_batch_size} prompts had a reward spread. Raise "
                                   "algorithm.filter_groups.max_num_gen_batches (0 = no limit) or data.gen_batch_size, "
                                   "or start from a model whose answers vary more.")
        metrics["minirl/num_gen_batches"] = rounds
        metrics["minirl/num_dropped_groups"] = dropped
        return DataProto.concat(kept).slice(0, cfg.data.train_batch_size * n), epoch

    # ------------------------------------------------------------------------------------------
    # The step
    # ------------------------------------------------------------------------------------------

    def _actor_turn(self) -> bool:
        """Whether this step updates the actor: verl skips it (and the checkpoint) while critic_warmup > step."""
        return self.config.trainer.critic_warmup <= self.global_step

    def train_step(self, timing: dict) -> tuple[dict[str, float], DataProto]:
        """One step in verl's order; returns its metrics (without timing) and the final batch."""
        cfg, algo = self.config, self.config.algorithm
        actor_cfg, n = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout.n
        metrics = {}
        batch, epoch = self._collect_batch(timing, metrics)
        if self.teacher is not None:  # verl's agent loop asks the teacher right after each sample (timed in gen)
            with timer("gen", timing):
                batch = batch.union(self.teacher.compute_teacher_logprobs(batch))
        if cfg.trainer.balance_batch:
            batch = batch.select_idxs(balance_order(batch["attention_mask"].sum(-1)))
        bypass = algo.rollout_correction.bypass_mode
        if bypass:  # verl's apply_bypass_mode: pi_old := pi_rollout, no recomputation (and no entropy metric)
            batch = batch.union(DataProto(batch={"old_log_probs": batch["rollout_log_probs"]}))
        else:
            with timer("old_log_prob", timing):
                old = self._compute_old_log_prob(batch)
                metrics["actor/entropy"] = agg_loss(old["entropys"], batch["response_mask"], actor_cfg.loss_agg_mode,
                                                    loss_scale_factor=actor_cfg.loss_scale_factor).item()
                batch = batch.union(DataProto(batch={key: old[key] for key in ("old_log_probs", "sum_pi_squared")
                                                     if key in old.batch.keys()}))
                metrics.update(compute_debug_metrics(batch))
        if self.use_reference:
            with timer("ref", timing):
                batch = batch.union(self.reference.compute_ref_log_prob(batch))
        if self.use_critic:
            with timer("values", timing):
                batch = batch.union(self.critic.compute_values(batch))
        with timer("adv", timing):
            if algo.use_kl_in_reward:
                rewards, kl_metrics = apply_kl_penalty(batch["token_level_scores"], batch["old_log_probs"],
                                                       batch["ref_log_prob"], batch["response_mask"], self.kl_ctrl,
                                                       algo.kl_penalty)
                metrics.update(kl_metrics)
            else:
                rewards = batch["token_level_scores"]
            batch.batch["token_level_rewards"] = rewards
            if not bypass:  # bypass mode corrects inside the actor's loss
                batch = self._rollout_correction(batch, metrics)
            batch = compute_advantage(batch, algo.adv_estimator, algo.gamma, algo.lam, algo.norm_adv_by_std_in_grpo,
                                          config=algo)
        if self.use_critic:
            with timer("update_critic", timing):
                metrics.update(self.critic.update_critic(batch, cfg.critic.ppo_mini_batch_size * n))
        if self._actor_turn():
            with timer("update_actor", timing):
                metrics.update(self.actor.update_actor(batch, actor_cfg.ppo_mini_batch_size * n))
            if self.SYNC_AFTER_UPDATE:
                self.update_rollout_weights(timing)
        metrics["training/epoch"] = epoch
        metrics.update(compute_data_metrics(batch, self.use_critic, cfg.data.max_prompt_length,
                                            cfg.data.max_response_length))
        if algo.adv_estimator == "gdpo":  # verl's per-component reward statistics (np.std: population)
            for key in algo.gdpo_reward_keys or []:
                if key in batch.non_tensor_batch:
                    values = np.asarray(batch[key], dtype=np.float32)
                    metrics.update({f"gdpo/{key}/{name}": float(fn(values)) for name, fn in
                                    (("mean", np.mean), ("std", np.std), ("max", np.max), ("min", np.min))})
        metrics.update(compute_variance_proxy_metrics(batch, metrics.get("actor/grad_norm")))  # with sum_pi_squared
        if "old_log_probs" in batch.batch.keys():  # the entropy mechanism (Chapter 11): entropy falls as this is > 0
            metrics["minirl/logp_adv_cov"] = logp_advantage_covariance(batch["old_log_probs"], batch["advantages"],
                                                                       batch["response_mask"])
        # minirl's own metrics: each number the reward function returns beside its score (acc; gold_score when a
        # reward model scores; the chain task's format and worked), and groups that carry no GRPO signal
        for key in sorted(set(batch.non_tensor_batch) - set(self.ROW_FIELDS) - {"uid"}):
            values = batch[key]
            if all(isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating)) for v in values):
                metrics[f"minirl/{key}/mean"] = float(np.mean([float(v) for v in values]))
        if "acc" in batch.non_tensor_batch:  # Dr.GRPO's length-bias argument is about wrong answers' lengths
            right = torch.tensor([float(v) > 0 for v in batch["acc"]])  # acc: True/False, or a plain score
            lengths = batch["response_mask"].sum(-1).float()
            for name, rows in (("correct", right), ("wrong", ~right)):
                if rows.any():
                    metrics[f"minirl/response_length/{name}_mean"] = lengths[rows].mean().item()
        _, zero_spread = filter_groups(batch["token_level_scores"].sum(-1), batch["uid"])
        metrics["minirl/zero_spread_group_frac"] = zero_spread / len(set(batch["uid"]))
        return metrics, batch

    def _compute_old_log_prob(self, batch: DataProto) -> DataProto:
        """pi_old's log-probs (and entropy) of the batch: the actor's current weights (verl's
        `_compute_old_log_prob`; the v1 trainer's separate_async mode keeps the step's first weights)."""
        return self.actor.compute_log_prob(batch)

    def update_rollout_weights(self, timing: dict) -> None:
        """The weight sync (verl: `checkpoint_manager.update_weights`): a no-op when the rollout shares the
        actor's weights; an engine with its own copy re-syncs (every sync_interval-th actor update)."""
        with timer("update_weights", timing):
            updates = self.global_step - max(self.config.trainer.critic_warmup, 1) + 1
            self.rollout.update_weights(actor_updates=updates)

    def _rollout_correction(self, batch: DataProto, metrics: dict) -> DataProto:
        """Off-policy metrics always; IS weights / rejection mask when configured (before advantages)."""
        weights, mask, correction_metrics = compute_rollout_correction_and_rejection_mask(
            batch["old_log_probs"], batch["rollout_log_probs"], batch["response_mask"],
            self.config.algorithm.rollout_correction)
        metrics.update(correction_metrics)
        if weights is not None:
            batch.batch["rollout_is_weights"] = weights
        batch.batch["response_mask"] = mask
        return batch

    # ------------------------------------------------------------------------------------------
    # Validation (RayPPOTrainer._validate)
    # ------------------------------------------------------------------------------------------

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Generate val_kwargs.n responses per validation prompt, score them, and name the metrics as verl does.

        With verl's defaults (n=1, greedy) that is `val-core/<data_source>/acc/mean@1` when the reward
        returns an accuracy (a float score counts as one, as verl's reward loop does), else
        `val-core/<data_source>/reward/mean@1`; `val-aux/...` holds the rest.
        """
        n = self.config.actor_rollout_ref.rollout.val_kwargs.n
        uids = [str(i) for i in range(len(self.val_rows))]
        prompts = self._prompt_batch(self.val_rows, uids)
        # the actor's own weights: with a stale or low-precision rollout engine, validation still judges the policy
        # being trained (verl's synchronous trainer validates right after syncing the engine)
        output = self._generate(prompts, n, {**self._sampling(validation=True), "actor_weights": True},
                                (VALIDATION, self.global_step))
        batch = DataProto(non_tensor_batch=prompts.non_tensor_batch).repeat(n, interleave=True).union(output)
        scored = self._reward(batch)
        infos = {"reward": scored["token_level_scores"].sum(-1).tolist(),
                 **{k: list(v) for k, v in scored.non_tensor_batch.items()}}
        return process_validation_metrics(list(batch["data_source"]), list(batch["uid"]), infos)

    # ------------------------------------------------------------------------------------------
    # Checkpoints: written to a temporary directory, then renamed (never half-written)
    # ------------------------------------------------------------------------------------------

    def _trained(self) -> dict:
        """name -> trained model (actor, and critic if any)."""
        return {"actor": self.actor, **({"critic": self.critic} if self.use_critic else {})}

    def _write_checkpoint(self) -> Path:
        """Write the step's checkpoint into a hidden temporary directory; not yet visible to a resume.

        `fit` publishes it (`_publish_checkpoint`) only after the step's metrics line is written.
        """
        self.accelerator.wait_for_everyone()
        tmp = self.run_dir / f".tmp-{CHECKPOINT_PREFIX}{self.global_step}"
        if self.accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            for name, trained in self._trained().items():
                trained.save_checkpoint(tmp, name, self.tokenizer if name == "actor" else None)
            self.rollout.save_checkpoint(tmp)  # a stale or lower-precision engine copy resumes as it was
            state = {"global_step": self.global_step, "data_position": self.data_position,
                     "kl_coef": self.kl_ctrl.value}
            (tmp / "trainer_state.json").write_text(json.dumps(state))
        self.accelerator.wait_for_everyone()
        return tmp

    def _publish_checkpoint(self, tmp: Path) -> Path:
        """Rename the written checkpoint into place, then point `latest_checkpointed_iteration.txt` at it.

        Each is one atomic rename, so a resume sees the old checkpoint or the new one, never half of one.
        """
        target = self.run_dir / tmp.name.removeprefix(".tmp-")
        step = target.name.removeprefix(CHECKPOINT_PREFIX)
        if self.accelerator.is_main_process:
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
            latest_tmp = self.run_dir / f".{LATEST_FILE}.tmp"
            latest_tmp.write_text(step)
            os.replace(latest_tmp, self.run_dir / LATEST_FILE)
        self.accelerator.wait_for_everyone()
        return target

    def load_checkpoint(self) -> bool:
        """Resume from the latest checkpoint in the run directory, if any. True if it resumed."""
        latest = self.run_dir / LATEST_FILE
        if self.config.trainer.resume_mode == "disable" or not latest.exists():
            return False
        step = latest.read_text().strip()
        path = self.run_dir / f"{CHECKPOINT_PREFIX}{step}"
        try:
            state = json.loads((path / "trainer_state.json").read_text())
            state = {key: state[key] for key in ("global_step", "data_position", "kl_coef")}  # all three, or an error
            for name, trained in self._trained().items():
                trained.load_checkpoint(path, name)
            self.rollout.load_checkpoint(path)  # the engine's own copy, if saved (else synced from the actor)
        except Exception as error:  # nothing on disk changed; the run stops, so a half-loaded model is never used
            earlier = sorted(p.name for p in self.run_dir.glob(f"{CHECKPOINT_PREFIX}*") if p != path)
            raise CheckpointError(
                f"the latest checkpoint {path} cannot be loaded ({type(error).__name__}: {error}). Nothing was "
                f"deleted; earlier checkpoints: {earlier or 'none'}. Point {latest} at an earlier step, remove "
                f"the broken directory, or set trainer.resume_mode=disable to start over.") from error
        self.global_step, self.data_position = state["global_step"], state["data_position"]
        self.kl_ctrl.value = state["kl_coef"]
        return True

    # ------------------------------------------------------------------------------------------
    # fit
    # ------------------------------------------------------------------------------------------

    def fit(self) -> list[dict[str, float]]:
        """Train for total_training_steps; returns the per-step metrics (also in metrics.jsonl).

        The run holds the run directory's lock throughout (`minirl/run_dir.py`): a second run on the same
        directory is refused. A fresh run moves an earlier run's files to `previous/` instead of
        overwriting them.
        """
        try:
            with self._lock_run_dir():
                return self._fit()
        finally:
            for group in self.worker_groups:
                group.shutdown()

    def _lock_run_dir(self) -> contextlib.ExitStack:
        """Process 0 takes the run directory's lock and tells every process whether it got it.

        A busy (or unwritable) directory then stops every process of a launch with the same message, instead of
        process 0 alone while the others wait at the first barrier for a peer that has left.
        """
        held, refusal = contextlib.ExitStack(), None  # exiting `held` releases the lock
        if self.accelerator.is_main_process:
            try:
                held.enter_context(RunLock(self.run_dir))
            except (RunDirectoryBusy, ValueError) as error:
                refusal = (type(error).__name__, str(error))
        if self.accelerator.num_processes > 1:
            refusal = broadcast_object_list([refusal], from_process=0)[0]
        if refusal is not None:
            kind, message = refusal
            raise (RunDirectoryBusy if kind == "RunDirectoryBusy" else ValueError)(message)
        return held

    def _start(self) -> bool:
        """Resume if a checkpoint says so; otherwise set an earlier run's files aside. Writes config.yaml."""
        self.accelerator.wait_for_everyone()
        resumed = self.load_checkpoint()
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            if resumed:
                print(f"minirl: resumed from {self.run_dir / (CHECKPOINT_PREFIX + str(self.global_step))} "
                      f"(step {self.global_step} of {self.total_training_steps})", file=sys.stderr)
            elif (moved := set_aside(self.run_dir)) is not None:
                print(f"minirl: {self.run_dir} held an earlier run; its files are now in {moved} (nothing deleted)",
                      file=sys.stderr)
            (self.run_dir / "config.yaml").write_text(to_yaml(self.config) + machine_yaml())
        self.accelerator.wait_for_everyone()
        return resumed

    # ------------------------------------------------------------------------------------------
    # Hooks: verl's v1 trainer (minirl/v1/trainer.py) acts in them; the legacy loop has none, so here they are
    # empty. Order: on_init_end, [on_validate_begin/end], on_train_begin, then per step on_step_begin,
    # (on_sample_begin/end inside the step), checkpoint, on_step_end, [on_validate_begin/end].
    # ------------------------------------------------------------------------------------------

    def on_init_end(self) -> None:
        """After set-up and any resume, before the first validation."""

    def on_train_begin(self) -> None:
        """Before the first training step."""

    def on_step_begin(self) -> None:
        """At the start of each step."""

    def on_step_end(self, timing: dict) -> None:
        """After the step's update and checkpoint, before validation."""

    def on_validate_begin(self) -> None:
        """Before each validation."""

    def on_validate_end(self) -> None:
        """After each validation."""

    def _fit(self) -> list[dict[str, float]]:
        cfg = self.config.trainer
        resumed = self._start()
        tracking = Tracking(self.run_dir, cfg.logger, self.accelerator, asdict(self.config), cfg.project_name,
                            start_step=self.global_step)
        history = []
        self.on_init_end()
        if cfg.val_before_train and not resumed:  # a resumed run already logged its step-0 validation
            self.on_validate_begin()
            val = self.validate()
            self.on_validate_end()
            tracking.log(val, step=0)
            history.append({"step": 0, **val})
            if cfg.val_only:
                tracking.finish()
                return history
        progress = tqdm(total=self.total_training_steps, initial=self.global_step, desc="Training Progress",
                        disable=not (self.show_progress and self.accelerator.is_main_process))
        self.on_train_begin()
        while self.global_step < self.total_training_steps:
            self.global_step += 1
            last = self.global_step == self.total_training_steps
            timing, checkpoint = {}, None
            with timer("step", timing):
                self.on_step_begin()
                metrics, batch = self.train_step(timing)
                if cfg.save_freq > 0 and self._actor_turn() and (last or self.global_step % cfg.save_freq == 0):
                    with timer("save_checkpoint", timing):
                        checkpoint = self._write_checkpoint()
                self.on_step_end(timing)
            if cfg.test_freq > 0 and (last or self.global_step % cfg.test_freq == 0):
                with timer("testing", timing):
                    self.on_validate_begin()
                    metrics.update(self.validate())
                    self.on_validate_end()
            metrics["training/global_step"] = self.global_step
            metrics.update(compute_timing_metrics(batch, timing))
            metrics.update(compute_throughput_metrics(batch, timing, self.world))
            metrics["minirl/peak_rss_gb"] = peak_rss_gb()
            tracking.log(metrics, step=self.global_step)
            # Published only after its metrics line is written: a kill in between resumes from the previous
            # checkpoint, which drops this step's line and runs the step again, so no step's metrics are lost.
            if checkpoint is not None:
                self._publish_checkpoint(checkpoint)
            history.append({"step": self.global_step, **metrics})
            progress.update(1)
            progress.set_postfix(score=f"{metrics['critic/score/mean']:.3f}")
        progress.close()
        tracking.finish()
        return history


def machine_yaml() -> str:
    """config.yaml's last block: where the run computed (CPU, ATen capability, torch, threads, numeric pins).

    Seeded runs give other numbers on another CPU (minirl/machine.py), so a run directory says where it ran.
    Not a config key: `minirl_machine` is only read by people.
    """
    fields = "".join(f"  {key}: {json.dumps(value)}\n" for key, value in machine.describe().items())
    return f"# where this run computed (minirl/machine.py); not a config key\nminirl_machine:\n{fields}"


def train(overrides: list[str] | None = None, show_progress: bool | None = None) -> list[dict[str, float]]:
    """Load the config from verl-style overrides and train. The entry point of `python -m minirl train`.

    `trainer.use_v1=true` trains with verl's v1 trainer (`minirl/v1/trainer.py::PPOTrainerV1`, a subclass of
    this file's PPOTrainer), as verl's `main_ppo.py` picks its task runner."""
    config = load_config(overrides)
    if config.trainer.use_v1:
        from minirl.v1.trainer import PPOTrainerV1  # deferred: the v1 trainer builds on this module

        return PPOTrainerV1(config, show_progress).fit()
    return PPOTrainer(config, show_progress).fit()
