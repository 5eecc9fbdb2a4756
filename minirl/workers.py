"""The workers: the models and what each one computes, driven by the trainer (single controller).

In verl these are Ray worker groups spread over GPUs (`verl/workers/engine_workers.py`:
`ActorRolloutRefWorker`, and `TrainingWorker` for both the actor's and the critic's updates, with the
losses in `verl/workers/utils/losses.py`; a vLLM/SGLang rollout). Here each is a plain object in
the current process, with verl's method names, so the HybridFlow chapter can point at them:

    Rollout.generate_sequences      sample responses with the actor's current weights
    Actor.compute_log_prob          the "old" log-probs, recomputed before the update
    Actor.update_actor              PPO epochs over mini-batches of the batch
    Reference.compute_ref_log_prob  log-probs under the frozen initial policy (for a KL)
    Critic.compute_values           V(s_t) per response token
    Critic.update_critic            the clipped value regression

Every method takes and returns the *global* batch. With several processes (`minirl/parallel.py`)
each computes its chunk and the results are gathered; an update takes each mini-batch of the
global batch, gives every process its chunk of it, and normalises the loss by the counts of the
whole mini-batch, so N processes make exactly the update of one. Inside a process a chunk is cut
into micro-batches (`ppo_micro_batch_size_per_gpu`, or a token budget with `use_dynamic_bsz`)
whose gradients are accumulated before the one optimizer step of the mini-batch.
"""

from __future__ import annotations

import contextlib
import copy
import sys
from collections import defaultdict
from pathlib import Path

import torch

from minirl import lora, models
from minirl.config import (
    ActorConfig,
    CriticConfig,
    DistillationConfig,
    RefConfig,
    RolloutConfig,
    RolloutCorrectionConfig,
)
from minirl.core import agg_loss, entropy_from_logits, logprobs_from_logits, sum_pi_squared_from_logits
from minirl.distillation import combine_with_policy_loss, distillation_loss, needs_policy_loss, uses_topk
from minirl.kl import kl_penalty
from minirl.metrics import mean_of
from minirl.optim import build_lr_scheduler, build_optimizer
from minirl.parallel import all_reduce_max, all_reduce_sum, dp_chunk, dp_compute
from minirl.policy_loss import get_policy_loss_fn, policy_loss_view
from minirl.ppo import compute_value_loss
from minirl.protocol import DataProto
from minirl.rollout import generate_sequences
from minirl.seqlen_balancing import row_micro_batches, token_budget_micro_batches

MODEL_INPUTS = ("input_ids", "attention_mask", "position_ids")


def make_micro_batches(data: DataProto, micro_batch_size: int | None, use_dynamic_bsz: bool,
                       max_token_len: int, accelerator=None) -> list[torch.Tensor]:
    """Row indices of each micro-batch of `data`: by a token budget or by a row count.

    Pass the accelerator when the micro-batches feed a training step: then every process cuts the
    same number of them (a process's chunks of a mini-batch have the same number of rows, so row
    counts agree by themselves; token budgets agree through an all-reduce).
    """
    if use_dynamic_bsz:
        agree = None
        if accelerator is not None and accelerator.num_processes > 1:
            agree = lambda value: int(all_reduce_max(value, accelerator))  # noqa: E731
        groups = token_budget_micro_batches(data["attention_mask"].sum(-1), max_token_len, agree)
    else:
        groups = row_micro_batches(len(data), micro_batch_size)
    return [torch.tensor(group, dtype=torch.long) for group in groups]


def forward_in_micro_batches(fn, data: DataProto, micro_batches: list[torch.Tensor]) -> DataProto:
    """Run `fn` (a DataProto -> DataProto forward pass) per micro-batch and put the rows back in order."""
    if len(micro_batches) == 1:
        return fn(data)
    order = torch.cat(micro_batches)
    outputs = DataProto.concat([fn(data.select_idxs(rows)) for rows in micro_batches])
    return outputs.select_idxs(torch.argsort(order))


def global_mini_batches(data: DataProto, rows_per_mini_batch: int, shuffle: bool, seed: int) -> list[DataProto]:
    """The mini-batches of the global batch: consecutive rows, or a seeded permutation when shuffle is on.

    verl re-seeds its mini-batch sampler with the same seed every step, so shuffle=True gives the
    same permutation each step; so does this.
    """
    if shuffle:
        data = data.select_idxs(torch.randperm(len(data), generator=torch.Generator().manual_seed(seed)))
    return data.split(rows_per_mini_batch)


def mini_batch_counts(mini_batch: DataProto) -> dict:
    """verl's global_batch_info of a whole mini-batch: its valid tokens and its sequences with a valid token."""
    mask = mini_batch["response_mask"]
    return {"batch_num_tokens": mask.sum().item(), "global_batch_size": (mask.sum(-1) > 0).sum().item()}


def enable_gradient_checkpointing(model) -> None:
    """Recompute activations in the backward pass (verl: `gradient_checkpointing_enable(use_reentrant=False)`).

    transformers 5 renamed the method `activation_checkpointing_enable`; older versions only have the old name.
    """
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


class _TrainedModel:
    """A model with its optimizer, lr schedule and accelerate wrapping (actor and critic alike)."""

    def __init__(self, model, optim_config, accelerator, total_training_steps: int, gradient_checkpointing: bool):
        if gradient_checkpointing:  # verl's way: Hugging Face's checkpointing without re-entrant autograd
            enable_gradient_checkpointing(model)
        self.accelerator = accelerator
        self.optim_config = optim_config
        self.model, self.optimizer = accelerator.prepare(model, build_optimizer(model, optim_config))
        self.lr_scheduler = build_lr_scheduler(self.optimizer, optim_config, total_training_steps)

    @property
    def unwrapped_model(self):
        return self.accelerator.unwrap_model(self.model)

    def save_checkpoint(self, directory: Path, name: str, tokenizer=None) -> None:
        """`<directory>/<name>/` (a Hugging Face directory, or a LoRA adapter's, with the tokenizer if given) and
        `<directory>/<name>_optimizer.pt` (optimizer and lr schedule)."""
        with models.quiet_progress():
            self.unwrapped_model.save_pretrained(directory / name)
            if tokenizer is not None:
                tokenizer.save_pretrained(directory / name)
        torch.save({"optimizer": self.optimizer.state_dict(), "lr_scheduler": self.lr_scheduler.state_dict()},
                   directory / f"{name}_optimizer.pt")

    def load_checkpoint(self, directory: Path, name: str) -> None:
        """Load what `save_checkpoint` wrote: weights (or a LoRA adapter), optimizer and lr schedule (a broken file
        raises)."""
        optimizer = torch.load(directory / f"{name}_optimizer.pt", weights_only=True)
        if lora.is_lora(self.unwrapped_model):  # the checkpoint holds the adapter only
            lora.load_adapter(self.unwrapped_model, directory / name)
        else:
            with models.quiet_progress():
                weights = type(self.unwrapped_model).from_pretrained(directory / name).state_dict()
            self.unwrapped_model.load_state_dict(weights)
        self.optimizer.load_state_dict(optimizer["optimizer"])
        self.lr_scheduler.load_state_dict(optimizer["lr_scheduler"])

    def _optimizer_step(self) -> float:
        """Clip the (already all-reduced) gradient, step unless it is not finite (verl skips), zero it."""
        grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), self.optim_config.clip_grad)
        if torch.isfinite(grad_norm):
            self.optimizer.step()
        self.optimizer.zero_grad()
        return grad_norm.item()

    def _backward(self, loss: torch.Tensor, last: bool) -> None:
        """Accumulate gradients; only the last micro-batch of a mini-batch all-reduces them (DDP no_sync)."""
        sync = last or self.accelerator.num_processes == 1
        with contextlib.nullcontext() if sync else self.accelerator.no_sync(self.model):
            self.accelerator.backward(loss)

    def _update(self, data: DataProto, rows_per_mini_batch: int, config, micro_step, prefix: str) -> dict[str, float]:
        """config.ppo_epochs passes over the global batch, one optimizer step per mini-batch; returns the metrics.

        Each process takes its chunk of every mini-batch and cuts it into micro-batches;
        `micro_step(micro, counts)` returns the micro-batch's loss (already normalised by the whole
        mini-batch's `counts`, see `agg_loss`) and three dicts of metrics: loss values, summed over
        micro-batches and averaged over processes as verl does (the loss of the whole mini-batch),
        token-weighted sums, divided by the mini-batch's tokens, and extremes (names ending in _min or _max),
        the mini-batch's minimum or maximum. Metrics are averaged over mini-batches;
        `<prefix>grad_norm` is the norm before clipping and `<prefix>lr` the next step's lr, as verl logs them.
        """
        accelerator = self.accelerator
        metrics = []
        for _ in range(config.ppo_epochs):
            for mini_batch in global_mini_batches(data, rows_per_mini_batch, config.shuffle, config.data_loader_seed):
                counts = mini_batch_counts(mini_batch)
                mine = dp_chunk(mini_batch, accelerator)
                micro_batches = make_micro_batches(mine, config.ppo_micro_batch_size_per_gpu, config.use_dynamic_bsz,
                                                   config.ppo_max_token_len_per_gpu, accelerator)
                losses, weighted, extremes = defaultdict(float), defaultdict(float), {}
                for i, rows in enumerate(micro_batches):
                    loss, micro_losses, micro_weighted, micro_extremes = micro_step(mine.select_idxs(rows), counts)
                    for key, value in micro_losses.items():
                        losses[key] += value
                    for key, value in micro_weighted.items():
                        weighted[key] += value
                    for key, value in micro_extremes.items():
                        pick = min if key.endswith("_min") else max
                        extremes[key] = pick(extremes.get(key, value), value)
                    self._backward(loss, last=i == len(micro_batches) - 1)
                sums = {**losses, **weighted}
                totals = dict(zip(sorted(sums), all_reduce_sum([sums[k] for k in sorted(sums)], accelerator)))
                tokens = max(counts["batch_num_tokens"], 1)
                step = {key: total / (accelerator.num_processes if key in losses else tokens)
                        for key, total in totals.items()}
                for key in sorted(extremes):  # a minimum is minus the maximum of minus the values
                    sign = -1.0 if key.endswith("_min") else 1.0
                    step[key] = sign * all_reduce_max(sign * extremes[key], accelerator)
                step[f"{prefix}grad_norm"] = self._optimizer_step()
                metrics.append(step)
        result = mean_of(metrics)
        self.lr_scheduler.step()  # once per training step, as in verl
        result[f"{prefix}lr"] = self.lr_scheduler.get_last_lr()[0]
        return result


ENGINE_COPY = "rollout"  # a checkpoint's subdirectory for the rollout engine's own copy of the weights


def save_engine_copy(model, directory: Path) -> None:
    """Save a rollout engine's own weights as `<directory>/rollout` (a Hugging Face directory)."""
    with models.quiet_progress():
        model.save_pretrained(directory / ENGINE_COPY)


def load_engine_copy(model, directory: Path) -> bool:
    """Load `<directory>/rollout` into `model` (cast to its dtype); False if the checkpoint has no such copy."""
    if not (directory / ENGINE_COPY).exists():
        return False
    with models.quiet_progress():
        model.load_state_dict(type(model).from_pretrained(directory / ENGINE_COPY).state_dict())
    return True


def sync_due(actor_updates: int | None, sync_interval: int) -> bool:
    """Whether the engine takes the actor's weights now: after every sync_interval-th update (None: always)."""
    return actor_updates is None or actor_updates % sync_interval == 0


def generate_rows(model, tokenizer, chunk: DataProto) -> DataProto:
    """One response per row of `chunk` (input_ids, attention_mask, row_seed; sampling settings in meta_info)."""
    info = chunk.meta_info
    out = generate_sequences(
        model, chunk["input_ids"], chunk["attention_mask"], tokenizer.eos_token_id, tokenizer.pad_token_id,
        info["response_length"], n=1, do_sample=info["do_sample"], temperature=info["temperature"],
        top_p=info["top_p"], top_k=info["top_k"], seeds=chunk["row_seed"].tolist() if info["do_sample"] else None)
    out.pop("response_length")
    return DataProto(batch={k: v.cpu() for k, v in out.items()})


class Rollout:
    """The rollout engine. By default it samples with the actor's own float32 weights: minirl's shortcut. verl's
    colocated "hybrid engine" runs vLLM/SGLang on the actor's GPUs, but with its own copy of the weights (bf16 by
    default, rollout.dtype), re-synced after every update: colocation saves GPUs, not the copy.

    An actor with a LoRA adapter (minirl/lora.py) always gets an engine copy, a plain model with the merged
    weights W + (alpha / r) B A, re-merged at each sync (verl's model.lora.merge=true).
    Three engine options give this engine its own copy too, the way a vLLM server has one (Chapter 9 uses
    the first two to create a training/rollout mismatch on purpose):
        dtype="bfloat16" (or float16): the copy is cast, so sampling runs in lower precision;
        sync_interval=k > 1: the copy is refreshed only after every k-th actor update (stale weights);
        separate=True (verl's hybrid_engine=false): a float32 copy, synced after every update.
    `update_weights` is verl's weight sync (`checkpoint_manager.update_weights` after `update_actor`).
    """

    def __init__(self, actor: Actor, tokenizer, dtype: str = "float32", sync_interval: int = 1,
                 separate: bool = False):
        self.actor = actor
        self.tokenizer = tokenizer
        self.sync_interval = sync_interval
        self.model = None  # None: sample with the actor's weights
        if lora.is_lora(actor.unwrapped_model):  # a plain model with the merged weights (verl's lora.merge=true)
            self.model = lora.merged_copy(actor.unwrapped_model, getattr(torch, dtype))
        elif separate or dtype != "float32" or sync_interval > 1:  # separate: verl's hybrid_engine=false
            self.model = copy.deepcopy(actor.unwrapped_model).to(getattr(torch, dtype)).eval().requires_grad_(False)

    @property
    def engine_model(self):
        """The weights the engine samples with."""
        return self.actor.unwrapped_model if self.model is None else self.model

    @torch.no_grad()
    def update_weights(self, actor_updates: int | None = None) -> bool:
        """Copy (and cast) the actor's weights into the engine's copy; True if it did.

        With `actor_updates` (the number of actor updates so far) it copies only when that is a multiple
        of sync_interval. An engine that shares the actor's weights has nothing to copy.
        """
        if self.model is None or not sync_due(actor_updates, self.sync_interval):
            return False
        actor = self.actor.unwrapped_model
        weights = lora.merged_state_dict(actor) if lora.is_lora(actor) else actor.state_dict()
        self.model.load_state_dict(weights)  # copies and casts each tensor
        return True

    @torch.no_grad()
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Prompts (input_ids, attention_mask) -> one response per row (repeat rows first for n > 1).

        meta_info: response_length, do_sample, temperature, top_p, top_k, and optionally actor_weights=True
        (sample with the actor's current weights instead of the engine's copy: validation judges the policy being
        trained). The batch field `row_seed` holds one seed per row of the global batch; each process samples its
        chunk with its rows' seeds.
        """
        return dp_compute(self.generate_on_rows, prompts, self.actor.accelerator)

    @torch.no_grad()
    def generate_on_rows(self, chunk: DataProto) -> DataProto:
        """`generate_sequences` on the rows this process was given (a worker rank's share of the batch)."""
        model = self.actor.unwrapped_model if chunk.meta_info.get("actor_weights") else self.engine_model
        return generate_rows(model, self.tokenizer, chunk)

    def save_checkpoint(self, directory: Path) -> None:
        """Save the engine's own copy of the weights (`<directory>/rollout`), if it has one. A LoRA actor's merged
        copy is saved only when it is stale (sync_interval > 1); otherwise a resume merges it again from the adapter."""
        if self.model is not None and not (lora.is_lora(self.actor.unwrapped_model) and self.sync_interval == 1):
            save_engine_copy(self.model, directory)

    def load_checkpoint(self, directory: Path) -> None:
        """Restore the engine's copy from a checkpoint; without a saved copy, sync it from the actor."""
        if self.model is None or not load_engine_copy(self.model, directory):
            self.update_weights()


class Actor(_TrainedModel):
    """The policy being trained (verl's actor: `engine_workers.py::ActorRolloutRefWorker` + `TrainingWorker`)."""

    def __init__(self, model, config: ActorConfig, rollout_config: RolloutConfig, gradient_checkpointing: bool,
                 accelerator, total_training_steps: int, correction: RolloutCorrectionConfig | None = None,
                 distillation: DistillationConfig | None = None):
        super().__init__(model, config.optim, accelerator, total_training_steps, gradient_checkpointing)
        self.config = config
        self.rollout_config = rollout_config
        self.correction = correction or RolloutCorrectionConfig()
        self.distillation = distillation if distillation is not None and distillation.enabled else None
        self.temperature = rollout_config.temperature

    @torch.no_grad()
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """old_log_probs and entropys (B, R) of the sampled responses under the current weights (and sum_pi_squared
        (B, R), sum_v pi(v)^2 of each token's distribution, with actor.calculate_sum_pi_squared)."""
        return dp_compute(self.compute_log_prob_on_rows, data, self.accelerator)

    @torch.no_grad()
    def compute_log_prob_on_rows(self, chunk: DataProto) -> DataProto:
        """`compute_log_prob` on the rows this process was given, in micro-batches."""
        self.model.eval()
        rollout = self.rollout_config

        def forward(micro: DataProto) -> DataProto:  # forward-only: the bare model, no DDP communication
            inputs = {k: micro[k].to(self.accelerator.device) for k in MODEL_INPUTS}
            response_length = micro["responses"].shape[1]
            logits = models.response_logits(self.unwrapped_model, **inputs, response_length=response_length,
                                            temperature=self.temperature)
            out = {"old_log_probs": logprobs_from_logits(logits, inputs["input_ids"][:, -response_length:]).cpu(),
                   "entropys": entropy_from_logits(logits).cpu()}
            if self.config.calculate_sum_pi_squared:  # for the optimal token baselines (verl: the same pass)
                out["sum_pi_squared"] = sum_pi_squared_from_logits(logits).cpu()
            return DataProto(batch=out)

        micro = make_micro_batches(chunk, rollout.log_prob_micro_batch_size_per_gpu,
                                   rollout.log_prob_use_dynamic_bsz, rollout.log_prob_max_token_len_per_gpu)
        return forward_in_micro_batches(forward, chunk, micro)

    def update_actor(self, data: DataProto, rows_per_mini_batch: int) -> dict[str, float]:
        """ppo_epochs passes of mini-batch updates over the global batch; returns actor/* metrics.

        The policy loss is the one registered as `actor.policy_loss.loss_mode` (minirl/policy_loss.py; vanilla PPO
        by default), called with verl's arguments. Losses are those of the whole mini-batch (pg_loss, entropy_loss,
        kl_loss); the loss's own metrics (pg_clipfrac, ppo_kl, pg_clipfrac_lower, ...) are token-weighted over it.
        See `_update` for the loop.

        In rollout correction's bypass mode `old_log_probs` holds the rollout's log-probs and the loss is
        `bypass_mode`; its `rollout_corr/*` metrics are token-weighted like the fractions.

        With distillation enabled (the batch then holds the teacher's `teacher_logprobs`), the loss is verl's
        `distillation_ppo_loss` (minirl/distillation.py): this PPO loss and/or the distillation loss, and the
        `distillation/*` metrics.
        """
        cfg = self.config
        self.model.train()
        # verl's apply_bypass_mode switches the loss to bypass_mode (old_log_probs are then the rollout's)
        policy_loss_fn = get_policy_loss_fn("bypass_mode" if self.correction.bypass_mode
                                            else cfg.policy_loss.loss_mode)
        distill = self.distillation.distillation_loss if self.distillation is not None else None
        topk = distill is not None and uses_topk(distill.loss_mode)

        def micro_step(micro: DataProto, counts: dict):
            info = {"dp_size": self.accelerator.num_processes, **counts, "loss_scale_factor": cfg.loss_scale_factor}
            mask = micro["response_mask"].to(self.accelerator.device)
            inputs = {k: micro[k].to(self.accelerator.device) for k in MODEL_INPUTS}
            logits = models.response_logits(self.model, **inputs, response_length=micro["responses"].shape[1],
                                            temperature=self.temperature)
            log_prob = logprobs_from_logits(logits, inputs["input_ids"][:, -mask.shape[1]:])
            device = log_prob.device
            old_log_prob = micro["old_log_probs"].to(device)
            weights = micro["rollout_is_weights"].to(device) if "rollout_is_weights" in micro else None
            loss, losses, weighted = None, {}, {}
            if distill is None or needs_policy_loss(distill):  # verl's ppo_loss
                pg_loss, fractions = policy_loss_fn(old_log_prob, log_prob, micro["advantages"].to(device), mask,
                                                    loss_agg_mode=cfg.loss_agg_mode,
                                                    config=policy_loss_view(cfg, info, self.correction),
                                                    rollout_is_weights=weights)
                loss, losses, weighted = pg_loss, {"actor/pg_loss": pg_loss.item()}, fractions
                if cfg.entropy_coeff != 0:
                    entropy_loss = agg_loss(entropy_from_logits(logits), mask, cfg.loss_agg_mode, **info)
                    loss = loss - cfg.entropy_coeff * entropy_loss
                    losses["actor/entropy_loss"] = entropy_loss.item()
                if cfg.use_kl_loss:
                    kl_loss = agg_loss(kl_penalty(log_prob, micro["ref_log_prob"].to(device), cfg.kl_loss_type), mask,
                                       cfg.loss_agg_mode, **info)
                    loss = loss + cfg.kl_loss_coef * kl_loss
                    losses["actor/kl_loss"] = kl_loss.item()
            extremes = {}
            if distill is not None:  # verl's distillation_ppo_loss
                teacher = {key: micro[key].to(device) for key in ("teacher_logprobs", "teacher_ids") if key in micro}
                student = {"log_probs": log_prob, **({"logits": logits} if topk else {})}
                distill_loss, distill_metrics = distillation_loss(student, teacher, mask, distill, cfg.loss_agg_mode,
                                                                  info, old_log_prob, weights)
                loss = combine_with_policy_loss(loss, distill_loss, distill)
                losses["distillation/loss"] = distill_loss.item()
                for key, value in distill_metrics.items():
                    (extremes if key.endswith(("_min", "_max")) else weighted)[key] = value
            tokens = mask.sum().item()
            return loss, losses, {key: value * tokens for key, value in weighted.items()}, extremes

        result = self._update(data, rows_per_mini_batch, cfg, micro_step, "actor/")
        if cfg.use_kl_loss:
            result["actor/kl_coef"] = cfg.kl_loss_coef
        return result


class Reference:
    """The frozen initial policy, for the KL penalty or KL loss.

    With `adapter_off` the model is the LoRA actor's own, run with its adapter switched off: the frozen base is the
    initial policy, so no second copy is loaded (verl's ref_in_actor).
    """

    def __init__(self, model, config: RefConfig, temperature: float, accelerator, adapter_off: bool = False):
        self.model = model if adapter_off else model.to(accelerator.device).eval().requires_grad_(False)
        self.adapter_off = adapter_off
        self.config = config
        self.temperature = temperature
        self.accelerator = accelerator

    @torch.no_grad()
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """ref_log_prob (B, R): log-probs of the responses under the reference model."""
        return dp_compute(self.compute_ref_log_prob_on_rows, data, self.accelerator)

    @torch.no_grad()
    def compute_ref_log_prob_on_rows(self, chunk: DataProto) -> DataProto:
        """`compute_ref_log_prob` on the rows this process was given, in micro-batches."""
        def forward(micro: DataProto) -> DataProto:
            inputs = {k: micro[k].to(self.accelerator.device) for k in MODEL_INPUTS}
            with self.model.disable_adapter() if self.adapter_off else contextlib.nullcontext():
                log_probs, _ = models.compute_log_probs(self.model, **inputs,
                                                        response_length=micro["responses"].shape[1],
                                                        temperature=self.temperature)
            return DataProto(batch={"ref_log_prob": log_probs.cpu()})

        micro = make_micro_batches(chunk, self.config.log_prob_micro_batch_size_per_gpu,
                                   self.config.log_prob_use_dynamic_bsz, self.config.log_prob_max_token_len_per_gpu)
        return forward_in_micro_batches(forward, chunk, micro)


class Critic(_TrainedModel):
    """The value model (verl's critic: a `TrainingWorker` over a token-classification model)."""

    def __init__(self, model, config: CriticConfig, gradient_checkpointing: bool, accelerator,
                 total_training_steps: int):
        super().__init__(model, config.optim, accelerator, total_training_steps, gradient_checkpointing)
        self.config = config

    def _values(self, data: DataProto, model=None):
        inputs = {k: data[k].to(self.accelerator.device) for k in MODEL_INPUTS}
        return models.compute_values(model or self.model, **inputs, response_length=data["responses"].shape[1],
                                     response_mask=data["response_mask"].to(self.accelerator.device))

    @torch.no_grad()
    def compute_values(self, data: DataProto) -> DataProto:
        """values (B, R): V(s_t) before each response token."""
        return dp_compute(self.compute_values_on_rows, data, self.accelerator)

    @torch.no_grad()
    def compute_values_on_rows(self, chunk: DataProto) -> DataProto:
        """`compute_values` on the rows this process was given, in micro-batches."""
        self.model.eval()
        cfg = self.config
        micro = make_micro_batches(chunk, cfg.forward_micro_batch_size_per_gpu, cfg.use_dynamic_bsz,
                                   cfg.forward_max_token_len_per_gpu)
        return forward_in_micro_batches(
            lambda m: DataProto(batch={"values": self._values(m, self.unwrapped_model).cpu()}), chunk, micro)

    def update_critic(self, data: DataProto, rows_per_mini_batch: int) -> dict[str, float]:
        """ppo_epochs passes of value regression over mini-batches; returns critic/* metrics (see `_update`)."""
        cfg = self.config
        self.model.train()

        def micro_step(micro: DataProto, counts: dict):
            mask = micro["response_mask"].to(self.accelerator.device)
            vpreds = self._values(micro)
            vf_loss, vf_clipfrac = compute_value_loss(
                vpreds, micro["returns"].to(vpreds.device), micro["values"].to(vpreds.device), mask,
                cfg.cliprange_value, cfg.loss_agg_mode, dp_size=self.accelerator.num_processes, **counts)
            weighted = {"critic/vf_clipfrac": vf_clipfrac.item() * mask.sum().item(),
                        "critic/vpred_mean": (vpreds.detach() * mask).sum().item()}
            return vf_loss, {"critic/vf_loss": vf_loss.item()}, weighted, {}

        return self._update(data, rows_per_mini_batch, cfg, micro_step, "critic/")


# ----------------------------------------------------------------------------------------------
# Building the workers from the config (the same builders run in this process or in a Ray worker)
# ----------------------------------------------------------------------------------------------


def build_actor(config, model_path: str, accelerator, total_training_steps: int) -> Actor:
    """The actor from `actor_rollout_ref.*` (its rollout settings and the rollout-correction config included)."""
    arr = config.actor_rollout_ref
    return Actor(with_lora(models.load_policy(model_path), arr.model, "actor", accelerator), arr.actor, arr.rollout,
                 arr.model.enable_gradient_checkpointing, accelerator, total_training_steps,
                 config.algorithm.rollout_correction, config.distillation)


def with_lora(model, model_config, role: str, accelerator):
    """`model`, or `model` under a LoRA adapter when `model_config` asks for one (minirl/lora.py); says how many
    parameters train."""
    settings = lora.lora_settings(model_config)
    if settings is None:
        return model
    model = lora.apply_lora(model, settings)
    trained, total = lora.count_parameters(model)
    if accelerator.is_main_process:
        print(f"minirl: {role} LoRA ({settings.spelling}={settings.rank}, alpha {settings.alpha}): {trained:,} of "
              f"{total:,} parameters train ({trained / total:.1%})", file=sys.stderr)
    return model


def build_rollout(actor: Actor, tokenizer, config) -> Rollout:
    """The rollout engine beside the actor: shared weights, or its own copy (dtype, staleness, hybrid_engine=false)."""
    rollout = config.actor_rollout_ref.rollout
    return Rollout(actor, tokenizer, rollout.dtype, rollout.weight_sync_interval,
                   separate=not config.actor_rollout_ref.hybrid_engine)


def build_reference(config, model_path: str, accelerator, actor: Actor | None = None) -> Reference:
    """The frozen reference policy (used when a KL is in the reward or in the loss): a copy of the initial model, or
    the LoRA actor's own model with the adapter off (verl's ref_in_actor)."""
    arr = config.actor_rollout_ref
    if actor is not None and lora.is_lora(actor.unwrapped_model):
        return Reference(actor.unwrapped_model, arr.ref, arr.rollout.temperature, accelerator, adapter_off=True)
    return Reference(models.load_policy(model_path), arr.ref, arr.rollout.temperature, accelerator)


def build_critic(config, critic_path: str, accelerator, total_training_steps: int, seed: int) -> Critic:
    """The critic; its new value head is the only random initialisation, seeded by `seed` (data.seed)."""
    torch.manual_seed(seed)
    return Critic(models.load_critic(critic_path), config.critic, config.critic.model.enable_gradient_checkpointing,
                  accelerator, total_training_steps)
