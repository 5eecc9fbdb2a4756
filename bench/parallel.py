"""Step time of the tiny GRPO run: micro-batching, token-budgeted micro-batches, and 1 vs 2 processes.

    .venv/bin/python bench/parallel.py [--steps 10] [--out runs/bench]

Every configuration trains the same default run (32 prompts x 8 samples per step) for --steps
steps from the cached warm start and reports the median `timing_s/step` (the first step, which
warms up, is left out) and the peak resident memory of a process. The updates are the same in
every configuration (tests/test_distributed.py); only the speed differs. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CONFIGS = {
    "1 process, whole mini-batch": ([], 1),
    "1 process, micro-batches of 32 rows": (["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
                                             "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32"], 1),
    "1 process, micro-batches of 8 rows": (["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
                                            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8"], 1),
    "1 process, dynamic, 1024 tokens": (["actor_rollout_ref.actor.use_dynamic_bsz=true",
                                         "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1024"], 1),
    "2 processes, whole mini-batch": ([], 2),
}


def run(overrides: list[str], processes: int, run_dir: Path, steps: int) -> tuple[list[float], float]:
    args = ["-m", "minirl", "train", f"trainer.default_local_dir={run_dir}", f"trainer.total_training_steps={steps}",
            "trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.logger=[]", "trainer.progress_bar=false",
            "trainer.resume_mode=disable", *overrides]
    env = dict(os.environ)
    if processes == 1:
        cmd = [sys.executable, *args]
    else:  # the README's CPU launch; one thread per process so two processes share the two cores
        env.update(ACCELERATE_USE_CPU="true", OMP_NUM_THREADS="1")
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", *args]
    timed = ["/usr/bin/time", "-f", "%M"] if Path("/usr/bin/time").exists() else []
    proc = subprocess.run([*timed, *cmd], capture_output=True, text=True, env=env, check=True)
    peak_kib = float(proc.stderr.strip().splitlines()[-1]) if timed else float("nan")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["timing_s/step"] for r in records if "timing_s/step" in r], peak_kib / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", default="runs/bench")
    args = parser.parse_args()
    print("| configuration | median s/step | peak RSS (MiB, launcher or process) |\n|---|---:|---:|")
    for name, (overrides, processes) in CONFIGS.items():
        times, peak = run(overrides, processes, Path(args.out) / f"parallel-{len(name)}-{processes}", args.steps)
        print(f"| {name} | {statistics.median(times[1:]):.3f} | {peak:.0f} |", flush=True)


if __name__ == "__main__":
    main()
