"""Cost growth: conversion, loader start-up and the workflow's DAG, from 100 to 50,000 episodes.

    python -m benchmarks.scale [--episodes 100 1000 10000 50000] [--workdir DIR] [--workers 2]
                               [--skip-lerobot] [--dag-runs 20 200 1000] [--timeout-s 900]

The datasets are tiny video (3 cameras of 32x32, 3 to 6 frames per episode): 10 episodes synthesized once, then
tiled to each size with their videos hard-linked (benchmarks.datasets.tile). What the frames show does not change
these costs; the counts of episodes, files and rows do. For each size:
  - conversion, step by step as the workflow runs it: `dlbench convert plan`, `--workers` `convert work`
    processes at once, `convert finalize`. Seconds, milliseconds per episode and peak PSS (process tree) of each
    step; files per episode in the work directory and in the published v3.0 dataset;
  - loader start-up (benchmarks.first_batch, a fresh process each): seconds to open the dataset, seconds from open
    to the first batch (batch 16, `--workers` workers), PSS once open and peak PSS to the first batch, for
    dlbench_map, dlbench_stream and LeRobot 0.6.1's lerobot_map and lerobot_stream (peer environment).
Then Snakemake's DAG time (`snakemake -n`, start-up included) for matrices of `--dag-runs` runs on the largest
dataset. Goals: flat per-episode cost; the first batch within 5 s of open and >= 5x sooner than LeRobot's.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.common import Report, parser
from dlbench.peer import REPO_ROOT, peer_python
from dlbench.synth import Camera, SynthConfig, synthesize

from . import datasets
from .convert import measured

BASE = SynthConfig(
    episodes=10,
    length_min=3,
    length_max=6,
    cameras=tuple(Camera(f"observation.images.cam{i}", 32, 32) for i in range(3)),
)
LOADERS = ("dlbench_map", "dlbench_stream", "lerobot_map", "lerobot_stream")
FIRST_BATCH_GOAL_S, VS_LEROBOT_GOAL = 5.0, 5.0


def dataset(work: Path, episodes: int) -> Path:
    """The v2.1 dataset of `episodes` tiny episodes (written once under `work`)."""
    base = work / "base-v21"
    if not (base / "meta/info.json").exists():
        synthesize(BASE, base, overwrite=True, progress=False)
    if episodes % BASE.episodes:
        raise SystemExit(f"--episodes must be multiples of {BASE.episodes}")
    t0 = time.perf_counter()
    out = datasets.tile(base, episodes // BASE.episodes, work / f"v21-{episodes}")
    if time.perf_counter() - t0 > 1:
        print(f"  wrote {out} in {time.perf_counter() - t0:.0f} s")
    return out


def files_in(root: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


def convert(src: Path, work: Path, workers: int) -> tuple[dict, Path]:
    """Time the three conversion steps; returns ({step: (seconds, peak MB)} plus file counts, the v3.0 root)."""
    wdir, dst = work / f"{src.name}-work", work / src.name.replace("v21", "v30")
    for d in (wdir, dst):
        shutil.rmtree(d, ignore_errors=True)
    dl = [sys.executable, "-m", "dlbench", "-q", "convert"]
    steps = {"plan": measured([*dl, "plan", str(src), str(wdir)])[:2]}
    # the work jobs, started together as the workflow's N jobs are; bash fails if any of them does
    many = (
        'pids=(); for _ in $(seq "$0"); do "$@" & pids+=($!); done; for p in "${pids[@]}"; do wait "$p" || exit 1; done'
    )
    steps["work"] = measured(["bash", "-c", many, str(workers), *dl, "work", str(wdir)])[:2]
    work_files = files_in(wdir)
    steps["finalize"] = measured([*dl, "finalize", str(wdir), str(dst)])[:2]
    return {**steps, "work_files": work_files, "out_files": files_in(dst)}, dst


def first_batch(loader: str, root: Path, workers: int, timeout_s: float) -> dict | str:
    """benchmarks.first_batch's figures plus the peak PSS of its process tree; a reason string where not run."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)])}
    python = sys.executable
    if loader.startswith("lerobot"):
        python = peer_python()
        if python is None:
            return "no peer environment (scripts/peer-env.sh)"
        env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    cmd = [str(python), "-m", "benchmarks.first_batch", loader, str(root), "--workers", str(workers)]
    try:
        seconds, peak, out = measured(cmd, timeout=timeout_s, env=env, cwd=REPO_ROOT)
    except subprocess.TimeoutExpired:
        return f"not done in {timeout_s:.0f} s"
    except RuntimeError as e:
        return f"failed: {str(e).splitlines()[-1][:120]}"
    return {**json.loads(out.strip().splitlines()[-1]), "process_s": seconds, "peak_pss_mb": peak}


def dag_seconds(root: Path, runs: int, work: Path) -> tuple[float, int]:
    """Wall seconds of `snakemake -n` for a matrix of `runs` bench runs on `root`, and the bench jobs it planned."""
    d = work / f"dag-{runs}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    config = {
        "datasets": {"scale": {"v30": str(root)}},
        "bench": {
            "defaults": {"dataset": "scale", "loader": "dlbench_stream", "num_workers": 1},
            "scenarios": {"grid": {"batch_size": list(range(1, runs + 1))}},
        },
    }
    (d / "config.yaml").write_text(yaml.safe_dump(config))
    snakemake = Path(sys.executable).with_name("snakemake")
    cmd = [str(snakemake), "-s", str(REPO_ROOT / "Snakefile"), "-d", str(d), "-n", "-c", "1"]
    cmd += ["--configfile", str(d / "config.yaml")]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"snakemake -n failed:\n{proc.stderr[-2000:]}")
    jobs = [line.split() for line in proc.stdout.splitlines() if line.strip().startswith("bench ")]
    return seconds, int(jobs[0][1]) if jobs else 0


def print_dag(report: Report, root: Path, sizes: list[int], work: Path, repeats: int = 3) -> None:
    """The median of `repeats` interleaved `snakemake -n` per matrix size (the first call also warms the caches)."""
    times: dict[int, list[float]] = {n: [] for n in sizes}
    jobs = {}
    for _ in range(repeats):
        for n in sizes:
            seconds, jobs[n] = dag_seconds(root, n, work)
            times[n].append(seconds)
    report.line(f"Snakemake DAG (`snakemake -n`, start-up included, median of {repeats}) on {root}")
    report.table(["runs", "bench jobs", "seconds", "ms per run"])
    for n in sizes:
        seconds = statistics.median(times[n])
        report.row(**{"runs": n, "bench jobs": jobs[n], "seconds": f"{seconds:.2f}",
                      "ms per run": f"{1000 * seconds / n:.1f}"})  # fmt: skip


def per_episode_ms(seconds: float, episodes: int) -> str:
    return f"{1000 * seconds / episodes:.2f}"


def main(argv=None) -> None:
    ap = parser(__doc__, workdir=None)
    ap.add_argument("--episodes", type=int, nargs="+", default=[100, 1000, 10000, 50000])
    ap.add_argument("--workers", type=int, default=2, help="conversion work processes and DataLoader workers")
    ap.add_argument("--skip-lerobot", action="store_true")
    ap.add_argument("--dag-runs", type=int, nargs="*", default=[20, 200, 1000])
    ap.add_argument("--timeout-s", type=float, default=900, help="give up on a loader's start-up after this long")
    a = ap.parse_args(argv)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="dlbench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    loaders = [x for x in LOADERS if not (a.skip_lerobot and x.startswith("lerobot"))]
    conv, starts, roots = {}, {}, {}
    report = Report(a, ["episodes", "loader", "progress"], "scale")
    for n in a.episodes:  # each size converted and opened before the next is written: one at a time on disk
        src = dataset(work, n)
        conv[n], roots[n] = convert(src, work, a.workers)
        for loader in loaders:
            starts[n, loader] = first_batch(loader, roots[n], a.workers, a.timeout_s)
            report.row(episodes=n, loader=loader, progress=starts[n, loader])
    print_conversion(report, conv, a.workers)
    print_start_up(report, starts, a.episodes, loaders, a.workers)
    if a.dag_runs:
        print_dag(report, roots[max(a.episodes)], a.dag_runs, work)
    report.line(f"work directory: {work}")
    report.close()


def print_conversion(report: Report, conv: dict, workers: int) -> None:
    report.line(f"conversion ({workers} work processes): seconds (ms per episode), peak PSS MB; files per episode")
    stages = ("plan", "work", "finalize")
    report.table(["episodes", *(f"{s} s (ms/ep)" for s in stages), *(f"{s} MB" for s in stages), "work files/ep",
                  "out files/ep"])  # fmt: skip
    for n, c in conv.items():
        cells = {f"{s} s (ms/ep)": f"{c[s][0]:.1f} ({per_episode_ms(c[s][0], n)})" for s in stages if s in c}
        cells |= {f"{s} MB": c[s][1] for s in stages if s in c}
        report.row(episodes=n, **cells, **{"work files/ep": f"{c['work_files'] / n:.2f}",
                                           "out files/ep": f"{c['out_files'] / n:.4f}"})  # fmt: skip


def print_start_up(report: Report, starts: dict, sizes: list[int], loaders: list[str], workers: int) -> None:
    report.line(f"loader start-up (batch 16, {workers} workers): open s, open to first batch s, PSS once open MB, "
                "peak PSS MB")  # fmt: skip
    report.table(["episodes", "loader", "open s", "1st batch s", "open+1st s", "PSS open", "peak PSS", "note"])
    for n in sizes:
        for loader in loaders:
            r = starts[n, loader]
            if isinstance(r, str):
                report.row(episodes=n, loader=loader, note=r)
                continue
            total = r["open_s"] + r["first_batch_s"]
            report.row(**{"episodes": n, "loader": loader, "open s": f"{r['open_s']:.2f}",
                          "1st batch s": f"{r['first_batch_s']:.2f}", "open+1st s": f"{total:.2f}",
                          "PSS open": r["pss_open_mb"], "peak PSS": r["peak_pss_mb"]})  # fmt: skip
        for kind in ("map", "stream"):
            ours, theirs = starts.get((n, f"dlbench_{kind}")), starts.get((n, f"lerobot_{kind}"))
            if isinstance(ours, dict):
                total = ours["open_s"] + ours["first_batch_s"]
                report.goal(f"{n} episodes, {kind}: dlbench's first batch <= {FIRST_BATCH_GOAL_S:g} s after open",
                            total <= FIRST_BATCH_GOAL_S, f"{total:.2f} s")  # fmt: skip
                if isinstance(theirs, dict):
                    ratio = (theirs["open_s"] + theirs["first_batch_s"]) / total
                    report.goal(f"{n} episodes, {kind}: >= {VS_LEROBOT_GOAL:g}x sooner than LeRobot's",
                                ratio >= VS_LEROBOT_GOAL, f"{ratio:.1f}x")  # fmt: skip
                elif isinstance(theirs, str):
                    report.line(f"{n} episodes, {kind}: LeRobot's {theirs}")


if __name__ == "__main__":
    main()
