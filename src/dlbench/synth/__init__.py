"""Synthetic LeRobot v2.1 datasets with real encoded video whose every frame carries a barcode (`dlbench.barcode`).

Modules: `config` (what to generate), `content` (what the frames show), `encode` (frames -> MP4), `write` (parquet,
stats and metadata; `synthesize`). The same seed gives the same parquet and metadata bytes.
"""

from .content import render_frames
from .encode import check_encoder, encode_video, encoder_works
from .spec import CODECS, CONTENTS, Camera, SynthConfig, camera_keys, episode_lengths
from .write import synthesize

__all__ = [
    "CODECS",
    "CONTENTS",
    "Camera",
    "SynthConfig",
    "camera_keys",
    "check_encoder",
    "encode_video",
    "encoder_works",
    "episode_lengths",
    "render_frames",
    "synthesize",
]
