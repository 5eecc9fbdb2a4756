"""The workers: the models and what each one computes, driven by the trainer (single controller).

In verl these are Ray worker groups spread over GPUs (`verl/workers/fsdp_workers.py`,
`verl/workers/actor/dp_actor.py`, `verl/workers/critic/dp_critic.py`, a vLLM/SGLang rollout). Here
each is a plain object in the current process, with verl's method names, so the HybridFlow chapter
can point at them:

    Rollout.generate_sequences      sample responses with the actor's current weights
    Actor.compute_log_prob          the "old" log-probs, recomputed before the update
    Actor.update_actor              PPO epochs over mini-batches of the batch
    Reference.compute_ref_log_prob  log-probs under the frozen initial policy (for a KL)
    Critic.compute_values           V(s_t) per response token
    Critic.update_critic            the clipped value regression

Several processes (`accelerate launch`) each hold a copy of every model and a share of the
batch; gradients are averaged by accelerate, and the loss normalisers are global (see
`_global_batch_info`) so that N processes compute exactly the update of one.
"""

from __future__ import annotations

import torch

from minirl import models
from minirl.config import ActorConfig, CriticConfig
from minirl.core import agg_loss, masked_mean
from minirl.kl import kl_penalty
from minirl.metrics import mean_of
from minirl.ppo import compute_policy_loss, compute_value_loss
from minirl.protocol import DataProto
from minirl.rollout import generate_sequences

MODEL_INPUTS = ("input_ids", "attention_mask", "position_ids")


def _global_batch_info(accelerator, response_mask: torch.Tensor) -> dict:
    """Token and sequence counts of the whole mini-batch across processes (verl 0.9.1's global_batch_info)."""
    counts = torch.tensor([response_mask.sum().item(), (response_mask.sum(-1) > 0).sum().item()],
                          dtype=torch.float64, device=accelerator.device)
    counts = accelerator.reduce(counts, reduction="sum") if accelerator.num_processes > 1 else counts
    return {"dp_size": accelerator.num_processes, "batch_num_tokens": counts[0].item(),
            "global_batch_size": counts[1].item()}


def _mini_batches(data: DataProto, rows_per_mini_batch: int, shuffle: bool, generator: torch.Generator | None):
    if shuffle:
        data = data.select_idxs(torch.randperm(len(data), generator=generator))
    return data.split(rows_per_mini_batch)


class Rollout:
    """The rollout engine, sharing the actor's weights (verl's colocated "hybrid engine")."""

    def __init__(self, actor: Actor, tokenizer):
        self.actor = actor
        self.tokenizer = tokenizer

    @torch.no_grad()
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Prompts (input_ids, attention_mask) -> one response per row (repeat rows first for n > 1).

        meta_info: response_length, do_sample, temperature, top_p, top_k, seed.
        """
        info = prompts.meta_info
        generator = torch.Generator().manual_seed(info["seed"]) if "seed" in info else None
        out = generate_sequences(
            self.actor.unwrapped_model, prompts["input_ids"], prompts["attention_mask"], self.tokenizer.eos_token_id,
            self.tokenizer.pad_token_id, info["response_length"], n=1, do_sample=info.get("do_sample", True),
            temperature=info.get("temperature", 1.0), top_p=info.get("top_p", 1.0), top_k=info.get("top_k", -1),
            generator=generator)
        out.pop("response_length")
        return DataProto(batch={k: v.cpu() for k, v in out.items()})


class Actor:
    """The policy being trained (verl's DataParallelPPOActor)."""

    def __init__(self, model, config: ActorConfig, temperature: float, accelerator, rows_per_mini_batch: int):
        self.config = config
        self.temperature = temperature
        self.accelerator = accelerator
        self.rows_per_mini_batch = rows_per_mini_batch
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
        self.model, self.optimizer = accelerator.prepare(model, optimizer)

    @property
    def unwrapped_model(self):
        return self.accelerator.unwrap_model(self.model)

    def _log_probs(self, data: DataProto, calculate_entropy: bool):
        inputs = {k: data[k].to(self.accelerator.device) for k in MODEL_INPUTS}
        return models.compute_log_probs(self.model, **inputs, response_length=data["responses"].shape[1],
                                        temperature=self.temperature, calculate_entropy=calculate_entropy)

    @torch.no_grad()
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """old_log_probs (and entropys) of the sampled responses under the current weights."""
        self.model.eval()
        log_probs, entropy = self._log_probs(data, calculate_entropy=True)
        return DataProto(batch={"old_log_probs": log_probs.cpu(), "entropys": entropy.cpu()})

    def update_actor(self, data: DataProto, generator: torch.Generator | None = None) -> dict[str, float]:
        """ppo_epochs passes of mini-batch updates; returns the mean metrics (actor/*)."""
        cfg = self.config
        self.model.train()
        metrics = []
        for _ in range(cfg.ppo_epochs):
            for mini_batch in _mini_batches(data, self.rows_per_mini_batch, cfg.shuffle, generator):
                mask = mini_batch["response_mask"].to(self.accelerator.device)
                info = _global_batch_info(self.accelerator, mask)
                log_prob, entropy = self._log_probs(mini_batch, calculate_entropy=cfg.entropy_coeff != 0)
                device = log_prob.device
                pg_loss, step_metrics = compute_policy_loss(
                    mini_batch["old_log_probs"].to(device), log_prob, mini_batch["advantages"].to(device), mask,
                    cfg.loss_agg_mode, cfg.clip_ratio_low, cfg.clip_ratio_high, cfg.clip_ratio_c,
                    rollout_is_weights=(mini_batch["rollout_is_weights"].to(device)
                                        if "rollout_is_weights" in mini_batch else None),
                    global_batch_info={**info, "loss_scale_factor": cfg.loss_scale_factor})
                loss = pg_loss
                if cfg.entropy_coeff != 0:
                    entropy_loss = agg_loss(entropy, mask, cfg.loss_agg_mode, **info)
                    loss = loss - cfg.entropy_coeff * entropy_loss
                    step_metrics["actor/entropy_loss"] = entropy_loss.item()
                if cfg.use_kl_loss:
                    kld = kl_penalty(log_prob, mini_batch["ref_log_prob"].to(device), cfg.kl_loss_type)
                    kl_loss = agg_loss(kld, mask, cfg.loss_agg_mode, **info)
                    loss = loss + cfg.kl_loss_coef * kl_loss
                    step_metrics.update({"actor/kl_loss": kl_loss.item(), "actor/kl_coef": cfg.kl_loss_coef})
                self.accelerator.backward(loss)
                grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
                if torch.isfinite(grad_norm):
                    self.optimizer.step()
                else:  # verl skips the step rather than writing NaN into the weights
                    step_metrics["actor/grad_norm_nonfinite"] = 1.0
                self.optimizer.zero_grad()
                step_metrics.update({"actor/pg_loss": pg_loss.item(), "actor/grad_norm": grad_norm.item(),
                                     "actor/lr": cfg.optim.lr})
                metrics.append(step_metrics)
        return mean_of(metrics)


class Reference:
    """The frozen initial policy, for the KL penalty or KL loss."""

    def __init__(self, model, temperature: float, accelerator):
        self.model = model.to(accelerator.device).eval().requires_grad_(False)
        self.temperature = temperature
        self.device = accelerator.device

    @torch.no_grad()
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        inputs = {k: data[k].to(self.device) for k in MODEL_INPUTS}
        log_probs, _ = models.compute_log_probs(self.model, **inputs, response_length=data["responses"].shape[1],
                                                temperature=self.temperature)
        return DataProto(batch={"ref_log_prob": log_probs.cpu()})


class Critic:
    """The value model (verl's DataParallelPPOCritic)."""

    def __init__(self, model, config: CriticConfig, accelerator, rows_per_mini_batch: int, loss_agg_mode: str):
        self.config = config
        self.accelerator = accelerator
        self.rows_per_mini_batch = rows_per_mini_batch
        self.loss_agg_mode = loss_agg_mode
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
        self.model, self.optimizer = accelerator.prepare(model, optimizer)

    def _values(self, data: DataProto):
        inputs = {k: data[k].to(self.accelerator.device) for k in MODEL_INPUTS}
        return models.compute_values(self.model, **inputs, response_length=data["responses"].shape[1],
                                     response_mask=data["response_mask"].to(self.accelerator.device))

    @torch.no_grad()
    def compute_values(self, data: DataProto) -> DataProto:
        self.model.eval()
        return DataProto(batch={"values": self._values(data).cpu()})

    def update_critic(self, data: DataProto) -> dict[str, float]:
        self.model.train()
        metrics = []
        for _ in range(self.config.ppo_epochs):
            for mini_batch in data.split(self.rows_per_mini_batch):
                mask = mini_batch["response_mask"].to(self.accelerator.device)
                info = _global_batch_info(self.accelerator, mask)
                vpreds = self._values(mini_batch)
                vf_loss, vf_clipfrac = compute_value_loss(
                    vpreds, mini_batch["returns"].to(vpreds.device), mini_batch["values"].to(vpreds.device), mask,
                    self.config.cliprange_value, self.loss_agg_mode, **info)
                self.accelerator.backward(vf_loss)
                grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), 1.0)
                if torch.isfinite(grad_norm):
                    self.optimizer.step()
                self.optimizer.zero_grad()
                metrics.append({"critic/vf_loss": vf_loss.item(), "critic/vf_clipfrac": vf_clipfrac.item(),
                                "critic/vpred_mean": masked_mean(vpreds.detach(), mask).item(),
                                "critic/grad_norm": grad_norm.item()})
        return mean_of(metrics)
