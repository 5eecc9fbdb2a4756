"""What LoRA costs and saves in the RL trainer: full fine-tuning against ranks 1, 4 and 16, GRPO on the tiny task.

    .venv/bin/python bench/lora_cost.py [--steps 10] [--seeds 0 1 2] [--out runs/bench/lora]

One `python -m minirl train` process per (configuration, seed), one after the other (no two runs share the cores),
each at its learning rate (LoRA at 5x the full run's 2e-4, Chapter 14's measured rule). Reports per configuration,
over seeds: the parameters trained (from the run's start-up line), the median `timing_s/step` (first step left out),
the largest `minirl/peak_rss_gb` (the process's peak resident memory) and the final validation accuracy. Chapter 14
prints the full vs rank-16 pair of these from its own runs; this script adds ranks 1 and 4 and a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

CONFIGS = {"full": ["actor_rollout_ref.actor.optim.lr=2e-4"],
           **{f"LoRA r{r}": [f"actor_rollout_ref.model.lora_rank={r}", "actor_rollout_ref.actor.optim.lr=1e-3"]
              for r in (1, 4, 16)}}
VAL = "val-core/minirl/arithmetic/acc/mean@1"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default="runs/bench/lora")
    args = parser.parse_args()
    print(f"{'':10s} {'trained':>10s} {'s/step':>7s} {'peak RSS GiB':>13s} {'val acc':>18s}")
    for name, overrides in CONFIGS.items():
        step_times, peaks, accs, trained = [], [], [], "all"
        for seed in args.seeds:
            run_dir = Path(args.out) / name.replace(" ", "_") / f"seed{seed}"
            done = subprocess.run([sys.executable, "-m", "minirl", "train", *overrides, f"data.seed={seed}",
                                   f"trainer.total_training_steps={args.steps}", f"trainer.test_freq={args.steps}",
                                   "trainer.resume_mode=disable", "trainer.logger=[]", "trainer.progress_bar=false",
                                   f"trainer.default_local_dir={run_dir}"], capture_output=True, text=True, check=True)
            found = re.search(r"LoRA \(.*\): ([\d,]+) of", done.stderr)
            trained = found.group(1) if found else trained
            records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
            step_times.append(statistics.median(r["timing_s/step"] for r in records[2:] if "timing_s/step" in r))
            peaks.append(max(r.get("minirl/peak_rss_gb", 0.0) for r in records))
            accs.append([r[VAL] for r in records if VAL in r][-1])
        print(f"{name:10s} {trained:>10s} {statistics.median(step_times):7.3f} {max(peaks):13.3f} "
              f"{statistics.mean(accs):8.3f} ({min(accs):.3f}-{max(accs):.3f})", flush=True)


if __name__ == "__main__":
    main()
