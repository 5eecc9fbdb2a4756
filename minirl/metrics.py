"""verl's metric names, computed from a batch, and where they are written.

Mirrors `verl/trainer/ppo/metric_utils.py` (`compute_data_metrics`, `compute_timing_metrics`,
`compute_throughout_metrics`) and `verl/utils/tracking.py::Tracking`. The "reading the debug
metrics" lab explains what healthy values look like.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from minirl.protocol import DataProto


@contextmanager
def timer(name: str, timing: dict[str, float]):
    """Add the seconds spent in the block to timing[name] (verl's `marked_timer`)."""
    start = time.perf_counter()
    yield
    timing[name] = timing.get(name, 0.0) + time.perf_counter() - start


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    values = values.float()
    if values.numel() == 0:
        return {}
    return {f"{prefix}/mean": values.mean().item(), f"{prefix}/max": values.max().item(),
            f"{prefix}/min": values.min().item()}


def compute_data_metrics(batch: DataProto, use_critic: bool, max_response_length: int) -> dict[str, float]:
    """Scores, rewards, advantages, returns, values and lengths of a training batch.

    critic/score/*       sum of token_level_scores per response (the verifier's score)
    critic/rewards/*     sum of token_level_rewards (score minus the in-reward KL, if any)
    critic/advantages/*, critic/returns/*, critic/values/*   over valid response tokens
    critic/vf_explained_var   1 - Var(R - V) / Var(R): how much of the return the critic predicts
    response_length/*    valid response tokens; clip_ratio = fraction that hit max_response_length
    prompt_length/*      valid prompt tokens
    """
    mask = batch["response_mask"].bool()
    response_length = batch["response_mask"].sum(-1).float()
    prompt_length = batch["attention_mask"][:, : -batch["responses"].shape[1]].sum(-1).float()
    metrics = {}
    metrics.update(_stats("critic/score", batch["token_level_scores"].sum(-1)))
    metrics.update(_stats("critic/rewards", batch["token_level_rewards"].sum(-1)))
    metrics.update(_stats("critic/advantages", batch["advantages"][mask]))
    metrics.update(_stats("critic/returns", batch["returns"][mask]))
    if use_critic:
        values, returns = batch["values"][mask], batch["returns"][mask]
        metrics.update(_stats("critic/values", values))
        metrics["critic/vf_explained_var"] = (1 - torch.var(returns - values) / (torch.var(returns) + 1e-5)).item()
    metrics.update(_stats("response_length", response_length))
    metrics["response_length/clip_ratio"] = (response_length >= max_response_length).float().mean().item()
    metrics.update(_stats("prompt_length", prompt_length))
    return metrics


def compute_timing_metrics(batch: DataProto, timing: dict[str, float]) -> dict[str, float]:
    """timing_s/<stage> and timing_per_token_ms/<stage> (per response token for gen, per token otherwise)."""
    response_tokens = batch["response_mask"].sum().item()
    all_tokens = batch["attention_mask"].sum().item()
    metrics = {f"timing_s/{name}": seconds for name, seconds in timing.items()}
    for name, seconds in timing.items():
        if name == "step":
            continue
        tokens = response_tokens if name.startswith("gen") else all_tokens
        metrics[f"timing_per_token_ms/{name}"] = seconds * 1000 / max(tokens, 1)
    return metrics


def compute_throughput_metrics(batch: DataProto, timing: dict[str, float], num_processes: int) -> dict[str, float]:
    """perf/total_num_tokens, perf/time_per_step, perf/throughput (tokens per second per process)."""
    tokens = batch["attention_mask"].sum().item()
    return {"perf/total_num_tokens": tokens, "perf/time_per_step": timing["step"],
            "perf/throughput": tokens / (timing["step"] * num_processes)}


def mean_of(metric_dicts: list[dict[str, float]]) -> dict[str, float]:
    """Average each metric over a list of dicts (e.g. over mini-batches)."""
    keys = {key for d in metric_dicts for key in d}
    return {key: float(np.mean([d[key] for d in metric_dicts if key in d])) for key in sorted(keys)}


class Tracking:
    """Write metrics each step: always to <run_dir>/metrics.jsonl, and to the chosen loggers.

    console prints a line per validation step; tensorboard and wandb go through accelerate's
    trackers (the Accelerator must have been created with `log_with`). Only the main process writes.
    `start_step` is the step a resumed run starts after (0 for a fresh run).
    """

    def __init__(self, run_dir: str | Path, loggers: list[str], accelerator, config_dict: dict | None = None,
                 project_name: str = "minirl", start_step: int = 0):
        self.accelerator = accelerator
        self.console = "console" in loggers
        self.path = Path(run_dir) / "metrics.jsonl"
        if accelerator.is_main_process and self.path.exists():
            # A fresh run (start_step 0) starts a fresh log; a resumed one drops the records written
            # after its checkpoint by the run that was interrupted, so no step appears twice.
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and start_step > 0 and json.loads(line)["step"] <= start_step]
            self.path.write_text("".join(line + "\n" for line in kept))
        self.uses_trackers = any(name in loggers for name in ("tensorboard", "wandb"))
        if self.uses_trackers:
            accelerator.init_trackers(project_name, config=_flatten(config_dict or {}))

    def log(self, metrics: dict[str, float], step: int) -> None:
        if not self.accelerator.is_main_process:
            return
        record = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        with self.path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.uses_trackers:
            self.accelerator.log(metrics, step=step)
        if self.console and any(key.startswith("val-") for key in metrics):
            shown = {k: round(v, 4) for k, v in metrics.items() if k.startswith("val-core")}
            tqdm.write(f"step {step}: {shown}")

    def finish(self) -> None:
        if self.uses_trackers:
            self.accelerator.end_training()


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value if isinstance(value, int | float | str | bool) else str(value)
    return flat
