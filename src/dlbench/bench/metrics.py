"""A rank's record from what its pass saw: rates and latencies, decoder caches, frame checks, remote cost."""

from __future__ import annotations

import numpy as np
import torch

from ..loader.dataset_meta import DatasetMeta, resolve_windows
from ..run.spec import RunSpec
from ..validate import is_synthetic
from . import record as recordmod
from .checks.effective import WINDOW_BATCHES, distinct_frames, lowest
from .checks.frames import BarcodeCheck, DecodeCheck
from .checks.shuffle import shuffle_score, spread_score
from .measure import Pass
from .probe import probe
from .rates import run_rate
from .remote import cost_metrics, needed_bytes

MAX_KEPT_BATCHES = 2000  # each batch's projected mean kept in the record, for pooling the ranks (a few KB each)


def frame_checks(run: RunSpec, dmeta: DatasetMeta, device: torch.device) -> tuple:
    """The checks of the frames consumed, each None where it does not apply: (barcodes, independent decode)."""
    barcodes = BarcodeCheck(dmeta, run.mode, run.delta_timestamps) if run.verify and is_synthetic(dmeta.info) else None
    decoded = (
        DecodeCheck(
            dmeta,
            run.mode,
            run.check_frames,
            deltas=run.delta_timestamps,
            gpu=device.type == "cuda",
            seed=run.seed + run.rank,
        )
        if run.verify
        else None
    )
    return barcodes, decoded


def timing_metrics(measured: Pass, frames_per_item: int, precision: float = 0.0) -> dict:
    """Rates (`run_rate`, with the windows' spread), the consumer's and the dataset's latencies, the clock."""
    windows = measured.seen.windows
    lat = np.concatenate(measured.seen.latencies)
    gaps = np.asarray(measured.seen.intervals) * 1000.0
    rates = np.array([w["samples"] / w["seconds"] for w in windows])
    rate = run_rate(windows, precision)
    out = {
        "samples": sum(w["samples"] for w in windows),
        "warmup_samples": len(measured.warm_rows or ()),  # checked too, not timed
        "batches": sum(w["batches"] for w in windows),
        "repeats": len(windows),
        "frames_per_s_node": rate * frames_per_item,  # min and max: the windows' spread
        "frames_per_s_min": float(rates.min()) * frames_per_item,
        "frames_per_s_max": float(rates.max()) * frames_per_item,
        "samples_per_s": rate,
        "first_batch_latency_s": measured.first_batch_latency,
        # of it, the workers' start (a fork server's own start included); None: no workers
        "workers_start_s": measured.workers_start,
        # the share of the steady windows the consumer spent blocked on data (at step_ms per batch)
        "data_wait_frac": sum(w["data_wait_s"] for w in windows) / sum(w["seconds"] for w in windows),
        # the consumer's view: time between batches arriving (on the GPU where there is one)
        "batch_interval_p50_ms": float(np.percentile(gaps, 50)),
        "batch_interval_p95_ms": float(np.percentile(gaps, 95)),
        "batch_interval_p99_ms": float(np.percentile(gaps, 99)),
        # the dataset's view: time to produce one item inside a worker (a streaming loader's is a buffer pop)
        "latency_p50_ms": float(np.percentile(lat, 50)),
        "latency_p95_ms": float(np.percentile(lat, 95)),
        "latency_p99_ms": float(np.percentile(lat, 99)),
        **cpu_metrics(windows),
        **item_metrics(measured.seen.decoding, lat),
        "wallclock_s": measured.wallclock,
        "steady_window_s": float(sum(w["seconds"] for w in windows)),
        "window_start_unix": windows[0]["start_unix"],
        "window_end_unix": windows[-1]["end_unix"],
        "windows": windows,
    }
    return {**out, **time_split(out, max(w.get("workers", 0) for w in windows))}


def item_metrics(decoding: dict, latencies: np.ndarray) -> dict:
    """A worker's time per item built, and the parts of it spent decoding and waiting on storage (dlbench's loaders
    count them; None for the others): the rest is reading rows and assembling windows."""
    counted = sum(d[2] for d in decoding.values())
    item_ms = float(np.mean(latencies)) if len(latencies) else None
    if counted <= 0:
        return {
            "worker_item_ms_per_sample": item_ms,
            "worker_decode_ms_per_sample": None,
            "worker_fetch_ms_per_sample": None,
        }
    waited = sum(d[4] - d[3] for d in decoding.values()) / counted * 1000
    return {
        "worker_item_ms_per_sample": item_ms,
        "worker_decode_ms_per_sample": sum(d[1] - d[0] for d in decoding.values()) / counted * 1000,
        "worker_fetch_ms_per_sample": max(0.0, waited),
    }


def time_split(metrics: dict, workers: int) -> dict:
    """Where a worker's wall time per sample it built went: fetch (waiting on storage), decode, assembly (the rest of
    building items: rows, windows, the worker's collate) and idle (the rest: the hand-over into shared memory, a
    full queue, nothing to read). All wall time: a decode on a shared core waits for it. The four add up to
    workers x window seconds / samples. Item times are means over the items (a stream's refills land in the items
    that trigger them). Without workers the one process's time: idle is then its time outside items (taking
    batches over, checks, consumer). All None where the loader does not count its decoding."""
    decode, fetch = metrics.get("worker_decode_ms_per_sample"), metrics.get("worker_fetch_ms_per_sample")
    keys = ("split_fetch_ms", "split_decode_ms", "split_assembly_ms", "split_idle_ms")
    rate = metrics["samples"] / metrics["steady_window_s"] if metrics.get("steady_window_s") else None
    if decode is None or not rate:
        return dict.fromkeys(keys)
    wall = max(workers, 1) * 1000.0 / rate
    other = max(0.0, (metrics.get("worker_item_ms_per_sample") or 0.0) - decode - fetch)
    return dict(zip(keys, (fetch, decode, other, max(0.0, wall - fetch - decode - other))))


def cpu_metrics(windows: list[dict]) -> dict:
    """Where the windows' CPU went, per sample delivered: this process (hand-over, checks, consumer) and its checks
    alone; the DataLoader workers together, and the share of their time they were busy (None without workers)."""
    samples = sum(w["samples"] for w in windows) or 1
    seconds = sum(w["seconds"] for w in windows)
    workers = max(w.get("workers", 0) for w in windows)
    worker_cpu = sum(w.get("worker_cpu_s", 0.0) for w in windows)
    main_cpu, host_cpu = sum(w.get("main_cpu_s", 0.0) for w in windows), sum(w.get("host_cpu_s", 0.0) for w in windows)
    return {
        "main_cpu_ms_per_sample": main_cpu / samples * 1000,
        "check_ms_per_sample": sum(w.get("check_s", 0.0) for w in windows) / samples * 1000,
        "worker_cpu_ms_per_sample": worker_cpu / samples * 1000 if workers else None,
        "worker_busy_frac": worker_cpu / (workers * seconds) if workers and seconds else None,
        "worker_core_wait_ms_per_sample": (
            sum(w["worker_core_wait_s"] for w in windows) / samples * 1000
            if workers and all(w.get("worker_core_wait_s") is not None for w in windows)
            else None
        ),
        # the host's other processes' CPU over the windows (storage servers and proxies on this host, other ranks)
        "other_cpu_ms_per_sample": max(0.0, host_cpu - main_cpu - worker_cpu) / samples * 1000 if host_cpu else None,
        **copy_metrics(windows),
    }


def copy_metrics(windows: list[dict]) -> dict:
    """The consumer's host-to-GPU copies (from pinned ring slots where the frames were decoded on the CPU): ms per
    batch and GB/s. None where no batch was copied (no GPU, or a GPU step overlapping the copies)."""
    batches = sum(w["batches"] for w in windows)
    copy_s, nbytes = sum(w.get("copy_s", 0.0) for w in windows), sum(w.get("copy_bytes", 0) for w in windows)
    if not copy_s or not batches:
        return {"h2d_ms_per_batch": None, "h2d_gb_per_s": None}
    return {"h2d_ms_per_batch": copy_s / batches * 1000, "h2d_gb_per_s": nbytes / copy_s / 1e9}


def cache_metrics(worker_stats: dict) -> dict:
    """The decoder caches' counters summed over the workers; None where the loader keeps none."""
    cache = np.sum(list(worker_stats.values()), axis=0)
    known = cache[0] >= 0
    lookups = cache[0] + cache[1]
    return {
        "cache_hits": int(cache[0]) if known else None,
        "cache_misses": int(cache[1]) if known else None,
        "cache_evictions": int(cache[2]) if known else None,
        "cache_hit_rate": (float(cache[0] / lookups) if lookups else 0.0) if known else None,
        "cache_size": int(cache[3]) if known else None,
        # files NVDEC could not decode (e.g. AV1 on Hopper) that torchcodec decoded on the CPU instead
        "decode_cpu_fallbacks": int(cache[4]) if known else None,
    }


def check_metrics(barcodes: BarcodeCheck | None, decoded: DecodeCheck | None) -> dict:
    """Frames checked and found wrong, by barcode and by independent decode, and in all."""
    out = {
        "frames_barcode_checked": barcodes.checked if barcodes else 0,
        "frames_barcode_wrong": barcodes.wrong if barcodes else 0,
        "frames_decode_checked": decoded.checked if decoded else 0,
        "frames_decode_wrong": decoded.wrong if decoded else 0,
        "decode_check_worst_diff": decoded.worst_mean_abs_diff if decoded else None,
    }
    out["frames_verified"] = out["frames_barcode_checked"] + out["frames_decode_checked"]
    out["frames_wrong"] = out["frames_barcode_wrong"] + out["frames_decode_wrong"]
    return out


def effective_metrics(seen, dmeta: DatasetMeta, run: RunSpec) -> dict:
    """What the delivered batches are worth to training, against the dataset (`checks.effective`): effective /
    nominal batch size over one batch and over `WINDOW_BATCHES` consecutive ones (the lower of pixels and numeric
    features, each also apart) with their 90% intervals, NaN where too few batches to show; each batch's projected
    mean (`shuffle_batch_means`, for the ranks' global batch: `report.aggregate`); the share of distinct frames."""
    moments = seen.moments
    one, window = moments.effective(1), moments.effective(WINDOW_BATCHES)
    windows = resolve_windows(run.mode, run.delta_timestamps, dmeta)
    offsets = {c: [int(o) for o in windows.get(c, [0])] for c in dmeta.cameras}
    out = {}
    for name, figures in (("batch", one), ("window", window)):
        value, low, high = lowest(figures)
        out.update({f"shuffle_effective_{name}": value, f"shuffle_effective_{name}_low": low,
                    f"shuffle_effective_{name}_high": high})  # fmt: skip
        out.update({f"shuffle_effective_{name}_{g}": f[0] for g, f in figures.items()})
    kept = moments.kept()
    return {
        **out,
        "shuffle_batch_size": moments.full_size(),
        "shuffle_batch_means": {g: np.round(p[:MAX_KEPT_BATCHES], 5).tolist() for g, p in kept.items()},
        "shuffle_reference_correction": moments.reference.correction if moments.reference is not None else 0.0,
        "shuffle_distinct_frames": distinct_frames(seen.rows, offsets, dmeta.ep_from, dmeta.ep_to),
    }


def run_metrics(run: RunSpec, measured: Pass, dmeta: DatasetMeta, adapter, barcodes, decoded, rows) -> dict:
    """The record's metrics: the pass, the single-process probe, the decoder caches, the dataset, the checks, what
    the storage served (`rows`: the samples delivered in the windows)."""
    fpi = adapter.frames_per_item
    timing, cache = timing_metrics(measured, fpi, run.precision), cache_metrics(measured.seen.worker_stats)
    remote = cost_metrics(None, None, None, 0, None)
    if measured.remote is not None:  # over the whole run: fetching ahead moves requests out of the windows
        delivered = np.asarray(list(measured.warm_rows) + list(rows), np.int64)
        needed = needed_bytes(dmeta, delivered, run.mode, run.delta_timestamps)
        remote = cost_metrics(*measured.remote, len(delivered) * fpi, needed)
    probed = probe(run, dmeta)
    cam0 = dmeta.info["features"][dmeta.cameras[0]]["shape"] if dmeta.cameras else [0, 0, 0]
    return {
        **timing,
        "consumer_device": measured.consumer.type,
        "pin_memory": measured.pin,
        "peak_pss_mb": measured.peak_pss_mb,
        "peak_pss_workers_mb": measured.peak_pss_workers_mb,
        "peak_uss_workers_mb": measured.peak_uss_workers_mb,
        **effective_metrics(measured.seen, dmeta, run),
        "shuffle_randomness": shuffle_score(measured.seen.distinct, measured.seen.sizes, dmeta.ep_to - dmeta.ep_from),
        "shuffle_spread": spread_score(measured.seen.rows, dmeta.ep_from, dmeta.ep_to),
        "probe_samples_per_s": probed["samples_per_s"],
        "probe_fetch_ms": probed["fetch_ms"],
        "probe_decode_ms": probed["decode_ms"],
        **cache,
        "worker_start_method": measured.context,
        "num_cameras": len(dmeta.cameras),
        "frames_per_sample": fpi,
        "image_shape": "x".join(str(v) for v in cam0),
        "fps": dmeta.fps,
        **check_metrics(barcodes, decoded),
        **remote,
    }


def rank_record(run: RunSpec, metrics: dict, decoded: DecodeCheck | None, resume_problem: str = "") -> dict:
    """The rank's record: unverified where no frame was checked; the wrong frames' problems and a failed resume
    check as its reason."""
    if metrics["frames_verified"] == 0:
        why = (
            "verify is off"
            if not run.verify
            else "no frame was checked (check_frames: 0 on a dataset without barcodes)"
        )
        reason = "; ".join(r for r in (f"unverified: {why}", resume_problem) if r)
        return recordmod.make_record(run.record(), metrics, status="unverified", reason=reason)
    wrong = f"wrong frames: {'; '.join(decoded.problems)}" if decoded is not None and decoded.problems else ""
    reason = "; ".join(r for r in (wrong, resume_problem) if r)
    # a resume that loses or repeats frames is a failed run, whatever its speed
    return recordmod.make_record(run.record(), metrics, status="failed" if resume_problem else "ok", reason=reason)
