"""A learned reward model: Bradley-Terry training on comparisons, and scoring rollouts with it (Chapter 3).

InstructGPT's second stage. Labellers compare two answers to a prompt; the reward model r(x, y) is
trained so that the preferred answer scores higher, under the Bradley-Terry model

    P(y_w preferred to y_l | x) = sigmoid(r(x, y_w) - r(x, y_l))
    loss = -log sigmoid(r(x, y_w) - r(x, y_l) - margin)      (margin optional, default 0)

The model is the policy's backbone with a scalar head: `AutoModelForSequenceClassification` with
`num_labels=1`, as TRL's `RewardTrainer` builds it and as verl 0.9.1 serves one (its reward loop asks
the vLLM/SGLang server to *classify* the conversation, `experimental/reward_loop/reward_loop.py::
RewardLoopWorker.compute_score_disrm`). The score is the head's output at the conversation's last
token (the EOS that closes the answer): only there has the model read the whole answer. Saved with
`save_pretrained`, it is an ordinary Hugging Face model directory that verl can serve.

    python -m minirl train-rm output_dir=runs/rm            # the preference task's comparisons (cached)
    python -m minirl train-rm model_path=Qwen/Qwen2.5-0.5B-Instruct train_files=pairs.parquet output_dir=...
    python -m minirl train reward.reward_model.enable=true reward.reward_model.model_path=runs/rm ...

In the RL trainer, `RewardModelScorer` replaces the rule reward when `reward.reward_model.enable` is
set, as in verl 0.9.1: it decodes each response, writes prompt + response as a chat with the reward
model's own template, and puts the score on the response's last token.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm
from transformers import AutoModelForSequenceClassification

from minirl import data as data_lib
from minirl import models
from minirl.config import OptimConfig, load_dataclass
from minirl.core import place_scores_on_last_token
from minirl.optim import build_lr_scheduler
from minirl.parallel import apply_thread_policy, check_launch
from minirl.preference import resolve_tiny_paths
from minirl.rewards import NaiveRewardManager, has_rule

# ----------------------------------------------------------------------------------------------
# The maths: Bradley-Terry loss and its metrics
# ----------------------------------------------------------------------------------------------


def bradley_terry_loss(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor,
                       margin: torch.Tensor | None = None,
                       center_rewards_coefficient: float | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The reward model's pairwise loss and TRL's metric names.

    Mirrors `trl/trainer/reward_trainer.py::RewardTrainer.compute_loss` (TRL 1.16):

        loss = mean(-log sigmoid(r_w - r_l - margin))  +  c * mean((r_w + r_l)^2)     c = center_rewards_coefficient

    The second term (optional) keeps the scores centred on 0: Bradley-Terry only fixes differences.

    Args:
        chosen_rewards, rejected_rewards: (B,) scores of the preferred and the other answer.
        margin: (B,) optional required gap (e.g. from a graded preference), or None.
        center_rewards_coefficient: c above, or None.
    Returns:
        (loss, {"accuracy": share with r_w > r_l, "margin": mean r_w - r_l}).
    """
    if chosen_rewards.shape != rejected_rewards.shape or chosen_rewards.dim() != 1:
        raise ValueError(f"chosen and rejected rewards must both be (B,), got {tuple(chosen_rewards.shape)} and "
                         f"{tuple(rejected_rewards.shape)}.")
    if chosen_rewards.numel() == 0:
        raise ValueError("bradley_terry_loss got an empty batch: there are no pairs to compare.")
    difference = chosen_rewards - rejected_rewards
    loss = -F.logsigmoid(difference - (margin if margin is not None else 0.0)).mean()
    if center_rewards_coefficient is not None:
        loss = loss + center_rewards_coefficient * torch.mean((chosen_rewards + rejected_rewards) ** 2)
    with torch.no_grad():
        metrics = {"accuracy": (difference > 0).float().mean().item(), "margin": difference.mean().item()}
    return loss, metrics


# ----------------------------------------------------------------------------------------------
# The model: backbone + scalar head, scored at the last token
# ----------------------------------------------------------------------------------------------


def load_reward_model(path: str | Path, dtype: torch.dtype = torch.float32, new_head: bool = False):
    """AutoModelForSequenceClassification with one label.

    Args:
        path: a reward model directory (or hub id); with new_head=True, any causal LM (the head starts random,
            the way InstructGPT starts its reward model from the SFT model).
    Raises:
        ValueError: path holds a causal LM but new_head is False (it has no trained head to score with).
    """
    path = models._check_model_path(path)
    model = models._from_pretrained(AutoModelForSequenceClassification, path, num_labels=1, dtype=dtype)
    architectures = getattr(model.config, "architectures", None) or []
    if not new_head and not any(name.endswith("ForSequenceClassification") for name in architectures):
        raise ValueError(f"{path!r} is not a reward model (its architectures are {architectures}): its score head "
                         "would be random. Train one with `python -m minirl train-rm model_path=...`.")
    models._disable_dropout(model)
    return model


def encode_conversations(tokenizer, prompts: list[list[dict]], responses: list[str],
                         max_length: int | None = None) -> dict[str, torch.Tensor]:
    """prompt messages + the answer, written with the tokenizer's chat template, right-padded.

    This is how verl 0.9.1 feeds a reward model (`RewardLoopWorker._preprocess_reward_inputs`): the
    conversation with the answer as the assistant turn, `add_generation_prompt=False`, so the template closes
    the answer (with EOS here). Returns {"input_ids", "attention_mask", "position_ids"}, each (N, T).
    """
    rows = []
    for prompt, response in zip(prompts, responses):
        text = tokenizer.apply_chat_template(list(prompt) + [{"role": "assistant", "content": response}],
                                             tokenize=False, add_generation_prompt=False)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if max_length is not None and len(ids) > max_length:
            raise ValueError(f"a conversation has {len(ids)} tokens, more than max_length={max_length}: raise "
                             "max_length (or filter long pairs).")
        rows.append(ids)
    length = max(len(ids) for ids in rows)
    input_ids = torch.full((len(rows), length), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for i, ids in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention_mask[i, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "position_ids": data_lib.compute_position_ids(attention_mask)}


def reward_scores(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """The head's output at each sequence's last attended token: (B,) scores.

    HF's sequence classifiers pool at the last token that is not the pad id; reading the last attended
    position instead also works when PAD == EOS (Qwen's tokenizers), where the pad-id rule would skip the EOS.
    """
    hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                              use_cache=False).last_hidden_state
    last = attention_mask.shape[1] - 1 - attention_mask.flip(-1).long().argmax(-1)  # index of the last 1 per row
    return model.score(hidden[torch.arange(len(last)), last]).squeeze(-1).float()


# ----------------------------------------------------------------------------------------------
# Training: `python -m minirl train-rm`
# ----------------------------------------------------------------------------------------------


@dataclass
class RewardModelConfig:
    """Hyperparameters of `python -m minirl train-rm` (names follow TRL's RewardConfig where it has one)."""

    model_path: str = "tiny"
    """Where the reward model starts: a causal LM (the SFT model, as in InstructGPT) or a reward model.
    "tiny" = the preference task's SFT warm start (minirl/preference.py)."""
    train_files: str = "tiny"
    """Comparisons in TRL's preference layout (parquet with prompt, chosen, rejected). "tiny" = the preference
    task's training pairs."""
    val_files: str | None = "tiny"
    """Held-out comparisons for pair accuracy, or null. "tiny" = the preference task's test pairs."""
    output_dir: str = "runs/reward_model"
    """Where the trained reward model is saved (an HF model directory; replaced atomically)."""
    num_train_epochs: int = 4
    """Passes over the comparisons (TRL's default is 1; the tiny model needs more)."""
    max_steps: int = -1
    """Stop after this many steps (-1: run num_train_epochs)."""
    per_device_train_batch_size: int = 64
    """Pairs per step and process."""
    learning_rate: float = 1e-3
    """AdamW learning rate, constant after warm-up (TRL's default 1e-4 is for billion-parameter models)."""
    warmup_steps: int = 10
    """Linear learning-rate warm-up."""
    max_grad_norm: float = 1.0
    """Clip the gradient norm."""
    center_rewards_coefficient: float | None = None
    """Weight of mean((r_w + r_l)^2), which centres scores on 0 (TRL's key; null = off)."""
    max_length: int = 128
    """Longest prompt + answer in tokens; a longer pair is an error."""
    seed: int = 0
    """Seeds the head's initialisation and the data order."""
    progress_bar: bool = True
    """Show a progress bar over steps."""


def encode_pairs(tokenizer, pairs: list[dict], max_length: int) -> dict[str, torch.Tensor]:
    """Chosen and rejected conversations of each pair: {"chosen_*", "rejected_*"} tensors, (N, T) each."""
    prompts = [pair["prompt"] for pair in pairs]
    encoded = {}
    for column in ("chosen", "rejected"):
        tensors = encode_conversations(tokenizer, prompts, [data_lib.answer_text(p[column]) for p in pairs], max_length)
        encoded.update({f"{column}_{name}": value for name, value in tensors.items()})
    return encoded


def _pair_batches(encoded: dict[str, torch.Tensor], batch_size: int, shuffle: bool, seed: int) -> DataLoader:
    names = sorted(encoded)
    dataset = TensorDataset(*(encoded[name] for name in names))
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=False,
                        generator=torch.Generator().manual_seed(seed))
    loader.names = names
    return loader


class ScoreAtLastToken(torch.nn.Module):
    """`reward_scores` as a module, so that accelerate's data-parallel wrapper sees the forward pass."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids=None):
        return reward_scores(self.model, input_ids, attention_mask, position_ids)


def score_pairs(scorer: ScoreAtLastToken, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores of the chosen and the rejected answers of a batch of encoded pairs: two (B,) tensors.

    Both sides go through the model in one forward pass (padded to a common length), as TRL does.
    """
    width = max(batch["chosen_input_ids"].shape[1], batch["rejected_input_ids"].shape[1])

    def pad(tensor: torch.Tensor, value: int) -> torch.Tensor:
        return F.pad(tensor, (0, width - tensor.shape[1]), value=value)

    pad_id = 0  # (padding is masked out; any id will do)
    input_ids = torch.cat([pad(batch["chosen_input_ids"], pad_id), pad(batch["rejected_input_ids"], pad_id)])
    attention_mask = torch.cat([pad(batch["chosen_attention_mask"], 0), pad(batch["rejected_attention_mask"], 0)])
    position_ids = torch.cat([pad(batch["chosen_position_ids"], 0), pad(batch["rejected_position_ids"], 0)])
    return scorer(input_ids, attention_mask, position_ids).chunk(2)


@torch.no_grad()
def evaluate_pairs(model, tokenizer, pairs: list[dict], max_length: int, batch_size: int = 256) -> dict:
    """Held-out pair accuracy, mean margin and loss, plus each pair's two scores (for "where is it wrong")."""
    model.eval()
    encoded = encode_pairs(tokenizer, pairs, max_length)
    loader = _pair_batches(encoded, batch_size, shuffle=False, seed=0)
    chosen, rejected = [], []
    for tensors in loader:
        c, r = score_pairs(ScoreAtLastToken(model), dict(zip(loader.names, tensors)))
        chosen.append(c)
        rejected.append(r)
    chosen, rejected = torch.cat(chosen), torch.cat(rejected)
    loss, metrics = bradley_terry_loss(chosen, rejected)
    return {"loss": loss.item(), **metrics, "chosen_scores": chosen.tolist(), "rejected_scores": rejected.tolist()}


def train_reward_model(config: RewardModelConfig, show_progress: bool | None = None) -> dict:
    """Train a Bradley-Terry reward model and save it to `config.output_dir`; return a summary.

    Runs through accelerate (one process, a GPU, or several processes). The directory is written to a
    temporary sibling and renamed into place, so an interrupted run never leaves half a model behind.
    Returns {"history": per-step {"loss", "accuracy", "margin"}, "eval": held-out metrics or None, ...}.
    """
    show_progress = config.progress_bar if show_progress is None else show_progress
    model_path, train_files, val_files = resolve_tiny_paths(config)
    set_seed(config.seed)
    apply_thread_policy()
    accelerator = Accelerator()
    check_launch(accelerator)
    tokenizer = models.load_tokenizer(model_path)
    model = load_reward_model(model_path, new_head=True)
    model.config.pad_token_id = tokenizer.pad_token_id
    pairs = data_lib.read_preference_pairs(train_files, "train_files")
    val_pairs = data_lib.read_preference_pairs(val_files, "val_files") if val_files else None
    loader = _pair_batches(encode_pairs(tokenizer, pairs, config.max_length), config.per_device_train_batch_size,
                           shuffle=True, seed=config.seed)
    names = loader.names
    # Each process takes every num_processes-th batch (TRL's per-device batch): count the steps one process makes.
    steps = config.num_train_epochs * math.ceil(len(loader) / accelerator.num_processes)
    steps = min(steps, config.max_steps) if config.max_steps > 0 else steps
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)
    scheduler = build_lr_scheduler(optimizer, OptimConfig(lr=config.learning_rate, lr_warmup_steps=config.warmup_steps,
                                                          lr_scheduler_type="constant"), steps)
    # (the scheduler is not prepared: accelerate would step it once per process at every optimizer step)
    scorer, optimizer, loader = accelerator.prepare(ScoreAtLastToken(model), optimizer, loader)
    start = time.perf_counter()
    history = []
    progress = tqdm(total=steps, desc="Reward model", disable=not (show_progress and accelerator.is_main_process))
    scorer.train()
    for _ in range(config.num_train_epochs):
        for tensors in loader:
            if len(history) == steps:
                break
            chosen, rejected = score_pairs(scorer, dict(zip(names, tensors)))
            loss, metrics = bradley_terry_loss(chosen, rejected,
                                               center_rewards_coefficient=config.center_rewards_coefficient)
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(scorer.parameters(), config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            history.append({"loss": loss.item(), **metrics})
            progress.update(1)
            progress.set_postfix(loss=f"{loss.item():.3f}", acc=f"{metrics['accuracy']:.2f}")
    progress.close()
    model = accelerator.unwrap_model(scorer).model
    summary = {"config": asdict(config), "model_path": str(model_path), "train_pairs": len(pairs),
               "seconds": round(time.perf_counter() - start, 1), "history": history, "eval": None}
    if val_pairs is not None:
        evaluation = evaluate_pairs(model, tokenizer, val_pairs, config.max_length)
        summary["eval"] = {k: evaluation[k] for k in ("loss", "accuracy", "margin")} | {"pairs": len(val_pairs)}
    if accelerator.is_main_process:
        models.save_model_atomically(model, tokenizer, Path(config.output_dir), "reward_model.json", summary)
    accelerator.wait_for_everyone()
    return summary


# ----------------------------------------------------------------------------------------------
# Scoring rollouts in the RL trainer (reward.reward_model.enable=true)
# ----------------------------------------------------------------------------------------------


def default_reward_model(config: RewardModelConfig | None = None, show_progress: bool = True) -> Path:
    """The reward model `config` trains (its output_dir ignored), trained on first use and cached like a warm start.

    The cache key covers the config, the resolved model and data paths (the preference task's directory names carry
    its own key) and this file's source, so a change to the training code trains a new model. Built once, atomically
    (`sft.build_once`). Returns the model directory; its reward_model.json holds the training summary (with the
    held-out "eval").
    """
    import hashlib
    import json

    from minirl.sft import build_once, default_cache_dir

    config = config or RewardModelConfig()
    settings = {k: v for k, v in asdict(config).items() if k not in ("output_dir", "progress_bar")}
    content = json.dumps({"config": settings, "paths": [str(p) for p in resolve_tiny_paths(config)],
                          "source": Path(__file__).read_text()}, sort_keys=True)
    target = default_cache_dir() / f"reward_model-{hashlib.sha256(content.encode()).hexdigest()[:12]}"
    return build_once(target, "reward_model.json",
                      lambda building: train_reward_model(replace(config, output_dir=str(building)), show_progress))


def decode_for_reward_model(tokenizer, responses: list[list[int]]) -> list[str]:
    """The answers' text as verl 0.9.1 gives it to a reward model (`RewardLoopWorker._preprocess_reward_inputs`):
    decoded with their special tokens kept, then every EOS text removed. Other special tokens stay in the text (the
    rule reward's manager skips them all: `minirl.rewards.NaiveRewardManager`)."""
    return [text.replace(tokenizer.eos_token, "") for text in tokenizer.batch_decode(responses)]


class RewardModelScorer:
    """Score responses with a reward model, with the interface of `minirl.rewards.NaiveRewardManager`.

    Mirrors verl 0.9.1's discriminative reward model path (`RewardLoopWorker.compute_score_disrm` and
    `RewardManagerBase.assemble_rm_scores`): decode the valid response (EOS text removed, other special tokens
    kept: `decode_for_reward_model`), write prompt + response with the reward model's chat template, score, and
    put the score on the last valid response token.

    When the rule reward of `minirl.rewards` knows a row's data_source, its score is returned too, as
    `gold_score` (a minirl addition: the chapters measure the policy by it while it trains on the proxy).
    """

    def __init__(self, model_path: str | Path, input_tokenizer, batch_size: int = 256):
        self.tokenizer = models.load_tokenizer(model_path)
        self.model = load_reward_model(model_path).eval()
        self.input_tokenizer = input_tokenizer
        self.batch_size = batch_size
        self.rule = NaiveRewardManager(input_tokenizer)

    @torch.no_grad()
    def __call__(self, batch: dict) -> tuple[torch.Tensor, dict[str, list]]:
        """batch: `responses`, `response_mask` (B, L) and per-row `raw_prompt`, `data_source`, `reward_model`.

        Returns (token_level_scores (B, L), {"gold_score": [...]} when every row has a rule reward, else {}).
        """
        responses, response_mask = batch["responses"].cpu(), batch["response_mask"].cpu()
        lengths = response_mask.sum(-1).tolist()
        texts = decode_for_reward_model(self.input_tokenizer, [r[:n].tolist() for r, n in zip(responses, lengths)])
        scores = []
        for start in range(0, len(texts), self.batch_size):
            end = start + self.batch_size
            encoded = encode_conversations(self.tokenizer, batch["raw_prompt"][start:end], texts[start:end])
            scores.append(reward_scores(self.model, **encoded))
        token_level_scores = place_scores_on_last_token(torch.cat(scores), response_mask)
        extra = {}
        if all(has_rule(source) for source in batch["data_source"]):
            gold, _ = self.rule(batch)
            extra["gold_score"] = gold.sum(-1).tolist()
        return token_level_scores, extra


def main(overrides: list[str]) -> int:
    """`python -m minirl train-rm key=value ...`: train, print the held-out accuracy, return an exit code."""
    try:
        config = load_dataclass(RewardModelConfig, overrides)
        summary = train_reward_model(config)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    evaluation = summary["eval"]
    print(f"saved the reward model to {config.output_dir} ({summary['train_pairs']} pairs, {summary['seconds']} s)")
    if evaluation:
        print(f"held-out pairs: {evaluation['pairs']}, accuracy {evaluation['accuracy']:.3f}, "
              f"margin {evaluation['margin']:.3f}, loss {evaluation['loss']:.3f}")
    return 0
