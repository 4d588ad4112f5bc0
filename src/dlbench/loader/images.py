"""Cameras stored as images: PNG (or JPEG) bytes in a struct column of the data files, as LeRobot writes a feature
of dtype "image". Each process reads a data file's image columns when an item first needs them and keeps them, up to
a byte budget, least recently used first out (`columns.HeldTables`): a streaming worker reads its pieces' files in
turn, a map-style worker the files its random rows fall in. Images are decoded with Pillow in the worker, as
LeRobot's datasets library decodes them, and come out as video frames do: uint8 (C, H, W) views of (H, W, C)
memory, so `collate`, the float conversion and image transforms treat both alike."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import torch

from ..errors import UserError
from .columns import HeldTables
from .dataset_meta import DatasetMeta

# a process's image columns held at once: a data file of 480x640 PNG frames is ~0.5 MB a row, so LeRobot's default
# 100 MB data file is ~200 rows; 256 MB holds a few such files without growing a worker past its decoders
IMAGE_TABLES_BYTES = 256 * 2**20


class ImageReader:
    """The image-stored cameras of a dataset, decoded by global row. Picklable: a worker reads its own tables."""

    def __init__(self, dmeta: DatasetMeta, max_bytes: int = IMAGE_TABLES_BYTES):
        self.dmeta, self.max_bytes = dmeta, max_bytes
        # each data file's first global row: its rows are the episodes it holds, back to back in `index` order
        first: dict[str, int] = {}
        for rel, start in zip(dmeta.data_file, dmeta.ep_from.tolist()):
            first[rel] = min(first.get(rel, start), start)
        self.file_first = first
        self.held: HeldTables | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "held": None}

    def _bytes_of(self, rel: str, cam: str) -> pa.Array:
        """The encoded images of `cam` in data file `rel`, one per row."""
        if self.held is None:
            self.held = HeldTables(self.max_bytes)
        table = self.held.get(self.dmeta, rel, self.dmeta.image_cameras)
        col = table.column(cam).combine_chunks()
        return col.field("bytes") if pa.types.is_struct(col.type) else col

    def frames(self, cam: str, rows: np.ndarray, eps: np.ndarray) -> torch.Tensor:
        """Camera `cam`'s images at global `rows` ((k, W): k items of W steps, each of episode `eps[i]`), as a uint8
        (k, W, C, H, W') view of (k, W, H, W', C) memory."""
        height, width, channels = _declared(self.dmeta, cam)
        out = np.empty((*rows.shape, height, width, channels), np.uint8)
        files = np.asarray(self.dmeta.data_file, dtype=object)[eps]
        for rel in dict.fromkeys(files.tolist()):
            mine = np.flatnonzero(files == rel)
            encoded = self._bytes_of(rel, cam)
            at = rows[mine] - self.file_first[rel]
            for item, positions in zip(mine.tolist(), at.tolist()):
                for step, pos in enumerate(positions):
                    out[item, step] = _decode(encoded[pos].as_py(), (height, width, channels), rel, cam, pos)
        return torch.from_numpy(out).permute(*range(rows.ndim), -1, -3, -2)


def _declared(dmeta: DatasetMeta, cam: str) -> tuple[int, int, int]:
    """(H, W, C) of an image feature, as info.json declares it (LeRobot writes [height, width, channels])."""
    shape = list(dmeta.info["features"][cam]["shape"])
    names = dmeta.info["features"][cam].get("names") or []
    if len(shape) == 3 and list(names)[:1] in (["channels"], ["channel"]):
        shape = [shape[1], shape[2], shape[0]]
    if len(shape) == 2:
        shape = [*shape, 1]
    if len(shape) != 3:
        raise UserError(f"{dmeta.root}/meta/info.json: image feature {cam!r} has shape {shape}; expected [H, W, C]")
    return int(shape[0]), int(shape[1]), int(shape[2])


def decode_image(data: bytes | None) -> np.ndarray:
    """Encoded image bytes (PNG, JPEG: what Pillow reads) as (H, W, C) uint8 pixels, as Pillow gives them (as
    LeRobot's datasets library decodes an image feature); ValueError or OSError where they do not decode."""
    from PIL import Image

    if data is None:
        raise ValueError("the row holds no image")
    with Image.open(io.BytesIO(data)) as img:
        arr = np.asarray(img)
    return arr[:, :, None] if arr.ndim == 2 else arr


def _decode(data: bytes | None, shape: tuple[int, int, int], rel: str, cam: str, pos: int) -> np.ndarray:
    """One encoded image as (H, W, C) uint8, checked against the declared shape."""
    from PIL import UnidentifiedImageError

    try:
        arr = decode_image(data)
    except (OSError, ValueError, UnidentifiedImageError) as e:
        raise UserError(
            f"{rel}: row {pos} of {cam!r} does not decode as an image ({e}); run `dlbench validate`"
        ) from None
    if arr.shape != shape or arr.dtype != np.uint8:
        raise UserError(
            f"{rel}: row {pos} of {cam!r} decodes to {arr.shape} {arr.dtype}, info.json declares {shape} uint8; "
            "run `dlbench validate`"
        )
    return arr
