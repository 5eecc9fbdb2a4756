"""Learning curves from run directories (their metrics.jsonl), for the notebooks and `python -m minirl plot`.

    python -m minirl plot RUN_DIR [RUN_DIR ...]                  # the learning curves, saved as RUN_DIR/curves.png
    python -m minirl plot RUN_DIR [RUN_DIR ...] --view debug     # Lab C's checklist, saved as RUN_DIR/debug.png
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

DEFAULT_KEYS = ("val-core/minirl/arithmetic/acc/mean@1", "critic/score/mean", "actor/pg_clipfrac",
                "response_length/mean")

DEBUG_KEYS = ("actor/ppo_kl", "actor/pg_clipfrac", "actor/entropy", "actor/grad_norm", "minirl/zero_spread_group_frac",
              "critic/score/max", "response_length/clip_ratio", "training/rollout_probs_diff_mean")
"""Lab C's checklist as panels: the metrics that tell its broken runs apart, in the order the lab reads them."""

VIEWS = {"curves": DEFAULT_KEYS, "debug": DEBUG_KEYS}
"""`python -m minirl plot --view NAME`: which metrics to draw, one panel each."""


def load_metrics(run_dir: str | Path) -> list[dict]:
    """The per-step records of a run (one dict per logged step)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a minirl run directory?")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def training_steps(records: list[dict]) -> list[dict]:
    """The records of training steps only (metrics.jsonl also holds the validation run before step 1)."""
    return [r for r in records if "timing_s/step" in r]


def curve(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric, skipping steps where it was not logged."""
    points = [(r["step"], r[key]) for r in records if key in r]
    return [p[0] for p in points], [p[1] for p in points]


def plot_runs(runs, keys=DEFAULT_KEYS, save_to: str | Path | None = None, axes=None, view: str | None = None,
              columns: int = 4):
    """One panel per metric, one line per run. `runs` is a list of run dirs or {label: run_dir}.

    `view` picks the metrics by name (`VIEWS`: "curves", the default learning curves, or "debug", Lab C's
    checklist) instead of `keys`. A metric that none of the runs logs gets no panel (the debug view's
    `training/rollout_probs_diff_mean` needs a rollout that returns log-probs). Panels wrap after `columns`.
    Returns the path written (if save_to) or the matplotlib axes.

    Raises:
        ValueError: an unknown view, or none of the metrics is logged by any run.
    """
    import matplotlib.pyplot as plt

    if view is not None:
        if view not in VIEWS:
            raise ValueError(f"unknown view {view!r}; use one of {', '.join(VIEWS)}")
        keys = VIEWS[view]
    runs = runs if isinstance(runs, dict) else {Path(r).name: r for r in runs}
    records = {label: load_metrics(run_dir) for label, run_dir in runs.items()}
    keys = [key for key in keys if any(key in r for rs in records.values() for r in rs)]
    if not keys:
        raise ValueError(f"none of the runs {list(runs.values())} logs any of the metrics asked for")
    if axes is None:
        columns = min(columns, len(keys))
        rows = math.ceil(len(keys) / columns)
        _, grid = plt.subplots(rows, columns, figsize=(4 * columns, 3.2 * rows), squeeze=False)
        axes = grid.ravel()
        for ax in axes[len(keys):]:
            ax.set_visible(False)
    for label, run_records in records.items():
        for ax, key in zip(axes, keys):
            steps, values = curve(run_records, key)
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=label)
    for ax, key in zip(axes, keys):
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    plt.tight_layout()
    if save_to is not None:
        plt.savefig(save_to, dpi=110)
        plt.close()
        return Path(save_to)
    return axes


def main(argv: list[str]) -> int:
    """`python -m minirl plot`: draw runs' metrics into a PNG; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m minirl plot", description="Plot the metrics.jsonl of one or more run directories as a PNG.")
    parser.add_argument("runs", nargs="*", default=["runs/minirl"], metavar="RUN_DIR",
                        help="run directories (trainer.default_local_dir); default runs/minirl")
    parser.add_argument("--view", choices=sorted(VIEWS), default="curves",
                        help="curves: validation accuracy, score, pg_clipfrac, response length (the default); "
                             "debug: Lab C's checklist (ppo_kl, pg_clipfrac, entropy, grad_norm, zero-spread share, "
                             "score max, clip ratio, rollout_probs_diff_mean)")
    parser.add_argument("--out", default=None, help="the PNG to write; default RUN_DIR/<view>.png of the first run")
    args = parser.parse_args(argv)
    out = args.out or str(Path(args.runs[0]) / f"{args.view}.png")
    try:
        saved = plot_runs(args.runs, save_to=out, view=args.view)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=__import__("sys").stderr)
        return 2
    print(f"saved {saved}")
    return 0
