"""Batches that name the batch after them: what a DataLoader worker is expected to be handed next.

A map-style dataset reading remote video fetches each batch's byte ranges before decoding it (`batch_fetch`); the
round trip (20 ms to nearby object storage) then waits in every batch. Told which batch comes next to the same
worker, the dataset starts that batch's fetches while it decodes this one. torch's DataLoader hands batches to its W
workers in turn (batch k to worker k mod W) with `in_order=True` (its default); with `in_order=False` it passes
over a worker that already holds `prefetch_factor` batches, and the turn shifts for good whenever batches take
uneven times (random frames do), so the guess misses often: `predictable` says when to guess. A miss costs only
bytes (the next batch's frames are fetched as before; the bytes fetched for nothing show in the read amplification).
"""

from __future__ import annotations

from collections import deque

from .items import FrameDataset


def predictable(num_workers: int, in_order: bool) -> bool:
    """Whether the batch each worker gets next is known as batches are handed out: one worker, or several taking
    turns (in_order). (in_order=False, 2 workers, realistic set from S3: 13% more bytes, no faster.)"""
    return num_workers == 1 or (num_workers > 1 and in_order)


def for_dataset(batches, dataset, num_workers: int, in_order: bool):
    """`batches` as `LookaheadBatches` where that pays: a dataset that fetches each batch before decoding it
    (`plans_batches`), with batches handed out in turn (`predictable`); else `batches` itself."""
    if isinstance(dataset, FrameDataset) and dataset.plans_batches and predictable(num_workers, in_order):
        return LookaheadBatches(batches, num_workers)
    return batches


class AheadBatch(list):
    """A batch's indices (a list, as a batch sampler yields), with `ahead`: the indices of the batch the same
    DataLoader worker is expected to get next, or None."""

    def __init__(self, indices, ahead: list[int] | None = None):
        super().__init__(indices)
        self.ahead = ahead


class LookaheadBatches:
    """A batch sampler: the batches of `batches` (any batch sampler) as `AheadBatch`es, for `num_workers` workers.
    Its length and order are those of `batches`; `set_epoch` reaches the sampler under it."""

    def __init__(self, batches, num_workers: int):
        self.batches, self.num_workers = batches, max(num_workers, 1)

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        window: deque[list[int]] = deque()
        for batch in self.batches:
            window.append(list(batch))
            if len(window) > self.num_workers:  # the batch `num_workers` later goes to the same worker
                first = window.popleft()
                yield AheadBatch(first, window[-1])
        while window:
            yield AheadBatch(window.popleft())

    @property
    def sampler(self):
        return getattr(self.batches, "sampler", None)

    def set_epoch(self, epoch: int) -> None:
        for inner in (self.batches, self.sampler):
            if hasattr(inner, "set_epoch"):
                inner.set_epoch(epoch)
                return
