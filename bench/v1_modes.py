"""The legacy trainer against verl's v1 trainer in its three modes, on the chain task.

    .venv/bin/python bench/v1_modes.py [--steps 12] [--seeds 0 1 2] [--out runs/bench]

Each mode trains the chain task (answers of 7 to 48 tokens) from its warm start, 32 prompts x 8 answers per step,
one run per seed, one after the other (so no two runs share the cores). One process each, except: legacy on 2
data-parallel processes (accelerate, gloo), which uses both cores as separate_async does (1 rollout + 1 trainer
process; parameter_sync_step=2 keeps the legacy run's 2 optimizer steps per step). Reports per mode, over
seeds: the median `timing_s/gen` and `timing_s/step` (first step left out), tokens per second over all the run's
cores (`perf/total_num_tokens / perf/time_per_step`: verl's `perf/throughput` divides by the trainer's
processes), the staleness of what was trained (`training/off_policy/trajectory_staleness/mean`, the largest
`trajectory_spans/max`), and validation accuracy (8 sampled answers on 40 held-out prompts) at step
0, the middle and the end, with the wall-clock seconds to the end.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

from minirl import sft

MODES = {
    "legacy": [],
    "legacy, 2 processes": [],
    "v1 sync": ["trainer.use_v1=true"],
    "v1 colocate_async": ["trainer.use_v1=true", "trainer.v1.trainer_mode=colocate_async"],
    "v1 separate_async": ["trainer.use_v1=true", "trainer.v1.trainer_mode=separate_async",
                          "trainer.v1.separate_async.parameter_sync_step=2"],
}
VAL = "val-core/minirl/chain_sum/acc/mean@8"


def run(overrides: list[str], run_dir: Path, steps: int, seed: int, processes: int = 1) -> list[dict]:
    warm = sft.default_warm_start(sft.CHAIN_SFT, show_progress=False)
    args = [*sft.train_overrides(warm, sft.CHAIN_SFT), f"trainer.default_local_dir={run_dir}",
            f"trainer.total_training_steps={steps}", f"trainer.test_freq={steps // 2}", "trainer.logger=[]",
            "trainer.progress_bar=false", "trainer.resume_mode=disable", "data.val_max_samples=40",
            "actor_rollout_ref.rollout.val_kwargs.n=8", "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
            "actor_rollout_ref.rollout.val_kwargs.temperature=1.0", "actor_rollout_ref.actor.optim.lr=2e-4",
            f"data.seed={seed}", *overrides]
    launch, env = [sys.executable], dict(os.environ)
    if processes > 1:
        with socket.socket() as s:  # a free port for this launch's rendezvous
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        launch += ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
                   "--main_process_port", str(port)]
        env["ACCELERATE_USE_CPU"] = "true"
    subprocess.run([*launch, "-m", "minirl", "train", *args], check=True, capture_output=True, text=True, env=env)
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def spread(values: list[float]) -> str:
    return f"{statistics.mean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default="runs/bench")
    args = parser.parse_args()
    results = {mode: [run(overrides, Path(args.out) / f"v1-{mode.replace(' ', '_').replace(',', '')}-seed{seed}",
                          args.steps, seed, processes=2 if "2 processes" in mode else 1)
                      for seed in args.seeds] for mode, overrides in MODES.items()}
    print("| mode | s/step gen | s/step | tokens/s | staleness mean | largest span |\n"
          "|---|---:|---:|---:|---:|---:|")
    for mode, runs in results.items():
        steps = [[r for r in records if "timing_s/step" in r][1:] for records in runs]
        gen = [statistics.median(r["timing_s/gen"] for r in s) for s in steps]
        step = [statistics.median(r["timing_s/step"] for r in s) for s in steps]
        tokens = [statistics.median(r["perf/total_num_tokens"] / r["perf/time_per_step"] for r in s) for s in steps]
        stale = [statistics.mean(r.get("training/off_policy/trajectory_staleness/mean", 0.0) for r in s)
                 for s in steps]
        span = max(r.get("training/off_policy/trajectory_spans/max", 1.0) for s in steps for r in s)
        print(f"| {mode} | {spread(gen)} | {spread(step)} | {spread(tokens)} | {spread(stale)} | {span:.0f} |")
    print("\n| mode | accuracy at step 0 | at the middle | at the end | wall-clock s to the end |\n"
          "|---|---:|---:|---:|---:|")
    for mode, runs in results.items():
        val = [[r for r in records if VAL in r] for records in runs]
        wall = [sum(r.get("timing_s/step", 0.0) for r in records) for records in runs]
        print(f"| {mode} | {spread([v[0][VAL] for v in val])} | {spread([v[1][VAL] for v in val])} | "
              f"{spread([v[-1][VAL] for v in val])} | {spread(wall)} |")


if __name__ == "__main__":
    main()
