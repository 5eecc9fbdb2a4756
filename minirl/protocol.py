"""DataProto: the batch that flows between the trainer and its workers.

A small twin of `verl/protocol.py::DataProto`: tensors with the batch dimension first (`batch`),
per-row Python objects such as uids and ground truths (`non_tensor_batch`, numpy object arrays),
and settings for the receiving worker (`meta_info`). The trainer only ever moves whole rows around,
so a handful of row operations is all it needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class DataProto:
    batch: dict[str, torch.Tensor] = field(default_factory=dict)
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)

    def __post_init__(self):
        sizes = {len(v) for v in self.batch.values()} | {len(v) for v in self.non_tensor_batch.values()}
        if len(sizes) > 1:
            shapes = {k: len(v) for k, v in {**self.batch, **self.non_tensor_batch}.items()}
            raise ValueError(f"DataProto fields must all have the same number of rows: {shapes}")
        self.non_tensor_batch = {k: _object_array(v) for k, v in self.non_tensor_batch.items()}

    def __len__(self) -> int:
        for values in (*self.batch.values(), *self.non_tensor_batch.values()):
            return len(values)
        return 0

    def __getitem__(self, key: str):
        return self.batch[key] if key in self.batch else self.non_tensor_batch[key]

    def __contains__(self, key: str) -> bool:
        return key in self.batch or key in self.non_tensor_batch

    def repeat(self, repeat_times: int, interleave: bool = True) -> DataProto:
        """Each row `repeat_times` times; interleave=True keeps the copies of a row adjacent (verl's default)."""
        def rep_tensor(t):
            if interleave:
                return t.repeat_interleave(repeat_times, dim=0)
            return t.repeat(repeat_times, *[1] * (t.dim() - 1))

        def rep_array(a):
            return np.repeat(a, repeat_times, axis=0) if interleave else np.concatenate([a] * repeat_times)

        return DataProto({k: rep_tensor(v) for k, v in self.batch.items()},
                         {k: rep_array(v) for k, v in self.non_tensor_batch.items()}, dict(self.meta_info))

    def union(self, other: DataProto) -> DataProto:
        """Fields of both (same rows); a key present in both must hold equal values."""
        if len(self) and len(other) and len(self) != len(other):
            raise ValueError(f"union of DataProtos with {len(self)} and {len(other)} rows")
        for key in set(self.batch) & set(other.batch):
            if not torch.equal(self.batch[key], other.batch[key]):
                raise ValueError(f"union: field {key!r} differs between the two DataProtos")
        return DataProto({**self.batch, **other.batch}, {**self.non_tensor_batch, **other.non_tensor_batch},
                         {**self.meta_info, **other.meta_info})

    def select_idxs(self, idxs) -> DataProto:
        """The rows at `idxs` (an int tensor, array or list), in that order."""
        idxs = torch.as_tensor(idxs, dtype=torch.long)
        return DataProto({k: v[idxs] for k, v in self.batch.items()},
                         {k: v[idxs.numpy()] for k, v in self.non_tensor_batch.items()}, dict(self.meta_info))

    def slice(self, start: int, end: int) -> DataProto:
        return self.select_idxs(torch.arange(start, min(end, len(self))))

    def split(self, split_size: int) -> list[DataProto]:
        """Consecutive chunks of `split_size` rows (the last may be shorter)."""
        return [self.slice(i, i + split_size) for i in range(0, len(self), split_size)]

    @staticmethod
    def concat(parts: list[DataProto]) -> DataProto:
        """Rows of all parts, in order (fields of the first part)."""
        if not parts:
            raise ValueError("concat of no DataProtos")
        return DataProto({k: torch.cat([p.batch[k] for p in parts]) for k in parts[0].batch},
                         {k: np.concatenate([p.non_tensor_batch[k] for p in parts]) for k in parts[0].non_tensor_batch},
                         dict(parts[0].meta_info))


def _object_array(values) -> np.ndarray:
    """A 1-D numpy object array (dicts and lists stay Python objects, one per row)."""
    if isinstance(values, np.ndarray) and values.dtype == object and values.ndim == 1:
        return values
    array = np.empty(len(values), dtype=object)
    array[:] = list(values)
    return array
