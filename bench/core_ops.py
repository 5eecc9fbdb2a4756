"""Time per call of each minirl function and its verl 0.9.1 twin, measured in one run.

Run in the parity environment (it has both):  .venv-verl/bin/python bench/core_ops.py
Shapes: B=256 responses x L=1024 tokens for losses, masks and rollout correction; B=1024 x L=4096
for the advantage estimators; logits use a vocabulary of V=128 (B x L x V floats must fit in memory).
Prints a Markdown table: median seconds per call (after a warm-up) and the ratio minirl / verl.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import torch

warnings.filterwarnings("ignore")

from verl.trainer.ppo import core_algos as V  # noqa: E402
from verl.trainer.ppo import rollout_corr_helper as VRC  # noqa: E402
from verl.utils import torch_functional as VF  # noqa: E402

from minirl import core, gae, grpo, kl, ppo, reinforce_pp, remax, rloo  # noqa: E402
from minirl import rollout_correction as rc  # noqa: E402


class Cfg(dict):
    __getattr__ = dict.get


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def batch(b: int, length: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(length // 4, length + 1, (b,), generator=g)
    mask = (torch.arange(length)[None] < lengths[:, None]).long()
    x = torch.randn(b, length, generator=g)
    y = x + 0.1 * torch.randn(b, length, generator=g)
    return x, y, mask, g


def cases(small: tuple[int, int], large: tuple[int, int], vocab: int):
    x, y, mask, g = batch(*small)
    logits = torch.randn(*small, vocab, generator=g)
    labels = torch.randint(0, vocab, small, generator=g)
    actor = Cfg(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, global_batch_info={})
    yield "masked_whiten", small, lambda: core.masked_whiten(x, mask), lambda: VF.masked_whiten(x, mask)
    yield ("logprobs_from_logits", (*small, vocab), lambda: core.logprobs_from_logits(logits, labels),
           lambda: VF.logprobs_from_logits(logits, labels))
    yield ("entropy_from_logits", (*small, vocab), lambda: core.entropy_from_logits(logits),
           lambda: VF.entropy_from_logits(logits))
    yield "get_response_mask", small, lambda: core.get_response_mask(labels, 2), lambda: VF.get_response_mask(labels, 2)
    yield ("agg_loss seq-mean-token-mean", small, lambda: core.agg_loss(x, mask, "seq-mean-token-mean"),
           lambda: V.agg_loss(x, mask, "seq-mean-token-mean"))
    yield ("compute_policy_loss", small, lambda: ppo.compute_policy_loss(x, y, x, mask, "token-mean", 0.2, 0.28),
           lambda: V.compute_policy_loss_vanilla(x, y, x, mask, "token-mean", actor))
    yield ("compute_value_loss", small, lambda: ppo.compute_value_loss(x, y, x, mask, 0.5),
           lambda: V.compute_value_loss(x, y, x, mask, 0.5))
    yield "kl_penalty low_var_kl", small, lambda: kl.kl_penalty(x, y, "k3"), lambda: V.kl_penalty(x, y, "k3")
    yield ("compute_rollout_correction_weights", small,
           lambda: rc.compute_rollout_correction_weights(x - y, mask, "token", 2.0),
           lambda: VRC.compute_rollout_correction_weights(x - y, mask, "token", 2.0))
    yield ("compute_rollout_rejection_mask", small,
           lambda: rc.compute_rollout_rejection_mask(x - y, mask, "seq_mean_k3", 0.01),
           lambda: VRC.compute_rollout_rejection_mask(x - y, mask, "seq_mean_k3", 0.01))
    yield ("compute_offpolicy_metrics", small, lambda: rc.compute_offpolicy_metrics(x, y, mask),
           lambda: VRC.compute_offpolicy_metrics(x, y, mask))

    rewards, values, mask, g = batch(*large, seed=1)
    rewards = torch.zeros_like(rewards)
    rewards[torch.arange(large[0]), mask.sum(-1) - 1] = torch.randint(0, 2, (large[0],), generator=g).float()
    uids = np.repeat([f"uid{i}" for i in range(large[0] // 8)], 8).astype(object)
    baselines = torch.rand(large[0], generator=g)
    yield ("compute_gae_advantage_return", large, lambda: gae.compute_gae_advantage_return(rewards, values, mask, 1, 1),
           lambda: V.compute_gae_advantage_return(rewards, values, mask, 1.0, 1.0))
    yield ("compute_grpo_outcome_advantage", large, lambda: grpo.compute_grpo_outcome_advantage(rewards, mask, uids),
           lambda: V.compute_grpo_outcome_advantage(rewards.clone(), mask, uids))
    yield ("compute_rloo_outcome_advantage", large, lambda: rloo.compute_rloo_outcome_advantage(rewards, mask, uids),
           lambda: V.compute_rloo_outcome_advantage(rewards.clone(), mask, uids))
    yield ("compute_reinforce_plus_plus_outcome_advantage", large,
           lambda: reinforce_pp.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, 1.0),
           lambda: V.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config=Cfg(gamma=1.0)))
    yield ("compute_reinforce_plus_plus_baseline_outcome_advantage", large,
           lambda: reinforce_pp.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, uids),
           lambda: V.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards.clone(), mask, uids))
    yield ("compute_remax_outcome_advantage", large,
           lambda: remax.compute_remax_outcome_advantage(rewards, baselines, mask),
           lambda: V.compute_remax_outcome_advantage(rewards, baselines, mask))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny shapes, to check the script runs")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    small, large, vocab = ((8, 16), (16, 32), 11) if args.quick else ((256, 1024), (1024, 4096), 128)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {args.repeats} calls\n")
    print("| function | shape | minirl (ms) | verl (ms) | minirl / verl |")
    print("|---|---|---:|---:|---:|")
    for name, shape, ours, theirs in cases(small, large, vocab):
        t_ours = median_time(ours, args.repeats)
        t_theirs = median_time(theirs, args.repeats)
        shape_text = "x".join(map(str, shape))
        print(f"| {name} | {shape_text} | {t_ours * 1e3:.2f} | {t_theirs * 1e3:.2f} | {t_ours / t_theirs:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
