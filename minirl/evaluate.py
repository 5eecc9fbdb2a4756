"""Score a policy on a dataset: generate, verify, average. Used for SFT checks and validation.

The SFT warm start checks itself with it. The trainer's validation (verl's `RayPPOTrainer._validate`)
is `minirl/trainer.py::PPOTrainer.validate`, which also shards the work over processes and names the
metrics as verl does.
"""

from __future__ import annotations

import torch

from minirl.data import encode_prompts
from minirl.rewards import NaiveRewardManager
from minirl.rollout import generate_sequences


@torch.no_grad()
def evaluate(model, tokenizer, rows: list[dict], response_length: int, max_prompt_length: int = 64,
             batch_size: int = 256, do_sample: bool = False, temperature: float = 1.0,
             generator: torch.Generator | None = None) -> dict[str, float]:
    """Mean reward and accuracy of `model` on verl-schema `rows`, one response each.

    Args:
        rows: dicts with `prompt`, `data_source`, `reward_model` (as read from a verl parquet file).
        do_sample: False for greedy decoding (verl's validation default), True to sample.
    Returns:
        {"reward": mean score, "acc": mean accuracy, "response_length": mean valid length}.
    """
    if not rows:
        raise ValueError("evaluate got no rows: the validation dataset is empty.")
    reward_manager = NaiveRewardManager(tokenizer)
    scores, accs, lengths = [], [], []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        prompts = encode_prompts(tokenizer, [row["prompt"] for row in chunk], max_prompt_length)
        out = generate_sequences(model, prompts["input_ids"], prompts["attention_mask"], tokenizer.eos_token_id,
                                 tokenizer.pad_token_id, response_length, do_sample=do_sample,
                                 temperature=temperature, generator=generator)
        token_level_scores, extra = reward_manager({
            "responses": out["responses"], "response_mask": out["response_mask"],
            "data_source": [row["data_source"] for row in chunk],
            "reward_model": [row["reward_model"] for row in chunk]})
        scores += token_level_scores.sum(-1).tolist()
        accs += [float(a) for a in extra.get("acc", [0.0] * len(chunk))]
        lengths += out["response_length"].tolist()
    return {"reward": sum(scores) / len(scores), "acc": sum(accs) / len(accs),
            "response_length": sum(lengths) / len(lengths)}
