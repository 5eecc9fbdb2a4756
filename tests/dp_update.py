"""Helper for tests/test_trainer.py (not a test): one actor update on a fixed batch, in 1 or N processes.

    python tests/dp_update.py MODEL_DIR OUT_FILE [key=value ...]                              # one process
    ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 tests/dp_update.py ...  # two

Every process builds the same fixed (global) batch and runs `Actor.update_actor` on it, which
gives each process its chunk of every mini-batch; the main process saves the updated weights.
Overrides of actor_rollout_ref.actor.* (micro-batches, dynamic batch size, loss_agg_mode) are applied.
"""

import sys

import torch
from accelerate import Accelerator

from minirl import models
from minirl.__main__ import exit_without_teardown_if_distributed
from minirl.config import load_config
from minirl.core import get_response_mask
from minirl.protocol import DataProto
from minirl.workers import Actor


def fixed_batch(tokenizer, prompts: int = 4, n: int = 4, prompt_len: int = 6, response_len: int = 8) -> DataProto:
    g = torch.Generator().manual_seed(0)
    rows = prompts * n
    prompt_ids = torch.randint(10, 60, (prompts, prompt_len), generator=g).repeat_interleave(n, 0)
    responses = torch.randint(10, 60, (rows, response_len), generator=g)
    ends = torch.randint(2, response_len, (rows,), generator=g)
    responses[torch.arange(rows), ends] = tokenizer.eos_token_id  # ragged lengths
    response_mask = get_response_mask(responses, tokenizer.eos_token_id)
    attention_mask = torch.cat([torch.ones(rows, prompt_len, dtype=torch.long), response_mask], 1)
    return DataProto(batch={
        "input_ids": torch.cat([prompt_ids, responses], 1), "attention_mask": attention_mask,
        "position_ids": torch.clip(attention_mask.cumsum(-1) - 1, min=0), "responses": responses,
        "response_mask": response_mask, "old_log_probs": -torch.rand(rows, response_len, generator=g) * 2,
        "advantages": torch.randn(rows, response_len, generator=g) * response_mask})


def update(model_dir: str, overrides: list[str], accelerator) -> tuple[Actor, dict]:
    """One update_actor call on the fixed batch: 16 rows in 2 mini-batches of 8, lr large enough to show any error."""
    config = load_config(["actor_rollout_ref.actor.optim.lr=1e-2", *overrides], announce=False)
    actor = Actor(models.load_policy(model_dir), config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout,
                  config.actor_rollout_ref.model.enable_gradient_checkpointing, accelerator, total_training_steps=1)
    metrics = actor.update_actor(fixed_batch(models.load_tokenizer(model_dir)), rows_per_mini_batch=8)
    return actor, metrics


def main(model_dir: str, out_file: str, *overrides: str) -> None:
    accelerator = Accelerator()
    actor, metrics = update(model_dir, list(overrides), accelerator)
    if accelerator.is_main_process:
        torch.save({"weights": actor.unwrapped_model.state_dict(), "metrics": metrics,
                    "world_size": accelerator.num_processes}, out_file)
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(*sys.argv[1:])
    exit_without_teardown_if_distributed(0)  # see there: gloo's teardown can hang or abort
