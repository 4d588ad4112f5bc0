"""Map-style dataset over a LeRobot v3.0 dataset (local path or fsspec URL).

Parquet data is read once, column-projected (memory-mapped for local files), into numpy arrays indexed by row;
rows are in global `index` order. Video frames are decoded with a per-process `VideoDecoderCache`; a batch asked
for at once (`__getitems__`, as torch's DataLoader does) is built together, and its remote video bytes are fetched
together before decoding (`batch_fetch.BatchFetcher`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import numpy as np
import torch

from ..decode.decoder import RANDOM_ACCESS_BLOCK, FrameDecoder
from ..errors import UserError
from ..format.meta import TOLERANCE_S
from .columns import data_columns, read_columns
from .dataset_meta import DatasetMeta, episode_rows, open_meta, resolve_windows
from .items import BuilderViews, ItemBuilder
from .lerobot_args import check_lerobot_args


class LeRobotMapDataset(BuilderViews, torch.utils.data.Dataset):
    """Random access to every frame of a v3.0 dataset; takes LeRobotDataset's arguments and returns its items.

    The arguments up to `token` are LeRobotDataset's (LeRobot 0.6.1), in its order, so the class stands in for it
    in LeRobot's training (docs/library.md). A `UserError` names a value that cannot be honoured.

    Args:
        repo_id: a Hub repo id (read from `hf://datasets/<repo_id>@<revision>`), or the dataset's path or URL.
        root: the dataset's local path or fsspec URL; overrides `repo_id` as the place to read.
        episodes: episode indices to load (default: all), kept as given in `self.episodes`; items are the frames of
            those episodes in `index` order and keep their dataset-wide `index` (`absolute_to_relative_idx`).
        episode_filter: called with each meta/episodes row (a dict); keeps the episodes it returns true for.
        image_transforms: called on each camera's frames of an item ((C, H, W), or (T, C, H, W) with a window).
        delta_timestamps: seconds per key (the key "cameras" means every camera); steps outside the episode are
            clamped to its edge and flagged in `<key>_is_pad`, as LeRobot does. Overrides `mode`.
        tolerance_s: how far (seconds) a decoded frame's timestamp may be from the requested one.
        revision: the Hub revision (default: "v3.0").
        force_cache_sync, download_videos: ignored: files are read where they are, nothing is cached or downloaded.
        video_backend: ignored: frames are always decoded by torchcodec, on `decode_device`.
        return_uint8: frames as uint8 in [0, 255]; by default float32 in [0, 1], as LeRobotDataset returns them.
        depth_output_unit: "mm" or "m": the unit depth-map cameras are dequantized to, as LeRobot's.
        batch_encoding_size, rgb_encoder, depth_encoder, encoder_threads, streaming_encoding,
            encoder_queue_maxsize: recording arguments: their defaults are accepted, other values refused.
        token: None or True (huggingface_hub's own login, HF_TOKEN); a token string or False is refused.
        repo_type: "dataset", or "bucket" to read the Hub storage bucket `repo_id` (hf://buckets/<repo_id>).
        mode: "single" (one frame per camera) or "sarm" (8 steps spaced 1 s).
        cameras: camera keys to load, video or stored as images (default: all).
        decode_device: "cpu" or "cuda".
        decoder_cache_size: open decoders kept per process.
        decoder_cache_mb: the most memory (MB) the open decoders of a process may hold, by their estimated size
            (`dlbench.decode.cache.decoder_bytes`); None: `decoder_cache_size` alone bounds them.
        remote_block_kb: the size (KB) of each read of a remote video file outside a batch's planned ranges (its
            frames' bytes are fetched as planned from the file's sample tables); None: 128 KB.
        local_cache: for a Hub dataset, download meta/ and the files of `episodes` once into huggingface_hub's
            cache and read them there (`dataset_meta.local_snapshot`), instead of range reads every epoch.
        data_files_root: where data/ and videos/ are, if not under the root (which then holds only meta/).
        meta: the dataset's `DatasetMeta`, already read from `root` by the caller (the bench harness reads it once
            a rank); None: read meta/ here.
    """

    def __init__(
        self,
        repo_id: str | None = None,
        root: str | None = None,
        episodes: list[int] | None = None,
        episode_filter: Callable[[dict], bool] | None = None,
        image_transforms=None,
        delta_timestamps: dict | None = None,
        tolerance_s: float = TOLERANCE_S,
        revision: str | None = None,
        force_cache_sync: bool = False,
        download_videos: bool = True,
        video_backend: str | None = None,
        return_uint8: bool = False,
        depth_output_unit: str = "mm",
        batch_encoding_size: int = 1,
        rgb_encoder=None,
        depth_encoder=None,
        encoder_threads: int | None = None,
        streaming_encoding: bool = False,
        encoder_queue_maxsize: int = 30,
        *,
        token: str | bool | None = None,
        repo_type: str = "dataset",
        mode: str = "single",
        cameras: list[str] | None = None,
        decode_device: str = "cpu",
        decoder_cache_size: int = 16,
        decoder_cache_mb: float | None = None,
        remote_block_kb: float | None = None,
        local_cache: bool = False,
        data_files_root: str | None = None,
        meta: DatasetMeta | None = None,
    ):
        check_lerobot_args(
            token=token,
            depth_output_unit=depth_output_unit,
            batch_encoding_size=batch_encoding_size,
            rgb_encoder=rgb_encoder,
            depth_encoder=depth_encoder,
            encoder_threads=encoder_threads,
            streaming_encoding=streaming_encoding,
            encoder_queue_maxsize=encoder_queue_maxsize,
        )
        self.meta = open_meta(repo_id, root, revision, repo_type, cameras, data_files_root, local_cache, episodes, meta)
        root = self.meta.root
        windows = resolve_windows(mode, delta_timestamps, self.meta)
        columns = read_columns(self.meta, self.meta.data_files(), data_columns(self.meta))
        if not np.array_equal(columns["index"], np.arange(len(columns["index"]))):
            raise UserError(
                f"{root}: the data files' index column is not 0..N-1 in file order; run `dlbench validate {root}`"
            )
        self.episodes, self._rows = episode_rows(self.meta, episodes, episode_filter)
        decoder = FrameDecoder(
            self.meta,
            decode_device,
            decoder_cache_size,
            tolerance_s,
            decoder_cache_mb=decoder_cache_mb,
            block_size=int(remote_block_kb * 1024) if remote_block_kb else RANDOM_ACCESS_BLOCK,
            batch_reads=True,
        )
        self.builder = ItemBuilder(
            self.meta, windows, columns, decoder, not return_uint8, image_transforms, depth_output_unit
        )

    @cached_property
    def absolute_to_relative_idx(self) -> dict[int, int] | None:
        """Dataset-wide `index` -> position in this dataset, with `episodes=` (None without), as LeRobotDataset
        has it: LeRobot's `EpisodeAwareSampler` maps the frames it picks through it."""
        if self._rows is None:
            return None
        return dict(zip(self._rows.tolist(), range(len(self._rows))))

    @property
    def num_frames(self) -> int:
        return len(self)

    def __len__(self) -> int:
        return self.meta.num_frames if self._rows is None else len(self._rows)

    @property
    def plans_batches(self) -> bool:
        """Whether a batch is more than its items: its remote video is fetched together before decoding."""
        return self.builder.decoder.batch_reads

    def __getitem__(self, idx: int) -> dict:
        return self.__getitems__([idx])[0]

    def __getitems__(self, indices: list[int]) -> list:
        """The items at `indices`, built together (torch's DataLoader asks for a batch this way): parquet fields
        gathered at once, each file's frames decoded in one sorted request, remote video fetched before decoding
        (and the next batch's started, where `indices` is a `lookahead.AheadBatch`)."""
        idx = np.asarray(indices, np.int64)
        if len(idx) and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(int(idx[(idx < 0) | (idx >= len(self))][0]))
        ahead = getattr(indices, "ahead", None)  # the next batch, from `lookahead.LookaheadBatches`
        if ahead is not None:
            ahead = np.asarray(ahead, np.int64)
            ahead = ahead if self._rows is None else self._rows[ahead]
        return self.builder.build_many(idx if self._rows is None else self._rows[idx], ahead=ahead)
