"""Learning curves from run directories (their metrics.jsonl), for the notebooks and `python -m minirl plot`."""

from __future__ import annotations

import json
from pathlib import Path

DEFAULT_KEYS = ("val-core/minirl/arithmetic/acc/mean@1", "critic/score/mean", "actor/pg_clipfrac",
                "response_length/mean")


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


def plot_runs(runs, keys=DEFAULT_KEYS, save_to: str | Path | None = None, axes=None):
    """One panel per metric, one line per run. `runs` is a list of run dirs or {label: run_dir}.

    Returns the path written (if save_to) or the matplotlib axes.
    """
    import matplotlib.pyplot as plt

    runs = runs if isinstance(runs, dict) else {Path(r).name: r for r in runs}
    if axes is None:
        _, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.2), squeeze=False)
        axes = axes[0]
    for label, run_dir in runs.items():
        records = load_metrics(run_dir)
        for ax, key in zip(axes, keys):
            steps, values = curve(records, key)
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
