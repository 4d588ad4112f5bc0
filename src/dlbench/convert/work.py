"""Convert work units: lease a unit, write its final v3.0 files, mark it done; repeat until all are done.

Data files are written with one row group per episode (as LeRobot's recorder does); `episode_index` and `index` are
set to the v3.0 numbering (equal to the source's for a contiguous source). Videos are joined without re-encoding:
`join.join` copies the episodes' sample data as bytes and appends their sample tables; inputs it cannot copy that way
are remuxed packet by packet with FFmpeg (PyAV). Either way each episode starts at the exact number of time-base
ticks of the frames before it in the file, so `from_timestamp` is `ticks * time_base`, not a running float sum.

Outputs go to `<work>/out/` under their final relative names, each written to a temporary name and renamed into
place; `<work>/done/unit-N.json` is written last and records what `finalize` needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import atomic
from ..errors import UserError, no_range_requests
from ..format import meta, paths
from ..format.mp4 import Track, Unsupported, read_track
from . import join
from . import plan as planmod
from .lease import HOST, LEASE_TIMEOUT_S, LeaseDir

OUT_DIR = "out"
DONE_DIR = "done"
LEASES_DIR = "leases"


def done_path(work: Path, unit: int) -> Path:
    return work / DONE_DIR / f"unit-{unit:06d}.json"


def is_done(work: Path, unit: int) -> bool:
    return done_path(work, unit).exists()


# ------------------------------------------------------------------------------------------------------ data
# A row group closes at the first episode end at or past this many rows. One group per episode (as LeRobot's
# recorder writes) costs ~40 us to read and ~1 KB of footer per group: with 50,000 short episodes that made the data
# file 35x larger and 30x slower to read than groups of 1,000 rows (docs/benchmarks.md, cost growth).
ROW_GROUP_MIN_ROWS = 1000


def _write_data_file(manifest: dict, f: dict, out: Path) -> list[dict]:
    src = manifest["src"]
    writer = None
    entries = []
    row = f["start_row"]
    group: list[pa.Table] = []  # episodes waiting to be written as one row group
    target = out / paths.v30_data_path(f["chunk_index"], f["file_index"])

    def flush() -> None:
        if group:
            table = pa.concat_tables(group)
            writer.write_table(table, row_group_size=table.num_rows)
            group.clear()

    with atomic.file(target) as tmp:
        try:
            for k, (src_ep, length) in enumerate(zip(f["source_episodes"], f["lengths"])):
                rel = paths.v21_data_path(src_ep, manifest["source_chunks_size"])
                try:
                    with _open_source(src, rel) as fh:
                        table = pq.ParquetFile(fh).read()
                except (pa.ArrowInvalid, OSError) as e:
                    raise UserError(
                        f"{paths.join(src, rel)}: unreadable parquet ({e}); restore the file and rerun"
                    ) from None
                if table.num_rows != length:
                    raise UserError(
                        f"{paths.join(src, rel)}: {table.num_rows} rows but meta/episodes.jsonl says {length}"
                    )
                new_ep = f["first_episode"] + k
                table = _set_column(table, "episode_index", meta.int64_array(np.full(length, new_ep)))
                table = _set_column(table, "index", meta.int64_array(np.arange(row, row + length)))
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema)
                elif not table.schema.equals(writer.schema, check_metadata=False):
                    raise UserError(f"{paths.join(src, rel)}: columns differ from the episodes before it")
                group.append(table)
                entries.append({"dataset_from_index": row, "dataset_to_index": row + length})
                row += length
                if row - entries[-len(group)]["dataset_from_index"] >= ROW_GROUP_MIN_ROWS:
                    flush()
            flush()
        finally:
            if writer is not None:
                writer.close()
    return entries


@contextlib.contextmanager
def _open_source(src: str, rel: str):
    """A local source file as its path (the libraries then read it natively), a remote one as an fsspec file."""
    url = paths.join(src, rel)
    if not paths.is_remote(src):
        url = paths.local_path(url)
        if not os.path.exists(url):
            raise UserError(f"{url}: missing; restore it and rerun (the plan is kept)")
        yield url
    else:
        with meta.open_file(src, rel) as fh:
            yield fh


def _set_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    i = table.schema.get_field_index(name)
    if i < 0:
        return table
    return table.set_column(i, table.schema.field(i), values.cast(table.schema.field(i).type))


# ----------------------------------------------------------------------------------------------------- video
_NO_PROBE = {"options": {"probesize": "32"}, "stream_options": [{"skip_frame": "all"}]}
BUFFER_BYTES = 4 * 2**20  # FFmpeg writes in 32 KB calls by default: ~1 per packet of real-size video


def _write_video_file(manifest: dict, camera: str, f: dict, out: Path) -> tuple[str, list[dict]]:
    """Join one output video from its episodes' files; return how (`JOINED_BY`) and each episode's tick range."""
    target = out / paths.v30_video_path(camera, f["chunk_index"], f["file_index"])
    rels = [paths.v21_video_path(ep, camera, manifest["source_chunks_size"]) for ep in f["source_episodes"]]
    fps = Fraction(manifest["fps"]).limit_denominator(1001)
    with atomic.file(target) as tmp:
        try:
            return JOINED_BY[0], _join(manifest["src"], rels, f["lengths"], fps, tmp)
        except Unsupported:
            return JOINED_BY[1], _remux(manifest["src"], rels, f["lengths"], fps, tmp)


JOINED_BY = ("mp4 boxes", "ffmpeg remux")  # sample data copied as bytes, or every packet remuxed by FFmpeg


@contextlib.contextmanager
def _open_binary(src: str, rel: str):
    with _open_source(src, rel) as fh:
        if isinstance(fh, str):
            with open(fh, "rb") as local:
                yield local
            return
        try:
            yield fh
        except ValueError as e:
            error = no_range_requests(paths.join(src, rel), e)
            if error is None:
                raise
            raise error from None


def _join(src: str, rels: list[str], lengths: list[int], fps: Fraction, tmp: Path) -> list[dict]:
    """Copy the episodes' sample data as bytes (`join.join`); raise `Unsupported` before writing if it cannot."""
    tracks = _read_tracks(src, rels, lengths, fps)
    joined = join.join(tracks)
    with open(tmp, "wb", buffering=0) as dst:
        join.preallocate(dst, len(joined.header) + sum(t.data_range[1] for t in tracks))
        join.write_all(dst, joined.header)
        for rel, t in zip(rels, tracks):
            with _open_binary(src, rel) as fh:
                try:
                    join.copy_range(fh, dst, *t.data_range)
                except EOFError as e:
                    raise UserError(f"{e}; was it rewritten during the conversion? Rerun") from None
    per_frame = _ticks_per_frame(Fraction(1, joined.timescale), fps, rels[0])
    entries = [{"from_ticks": s, "to_ticks": s + n * per_frame} for s, n in zip(joined.starts, lengths)]
    return [{**e, "time_base": [1, joined.timescale]} for e in entries]


def _read_tracks(src: str, rels: list[str], lengths: list[int], fps: Fraction) -> list[Track]:
    tracks = []
    for rel, length in zip(rels, lengths):
        with _open_binary(src, rel) as fh:
            t = read_track(fh, paths.join(src, rel))
        if t.frames != length:
            raise UserError(f"{t.name}: {t.frames} frames but meta/episodes.jsonl says {length}")
        ticks = _ticks_per_frame(Fraction(1, t.timescale), fps, t.name)
        if int(t.durations.sum()) != length * ticks:
            raise Unsupported(f"{t.name}: frame durations do not add up to {length} frames at {fps} fps")
        tracks.append(t)
    return tracks


def _ticks_per_frame(time_base: Fraction, fps: Fraction, url: str) -> int:
    ticks = 1 / (fps * time_base)
    if ticks.denominator != 1:
        raise UserError(f"{url}: time base {time_base} cannot represent {fps} fps frames exactly")
    return int(ticks)


def _remux(src: str, rels: list[str], lengths: list[int], fps: Fraction, tmp: Path) -> list[dict]:
    """Stream-copy every packet through FFmpeg's muxer: for inputs `join.join` cannot copy as bytes."""
    import av

    entries = []
    with av.open(str(tmp), "w", format="mp4", buffer_size=BUFFER_BYTES) as out_c:
        out_s = None
        tb = codec = None
        offset = 0  # ticks of output time base before the current episode
        last_dts = None
        for rel, length in zip(rels, lengths):
            url = paths.join(src, rel)
            try:
                # after the first file only packets and the time base are read: probe no frames (opening
                # with FFmpeg's default probing decodes up to 7 H.264 frames, ~2 ms per file)
                probe = {} if out_s is None else _NO_PROBE
                with _open_source(src, rel) as fh, av.open(fh, "r", format="mp4", **probe) as in_c:
                    in_s = in_c.streams.video[0]
                    if out_s is None:
                        out_s = out_c.add_stream_from_template(in_s, opaque=True)
                        tb, codec = in_s.time_base, in_s.codec_context.name
                        out_s.time_base = tb
                    elif in_s.time_base != tb or in_s.codec_context.name != codec:
                        raise UserError(
                            f"{url}: codec or time base differs from the episodes before it in "
                            f"this camera; all episodes of a camera must share them"
                        )
                    packets = [p for p in in_c.demux(in_s) if p.dts is not None]
            except av.error.FFmpegError as e:
                raise UserError(f"{url}: unreadable video ({e}); restore the file and rerun") from None
            if len(packets) != length:
                raise UserError(f"{url}: {len(packets)} frames but meta/episodes.jsonl says {length}")
            ticks = _ticks_per_frame(Fraction(tb.numerator, tb.denominator), fps, url)
            first_pts = min(p.pts for p in packets)
            shift = offset - first_pts
            for p in packets:
                p.pts += shift
                p.dts += shift
                if last_dts is not None and p.dts <= last_dts:
                    raise UserError(f"{url}: decode timestamps would go backwards when concatenated")
                last_dts = p.dts
                p.stream = out_s
                out_c.mux(p)
            duration = length * ticks
            entries.append({"from_ticks": offset, "to_ticks": offset + duration})
            offset += duration
    return [{**e, "time_base": [tb.numerator, tb.denominator]} for e in entries]


# ------------------------------------------------------------------------------------------------------ units
def run_unit(work: Path, manifest: dict, unit: dict) -> None:
    """Write every output file of `unit`, then its done record (idempotent: same inputs, same bytes)."""
    out = work / OUT_DIR
    files = []
    pause = float(os.environ.get("DLBENCH_CONVERT_PAUSE_S", "0"))  # fault-injection tests: time to kill mid-unit
    for f in unit["files"]:
        if pause:
            time.sleep(pause)
        if unit["stream"] == planmod.DATA_STREAM:
            joined_by, entries = None, _write_data_file(manifest, f, out)
        else:
            joined_by, entries = _write_video_file(manifest, unit["stream"], f, out)
        files.append(
            {
                "chunk_index": f["chunk_index"],
                "file_index": f["file_index"],
                "first_episode": f["first_episode"],
                "episodes": entries,
                **({"joined_by": joined_by} if joined_by else {}),
            }
        )
    atomic.write_json(
        done_path(work, unit["unit"]),
        {"unit": unit["unit"], "stream": unit["stream"], "host": HOST, "files": files},
        indent=None,
    )


def work(
    work_dir: str | Path,
    lease_timeout_s: float = LEASE_TIMEOUT_S,
    poll_s: float = 1.0,
    progress=None,
    max_units: int | None = None,
    wait_for_others: bool = True,
) -> int:
    """Lease and run units until every unit is done; return how many this worker ran.

    Waits while other live workers hold the last units, and takes over a unit whose lease went stale, so when this
    returns normally the whole plan is done (unless `max_units` stopped it early). With `wait_for_others=False` it
    returns as soon as every unit left is held by someone else (a local pool whose parent checks the end itself).
    """
    work_dir = Path(work_dir)
    manifest = planmod.load_manifest(work_dir)
    (work_dir / DONE_DIR).mkdir(exist_ok=True)
    leases = LeaseDir(work_dir / LEASES_DIR, timeout_s=lease_timeout_s)
    ran = 0
    wait = 0.02  # idle back-off: others hold the last units; notice their end quickly, then poll less often
    while True:
        pending = [u for u in manifest["lease_order"] if not is_done(work_dir, u)]
        if not pending:
            return ran
        took = False
        for u in pending:
            lease = leases.try_acquire(f"unit-{u:06d}")
            if lease is None:
                continue
            try:
                if not is_done(work_dir, u):  # done while we looked
                    run_unit(work_dir, manifest, planmod.load_unit(work_dir, u))
                    ran += 1
                    if progress is not None:
                        progress(u)
            finally:
                lease.release()
            took = True
            if max_units is not None and ran >= max_units:
                return ran
        if took:
            wait = 0.02
        elif not wait_for_others:
            return ran
        else:
            time.sleep(wait)
            wait = min(2 * wait, poll_s)


def status(work_dir: str | Path) -> dict:
    work_dir = Path(work_dir)
    manifest = planmod.load_manifest(work_dir)
    done = sum(is_done(work_dir, u) for u in range(manifest["units"]))
    leased = LeaseDir(work_dir / LEASES_DIR).held() if (work_dir / LEASES_DIR).exists() else []
    return {"units": manifest["units"], "done": done, "leased": leased, "pid": os.getpid()}


def read_done(work_dir: Path, unit: int) -> dict:
    return json.loads(done_path(work_dir, unit).read_text())
