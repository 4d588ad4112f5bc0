"""Batching for DataLoader workers that keeps small fields off shared memory and large ones in one segment.

torch's default collate turns every field of a batch into a tensor, and each tensor made in a DataLoader worker
crosses to the main process through its own shared-memory segment, whose file descriptor the main process fetches
over a fresh socket connection to the worker (about 0.5-1 ms each on a 2-core machine, more than decoding a small
frame). `collate` therefore stacks small fields (indices, timestamp, state, action, pad masks, plain numbers) into
numpy arrays, which travel pickled with the batch message, and stacks the large ones (frames, one tensor per
camera) into views of a single shared-memory block: one descriptor per batch however many cameras. `to_torch`
turns the arrays back into tensors in the main process without a copy. `DataLoader` does both, so a batch looks
exactly as torch's own DataLoader would return it.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

SMALL_NUMEL = 4096  # fields with fewer elements per batch travel pickled, larger ones through shared memory
_ALIGN = 64  # bytes: each large field starts on a cache line of the shared block


def _stack_into_one_block(fields: dict[str, list[torch.Tensor]]) -> dict[str, torch.Tensor]:
    """torch.stack of each field's values, all outputs views of one block (shared memory inside a worker)."""
    shapes, offsets, nbytes = {}, {}, 0
    for key, values in fields.items():
        shapes[key] = (len(values), *values[0].shape)
        offsets[key] = nbytes
        nbytes += -(-len(values) * values[0].numel() * values[0].element_size() // _ALIGN) * _ALIGN
    if torch.utils.data.get_worker_info() is not None:  # as default_collate: allocate straight in shared memory
        block = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(nbytes))
    else:
        block = torch.empty(nbytes, dtype=torch.uint8)
    out = {}
    for key, values in fields.items():
        size = int(np.prod(shapes[key])) * values[0].element_size()
        view = block[offsets[key]:offsets[key] + size].view(values[0].dtype).view(shapes[key])
        out[key] = torch.stack(values, out=view)
    return out


def collate(items: list[dict]) -> dict:
    """Batch item dicts: large tensors stacked into one block, small ones and numbers as numpy arrays, strings as
    lists (as torch's default collate)."""
    out, large = {}, {}
    for key, first in items[0].items():
        values = [item[key] for item in items]
        if isinstance(first, torch.Tensor) and first.device.type == "cpu":
            if first.numel() * len(items) < SMALL_NUMEL:
                out[key] = np.stack([v.numpy() for v in values])
            else:
                large[key] = values
                out[key] = None  # keeps the item's key order
        elif isinstance(first, numbers.Integral) and not isinstance(first, bool):
            out[key] = np.asarray(values, dtype=np.int64)
        elif isinstance(first, numbers.Real) and not isinstance(first, bool):
            out[key] = np.asarray(values, dtype=np.float64)
        else:
            out[key] = torch.utils.data.default_collate(values)
    if large:
        out.update(_stack_into_one_block(large))
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
