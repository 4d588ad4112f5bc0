"""Shared-memory slots that DataLoader workers reuse for the large fields of their batches.

A `BatchRing` is one shared memory file, mapped once by every worker as it starts; each worker owns a few slots and
writes a batch's frames into a free one. The batch message then carries a small `RingSlot` saying where the frames
are, instead of a new shared-memory segment per tensor (see `dlbench.loader.collate`).
"""

from __future__ import annotations

import itertools
import math
import mmap
import multiprocessing.context
import multiprocessing.reduction
import os
import weakref

import numpy as np
import torch

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
        return {key: field_view(block, *field) for key, field in self.fields.items()}

    def __del__(self):
        try:
            ring = _RINGS.get(self.token) if self._unopened else None
        except (AttributeError, TypeError):  # interpreter shutdown: the module's globals are gone
            return
        if ring is not None:
            ring.release(self.index)


def field_view(block: torch.Tensor, off: int, dtype: torch.dtype, shape: tuple, channels_last: bool) -> torch.Tensor:
    """A stacked field inside `block`: `shape` is its memory order; channels-last fields are viewed as
    (..., C, H, W)."""
    t = block[off : off + math.prod(shape) * dtype.itemsize].view(dtype).view(shape)
    return t.movedim(-1, -3) if channels_last else t
