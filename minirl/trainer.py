"""The single controller: verl's `RayPPOTrainer.fit()` in one readable file.

One training step, in verl's order and with verl's names (`verl/trainer/ppo/ray_trainer.py`):

    uid per prompt -> repeat n (interleaved) -> generate -> (ReMax: greedy baseline) -> reward
    -> (DAPO: keep groups with a reward spread, generate more if needed)
    -> old log-probs (actor) -> reference log-probs (if a KL is used) -> values (if a critic is used)
    -> KL in the reward (optional) -> rollout correction (optional) -> advantages
    -> critic update -> actor update -> metrics -> validation -> checkpoint

The trainer decides *what* happens *when*; the workers (`minirl/workers.py`) do the model work.
That split is HybridFlow's idea, and Chapter 10 reads this file beside verl's.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import uuid
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from tqdm.auto import tqdm

from minirl import data as data_lib
from minirl import models
from minirl.config import TINY, Config, load_config, to_yaml
from minirl.core import masked_mean
from minirl.dapo import filter_groups
from minirl.evaluate import evaluate
from minirl.gae import compute_gae_advantage_return
from minirl.grpo import compute_grpo_outcome_advantage
from minirl.kl import AdaptiveKLController, FixedKLController, apply_kl_penalty
from minirl.metrics import (
    Tracking,
    compute_data_metrics,
    compute_throughput_metrics,
    compute_timing_metrics,
    timer,
)
from minirl.protocol import DataProto
from minirl.reinforce_pp import (
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
)
from minirl.remax import compute_remax_outcome_advantage
from minirl.rewards import NaiveRewardManager
from minirl.rloo import compute_rloo_outcome_advantage
from minirl.rollout_correction import (
    compute_offpolicy_metrics,
    compute_rollout_correction_weights,
    compute_rollout_rejection_mask,
)
from minirl.sft import default_warm_start, warm_start_dir
from minirl.workers import Actor, Critic, Reference, Rollout

CHECKPOINT_PREFIX = "global_step_"
LATEST_FILE = "latest_checkpointed_iteration.txt"  # verl's name


# ----------------------------------------------------------------------------------------------
# Advantage dispatch (verl/trainer/ppo/ray_trainer.py::compute_advantage)
# ----------------------------------------------------------------------------------------------


def compute_advantage(data: DataProto, adv_estimator: str, gamma: float = 1.0, lam: float = 1.0,
                      norm_adv_by_std_in_grpo: bool = True) -> DataProto:
    """Add `advantages` and `returns` to the batch with the chosen estimator."""
    rewards, mask = data["token_level_rewards"], data["response_mask"]
    if adv_estimator == "gae":
        advantages, returns = compute_gae_advantage_return(rewards, data["values"], mask, gamma, lam)
    elif adv_estimator == "grpo":
        advantages, returns = compute_grpo_outcome_advantage(rewards, mask, data["uid"],
                                                             norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)
    elif adv_estimator == "rloo":
        advantages, returns = compute_rloo_outcome_advantage(rewards, mask, data["uid"])
    elif adv_estimator == "reinforce_plus_plus":
        advantages, returns = compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma)
    elif adv_estimator == "reinforce_plus_plus_baseline":
        advantages, returns = compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, data["uid"])
    elif adv_estimator == "remax":
        advantages, returns = compute_remax_outcome_advantage(rewards, data["reward_baselines"], mask)
    else:
        raise ValueError(f"unknown adv_estimator {adv_estimator!r}")
    return data.union(DataProto(batch={"advantages": advantages, "returns": returns}))


def _seed_for(*parts: int) -> int:
    """A reproducible 63-bit seed from integers (step, rank, ...): resuming replays the same randomness."""
    return int.from_bytes(np.random.SeedSequence(list(parts)).generate_state(2, np.uint32).tobytes(), "little") >> 1


class PPOTrainer:
    """Builds the workers from a Config and runs `fit()`; one process or several (`accelerate launch`)."""

    def __init__(self, config: Config, show_progress: bool | None = None):
        self.config = config
        cfg = config
        trackers = [name for name in cfg.trainer.logger if name in ("tensorboard", "wandb")]
        self.run_dir = Path(cfg.trainer.default_local_dir)
        self.accelerator = Accelerator(log_with=trackers or None, project_dir=str(self.run_dir))
        self.rank, self.world = self.accelerator.process_index, self.accelerator.num_processes
        self.show_progress = cfg.trainer.progress_bar if show_progress is None else show_progress
        random.seed(cfg.trainer.seed)
        np.random.seed(cfg.trainer.seed)
        torch.manual_seed(cfg.trainer.seed)

        n = cfg.actor_rollout_ref.rollout.n
        mini_batch_size = cfg.actor_rollout_ref.actor.ppo_mini_batch_size
        for name, value in (("data.train_batch_size", cfg.data.train_batch_size),
                            ("actor_rollout_ref.actor.ppo_mini_batch_size", mini_batch_size)):
            if value % self.world:
                raise ValueError(f"{name}={value} must be divisible by the number of processes ({self.world}).")
        self.local_prompts = cfg.data.train_batch_size // self.world
        rows_per_mini_batch = mini_batch_size * n // self.world

        # Models and data. "tiny" means the cached SFT warm start and its dataset (built once, by rank 0).
        model_path, train_files, val_files = self._resolve_paths()
        self.tokenizer = models.load_tokenizer(model_path)
        self.train_rows = data_lib.read_parquet(train_files).to_list()
        val_rows = data_lib.read_parquet(val_files).to_list()
        self.val_rows = val_rows if cfg.data.val_max_samples < 0 else val_rows[: cfg.data.val_max_samples]
        self.reward_fn = NaiveRewardManager(self.tokenizer)

        temperature = cfg.actor_rollout_ref.rollout.temperature
        self.actor = Actor(models.load_policy(model_path), cfg.actor_rollout_ref.actor, temperature, self.accelerator,
                           rows_per_mini_batch)
        self.rollout = Rollout(self.actor, self.tokenizer)
        algo = cfg.algorithm
        self.use_reference = algo.use_kl_in_reward or cfg.actor_rollout_ref.actor.use_kl_loss
        self.reference = Reference(models.load_policy(model_path), temperature, self.accelerator) \
            if self.use_reference else None
        self.use_critic = cfg.critic.enable if cfg.critic.enable is not None else algo.adv_estimator == "gae"
        if self.use_critic:
            critic_path = model_path if cfg.critic.model.path == TINY else cfg.critic.model.path
            self.critic = Critic(models.load_critic(critic_path), cfg.critic, self.accelerator, rows_per_mini_batch,
                                 cfg.actor_rollout_ref.actor.loss_agg_mode)
        self.kl_ctrl = (AdaptiveKLController(algo.kl_ctrl.kl_coef, algo.kl_ctrl.target_kl, algo.kl_ctrl.horizon)
                        if algo.kl_ctrl.type == "adaptive" else FixedKLController(algo.kl_ctrl.kl_coef))
        self.global_step = 0
        self.data_position = 0  # prompts consumed so far (global), so a resumed run continues the same order

    # ------------------------------------------------------------------------------------------
    # Setup helpers
    # ------------------------------------------------------------------------------------------

    def _resolve_paths(self) -> tuple[str, str, str]:
        cfg = self.config
        paths = [cfg.actor_rollout_ref.model.path, cfg.data.train_files, cfg.data.val_files]
        if TINY in paths:
            if self.world > 1 and not (warm_start_dir() / "warm_start.json").exists():
                # Building it here would run SFT's own data-parallel training inside this launch.
                raise ValueError("the tiny warm start is not built yet: run `python -m minirl warm-start` once "
                                 "(one process), then `accelerate launch ... -m minirl train`.")
            warm = default_warm_start(show_progress=self.accelerator.is_main_process)
            tiny = {0: str(warm), 1: str(warm / "data" / "train.parquet"), 2: str(warm / "data" / "test.parquet")}
            paths = [tiny[i] if p == TINY else p for i, p in enumerate(paths)]
        return tuple(paths)

    def _next_prompts(self, count: int) -> list[dict]:
        """The next `count` prompts of the seeded, epoch-wise shuffled stream (global order)."""
        rows, total = [], len(self.train_rows)
        for position in range(self.data_position, self.data_position + count):
            epoch, offset = divmod(position, total)
            order = (np.random.default_rng(_seed_for(self.config.trainer.seed, epoch)).permutation(total)
                     if self.config.data.shuffle else np.arange(total))
            rows.append(self.train_rows[order[offset]])
        self.data_position += count
        return rows

    def _prompt_batch(self, rows: list[dict]) -> DataProto:
        """This process's share of `rows` as a DataProto: tokenised prompts plus the per-row fields."""
        share = len(rows) // self.world
        mine = rows[self.rank * share : (self.rank + 1) * share]
        encoded = data_lib.encode_prompts(self.tokenizer, [r["prompt"] for r in mine],
                                          self.config.data.max_prompt_length)
        return DataProto(batch=encoded, non_tensor_batch={
            "data_source": [r["data_source"] for r in mine], "reward_model": [r["reward_model"] for r in mine],
            "extra_info": [r.get("extra_info") for r in mine],
            "uid": [str(uuid.uuid4()) for _ in mine]})  # one uid per prompt, shared by its n responses

    def _generation_meta(self, seed: int, greedy: bool = False) -> dict:
        rollout = self.config.actor_rollout_ref.rollout
        return {"response_length": self.config.data.max_response_length, "do_sample": rollout.do_sample and not greedy,
                "temperature": rollout.temperature, "top_p": rollout.top_p, "top_k": rollout.top_k, "seed": seed}

    def _reward(self, batch: DataProto) -> tuple[torch.Tensor, dict]:
        return self.reward_fn({"responses": batch["responses"], "response_mask": batch["response_mask"],
                               "data_source": list(batch["data_source"]), "reward_model": list(batch["reward_model"]),
                               "extra_info": list(batch["extra_info"])})

    # ------------------------------------------------------------------------------------------
    # One generation round: prompts -> scored responses
    # ------------------------------------------------------------------------------------------

    def _generate_and_score(self, prompt_rows: list[dict], seed: int, timing: dict) -> DataProto:
        cfg = self.config
        n = cfg.actor_rollout_ref.rollout.n
        batch = self._prompt_batch(prompt_rows)
        gen_batch = DataProto(batch={k: batch[k] for k in ("input_ids", "attention_mask")},
                              meta_info=self._generation_meta(seed))
        with timer("gen", timing):
            gen_output = self.rollout.generate_sequences(gen_batch.repeat(n, interleave=True))
        if cfg.algorithm.adv_estimator == "remax":
            with timer("gen_max", timing):  # the greedy answer to each (un-repeated) prompt is the baseline
                gen_batch.meta_info = self._generation_meta(seed, greedy=True)
                greedy = self.rollout.generate_sequences(gen_batch)
                baseline_scores, _ = self._reward(DataProto(
                    batch={k: greedy[k] for k in ("responses", "response_mask")},
                    non_tensor_batch=batch.non_tensor_batch))
                batch.batch["reward_baselines"] = baseline_scores.sum(-1)
        batch = batch.repeat(n, interleave=True)
        for key in ("input_ids", "attention_mask", "position_ids"):  # the rollout returns prompt + response
            batch.batch.pop(key)
        batch = batch.union(gen_output)
        with timer("reward", timing):
            scores, extra = self._reward(batch)
        batch.batch["token_level_scores"] = scores
        batch.non_tensor_batch["acc"] = np.array(extra.get("acc", scores.sum(-1).tolist()), dtype=object)
        return batch

    def _collect_batch(self, timing: dict, metrics: dict) -> DataProto:
        """Generate (and, with DAPO's filter_groups, keep generating) until the batch is complete."""
        cfg = self.config
        step_seed = _seed_for(cfg.trainer.seed, self.global_step, self.rank)
        if not cfg.algorithm.filter_groups.enable:
            return self._generate_and_score(self._next_prompts(cfg.data.train_batch_size), step_seed, timing)
        gen_size = cfg.data.gen_batch_size or cfg.data.train_batch_size
        n, kept, rounds = cfg.actor_rollout_ref.rollout.n, [], 0
        while True:
            rounds += 1
            batch = self._generate_and_score(self._next_prompts(gen_size), step_seed + rounds, timing)
            metric = cfg.algorithm.filter_groups.metric
            values = (batch["token_level_scores"].sum(-1) if metric in ("score", "seq_reward")
                      else torch.tensor([float(a) for a in batch["acc"]]))
            rows, dropped = filter_groups(values, batch["uid"])
            kept.append(batch.select_idxs(rows))
            metrics["train/num_dropped_groups"] = metrics.get("train/num_dropped_groups", 0) + dropped
            have = sum(len(part) for part in kept) // n
            enough = torch.tensor(float(have >= self.local_prompts), device=self.accelerator.device)
            if self.world > 1:
                enough = self.accelerator.reduce(enough, reduction="min")
            if enough.item():
                break
            limit = cfg.algorithm.filter_groups.max_num_gen_batches
            if 0 < limit <= rounds:
                raise RuntimeError(f"filter_groups: after {rounds} generation rounds only {have} of "
                                   f"{self.local_prompts} prompts had a reward spread. Raise "
                                   "algorithm.filter_groups.max_num_gen_batches or data.gen_batch_size, or "
                                   "start from a model whose answers vary more.")
        metrics["train/num_gen_batches"] = rounds
        return DataProto.concat(kept).slice(0, self.local_prompts * n)

    # ------------------------------------------------------------------------------------------
    # The step
    # ------------------------------------------------------------------------------------------

    def train_step(self) -> dict[str, float]:
        cfg, algo = self.config, self.config.algorithm
        timing, metrics = {}, {}
        with timer("step", timing):
            batch = self._collect_batch(timing, metrics)
            with timer("old_log_prob", timing):
                old = self.actor.compute_log_prob(batch)
                metrics["actor/entropy"] = masked_mean(old["entropys"], batch["response_mask"]).item()
                batch = batch.union(DataProto(batch={"old_log_probs": old["old_log_probs"]}))
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
                batch = self._rollout_correction(batch, metrics)
                batch = compute_advantage(batch, algo.adv_estimator, algo.gamma, algo.lam, algo.norm_adv_by_std_in_grpo)
            if self.use_critic:
                with timer("update_critic", timing):
                    metrics.update(self.critic.update_critic(batch))
            with timer("update_actor", timing):
                generator = torch.Generator().manual_seed(_seed_for(cfg.trainer.seed, self.global_step, 99))
                metrics.update(self.actor.update_actor(batch, generator))
        metrics.update(compute_data_metrics(batch, self.use_critic, cfg.data.max_response_length))
        metrics["critic/acc/mean"] = float(np.mean([float(a) for a in batch["acc"]]))
        # minirl's own metric: groups whose responses all scored the same carry no GRPO signal
        scores = batch["token_level_scores"].sum(-1)
        _, dropped = filter_groups(scores, batch["uid"])
        metrics["train/zero_spread_group_frac"] = dropped / len(set(batch["uid"]))
        metrics.update(compute_timing_metrics(batch, timing))
        metrics.update(compute_throughput_metrics(batch, timing, self.world))
        return self._average_over_processes(metrics)

    def _rollout_correction(self, batch: DataProto, metrics: dict) -> DataProto:
        """Off-policy metrics always; IS weights / rejection mask when configured (before advantages)."""
        rc = self.config.algorithm.rollout_correction
        mask = batch["response_mask"]
        metrics.update(compute_offpolicy_metrics(batch["old_log_probs"], batch["rollout_log_probs"], mask))
        log_ratio = batch["old_log_probs"] - batch["rollout_log_probs"]
        if rc.rollout_is:
            weights, is_metrics = compute_rollout_correction_weights(
                log_ratio, mask, rc.rollout_is, rc.rollout_is_threshold, rc.rollout_is_batch_normalize)
            batch.batch["rollout_is_weights"] = weights
            metrics.update(is_metrics)
        if rc.rollout_rs:
            new_mask, rs_metrics = compute_rollout_rejection_mask(log_ratio, mask, rc.rollout_rs,
                                                                  rc.rollout_rs_threshold)
            batch.batch["response_mask"] = new_mask
            metrics.update(rs_metrics)
        return batch

    def _average_over_processes(self, metrics: dict[str, float]) -> dict[str, float]:
        if self.world == 1:
            return metrics
        keys = sorted(metrics)
        values = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=self.accelerator.device)
        values = self.accelerator.reduce(values, reduction="mean")
        return dict(zip(keys, values.tolist()))

    # ------------------------------------------------------------------------------------------
    # Validation
    # ------------------------------------------------------------------------------------------

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Greedy accuracy and mean reward on the validation prompts: val-core/<data_source>/{acc,reward}/mean@1."""
        metrics = {}
        by_source: dict[str, list[dict]] = {}
        for row in self.val_rows:
            by_source.setdefault(row["data_source"], []).append(row)
        for source, rows in sorted(by_source.items()):
            mine = rows[self.rank :: self.world]
            result = evaluate(self.actor.unwrapped_model, self.tokenizer, mine, self.config.data.max_response_length,
                              self.config.data.max_prompt_length)
            sums = torch.tensor([result["acc"] * len(mine), result["reward"] * len(mine), len(mine)],
                                dtype=torch.float64, device=self.accelerator.device)
            if self.world > 1:
                sums = self.accelerator.reduce(sums, reduction="sum")
            metrics[f"val-core/{source}/acc/mean@1"] = (sums[0] / sums[2]).item()
            metrics[f"val-core/{source}/reward/mean@1"] = (sums[1] / sums[2]).item()
        return metrics

    # ------------------------------------------------------------------------------------------
    # Checkpoints: written to a temporary directory, then renamed (never half-written)
    # ------------------------------------------------------------------------------------------

    def save_checkpoint(self) -> Path:
        self.accelerator.wait_for_everyone()
        target = self.run_dir / f"{CHECKPOINT_PREFIX}{self.global_step}"
        if self.accelerator.is_main_process:
            tmp = self.run_dir / f".tmp-{CHECKPOINT_PREFIX}{self.global_step}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            with models.quiet_progress():
                self.actor.unwrapped_model.save_pretrained(tmp / "actor")
                self.tokenizer.save_pretrained(tmp / "actor")
                if self.use_critic:
                    self.accelerator.unwrap_model(self.critic.model).save_pretrained(tmp / "critic")
            torch.save(self.actor.optimizer.state_dict(), tmp / "actor_optimizer.pt")
            if self.use_critic:
                torch.save(self.critic.optimizer.state_dict(), tmp / "critic_optimizer.pt")
            state = {"global_step": self.global_step, "data_position": self.data_position,
                     "kl_coef": self.kl_ctrl.value}
            (tmp / "trainer_state.json").write_text(json.dumps(state))
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
            latest_tmp = self.run_dir / f".{LATEST_FILE}.tmp"
            latest_tmp.write_text(str(self.global_step))
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
            with models.quiet_progress():
                actor_state = type(self.actor.unwrapped_model).from_pretrained(path / "actor").state_dict()
            actor_optimizer = torch.load(path / "actor_optimizer.pt", weights_only=True)
            if self.use_critic:
                with models.quiet_progress():
                    critic_state = type(self.accelerator.unwrap_model(self.critic.model)).from_pretrained(
                        path / "critic").state_dict()
                critic_optimizer = torch.load(path / "critic_optimizer.pt", weights_only=True)
        except Exception as error:
            earlier = sorted(p.name for p in self.run_dir.glob(f"{CHECKPOINT_PREFIX}*") if p != path)
            raise RuntimeError(
                f"the latest checkpoint {path} cannot be loaded ({type(error).__name__}: {error}). Nothing was "
                f"deleted; earlier checkpoints: {earlier or 'none'}. Point {latest} at an earlier step, remove "
                f"the broken directory, or set trainer.resume_mode=disable to start over.") from error
        self.actor.unwrapped_model.load_state_dict(actor_state)
        self.actor.optimizer.load_state_dict(actor_optimizer)
        if self.use_critic:
            self.accelerator.unwrap_model(self.critic.model).load_state_dict(critic_state)
            self.critic.optimizer.load_state_dict(critic_optimizer)
        self.global_step, self.data_position = state["global_step"], state["data_position"]
        self.kl_ctrl.value = state["kl_coef"]
        return True

    # ------------------------------------------------------------------------------------------
    # fit
    # ------------------------------------------------------------------------------------------

    def fit(self) -> list[dict[str, float]]:
        """Train for trainer.total_training_steps; returns the per-step metrics (also in metrics.jsonl)."""
        cfg = self.config.trainer
        if self.accelerator.is_main_process:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "config.yaml").write_text(to_yaml(self.config))
        self.accelerator.wait_for_everyone()
        resumed = self.load_checkpoint()
        tracking = Tracking(self.run_dir, cfg.logger, self.accelerator, asdict(self.config), cfg.project_name,
                            start_step=self.global_step)
        history = []
        if cfg.val_before_train and not resumed and cfg.test_freq > 0:
            val = self.validate()
            tracking.log(val, step=0)
            history.append({"step": 0, **val})
        progress = tqdm(total=cfg.total_training_steps, initial=self.global_step, desc="train",
                        disable=not (self.show_progress and self.accelerator.is_main_process))
        while self.global_step < cfg.total_training_steps:
            self.global_step += 1
            metrics = self.train_step()
            metrics["training/global_step"] = self.global_step
            last = self.global_step == cfg.total_training_steps
            if cfg.test_freq > 0 and (self.global_step % cfg.test_freq == 0 or last):
                metrics.update(self.validate())
            if cfg.save_freq > 0 and (self.global_step % cfg.save_freq == 0 or last):
                self.save_checkpoint()
            tracking.log(metrics, step=self.global_step)
            history.append({"step": self.global_step, **metrics})
            progress.update(1)
            progress.set_postfix(score=f"{metrics['critic/score/mean']:.3f}", acc=f"{metrics['critic/acc/mean']:.3f}")
        progress.close()
        tracking.finish()
        return history


def train(overrides: list[str] | None = None, show_progress: bool | None = None) -> list[dict[str, float]]:
    """Load the config from verl-style overrides and train. The entry point of `python -m minirl train`."""
    return PPOTrainer(load_config(overrides), show_progress).fit()
