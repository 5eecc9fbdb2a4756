"""Where do runs diverge across CPUs? Warm-start bytes and a GRPO run under each numeric setting.

Each (setting, seed) is built in a fresh child process whose environment holds the setting's variables
before torch starts (ATen, MKL and oneDNN read theirs once, at first use). The child builds the tiny
warm start with `SFTConfig(seed=seed)`, hashes its `model.safetensors`, then trains it with GRPO for
`--steps` steps and prints the validation curve, a hash of every logged number but the timings, and
the seconds per step. Compare the hashes between settings on one machine, and with
`../shared/reproducibility-fingerprints.md` (or another machine's output) across machines.

    .venv/bin/python bench/reproducibility.py                       # the table of minirl/README.md
    .venv/bin/python bench/reproducibility.py --settings pinned native --seeds 0 1 2 --steps 60
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The settings compared: each is the environment a child process starts with ("native": every library chooses).
SETTINGS = {
    "native": {},
    "aten_avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "aten_default": {"ATEN_CPU_CAPABILITY": "default"},
    "mkl_avx2": {"MKL_CBWR": "AVX2"},
    "onednn_avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx2_all": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2",
                 "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "compat": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
               "ONEDNN_MAX_CPU_ISA": "SSE41"},
    "avx2_mkl_compat": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE",
                        "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "mkl_isa_avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                     "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "threads2": {"OMP_NUM_THREADS": "2"},
}


PINNABLE = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")
"""Variables a child starts without unless its setting names them."""
VAL = "val-core/minirl/arithmetic/acc/mean@1"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def child(seed: int, steps: int, warm_from: str | None = None) -> dict:
    """Build the warm start for `seed` (or copy `warm_from`), train GRPO for `steps` steps; return hashes,
    accuracies, timings. With `warm_from` every setting trains from the same bytes: only the RL run differs."""
    import torch

    from minirl import machine
    from minirl.sft import SFTConfig, build_warm_start, train_overrides
    from minirl.trainer import train

    with tempfile.TemporaryDirectory() as tmp:
        warm = Path(tmp) / "warm"
        config = SFTConfig(seed=seed)
        if warm_from:
            shutil.copytree(warm_from, warm)
            summary = json.loads((warm / "warm_start.json").read_text())
        else:
            summary = build_warm_start(warm, config, show_progress=False)
        result = {"seed": seed, "machine": machine.describe(), "aten": torch.backends.cpu.get_cpu_capability(),
                  "warm_sha256": sha256(warm / "model.safetensors"), "greedy_acc": summary["greedy_acc"],
                  "sampled_acc": summary["sampled_acc"], "final_loss": round(summary["final_loss"], 4),
                  "warm_seconds": summary["seconds"]}
        if steps:
            start = time.perf_counter()
            history = train(train_overrides(warm, config) + [
                f"trainer.default_local_dir={Path(tmp) / 'run'}", f"trainer.total_training_steps={steps}",
                "trainer.test_freq=10", "trainer.resume_mode=disable", "trainer.logger=[]",
                "trainer.progress_bar=false"], show_progress=False)
            seconds = time.perf_counter() - start
            numbers = [(k, v) for record in history for k, v in sorted(record.items())
                       if not k.startswith(("timing", "perf/time", "perf/throughput"))]
            result.update({
                "val": [record[VAL] for record in history if VAL in record],
                "run_sha256": hashlib.sha256(repr(numbers).encode()).hexdigest(),
                "run_seconds": round(seconds, 1), "s_per_step": round(seconds / steps, 3)})
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=60, help="GRPO steps after the warm start (0: warm start only)")
    parser.add_argument("--workers", type=int, default=1, help="children at a time (1 for clean timings)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench/reproducibility.jsonl"))
    parser.add_argument("--warm", help="train every setting from this warm-start directory (skip the SFT build)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.steps, args.warm)))
        return

    args.out.parent.mkdir(parents=True, exist_ok=True)
    jobs = [(name, seed) for name in args.settings for seed in args.seeds]
    running: list = []
    with open(args.out, "a") as out:
        while jobs or running:
            while jobs and len(running) < args.workers:
                name, seed = jobs.pop(0)
                env = {key: value for key, value in os.environ.items() if key not in PINNABLE}
                env = {"OMP_NUM_THREADS": "1", **env, **SETTINGS[name]}
                proc = subprocess.Popen([sys.executable, __file__, "--child", str(seed), "--steps", str(args.steps),
                                         *(["--warm", args.warm] if args.warm else [])],
                                        env=env, stdout=subprocess.PIPE, text=True)
                running.append((name, seed, proc))
            time.sleep(1)
            for job in list(running):
                name, seed, proc = job
                if proc.poll() is None:
                    continue
                running.remove(job)
                lines = proc.stdout.read().strip().splitlines()
                if proc.returncode != 0 or not lines:
                    print(f"{name} seed {seed}: failed (exit {proc.returncode})", file=sys.stderr)
                    continue
                record = {"setting": name, **json.loads(lines[-1])}  # the child's "machine" names the CPU
                out.write(json.dumps(record) + "\n")
                out.flush()
                print(f"{name:13s} seed {seed}  warm {record['warm_sha256'][:12]} greedy {record['greedy_acc']:.3f} "
                      f"({record['warm_seconds']} s)  run {record.get('run_sha256', '')[:12]} "
                      f"val {record.get('val')}  {record.get('s_per_step')} s/step", flush=True)


if __name__ == "__main__":
    main()
