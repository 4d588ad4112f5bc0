"""The model's error: predicted against measured frames/s per node, over datasets and settings it was not fitted to.

    python -m benchmarks.model [--workdir /tmp/perf] [--sets quick realistic realistic16 h264_720p hevc ...]
                               [--held-out N] [--loaders dlbench_map dlbench_stream] [--peers] [--workers 0 1 2 auto]

For each dataset (synthesized once into the workdir): `dlbench calibrate` on it (seconds per loader and mode), then
every loader x mode x worker count through `dlbench bench-run` (frames checked, 3 windows of 5 s as the workflow
runs them, longer for a slow loader: `window_s`), each predicted from the calibration alone (`dlbench.model`).
Prints one row per run with its bound and error, then the median and the largest absolute error (of frames/s, and
of peak PSS), and how long calibrating took. Beside each run, its error predicted without the calibration's
full-width pass (docs/model.md). `--peers` adds LeRobot's loaders on the first set (they run in the peer
environment).

In-sample and held-out sets are reported apart. The in-sample sets (`IN_SAMPLE`) are those the calibration's rules
were set against; `--held-out N` draws N sets from shapes, codecs, GOPs, CRFs, frame rates and seeds no in-sample
set uses, at random from a digest of the calibration's code: any change to the calibration draws new sets, which
are synthesized anew (docs/model.md, "The held-out rule").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import time
from dataclasses import replace
from pathlib import Path

from benchmarks import datasets
from benchmarks.common import Report, bench_run, dlbench, parser
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
    # many episodes, small frames: no pool holds every episode at once, so which are live decides a window of batches
    # many episodes of 2-5 s, each its own scene, two cameras of 240x320 in LeRobot's default AV1 (GOP 2): where a
    # stream's live episodes decide what ten batches hold
    "many100_240": SynthConfig(
        episodes=100, length_min=60, length_max=150, codec="av1", content="camera",
        cameras=(Camera(CAM + "front", 240, 320), Camera(CAM + "wrist", 240, 320)),
    ),
    "many500_240": SynthConfig(
        episodes=500, length_min=60, length_max=150, codec="av1", content="camera", seed=1,
        cameras=(Camera(CAM + "front", 240, 320), Camera(CAM + "wrist", 240, 320)),
    ),
    # 16 episodes of 8-10 s at 480x640 in AV1 (GOP 2), two cameras, one task whose phases look alike across
    # episodes: a frame resembles the same moment of every other episode, not its own episode's neighbours only
    "phases16_480": SynthConfig(
        episodes=16, length_min=240, length_max=300, codec="av1", content="phases",
        cameras=(Camera(CAM + "front", 480, 640), Camera(CAM + "wrist", 480, 640)),
    ),
    # 100 episodes of 2-5 s with the shared phases of one task: the stream's forward reading of windows, whose live
    # episodes must be at unrelated moments of the task (`partition.shard_order`)
    "phases100_240": SynthConfig(
        episodes=100, length_min=60, length_max=150, codec="av1", content="phases", seed=2,
        cameras=(Camera(CAM + "front", 240, 320), Camera(CAM + "wrist", 240, 320)),
    ),
    "many500": SynthConfig(
        episodes=500, length_min=45, length_max=75, codec="h264", content="camera",
        cameras=(Camera(CAM + "front", 96, 128),),
    ),
}  # fmt: skip


BATCH_SIZE = 16  # bench-run's default, as the runs below use it
RUN_BATCHES = 6  # a window's batches, at least (`window_s`)
MAX_RUN_WINDOW_S = 15.0
# made for benchmarks.frontier; not in the model's default table
FRONTIER = ("h264_720p16", "hevc_3cam16", "many500", "many100_240", "many500_240", "phases16_480", "phases100_240")
# the sets the calibration's rules (warm-ups, steady margins, the halfway rule) were set against: in-sample
IN_SAMPLE = tuple(k for k in SETS if k not in FRONTIER)

# what held-out sets are drawn from: shapes, codecs and settings no in-sample set has
HELD_OUT_SHAPES = ((360, 640), (432, 768), (480, 848), (540, 720), (400, 600), (448, 800))
HELD_OUT_CODECS = (("h264", (10, 15, 20, 45), (18, 23, 28)), ("hevc", (12, 24, 60), (24, 28, 32)),
                   ("av1", (4, 8, 16), (26, 34)))  # fmt: skip


def calibration_digest() -> str:
    """A digest of the code that calibrates, measures a pass's window and predicts, and of this protocol: a held-out
    set is drawn from it, so any change to either draws new sets (a set seen while changing it is no longer held
    out)."""
    from dlbench.bench import measure
    from dlbench.model import calibrate, calibration, equations

    code = b"".join(Path(m.__file__).read_bytes() for m in (calibrate, calibration, equations, measure))
    code += Path(__file__).read_bytes()  # the protocol too: how the runs judged are measured
    return hashlib.sha256(code).hexdigest()[:8]


def held_out(count: int, digest: str | None = None) -> dict[str, SynthConfig]:
    """`count` sets drawn at random from `digest` (the calibration's code): shapes, codecs, GOPs, CRFs, cameras
    (1-3), frame rates, 4-6 episodes of 10-20 s and a seed, none of them an in-sample set's."""
    digest = digest or calibration_digest()
    rng = random.Random(digest)
    out = {}
    for k in range(count):
        h, w = rng.choice(HELD_OUT_SHAPES)
        codec, gops, crfs = rng.choice(HELD_OUT_CODECS)
        fps = rng.choice((15, 25, 30))
        cams = rng.choice((1, 1, 2, 3))
        scale = 2 if cams == 3 and h * w > 360 * 640 else 1  # three cameras: smaller frames (synthesis memory)
        out[f"heldout-{digest}-{k}"] = SynthConfig(
            episodes=rng.randint(4, 6), length_min=10 * fps, length_max=rng.randint(12, 20) * fps, fps=fps,
            codec=codec, gop=rng.choice(gops), crf=rng.choice(crfs), content="camera", seed=rng.randint(1, 10**6),
            cameras=tuple(Camera(CAM + f"cam{c}", h // scale // 2 * 2, w // scale // 2 * 2) for c in range(cams)),
        )  # fmt: skip
    return out


def dataset(work: Path, name: str, config: SynthConfig | None = None) -> Path:
    """The set `name` (or `config`) as v3.0 under `work`, made once."""
    from dlbench.convert.run import run as convert

    config = config or SETS[name]
    v30 = work / f"model-{name}" / "v30"
    if not (v30 / "meta/info.json").exists():
        t0 = time.perf_counter()
        workers = 1 if config.cameras[0].height >= 720 else None  # a 720p episode's content takes ~11 GB
        v21 = synthesize(config, work / f"model-{name}" / "v21", overwrite=True, progress=False, workers=workers)
        convert(str(v21), v30, workers=2, progress=False)
        print(f"# {name}: synthesized and converted in {time.perf_counter() - t0:.0f} s", flush=True)
    return v30


def main(argv=None) -> None:
    ap = parser(__doc__, sets=list(IN_SAMPLE), choices=list(SETS))
    ap.add_argument(
        "--held-out",
        type=int,
        default=0,
        metavar="N",
        help="N held-out sets, drawn from the calibration's code (`held_out`)",
    )
    ap.add_argument("--loaders", nargs="+", default=["dlbench_map", "dlbench_stream"])
    ap.add_argument("--peers", action="store_true", help="also lerobot_map and lerobot_stream on the first set")
    ap.add_argument("--modes", nargs="+", default=["single", "sarm"])
    ap.add_argument("--workers", nargs="+", default=["0", "1", "2", "auto"])
    # the workflow's own runs (config.yaml's bench defaults): 3 windows of 5 s, each judged by the median window
    ap.add_argument("--duration-s", type=float, default=5.0, help="a run's window, at least (`window_s`)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--reuse", action="store_true", help="keep runs measured before; calibrate and predict anew")
    a = ap.parse_args(argv)
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    report = Report(a, ["set", "loader", "mode", "workers", "measured", "predicted", "error", "bound", "PSS MB",
                        "PSS error", "without the full-width pass"], "model")  # fmt: skip
    drawn = held_out(a.held_out) if a.held_out else {}
    for name, c in drawn.items():
        shapes = ", ".join(f"{cam.height}x{cam.width}" for cam in c.cameras)
        report.line(f"held out: {name}: {c.codec} gop {c.gop} crf {c.crf}, {c.fps} fps, {shapes}, {c.episodes} "
                    f"episodes of {c.length_min / c.fps:.0f}-{c.length_max / c.fps:.0f} s, seed {c.seed}")  # fmt: skip
    for k, name in enumerate([*a.sets, *drawn]):
        root = dataset(work, name, drawn.get(name))
        loaders = a.loaders + (["lerobot_map", "lerobot_stream"] if a.peers and k == 0 else [])
        cal_path = work / f"model-{name}" / "calibration.json"
        t0 = time.perf_counter()
        dlbench("calibrate", "--root", str(root), "--loader", ",".join(loaders), "--mode", ",".join(a.modes),
                "--warmup-s", str(a.warmup_s), "--duration-s", str(a.duration_s), "--repeats", str(a.repeats),
                "--out", str(cal_path))  # fmt: skip
        cal = Calibration.read(cal_path)
        # the same calibration without its full-width pass: the cores term from the one-worker pass alone
        narrow = replace(cal, costs=[replace(c, full_cpu_s=None, full_cores=0) for c in cal.costs])
        report.line(f"{name}: calibrated {len(cal.costs)} loader x mode pairs in {time.perf_counter() - t0:.0f} s "
                    f"({cal.seconds:.0f} s measuring)")  # fmt: skip
        for loader in loaders:
            for mode in a.modes:
                for w in a.workers:
                    out = work / f"model-{name}" / "runs" / f"{loader}-{mode}-w{w}"
                    if not (a.reuse and (out / "rank0of1.json").exists()):
                        window = window_s(cal, loader, mode, w, a)
                        bench_run(out, root=root, loader=loader, mode=mode, num_workers=w, duration_s=window,
                                  warmup_s=a.warmup_s, repeats=a.repeats, probe_samples=0)  # fmt: skip
                    rec = json.loads((out / "rank0of1.json").read_text())
                    run = {**rec["config"], "num_workers": w if w == "auto" else int(w)}
                    p = predict_run(run, cal)
                    measured = rec["metrics"]["frames_per_s_node"]
                    where = {"set": name, "loader": loader, "mode": mode, "workers": w, "measured": measured}
                    if isinstance(p, str):
                        report.row(**where, bound=f"no prediction: {p}")
                        continue
                    err = (p.frames_per_s_node - measured) / measured
                    pss = rec["metrics"]["peak_pss_mb"]
                    pss_err = (p.peak_pss_mb - pss) / pss
                    alone = (predict_run(run, narrow).frames_per_s_node - measured) / measured
                    rows.append((name, loader, mode, w, measured, p.frames_per_s_node, err, p.bound, pss_err, alone))
                    report.row(**where, **{"predicted": p.frames_per_s_node, "error": f"{err:+.0%}",
                                           "bound": p.bound, "PSS MB": pss, "PSS error": f"{pss_err:+.0%}",
                                           "without the full-width pass": f"{alone:+.0%}"})  # fmt: skip
    for group, keep in (("in-sample", lambda r: r[0] not in drawn), ("held-out", lambda r: r[0] in drawn)):
        summarize(report, group, [r for r in rows if keep(r)])
    report.close()


def window_s(cal: Calibration, loader: str, mode: str, workers: str, a: argparse.Namespace) -> float:
    """A run's window: `--duration-s`, or long enough for `RUN_BATCHES` batches at the predicted rate (a slow
    loader's 2-3 batches in a window turn one batch's luck into a tenth of its rate), at most `MAX_RUN_WINDOW_S`."""
    run = {"loader": loader, "mode": mode, "num_workers": workers if workers == "auto" else int(workers),
           "batch_size": BATCH_SIZE, "decode_device": "cpu", "ranks": 1, "warmup_s": a.warmup_s,
           "duration_s": a.duration_s, "repeats": a.repeats}  # fmt: skip
    p = predict_run(run, cal)
    if isinstance(p, str) or not p.samples_per_s_node:
        return a.duration_s
    return round(min(MAX_RUN_WINDOW_S, max(a.duration_s, RUN_BATCHES * BATCH_SIZE / p.samples_per_s_node)), 1)


def summarize(report: Report, group: str, rows: list[tuple]) -> None:
    """The error lines of one group of runs (in-sample or held-out: never pooled)."""
    errors, pss = [abs(r[6]) for r in rows], [abs(r[8]) for r in rows]
    if errors:
        within, over = sum(e <= 0.10 for e in errors), sum(e > 0.25 for e in errors)
        report.line(f"{group}: median |error| {statistics.median(errors):.1%}, largest {max(errors):.1%} over "
                    f"{len(rows)} runs; within 10%: {within}, over 25%: {over}")  # fmt: skip
        report.line(f"{group}: peak PSS: median |error| {statistics.median(pss):.1%}, largest {max(pss):.1%}, "
                    f"within 25%: {sum(e <= 0.25 for e in pss)} of {len(pss)}")  # fmt: skip
        alone = [abs(r[9]) for r in rows]
        report.line(f"{group}: without the full-width pass: median |error| {statistics.median(alone):.1%}, largest "
                    f"{max(alone):.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
