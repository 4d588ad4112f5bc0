"""Loader benchmark: dlbench and LeRobot loaders against the decode ceiling, side by side in one run.

    python -m benchmarks.loaders [--dataset V30 | --realistic] [--workers 2] [--batch-size 16] [--duration-s 10]

For each mode (single, sarm) it measures, with the same batch size, workers and window:
  - the decode ceiling: torchcodec alone decoding exactly the (file, time) requests a loader makes, with cached
    decoders, in as many processes as the loader has workers (one ceiling for random access, one for streaming);
  - the hand-over: dlbench's DataLoader passing real items (their frames still in their decoded blocks, as many
    items alive as the loader keeps) to the consumer without decoding anything: the batch write of every frame,
    the small fields, the trip between processes, the consumer's share of the cores. With the ceiling it gives a
    bound, what a loader adding no work of its own could reach (1 / (1/ceiling + 1/hand-over)); the loaders'
    targets stay against the bare ceiling;
  - the physical limit: the ffmpeg command alone decoding the dataset's video files start to end, one thread a
    process, as many processes as workers, to RGB (what the loaders deliver) and without the conversion. No loader
    can pass it on these cores; random access also decodes the frames before each sample in its GOP;
  - dlbench_map, dlbench_stream, LeRobot 0.6.1's lerobot_map, lerobot_stream, and lerobot-lancedb 0.3.1's lance_map
    over a Lance copy its converter makes (peer environment), each through `dlbench bench-run`, the same harness the
    workflow uses.
It prints decoded frames/s, each loader's share of the FFmpeg limit, the ratios the loaders are held to, and peak
PSS. With `--memory-s S` it also runs
dlbench_stream and dlbench_map for S seconds and prints peak PSS after S/10 and S seconds (flat memory check).
"""

from __future__ import annotations

import itertools
import multiprocessing
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from dlbench.loader import DataLoader, LeRobotMapDataset
from dlbench.loader.dataset_meta import DatasetMeta
from dlbench.loader.stream import LeRobotStreamingDataset
from dlbench.report.aggregate import VERIFIED_STATUSES

from . import datasets
from .common import Report, bench_run, parser

LOADER_ORDER = ("dlbench_map", "dlbench_stream", "lerobot_map", "lerobot_stream", "lance_map")
FFMPEG_LIMIT = "ffmpeg alone, to RGB"
# the ratios the loaders are held to: (numerator, denominator, how the denominator is printed, format, target)
RATIOS = (
    ("dlbench_stream", "lerobot_stream", "lerobot_stream", "{:.2f}x", 2.0),
    ("dlbench_map", "lerobot_map", "lerobot_map", "{:.2f}x", 1.5),
    ("dlbench_map", "ceiling (random access)", "ceiling (random)", "{:.0%}", 0.95),
    ("dlbench_stream", "ceiling (stream access)", "ceiling (stream)", "{:.0%}", 0.85),
)
# not targets: the loaders against the bound of decoding plus handing items over (see `handover`), and the most a
# loader that decodes exactly these frames can gain over LeRobot's
BOUND_RATIOS = (
    ("dlbench_map", "bound (random)"),
    ("dlbench_stream", "bound (stream)"),
    ("ceiling (random access)", "lerobot_map"),
    ("ceiling (stream access)", "lerobot_stream"),
)


def requests_for(root: str, mode: str, pattern: str, workers: int, seed: int = 0) -> list[list[list[tuple]]]:
    """Per process, the list of decode requests [((url, cursor), times)] per sample group, as the loader makes them.

    The cursor is the pool slot for streaming (one decoder per live episode's slot and file, as the streaming loader
    keeps) and None for random access (one decoder per file)."""
    builder = LeRobotMapDataset(root, mode=mode, return_uint8=True).builder  # every row's columns in memory
    dmeta = builder.dmeta

    def group(rows: list[int], cursor: int | None = None) -> list[tuple]:  # as the loader asks for them
        return [((url, cursor), times) for url, times in builder.decode_requests(rows)]

    per_proc: list[list[list[tuple]]] = []
    if pattern == "random":
        order = np.random.default_rng(seed).permutation(dmeta.num_frames)
        for w in range(workers):
            per_proc.append([group([int(r)]) for r in order[w::workers]])
    else:
        # its defaults: pool, buffer, blocks, virtual shards, each worker's shards read in lanes
        ds = LeRobotStreamingDataset(root, mode=mode, rank=0, world_size=1, seed=seed, return_uint8=True)
        note = ds.work_note(workers)
        if note:
            print(f"note: {note}", file=sys.stderr)
        for w in range(ds.busy_workers(workers)):
            per_proc.append([group(rows, slot) for rows, slot in ds.worker_decodes(0, workers, w)])
    return per_proc


def _ceiling_worker(args) -> list[tuple[int, float]]:
    """Decode the groups' requests for `warmup_s`, then for `repeats` windows of `duration_s`: (frames, seconds) per
    window. The windows are the bench harness's, so both cover about the same stretch of the epoch (a streaming
    shard's first seconds read the starts of its episodes, where sarm windows repeat clamped frames and cost less)."""
    from torchcodec.decoders import VideoDecoder

    groups, fps, warmup_s, duration_s, repeats = args
    torch.set_num_threads(1)  # as in a DataLoader worker: no intra-op threads competing with the other processes
    decoders: dict[tuple, VideoDecoder] = {}
    ends = [warmup_s] + [duration_s] * repeats  # the warm-up, then the windows
    windows, frames, start = [], 0, time.perf_counter()
    for reqs in itertools.cycle(groups):
        for key, times in reqs:
            dec = decoders.get(key)
            if dec is None:
                dec = decoders[key] = VideoDecoder(key[0], seek_mode="approximate", num_ffmpeg_threads=1)
            dec.get_frames_at(sorted({round(t * fps) for t in times}))
            frames += len(times)
        now = time.perf_counter()
        if now - start >= ends[len(windows)]:
            windows.append((frames, now - start))
            frames, start = 0, now
            if len(windows) == len(ends):
                break
    return windows[1:]  # the first is the warm-up


def ceiling(
    root: str, mode: str, pattern: str, workers: int, duration_s: float, warmup_s: float = 0.0, repeats: int = 1
) -> float:
    """Decoded frames/s of torchcodec alone on the loader's requests, in `workers` processes: the median of
    `repeats` windows after `warmup_s`, as the bench harness measures the loaders."""
    per_proc = requests_for(root, mode, pattern, max(1, workers))
    fps = DatasetMeta.load(root).fps
    with multiprocessing.get_context("spawn").Pool(len(per_proc)) as pool:
        results = pool.map(_ceiling_worker, [(g, fps, warmup_s, duration_s, repeats) for g in per_proc])
    rates = [sum(proc[w][0] for proc in results) / max(proc[w][1] for proc in results) for w in range(repeats)]
    return float(np.median(rates))


def _ffmpeg_worker(args) -> list[tuple[int, float]]:
    """The ffmpeg command decoding `files` start to end, looped (one process, no restarts), one thread: (frames,
    seconds) per window after `warmup_s`, read from its progress reports (every 0.1 s)."""
    files, rgb, warmup_s, duration_s, repeats = args
    ends = [warmup_s + k * duration_s for k in range(repeats + 1)]
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as listing:
        listing.write("".join(f"file '{path}'\n" for path in files))
        listing.flush()
        cmd = ["ffmpeg", "-nostdin", "-v", "error", "-threads", "1", "-stream_loop", "-1", "-f", "concat", "-safe", "0"]
        cmd += ["-i", listing.name, "-map", "0:v:0", *(["-pix_fmt", "rgb24"] if rgb else [])]
        cmd += ["-threads", "1", "-filter_threads", "1", "-f", "null", "-"]
        cmd += ["-progress", "pipe:1", "-stats_period", "0.1"]
        marks, start = [], time.perf_counter()  # (seconds, frames decoded so far) at each report
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
            for line in proc.stdout:
                if line.startswith("frame="):
                    marks.append((time.perf_counter() - start, int(line[6:])))
                    if marks[-1][0] >= ends[-1]:
                        proc.kill()
                        break
    if not marks or marks[-1][0] < ends[-1]:
        raise SystemExit(f"ffmpeg stopped before {ends[-1]:.0f} s on {files}: {' '.join(cmd)}")
    at = [next(m for m in marks if m[0] >= end) for end in ends]  # the first report past each window's end
    return [(f1 - f0, t1 - t0) for (t0, f0), (t1, f1) in zip(at, at[1:])]


def ffmpeg_limit(root: str, workers: int, rgb: bool, duration_s: float, warmup_s: float, repeats: int) -> float:
    """Frames/s of the ffmpeg command alone decoding every video file of `root`, one thread a process, in
    `workers` processes (each its share of the files; all of them when there are fewer files than processes)."""
    files = sorted(str(p) for p in Path(root).glob("videos/**/*.mp4"))
    if not files:
        raise SystemExit(f"{root}: no videos/**/*.mp4 to decode")
    n = max(1, workers)
    shares = [files[w::n] or [files[w % len(files)]] for w in range(n)]
    with multiprocessing.get_context("spawn").Pool(n) as pool:
        results = pool.map(_ffmpeg_worker, [(s, rgb, warmup_s, duration_s, repeats) for s in shares])
    return float(np.median([sum(p[w][0] / p[w][1] for p in results) for w in range(repeats)]))


class _Replay(torch.utils.data.IterableDataset):
    """`pool` items of `dataset`, decoded once, then yielded in random order for ever (see `handover`)."""

    def __init__(self, dataset: LeRobotStreamingDataset, pool: int):
        self.dataset, self.pool = dataset, pool
        self.frame_bytes_per_item = dataset.frame_bytes_per_item

    def __iter__(self):
        items = list(itertools.islice(iter(self.dataset), self.pool))
        if not items:  # a worker without episodes (more workers than the dataset has): the others hand over
            return
        rng = random.Random(0)
        while True:
            yield items[rng.randrange(len(items))]


def handover(
    root: str, mode: str, pattern: str, batch_size: int, workers: int, duration_s: float, warmup_s: float
) -> float:
    """Frames/s of dlbench's DataLoader handing over real items without decoding them: each worker decodes a pool
    of items once (the streaming loader's shuffle buffer for "stream", one batch for "random", whose items are
    batched as soon as they are decoded) and yields them in random order, so every batch still writes its frames
    from the pool's decoded blocks, carries the small fields, and crosses to the consumer as the loaders' do."""
    ds = LeRobotStreamingDataset(root, mode=mode, rank=0, world_size=1, return_uint8=True)
    # the items the streaming loader keeps alive: its buffer, bounded by `max_blocks` blocks of decoded frames
    pool = min(ds.buffer_size, ds.max_blocks() * ds.read_ahead) if pattern == "stream" else batch_size
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


def lance_copy(root: str, work: Path) -> Path:
    """`root`'s Lance copy for lance_map (lerobot-lancedb's converter, peer environment), made once under `work`."""
    out = work / f"lance-{Path(root).name}"
    if not out.exists():
        subprocess.run([sys.executable, "-m", "dlbench", "-q", "lance-convert", root, str(out)], check=True)
    return out


def bench(root: str, loader: str, mode: str, args, out: Path, duration_s: float) -> dict:
    lance = str(lance_copy(root, args.work)) if loader == "lance_map" else None
    # the ceiling checks nothing either; verification costs main-process CPU
    return bench_run(out, root=root, loader=loader, mode=mode, batch_size=args.batch_size, num_workers=args.workers,
                     duration_s=duration_s, warmup_s=args.warmup_s, repeats=args.repeats, on_unavailable="skip",
                     verify=False, lance_root=lance)  # fmt: skip


def main(argv=None) -> None:
    ap = parser(__doc__, workdir=None)
    ap.add_argument("--dataset", default=None, help="a v3.0 dataset (default: synthesize and convert one)")
    ap.add_argument(
        "--realistic",
        action="store_true",
        help="synthesize the realistic dataset (480x640 AV1, camera-like, 10-20 s episodes) instead of the "
        "quick 96x128 one",
    )
    ap.add_argument(
        "--episodes", type=int, default=None, help="episodes to synthesize (default: 24 quick, 10 realistic)"
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--duration-s", type=float, default=10.0)
    ap.add_argument("--warmup-s", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3, help="windows per measurement (the median is printed)")
    ap.add_argument("--modes", default="single,sarm")
    ap.add_argument("--loaders", default=",".join(LOADER_ORDER), help="a subset of " + ",".join(LOADER_ORDER))
    ap.add_argument("--memory-s", type=float, default=0.0, help="also run a long memory check of this length")
    a = ap.parse_args(argv)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="dlbench-perf-loaders-"))
    root = a.dataset or str(datasets.v30(work, a.realistic, a.episodes))
    a.work = work
    report = Report(a, ["mode", "loader", "frames/s", "peak PSS MB"], "loaders")
    report.line(f"dataset {root}; batch {a.batch_size}, {a.workers} workers, {a.duration_s:.0f} s windows")
    limits = {}
    if a.modes:  # the files decoded start to end: one limit for every mode
        for rgb, name in ((True, FFMPEG_LIMIT), (False, "ffmpeg alone, no RGB")):
            limits[name] = (ffmpeg_limit(root, a.workers, rgb, a.duration_s, a.warmup_s, a.repeats), None)
    for mode in filter(None, a.modes.split(",")):  # --modes "" with --memory-s: only the memory check
        rows = dict(limits)
        for pattern in ("random", "stream"):
            ceil = ceiling(root, mode, pattern, a.workers, a.duration_s, a.warmup_s, a.repeats)
            hand = handover(root, mode, pattern, a.batch_size, a.workers, a.duration_s, a.warmup_s)
            rows[f"ceiling ({pattern} access)"] = (ceil, None)
            rows[f"hand-over ({pattern}), no decode"] = (hand, None)
            rows[f"bound ({pattern})"] = (1 / (1 / ceil + 1 / hand), None)
        for loader in filter(None, a.loaders.split(",")):
            rec = bench(root, loader, mode, a, work / f"{mode}-{loader}", a.duration_s)
            if rec["status"] not in VERIFIED_STATUSES:  # "unverified": measured with --no-verify
                report.line(f"{mode} {loader}: {rec['status']} ({rec['reason']})")
                continue
            m = rec["metrics"]
            rows[loader] = (m["frames_per_s_node"], m["peak_pss_mb"])
        for name, (fps, rss) in rows.items():
            report.row(**{"mode": mode, "loader": name, "frames/s": fps, "peak PSS MB": rss})
        f = {k: v[0] for k, v in rows.items()}
        shares = [f"{name} {f[name] / f[FFMPEG_LIMIT]:.0%}" for name in f if name in LOADER_ORDER or "ceiling" in name]
        report.line(f"{mode}: share of the FFmpeg limit ({FFMPEG_LIMIT}): {', '.join(shares)}")
        for num, den, label, fmt, target in RATIOS:
            if num in f and den in f:
                report.goal(f"{mode}: {num} / {label} >= {fmt.format(target)}", f[num] / f[den] >= target,
                            fmt.format(f[num] / f[den]))  # fmt: skip
        for num, den in BOUND_RATIOS:
            if num in f and den in f:
                report.line(f"{mode}: {num} / {den}: {f[num] / f[den]:.2f}x (not a target)")
        pss = {k: v[1] for k, v in rows.items() if v[1] is not None}
        if "dlbench_stream" in pss and "lerobot_stream" in pss:
            ratio = pss["dlbench_stream"] / pss["lerobot_stream"]
            report.goal(f"{mode}: peak PSS dlbench_stream / lerobot_stream <= 1", ratio <= 1, f"{ratio:.2f}")
    if a.memory_s > 0:
        report.line(f"memory: peak PSS after {a.memory_s / 10:.0f} s and {a.memory_s:.0f} s (mode sarm)")
        report.table(["loader", "short MB", "long MB"])
        for loader in ("dlbench_stream", "dlbench_map"):
            short = bench(root, loader, "sarm", a, work / f"mem-short-{loader}", a.memory_s / 10)
            long = bench(root, loader, "sarm", a, work / f"mem-long-{loader}", a.memory_s)
            report.row(**{"loader": loader, "short MB": short["metrics"]["peak_pss_mb"],
                          "long MB": long["metrics"]["peak_pss_mb"]})  # fmt: skip
    report.close()


if __name__ == "__main__":
    main()
