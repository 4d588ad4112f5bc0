"""`dlbench validate`: check the invariants of a v3.0 dataset, decoding the edges of every episode.

Checks: contiguous episode indices; dataset_from/to_index cover every row exactly once and agree with the data
files; totals in info.json; file size thresholds; every episode's first and last frame of every camera decodes at
`from_timestamp + timestamp`, and, for datasets made by `dlbench synth`, carries the right barcode.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import fsspec
import numpy as np

from . import barcode
from .errors import UserError
from .format import meta, paths
from .video import VideoDecoderCache

SYNTHETIC_ROBOT = "dlbench_synthetic"
SIZE_SLACK = 1.05  # output files may exceed the planned size by their own headers and footers
MAX_LISTED = 10


def is_synthetic(info: dict) -> bool:
    return info.get("robot_type") == SYNTHETIC_ROBOT


def validate(root: str, check_barcodes: bool | None = None, sample_episodes: int = 0, progress: bool = False) -> dict:
    """Validate the v3.0 dataset at `root`; return a report, or raise `UserError` listing the problems.

    The metadata is checked whole. Data files and video edges are checked for every episode, or, with
    `sample_episodes` > 0, for that many episodes spread evenly over the dataset (a large remote dataset).
    `progress` shows a bar over the episodes' videos as their edges are decoded."""
    root = str(root)
    info = meta.require_version(root, paths.V30)
    problems: list[str] = []
    cams = meta.video_keys(info)
    eps = _read_episodes(root, cams)
    n = len(eps["episode_index"])
    frames = _check_metadata(info, eps, problems)
    sample = _sample(n, sample_episodes)
    fs, _ = fsspec.core.url_to_fs(root)
    data_files = _check_data_files(fs, root, info, eps, set(sample), problems)
    check_barcodes = is_synthetic(info) if check_barcodes is None else check_barcodes
    decoded, wrong = _check_videos(fs, root, info, eps, sample, check_barcodes, progress, problems)
    report = {
        "dataset": root,
        "episodes": n,
        "episodes_checked": len(sample),
        "frames": frames,
        "cameras": cams,
        "data_files": data_files,
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


def _read_episodes(root: str, cams: list[str]) -> dict[str, list]:
    """The columns of meta/episodes that validation reads, as lists."""
    cols = ["episode_index", "length", "data/chunk_index", "data/file_index", "dataset_from_index", "dataset_to_index"]
    for cam in cams:
        cols += [f"videos/{cam}/{c}" for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]
    return meta.read_episodes_v30(root, columns=cols).to_pydict()


def _check_metadata(info: dict, eps: dict[str, list], problems: list[str]) -> int:
    """Check episode indices, row ranges and totals; return the rows the episodes cover."""
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
    return expect


def _sample(n: int, sample_episodes: int) -> Sequence[int]:
    """The episodes to check: all `n`, or `sample_episodes` of them spread evenly."""
    if 0 < sample_episodes < n:
        return sorted(set(np.linspace(0, n - 1, sample_episodes).round().astype(int).tolist()))
    return range(n)


def _check_data_files(fs, root: str, info: dict, eps: dict[str, list], sampled: set[int], problems: list[str]) -> int:
    """Check that each data file holding a sampled episode holds exactly its episodes' rows, in order; return how
    many files were checked."""
    by_file = defaultdict(list)
    for i in range(len(eps["episode_index"])):
        by_file[(eps["data/chunk_index"][i], eps["data/file_index"][i])].append(i)
    by_file = {k: v for k, v in by_file.items() if sampled.intersection(v)}
    data_limit = info.get("data_files_size_in_mb", paths.DEFAULT_DATA_FILE_SIZE_IN_MB) * 1024 * 1024
    for (c, f), members in sorted(by_file.items()):
        rel = paths.v30_data_path(c, f)
        with meta.open_file(root, rel) as fh:
            t = meta.read_parquet(fh, ["episode_index", "index"])
        ep_col, idx_col = t.column("episode_index").to_numpy(), t.column("index").to_numpy()
        lo, hi = eps["dataset_from_index"][members[0]], eps["dataset_to_index"][members[-1]]
        if not np.array_equal(idx_col, np.arange(lo, hi)):
            problems.append(f"{rel}: index column is not {lo}..{hi - 1}")
        want = np.repeat(members, [eps["length"][i] for i in members])
        if len(ep_col) != len(want) or not np.array_equal(ep_col, want):
            problems.append(f"{rel}: episode_index column does not match meta/episodes")
        _check_size(fs, root, rel, data_limit, len(members), problems)
    return len(by_file)


def _check_videos(
    fs,
    root: str,
    info: dict,
    eps: dict[str, list],
    sample: Sequence[int],
    check_barcodes: bool,
    progress: bool,
    problems: list[str],
) -> tuple[int, int]:
    """Decode the first and last frame of each sampled episode of every camera at from_timestamp + timestamp;
    return (frames decoded, frames with a wrong barcode)."""
    cams, fps = meta.video_keys(info), info["fps"]
    video_limit = info.get("video_files_size_in_mb", paths.DEFAULT_VIDEO_FILE_SIZE_IN_MB) * 1024 * 1024
    cache = VideoDecoderCache(capacity=4)
    bar = _progress_bar(len(sample) * len(cams)) if progress else None
    decoded = wrong = 0
    try:
        for cam_index, cam in enumerate(cams):
            for rel, reqs in _edge_requests(eps, cam, sample, fps, problems).items():
                members = len({r[0] for r in reqs})
                _check_size(fs, root, rel, video_limit, members, problems)
                frames = _decode(cache, root, rel, reqs, fps, problems)
                if frames is not None:
                    decoded += len(reqs)
                    if check_barcodes:
                        wrong += _check_barcodes(rel, reqs, frames, cam_index, problems)
                if bar is not None:
                    bar.update(members)
    finally:
        if bar is not None:
            bar.close()
    cache.close()
    return decoded, wrong


def _progress_bar(total: int):
    """A bar that counts each sampled episode once per camera, as its edges are decoded."""
    from tqdm import tqdm

    return tqdm(total=total, desc="validate episode videos", unit="video", mininterval=1.0)


def _edge_requests(
    eps: dict[str, list], cam: str, sample: Sequence[int], fps: float, problems: list[str]
) -> dict[str, list[tuple[int, int, float]]]:
    """Per video file of `cam`: (episode, frame index, time) of each sampled episode's first and last frame; checks
    that each episode's span matches its length."""
    requests = defaultdict(list)
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
    return requests


def _decode(
    cache: VideoDecoderCache, root: str, rel: str, reqs: list[tuple[int, int, float]], fps: float, problems: list[str]
):
    """The requested frames of one video file, or None (the reason added to `problems`) when it does not decode."""
    try:
        return cache.decode(paths.join(root, rel), [r[2] for r in reqs], fps)
    except UserError as e:
        problems.append(str(e))
        return None


def _check_barcodes(rel: str, reqs: list[tuple[int, int, float]], frames, cam_index: int, problems: list[str]) -> int:
    """Check that each decoded frame's barcode names its episode, frame and camera; return how many do not."""
    wrong = 0
    ep, fr, cam_read, valid = barcode.read_batch(frames)
    for k, (i, frame, _) in enumerate(reqs):
        if not (valid[k] and ep[k] == i and fr[k] == frame and cam_read[k] == cam_index):
            wrong += 1
            problems.append(
                f"{rel}: episode {i} frame {frame} decodes as "
                f"{(int(ep[k]), int(fr[k]), int(cam_read[k])) if valid[k] else 'no barcode'}"
            )
    return wrong


def _check_size(fs, root: str, rel: str, limit: int, episodes_in_file: int, problems: list[str]) -> None:
    size = fs.size(fsspec.core.url_to_fs(paths.join(root, rel))[1])
    if episodes_in_file > 1 and size > limit * SIZE_SLACK:
        problems.append(f"{rel}: {size} bytes holds {episodes_in_file} episodes, over the {limit}-byte threshold")
