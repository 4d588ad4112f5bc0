"""`dlbench validate`: find what in a v3.0 dataset breaks training or silently feeds it wrong frames, one line each.

Every problem is one line that names the file or episode and what it does to training with LeRobot 0.6.1's
loaders. The checks, each a function below:
  metadata    meta/episodes has every column LeRobot reads; meta/tasks.parquet lists tasks 0..K-1 in row order;
              meta/stats.json has stats for every camera and float feature
  boundaries  the episodes' row ranges tile [0, total_frames) and agree with their lengths; totals in info.json
  cameras     every camera with videos or meta/episodes columns is one that info.json lists
  orphans     no parquet under data/ and no video under videos/ that no episode references (where the filesystem
              can list directories; plain HTTP cannot, and the report says so)
  data        each data file of a checked episode exists, reads and holds exactly its episodes' rows: index =
              dataset_from..to_index, frame_index 0..length-1, timestamp = frame_index / fps within LeRobot's
              tolerance, task_index in meta/tasks
  videos      each video file of a checked episode exists, is not empty, not cut short, and declares the frames its
              episodes need (container headers only); then the first and last frame of every checked episode
              decodes at from_timestamp + timestamp and, on datasets made by `dlbench synth`, carries its barcode
A dataset that cannot be read at all (a missing or empty directory, another format version, an unreadable info.json
or meta/episodes) is one `UserError`; otherwise all problems are listed together in one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import barcode
from .decode.cache import VideoDecoderCache
from .errors import UserError, no_range_requests
from .format import listing, meta, mp4, paths

SYNTHETIC_ROBOT = "dlbench_synthetic"
SIZE_SLACK = 1.05  # output files may exceed the planned size by their own headers and footers
MAX_LISTED = 10
# LeRobot 0.6.1's default tolerance_s: a decoded frame whose pts is this far (or more) from its query raises
# FrameTimestampError (lerobot/datasets/video_utils.py: `min_ < tolerance_s`)
EPISODE_COLUMNS = ("episode_index", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
                   "dataset_to_index")  # fmt: skip
VIDEO_COLUMNS = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
DATA_COLUMNS = ("index", "episode_index", "frame_index", "timestamp", "task_index")
NO_LISTING = "orphan files not looked for: this filesystem cannot list directories (plain HTTP)"


def is_synthetic(info: dict) -> bool:
    return info.get("robot_type") == SYNTHETIC_ROBOT


def validate(root: str, check_barcodes: bool | None = None, sample_episodes: int = 0, progress: bool = False) -> dict:
    """Validate the v3.0 dataset at `root`; return a report, or raise `UserError` listing the problems.

    The metadata, the totals and the orphan files are checked whole. Data files and videos are checked for every
    episode, or, with `sample_episodes` > 0, for that many episodes spread evenly over the dataset (a large remote
    dataset). `progress` shows a bar over the episodes' videos as they are checked."""
    root = str(root)
    info = meta.require_version(root, paths.V30)
    problems: list[str] = []
    eps, cams, columns = _read_episodes(root, info, problems)
    n = len(eps["episode_index"])
    tiled = _check_boundaries(info, eps, problems)
    frames = _check_totals(info, eps, problems)
    tasks = _check_tasks(root, problems)
    _check_stats(root, info, problems)
    files = {folder: listing.list_files(root, folder) for folder in ("data", "videos")}
    strays = _check_cameras(info, columns, files["videos"], problems)
    orphans_checked = _check_orphans(eps, cams, strays, files, problems)
    sample = _sample(n, sample_episodes)
    data_files, images = _check_data_files(root, info, eps, set(sample), tiled, tasks, files["data"], problems)
    check_barcodes = is_synthetic(info) if check_barcodes is None else check_barcodes
    decoded, wrong = _check_videos(
        root, info, cams, eps, sample, tiled, check_barcodes, progress, files["videos"], problems
    )
    report = {
        "dataset": root,
        "episodes": n,
        "episodes_checked": len(sample),
        "frames": frames,
        "cameras": cams,
        "data_files": data_files,
        "frames_decoded": decoded,
        "images_decoded": images,  # rows of cameras stored as images, each decoded and its shape checked
        "barcodes_checked": check_barcodes,
        "frames_wrong": wrong,
        "orphans_checked": orphans_checked,
        "notes": [] if orphans_checked else [NO_LISTING],
        "problems": problems,
        "ok": not problems,
    }
    if problems:
        listed = "\n  ".join(problems[:MAX_LISTED])
        more = f"\n  ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
        raise UserError(f"{root}: {len(problems)} problem(s) found:\n  {listed}{more}")
    return report


# ------------------------------------------------------------------------------------------------- metadata
def _read_episodes(root: str, info: dict, problems: list[str]) -> tuple[dict[str, list], list[str], list[str]]:
    """The columns of meta/episodes that validation reads, as lists; the cameras that have all of theirs (one
    without them is a problem: LeRobot cannot find its frames); the names of all its columns. Missing episode
    columns are fatal."""
    names = _episode_column_names(root)
    missing = [c for c in EPISODE_COLUMNS if c not in names]
    if missing:
        raise UserError(
            f"{paths.join(root, 'meta/episodes')}: no {', '.join(missing)} column(s); LeRobot cannot place any "
            f"episode's rows: restore meta/episodes from the dataset's source"
        )
    columns, cams = list(EPISODE_COLUMNS), []
    for cam in meta.video_keys(info):
        wanted = [f"videos/{cam}/{c}" for c in VIDEO_COLUMNS]
        if all(c in names for c in wanted):
            columns += wanted
            cams.append(cam)
        else:
            problems.append(
                f"meta/episodes: no videos/{cam}/ columns though info.json lists camera {cam}: LeRobot cannot find "
                f"its frames (KeyError on every item)"
            )
    try:
        table = meta.read_episodes_v30(root, columns=columns)
    except pa.ArrowException as e:  # files of meta/episodes with different columns
        raise UserError(f"{paths.join(root, 'meta/episodes')}: its files do not fit together ({e})") from None
    empty = [c for c in columns if table.column(c).null_count]
    if empty:
        raise UserError(f"{paths.join(root, 'meta/episodes')}: column(s) {', '.join(empty)} have empty values")
    return table.to_pydict(), cams, names


def _episode_column_names(root: str) -> list[str]:
    """The column names of meta/episodes (its first file's schema: one footer read)."""
    rel = meta.episodes_files_v30(root)[0]
    with meta.open_file(root, rel) as f:
        try:
            return pq.ParquetFile(f).schema_arrow.names
        except (pa.ArrowException, OSError, ValueError) as e:
            url = paths.join(root, rel)
            raise no_range_requests(url, e) or UserError(f"{url}: not a readable parquet file ({e})") from None


def _check_tasks(root: str, problems: list[str]) -> int | None:
    """Check that meta/tasks.parquet lists task_index 0..K-1 in row order (LeRobot looks a row's task up by
    position: `tasks.iloc[task_index]`); return K, or None where the file cannot be read."""
    rel = paths.TASKS_PARQUET_PATH
    if not meta.exists(root, rel):
        problems.append(f"{rel}: missing: LeRobot cannot open the dataset (it reads the task strings first)")
        return None
    try:
        table = meta.read_dataset_parquet(root, rel)
    except UserError:
        problems.append(f"{rel}: not a readable parquet file: LeRobot cannot open the dataset")
        return None
    if "task_index" not in table.column_names:
        problems.append(f"{rel}: no task_index column: LeRobot cannot give any item its task")
        return None
    order = table.column("task_index").to_pylist()
    if order != list(range(len(order))):
        problems.append(
            f"{rel}: task_index is {order[:5]}{'...' if len(order) > 5 else ''} in row order, not 0..{len(order) - 1}:"
            f" LeRobot takes a row's task by position (tasks.iloc[task_index]), so rows get another task's string"
        )
    return len(order)


def _check_stats(root: str, info: dict, problems: list[str]) -> None:
    """Check that meta/stats.json has stats for every camera (lerobot-train's make_dataset writes ImageNet stats
    into stats[camera], by default) and every float feature (the normalizer skips a feature without stats)."""
    rel = paths.STATS_PATH
    if not meta.exists(root, rel):
        problems.append(f"{rel}: missing: lerobot-train fails in make_dataset (it sets each camera's ImageNet stats)")
        return
    try:
        stats = meta.read_json(root, rel)
    except UserError:
        stats = None
    if not isinstance(stats, dict):
        problems.append(f"{rel}: not a JSON object of stats: LeRobot cannot open the dataset")
        return
    feats = info["features"]
    cams = [k for k, ft in feats.items() if ft.get("dtype") in ("video", "image") and k not in stats]
    floats = [k for k, ft in feats.items() if str(ft.get("dtype")).startswith("float") and k not in stats]
    parts = []
    if cams:
        parts.append(f"{', '.join(cams)} (lerobot-train's make_dataset raises KeyError setting its ImageNet stats)")
    if floats:
        parts.append(f"{', '.join(floats)} (LeRobot's normalizer passes it through unnormalized)")
    if parts:
        problems.append(f"{rel}: no stats for {'; '.join(parts)}")


# ----------------------------------------------------------------------------------------------- boundaries
def _check_boundaries(info: dict, eps: dict[str, list], problems: list[str]) -> bool:
    """Check that the episodes are numbered 0..N-1 and that their row ranges follow on from 0 without gaps or
    overlaps, each as long as its length (one line for all breaks); return whether they do."""
    n = len(eps["episode_index"])
    if eps["episode_index"] != list(range(n)):
        problems.append("meta/episodes: episode_index is not 0..N-1: LeRobot finds an episode's metadata by position")
    breaks, expect = [], 0
    for i in range(n):
        f, t, length = eps["dataset_from_index"][i], eps["dataset_to_index"][i], eps["length"][i]
        if f != expect:
            what = "a gap" if f > expect else "an overlap"
            breaks.append(f"episode {i} starts at row {f}, after {expect}: {what} of {abs(f - expect)} row(s)")
        if t - f != length:
            breaks.append(f"episode {i} spans rows [{f}, {t}) but its length is {length}")
        expect = t
    if breaks:
        more = f"; and {len(breaks) - 3} more" if len(breaks) > 3 else ""
        problems.append(
            f"meta/episodes: {'; '.join(breaks[:3])}{more}: LeRobot takes an episode's rows, delta windows and "
            f"padding from these ranges, so items near these episodes get another episode's rows"
        )
    return not breaks


def _check_totals(info: dict, eps: dict[str, list], problems: list[str]) -> int:
    """Check info.json's total_episodes and total_frames against meta/episodes; return the rows they cover."""
    n, covered = len(eps["episode_index"]), (eps["dataset_to_index"][-1] if eps["dataset_to_index"] else 0)
    if info.get("total_episodes") != n:
        problems.append(
            f"meta/info.json: total_episodes is {info.get('total_episodes')} but meta/episodes has {n}: LeRobot "
            f"counts and selects episodes by total_episodes"
        )
    total = info.get("total_frames")
    if total != covered:
        effect = "asks for rows that do not exist" if (total or 0) > covered else "never samples the last rows"
        problems.append(
            f"meta/info.json: total_frames is {total} but the episodes end at row {covered}: LeRobot's len() is "
            f"total_frames, so its sampler {effect}"
        )
    return covered


# ------------------------------------------------------------------------------------------ cameras, orphans
def _check_cameras(info: dict, columns: list[str], videos: dict[str, int] | None, problems: list[str]) -> set:
    """Cameras with videos/ folders or meta/episodes columns that info.json does not list (LeRobot loads none of
    their frames): one line each; return them."""
    known = set(meta.video_keys(info))
    strays = {c.split("/")[1] for c in columns if c.startswith("videos/") and c.count("/") == 2} - known
    strays |= {rel.split("/")[1] for rel in videos or {} if rel.count("/") >= 2} - known
    for cam in sorted(strays):
        problems.append(
            f"videos/{cam}: a camera that info.json features does not list: LeRobot loads none of its frames"
        )
    return strays


def _check_orphans(eps: dict[str, list], cams: list[str], strays: set, files: dict, problems: list[str]) -> bool:
    """Check for parquet files under data/ and videos under videos/ that no episode references; return False where
    the filesystem cannot list directories (nothing checked)."""
    if files["data"] is None or files["videos"] is None:
        return False
    data = set(_episodes_by_file(eps, "data"))
    orphans = sorted(r for r in files["data"] if r.endswith(".parquet") and r not in data)
    if orphans:
        problems.append(
            f"{_names(orphans)}: under data/ but no episode references it: LeRobot's loaders read every "
            f"data/*/*.parquet, so training sees its rows as extra frames"
        )
    videos = {rel for cam in cams for rel in _episodes_by_file(eps, cam)}
    orphans = sorted(
        r for r in files["videos"] if r.endswith(".mp4") and r not in videos and r.split("/")[1] not in strays
    )
    if orphans:
        problems.append(
            f"{_names(orphans)}: under videos/ but no episode references it: never read; a leftover of an "
            f"interrupted write or of deleted episodes (delete it, or restore its episodes)"
        )
    return True


# ------------------------------------------------------------------------------------------------------ data
def _sample(n: int, sample_episodes: int) -> Sequence[int]:
    """The episodes to check: all `n`, or `sample_episodes` of them spread evenly."""
    if 0 < sample_episodes < n:
        return sorted(set(np.linspace(0, n - 1, sample_episodes).round().astype(int).tolist()))
    return range(n)


def _episodes_by_file(eps: dict[str, list], stream: str) -> dict[str, list[int]]:
    """{file: its episodes, in order} of the data ("data") or of a camera."""
    key = "data" if stream == "data" else f"videos/{stream}"
    by_file = defaultdict(list)
    for i, (c, f) in enumerate(zip(eps[f"{key}/chunk_index"], eps[f"{key}/file_index"])):
        c, f = int(c), int(f)  # some writers store them as floats
        by_file[paths.v30_data_path(c, f) if stream == "data" else paths.v30_video_path(stream, c, f)].append(i)
    return by_file


def _check_data_files(
    root: str,
    info: dict,
    eps: dict[str, list],
    sampled: set[int],
    tiled: bool,
    tasks: int | None,
    data: dict[str, int] | None,
    problems: list[str],
) -> tuple[int, int]:
    """Check each data file holding a sampled episode (see `_data_file_problems`), its images (`_image_problems`)
    and its size; return how many files were checked and how many images decoded."""
    by_file = {rel: m for rel, m in _episodes_by_file(eps, "data").items() if sampled.intersection(m)}
    sizes = listing.file_sizes(root, by_file, data)
    limit = info.get("data_files_size_in_mb", paths.DEFAULT_DATA_FILE_SIZE_IN_MB) * 1024 * 1024
    images = 0
    for rel, members in sorted(by_file.items()):
        found = _data_file_problems(root, rel, sizes[rel], members, eps, info["fps"], tiled, tasks)
        if not found and meta.image_keys(info):
            found, decoded = _image_problems(root, rel, info)
            images += decoded
        problems += found
        _check_size(rel, sizes[rel], limit, len(members), problems)
    return len(by_file), images


def _image_problems(root: str, rel: str, info: dict) -> tuple[list[str], int]:
    """Every row of each camera stored as images in one data file decodes, to the shape info.json declares (one line
    a camera at most); and how many images were decoded."""
    from .loader.images import decode_image

    problems, decoded = [], 0
    for cam in meta.image_keys(info):
        shape = tuple(info["features"][cam]["shape"])
        try:
            column = meta.read_dataset_parquet(root, rel, [cam]).column(cam).combine_chunks()
        except (UserError, KeyError) as e:
            problems.append(f"{rel}: no readable {cam} column ({e}): LeRobot fails on every item")
            continue
        for row, value in enumerate(column.to_pylist()):
            data = value.get("bytes") if isinstance(value, dict) else value
            try:
                got = decode_image(data).shape
            except (OSError, ValueError) as e:
                problems.append(f"{rel}: row {row} of {cam} does not decode as an image ({e})")
                break
            decoded += 1
            if got != shape:
                problems.append(f"{rel}: row {row} of {cam} decodes to {got}, info.json declares {shape}")
                break
    return problems, decoded


def _data_file_problems(
    root: str, rel: str, size, members: list[int], eps: dict[str, list], fps: float, tiled: bool, tasks: int | None
) -> list[str]:
    """The problems of one data file: missing, unreadable, without a column LeRobot reads, or its rows, timestamps
    and task indices (one line each at most)."""
    lo, hi = eps["dataset_from_index"][members[0]], eps["dataset_to_index"][members[-1]]
    if size is None:
        return [
            f"{rel}: missing (episodes {_span(members)}, rows {lo}..{hi - 1}): LeRobot reads the data files it "
            f"finds, so rows from {lo} on sit at other rows' positions and the last ones fail with IndexError"
        ]
    try:
        table = meta.read_dataset_parquet(root, rel, list(DATA_COLUMNS))
    except UserError as e:
        if "range requests" in str(e):
            raise
        return [f"{rel}: not a readable parquet file: LeRobot cannot open the dataset"]
    missing = [c for c in DATA_COLUMNS if c not in table.column_names]
    if missing:
        return [f"{rel}: no {', '.join(missing)} column: LeRobot fails on every item of episodes {_span(members)}"]
    cols = {c: table.column(c).to_numpy() for c in DATA_COLUMNS}
    found = (
        _row_problem(rel, cols, members, eps, tiled),
        _timestamp_problem(rel, cols, fps),
        _task_problem(rel, cols, tasks),
    )
    return [p for p in found if p]


def _row_problem(rel: str, cols: dict, members: list[int], eps: dict[str, list], tiled: bool) -> str | None:
    """The first of: a duplicated index; rows of episodes meta/episodes does not put in this file; an episode with
    more or fewer rows than its length, or frame_index not 0..n-1; an index column other than dataset_from..to.
    The comparisons with meta/episodes are skipped where its ranges are already broken (`tiled` False)."""
    idx, ep, fi = cols["index"], cols["episode_index"], cols["frame_index"]
    values, counts = np.unique(idx, return_counts=True)
    if (counts > 1).any():
        k = values[counts > 1][0]
        return (
            f"{rel}: index {k} is on {counts.max()} rows (episode {ep[idx == k][0]}): duplicate rows; LeRobot serves "
            f"that frame twice and reads every later row of the file at the wrong position"
        )
    held = sorted(set(ep.tolist()))
    if held != members:
        return f"{rel}: holds rows of episodes {_span(held)}, meta/episodes puts episodes {_span(members)} here"
    for e in members:
        rows, length = fi[ep == e], eps["length"][e]
        if tiled and len(rows) != length:
            lost = sorted(set(range(length)) - set(rows.tolist()))
            which = f" (frame_index {lost[0]} missing)" if lost else ""
            return (
                f"{rel}: episode {e} has {len(rows)} rows, its length is {length}{which}: LeRobot's len() counts rows "
                f"that are not there, so later rows are read at the wrong position"
            )
        if not np.array_equal(rows, np.arange(len(rows))):
            return f"{rel}: episode {e}: frame_index is not 0..{len(rows) - 1} in order: its rows are out of place"
    lo, hi = eps["dataset_from_index"][members[0]], eps["dataset_to_index"][members[-1]]
    if tiled and not np.array_equal(idx, np.arange(lo, hi)):
        return f"{rel}: index column is not {lo}..{hi - 1} in order: LeRobot reads windows by index, so other rows"
    return None


def _timestamp_problem(rel: str, cols: dict, fps: float) -> str | None:
    """Rows whose timestamp is not frame_index / fps within LeRobot's tolerance: off the 1/fps grid (LeRobot raises
    FrameTimestampError decoding them) or on another frame's time (LeRobot decodes that frame instead)."""
    ts, fi, ep = cols["timestamp"].astype(np.float64), cols["frame_index"], cols["episode_index"]
    bad = np.flatnonzero(np.abs(ts - fi / fps) >= meta.TOLERANCE_S)
    if not len(bad):
        return None
    k = bad[0]
    where = f"{rel}: episode {ep[k]} frame {fi[k]} (and {len(bad) - 1} more rows)"
    off = abs(ts[k] * fps - round(ts[k] * fps)) / fps
    if off >= meta.TOLERANCE_S:
        return (
            f"{where}: timestamp {ts[k]:.6f} s is {off * 1e3:.2f} ms off the 1/{fps:g} s frame grid: LeRobot raises "
            f"FrameTimestampError decoding its frames (tolerance_s {meta.TOLERANCE_S:g} s)"
        )
    return (
        f"{where}: timestamp {ts[k]:.6f} s is frame {round(ts[k] * fps)}'s, not frame_index / fps = "
        f"{fi[k] / fps:.6f} s: LeRobot decodes another frame for the row, or fails past the video's end"
    )


def _task_problem(rel: str, cols: dict, tasks: int | None) -> str | None:
    """Rows whose task_index is not a row of meta/tasks.parquet (LeRobot's tasks.iloc raises IndexError)."""
    if tasks is None:
        return None
    ti = cols["task_index"]
    bad = np.flatnonzero((ti < 0) | (ti >= tasks))
    if not len(bad):
        return None
    k = bad[0]
    return (
        f"{rel}: task_index {ti[k]} (episode {cols['episode_index'][k]}, {len(bad)} rows) is not in "
        f"meta/tasks.parquet ({tasks} tasks): LeRobot raises IndexError on these rows"
    )


# ---------------------------------------------------------------------------------------------------- videos
def _check_videos(
    root: str,
    info: dict,
    cams: list[str],
    eps: dict[str, list],
    sample: Sequence[int],
    tiled: bool,
    check_barcodes: bool,
    progress: bool,
    videos: dict[str, int] | None,
    problems: list[str],
) -> tuple[int, int]:
    """Check each video file holding a sampled episode (`_video_file_problem`); where it is whole, decode the first
    and last frame of its sampled episodes at from_timestamp + timestamp. Return (frames decoded, frames with a
    wrong barcode)."""
    fps, sampled = info["fps"], set(sample)
    limit = info.get("video_files_size_in_mb", paths.DEFAULT_VIDEO_FILE_SIZE_IN_MB) * 1024 * 1024
    cache = VideoDecoderCache(capacity=4)
    bar = _progress_bar(len(sample) * len(cams)) if progress else None
    decoded = wrong = 0
    declared: set[tuple[str, str]] = set()  # (camera, what) already found unlike its declaration
    try:
        for cam in cams:
            cam_index = meta.video_keys(info).index(cam)  # the barcode's camera number
            by_file = {rel: m for rel, m in _episodes_by_file(eps, cam).items() if sampled.intersection(m)}
            sizes = listing.file_sizes(root, by_file, videos)
            for rel, members in sorted(by_file.items()):
                checked = [i for i in members if i in sampled]
                problem = _video_file_problem(root, rel, sizes[rel], members, eps, cam, fps)
                if problem is None:
                    _check_size(rel, sizes[rel], limit, len(members), problems)
                    reqs = _edge_requests(eps, cam, checked, fps, tiled, problems)
                    frames = _decode(cache, root, rel, reqs, fps, problems)
                    if frames is not None:
                        stream = cache.get(paths.join(root, rel)).decoder.metadata
                        for kind, line in _declared_problems(info, cam, rel, tuple(frames.shape[-2:]), stream):
                            if (cam, kind) not in declared:  # a camera's files share their encoding: one line
                                declared.add((cam, kind))
                                problems.append(line)
                        decoded += len(reqs)
                        wrong += _check_barcodes(rel, reqs, frames, cam_index, problems) if check_barcodes else 0
                else:
                    problems.append(problem)
                if bar is not None:
                    bar.update(len(checked))
    finally:
        if bar is not None:
            bar.close()
        cache.close()
    return decoded, wrong


def _declared_problems(info: dict, cam: str, rel: str, frame_hw: tuple[int, int], stream) -> list[tuple[str, str]]:
    """What meta/info.json declares of camera `cam` that its video file `rel` does not have: the frame shape (the
    decoded frames' height x width), the fps and the pixel format (the stream's metadata). Training builds its
    policy from the declared values and gets the video's: (what, one line naming both) each."""
    feature = info["features"][cam]
    declared = feature.get("info") or {}
    names = list(feature.get("names") or [])
    shape = list(feature.get("shape") or [])
    out = []
    if len(shape) == 3:
        hw = (
            (shape[names.index("height")], shape[names.index("width")])
            if {"height", "width"} <= set(names)
            else (shape[0], shape[1])
            if shape[2] in (1, 3, 4)
            else (shape[1], shape[2])
        )
        if tuple(int(v) for v in hw) != tuple(frame_hw):
            out.append(
                (
                    "shape",
                    f"{rel}: meta/info.json declares {cam} frames of {hw[0]}x{hw[1]} (features.{cam}.shape) but the "
                    f"video's are {frame_hw[0]}x{frame_hw[1]}: training gets another shape than the policy is built "
                    f"for; fix the shape in meta/info.json, or re-encode the video",
                )
            )
    fps_video = getattr(stream, "average_fps", None)
    for key, fps in (("fps", info.get("fps")), (f"features.{cam}.info.video.fps", declared.get("video.fps"))):
        if fps and fps_video and abs(float(fps) - float(fps_video)) > 0.01 * float(fps):
            out.append(
                (
                    key,
                    f"{rel}: meta/info.json declares {key} {float(fps):g} but the {cam} video plays at {fps_video:.3f} "
                    f"fps: timestamps pick other frames than intended; fix meta/info.json, or re-encode at "
                    f"{float(fps):g} fps",
                )
            )
    pix, pix_video = declared.get("video.pix_fmt"), getattr(stream, "pixel_format", None)
    if pix and pix_video and str(pix) != str(pix_video):
        out.append(
            (
                "pix_fmt",
                f"{rel}: meta/info.json declares features.{cam}.info.video.pix_fmt {pix} but the video is {pix_video}: "
                f"fix meta/info.json (decoders and players trust it), or re-encode to {pix}",
            )
        )
    return out


def _progress_bar(total: int):
    """A bar that counts each sampled episode once per camera, as its video is checked."""
    from tqdm import tqdm

    return tqdm(total=total, desc="validate episode videos", unit="video", mininterval=1.0)


def _video_file_problem(
    root: str, rel: str, size, members: list[int], eps: dict[str, list], cam: str, fps: float
) -> str | None:
    """Why one video file cannot supply its episodes' frames, from its size and container headers (no decoding):
    missing, empty, cut short, not MP4, or fewer frames declared than the episodes' to_timestamp needs."""
    if size is None:
        return f"{rel}: missing: LeRobot raises FileNotFoundError on every item of episodes {_span(members)}"
    if size == 0:
        return f"{rel}: zero bytes: LeRobot fails to decode every item of episodes {_span(members)}"
    ends = {i: round(eps[f"videos/{cam}/to_timestamp"][i] * fps) for i in members}
    try:
        with meta.open_file(root, rel) as fh:
            declared = mp4.declared_frames(fh, rel)
    except mp4.Damaged as e:
        return f"{e}: LeRobot fails to decode episodes {_span(members)}"
    need = max(ends.values())
    if declared is not None and declared < need:
        short = [i for i, end in ends.items() if end > declared]
        return (
            f"{rel}: holds {declared} frames but its episodes need {need}: LeRobot fails on the last "
            f"{need - declared} frame(s), of episode(s) {_span(short)}"
        )
    return None


def _edge_requests(
    eps: dict[str, list], cam: str, episodes: list[int], fps: float, tiled: bool, problems: list[str]
) -> list[tuple[int, int, float]]:
    """(episode, frame index, time in the file) of the first and last frame of each of `episodes` in its video, by
    the video's own from/to_timestamp; where the episodes' row ranges are sound (`tiled`), checks that each
    episode's span of the video matches its length (where they are not, that is already one line)."""
    requests = []
    for i in episodes:
        start = eps[f"videos/{cam}/from_timestamp"][i]
        span = eps[f"videos/{cam}/to_timestamp"][i] - start
        if tiled and abs(span - eps["length"][i] / fps) > meta.TOLERANCE_S:
            problems.append(
                f"episode {i} {cam}: to-from = {span:.6f} s but length/fps = {eps['length'][i] / fps:.6f} s: "
                f"its frames are not where its rows say"
            )
        last = round(span * fps) - 1
        requests += [(i, 0, start), (i, last, start + last / fps)] if last >= 0 else [(i, 0, start)]
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


# ----------------------------------------------------------------------------------------------------- shared
def _check_size(rel: str, size: int | None, limit: int, episodes_in_file: int, problems: list[str]) -> None:
    """A file of several episodes over its size threshold (info.json's *_files_size_in_mb) is a conversion bug."""
    if size is not None and episodes_in_file > 1 and size > limit * SIZE_SLACK:
        problems.append(f"{rel}: {size} bytes holds {episodes_in_file} episodes, over the {limit}-byte threshold")


def _span(episodes: list[int]) -> str:
    """Episode numbers as text: "4", "3-5" (consecutive) or "1, 4, 9"."""
    if len(episodes) > 1 and episodes == list(range(episodes[0], episodes[-1] + 1)):
        return f"{episodes[0]}-{episodes[-1]}"
    return ", ".join(map(str, episodes[:5])) + (", ..." if len(episodes) > 5 else "")


def _names(rels: list[str]) -> str:
    """Files as text: the first, and how many more."""
    return rels[0] + (f" and {len(rels) - 1} more" if len(rels) > 1 else "")
