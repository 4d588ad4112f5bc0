"""Map-style dataset over a LeRobot v3.0 dataset (local path or fsspec URL).

Parquet data is read once, column-projected (memory-mapped for local files), into numpy arrays indexed by row;
rows are in global `index` order. Video frames are decoded per item with a per-process `VideoDecoderCache`.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import UserError
from ..video import DEFAULT_TOLERANCE_S
from .dataset_meta import DatasetMeta, dataset_root, episode_rows, resolve_windows
from .items import BuilderViews, ItemBuilder, data_columns, read_columns


class LeRobotMapDataset(BuilderViews, torch.utils.data.Dataset):
    """Random access to every frame of a v3.0 dataset; takes LeRobotDataset's arguments and returns its items.

    Args:
        repo_id: a Hub repo id (read from `hf://datasets/<repo_id>@<revision>`), or the dataset's path or URL.
        root: the dataset's local path or fsspec URL; overrides `repo_id` as the place to read.
        episodes: episode indices to load (default: all); items keep their dataset-wide `index`.
        image_transforms: called on each camera's frames of an item ((C, H, W), or (T, C, H, W) with a window).
        delta_timestamps: seconds per key (the key "cameras" means every camera); steps outside the episode are
            clamped to its edge and flagged in `<key>_is_pad`, as LeRobot does. Overrides `mode`.
        tolerance_s: how far a frame's timestamp may be from the requested one.
        revision: the Hub revision (default: "v3.0").
        return_uint8: frames as uint8 in [0, 255]; by default float32 in [0, 1], as LeRobotDataset returns them.
        mode: "single" (one frame per camera) or "sarm" (8 steps spaced 1 s).
        cameras: camera keys to load (default: all).
        decode_device: "cpu" or "cuda".
        decoder_cache_size: open decoders kept per process.
        data_files_root: where data/ and videos/ are, if not under the root (which then holds only meta/).
    """

    def __init__(
        self,
        repo_id: str | None = None,
        root: str | None = None,
        episodes: list[int] | None = None,
        image_transforms=None,
        delta_timestamps: dict | None = None,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
        revision: str | None = None,
        return_uint8: bool = False,
        *,
        mode: str = "single",
        cameras: list[str] | None = None,
        decode_device: str = "cpu",
        decoder_cache_size: int = 16,
        data_files_root: str | None = None,
    ):
        root = dataset_root(repo_id, root, revision)
        self.meta = DatasetMeta.load(root, cameras, data_files_root)
        windows = resolve_windows(mode, delta_timestamps, self.meta)
        columns = read_columns(self.meta, self.meta.data_files(), data_columns(self.meta))
        if not np.array_equal(columns["index"], np.arange(len(columns["index"]))):
            raise UserError(
                f"{root}: the data files' index column is not 0..N-1 in file order; run `dlbench validate {root}`"
            )
        self.episodes, self._rows = episode_rows(self.meta, episodes)
        self.builder = ItemBuilder(
            self.meta,
            windows,
            columns,
            decode_device,
            decoder_cache_size,
            not return_uint8,
            tolerance_s,
            image_transforms,
        )

    @property
    def num_frames(self) -> int:
        return len(self)

    def __len__(self) -> int:
        return self.meta.num_frames if self._rows is None else len(self._rows)

    def __getitem__(self, idx: int) -> dict:
        if not 0 <= idx < len(self):
            raise IndexError(idx)
        return self.builder.build(int(idx if self._rows is None else self._rows[idx]))
