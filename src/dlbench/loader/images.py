"""Cameras stored as images: PNG (or JPEG) bytes in a struct column of the data files, as LeRobot writes a feature
of dtype "image". Parquet cannot hand over one row's bytes without decoding the whole column chunk (a LeRobot data
file holds one row group per episode: an episode's images, tens to hundreds of MB), so the first process to need a
data file's images copies its image columns once into an uncompressed Arrow file in dlbench's cache (DLBENCH_CACHE,
else ~/.cache/dlbench, under images/), as LeRobot's datasets library keeps an Arrow copy of every table; every
process then memory-maps it and takes a row's bytes without a copy of the rest, the pages shared between workers
through the page cache. Images are decoded with Pillow in the worker, as the datasets library decodes them, and come
out as video frames do: uint8 (C, H, W) views of (H, W, C) memory, so `collate`, the float conversion and image
transforms treat both alike. Depth maps stored as images (16-bit TIFF, a feature marked `is_depth_map`) come out as
LeRobot gives them: float32 (1, H, W) in `depth_output_unit`, from the unit info.json records (`depth_unit`)."""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from .. import atomic
from ..errors import UserError
from ..format import paths
from .columns import read_table
from .dataset_meta import DatasetMeta

OPEN_FILES = 64  # memory-mapped Arrow copies a process keeps open (each a file handle and a mapping)


def cache_root() -> Path:
    return Path(os.environ.get("DLBENCH_CACHE") or Path.home() / ".cache" / "dlbench") / "images"


class ImageReader:
    """The image-stored cameras of a dataset, decoded by global row. Picklable: a worker maps its own files."""

    def __init__(self, dmeta: DatasetMeta, depth_unit: str = "mm"):
        self.dmeta, self.depth_unit = dmeta, depth_unit
        # each data file's first global row: its rows are the episodes it holds, back to back in `index` order
        first: dict[str, int] = {}
        for rel, start in zip(dmeta.data_file, dmeta.ep_from.tolist()):
            first[rel] = min(first.get(rel, start), start)
        self.file_first = first
        self.mapped: OrderedDict[str, pa.Table] = OrderedDict()
        self.copies = 0  # Arrow copies this process wrote (the others were there already)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "mapped": OrderedDict()}

    def arrow_copy(self, rel: str) -> Path:
        """The cache's Arrow copy of data file `rel`'s image columns, written first where it is missing. Keyed by
        the file's URL, size and modification time (or ETag), so a changed file gets a new copy."""
        import fsspec

        url = paths.join(self.dmeta.data_root, rel)
        fs, path = fsspec.core.url_to_fs(url)
        try:
            st = fs.info(path)
        except (OSError, ValueError) as e:
            raise UserError(f"{url}: cannot read the data file ({e}); run `dlbench validate`") from None
        stamp = st.get("mtime") or st.get("ETag") or st.get("LastModified") or st.get("last_modified")
        ident = json.dumps([url, st.get("size"), str(stamp), self.dmeta.image_cameras])
        target = cache_root() / f"{hashlib.sha256(ident.encode()).hexdigest()[:24]}.arrow"
        if not target.exists():
            table = read_table(self.dmeta, rel, list(self.dmeta.image_cameras))
            atomic.make_dir(target.parent)
            with atomic.file(target) as tmp, pa.OSFile(str(tmp), "wb") as sink:
                with pa.ipc.new_file(sink, table.schema) as writer:
                    writer.write_table(table)
            self.copies += 1
        return target

    def _bytes_of(self, rel: str, cam: str) -> pa.Array:
        """The encoded images of `cam` in data file `rel`, one per row (views of the mapped copy)."""
        table = self.mapped.pop(rel, None)
        if table is None:
            table = pa.ipc.open_file(pa.memory_map(str(self.arrow_copy(rel)))).read_all()
        self.mapped[rel] = table
        while len(self.mapped) > OPEN_FILES:
            self.mapped.popitem(last=False)
        col = table.column(cam)
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        return col.field("bytes") if pa.types.is_struct(col.type) else col

    def frames(self, cam: str, rows: np.ndarray, eps: np.ndarray) -> torch.Tensor:
        """Camera `cam`'s images at global `rows` ((k, W): k items of W steps, each of episode `eps[i]`), as a uint8
        (k, W, C, H, W') view of (k, W, H, W', C) memory."""
        height, width, channels = _declared(self.dmeta, cam)
        depth = cam in self.dmeta.depth_keys
        out = np.empty((*rows.shape, height, width, channels), np.float32 if depth else np.uint8)
        files = np.asarray(self.dmeta.data_file, dtype=object)[eps]
        for rel in dict.fromkeys(files.tolist()):
            mine = np.flatnonzero(files == rel)
            encoded = self._bytes_of(rel, cam)
            at = rows[mine] - self.file_first[rel]
            done: dict[int, tuple[int, int]] = {}  # a row decoded once a call: windows of a block share rows
            for item, positions in zip(mine.tolist(), at.tolist()):
                for step, pos in enumerate(positions):
                    if pos in done:
                        out[item, step] = out[done[pos]]
                    else:
                        got = _decode(encoded[pos].as_py(), (height, width, channels), rel, cam, pos, depth)
                        out[item, step] = got
                        done[pos] = (item, step)
        if depth:  # (C, H, W) memory, as LeRobot's float32 depth maps, in the unit asked for
            return depth_in_unit(torch.from_numpy(out).movedim(-1, -3).contiguous(), self.dmeta, cam, self.depth_unit)
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


def depth_in_unit(frames: torch.Tensor, dmeta: DatasetMeta, cam: str, unit: str) -> torch.Tensor:
    """Float depth maps of an image-stored depth camera, from the unit info.json records (`depth_unit`; LeRobot's
    recorder writes millimetres for integer maps, metres for float ones) to `unit`, as LeRobot converts them."""
    stored = (dmeta.info["features"][cam].get("info") or {}).get("depth_unit")
    if stored is None or stored == unit:
        return frames
    return frames * 1000.0 if stored == "m" else frames / 1000.0


def _decode(
    data: bytes | None, shape: tuple[int, int, int], rel: str, cam: str, pos: int, depth: bool = False
) -> np.ndarray:
    """One encoded image as (H, W, C) uint8 (a depth map: float32 of its 16-bit or float pixels), checked against
    the declared shape."""
    from PIL import UnidentifiedImageError

    try:
        arr = decode_image(data)
    except (OSError, ValueError, UnidentifiedImageError) as e:
        raise UserError(
            f"{rel}: row {pos} of {cam!r} does not decode as an image ({e}); run `dlbench validate`"
        ) from None
    if depth and arr.shape == shape and arr.dtype in (np.uint16, np.int32, np.float32):
        return arr.astype(np.float32)
    if arr.shape != shape or arr.dtype != np.uint8 or depth:
        want = "a 16-bit or float depth map" if depth else "uint8"
        raise UserError(
            f"{rel}: row {pos} of {cam!r} decodes to {arr.shape} {arr.dtype}, info.json declares {shape} {want}; "
            "run `dlbench validate`"
        )
    return arr
