"""What both loaders share: building items from rows, and what a dataset exposes.

`ItemRows` turns rows into their fields and frame requests (numeric fields, windows with pad masks, the task, each
frame's time in its video file): plain arrays, no I/O. `ItemBuilder` adds the frames, decoded by the process's
`decoding.FrameDecoder`, and makes LeRobot items. `BuilderViews` is what the bench harness,
`dlbench.loader.DataLoader` and training code read off a dataset.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from ..decode.batch_fetch import BatchFetcher
from ..decode.cache import VideoDecoderCache, split_runs
from ..decode.decoder import FrameDecoder
from ..decode.fetch import EpisodeFetcher
from .collate import RowItem, collating_worker, floats_made_in_collate
from .dataset_meta import DatasetMeta
from .depth import DepthReader
from .images import ImageReader


def _episode_groups(eps: np.ndarray) -> list[tuple[int, np.ndarray | None]]:
    """(episode, positions of its rows; None: all of them) for the episodes of a run of rows."""
    if (eps == eps[0]).all():  # the common case; np.unique costs tens of microseconds
        return [(int(eps[0]), None)]
    episodes, which = np.unique(eps, return_inverse=True)
    return [(int(ep), np.flatnonzero(which == u)) for u, ep in enumerate(episodes)]


class ItemRows:
    """Rows into their items' fields and frame requests: the parquet columns held, the rows' episodes, delta-timestamp
    windows (clamped to the episode, with pad masks) and each frame's time in its video file. Plain arrays only:
    picklable, and the same in every process.

    Args:
        dmeta: the dataset.
        windows: per key, the window as frame offsets (`dataset_meta.resolve_windows`).
        columns: the parquet columns held (`read_columns`), all rows in order; see `hold` for runs of rows.
        return_float: frames as float32 in [0, 1] (else uint8): sizes an item's frames.
    """

    def __init__(
        self, dmeta: DatasetMeta, windows: dict[str, np.ndarray], columns: dict[str, np.ndarray], return_float: bool
    ):
        self.dmeta, self.windows, self.cols, self.return_float = dmeta, windows, columns, return_float
        # `columns` hold runs of rows back to back (a streaming worker holds only its shards' rows): each run's
        # first global row and its position in `columns`
        self.run_rows, self.run_pos = np.zeros(1, np.int64), np.zeros(1, np.int64)

    def hold(self, columns: dict[str, np.ndarray], runs: list[tuple[int, int]]) -> None:
        """Take `columns` holding the global rows of `runs` ([start, stop) each, ascending), stored back to back."""
        self.cols = columns
        self.run_rows = np.array([a for a, _ in runs], np.int64)
        self.run_pos = np.concatenate([[0], np.cumsum([b - a for a, b in runs])[:-1]]).astype(np.int64)

    def local(self, rows: np.ndarray) -> np.ndarray:
        """Positions in `cols` of global rows (each must be in a held run)."""
        if len(self.run_rows) == 1:
            return rows - (self.run_rows[0] - self.run_pos[0])
        run = np.searchsorted(self.run_rows, rows, side="right") - 1
        return rows - self.run_rows[run] + self.run_pos[run]

    def batch_fields(self, rows: list[int]) -> dict[str, np.ndarray | list]:
        """Everything of the rows' items but their frames, for the whole batch: each field (B, ...), the tasks a
        list; in the order of an item's keys."""
        return self._fields(*self._windows(rows))

    def _fields(self, rows, eps, window) -> dict[str, np.ndarray | list]:
        """The numeric fields of `rows` (with windows and their pad masks), each camera's pad mask and the tasks."""
        c, at = self.cols, self.local(rows)
        fields: dict[str, np.ndarray | list] = {}
        for name, arr in c.items():
            if name in self.windows:
                q, pad = window(name)
                fields[name], fields[f"{name}_is_pad"] = arr[self.local(q)], pad
            elif arr.dtype == object:  # language columns: each item its row's list of messages
                fields[name] = arr[at].tolist()
            else:
                fields[name] = arr[at]
        for cam in self.dmeta.frame_keys:
            if cam in self.windows:
                fields[f"{cam}_is_pad"] = window(cam)[1]
        fields["task"] = [self.dmeta.tasks[int(t)] for t in c["task_index"][at]]
        return fields

    def _windows(self, rows):
        """(rows, their episodes, window): window(key) gives the clamped query rows (k, W) and the pad mask."""
        rows = np.asarray(rows, dtype=np.int64)
        eps = self.cols["episode_index"][self.local(rows)].astype(np.int64)
        lo, hi = self.dmeta.ep_from[eps][:, None], self.dmeta.ep_to[eps][:, None] - 1

        def window(key: str) -> tuple[np.ndarray, np.ndarray]:
            q = rows[:, None] + self.windows[key][None, :]
            return np.clip(q, lo, hi), (q < lo) | (q > hi)

        return rows, eps, window

    def _frame_times(self, cam: str, rows, eps, window) -> np.ndarray:
        """Timestamps in `cam`'s video files of the frames the rows need, (k, W) (W = 1 without a window)."""
        q = window(cam)[0] if cam in self.windows else rows[:, None]
        ts = self.cols["timestamp"][self.local(q)].astype(np.float64)
        return self.dmeta.video_from[cam][eps][:, None] + ts

    def decode_requests(self, rows) -> list[tuple[str, np.ndarray]]:
        """The decode requests `build_many(rows)` makes, without decoding: (video URL, timestamps) per camera and
        episode. Benchmarks time torchcodec alone on exactly these."""
        rows, eps, window = self._windows(rows)
        times_of = {cam: self._frame_times(cam, rows, eps, window) for cam in self.dmeta.cameras}
        return [(url, times.ravel()) for url, times in self._requests(times_of, _episode_groups(eps))]

    def _requests(self, times_of: dict, groups: list) -> list[tuple[str, np.ndarray]]:
        """(video URL, timestamps) per camera and episode, from each camera's times and the rows' episode groups."""
        return [
            (self.dmeta.video_url(cam, ep), times if member is None else times[member])
            for cam, times in times_of.items()
            for ep, member in groups
        ]

    def frames_per_item(self) -> int:
        """Frames decoded for one item: every camera's window steps, video and image-stored."""
        return sum(len(self.windows[c]) if c in self.windows else 1 for c in self.dmeta.frame_keys)

    def frame_bytes_per_item(self) -> int:
        """Bytes of decoded frames in one item (all cameras and window steps; depth maps are float32 always)."""
        depth = set(self.dmeta.depth_keys)
        size = 4 if self.return_float else 1
        return sum(
            int(np.prod(self.dmeta.info["features"][c]["shape"]))
            * (4 if c in depth else size)
            * (len(self.windows[c]) if c in self.windows else 1)
            for c in self.dmeta.frame_keys
        )


class ItemBuilder(ItemRows):
    """Turns rows into items: their fields and windows (`ItemRows`) and their frames, decoded by `decoder` (this
    process's decoder cache and fetcher); shared by the map-style and streaming datasets."""

    def __init__(
        self,
        dmeta: DatasetMeta,
        windows: dict[str, np.ndarray],
        columns: dict[str, np.ndarray],
        decoder: FrameDecoder,
        return_float: bool,
        image_transforms=None,
        depth_unit: str = "mm",
    ):
        super().__init__(dmeta, windows, columns, return_float)
        # frames kept as uint8 by the builder even where floats are asked: a streaming buffer holds its items a
        # while, a quarter of the bytes, and makes them floats as they leave it (`LeRobotStreamingDataset`)
        self.hold_uint8 = False
        self.decoder = decoder
        self.images = ImageReader(dmeta, depth_unit) if dmeta.image_cameras else None  # in the data files
        self.depth = DepthReader(dmeta, depth_unit) if dmeta.depth_cameras else None  # depth-map videos
        self.image_transforms = image_transforms  # applied to each camera's frames of an item, as LeRobot does
        self.decode_s = 0.0  # time spent decoding in this process (for the fetch/decode split)
        self.fetch_s = (
            0.0  # time spent planning and starting batches' fetches before decoding (`FrameDecoder.batch_reads`)
        )

    @property
    def cache(self) -> VideoDecoderCache:
        """This process's decoder cache (`FrameDecoder.cache`)."""
        return self.decoder.cache

    @property
    def batch_fetcher(self) -> BatchFetcher | None:
        """This process's `BatchFetcher` (`FrameDecoder.batch_fetcher`)."""
        return self.decoder.batch_fetcher

    @property
    def fetcher(self) -> EpisodeFetcher | None:
        """This process's `EpisodeFetcher` (`FrameDecoder.fetcher`)."""
        return self.decoder.fetcher

    def build(self, row: int) -> dict:
        """The item for global row `row`."""
        return self.build_many([row])[0]

    def build_many(self, rows: list[int], cursor: int | None = None, ahead=None) -> list[dict | RowItem]:
        """Items for several rows; each camera's frames are decoded with one sorted request per episode.

        The parquet fields of all rows are gathered at once (one numpy take per column), and so are each episode's
        frames; each item holds views of those blocks. `cursor` names the sequential reader the rows belong to (the
        streaming loader's pool slot): each gets its own decoder per file (see `VideoDecoderCache`), so episodes
        read in turn from one file do not make one decoder seek back and forth.

        `ahead`: the rows of the batch this process is expected to build next; where batches are fetched before
        decoding (`FrameDecoder.batch_reads`), their fetches start during this one's decoding.

        In a DataLoader worker batched by dlbench's collate the items are `RowItem`s: the row and its frames, whose
        fields `collate` gathers for the whole batch at once (`batch_fields`) instead of item by item.
        """
        rows, eps, window = self._windows(rows)
        # one decode request per camera and episode: a streaming block is one episode, a map-style item one row.
        # In a DataLoader worker batched by dlbench's collate, windows with repeated frames stay `FrameGather`s and
        # are copied once, straight into the batch; everywhere else items hold plain tensors
        # float frames are made there too, in the batch (`floats_in_collate`)
        defer_float = self.floats_in_collate() and floats_made_in_collate(self.dmeta.rgb_keys)
        gather = (self.return_float and not defer_float) or self.image_transforms is not None or not collating_worker()
        groups = _episode_groups(eps)
        times_of = {cam: self._frame_times(cam, rows, eps, window) for cam in self.dmeta.cameras}
        if self.decoder.batch_reads:  # every frame's bytes fetched at once, before the first decode
            t0 = time.perf_counter()
            requests = self._requests(times_of, groups)
            upcoming = self.decode_requests(ahead) if ahead is not None and len(ahead) else None
            self.decoder.batch_fetcher.prefetch(requests, self.dmeta.fps, ahead=upcoming)
            self.fetch_s += time.perf_counter() - t0
        per_item: dict[str, list] = {}  # camera -> its frames, item by item
        for cam in self.dmeta.cameras:
            times = times_of[cam]
            per_item[cam] = frames = [None] * len(rows)
            for ep, member in groups:
                wanted = times if member is None else times[member]
                t0 = time.perf_counter()
                got = self.decoder.decode(self.dmeta.video_url(cam, ep), wanted.ravel(), cursor=cursor, gather=gather)
                self.decode_s += time.perf_counter() - t0
                if self.return_float and not defer_float and not self.hold_uint8:
                    got = got.float() / 255.0
                split = split_runs(got, len(wanted)) if cam in self.windows else got.unbind(0)
                for i, f in zip(range(len(rows)) if member is None else member.tolist(), split):
                    frames[i] = f
        for cam in self.dmeta.image_cameras:  # PNG in the data files, decoded here (`images.ImageReader`)
            t0 = time.perf_counter()
            got = self.images.frames(cam, window(cam)[0] if cam in self.windows else rows[:, None], eps)
            self.decode_s += time.perf_counter() - t0
            if self.return_float and not defer_float and not self.hold_uint8 and not got.is_floating_point():
                got = got.float() / 255.0
            per_item[cam] = list(got.unbind(0) if cam in self.windows else got[:, 0].unbind(0))
        for cam in self.dmeta.depth_cameras:  # 12-bit codes decoded and dequantized here (`depth.DepthReader`)
            t0 = time.perf_counter()
            got = self.depth.frames(cam, self._frame_times(cam, rows, eps, window), eps)
            self.decode_s += time.perf_counter() - t0
            per_item[cam] = list(got.unbind(0) if cam in self.windows else got[:, 0].unbind(0))
        if self.decoder.batch_reads:  # every range of the batch held, counted, before the next is planned
            self.decoder.batch_fetcher.settle()
        if not gather:  # the batch gathers the fields (see `RowItem`)
            cams = list(per_item)
            return [RowItem(self, row, dict(zip(cams, f))) for row, *f in zip(rows.tolist(), *per_item.values())]
        fields = self._fields(rows, eps, window)
        names = [*fields, *per_item]
        columns = [
            *(torch.from_numpy(v).unbind(0) if isinstance(v, np.ndarray) else v for v in fields.values()),
            *per_item.values(),
        ]
        items = [dict(zip(names, values)) for values in zip(*columns)]
        if self.image_transforms is not None:  # not to depth maps, as LeRobot leaves them
            for item in items:
                for cam in self.dmeta.rgb_keys:
                    item[cam] = self.image_transforms(item[cam])
        return items

    def floats_in_collate(self) -> bool:
        """Whether dlbench's collate turns this builder's frames into floats (dividing by 255 in the batch slot)
        in a worker it batches: the worker then hands over uint8 frames, a quarter of the bytes."""
        return self.return_float and self.image_transforms is None and self.decoder.decode_device == "cpu"


@runtime_checkable
class FrameDataset(Protocol):
    """What `loader.DataLoader` reads off a dataset that decodes frames (dlbench's two loaders, through
    `BuilderViews`); any other dataset is batched as torch's DataLoader batches it."""

    @property
    def decode_device(self) -> str: ...  # "cpu", or "cuda": frames come out of NVDEC, in GPU memory

    @property
    def frame_bytes_per_item(self) -> int: ...  # decoded frame bytes an item holds: sizes the batch ring's slots

    @property
    def plans_batches(self) -> bool: ...  # a batch's remote video is fetched together before decoding

    def float_cameras(self) -> frozenset: ...  # cameras whose frames `collate` turns into floats (uint8 in workers)


class BuilderViews:
    """What the bench harness, `loader.DataLoader` (`FrameDataset`) and LeRobot training code read off a dataset
    built on an `ItemBuilder`."""

    builder: ItemBuilder
    meta: DatasetMeta
    plans_batches = False  # the map-style dataset's says whether it fetches batches ahead

    def float_cameras(self) -> frozenset:
        return frozenset(self.meta.rgb_keys) if self.builder.floats_in_collate() else frozenset()

    @property
    def repo_id(self) -> str:
        return self.meta.repo_id

    @property
    def root(self) -> str:
        return self.meta.root

    @property
    def fps(self) -> int:
        return self.meta.fps

    @property
    def features(self) -> dict:
        return self.meta.features

    @property
    def num_episodes(self) -> int:
        return self.meta.num_episodes if self.episodes is None else len(self.episodes)

    @property
    def cache(self) -> VideoDecoderCache:
        return self.builder.decoder.cache

    @property
    def decode_device(self) -> str:
        return self.builder.decoder.decode_device

    @property
    def frames_per_item(self) -> int:
        return self.builder.frames_per_item()

    @property
    def frame_bytes_per_item(self) -> int:  # sizes the DataLoader's shared batch slots (`loader.ring`)
        return self.builder.frame_bytes_per_item()
