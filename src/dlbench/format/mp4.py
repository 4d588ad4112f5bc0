"""Read the index (moov) of single-track MP4 files: sample sizes, chunk offsets, timing and sync samples.

`read_track` parses a file's moov into a `Track` (its sample tables expanded to one value per sample): the
converter joins tracks by copying their bytes (`dlbench.convert.join`), the loaders' fetchers turn them into the
byte ranges of frames (`dlbench.decode.fetch`). `declared_frames` reads only the frame count, to tell a whole file
from one cut short (`Damaged`).

Files outside what `read_track` knows (fragmented MP4, several tracks, edit lists that cut or delay frames, sample
tables this module does not know) raise `Unsupported`; the converter remuxes those with FFmpeg instead.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

import numpy as np

CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts"}
STBL_KNOWN = {b"stsd", b"stts", b"ctts", b"stss", b"sdtp", b"stsc", b"stsz", b"stco", b"co64"}
VISUAL_ENTRY_FIELDS = 78  # bytes of a VisualSampleEntry before its child boxes (ISO 14496-12, 12.1.3)


class Unsupported(Exception):
    """An MP4 layout this module does not read (the converter remuxes such inputs with FFmpeg); the message says
    why."""


class Damaged(Unsupported):
    """The file is not a whole MP4: cut short, without its index (moov), or not MP4 at all; the message says which."""


def children(buf: bytes, start: int, end: int):
    """(type, payload start, box end) of each box in buf[start:end]."""
    while start < end:
        if end - start < 8:
            raise Unsupported("truncated box header")
        size, kind = struct.unpack_from(">I4s", buf, start)
        head = 8
        if size == 1:
            (size,) = struct.unpack_from(">Q", buf, start + 8)
            head = 16
        elif size == 0:
            size = end - start
        if size < head or start + size > end:
            raise Unsupported(f"box {kind.decode('latin-1')} overruns its parent")
        yield kind, start + head, start + size
        start += size


def box(kind: bytes, payload: bytes) -> bytes:
    """A box of type `kind` around `payload` (32-bit size)."""
    return struct.pack(">I4s", 8 + len(payload), kind) + payload


def _table(buf: bytes, start: int, end: int, columns: int, dtype=">u4") -> np.ndarray:
    """A full box's `entry_count` rows of `columns` fields, after its version/flags and count."""
    (count,) = struct.unpack_from(">I", buf, start + 4)
    width = np.dtype(dtype).itemsize * columns
    if start + 8 + count * width > end:
        raise Unsupported("sample table longer than its box")
    return np.frombuffer(buf, dtype, count * columns, start + 8).reshape(count, columns).astype(np.int64)


@dataclass
class Track:
    """One input's video track, its sample tables expanded to one value per sample (or per chunk)."""

    name: str
    ftyp: bytes
    moov: bytes
    timescale: int
    entry: bytes  # the stsd's one sample entry, without `btrt` (bit rates differ from file to file)
    durations: np.ndarray
    composition: np.ndarray | None  # ctts offsets; None without ctts
    sync: np.ndarray | None  # 0-based sync samples; None: every sample is one
    sdtp: bytes | None
    sizes: np.ndarray
    chunk_samples: np.ndarray
    chunk_offsets: np.ndarray
    edit_media_time: int | None  # the one edit's media_time; None without an edit list
    data_range: tuple[int, int]  # (start, length) of the bytes holding every chunk

    @property
    def frames(self) -> int:
        return len(self.sizes)

    @property
    def first_presented(self) -> int:
        """Composition time of the first frame shown, in timescale ticks."""
        if self.composition is None:
            return 0
        dts = np.cumsum(self.durations) - self.durations
        return int((dts + self.composition).min())

    def presented_s(self) -> np.ndarray:
        """Every frame's presentation time in seconds, in the order shown (the edit list's offset taken off)."""
        pts = np.cumsum(self.durations) - self.durations
        if self.composition is not None:
            pts = pts + self.composition
        shift = self.edit_media_time if self.edit_media_time is not None else 0
        return np.sort(pts - shift) / self.timescale


def read_track(fh, name: str) -> Track:
    """Parse the moov of an MP4 file object (seekable); raise `Unsupported` for a layout it does not read."""
    file_size, top = _top_level(fh, name)
    if b"moof" in top:
        raise Unsupported(f"{name}: fragmented MP4")
    if b"ftyp" not in top or b"moov" not in top:
        raise Unsupported(f"{name}: no ftyp or moov box")
    return _parse_moov(name, top[b"ftyp"], top[b"moov"], file_size)


def declared_frames(fh, name: str) -> int | None:
    """The frames (samples) the video track of an MP4 file object declares in its moov, reading only the top-level
    box headers and the moov; None for a fragmented MP4 (its moov lists no samples). Raises `Damaged` for a file
    cut short (a top-level box runs past its end: a truncated copy or an unfinished write), one without a moov or a
    video track, and one that is not MP4."""
    _, top = _top_level(fh, name)
    if b"moof" in top:
        return None
    if b"moov" not in top:
        raise Damaged(f"{name}: no moov box (the index of its frames): the write never finished")
    moov = top[b"moov"]
    try:
        _, start, end = next(children(moov, 0, len(moov)))
        for kind, s, e in children(moov, start, end):
            if kind == b"trak":
                boxes = _boxes_within(moov, s, e)
                hdlr, stsz = boxes.get(b"hdlr"), boxes.get(b"stsz")
                if hdlr and stsz and moov[hdlr[0] + 8 : hdlr[0] + 12] == b"vide":
                    return struct.unpack_from(">I", moov, stsz[0] + 8)[0]
    except (Unsupported, struct.error) as e:
        raise Damaged(f"{name}: its moov box is malformed ({e})") from None
    raise Damaged(f"{name}: no video track")


def _top_level(fh, name: str) -> tuple[int, dict[bytes, bytes]]:
    """(file size, {type: box}) of the top-level boxes of an MP4 file object, up to its first moof if it is
    fragmented: ftyp and moov read whole, the others as b"" (only their presence matters). Raises `Damaged` where a
    box runs past the end of the file or the bytes are no box structure."""
    fh.seek(0, io.SEEK_END)
    file_size = fh.tell()
    top, pos = {}, 0
    while pos < file_size:
        fh.seek(pos)
        head = fh.read(16)
        if len(head) < 8:
            raise Damaged(f"{name}: cut short: the box header at byte {pos} is incomplete")
        size, kind = struct.unpack_from(">I4s", head)
        if not all(32 <= c < 127 for c in kind):  # box types are four printable characters
            raise Damaged(f"{name}: not an MP4 file (no box at byte {pos})")
        if size == 1 and len(head) == 16:
            (size,) = struct.unpack_from(">Q", head, 8)
        elif size == 0:
            size = file_size - pos
        if size < 8:
            raise Damaged(f"{name}: not an MP4 file (box {kind.decode('latin-1')} at byte {pos} is {size} bytes)")
        if pos + size > file_size:
            raise Damaged(
                f"{name}: cut short: box {kind.decode('latin-1')} at byte {pos} runs past the end of the file "
                f"({pos + size - file_size} of its {size} bytes missing)"
            )
        if kind in (b"ftyp", b"moov"):
            fh.seek(pos)
            top[kind] = fh.read(size)
        else:
            top.setdefault(kind, b"")
        if kind == b"moof":  # fragmented: what follows is more fragments (a request each, remotely)
            break
        pos += size
    return file_size, top


def _parse_moov(name: str, ftyp: bytes, moov: bytes, file_size: int) -> Track:
    """The track of a moov box read whole; raise `Unsupported` for a layout it does not read."""
    boxes = _index_boxes(name, moov)
    s, _ = boxes[b"mdhd"]
    timescale = struct.unpack_from(">I", moov, s + (20 if moov[s] == 1 else 12))[0]
    entry = _sample_entry(name, moov, boxes[b"stsd"])
    durations = np.repeat(*_table(moov, *boxes[b"stts"], 2).T[[1, 0]])
    sizes = _sample_sizes(name, moov, boxes[b"stsz"])
    if len(durations) != len(sizes):
        raise Unsupported(f"{name}: stts and stsz count different samples")
    composition = _composition(name, moov, boxes[b"ctts"], len(sizes)) if boxes.get(b"ctts") else None
    sync = _table(moov, *boxes[b"stss"], 1)[:, 0] - 1 if boxes.get(b"stss") else None
    sdtp = None
    if boxes.get(b"sdtp"):
        s, e = boxes[b"sdtp"]
        sdtp = moov[s + 4 : e] if e - s - 4 == len(sizes) else None  # per-sample hints: dropped when malformed
    chunk_samples, offsets, data_range = _chunks(name, moov, boxes, sizes, file_size)
    edit = _edit_media_time(name, moov, boxes[b"elst"]) if boxes.get(b"elst") else None
    track = Track(
        name, ftyp, moov, timescale, entry, durations, composition, sync, sdtp, sizes, chunk_samples, offsets, edit,
        data_range,
    )  # fmt: skip
    if edit is not None and edit != track.first_presented:
        raise Unsupported(f"{name}: its edit list starts at {edit}, its first frame at {track.first_presented}")
    return track


def _index_boxes(name: str, moov: bytes) -> dict[bytes, tuple[int, int]]:
    """(payload start, end) of the first box of each type in the moov's one track; checks the required ones."""
    boxes: dict[bytes, tuple[int, int]] = {}

    def walk(start: int, end: int, path: bytes) -> None:
        for kind, s, e in children(moov, start, end):
            if kind == b"trak" and b"trak" in boxes:
                raise Unsupported(f"{name}: more than one track")
            if path == b"stbl" and kind not in STBL_KNOWN:
                raise Unsupported(f"{name}: sample table box {kind.decode('latin-1')} is not copied")
            boxes.setdefault(kind, (s, e))
            if kind in CONTAINERS:
                walk(s, e, kind)

    walk(*next((s, e) for _, s, e in children(moov, 0, len(moov))), b"moov")
    for kind in (b"mdhd", b"stsd", b"stts", b"stsc", b"stsz"):
        if kind not in boxes:
            raise Unsupported(f"{name}: no {kind.decode()} box")
    return boxes


def _boxes_within(buf: bytes, start: int, end: int) -> dict[bytes, tuple[int, int]]:
    """(payload start, end) of the first box of each type in buf[start:end], descending into container boxes."""
    boxes: dict[bytes, tuple[int, int]] = {}
    for kind, s, e in children(buf, start, end):
        boxes.setdefault(kind, (s, e))
        if kind in CONTAINERS:
            for k, v in _boxes_within(buf, s, e).items():
                boxes.setdefault(k, v)
    return boxes


def _sample_entry(name: str, moov: bytes, stsd: tuple[int, int]) -> bytes:
    """The stsd's one sample entry, without `btrt`."""
    s, e = stsd
    entries = list(children(moov, s + 8, e))
    if len(entries) != 1:
        raise Unsupported(f"{name}: {len(entries)} sample descriptions")
    return _without_btrt(moov, *entries[0])


def _sample_sizes(name: str, moov: bytes, stsz: tuple[int, int]) -> np.ndarray:
    """Each sample's size in bytes, from stsz."""
    s, e = stsz
    uniform, count = struct.unpack_from(">II", moov, s + 4)
    if uniform:
        return np.full(count, uniform, np.int64)
    if s + 12 + 4 * count > e:
        raise Unsupported(f"{name}: stsz longer than its box")
    return np.frombuffer(moov, ">u4", count, s + 12).astype(np.int64)


def _composition(name: str, moov: bytes, ctts: tuple[int, int], samples: int) -> np.ndarray:
    """Each sample's composition offset, from ctts."""
    s, e = ctts
    rows = _table(moov, s, e, 2, ">i4" if moov[s] == 1 else ">u4")
    composition = np.repeat(rows[:, 1], rows[:, 0])
    if len(composition) != samples:
        raise Unsupported(f"{name}: ctts and stsz count different samples")
    return composition


def _chunks(
    name: str, moov: bytes, boxes: dict[bytes, tuple[int, int]], sizes: np.ndarray, file_size: int
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """(samples per chunk, chunk offsets, (start, length) of the bytes holding every chunk)."""
    if boxes.get(b"stco"):
        offsets = _table(moov, *boxes[b"stco"], 1)[:, 0]
    elif boxes.get(b"co64"):
        offsets = _table(moov, *boxes[b"co64"], 1, ">u8")[:, 0]
    else:
        raise Unsupported(f"{name}: no chunk offsets")
    stsc = _table(moov, *boxes[b"stsc"], 3)
    if len(stsc) == 0 or (stsc[:, 2] != 1).any():
        raise Unsupported(f"{name}: chunks refer to another sample description")
    rows = np.searchsorted(stsc[:, 0] - 1, np.arange(len(offsets)), side="right") - 1
    if (rows < 0).any():
        raise Unsupported(f"{name}: stsc does not start at chunk 1")
    chunk_samples = stsc[rows, 1]
    if chunk_samples.sum() != len(sizes):
        raise Unsupported(f"{name}: chunks hold {chunk_samples.sum()} samples, stsz lists {len(sizes)}")
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    ends = np.cumsum(chunk_samples)
    chunk_bytes = bounds[ends] - bounds[ends - chunk_samples]
    lo, hi = (int(offsets.min()), int((offsets + chunk_bytes).max())) if len(offsets) else (0, 0)
    if hi > file_size:
        raise Unsupported(f"{name}: chunks run past the end of the file")
    return chunk_samples, offsets, (lo, hi - lo)


def _edit_media_time(name: str, moov: bytes, elst: tuple[int, int]) -> int:
    """The media_time of the edit list's one plain edit."""
    s, e = elst
    if moov[s] == 1:
        (count,) = struct.unpack_from(">I", moov, s + 4)
        rows = [struct.unpack_from(">QqI", moov, s + 8 + 20 * i) for i in range(count)]
    else:
        rows = _table(moov, s, e, 3, ">i4")
    if len(rows) != 1 or rows[0][2] != 0x10000 or rows[0][1] < 0:
        raise Unsupported(f"{name}: edit list other than one plain edit")
    return int(rows[0][1])


def _without_btrt(buf: bytes, kind: bytes, start: int, end: int) -> bytes:
    """A sample entry box without its `btrt` child; unchanged when its children do not parse as a visual entry's."""
    try:
        if end - start < VISUAL_ENTRY_FIELDS:
            raise Unsupported("not a visual sample entry")
        kids = list(children(buf, start + VISUAL_ENTRY_FIELDS, end))
    except Unsupported:
        return buf[start - 8 : end]
    body = buf[start : start + VISUAL_ENTRY_FIELDS] + b"".join(
        buf[s - 8 : e] for k, s, e in kids if k != b"btrt"
    )  # children re-emitted from their own headers
    return box(kind, body)
