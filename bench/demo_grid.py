"""Does `make demo` learn on every machine? Its run over warm-start seeds x run seeds.

A warm-start seed stands in for another CPU: both change every rounding of the SFT run, and the warm start's
quality with them. For each warm-start seed (SFTConfig(seed=s), built and cached like the default one) the demo
run (`make demo`'s overrides) trains with each run seed (`data.seed`: data order and sampling), two runs at a
time, and the table gives validation accuracy at the start and after the last step. The bar (issue 27): every
combination gains at least +0.10, or, starting above 0.65, ends at 0.75 or more.

    .venv/bin/python bench/demo_grid.py                           # warm-start seeds 0-4 x run seeds 0-2
    .venv/bin/python bench/demo_grid.py --warm-seeds 0 1 --extra actor_rollout_ref.actor.optim.lr=1e-4
    .venv/bin/python bench/demo_grid.py --sft lr_scheduler_type=cosine   # another warm start
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path

from minirl.book import notebook
from minirl.sft import SFTConfig, default_warm_start, train_overrides

DEMO = ["trainer.total_training_steps=60", "trainer.test_freq=10", "actor_rollout_ref.actor.optim.lr=2e-4"]
"""`make demo`'s overrides (Makefile)."""
VAL = "val-core/minirl/arithmetic/acc/mean@1"


def passes(start: float, end: float) -> bool:
    """The demo's bar: +0.10 or more, or from above 0.65 an end at 0.75 or more."""
    return end - start >= 0.10 - 1e-9 or (start > 0.65 and end >= 0.75 - 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warm-seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--run-seeds", type=int, default=3, help="run seeds 0..N-1 per warm start")
    parser.add_argument("--extra", nargs="*", default=[], help="overrides added to the demo's")
    parser.add_argument("--sft", nargs="*", default=[], help="SFTConfig fields, e.g. steps=1500")
    parser.add_argument("--out", type=Path, default=Path("runs/bench/demo_grid"))
    args = parser.parse_args()

    sft_fields = {key: type(getattr(SFTConfig(), key))(value) for key, value in (f.split("=", 1) for f in args.sft)}
    notebook.FULL_SEEDS = args.run_seeds
    start = time.perf_counter()
    variants, warm = {}, {}
    for seed in args.warm_seeds:
        config = SFTConfig(seed=seed, **sft_fields)
        path = default_warm_start(config)
        warm[seed] = json.loads((path / "warm_start.json").read_text())
        variants[f"warm{seed}"] = train_overrides(path, config)
    build_seconds = time.perf_counter() - start
    runs = notebook.run_grid(args.out, variants, *DEMO, *args.extra, workers=2)
    print(f"demo overrides: {shlex.join(DEMO + args.extra)}; SFT: {sft_fields or 'defaults'}; warm starts "
          f"built/loaded in {build_seconds:.0f} s, runs in {time.perf_counter() - start - build_seconds:.0f} s\n")
    print("| warm-start seed | SFT greedy | run seed | val at start | val after 60 steps | gain | passes |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    gains, ends, failing = [], [], 0
    for seed in args.warm_seeds:
        for run_seed, records in zip(notebook.seeds(), runs[f"warm{seed}"]):
            curve = [r[VAL] for r in records if VAL in r]
            ok = passes(curve[0], curve[-1])
            failing += not ok
            gains.append(curve[-1] - curve[0])
            ends.append(curve[-1])
            print(f"| {seed} | {warm[seed]['greedy_acc']:.3f} | {run_seed} | {curve[0]:.3f} | {curve[-1]:.3f} | "
                  f"{curve[-1] - curve[0]:+.3f} | {'yes' if ok else 'NO'} |")
    print(f"\nend of run: {min(ends):.3f}-{max(ends):.3f}; gain {min(gains):+.3f} to {max(gains):+.3f}; "
          f"{failing} of {len(gains)} below the bar")


if __name__ == "__main__":
    main()
