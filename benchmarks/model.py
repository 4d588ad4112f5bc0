"""The model's error: predicted against measured frames/s per node, over datasets and settings it was not fitted to.

    python -m benchmarks.model [--workdir /tmp/perf] [--sets quick realistic realistic16 h264_720p hevc ...]
                               [--loaders dlbench_map dlbench_stream] [--peers] [--workers 0 1 2 auto]

For each dataset (synthesized once into the workdir): `dlbench calibrate` on it (seconds per loader and mode), then
every loader x mode x worker count through `dlbench bench-run` (frames checked, as the workflow runs them), each
predicted from the calibration alone (`dlbench.model`). Prints one row per run with its bound and error, then the
median and the largest absolute error (of frames/s, and of peak PSS), and how long calibrating took. `--peers` adds
LeRobot's loaders on the first set (they run in the peer environment).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from benchmarks import datasets
from benchmarks.common import bench_run, dlbench
from dlbench.model.calibration import Calibration
from dlbench.model.table import predict_run
from dlbench.synth import Camera, SynthConfig, synthesize

CAM = "observation.images."
# sets the model was not fitted to (the quick one is the default matrix's frames)
SETS = {
    "quick": datasets.QUICK,
    "realistic": replace(datasets.REALISTIC, episodes=6, length_min=300, length_max=450),
    # config/realistic.yaml's set at 16 episodes (of 10-15 s): enough for workers x ranks, the stream's shards
    "realistic16": replace(datasets.REALISTIC, episodes=16, length_min=300, length_max=450),
    "h264_720p": SynthConfig(
        episodes=4, length_min=150, length_max=240, codec="h264", gop=30, content="camera",
        cameras=(Camera(CAM + "front", 720, 1280),),
    ),
    "hevc": SynthConfig(
        episodes=6, length_min=150, length_max=300, codec="hevc", content="camera",
        cameras=(Camera(CAM + "front", 480, 640),),
    ),
    "av1_1cam": SynthConfig(
        episodes=6, length_min=200, length_max=340, codec="av1", content="camera", fps=20,
        cameras=(Camera(CAM + "front", 256, 256),),
    ),
    "av1_3cam": SynthConfig(
        episodes=6, length_min=200, length_max=340, codec="av1", content="camera", fps=20,
        cameras=tuple(Camera(CAM + k, 256, 256) for k in ("left", "right", "wrist")),
    ),
    # the shuffle frontier's other sets (benchmarks.frontier): 16 episodes of 10-12 s, 720p H.264 with one camera,
    # HEVC with three cameras of 240x320
    "h264_720p16": SynthConfig(
        episodes=16, length_min=300, length_max=360, codec="h264", gop=30, content="camera",
        cameras=(Camera(CAM + "front", 720, 1280),),
    ),
    "hevc_3cam16": SynthConfig(
        episodes=16, length_min=300, length_max=360, codec="hevc", content="camera",
        cameras=tuple(Camera(CAM + k, 240, 320) for k in ("left", "right", "wrist")),
    ),
}  # fmt: skip


FRONTIER = ("h264_720p16", "hevc_3cam16")  # made for benchmarks.frontier; not in the model's default table


def dataset(work: Path, name: str) -> Path:
    """The set as v3.0 under `work`, made once."""
    from dlbench.convert.run import run as convert

    v30 = work / f"model-{name}" / "v30"
    if not (v30 / "meta/info.json").exists():
        t0 = time.perf_counter()
        workers = 1 if SETS[name].cameras[0].height >= 720 else None  # a 720p episode's content takes ~11 GB
        v21 = synthesize(SETS[name], work / f"model-{name}" / "v21", overwrite=True, progress=False, workers=workers)
        convert(str(v21), v30, workers=2, progress=False)
        print(f"# {name}: synthesized and converted in {time.perf_counter() - t0:.0f} s", flush=True)
    return v30


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="/tmp/dlbench-model", help="keeps the synthesized sets between runs")
    ap.add_argument("--sets", nargs="+", default=[k for k in SETS if k not in FRONTIER], choices=list(SETS))
    ap.add_argument("--loaders", nargs="+", default=["dlbench_map", "dlbench_stream"])
    ap.add_argument("--peers", action="store_true", help="also lerobot_map and lerobot_stream on the first set")
    ap.add_argument("--modes", nargs="+", default=["single", "sarm"])
    ap.add_argument("--workers", nargs="+", default=["0", "1", "2", "auto"])
    ap.add_argument("--duration-s", type=float, default=3.0)
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--reuse", action="store_true", help="keep runs measured before; calibrate and predict anew")
    a = ap.parse_args(argv)
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"{'set':<11}{'loader':<16}{'mode':<7}{'w':>5}{'measured':>10}{'predicted':>10}{'error':>8}  bound")
    for k, name in enumerate(a.sets):
        root = dataset(work, name)
        loaders = a.loaders + (["lerobot_map", "lerobot_stream"] if a.peers and k == 0 else [])
        cal_path = work / f"model-{name}" / "calibration.json"
        t0 = time.perf_counter()
        dlbench("calibrate", "--root", str(root), "--loader", ",".join(loaders), "--mode", ",".join(a.modes),
                "--warmup-s", str(a.warmup_s), "--duration-s", str(a.duration_s), "--repeats", "2",
                "--out", str(cal_path))  # fmt: skip
        cal = Calibration.read(cal_path)
        print(f"# {name}: calibrated {len(cal.costs)} loader x mode pairs in {time.perf_counter() - t0:.0f} s "
              f"({cal.seconds:.0f} s measuring)", flush=True)  # fmt: skip
        for loader in loaders:
            for mode in a.modes:
                for w in a.workers:
                    out = work / f"model-{name}" / "runs" / f"{loader}-{mode}-w{w}"
                    if not (a.reuse and (out / "rank0of1.json").exists()):
                        bench_run(out, root=root, loader=loader, mode=mode, num_workers=w, duration_s=a.duration_s,
                                  warmup_s=a.warmup_s, repeats=2, probe_samples=0)  # fmt: skip
                    rec = json.loads((out / "rank0of1.json").read_text())
                    run = {**rec["config"], "num_workers": w if w == "auto" else int(w)}
                    p = predict_run(run, cal)
                    measured = rec["metrics"]["frames_per_s_node"]
                    if isinstance(p, str):
                        print(f"{name:<11}{loader:<16}{mode:<7}{w:>5}{measured:>10.0f}  no prediction: {p}")
                        continue
                    err = (p.frames_per_s_node - measured) / measured
                    pss = rec["metrics"]["peak_pss_mb"]
                    pss_err = (p.peak_pss_mb - pss) / pss
                    rows.append((name, loader, mode, w, measured, p.frames_per_s_node, err, p.bound, pss_err))
                    print(f"{name:<11}{loader:<16}{mode:<7}{w:>5}{measured:>10.0f}{p.frames_per_s_node:>10.0f}"
                          f"{err:>+8.0%}  {p.bound:<15}PSS {pss:>5.0f} MB {pss_err:>+5.0%}", flush=True)  # fmt: skip
    errors, pss = [abs(r[6]) for r in rows], [abs(r[8]) for r in rows]
    if errors:
        print(f"median |error| {statistics.median(errors):.1%}, largest {max(errors):.1%} over {len(rows)} runs; "
              f"within 15%: {sum(e <= 0.15 for e in errors)}, over 35%: {sum(e > 0.35 for e in errors)}")  # fmt: skip
        print(f"peak PSS: median |error| {statistics.median(pss):.1%}, largest {max(pss):.1%}, "
              f"within 25%: {sum(e <= 0.25 for e in pss)} of {len(pss)}")  # fmt: skip


if __name__ == "__main__":
    main()
