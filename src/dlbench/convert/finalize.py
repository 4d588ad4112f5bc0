"""Finish a conversion: v3.0 metadata from the done records, then publish the dataset in one step.

Everything is streamed episode by episode (the work directory's episode list, the source's episodes.jsonl and
episodes_stats.jsonl, and the workers' done records), so memory does not grow with the number of episodes. The
dataset appears at the destination complete, by a rename of the staged tree, or not at all.
"""

from __future__ import annotations

import errno
import itertools
import os
import shutil
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pyarrow.parquet as pq

from .. import atomic
from ..errors import UserError
from ..format import meta, paths
from . import plan as planmod
from . import work as workmod

EPISODE_BATCH = 1000  # rows per write of meta/episodes


def _stream_entries(work: Path, manifest: dict, stream: str) -> Iterator[dict]:
    """Per-episode output locations of one stream, in episode order."""
    for u in range(manifest["units"]):
        rec = workmod.read_done(work, u)
        if rec["stream"] != stream:
            continue
        for f in rec["files"]:
            for e in f["episodes"]:
                yield {"chunk_index": f["chunk_index"], "file_index": f["file_index"], **e}


def _aligned(src: str, rows: Iterator[dict], reread, what: str):
    """Look up source rows by episode index, streaming when the file is in order (the usual case)."""
    cache: dict[int, dict] | None = None

    def get(src_ep: int) -> dict:
        nonlocal cache
        if cache is None:
            row = next(rows, None)
            if row is not None and int(row["episode_index"]) == src_ep:
                return row
            cache = {int(r["episode_index"]): r for r in reread()}  # out of order: index it once
        if src_ep not in cache:
            raise UserError(f"{paths.join(src, what)}: no entry for episode {src_ep}")
        return cache[src_ep]

    return get


def _episode_rows(work: Path, manifest: dict) -> Iterator[dict]:
    src = manifest["src"]
    streams = manifest["streams"]
    entries = {s: _stream_entries(work, manifest, s) for s in streams}
    get_ep = _aligned(src, meta.iter_episodes_v21(src), lambda: meta.iter_episodes_v21(src), paths.EPISODES_JSONL_PATH)
    get_stats = _aligned(
        src,
        meta.iter_episodes_stats_v21(src),
        lambda: meta.iter_episodes_stats_v21(src),
        paths.EPISODES_STATS_JSONL_PATH,
    )
    for line in meta.iter_jsonl(str(work), planmod.EPISODES):
        src_ep = line["source_episode_index"]
        legacy = get_ep(src_ep)
        row = {k: v for k, v in legacy.items() if k not in ("episode_index", "tasks", "length")}
        row.update({"episode_index": line["episode_index"], "tasks": list(legacy["tasks"]), "length": line["length"]})
        d = next(entries[planmod.DATA_STREAM])
        row.update(
            {
                "data/chunk_index": d["chunk_index"],
                "data/file_index": d["file_index"],
                "dataset_from_index": d["dataset_from_index"],
                "dataset_to_index": d["dataset_to_index"],
            }
        )
        for cam in streams[1:]:
            v = next(entries[cam])
            tb = Fraction(*v["time_base"])
            row.update(
                {
                    f"videos/{cam}/chunk_index": v["chunk_index"],
                    f"videos/{cam}/file_index": v["file_index"],
                    f"videos/{cam}/from_timestamp": float(v["from_ticks"] * tb),
                    f"videos/{cam}/to_timestamp": float(v["to_ticks"] * tb),
                }
            )
        stats = get_stats(src_ep)["stats"]
        row.update(meta.flatten_stats(stats, plain=True))  # parsed from episodes_stats.jsonl
        row["_stats"] = stats
        yield row


def _write_episodes(out: Path, rows: Iterator[dict], limit_bytes: int, chunks_size: int, on_stats) -> int:
    """Write meta/episodes files, rolling over by size; returns the number of episodes."""
    ordinal, written, n = 0, 0, 0
    writer: pq.ParquetWriter | None = None
    schema = None
    tmp = target = None

    def close():
        nonlocal writer
        if writer is not None:
            writer.close()
            os.replace(tmp, target)
            writer = None

    while True:
        batch = list(itertools.islice(rows, EPISODE_BATCH))
        if not batch:
            break
        for r in batch:
            on_stats(r.pop("_stats"))
        if writer is not None and written >= limit_bytes:
            close()
            ordinal += 1
            written = 0
        chunk, file = paths.chunk_file_of(ordinal, chunks_size)
        for r in batch:
            r["meta/episodes/chunk_index"], r["meta/episodes/file_index"] = chunk, file
        table = meta.table_from_rows(batch, schema)
        schema = schema or table.schema
        if writer is None:
            target = out / paths.v30_episodes_path(chunk, file)
            tmp = atomic.tmp_path_for(target)
            writer = pq.ParquetWriter(tmp, schema)
        writer.write_table(table)
        written += table.nbytes
        n += len(batch)
    close()
    return n


def finalize(work_dir: str | Path, dst: str | Path) -> Path:
    """Write v3.0 metadata into the staged tree and publish it at `dst` (which must not exist or be empty)."""
    work = Path(work_dir)
    dst = Path(dst)
    manifest = planmod.load_manifest(work)
    missing = [u for u in range(manifest["units"]) if not workmod.is_done(work, u)]
    if missing:
        raise UserError(
            f"{work}: {len(missing)} of {manifest['units']} units are not done (first: {missing[0]}); "
            f"run `dlbench convert work {work}` until it returns, then finalize again"
        )
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise UserError(f"{dst} is not empty; choose an empty destination (the converted data is kept in {work})")
    out = work / workmod.OUT_DIR
    src = manifest["src"]
    info = meta.read_info(src)

    stats_acc: list[dict] = []

    def on_stats(s):  # aggregate in bounded batches to keep memory flat
        stats_acc.append(s)
        if len(stats_acc) >= 2 * EPISODE_BATCH:
            merged = meta.aggregate_stats(stats_acc)
            stats_acc.clear()
            stats_acc.append(merged)

    n = _write_episodes(
        out,
        _episode_rows(work, manifest),
        manifest["data_files_size_in_mb"] * 1024 * 1024,
        manifest["chunks_size"],
        on_stats,
    )
    tasks = meta.read_tasks_v21(src)
    meta.write_tasks_v30(out, tasks)
    meta.write_stats(out, meta.aggregate_stats(stats_acc))
    new_info = meta.v21_info_to_v30(info, manifest["data_files_size_in_mb"], manifest["video_files_size_in_mb"])
    new_info.update(
        {
            "total_episodes": n,
            "total_frames": manifest["total_frames"],
            "total_tasks": len(tasks),
            "chunks_size": manifest["chunks_size"],
            "splits": {"train": f"0:{n}"},
        }
    )
    meta.write_info(out, new_info)
    publish(out, dst)
    return dst


def publish(staged: Path, dst: Path) -> None:
    """Hard-link the staged tree into a hidden sibling of `dst`, then rename it to `dst` (one atomic step).

    The staged tree stays, so finalize can run again (say, after `dst` was deleted) without redoing the units.
    Across filesystems the files are copied instead of linked.
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.publishing")
    shutil.rmtree(tmp, ignore_errors=True)

    def link(src, target):
        try:
            os.link(src, target)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise
            shutil.copy2(src, target)

    try:
        # temporaries of killed workers (hidden *.tmp files) stay behind
        shutil.copytree(staged, tmp, copy_function=link, ignore=shutil.ignore_patterns(".*.tmp"))
        if dst.is_dir():
            dst.rmdir()  # empty (checked by the caller)
        os.rename(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
