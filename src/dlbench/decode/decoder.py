"""Decoding in a worker: the decoder cache and the fetchers that feed it, made in the process that decodes.

A dataset is built in the main process and copied into each DataLoader worker (forked, or pickled where workers are
spawned). Open decoders, spill files and fetch threads must not cross that line, so a `FrameDecoder` holds settings
until its `cache` is first used in a process and makes its own there: the `VideoDecoderCache` and, for a remote
dataset, the fetcher its decoders read through (`fetch.EpisodeFetcher`: the streaming loader's groups of episodes;
`batch_fetch.BatchFetcher`: the map-style loader's batches). A pickled copy carries the settings only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from ..format import paths
from ..loader.dataset_meta import DatasetMeta
from ..workers import keep_freed_blocks
from .batch_fetch import BatchFetcher
from .cache import FrameGather, VideoDecoderCache
from .fetch import EpisodeFetcher

# remote video read sizes: the streaming loader reads each episode forward (few large reads); a random frame needs
# one GOP: on 480x640 AV1 from the loopback Hub, 4 MB blocks read 3.9 GB per 1,000 random frames, 128 KB blocks 0.2 GB,
# in the same ~1,000 requests and at the same frames/s (docs/benchmarks.md)
SEQUENTIAL_BLOCK, RANDOM_ACCESS_BLOCK = 4 * 2**20, 128 * 2**10
FETCH_FALLBACK_BLOCK = 256 * 2**10


class FrameDecoder:
    """Decodes a dataset's frames in the process that asks, through that process's decoder cache and fetcher.

    Args:
        dmeta: the dataset.
        decode_device: "cpu" or "cuda".
        cache_size: open decoders kept per process (`VideoDecoderCache`); may be changed until the cache is made.
        tolerance_s: how far (seconds) a decoded frame's timestamp may be from the requested one.
        decoder_cache_mb: the most memory (MB) the open decoders may hold; None: `cache_size` alone bounds them.
        block_size: read size (bytes) of remote video read as the decoders ask.
        fetch: fetch groups of episodes ahead of use (`EpisodeFetcher`); remote datasets only.
        spill_dir: where fetched episodes are spilled (None: TMPDIR).
        batch_reads: fetch a batch's frames together before decoding (`BatchFetcher`); remote datasets only, and
            not with `fetch`.
    """

    def __init__(
        self,
        dmeta: DatasetMeta,
        decode_device: str,
        cache_size: int,
        tolerance_s: float,
        *,
        decoder_cache_mb: float | None = None,
        block_size: int = SEQUENTIAL_BLOCK,
        fetch: bool = False,
        spill_dir: str | None = None,
        batch_reads: bool = False,
    ):
        self.dmeta = dmeta
        self.fetch, self.spill_dir = fetch and paths.is_remote(dmeta.data_root), spill_dir
        # remote video of a batch's frames fetched together before decoding (`BatchFetcher`); map-style only
        self.batch_reads = batch_reads and not self.fetch and paths.is_remote(dmeta.data_root)
        self.decode_device, self.cache_size, self.tolerance_s = decode_device, cache_size, tolerance_s
        self.decoder_cache_mb, self.block_size = decoder_cache_mb, block_size
        self._cache: VideoDecoderCache | None = None
        self.keep_recent = True  # each process's cache gets it (`VideoDecoderCache.keep_recent`)
        self._pid = None
        self._fetcher: EpisodeFetcher | None = None
        self._batch_fetcher: BatchFetcher | None = None

    def __getstate__(self) -> dict:
        # open decoders (and the cache's lock) stay in their process; a spawned worker builds its own cache
        return {**self.__dict__, "_cache": None, "_pid": None, "_fetcher": None, "_batch_fetcher": None}

    @property
    def cache(self) -> VideoDecoderCache:
        """This process's decoder cache, made (with its fetcher) on first use in each process."""
        if self._cache is None or self._pid != os.getpid():  # one cache per process: never share decoders across fork
            if torch.utils.data.get_worker_info() is not None:  # a DataLoader worker: its allocator is ours to tune
                keep_freed_blocks()
            budget = None if self.decoder_cache_mb is None else int(self.decoder_cache_mb * 2**20)
            if self._fetcher is not None:  # a forked child's copy: close the spill files it inherited
                self._fetcher.release_all()
            self._fetcher = EpisodeFetcher(self.dmeta, self.dmeta.cameras, self.spill_dir) if self.fetch else None
            self._batch_fetcher = BatchFetcher() if self.batch_reads else None
            fetcher = self._fetcher or self._batch_fetcher
            self._cache = VideoDecoderCache(
                self.cache_size,
                device=self.decode_device,
                # with episodes fetched, only what lies outside them is read as the decoder asks: a few packets
                block_size=FETCH_FALLBACK_BLOCK if self.fetch else self.block_size,
                max_bytes=budget,
                wrap=fetcher.file if fetcher else None,
            )
            self._cache.keep_recent = self.keep_recent
            self._pid = os.getpid()
        return self._cache

    @property
    def batch_fetcher(self) -> BatchFetcher | None:
        """This process's `BatchFetcher` (see `batch_reads`), or None where batches are not fetched ahead."""
        _ = self.cache  # made with the cache, in each process
        return self._batch_fetcher

    @property
    def fetcher(self) -> EpisodeFetcher | None:
        """This process's `EpisodeFetcher` (see `fetch`), or None when episodes are not fetched."""
        _ = self.cache  # made with the cache, in each process
        return self._fetcher

    def decode(
        self, url: str, times_s: Sequence[float], *, cursor: int | None = None, gather: bool = True
    ) -> torch.Tensor | FrameGather:
        """Frames of `url` at `times_s` (seconds in the file), as `VideoDecoderCache.decode` at the dataset's fps,
        within `tolerance_s`."""
        return self.cache.decode(url, times_s, self.dmeta.fps, self.tolerance_s, cursor=cursor, gather=gather)
