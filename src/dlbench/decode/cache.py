"""Video decoding: a bounded cache of torchcodec decoders, with counters, on the CPU or on NVDEC.

Times are in seconds on the file's timeline (for v3.0: `from_timestamp + timestamp`). Frames are returned as
uint8 tensors (N, C, H, W) on the decode device. Every returned frame's presentation time is checked against
the request; a mismatch larger than `tolerance_s` raises `FrameTimestampError`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import torch

from ..errors import UserError, no_range_requests
from ..format.meta import TOLERANCE_S
from ..format.paths import is_remote, local_path
from .codecs import EXACT_SEEK_CODECS
from .source import ReadClock, SharedReads, TimedReads

# torchcodec's NVDEC implementation: "ffmpeg" (FFmpeg's NVDEC hardware decoding) or "beta" (torchcodec's own, on
# NVIDIA's Video Codec SDK; torchcodec's default from 0.14). "ffmpeg" is the default here because torchcodec
# 0.14.0's "beta" returned, for about 2 in 1000 frames of x264 files with B-frames, the frame 3 later under the
# requested frame's timestamp (measured on an H200: docs/gpu.md).
CUDA_BACKEND = os.environ.get("DLBENCH_CUDA_BACKEND", "ffmpeg")


def _cuda_backend():
    try:
        from torchcodec.decoders import set_cuda_backend
    except ImportError:  # torchcodec before 0.8 has one backend
        return contextlib.nullcontext()
    return set_cuda_backend(CUDA_BACKEND)


class FrameTimestampError(UserError):
    """A decoded frame's presentation time is not the requested one."""


def is_channels_last(frames: torch.Tensor) -> bool:
    """True for a (..., C, H, W) view of (..., H, W, C) memory, which is how torchcodec returns frames."""
    return frames.dim() >= 3 and not frames.is_contiguous() and frames.movedim(-3, -1).is_contiguous()


class FrameGather:
    """The frames `source[index]`, not yet copied out: a window with repeated frames, waiting for its batch.

    `decode(..., gather=False)` returns one when the requested frames are not simply the decoded ones in order;
    dlbench's `collate` copies them straight into the batch (one copy per frame instead of a gather and then a
    stack). Indexing with an int gives that frame as a view (no copy); with a slice, a smaller `FrameGather`.
    `materialize()` is the plain tensor `decode` would have returned.
    """

    __slots__ = ("source", "index", "_rows")

    def __init__(self, source: torch.Tensor, index: torch.Tensor, rows: tuple | None = None):
        self.source, self.index = source, index
        self._rows = rows  # see `rows`: shared by the FrameGathers of one source

    @property
    def rows(self) -> tuple[torch.Tensor | None, bool]:
        """(the source's frames as a (N, bytes) view, one row per frame in memory order, or None where the source
        is not contiguous; whether that order is channels-last)."""
        if self._rows is None:
            last = is_channels_last(self.source)
            src = self.source.permute(0, 2, 3, 1) if last else self.source
            self._rows = (src.reshape(len(src), -1) if src.is_contiguous() else None, last)
        return self._rows

    @property
    def shape(self) -> torch.Size:
        return torch.Size((len(self.index), *self.source.shape[1:]))

    @property
    def dtype(self) -> torch.dtype:
        return self.source.dtype

    @property
    def device(self) -> torch.device:
        return self.source.device

    def __len__(self) -> int:
        return len(self.index)

    def numel(self) -> int:
        return len(self.index) * self.source[0].numel()

    def __getitem__(self, key):
        if isinstance(key, slice):
            return FrameGather(self.source, self.index[key], self._rows)
        return self.source[int(self.index[key])]

    def unbind(self, dim: int = 0) -> tuple[torch.Tensor, ...]:
        """Each frame as a view of the source, as `Tensor.unbind(0)`."""
        assert dim == 0
        return tuple(self.source[i] for i in self.index.tolist())

    def materialize(self) -> torch.Tensor:
        """The frames as a tensor of their own, in the source's memory order."""
        n, (c, h, w) = len(self.index), self.source.shape[1:]
        like = dict(dtype=self.source.dtype, device=self.source.device)
        out = (
            torch.empty((n, h, w, c), **like).permute(0, 3, 1, 2)
            if is_channels_last(self.source)
            else torch.empty((n, c, h, w), **like)
        )
        self.gather_into(out)
        return out

    def gather_into(self, out: torch.Tensor) -> None:
        """Copy the frames into `out` (N, C, H, W), each frame as one run of bytes where both have the same memory
        order. (`index_select` on the (N, C, H, W) view of (N, H, W, C) memory walks it element by element: ~6x
        slower at 480x640, and advanced indexing slower still.)"""
        last = is_channels_last(out)
        dst = out.permute(0, 2, 3, 1) if last else out
        if not dst.is_contiguous() or not self.gather_rows(dst.view(len(dst), -1), last):
            out.copy_(torch.index_select(self.source, 0, self.index))

    def gather_rows(self, out: torch.Tensor, channels_last: bool) -> bool:
        """Copy the frames into `out`, (N, bytes) rows of memory holding frames channels-last or not; False (and
        nothing copied) where the source's frames are not rows of that memory order."""
        rows, last = self.rows
        if rows is None or last != channels_last:
            return False
        if rows.device.type == "cpu":
            # numpy's take copies row by row in this thread; torch's index_select splits small copies over its
            # intra-op threads, which outside a DataLoader worker (num_workers 0) waits on busy cores: 5x slower
            # there on 2 cores
            np.take(rows.numpy(), self.index.numpy(), axis=0, out=out.numpy())
        else:
            torch.index_select(rows, 0, self.index, out=out)
        return True


def split_runs(frames: torch.Tensor | FrameGather, n: int) -> list | tuple:
    """`frames` (n runs of equal length, one after another) as n runs: views of a tensor, or `FrameGather`s."""
    if isinstance(frames, FrameGather):
        rows = frames.rows
        return [FrameGather(frames.source, index, rows) for index in frames.index.view(n, -1).unbind(0)]
    return frames.unflatten(0, (n, -1)).unbind(0)


# What an open CPU decoder holds, measured as PSS growth per decoder after 24 frames each (2 cores, 2026-11-25):
# 32x32 H.264, 4,200-frame file: 2.5 MB; 32x32, 210,000 frames: 6.3 MB; 640x480 AV1 (dav1d), 1,881 frames: 10.5 MB.
DECODER_BASE_BYTES = 2 * 2**20  # demuxer, codec context, FFmpeg's buffers
DECODER_PICTURES = 20  # decoded pictures (YUV 4:2:0) a decoder keeps: references, threads' frames, the output
INDEX_BYTES_PER_FRAME = 24  # the demuxer's index entry per frame of the file


def decoder_bytes(width: int, height: int, num_frames: int | None) -> int:
    """The estimated memory (bytes) of one open CPU decoder of a `width` x `height` video of `num_frames` frames."""
    return DECODER_BASE_BYTES + DECODER_PICTURES * width * height * 3 // 2 + INDEX_BYTES_PER_FRAME * (num_frames or 0)


def _trim_heap() -> None:
    """Hand the C heap's free memory back to the kernel (glibc's malloc_trim; nothing elsewhere). A closed decoder's
    memory otherwise stays with the process: 200 decoders opened and closed in turn, 2 open at a time, left PSS
    94 MB higher, 2 MB after a trim, which takes about 0.6 ms."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim = None


class _Entry:
    __slots__ = ("decoder", "handle", "source", "fps", "num_frames", "fell_back", "on_cpu", "bytes", "recent")

    def __init__(self, decoder, handle, fps, num_frames, nbytes: int = 0, source=None):
        self.decoder, self.handle, self.fps, self.num_frames = decoder, handle, fps, num_frames
        self.source = source  # the file object the decoder reads (`wrap`'s), None for local paths
        self.fell_back: bool | None = None  # known after the first decode on a GPU
        self.on_cpu = False  # a GPU cache's decoder that dlbench itself moved to the CPU (see `decode`)
        self.bytes = nbytes  # `decoder_bytes`: what it counts against the cache's `max_bytes`
        # a sequential reader's last request: (frame indices, their frames, their pts), reused by the next one
        self.recent: tuple[np.ndarray, torch.Tensor, np.ndarray] | None = None


def _frames(batch, device) -> tuple[torch.Tensor | None, np.ndarray]:
    """A torchcodec batch's frames (moved to `device` where given) and pts; (None, empty) for no batch."""
    if batch is None:
        return None, np.empty(0)
    data = batch.data.to(device) if device is not None else batch.data
    return data, batch.pts_seconds.cpu().numpy().astype(np.float64)


def _merged(unique: np.ndarray, kept: np.ndarray, recent: tuple, data, pts: np.ndarray):
    """Frames `unique` (sorted indices) from two sources: those `kept` from the `recent` request, the rest decoded
    now (`data`, `pts`, in order)."""
    old_idx, old_data, old_pts = recent
    at = np.searchsorted(old_idx, unique[kept])
    shape = (len(unique), *old_data.shape[1:])
    layout = torch.channels_last if is_channels_last(old_data) else torch.contiguous_format  # as torchcodec's
    out = torch.empty(shape, dtype=old_data.dtype, device=old_data.device, memory_format=layout)
    out_pts = np.empty(len(unique))
    keep = torch.from_numpy(np.flatnonzero(kept))
    out[keep] = old_data[torch.from_numpy(at)]
    out_pts[kept] = old_pts[at]
    if data is not None:
        out[torch.from_numpy(np.flatnonzero(~kept))] = data
        out_pts[~kept] = pts
    return out, out_pts


class VideoDecoderCache:
    """A bounded LRU of open decoders keyed by file URL (and cursor), with hit/miss/eviction counters.

    A v3.0 video file holds many episodes one after another. A reader that interleaves several of them (the
    streaming loader's pool of live episodes) gives each its own `cursor`: one decoder per (file, cursor), so each
    decoder moves forward through its own episode instead of seeking back to a keyframe every time the reader
    switches episodes. Random access (the map-style loader) uses one decoder per file.

    Args:
        capacity: open decoders kept (each holds a demuxer and a codec context); for remote files, also the most
            blocks of their bytes kept (`source.SharedReads`, shared by the decoders of one file).
        device: "cpu" or "cuda" (NVDEC through torchcodec). A codec NVDEC cannot decode falls back to the CPU;
            `fallbacks` counts the files where that happened.
        seek_mode: torchcodec seek mode; "approximate" opens long files without scanning them.
        num_ffmpeg_threads: FFmpeg threads per CPU decoder (1 suits DataLoader workers).
        block_size: read size in bytes for remote files (aligned byte-range reads): large for sequential reading,
            small for random access (a random frame then costs one small read, not one block).
        max_bytes: the most memory (bytes) the open decoders may hold, by `decoder_bytes` (host memory; an NVDEC
            decoder's GPU memory is not counted); least recently used decoders are closed to stay under it, down to
            one. None: `capacity` alone bounds the cache.
        wrap: for remote files, `wrap(url, block_file, clock)` gives the file object the decoder reads (the loaders'
            fetchers' `file`: a `decode.source.SourceFile`); None: the `source.SharedFile` itself. Where a decode
            fails, a file object with `read_on()` is asked whether it cut reads short, and then decoded again.

    One cache belongs to one process; DataLoader workers each build their own (see the loaders).
    """

    def __init__(
        self,
        capacity: int = 16,
        device: str = "cpu",
        seek_mode: str = "approximate",
        num_ffmpeg_threads: int = 1,
        block_size: int = 4 * 1024 * 1024,
        max_bytes: int | None = None,
        wrap=None,
    ):
        if capacity < 1:
            raise UserError(f"decoder cache capacity must be >= 1 (got {capacity})")
        if device not in ("cpu", "cuda") and not str(device).startswith("cuda:"):
            raise UserError(f"decode device {device!r} is unknown; use 'cpu' or 'cuda'")
        if device != "cpu" and CUDA_BACKEND not in ("ffmpeg", "beta"):
            raise UserError(f"DLBENCH_CUDA_BACKEND={CUDA_BACKEND!r} is unknown; use 'ffmpeg' (the default) or 'beta'")
        self.capacity, self.device, self.seek_mode = capacity, device, seek_mode
        self.num_ffmpeg_threads, self.block_size, self.max_bytes = num_ffmpeg_threads, block_size, max_bytes
        self.wrap = wrap
        self.reads = ReadClock()  # the decoders' waits on remote bytes (seconds), which the harness reads
        # remote files' bytes, shared by this cache's decoders: at most what one block per open decoder held before
        self.shared = SharedReads(block_size, capacity * block_size)
        self.bytes = 0  # estimated memory of the open decoders (`decoder_bytes`)
        # a cursor keeps its last request's frames for the next (shared frames decode once); a reader whose next
        # request is elsewhere in the file (a stream in random order) turns it off: they would be held for nothing
        self.keep_recent = True
        self._entries: OrderedDict[tuple[str, int | None], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = self.evictions = self.fallbacks = 0

    def _open(self, url: str, device: str | None = None) -> _Entry:

        device = device or self.device
        handle = None
        try:
            if is_remote(url):
                handle = self.shared.open(url)
                source = TimedReads(handle, self.reads) if self.wrap is None else self.wrap(url, handle, self.reads)
            else:
                source = local_path(url)
            decoder = self._decoder(source, device, self.seek_mode)
            if self.seek_mode == "approximate" and decoder.metadata.codec in EXACT_SEEK_CODECS:
                if handle is not None:
                    handle.seek(0)
                decoder = self._decoder(source, device, "exact")
        except FileNotFoundError:
            raise UserError(f"{url}: video file not found") from None
        except (RuntimeError, ValueError) as e:
            if handle is not None:
                handle.close()
            raise no_range_requests(url, e) or UserError(
                f"{url}: cannot open video ({str(e).splitlines()[0]}); the file may be corrupt"
            ) from None
        md = decoder.metadata
        fps = md.average_fps
        num_frames = md.num_frames if md.num_frames is not None else md.num_frames_from_header
        nbytes = decoder_bytes(md.width or 0, md.height or 0, num_frames)
        return _Entry(decoder, handle, fps, num_frames, nbytes, source if handle is not None else None)

    def _decoder(self, source, device: str, seek_mode: str):
        from torchcodec.decoders import VideoDecoder

        if device == "cpu":
            return VideoDecoder(source, seek_mode=seek_mode, device=device, num_ffmpeg_threads=self.num_ffmpeg_threads)
        with _cuda_backend():
            return VideoDecoder(source, seek_mode=seek_mode, device=device)

    def get(self, url: str, cursor: int | None = None) -> _Entry:
        key = (url, cursor)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry
            self.misses += 1
        entry = self._open(url)
        evicted = []
        with self._lock:
            self._entries[key] = entry
            self.bytes += entry.bytes
            while len(self._entries) > self.capacity or (
                self.max_bytes is not None and self.bytes > self.max_bytes and len(self._entries) > 1
            ):
                _, old = self._entries.popitem(last=False)
                self.bytes -= old.bytes
                self.evictions += 1
                evicted.append(old)
        for old in evicted:
            if old.handle is not None:
                old.handle.close()
        if evicted and self.max_bytes is not None:
            del evicted, old  # the decoders go now, so that their memory can be handed back
            _trim_heap()
        return entry

    def decode(
        self,
        url: str,
        times_s: Sequence[float],
        fps: float,
        tolerance_s: float = TOLERANCE_S,
        cursor: int | None = None,
        gather: bool = True,
    ) -> torch.Tensor | FrameGather:
        """Frames at `times_s` (seconds in the file), in request order, as uint8 (N, C, H, W).

        `cursor` names a sequential reader of the file (for example an episode): see the class docstring. With
        `gather=False`, requests that are not the decoded frames in order (repeats, or windows out of order) come
        back as a `FrameGather` over the decoded frames instead of a copy.

        Times are mapped to frame indices with the dataset's `fps` (round(t * fps)); requests are decoded sorted
        and de-duplicated, so a window costs one forward pass per GOP. A sequential reader (`cursor`) gets the
        frames its previous request decoded without decoding them again: the streaming loader's blocks of rows a
        window apart share all but one frame with the block before (`loader.partition.episode_blocks`), and on long
        GOPs each decoded frame costs a seek. Raises `FrameTimestampError` if a frame's pts differs from its request
        by more than `tolerance_s`, and `UserError` for a time beyond the file.
        """
        entry = self.get(url, cursor)
        requested = np.asarray(times_s, dtype=np.float64)
        indices = np.rint(requested * fps).astype(np.int64)  # half to even, as Python's round()
        in_order = bool(np.all(indices[1:] > indices[:-1]))  # the common case: no repeats, already sorted
        unique = indices if in_order else np.unique(indices)
        if entry.num_frames is not None and (unique[0] < 0 or unique[-1] >= entry.num_frames):
            raise UserError(
                f"{url}: frame at {requested.max():.4f} s is outside the video ({entry.num_frames} "
                f"frames); the dataset's metadata does not match its videos"
            )
        recent = entry.recent if cursor is not None else None
        kept = np.isin(unique, recent[0]) if recent is not None else None
        wanted = unique if kept is None or not kept.any() else unique[~kept]
        try:
            try:
                batch = entry.decoder.get_frames_at(torch.from_numpy(wanted)) if len(wanted) else None
            except RuntimeError:
                read_on = getattr(entry.source, "read_on", None)  # a fetcher's file object has one (see `wrap`)
                if read_on is not None and read_on():
                    # the file object ended the stream where its plan of the batch did and the decoder wanted more:
                    # decode the file again from a fresh decoder that reads on past the plan
                    self._reopen(entry, url, "cpu" if entry.on_cpu else self.device)
                elif self.device == "cpu" or entry.fell_back is not None:
                    raise
                else:
                    # FFmpeg's NVDEC path raises, instead of falling back, on a codec this GPU cannot decode (AV1
                    # on an H200: "Could not push packet to decoder"): decode the file on the CPU from now on
                    self._reopen(entry, url, "cpu")
                    entry.on_cpu = entry.fell_back = True
                    self.fallbacks += 1
                batch = entry.decoder.get_frames_at(torch.from_numpy(wanted))
        except (RuntimeError, IndexError) as e:
            raise UserError(f"{url}: decoding failed ({str(e).splitlines()[0]}); the file may be corrupt") from None
        if entry.fell_back is None and self.device != "cpu":
            entry.fell_back = bool(entry.decoder.cpu_fallback)
            self.fallbacks += entry.fell_back
        data, pts = _frames(batch, self.device if entry.on_cpu else None)
        if len(wanted) < len(unique):  # the previous request's frames, with the new ones, in `unique` order
            data, pts = _merged(unique, kept, recent, data, pts)
        if cursor is not None and self.keep_recent:
            entry.recent = (unique, data, pts)
        if not in_order:
            order = np.searchsorted(unique, indices)
            pts = pts[order]
        err = np.abs(pts - requested)
        k = int(err.argmax())
        if err[k] > tolerance_s:
            raise FrameTimestampError(
                f"{url}: asked for the frame at {requested[k]:.6f} s, got one at {pts[k]:.6f} s "
                f"(tolerance {tolerance_s} s); the video's timestamps do not match the dataset's metadata"
            )
        if in_order:
            return data
        frames = FrameGather(data, torch.from_numpy(order).to(data.device))
        return frames if not gather else frames.materialize()

    def _reopen(self, entry: _Entry, url: str, device: str) -> None:
        """A fresh decoder of `url` on `device` in place of the entry's."""
        fresh = self._open(url, device)
        if entry.handle is not None:
            entry.handle.close()
        entry.decoder, entry.handle, entry.source = fresh.decoder, fresh.handle, fresh.source

    def stats(self) -> dict:
        lookups = self.hits + self.misses
        return {
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "hit_rate": self.hits / lookups if lookups else 0.0,
            "size": len(self._entries),
            "bytes": self.bytes,
            "cpu_fallbacks": self.fallbacks,
        }

    def close(self) -> None:
        with self._lock:
            for e in self._entries.values():
                if e.handle is not None:
                    e.handle.close()
            self._entries.clear()
            self.bytes = 0
