"""DPO: preference optimisation from fixed (chosen, rejected) pairs, with no rollout and no reward model.

Rafailov et al. (2023) show that the KL-regularised RLHF objective
    max_pi E[r(x, y)] - beta * KL(pi || pi_ref)
has the closed-form optimum pi*(y|x) ∝ pi_ref(y|x) exp(r(x, y) / beta), so r = beta * log(pi*/pi_ref) + const.
Putting that r into the Bradley-Terry loss of the reward model gives a loss on the policy alone.

The losses and metric names follow TRL 1.16, `trl/trainer/dpo_trainer.py::DPOTrainer._compute_loss`.
verl 0.9.1 has no DPO trainer: its PPO trainer only runs rollouts (Chapter 6 says where DPO lives in
verl's tree). The trainer here is offline:

    python -m minirl dpo output_dir=runs/dpo               # the preference task's comparisons (cached)
    python -m minirl dpo model_path=... train_files=pairs.parquet beta=0.1 loss_type=ipo output_dir=...
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from minirl import data as data_lib
from minirl import models
from minirl.config import OptimConfig, load_dataclass
from minirl.core import check_choice, check_same_shape, logprobs_from_logits, masked_sum
from minirl.optim import build_lr_scheduler
from minirl.parallel import apply_thread_policy, check_launch
from minirl.preference import resolve_tiny_paths
from minirl.sft import tokenize_demonstrations

DPO_LOSS_TYPES = ("sigmoid", "ipo", "robust")

# ----------------------------------------------------------------------------------------------
# The maths
# ----------------------------------------------------------------------------------------------


def sequence_log_probs(logits: torch.Tensor, labels: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """log pi(y | x) of whole responses: the sum of their token log-probs.

        log pi(y | x) = sum_t m_t * log pi(y_t | x, y_<t)

    Args:
        logits: (B, L, V) aligned with `labels` (logits[:, t] predict labels[:, t]).
        labels: (B, L) response token ids.
        response_mask: (B, L).
    Returns:
        (B,) sequence log-probs.
    """
    check_same_shape(labels=labels, response_mask=response_mask)
    return masked_sum(logprobs_from_logits(logits, labels), response_mask, axis=-1)


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    reference_chosen_logps: torch.Tensor,
    reference_rejected_logps: torch.Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    loss_type: str = "sigmoid",
    chosen_lengths: torch.Tensor | None = None,
    rejected_lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DPO's per-pair loss and the implicit rewards.

        h_w = log pi(y_w|x) - log pi_ref(y_w|x)        h_l = the same for y_l         h = h_w - h_l
        sigmoid  (DPO)     -log sigmoid(beta h)
                 (cDPO)    -(1-s) log sigmoid(beta h) - s log sigmoid(-beta h)        s = label_smoothing > 0
        robust   (rDPO)    [-(1-s) log sigmoid(beta h) + s log sigmoid(-beta h)] / (1 - 2s)
        ipo      (IPO)     (h_w / |y_w| - h_l / |y_l| - 1 / (2 beta))^2               |y| = completion tokens
        chosen_rewards = beta h_w,   rejected_rewards = beta h_l                      (detached)

    The policy is pushed to raise the chosen answer's probability *relative to the reference* more
    than the rejected one's. When the policy equals the reference, h = 0 and the sigmoid loss is log 2.
    With label_smoothing s > 0 the labels are treated as flipped with probability s: cDPO (Mitchell 2023)
    keeps a minimum at a finite margin; robust DPO (Chowdhury et al. 2024) is an unbiased loss under flips.
    IPO's log-ratios are averaged over tokens, as in TRL (the IPO authors' normalisation).

    TRL 1.16 computes sigmoid, robust and ipo exactly like this; its sigmoid ignores label_smoothing (cDPO
    was TRL 0.x's sigmoid with label_smoothing > 0), so minirl keeps cDPO there, listed in minirl/README.md.

    Args:
        policy_chosen_logps, policy_rejected_logps: (B,) sequence log-probs under the policy.
        reference_chosen_logps, reference_rejected_logps: (B,) under the frozen reference.
        beta: strength of the implicit KL leash (TRL's default 0.1); for ipo, 1/beta is the target margin * 2.
        label_smoothing: probability that a label is flipped, in [0, 0.5).
        loss_type: one of DPO_LOSS_TYPES.
        chosen_lengths, rejected_lengths: (B,) completion token counts (needed by ipo).
    Returns:
        (losses, chosen_rewards, rejected_rewards), each (B,). Take losses.mean() for training.
    """
    check_same_shape(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps,
                     reference_chosen_logps=reference_chosen_logps, reference_rejected_logps=reference_rejected_logps)
    check_choice("loss_type", loss_type, DPO_LOSS_TYPES)
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}.")
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}: it is the strength of the pull toward the reference.")
    chosen_logratios = policy_chosen_logps - reference_chosen_logps
    rejected_logratios = policy_rejected_logps - reference_rejected_logps
    logits = chosen_logratios - rejected_logratios  # h
    s = label_smoothing
    if loss_type == "sigmoid":
        losses = -F.logsigmoid(beta * logits) * (1 - s) - F.logsigmoid(-beta * logits) * s
    elif loss_type == "robust":
        losses = (-(1 - s) * F.logsigmoid(beta * logits) + s * F.logsigmoid(-beta * logits)) / (1 - 2 * s)
    else:  # ipo
        if chosen_lengths is None or rejected_lengths is None:
            raise ValueError("loss_type='ipo' averages the log-ratios over tokens: pass chosen_lengths and "
                             "rejected_lengths (completion token counts).")
        per_token = chosen_logratios / chosen_lengths.clamp(min=1) - rejected_logratios / rejected_lengths.clamp(min=1)
        losses = (per_token - 1 / (2 * beta)) ** 2
    return losses, beta * chosen_logratios.detach(), beta * rejected_logratios.detach()


def dpo_metrics(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor, policy_chosen_logps: torch.Tensor,
                policy_rejected_logps: torch.Tensor) -> dict[str, float]:
    """TRL's DPO metrics for a batch (all inputs (B,), detached).

        rewards/chosen, rewards/rejected   mean implicit rewards beta * h_w, beta * h_l
        rewards/accuracies                 share of pairs with beta h_w > beta h_l
        rewards/margins                    mean of beta (h_w - h_l)
        logps/chosen, logps/rejected       mean sequence log-probs under the policy (watch both: when both
                                           fall while the margin grows, the probability went elsewhere)
    """
    return {"rewards/chosen": chosen_rewards.mean().item(), "rewards/rejected": rejected_rewards.mean().item(),
            "rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean().item(),
            "rewards/margins": (chosen_rewards - rejected_rewards).mean().item(),
            "logps/chosen": policy_chosen_logps.detach().mean().item(),
            "logps/rejected": policy_rejected_logps.detach().mean().item()}


# ----------------------------------------------------------------------------------------------
# The trainer: `python -m minirl dpo`
# ----------------------------------------------------------------------------------------------


@dataclass
class DPOConfig:
    """Hyperparameters of `python -m minirl dpo` (names follow TRL's DPOConfig)."""

    model_path: str = "tiny"
    """The policy to train, also the frozen reference. "tiny" = the preference task's SFT warm start."""
    train_files: str = "tiny"
    """Comparisons in TRL's preference layout (parquet: prompt, chosen, rejected). "tiny" = the preference task's."""
    val_files: str | None = "tiny"
    """Held-out comparisons, evaluated every eval_steps (TRL's eval_ metrics), or null."""
    output_dir: str = "runs/dpo"
    """Where the trained policy is saved (an HF model directory with dpo.json; replaced atomically)."""
    beta: float = 0.1
    """KL leash: larger keeps the policy nearer the reference (TRL's default 0.1)."""
    loss_type: str = "sigmoid"
    """sigmoid (DPO; cDPO with label_smoothing > 0), robust, or ipo."""
    label_smoothing: float = 0.0
    """Assumed probability that a label is flipped, in [0, 0.5) (sigmoid and robust)."""
    learning_rate: float = 1e-4
    """AdamW learning rate, constant after warm-up (TRL's default 1e-6 is for billion-parameter models)."""
    num_train_epochs: int = 1
    """Passes over the comparisons."""
    max_steps: int = -1
    """Stop after this many steps (-1: run num_train_epochs)."""
    per_device_train_batch_size: int = 64
    """Pairs per step and process."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up."""
    max_grad_norm: float = 1.0
    """Clip the gradient norm."""
    max_length: int = 128
    """Longest prompt + answer in tokens; a longer pair is an error."""
    eval_steps: int = 10
    """Evaluate the held-out pairs every this many steps (and at the end); -1 = only at the end."""
    seed: int = 0
    """Seeds the data order."""
    progress_bar: bool = True
    """Show a progress bar over steps."""


class SequenceLogProbs(torch.nn.Module):
    """log pi(completion | prompt) for rows of prompt + completion, as a module (so DDP sees the forward)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids, loss_mask):
        """(N, T) tensors from `minirl.sft.tokenize_demonstrations` -> (N,) completion log-probs."""
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            use_cache=False).logits[:, :-1].float()
        return sequence_log_probs(logits, input_ids[:, 1:], loss_mask[:, :-1])


def encode_preference_pairs(tokenizer, pairs: list[dict], max_length: int) -> dict[str, torch.Tensor]:
    """Each pair's chosen and rejected rows (prompt template + answer + EOS), stacked: chosen first, then rejected.

    Returns (2N, T) tensors input_ids, attention_mask, position_ids and loss_mask (1 where the *next* token is
    an answer token, including the EOS), plus (2N,) `lengths` (answer tokens).
    """
    demos = [{"prompt": pair["prompt"], "response": data_lib.answer_text(pair[column])}
             for column in ("chosen", "rejected") for pair in pairs]
    encoded = tokenize_demonstrations(tokenizer, demos, max_length)
    encoded["lengths"] = encoded["loss_mask"].sum(-1)
    return encoded


@torch.no_grad()
def pair_log_probs(model, encoded: dict[str, torch.Tensor], batch_size: int = 256) -> torch.Tensor:
    """(2N,) completion log-probs of encoded pairs under `model` (used once for the reference, as TRL's
    precompute_ref_log_probs does)."""
    scorer = SequenceLogProbs(model).eval()
    names = ("input_ids", "attention_mask", "position_ids", "loss_mask")
    return torch.cat([scorer(*(encoded[n][i : i + batch_size] for n in names))
                      for i in range(0, len(encoded["input_ids"]), batch_size)])


def evaluate_dpo(model, encoded: dict[str, torch.Tensor], reference_logps: torch.Tensor, config: DPOConfig) -> dict:
    """Loss and TRL metrics on held-out pairs (encoded chosen-then-rejected), named with TRL's eval_ prefix."""
    policy = pair_log_probs(model, encoded)
    chosen, rejected = policy.chunk(2)
    ref_chosen, ref_rejected = reference_logps.chunk(2)
    chosen_lengths, rejected_lengths = encoded["lengths"].chunk(2)
    losses, chosen_rewards, rejected_rewards = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, config.beta,
                                                        config.label_smoothing, config.loss_type,
                                                        chosen_lengths, rejected_lengths)
    metrics = {"loss": losses.mean().item(), **dpo_metrics(chosen_rewards, rejected_rewards, chosen, rejected)}
    return {f"eval_{key}": value for key, value in metrics.items()}


def train_dpo(config: DPOConfig, show_progress: bool | None = None, on_evaluate=None) -> dict:
    """Train a policy with DPO on fixed comparisons and save it to `config.output_dir`; return a summary.

    The reference is the starting model; its log-probs of every pair are computed once before training.
    Runs through accelerate (one process, a GPU or several processes: each process takes its share of every
    batch and the gradients are averaged). `on_evaluate(model, step) -> dict`, if given, runs at the evaluation
    steps (and step 0) and its values join that step's record (the chapters measure the gold reward this way;
    TRL's callbacks play this role). Returns {"history": per-step metrics (TRL names, `loss`, `step`, and
    eval_* at evaluation steps), ...}; the same goes to `<output_dir>/dpo.json`.
    """
    show_progress = config.progress_bar if show_progress is None else show_progress
    check_choice("loss_type", config.loss_type, DPO_LOSS_TYPES)
    model_path, train_files, val_files = resolve_tiny_paths(config)
    set_seed(config.seed)
    apply_thread_policy()
    accelerator = Accelerator()
    check_launch(accelerator)
    tokenizer = models.load_tokenizer(model_path)
    model = models.load_policy(model_path)
    pairs = data_lib.read_preference_pairs(train_files, "train_files")
    train = encode_preference_pairs(tokenizer, pairs, config.max_length)
    reference = pair_log_probs(model, train)
    val = None
    if val_files:
        val_pairs = data_lib.read_preference_pairs(val_files, "val_files")
        val = encode_preference_pairs(tokenizer, val_pairs, config.max_length)
        val_reference = pair_log_probs(model, val)
    # One dataset row per pair: its chosen and rejected sequences side by side, plus their reference log-probs.
    n = len(reference) // 2
    names = ("input_ids", "attention_mask", "position_ids", "loss_mask", "lengths")
    columns = [train[name][:n] for name in names] + [train[name][n:] for name in names] + list(reference.chunk(2))
    loader = DataLoader(TensorDataset(*columns), batch_size=config.per_device_train_batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(config.seed))
    # Each process takes every num_processes-th batch (TRL's per-device batch): count the steps one process makes.
    steps = config.num_train_epochs * math.ceil(len(loader) / accelerator.num_processes)
    steps = min(steps, config.max_steps) if config.max_steps > 0 else steps
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)
    scheduler = build_lr_scheduler(optimizer, OptimConfig(lr=config.learning_rate, lr_warmup_steps=config.warmup_steps,
                                                          lr_scheduler_type="constant"), steps)
    # (the scheduler is not prepared: accelerate would step it once per process at every optimizer step)
    scorer, optimizer, loader = accelerator.prepare(SequenceLogProbs(model), optimizer, loader)
    start, history, step = time.perf_counter(), [], 0
    if on_evaluate is not None:
        history.append({"step": 0, **on_evaluate(model, 0)})
    progress = tqdm(total=steps, desc="DPO", disable=not (show_progress and accelerator.is_main_process))
    while step < steps:
        for batch in loader:
            scorer.train()
            chosen_side, rejected_side, (ref_chosen, ref_rejected) = batch[:5], batch[5:10], batch[10:]
            stacked = [torch.cat([c, r]) for c, r in zip(chosen_side[:4], rejected_side[:4])]  # one forward pass
            policy_chosen, policy_rejected = scorer(*stacked).chunk(2)
            losses, chosen_rewards, rejected_rewards = dpo_loss(
                policy_chosen, policy_rejected, ref_chosen, ref_rejected, config.beta, config.label_smoothing,
                config.loss_type, chosen_side[4], rejected_side[4])
            loss = losses.mean()
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(scorer.parameters(), config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            gathered = [accelerator.gather(t.detach()) for t in (chosen_rewards, rejected_rewards, policy_chosen,
                                                                  policy_rejected)]
            record = {"step": step, "loss": accelerator.gather(loss.detach()).mean().item(), **dpo_metrics(*gathered)}
            if step == steps or (config.eval_steps > 0 and step % config.eval_steps == 0):
                current = accelerator.unwrap_model(scorer).model
                if val is not None:
                    record.update(evaluate_dpo(current, val, val_reference, config))
                if on_evaluate is not None:
                    record.update(on_evaluate(current, step))
            history.append(record)
            progress.update(1)
            progress.set_postfix(loss=f"{record['loss']:.3f}", acc=f"{record['rewards/accuracies']:.2f}")
            if step >= steps:
                break
    progress.close()
    model = accelerator.unwrap_model(scorer).model
    summary = {"config": asdict(config), "model_path": str(model_path), "train_pairs": n,
               "seconds": round(time.perf_counter() - start, 1), "history": history}
    if accelerator.is_main_process:
        models.save_model_atomically(model, tokenizer, Path(config.output_dir), "dpo.json", summary)
    accelerator.wait_for_everyone()
    return summary


def main(overrides: list[str]) -> int:
    """`python -m minirl dpo key=value ...`: train, print the last metrics, return an exit code."""
    try:
        config = load_dataclass(DPOConfig, overrides)
        summary = train_dpo(config)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    last = summary["history"][-1]
    print(f"saved the policy to {config.output_dir} ({summary['train_pairs']} pairs, {len(summary['history'])} "
          f"steps, {summary['seconds']} s)")
    print("  ".join(f"{key}={value:.3f}" for key, value in last.items() if key != "step"))
    return 0
