"""Conversion benchmark: dlbench with 1 and 2 workers, LeRobot 0.6.1's converter and `cp -r`, side by side.

    python -m benchmarks.convert [--episodes 400] [--cameras 3] [--workdir DIR] [--repeats 3]

Prints the median wall time (over `repeats` interleaved rounds; LeRobot's converter runs once) and peak PSS
(process tree) of each contender on the same synthetic v2.1 dataset, the ratios the converter targets are stated
against, and peak PSS at 1x and 5x the episode count (small episodes) to show that
memory stays flat. LeRobot is skipped, with the reason printed, when its peer environment is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dlbench.convert import plan as planmod
from dlbench.format import paths
from dlbench.procstat import MemorySampler
from dlbench.synth import Camera, SynthConfig, synthesize

from . import datasets
from .common import Report, parser


def timed(cmd: list[str], **kw) -> tuple[float, float]:
    """Run a command; return (seconds, peak PSS in MB of its process tree)."""
    seconds, peak_mb, _ = measured(cmd, **kw)
    return seconds, peak_mb


def measured(cmd: list[str], timeout: float | None = None, **kw) -> tuple[float, float, str]:
    """Run a command; return (seconds, peak PSS in MB of its process tree, its stdout). Raises
    subprocess.TimeoutExpired (the tree killed) after `timeout` seconds."""
    os.sync()  # each contender starts with no dirty pages of the one before it to write back
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kw
    )
    rss = MemorySampler(proc.pid, every_s=0.05)
    rss.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        raise
    finally:
        rss.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{err[-2000:]}")
    return time.perf_counter() - t0, rss.peak / 2**20, out


def _spin(_=None) -> float:
    t0 = time.perf_counter()
    n = 0
    for i in range(5_000_000):
        n += i
    return time.perf_counter() - t0


def machine_scaling(repeats: int = 3) -> float:
    """How much faster two processes finish two equal pure-CPU jobs than one process finishes one (best of
    `repeats`): the most any 2-worker run can gain on this machine (2.0 on two free, dedicated cores)."""
    import multiprocessing

    best = 0.0
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        for _ in range(repeats):
            one = pool.apply(_spin)
            t0 = time.perf_counter()
            pool.map(_spin, [0, 1], chunksize=1)
            best = max(best, 2 * one / (time.perf_counter() - t0))
    return best


def copy_scaling(src: Path, work: Path, n: int = 2) -> tuple[float, float, float]:
    """The machine's own n-process ceiling on this dataset's I/O: (seconds for one `cp` of every file, seconds for n
    `cp`s of 1/n of the bytes each at once, the ratio). Conversion reads and writes these bytes once, so no number
    of workers can speed it up by more than copying them in n processes does."""
    files = sorted((p for p in src.rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size)
    shares: list[list[str]] = [[] for _ in range(n)]
    for i, f in enumerate(files):  # largest first, dealt round the processes: about equal bytes each
        shares[i % n].append(str(f.relative_to(src)))

    def copy(groups: list[list[str]]) -> float:
        dst = work / "cp-shares"
        shutil.rmtree(dst, ignore_errors=True)
        for d in {str(Path(f).parent) for g in groups for f in g}:  # made beforehand: parallel cps would race
            (dst / d).mkdir(parents=True, exist_ok=True)
        os.sync()
        t0 = time.perf_counter()
        procs = [subprocess.Popen(["cp", "--parents", "-t", str(dst), *g], cwd=src) for g in groups if g]
        if any(p.wait() for p in procs):
            raise RuntimeError(f"cp of {src} into {dst} failed")
        return time.perf_counter() - t0

    one = statistics.median(copy([sum(shares, [])]) for _ in range(3))
    many = statistics.median(copy(shares) for _ in range(3))
    shutil.rmtree(work / "cp-shares")
    return one, many, one / many


def ffmpeg_remux_commands(src: Path, work: Path, options: planmod.PlanOptions) -> list[list[str]] | None:
    """One `ffmpeg -f concat -c copy` per output video file of dlbench's plan for `src` (same thresholds): FFmpeg's
    own remuxer (C) writing what dlbench writes, the floor of any converter that parses every packet, as dlbench
    does to check frame counts and timestamps. None where no `ffmpeg` executable is on PATH."""
    if shutil.which("ffmpeg") is None:
        return None
    plan_dir, out = work / "ffmpeg-plan", work / "ffmpeg-out"
    for d in (plan_dir, out):
        shutil.rmtree(d, ignore_errors=True)
    manifest = planmod.plan(str(src), plan_dir, options)
    out.mkdir(parents=True)
    cmds = []
    for u in range(manifest["units"]):
        unit = planmod.load_unit(plan_dir, u)
        if unit["stream"] == planmod.DATA_STREAM:
            continue
        for f in unit["files"]:
            name = f"{unit['stream']}-{f['chunk_index']}-{f['file_index']}"
            listing = out / f"{name}.txt"
            rel = [
                paths.v21_video_path(e, unit["stream"], manifest["source_chunks_size"]) for e in f["source_episodes"]
            ]
            listing.write_text("".join(f"file '{src / r}'\n" for r in rel))
            concat = ["ffmpeg", "-loglevel", "error", "-y", "-f", "concat", "-safe", "0", "-i", str(listing)]
            cmds.append([*concat, "-c", "copy", str(out / f"{name}.mp4")])
    return cmds


def ffmpeg_remux(cmds: list[list[str]], n: int) -> float:
    """Seconds for the remux commands, `n` at a time (their outputs are deleted afterwards)."""
    os.sync()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        for proc in pool.map(lambda c: subprocess.run(c, capture_output=True, text=True), cmds):
            if proc.returncode:
                raise RuntimeError(f"ffmpeg remux failed: {proc.stderr[-2000:]}")
    seconds = time.perf_counter() - t0
    for c in cmds:
        Path(c[-1]).unlink()
    return seconds


def dlbench_convert(
    src: Path, dst: Path, workers: int, extra: list[str] = (), tree: Path | None = None
) -> tuple[float, float]:
    """Time `dlbench convert run`; from the source tree `tree` (its `src/`) instead of the installed one if given.
    The output is deleted afterwards: many GB of contenders' outputs would crowd the page cache (or a tmpfs)."""
    shutil.rmtree(dst, ignore_errors=True)
    env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree / "src")}
    cmd = [sys.executable, "-m", "dlbench", "-q", "convert", "run", str(src), str(dst), "--workers", str(workers)]
    try:
        return timed([*cmd, *extra], env=env)
    finally:
        shutil.rmtree(dst, ignore_errors=True)


def main(argv=None) -> None:
    a = parse_args(argv)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="dlbench-perf-convert-"))
    work.mkdir(parents=True, exist_ok=True)
    sizes = [
        "--data-file-size-in-mb",
        f"{a.data_file_size_in_mb:g}",
        "--video-file-size-in-mb",
        f"{a.video_file_size_in_mb:g}",
    ]  # both converters get the same thresholds
    src = prepare_source(a, work)
    options = planmod.PlanOptions(
        data_file_size_in_mb=a.data_file_size_in_mb, video_file_size_in_mb=a.video_file_size_in_mb
    )  # dlbench's plan, as the converter makes it from `sizes`
    rows = time_rounds(src, work, sizes, ffmpeg_remux_commands(src, work, options), a.repeats, a.baseline_tree)
    lerobot = time_lerobot(src, work, sizes, a.skip_lerobot)
    if lerobot is not None:
        rows.append(("LeRobot 0.6.1 converter", *lerobot))
    report = Report(a, ["contender", "seconds", "peak PSS MB"], "convert")
    for name, secs, mb in rows:
        report.row(**{"contender": name, "seconds": f"{secs:.2f}", "peak PSS MB": mb or None})  # ffmpeg's: not sampled
    print_ratios(report, {name: secs for name, secs, _ in rows}, src, work)
    if not a.skip_memory:
        print_memory_flatness(report, a.episodes, work)
    report.line(f"work directory: {work}")
    report.close()


def parse_args(argv=None) -> argparse.Namespace:
    ap = parser(__doc__, workdir=None)
    ap.add_argument("--episodes", type=int, default=400)
    ap.add_argument("--cameras", type=int, default=3)
    ap.add_argument("--height", type=int, default=96)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--length-min", type=int, default=30)
    ap.add_argument("--length-max", type=int, default=90)
    ap.add_argument("--crf", type=int, default=None, help="lower: bigger files (more bytes per episode)")
    ap.add_argument(
        "--noise",
        type=int,
        default=0,
        help="per-pixel noise (0..127): files of real-world size (tens of KB per frame) instead of ~0.2 KB",
    )
    ap.add_argument("--data-file-size-in-mb", type=float, default=100)
    ap.add_argument("--video-file-size-in-mb", type=float, default=200)
    ap.add_argument("--source", default=None, help="convert this v2.1 dataset instead of a synthetic one")
    ap.add_argument(
        "--realistic",
        action="store_true",
        help="synthesize the realistic dataset (480x640 AV1 episodes of 10-20 s, a few MB per video file) "
        "instead of --episodes tiny ones",
    )
    ap.add_argument(
        "--tile",
        type=int,
        default=1,
        help="convert the source with its episodes repeated this many times (videos hard-linked under --workdir): "
        "a dataset of many GB, where the converter's fixed start-up costs no longer count",
    )
    ap.add_argument("--skip-lerobot", action="store_true", help="skip LeRobot's converter (it runs once, slowly)")
    ap.add_argument("--skip-memory", action="store_true", help="skip the 1x/5x memory comparison")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds of cp and dlbench (median)")
    ap.add_argument(
        "--baseline-tree",
        type=Path,
        default=None,
        help="also time 2 workers of the dlbench in this checkout (e.g. `git worktree add /tmp/old HEAD~5`), in the "
        "same rounds: before and after, side by side",
    )
    return ap.parse_args(argv)


def prepare_source(a: argparse.Namespace, work: Path) -> Path:
    """The v2.1 dataset to convert (given, or synthesized under `work` unless already there), tiled if asked."""
    if a.source:
        src = Path(a.source)
    elif a.realistic:
        src = datasets.v21(work, realistic=True)
    else:
        src = work / "v21"
        if not (src / "meta/info.json").exists():
            t0 = time.perf_counter()
            cams = tuple(Camera(f"observation.images.cam{i}", a.height, a.width) for i in range(a.cameras))
            synthesize(
                SynthConfig(
                    episodes=a.episodes,
                    length_min=a.length_min,
                    length_max=a.length_max,
                    cameras=cams,
                    crf=a.crf,
                    noise=a.noise,
                ),
                src,
                overwrite=True,
                progress=False,
            )
            print(f"synthesized {a.episodes} episodes x {a.cameras} cameras in {time.perf_counter() - t0:.1f} s")
    if a.tile > 1:
        src = datasets.tile(src, a.tile, work / f"{src.name}-x{a.tile}")
    size_mb = sum(p.stat().st_size for p in src.rglob("*") if p.is_file()) / 2**20
    print(
        f"source: {src} ({size_mb:.1f} MB, {sum(1 for p in src.rglob('*') if p.is_file())} files); "
        f"thresholds: data {a.data_file_size_in_mb} MB, video {a.video_file_size_in_mb} MB"
    )
    return src


def time_rounds(
    src: Path,
    work: Path,
    sizes: list[str],
    remux: list[list[str]] | None,
    repeats: int,
    baseline_tree: Path | None,
) -> list[tuple[str, float, float]]:
    """(contender, median seconds, peak PSS MB) of cp, dlbench and FFmpeg's remuxer over `repeats` rounds."""
    runs: dict[str, list[tuple[float, float]]] = {}
    for _ in range(repeats):  # interleaved: drift on a noisy machine hits every contender alike
        shutil.rmtree(work / "cp", ignore_errors=True)
        runs.setdefault("cp -r (I/O floor)", []).append(timed(["cp", "-r", str(src), str(work / "cp")]))
        shutil.rmtree(work / "cp")
        for w in (1, 2):
            runs.setdefault(f"dlbench convert, {w} worker{'s' if w > 1 else ''}", []).append(
                dlbench_convert(src, work / f"d{w}", w, sizes)
            )
        if baseline_tree:
            runs.setdefault("baseline tree, 2 workers", []).append(
                dlbench_convert(src, work / "base", 2, sizes, tree=baseline_tree)
            )
        for w in (1, 2) if remux else ():
            runs.setdefault(f"FFmpeg remux (videos), {w} proc{'s' if w > 1 else ''}", []).append(
                (ffmpeg_remux(remux, w), 0.0)
            )
    return [(name, statistics.median(s for s, _ in r), max(mb for _, mb in r)) for name, r in runs.items()]


def time_lerobot(src: Path, work: Path, sizes: list[str], skip: bool) -> tuple[float, float] | None:
    """(seconds, peak PSS MB) of LeRobot 0.6.1's converter on a copy of `src`; None, saying why, when skipped."""
    from dlbench.peer import peer_python

    peer = peer_python()
    if skip:
        print("LeRobot 0.6.1: skipped (--skip-lerobot)")
        return None
    if peer is None:
        print("LeRobot 0.6.1: skipped (peer environment missing; create it with scripts/peer-env.sh)")
        return None
    copy = work / "lerobot"
    for p in (copy, work / "lerobot_old"):
        shutil.rmtree(p, ignore_errors=True)
    shutil.copytree(src, copy)
    result = timed(
        [
            str(peer),
            "-m",
            "lerobot.scripts.convert_dataset_v21_to_v30",
            "--repo-id",
            "local/perf",
            "--root",
            str(copy),
            "--push-to-hub",
            "false",
            *sizes,
        ],
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    for p in (copy, work / "lerobot_old"):
        shutil.rmtree(p, ignore_errors=True)
    return result


def print_ratios(report: Report, t: dict[str, float], src: Path, work: Path) -> None:
    """The ratios against this machine's measured ceilings and the other contenders, with the targets met."""
    one, two = t["dlbench convert, 1 worker"], t["dlbench convert, 2 workers"]
    cp_one, cp_two, io_ceiling = copy_scaling(src, work)
    cpu_ceiling = machine_scaling()
    report.line(
        f"2 workers vs 1 worker: {one / two:.2f}x faster; this machine's 2-process ceilings measured now: "
        f"copying these files {io_ceiling:.2f}x ({cp_one:.2f} s in one cp, {cp_two:.2f} s in two), pure CPU "
        f"{cpu_ceiling:.2f}x"
    )
    report.goal("2 workers reach >= 90% of the copy ceiling", one / two >= 0.9 * io_ceiling,
                f"{one / two / io_ceiling:.0%}")  # fmt: skip
    ratio = two / t["cp -r (I/O floor)"]
    report.goal("dlbench 2 workers <= 2x the time of cp -r", ratio <= 2, f"{ratio:.2f}x")
    if "baseline tree, 2 workers" in t:
        base = t["baseline tree, 2 workers"]
        report.line(f"dlbench 2 workers vs the baseline tree's: {base / two:.2f}x faster ({base:.2f} s -> {two:.2f} s)")
    if "LeRobot 0.6.1 converter" in t:
        speedup = t["LeRobot 0.6.1 converter"] / two
        report.goal("dlbench 2 workers >= 5x faster than LeRobot's converter", speedup >= 5, f"{speedup:.2f}x")
    if "FFmpeg remux (videos), 2 procs" in t:
        ff_one, ff_two = t["FFmpeg remux (videos), 1 proc"], t["FFmpeg remux (videos), 2 procs"]
        report.line(
            f"FFmpeg's C remuxer, videos only: {ff_two / t['cp -r (I/O floor)']:.2f}x the cp time with 2 processes, "
            f"{ff_one / ff_two:.2f}x faster than 1; dlbench 2 workers take {two / ff_two:.2f}x its time"
        )


def print_memory_flatness(report: Report, episodes: int, work: Path) -> None:
    """Peak PSS of 1 worker converting `episodes` and 5x as many small episodes: it should stay flat."""
    small = (Camera("observation.images.cam0", 32, 32),)
    peaks = []
    for n in (episodes, 5 * episodes):
        s = work / f"mem{n}"
        if not (s / "meta/info.json").exists():
            synthesize(
                SynthConfig(episodes=n, length_min=5, length_max=10, cameras=small),
                s,
                overwrite=True,
                progress=False,
            )
        peaks.append(dlbench_convert(s, work / f"mem{n}_v30", 1)[1])
    flat = peaks[1] <= 1.2 * peaks[0] and peaks[1] < 500
    report.goal(f"peak PSS, 1 worker, flat from {episodes} to {5 * episodes} small episodes (< 500 MB, within 20%)",
                flat, f"{peaks[0]:.1f} MB vs {peaks[1]:.1f} MB")  # fmt: skip


if __name__ == "__main__":
    main()
