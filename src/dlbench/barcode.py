"""Ground truth painted into every synthetic frame, and read back from decoded frames.

Each frame carries (episode_index, frame_index, camera_index) as a 64-bit binary barcode: an 8x8 grid of black or
white square cells in the top-left corner. Lossy codecs shift flat grey levels and smear edges, but a cell's
centre stays clearly below or above mid-grey, so the value reads back exactly. A 14-bit check code catches a
frame that is wrong in a way that still looks like a barcode (for example a blend of two frames).

Bit layout (bit 0 first, row-major over the grid): episode 22 bits, frame 22 bits, camera 6 bits, check 14 bits.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

import numpy as np

GRID = 8
MIN_CELL_PX = 4
MAX_CELL_PX = 8
_FIELDS = (("episode", 22), ("frame", 22), ("camera", 6), ("check", 14))
MAX_EPISODE = (1 << 22) - 1
MAX_FRAME = (1 << 22) - 1
MAX_CAMERA = (1 << 6) - 1


class Barcode(NamedTuple):
    episode: int
    frame: int
    camera: int


def cell_px(height: int, width: int) -> int:
    """Cell size in pixels for a frame of this size (the barcode is GRID cells on a side)."""
    cell = min(MAX_CELL_PX, min(height, width) // GRID)
    if cell < MIN_CELL_PX:
        raise ValueError(
            f"frames of {height}x{width} are too small for a barcode; use at least {GRID * MIN_CELL_PX} px"
        )
    return cell


def _check(episode: int, frame: int, camera: int) -> int:
    """14 bits of CRC-32 over the three values: any single flipped cell changes it."""
    return zlib.crc32(struct.pack("<III", episode, frame, camera)) & 0x3FFF


def encode_bits(episode: int, frame: int, camera: int) -> np.ndarray:
    """The GRID x GRID bit matrix (bool) for one frame."""
    if not (0 <= episode <= MAX_EPISODE and 0 <= frame <= MAX_FRAME and 0 <= camera <= MAX_CAMERA):
        raise ValueError(f"barcode value out of range: episode={episode} frame={frame} camera={camera}")
    values = {"episode": episode, "frame": frame, "camera": camera, "check": _check(episode, frame, camera)}
    bits = []
    for name, width in _FIELDS:
        bits.extend((values[name] >> i) & 1 for i in range(width))
    return np.array(bits, dtype=bool).reshape(GRID, GRID)


def paint(frame_hwc: np.ndarray, episode: int, frame: int, camera: int) -> None:
    """Paint the barcode into an HWC uint8 frame in place (black = 0, white = 255)."""
    h, w = frame_hwc.shape[:2]
    c = cell_px(h, w)
    bits = encode_bits(episode, frame, camera)
    block = np.kron(bits, np.ones((c, c), dtype=bool))
    frame_hwc[: GRID * c, : GRID * c, :] = np.where(block, 255, 0)[..., None].astype(np.uint8)


def _decode_bits(bits: np.ndarray):
    """bits: (N, 64) bool -> (episode, frame, camera, valid) arrays."""
    weights_cache = {}
    out = {}
    pos = 0
    for name, width in _FIELDS:
        if width not in weights_cache:
            weights_cache[width] = (1 << np.arange(width, dtype=np.int64)).astype(np.int64)
        out[name] = bits[:, pos : pos + width].astype(np.int64) @ weights_cache[width]
        pos += width
    expected = np.array(
        [_check(int(e), int(f), int(c)) for e, f, c in zip(out["episode"], out["frame"], out["camera"])], dtype=np.int64
    )
    valid = out["check"] == expected
    return out["episode"], out["frame"], out["camera"], valid


def read_batch(frames, channels_last: bool = False):
    """Read the barcodes of a batch of frames.

    Args:
        frames: array or torch tensor, (N, C, H, W) (or (N, H, W, C) with `channels_last`), uint8 in [0, 255] or
            float in [0, 1].
    Returns:
        (episode, frame, camera, valid): int64 arrays of length N and a bool array; `valid` is False where the
        check code does not match (the frame is not an intact barcoded frame).
    """
    if hasattr(frames, "detach"):
        frames = frames.detach().cpu().numpy()
    frames = np.asarray(frames)
    if channels_last:
        frames = np.moveaxis(frames, -1, 1)
    n, channels, h, w = frames.shape
    c = cell_px(h, w)
    lo, hi = c // 4, c - c // 4
    # a few pixels spread over the centre half of every cell (strided views: only they are read), averaged
    offsets = range(lo, hi, max(1, (hi - lo) // 3))
    centres = sum(
        frames[:, :, dy : GRID * c : c, dx : GRID * c : c].astype(np.float32).sum(axis=1)
        for dy in offsets
        for dx in offsets
    ) / (channels * len(offsets) ** 2)
    if not np.issubdtype(frames.dtype, np.integer):
        centres = centres * 255.0
    bits = (centres > 127.5).reshape(n, GRID * GRID)
    return _decode_bits(bits)


def read(frame, channels_last: bool = False) -> Barcode | None:
    """Read one frame's barcode ((C, H, W) or (H, W, C)); None if it does not hold an intact barcode."""
    ep, fr, cam, valid = read_batch(
        np.asarray(frame)[None] if not hasattr(frame, "unsqueeze") else frame.unsqueeze(0), channels_last=channels_last
    )
    return Barcode(int(ep[0]), int(fr[0]), int(cam[0])) if valid[0] else None
