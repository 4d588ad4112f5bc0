"""Episode fetches for streaming remote video: one request per video file for a group of episodes, made ahead of
use, spilled to local disk.

Read as the decoders ask, remote video costs one request per block (4 MB blocks: ~10 requests per 1,000 480x640 AV1
frames) and one block of memory per open decoder. A streaming reader knows which episodes come next, and in a v3.0
video file each episode's frames are one contiguous run of bytes. So `EpisodeFetcher` fetches, per camera, the bytes
of a group of consecutive episodes with one ranged GET, on a background thread while earlier episodes decode, and
writes them to a spill file that is unlinked at once (nothing is left behind, however the process ends). The
decoders read through a `source.SourceFile`: fetched ranges from the spill files, the file's head and tail (ftyp,
moov) from memory, anything else with ordinary ranged reads (`fallback`, counted like every request).

`FileIndex` is a video file's layout (its sample tables), from which both fetchers plan their ranges.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

import fsspec
import numpy as np

from ..errors import UserError
from ..format import mp4
from ..format.paths import is_remote
from ..loader.dataset_meta import DatasetMeta
from .source import NEXT_SAMPLES, REORDER_SAMPLES, ReadClock, SourceFile, read_range, whole

MERGE_GAP = 2**20  # episode ranges of one file closer than this are fetched in one request
KEPT_INDEXES = 32  # file layouts kept per process (32 B per frame of the file, plus its moov)
# the start of the sample data kept with the head: opening a decoder reads the first packets to learn the stream
# (one 256 KB request per open otherwise: 12 of the 45 requests of a 12-episode pass)
PROBED_BYTES = 512 * 2**10


class FileIndex:
    """A video file's layout: its head and tail (everything outside the sample data, plus the first
    `PROBED_BYTES` of the data) and each sample's bytes."""

    def __init__(self, fs, path: str):
        with fs.open(path, "rb", block_size=2**20, cache_type="readahead") as fh:  # head and probe: one read
            track = mp4.read_track(fh, path)
            start, length = track.data_range
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(0)
            self.head = fh.read(min(start + PROBED_BYTES, start + length))
            fh.seek(start + length)
            self.tail_at, self.tail = start + length, fh.read(size - start - length)
        sizes = track.sizes
        chunk = np.repeat(np.arange(len(track.chunk_samples)), track.chunk_samples)
        before = np.cumsum(sizes) - sizes  # bytes of the samples before each, over the whole file
        first_of_chunk = np.cumsum(track.chunk_samples) - track.chunk_samples
        self.starts = track.chunk_offsets[chunk] + before - before[first_of_chunk][chunk]
        self.ends = self.starts + sizes
        n = len(sizes)
        self.reorders = track.composition is not None  # presentation order differs from decode order
        if self.reorders:
            dts = np.cumsum(track.durations) - track.durations
            self.order = np.argsort(dts + track.composition, kind="stable")
        else:
            self.order = np.arange(n)
        self.sync = track.sync if track.sync is not None else np.arange(n)

    def byte_range(self, first: int, count: int) -> tuple[int, int]:
        """[start, end) of the bytes that decoding presented frames first..first+count-1 reads."""
        n = len(self.order)
        samples = self.order[np.clip(np.arange(first, first + count), 0, n - 1)]
        lo = int(self.sync[max(int(np.searchsorted(self.sync, samples.min(), side="right")) - 1, 0)])
        hi = min(int(samples.max()) + REORDER_SAMPLES, n - 1)
        return int(self.starts[lo : hi + 1].min()), int(self.ends[lo : hi + 1].max())

    def frame_ranges(
        self, frames: np.ndarray, reorder: int = REORDER_SAMPLES, after: int = NEXT_SAMPLES
    ) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the bytes decoding each presented frame alone reads: its samples from the keyframe
        before it, plus `reorder` samples past it where the file reorders frames (`after` where not)."""
        n = len(self.order)
        samples = self.order[np.clip(frames, 0, n - 1)]
        key = self.sync[np.maximum(np.searchsorted(self.sync, samples, side="right") - 1, 0)]
        last = np.minimum(samples + (reorder if self.reorders else after), n - 1)
        return self.starts[key], self.ends[last]

    def pinned(self, pos: int, n: int) -> bytes | None:
        """Bytes at `pos` held in memory (head or tail), up to n; None outside them."""
        if pos < len(self.head):
            return self.head[pos : pos + n]
        if pos >= self.tail_at and pos - self.tail_at < len(self.tail):
            return self.tail[pos - self.tail_at : pos - self.tail_at + n]
        return None


class FileIndexes:
    """Video file layouts by URL, each parsed once per process; the `KEPT_INDEXES` most recently used are kept."""

    def __init__(self):
        self._indexes: OrderedDict[str, FileIndex | None] = OrderedDict()

    def get(self, url: str) -> FileIndex | None:
        """The file's layout; None where it cannot be read (then it is read as the decoders ask)."""
        if url in self._indexes:
            self._indexes.move_to_end(url)
            return self._indexes[url]
        fs, path = fsspec.core.url_to_fs(url)
        try:
            index = FileIndex(fs, path)
        except Exception:  # an MP4 layout this parser does not know, or a failed read: the decoders' reads tell
            index = None
        self._indexes[url] = index
        if len(self._indexes) > KEPT_INDEXES:
            self._indexes.popitem(last=False)
        return index

    def peek(self, url: str) -> FileIndex | None:
        """The file's layout if parsed already, else None (nothing is read)."""
        return self._indexes.get(url)

    def pinned(self, url: str, pos: int, n: int) -> bytes | None:
        """Bytes of `url` at `pos` held with its parsed layout (head or tail), up to n; None outside them."""
        index = self._indexes.get(url)
        return None if index is None else index.pinned(pos, n)


class _Span:
    """One fetched range of a file: its bytes land in an unlinked spill file (the future gives its descriptor)."""

    __slots__ = ("lo", "hi", "future", "group")

    def __init__(self, lo: int, hi: int, future: Future, group: int):
        self.lo, self.hi, self.future, self.group = lo, hi, future, group

    def close(self) -> None:
        if not self.future.cancel():  # fetched or being fetched: close its file once it is there
            self.future.add_done_callback(lambda f: f.exception() is None and os.close(f.result()))


class EpisodeFetcher:
    """Fetches groups of episodes' video bytes ahead of use, for one process (a DataLoader worker); a
    `source.ByteSource`.

    `plan(groups)` gives the groups in the order their episodes will be read; `need(episode)` before decoding an
    episode starts the fetch of its group (if not yet started) and of the next `ahead` groups, without waiting (a read
    of a range still being fetched waits for it); `done(episode)` after an episode's last decode: once all its
    group's episodes are done, the group's spill files are closed (their disk space freed).

    Args:
        dmeta: the dataset; its data_root must be remote.
        cameras: the cameras whose videos are fetched.
        spill_dir: where spill files go (local disk); None: the system's temporary directory (TMPDIR).
        ahead: groups fetched beyond the newest one needed.
    """

    def __init__(self, dmeta: DatasetMeta, cameras: list[str], spill_dir: str | None = None, ahead: int = 2):
        self.dmeta, self.cameras, self.ahead = dmeta, cameras, ahead
        self.spill_dir = spill_dir or tempfile.gettempdir()
        if not os.path.isdir(self.spill_dir):
            raise UserError(f"spill_dir {self.spill_dir!r} is not a directory; create it or choose another")
        self._indexes = FileIndexes()
        self._spans: dict[str, list[_Span]] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="dlbench-fetch")
        self._groups: list[list[int]] = []
        self._group_of: dict[int, int] = {}
        self._submitted: set[int] = set()  # groups of the plan whose fetches have been submitted
        self._left: dict[int, int] = {}  # group -> its episodes not yet done
        self.requests = self.bytes = 0  # fetches made, bytes fetched (not counting heads and tails)

    # ------------------------------------------------------------------------------------------ the plan
    def plan(self, groups: list[list[int]]) -> None:
        """The groups of episodes in the order they will be read (replaces the previous plan, closing its spans)."""
        self.release_all()
        self._groups = [list(g) for g in groups]
        self._group_of = {ep: k for k, g in enumerate(self._groups) for ep in g}
        self._left = {k: len(g) for k, g in enumerate(self._groups)}
        self._submitted = set()

    def need(self, episode: int) -> None:
        k = self._group_of.get(episode)
        if k is None:  # not in the plan (a replay after resuming reads a few such): ordinary reads
            return
        for j in range(k, min(k + self.ahead, len(self._groups) - 1) + 1):
            if j not in self._submitted:  # (after resuming, groups read before the checkpoint are never fetched)
                self._submitted.add(j)
                self._submit(j)

    def done(self, episode: int) -> None:
        k = self._group_of.get(episode)
        if k is None or k not in self._left:
            return
        self._left[k] -= 1
        if self._left[k] <= 0:
            del self._left[k]
            self._drop(lambda s: s.group == k)

    def release_all(self) -> None:
        self._drop(lambda s: True)

    def _drop(self, which) -> None:
        with self._lock:
            for url, spans in self._spans.items():
                for s in spans:
                    if which(s):
                        s.close()
                self._spans[url] = [s for s in spans if not which(s)]

    def close(self) -> None:
        self.release_all()
        self._pool.shutdown(wait=True)

    # -------------------------------------------------------------------------------------------- fetching
    def index(self, url: str) -> FileIndex | None:
        """The file's layout (parsed once per process); None where its layout cannot be read (then it is read as
        the decoders ask)."""
        return self._indexes.get(url)

    def _submit(self, k: int) -> None:
        ranges: dict[str, list[list[int]]] = {}
        for cam in self.cameras:
            for ep in sorted(self._groups[k]):
                url = self.dmeta.video_url(cam, ep)
                idx = self.index(url)
                if idx is None:
                    continue
                first = int(round(float(self.dmeta.video_from[cam][ep]) * self.dmeta.fps))
                lo, hi = idx.byte_range(first, int(self.dmeta.ep_to[ep] - self.dmeta.ep_from[ep]))
                runs = ranges.setdefault(url, [])
                if runs and lo <= runs[-1][1] + MERGE_GAP and hi >= runs[-1][0]:
                    runs[-1] = [min(runs[-1][0], lo), max(runs[-1][1], hi)]
                else:
                    runs.append([lo, hi])
        with self._lock:
            for url, runs in ranges.items():
                for lo, hi in runs:
                    future = self._pool.submit(self._fetch, url, lo, hi)
                    self._spans.setdefault(url, []).append(_Span(lo, hi, future, k))

    def _fetch(self, url: str, lo: int, hi: int) -> int:
        data = whole(url, lo, hi, read_range(*fsspec.core.url_to_fs(url), lo, hi))
        fd, name = tempfile.mkstemp(prefix="dlbench-spill-", dir=self.spill_dir)
        os.unlink(name)  # the space is freed when the descriptor closes, whatever happens to this process
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except BaseException:
            os.close(fd)
            raise
        self.requests += 1
        self.bytes += hi - lo
        return fd

    # --------------------------------------------------------------------------------------------- reading
    def read(self, url: str, pos: int, n: int) -> bytes | None:
        """Up to n bytes at `pos` from memory or a spill file; None where neither holds `pos`. Called from the
        thread that calls `plan`, `need` and `done` (a spill file closes only through them)."""
        pinned = self._indexes.pinned(url, pos, n)
        if pinned is not None:
            return pinned
        with self._lock:
            span = next((s for s in self._spans.get(url, ()) if s.lo <= pos < s.hi), None)
        if span is None:
            return None
        try:
            fd = span.future.result()
        except Exception:  # a failed fetch: its range is read as the decoders ask, which reports a lasting failure
            with self._lock:
                self._spans[url] = [s for s in self._spans.get(url, ()) if s is not span]
            return None
        return os.pread(fd, min(n, span.hi - pos), pos - span.lo)

    def file(self, url: str, fallback, clock: ReadClock | None = None) -> SourceFile:
        """The file object a decoder reads `url` through; `fallback` (an fsspec file) serves what is not fetched;
        its reads counted on `clock`."""
        if is_remote(url):
            self.index(url)
        return SourceFile(self, url, fallback, clock)
