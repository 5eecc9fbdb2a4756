"""The optimizer and learning-rate schedule of the actor and the critic, with verl's keys and formulas.

Mirrors `verl/workers/config/optimizer.py::build_optimizer` (AdamW over all parameters) and
`verl/utils/torch_functional.py::get_constant_schedule_with_warmup` / `get_cosine_schedule_with_warmup`,
as `verl/workers/engine/fsdp/transformer_impl.py` builds them. The schedule steps once per
*training step* (after the last mini-batch), not once per optimizer step, as in verl:

    W = lr_warmup_steps if lr_warmup_steps > 0 else int(lr_warmup_steps_ratio * T)      T = total training steps
    constant:  factor(s) = s / max(1, W)  if s < W  else 1
    cosine:    factor(s) = s / max(1, W)  if s < W  else
               max(min_lr_ratio, (1 - min_lr_ratio)/2 * cos(2 pi * num_cycles * p) + (1 + min_lr_ratio)/2),
               p = (s - W) / max(1, T - W)
    lr(s) = optim.lr * factor(s),   s = 0 for the first training step
"""

from __future__ import annotations

import math

import torch

from minirl.config import OptimConfig


def build_optimizer(model: torch.nn.Module, config: OptimConfig) -> torch.optim.AdamW:
    """AdamW with the config's lr, weight decay and betas over every trained parameter (no no-decay groups, as verl;
    a frozen parameter, e.g. under a LoRA adapter, gets no optimizer state)."""
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr,
                             weight_decay=config.weight_decay, betas=tuple(config.betas))


def warmup_steps(config: OptimConfig, total_steps: int) -> int:
    """W: lr_warmup_steps, or (when that is <= 0) lr_warmup_steps_ratio of the total steps."""
    return config.lr_warmup_steps if config.lr_warmup_steps > 0 else int(config.lr_warmup_steps_ratio * total_steps)


def lr_factor(step: int, config: OptimConfig, total_steps: int) -> float:
    """The multiplier of optim.lr at training step `step` (0 for the first), per the formulas above."""
    warmup = warmup_steps(config, total_steps)
    if step < warmup:
        return step / max(1, warmup)
    if config.lr_scheduler_type == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total_steps - warmup)
    cosine = math.cos(math.pi * config.num_cycles * 2.0 * progress)
    return max(config.min_lr_ratio, (1 - config.min_lr_ratio) * 0.5 * cosine + (1 + config.min_lr_ratio) * 0.5)


def build_lr_scheduler(optimizer: torch.optim.Optimizer, config: OptimConfig, total_steps: int):
    """A LambdaLR over `lr_factor`; call `.step()` once per training step."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, config, total_steps))
