"""`dlbench validate`: check the invariants of a v3.0 dataset, decoding the edges of every episode.

Checks: contiguous episode indices; dataset_from/to_index cover every row exactly once and agree with the data
files; totals in info.json; file size thresholds; every episode's first and last frame of every camera decodes at
`from_timestamp + timestamp`, and, for datasets made by `dlbench synth`, carries the right barcode.
"""

from __future__ import annotations

from collections import defaultdict

import fsspec
import numpy as np
import pyarrow.parquet as pq

from . import barcode
from .errors import UserError
from .format import meta, paths
from .video import VideoDecoderCache

SYNTHETIC_ROBOT = "dlbench_synthetic"
SIZE_SLACK = 1.05  # output files may exceed the planned size by their own headers and footers
MAX_LISTED = 10


def is_synthetic(info: dict) -> bool:
    return info.get("robot_type") == SYNTHETIC_ROBOT


def validate(root: str, check_barcodes: bool | None = None, sample_episodes: int = 0) -> dict:
    """Validate the v3.0 dataset at `root`; return a report, or raise `UserError` listing the problems.

    The metadata is checked whole. Data files and video edges are checked for every episode, or, with
    `sample_episodes` > 0, for that many episodes spread evenly over the dataset (a large remote dataset)."""
    root = str(root)
    info = meta.require_version(root, paths.V30)
    problems: list[str] = []
    cams = meta.video_keys(info)
    fps = info["fps"]
    cols = ["episode_index", "length", "data/chunk_index", "data/file_index", "dataset_from_index", "dataset_to_index"]
    for cam in cams:
        cols += [f"videos/{cam}/{c}" for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]
    eps = meta.read_episodes_v30(root, columns=cols).to_pydict()
    n = len(eps["episode_index"])
    if eps["episode_index"] != list(range(n)):
        problems.append("meta/episodes: episode_index is not 0..N-1 in order")
    if n != info.get("total_episodes"):
        problems.append(f"info.json total_episodes={info.get('total_episodes')} but meta/episodes has {n} rows")
    expect = 0
    for i in range(n):
        f, t = eps["dataset_from_index"][i], eps["dataset_to_index"][i]
        if f != expect or t - f != eps["length"][i]:
            problems.append(
                f"episode {i}: rows [{f}, {t}) do not follow on from {expect} with length {eps['length'][i]}"
            )
        expect = t
    if expect != info.get("total_frames"):
        problems.append(f"info.json total_frames={info.get('total_frames')} but the episodes cover {expect} rows")

    sample = range(n)
    if 0 < sample_episodes < n:
        sample = sorted(set(np.linspace(0, n - 1, sample_episodes).round().astype(int).tolist()))
    sampled = set(sample)

    # data files: each holds exactly its episodes' rows, in order
    by_file = defaultdict(list)
    for i in range(n):
        by_file[(eps["data/chunk_index"][i], eps["data/file_index"][i])].append(i)
    by_file = {k: v for k, v in by_file.items() if sampled.intersection(v)}
    fs, _ = fsspec.core.url_to_fs(root)
    data_limit = info.get("data_files_size_in_mb", paths.DEFAULT_DATA_FILE_SIZE_IN_MB) * 1024 * 1024
    for (c, f), members in sorted(by_file.items()):
        rel = paths.v30_data_path(c, f)
        with meta.open_file(root, rel) as fh:
            t = pq.read_table(fh, columns=["episode_index", "index"])
        ep_col, idx_col = t.column("episode_index").to_numpy(), t.column("index").to_numpy()
        lo, hi = eps["dataset_from_index"][members[0]], eps["dataset_to_index"][members[-1]]
        if not np.array_equal(idx_col, np.arange(lo, hi)):
            problems.append(f"{rel}: index column is not {lo}..{hi - 1}")
        want = np.repeat(members, [eps["length"][i] for i in members])
        if len(ep_col) != len(want) or not np.array_equal(ep_col, want):
            problems.append(f"{rel}: episode_index column does not match meta/episodes")
        _check_size(fs, root, rel, data_limit, len(members), problems)

    # videos: edges of every episode decode at from_timestamp + timestamp
    check_barcodes = is_synthetic(info) if check_barcodes is None else check_barcodes
    video_limit = info.get("video_files_size_in_mb", paths.DEFAULT_VIDEO_FILE_SIZE_IN_MB) * 1024 * 1024
    cache = VideoDecoderCache(capacity=4)
    decoded = wrong = 0
    for cam_index, cam in enumerate(cams):
        requests = defaultdict(list)  # file -> [(episode, frame_index, time)]
        for i in sample:
            rel = paths.v30_video_path(cam, eps[f"videos/{cam}/chunk_index"][i], eps[f"videos/{cam}/file_index"][i])
            start = eps[f"videos/{cam}/from_timestamp"][i]
            span = eps[f"videos/{cam}/to_timestamp"][i] - start
            if abs(span - eps["length"][i] / fps) > 1e-4:
                problems.append(
                    f"episode {i} {cam}: to-from = {span:.6f} s but length/fps = {eps['length'][i] / fps:.6f} s"
                )
            last = eps["length"][i] - 1
            requests[rel] += [(i, 0, start), (i, last, start + last / fps)]
        for rel, reqs in requests.items():
            members = len({r[0] for r in reqs})
            _check_size(fs, root, rel, video_limit, members, problems)
            try:
                frames = cache.decode(paths.join(root, rel), [r[2] for r in reqs], fps)
            except UserError as e:
                problems.append(str(e))
                continue
            decoded += len(reqs)
            if check_barcodes:
                ep, fr, cam_read, valid = barcode.read_batch(frames)
                for k, (i, frame, _) in enumerate(reqs):
                    if not (valid[k] and ep[k] == i and fr[k] == frame and cam_read[k] == cam_index):
                        wrong += 1
                        problems.append(
                            f"{rel}: episode {i} frame {frame} decodes as "
                            f"{(int(ep[k]), int(fr[k]), int(cam_read[k])) if valid[k] else 'no barcode'}"
                        )
    cache.close()
    report = {
        "dataset": root,
        "episodes": n,
        "episodes_checked": len(sample),
        "frames": expect,
        "cameras": cams,
        "data_files": len(by_file),
        "frames_decoded": decoded,
        "barcodes_checked": check_barcodes,
        "frames_wrong": wrong,
        "problems": problems,
        "ok": not problems,
    }
    if problems:
        listed = "\n  ".join(problems[:MAX_LISTED])
        more = f"\n  ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
        raise UserError(f"{root}: {len(problems)} problem(s) found:\n  {listed}{more}")
    return report


def _check_size(fs, root: str, rel: str, limit: int, episodes_in_file: int, problems: list[str]) -> None:
    size = fs.size(fsspec.core.url_to_fs(paths.join(root, rel))[1])
    if episodes_in_file > 1 and size > limit * SIZE_SLACK:
        problems.append(f"{rel}: {size} bytes holds {episodes_in_file} episodes, over the {limit}-byte threshold")
