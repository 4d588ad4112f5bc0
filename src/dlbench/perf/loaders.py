"""Loader benchmark: dlbench and LeRobot loaders against the decode ceiling, side by side in one run.

    python -m dlbench.perf.loaders [--dataset V30] [--workers 2] [--batch-size 16] [--duration-s 15]

For each mode (single, sarm) it measures, with the same batch size, workers and window:
  - the decode ceiling: torchcodec alone decoding exactly the (file, time) requests a loader makes, with cached
    decoders, in as many processes as the loader has workers (one ceiling for random access, one for streaming);
  - the hand-over: dlbench's DataLoader passing real items (their frames still in their decoded blocks, as many
    items alive as the loader keeps) to the consumer without decoding anything: the batch write of every frame,
    the small fields, the trip between processes, the consumer's share of the cores. With the ceiling it gives a
    bound, what a loader adding no work of its own could reach (1 / (1/ceiling + 1/hand-over)); the loaders'
    targets stay against the bare ceiling;
  - dlbench_map, dlbench_stream, and LeRobot 0.6.1's lerobot_map, lerobot_stream (peer environment), each through
    `dlbench bench-run`, the same harness the workflow uses.
It prints decoded frames/s, the ratios the loaders are held to, and peak PSS. With `--memory-s S` it also runs
dlbench_stream and dlbench_map for S seconds and prints peak PSS after S/10 and S seconds (flat memory check).
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from ..loader.collate import DataLoader
from ..loader.map import read_columns
from ..loader.meta import DatasetMeta, resolve_windows
from ..loader.stream import LeRobotStreamingDataset, shard_order, split_episodes

LOADER_ORDER = ("dlbench_map", "dlbench_stream", "lerobot_map", "lerobot_stream")
# the ratios the loaders are held to: (numerator, denominator, how the denominator is printed, format, target)
RATIOS = (("dlbench_stream", "lerobot_stream", "lerobot_stream", "{:.2f}x", "2x"),
          ("dlbench_map", "lerobot_map", "lerobot_map", "{:.2f}x", "1.3x"),
          ("dlbench_map", "ceiling (random access)", "ceiling (random)", "{:.0%}", "80%"),
          ("dlbench_stream", "ceiling (stream access)", "ceiling (stream)", "{:.0%}", "80%"))
# not targets: the loaders against the bound of decoding plus handing items over (see `handover`)
BOUND_RATIOS = (("dlbench_map", "bound (random)"), ("dlbench_stream", "bound (stream)"))


def requests_for(root: str, mode: str, pattern: str, workers: int, seed: int = 0) -> list[list[list[tuple]]]:
    """Per process, the list of decode requests [((url, cursor), times)] per sample group, as the loader makes them.

    The cursor is the pool slot for streaming (one decoder per live episode's slot and file, as the streaming loader
    keeps) and None for random access (one decoder per file)."""
    dmeta = DatasetMeta.load(root)
    windows = resolve_windows(mode, None, dmeta)
    cols = read_columns(dmeta, dmeta.data_files(), ["episode_index", "timestamp"])
    ep_of, ts = cols["episode_index"], cols["timestamp"].astype(np.float64)

    def group(rows: list[int], cursor: int | None = None) -> list[tuple]:
        reqs: dict[tuple, list[float]] = {}
        for row in rows:
            ep = int(ep_of[row])
            lo, hi = dmeta.ep_from[ep], dmeta.ep_to[ep] - 1
            for cam in dmeta.cameras:
                q = np.clip(row + windows[cam], lo, hi) if cam in windows else np.asarray([row])
                key = (dmeta.video_url(cam, ep), cursor)
                reqs.setdefault(key, []).extend(dmeta.video_from[cam][ep] + ts[q])
        return list(reqs.items())

    per_proc: list[list[list[tuple]]] = []
    if pattern == "random":
        order = np.random.default_rng(seed).permutation(dmeta.num_frames)
        for w in range(workers):
            per_proc.append([group([int(r)]) for r in order[w::workers]])
    else:
        ds = LeRobotStreamingDataset(root, mode=mode, rank=0, world_size=1)  # its defaults: pool, buffer, blocks
        parts = split_episodes(dmeta.ep_to - dmeta.ep_from, workers)
        for w in range(workers):
            events = shard_order(dmeta.ep_from, dmeta.ep_to, parts[w], seed, 0, w, ds.pool_size, ds.buffer_size,
                                 ds.read_ahead, True, ds.max_blocks)
            per_proc.append([group(*value) for kind, value in events if kind == "decode"])
    return per_proc


def _ceiling_worker(args) -> tuple[int, float]:
    """Decode the groups' requests for `duration_s`."""
    from torchcodec.decoders import VideoDecoder

    groups, fps, duration_s = args
    torch.set_num_threads(1)  # as in a DataLoader worker: no intra-op threads competing with the other processes
    decoders: dict[tuple, VideoDecoder] = {}
    frames = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < duration_s:
        for reqs in groups:
            for key, times in reqs:
                dec = decoders.get(key)
                if dec is None:
                    dec = decoders[key] = VideoDecoder(key[0], seek_mode="approximate", num_ffmpeg_threads=1)
                dec.get_frames_at(sorted({round(t * fps) for t in times}))
                frames += len(times)
            if time.perf_counter() - t0 >= duration_s:
                break
    return frames, time.perf_counter() - t0


def ceiling(root: str, mode: str, pattern: str, workers: int, duration_s: float) -> float:
    """Decoded frames/s of torchcodec alone on the loader's requests, in `workers` processes."""
    per_proc = requests_for(root, mode, pattern, max(1, workers))
    fps = DatasetMeta.load(root).fps
    with multiprocessing.get_context("spawn").Pool(len(per_proc)) as pool:
        results = pool.map(_ceiling_worker, [(g, fps, duration_s) for g in per_proc])
    return sum(f for f, _ in results) / max(t for _, t in results)


class _Replay(torch.utils.data.IterableDataset):
    """`pool` items of `dataset`, decoded once, then yielded in random order for ever (see `handover`)."""

    def __init__(self, dataset: LeRobotStreamingDataset, pool: int):
        self.dataset, self.pool = dataset, pool
        self.frame_bytes_per_item = dataset.frame_bytes_per_item

    def __iter__(self):
        items = list(itertools.islice(iter(self.dataset), self.pool))
        rng = random.Random(0)
        while True:
            yield items[rng.randrange(len(items))]


def handover(root: str, mode: str, pattern: str, batch_size: int, workers: int, duration_s: float,
             warmup_s: float) -> float:
    """Frames/s of dlbench's DataLoader handing over real items without decoding them: each worker decodes a pool
    of items once (the streaming loader's shuffle buffer for "stream", one batch for "random", whose items are
    batched as soon as they are decoded) and yields them in random order, so every batch still writes its frames
    from the pool's decoded blocks, carries the small fields, and crosses to the consumer as the loaders' do."""
    ds = LeRobotStreamingDataset(root, mode=mode, rank=0, world_size=1)
    pool = ds.buffer_size if pattern == "stream" else batch_size
    loader = DataLoader(_Replay(ds, pool), batch_size=batch_size, num_workers=workers, in_order=False)
    batches = iter(loader)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warmup_s:
        next(batches)
    items, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < duration_s:
        items += len(next(batches)["index"])
    rate = items * ds.frames_per_item / (time.perf_counter() - t0)
    del batches  # stops the workers
    return rate


def bench(root: str, loader: str, mode: str, args, out: Path, duration_s: float) -> dict:
    cmd = [sys.executable, "-m", "dlbench", "-q", "bench-run", "--root", root, "--loader", loader, "--mode", mode,
           "--batch-size", str(args.batch_size), "--num-workers", str(args.workers), "--duration-s",
           str(duration_s), "--warmup-s", str(args.warmup_s), "--out-dir", str(out), "--on-unavailable", "skip",
           "--no-verify"]  # the ceiling checks nothing either; verification costs main-process CPU
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "rank0of1.json").read_text())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default=None, help="a v3.0 dataset (default: synthesize and convert one)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--duration-s", type=float, default=15.0)
    ap.add_argument("--warmup-s", type=float, default=3.0)
    ap.add_argument("--modes", default="single,sarm")
    ap.add_argument("--loaders", default=",".join(LOADER_ORDER), help="a subset of " + ",".join(LOADER_ORDER))
    ap.add_argument("--memory-s", type=float, default=0.0, help="also run a long memory check of this length")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="dlbench-perf-loaders-"))
    root = a.dataset
    if root is None:
        from ..convert.run import run as convert
        from ..synth import Camera, SynthConfig, synthesize

        cams = (Camera("observation.images.front", 96, 128), Camera("observation.images.wrist", 96, 128))
        src = synthesize(SynthConfig(episodes=24, length_min=60, length_max=150, cameras=cams), work / "v21",
                         progress=False)
        root = str(convert(str(src), work / "v30", workers=2, progress=False))
    print(f"dataset {root}; batch {a.batch_size}, {a.workers} workers, {a.duration_s:.0f} s windows")
    for mode in filter(None, a.modes.split(",")):  # --modes "" with --memory-s: only the memory check
        rows = {}
        for pattern in ("random", "stream"):
            ceil = ceiling(root, mode, pattern, a.workers, a.duration_s)
            hand = handover(root, mode, pattern, a.batch_size, a.workers, a.duration_s, a.warmup_s)
            rows[f"ceiling ({pattern} access)"] = (ceil, None)
            rows[f"hand-over ({pattern}), no decode"] = (hand, None)
            rows[f"bound ({pattern})"] = (1 / (1 / ceil + 1 / hand), None)
        for loader in filter(None, a.loaders.split(",")):
            rec = bench(root, loader, mode, a, work / f"{mode}-{loader}", a.duration_s)
            if rec["status"] != "ok":
                print(f"  {loader}: {rec['status']} ({rec['reason']})")
                continue
            m = rec["metrics"]
            rows[loader] = (m["frames_per_s_node"], m["peak_pss_mb"])
        print(f"\nmode {mode}\n{'loader':<32} {'frames/s':>10} {'peak PSS MB':>12}")
        for name, (fps, rss) in rows.items():
            print(f"{name:<32} {fps:>10.1f} {rss if rss is not None else float('nan'):>12.1f}")
        f = {k: v[0] for k, v in rows.items()}
        for num, den, label, fmt, target in RATIOS:
            if num in f and den in f:
                print(f"{num} / {label}: {fmt.format(f[num] / f[den])} (target >= {target})")
        for num, den in BOUND_RATIOS:
            if num in f and den in f:
                print(f"{num} / {den}: {f[num] / f[den]:.0%} (not a target: the loader's own cost)")
    if a.memory_s > 0:
        print(f"\nmemory: peak PSS after {a.memory_s / 10:.0f} s and {a.memory_s:.0f} s (mode sarm)")
        for loader in ("dlbench_stream", "dlbench_map"):
            short = bench(root, loader, "sarm", a, work / f"mem-short-{loader}", a.memory_s / 10)
            long = bench(root, loader, "sarm", a, work / f"mem-long-{loader}", a.memory_s)
            print(f"{loader:<26} {short['metrics']['peak_pss_mb']:>8.1f} MB {long['metrics']['peak_pss_mb']:>8.1f} MB")


if __name__ == "__main__":
    main()
