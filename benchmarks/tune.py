"""`dlbench tune` against an exhaustive sweep of the same knobs, and against LeRobot's own defaults.

    python -m benchmarks.tune [--workdir /tmp/perf] [--sets realistic16 hevc_3cam16] [--mode single]
                              [--s3 hevc_3cam16 --latency-ms 20] [--scale 10 10000]

For each set (`benchmarks.model.SETS`, synthesized once under --workdir): `dlbench tune` from scratch (its phases
timed), then, one after another on this machine, every point of the sweep below measured as tune proves (the same
short bench runs: two windows of at least 24 batches, every frame checked), and LeRobot's stream at its own defaults
(buffer_size 1000, the sweep's best worker count) where the peer environment is there. Printed per set: the answer's
time and phases, the frames/s its configuration measured in the sweep against the sweep's best that meets the same
floor (goal: >= 90%), and against LeRobot's defaults at equal or better effective batch size (goal: >= 1.5x).
`--s3 SET`: the same for SET staged on SeaweedFS on loopback behind a proxy adding `--latency-ms` to each response
(tune, sweep and LeRobot all read it there). `--scale N...`: tune alone on sets of small frames alike but for their
number of episodes (goal: its time within 20% from the fewest to the most). `--policy TYPE --step-ms MS [--gpus G]`:
tune in the trainer's terms; printed per set, the answer's AU as stated (from its proof) against AU measured with
the step held (goal: within 10 points), both by dlbench's bench and with the printed swap and flags in LeRobot
0.6.1's training data path (peer environment, `dlbench.peer.lerobot_training --step-ms`); `--no-sweep` stops there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from benchmarks import model
from benchmarks.common import Report, loopback_s3, parser
from dlbench.synth import Camera, SynthConfig
from dlbench.tune.search import ITEMS_PER_LIVE_EPISODE, POOLS, Candidate, meets


def sweep_points(workers: list[int], gop: int) -> list[tuple[str, dict]]:
    """The sweep: dlbench_map, and dlbench_stream at its defaults and each knob tune moves, at these worker counts
    (tune searches up to the cores, twice them on a remote source); GOP runs of `gop` frames, the set's keyframe
    interval as tune reads it."""
    # the stream's default pool is POOLS[0]: the pool point is the next, grown as tune grows one (its buffer too)
    pool = {"pool_size": POOLS[1], "buffer_size": ITEMS_PER_LIVE_EPISODE * POOLS[1]}
    knobs = ({}, {"read_ahead": 2}, {"read_ahead": 8}, pool, {"pieces": 4}, {"gop_run": gop}, {"decode_ahead": 8})
    return [("dlbench_map", {"num_workers": w}) for w in workers] + [
        ("dlbench_stream", {"num_workers": w, **k}) for w in workers for k in knobs
    ]


# the --scale sets: small frames, episodes of 2-3 s; only their number differs
SCALE = SynthConfig(episodes=10, length_min=60, length_max=90, codec="h264", content="camera",
                    cameras=(Camera(model.CAM + "front", 96, 128),))  # fmt: skip


def measure(root: str, work: Path, loader: str, settings: dict, mode: str, batch: int, fps_hint: float,
            spec: dict | None = None) -> dict:  # fmt: skip
    """One point, measured as tune proves a candidate (`tune.run._prove`); `spec`: the source's settings."""
    from dlbench.tune.run import _prove

    c = Candidate(loader, settings, predicted_fps=fps_hint)
    return _prove(c, str(root), mode, None, batch, spec, work)


def tune(root: str, out: Path, a, report: Report, *extra: str) -> tuple[dict, float] | None:
    """`dlbench tune` of `root` from scratch (its calibration is timed too), in its own process: its result and wall
    time, or None where it failed (said)."""
    shutil.rmtree(out.with_suffix(".work"), ignore_errors=True)
    t0 = time.perf_counter()
    trainer = ["--policy", a.policy] if a.policy else ["--mode", a.mode]
    if a.step_ms:
        trainer += ["--step-ms", str(a.step_ms), "--gpus", str(a.gpus)]
    proc = subprocess.run([sys.executable, "-m", "dlbench", "tune", root, *trainer, "--batch-size",
                           str(a.batch_size), "--out", str(out), *extra], capture_output=True, text=True)  # fmt: skip
    took = time.perf_counter() - t0
    if proc.returncode:
        report.line(f"{root}: tune failed: {proc.stderr.strip()[-500:]}")
        return None
    result = json.loads(out.with_suffix(".json").read_text())
    w = result["winner"]
    report.line(f"{root} ({result['episodes']} episodes): tune answered in {took:.0f} s {result['phases']}: "
                f"{w['loader']} {w['dataset_kwargs']} {w['dataloader_kwargs']['num_workers']} workers, "
                f"{w['frames_per_s_node']:,.0f} frames/s, effective {w['shuffle_effective_batch']:.2f}")  # fmt: skip
    return result, took


def au_in_lerobots_loop(root: str, w: dict, step_ms: float, work: Path) -> dict | str:
    """The answer's swap and lerobot-train flags, as tune printed them, run in LeRobot 0.6.1's training data path
    in the peer environment with each batch held `step_ms` (`dlbench.peer.lerobot_training --step-ms`): its
    result, or why it did not run."""
    from dlbench import peer
    from dlbench.errors import UserError
    from dlbench.format.paths import is_remote

    if peer.peer_python() is None:
        return "no peer environment (make peer)"
    if is_remote(root):
        return "a remote set (the peer run reads local sets)"
    work.mkdir(parents=True, exist_ok=True)
    (work / "swap.py").write_text(w["lerobot_swap"])
    try:
        peer.run_peer("lerobot_training", root, str(work / "au.json"), "--step-ms", f"{step_ms:g}", "--steps", "300",
                      "--batches", "20", "--swap", str(work / "swap.py"), "--flags", w["lerobot_flags"],
                      timeout=900)  # fmt: skip
    except UserError as e:
        return str(e).splitlines()[-1]
    return json.loads((work / "au.json").read_text())


def against_sweep(name: str, root: str, a, work: Path, report: Report, endpoint: str | None = None) -> None:
    """Tune `root`, then measure every point of the sweep and LeRobot's stream at its defaults the same way, and
    print the goals: the answer within 5 minutes, >= 90% of the sweep's best at the floor, >= 1.5x LeRobot's."""
    from dlbench.config import defaults
    from dlbench.loader.dataset_meta import DatasetMeta
    from dlbench.sources import apply_env, spec_from_endpoint

    floor = defaults("shuffle_floor")
    tuned = tune(root, work / f"tune-{name}-{a.mode}", a, report, *(["--endpoint-url", endpoint] if endpoint else []))
    if tuned is None:
        return
    result, took = tuned
    w = result["winner"]
    report.goal(f"{name}: the answer within 5 minutes", took <= 300, f"{took:.0f} s")
    if a.step_ms:
        stated, measured = w.get("au"), w.get("au_measured")
        report.goal(f"{name}: AU stated within 10 points of AU measured with the step held",
                    stated is not None and measured is not None and abs(stated - measured) <= 0.10,
                    f"stated {stated or 0:.0%}, measured {measured or 0:.0%}, at {a.step_ms:g} ms on {a.gpus} "
                    f"GPU(s); {w.get('gpus_fed')} GPUs fed at 90%")  # fmt: skip
        loop = au_in_lerobots_loop(root, w, a.step_ms / a.gpus, work / f"loop-{name}-{a.mode}")
        if isinstance(loop, str):
            report.line(f"{name}: the printed swap in LeRobot's training loop not run: {loop}")
        else:
            in_loop = w.get("au_lerobot_train")
            report.goal(f"{name}: the printed swap in LeRobot 0.6.1's training loop within 10 points of the AU stated",
                        in_loop is not None and abs(in_loop - loop["au"]) <= 0.10,
                        f"stated {in_loop or 0:.0%} for lerobot-train's loop ({stated or 0:.0%} for dlbench's), "
                        f"measured there {loop['au']:.0%} over {loop['steps']} steps of {loop['step_ms']:g} ms "
                        f"({loop['dataset_class']})")  # fmt: skip
    if a.no_sweep:
        return
    spec = spec_from_endpoint(endpoint)
    apply_env(spec)  # this process measures the sweep: it reads the source as tune's own process did
    chosen = {"loader": w["loader"], **{k: v for k, v in w["dataset_kwargs"].items()
                                        if k in ("pool_size", "buffer_size", "read_ahead", "pieces", "gop_run",
                                                 "decode_ahead")},
              "num_workers": w["dataloader_kwargs"]["num_workers"]}  # fmt: skip
    answer = Candidate(chosen.pop("loader"), chosen)
    points = sweep_points(a.workers, DatasetMeta.load(root).keyframe_interval(0))
    keys = {Candidate(loader, settings).key for loader, settings in points}
    # the answer is measured beside the sweep even where its knobs are not a sweep point (a pool grown to its size)
    points += [] if answer.key in keys else [(answer.loader, answer.settings)]
    sweep = []
    for loader, settings in points:
        c = Candidate(loader, settings, predicted_fps=w["frames_per_s_node"])
        m = measure(root, work / f"sweep-{name}", loader, settings, a.mode, a.batch_size, c.predicted_fps, spec)
        why = meets(m, floor, None)
        sweep.append((c.key, m, why))
        report.row(set=name, point=c.key, frames_per_s=m.get("frames_per_s_node"),
                   effective_1=m.get("shuffle_effective_batch"), effective_10=m.get("shuffle_effective_window"),
                   distinct=m.get("shuffle_distinct_frames"), pss_mb=m.get("peak_pss_mb"),
                   meets=why or "yes")  # fmt: skip
    ok = [(k, m) for k, m, why in sweep if not why]
    best = max(ok, key=lambda t: t[1]["frames_per_s_node"], default=None)
    mine = next(m for k, m, _ in sweep if k == answer.key)
    if best and mine:
        share = mine["frames_per_s_node"] / best[1]["frames_per_s_node"]
        report.goal(f"{name}: the answer >= 90% of the sweep's best at the floor", share >= 0.9,
                    f"{mine['frames_per_s_node']:,.0f} frames/s, {share:.0%} of {best[0]}'s "
                    f"{best[1]['frames_per_s_node']:,.0f}")  # fmt: skip
    lerobot = measure(root, work / f"sweep-{name}", "lerobot_stream", {"num_workers": 2}, a.mode, a.batch_size,
                      100.0, spec)  # fmt: skip
    if lerobot.get("status") == "ok" and mine:
        ratio = mine["frames_per_s_node"] / lerobot["frames_per_s_node"]
        eq = (mine.get("shuffle_effective_batch") or 0) >= (lerobot.get("shuffle_effective_batch") or 0) - 0.1
        report.goal(f"{name}: >= 1.5x LeRobot's stream at its defaults (buffer_size 1000, 2 workers), at equal "
                    "or better effective batch size", ratio >= 1.5 and eq,
                    f"{ratio:.2f}x: {lerobot['frames_per_s_node']:,.0f} frames/s, effective "
                    f"{lerobot['shuffle_effective_batch']:.2f}{'' if eq else ', tune answer LOWER'}")  # fmt: skip
    else:
        report.line(f"LeRobot's stream: {lerobot.get('reason') or lerobot.get('status')}")


def scaling(a, work: Path, report: Report) -> None:
    """The same tune on sets alike but for their number of episodes: its time may not grow with the dataset."""
    took = {}
    for n in a.scale:
        config = replace(SCALE, episodes=n)
        root = model.dataset(work, f"episodes{n}", config)
        tuned = tune(str(root), work / f"tune-episodes{n}-{a.mode}", a, report)
        if tuned is not None:
            took[n] = tuned[1]
    if len(took) > 1:
        ratio = max(took.values()) / min(took.values())
        report.goal(f"tune's time within 20% from {min(took):,} to {max(took):,} episodes", ratio <= 1.2,
                    ", ".join(f"{n:,} episodes {t:.0f} s" for n, t in took.items()) + f": {ratio:.2f}x")  # fmt: skip


def main(argv=None) -> None:
    ap = parser(__doc__, sets=["realistic16"], choices=sorted(model.SETS))
    ap.add_argument("--mode", default="single")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="the sweep's worker counts")
    ap.add_argument("--s3", nargs="*", default=[], choices=sorted(model.SETS), metavar="SET",
                    help="also these sets read from S3 on loopback, behind --latency-ms")  # fmt: skip
    ap.add_argument("--latency-ms", type=float, default=20.0, help="added to each response of the S3 server")
    ap.add_argument("--policy", default=None, help="a LeRobot policy type: its window, in place of --mode")
    ap.add_argument("--step-ms", type=float, default=None, help="the training step: the answer in AU")
    ap.add_argument("--gpus", type=int, default=1, help="GPUs a node the step feeds")
    ap.add_argument("--no-sweep", action="store_true", help="tune alone (its AU checked), no sweep")
    ap.add_argument("--scale", nargs="*", type=int, default=[], metavar="EPISODES",
                    help="tune sets of small frames, alike but for these numbers of episodes")  # fmt: skip
    a = ap.parse_args(argv)
    work = Path(a.workdir).absolute()
    from dlbench.config import defaults

    report = Report(a, ["set", "point", "frames_per_s", "effective_1", "effective_10", "distinct", "pss_mb", "meets"],
                    "tune")  # fmt: skip
    report.line(f"floor {defaults('shuffle_floor')}")
    for name in a.sets:
        against_sweep(name, str(model.dataset(work, name)), a, work, report)
    if a.s3:
        local = {f"s3://dlbench-tune/{name}": model.dataset(work, name) for name in a.s3}
        with loopback_s3(work / "s3", local, a.latency_ms) as endpoint:
            for name, url in zip(a.s3, local):
                against_sweep(f"{name}-s3-{a.latency_ms:g}ms", url, a, work, report, endpoint)
    if a.scale:
        scaling(a, work, report)
    report.close()


if __name__ == "__main__":
    main()
