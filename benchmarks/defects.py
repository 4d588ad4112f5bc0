"""Defects seen in real LeRobot datasets, made one at a time in a copy of a valid v3.0 dataset.

Each `Defect` breaks the dataset at a path in place (give it a copy) and returns the text the validator's line must
name (a file relative to the root, an episode, a key). The set covers lerobot-lance-doctor's five checks, what
LeRobot's loaders enforce (timestamps within tolerance_s of the frame grid, contiguous index and frame_index), and
defects users report on LeRobot's issue tracker. `tests/test_validate.py` asserts that `dlbench validate` reports
each in one line; `python -m benchmarks.doctor` runs both tools over them.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dlbench.format import meta, paths


@dataclass(frozen=True)
class Defect:
    name: str
    what: str  # what is broken, in a few words (the row of docs/validation.md's table)
    make: Callable[[Path], str]  # breaks the dataset at the path; returns what the report's line must name
    fatal: bool = False  # the dataset cannot be opened at all: the validator stops with this one line


# ------------------------------------------------------------------------------------------------- helpers
def _info(root: Path) -> dict:
    return json.loads((root / paths.INFO_PATH).read_text())


def _episodes(root: Path) -> list[dict]:
    return meta.read_episodes_v30(str(root)).to_pylist()


def _middle(root: Path) -> int:
    """The episode defects are made in: one in the middle (never the first, so it has a predecessor)."""
    return max(1, len(_episodes(root)) // 2)


def _camera(root: Path) -> str:
    return meta.video_keys(_info(root))[0]


def _data_rel(root: Path, ep: int) -> str:
    e = _episodes(root)[ep]
    return paths.v30_data_path(e["data/chunk_index"], e["data/file_index"])


def _video_rel(root: Path, ep: int, cam: str | None = None) -> str:
    cam = cam or _camera(root)
    e = _episodes(root)[ep]
    return paths.v30_video_path(cam, e[f"videos/{cam}/chunk_index"], e[f"videos/{cam}/file_index"])


def _edit_episodes(root: Path, ep: int, **changes: Callable[[int], int]) -> None:
    """Apply `changes` (column -> function of the old value) to episode `ep`'s row of meta/episodes."""
    for rel in meta.episodes_files_v30(str(root)):
        table = pq.read_table(root / rel)
        rows = table.column("episode_index").to_pylist()
        if ep in rows:
            for column, change in changes.items():
                values = table.column(column).to_pylist()
                values[rows.index(ep)] = change(values[rows.index(ep)])
                at = table.column_names.index(column)
                table = table.set_column(at, column, pa.array(values, table.schema.field(column).type))
            pq.write_table(table, root / rel)


def _edit_rows(root: Path, ep: int, edit: Callable[[pa.Table, np.ndarray], pa.Table]) -> str:
    """Rewrite the data file holding episode `ep` as `edit(table, mask of ep's rows)`; return its path."""
    rel = _data_rel(root, ep)
    table = pq.read_table(root / rel)
    mask = table.column("episode_index").to_numpy() == ep
    pq.write_table(edit(table, mask), root / rel)
    return rel


def _set(table: pa.Table, column: str, values: np.ndarray) -> pa.Table:
    at = table.column_names.index(column)
    return table.set_column(at, column, pa.array(values, table.schema.field(column).type))


def _orphan_name(rel: str) -> str:
    """A file name of the same stream that no episode references."""
    return rel.rsplit("/", 2)[0] + "/chunk-999/file-999." + rel.rsplit(".", 1)[1]


# ------------------------------------------------------------------------------------------------- videos
def missing_video(root: Path) -> str:
    rel = _video_rel(root, _middle(root))
    (root / rel).unlink()
    return rel


def zero_byte_video(root: Path) -> str:
    rel = _video_rel(root, _middle(root))
    (root / rel).write_bytes(b"")
    return rel


def truncated_video(root: Path) -> str:
    """The last third of the file's bytes cut off, as by an interrupted copy or upload."""
    rel = _video_rel(root, _middle(root))
    data = (root / rel).read_bytes()
    (root / rel).write_bytes(data[: len(data) - len(data) // 3])
    return rel


def unreadable_video(root: Path) -> str:
    """The file's bytes replaced by as many random ones (not MP4 at all)."""
    rel = _video_rel(root, _middle(root))
    size = (root / rel).stat().st_size
    (root / rel).write_bytes(random.Random(0).randbytes(size))
    return rel


def short_video(root: Path, drop: int = 3) -> str:
    """A whole, playable file without its last `drop` frames (as aggregated videos missing tail frames): what the
    episodes' to_timestamp implies is more than the container holds."""
    import av

    eps = _episodes(root)
    cam = _camera(root)
    rel = _video_rel(root, len(eps) - 1, cam)  # the last episode's file: its end is the file's end
    src = (root / rel).with_suffix(".full.mp4")
    (root / rel).rename(src)
    with av.open(str(src)) as i, av.open(str(root / rel), "w", format="mp4") as o:
        out = o.add_stream_from_template(i.streams.video[0], opaque=True)  # AV1: no encoder needed
        packets = [p for p in i.demux(i.streams.video[0]) if p.dts is not None]
        for p in packets[:-drop]:
            p.stream = out
            o.mux(p)
    src.unlink()
    return rel


def _copy_as_orphan(root: Path, rel: str) -> str:
    """A copy of file `rel` under a name no episode references."""
    orphan = _orphan_name(rel)
    (root / orphan).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / rel, root / orphan)
    return orphan


def orphan_video(root: Path) -> str:
    return _copy_as_orphan(root, _video_rel(root, 0))


def camera_not_in_info(root: Path) -> str:
    """A camera's feature dropped from info.json (its videos and meta/episodes columns stay)."""
    info = _info(root)
    cam = meta.video_keys(info)[-1]
    del info["features"][cam]
    (root / paths.INFO_PATH).write_text(json.dumps(info, indent=4))
    return f"videos/{cam}"


# --------------------------------------------------------------------------------------------------- data
def missing_parquet(root: Path) -> str:
    rel = _data_rel(root, _middle(root))
    (root / rel).unlink()
    return rel


def corrupt_parquet(root: Path) -> str:
    """The second half of a data file cut off (its footer gone)."""
    rel = _data_rel(root, _middle(root))
    data = (root / rel).read_bytes()
    (root / rel).write_bytes(data[: len(data) // 2])
    return rel


def orphan_parquet(root: Path) -> str:
    return _copy_as_orphan(root, _data_rel(root, 0))


def duplicate_rows(root: Path) -> str:
    """One row of an episode written twice (as an append retried after a crash)."""

    def edit(table, mask):
        at = int(np.flatnonzero(mask)[2])
        order = np.insert(np.arange(len(table)), at + 1, at)
        return table.take(pa.array(order))

    return _edit_rows(root, _middle(root), edit)


def missing_rows(root: Path) -> str:
    """One row of an episode lost from the middle."""

    def edit(table, mask):
        return table.take(pa.array(np.delete(np.arange(len(table)), np.flatnonzero(mask)[2])))

    return _edit_rows(root, _middle(root), edit)


def timestamps_off_grid(root: Path) -> str:
    """An episode's timestamps 3 ms off the 1/fps grid (hardware clock times instead of frame_index / fps)."""

    def edit(table, mask):
        ts = table.column("timestamp").to_numpy().copy()
        ts[np.flatnonzero(mask)[1:]] += 0.003
        return _set(table, "timestamp", ts)

    return _edit_rows(root, _middle(root), edit)


def timestamps_not_reset(root: Path) -> str:
    """An episode's timestamps running on from the dataset's clock instead of restarting at 0 (LeRobot issues
    #933, #1875: "timestamps unexpectedly violate the tolerance")."""
    fps = _info(root)["fps"]

    def edit(table, mask):
        ts = table.column("timestamp").to_numpy().copy()
        ts[mask] = table.column("index").to_numpy()[mask] / fps
        return _set(table, "timestamp", ts)

    return _edit_rows(root, _middle(root), edit)


def bad_task_index(root: Path) -> str:
    """An episode's task_index pointing past meta/tasks.parquet (tasks remapped in a merge, the table not)."""
    tasks = len(meta.read_tasks_v30(str(root)))

    def edit(table, mask):
        ti = table.column("task_index").to_numpy().copy()
        ti[mask] = tasks + 5
        return _set(table, "task_index", ti)

    return _edit_rows(root, _middle(root), edit)


# ----------------------------------------------------------------------------------------------- metadata
def total_frames_mismatch(root: Path) -> str:
    info = _info(root)
    info["total_frames"] += 5
    (root / paths.INFO_PATH).write_text(json.dumps(info, indent=4))
    return "total_frames"


def boundary_gap(root: Path) -> str:
    """The episode before the middle one ends a row early: a row between them belongs to no episode."""
    ep = _middle(root)
    _edit_episodes(root, ep - 1, dataset_to_index=lambda v: v - 1, length=lambda v: v - 1)
    return f"episode {ep}"


def boundary_overlap(root: Path) -> str:
    """The middle episode starts a row early: its first row is also its predecessor's last."""
    ep = _middle(root)
    _edit_episodes(root, ep, dataset_from_index=lambda v: v - 1, length=lambda v: v + 1)
    return f"episode {ep}"


def length_mismatch(root: Path) -> str:
    """An episode's length in meta/episodes one more than its rows."""
    ep = _middle(root)
    _edit_episodes(root, ep, length=lambda v: v + 1)
    return f"episode {ep}"


def stats_missing_camera(root: Path) -> str:
    """A camera's entry missing from meta/stats.json (LeRobot issues #2595, #3786: KeyError in make_dataset)."""
    stats = json.loads((root / paths.STATS_PATH).read_text())
    cam = _camera(root)
    del stats[cam]
    (root / paths.STATS_PATH).write_text(json.dumps(stats))
    return cam


def _declare(root: Path, edit: Callable[[dict], None]) -> str:
    """info.json's declaration of the last camera changed by `edit` (its videos stay as they are)."""
    info = _info(root)
    cam = meta.video_keys(info)[-1]
    edit(info["features"][cam])
    (root / paths.INFO_PATH).write_text(json.dumps(info, indent=4))
    return cam


def declared_shape(root: Path) -> str:
    """A camera declared at twice its videos' height (a resized re-recording, info.json copied from the old one)."""

    def edit(feature):
        names = feature.get("names") or ["height", "width", "channels"]
        feature["shape"][names.index("height") if "height" in names else 0] *= 2

    return _declare(root, edit)


def declared_fps(root: Path) -> str:
    """A camera's video.fps declared as 15 where its videos play at the dataset's fps."""
    return _declare(root, lambda f: f.setdefault("info", {}).__setitem__("video.fps", 15.0))


def declared_pix_fmt(root: Path) -> str:
    """A camera's video.pix_fmt declared as yuv444p where its videos are 4:2:0."""
    return _declare(root, lambda f: f.setdefault("info", {}).__setitem__("video.pix_fmt", "yuv444p"))


def corrupt_info(root: Path) -> str:
    (root / paths.INFO_PATH).write_text('{"codebase_version": "v3.0", "fps": ')
    return paths.INFO_PATH


def corrupt_episodes(root: Path) -> str:
    rel = meta.episodes_files_v30(str(root))[0]
    data = (root / rel).read_bytes()
    (root / rel).write_bytes(data[: len(data) // 2])
    return rel


DEFECTS = [
    Defect("missing_video", "a referenced video file deleted", missing_video),
    Defect("zero_byte_video", "a referenced video file of 0 bytes", zero_byte_video),
    Defect("truncated_video", "a video with its last third of bytes cut off", truncated_video),
    Defect("unreadable_video", "a video's bytes replaced by random ones", unreadable_video),
    Defect("short_video", "a whole video 3 frames short of its episodes' to_timestamp", short_video),
    Defect("orphan_video", "an extra video no episode references", orphan_video),
    Defect("camera_not_in_info", "a camera missing from info.json features", camera_not_in_info),
    Defect("declared_shape", "a camera's declared shape not its videos' frames", declared_shape),
    Defect("declared_fps", "a camera's declared video.fps not its videos'", declared_fps),
    Defect("declared_pix_fmt", "a camera's declared pix_fmt not its videos'", declared_pix_fmt),
    Defect("missing_parquet", "a referenced data file deleted", missing_parquet),
    Defect("corrupt_parquet", "a data file cut in half", corrupt_parquet),
    Defect("orphan_parquet", "an extra data file no episode references", orphan_parquet),
    Defect("duplicate_rows", "one row of an episode written twice", duplicate_rows),
    Defect("missing_rows", "one row of an episode lost", missing_rows),
    Defect("timestamps_off_grid", "an episode's timestamps 3 ms off the 1/fps grid", timestamps_off_grid),
    Defect("timestamps_not_reset", "an episode's timestamps not restarting at 0", timestamps_not_reset),
    Defect("bad_task_index", "task_index past meta/tasks.parquet", bad_task_index),
    Defect("total_frames_mismatch", "info.json total_frames 5 more than the rows", total_frames_mismatch),
    Defect("boundary_gap", "a row between two episodes' ranges", boundary_gap),
    Defect("boundary_overlap", "two episodes' ranges sharing a row", boundary_overlap),
    Defect("length_mismatch", "an episode's length one more than its rows", length_mismatch),
    Defect("stats_missing_camera", "a camera missing from meta/stats.json", stats_missing_camera),
    Defect("corrupt_info", "meta/info.json cut short", corrupt_info, fatal=True),
    Defect("corrupt_episodes", "a meta/episodes parquet cut in half", corrupt_episodes, fatal=True),
]


def make(defect: Defect, valid: Path, dst: Path) -> str:
    """A copy of the valid dataset at `valid` in `dst` with `defect` made in it; return what its line must name."""
    shutil.copytree(valid, dst)
    return defect.make(dst)
