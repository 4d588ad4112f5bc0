"""The benchmark harness: a dummy consumer pulls batches from a real DataLoader over a fixed steady window.

Timeline of one run: build the loader; the first batch (its latency is reported); warm-up for `warmup_s`; then
the steady window of `duration_s` seconds (or `num_batches`, whichever comes first), during which every batch is
moved to the device and counted. After the DataLoader pass, a single-process probe splits the time per sample into
fetch (parquet, indexing, collation) and decode.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from .. import barcode
from ..errors import UserError
from ..loader.map import LeRobotMapDataset
from ..procstat import RssSampler
from ..validate import is_synthetic
from . import record as recordmod

LOADERS = ("dlbench_map",)


@dataclass
class BenchConfig:
    dataset: str
    loader: str = "dlbench_map"
    mode: str = "single"
    batch_size: int = 8
    num_workers: int = 2
    decode_device: str = "cpu"
    duration_s: float = 10.0
    warmup_s: float = 2.0
    num_batches: int | None = None
    decoder_cache_size: int = 16
    prefetch_factor: int = 2
    seed: int = 0
    verify: bool = True
    probe_samples: int = 32
    scenario: str = "adhoc"
    source: str = "local"
    rank: int = 0
    world_size: int = 1
    extra: dict = field(default_factory=dict)


class _Timed(torch.utils.data.Dataset):
    """Wraps a dataset: each sample comes with [latency_ms, worker, cache hits, misses, evictions, size]."""

    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, idx):
        t0 = time.perf_counter()
        item = self.inner[idx]
        ms = (time.perf_counter() - t0) * 1000.0
        info = torch.utils.data.get_worker_info()
        s = self.inner.cache.stats()
        return item, torch.tensor([ms, info.id if info else -1, s["hits"], s["misses"], s["evictions"], s["size"]],
                                  dtype=torch.float64)


def make_dataset(cfg: BenchConfig):
    if cfg.loader == "dlbench_map":
        return LeRobotMapDataset(cfg.dataset, mode=cfg.mode, decode_device=cfg.decode_device,
                                 decoder_cache_size=cfg.decoder_cache_size)
    raise UserError(f"loader {cfg.loader!r} is unknown; choose one of {list(LOADERS)}")


def _to_device(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


class _Verifier:
    """Checks every decoded frame's barcode against the (episode, frame, camera) the item claims."""

    def __init__(self, dataset):
        self.meta = dataset.meta
        self.windows = dataset.builder.windows
        self.verified = self.wrong = 0

    def check(self, batch: dict) -> None:
        eps = batch["episode_index"].cpu().numpy()
        rows = batch["index"].cpu().numpy()
        for cam_index, cam in enumerate(self.meta.cameras):
            frames = batch[cam]
            if cam in self.windows:
                offsets = self.windows[cam]
                q = rows[:, None] + offsets[None, :]
                lo, hi = self.meta.ep_from[eps][:, None], self.meta.ep_to[eps][:, None] - 1
                expect_frame = np.clip(q, lo, hi) - lo
                frames = frames.reshape(-1, *frames.shape[-3:])
                expect_ep = np.repeat(eps, len(offsets))
                expect_frame = expect_frame.reshape(-1)
            else:
                expect_ep, expect_frame = eps, rows - self.meta.ep_from[eps]
            if frames.is_floating_point():
                frames = (frames * 255).round().to(torch.uint8)
            ep, fr, cam_read, valid = barcode.read_batch(frames)
            ok = valid & (ep == expect_ep) & (fr == expect_frame) & (cam_read == cam_index)
            self.verified += len(ok)
            self.wrong += int((~ok).sum())


def run(cfg: BenchConfig) -> dict:
    """Run one benchmark and return its record (see `record.py`)."""
    torch.manual_seed(cfg.seed)
    device = torch.device("cuda" if cfg.decode_device.startswith("cuda") else "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError("decode_device cuda was asked for but torch sees no CUDA device on this machine")
    dataset = make_dataset(cfg)
    verify = cfg.verify and is_synthetic(dataset.meta.info)
    verifier = _Verifier(dataset) if verify else None
    gen = torch.Generator().manual_seed(cfg.seed + 1000003 * cfg.rank)
    workers = cfg.num_workers
    loader = torch.utils.data.DataLoader(
        _Timed(dataset), batch_size=cfg.batch_size, shuffle=True, generator=gen, num_workers=workers,
        persistent_workers=workers > 0, prefetch_factor=cfg.prefetch_factor if workers > 0 else None,
        pin_memory=False, drop_last=False,
        multiprocessing_context=("spawn" if workers > 0 and device.type == "cuda" else None),
    )
    rss = RssSampler()
    rss.start()
    t_start = time.perf_counter()
    it = iter(loader)

    def next_batch():
        nonlocal it
        try:
            return next(it)
        except StopIteration:  # a short dataset: start the next epoch (workers persist)
            it = iter(loader)
            return next(it)

    next_batch()
    first_batch_latency = time.perf_counter() - t_start
    while time.perf_counter() - t_start - first_batch_latency < cfg.warmup_s:
        next_batch()

    latencies, distinct_frac, worker_stats = [], [], {}
    samples = batches = 0
    w0 = time.perf_counter()
    while True:
        now = time.perf_counter()
        if now - w0 >= cfg.duration_s or (cfg.num_batches is not None and batches >= cfg.num_batches):
            break
        batch, info = next_batch()
        batch = _to_device(batch, device)
        n = len(info)
        samples += n
        batches += 1
        latencies.append(info[:, 0].numpy())
        for row in info.numpy():
            worker_stats[int(row[1])] = row[2:6]
        distinct_frac.append(len(np.unique(batch["episode_index"].cpu().numpy())) / n)
        if verifier is not None:
            verifier.check(batch)
    window = time.perf_counter() - w0
    rss.stop()
    wallclock = time.perf_counter() - t_start
    del it, loader
    if samples == 0:
        raise UserError(
            f"no samples arrived in the {cfg.duration_s} s window (loader {cfg.loader}, {workers} workers); rerun "
            f"with --num-workers 0 to see the loader's own error in this process, and check the job's log"
        )

    lat = np.concatenate(latencies)
    cache = np.sum(list(worker_stats.values()), axis=0)
    lookups = cache[0] + cache[1]
    probe = _probe(cfg)
    fpi = dataset.frames_per_item
    cam0 = dataset.meta.info["features"][dataset.meta.cameras[0]]["shape"] if dataset.meta.cameras else [0, 0, 0]
    metrics = {
        "samples": samples,
        "batches": batches,
        "frames_per_s_node": samples * fpi / window,
        "samples_per_s": samples / window,
        "first_batch_latency_s": first_batch_latency,
        "latency_p50_ms": float(np.percentile(lat, 50)),
        "latency_p95_ms": float(np.percentile(lat, 95)),
        "latency_p99_ms": float(np.percentile(lat, 99)),
        "wallclock_s": wallclock,
        "steady_window_s": window,
        "peak_rss_mb": rss.peak / 2**20,
        "shuffle_randomness_frac": float(np.mean(distinct_frac)),
        "probe_samples_per_s": probe["samples_per_s"],
        "probe_fetch_ms": probe["fetch_ms"],
        "probe_decode_ms": probe["decode_ms"],
        "cache_hits": int(cache[0]),
        "cache_misses": int(cache[1]),
        "cache_evictions": int(cache[2]),
        "cache_hit_rate": float(cache[0] / lookups) if lookups else 0.0,
        "cache_size": int(cache[3]),
        "num_cameras": len(dataset.meta.cameras),
        "frames_per_sample": fpi,
        "image_shape": "x".join(str(v) for v in cam0),
        "fps": dataset.meta.fps,
        "frames_verified": verifier.verified if verifier else 0,
        "frames_wrong": verifier.wrong if verifier else 0,
    }
    return recordmod.make_record(asdict(cfg), metrics)


def _probe(cfg: BenchConfig) -> dict:
    """Single-process samples/s and the fetch vs decode split, on `probe_samples` random items."""
    if cfg.probe_samples <= 0:
        return {"samples_per_s": 0.0, "fetch_ms": 0.0, "decode_ms": 0.0}
    ds = make_dataset(cfg)
    rng = np.random.default_rng(cfg.seed)
    idx = rng.integers(0, len(ds), size=cfg.probe_samples)
    ds[int(idx[0])]  # open decoders outside the timing, as the DataLoader pass did
    ds.builder.decode_s = 0.0
    t0 = time.perf_counter()
    for i in idx:
        ds[int(i)]
    total = time.perf_counter() - t0
    decode = ds.builder.decode_s
    n = len(idx)
    return {"samples_per_s": n / total, "fetch_ms": (total - decode) / n * 1000, "decode_ms": decode / n * 1000}

