"""Shared helpers for the verl parity tests: random ragged batches, comparison, and the coverage log."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import torch

# function name -> number of (input, output) comparisons made; printed at the end of the run
COMPARED: dict[str, int] = defaultdict(int)

DTYPES = (torch.float32, torch.float64)
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float64: dict(rtol=1e-10, atol=1e-12)}


class Cfg(SimpleNamespace):
    """Stands in for verl's config objects (ActorConfig, AlgoConfig, ...): attributes plus .get()."""

    def get(self, key, default=None):
        return getattr(self, key, default)


def actor_config(clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0):
    return Cfg(clip_ratio=0.2, clip_ratio_low=clip_ratio_low, clip_ratio_high=clip_ratio_high,
               clip_ratio_c=clip_ratio_c, global_batch_info={})


def ragged_batch(seed: int, dtype, batch: int = 12, length: int = 9, empty_rows: bool = False):
    """(values, mask, generator): random values and a right-padded mask of ragged lengths."""
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(batch, length, generator=g, dtype=dtype)
    lengths = torch.randint(0 if empty_rows else 1, length + 1, (batch,), generator=g)
    lengths[0] = length  # at least one full row
    mask = (torch.arange(length)[None] < lengths[:, None]).to(torch.int64)
    return values, mask, g


def grouped_uids(seed: int, sizes) -> np.ndarray:
    """verl-style uids: interleaved repeats of one uuid-like string per prompt, group sizes as given."""
    rng = np.random.default_rng(seed)
    uids = [f"{rng.integers(1 << 62):016x}" for _ in sizes]
    return np.array([uid for uid, size in zip(uids, sizes) for _ in range(size)], dtype=object)


def assert_close(name: str, ours, theirs, dtype=torch.float64, where: torch.Tensor | None = None):
    """Compare one output (tensor or float), optionally only where `where` is True; count it."""
    ours_t = torch.as_tensor(ours, dtype=torch.float64)
    theirs_t = torch.as_tensor(theirs, dtype=torch.float64)
    assert ours_t.shape == theirs_t.shape, f"{name}: shape {tuple(ours_t.shape)} vs verl {tuple(theirs_t.shape)}"
    if where is not None:
        ours_t, theirs_t = ours_t[where], theirs_t[where]
    ok = torch.allclose(ours_t, theirs_t, equal_nan=True, **TOL[dtype])
    if not ok:
        diff = (ours_t - theirs_t).abs().max().item()
        raise AssertionError(f"{name}: minirl and verl differ (max abs diff {diff:.3e}, dtype {dtype})")
    COMPARED[name] += 1


def assert_metrics_close(name: str, ours: dict, theirs: dict, dtype, prefix: str = ""):
    """Compare every metric minirl reports with verl's value under the same name."""
    assert ours, f"{name}: minirl returned no metrics"
    for key, value in ours.items():
        bare = key.removeprefix(prefix)
        assert bare in theirs, f"{name}: metric {key!r} has no verl counterpart {bare!r}"
        assert_close(f"{name} metric", value, theirs[bare], dtype)
