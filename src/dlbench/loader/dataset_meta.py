"""What every loader needs to know about a v3.0 dataset: info, per-episode locations, tasks, time windows."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa

from ..errors import UserError
from ..format import meta, paths
from ..run.modes import BUILTIN_MODES


@dataclass
class DatasetMeta:
    root: str  # where meta/ is read
    data_root: str  # where data/ and videos/ are read: `root`, unless the data files live elsewhere
    info: dict
    fps: int
    cameras: list[str]
    tasks: list[str]
    ep_from: np.ndarray  # dataset_from_index per episode
    ep_to: np.ndarray
    video_file: dict[str, list[str]]  # camera -> relative video path per episode
    video_from: dict[str, np.ndarray]  # camera -> from_timestamp per episode
    data_file: list[str]  # relative data file path per episode
    image_cameras: list[str] = field(default_factory=list)  # cameras stored as images in the data files (`images`)
    depth_cameras: list[str] = field(default_factory=list)  # depth-map videos (`depth`); not in `cameras`

    @classmethod
    def load(cls, root: str, cameras: list[str] | None = None, data_files_root: str | None = None) -> DatasetMeta:
        """Read the v3.0 metadata under `root`; data and video files resolve under `data_files_root` if given
        (metadata from a Hub repo, say, while the files sit in a bucket near the compute)."""
        root = str(root).rstrip("/")
        info = meta.require_version(root, paths.V30)
        all_cams, all_images = meta.video_keys(info), meta.image_keys(info)
        if cameras:
            unknown = [c for c in cameras if c not in all_cams + all_images]
            if unknown:
                raise UserError(f"camera key(s) {unknown} not in {root}; the dataset has {all_cams + all_images}")
        videos = [c for c in cameras if c in all_cams] if cameras else all_cams
        images = [c for c in cameras if c in all_images] if cameras else all_images
        # depth maps decode apart from the RGB videos (12-bit codes, not 8-bit RGB)
        depth = [c for c in videos if meta.is_depth_map(info["features"][c])]
        cams = [c for c in videos if c not in depth]
        cols = ["episode_index", "dataset_from_index", "dataset_to_index", "data/chunk_index", "data/file_index"]
        for cam in videos:
            cols += [f"videos/{cam}/chunk_index", f"videos/{cam}/file_index", f"videos/{cam}/from_timestamp"]
        eps = meta.read_episodes_v30(root, columns=cols).to_pydict()
        video_file = {
            cam: [
                paths.v30_video_path(cam, c, f)
                for c, f in zip(eps[f"videos/{cam}/chunk_index"], eps[f"videos/{cam}/file_index"])
            ]
            for cam in videos
        }
        return cls(
            root=root,
            data_root=str(data_files_root or root).rstrip("/"),
            info=info,
            fps=int(info["fps"]),
            cameras=cams,
            tasks=meta.read_tasks_v30(root),
            ep_from=np.asarray(eps["dataset_from_index"], np.int64),
            ep_to=np.asarray(eps["dataset_to_index"], np.int64),
            video_file=video_file,
            video_from={cam: np.asarray(eps[f"videos/{cam}/from_timestamp"], np.float64) for cam in videos},
            data_file=[paths.v30_data_path(c, f) for c, f in zip(eps["data/chunk_index"], eps["data/file_index"])],
            image_cameras=images,
            depth_cameras=depth,
        )

    # ------------------------------------------------ what training code reads off LeRobotDatasetMetadata
    # Same names, types and values as LeRobotDatasetMetadata's (tests/test_lerobot_interop.py compares them), except:
    # `root` is a str (a path or URL), `info` a dict, `tasks` a list of task strings indexed by task_index.
    @property
    def repo_id(self) -> str:
        return self.info.get("repo_id") or self.root.rstrip("/").rsplit("/", 1)[-1]

    @cached_property
    def features(self) -> dict:
        """info.json's features, shapes as tuples (as LeRobot coerces them)."""
        return {k: {**ft, "shape": tuple(ft["shape"])} for k, ft in self.info["features"].items()}

    @property
    def camera_keys(self) -> list[str]:
        """The cameras items carry, video (RGB and depth) and image-stored, in the order of the features (LeRobot's
        order)."""
        return [k for k in self.features if k in self.frame_keys]

    @property
    def video_keys(self) -> list[str]:
        return [k for k in self.features if k in self.cameras or k in self.depth_cameras]

    @property
    def image_keys(self) -> list[str]:
        return [k for k in self.features if k in self.image_cameras]

    @property
    def frame_keys(self) -> list[str]:
        """Every key an item's frames are under: the RGB video cameras, the depth maps, the image-stored cameras."""
        return [*self.cameras, *self.depth_cameras, *self.image_cameras]

    @property
    def rgb_keys(self) -> list[str]:
        """The cameras of 8-bit colour frames (video and image-stored), which float items divide by 255."""
        depth = set(self.depth_keys)
        return [c for c in [*self.cameras, *self.image_cameras] if c not in depth]

    @cached_property
    def depth_keys(self) -> list[str]:
        """The depth maps, video (`depth_cameras`) and image-stored (16-bit TIFF), as LeRobot's `depth_keys`:
        float32 in items, in `depth_output_unit`."""
        stored = [c for c in self.image_cameras if meta.is_depth_map(self.info["features"][c])]
        return [k for k in self.features if k in self.depth_cameras or k in stored]

    @property
    def language_keys(self) -> list[str]:
        """LeRobot's language columns (`language_persistent`, `language_events`): items carry them as LeRobot's
        do, lists of message dicts; batches leave them out, as LeRobot's `lerobot_collate_fn` does."""
        return [k for k, ft in self.features.items() if ft.get("dtype") == "language"]

    @property
    def has_language_columns(self) -> bool:
        return bool(self.language_keys)

    @property
    def robot_type(self) -> str | None:
        return self.info.get("robot_type")

    @property
    def total_episodes(self) -> int:
        return int(self.info["total_episodes"])

    @property
    def total_frames(self) -> int:
        return int(self.info["total_frames"])

    @property
    def total_tasks(self) -> int:
        return len(self.tasks)

    @property
    def shapes(self) -> dict[str, tuple]:
        return {k: ft["shape"] for k, ft in self.features.items()}

    @property
    def names(self) -> dict[str, list | None]:
        return {k: ft.get("names") for k, ft in self.features.items()}

    @cached_property
    def stats(self) -> dict[str, dict[str, np.ndarray]] | None:
        """meta/stats.json as numpy arrays of at least one dimension, as LeRobot loads it; None without the file.
        A dict kept for the dataset's life: training writes ImageNet stats into it."""
        if not meta.exists(self.root, paths.STATS_PATH):
            return None
        raw = meta.read_json(self.root, paths.STATS_PATH)  # a corrupt file is an error naming it, not "no stats"
        return {key: {name: np.atleast_1d(np.asarray(v)) for name, v in st.items()} for key, st in raw.items()}

    @cached_property
    def episodes(self) -> EpisodesTable:
        """The meta/episodes table without its stats/ columns, as LeRobot loads it: one row per episode."""
        table = meta.read_episodes_v30(self.root)
        return EpisodesTable(table.drop_columns([c for c in table.column_names if c.startswith("stats/")]))

    @property
    def num_episodes(self) -> int:
        return len(self.ep_from)

    @property
    def num_frames(self) -> int:
        return int(self.ep_to[-1]) if len(self.ep_to) else 0

    def largest_video_file_frames(self) -> int:
        """Frames in the longest video file of any camera (v3.0 files hold many episodes one after another): what
        sizes an open decoder's index of it (`decode.cache.decoder_bytes`)."""
        most = 0
        for files in self.video_file.values():
            _, inverse = np.unique(np.asarray(files), return_inverse=True)
            most = max(most, int(np.bincount(inverse, weights=self.ep_to - self.ep_from).max(initial=0)))
        return most

    def video_url(self, cam: str, episode: int) -> str:
        return paths.join(self.data_root, self.video_file[cam][episode])

    def keyframe_interval(self, episode: int = 0) -> int:
        """Frames between keyframes in the first camera's video file of `episode`, read from its MP4 index: the
        longest gap, the encoder's GOP (episodes restart it, scene cuts add keyframes: shorter gaps); 1 where every
        frame is one; 0 where it cannot be read (the stream then does not rely on it)."""
        sync = self._sync(episode)
        if sync is False:
            return 0
        return 1 if sync is None or len(sync) < 2 else int(np.diff(sync).max())

    def regular_gop(self, episode: int = 0) -> int:
        """The keyframe interval where `episode`'s keyframes in the first camera's file fall exactly every that many
        frames from its first frame (a fixed GOP, as LeRobot's encoders write without scene cuts); else 0 (scene
        cuts, an encoder's adaptive GOP, an unreadable index)."""
        gop, sync = self.keyframe_interval(episode), self._sync(episode)
        if gop < 2 or sync is None or sync is False:
            return 0
        cam = self.cameras[0]
        start = int(round(self.video_from[cam][episode] * self.fps))
        length = int(self.ep_to[episode] - self.ep_from[episode])
        mine = sync[(sync >= start) & (sync < start + length)] - start
        return gop if np.array_equal(mine, np.arange(0, length, gop)) else 0

    def _sync(self, episode: int):
        """The 0-based keyframes of the first camera's file of `episode` (None: every frame; False: unreadable),
        read once a file."""
        import fsspec

        from ..format import mp4

        if not self.cameras or not len(self.ep_from):
            return False
        url = self.video_url(self.cameras[0], episode)
        cache = self.__dict__.setdefault("_sync_cache", {})
        if url not in cache:
            try:
                fs, path = fsspec.core.url_to_fs(url)
                with fs.open(path, "rb") as fh:
                    cache[url] = mp4.read_track(fh, url).sync
            except (OSError, ValueError, mp4.Unsupported):
                cache[url] = False
        return cache[url]

    def data_files(self) -> list[str]:
        """Relative data file paths in (chunk, file) order; reading them in order yields rows in `index` order."""
        return list(dict.fromkeys(self.data_file))

    def data_files_for_rows(self, start: int, stop: int) -> list[str]:
        """The data files holding rows [start, stop), in order."""
        first = int(np.searchsorted(self.ep_to, start, side="right"))
        last = int(np.searchsorted(self.ep_from, stop, side="left"))
        return list(dict.fromkeys(self.data_file[first:last]))


class EpisodesTable:
    """meta/episodes as LeRobot's training reads it (there a `datasets.Dataset`): `len()`, a column by name as a
    list (`episodes["dataset_from_index"]`), a row by position as a dict (`episodes[3]["tasks"]`); `table` is the
    pyarrow Table."""

    def __init__(self, table: pa.Table):
        self.table = table

    def __len__(self) -> int:
        return self.table.num_rows

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    @property
    def column_names(self) -> list[str]:
        return self.table.column_names

    def __getitem__(self, key: str | int):
        if isinstance(key, str):
            return self.table.column(key).to_pylist()  # a missing column is pyarrow's KeyError naming it
        row = range(self.table.num_rows)[key]  # negative positions count from the end; IndexError past it
        return self.table.slice(row, 1).to_pylist()[0]

    def __iter__(self):
        return iter(self.table.to_pylist())

    def to_pandas(self):
        return self.table.to_pandas()


def dataset_root(repo_id: str | None, root: str | None, revision: str | None, repo_type: str = "dataset") -> str:
    """Where a dataset lives, from LeRobot's arguments: `root` if given; else `repo_id` itself where it is a path or
    URL; else the Hub repo `repo_id` at `revision` (default: the v3.0 branch, as LeRobot reads it), or with
    repo_type="bucket" the Hub storage bucket `repo_id` (hf://buckets/..., which has no revisions)."""
    if repo_type not in ("dataset", "bucket"):
        raise UserError(f"repo_type={repo_type!r}: choose 'dataset' (a Hub dataset repo) or 'bucket' (a Hub bucket)")
    if root is not None:
        return str(root)
    if repo_id is None:
        raise UserError("give the dataset as repo_id (a Hub repo, a path or a URL) or as root")
    repo_id = str(repo_id)
    if repo_type == "bucket":
        return f"hf://buckets/{repo_id}"
    if "://" in repo_id or os.path.isabs(repo_id) or repo_id.startswith(".") or os.path.exists(repo_id):
        return repo_id
    return f"hf://datasets/{repo_id}@{revision or paths.V30}"


def open_meta(
    repo_id: str | None,
    root: str | None,
    revision: str | None,
    repo_type: str,
    cameras: list[str] | None,
    data_files_root: str | None,
    local_cache: bool,
    episodes: list[int] | None,
    meta: DatasetMeta | None = None,
) -> DatasetMeta:
    """A loader's metadata from LeRobot's arguments: read from where the dataset lives (`dataset_root`), or `meta`
    where the caller has read it already; copied locally where `local_cache` asks (`local_snapshot`)."""
    if meta is None:
        meta = DatasetMeta.load(dataset_root(repo_id, root, revision, repo_type), cameras, data_files_root)
    if local_cache:
        meta = local_snapshot(meta, episodes)
    return meta


def local_snapshot(dmeta: DatasetMeta, episodes: list[int] | None) -> DatasetMeta:
    """A Hub dataset (hf://datasets/ORG/NAME@REV) read from a local copy: meta/, the data files (small; the
    map-style loader indexes every row) and the video files of `episodes` (all by default; of the cameras read) are
    downloaded once into huggingface_hub's cache
    (`snapshot_download`, which skips files already there), and the metadata of that copy is returned, so epochs
    read local files instead of range requests. Raises UserError for a dataset not on the Hub or a Hub error."""
    if not dmeta.root.startswith("hf://datasets/") or dmeta.data_root != dmeta.root:
        raise UserError(f"{dmeta.root}: local_cache applies to Hub datasets (hf://datasets/...) read whole from there")
    repo, _, revision = dmeta.root.removeprefix("hf://datasets/").partition("@")
    chosen = range(dmeta.num_episodes) if episodes is None else sorted({int(e) for e in episodes})
    files = {"meta/*", *dmeta.data_file}
    files |= {dmeta.video_file[cam][e] for cam in dmeta.video_file for e in chosen}
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError

    try:
        local = snapshot_download(repo, repo_type="dataset", revision=revision or None, allow_patterns=sorted(files))
    except (HfHubHTTPError, OSError) as e:
        raise UserError(f"{dmeta.root}: cannot download its files ({e}); check the repo and the network") from None
    return DatasetMeta.load(local, dmeta.frame_keys)


def episode_rows(
    dmeta: DatasetMeta, episodes: list[int] | None, episode_filter=None
) -> tuple[list[int] | None, np.ndarray | None]:
    """`episodes=` and `episode_filter=` as LeRobotDataset takes them: the episodes as LeRobot keeps them (the list
    given, or the sorted indices the filter kept), and the rows of those episodes in `index` order (None: all).
    `episode_filter` is called with each meta/episodes row (a dict, stats/ columns left out) of the episodes in
    `episodes` (all by default) and keeps those it returns true for."""
    if episode_filter is not None:
        candidates = None if episodes is None else {int(e) for e in episodes}
        episodes = [
            row["episode_index"]
            for row in dmeta.episodes
            if (candidates is None or row["episode_index"] in candidates) and episode_filter(row)
        ]
        if not episodes:
            raise UserError(f"episode_filter kept no episode of {dmeta.root}; check the filter and episodes=")
    if episodes is None:
        return None, None
    chosen = sorted({int(e) for e in episodes})
    bad = [e for e in chosen if not 0 <= e < dmeta.num_episodes]
    if bad:
        raise UserError(f"episodes {bad} are not in {dmeta.root}, which has episodes 0..{dmeta.num_episodes - 1}")
    rows = [np.arange(dmeta.ep_from[e], dmeta.ep_to[e]) for e in chosen]
    return [int(e) for e in episodes], np.concatenate(rows) if rows else np.zeros(0, np.int64)


def window_span(windows: dict, cameras) -> int:
    """Frames from a window's first camera frame to its last (0 for single frames): `windows` as `resolve_windows`
    gives them."""
    offsets = [int(o) for c in cameras for o in windows.get(c, [0])]
    return max(offsets) - min(offsets) if offsets else 0


def resolve_windows(
    mode: str | None, delta_timestamps: dict[str, list[float]] | None, dmeta: DatasetMeta
) -> dict[str, np.ndarray]:
    """Per key, the window as frame offsets (ints). Empty for single-frame items.

    `delta_timestamps` (seconds per key) overrides `mode`; the key "cameras" stands for every camera. Every delta
    must be a multiple of 1/fps.
    """
    if delta_timestamps is None:
        if mode not in BUILTIN_MODES:
            raise UserError(f"mode {mode!r} is unknown; choose one of {sorted(BUILTIN_MODES)} or give delta_timestamps")
        delta_timestamps = BUILTIN_MODES[mode]
    windows: dict[str, np.ndarray] = {}
    features = dmeta.info["features"]
    for key, deltas in (delta_timestamps or {}).items():
        keys = dmeta.frame_keys if key == "cameras" else [key]
        if key != "cameras" and features.get(key, {}).get("dtype") == "language":
            raise UserError(f"delta_timestamps key {key!r} is a language column; windows apply to numeric features "
                            "and cameras")  # fmt: skip
        if key != "cameras" and key not in features:
            raise UserError(
                f"delta_timestamps key {key!r} is not a feature of {dmeta.root}; features: {sorted(features)}"
            )
        offsets = []
        for d in deltas:
            steps = d * dmeta.fps
            if abs(steps - round(steps)) > 1e-4 * dmeta.fps:
                raise UserError(f"delta_timestamps[{key!r}]: {d} s is not a multiple of 1/fps = {1 / dmeta.fps:.6f} s")
            offsets.append(round(steps))
        for k in keys:
            windows[k] = np.asarray(offsets, np.int64)
    return windows
