"""Join single-track MP4 files by copying their media bytes and appending their sample tables.

Nothing is demuxed or remuxed: each input's chunks are copied as one byte range (by the kernel, for local files), and
its sample tables (stts, ctts, stss, sdtp, stsc, stsz, stco) are appended to the output's, shifted by the samples,
chunks and bytes before it. Input k therefore starts at the summed sample durations of the inputs before it, and its
first frame is presented there: every input must present its first frame at the same composition time, which the
output's one edit list maps to 0. The output puts its moov before its mdat, so a reader over HTTP finds the index in
its first request.

Inputs outside that (fragmented MP4, several tracks, a codec configuration that differs between inputs, edit lists
that cut or delay frames, sample tables this module does not know) raise `Unsupported` before anything is written;
the caller remuxes those with FFmpeg instead. The inputs' moovs are read by `dlbench.format.mp4`.
"""

from __future__ import annotations

import ctypes
import io
import os
import struct
from dataclasses import dataclass

import numpy as np

from ..format.mp4 import CONTAINERS, Track, Unsupported, box, children

COPY_BLOCK = 8 * 2**20


def _full_box(kind: bytes, version: int, payload: bytes) -> bytes:
    return box(kind, struct.pack(">I", version << 24) + payload)


def _runs(values: np.ndarray) -> np.ndarray:
    """Run-length rows (count, value) of a 1-D array."""
    starts = np.concatenate([[0], np.flatnonzero(np.diff(values)) + 1])
    counts = np.diff(np.append(starts, len(values)))
    return np.column_stack([counts, values[starts]])


# ------------------------------------------------------------------------------------------------------ join
@dataclass
class Joined:
    """What `join` writes: `header` (ftyp, moov, mdat header), then each input's `data_range`, in order."""

    header: bytes
    starts: list[int]  # each input's first sample, in ticks of `timescale`
    timescale: int


def join(tracks: list[Track]) -> Joined:
    """The output's header for these tracks in this order; raise `Unsupported` when they cannot share one."""
    first = tracks[0]
    for t in tracks[1:]:
        if t.entry != first.entry or t.timescale != first.timescale:
            raise Unsupported(f"{t.name}: codec configuration or timescale differs from {first.name}")
        if t.first_presented != first.first_presented:
            raise Unsupported(f"{t.name}: first frame at another composition time than {first.name}'s")
        if (t.composition is None) != (first.composition is None):
            raise Unsupported(f"{t.name}: composition offsets in some inputs only")
        if (t.edit_media_time is None) != (first.edit_media_time is None):
            raise Unsupported(f"{t.name}: edit list in some inputs only")
    if first.edit_media_time is None and first.first_presented != 0:
        raise Unsupported(f"{first.name}: frames start at composition time {first.first_presented} without an edit")

    cat = np.concatenate
    samples = np.cumsum([0] + [t.frames for t in tracks])
    durations = cat([t.durations for t in tracks])
    starts = [int(x) for x in np.cumsum([0] + [int(t.durations.sum()) for t in tracks])[:-1]]
    total = int(durations.sum())
    sync = None
    if any(t.sync is not None for t in tracks):
        sync = cat([(np.arange(t.frames) if t.sync is None else t.sync) + n for t, n in zip(tracks, samples)])
    tables = [
        _full_box(b"stts", 0, _rows(_runs(durations))),
        None if first.composition is None else _ctts(cat([t.composition for t in tracks])),
        None if sync is None else _full_box(b"stss", 0, _rows(sync[:, None] + 1)),
        None if any(t.sdtp is None for t in tracks) else _full_box(b"sdtp", 0, b"".join(t.sdtp for t in tracks)),
        _stsc(cat([t.chunk_samples for t in tracks])),
        _stsz(cat([t.sizes for t in tracks])),
    ]
    stsd = _full_box(b"stsd", 0, struct.pack(">I", 1) + first.entry)

    stbl = stsd + b"".join(b for b in tables if b is not None)
    data_start = np.cumsum([0] + [t.data_range[1] for t in tracks])
    relative = cat([t.chunk_offsets - t.data_range[0] + d for t, d in zip(tracks, data_start)])
    mdat_head = _mdat_header(int(data_start[-1]))
    for wide in (False, True):  # chunk offsets count from the file's start, past a header whose size they decide
        moov = _rebuild_moov(first, total, stbl + _offsets(relative, wide))
        base = len(first.ftyp) + len(moov) + len(mdat_head)
        if wide or base + int(data_start[-1]) < 2**32:
            break
    moov = _rebuild_moov(first, total, stbl + _offsets(relative + base, wide))
    return Joined(first.ftyp + moov + mdat_head, starts, first.timescale)


def _rows(rows: np.ndarray, dtype=">u4") -> bytes:
    return struct.pack(">I", len(rows)) + np.ascontiguousarray(rows, dtype).tobytes()


def _ctts(offsets: np.ndarray) -> bytes:
    signed = bool((offsets < 0).any())
    return _full_box(b"ctts", int(signed), _rows(_runs(offsets), ">i4" if signed else ">u4"))


def _stsc(chunk_samples: np.ndarray) -> bytes:
    runs = _runs(chunk_samples)
    first_chunk = np.cumsum(np.concatenate([[0], runs[:-1, 0]])) + 1
    return _full_box(b"stsc", 0, _rows(np.column_stack([first_chunk, runs[:, 1], np.ones(len(runs), np.int64)])))


def _stsz(sizes: np.ndarray) -> bytes:
    if len(sizes) and (sizes == sizes[0]).all():
        return _full_box(b"stsz", 0, struct.pack(">II", int(sizes[0]), len(sizes)))
    return _full_box(b"stsz", 0, struct.pack(">I", 0) + _rows(sizes))


def _offsets(offsets: np.ndarray, wide: bool) -> bytes:
    if wide:
        return _full_box(b"co64", 0, _rows(offsets[:, None], ">u8"))
    return _full_box(b"stco", 0, _rows(offsets[:, None]))


def _mdat_header(payload: int) -> bytes:
    if payload + 8 < 2**32:
        return struct.pack(">I4s", payload + 8, b"mdat")
    return struct.pack(">I4sQ", 1, b"mdat", payload + 16)


def _rebuild_moov(first: Track, total: int, stbl_payload: bytes) -> bytes:
    """The first input's moov with the joined durations, edit and sample tables."""
    moov = first.moov
    s, e = next((s, e) for _, s, e in children(moov, 0, len(moov)))
    movie_scale = 0
    for kind, ks, _ke in children(moov, s, e):
        if kind == b"mvhd":
            movie_scale = struct.unpack_from(">I", moov, ks + (20 if moov[ks] == 1 else 12))[0]
    if not movie_scale:
        raise Unsupported(f"{first.name}: no mvhd box")
    movie_total = (total * movie_scale + first.timescale // 2) // first.timescale

    def duration_at(kind: bytes, version: int) -> tuple[int, int]:
        """(offset in the payload, width) of the duration field of mvhd/mdhd/tkhd."""
        if kind == b"tkhd":
            return (28, 8) if version == 1 else (20, 4)
        return (24, 8) if version == 1 else (16, 4)

    def rebuild(kind: bytes, start: int, end: int) -> bytes:
        if kind == b"stbl":
            return box(kind, stbl_payload)
        if kind == b"elst":
            version = moov[start]
            fmt = ">IQqI" if version == 1 else ">IIiI"
            return _full_box(kind, version, struct.pack(fmt, 1, movie_total, first.edit_media_time, 0x10000))
        if kind in CONTAINERS:
            return box(kind, b"".join(rebuild(k, ks, ke) for k, ks, ke in children(moov, start, end)))
        payload = bytearray(moov[start:end])
        if kind in (b"mvhd", b"mdhd", b"tkhd"):
            at, width = duration_at(kind, payload[0])
            value = total if kind == b"mdhd" else movie_total
            if value >= 2 ** (8 * width):
                raise Unsupported(f"{first.name}: joined duration does not fit a version-0 {kind.decode()}")
            payload[at : at + width] = value.to_bytes(width, "big")
        return box(kind, bytes(payload))

    return rebuild(b"moov", s, e)


# ------------------------------------------------------------------------------------------------------ copy
def preallocate(dst: io.RawIOBase, size: int) -> None:
    """Reserve the file's final size at once: appending 200 MB to a file on ext4 then runs at `cp` speed, ~20%
    faster. fallocate(2) itself, not posix_fallocate, which on filesystems without it writes a byte per block."""
    try:
        ctypes.CDLL(None, use_errno=True).fallocate(dst.fileno(), 0, ctypes.c_int64(0), ctypes.c_int64(size))
    except (AttributeError, OSError):  # no such call here: appending works without it
        pass


def copy_range(src, dst: io.RawIOBase, start: int, length: int) -> None:
    """Append `length` bytes from offset `start` of `src` to `dst` (an unbuffered file), in the kernel when both
    are local files."""
    done = 0
    try:
        fd_in, fd_out = src.fileno(), dst.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        fd_in = None
    if fd_in is not None:
        try:
            while done < length:
                n = os.copy_file_range(fd_in, fd_out, length - done, start + done)
                if n == 0:
                    break  # the file shrank: the read below names it
                done += n
        except OSError:  # another filesystem or no kernel support: go on through user space from where it stopped
            pass
    if done < length:
        src.seek(start + done)
    while done < length:
        block = src.read(min(COPY_BLOCK, length - done))
        if not block:
            raise EOFError(f"{getattr(src, 'name', 'input')}: ended {length - done} bytes before its moov says")
        write_all(dst, block)
        done += len(block)


def write_all(dst: io.RawIOBase, data: bytes) -> None:
    """Write every byte to an unbuffered file (its `write` may take only part)."""
    view = memoryview(data)
    while view:
        view = view[dst.write(view) :]
