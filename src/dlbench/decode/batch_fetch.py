"""Planned reads of remote video for map-style batches: the bytes a batch's frames need, fetched together.

Read as the decoders ask, a random frame of a remote video costs a request per read FFmpeg makes (its keyframe,
then each packet up to the frame, through fixed-size blocks that mostly fetch bytes no frame needs). A map-style
batch knows all its frames before decoding any, and a file's sample tables (its MP4 index) say where each frame's
packets are. So `BatchFetcher.prefetch` turns a batch's decode requests into byte ranges, one per frame from its
keyframe to its last packet, merges ranges of a file that (nearly) touch, and starts them all at once (plain HTTP:
one request each in flight on fsspec's I/O loop; s3fs: one `cat_ranges`; other filesystems: a small thread pool).
The decoders then read through `BatchFile` (a `source.SourceFile`): fetched bytes from memory (a range still in
flight is waited for, alone, so decoding starts as the first range arrives), the file's head and tail (ftyp, moov,
the first packets) from memory, anything else with an ordinary ranged read (counted in `fallback_reads`, which a
good plan keeps near zero).

A decoder reads a packet or more past the frame it returns before returning it (FFmpeg's libdav1d: the next one,
often the next GOP's keyframe, the largest packet there is). In a file whose frames are not reordered, the plan
ends at the frame's own packet and a read past it, in the sample data and outside what is held, gets the end of
the stream (`ended_reads`): the decoder drains and returns the frame, and the next frame's seek starts it again.
Should a decoder want more than the plan holds (a layout the plan misreads), the decode fails, and the file is
decoded again reading on (`read_on`) from then on.
Each range waits out a round trip (20 ms to nearby object storage) before its frames decode, so a batch that knows
the next one its process will build (`lookahead`) starts that one's ranges after its own: they arrive while this
batch decodes (`ranges_ahead`; `ranges_now` counts those started for the batch being built).
Fetched ranges stay in memory, up to `held_bytes` per process, least recently used dropped first, so a frame of a
GOP fetched for an earlier batch costs no request.

Random frames of a large dataset cost about one request each, so what a request costs the client counts. Through
s3fs a ranged GET took 1.9 ms of CPU (botocore's request machinery), through HfFileSystem 2.5 ms; a plain HTTP GET
of a presigned S3 URL 0.28 ms, of the Hub's resolve URL 0.5 ms (480x640 AV1, 80 KB ranges, loopback servers). So
where the filesystem can name a plain HTTP URL for a file (`direct_url`: S3 presigned, the Hub's resolve URL with
the token's headers), its ranges are fetched through fsspec's HTTP filesystem; a URL that fails is dropped and its
ranges fetched through the file's own filesystem.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor

import fsspec
import numpy as np

from .fetch import FileIndexes
from .source import NEXT_SAMPLES, REORDER_SAMPLES, ReadClock, SourceFile, read_range, whole

# FFmpeg's reader moves forward by reading, not seeking, when the next position is less than its buffer (torchcodec:
# 64 KB) plus its short-seek threshold (32 KB) ahead: ranges of a file closer than that are fetched as one
GAP_READ_THROUGH = 96 * 2**10
HELD_BYTES = 64 * 2**20  # fetched video kept per process (a few hundred random 480x640 AV1 frames' GOPs)
FETCH_THREADS = 8  # concurrent ranged reads on filesystems without an async implementation
DIRECT_URL_S = 3600  # how long a presigned URL is valid; one is made again after 90% of it


class _Held:
    """One file's fetched byte ranges: disjoint, sorted by start, each with the batch that last used it."""

    __slots__ = ("starts", "chunks", "used")

    def __init__(self):
        self.starts: list[int] = []
        self.chunks: list[bytes] = []
        self.used: list[int] = []

    def find(self, pos: int) -> int:
        """The position in the lists of the range holding byte `pos`, or -1."""
        i = bisect.bisect_right(self.starts, pos) - 1
        return i if i >= 0 and pos < self.starts[i] + len(self.chunks[i]) else -1

    def missing(self, lo: int, hi: int, stamp: int) -> list[tuple[int, int]]:
        """The parts of [lo, hi) not held; the held ranges it overlaps are marked used by batch `stamp`."""
        out, at = [], lo
        i = max(bisect.bisect_right(self.starts, lo) - 1, 0)
        while i < len(self.starts) and self.starts[i] < hi:
            start, end = self.starts[i], self.starts[i] + len(self.chunks[i])
            if end > at:
                if start > at:
                    out.append((at, start))
                self.used[i] = stamp
                at = max(at, end)
            i += 1
        if at < hi:
            out.append((at, hi))
        return out

    def add(self, lo: int, data: bytes, stamp: int) -> int:
        """Hold `data` at `lo`; held ranges inside it (a fetch merged across them) are dropped, so the ranges stay
        disjoint. Returns the bytes dropped."""
        i = bisect.bisect_left(self.starts, lo)
        j, dropped = i, 0
        while j < len(self.starts) and self.starts[j] + len(self.chunks[j]) <= lo + len(data):
            dropped += len(self.chunks[j])
            j += 1
        self.starts[i:j], self.chunks[i:j], self.used[i:j] = [lo], [data], [stamp]
        return dropped


def merge_ranges(ranges: list[tuple[int, int]], gap: int) -> list[tuple[int, int]]:
    """Sorted, disjoint ranges covering `ranges`, ranges closer than `gap` bytes joined."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + gap:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def subtract_ranges(ranges: list[tuple[int, int]], minus: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of sorted, disjoint `ranges` outside every range of `minus`."""
    out = []
    for lo, hi in ranges:
        parts = [(lo, hi)]
        for a, b in minus:
            parts = [piece for x, y in parts for piece in ((x, min(y, a)), (max(x, b), y)) if piece[0] < piece[1]]
        out += parts
    return out


class BatchFetcher:
    """Fetches the video bytes of a batch's frames before they are decoded, for one process; a
    `source.ByteSource`.

    Args:
        held_bytes: the most fetched bytes kept between batches (least recently used ranges dropped first; the
            current batch's ranges are never dropped while it decodes).
        gap: ranges of a file closer than this (bytes) are fetched as one.
    """

    def __init__(self, held_bytes: int = HELD_BYTES, gap: int = GAP_READ_THROUGH):
        self.held_bytes, self.gap = held_bytes, gap
        self.indexes = FileIndexes()
        self._held: dict[str, _Held] = {}
        self._bytes_held = 0
        self._stamp = 0
        self._pool: ThreadPoolExecutor | None = None
        self._pid = os.getpid()
        self.requests = self.bytes = 0  # planned fetches made, bytes they fetched
        self.fallback_reads = self.fallback_bytes = 0  # reads outside the plan (see `BatchFile`)
        self.ended_reads = 0  # reads past the plan answered with the end of the stream
        self.ranges_now = self.ranges_ahead = 0  # ranges started for the batch being built, for the next one
        self._read_on: set[str] = set()  # files whose reads past the plan are fetched, never ended
        self._fs: dict[str, tuple] = {}  # url -> (filesystem, path): resolving a URL costs more than a request
        self._direct: dict[str, tuple[str | None, dict, float]] = {}  # url -> (HTTP URL or None, headers, until)
        self._pending: dict[str, list[tuple[int, int, Future]]] = {}  # url -> ranges in flight: (lo, hi, bytes)

    def plan(self, requests: list[tuple[str, np.ndarray]], fps: float) -> dict[str, list[tuple[int, int]]]:
        """url -> the byte ranges not yet held that decoding `requests` ((video URL, seconds in the file) each)
        reads, merged; marks the held ranges it needs as used by this batch."""
        self._stamp += 1
        wanted: dict[str, list[np.ndarray]] = {}
        for url, times in requests:
            wanted.setdefault(url, []).append(np.rint(np.asarray(times, np.float64) * fps).astype(np.int64))
        plan = {}
        for url, frames in wanted.items():
            index = self.indexes.get(url)
            if index is None:  # a layout this reader does not know: the decoder's own reads fetch it
                continue
            after = 0 if self.ends(url) else NEXT_SAMPLES  # the packet after a frame: ended, or fetched
            lo, hi = index.frame_ranges(np.unique(np.concatenate(frames)), REORDER_SAMPLES, after)
            held = self._held.setdefault(url, _Held())
            missing = [
                part
                for a, b in merge_ranges(list(zip(lo.tolist(), hi.tolist())), self.gap)
                for part in held.missing(a, b, self._stamp)
            ]
            # what is in flight already (fetched ahead for this batch, or this batch's for the next) is not asked
            # again; taken out after merging, so no merged range spans one in flight
            flying = [(lo, hi) for lo, hi, _ in self._pending.get(url, ())]
            todo = subtract_ranges(merge_ranges(missing, self.gap), flying) if missing else []
            if todo:
                plan[url] = todo
        return plan

    def prefetch(
        self, requests: list[tuple[str, np.ndarray]], fps: float, ahead: list[tuple[str, np.ndarray]] | None = None
    ) -> None:
        """Start fetching what decoding `requests` ((video URL, seconds in the file) each) reads and is not held
        yet. Ranges with a plain HTTP URL are each in flight on fsspec's I/O loop when this returns: a read waits
        for its own range only, so decoding starts as the first range arrives. Other ranges are fetched here.

        `ahead`: the requests of the batch this process is expected to decode next (`loader.lookahead`). Its
        ranges with a plain HTTP URL are started too, after this batch's, so their round trip passes while this
        batch decodes; a wrong guess costs only the bytes (counted like the others)."""
        self.settle()  # what was in flight lands before this batch is planned against what is held
        self._start(self.plan(requests, fps), ahead=False)
        current = self._stamp
        if ahead:
            self._start(self.plan(ahead, fps), ahead=True)
        self._evict(keep=current)

    def _start(self, plan: dict[str, list[tuple[int, int]]], ahead: bool) -> None:
        """Put a plan's ranges with a plain HTTP URL in flight and fetch the others here; for the next batch
        (`ahead`), leave those others to it (fetching them here would wait out their round trip now)."""
        rest = []
        for url, ranges in plan.items():
            direct = self._direct_url(url)
            if direct is None:
                rest += [] if ahead else [(url, lo, hi) for lo, hi in ranges]
                continue
            http = fsspec.filesystem("http")
            for lo, hi in ranges:
                fetch = http._cat_file(direct[0], start=lo, end=hi, headers=direct[1])
                self._pending.setdefault(url, []).append((lo, hi, asyncio.run_coroutine_threadsafe(fetch, http.loop)))
            if ahead:
                self.ranges_ahead += len(ranges)
            else:
                self.ranges_now += len(ranges)
        self.ranges_now += len(rest)
        for job, data in zip(rest, self._fetch_through_fs(rest) if rest else []):
            self._take(job, data)

    def settle(self) -> None:
        """Wait for every range still in flight and hold it (a decoder's reads land the ranges they need)."""
        for url in list(self._pending):
            while self._pending.get(url):
                self._land(url, 0)

    def _land(self, url: str, k: int) -> None:
        """Hold the `k`th range in flight of `url` once it arrives; where its plain HTTP URL failed, the URL is
        dropped and the range fetched through the file's own filesystem instead."""
        lo, hi, future = self._pending[url].pop(k)
        try:
            data = future.result()
        except Exception as e:  # an HTTP error, an expired URL: the filesystem reads it instead
            data = e
        if isinstance(data, BaseException):
            self._direct[url] = (None, {}, math.inf)  # its own filesystem from now on
            data = self._fetch_through_fs([(url, lo, hi)])[0]
        self._take((url, lo, hi), data)

    def _take(self, job: tuple[str, int, int], data: bytes | BaseException) -> None:
        """Hold a fetched range (a failed one: the file is read as the decoder asks, which reports a lasting
        failure)."""
        url, lo, hi = job
        if isinstance(data, BaseException):
            self._read_on.add(url)
            return
        whole(url, lo, hi, data)
        self._bytes_held += len(data) - self._held.setdefault(url, _Held()).add(lo, data, self._stamp)
        self.requests += 1
        self.bytes += len(data)

    def _fetch_through_fs(self, jobs: list[tuple[str, int, int]]) -> list[bytes | BaseException]:
        fs, paths = self._resolve(jobs[0][0])[0], [self._resolve(url)[1] for url, _, _ in jobs]
        if getattr(fs, "async_impl", False) and all(self._resolve(url)[0] is fs for url, _, _ in jobs):
            # s3fs, HTTP: every range a coroutine on fsspec's I/O loop
            return fs.cat_ranges(paths, [lo for _, lo, _ in jobs], [hi for _, _, hi in jobs], on_error="return")
        if self._pool is None or self._pid != os.getpid():  # threads do not survive a fork
            self._pool, self._pid = ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="dlbench-batch"), os.getpid()
        return list(self._pool.map(lambda job: _read_or_error(*job), jobs))

    def _resolve(self, url: str) -> tuple:
        if url not in self._fs:
            self._fs[url] = fsspec.core.url_to_fs(url)
        return self._fs[url]

    def _direct_url(self, url: str) -> tuple[str, dict] | None:
        """The file's plain HTTP URL and headers (`direct_url`), made once and again before it expires."""
        known = self._direct.get(url)
        if known is None or time.monotonic() > known[2]:
            found = direct_url(*self._resolve(url))
            until = time.monotonic() + 0.9 * DIRECT_URL_S if found else math.inf
            known = self._direct[url] = (*found, until) if found else (None, {}, until)
        return None if known[0] is None else (known[0], known[1])

    def _evict(self, keep: int) -> None:
        """Drop least recently used ranges over `held_bytes`, never one used by batch `keep` or later."""
        if self._bytes_held <= self.held_bytes:
            return
        spans = sorted(
            (held.used[i], url, held.starts[i]) for url, held in self._held.items() for i in range(len(held.starts))
        )
        for stamp, url, start in spans:
            if self._bytes_held <= self.held_bytes or stamp >= keep:
                break
            held = self._held[url]
            i = bisect.bisect_left(held.starts, start)
            self._bytes_held -= len(held.chunks[i])
            del held.starts[i], held.chunks[i], held.used[i]

    def read(self, url: str, pos: int, n: int) -> bytes | None:
        """Up to n bytes at `pos` held in memory (never past the range holding `pos`); None where none is."""
        pinned = self.indexes.pinned(url, pos, n)
        if pinned is not None:
            return pinned
        held = self._held.get(url)
        i = held.find(pos) if held is not None else -1
        if i < 0:
            flying = [k for k, (lo, hi, _) in enumerate(self._pending.get(url, ())) if lo <= pos < hi]
            if not flying:
                return None
            self._land(url, flying[0])  # wait for this range alone
            return self.read(url, pos, n)
        at = pos - held.starts[i]
        return held.chunks[i][at : at + n]

    def ends(self, url: str, pos: int | None = None) -> bool:
        """Whether a read of `url` past the plan (at `pos`, where given) gets the end of the stream: the file's
        layout is known, its frames are not reordered, nothing failed on it, and `pos` is in its sample data."""
        index = self.indexes.peek(url)
        if index is None or index.reorders or url in self._read_on:
            return False
        return pos is None or len(index.head) <= pos < index.tail_at

    def read_on(self, url: str) -> None:
        """From now on, fetch reads of `url` past the plan instead of ending them (a decode wanted more)."""
        self._read_on.add(url)

    def next_held(self, url: str, pos: int) -> int | None:
        """Where the first held range after `pos` starts (None: none), so a read outside the plan stops there."""
        held = self._held.get(url)
        if held is None:
            return None
        i = bisect.bisect_right(held.starts, pos)
        return held.starts[i] if i < len(held.starts) else None

    def file(self, url: str, fallback, clock: ReadClock | None = None) -> BatchFile:
        """The file object a decoder reads `url` through; `fallback` (an fsspec file) serves what is not held; its
        reads counted on `clock`."""
        self.indexes.get(url)
        return BatchFile(self, url, fallback, clock)


def direct_url(fs, path: str) -> tuple[str, dict] | None:
    """A plain HTTP URL that serves `path` to ranged GETs, and the headers it needs, where `fs` can name one: a
    presigned URL (s3fs), a Hub repository file's resolve URL with the token's headers (HfFileSystem; not buckets,
    whose bytes come through Xet). None elsewhere, or where making it fails."""
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    try:
        if "s3" in protocols:
            return fs.url(path, expires=DIRECT_URL_S), {}
        if "hf" in protocols:
            from huggingface_hub import hf_hub_url
            from huggingface_hub.hf_file_system import HfFileSystemResolvedRepositoryPath
            from huggingface_hub.utils import build_hf_headers

            resolved = fs.resolve_path(path)
            if not isinstance(resolved, HfFileSystemResolvedRepositoryPath):
                return None
            url = hf_hub_url(
                resolved.repo_id,
                resolved.path_in_repo,
                repo_type=resolved.repo_type,
                revision=resolved.revision,
                endpoint=fs.endpoint,
            )
            return url, build_hf_headers(token=fs.token)
    except Exception:  # no URL to be had (no credentials, an unknown layout): the filesystem reads the file
        return None
    return None


def _read_or_error(url: str, lo: int, hi: int) -> bytes | BaseException:
    """Bytes [lo, hi) of `url`, or the exception reading them raised (as `cat_ranges(on_error="return")`)."""
    try:  # the filesystem resolved in this thread: fsspec keeps one instance per thread
        return read_range(*fsspec.core.url_to_fs(url), lo, hi)
    except Exception as e:
        return e


class BatchFile(SourceFile):
    """A `SourceFile` over a remote video: held bytes first, `fallback` reads for the rest, reads past the plan ended.

    A read returns at most what one held range has from the position (a decoder's reader takes short reads), so a
    read near the end of a planned range does not fetch past it."""

    short_reads = True

    def __init__(self, fetcher: BatchFetcher, url: str, fallback, clock: ReadClock | None = None):
        super().__init__(fetcher, url, fallback, clock)
        self.ended_reads = 0  # reads this file object answered with the end of the stream

    def read_outside(self, n: int) -> bytes:
        """The end of the stream where the fetcher ends reads past its plan (`BatchFetcher.ends`); else an ordinary
        ranged read up to the next held range only, never again what is held."""
        if self.source.ends(self.url, self.pos):
            self.ended_reads += 1
            self.source.ended_reads += 1
            return b""
        self.source.settle()
        nxt = self.source.next_held(self.url, self.pos)
        if nxt is not None:
            n = min(n, nxt - self.pos)
        chunk = super().read_outside(n)
        self.source.fallback_reads += 1
        self.source.fallback_bytes += len(chunk)
        return chunk

    def read_on(self) -> bool:
        """Where this file ended reads past the plan, reads of its URL are fetched from now on
        (`BatchFetcher.read_on`)."""
        if not self.ended_reads:
            return False
        self.source.read_on(self.url)
        return True
