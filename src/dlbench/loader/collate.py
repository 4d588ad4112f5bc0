"""Batching for DataLoader workers that keeps small fields off shared memory and large ones in reusable slots.

torch's default collate turns every field of a batch into a tensor, and each tensor made in a DataLoader worker
crosses to the main process through a new shared-memory segment: created, mapped and faulted in by the worker,
its file descriptor fetched by the main process over a fresh socket connection to the worker (together about
1-1.5 ms per segment on a 2-core VM, more than decoding a small frame). `collate` therefore stacks small fields
(indices, timestamp, state, action, pad masks, plain numbers) into numpy arrays, which travel pickled with the
batch message, and stacks the large ones (frames, one tensor per camera) into one block. With a `BatchRing`
(`DataLoader` makes one for its workers) that block is a slot of shared memory mapped once, as the workers
start, and reused batch after batch: the batch message only says where the frames are. Without one it is a single
new shared segment per batch, as torch would make. `to_torch` turns the arrays and ring slots back into tensors in
the main process without a copy. `dlbench.loader.DataLoader` does both, so a batch looks exactly as torch's own
DataLoader would return it.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from ..decode.cache import FrameGather, is_channels_last
from .ring import _ALIGN, RING_KEY, BatchRing, RingSlot, field_view

SMALL_NUMEL = 4096  # fields with fewer elements per batch travel pickled, larger ones through shared memory
# LeRobot's language columns: items carry them, batches do not (as LeRobot's `lerobot_collate_fn`, which training
# uses on a dataset that has them, leaves them out)
LANGUAGE_COLUMNS = ("language_persistent", "language_events")


def _channels_last(t: torch.Tensor | FrameGather) -> bool:
    return is_channels_last(t.source if isinstance(t, FrameGather) else t)


def _stack_into_one_block(
    fields: dict[str, list[torch.Tensor]], ring: BatchRing | None, float_keys: frozenset = frozenset()
) -> dict:
    """torch.stack of each field's values, all outputs views of one block: a ring slot if one is free (the result
    is then {"_ring": RingSlot}), else shared memory inside a worker, plain memory outside.

    Frames keep the memory order they were decoded in: stacked as (B, ..., H, W, C) and returned as a (B, ..., C, H,
    W) view, as torchcodec returns them. Stacking them into (C, H, W) memory would transpose every pixel (at 480x640
    that costs several times more than the plain copy). Fields in `float_keys` (uint8 frames) become float32 in
    [0, 1] on the way in."""
    layout, nbytes = {}, 0
    for key, values in fields.items():
        last, shape = _channels_last(values[0]), tuple(values[0].shape)
        dtype = torch.float32 if key in float_keys else values[0].dtype
        layout[key] = (
            nbytes,
            dtype,
            (len(values), *shape[:-3], *shape[-2:], shape[-3]) if last else (len(values), *shape),
            last,
        )
        nbytes += -(-len(values) * math.prod(shape) * dtype.itemsize // _ALIGN) * _ALIGN
    slot = ring.take(nbytes) if ring is not None else None
    if slot is not None:
        block = slot[1]
    elif torch.utils.data.get_worker_info() is not None:  # as default_collate: allocate straight in shared memory
        block = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(nbytes))
    else:
        block = torch.empty(nbytes, dtype=torch.uint8)
    out = {}
    for key, field in layout.items():
        out[key] = field_view(block, *field)
        values = fields[key]
        if key in float_keys:  # each frame converted once, into the batch, as LeRobot does: x.float() / 255
            for v, dst in zip(values, out[key]):
                if isinstance(v, FrameGather):
                    for src, d in zip(v.unbind(0), dst.unbind(0)):
                        torch.div(src, 255.0, out=d)
                else:
                    torch.div(v, 255.0, out=dst)
        elif any(isinstance(v, FrameGather) for v in values):  # each item's frames copied once, into the batch
            memory = field_view(block, *field[:3], False)  # (B, frames, ...) in memory order
            rows = memory.view(len(values), memory.shape[1], -1).unbind(0)  # per item: one row per frame
            for v, dst, dst_rows in zip(values, out[key], rows):
                if not isinstance(v, FrameGather):
                    dst.copy_(v)
                elif not v.gather_rows(dst_rows, field[3]):
                    v.gather_into(dst)
        else:  # frames of (..., H, W, C) memory into the batch's: the copy follows the strides, no transpose
            torch.stack(values, out=out[key])
    if slot is None:
        return out
    return {RING_KEY: RingSlot(ring.token, slot[0], nbytes, layout)}


class RowItem:
    """An item whose fields are not gathered yet: its row, its frames (views of their decoded block) and the keys
    set on it. `collate` gathers the fields of a whole batch of them at once (`builder.batch_fields`: one take per
    parquet column), instead of each item holding views that are stacked again; the batch is the same."""

    __slots__ = ("builder", "row", "frames", "extra")

    def __init__(self, builder, row: int, frames: dict):
        self.builder, self.row, self.frames, self.extra = builder, row, frames, {}

    def __setitem__(self, key: str, value) -> None:
        self.extra[key] = value

    def as_dict(self) -> dict:
        """The item as a dict, as it would have been built alone."""
        fields = self.builder.batch_fields([self.row])
        out = {k: torch.from_numpy(v[0]) if isinstance(v, np.ndarray) else v[0] for k, v in fields.items()}
        return {**out, **self.frames, **self.extra}


def _columns(items: list) -> dict:
    """key -> the batch's values: a list with one per item, or a whole-batch numpy array (fields of `RowItem`s)."""
    if isinstance(items[0], RowItem) and any(item.builder is not items[0].builder for item in items):
        items = [item.as_dict() for item in items]  # rows of several datasets (a ConcatDataset): item by item
    if not isinstance(items[0], RowItem):
        return {key: [item[key] for item in items] for key in items[0]}
    columns = items[0].builder.batch_fields([item.row for item in items])
    for key in (*items[0].frames, *items[0].extra):
        columns[key] = [item.frames[key] if key in item.frames else item.extra[key] for item in items]
    return columns


def collate(items: list, ring: BatchRing | None = None, float_keys: frozenset = frozenset()) -> dict:
    """Batch item dicts (or `RowItem`s): large tensors stacked into one block (a slot of `ring` when given and
    free), small ones and numbers as numpy arrays, strings as lists (as torch's default collate). The uint8 frames
    of `float_keys` come out float32 in [0, 1]."""
    out, large = {}, {}
    for key, values in _columns(items).items():
        if key in LANGUAGE_COLUMNS:
            continue
        if isinstance(values, np.ndarray):  # a field gathered for the whole batch
            if values.size < SMALL_NUMEL:
                out[key] = values
            else:
                large[key], out[key] = list(torch.from_numpy(values).unbind(0)), None
            continue
        first = values[0]
        if key in float_keys and first.dtype != torch.uint8:  # already float (made outside a collating worker)
            float_keys = float_keys - {key}
        if isinstance(first, (torch.Tensor, FrameGather)):
            small, on_cpu = first.numel() * len(items) < SMALL_NUMEL, first.device.type == "cpu"
            frames = isinstance(first, FrameGather) or first.dim() >= 3  # a field that may hold FrameGathers
            if frames and (small or not on_cpu) and any(isinstance(v, FrameGather) for v in values):
                values = [v.materialize() if isinstance(v, FrameGather) else v for v in values]
            if not on_cpu:  # frames decoded on the GPU: stacked there
                out[key] = torch.utils.data.default_collate(values)
            elif small:
                stacked = torch.stack(values)  # one call: ~4x faster than np.stack of 16 .numpy() views
                out[key] = (stacked.float().div_(255.0) if key in float_keys else stacked).numpy()
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
        out.update(_stack_into_one_block(large, ring, float_keys))
    return out


def to_torch(batch):
    """The numpy arrays and ring slots of a `collate` batch as tensors (zero-copy), recursively; everything else
    unchanged."""
    if isinstance(batch, np.ndarray):
        return torch.from_numpy(batch)
    if isinstance(batch, dict):
        out = {k: to_torch(v) for k, v in batch.items() if k != RING_KEY}
        if RING_KEY in batch:
            out.update(batch[RING_KEY].open())
        return out
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], (np.ndarray, dict)):
        return type(batch)(to_torch(v) for v in batch)
    return batch


_collating_worker = False  # True in a DataLoader worker whose batches `collate` makes
_float_keys: frozenset = frozenset()  # the frames that worker's collate turns into floats


def collating_worker() -> bool:
    """True in a DataLoader worker whose batches `collate` makes: its datasets may hand it `FrameGather`s."""
    return _collating_worker


def floats_made_in_collate(keys) -> bool:
    """True in such a worker whose collate turns all of `keys` (uint8 frames) into floats in the batch."""
    return _collating_worker and _float_keys.issuperset(keys)


class CollateWorkerInit:
    """The worker_init_fn of a DataLoader batched by `collate` (then the user's own, if any): it marks the worker
    as one whose items `collate` batches, so windows of frames reach it uncopied (`collating_worker`), and tells
    it which frames that collate makes float (`float_keys`; the dataset hands those over as uint8)."""

    def __init__(self, user_fn=None, float_keys: frozenset = frozenset()):
        self.user_fn, self.float_keys = user_fn, float_keys

    def __call__(self, worker_id: int) -> None:
        global _collating_worker, _float_keys
        _collating_worker, _float_keys = True, self.float_keys
        if self.user_fn is not None:
            self.user_fn(worker_id)
