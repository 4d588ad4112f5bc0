"""What re-encoding a dataset would give, before re-encoding it: a few seconds of its own video re-encoded at
candidate settings, each measured against the source as a map-style worker reads it (random frames, one FFmpeg
thread): decode time per frame, bytes per frame and PSNR. The advice turns the decode time into a prediction of the
run (`advice.prescribe`); `--verify` re-encodes the whole dataset and runs it (`advice.prove`).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import UserError
from ..format import meta, paths
from ..format.mp4 import read_track
from .cost import quality
from .options import Encoding
from .reencode import _episode_files, rgb_keys

# every frame a keyframe, or one in two, with the decoder's costliest tools off: random access at one frame's cost
CANDIDATES = (
    Encoding("h264", gop=1, crf=20, fast_decode=True),
    Encoding("h264", gop=2, crf=20, fast_decode=True),
)
LOSSLESS = Encoding("h264", gop=1, crf=0)  # x264 at crf 0 (8-bit): lossless, in the candidates' container
CLIP_S = 3.0  # seconds of the first episode's video re-encoded per candidate
RANDOM_FRAMES = 40  # random frames decoded per clip (each from a fresh seek, as a map-style worker reads)
MIN_PSNR_DB = 35.0  # a candidate below this changes what the model sees: not prescribed


@dataclass(frozen=True)
class Probe:
    """One candidate on one camera's clip, against the source's own encoding of the same seconds."""

    encoding: Encoding
    camera: str
    source_ms_per_frame: float  # a random frame of the source file
    ms_per_frame: float  # a random frame of the candidate's clip
    bytes_vs_source: float  # bytes per frame, against the source's clip
    psnr_db: float  # against the source's decoded frames
    seconds: float  # what probing this candidate took
    # in reading order (a stream's decode), ms per frame over the clip from a fresh decoder: the source's and this
    # candidate's; and FFmpeg's time to encode the clip (`clip_frames` frames of this camera)
    source_order_ms_per_frame: float = 0.0
    order_ms_per_frame: float = 0.0
    encode_s: float = 0.0
    clip_frames: int = 0

    @property
    def decode_ratio(self) -> float:
        return self.ms_per_frame / self.source_ms_per_frame


def random_ms_per_frame(path: str, frames: int, seed: int = 0) -> float:
    """Milliseconds to decode one frame at a random index of `path` (of `frames`), by a fresh exact seek on one
    FFmpeg thread: the median over RANDOM_FRAMES frames."""
    import torch
    from torchcodec.decoders import VideoDecoder

    torch.set_num_threads(1)
    decoder = VideoDecoder(path, seek_mode="exact", num_ffmpeg_threads=1)
    rng = np.random.default_rng(seed)
    times = []
    for i in rng.integers(0, max(frames, 1), RANDOM_FRAMES):
        t0 = time.perf_counter()
        decoder.get_frame_at(int(i))
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1000)


def order_ms_per_frame(path: str, frames: int) -> float:
    """Milliseconds a frame to decode the first `frames` frames of `path` in order on one FFmpeg thread (a fresh
    decoder: its opening is counted, as a stream's opening of an episode is)."""
    import torch
    from torchcodec.decoders import VideoDecoder

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    decoder = VideoDecoder(path, seek_mode="exact", num_ffmpeg_threads=1)
    n = min(frames, decoder.metadata.num_frames or frames)
    decoder.get_frames_in_range(0, n)
    return (time.perf_counter() - t0) * 1000 / max(n, 1)


def _ffmpeg(args: list[str], what: str) -> None:
    proc = subprocess.run(["ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-y", *args], capture_output=True,
                          text=True)  # fmt: skip
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise UserError(f"{what}: FFmpeg failed: {last}")


def probe(
    root: str, candidates: tuple[Encoding, ...] = CANDIDATES, seconds: float = CLIP_S, seed: int = 0
) -> list[Probe]:
    """Each candidate on the first `seconds` of the first video file of each camera of the dataset at `root`, and
    of the first data file of each camera stored as images (`_image_clip`)."""
    info = meta.read_info(root)
    fps = info.get("fps") or 30
    found = []
    with tempfile.TemporaryDirectory(prefix="dlbench-probe-") as tmp:
        for cam, files in _episode_files(root, info).items():
            rel, frames = next(iter(files.items()))
            source = Path(tmp) / f"{cam}.mp4"
            with meta.open_file(root, rel) as fh:
                source.write_bytes(fh.read())
            try:
                with open(source, "rb") as fh:
                    track = read_track(fh, rel)
                source_ms = random_ms_per_frame(str(source), frames, seed)
            except Exception as e:  # a damaged or truncated file: the probe measures nothing of it
                raise UserError(f"{rel}: cannot probe it ({type(e).__name__}: {e}); `dlbench validate` names what "
                                "is wrong with the dataset's files") from None  # fmt: skip
            clip_frames = min(frames, max(2, int(seconds * fps)))
            # the same seconds losslessly, as the reference the candidates are scored against (the same container
            # and timing: FFmpeg's psnr filter pairs frames by time), and the source's own bytes for them
            reference = Path(tmp) / f"{cam}.ref.mp4"
            _ffmpeg(["-i", str(source), "-frames:v", str(clip_frames), *LOSSLESS.ffmpeg_args(track.timescale, 1),
                     str(reference)], rel)  # fmt: skip
            source_bytes = float(track.sizes[:clip_frames].sum())  # decode order: the same frames, near enough
            measured = (source_ms, order_ms_per_frame(str(source), clip_frames), source_bytes)
            found += _candidates(cam, rel, source, reference, clip_frames, track.timescale, measured, candidates, seed)
        for cam in rgb_keys(info, meta.image_keys(info)):  # depth maps are not re-encoded
            rel, reference, clip_frames, measured = _image_clip(root, info, cam, seconds, Path(tmp), seed)
            found += _candidates(cam, rel, reference, reference, clip_frames, fps * 512, measured, candidates, seed)
    return found


def _candidates(cam, rel, source: Path, reference: Path, clip_frames: int, timescale: int, measured: tuple,
                candidates, seed: int) -> list[Probe]:  # fmt: skip
    """Each candidate encoding of `clip_frames` frames of `source`, scored against `reference`; `measured`: the
    source's random and in-order ms per frame and its bytes for the clip."""
    source_ms, source_order, source_bytes = measured
    found = []
    for k, enc in enumerate(candidates):
        t0 = time.perf_counter()
        out = reference.with_name(f"{cam}.{k}.mp4")
        _ffmpeg(["-i", str(source), "-frames:v", str(clip_frames), *enc.ffmpeg_args(timescale, 1), str(out)],
                f"{rel} to {enc.label()}")  # fmt: skip
        encode_s = time.perf_counter() - t0
        psnr, _ = quality(str(out), str(reference))
        found.append(Probe(
            encoding=enc, camera=cam, source_ms_per_frame=source_ms,
            ms_per_frame=random_ms_per_frame(str(out), clip_frames, seed),
            bytes_vs_source=out.stat().st_size / source_bytes,
            psnr_db=psnr, seconds=time.perf_counter() - t0,
            source_order_ms_per_frame=source_order, encode_s=encode_s, clip_frames=clip_frames,
            order_ms_per_frame=order_ms_per_frame(str(out), clip_frames),
        ))  # fmt: skip
    return found


def _image_clip(root: str, info: dict, cam: str, seconds: float, tmp: Path, seed: int):
    """A camera stored as images, as the probe's source: the first `seconds` of rows of its first data file,
    encoded losslessly as the reference; the source's cost is Pillow's decode of a row's image (the same at
    random and in order) and its bytes the images'. Returns (data file, reference, frames, measured)."""
    from ..loader.images import decode_image

    rel = meta.read_episodes_v30(root, columns=["data/chunk_index", "data/file_index"]).slice(0, 1).to_pylist()[0]
    rel = paths.v30_data_path(rel["data/chunk_index"], rel["data/file_index"])
    fps = info.get("fps") or 30
    with meta.open_file(root, rel) as fh:
        table = meta.read_parquet(fh, ["index", cam])
    column = table.column(cam).combine_chunks()
    column = column.field("bytes") if hasattr(column, "field") else column
    order = np.argsort(table.column("index").to_numpy(), kind="stable")[: max(2, int(seconds * fps))]
    encoded = [column[int(i)].as_py() for i in order]
    times, frames = [], []
    for data in encoded:
        t0 = time.perf_counter()
        frames.append(decode_image(data))
        times.append(time.perf_counter() - t0)
    height, width = frames[0].shape[:2]
    reference = tmp / f"{cam}.ref.mp4"
    raw = tmp / f"{cam}.rgb"
    raw.write_bytes(b"".join(np.ascontiguousarray(f[:, :, :3]).tobytes() for f in frames))
    _ffmpeg(["-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-framerate", str(fps), "-i", str(raw),
             *LOSSLESS.ffmpeg_args(fps * 512, 1), str(reference)], rel)  # fmt: skip
    raw.unlink()
    ms = float(np.median(times) * 1000)
    return rel, reference, len(frames), (ms, ms, float(sum(len(b) for b in encoded)))


def best(probes: list[Probe]) -> tuple[Encoding, float, float, float] | None:
    """The candidate with the lowest decode time over the cameras (frames of every camera weigh alike) among those
    at MIN_PSNR_DB or more on every camera: (encoding, decode time over the source's, bytes over the source's,
    worst PSNR). None where none qualifies."""
    by_enc: dict[Encoding, list[Probe]] = {}
    for p in probes:
        by_enc.setdefault(p.encoding, []).append(p)
    scored = []
    for enc, ps in by_enc.items():
        if min(p.psnr_db for p in ps) < MIN_PSNR_DB:
            continue
        ratio = sum(p.ms_per_frame for p in ps) / sum(p.source_ms_per_frame for p in ps)
        scored.append((ratio, enc, float(np.mean([p.bytes_vs_source for p in ps])), min(p.psnr_db for p in ps)))
    if not scored:
        return None
    ratio, enc, size, psnr = min(scored, key=lambda s: s[0])
    return enc, ratio, size, psnr
