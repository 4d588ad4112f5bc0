"""`DataLoader`: torch's DataLoader batched by `collate` through a `BatchRing`, with a safe worker start method."""

from __future__ import annotations

import importlib

import torch

from ..workers import DECODER_MODULE, ParentSettings, start_method
from . import lookahead
from .collate import CollateWorkerInit, collate, to_torch
from .items import FrameDataset
from .ring import _ALIGN, BatchRing


def decodes_on_gpu(dataset) -> bool:
    """True for a dataset whose frames come out of the GPU's decoder (its `decode_device` is not "cpu")."""
    return isinstance(dataset, FrameDataset) and dataset.decode_device != "cpu"


def make_ring(dataset, batch_size: int | None, num_workers: int, prefetch_factor: int | None) -> BatchRing | None:
    """A `BatchRing` for a DataLoader's workers, sized from the dataset's `frame_bytes_per_item`; None where one
    cannot help (no workers, no batching, frames decoded on the GPU, a dataset that does not say its frame size)."""
    item_bytes = dataset.frame_bytes_per_item if isinstance(dataset, FrameDataset) else None
    if num_workers <= 0 or not batch_size or not item_bytes or decodes_on_gpu(dataset):
        return None
    # a worker has prefetch_factor batches in flight, plus the one the consumer holds. (Once another worker's shard
    # has ended torch lets it run up to prefetch_factor x num_workers ahead; those few batches take the fallback
    # rather than every worker reserving that much memory.)
    slots = (prefetch_factor or 2) + 1
    return BatchRing(num_workers, slots, batch_size * item_bytes + 16 * _ALIGN)


def float_frame_keys(dataset) -> frozenset:
    """The cameras whose frames `collate` turns into floats for `dataset` (its workers hand them over as uint8)."""
    return dataset.float_cameras() if isinstance(dataset, FrameDataset) else frozenset()


def import_decoder_before_fork(dataset, method: str) -> None:
    """Import torchcodec here before workers `fork` for a dlbench dataset: every worker of every epoch inherits it
    instead of importing it itself (it imports torch._dynamo, over a second of CPU per process)."""
    if method == "fork" and isinstance(dataset, FrameDataset):
        importlib.import_module(DECODER_MODULE)


class _RingCollate:
    """`collate` with the loader's current ring (the one the worker received as it started)."""

    def __init__(self, float_keys: frozenset = frozenset()):
        self.ring: BatchRing | None = None
        self.float_keys = float_keys

    def __call__(self, items):
        return collate(items, self.ring, self.float_keys)


class DataLoader(torch.utils.data.DataLoader):
    """torch's DataLoader with `collate` as the default collate_fn and its batches converted back by `to_torch`.

    Use it like torch's; the batches hold tensors only (and lists of strings), as with the default collate. With a
    dlbench dataset decoding on the CPU, batches travel through a `BatchRing`.

    Unless a multiprocessing context is given, workers start as `dlbench.workers.start_method` says when they
    start: forked where that is safe, else from the fork server; spawned for a dataset that decodes on the GPU
    (`decode_device` "cuda"; CUDA cannot start in a forked process). Such a dataset also gets no pin_memory: its
    frames are already in GPU memory, and torch cannot pin them. With `pin_memory=True` the ring's slots are
    registered with CUDA, so frames arrive in pinned memory without the copy torch's pin thread would make. A
    dataset that fetches each batch's remote video before decoding it (`plans_batches`) gets batches that name the
    one the same worker gets next (`lookahead`), so that worker fetches it while decoding (with one worker, or
    in_order=True: only then does torch hand out batches in a fixed turn); `lookahead=False` turns that off.

    Whatever the start method, workers get the environment and fsspec configuration this process has as they
    start (`dlbench.workers.ParentSettings`): S3 settings made after an earlier loader started the fork server
    still reach them.
    """

    def __init__(self, dataset, *args, collate_fn=None, lookahead: bool = True, **kwargs):
        float_keys = float_frame_keys(dataset)
        super().__init__(dataset, *args, collate_fn=collate_fn or _RingCollate(float_keys), **kwargs)
        self.lookahead = lookahead
        if hasattr(dataset, "use_workers"):  # a stream deals each episode's pieces to the workers that read it
            dataset.use_workers(self.num_workers)
        if collate_fn is None and self.batch_sampler is not None:
            self.worker_init_fn = CollateWorkerInit(self.worker_init_fn, float_keys)
        self._gpu = decodes_on_gpu(dataset)
        self._pick_start_method = self.num_workers > 0 and self.multiprocessing_context is None
        if self._gpu:
            self.pin_memory = False
            if self._pick_start_method:
                self.multiprocessing_context = "spawn"

    @property
    def _index_sampler(self):
        # torch's DataLoader takes its batches from here: for a dataset that fetches each batch's remote bytes
        # before decoding, each batch also names the one its worker gets next (`lookahead`)
        batches = super()._index_sampler
        if not self._auto_collation or not self.lookahead:
            return batches
        return lookahead.for_dataset(batches, self.dataset, self.num_workers, getattr(self, "in_order", True))

    def __iter__(self):
        starting = self.num_workers > 0 and (self._iterator is None or not self.persistent_workers)
        if starting:  # workers start in super().__iter__(), with this process's settings of now
            init = self.worker_init_fn
            self.worker_init_fn = ParentSettings(init.then if isinstance(init, ParentSettings) else init)
        if starting and self._pick_start_method:
            method = start_method(cuda=self._gpu)
            self.multiprocessing_context = method
            import_decoder_before_fork(self.dataset, method)
        if isinstance(self.collate_fn, _RingCollate) and (self.collate_fn.ring is None or not self.persistent_workers):
            # workers fork in super().__iter__() and keep the ring they saw; new workers get a new ring, so slots
            # left busy by batches of a shut-down iteration never reach them
            self.collate_fn.ring = make_ring(self.dataset, self.batch_size, self.num_workers, self.prefetch_factor)
            if self.collate_fn.ring is not None and self.pin_memory and torch.cuda.is_available():
                self.collate_fn.ring.pin()  # torch's pin thread passes ring slots through: they are pinned already
        # the workers start here, not at the first batch: the caller may start threads (never fork beside one)
        return _Batches(super().__iter__(), self.collate_fn.ring if isinstance(self.collate_fn, _RingCollate) else None)

    @property
    def start_method(self) -> str | None:
        """How this loader's workers started (fork, forkserver, spawn), once it has been iterated; None: no workers."""
        if self.num_workers == 0 or self.multiprocessing_context is None:
            return None
        return self.multiprocessing_context.get_start_method()


class _Batches:
    """A DataLoader's batches as `to_torch` makes them, holding the ring their slots are in while they are read."""

    def __init__(self, batches, ring: BatchRing | None):
        self.batches, self.ring = batches, ring

    def __iter__(self):
        return self

    def __next__(self):
        return to_torch(next(self.batches))

    def __len__(self) -> int:
        return len(self.batches)

    @property
    def worker_pids(self) -> list[int]:
        """The process ids of the DataLoader's workers (none without workers)."""
        return [w.pid for w in getattr(self.batches, "_workers", [])]
