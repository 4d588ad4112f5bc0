"""What the frames show: moving colour stripes or a camera-like workspace scene, each frame with its barcode."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from .. import barcode
from .spec import CONTENTS, Camera


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
    "camera" is a workspace scene (see `_render_camera`), seeded by `seed`, episode and camera; "phases" is one
    scene for every episode, whose frame at time t shows the task's phase t / length (as the phases of one task
    look alike across its episodes), seeded by `seed` and camera, with the sensor noise and a small pan each
    episode's own."""
    if content in ("camera", "phases"):
        return _render_camera(cam, camera_index, episode, length, noise, seed, phases=content == "phases")
    if content != "stripes":
        raise ValueError(f"unknown content {content!r}; choose one of {list(CONTENTS)}")
    t = np.arange(length, dtype=np.float32)[:, None, None]
    y = np.arange(cam.height, dtype=np.float32)[None, :, None]
    x = np.arange(cam.width, dtype=np.float32)[None, None, :]
    phase = (episode * 0.7 + camera_index * 1.3) % (2 * np.pi)
    chans = [128 + 90 * np.sin((x + 0.5 * y + 3.0 * t) / (7.0 + k) + phase + k) for k in range(3)]
    frames = np.stack(chans, axis=-1)
    if noise:
        frames += _pixel_noise(episode, camera_index, noise, frames.shape)
    frames = frames.clip(0, 255).astype(np.uint8)
    for i in range(length):
        barcode.paint(frames[i], episode, i, camera_index)
    return frames


def _pixel_noise(episode: int, camera_index: int, noise: int, shape: tuple[int, ...]) -> np.ndarray:
    """int16 noise uniform in [-noise, noise], seeded by episode and camera only."""
    return np.random.default_rng([episode, camera_index]).integers(-noise, noise + 1, size=shape, dtype=np.int16)


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


@dataclass(frozen=True)
class _Scene:
    """One episode of camera content, drawn once; `paint` composes frame i of it."""

    background: np.ndarray  # larger than the view by `margin` on every side, so that the view can pan
    margin: tuple[int, int]
    pan_y: np.ndarray  # per frame: the view's top-left in the background
    pan_x: np.ndarray
    objects: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]  # pixels, mask, top and left per frame
    arm_base: tuple[float, float]
    links: list[tuple[np.ndarray, int, int, np.ndarray]]  # packed pixels, height, width, angle per frame
    gripper: tuple[np.ndarray, np.ndarray]  # pixels, mask
    flicker: np.ndarray  # per frame, as two's complement bytes
    noise_pool: np.ndarray  # see `_sensor_noise_pool`
    noise_offsets: np.ndarray  # per frame: where its sensor noise starts in the pool

    def paint(self, frame: np.ndarray, i: int) -> None:
        h, w = frame.shape[:2]
        my, mx = self.margin
        top, left = self.pan_y[i], self.pan_x[i]
        shift_y, shift_x = top - my, left - mx  # the view moves by this; the world, the other way
        np.copyto(frame, self.background[top : top + h, left : left + w])
        for pix, mask, obj_top, obj_left in self.objects:
            _paste(frame, pix, mask, obj_top[i] - shift_y, obj_left[i] - shift_x)
        joint = (self.arm_base[0] - shift_y, self.arm_base[1] - shift_x)
        for packed, lh, lw, angle in self.links:
            joint = _paste_rotated(frame, packed, lh, lw, angle[i], *joint)
        grip_pix, grip_mask = self.gripper
        gh, gw = grip_mask.shape[:2]
        _paste(frame, grip_pix, grip_mask, int(joint[0]) - gh // 2, int(joint[1]) - gw // 2)
        np.add(frame, self.flicker[i], out=frame)  # wraps like int8 arithmetic; stays within 0..255 (see _LO, _HI)
        n = frame.size
        np.add(frame, self.noise_pool[self.noise_offsets[i] : self.noise_offsets[i] + n].reshape(h, w, 3), out=frame)


def _moving_objects(rng: np.random.Generator, h: int, w: int, length: int) -> list:
    """Objects on the table, pushed around slowly: (pixels, mask, top per frame, left per frame) each."""
    s = min(h, w)
    objects = []
    for _ in range(int(rng.integers(2, 5))):
        oh, ow = (rng.uniform(0.08, 0.2, 2) * s).astype(int) + 4
        pix, mask = _sprite(rng, oh, ow, round_=bool(rng.random() < 0.5))
        mask = np.repeat(mask[..., None], 3, axis=-1)
        top = rng.uniform(0.5, 0.85) * h + _smooth_path(rng, length, 0.08 * h, 90) - oh / 2
        left = rng.uniform(0.15, 0.85) * w + _smooth_path(rng, length, 0.15 * w, 120) - ow / 2
        objects.append((pix, mask, top.round().astype(int), left.round().astype(int)))
    return objects


def _arm(rng: np.random.Generator, h: int, w: int, length: int) -> tuple:
    """A two-link arm reaching in from the bottom edge, with a gripper: (base, links, (gripper pixels, mask))."""
    s = min(h, w)
    base = (h * rng.uniform(1.0, 1.1), w * rng.uniform(0.3, 0.7))
    links = []
    for k, (frac, wid) in enumerate(((0.55, 0.11), (0.45, 0.08))):
        pix = _arm_sprite(rng, max(4, int(frac * h)), max(3, int(wid * s)))
        centre = -np.pi / 2 + (rng.uniform(-0.5, 0.5) if k == 0 else rng.uniform(-1.0, 1.0))
        links.append((_pack(pix), *pix.shape[:2], centre + _smooth_path(rng, length, 0.45 if k == 0 else 0.7, 70)))
    grip_pix, grip_mask = _sprite(rng, max(3, int(0.1 * s)), max(3, int(0.14 * s)), round_=False)
    return base, links, (grip_pix, np.repeat(grip_mask[..., None], 3, axis=-1))


def _flicker(rng: np.random.Generator, length: int) -> np.ndarray:
    """(length,) uint8: a per-frame brightness offset as two's complement bytes, like the sensor noise."""
    flicker = CAMERA_FLICKER * (
        0.8 * np.sin(2 * np.pi * np.arange(length) / rng.uniform(6, 14) + rng.uniform(0, 6.3))
        + 0.2 * rng.uniform(-1, 1, length)
    )
    return flicker.round().clip(-CAMERA_FLICKER, CAMERA_FLICKER).astype(np.int8).view(np.uint8)


def _draw_scene(rng: np.random.Generator, h: int, w: int, length: int) -> _Scene:
    """Everything random in an episode of an h x w camera, in a fixed order (the order of the draws is the output)."""
    my, mx = max(2, h // 24), max(2, w // 24)
    background = _camera_background(rng, h + 2 * my, w + 2 * mx)
    pan_y = my + np.round(_smooth_path(rng, length, my, 150)).astype(int).clip(-my, my)
    pan_x = mx + np.round(_smooth_path(rng, length, mx, 200)).astype(int).clip(-mx, mx)
    objects = _moving_objects(rng, h, w, length)
    base, links, gripper = _arm(rng, h, w, length)
    flicker = _flicker(rng, length)
    # fresh sensor noise every frame: a slice of a pool at a random offset (drawing it anew would cost more than all
    # the rest of a frame)
    n = h * w * 3
    pool = _sensor_noise_pool(rng, 2 * n)
    offsets = rng.integers(0, n, size=length)
    return _Scene(background, (my, mx), pan_y, pan_x, objects, base, links, gripper, flicker, pool, offsets)


PHASE_FRAMES = 600  # "phases": the shared scene's frames, which an episode of any length samples in its own time


def _render_camera(
    cam: Camera, camera_index: int, episode: int, length: int, noise: int, seed: int, phases: bool = False
) -> np.ndarray:
    """(T, H, W, 3) uint8: a scene drawn once (see `_draw_scene`) painted frame by frame, plus `noise` and barcodes.
    `phases`: one scene of PHASE_FRAMES for every episode (its seed leaves the episode out), frame i of an episode
    painting the scene's frame at the same share of its time; the episode's own sensor noise and pan offsets."""
    if phases:
        scene = _draw_scene(np.random.default_rng([seed, camera_index, 0xFA5E]), cam.height, cam.width, PHASE_FRAMES)
        own = _draw_scene(np.random.default_rng([seed, episode, camera_index, 0xCA3E]), cam.height, cam.width, length)
        at = np.round(np.arange(length) * (PHASE_FRAMES - 1) / max(length - 1, 1)).astype(int)
        scene = _Scene(
            **{**scene.__dict__, "pan_y": scene.pan_y[at], "pan_x": scene.pan_x[at], "flicker": own.flicker,
               "noise_pool": own.noise_pool, "noise_offsets": own.noise_offsets,
               "objects": [(p, m, top[at], left[at]) for p, m, top, left in scene.objects],
               "links": [(p, h, w, a[at]) for p, h, w, a in scene.links]}
        )  # fmt: skip
    else:
        scene = _draw_scene(np.random.default_rng([seed, episode, camera_index, 0xCA3E]), cam.height, cam.width, length)
    fixed = _pixel_noise(episode, camera_index, noise, (cam.height, cam.width, 3)) if noise else None
    frames = np.empty((length, cam.height, cam.width, 3), np.uint8)
    for i in range(length):
        scene.paint(frames[i], i)
        if fixed is not None:
            frames[i] = (frames[i] + fixed).clip(0, 255)
        barcode.paint(frames[i], episode, i, camera_index)
    return frames
