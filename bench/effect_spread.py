"""The seeded effect tests on "other machines": the same tests, from other warm starts.

On another CPU the SFT warm start comes out as another model (minirl/README.md, "The same seed on another CPU"),
and every seeded test trains from it. A warm start built with another seed is such a model. For each warm-start
seed this script makes a cache directory in which the default warm start's name points at that seed's warm start
(the other cached tasks are shared), runs the chosen tests there (MINIRL_CACHE_DIR), and collects the lines the
tests print as `MEASURED name value`: the spread the tests' margins are derived from.

    .venv/bin/python bench/effect_spread.py                          # warm-start seeds 0-4, the tiny task's tests
    .venv/bin/python bench/effect_spread.py --warm-seeds 3 --tests "tests/test_trainer.py -k estimator"
    .venv/bin/python bench/effect_spread.py --swap chain --tests "tests/test_chapter_effects.py -k chapter8"

`--swap` names what to swap: a warm start (a name of `python -m minirl warm-start`: tiny, chain, word, ...) or
"preference", the preference task of Chapters 3 and 6 sampled from its warm start built with the seed (its reward
model is then retrained in the seed's cache directory, since that cache is keyed by the task's path).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from minirl.preference import PREFERENCE_SFT, PreferenceConfig, default_preference_task
from minirl.sft import WARM_STARTS, default_cache_dir, default_warm_start, warm_start_dir

TESTS = ("tests/test_trainer.py::test_estimator_raises_the_reward "
         "tests/test_chapter_effects.py::test_chapter1_without_the_clip_the_policy_collapses "
         "tests/test_chapter_effects.py::test_chapter2_gae_variance_falls_and_bias_rises_as_lambda_falls "
         "tests/test_chapter_effects.py::test_chapter7_a_baseline_pays_off_only_when_rewards_have_an_offset "
         "tests/test_chapter_effects.py::test_chapter9_bypass_mode_recovers_a_run_that_stale_weights_degrade")
"""The tests that train from the tiny task's warm start."""


def swapped(kind: str, seed: int) -> tuple[str, Path, tuple[str, ...]]:
    """(the default cache entry's name, the seed's version of it, the prefixes of the entries derived from it)."""
    if kind == "preference":  # the preference task (Chapters 3 and 6), sampled from its own warm start
        sft = replace(PREFERENCE_SFT, seed=seed)
        target = default_preference_task(PreferenceConfig(sft=sft, seed=seed), show_progress=False)
        return f"preference-{PreferenceConfig().key()}", target, ("reward_model-",)
    config = WARM_STARTS[kind]
    target = default_warm_start(replace(config, seed=seed), show_progress=False)
    return warm_start_dir(config).name, target, ()


def cache_for(seed: int, root: Path, kind: str = "tiny") -> Path:
    """A cache directory whose `kind` (a warm start's name, or "preference") is the one built with `seed`; the
    other entries are shared, except those derived from the swapped one, which the tests rebuild there."""
    main = default_cache_dir()
    default_name, target, derived = swapped(kind, seed)
    cache = root / f"cache_{kind}{seed}"
    cache.mkdir(parents=True, exist_ok=True)
    for entry in main.iterdir():
        if entry.name.startswith((".", *derived)) or entry.name == default_name:
            continue
        link = cache / entry.name
        if not link.exists():
            link.symlink_to(entry)
    link = cache / default_name
    if link.is_symlink():
        link.unlink()
    link.symlink_to(target)
    return cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warm-seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--swap", default="tiny", choices=[*sorted(WARM_STARTS), "preference"],
                        help="what the seed changes: a warm start, or the preference task")
    parser.add_argument("--tests", default=TESTS, help="pytest arguments selecting the tests")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers")
    parser.add_argument("--out", type=Path, default=Path("runs/bench/effect_spread"))
    args = parser.parse_args()
    measured: dict[str, dict[int, str]] = defaultdict(dict)
    outcomes: dict[int, str] = {}
    for seed in args.warm_seeds:
        cache = cache_for(seed, args.out.resolve(), args.swap)
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rP", "-n", str(args.workers),
                               "--dist", "loadgroup", "-p", "no:cacheprovider", *shlex.split(args.tests)],
                              env={**os.environ, "MINIRL_CACHE_DIR": str(cache)}, capture_output=True, text=True)
        (args.out / f"pytest_{args.swap}{seed}.log").write_text(proc.stdout + proc.stderr)
        for name, value in re.findall(r"^MEASURED (\S+) (.+)$", proc.stdout, re.M):
            measured[name][seed] = value
        outcomes[seed] = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else f"exit {proc.returncode}"
        print(f"warm-start seed {seed}: {outcomes[seed]}", flush=True)
    print("\n| measured | " + " | ".join(f"warm seed {s}" for s in args.warm_seeds) + " |")
    print("|---|" + "---|" * len(args.warm_seeds))
    for name, values in sorted(measured.items()):
        print(f"| {name} | " + " | ".join(values.get(s, "") for s in args.warm_seeds) + " |")


if __name__ == "__main__":
    main()
