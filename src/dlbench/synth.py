"""Synthetic LeRobot v2.1 datasets with real encoded video whose every frame can be verified.

`synthesize(SynthConfig(...), out_dir)` writes a complete v2.1 dataset: parquet per episode, one MP4 per episode
per camera (encoded with torchcodec/FFmpeg), and all metadata, with stats computed from the data. Every frame
carries its (episode, frame, camera) as a barcode (see `dlbench.barcode`). The same seed gives the same parquet
and metadata bytes.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import statistics
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from . import atomic, barcode
from .errors import UserError
from .format import meta, paths

# codec name in config -> (FFmpeg encoder, codec name recorded in info.json, default crf, default GOP, default preset)
CODECS = {
    "h264": ("libx264", "h264", 23, 30, None),
    "hevc": ("libx265", "hevc", 28, 30, None),
    "av1": ("libsvtav1", "av1", 30, 2, 12),  # LeRobot 0.6.1's recording defaults: libsvtav1, g=2, crf=30, preset 12
}

# what the frames show (besides the barcode): "stripes" (smooth moving colour stripes: cheap to encode, ~4 KB per
# frame at 480x640 in av1 crf 30) or "camera" (a textured workspace with moving objects, camera pan, flicker and
# sensor noise: ~35 KB per frame there, about what a real robot camera costs)
CONTENTS = ("stripes", "camera")


@dataclass(frozen=True)
class Camera:
    key: str
    height: int
    width: int


@dataclass(frozen=True)
class SynthConfig:
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

    @property
    def encoder(self) -> str:
        return CODECS[self.codec][0]

    @property
    def effective_gop(self) -> int:
        return self.gop if self.gop is not None else CODECS[self.codec][3]

    @property
    def effective_crf(self) -> int:
        return self.crf if self.crf is not None else CODECS[self.codec][2]

    @property
    def effective_preset(self) -> str | int | None:
        return self.preset if self.preset is not None else CODECS[self.codec][4]


def episode_lengths(cfg: SynthConfig) -> np.ndarray:
    return np.random.default_rng(cfg.seed).integers(cfg.length_min, cfg.length_max + 1, size=cfg.episodes)


def camera_keys(cfg: SynthConfig) -> list[str]:
    """Camera keys in barcode camera-index order (sorted, like `format.video_keys`)."""
    return sorted(c.key for c in cfg.cameras)


# ---------------------------------------------------------------------------------------------------- video
def render_frames(
    cam: Camera,
    camera_index: int,
    episode: int,
    length: int,
    noise: int = 0,
    *,
    content: str = "stripes",
    seed: int = 0,
) -> np.ndarray:
    """(T, H, W, 3) uint8: the `content` (see CONTENTS), `noise` (fixed per pixel, seeded by episode and camera),
    plus the barcode. "stripes" is moving colour stripes (so the encoder has some work); it ignores `seed`.
    "camera" is a workspace scene (see `_render_camera`), seeded by `seed`, episode and camera."""
    if content == "camera":
        return _render_camera(cam, camera_index, episode, length, noise, seed)
    if content != "stripes":
        raise ValueError(f"unknown content {content!r}; choose one of {list(CONTENTS)}")
    t = np.arange(length, dtype=np.float32)[:, None, None]
    y = np.arange(cam.height, dtype=np.float32)[None, :, None]
    x = np.arange(cam.width, dtype=np.float32)[None, None, :]
    phase = (episode * 0.7 + camera_index * 1.3) % (2 * np.pi)
    chans = [128 + 90 * np.sin((x + 0.5 * y + 3.0 * t) / (7.0 + k) + phase + k) for k in range(3)]
    frames = np.stack(chans, axis=-1)
    if noise:
        rng = np.random.default_rng([episode, camera_index])
        frames += rng.integers(-noise, noise + 1, size=frames.shape, dtype=np.int16)
    frames = frames.clip(0, 255).astype(np.uint8)
    for i in range(length):
        barcode.paint(frames[i], episode, i, camera_index)
    return frames


# ---------------------------------------------------------------------------------------------------- camera content
# A fixed camera filming a workspace: a textured static background (wall and table, clutter on the table), an arm
# and a few objects moving smoothly, a slow pan of the whole view, lighting flicker, and fresh sensor noise every
# frame. Everything per episode is drawn once (background, sprites, trajectories, a pool of noise); each frame is a
# crop of the background, a few sprite pastes, and two in-place uint8 additions (flicker, noise). Those additions
# cannot overflow: everything drawn stays within [_LO, _HI], which leaves room for both.
CAMERA_SENSOR_SIGMA = 2.5  # grey levels of per-frame sensor noise (Gaussian, cut at +/- _NOISE_MAX)
CAMERA_FLICKER = 4  # grey levels of lighting flicker (a global brightness change from frame to frame)
CAMERA_TEXTURE = 12  # grey levels (std) of the texture on the background and the objects
CAMERA_FINE = 0.8  # per-pixel detail in that texture, relative to the smooth part
_NOISE_MAX = 8
_LO, _HI = _NOISE_MAX + CAMERA_FLICKER + 2, 255 - _NOISE_MAX - CAMERA_FLICKER - 2


def _gauss_matrix(pos: np.ndarray, m: int) -> np.ndarray:
    """(len(pos), m) float32: smooth (Gaussian-weighted) interpolation of a grid of m points at grid coordinates
    `pos`."""
    w = np.exp(-0.5 * ((pos[:, None] - np.arange(m, dtype=np.float32)[None, :]) / 0.7) ** 2)
    return (w / w.sum(axis=1, keepdims=True)).astype(np.float32)


def _grid_size(n: int, scale: float) -> int:
    return int(n / scale) + 4


def _to_pixels(n: int, scale: float) -> np.ndarray:
    """(n, grid) interpolation from a grid of one point per `scale` px (plus a border) to n px."""
    return _gauss_matrix((np.arange(n, dtype=np.float32) + 0.5) / scale + 1.5, _grid_size(n, scale))


def _smooth_noise(rng: np.random.Generator, h: int, w: int, scale_y: float, scale_x: float | None = None) -> np.ndarray:
    """(h, w) float32 noise of unit std with features about `scale` px across (anisotropic with scale_x)."""
    scale_x = scale_y if scale_x is None else scale_x
    ay, ax = _to_pixels(h, scale_y), _to_pixels(w, scale_x)
    out = ay @ rng.standard_normal((ay.shape[1], ax.shape[1]), dtype=np.float32) @ ax.T
    return (out - out.mean()) / (out.std() + 1e-6)


def _texture(rng: np.random.Generator, h: int, w: int, fine: float, beta: float = 0.7) -> np.ndarray:
    """(h, w) float32 multi-scale texture of unit std, octaves from 96 px down to 3 px weighted like natural images
    (amplitude ~ scale**beta), plus `fine` times per-pixel detail (what makes an encoder spend bits). Built as a
    pyramid on the grids, so only the last step works at full size."""
    scales = (96, 48, 24, 12, 6, 3)
    grid = None
    for scale in scales:
        gh, gw = _grid_size(h, scale), _grid_size(w, scale)
        octave = (scale / scales[0]) ** beta * rng.standard_normal((gh, gw), dtype=np.float32)
        if grid is None:
            grid = octave
        else:  # the coarser grid (2 * scale) resampled to this one: grid point j lies at coarse (j - 1.5) / 2 + 1.5
            up_y = _gauss_matrix((np.arange(gh, dtype=np.float32) - 1.5) / 2 + 1.5, grid.shape[0])
            up_x = _gauss_matrix((np.arange(gw, dtype=np.float32) - 1.5) / 2 + 1.5, grid.shape[1])
            grid = up_y @ grid @ up_x.T + octave
    out = _to_pixels(h, scales[-1]) @ grid @ _to_pixels(w, scales[-1]).T
    out = (out - out.mean()) / (out.std() + 1e-6)
    out += fine * rng.standard_normal((h, w), dtype=np.float32)
    return out


def _camera_background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """(h, w, 3) uint8 static scene: a wall above a table at a random height, textured, lit unevenly, with clutter."""
    s = min(h, w)
    yy = np.arange(h, dtype=np.float32)[:, None]
    horizon = int(h * rng.uniform(0.25, 0.45))
    img = np.empty((h, w, 3), np.float32)
    img[:horizon] = rng.uniform(90, 200, 3)  # wall
    img[horizon:] = rng.uniform(60, 170, 3) * np.array([1.1, 0.95, 0.8])  # a warm table top
    # texture: plaster on the wall; on the table the same plus wood grain (stretched along x)
    tex = CAMERA_TEXTURE * _texture(rng, h, w, fine=CAMERA_FINE)
    tex[horizon:] += 10 * _smooth_noise(rng, h - horizon, w, 1.5, 40.0)
    img += tex[..., None] * rng.uniform(0.8, 1.2, 3).astype(np.float32)
    # uneven lighting: a broad bright spot and a vertical falloff
    light = 1.0 + 0.18 * _smooth_noise(rng, h, w, s / 3) - 0.15 * (yy / h - 0.5)
    img *= light[..., None]
    # clutter that stays put: boxes and round things, mostly on the table
    for _ in range(int(rng.integers(8, 16))):
        bh, bw = (rng.uniform(0.04, 0.22, 2) * s).astype(int) + 2
        y0 = int(rng.integers(max(0, horizon - bh // 2), max(horizon - bh // 2 + 1, h - bh)))
        x0 = int(rng.integers(0, max(1, w - bw)))
        patch = img[y0 : y0 + bh, x0 : x0 + bw]
        pix, mask = _sprite(rng, *patch.shape[:2], round_=bool(rng.random() < 0.5), dtype=np.float32)
        np.copyto(patch, pix, where=mask[..., None])
    # thin dark cables: smooth curves across the table
    x = np.arange(w)
    for _ in range(int(rng.integers(2, 5))):
        y = (rng.uniform(horizon, h) + 0.08 * h * _smooth_noise(rng, 1, w, 1, w / 4)[0]).astype(int)
        for dy in range(max(1, s // 160) + 1):
            ok = (y + dy >= 0) & (y + dy < h)
            img[(y + dy)[ok], x[ok]] = rng.uniform(10, 50)
    return img.clip(_LO, _HI).astype(np.uint8)


def _sprite(rng: np.random.Generator, h: int, w: int, round_: bool, dtype=np.uint8) -> tuple[np.ndarray, np.ndarray]:
    """A textured, shaded object: (h, w, 3) pixels and an (h, w) bool mask (an ellipse if `round_`, else all)."""
    colour = rng.uniform(30, 230, 3).astype(np.float32)
    yy = (np.arange(h, dtype=np.float32)[:, None] - (h - 1) / 2) / (h / 2)
    xx = (np.arange(w, dtype=np.float32)[None] - (w - 1) / 2) / (w / 2)
    mask = (yy**2 + xx**2 < 1) if round_ else np.ones((h, w), bool)
    shade = 1.1 - 0.3 * (yy + 0.5 * xx) - (0.25 * (yy**2 + xx**2) if round_ else 0)
    pix = colour * shade[..., None] + CAMERA_TEXTURE * _texture(rng, h, w, fine=CAMERA_FINE)[..., None]
    if not round_:  # a lit top edge and a printed label
        pix[: max(1, h // 12)] *= 1.25
        pix[h // 3 : h // 3 + max(1, h // 5), w // 5 : w - w // 5] = rng.uniform(0, 255, 3)
    if dtype == np.float32:
        return pix, mask
    return pix.clip(_LO, _HI).astype(np.uint8), mask


def _arm_sprite(rng: np.random.Generator, length: int, width: int) -> np.ndarray:
    """A horizontal arm link (width x length x 3 uint8) shaded like a cylinder, with a few seams."""
    colour = rng.uniform(50, 210, 3).astype(np.float32)
    v = (np.arange(width, dtype=np.float32) - (width - 1) / 2) / (width / 2)
    shade = (1.15 - 0.55 * v**2 - 0.2 * v)[:, None] * np.ones((1, length), np.float32)
    pix = colour * shade[..., None] + 5 * _texture(rng, width, length, fine=0.4)[..., None]
    for x in rng.integers(width, max(width + 1, length - width), 3):
        pix[:, x : x + 2] *= 0.6
    return pix.clip(_LO, _HI).astype(np.uint8)


def _pack(pix: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 -> (H * W,) uint32 (one pixel per word, so that a lookup moves whole pixels)."""
    h, w = pix.shape[:2]
    return np.concatenate([pix, np.zeros((h, w, 1), np.uint8)], axis=-1).reshape(-1).view(np.uint32)


def _paste_rotated(frame: np.ndarray, packed: np.ndarray, h: int, w: int, angle: float, y: float, x: float):
    """Paste a link sprite (h x w, `_pack`ed), turned by `angle` (radians, clockwise on screen) about the middle of
    its left end, with that point at (y, x) of the frame: nearest-neighbour lookup from the frame's pixels back into
    the sprite, in fixed point over the clipped bounding box. Returns the frame position of the middle of its right
    end."""
    fh, fw = frame.shape[:2]
    c, s = float(np.cos(angle)), float(np.sin(angle))
    py = h / 2
    # bounding box of the turned sprite in frame pixels, clipped to the frame
    cy, cx = np.array([0, 0, h, h]) - py, np.array([0, w, 0, w])
    ry, rx = cy * c + cx * s + y, -cy * s + cx * c + x
    y0, y1 = max(int(np.floor(ry.min())), 0), min(int(np.ceil(ry.max())) + 1, fh)
    x0, x1 = max(int(np.floor(rx.min())), 0), min(int(np.ceil(rx.max())) + 1, fw)
    end = (y + w * s, x + w * c)
    if y0 >= y1 or x0 >= x1:
        return end
    # sprite coordinates of each frame pixel (dy, dx from the pivot): sy = dy c - dx s + py, sx = dy s + dx c
    dy = np.arange(y0, y1, dtype=np.float64) + 0.5 - y
    dx = np.arange(x0, x1, dtype=np.float64) + 0.5 - x
    sy = np.floor((dy * c + py) * 256).astype(np.int32)[:, None] + np.floor(-dx * s * 256).astype(np.int32)[None]
    sx = np.floor(dy * s * 256).astype(np.int32)[:, None] + np.floor(dx * c * 256).astype(np.int32)[None]
    sy >>= 8
    sx >>= 8
    inside = (sy.view(np.uint32) < h) & (sx.view(np.uint32) < w)
    sy *= w
    sy += sx
    sy[~inside] = 0
    pixels = np.take(packed, sy).view(np.uint8).reshape(y1 - y0, x1 - x0, 4)[..., :3]
    np.copyto(frame[y0:y1, x0:x1], pixels, where=np.repeat(inside[..., None], 3, axis=-1))
    return end


def _paste(frame: np.ndarray, pix: np.ndarray, mask3: np.ndarray, y: int, x: int) -> None:
    """Paste a sprite (H, W, 3) where `mask3` (H, W, 3) is set, with its top-left at (y, x), clipped to the frame."""
    h, w = frame.shape[:2]
    sh, sw = mask3.shape[:2]
    fy0, fx0, fy1, fx1 = max(y, 0), max(x, 0), min(y + sh, h), min(x + sw, w)
    if fy0 >= fy1 or fx0 >= fx1:
        return
    np.copyto(
        frame[fy0:fy1, fx0:fx1],
        pix[fy0 - y : fy1 - y, fx0 - x : fx1 - x],
        where=mask3[fy0 - y : fy1 - y, fx0 - x : fx1 - x],
    )


def _smooth_path(rng: np.random.Generator, length: int, amplitude: float, period_frames: float) -> np.ndarray:
    """(length,) float: a smooth wandering path (two sinusoids) around 0 within +/- amplitude."""
    t = np.arange(length, dtype=np.float64)
    f = rng.uniform(0.6, 1.4, 2) * 2 * np.pi / period_frames
    ph = rng.uniform(0, 2 * np.pi, 2)
    return amplitude * (0.7 * np.sin(f[0] * t + ph[0]) + 0.3 * np.sin(2.3 * f[1] * t + ph[1]))


def _sensor_noise_pool(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n,) uint8: Gaussian noise (sigma CAMERA_SENSOR_SIGMA, cut at +/- _NOISE_MAX) as two's complement bytes, so
    that adding it to uint8 pixels (wrapping) adds or subtracts."""
    dist = statistics.NormalDist(0.0, CAMERA_SENSOR_SIGMA)
    inv_cdf = np.array([dist.inv_cdf((b + 0.5) / 256) for b in range(256)])
    table = inv_cdf.round().clip(-_NOISE_MAX, _NOISE_MAX).astype(np.int8).view(np.uint8)
    return table[rng.integers(0, 256, size=n, dtype=np.uint8)]


def _render_camera(cam: Camera, camera_index: int, episode: int, length: int, noise: int, seed: int) -> np.ndarray:
    h, w = cam.height, cam.width
    s = min(h, w)
    rng = np.random.default_rng([seed, episode, camera_index, 0xCA3E])
    # the background is larger than the view by the pan margin
    my, mx = max(2, h // 24), max(2, w // 24)
    bg = _camera_background(rng, h + 2 * my, w + 2 * mx)
    pan_y = my + np.round(_smooth_path(rng, length, my, 150)).astype(int).clip(-my, my)
    pan_x = mx + np.round(_smooth_path(rng, length, mx, 200)).astype(int).clip(-mx, mx)
    # objects on the table, pushed around slowly
    objects = []
    for _ in range(int(rng.integers(2, 5))):
        oh, ow = (rng.uniform(0.08, 0.2, 2) * s).astype(int) + 4
        pix, mask = _sprite(rng, oh, ow, round_=bool(rng.random() < 0.5))
        mask = np.repeat(mask[..., None], 3, axis=-1)
        top = rng.uniform(0.5, 0.85) * h + _smooth_path(rng, length, 0.08 * h, 90) - oh / 2
        left = rng.uniform(0.15, 0.85) * w + _smooth_path(rng, length, 0.15 * w, 120) - ow / 2
        objects.append((pix, mask, top.round().astype(int), left.round().astype(int)))
    # a two-link arm reaching in from the bottom edge, with a gripper
    base = (h * rng.uniform(1.0, 1.1), w * rng.uniform(0.3, 0.7))
    links = []
    for k, (frac, wid) in enumerate(((0.55, 0.11), (0.45, 0.08))):
        pix = _arm_sprite(rng, max(4, int(frac * h)), max(3, int(wid * s)))
        centre = -np.pi / 2 + (rng.uniform(-0.5, 0.5) if k == 0 else rng.uniform(-1.0, 1.0))
        links.append((_pack(pix), *pix.shape[:2], centre + _smooth_path(rng, length, 0.45 if k == 0 else 0.7, 70)))
    grip_pix, grip_mask = _sprite(rng, max(3, int(0.1 * s)), max(3, int(0.14 * s)), round_=False)
    grip_mask = np.repeat(grip_mask[..., None], 3, axis=-1)
    # flicker: a per-frame brightness offset (two's complement bytes, like the noise)
    flicker = CAMERA_FLICKER * (
        0.8 * np.sin(2 * np.pi * np.arange(length) / rng.uniform(6, 14) + rng.uniform(0, 6.3))
        + 0.2 * rng.uniform(-1, 1, length)
    )
    flicker = flicker.round().clip(-CAMERA_FLICKER, CAMERA_FLICKER).astype(np.int8).view(np.uint8)
    # fresh sensor noise every frame: a slice of a pool at a random offset (drawing it anew would cost more than all
    # the rest of a frame)
    n = h * w * 3
    pool = _sensor_noise_pool(rng, 2 * n)
    offsets = rng.integers(0, n, size=length)
    fixed = (
        np.random.default_rng([episode, camera_index]).integers(-noise, noise + 1, size=(h, w, 3), dtype=np.int16)
        if noise
        else None
    )

    frames = np.empty((length, h, w, 3), np.uint8)
    for i in range(length):
        frame = frames[i]
        shift_y, shift_x = pan_y[i] - my, pan_x[i] - mx  # the view moves by this; the world, the other way
        np.copyto(frame, bg[pan_y[i] : pan_y[i] + h, pan_x[i] : pan_x[i] + w])
        for pix, mask, top, left in objects:
            _paste(frame, pix, mask, top[i] - shift_y, left[i] - shift_x)
        joint = (base[0] - shift_y, base[1] - shift_x)
        for packed, lh, lw, angle in links:
            joint = _paste_rotated(frame, packed, lh, lw, angle[i], *joint)
        gh, gw = grip_mask.shape[:2]
        _paste(frame, grip_pix, grip_mask, int(joint[0]) - gh // 2, int(joint[1]) - gw // 2)
        np.add(frame, flicker[i], out=frame)  # wraps like int8 arithmetic; stays within 0..255 (see _LO, _HI)
        np.add(frame, pool[offsets[i] : offsets[i] + n].reshape(h, w, 3), out=frame)
        if fixed is not None:
            frame[...] = (frame + fixed).clip(0, 255)
        barcode.paint(frame, episode, i, camera_index)
    return frames


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
            f"codec {codec!r} needs the FFmpeg encoder {CODECS[codec][0]}, which this FFmpeg cannot use; "
            f"codecs that work here: {available or 'none (is FFmpeg installed? run scripts/install-system-deps.sh)'}"
        )


# ---------------------------------------------------------------------------------------------------- data
def _features(cfg: SynthConfig) -> dict:
    feats = {
        "observation.state": {
            "dtype": "float32",
            "shape": [cfg.state_dim],
            "names": [f"joint_{i}" for i in range(cfg.state_dim)],
        },
        "action": {
            "dtype": "float32",
            "shape": [cfg.action_dim],
            "names": [f"joint_{i}" for i in range(cfg.action_dim)],
        },
    }
    for cam in sorted(cfg.cameras, key=lambda c: c.key):
        feats[cam.key] = {
            "dtype": "video",
            "shape": [cam.height, cam.width, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.fps": float(cfg.fps),
                "video.height": cam.height,
                "video.width": cam.width,
                "video.channels": 3,
                "video.codec": CODECS[cfg.codec][1],
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "has_audio": False,
            },
        }
    for name, dtype in (
        ("timestamp", "float32"),
        ("frame_index", "int64"),
        ("episode_index", "int64"),
        ("index", "int64"),
        ("task_index", "int64"),
    ):
        feats[name] = {"dtype": dtype, "shape": [1], "names": None}
    return feats


def _arrow_schema(cfg: SynthConfig) -> pa.Schema:
    from datasets import Features, List, Value

    return Features(
        {
            "observation.state": List(Value("float32"), length=cfg.state_dim),
            "action": List(Value("float32"), length=cfg.action_dim),
            "timestamp": Value("float32"),
            "frame_index": Value("int64"),
            "episode_index": Value("int64"),
            "index": Value("int64"),
            "task_index": Value("int64"),
        }
    ).arrow_schema


def _vector_stats(x: np.ndarray) -> dict:
    """min/max/mean/std/count over axis 0 of (N, D)."""
    x = x.astype(np.float64)
    return {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0), "count": [len(x)]}


def _image_stats(frames_thwc: np.ndarray) -> dict:
    """Per-channel stats of frames scaled to [0, 1], shaped (3, 1, 1) as LeRobot stores them."""
    f = frames_thwc.reshape(-1, 3).astype(np.float64) / 255.0
    shape = lambda v: np.asarray(v).reshape(3, 1, 1)  # noqa: E731
    return {
        "min": shape(f.min(0)),
        "max": shape(f.max(0)),
        "mean": shape(f.mean(0)),
        "std": shape(f.std(0)),
        "count": [len(frames_thwc)],
    }


def _write_episode(cfg: SynthConfig, root: Path, episode: int, length: int, start_index: int, task_index: int) -> dict:
    """Write one episode's parquet and videos; return its stats (JSON-ready)."""
    rng = np.random.default_rng([cfg.seed, episode])
    state = np.cumsum(rng.normal(0, 0.05, size=(length, cfg.state_dim)), axis=0).astype(np.float32)
    action = (
        np.roll(state, -1, axis=0)[:, : cfg.action_dim]
        if cfg.action_dim <= cfg.state_dim
        else rng.normal(0, 0.05, size=(length, cfg.action_dim))
    ).astype(np.float32)
    action += rng.normal(0, 0.01, size=action.shape).astype(np.float32)
    frame_index = np.arange(length, dtype=np.int64)
    columns = {
        "observation.state": state,
        "action": action,
        "timestamp": (frame_index / cfg.fps).astype(np.float32),
        "frame_index": frame_index,
        "episode_index": np.full(length, episode, np.int64),
        "index": start_index + frame_index,
        "task_index": np.full(length, task_index, np.int64),
    }
    schema = _arrow_schema(cfg)
    arrays = []
    for fld in schema:
        col = columns[fld.name]
        if col.ndim == 2:
            arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(col.reshape(-1)), col.shape[1]))
        else:
            arrays.append(pa.array(col))
    table = pa.Table.from_arrays(arrays, schema=schema)
    meta.write_parquet(root / paths.v21_data_path(episode, cfg.chunks_size), table)

    stats = {k: _vector_stats(columns[k]) for k in ("observation.state", "action")}
    for k in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        stats[k] = _vector_stats(columns[k].reshape(-1, 1))
    for cam_index, key in enumerate(camera_keys(cfg)):
        cam = next(c for c in cfg.cameras if c.key == key)
        frames = render_frames(cam, cam_index, episode, length, cfg.noise, content=cfg.content, seed=cfg.seed)
        encode_video(frames, root / paths.v21_video_path(episode, key, cfg.chunks_size), cfg)
        stats[key] = _image_stats(frames)
    return meta.to_jsonable(stats)


def _episode_job(args):
    return _write_episode(*args)


def synthesize(
    cfg: SynthConfig, out_dir: str | Path, overwrite: bool = False, workers: int | None = None, progress: bool = True
) -> Path:
    """Write a v2.1 dataset to `out_dir`, published with one rename when complete.

    Refuses a non-empty `out_dir` unless `overwrite`; with `overwrite` the old content is replaced only after the
    new dataset is complete.
    """
    cfg.validate()
    check_encoder(cfg.codec)
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not overwrite:
        raise UserError(f"{out_dir} is not empty; choose an empty directory or pass --overwrite")
    lengths = episode_lengths(cfg)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    task_rng = np.random.default_rng([cfg.seed, 1_000_003])
    task_of = task_rng.integers(0, cfg.tasks, size=cfg.episodes)
    tasks = [f"synthetic task {i}: move the block to target {i}" for i in range(cfg.tasks)]
    info = {
        "codebase_version": paths.V21,
        "robot_type": cfg.robot_type,
        "total_episodes": cfg.episodes,
        "total_frames": int(lengths.sum()),
        "total_tasks": cfg.tasks,
        "total_videos": cfg.episodes * len(cfg.cameras),
        "total_chunks": (cfg.episodes - 1) // cfg.chunks_size + 1,
        "chunks_size": cfg.chunks_size,
        "fps": cfg.fps,
        "splits": {"train": f"0:{cfg.episodes}"},
        "data_path": paths.V21_DATA_PATH,
        "video_path": paths.V21_VIDEO_PATH,
        "features": _features(cfg),
    }
    workers = workers or os.cpu_count() or 1
    with atomic.directory(out_dir, replace=overwrite) as tmp:
        jobs = [(cfg, tmp, ep, int(lengths[ep]), int(starts[ep]), int(task_of[ep])) for ep in range(cfg.episodes)]
        if workers > 1 and cfg.episodes > 1:
            # spawn: FFmpeg encoder threads started in this process (the probe) do not survive a fork
            with ProcessPoolExecutor(
                min(workers, cfg.episodes), mp_context=multiprocessing.get_context("spawn")
            ) as pool:
                stats = list(_progress(pool.map(_episode_job, jobs), cfg.episodes, progress))
        else:
            stats = list(_progress(map(_episode_job, jobs), cfg.episodes, progress))
        episodes = [
            {"episode_index": ep, "tasks": [tasks[task_of[ep]]], "length": int(lengths[ep])}
            for ep in range(cfg.episodes)
        ]
        ep_stats = [{"episode_index": ep, "stats": s} for ep, s in enumerate(stats)]
        meta.write_v21_meta(tmp, info, episodes, tasks, ep_stats)
    return out_dir


def _progress(it, total, enabled):
    if not enabled:
        return it
    from tqdm import tqdm

    return tqdm(it, total=total, desc="synth episodes", unit="ep", mininterval=1.0)
