"""What every loader needs to know about a v3.0 dataset: info, per-episode locations, tasks, time windows."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..errors import UserError
from ..format import meta, paths

# "single": one frame of every camera; "sarm": 8 steps spaced 1 s (the 7 s before the current frame, and it)
MODES = {
    "single": None,
    "sarm": {"cameras": [float(s) for s in range(-7, 1)], "observation.state": [float(s) for s in range(-7, 1)]},
}


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

    @classmethod
    def load(cls, root: str, cameras: list[str] | None = None, data_files_root: str | None = None) -> DatasetMeta:
        """Read the v3.0 metadata under `root`; data and video files resolve under `data_files_root` if given
        (metadata from a Hub repo, say, while the files sit in a bucket near the compute)."""
        root = str(root).rstrip("/")
        info = meta.require_version(root, paths.V30)
        all_cams = meta.video_keys(info)
        if cameras:
            unknown = [c for c in cameras if c not in all_cams]
            if unknown:
                raise UserError(f"camera key(s) {unknown} not in {root}; the dataset has {all_cams}")
        cams = list(cameras) if cameras else all_cams
        cols = ["episode_index", "dataset_from_index", "dataset_to_index", "data/chunk_index", "data/file_index"]
        for cam in cams:
            cols += [f"videos/{cam}/chunk_index", f"videos/{cam}/file_index", f"videos/{cam}/from_timestamp"]
        eps = meta.read_episodes_v30(root, columns=cols).to_pydict()
        video_file = {
            cam: [
                paths.v30_video_path(cam, c, f)
                for c, f in zip(eps[f"videos/{cam}/chunk_index"], eps[f"videos/{cam}/file_index"])
            ]
            for cam in cams
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
            video_from={cam: np.asarray(eps[f"videos/{cam}/from_timestamp"], np.float64) for cam in cams},
            data_file=[paths.v30_data_path(c, f) for c, f in zip(eps["data/chunk_index"], eps["data/file_index"])],
        )

    # ------------------------------------------------ what training code reads off LeRobotDatasetMetadata
    @property
    def repo_id(self) -> str:
        return self.info.get("repo_id") or self.root.rstrip("/").rsplit("/", 1)[-1]

    @property
    def features(self) -> dict:
        return self.info["features"]

    @property
    def camera_keys(self) -> list[str]:
        return list(self.cameras)

    @property
    def video_keys(self) -> list[str]:
        return list(self.cameras)

    @property
    def image_keys(self) -> list[str]:  # v3.0 datasets written as images are not read by dlbench
        return []

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
        return {k: tuple(ft["shape"]) for k, ft in self.features.items()}

    @property
    def names(self) -> dict[str, list | None]:
        return {k: ft.get("names") for k, ft in self.features.items()}

    @cached_property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """meta/stats.json as numpy arrays, as LeRobot loads it (empty where the dataset has none)."""
        if not meta.exists(self.root, paths.STATS_PATH):
            return {}
        raw = meta.read_json(self.root, paths.STATS_PATH)  # a corrupt file is an error naming it, not "no stats"
        return {key: {name: np.asarray(v) for name, v in st.items()} for key, st in raw.items()}

    @cached_property
    def episodes(self):
        """The meta/episodes table, one row per episode (a pyarrow Table; LeRobot's is a `datasets.Dataset`)."""
        return meta.read_episodes_v30(self.root)

    @property
    def num_episodes(self) -> int:
        return len(self.ep_from)

    @property
    def num_frames(self) -> int:
        return int(self.ep_to[-1]) if len(self.ep_to) else 0

    def video_url(self, cam: str, episode: int) -> str:
        return paths.join(self.data_root, self.video_file[cam][episode])

    def data_files(self) -> list[str]:
        """Relative data file paths in (chunk, file) order; reading them in order yields rows in `index` order."""
        return list(dict.fromkeys(self.data_file))

    def data_files_for_rows(self, start: int, stop: int) -> list[str]:
        """The data files holding rows [start, stop), in order."""
        first = int(np.searchsorted(self.ep_to, start, side="right"))
        last = int(np.searchsorted(self.ep_from, stop, side="left"))
        return list(dict.fromkeys(self.data_file[first:last]))


def dataset_root(repo_id: str | None, root: str | None, revision: str | None) -> str:
    """Where a dataset lives, from LeRobotDataset's arguments: `root` if given; else `repo_id` itself where it is a
    path or URL; else the Hub repo `repo_id` at `revision` (default: the v3.0 branch, as LeRobot reads it)."""
    if root is not None:
        return str(root)
    if repo_id is None:
        raise UserError("give the dataset as repo_id (a Hub repo, a path or a URL) or as root")
    repo_id = str(repo_id)
    if "://" in repo_id or os.path.isabs(repo_id) or repo_id.startswith(".") or os.path.exists(repo_id):
        return repo_id
    return f"hf://datasets/{repo_id}@{revision or paths.V30}"


def episode_rows(dmeta: DatasetMeta, episodes: list[int] | None) -> tuple[list[int] | None, np.ndarray | None]:
    """`episodes=` as LeRobotDataset takes it: the sorted episode indices, and their rows in order."""
    if episodes is None:
        return None, None
    chosen = sorted({int(e) for e in episodes})
    bad = [e for e in chosen if not 0 <= e < dmeta.num_episodes]
    if bad:
        raise UserError(f"episodes {bad} are not in {dmeta.root}, which has episodes 0..{dmeta.num_episodes - 1}")
    rows = [np.arange(dmeta.ep_from[e], dmeta.ep_to[e]) for e in chosen]
    return chosen, np.concatenate(rows) if rows else np.zeros(0, np.int64)


def resolve_windows(
    mode: str | None, delta_timestamps: dict[str, list[float]] | None, dmeta: DatasetMeta
) -> dict[str, np.ndarray]:
    """Per key, the window as frame offsets (ints). Empty for single-frame items.

    `delta_timestamps` (seconds per key) overrides `mode`; the key "cameras" stands for every camera. Every delta
    must be a multiple of 1/fps.
    """
    if delta_timestamps is None:
        if mode not in MODES:
            raise UserError(f"mode {mode!r} is unknown; choose one of {sorted(MODES)} or give delta_timestamps")
        delta_timestamps = MODES[mode]
    windows: dict[str, np.ndarray] = {}
    features = dmeta.info["features"]
    for key, deltas in (delta_timestamps or {}).items():
        keys = dmeta.cameras if key == "cameras" else [key]
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
