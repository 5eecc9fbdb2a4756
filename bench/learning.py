"""Learning speed of each advantage estimator on the tiny task: validation accuracy vs steps and vs wall time.

    .venv/bin/python bench/learning.py [--steps 100] [--out runs/bench]

Every run starts from the same cached SFT warm start with the default config (32 prompts x 8
samples per step) and differs only in `algorithm.adv_estimator`. Prints a Markdown table and
saves `learning.png` (accuracy vs step and vs seconds) in --out.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from minirl.plot import curve, load_metrics
from minirl.trainer import train

ESTIMATORS = ["grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "gae"]
VAL = "val-core/minirl/arithmetic/acc/mean@1"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--test-freq", type=int, default=10)
    parser.add_argument("--out", default="runs/bench")
    parser.add_argument("--estimators", nargs="*", default=ESTIMATORS)
    args = parser.parse_args()
    out = Path(args.out)
    results = {}
    for estimator in args.estimators:
        run_dir = out / f"learning-{estimator}"
        start = time.perf_counter()
        train([f"algorithm.adv_estimator={estimator}", f"trainer.total_training_steps={args.steps}",
               f"trainer.test_freq={args.test_freq}", f"trainer.default_local_dir={run_dir}",
               "trainer.resume_mode=disable", "trainer.logger=[]"], show_progress=False)
        records = load_metrics(run_dir)
        steps, accs = curve(records, VAL)
        step_seconds = {r["step"]: r["timing_s/step"] for r in records if "timing_s/step" in r}
        elapsed, seconds = 0.0, []
        for step in steps:
            elapsed = sum(t for s, t in step_seconds.items() if s <= step)
            seconds.append(elapsed)
        results[estimator] = {"steps": steps, "acc": accs, "seconds": seconds,
                              "wall": time.perf_counter() - start}
        print(f"{estimator}: {accs[0]:.3f} -> {accs[-1]:.3f} in {args.steps} steps", flush=True)

    print("\n| estimator | val acc at 0 | at 20 | at 50 | at end | +margin | steps to 0.75 | train s/step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for estimator, r in results.items():
        at = dict(zip(r["steps"], r["acc"]))
        reach = next((s for s, a in zip(r["steps"], r["acc"]) if a >= 0.75), None)
        per_step = r["seconds"][-1] / max(r["steps"][-1], 1)
        reach_text = reach if reach is not None else f">{args.steps}"
        print(f"| {estimator} | {at[0]:.3f} | {at.get(20, float('nan')):.3f} | {at.get(50, float('nan')):.3f} | "
              f"{r['acc'][-1]:.3f} | {r['acc'][-1] - at[0]:+.3f} | {reach_text} | {per_step:.2f} |")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(10, 3.6))
    for estimator, r in results.items():
        by_step.plot(r["steps"], r["acc"], marker="o", markersize=3, label=estimator)
        by_time.plot(r["seconds"], r["acc"], marker="o", markersize=3, label=estimator)
    by_step.set(xlabel="step", ylabel="greedy validation accuracy", title="accuracy vs steps")
    by_time.set(xlabel="training seconds (2 CPU cores)", title="accuracy vs wall time")
    by_step.legend(fontsize=8)
    for ax in (by_step, by_time):
        ax.grid(alpha=0.3)
    plt.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "learning.png", dpi=110)
    print(f"\nsaved {out / 'learning.png'}")


if __name__ == "__main__":
    main()
