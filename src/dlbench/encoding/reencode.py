"""`dlbench reencode`: a LeRobot v3.0 dataset with its videos re-encoded, every frame at its index and timestamp.

One unit of work per video file (a camera's run of episodes). Units are leased as the converter's are
(`convert.lease`), so any number of workers, on any hosts sharing the work directory, split them and a rerun after
a kill redoes only the unfinished ones. A unit runs FFmpeg on the file, keeping every frame's timestamp (passthrough
frame timing, the source's track timescale), checks that the output presents exactly the source's frames at the
source's times, and writes its done record last. `finalize` copies the data and metadata (unchanged: episodes keep
their files and timestamps), describes the new encoding in `meta/info.json`, and publishes the dataset in one
rename. A damaged source is refused by `plan`, before anything is written.

The work directory holds manifest.json, leases/, done/<unit>.json and out/ (the new dataset, staged).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import atomic
from ..convert.finalize import publish
from ..convert.lease import HOST, LEASE_TIMEOUT_S, LeaseDir
from ..errors import UserError
from ..format import meta, paths
from ..format.mp4 import Damaged, declared_frames, read_track
from ..validate import is_synthetic
from .options import Encoding

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
TIME_TOLERANCE_S = 1e-6  # a frame's timestamp after re-encoding, against the source's
LOST_BARCODES = "dlbench_synthetic_reencoded_barcodes_lost"  # not SYNTHETIC_ROBOT: no run reads its barcodes


def _episode_files(src: str, info: dict) -> dict[str, dict[str, int]]:
    """Per camera, each video file (its path in the dataset) and the frames its episodes hold. Depth maps are left
    out: their 12-bit codes are copied as they are (`_depth_files`), not re-encoded as 8-bit colour."""
    cams = rgb_keys(info, meta.video_keys(info))
    cols = ["length"] + [f"videos/{c}/{k}" for c in cams for k in ("chunk_index", "file_index")]
    table = meta.read_episodes_v30(src, columns=cols).to_pydict()
    files: dict[str, dict[str, int]] = {c: {} for c in cams}
    for i, length in enumerate(table["length"]):
        for c in cams:
            rel = paths.v30_video_path(c, table[f"videos/{c}/chunk_index"][i], table[f"videos/{c}/file_index"][i])
            files[c][rel] = files[c].get(rel, 0) + int(length)
    return files


def _check_file(src: str, rel: str, frames: int) -> str | None:
    """Why the source video file cannot be re-encoded (missing, empty, cut short, frames not as its episodes say),
    or None."""
    try:
        with meta.open_file(src, rel) as fh:
            declared = declared_frames(fh, rel)
    except UserError as e:
        return str(e)
    except Damaged as e:
        return str(e)
    if declared is not None and declared != frames:
        return f"{rel}: holds {declared} frames where its episodes (meta/episodes) count {frames}"
    return None


def rgb_keys(info: dict, keys: list[str]) -> list[str]:
    """`keys` less the depth maps."""
    return [k for k in keys if not meta.is_depth_map(info["features"][k])]


def _image_files(src: str, info: dict) -> dict[str, dict[str, tuple[str, int]]]:
    """Per camera stored as images, each data file holding it: the video file it becomes (the data file's chunk and
    file index) and the frames its episodes hold."""
    cams = rgb_keys(info, meta.image_keys(info))  # depth maps stored as images stay in the data files
    table = meta.read_episodes_v30(src, columns=["length", "data/chunk_index", "data/file_index"]).to_pydict()
    files: dict[str, dict[str, tuple[str, int]]] = {c: {} for c in cams}
    for i, length in enumerate(table["length"]):
        chunk, file = table["data/chunk_index"][i], table["data/file_index"][i]
        for c in cams:
            video, frames = files[c].get(paths.v30_data_path(chunk, file), (paths.v30_video_path(c, chunk, file), 0))
            files[c][paths.v30_data_path(chunk, file)] = (video, frames + int(length))
    return files


def plan(src: str, work: str | Path, encoding: Encoding) -> dict:
    """Check the source and write the manifest (one unit per video file; per data file and camera stored as
    images, which becomes a video file). Nothing is written for a damaged source."""
    info = meta.require_version(src, "v3.0")
    files, images = _episode_files(src, info), _image_files(src, info)
    if not any(files.values()) and not any(images.values()):
        raise UserError(
            f"{src}: no cameras to re-encode (no colour video or image features; depth maps stay as they are)"
        )
    problems = [p for c in files for rel, n in files[c].items() if (p := _check_file(src, rel, n))]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UserError(f"{src}: cannot re-encode: {problems[0]}{more}; repair or re-download the dataset")
    units = [{"unit": k, "camera": c, "rel": rel, "frames": n} for k, (c, rel, n) in enumerate(
        (c, rel, n) for c in files for rel, n in sorted(files[c].items()))]  # fmt: skip
    units += [{"unit": len(units) + k, "camera": c, "rel": video, "frames": n, "data_rel": data}
              for k, (c, data, video, n) in enumerate((c, data, *images[c][data]) for c in images
                                                      for data in sorted(images[c]))]  # fmt: skip
    manifest = {"version": MANIFEST_VERSION, "src": src, "encoding": encoding.to_dict(), "units": units,
                "synthetic": is_synthetic(info)}  # fmt: skip
    work = atomic.make_dir(work)
    path = work / MANIFEST
    if path.exists():
        old = json.loads(path.read_text())
        if any(old.get(k) != manifest[k] for k in ("src", "encoding", "units")):
            raise UserError(f"{work}: holds another re-encode's work ({old.get('src')}); give another work directory")
        return old  # resuming: the units already done stay done
    atomic.write_json(path, manifest)
    return manifest


def load_manifest(work: str | Path) -> dict:
    path = Path(work) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no re-encode plan here; run `dlbench reencode` first") from None
    if manifest.get("version") != MANIFEST_VERSION:
        raise UserError(f"{path}: a plan of another dlbench version; delete {work} and re-encode again")
    return manifest


def _done(work: Path, unit: int) -> Path:
    return work / "done" / f"unit-{unit:06d}.json"


def _local_copy(src: str, rel: str, tmp: Path) -> str:
    """A path FFmpeg can read: the file itself on local disk, else a copy under `tmp` (fsspec)."""
    url = paths.join(src, rel)
    if not paths.is_remote(url):
        return paths.local_path(url)
    out = tmp / Path(rel).name
    with meta.open_file(src, rel) as fin, open(out, "wb") as fout:
        shutil.copyfileobj(fin, fout, 8 << 20)
    return str(out)


def _presented(path: str | Path) -> np.ndarray:
    with open(path, "rb") as fh:
        return read_track(fh, str(path)).presented_s()


def unreadable_barcodes(path: str | Path, batch: int = 128) -> int:
    """How many frames of a synthetic dataset's video file no longer carry an intact barcode."""
    from torchcodec.decoders import VideoDecoder

    from .. import barcode

    decoder = VideoDecoder(str(path), seek_mode="exact", num_ffmpeg_threads=1)
    n, bad = decoder.metadata.num_frames, 0
    for start in range(0, n, batch):
        bad += int((~barcode.read_batch(decoder.get_frames_in_range(start, min(n, start + batch)).data)[3]).sum())
    return bad


def encode_file(source: str, out: Path, encoding: Encoding, threads: int, barcodes: bool = False) -> tuple[float, int]:
    """Re-encode one video file with FFmpeg, atomically; check its frames are the source's, at the same times (and,
    with `barcodes`, count the frames whose barcode the encoding damaged). Returns the seconds FFmpeg took and that
    count."""
    with open(source, "rb") as fh:
        track = read_track(fh, source)
    with atomic.file(out) as tmp:
        tmp_mp4 = tmp.with_name(tmp.name + ".mp4")  # FFmpeg picks the container from the extension
        cmd = ["ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-i", source]
        cmd += [*encoding.ffmpeg_args(track.timescale, threads), "-y", str(tmp_mp4)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "SVT_LOG": "1"})
        seconds = time.perf_counter() - t0
        if proc.returncode:
            tmp_mp4.unlink(missing_ok=True)
            last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            raise UserError(f"{source}: FFmpeg could not re-encode it to {encoding.label()}: {last}")
        os.replace(tmp_mp4, tmp)
        want, got = track.presented_s(), _presented(tmp)
        if len(got) != len(want) or np.abs(got - want).max(initial=0.0) > TIME_TOLERANCE_S:
            raise UserError(
                f"{source}: re-encoded to {len(got)} frames where it has {len(want)}, or at other times; "
                f"FFmpeg {encoding.encoder} did not keep every frame (report this with the file)"
            )
        damaged = unreadable_barcodes(tmp) if barcodes else 0
    return seconds, damaged


def encode_images(src: str, unit: dict, out: Path, encoding: Encoding, threads: int, fps: int) -> tuple[float, int]:
    """One camera stored as images in one data file, encoded to a video file atomically: its rows' images decoded
    in order and piped to FFmpeg as raw frames at `fps`, so frame i is shown at i / fps (each episode's
    from_timestamp is where its rows start); checked to hold every row at its time. Returns FFmpeg's seconds and the
    images' bytes."""
    from ..loader.images import decode_image

    cam = unit["camera"]
    with meta.open_file(src, unit["data_rel"]) as fh:
        images = meta.read_parquet(fh, ["index", cam])
    order = np.argsort(images.column("index").to_numpy(), kind="stable")
    column = images.column(cam).combine_chunks()
    column = column.field("bytes") if hasattr(column, "field") else column
    first = decode_image(column[int(order[0])].as_py())
    height, width = first.shape[:2]
    timescale = fps * 512  # exact times for every frame at fps
    with atomic.file(out) as tmp:
        tmp_mp4 = tmp.with_name(tmp.name + ".mp4")
        cmd = ["ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
               "-s", f"{width}x{height}", "-framerate", str(fps), "-i", "-"]  # fmt: skip
        cmd += [*encoding.ffmpeg_args(timescale, threads), "-y", str(tmp_mp4)]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            for i in order.tolist():
                frame = decode_image(column[i].as_py())
                if frame.shape != first.shape:
                    raise UserError(f"{unit['data_rel']}: {cam} images differ in shape ({frame.shape}, {first.shape})")
                proc.stdin.write(np.ascontiguousarray(frame[:, :, :3] if frame.shape[2] >= 3 else
                                                      np.repeat(frame, 3, axis=2)).tobytes())  # fmt: skip
        finally:
            proc.stdin.close()
            err = proc.stderr.read().decode(errors="replace")
            proc.wait()
        seconds = time.perf_counter() - t0
        if proc.returncode:
            tmp_mp4.unlink(missing_ok=True)
            last = (err.strip().splitlines() or ["no message"])[-1]
            raise UserError(f"{unit['data_rel']}: FFmpeg could not encode {cam} to {encoding.label()}: {last}")
        os.replace(tmp_mp4, tmp)
        got, want = _presented(tmp), np.arange(len(order)) / fps
        if len(got) != len(want) or np.abs(got - want).max(initial=0.0) > TIME_TOLERANCE_S:
            raise UserError(f"{unit['data_rel']}: {cam} encoded to {len(got)} frames where it has {len(want)} rows")
    return seconds, int(pc.sum(pc.binary_length(column)).as_py() or 0)


def run_unit(work: Path, manifest: dict, unit: dict, threads: int) -> None:
    src, encoding = manifest["src"], Encoding(**manifest["encoding"])
    if "data_rel" in unit:  # a camera stored as images becomes a video file
        out = work / "out" / unit["rel"]
        seconds, size = encode_images(src, unit, out, encoding, threads, int(meta.read_info(src)["fps"]))
        record = {**unit, "host": HOST, "encode_s": seconds, "bytes": out.stat().st_size, "source_bytes": size,
                  "barcodes_unreadable": 0}  # fmt: skip
        atomic.write_json(_done(work, unit["unit"]), record)
        return
    with tempfile.TemporaryDirectory(dir=work, prefix=".fetch-") as tmp:
        source = _local_copy(src, unit["rel"], Path(tmp))
        out = work / "out" / unit["rel"]
        seconds, damaged = encode_file(source, out, encoding, threads, barcodes=manifest["synthetic"])
        src_bytes = os.path.getsize(source)
    record = {**unit, "host": HOST, "encode_s": seconds, "bytes": out.stat().st_size, "source_bytes": src_bytes,
              "barcodes_unreadable": damaged}  # fmt: skip
    atomic.write_json(_done(work, unit["unit"]), record)


def work(work_dir: str | Path, threads: int = 1, lease_timeout_s: float = LEASE_TIMEOUT_S) -> int:
    """Lease and run units until none is left to take; returns how many this worker ran."""
    work_dir = Path(work_dir)
    manifest = load_manifest(work_dir)
    leases = LeaseDir(work_dir / "leases", timeout_s=lease_timeout_s)
    ran = 0
    for unit in manifest["units"]:
        if _done(work_dir, unit["unit"]).exists():
            continue
        lease = leases.try_acquire(f"unit-{unit['unit']:06d}")
        if lease is None:
            continue
        try:
            if not _done(work_dir, unit["unit"]).exists():
                run_unit(work_dir, manifest, unit, threads)
                ran += 1
        finally:
            lease.release()
    return ran


def finalize(work_dir: str | Path, dst: str | Path) -> dict:
    """Stage the data and metadata beside the re-encoded videos, describe the encoding, publish at `dst`. Returns
    the record: per unit, its seconds and bytes."""
    work, dst = Path(work_dir), Path(dst)
    manifest = load_manifest(work)
    missing = [u["rel"] for u in manifest["units"] if not _done(work, u["unit"]).exists()]
    if missing:
        raise UserError(f"{work}: {len(missing)} video file(s) not re-encoded yet (first: {missing[0]}); run again")
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise UserError(f"{dst} is not empty; choose an empty destination (the re-encoded files are kept in {work})")
    src, encoding, out = manifest["src"], Encoding(**manifest["encoding"]), work / "out"
    info = meta.read_info(src)
    depth = [c for c in meta.video_keys(info) if meta.is_depth_map(info["features"][c])]
    for rel in _files_besides_videos(src, keep=depth):
        target = out / rel
        if not target.exists():
            with meta.open_file(src, rel) as fin, atomic.file(target) as tmp, open(tmp, "wb") as fout:
                shutil.copyfileobj(fin, fout, 8 << 20)
    converted = sorted({u["camera"] for u in manifest["units"] if "data_rel" in u})
    if converted:
        _images_to_videos(src, out, info, converted, encoding)
    for cam in rgb_keys(info, meta.video_keys(info)):
        feature = info["features"][cam]
        video = feature.setdefault("info", {})
        video.update({"video.codec": encoding.codec, "video.pix_fmt": encoding.pixel_format,
                      "video.g": encoding.effective_gop, "video.crf": encoding.effective_crf})  # fmt: skip
        if encoding.height is not None:
            video.update({"video.height": encoding.height, "video.width": encoding.width})
            feature["shape"] = [encoding.height, encoding.width, *feature["shape"][2:]]
    units = [json.loads(_done(work, u["unit"]).read_text()) for u in manifest["units"]]
    damaged = sum(u["barcodes_unreadable"] for u in units)
    if damaged:  # runs of it check every frame against an independent decode instead of by barcode
        info["robot_type"] = LOST_BARCODES
    meta.write_info(out, info)
    publish(out, dst)
    return {"src": src, "encoding": manifest["encoding"], "units": units, "barcodes_unreadable": damaged}


def _images_to_videos(src: str, out: Path, info: dict, cams: list[str], encoding: Encoding) -> None:
    """The staged dataset of cameras stored as images made to read them from their new video files: the data
    files without their image columns (and the feature gone from the schema's Hugging Face metadata),
    meta/episodes with each episode's place in them (a data file's episodes back to back, from 0 s), the features
    video (`info`, changed in place; `finalize` adds the encoding)."""
    fps = int(info["fps"])
    eps = meta.read_episodes_v30(src, columns=["data/chunk_index", "data/file_index"]).to_pydict()
    for rel in sorted({paths.v30_data_path(c, f) for c, f in zip(eps["data/chunk_index"], eps["data/file_index"])}):
        target = out / rel
        table = meta.read_parquet(str(target))
        table = table.drop_columns([c for c in cams if c in table.column_names])
        schema = table.schema
        hf = (schema.metadata or {}).get(b"huggingface")
        if hf:
            doc = json.loads(hf)
            for c in cams:
                doc.get("info", {}).get("features", {}).pop(c, None)
            schema = schema.with_metadata({**schema.metadata, b"huggingface": json.dumps(doc).encode()})
        with atomic.file(target) as tmp:
            pq.write_table(table.cast(schema), tmp)
    for rel in meta.episodes_files_v30(src):
        target = out / rel
        table = meta.read_parquet(str(target))
        start = _episode_starts(src, fps)
        starts = [start[int(e)] for e in table.column("episode_index").to_pylist()]
        lengths = table.column("length").to_pylist()
        for c in cams:
            table = table.append_column(f"videos/{c}/chunk_index", table.column("data/chunk_index"))
            table = table.append_column(f"videos/{c}/file_index", table.column("data/file_index"))
            table = table.append_column(f"videos/{c}/from_timestamp", pa.array(starts, pa.float64()))
            ends = pa.array([s + n / fps for s, n in zip(starts, lengths)], pa.float64())
            table = table.append_column(f"videos/{c}/to_timestamp", ends)
        with atomic.file(target) as tmp:
            pq.write_table(table, tmp)
    info["video_path"] = info.get("video_path") or paths.V30_VIDEO_PATH
    for c in cams:
        feature = info["features"][c]
        height, width, channels = feature["shape"]
        feature["dtype"] = "video"
        feature["info"] = {"video.height": height, "video.width": width, "video.channels": channels,
                           "video.fps": fps, "video.is_depth_map": False, "has_audio": False}  # fmt: skip


def _episode_starts(src: str, fps: int) -> dict[int, float]:
    """Each episode's first frame's time in the video its data file becomes: the episodes before it in that file,
    back to back."""
    table = meta.read_episodes_v30(src, columns=["episode_index", "length", "data/chunk_index", "data/file_index"])
    seen: dict[tuple[int, int], int] = {}
    starts = {}
    for row in table.to_pylist():
        key = (row["data/chunk_index"], row["data/file_index"])
        starts[int(row["episode_index"])] = seen.get(key, 0) / fps
        seen[key] = seen.get(key, 0) + int(row["length"])
    return starts


def _files_besides_videos(src: str, keep: list[str] = ()) -> list[str]:
    """Every file of the source dataset but its videos (except those of the cameras in `keep`) and info.json, as
    paths within it."""
    if paths.is_remote(src):
        import fsspec

        fs, root = fsspec.core.url_to_fs(src)
        found = [p[len(root.rstrip("/")) + 1 :] for p in fs.find(root)]
    else:
        root = Path(paths.local_path(src))
        found = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()]
    kept = tuple(f"videos/{cam}/" for cam in keep)
    return sorted(
        r
        for r in found
        if (not r.startswith("videos/") or r.startswith(kept)) and r != "meta/info.json" and "/." not in f"/{r}"
    )


def reencode(
    src: str,
    dst: str | Path,
    encoding: Encoding,
    workers: int = 1,
    threads: int | None = None,
    work_dir: str | Path | None = None,
) -> dict:
    """Re-encode `src` into `dst` with `workers` FFmpeg processes at once, sharing `threads` threads (default: this
    process's cores). The work directory defaults to a hidden sibling of `dst`, so a rerun resumes; it is removed
    once published."""
    dst = Path(dst)
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise UserError(f"{dst} is not empty; choose an empty destination")
    staging = Path(work_dir) if work_dir else dst.with_name(f".{dst.name}.reencode-work")
    plan(src, staging, encoding)
    workers = max(workers, 1)
    threads = max(1, (threads or len(os.sched_getaffinity(0))) // workers)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:  # each thread waits on its FFmpeg process
        for done in [pool.submit(work, staging, threads) for _ in range(workers)]:
            done.result()
    record = {**finalize(staging, dst), "workers": workers, "threads_per_worker": threads,
              "wall_s": time.perf_counter() - t0}  # fmt: skip
    if work_dir is None:
        shutil.rmtree(staging, ignore_errors=True)
    return record
