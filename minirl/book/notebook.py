"""Small helpers the chapter notebooks share: show library source, read the fast-mode switch."""

from __future__ import annotations

import inspect
import os
import time

FAST_ENV = "MINIRL_FAST"
_STARTED: float | None = None  # set by where_this_ran(), read by print_run_time()


def fast_mode() -> bool:
    """True when MINIRL_FAST=1: notebooks shrink their runs so the test suite can execute them."""
    return os.environ.get(FAST_ENV, "0") not in ("", "0", "false", "False")


def where_this_ran() -> None:
    """Print the machine behind this notebook's outputs: its first output, so a reader can compare with theirs.

    Sets one thread per process first (minirl/parallel.py::apply_thread_policy, as every training run does), then
    prints CPU model, torch's kernel dispatch (ATen capability), torch version, threads and any numeric pins
    (minirl/machine.py). Training numbers in the outputs are this machine's; the prose states ranges over seeds.
    """
    from minirl import machine
    from minirl.parallel import apply_thread_policy

    global _STARTED
    _STARTED = time.perf_counter()
    apply_thread_policy()
    info = machine.describe()
    print(f"Outputs computed on: {info['cpu']} | ATen {info['aten_capability']} | torch {info['torch']} | "
          f"{info['threads']} thread(s) | numeric pins: {info['pins']}")


def print_run_time() -> None:
    """Print how long the notebook has run since where_this_ran() (a chapter's last cell: the run time its text
    quotes is then printed by the run itself)."""
    if _STARTED is None:
        raise RuntimeError("call where_this_ran() in the notebook's first code cell: it starts the clock")
    seconds = time.perf_counter() - _STARTED
    took = f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.1f} minutes"
    print(f"This notebook ran for {took} ({'fast mode' if fast_mode() else 'full run'}).")


def show_source(obj, collapsed: bool = False):
    """Display the source of a minirl function or class, read from the library (never copied).

    Returns an IPython Markdown object (a highlighted code block) when IPython is available,
    otherwise the source text. With collapsed=True it returns a closed `<details>` block (HTML,
    highlighted with pygments): chapters show the code that answers an exercise only that way, after
    the exercises, so a reader does not see the answer before trying.
    """
    source = inspect.getsource(obj)
    module = inspect.getmodule(obj).__name__.replace(".", "/") + ".py"
    try:
        from IPython.display import HTML, Markdown
    except ImportError:  # pragma: no cover - IPython ships with jupyter
        return source
    if not collapsed:
        return Markdown(f"`{module}`\n\n```python\n{source}```")
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    code = highlight(source, PythonLexer(), HtmlFormatter(noclasses=True, nobackground=True))
    return HTML(f"<details><summary><code>{module}::{obj.__qualname__}</code> (open after the exercises)</summary>"
                f"{code}</details>")


# ----------------------------------------------------------------------------------------------
# Comparisons over seeds: the mean with a min-max band, and claims only beyond the spread
# ----------------------------------------------------------------------------------------------

FULL_SEEDS = 3  # seeds per configuration in a full run; fast mode uses 1


def seeds() -> list[int]:
    """The data.seed values a comparison runs: 0, 1, 2 in a full run, 0 in fast mode."""
    return [0] if fast_mode() else list(range(FULL_SEEDS))


def run_seeds(run_one, name: str, *overrides: str) -> list[list[dict]]:
    """Run one configuration once per seed; returns one metrics history per seed.

    `run_one(name, *overrides)` is the chapter's own single-run function (it trains and returns the
    records of `metrics.jsonl`); each seed gets `data.seed=<seed>` and its own run directory
    `<name>/seed<seed>`. `data.seed` changes the data order, every sampling seed and the critic head's
    initialisation (minirl/config.py).
    """
    return [run_one(f"{name}/seed{seed}", *overrides, f"data.seed={seed}") for seed in seeds()]


def run_grid(runs_dir, variants: dict[str, list[str]], *common: str, workers: int | None = None
             ) -> dict[str, list[list[dict]]]:
    """Train every (variant, seed) pair of a comparison, `workers` runs at a time.

    With 2 workers (the default) each run is its own `python -m minirl train` process. The book's runs use
    one thread each (minirl/parallel.py::apply_thread_policy), so on a 2-core laptop two runs side by side
    take about the time of one. In fast mode the default is 1 worker: the runs are a few steps long and a
    new process's start (about 5 s) would cost more than the run, so they train in this process, one after
    the other. Each run writes `<runs_dir>/<variant>/seed<seed>/` with `trainer.resume_mode=disable` (an
    earlier run there is set aside, never overwritten); `common` overrides go to every run, then the
    variant's, then `data.seed`. Returns {variant: [metrics records per seed]} in the order of `seeds()`.

    Raises:
        RuntimeError: a run process failed (the message holds the end of its stderr); the other runs are
            stopped. In this process (1 worker) a failing run raises its own error.
    """
    import subprocess
    import sys
    import tempfile
    import time
    from pathlib import Path

    from minirl.plot import load_metrics

    jobs = [(label, seed, Path(runs_dir) / label / f"seed{seed}") for label in variants for seed in seeds()]
    workers = workers or (1 if fast_mode() else 2)

    def overrides(label, seed, run_dir):
        return [f"trainer.default_local_dir={run_dir}", "trainer.resume_mode=disable", "trainer.logger=[]",
                "trainer.progress_bar=false", *common, *variants[label], f"data.seed={seed}"]

    if workers == 1:
        from minirl.trainer import train

        for label, seed, run_dir in jobs:
            train(overrides(label, seed, run_dir), show_progress=False)
    else:
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        running, waiting = [], list(jobs)
        try:
            while waiting or running:
                while waiting and len(running) < workers:
                    label, seed, run_dir = waiting.pop(0)
                    log = tempfile.TemporaryFile("w+")  # a file, not a pipe: a chatty run can never block on it
                    cmd = [sys.executable, "-m", "minirl", "train", *overrides(label, seed, run_dir)]
                    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log)
                    running.append((label, seed, log, proc))
                for job in list(running):
                    label, seed, log, proc = job
                    if proc.poll() is None:
                        continue
                    running.remove(job)
                    log.seek(0)
                    error = log.read()
                    log.close()
                    if proc.returncode != 0:
                        raise RuntimeError(f"run {label} (seed {seed}) failed with exit {proc.returncode}:\n"
                                           f"{error[-2000:]}")
                time.sleep(0.2)
        finally:  # a failure or an interrupt stops the other runs and closes their logs
            for _, _, log, proc in running:
                proc.kill()
                proc.wait()
                log.close()
    return {label: [load_metrics(run_dir) for name, _, run_dir in jobs if name == label] for label in variants}


def _one_thread_worker() -> None:
    import torch

    torch.set_num_threads(1)


def run_parallel(function, jobs: list[dict], workers: int | None = None) -> list:
    """`function(**job)` for every job, `workers` processes at a time (2 by default; 1, in this process, in fast
    mode), one thread each; returns the results in the order of `jobs`.

    For in-process experiments that are not trainer runs (Chapter 14's SFT runs): `function` must be importable
    (a library function, not one defined in the notebook), and each job's arguments picklable.
    """
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    workers = workers or (1 if fast_mode() else 2)
    if workers == 1:
        return [function(**job) for job in jobs]
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_one_thread_worker) as pool:
        return list(pool.map(_call, [(function, job) for job in jobs]))


def _call(function_and_job):
    function, job = function_and_job
    return function(**job)


def _x_values(records: list[dict], key: str, x: str) -> tuple[list[float], list[float]]:
    """(x, y) of `key` over a run; x is the step, the cumulative tokens (prompt + response, every
    sampled response counted) or the cumulative training seconds at that step."""
    steps, ys = [], []
    total_tokens, total_seconds, cumulative = 0.0, 0.0, {}
    for record in records:
        total_tokens += record.get("perf/total_num_tokens", 0.0)
        total_seconds += record.get("timing_s/step", 0.0)
        cumulative[record["step"]] = {"step": record["step"], "tokens": total_tokens, "seconds": total_seconds}[x]
        if key in record:
            steps.append(record["step"])
            ys.append(record[key])
    return [cumulative[s] for s in steps], ys


def band(ax, runs: list[list[dict]], key: str, label: str, x: str = "step", **plot_kwargs):
    """Plot the mean of `key` over seeds as a line and the min-max over seeds as a shaded band.

    x: "step", "tokens" (a fair axis when variants generate different amounts per step) or "seconds".
    """
    import numpy as np

    curves = [_x_values(records, key, x) for records in runs]
    length = min(len(c[1]) for c in curves)
    xs = np.mean([c[0][:length] for c in curves], axis=0)
    ys = np.array([c[1][:length] for c in curves])
    line, = ax.plot(xs, ys.mean(0), label=f"{label} ({len(runs)} seed{'s' if len(runs) > 1 else ''})", **plot_kwargs)
    if len(runs) > 1:
        ax.fill_between(xs, ys.min(0), ys.max(0), color=line.get_color(), alpha=0.2, linewidth=0)
    return line


def plot_comparison(results: dict[str, list[list[dict]]], panels: list[tuple[str, str, str]]):
    """One figure, one panel per (metric key, title, x axis), each variant drawn with `band`.

    x is "step", "tokens" or "seconds"; validation metrics (sparse points) get markers.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(13, 3.4))
    for ax, (key, title, x) in zip(axes, panels):
        markers = {"marker": "o", "markersize": 3} if key.startswith("val-") else {}
        for label, runs in results.items():
            band(ax, runs, key, label, x=x, **markers)
        ax.set(title=title, xlabel={"step": "step", "tokens": "tokens (prompt + response)",
                                    "seconds": "training seconds"}[x])
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    plt.tight_layout()
    plt.show()
    return fig


def final_spread(runs: list[list[dict]], key: str) -> tuple[float, float, float]:
    """(mean, min, max) over seeds of the last logged value of `key`."""
    finals = [[r[key] for r in records if key in r][-1] for records in runs]
    return sum(finals) / len(finals), min(finals), max(finals)


def compare_table(results: dict[str, list[list[dict]]], key: str) -> str:
    """A table of each variant's final `key` (mean and range over seeds), and which differences hold up.

    Two variants differ "beyond the seed spread" only when their ranges do not overlap; otherwise the
    table says the difference is within noise. With one seed (fast mode) nothing can be claimed.
    """
    spreads = {label: final_spread(runs, key) for label, runs in results.items()}
    width = max(16, *(len(label) for label in spreads))
    lines = [f"{'variant':{width}s} {'final mean':>10s}  {'min':>6s}  {'max':>6s}"]
    lines += [f"{label:{width}s} {mean:10.3f}  {low:6.3f}  {high:6.3f}" for label, (mean, low, high) in spreads.items()]
    seeds_run = min(len(runs) for runs in results.values())
    labels = list(spreads)
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            (mean_a, low_a, high_a), (mean_b, low_b, high_b) = spreads[a], spreads[b]
            if seeds_run < 2:
                verdict = "one seed: no claim"
            elif low_a > high_b or low_b > high_a:
                verdict = f"differ beyond the seed spread ({mean_a - mean_b:+.3f})"
            else:
                verdict = f"within noise ({mean_a - mean_b:+.3f}, ranges overlap)"
            lines.append(f"{a} vs {b}: {verdict}")
    return "\n".join(lines)
