"""Batching for DataLoader workers that keeps small fields off shared memory.

torch's default collate turns every field of a batch into a tensor, and a tensor made in a DataLoader worker
crosses to the main process through its own shared-memory segment and file descriptor. For the half-dozen tiny
fields of a LeRobot item (indices, timestamp, state, action, pad masks) that costs more than decoding the frames:
on a 2-core machine about 0.5 ms per field per batch. `collate` stacks small fields into numpy arrays instead (they
travel pickled, with the batch message) and only large ones (frames) into tensors; `to_torch` turns the arrays back
into tensors in the main process without a copy. `DataLoader` does both, so a batch looks exactly as torch's own
DataLoader would return it.
"""

from __future__ import annotations

import numpy as np
import torch

SMALL_NUMEL = 4096  # fields with fewer elements per batch travel pickled, larger ones through shared memory


def collate(items: list[dict]) -> dict:
    """Batch item dicts: large tensors stacked as tensors, small ones as numpy arrays, strings as lists."""
    out = {}
    for key, first in items[0].items():
        values = [item[key] for item in items]
        if isinstance(first, torch.Tensor) and first.device.type == "cpu" and first.numel() * len(items) < SMALL_NUMEL:
            out[key] = np.stack([v.numpy() for v in values])
        else:
            out[key] = torch.utils.data.default_collate(values)
    return out


def to_torch(batch):
    """The numpy arrays of a `collate` batch as tensors (zero-copy), recursively; everything else unchanged."""
    if isinstance(batch, np.ndarray):
        return torch.from_numpy(batch)
    if isinstance(batch, dict):
        return {k: to_torch(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], np.ndarray):
        return type(batch)(to_torch(v) for v in batch)
    return batch


class DataLoader(torch.utils.data.DataLoader):
    """torch's DataLoader with `collate` as the default collate_fn and its batches converted back by `to_torch`.

    Use it like torch's; the batches hold tensors only (and lists of strings), as with the default collate.
    """

    def __init__(self, dataset, *args, collate_fn=None, **kwargs):
        super().__init__(dataset, *args, collate_fn=collate_fn or collate, **kwargs)

    def __iter__(self):
        for batch in super().__iter__():
            yield to_torch(batch)
