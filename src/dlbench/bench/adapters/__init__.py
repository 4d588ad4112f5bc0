"""Loaders the harness can measure, behind one small interface (`interface.Adapter`).

dlbench_map / dlbench_stream are this project's loaders; lerobot_map / lerobot_stream are LeRobot 0.6.1's
`LeRobotDataset` and `StreamingLeRobotDataset`, importable only in the peer environment (the harness runs there
for them, see `launch.py`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from functools import partial

from ...errors import UserError
from ...format.paths import local_path
from ...loader.collate import collate
from ...loader.dataset_meta import DatasetMeta
from ...run.loaders import LEROBOT_LOADERS, LOADERS
from ..interface import Adapter, lerobot_delta_timestamps, not_importable


def _cache_stats(ds) -> dict:
    return ds.cache.stats()


def _decode_seconds(ds) -> tuple[float, float]:
    """This process's seconds decoding, and waiting on storage: the decoders' reads of remote bytes (taken out of
    decoding) and the fetches started before decoding (`metrics.time_split`)."""
    waited = ds.builder.cache.reads.seconds
    return ds.builder.decode_s - waited, ds.builder.fetch_s + waited


def _dlbench_adapter(ds, iterable: bool) -> Adapter:
    # partials of module functions, not lambdas: spawned DataLoader workers (cuda decode) pickle the dataset wrapper
    stream = (
        {"busy_workers": ds.busy_workers, "work_note": ds.work_note, "buffered": ds.buffer_size} if iterable else {}
    )
    return Adapter(
        ds,
        iterable,
        ds.frames_per_item,
        partial(_cache_stats, ds),
        partial(_decode_seconds, ds),
        collate=collate,
        **stream,
    )  # dlbench.loader.DataLoader's batching


def make_adapter(run, dmeta: DatasetMeta | None = None, tag_items: bool = False) -> Adapter:
    """Build the loader named by `run.loader` (a RunSpec) over `run.root`, whose metadata `dmeta` the caller has
    read (None: read here); `tag_items`: dlbench_stream's items carry their place in the stream, for its `observe`
    and `state_dict` (the resume check)."""
    dmeta = dmeta or DatasetMeta.load(run.root, data_files_root=run.data_files_root)
    # lerobot_map@NAME is lerobot_map: which LeRobot answers is the environment's (the rank runs in .peers/NAME)
    run = dataclasses.replace(run, loader=run.loader_name.base)
    # what both dlbench loaders take from a run; frames as uint8, as LeRobot's training factory asks of LeRobotDataset
    # (and of the baselines here)
    common = dict(
        mode=run.mode,
        delta_timestamps=run.delta_timestamps,
        decode_device=run.decode_device,
        decoder_cache_mb=run.decoder_cache_mb,
        remote_block_kb=run.remote_block_kb,
        data_files_root=run.data_files_root,
        meta=dmeta,
        return_uint8=True,
    )
    if run.loader == "dlbench_map":
        from ...loader.map import LeRobotMapDataset

        ds = LeRobotMapDataset(run.root, decoder_cache_size=run.decoder_cache_size or 16, **common)
        return _dlbench_adapter(ds, iterable=False)
    if run.loader == "dlbench_stream":
        from ...loader.stream import LeRobotStreamingDataset

        ds = LeRobotStreamingDataset(
            run.root,
            decoder_cache_size=run.decoder_cache_size,
            fetch_episodes=run.fetch_episodes,
            rank=run.rank,
            world_size=run.world_size,
            seed=run.seed,
            pool_size=run.pool_size,
            buffer_size=run.shuffle_buffer,
            read_ahead=run.read_ahead,
            episode_order=run.episode_order,
            pieces=run.pieces,
            gop_run=run.gop_run,
            buffer_mb=run.buffer_mb,
            decode_ahead=run.decode_ahead,
            tag_items=tag_items,
            **common,
        )
        if run.plan_workers is not None:
            ds.plan_for(run.plan_workers)
        return _dlbench_adapter(ds, iterable=True)
    if run.loader in LEROBOT_LOADERS:
        return _lerobot(run, dmeta)
    if run.loader == "lance_map":  # lerobot-lancedb's LanceDBDataset, beside LeRobot's in the peer environment
        from .lance import lance_adapter

        return lance_adapter(run, dmeta)
    if run.loader == "ray_data":  # Ray Data's read_lerobot, beside LeRobot in the peer environment
        from .ray_data import ray_adapter

        return ray_adapter(run, dmeta)
    if run.loader == "daft_data":  # Daft's daft.datasets.lerobot, in the peer environment
        from .daft_data import daft_adapter

        return daft_adapter(run, dmeta)
    raise UserError(f"loader {run.loader!r} is unknown; choose one of {list(LOADERS)}")


_lerobot_decode_s = [0.0]  # this process's seconds in LeRobot's frame decoding (its reads of remote bytes included)


def _lerobot_decode_seconds() -> tuple[float, float]:
    """As `_decode_seconds`, for LeRobot's loaders: storage waits are inside its decoding, not told apart."""
    return _lerobot_decode_s[0], 0.0


def _time_lerobot_decoding() -> None:
    """Count the time LeRobot's readers spend in its decode functions (looked up in their modules at each call)."""
    import functools

    from lerobot.datasets import dataset_reader, streaming_dataset

    decoders = ((dataset_reader, "decode_video_frames"), (streaming_dataset, "decode_video_frames_torchcodec"))
    for module, name in decoders:
        decode = getattr(module, name)
        if getattr(decode, "timed_by_dlbench", False):
            continue

        @functools.wraps(decode)
        def timed(*args, _decode=decode, **kwargs):
            t0 = time.perf_counter()
            try:
                return _decode(*args, **kwargs)
            finally:
                _lerobot_decode_s[0] += time.perf_counter() - t0

        timed.timed_by_dlbench = True
        setattr(module, name, timed)


def _lerobot(run, dmeta: DatasetMeta) -> Adapter:
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
        from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset
    except ImportError:
        raise not_importable(run.loader, "LeRobot 0.6.1") from None
    deltas = lerobot_delta_timestamps(dmeta, run.mode, run.delta_timestamps)
    fpi = sum(len(deltas.get(c, [0])) if deltas else 1 for c in dmeta.frame_keys)
    where = lerobot_location(run.root)
    # lerobot-train batches a dataset with language columns with its own collate, which leaves them out
    own = {}
    if dmeta.has_language_columns:
        from lerobot.utils.collate import lerobot_collate_fn

        own["collate"] = lerobot_collate_fn
    if run.loader == "lerobot_map":
        ds = LeRobotDataset(**where, delta_timestamps=deltas, return_uint8=True, video_backend="torchcodec")
        _stop_tqdm_monitor()
        _time_lerobot_decoding()
        return Adapter(ds, False, fpi, None, _lerobot_decode_seconds, **own)
    from . import lerobot_buckets as lb

    notes = []
    if where.get("repo_type") == "bucket":  # its meta/ sync needs Xet: dlbench places meta/ (lerobot_buckets)
        lb.place_bucket_meta(where["repo_id"])
        notes.append(lb.META_NOTE)
    ds = StreamingLeRobotDataset(
        **where,
        delta_timestamps=deltas,
        return_uint8=True,
        seed=run.seed,
        buffer_size=run.shuffle_buffer,
        max_num_shards=run.max_num_shards or max(1, run.num_workers),
    )
    if run.world_size > 1:
        notes.append(lb.split_by_node(ds, run.rank, run.world_size))
    _stop_tqdm_monitor()
    _time_lerobot_decoding()
    shards = ds.num_shards if isinstance(ds.num_shards, int) else None
    busy = None if shards is None else partial(_whole_shards, shards)
    note = partial(_lerobot_stream_note, "; ".join(notes), shards)
    return Adapter(ds, True, fpi, None, _lerobot_decode_seconds, busy_workers=busy, work_note=note,
                   buffered=run.shuffle_buffer, **own)  # fmt: skip


def _whole_shards(shards: int, num_workers: int) -> int:
    """A stream over `datasets` shards (LeRobot's: one per data file) gives each worker whole shards: past
    `shards` workers idle, which `datasets` only warns of in the worker's log."""
    return min(max(num_workers, 1), shards)


def _lerobot_stream_note(own: str, shards: int | None, num_workers: int) -> str:
    """What dlbench did for LeRobot's stream (`own`: its bucket meta/, its split by node), and the workers that idle
    past its shards."""
    busy = None if shards is None else _whole_shards(shards, num_workers)
    idle = (
        f"{busy} of {num_workers} DataLoader workers have data to read: the stream has {busy} shard(s) (one per data "
        f"file); the others idle: use num_workers <= {busy}"
        if busy is not None and busy < max(num_workers, 1)
        else ""
    )
    return "; ".join(n for n in (own, idle) if n)


def lerobot_location(root: str) -> dict:
    """What LeRobot's datasets take to find `root`: a local root, a Hub repo id and revision, or a bucket path."""
    root = str(root)
    if root.startswith("hf://buckets/"):
        from .lerobot_buckets import bucket_repo_id

        return {"repo_id": bucket_repo_id(root), "repo_type": "bucket"}
    if root.startswith("hf://datasets/"):
        repo, _, revision = root.removeprefix("hf://datasets/").partition("@")
        return {"repo_id": repo.rstrip("/"), "revision": revision or None}
    return {"repo_id": "local/bench", "root": local_path(root)}  # other URLs: refused by `run.spec.check`


def _stop_tqdm_monitor() -> None:
    """LeRobot's loading progress bars leave tqdm's monitor thread running. Stopped, it lets the DataLoader fork
    its workers, as LeRobot's users' DataLoaders do (`dlbench.workers` forks only while no other thread runs);
    tqdm starts it again for the next bar."""
    from tqdm._monitor import TMonitor

    for thread in threading.enumerate():
        if isinstance(thread, TMonitor):
            thread.exit()  # and joins it
