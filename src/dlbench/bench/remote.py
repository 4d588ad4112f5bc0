"""What a run costs its storage: requests and bytes, counted at a metering proxy (`dlbench.loopback.meter`) that
every read of the rank goes through, and the bytes an ideal reader would have needed for the frames delivered.

`metered(run)` routes this rank's reads of a plain-HTTP S3 endpoint or Hub (HF_ENDPOINT) through its own metering
proxy, which also applies the source's `max_requests_per_s` and backs off on 429/503. `cost_metrics` turns the
proxy's counts over the steady windows into the record's figures: requests and bytes per 1,000 delivered frames,
and read amplification, the bytes read over the bytes needed. Needed: for each delivered frame of each camera, its
packets back to the keyframe before it, each byte once, plus the delivered rows' share of their parquet data files.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import fsspec
import numpy as np

from ..format import meta, mp4, paths
from ..loader.columns import read_columns
from ..loader.dataset_meta import DatasetMeta, resolve_windows
from ..sources import point_hub_clients

S3_ENDPOINT_ENV = "FSSPEC_S3_ENDPOINT_URL"


def meterable(run) -> str | None:
    """The plain-HTTP endpoint this rank's reads go to (an S3 endpoint, or HF_ENDPOINT for an hf:// dataset), or
    None where they cannot be metered (a local dataset, TLS)."""
    if run.root.startswith("s3://"):
        url = os.environ.get(S3_ENDPOINT_ENV)
    elif run.root.startswith("hf://"):
        url = os.environ.get("HF_ENDPOINT")
    else:
        url = None
    return url if url and url.startswith("http://") else None


def _point_at(root: str, url: str) -> None:
    """This process's (and its children's) reads of `root` go to `url`."""
    if root.startswith("hf://"):
        point_hub_clients(url)
    else:
        os.environ[S3_ENDPOINT_ENV] = fsspec.config.conf.setdefault("s3", {})["endpoint_url"] = url


@contextlib.contextmanager
def metered(run) -> Iterator:
    """A metering proxy in front of this rank's endpoint for the duration (None where `meterable` says no); this
    process and the DataLoader workers it starts read through it."""
    from ..loopback.meter import MeterProcess

    target = meterable(run)
    if target is None:
        yield None
        return
    limit = float((run.source_spec or {}).get("max_requests_per_s") or 0)
    with MeterProcess(target, max_requests_per_s=limit) as proxy:
        _point_at(run.root, proxy.url)
        try:
            yield proxy
        finally:
            _point_at(run.root, target)


def _gop_bytes(track: mp4.Track, frames: np.ndarray) -> int:
    """Bytes of the samples decoding `frames` (presentation indices) needs: each one's samples back to the
    keyframe before it in decode order, each sample once."""
    n = len(track.sizes)
    if track.composition is not None:  # presentation order differs from decode order
        dts = np.cumsum(track.durations) - track.durations
        order = np.argsort(dts + track.composition, kind="stable")
    else:
        order = np.arange(n)
    samples = np.unique(order[np.clip(frames, 0, n - 1)])
    sync = track.sync if track.sync is not None else np.arange(n)
    first = sync[np.maximum(np.searchsorted(sync, samples, side="right") - 1, 0)]
    needed = np.zeros(n + 1, np.int64)  # +1 at each run's start, -1 past its end: a sample is needed where > 0
    np.add.at(needed, first, 1)
    np.add.at(needed, samples + 1, -1)
    return int(track.sizes[np.cumsum(needed)[:n] > 0].sum())


def needed_bytes(dmeta: DatasetMeta, rows: np.ndarray, mode: str, deltas: dict | None = None) -> int:
    """The bytes an ideal reader fetches to deliver the items of `rows` (global row indices, a row once per time
    it was delivered) in `mode`: video packets back to each frame's keyframe, each once, plus the rows' share of
    their data files; times the deliveries per distinct row (a row delivered again, a later epoch, is read again)."""
    delivered = np.asarray(rows, np.int64)
    rows = np.unique(delivered)
    if not len(rows):
        return 0
    return int(_distinct_bytes(dmeta, rows, mode, deltas) * len(delivered) / len(rows))


def _distinct_bytes(dmeta: DatasetMeta, rows: np.ndarray, mode: str, deltas: dict | None) -> float:
    cols = read_columns(dmeta, dmeta.data_files(), ["episode_index", "timestamp"])
    eps = cols["episode_index"][rows].astype(np.int64)
    windows = resolve_windows(mode, deltas, dmeta)
    total = 0
    for cam in dmeta.cameras:
        offsets = windows.get(cam, np.zeros(1, np.int64))
        q = np.clip(rows[:, None] + offsets[None, :], dmeta.ep_from[eps][:, None], dmeta.ep_to[eps][:, None] - 1)
        seconds = dmeta.video_from[cam][eps][:, None] + cols["timestamp"][q]
        files = np.asarray(dmeta.video_file[cam])[eps]
        for rel in np.unique(files):
            with meta.open_file(dmeta.data_root, rel) as fh:
                track = mp4.read_track(fh, rel)
            frames = np.round(seconds[files == rel].ravel() * dmeta.fps).astype(np.int64)
            total += _gop_bytes(track, frames) + len(track.moov)
    fs, root = fsspec.core.url_to_fs(dmeta.data_root)
    file_of = np.asarray(dmeta.data_file)[eps]
    for rel in np.unique(file_of):
        in_file = np.isin(np.asarray(dmeta.data_file), [rel])
        file_rows = int((dmeta.ep_to[in_file] - dmeta.ep_from[in_file]).sum())
        total += int(fs.size(paths.join(root, rel)) * (file_of == rel).sum() / max(file_rows, 1))
    return total


def cost_metrics(opened: dict | None, before: dict | None, after: dict | None, frames: int, needed: int | None) -> dict:
    """The record's remote-cost figures over the rank's whole run, from its start to the windows' end: opening the
    dataset (LeRobot's map-style loader downloads it whole then), the first batch and the warm-up included, as a
    reader that fetches ahead makes its requests before the frames they serve. `frames`: delivered in that time;
    `opened`: the counts once the main process had opened the dataset, before any worker started (for
    `remote_requests_main`); `before`: at the windows' start (for `remote_requests_window`). None where nothing was
    metered."""
    if before is None or after is None:
        keys = ("requests", "bytes_read", "bytes_needed", "frames", "requests_per_kframe", "mb_per_kframe")
        keys += ("read_amplification", "throttled", "requests_window", "mb_window", "requests_main", "mb_main")
        return {f"remote_{k}": None for k in keys}
    requests, read = after["requests"], after["bytes_down"]
    per_k = 1000.0 / frames if frames else float("nan")
    return {
        "remote_requests": requests,
        "remote_bytes_read": read,
        "remote_bytes_needed": needed,
        "remote_frames": frames,
        "remote_requests_per_kframe": requests * per_k,
        "remote_mb_per_kframe": read / 1e6 * per_k,
        "remote_read_amplification": read / needed if needed else None,
        "remote_throttled": after["throttled"],
        "remote_requests_window": after["requests"] - before["requests"],  # the steady windows' alone
        "remote_mb_window": (after["bytes_down"] - before["bytes_down"]) / 1e6,
        "remote_requests_main": opened["requests"] if opened else None,  # the main process's opening, once a rank
        "remote_mb_main": opened["bytes_down"] / 1e6 if opened else None,
    }
