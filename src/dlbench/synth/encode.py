"""Video encoding: frames to MP4 with torchcodec (FFmpeg), and checks that this FFmpeg has the codec's encoder."""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from pathlib import Path

import numpy as np

from .. import atomic
from ..errors import UserError
from .spec import CODECS, Camera, SynthConfig


def encode_video(frames_thwc: np.ndarray, path: Path, cfg: SynthConfig) -> None:
    """Encode frames to an MP4 with torchcodec (FFmpeg), atomically."""
    import torch
    from torchcodec.encoders import VideoEncoder

    tensor = torch.from_numpy(np.ascontiguousarray(frames_thwc)).permute(0, 3, 1, 2).contiguous()
    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1: errors only
    options = {"g": cfg.effective_gop}
    if cfg.codec == "hevc":
        options["x265-params"] = "log-level=error"
    with atomic.file(path.with_suffix(".mp4")) as tmp, _own_scheduling():
        tmp_mp4 = tmp.with_name(tmp.name + ".mp4")  # the container is chosen from the extension
        try:
            VideoEncoder(tensor, frame_rate=cfg.fps).to_file(
                tmp_mp4,
                codec=cfg.encoder,
                pixel_format="yuv420p",
                crf=cfg.effective_crf,
                preset=cfg.effective_preset,
                extra_options=options,
            )
            os.replace(tmp_mp4, tmp)
        finally:
            if tmp_mp4.exists():
                tmp_mp4.unlink()


@contextlib.contextmanager
def _own_scheduling():
    """Give the calling thread its scheduling policy back after encoding. SVT-AV1 run as root (containers, CI) turns
    it into SCHED_FIFO priority 99, which processes started later inherit; a real-time thread spinning in OpenBLAS
    then starves the helper thread it waits for, and a 2-core machine livelocks."""
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        yield
    finally:
        if os.sched_getscheduler(0) != policy:
            os.sched_setscheduler(0, policy, param)


@functools.cache
def encoder_works(codec: str) -> bool:
    """True if this machine's FFmpeg (as torchcodec sees it) can encode `codec`; tried on a tiny clip."""
    with tempfile.TemporaryDirectory() as d:
        cfg = SynthConfig(codec=codec, cameras=(Camera("probe", 64, 64),))
        try:
            encode_video(np.zeros((8, 64, 64, 3), np.uint8), Path(d) / "probe.mp4", cfg)
            return True
        except Exception:
            return False


def check_encoder(codec: str) -> None:
    if codec not in CODECS:
        raise UserError(f"codec {codec!r} is unknown; choose one of {sorted(CODECS)}")
    if not encoder_works(codec):
        available = [c for c in sorted(CODECS) if encoder_works(c)]
        raise UserError(
            f"codec {codec!r} needs the FFmpeg encoder {CODECS[codec].encoder}, which this FFmpeg cannot use; "
            f"codecs that work here: {available or 'none (is FFmpeg installed? run scripts/install-system-deps.sh)'}"
        )
