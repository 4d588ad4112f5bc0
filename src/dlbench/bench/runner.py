"""The benchmark harness: a dummy consumer pulls batches from a real DataLoader over a fixed steady window.

Timeline of one run: build the loader; the first batch (its latency is reported); warm-up for `warmup_s`; then
`repeats` steady windows of `duration_s` seconds (or `num_batches`, whichever comes first), back to back, during
which every batch is moved to the GPU where torch sees one (from pinned memory, as training does) and counted. The
headline rate is the median window's; the record keeps every window. After the DataLoader pass, a single-process
probe splits the time per sample into fetch (parquet, indexing, collation) and decode; with `resume_check`
(dlbench_stream only), one more epoch of the rank, interrupted and resumed with one worker more, checks that
`state_dict` / `load_state_dict` deliver every frame exactly once.
"""

from __future__ import annotations

import collections
import json
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from functools import partial

import numpy as np
import torch

from ..config import defaults
from ..errors import UserError
from ..loader.collate import CollateWorkerInit, collate, to_torch
from ..loader.dataloader import import_decoder_before_fork, make_ring
from ..loader.dataset_meta import DatasetMeta
from ..procstat import MemorySampler
from ..validate import is_synthetic
from ..workers import start_method
from . import record as recordmod
from .adapters import make_adapter
from .remote import cost_metrics, needed_bytes
from .shuffle import shuffle_score
from .verify import BarcodeCheck, DecodeCheck

_RUN = defaults("bench", "defaults")  # the config schema's run defaults: one source for workflow, CLI and library


@dataclass
class BenchConfig:
    """One rank's run: the run spec's fields (`dlbench.spec`) plus the rank. Defaults are the config schema's."""

    root: str  # the v3.0 dataset: local path or fsspec URL
    dataset: str = "adhoc"  # its name in config.yaml's `datasets`
    loader: str = _RUN["loader"]
    mode: str = _RUN["mode"]
    delta_timestamps: dict | None = None  # a mode of config.yaml's `modes:` (seconds per key); overrides `mode`
    batch_size: int = _RUN["batch_size"]
    num_workers: int = _RUN["num_workers"]
    decode_device: str = _RUN["decode_device"]
    step_ms: int = _RUN["step_ms"]  # the consumer's training step: each batch is held this long
    duration_s: float = _RUN["duration_s"]
    warmup_s: float = _RUN["warmup_s"]
    num_batches: int | None = None
    repeats: int = _RUN["repeats"]  # steady windows, back to back
    decoder_cache_size: int | None = None  # None: the loader's own default
    decoder_cache_mb: float | None = None  # dlbench loaders: the decoders' memory budget per process
    remote_block_kb: float | None = None  # dlbench loaders: read size of remote video files
    fetch_episodes: int = _RUN["fetch_episodes"]  # dlbench_stream: episodes fetched per request (0: as decoders ask)
    pool_size: int = _RUN["pool_size"]  # streaming loaders: live episodes
    buffer_size: int = _RUN["buffer_size"]  # streaming loaders: shuffle buffer
    prefetch_factor: int = 2
    # batches are taken as workers finish them, as the decode ceiling's processes work (docs/benchmarks.md)
    in_order: bool = False
    seed: int = _RUN["seed"]
    verify: bool = _RUN["verify"]
    check_frames: int = _RUN["check_frames"]  # per camera: compared with an independent decode
    resume_check: bool = _RUN["resume_check"]  # dlbench_stream: an epoch interrupted and resumed (`_resume_check`)
    probe_samples: int = _RUN["probe_samples"]
    scenario: str = "adhoc"
    run_id: str = ""
    source: str = _RUN["source"]
    source_spec: dict | None = None
    nodes: int = _RUN["nodes"]  # nodes the ranks run on (summary.csv's per-node figures)
    data_files_root: str | None = None  # data/ and videos/ when not under `root` (which then holds meta/)
    on_unavailable: str = _RUN["on_unavailable"]
    on_unreachable: str = "error"
    require_warm: str | None = None
    on_cold: str = "error"
    num_workers_requested: int | str | None = None  # "auto" when the job sized the workers
    rank: int = 0
    world_size: int = 1
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_spec(cls, spec: dict, rank: int = 0) -> BenchConfig:
        """The config of `rank` for a run spec (its `ranks` is the world size)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(spec) - names - {"ranks"})
        if unknown:
            raise UserError(f"run spec has unknown key(s) {unknown}; rebuild it with this version of dlbench")
        values = {k: v for k, v in spec.items() if k in names and k not in ("rank", "world_size")}
        return cls(**values, rank=rank, world_size=spec.get("ranks", spec.get("world_size", 1)))


def _info(t0: float, stats) -> np.ndarray:
    """[latency_ms, worker, cache hits, misses, evictions, size, cpu fallbacks] for one sample (-1 where unknown)."""
    ms = (time.perf_counter() - t0) * 1000.0
    w = torch.utils.data.get_worker_info()
    s = stats() if stats else {}
    return np.array(
        [
            ms,
            w.id if w else -1,
            s.get("hits", -1),
            s.get("misses", -1),
            s.get("evictions", -1),
            s.get("size", -1),
            s.get("cpu_fallbacks", -1),
        ],
        dtype=np.float64,
    )


def _collate(samples, collate_items=torch.utils.data.default_collate):
    """The items collate as the loader's users batch them; the per-sample infos stay one small numpy array, pickled
    with the batch rather than passed as one more shared-memory tensor (see `dlbench.loader.collate`)."""
    items, infos = zip(*samples)
    return collate_items(list(items)), np.stack(infos)


class _Timed(torch.utils.data.Dataset):
    """Wraps a map-style dataset: each sample comes with its `_info`."""

    def __init__(self, inner, stats):
        self.inner, self.stats = inner, stats

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, idx):
        t0 = time.perf_counter()
        item = self.inner[idx]
        return item, _info(t0, self.stats)


class _TimedIterable(torch.utils.data.IterableDataset):
    """Wraps an iterable dataset: each sample comes with its `_info` (latency = time in the iterator's next)."""

    def __init__(self, inner, stats):
        self.inner, self.stats = inner, stats

    def __iter__(self):
        it = iter(self.inner)
        while True:
            t0 = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            yield item, _info(t0, self.stats)


def _to_device(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


def cuda_unavailable_reason(decode_device: str) -> str | None:
    if decode_device.startswith("cuda") and not torch.cuda.is_available():
        return "decode_device cuda was asked for but torch sees no CUDA device on this machine"
    return None


def _dataloader(cfg: BenchConfig, adapter, device: torch.device, pin: bool):
    """The DataLoader the run measures, batched as the loader's users batch it: (loader, worker start method)."""
    workers = cfg.num_workers
    # spawned for CUDA decoding, else forked unless a thread runs here (dlbench.workers)
    context = start_method(cuda=device.type == "cuda") if workers > 0 else None
    prefetch = cfg.prefetch_factor if workers > 0 else None
    collate_items, worker_init = adapter.collate, None
    if collate_items is collate:  # as dlbench.loader.DataLoader batches: through a ring of shared slots
        ring = make_ring(adapter.dataset, cfg.batch_size, workers, prefetch)
        collate_items = partial(collate, ring=ring)
        worker_init = CollateWorkerInit()
        if ring is not None and pin:
            ring.pin()  # batches in ring slots reach the GPU by DMA, uncopied
    common = dict(
        batch_size=cfg.batch_size,
        num_workers=workers,
        persistent_workers=workers > 0,
        collate_fn=partial(_collate, collate_items=collate_items),
        prefetch_factor=prefetch,
        pin_memory=pin,
        multiprocessing_context=context,
        worker_init_fn=worker_init,
        in_order=cfg.in_order,
    )
    if adapter.iterable:
        return torch.utils.data.DataLoader(_TimedIterable(adapter.dataset, adapter.cache_stats), **common), context
    # map-style: every rank shuffles its own disjoint part of the dataset (as DistributedSampler does in training)
    sampler = torch.utils.data.distributed.DistributedSampler(
        adapter.dataset, num_replicas=cfg.world_size, rank=cfg.rank, shuffle=True, seed=cfg.seed, drop_last=True
    )
    return torch.utils.data.DataLoader(_Timed(adapter.dataset, adapter.cache_stats), sampler=sampler, **common), context


class _Epochs:
    """Batches from a DataLoader without end: a rank that runs out starts its next epoch (set_epoch where there is
    one), as training does. A `UserError` if a whole epoch brings no batch (this rank has nothing to read)."""

    def __init__(self, loader, dataset, rank: int = 0, world_size: int = 1):
        self.loader, self.dataset, self.epoch = loader, dataset, 0
        self.rank, self.world_size = rank, world_size
        self.it = iter(loader)  # forks the workers: before any sampler thread exists (never fork beside a thread)

    def next(self):
        try:
            return next(self.it)
        except StopIteration:
            self.epoch += 1
            for epoch_aware in (self.dataset, self.loader.sampler):
                if hasattr(epoch_aware, "set_epoch"):
                    epoch_aware.set_epoch(self.epoch)
            self.it = iter(self.loader)
            try:
                return next(self.it)
            except StopIteration:
                raise UserError(
                    f"rank {self.rank} of {self.world_size}: an epoch of this loader brought no batch (no episode "
                    f"for this rank, or fewer samples than one batch); use fewer ranks or a smaller batch_size"
                ) from None

    def close(self) -> None:
        self.it = self.loader = None  # shuts the workers down


@dataclass
class _Window:
    """What the consumer saw over the measured windows."""

    windows: list = field(default_factory=list)  # per window: start/end time, samples, batches, seconds
    latencies: list = field(default_factory=list)  # per batch: each item's time to build inside its worker
    intervals: list = field(default_factory=list)  # seconds between batches arriving
    distinct: list = field(default_factory=list)  # distinct episodes per batch (shuffle randomness)
    sizes: list = field(default_factory=list)
    worker_stats: dict = field(default_factory=dict)  # worker id -> its latest decoder cache counters

    def add(self, batch, info: np.ndarray) -> None:
        """One batch that arrived, with its per-sample infos (`_info`)."""
        self.latencies.append(info[:, 0])
        for row in info:
            self.worker_stats[int(row[1])] = row[2:7]
        self.distinct.append(len(np.unique(batch["episode_index"].cpu().numpy())))
        self.sizes.append(len(info))


@dataclass
class _Pass:
    """The DataLoader pass: what the consumer saw, where, and the clock around it."""

    seen: _Window
    consumer: torch.device
    pin: bool
    context: str | None  # workers' start: fork, forkserver (a thread ran here) or spawn (CUDA); None: no workers
    first_batch_latency: float
    wallclock: float
    peak_pss_mb: float
    remote: tuple[dict, dict] | None = None  # the metering proxy's counts at the windows' start and end
    warm_rows: list | None = None  # the samples delivered before the windows (first batch and warm-up)


def _frame_checks(cfg: BenchConfig, dmeta: DatasetMeta, device: torch.device) -> tuple:
    """The checks of the frames consumed, each None where it does not apply: (barcodes, independent decode)."""
    barcodes = BarcodeCheck(dmeta, cfg.mode, cfg.delta_timestamps) if cfg.verify and is_synthetic(dmeta.info) else None
    decoded = (
        DecodeCheck(
            dmeta,
            cfg.mode,
            cfg.check_frames,
            deltas=cfg.delta_timestamps,
            gpu=device.type == "cuda",
            seed=cfg.seed + cfg.rank,
        )
        if cfg.verify
        else None
    )
    return barcodes, decoded


def busy_workers(adapter, num_workers: int) -> int | None:
    """How many of this rank's DataLoader workers have something to read (None: the loader does not say)."""
    count = getattr(adapter.dataset, "busy_workers", None)
    return count(num_workers) if count else None


def work_note(adapter, num_workers: int) -> str:
    """One line when a rank or worker of this run has nothing to read (dlbench_stream says), else ''."""
    note = getattr(adapter.dataset, "work_note", None)
    return note(num_workers) if note else ""


def _warm_up(cfg: BenchConfig, batches: _Epochs, t_start: float, rows: list) -> float:
    """The first batch, then batches for `warmup_s` more (their samples' `index` into `rows`); returns the first
    batch's latency from `t_start`."""
    rows.extend(to_torch(batches.next()[0])["index"].tolist())
    first_batch_latency = time.perf_counter() - t_start
    while time.perf_counter() - t_start - first_batch_latency < cfg.warmup_s:
        rows.extend(to_torch(batches.next()[0])["index"].tolist())
    return first_batch_latency


class _GpuStep:
    """A training step of `step_ms` on the GPU: a kernel spinning that long on the consumer's stream, queued after
    the batch's copy. The next batch is fetched, and its copy queued, while it runs, as in training; the CPU stays
    at most one step ahead (as a loss read back each step keeps it), and each batch is held until its step is done,
    so its pinned ring slot is not reused under its copy."""

    def __init__(self, step_ms: float):
        self.cycles = max(1, int(step_ms * _gpu_cycles_per_ms()))
        self.previous: tuple | None = None  # (event after the previous step, its batch)

    def run(self, batch) -> None:
        torch.cuda._sleep(self.cycles)
        done = torch.cuda.Event()
        done.record()
        if self.previous is not None:
            self.previous[0].synchronize()
        self.previous = (done, batch)

    def finish(self) -> None:
        if self.previous is not None:
            self.previous[0].synchronize()
        self.previous = None


def _gpu_cycles_per_ms() -> float:
    """Clock cycles `torch.cuda._sleep` spins per millisecond, measured on this GPU as it runs now."""
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 20_000_000
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / start.elapsed_time(end)


def _window(
    cfg: BenchConfig, batches: _Epochs, consumer: torch.device, checks: list, samples_out, seen: _Window
) -> dict:
    """One steady window of `duration_s` (or `num_batches`): each batch moved to the consumer as training moves it,
    noted in `seen`, then checked. Returns the window's start/end time, samples, batches and seconds."""
    samples = count = 0
    waited = 0.0  # seconds the consumer was blocked on the next batch (and its copy)
    # on a GPU the step is a kernel the next batch's loading overlaps (`_GpuStep`); on the CPU, a sleep
    gpu_step = _GpuStep(cfg.step_ms) if cfg.step_ms and consumer.type == "cuda" else None
    window_start_unix, w0 = time.time(), time.perf_counter()
    last = w0
    while True:
        now = time.perf_counter()
        if now - w0 >= cfg.duration_s or (cfg.num_batches is not None and count >= cfg.num_batches):
            break
        batch, info = batches.next()
        batch = to_torch(batch)  # held until the copy is done: ring slots are reused once released
        if consumer.type == "cuda":  # the copy training pays; the checks below read the host batch
            _to_device(batch, consumer)
            if gpu_step is None:
                torch.cuda.synchronize()  # the batch is on the GPU before the clock is read
        arrived = time.perf_counter()
        waited += arrived - now
        seen.intervals.append(arrived - last)
        last = arrived
        samples += len(info)
        count += 1
        seen.add(batch, info)
        if samples_out is not None:
            samples_out.extend(batch["index"].cpu().tolist())
        for check in checks:
            check(batch)
        if gpu_step is not None:
            gpu_step.run(batch)
        elif cfg.step_ms:  # the step as training takes it: the checks above run inside it when they fit
            time.sleep(max(0.0, cfg.step_ms / 1000.0 - (time.perf_counter() - arrived)))
    if gpu_step is not None:
        gpu_step.finish()
    elapsed = time.perf_counter() - w0
    return {
        "start_unix": window_start_unix,
        "end_unix": window_start_unix + elapsed,
        "samples": samples,
        "batches": count,
        "seconds": elapsed,
        "data_wait_s": waited,
    }


def _measure(cfg: BenchConfig, batches: _Epochs, consumer: torch.device, checks: list, samples_out) -> _Window:
    """`repeats` windows of `duration_s` back to back (their spread is the run's noise)."""
    seen = _Window()
    for _ in range(cfg.repeats):
        seen.windows.append(_window(cfg, batches, consumer, checks, samples_out, seen))
    return seen


def _pass(cfg: BenchConfig, adapter, device: torch.device, checks: list, samples_out, barrier, meter) -> _Pass:
    """Build the DataLoader, take the first batch and warm up, wait for every rank, then measure (and read the
    metering proxy's counts, if any, on either side of the windows)."""
    # every batch goes to the GPU where there is one, as training moves it; frames decoded on the CPU travel from
    # pinned memory, frames decoded on the GPU are there already
    consumer = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    pin = consumer.type == "cuda" and device.type == "cpu"
    loader, context = _dataloader(cfg, adapter, device, pin)
    t_start = time.perf_counter()
    if context is not None:
        import_decoder_before_fork(adapter.dataset, context)  # as dlbench's DataLoader does, on the clock
    batches = _Epochs(loader, adapter.dataset, cfg.rank, cfg.world_size)
    memory = MemorySampler(every_s=0.5)  # a few ms per sample: keep it off the measured cores
    memory.start()
    try:
        warm_rows: list = []
        first_batch_latency = _warm_up(cfg, batches, t_start, warm_rows)
        if barrier is not None:
            barrier()
        before = meter.counts() if meter else None
        seen = _measure(cfg, batches, consumer, checks, samples_out)
        remote = (before, meter.counts()) if meter else None
        wallclock = time.perf_counter() - t_start
    finally:  # also on an error: the workers stop before the process exits
        memory.stop()
        batches.close()
    return _Pass(seen, consumer, pin, context, first_batch_latency, wallclock, memory.peak / 2**20, remote, warm_rows)


def _timing_metrics(measured: _Pass, frames_per_item: int) -> dict:
    """Rates (the median window's, with the spread), the consumer's and the dataset's latencies, the clock."""
    windows = measured.seen.windows
    lat = np.concatenate(measured.seen.latencies)
    gaps = np.asarray(measured.seen.intervals) * 1000.0
    rates = np.array([w["samples"] / w["seconds"] for w in windows])
    return {
        "samples": sum(w["samples"] for w in windows),
        "batches": sum(w["batches"] for w in windows),
        "repeats": len(windows),
        "frames_per_s_node": float(np.median(rates)) * frames_per_item,  # the median window; min and max: spread
        "frames_per_s_min": float(rates.min()) * frames_per_item,
        "frames_per_s_max": float(rates.max()) * frames_per_item,
        "samples_per_s": float(np.median(rates)),
        "first_batch_latency_s": measured.first_batch_latency,
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
        "wallclock_s": measured.wallclock,
        "steady_window_s": float(sum(w["seconds"] for w in windows)),
        "window_start_unix": windows[0]["start_unix"],
        "window_end_unix": windows[-1]["end_unix"],
        "windows": windows,
    }


def _cache_metrics(worker_stats: dict) -> dict:
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


def _check_metrics(barcodes: BarcodeCheck | None, decoded: DecodeCheck | None) -> dict:
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


def _metrics(cfg: BenchConfig, measured: _Pass, dmeta: DatasetMeta, adapter, barcodes, decoded, rows) -> dict:
    """The record's metrics: the pass, the single-process probe, the decoder caches, the dataset, the checks, what
    the storage served (`rows`: the samples delivered in the windows)."""
    fpi = adapter.frames_per_item
    timing, cache = _timing_metrics(measured, fpi), _cache_metrics(measured.seen.worker_stats)
    remote = cost_metrics(None, None, 0, None)
    if measured.remote is not None:  # over the whole run: fetching ahead moves requests out of the windows
        delivered = np.asarray(list(measured.warm_rows) + list(rows), np.int64)
        needed = needed_bytes(dmeta, delivered, cfg.mode, cfg.delta_timestamps)
        remote = cost_metrics(*measured.remote, len(delivered) * fpi, needed)
    probe = _probe(cfg)
    cam0 = dmeta.info["features"][dmeta.cameras[0]]["shape"] if dmeta.cameras else [0, 0, 0]
    return {
        **timing,
        "consumer_device": measured.consumer.type,
        "pin_memory": measured.pin,
        "peak_pss_mb": measured.peak_pss_mb,
        "shuffle_randomness": shuffle_score(measured.seen.distinct, measured.seen.sizes, dmeta.ep_to - dmeta.ep_from),
        "probe_samples_per_s": probe["samples_per_s"],
        "probe_fetch_ms": probe["fetch_ms"],
        "probe_decode_ms": probe["decode_ms"],
        **cache,
        "worker_start_method": measured.context,
        "num_cameras": len(dmeta.cameras),
        "frames_per_sample": fpi,
        "image_shape": "x".join(str(v) for v in cam0),
        "fps": dmeta.fps,
        **_check_metrics(barcodes, decoded),
        **remote,
    }


def _record(cfg: BenchConfig, metrics: dict, decoded: DecodeCheck | None, resume_problem: str = "") -> dict:
    """The rank's record: unverified where no frame was checked; the wrong frames' problems and a failed resume
    check as its reason."""
    if metrics["frames_verified"] == 0:
        why = (
            "verify is off"
            if not cfg.verify
            else "no frame was checked (check_frames: 0 on a dataset without barcodes)"
        )
        reason = "; ".join(r for r in (f"unverified: {why}", resume_problem) if r)
        return recordmod.make_record(asdict(cfg), metrics, status="unverified", reason=reason)
    wrong = f"wrong frames: {'; '.join(decoded.problems)}" if decoded is not None and decoded.problems else ""
    return recordmod.make_record(asdict(cfg), metrics, reason="; ".join(r for r in (wrong, resume_problem) if r))


def run(cfg: BenchConfig, samples_out: list | None = None, barrier=None, meter=None) -> dict:
    """Run one benchmark rank and return its record (see `record.py`).

    `samples_out`, if given, receives the `index` of every sample consumed in the steady window. `barrier`, if
    given, is called after warm-up and returns when every rank is ready, so that all ranks measure at once.
    `meter`, a metering proxy the rank reads through (`remote.metered`), gives the remote-cost figures.
    """
    samples_out = [] if samples_out is None else samples_out
    torch.manual_seed(cfg.seed)
    reason = cuda_unavailable_reason(cfg.decode_device)
    if reason:
        raise UserError(reason)
    if cfg.resume_check and cfg.loader != "dlbench_stream":
        raise UserError(
            f"resume_check applies to loader dlbench_stream only (this run's is {cfg.loader}); "
            f"turn it off for the others"
        )
    device = torch.device("cuda" if cfg.decode_device.startswith("cuda") else "cpu")
    dmeta = DatasetMeta.load(cfg.root, data_files_root=cfg.data_files_root)
    adapter = make_adapter(cfg)
    note = work_note(adapter, cfg.num_workers)
    if busy_workers(adapter, cfg.num_workers) == 0:
        raise UserError(note)
    if note:
        print(f"note: {note}", file=sys.stderr)
    barcodes, decoded = _frame_checks(cfg, dmeta, device)
    checks = [c for c in (barcodes and barcodes.check, decoded and decoded.offer) if c]
    measured = _pass(cfg, adapter, device, checks, samples_out, barrier, meter)
    if sum(w["samples"] for w in measured.seen.windows) == 0:
        raise UserError(
            f"no samples arrived in the {cfg.duration_s} s window (loader {cfg.loader}, {cfg.num_workers} workers); "
            f"rerun with --num-workers 0 to see the loader's own error in this process, and check the job's log"
        )
    resume, resume_problem = _resume_check(cfg, dmeta, device) if cfg.resume_check else ({}, "")
    if decoded is not None:
        decoded.finish()
    metrics = {**_metrics(cfg, measured, dmeta, adapter, barcodes, decoded, samples_out), **resume}
    metrics["busy_workers"] = busy_workers(adapter, cfg.num_workers)
    metrics["work_note"] = note
    return _record(cfg, metrics, decoded, resume_problem)


def _rank_rows(ds, epoch: int) -> np.ndarray:
    """The rows a streaming dataset's rank yields in `epoch` (its virtual shards' episodes)."""
    ep_from, ep_to = ds.meta.ep_from, ds.meta.ep_to
    eps = [e for v in ds.rank_shards(epoch) for e in ds.virtual_shard_episodes(int(v))]
    return np.concatenate([np.arange(ep_from[e], ep_to[e]) for e in eps] or [np.zeros(0, np.int64)])


def _few(rows: list[int], most: int = 8) -> str:
    return ", ".join(map(str, rows[:most])) + (", ..." if len(rows) > most else "")


def _resume_check(cfg: BenchConfig, dmeta: DatasetMeta, device: torch.device) -> tuple[dict, str]:
    """One epoch of the rank's stream, interrupted after a seeded random batch: its `state_dict` (through JSON, as a
    checkpoint keeps it) is loaded by a fresh dataset read by one DataLoader worker more, which finishes the epoch.
    Every frame of the rank's epoch must arrive exactly once over both parts, with the right barcodes on synthetic
    data. Returns the metrics (resume_exact, resume_checked_samples) and what went wrong ('' when nothing did)."""
    barcodes = BarcodeCheck(dmeta, cfg.mode, cfg.delta_timestamps) if is_synthetic(dmeta.info) else None
    got: list[int] = []

    def consume(adapter, workers: int, stop: int | None = None) -> None:
        loader, _ = _dataloader(replace(cfg, num_workers=workers), adapter, device, pin=False)
        for k, (batch, _) in enumerate(loader):
            batch = to_torch(batch)
            adapter.dataset.observe(batch)
            got.extend(batch["index"].tolist())
            if barcodes is not None:
                barcodes.check(batch)
            if stop is not None and k + 1 >= stop:
                break
        # returning drops the DataLoader: its workers stop, and the batches they had made undelivered are lost

    first = make_adapter(cfg, tag_items=True)
    expected = _rank_rows(first.dataset, first.dataset.epoch)
    batches = -(-len(first.dataset) // cfg.batch_size)
    stop = int(np.random.default_rng([cfg.seed, cfg.rank]).integers(1, max(2, batches)))
    consume(first, cfg.num_workers, stop)
    state = json.loads(json.dumps(first.dataset.state_dict()))
    del first
    second = make_adapter(cfg, tag_items=True)
    second.dataset.load_state_dict(state)
    consume(second, cfg.num_workers + 1)
    counts = collections.Counter(got)
    missing = sorted(set(expected.tolist()) - counts.keys())
    repeated = sorted(r for r, n in counts.items() if n > 1)
    foreign = sorted(counts.keys() - set(expected.tolist()))
    problems = [
        f"{len(missing)} frame(s) never arrived (rows {_few(missing)})" if missing else "",
        f"{len(repeated)} arrived more than once (rows {_few(repeated)})" if repeated else "",
        f"{len(foreign)} are not this rank's (rows {_few(foreign)})" if foreign else "",
        f"{barcodes.wrong} frame(s) with a wrong barcode" if barcodes is not None and barcodes.wrong else "",
    ]
    problem = "; ".join(p for p in problems if p)
    if problem:
        problem = (
            f"resume check (stopped after batch {stop} of {batches} with {cfg.num_workers} workers, resumed with "
            f"{cfg.num_workers + 1}): {problem}"
        )
    return {"resume_exact": not problem, "resume_checked_samples": len(got)}, problem


def _probe(cfg: BenchConfig) -> dict:
    """Single-process samples/s and (for dlbench loaders) the fetch vs decode split, on `probe_samples` items."""
    none = {"samples_per_s": None, "fetch_ms": None, "decode_ms": None}
    if cfg.probe_samples <= 0:
        return none
    adapter = make_adapter(cfg)
    ds = adapter.dataset
    count = cfg.probe_samples
    if adapter.iterable:
        it = iter(ds)
        if next(it, None) is None:  # this rank has nothing to read (its run says so)
            return none
        take = lambda: next(it)  # noqa: E731
        count += getattr(ds, "buffer_size", 0)  # so that the timed items include decoding as much as yielding
    else:
        idx = iter(np.random.default_rng(cfg.seed).integers(0, len(ds), size=cfg.probe_samples + 1).tolist())
        take = lambda: ds[next(idx)]  # noqa: E731
        take()
    d0 = adapter.decode_seconds() if adapter.decode_seconds else 0.0
    t0 = time.perf_counter()
    n = 0
    try:
        for _ in range(count):
            take()
            n += 1
    except StopIteration:
        pass
    total = time.perf_counter() - t0
    if n == 0:
        return none
    out = {"samples_per_s": n / total, "fetch_ms": None, "decode_ms": None}
    if adapter.decode_seconds:
        decode = adapter.decode_seconds() - d0
        out.update(fetch_ms=(total - decode) / n * 1000, decode_ms=decode / n * 1000)
    return out
