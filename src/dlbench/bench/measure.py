"""The measured pass: the DataLoader as the loader's users build it, its first batch, warm-up, and the steady
windows a dummy consumer pulls batches through (moved to the GPU where torch sees one, held for a training step)."""

from __future__ import annotations

import os
import random
import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import UserError
from ..format.paths import is_remote
from ..loader.collate import collate
from ..loader.dataloader import DataLoader
from ..procstat import MemorySampler, core_wait_seconds, cpu_by_pid, cpu_since, host_cpu_seconds, started_unix
from ..run.spec import MIN_WINDOWS, RunSpec
from .checks.effective import BatchMeans
from .gpu import GpuStep, host_bytes, to_device
from .launch import PROGRESS_ENV
from .rates import median_known

LATENCY_PERCENTILES = (50, 95, 99)


SAMPLE_INFO = "_sample_info"  # the key under which each item carries its `sample_info` to the consumer


def sample_info(t0: float, stats, decode_seconds=None) -> torch.Tensor:
    """[latency_ms, worker, cache hits, misses, evictions, size, cpu fallbacks, decode seconds so far, storage wait
    seconds so far] for one sample (-1 where unknown): a small tensor, which `collate` stacks into a numpy array
    pickled with the batch (no shared-memory segment). The last two are the process's running totals, so the
    consumer reads decoding's and storage's shares of a worker's time."""
    ms = (time.perf_counter() - t0) * 1000.0
    w = torch.utils.data.get_worker_info()
    s = stats() if stats else {}
    keys = ("hits", "misses", "evictions", "size", "cpu_fallbacks")
    decoded, waited = decode_seconds() if decode_seconds else (-1, -1)
    return torch.tensor([ms, w.id if w else -1, *(s.get(k, -1) for k in keys), decoded, waited], dtype=torch.float64)


class _Passthrough:
    """Answers for the dataset it wraps: what `dlbench.loader.DataLoader` and the run read off a dataset (its
    builder, decode device, frame size, `plans_batches`, `set_epoch`, `busy_workers`...) are the inner one's.
    Dunder names are not passed on (`__getitems__` decides how torch fetches)."""

    def __getattr__(self, name):
        if name.startswith("__") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class Timed(_Passthrough, torch.utils.data.Dataset):
    """A map-style dataset read item by item: each item carries its `sample_info`."""

    def __init__(self, inner, stats, decode_seconds=None):
        self.inner, self.stats, self.decode_seconds = inner, stats, decode_seconds

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, idx):
        t0 = time.perf_counter()
        item = self.inner[idx]
        item[SAMPLE_INFO] = sample_info(t0, self.stats, self.decode_seconds)
        return item


class TimedBatches(Timed):
    """A map-style dataset that builds a batch at once (`__getitems__`: dlbench_map, LanceDBDataset): torch's
    DataLoader hands it each batch's indices, as in training; each item's latency is its share of the batch's."""

    def __getitems__(self, indices):
        t0 = time.perf_counter()
        items = self.inner.__getitems__(indices)
        info = sample_info(t0, self.stats, self.decode_seconds)
        info[0] /= max(1, len(items))
        for item in items:
            item[SAMPLE_INFO] = info
        return items


class TimedIterable(_Passthrough, torch.utils.data.IterableDataset):
    """An iterable dataset: each item carries its `sample_info` (latency = time in the iterator's next)."""

    def __init__(self, inner, stats, decode_seconds=None):
        self.inner, self.stats, self.decode_seconds = inner, stats, decode_seconds

    def __iter__(self):
        it = iter(self.inner)
        while True:
            t0 = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            item[SAMPLE_INFO] = sample_info(t0, self.stats, self.decode_seconds)
            yield item


def timed(dataset, stats, decode_seconds=None):
    """`dataset` with each item's `sample_info` attached, fetched by torch exactly as the dataset itself would be."""
    if isinstance(dataset, torch.utils.data.IterableDataset):
        return TimedIterable(dataset, stats, decode_seconds)
    return (TimedBatches if hasattr(dataset, "__getitems__") else Timed)(dataset, stats, decode_seconds)


class InfoCollate:
    """A peer's own batching (torch's default collate, Lance's) with the items' infos stacked beside it, as one
    numpy array pickled with the batch."""

    def __init__(self, collate_items):
        self.collate_items = collate_items

    def __call__(self, items):
        infos = np.stack([item.pop(SAMPLE_INFO).numpy() for item in items])
        return {**self.collate_items(items), SAMPLE_INFO: infos}


def split_info(batch: dict) -> tuple[dict, np.ndarray]:
    """A batch of the measured DataLoader: (the batch as its users get it, its items' infos)."""
    info = batch.pop(SAMPLE_INFO)
    return batch, info.numpy() if isinstance(info, torch.Tensor) else info


def make_dataloader(run: RunSpec, adapter, pin: bool):
    """The DataLoader the run measures: `dlbench.loader.DataLoader`, built as its users build it, over the loader's
    dataset with each item's `sample_info` attached. It picks its workers' start method, batches through a ring of
    shared slots (dlbench's loaders) or with the peer's own collate, and looks ahead where that pays."""
    if adapter.batches is not None:  # its own batching and processes (ray_data): its users take its batches
        return adapter.batches(run, pin)
    workers = run.num_workers
    dataset = timed(adapter.dataset, adapter.cache_stats, adapter.decode_seconds)
    kwargs = dict(
        batch_size=run.batch_size,
        num_workers=workers,
        persistent_workers=workers > 0,
        prefetch_factor=run.prefetch_factor if workers > 0 else None,
        pin_memory=pin,
        in_order=run.in_order,
        lookahead=run.lookahead,
    )
    if adapter.collate is not collate:  # a peer's batching; dlbench's loaders get the DataLoader's own
        kwargs["collate_fn"] = InfoCollate(adapter.collate)
    if not adapter.iterable:  # every rank shuffles its own disjoint part of the dataset, as in training
        kwargs["sampler"] = torch.utils.data.distributed.DistributedSampler(
            dataset, num_replicas=run.world_size, rank=run.rank, shuffle=True, seed=run.seed, drop_last=True
        )
    return DataLoader(dataset, **kwargs)


class Epochs:
    """Batches from a DataLoader without end: a rank that runs out starts its next epoch (set_epoch where there is
    one), as training does. A `UserError` if a whole epoch brings no batch (this rank has nothing to read)."""

    def __init__(self, loader, dataset, rank: int = 0, world_size: int = 1):
        self.loader, self.dataset, self.epoch = loader, dataset, 0
        self.rank, self.world_size = rank, world_size
        self.it = iter(loader)  # starts the workers: before any sampler thread exists (never fork beside a thread)

    def next(self) -> tuple[dict, np.ndarray]:
        """The next batch and its items' infos (`split_info`)."""
        try:
            return split_info(next(self.it))
        except StopIteration:
            self.epoch += 1
            for epoch_aware in (self.dataset, self.loader.sampler, self.loader.batch_sampler):
                if hasattr(epoch_aware, "set_epoch"):
                    epoch_aware.set_epoch(self.epoch)
            self.it = iter(self.loader)
            try:
                return split_info(next(self.it))
            except StopIteration:
                raise UserError(
                    f"rank {self.rank} of {self.world_size}: an epoch of this loader brought no batch (no episode "
                    f"for this rank, or fewer samples than one batch); use fewer ranks or a smaller batch_size"
                ) from None

    def worker_pids(self) -> list[int]:
        return getattr(self.it, "worker_pids", [])

    def close(self) -> None:
        close = getattr(self.loader, "close", None)  # a loader with processes of its own (Ray) stops them
        self.it = self.loader = None  # shuts the workers down
        if close is not None:
            close()


@dataclass
class Window:
    """What the consumer saw over the measured windows."""

    windows: list = field(default_factory=list)  # per window: start/end time, samples, batches, seconds
    latencies: list = field(default_factory=list)  # per batch: each item's time to build inside its worker
    intervals: list = field(default_factory=list)  # seconds between batches arriving
    distinct: list = field(default_factory=list)  # distinct episodes per batch (shuffle randomness)
    sizes: list = field(default_factory=list)
    rows: list = field(default_factory=list)  # each batch's global rows (`index`): distinct frames, spread
    # each batch's mean on the dataset reference's components: effective batch size (`checks.effective`)
    moments: BatchMeans = field(default_factory=lambda: BatchMeans(None))
    worker_stats: dict = field(default_factory=dict)  # worker id -> its latest decoder cache counters
    # worker id -> [its decode seconds at its first sample in the windows, at its latest, samples since the first,
    # its storage wait seconds at its first sample, at its latest]
    decoding: dict = field(default_factory=dict)

    def add(self, batch, info: np.ndarray) -> None:
        """One batch that arrived, with its per-sample infos (`sample_info`)."""
        self.latencies.append(info[:, 0])
        for row in info:
            w = int(row[1])
            self.worker_stats[w] = row[2:7]
            if row[7] >= 0:
                first = self.decoding.setdefault(w, [row[7], row[7], -1, row[8], row[8]])
                first[1], first[2], first[4] = row[7], first[2] + 1, row[8]
        self.distinct.append(len(np.unique(batch["episode_index"].cpu().numpy())))
        self.rows.append(batch["index"].cpu().numpy().astype(np.int64).ravel())
        self.sizes.append(len(info))
        self.moments.add(batch)


@dataclass
class Pass:
    """The DataLoader pass: what the consumer saw, where, and the clock around it."""

    seen: Window
    consumer: torch.device
    pin: bool
    context: str | None  # workers' start: fork, forkserver (a thread ran here) or spawn (CUDA); None: no workers
    first_batch_latency: float
    workers_start: float | None  # seconds from the loader's start to its last worker's start (None: no workers)
    wallclock: float
    peak_pss_mb: float
    peak_pss_workers_mb: float  # the workers' part of it
    peak_uss_workers_mb: float  # the workers' own pages then (what one more worker adds; shared pages are in PSS)
    # the metering proxy's counts once the main process had opened the dataset (before any worker), at the windows'
    # start and at their end
    remote: tuple[dict, dict, dict] | None = None
    warm_rows: list | None = None  # the samples delivered before the windows (first batch and warm-up)


def busy_workers(adapter, num_workers: int) -> int | None:
    """How many of this rank's DataLoader workers have something to read, as the adapter declares it (None: the
    loader does not say)."""
    return adapter.busy_workers(num_workers) if adapter.busy_workers else None


def work_note(adapter, num_workers: int) -> str:
    """One line when a rank or worker of this run has nothing to read (the loader's own words), else ''."""
    return adapter.work_note(num_workers) if adapter.work_note else ""


def warm_up(run: RunSpec, batches: Epochs, t_start: float, rows: list, checks: list) -> float:
    """The first batch, then batches for `warmup_s` more (their samples' `index` into `rows`), each checked as the
    windows' are: the checks' own start (the decode check's first picks copy every frame) is warm-up too. A
    dlbench_stream from remote storage warms up at least as long again as its first batch took: that batch came
    from the first of its pool's pieces to open, the rest open after it (48 pieces from a 20 ms bucket, one worker:
    32-48 samples a second for 2.5 s after a first batch of 5.6 s and a warm-up of 1 s, then 400-900), and a window
    in that opening measures it instead of the reading that follows. The whole latency, workers' start included
    (`workers_start_s`): a warm-up of only its part after that start left the default matrix's 20 ms-bucket and S3
    windows in their opening. (A map-style loader's first batch is its start; LeRobot's stream fills its buffer
    before it.) Returns the first batch's latency from `t_start`."""
    batch = batches.next()[0]
    first_batch_latency = time.perf_counter() - t_start
    opening = run.loader_name.base == "dlbench_stream" and is_remote(run.root or "")
    warmup_s = max(run.warmup_s, first_batch_latency) if opening else run.warmup_s
    while True:
        rows.extend(batch["index"].tolist())
        for check in checks:
            check(batch)
        if time.perf_counter() - t_start - first_batch_latency >= warmup_s:
            return first_batch_latency
        batch = batches.next()[0]


def workers_start_s(batches: Epochs, t_start_unix: float) -> float | None:
    """Seconds from the loader's start (`t_start_unix`) to the start of its last worker process; None without
    workers (the main process reads)."""
    started = started_unix(batches.worker_pids())
    return None if started is None else max(0.0, started - t_start_unix)


def measure_window(
    run: RunSpec, batches: Epochs, consumer: torch.device, checks: list, samples_out, seen: Window, least: int = 0
) -> dict:
    """One steady window of `duration_s` (or `num_batches`), and of `least` batches at least: each batch moved to
    the consumer as training moves it, noted in `seen`, then checked. Returns the window's start/end time, samples,
    batches and seconds."""
    samples = count = 0
    waited = 0.0  # seconds the consumer was blocked on the next batch (and its copy)
    copy_s, copy_bytes = 0.0, 0  # the host-to-GPU copies alone (measured where no GPU step overlaps them)
    # on a GPU the step is a kernel the next batch's loading overlaps (`GpuStep`); on the CPU, a sleep
    gpu_step = GpuStep(run.step_ms) if run.step_ms and consumer.type == "cuda" else None
    workers = batches.worker_pids()
    window_start_unix, w0 = time.time(), time.perf_counter()
    cpu0, worker_cpu0, host_cpu0, checking = time.process_time(), cpu_by_pid(workers), host_cpu_seconds(), 0.0
    wait0 = core_wait_seconds(workers)
    last, first_batch = w0, len(seen.latencies)
    # each step held: step_ms, or drawn around it (`step_sd_ms`), each window its own draws, the same on a rerun
    draws, held = random.Random(f"{run.seed}:{first_batch}"), []
    # workers hand batches over in turn, so a window of whole rounds (a batch of each) spans whole batches of every
    # worker's work; 3 batches of 2 workers that finish together count one of them twice (+/-30% on slow sets)
    rounds = max(1, len(workers))
    while True:
        now = time.perf_counter()
        if run.num_batches is not None and count >= run.num_batches:
            break
        if now - w0 >= run.duration_s and count % rounds == 0 and count >= least:
            break
        batch, info = batches.next()
        # `batch` (tensors over ring slots, as the DataLoader hands them) is held until the copy is done
        if consumer.type == "cuda":  # the copy training pays; the checks below read the host batch
            c0 = time.perf_counter()
            to_device(batch, consumer)
            if gpu_step is None:
                torch.cuda.synchronize()  # the batch is on the GPU before the clock is read
                copy_s += time.perf_counter() - c0
                copy_bytes += host_bytes(batch)
        arrived = time.perf_counter()
        waited += arrived - now
        seen.intervals.append(arrived - last)
        last = arrived
        samples += len(info)
        count += 1
        seen.add(batch, info)
        if samples_out is not None:
            samples_out.extend(batch["index"].cpu().tolist())
        c0 = time.thread_time()  # CPU, as main_cpu_s is: wall time would count this thread's waits for a core
        for check in checks:
            check(batch)
        checking += time.thread_time() - c0
        step = max(0.0, draws.gauss(run.step_ms, run.step_sd_ms)) if run.step_sd_ms else run.step_ms
        if run.step_ms:
            held.append(step / 1000.0)
        if gpu_step is not None:
            gpu_step.run(batch, step)
        elif run.step_ms:  # the step as training takes it: the checks above run inside it when they fit
            time.sleep(max(0.0, step / 1000.0 - (time.perf_counter() - arrived)))
    if gpu_step is not None:
        gpu_step.finish()
    elapsed = time.perf_counter() - w0
    main_cpu, worker_cpu = time.process_time() - cpu0, cpu_since(worker_cpu0)
    host_cpu = host_cpu_seconds() - host_cpu0
    wait1 = core_wait_seconds(workers)
    # the window's own latency percentiles: their spread over the windows is the noise `dlbench compare` tests against
    lat = np.concatenate(seen.latencies[first_batch:]) if count else None
    return {
        "start_unix": window_start_unix,
        "end_unix": window_start_unix + elapsed,
        "samples": samples,
        "batches": count,
        "seconds": elapsed,
        "data_wait_s": waited,
        "held_s": sum(held),  # the steps held (their spread too: a step drawn around step_ms)
        "held_sd_ms": statistics.stdev(held) * 1000.0 if len(held) > 1 else None,
        # where the CPU went: this process (hand-over, checks, consumer; its threads too), the checks alone, and
        # the DataLoader workers together (busy building items, as opposed to waiting on I/O or on a free slot)
        "main_cpu_s": main_cpu,
        "check_s": checking,
        "copy_s": copy_s,
        "copy_bytes": copy_bytes,
        "worker_cpu_s": worker_cpu,
        # the workers' time ready to run but without a core: on a host with more free cores it would not be spent
        "worker_core_wait_s": None if wait0 is None or wait1 is None else wait1 - wait0,
        # every process of the host: the rest is others' (a loopback storage server and its proxies, other ranks)
        "host_cpu_s": host_cpu,
        "workers": len(workers),
        **({f"latency_p{q}_ms": float(np.percentile(lat, q)) for q in LATENCY_PERCENTILES} if count else {}),
    }


def least_batches(run: RunSpec, seen: Window, k: int) -> int:
    """The batches window `k` takes at least: what the run still lacks of `min_batches` (the effective batch size's
    figures), spread over the windows planned from here. A window past them takes `duration_s` alone: a slow loader
    whose median is not yet known measures its later windows at the same precision without waiting on batches the
    figures already have."""
    if run.num_batches is not None:
        return 0
    lacking = run.min_batches - sum(w["batches"] for w in seen.windows)
    return max(0, -(-lacking // max(1, planned_windows(run) - k)))


def planned_windows(run: RunSpec) -> int:
    """The windows a run measures at least (`measure`): its `repeats`, or MIN_WINDOWS with `precision`."""
    return max(1, min(run.repeats, MIN_WINDOWS) if run.precision else run.repeats)


def progress(message: str) -> None:
    """A rank's progress line (stamped, on the run's log), where the command that launched it asked for them."""
    if os.environ.get(PROGRESS_ENV):
        from ..cli.common import say

        say(message)


def measure(
    run: RunSpec, batches: Epochs, consumer: torch.device, checks: list, samples_out, moments: BatchMeans | None = None
) -> Window:
    """Windows of `duration_s` back to back (their spread is the run's noise): `repeats` of them, or with
    `precision`, as many as its median needs (`median_known`) up to `repeats`. Ranks of one run each measure
    MIN_WINDOWS instead: a rank that stopped on its own would hand its cores to the others mid-window (on one host,
    the rank left measured at twice its rate once its peer was done)."""
    seen = Window(moments=moments or BatchMeans(None))
    planned = min(run.repeats, MIN_WINDOWS) if run.precision and run.ranks > 1 else run.repeats
    for k in range(planned):
        at_least = least_batches(run, seen, k)
        seen.windows.append(measure_window(run, batches, consumer, checks, samples_out, seen, at_least))
        w = seen.windows[-1]
        progress(f"rank {run.rank} of {run.world_size}: window {k + 1} of up to {planned}: {w['samples']} samples in "
                 f"{w['seconds']:.1f} s ({w['samples'] / max(w['seconds'], 1e-9):,.0f} samples/s)")  # fmt: skip
        if run.ranks == 1 and median_known([w["samples"] / w["seconds"] for w in seen.windows], run.precision):
            break
    return seen


def measure_pass(
    run: RunSpec, adapter, device: torch.device, checks: list, samples_out, barrier, meter, moments=None
) -> Pass:
    """Build the DataLoader, take the first batch and warm up, wait for every rank, then measure (and read the
    metering proxy's counts, if any, on either side of the windows)."""
    # every batch goes to the GPU where there is one, as training moves it; frames decoded on the CPU travel from
    # pinned memory, frames decoded on the GPU are there already
    consumer = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    pin = consumer.type == "cuda" and device.type == "cpu"
    loader = make_dataloader(run, adapter, pin)
    opened = meter.counts() if meter else None  # the main process's reads: the dataset's metadata, its own opening
    t_start = time.perf_counter()  # the workers' start, and their import of the decoder, are on the clock
    t_start_unix = time.time()
    batches = Epochs(loader, adapter.dataset, run.rank, run.world_size)
    # a few ms per sample: keep it off the measured cores
    memory = MemorySampler(every_s=0.5, also=adapter.memory_roots)
    memory.start()
    try:
        warm_rows: list = []
        first_batch_latency = warm_up(run, batches, t_start, warm_rows, checks)
        progress(f"rank {run.rank} of {run.world_size}: first batch in {first_batch_latency:.1f} s, warmed up in "
                 f"{time.perf_counter() - t_start:.1f} s; measuring {run.duration_s:g} s windows")  # fmt: skip
        workers_start = workers_start_s(batches, t_start_unix)
        if barrier is not None:
            barrier()
        before = meter.counts() if meter else None
        seen = measure(run, batches, consumer, checks, samples_out, moments)
        remote = (opened, before, meter.counts()) if meter else None
        wallclock = time.perf_counter() - t_start
    finally:  # also on an error: the workers stop before the process exits
        memory.stop()
        batches.close()
    context = loader.start_method
    return Pass(
        seen,
        consumer,
        pin,
        context,
        first_batch_latency,
        workers_start,
        wallclock,
        memory.peak / 2**20,
        memory.peak_children / 2**20,
        memory.peak_children_uss / 2**20,
        remote,
        warm_rows,
    )
