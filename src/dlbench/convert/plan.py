"""Plan a v2.1 -> v3.0 conversion: the final file layout of every stream, cut into work units.

Every output file of v3.0 is a run of consecutive episodes of one stream (the data parquet, or one camera's
video). Its boundaries follow only from the input sizes, with LeRobot's rule (start a new file before the size
threshold would be reached), so they are planned here, up front, from file sizes alone. A work unit is one or more
consecutive output files of one stream (whole files, so no output file is ever written by two units and no byte
is written twice); `episodes_per_batch` decides how many files a unit groups.

The work directory holds:
    manifest.json           source, thresholds, streams, counts
    units/unit-NNNNNN.json  one work unit: stream, and per output file its chunk/file index and episodes
    episodes.jsonl          per v3.0 episode: source episode index and length, in v3.0 order
    leases/, done/, out/    written by the workers (see `work.py`)
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import atomic
from ..errors import UserError
from ..format import meta, paths
from .check import check_source

MANIFEST = "manifest.json"
UNITS_DIR = "units"
EPISODES = "episodes.jsonl"
DATA_STREAM = "data"
MANIFEST_VERSION = 2  # 2: units carry their source bytes; the manifest a lease order


@dataclass(frozen=True)
class PlanOptions:
    episodes_per_batch: int = 50
    data_file_size_in_mb: int = paths.DEFAULT_DATA_FILE_SIZE_IN_MB
    video_file_size_in_mb: int = paths.DEFAULT_VIDEO_FILE_SIZE_IN_MB
    chunks_size: int = paths.DEFAULT_CHUNK_SIZE


def unit_path(work: Path, unit: int) -> Path:
    return work / UNITS_DIR / f"unit-{unit:06d}.json"


def load_manifest(work: str | Path) -> dict:
    path = Path(work) / MANIFEST
    if not path.exists():
        raise UserError(f"{path}: no manifest; run `dlbench convert plan SRC {work}` first")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(
            f"{path}: corrupt manifest ({e}); plan again with `dlbench convert plan SRC {work}` "
            f"(units already done are redone)"
        ) from None
    if manifest.get("version") != MANIFEST_VERSION:
        raise UserError(
            f"{path}: written by another dlbench version (manifest version {manifest.get('version')}, "
            f"this one reads {MANIFEST_VERSION}); finish it with that version, or plan into a new work "
            f"directory"
        )
    return manifest


def load_unit(work: str | Path, unit: int) -> dict:
    return json.loads(unit_path(Path(work), unit).read_text())


# a rough cost model for the lease order, measured on 2 cores (`python -m benchmarks.convert`): each source file
# costs about 1 ms to open and rewrite (parquet) or 0.65 ms to open and remux (video); bytes stream at ~200 MB/s
SOURCE_FILE_COST_S = {"data": 1.0e-3, "video": 0.65e-3}
BYTES_PER_S = 200e6


def unit_cost_s(unit: dict) -> float:
    """Estimated seconds one worker needs for `unit` (an ordering hint: costly units are leased first)."""
    files = sum(len(f["lengths"]) for f in unit["files"])
    per_file = SOURCE_FILE_COST_S["data" if unit["stream"] == DATA_STREAM else "video"]
    return files * per_file + unit["bytes"] / BYTES_PER_S


class _StreamPacker:
    """Cuts one stream's episodes into output files by size, and output files into units."""

    def __init__(self, stream: str, limit_bytes: int, episodes_per_batch: int, chunks_size: int):
        self.stream, self.limit, self.per_batch, self.chunks_size = stream, limit_bytes, episodes_per_batch, chunks_size
        self.file_ordinal = 0
        self.current: dict | None = None  # the output file being filled
        self.acc = 0
        self.unit_files: list[dict] = []  # files of the unit being filled
        self.unit_bytes = 0  # source bytes the unit being filled reads
        self.units: list[dict] = []  # finished units, not yet written

    def add(self, new_index: int, src_index: int, length: int, start_row: int, size: int) -> None:
        if self.current is not None and self.acc + size >= self.limit:
            self._close_file()
        if self.current is None:
            chunk, file = paths.chunk_file_of(self.file_ordinal, self.chunks_size)
            self.current = {
                "chunk_index": chunk,
                "file_index": file,
                "first_episode": new_index,
                "start_row": start_row,
                "source_episodes": [],
                "lengths": [],
            }
            self.acc = 0
        self.current["source_episodes"].append(src_index)
        self.current["lengths"].append(length)
        self.acc += size
        self.unit_bytes += size

    def _close_file(self) -> None:
        self.unit_files.append(self.current)
        self.current = None
        self.file_ordinal += 1
        # a unit is a batch of episodes or one full output file (full: past half the threshold), so the files of
        # megabyte episodes spread over the workers instead of riding in one unit per camera
        full = self.unit_bytes >= self.limit // 2
        if full or sum(len(f["lengths"]) for f in self.unit_files) >= self.per_batch:
            self._close_unit()

    def _close_unit(self) -> None:
        if self.unit_files:
            self.units.append({"stream": self.stream, "bytes": self.unit_bytes, "files": self.unit_files})
            self.unit_files, self.unit_bytes = [], 0

    def finish(self) -> None:
        if self.current is not None:
            self._close_file()
        self._close_unit()


def plan(src: str, work: str | Path, options: PlanOptions = PlanOptions()) -> dict:
    """Write the manifest for converting `src` (v2.1) into work directory `work`; return the manifest.

    The source is checked first (`check.py`: files present, whole, as long as meta/episodes.jsonl says): a damaged
    one is refused with one `UserError` listing every problem, before anything is written.
    Planning again into a work directory that already holds the same plan is a no-op, so workers' progress is kept;
    a different plan into a used work directory is refused.
    """
    if options.episodes_per_batch < 1 or options.data_file_size_in_mb <= 0 or options.video_file_size_in_mb <= 0:
        raise UserError("convert plan: --episodes-per-batch and the file size thresholds must be positive")
    src = str(src)
    info = meta.require_version(src, paths.V21)
    chunks_size = int(info.get("chunks_size", paths.DEFAULT_CHUNK_SIZE))
    cameras = meta.video_keys(info)
    episodes = _source_episodes(src)
    size_of = check_source(src, episodes, cameras, chunks_size).__getitem__  # a damaged source: refused here
    work = Path(work)
    _require_writable(work)
    packers = _packers(cameras, options)
    episodes_tmp = atomic.tmp_path_for(work / EPISODES)
    total_frames = _pack_episodes(episodes, packers, chunks_size, size_of, episodes_tmp)
    units = [u for p in packers for u in p.units]
    manifest = {
        "version": MANIFEST_VERSION,
        "src": src if paths.is_remote(src) else os.path.abspath(paths.local_path(src)),
        "source_chunks_size": chunks_size,
        "chunks_size": options.chunks_size,
        "data_files_size_in_mb": options.data_file_size_in_mb,
        "video_files_size_in_mb": options.video_file_size_in_mb,
        "episodes_per_batch": options.episodes_per_batch,
        "streams": [DATA_STREAM] + cameras,
        "total_episodes": len(episodes),
        "total_frames": total_frames,
        "fps": info["fps"],
        "units": len(units),
        # workers lease the costliest units first, so the last units to finish are small ones (no long tail)
        "lease_order": sorted(range(len(units)), key=lambda i: -unit_cost_s(units[i])),
    }
    return _publish(work, manifest, units, episodes_tmp)


def _require_writable(work: Path) -> None:
    """Create `work` and prove a file can be written in it, or raise `UserError`."""
    try:
        work.mkdir(parents=True, exist_ok=True)
        probe = work / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UserError(
            f"{work}: the work directory is not writable ({e.strerror}); choose another --work directory"
        ) from None


def _source_episodes(src: str) -> list[tuple[int, int]]:
    """(episode index, length) of every source episode, by index; `UserError` when there are none."""
    episodes = sorted(
        ((int(e["episode_index"]), int(e["length"])) for e in meta.iter_episodes_v21(src)), key=lambda t: t[0]
    )
    if not episodes:
        raise UserError(f"{paths.join(src, paths.EPISODES_JSONL_PATH)}: no episodes")
    return episodes


def _packers(cameras: list[str], options: PlanOptions) -> list[_StreamPacker]:
    """One packer per stream: the data stream first, then each camera."""
    packers = [
        _StreamPacker(
            DATA_STREAM, options.data_file_size_in_mb * 1024 * 1024, options.episodes_per_batch, options.chunks_size
        )
    ]
    packers += [
        _StreamPacker(cam, options.video_file_size_in_mb * 1024 * 1024, options.episodes_per_batch, options.chunks_size)
        for cam in cameras
    ]
    return packers


def _pack_episodes(
    episodes: list[tuple[int, int]],
    packers: list[_StreamPacker],
    chunks_size: int,
    size_of: Callable[[str], int],
    episodes_tmp: Path,
) -> int:
    """Feed every episode to the packers and write `episodes_tmp` (episodes.jsonl); return the total frames."""
    row = 0
    with open(episodes_tmp, "w") as ep_file:
        for new_index, (src_index, length) in enumerate(episodes):
            ep_file.write(
                json.dumps(
                    {
                        "episode_index": new_index,
                        "source_episode_index": src_index,
                        "length": length,
                        "dataset_from_index": row,
                    }
                )
                + "\n"
            )
            packers[0].add(new_index, src_index, length, row, size_of(paths.v21_data_path(src_index, chunks_size)))
            for packer in packers[1:]:
                packer.add(
                    new_index,
                    src_index,
                    length,
                    row,
                    size_of(paths.v21_video_path(src_index, packer.stream, chunks_size)),
                )
            row += length
    for packer in packers:
        packer.finish()
    return row


def _publish(work: Path, manifest: dict, units: list[dict], episodes_tmp: Path) -> dict:
    """Write the plan into `work`, or keep the same plan already there; refuse a different one."""
    existing = work / MANIFEST
    if existing.exists():
        old = json.loads(existing.read_text())
        if {**old, "lease_order": None} == {**manifest, "lease_order": None}:  # the order is a hint from sizes
            os.unlink(episodes_tmp)
            return old
        os.unlink(episodes_tmp)
        raise UserError(f"{work} already holds a different conversion plan; use a new work directory or delete {work}")
    # no manifest: whatever else is in the work directory belongs to an unfinished plan, not to this one
    for stale in (UNITS_DIR, "done", "leases", "out"):
        shutil.rmtree(work / stale, ignore_errors=True)
    os.replace(episodes_tmp, work / EPISODES)
    (work / UNITS_DIR).mkdir(exist_ok=True)
    for i, unit in enumerate(units):
        atomic.write_json(unit_path(work, i), {"unit": i, **unit}, indent=None)
    atomic.write_json(existing, manifest)  # last: a manifest on disk means the plan is complete
    return manifest
