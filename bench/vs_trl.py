"""minirl vs TRL's GRPOTrainer: same tiny model, task, prompts per step, samples per prompt and steps.

    make bench        # installs the `bench` extra (trl) and runs this and bench/learning.py
    .venv/bin/python bench/vs_trl.py [--steps 40]

Both start from the cached SFT warm start and train with GRPO (32 prompts x 8 samples per step,
learning rate 1e-4, no KL term, temperature 1, one update per batch) on the tiny arithmetic task,
rewarded by the same GSM8K rule. Reports seconds per step and the greedy validation accuracy after
the run (measured by the same minirl evaluation for both), and the ratios, in one table.

Differences that remain, by design of each library: TRL uses `model.generate` for sampling and its
default loss normalisation (`loss_type`, set to "grpo" here to match minirl's token-mean within
sequences as closely as TRL allows), minirl its own KV-cached decode loop and `token-mean`.
"""

from __future__ import annotations

import argparse
import shutil
import time
import warnings
from pathlib import Path

import torch

from minirl import data, models
from minirl.evaluate import evaluate
from minirl.rewards import compute_gsm8k_score
from minirl.sft import default_warm_start
from minirl.trainer import train

warnings.filterwarnings("ignore")
PROMPTS, SAMPLES, LR, RESPONSE_LENGTH = 32, 8, 1e-4, 20


def validation_accuracy(model_dir: Path, rows: list[dict]) -> float:
    torch.manual_seed(0)
    return evaluate(models.load_policy(model_dir), models.load_tokenizer(model_dir), rows, RESPONSE_LENGTH)["acc"]


def run_minirl(steps: int, out: Path) -> tuple[float, Path]:
    run_dir = out / "vs_trl-minirl"
    start = time.perf_counter()
    train([f"trainer.total_training_steps={steps}", f"trainer.default_local_dir={run_dir}",
           f"trainer.save_freq={steps}",
           "trainer.test_freq=-1", "trainer.resume_mode=disable", "trainer.logger=[]",
           f"data.train_batch_size={PROMPTS}", f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
           f"actor_rollout_ref.rollout.n={SAMPLES}", f"actor_rollout_ref.actor.optim.lr={LR}",
           f"data.max_response_length={RESPONSE_LENGTH}"], show_progress=False)
    return (time.perf_counter() - start) / steps, run_dir / f"global_step_{steps}" / "actor"


def run_trl(steps: int, warm: Path, out: Path) -> tuple[float, Path]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    rows = data.read_parquet(warm / "data" / "train.parquet").to_list()
    dataset = Dataset.from_list([{"prompt": r["prompt"], "ground_truth": r["reward_model"]["ground_truth"]}
                                 for r in rows])

    def gsm8k_reward(completions, ground_truth, **kwargs):
        return [float(compute_gsm8k_score(c[0]["content"], t)) for c, t in zip(completions, ground_truth)]

    run_dir = out / "vs_trl-trl"
    config = GRPOConfig(
        output_dir=str(run_dir), max_steps=steps, per_device_train_batch_size=PROMPTS * SAMPLES,
        num_generations=SAMPLES, max_completion_length=RESPONSE_LENGTH, learning_rate=LR, beta=0.0,
        temperature=1.0, top_k=0, top_p=1.0, num_iterations=1, loss_type="grpo", lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.01, max_grad_norm=1.0, logging_steps=10, save_strategy="no",
        report_to="none", use_cpu=True, bf16=False, seed=0, disable_tqdm=True)
    trainer = GRPOTrainer(model=str(warm), reward_funcs=gsm8k_reward, args=config, train_dataset=dataset,
                          processing_class=models.load_tokenizer(warm))
    start = time.perf_counter()
    trainer.train()
    seconds = (time.perf_counter() - start) / steps
    final = run_dir / "final"
    trainer.save_model(str(final))
    shutil.copy(warm / "tokenizer.json", final / "tokenizer.json")
    return seconds, final


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", default="runs/bench")
    args = parser.parse_args()
    out = Path(args.out)
    warm = default_warm_start()
    val_rows = data.read_parquet(warm / "data" / "test.parquet").to_list()
    start_acc = validation_accuracy(warm, val_rows)
    minirl_seconds, minirl_model = run_minirl(args.steps, out)
    trl_seconds, trl_model = run_trl(args.steps, warm, out)
    minirl_acc, trl_acc = validation_accuracy(minirl_model, val_rows), validation_accuracy(trl_model, val_rows)
    print(f"\nGRPO, {PROMPTS} prompts x {SAMPLES} samples per step, {args.steps} steps, from greedy val acc "
          f"{start_acc:.3f}\n")
    print("| | minirl | TRL GRPOTrainer | minirl / TRL |")
    print("|---|---:|---:|---:|")
    print(f"| seconds per step | {minirl_seconds:.2f} | {trl_seconds:.2f} | {minirl_seconds / trl_seconds:.2f} |")
    print(f"| greedy val acc after {args.steps} steps | {minirl_acc:.3f} | {trl_acc:.3f} | "
          f"{minirl_acc / max(trl_acc, 1e-9):.2f} |")


if __name__ == "__main__":
    main()
