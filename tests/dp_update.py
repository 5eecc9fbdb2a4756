"""Helper for tests/test_trainer.py (not a test): one actor update on a fixed batch, in 1 or N processes.

    python tests/dp_update.py MODEL_DIR OUT_FILE                        # one process
    accelerate launch --cpu --num_processes 2 tests/dp_update.py ...    # two processes

Every process builds the same fixed batch, takes its contiguous share of the prompts (as the
trainer does), runs `Actor.update_actor`, and the main process saves the updated weights.
"""

import sys

import torch
from accelerate import Accelerator

from minirl import models
from minirl.config import ActorConfig
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


def main(model_dir: str, out_file: str) -> None:
    accelerator = Accelerator()
    torch.manual_seed(0)
    config = ActorConfig(ppo_mini_batch_size=4)
    config.optim.lr = 1e-2  # large, so a wrong normalisation would show clearly
    data = fixed_batch(models.load_tokenizer(model_dir))
    share = len(data) // accelerator.num_processes
    mine = data.slice(accelerator.process_index * share, (accelerator.process_index + 1) * share)
    actor = Actor(models.load_policy(model_dir), config, 1.0, accelerator, rows_per_mini_batch=share)
    actor.update_actor(mine)
    if accelerator.is_main_process:
        torch.save(actor.unwrapped_model.state_dict(), out_file)
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(*sys.argv[1:3])
