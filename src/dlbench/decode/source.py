"""What the fetchers of remote video share: the byte-source contract and the file object a decoder reads through.

A fetcher (`fetch.EpisodeFetcher`: a streaming worker's next episodes, spilled to local disk;
`batch_fetch.BatchFetcher`: a map-style batch's frames, in memory) fetches byte ranges of video files before the
decoders ask for them. It is a `ByteSource`: `read` gives the bytes it holds at a position, `file` the `SourceFile`
that a decoder reads a file through (`VideoDecoderCache(wrap=source.file)`): held bytes first, ordinary ranged reads
(`fallback`, an fsspec file, counted like every request) for the rest. `read_range` is how both fetch a range.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Protocol

import fsspec

from ..errors import UserError, ignores_ranges

# samples read past the last frame wanted: a decoder with frame reordering reads a few packets beyond the frame it
# returns (x264's B-frames: up to 4); the rest of the GOP is not needed
REORDER_SAMPLES = 8
# a decoder without reordering still reads the packet after the frame it returns before returning it (FFmpeg's
# libdav1d on 480x640 AV1: a random frame's reads fell outside its range until this one packet was added)
NEXT_SAMPLES = 1


class ByteSource(Protocol):
    """Byte ranges of remote files, fetched ahead of the decoders' reads, for one process."""

    def read(self, url: str, pos: int, n: int) -> bytes | None:
        """Up to n bytes of `url` at `pos` that the source holds (never past the range holding `pos`; a range still
        being fetched is waited for); None where it holds none at `pos`."""
        ...

    def file(self, url: str, fallback, clock: ReadClock | None = None) -> SourceFile:
        """The file object a decoder reads `url` through; `fallback` (an fsspec file) serves what is not held; its
        reads counted on `clock`."""
        ...


class ReadClock:
    """Seconds a process's decoders spent waiting on remote bytes (their reads through a `SourceFile` or
    `TimedReads`); one per `decoder.FrameDecoder` process, which the harness asks."""

    __slots__ = ("seconds",)

    def __init__(self):
        self.seconds = 0.0


class TimedReads:
    """A remote file read as the decoder asks (no fetcher): its reads counted on `clock` as waits on storage."""

    def __init__(self, handle, clock: ReadClock | None = None):
        self.handle, self.clock = handle, clock

    def read(self, n: int = -1) -> bytes:
        t0 = time.perf_counter()
        try:
            return self.handle.read(n)
        finally:
            if self.clock is not None:
                self.clock.seconds += time.perf_counter() - t0

    def __getattr__(self, name):  # seek, tell, close, size: the file's own
        return getattr(self.handle, name)


class SourceFile:
    """A read-only file object over a remote file: the bytes `source` holds first, `fallback` reads for the rest.

    A read returns all n bytes asked for (up to the end of the file), joined from held ranges and fallback reads;
    with `short_reads`, at most what one held range (or one fallback read) has from the position.
    """

    short_reads = False

    def __init__(self, source: ByteSource, url: str, fallback, clock: ReadClock | None = None):
        self.source, self.url, self.fallback, self.clock = source, url, fallback, clock
        self.size = fallback.size
        self.pos = 0

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: 0, 1: self.pos, 2: self.size}[whence] + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:
        t0 = time.perf_counter()
        try:
            return self._read(n)
        finally:
            if self.clock is not None:
                self.clock.seconds += time.perf_counter() - t0

    def _read(self, n: int) -> bytes:
        n = self.size - self.pos if n is None or n < 0 else min(n, self.size - self.pos)
        out = []
        while n > 0:
            chunk = self.source.read(self.url, self.pos, n)
            if chunk is None:
                chunk = self.read_outside(n)
            if not chunk:
                break
            out.append(chunk)
            self.pos += len(chunk)
            n -= len(chunk)
            if self.short_reads:
                break
        return b"".join(out)  # (one chunk: the chunk itself, not a copy)

    def read_outside(self, n: int) -> bytes:
        """Up to n bytes at the position, which the source does not hold: an ordinary ranged read."""
        self.fallback.seek(self.pos)
        return self.fallback.read(n)

    def read_on(self) -> bool:
        """After a decode through this file failed: True where the file cut reads short of what the decoder wanted
        (a plan's end), and then reads of its URL go on past that from now on (decode it again); False where it
        cut nothing short (the failure is the file's or the decoder's own)."""
        return False

    def close(self) -> None:
        self.fallback.close()


class SharedReads:
    """One process's reads of remote video, kept and shared by every decoder reading the same file.

    Each open decoder used to read through its own fsspec file, so every decoder opened on a file fetched the file's
    head (its index, the moov box) again, and a file smaller than a block was fetched whole once per open decoder: one
    S3 run of the streaming loader on two 0.3 MB files made 665 requests for 70 MB to deliver 3.4 MB of frames. Here
    a read that nothing kept covers fetches what it asks and a block beyond (as fsspec's readahead did: a GOP after a
    jump is then one request), or the whole file where it is no larger than a block; what is fetched is kept, least
    recently read first out, up to `max_bytes`, and each file's size is asked once.
    """

    def __init__(self, block_size: int, max_bytes: int):
        self.block_size, self.max_bytes = block_size, max(block_size, max_bytes)
        self._kept: OrderedDict[tuple[str, int], bytes] = OrderedDict()  # (url, start) -> bytes, oldest read first
        self._starts: dict[str, set[int]] = {}  # url -> starts of its kept ranges
        self.bytes = 0
        self._files: dict[str, tuple] = {}  # url -> (fs, path, size, lock)
        self._handles: dict[str, object] = {}  # url -> an unbuffered fsspec file (filesystems without async reads)
        self._lock = threading.Lock()

    def open(self, url: str) -> SharedFile:
        """A file object reading `url` through the shared reads (`FileNotFoundError` where it does not exist)."""
        return SharedFile(self, url, self._file(url)[2])

    def _file(self, url: str) -> tuple:
        known = self._files.get(url)
        if known is None:
            fs, path = fsspec.core.url_to_fs(url)
            known = self._files[url] = (fs, path, fs.size(path), threading.Lock())
        return known

    def read(self, url: str, pos: int, n: int) -> bytes:
        """Up to n bytes of `url` at `pos` (at least one where `pos` is in the file): from a kept range, or fetched."""
        with self._lock:
            for lo in self._starts.get(url, ()):
                data = self._kept[(url, lo)]
                if lo <= pos < lo + len(data):
                    self._kept.move_to_end((url, lo))
                    return data[pos - lo : pos - lo + n]
        fs, path, size, lock = self._file(url)
        lo, hi = (0, size) if size <= self.block_size else (pos, min(size, pos + n + self.block_size))
        if getattr(fs, "async_impl", False):  # s3fs, HTTP: one ranged GET, concurrent with other reads
            data = fs.cat_file(path, start=lo, end=hi)
        else:  # one unbuffered handle per file (HfFileSystem: opening asks the Hub about the file each time)
            with lock:
                handle = self._handles.get(url)
                if handle is None:
                    handle = self._handles[url] = fs.open(path, "rb", block_size=self.block_size, cache_type="none")
                handle.seek(lo)
                data = handle.read(hi - lo)
        if len(data) > hi - lo:  # the whole file, where a range was asked
            raise ignores_ranges(url)
        data = whole(url, lo, hi, data)
        with self._lock:
            if (url, lo) not in self._kept:
                self._kept[(url, lo)] = data
                self._starts.setdefault(url, set()).add(lo)
                self.bytes += len(data)
            while self.bytes > self.max_bytes and len(self._kept) > 1:
                (old, start), gone = self._kept.popitem(last=False)
                self._starts[old].discard(start)
                self.bytes -= len(gone)
        return data[pos - lo : pos - lo + n]


class SharedFile:
    """A read-only file object over a remote file, read through a process's `SharedReads`."""

    def __init__(self, shared: SharedReads, url: str, size: int):
        self.shared, self.url, self.size = shared, url, size
        self.pos = 0

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: 0, 1: self.pos, 2: self.size}[whence] + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.pos if n is None or n < 0 else min(n, self.size - self.pos)
        out = []
        while n > 0:
            chunk = self.shared.read(self.url, self.pos, n)
            if not chunk:
                break
            out.append(chunk)
            self.pos += len(chunk)
            n -= len(chunk)
        return b"".join(out)

    def close(self) -> None:
        pass  # what was read stays with the process's `SharedReads`


def read_range(fs, path: str, lo: int, hi: int) -> bytes:
    """Bytes [lo, hi) of `path` on `fs` in one request (fewer where the file is shorter)."""
    if getattr(fs, "async_impl", False):  # s3fs, HTTP: one ranged GET
        return fs.cat_file(path, start=lo, end=hi)
    # the generic cat_file reads through a buffered file that over-reads by a block (HfFileSystem: 5 MB)
    with fs.open(path, "rb", block_size=hi - lo, cache_type="none") as fh:
        fh.seek(lo)
        return fh.read(hi - lo)


def whole(url: str, lo: int, hi: int, data: bytes) -> bytes:
    """`data`, read as bytes [lo, hi) of `url`; a `UserError` where it is not all of them."""
    if len(data) != hi - lo:
        raise UserError(f"{url}: asked for bytes {lo}-{hi}, got {len(data)}; the file changed while being read")
    return data
