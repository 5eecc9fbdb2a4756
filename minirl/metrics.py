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

from minirl.core import masked_mean, masked_sum
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
        return {f"{prefix}/mean": float("nan"), f"{prefix}/max": float("nan"), f"{prefix}/min": float("nan")}
    return {f"{prefix}/mean": values.mean().item(), f"{prefix}/max": values.max().item(),
            f"{prefix}/min": values.min().item()}


def _lengths(batch: DataProto) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt_length, response_length) per row, from the attention mask (verl's `_compute_response_info`)."""
    response_width = batch["responses"].shape[1]
    attention_mask = batch["attention_mask"]
    return (attention_mask[:, :-response_width].sum(-1).float(), attention_mask[:, -response_width:].sum(-1).float())


def compute_data_metrics(batch: DataProto, use_critic: bool, max_prompt_length: int,
                         max_response_length: int) -> dict[str, float]:
    """Scores, rewards, advantages, returns, values and lengths of a training batch.

    Mirrors `verl/trainer/ppo/metric_utils.py::compute_data_metrics` (verl 0.9.1):

    critic/score/*       sum of token_level_scores per response (the verifier's score), non-aborted rows
    critic/rewards/*     sum of token_level_rewards (score minus the in-reward KL, if any), non-aborted rows
    critic/advantages/*, critic/returns/*, critic/values/*   over valid response tokens
    critic/vf_explained_var   1 - Var(R - V) / (Var(R) + 1e-5): how much of the return the critic predicts
    response_length/*    response tokens from the attention mask (not the rejection-sampling mask);
                         clip_ratio = fraction that reached max_response_length
    response_length_non_aborted/*, response/aborted_ratio   rows with an empty response count as aborted
    prompt_length/*      prompt tokens; clip_ratio = fraction at max_prompt_length
    """
    mask = batch["response_mask"].bool()
    prompt_length, response_length = _lengths(batch)
    aborted = response_length == 0
    metrics = {}
    metrics.update(_stats("critic/score", batch["token_level_scores"].sum(-1)[~aborted]))
    metrics.update(_stats("critic/rewards", batch["token_level_rewards"].sum(-1)[~aborted]))
    metrics.update(_stats("critic/advantages", batch["advantages"][mask]))
    metrics.update(_stats("critic/returns", batch["returns"][mask]))
    if use_critic:
        values, returns = batch["values"][mask], batch["returns"][mask]
        metrics.update(_stats("critic/values", values))
        metrics["critic/vf_explained_var"] = (1 - torch.var(returns - values) / (torch.var(returns) + 1e-5)).item()
    metrics.update(_stats("response_length", response_length))
    metrics["response_length/clip_ratio"] = (response_length == max_response_length).float().mean().item()
    metrics.update(_stats("response_length_non_aborted", response_length[~aborted]))
    metrics["response_length_non_aborted/clip_ratio"] = (
        (response_length[~aborted] == max_response_length).float().mean().item() if (~aborted).any() else float("nan"))
    metrics["response/aborted_ratio"] = aborted.float().mean().item()
    metrics.update(_stats("prompt_length", prompt_length))
    metrics["prompt_length/clip_ratio"] = (prompt_length == max_prompt_length).float().mean().item()
    return metrics


TIMED_PER_TOKEN = ("ref", "values", "adv", "update_critic", "update_actor")


def compute_timing_metrics(batch: DataProto, timing: dict[str, float]) -> dict[str, float]:
    """timing_s/<stage> for every timed stage, and timing_per_token_ms/<stage> for gen (per response token)
    and ref, values, adv, update_critic, update_actor (per token), as `metric_utils.py::compute_timing_metrics`."""
    prompt_length, response_length = _lengths(batch)
    response_tokens = response_length.sum().item()
    all_tokens = response_tokens + prompt_length.sum().item()
    tokens = {"gen": response_tokens, **{name: all_tokens for name in TIMED_PER_TOKEN}}
    metrics = {f"timing_s/{name}": seconds for name, seconds in timing.items()}
    for name in tokens.keys() & timing.keys():
        metrics[f"timing_per_token_ms/{name}"] = timing[name] * 1000 / tokens[name] if tokens[name] else 0.0
    return metrics


def peak_rss_gb() -> float:
    """This process's peak resident memory, in GiB (minirl/peak_rss_gb; verl logs the machine's used memory,
    actor/perf/cpu_memory_used_gb, which on a shared laptop says little about one run). Since the start, or since
    `reset_peak_rss` where Linux allows it."""
    import resource
    import sys

    status = Path("/proc/self/status")
    if status.exists():  # Linux: VmHWM, which reset_peak_rss can reset (ru_maxrss cannot be)
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024 ** 2  # kB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (1024 ** 3 if sys.platform == "darwin" else 1024 ** 2)


def reset_peak_rss() -> bool:
    """Start the peak-memory count again from the current resident memory (Linux: writes 5 to /proc/self/clear_refs),
    so that several jobs in one worker process get a peak each. False where the system has no such switch."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def compute_throughput_metrics(batch: DataProto, timing: dict[str, float], num_processes: int) -> dict[str, float]:
    """perf/total_num_tokens (prompt + response tokens of the whole batch), perf/time_per_step, and
    perf/throughput = tokens / (time * number of devices), per device as verl defines it
    (`metric_utils.py::compute_throughout_metrics`, sic)."""
    tokens = batch["attention_mask"].sum().item()
    return {"perf/total_num_tokens": tokens, "perf/time_per_step": timing["step"],
            "perf/throughput": tokens / (timing["step"] * num_processes)}


def compute_debug_metrics(batch: DataProto) -> dict[str, float]:
    """How far the trainer's probabilities are from the sampler's.

    Mirrors `verl/utils/debug/metrics.py::calculate_debug_metrics`:

        diff_t = | exp(old_log_probs_t) - exp(rollout_log_probs_t) |   over valid response tokens
        training/rollout_probs_diff_{max,mean,std}, training/rollout_actor_probs_pearson_corr

    verl's FAQ: a mean below about 0.005 is normal; above 0.01 the rollout and the trainer disagree.
    """
    mask = batch["response_mask"].bool()
    actor_probs, rollout_probs = batch["old_log_probs"].exp()[mask], batch["rollout_log_probs"].exp()[mask]
    if actor_probs.numel() == 0:
        return {"training/rollout_probs_diff_valid": 0.0}
    diff = (actor_probs - rollout_probs).abs()
    corr = torch.corrcoef(torch.stack([actor_probs, rollout_probs]))[0, 1] if actor_probs.numel() > 1 else torch.nan
    return {"training/rollout_probs_diff_valid": 1.0, "training/rollout_probs_diff_max": diff.max().item(),
            "training/rollout_probs_diff_mean": diff.mean().item(),
            "training/rollout_probs_diff_std": diff.std().item() if diff.numel() > 1 else 0.0,
            "training/rollout_actor_probs_pearson_corr": float(corr)}


def compute_variance_proxy_metrics(batch: DataProto, gradient_norm: float | None = None) -> dict[str, float]:
    """How noisy this step's policy gradient is, from quantities the step already has (no extra backward pass).

    Mirrors `verl/trainer/ppo/metric_utils.py::compute_variance_proxy_metrics`, logged when the batch has
    `sum_pi_squared` (actor.calculate_sum_pi_squared=true). Per trajectory i, with pi_t the probability of the
    sampled token and A_i its mean advantage:

        W_i  = sum_t m_t (1 - 2 pi_t + sum_v pi_v^2)         the squared norm of the logit gradient of log pi, summed
        proxy2_total_power   = mean_i A_i^2 max(W_i, 0)       E||g_i||^2, signal plus noise
        proxy1_signal_strength = grad_norm^2                  ||mean gradient||^2, from the actor update
        proxy3_pure_noise    = max(0, (proxy2 - proxy1) / (N - 1))   the variance of the batch-mean gradient

    With rollout-correction weights w (B, L), W is weighted by w^2 and proxy2 uses the recovered W times
    (mean_t w)^2, as verl does. Also logs expected_a_squared = mean_i A_i^2 and expected_w = mean_i W_i.
    """
    if not {"sum_pi_squared", "old_log_probs", "advantages"} <= set(batch.batch.keys()):
        return {}
    mask = batch["response_mask"]
    w_per_token = 1 - 2 * torch.exp(batch["old_log_probs"]) + batch["sum_pi_squared"]
    weights = batch["rollout_is_weights"] if "rollout_is_weights" in batch.batch.keys() else None
    if weights is not None:
        w_per_token = w_per_token * weights.detach() ** 2
    advantages = masked_mean(batch["advantages"], mask, axis=-1)                       # A_i
    w_values = masked_sum(w_per_token, mask, axis=-1)                                  # W_i
    if weights is not None:
        recovered = masked_sum(w_per_token / torch.clamp(weights.detach() ** 2, min=1e-10), mask, axis=-1)
        total_power = (masked_mean(weights, mask, axis=-1) ** 2 * advantages ** 2 * recovered.clamp(min=0)).mean()
    else:
        total_power = (advantages ** 2 * w_values.clamp(min=0)).mean()
    signal = gradient_norm ** 2 if gradient_norm is not None else None
    noise = 0.0
    if signal is not None and len(advantages) > 1:
        noise = max(0.0, float((total_power - signal) / (len(advantages) - 1)))
    return {"variance_proxy/proxy1_signal_strength": signal if signal is not None else 0.0,
            "variance_proxy/proxy2_total_power": total_power.item(),
            "variance_proxy/proxy3_pure_noise": noise,
            "variance_proxy/expected_a_squared": (advantages ** 2).mean().item(),
            "variance_proxy/expected_w": w_values.mean().item()}


def logp_advantage_covariance(log_probs: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor) -> float:
    """The covariance of a sampled token's log-probability and its advantage over the batch's valid tokens.

        cov = mean_t (log pi(a_t) - mean log pi) (A_t - mean A)        (means over valid tokens)

    Cui et al. 2025 ("The Entropy Mechanism of RL for Reasoning LMs"): under a policy-gradient step the policy's
    entropy changes by about -lr * cov (for a softmax policy), so a positive covariance (confident tokens rewarded,
    unlikely ones penalised) is what drives entropy down. Logged as `minirl/logp_adv_cov`; 0 for an empty batch.
    """
    valid = response_mask.bool()
    logp, adv = log_probs[valid].double(), advantages[valid].double()
    if logp.numel() == 0:
        return 0.0
    return float(((logp - logp.mean()) * (adv - adv.mean())).mean())


# ----------------------------------------------------------------------------------------------
# Validation metrics (verl/trainer/ppo/metric_utils.py::process_validation_metrics)
# ----------------------------------------------------------------------------------------------


def bootstrap_metric(values: list[float], subset_size: int, reduce_fns, n_bootstrap: int = 1000,
                     seed: int = 42) -> list[tuple[float, float]]:
    """(mean, std) over n_bootstrap resamples (with replacement) of `subset_size` values, for each reduce_fn.

    verl reseeds numpy's global generator (np.random.seed(42)) on every call; a RandomState(seed)
    draws the same numbers without touching the global state.
    """
    rng = np.random.RandomState(seed)
    idxs = rng.choice(len(values), size=(n_bootstrap, subset_size), replace=True)
    data = np.asarray(values)[idxs]
    results = []
    for reduce_fn in reduce_fns:
        reduced = reduce_fn(data, axis=1)
        results.append((float(np.mean(reduced)), float(np.std(reduced))))
    return results


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """The unbiased pass@k estimator (Chen et al. 2021): P(at least one of k draws without replacement is right).

        pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)

    from n samples of which c are right (the product form never builds a huge binomial). verl's validation
    reports a related metric, `best@k/mean` (k draws *with* replacement, `bootstrap_metric` above): both
    answer "if I sample k answers, is one of them right?"; pass@k is exact and unbiased for draws without
    replacement.

    Args:
        num_samples: n >= 1 responses sampled for one prompt.
        num_correct: c in [0, n] of them right.
        k: 1 <= k <= n.
    Returns:
        a float in [0, 1]; average it over prompts for the dataset's pass@k.
    """
    if not (num_samples >= 1 and 0 <= num_correct <= num_samples and 1 <= k <= num_samples):
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n and 1 <= k <= n; got n={num_samples}, "
                         f"c={num_correct}, k={k}.")
    if num_samples - num_correct < k:  # every k-subset holds a right answer
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(num_samples - num_correct + 1, num_samples + 1)))


def _sample_sizes(n: int) -> list[int]:
    """verl's gen_ns: the powers of two below n, then n (nothing for n <= 1)."""
    if n <= 1:
        return []
    sizes, k = [], 2
    while k < n:
        sizes.append(k)
        k *= 2
    return sizes + [n]


def _majority_value(values: list[float], preds: list) -> float:
    """The value of the most frequent prediction (first one seen among equals), verl's calc_maj_val."""
    votes: dict = {}
    for value, pred in zip(values, preds):
        votes.setdefault(pred, []).append(value)
    return max(votes.values(), key=len)[0]


def process_validation_metrics(data_sources: list[str], uids: list[str], infos: dict[str, list],
                               seed: int = 42) -> dict[str, float]:
    """val-core/val-aux metrics from per-response values, as verl's `_validate` and `_val_metrics_update` name them.

    For each data source, variable (reward, acc, ...) and prompt (uid) with n responses:
        mean@n, std@n (n > 1), best@k/{mean,std}, worst@k/{mean,std} (bootstrap), maj@k/{mean,std}
        (if the reward returns a "pred"), for k in 2, 4, ... < n and n; then averaged over prompts.
    The core variable is `acc` if present, else `reward`. Its mean@N, best@N/* and maj@N/* at the largest
    N go to `val-core/<data_source>/<var>/<metric>`; everything else to `val-aux/...`.
    """
    grouped: dict = {}
    for i, (source, uid) in enumerate(zip(data_sources, uids)):
        for var, values in infos.items():
            grouped.setdefault(source, {}).setdefault(var, {}).setdefault(uid, []).append(values[i])
    per_source: dict = {}
    for source, variables in grouped.items():
        for var, by_uid in variables.items():
            for uid, values in by_uid.items():
                values = [v for v in values if v is not None]
                if not values or isinstance(values[0], str):
                    continue
                values = [float(v) for v in values]
                n = len(values)
                stats = {f"mean@{n}": float(np.mean(values))}
                if n > 1:
                    stats[f"std@{n}"] = float(np.std(values))
                    preds = grouped[source].get("pred", {}).get(uid)
                    for k in _sample_sizes(n):
                        (best_mean, best_std), (worst_mean, worst_std) = bootstrap_metric(
                            values, k, [np.max, np.min], seed=seed)
                        stats.update({f"best@{k}/mean": best_mean, f"best@{k}/std": best_std,
                                      f"worst@{k}/mean": worst_mean, f"worst@{k}/std": worst_std})
                        if preds is not None and len(preds) == n and all(p is not None for p in preds):
                            rng = np.random.RandomState(seed)
                            idxs = rng.choice(n, size=(1000, k), replace=True)
                            maj = [_majority_value([values[j] for j in row], [preds[j] for j in row]) for row in idxs]
                            stats.update({f"maj@{k}/mean": float(np.mean(maj)), f"maj@{k}/std": float(np.std(maj))})
                for metric, value in stats.items():
                    per_source.setdefault(source, {}).setdefault(var, {}).setdefault(metric, []).append(value)
    metrics = {}
    for source, variables in per_source.items():
        core_var = "acc" if "acc" in variables else "reward"
        for var, metric_values in variables.items():
            n_max = max(int(name.split("@")[-1].split("/")[0]) for name in metric_values)
            for metric, values in metric_values.items():
                core = (var == core_var and metric.startswith(("mean", "maj", "best")) and f"@{n_max}" in metric)
                metrics[f"{'val-core' if core else 'val-aux'}/{source}/{var}/{metric}"] = float(np.mean(values))
    return metrics


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
        if accelerator.is_main_process and start_step > 0 and self.path.exists():
            # A resumed run drops the records written after its checkpoint by the run that was
            # interrupted, so no step appears twice. (A fresh run finds no log: minirl/run_dir.py
            # moved the earlier run's files aside.)
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line)["step"] <= start_step]
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
