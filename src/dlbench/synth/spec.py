"""What to synthesize: the cameras, the codecs, and the `SynthConfig` with its checks."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import barcode
from ..decode.codecs import CODECS, Encoded
from ..errors import UserError
from ..format import paths

# what the frames show (besides the barcode): "stripes" (smooth moving colour stripes: cheap to encode, ~4 KB per
# frame at 480x640 in av1 crf 30) or "camera" (a textured workspace with moving objects, camera pan, flicker and
# sensor noise: ~35 KB per frame there, about what a real robot camera costs)
CONTENTS = ("stripes", "camera", "phases")


@dataclass(frozen=True)
class Camera:
    key: str
    height: int
    width: int


@dataclass(frozen=True)
class SynthConfig(Encoded):
    """What to generate. Lengths are drawn uniformly from [length_min, length_max] with `seed`."""

    episodes: int = 10
    length_min: int = 30
    length_max: int = 90
    cameras: tuple[Camera, ...] = field(
        default_factory=lambda: (
            Camera("observation.images.front", 96, 128),
            Camera("observation.images.wrist", 96, 128),
        )
    )
    fps: int = 30
    codec: str = "h264"
    gop: int | None = None  # default per codec (see CODECS)
    crf: int | None = None
    preset: str | int | None = None
    tasks: int = 2
    state_dim: int = 6
    action_dim: int = 6
    seed: int = 0
    chunks_size: int = paths.DEFAULT_CHUNK_SIZE
    robot_type: str = "dlbench_synthetic"  # marks datasets whose frames carry barcodes (see validate.py)
    noise: int = 0  # +/- this much random noise per pixel: the encoder cannot compress it, so files get real-sized
    content: str = "stripes"  # what the frames show; one of CONTENTS

    def validate(self) -> None:
        if self.codec not in CODECS:
            raise UserError(f"synth codec {self.codec!r} is unknown; choose one of {sorted(CODECS)}")
        if self.episodes < 1:
            raise UserError("synth episodes must be >= 1")
        if not 1 <= self.length_min <= self.length_max:
            raise UserError(
                f"synth lengths must satisfy 1 <= length_min <= length_max (got {self.length_min}, {self.length_max})"
            )
        if not self.cameras:
            raise UserError("synth needs at least one camera")
        if len({c.key for c in self.cameras}) != len(self.cameras):
            raise UserError("synth camera keys must be unique")
        for cam in self.cameras:
            if min(cam.height, cam.width) < barcode.GRID * barcode.MIN_CELL_PX or cam.height % 2 or cam.width % 2:
                raise UserError(
                    f"synth camera {cam.key}: {cam.height}x{cam.width} is not allowed; use even sizes of at least "
                    f"{barcode.GRID * barcode.MIN_CELL_PX} px"
                )
            if self.codec == "av1" and min(cam.height, cam.width) < 64:
                raise UserError(f"synth camera {cam.key}: the av1 encoder (libsvtav1) needs frames of at least 64x64")
        if not 0 <= self.noise <= 127:
            raise UserError(f"synth noise must be within 0..127 (got {self.noise})")
        if self.content not in CONTENTS:
            raise UserError(f"synth content {self.content!r} is unknown; choose one of {list(CONTENTS)}")
        if self.tasks < 1 or self.state_dim < 1 or self.action_dim < 1 or self.fps < 1 or self.chunks_size < 1:
            raise UserError("synth tasks, state_dim, action_dim, fps and chunks_size must be >= 1")
        if self.seed < 0:  # numpy's generators take non-negative seeds only
            raise UserError(f"synth seed must be >= 0 (got {self.seed})")
        if (self.gop is not None and self.gop < 1) or (self.crf is not None and self.crf < 0):
            raise UserError(f"synth gop must be >= 1 and crf >= 0 (got gop {self.gop}, crf {self.crf})")


def episode_lengths(cfg: SynthConfig) -> np.ndarray:
    """Each episode's length in frames, drawn with `cfg.seed`."""
    return np.random.default_rng(cfg.seed).integers(cfg.length_min, cfg.length_max + 1, size=cfg.episodes)


def camera_keys(cfg: SynthConfig) -> list[str]:
    """Camera keys in barcode camera-index order (sorted, like `format.video_keys`)."""
    return sorted(c.key for c in cfg.cameras)
