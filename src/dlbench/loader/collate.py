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
the main process without a copy. `DataLoader` does both, so a batch looks exactly as torch's own DataLoader would
return it.
"""

from __future__ import annotations

import itertools
import mmap
import multiprocessing.context
import multiprocessing.reduction
import numbers
import os
import weakref

import numpy as np
import torch

from ..video import FrameGather, is_channels_last
from ..workers import start_method

SMALL_NUMEL = 4096  # fields with fewer elements per batch travel pickled, larger ones through shared memory
_ALIGN = 64  # bytes: each large field starts on a cache line of the shared block
RING_KEY = "_ring"  # a batch whose large fields are in a BatchRing slot carries the RingSlot under this key


class BatchRing:
    """Reusable shared-memory slots for the large fields of batches made in DataLoader workers.

    Each worker owns `slots` slots of `slot_bytes` bytes, all in one shared memory file mapped by the main process
    before the workers start (so both sides see the same pages, mapped once). Forked workers inherit the mapping;
    workers started by spawn or the fork server receive the file's descriptor with the ring and map it. A worker
    writes a batch's frames into a free slot of its own and sends only where they are (a `RingSlot`); `to_torch` in
    the main process makes tensors that view the slot, and the slot is free again once the last of those tensors is
    gone (or when the batch is dropped unread, as torch does with batches left over when a persistent iterator
    restarts). A batch that does not fit, or a worker whose slots are all still held by the consumer, falls back to
    a new shared segment: slower, never wrong. Memory: workers x slots x slot_bytes, touched once and then reused.

    Pickled at any other time (not as a worker starts), a ring has no slots: every batch takes the fallback.
    """

    def __init__(self, workers: int, slots: int, slot_bytes: int):
        self.workers, self.slots = workers, slots
        self.slot_bytes = -(-slot_bytes // mmap.PAGESIZE) * mmap.PAGESIZE
        # one memory file: the slots, then one byte per slot (1: a batch lives in the slot)
        self._fd = os.memfd_create("dlbench-batch-ring", os.MFD_CLOEXEC)
        weakref.finalize(self, os.close, self._fd)
        os.ftruncate(self._fd, workers * slots * (self.slot_bytes + 1))
        self._map_slots()
        self.token = (os.getpid(), next(_ring_tokens))  # token[0]: the process that owns the slots' states
        _RINGS[self.token] = self

    def _map_slots(self) -> None:
        n = self.workers * self.slots
        whole = mmap.mmap(self._fd, n * (self.slot_bytes + 1))  # MAP_SHARED
        self._mem = memoryview(whole)[: n * self.slot_bytes]
        self._busy = np.frombuffer(whole, dtype=np.uint8, count=n, offset=n * self.slot_bytes)

    def __reduce__(self):
        if multiprocessing.context.get_spawning_popen() is None:
            return _unpickle_ring, ()  # not a worker starting: sending a descriptor now would need a helper thread
        # a spawned or fork-server worker starting: the process starter hands it a duplicate of the descriptor
        fd = multiprocessing.reduction.DupFd(self._fd)
        return _unpickle_ring, (self.workers, self.slots, self.slot_bytes, self.token, fd)

    def take(self, nbytes: int) -> tuple[int, torch.Tensor] | None:
        """In a worker: a free slot of that worker for `nbytes`, as (index, uint8 tensor viewing it); else None."""
        info = torch.utils.data.get_worker_info()
        if self._mem is None or info is None or info.id >= self.workers or nbytes > self.slot_bytes:
            return None
        base = info.id * self.slots
        free = np.flatnonzero(self._busy[base : base + self.slots] == 0)
        if not len(free):
            return None
        index = base + int(free[0])
        self._busy[index] = 1
        return index, torch.frombuffer(self._mem, dtype=torch.uint8, count=nbytes, offset=index * self.slot_bytes)

    def open(self, ref: RingSlot) -> torch.Tensor:
        """In the main process: the slot's bytes as a uint8 tensor; the slot is released when no view of it is left."""
        self._sweep()
        owner = np.frombuffer(self._mem, dtype=np.uint8, count=ref.nbytes, offset=ref.index * self.slot_bytes)
        weakref.finalize(owner, self.release, ref.index)  # the tensor's storage holds `owner` until its last view dies
        return torch.from_numpy(owner)

    def release(self, index: int) -> None:
        # only the main process frees slots: a forked child that inherited (and now collects) a batch or RingSlot
        # of the main process must not free a slot the main process still uses
        if self._busy is None or os.getpid() != self.token[0]:
            return
        if not getattr(self, "_pinned", False):
            self._busy[index] = 0
            return
        # a pinned slot may still feed a non_blocking copy to the GPU: free it once the work queued so far is done
        event = torch.cuda.Event()
        event.record()
        self._in_flight.append((index, event))
        self._sweep()

    def _sweep(self) -> None:
        """Free the pinned slots whose copies have finished."""
        waiting = []
        for index, event in getattr(self, "_in_flight", ()):
            if event.query():
                self._busy[index] = 0
            else:
                waiting.append((index, event))
        self._in_flight = waiting

    def pin(self) -> None:
        """Register the slots with CUDA (page-locked, as pin_memory's copies are), so that copies from them to the GPU
        are asynchronous DMA and batches need no extra copy into pinned memory. Main process, before workers start.
        A released slot is reused only after the GPU work queued on the current stream by then has finished."""
        if self._mem is None or getattr(self, "_pinned", False):
            return
        slots = torch.frombuffer(self._mem, dtype=torch.uint8)
        cudart = torch.cuda.cudart()
        err = cudart.cudaHostRegister(slots.data_ptr(), slots.numel(), 0)
        if int(err) != 0:
            raise RuntimeError(f"cudaHostRegister of the batch ring failed ({err})")
        self._pinned, self._in_flight = True, []
        weakref.finalize(self, cudart.cudaHostUnregister, slots.data_ptr())

    def busy(self) -> int:
        """Slots now holding a batch (for tests and diagnostics)."""
        return int(self._busy.sum()) if self._busy is not None else 0


def _unpickle_ring(
    workers: int = 0, slots: int = 0, slot_bytes: int = 0, token: tuple | None = None, fd=None
) -> BatchRing:
    """A worker's view of the main process's ring (its memory file's descriptor `fd`); without one, a slotless
    ring."""
    ring = BatchRing.__new__(BatchRing)
    ring.workers, ring.slots, ring.slot_bytes, ring.token = workers, slots, slot_bytes, token
    ring._mem = ring._busy = None
    if fd is not None:
        ring._fd = fd.detach()
        weakref.finalize(ring, os.close, ring._fd)
        ring._map_slots()
    return ring


_ring_tokens = itertools.count()
_RINGS: weakref.WeakValueDictionary[tuple, BatchRing] = weakref.WeakValueDictionary()


class RingSlot:
    """Where a batch's large fields are: ring slot `index`, field -> (offset, dtype, shape). Sent instead of them."""

    __slots__ = ("token", "index", "nbytes", "fields", "_unopened")

    def __init__(self, token, index, nbytes, fields):
        self.token, self.index, self.nbytes, self.fields, self._unopened = token, index, nbytes, fields, False

    def __getstate__(self):
        return (self.token, self.index, self.nbytes, self.fields)

    def __setstate__(self, state):
        self.token, self.index, self.nbytes, self.fields = state
        self._unopened = True  # received by the main process: it owns the slot until opened or dropped

    def open(self) -> dict[str, torch.Tensor]:
        ring = _RINGS[self.token]
        self._unopened = False
        block = ring.open(self)
        return {key: _field_view(block, *field) for key, field in self.fields.items()}

    def __del__(self):
        try:
            ring = _RINGS.get(self.token) if self._unopened else None
        except (AttributeError, TypeError):  # interpreter shutdown: the module's globals are gone
            return
        if ring is not None:
            ring.release(self.index)


def _channels_last(t: torch.Tensor | FrameGather) -> bool:
    return is_channels_last(t.source if isinstance(t, FrameGather) else t)


def _field_view(block: torch.Tensor, off: int, dtype: torch.dtype, shape: tuple, channels_last: bool) -> torch.Tensor:
    """A stacked field inside `block`: `shape` is its memory order; channels-last fields are viewed as
    (..., C, H, W)."""
    t = block[off : off + int(np.prod(shape)) * dtype.itemsize].view(dtype).view(shape)
    return t.movedim(-1, -3) if channels_last else t


def _stack_into_one_block(fields: dict[str, list[torch.Tensor]], ring: BatchRing | None) -> dict:
    """torch.stack of each field's values, all outputs views of one block: a ring slot if one is free (the result
    is then {"_ring": RingSlot}), else shared memory inside a worker, plain memory outside.

    Frames keep the memory order they were decoded in: stacked as (B, ..., H, W, C) and returned as a (B, ..., C, H,
    W) view, as torchcodec returns them. Stacking them into (C, H, W) memory would transpose every pixel (at 480x640
    that costs several times more than the plain copy)."""
    layout, nbytes = {}, 0
    for key, values in fields.items():
        last, shape = _channels_last(values[0]), tuple(values[0].shape)
        layout[key] = (
            nbytes,
            values[0].dtype,
            (len(values), *shape[:-3], *shape[-2:], shape[-3]) if last else (len(values), *shape),
            last,
        )
        nbytes += -(-len(values) * int(np.prod(shape)) * values[0].dtype.itemsize // _ALIGN) * _ALIGN
    slot = ring.take(nbytes) if ring is not None else None
    if slot is not None:
        block = slot[1]
    elif torch.utils.data.get_worker_info() is not None:  # as default_collate: allocate straight in shared memory
        block = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(nbytes))
    else:
        block = torch.empty(nbytes, dtype=torch.uint8)
    out = {}
    for key, field in layout.items():
        out[key] = _field_view(block, *field)
        values = fields[key]
        if any(isinstance(v, FrameGather) for v in values):  # each item's frames copied once, into the batch
            memory = _field_view(block, *field[:3], False)  # (B, frames, ...) in memory order
            rows = memory.view(len(values), memory.shape[1], -1).unbind(0)  # per item: one row per frame
            for v, dst, dst_rows in zip(values, out[key], rows):
                if not isinstance(v, FrameGather):
                    dst.copy_(v)
                elif not v.gather_rows(dst_rows, field[3]):
                    v.gather_into(dst)
        elif field[3]:  # stack into the (..., H, W, C) memory
            torch.stack([v.movedim(-3, -1) for v in values], out=out[key].movedim(-3, -1))
        else:
            torch.stack(values, out=out[key])
    if slot is None:
        return out
    return {RING_KEY: RingSlot(ring.token, slot[0], nbytes, layout)}


def collate(items: list[dict], ring: BatchRing | None = None) -> dict:
    """Batch item dicts: large tensors stacked into one block (a slot of `ring` when given and free), small ones
    and numbers as numpy arrays, strings as lists (as torch's default collate)."""
    out, large = {}, {}
    for key, first in items[0].items():
        values = [item[key] for item in items]
        if isinstance(first, (torch.Tensor, FrameGather)):
            small, on_cpu = first.numel() * len(items) < SMALL_NUMEL, first.device.type == "cpu"
            frames = isinstance(first, FrameGather) or first.dim() >= 3  # a field that may hold FrameGathers
            if frames and (small or not on_cpu) and any(isinstance(v, FrameGather) for v in values):
                values = [v.materialize() if isinstance(v, FrameGather) else v for v in values]
            if not on_cpu:  # frames decoded on the GPU: stacked there
                out[key] = torch.utils.data.default_collate(values)
            elif small:
                out[key] = torch.stack(values).numpy()  # one call: ~4x faster than np.stack of 16 .numpy() views
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
        out.update(_stack_into_one_block(large, ring))
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


def decodes_on_gpu(dataset) -> bool:
    """True for a dataset whose frames come out of the GPU's decoder (its `decode_device` is not "cpu")."""
    return getattr(dataset, "decode_device", "cpu") != "cpu"


def make_ring(dataset, batch_size: int | None, num_workers: int, prefetch_factor: int | None) -> BatchRing | None:
    """A `BatchRing` for a DataLoader's workers, sized from the dataset's `frame_bytes_per_item`; None where one
    cannot help (no workers, no batching, frames decoded on the GPU, a dataset that does not say its frame size)."""
    item_bytes = getattr(dataset, "frame_bytes_per_item", None)
    if num_workers <= 0 or not batch_size or not item_bytes or decodes_on_gpu(dataset):
        return None
    # a worker has prefetch_factor batches in flight, plus the one the consumer holds. (Once another worker's shard
    # has ended torch lets it run up to prefetch_factor x num_workers ahead; those few batches take the fallback
    # rather than every worker reserving that much memory.)
    slots = (prefetch_factor or 2) + 1
    return BatchRing(num_workers, slots, batch_size * item_bytes + 16 * _ALIGN)


_collating_worker = False  # True in a DataLoader worker whose batches `collate` makes


def collating_worker() -> bool:
    """True in a DataLoader worker whose batches `collate` makes: its datasets may hand it `FrameGather`s."""
    return _collating_worker


class CollateWorkerInit:
    """The worker_init_fn of a DataLoader batched by `collate` (then the user's own, if any): it marks the worker
    as one whose items `collate` batches, so windows of frames reach it uncopied (`collating_worker`)."""

    def __init__(self, user_fn=None):
        self.user_fn = user_fn

    def __call__(self, worker_id: int) -> None:
        global _collating_worker
        _collating_worker = True
        if self.user_fn is not None:
            self.user_fn(worker_id)


class _RingCollate:
    """`collate` with the loader's current ring (the one the worker received as it started)."""

    def __init__(self):
        self.ring: BatchRing | None = None

    def __call__(self, items):
        return collate(items, self.ring)


class DataLoader(torch.utils.data.DataLoader):
    """torch's DataLoader with `collate` as the default collate_fn and its batches converted back by `to_torch`.

    Use it like torch's; the batches hold tensors only (and lists of strings), as with the default collate. With a
    dlbench dataset decoding on the CPU, batches travel through a `BatchRing`.

    Unless a multiprocessing context is given, workers start as `dlbench.workers.start_method` says when they
    start: forked where that is safe, else from the fork server; spawned for a dataset that decodes on the GPU
    (`decode_device` "cuda"; CUDA cannot start in a forked process). Such a dataset also gets no pin_memory: its
    frames are already in GPU memory, and torch cannot pin them. With `pin_memory=True` the ring's slots are
    registered with CUDA, so frames arrive in pinned memory without the copy torch's pin thread would make.
    """

    def __init__(self, dataset, *args, collate_fn=None, **kwargs):
        super().__init__(dataset, *args, collate_fn=collate_fn or _RingCollate(), **kwargs)
        if collate_fn is None and self.batch_sampler is not None:
            self.worker_init_fn = CollateWorkerInit(self.worker_init_fn)
        self._gpu = decodes_on_gpu(dataset)
        self._pick_start_method = self.num_workers > 0 and self.multiprocessing_context is None
        if self._gpu:
            self.pin_memory = False
            if self._pick_start_method:
                self.multiprocessing_context = "spawn"

    def __iter__(self):
        if self._pick_start_method and (self._iterator is None or not self.persistent_workers):
            self.multiprocessing_context = start_method(cuda=self._gpu)  # workers start in super().__iter__()
        if isinstance(self.collate_fn, _RingCollate) and (self.collate_fn.ring is None or not self.persistent_workers):
            # workers fork in super().__iter__() and keep the ring they saw; new workers get a new ring, so slots
            # left busy by batches of a shut-down iteration never reach them
            self.collate_fn.ring = make_ring(self.dataset, self.batch_size, self.num_workers, self.prefetch_factor)
            if self.collate_fn.ring is not None and self.pin_memory and torch.cuda.is_available():
                self.collate_fn.ring.pin()  # torch's pin thread passes ring slots through: they are pinned already
        ring = self.collate_fn.ring if isinstance(self.collate_fn, _RingCollate) else None  # alive while we yield
        for batch in super().__iter__():
            yield to_torch(batch)
        del ring
