"""`dlbench tune` against an exhaustive sweep of the same knobs, and against LeRobot's own defaults.

    python -m benchmarks.tune [--workdir /tmp/perf] [--sets realistic16 hevc_3cam16] [--roots PATH...]
                              [--mode single] [--s3 hevc_3cam16 --latency-ms 20] [--scale 10 10000]

For each set (`benchmarks.model.SETS`, synthesized once under --workdir; `--roots`: v3.0 datasets of your own, as
they are): `dlbench tune` from scratch (its phases timed), then, one after another on this machine, every point of
the sweep below measured as tune proves (the same short bench runs: two windows of at least 24 batches, every frame
checked, the window tune proved with), and LeRobot's stream at its own defaults (buffer_size 1000, 2 workers) where
the peer environment is there. Printed per set: the answer's time and phases, the effective frames/s (frames/s x
effective / nominal batch over one batch) its configuration measured in the sweep against the sweep's best that meets
the same floor (goal: >= 90%), and against LeRobot's defaults (goal: >= 1.5x).
`--s3 SET`: the same for SET staged on SeaweedFS on loopback behind a proxy adding `--latency-ms` to each response
(tune, sweep and LeRobot all read it there). `--scale N...`: tune alone on sets of small frames alike but for their
number of episodes (goal: its time within 20% from the fewest to the most). `--policy TYPE --step-ms MS [--gpus G]`:
tune in the trainer's terms; printed per set, the answer's AU as tune states it (measured in its own run with the
step held) against the AU of the answer run again with the step held, apart from tune and 3x as long (goal: within
10 points), and in LeRobot 0.6.1's training data path with the printed swap and flags (peer environment,
`dlbench.peer.lerobot_training --step-ms`) against the AU tune states there; `--no-sweep` stops there;
`--from-config`: the same tune from a train_config.json of that policy and batch size, as lerobot-train writes it.
Where the answer keeps the GPUs at >= 90% AU it is the cheapest configuration that does, not the fastest: the sweep's
goal then holds by that.
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
from dlbench.report.aggregate import effective_rate
from dlbench.synth import Camera, SynthConfig
from dlbench.tune.search import ITEMS_PER_LIVE_EPISODE, POOLS, Candidate, meets
from dlbench.tune.trainer import AU_TARGET, au_in_lerobot_train

HELD_AGAIN = 3.0  # the answer's run with the step held again: this many times as long as tune's
AU_COLUMNS = ["set", "from", "answer", "tune_s", "au_bound", "au_stated", "au_again", "gpus_fed", "loop_stated",
              "loop_measured"]  # fmt: skip


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
            spec: dict | None = None, deltas: dict | None = None) -> dict:  # fmt: skip
    """One point, measured as tune proves a candidate (`tune.run._prove`); `spec`: the source's settings; `deltas`:
    the window tune proved with (a policy's)."""
    from dlbench.tune.run import _prove

    c = Candidate(loader, settings, predicted_fps=fps_hint)
    return _prove(c, str(root), mode, deltas, batch, spec, work)


def effective_fps(m: dict) -> float:
    """Frames/s worth what they claim: frames/s x effective / nominal batch over one batch (at most 1), as
    summary.csv's `effective_frames_per_s_node`; a point whose figure was not shown counts nothing."""
    return effective_rate(m.get("frames_per_s_node", 0.0), m.get("shuffle_effective_batch"))


def tune(root: str, out: Path, a, report: Report, *extra: str) -> tuple[dict, float] | None:
    """`dlbench tune` of `root` from scratch (its calibration is timed too), in its own process: its result and wall
    time, or None where it failed (said)."""
    shutil.rmtree(out.with_suffix(".work"), ignore_errors=True)
    trainer = ["--policy", a.policy] if a.policy else ["--mode", a.mode]
    if a.from_config:  # the same policy and batch from a train_config.json, as lerobot-train wrote it
        from dlbench.peer import write_train_config

        cfg = write_train_config(out.with_suffix(".cfg"), root, a.policy, a.batch_size, max(a.workers))
        trainer = ["--config-path", str(cfg)]
    if a.step_ms:
        trainer += ["--step-ms", str(a.step_ms), "--gpus", str(a.gpus)]
        trainer += ["--step-sd-ms", str(a.step_sd_ms)] if a.step_sd_ms else []
    dataset = [] if a.from_config else [root, "--batch-size", str(a.batch_size)]  # else the config's own
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dlbench", "tune", *dataset, *trainer, "--out", str(out), *extra],
                          capture_output=True, text=True)  # fmt: skip
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


def held_again(name: str, root: str, a, w: dict, answer: Candidate, deltas, spec, work: Path,
               report: Report) -> float | None:  # fmt: skip
    """The answer run again with the step held, apart from tune and HELD_AGAIN times as long as its run: the AU
    tune states (its own run with the step held) against this one (goal: within 10 points); the AU measured."""
    from dlbench.tune.run import PROOF_S, _prove

    step = max(1, round(a.step_ms / a.gpus))
    sd = {"step_sd_ms": a.step_sd_ms / a.gpus} if a.step_sd_ms else {}  # as tune holds it: over the GPUs
    drawn = replace(answer, settings={**answer.settings, **sd})
    m = _prove(drawn, root, a.mode, deltas, a.batch_size, spec, work / f"held-{name}", step_ms=step,
               window_s=HELD_AGAIN * PROOF_S)  # fmt: skip
    stated = w.get("au")
    if m.get("data_wait_frac") is None:
        report.line(f"{name}: the answer's run with the step held did not run: {m.get('reason')}")
        return None
    measured = 1.0 - m["data_wait_frac"]
    report.goal(f"{name}: AU stated within 10 points of AU measured again with the step held, {HELD_AGAIN:g}x as long",
                stated is not None and abs(stated - measured) <= 0.10,
                f"stated {stated or 0:.0%} (free-running bound {w.get('au_bound') or 0:.0%}), measured {measured:.0%}, "
                f"at {a.step_ms:g} ms on {a.gpus} GPU(s); {w.get('gpus_fed')} GPU(s) fed at 90%")  # fmt: skip
    return measured


def against_sweep(name: str, root: str, a, work: Path, report: Report, endpoint: str | None = None,
                  au_rows: list | None = None) -> None:  # fmt: skip
    """Tune `root`, then measure every point of the sweep and LeRobot's stream at its defaults the same way, and
    print the goals: the answer within 5 minutes, >= 90% of the sweep's best at the floor, >= 1.5x LeRobot's. With
    a step, the set's AU figures go to `au_rows` (`AU_COLUMNS`)."""
    from dlbench.config import defaults
    from dlbench.loader.dataset_meta import DatasetMeta
    from dlbench.sources import apply_env, spec_from_endpoint

    floor = defaults("shuffle_floor")
    how = "config" if a.from_config else a.mode
    tuned = tune(root, work / f"tune-{name}-{how}", a, report, *(["--endpoint-url", endpoint] if endpoint else []))
    if tuned is None:
        return
    result, took = tuned
    w = result["winner"]
    report.goal(f"{name}: the answer within 5 minutes", took <= 300, f"{took:.0f} s")
    spec = spec_from_endpoint(endpoint)
    apply_env(spec)  # this process measures the sweep: it reads the source as tune's own process did
    chosen = {"loader": w["loader"], **{k: v for k, v in w["dataset_kwargs"].items()
                                        if k in ("pool_size", "buffer_size", "read_ahead", "pieces", "gop_run",
                                                 "decode_ahead")},
              "num_workers": w["dataloader_kwargs"]["num_workers"]}  # fmt: skip
    answer = Candidate(chosen.pop("loader"), chosen)
    deltas = result["constraints"]["delta_timestamps"]  # the policy's window, where one was given
    if a.step_ms:
        again = held_again(name, root, a, w, answer, deltas, spec, work, report)
        # the printed swap and flags in LeRobot's training loop, longer than tune's own run of it
        loop = au_in_lerobot_train(root, w["lerobot_swap"], w["lerobot_flags"], a.step_ms / a.gpus,
                                   work / f"loop-{name}-{how}", steps=300, warmup=20)  # fmt: skip
        if au_rows is not None:
            au_rows.append({"set": name, "from": how, "answer": answer.key, "tune_s": took,
                            "au_bound": w.get("au_bound"), "au_stated": w.get("au"), "au_again": again,
                            "gpus_fed": w.get("gpus_fed"),
                            "loop_stated": w.get("au_lerobot_train"),
                            "loop_measured": None if isinstance(loop, str) else loop["au"]})  # fmt: skip
        if isinstance(loop, str):
            report.line(f"{name}: the printed swap in LeRobot's training loop not run: {loop}")
        else:
            in_loop = w.get("au_lerobot_train")
            report.goal(f"{name}: the printed swap in LeRobot 0.6.1's training loop within 10 points of the AU stated",
                        in_loop is not None and abs(in_loop - loop["au"]) <= 0.10,
                        f"stated {in_loop or 0:.0%} for lerobot-train's loop ({w.get('au') or 0:.0%} for dlbench's), "
                        f"measured there {loop['au']:.0%} over {loop['steps']} steps of {loop['step_ms']:g} ms "
                        f"({loop['dataset_class']})")  # fmt: skip
    if a.no_sweep:
        return
    points = sweep_points(a.workers, DatasetMeta.load(root).keyframe_interval(0))
    keys = {Candidate(loader, settings).key for loader, settings in points}
    # the answer is measured beside the sweep even where its knobs are not a sweep point (a pool grown to its size)
    points += [] if answer.key in keys else [(answer.loader, answer.settings)]
    sweep = []
    for loader, settings in points:
        c = Candidate(loader, settings, predicted_fps=w["frames_per_s_node"])
        m = measure(root, work / f"sweep-{name}", loader, settings, a.mode, a.batch_size, c.predicted_fps, spec,
                    deltas)  # fmt: skip
        why = meets(m, floor, None)
        sweep.append((c.key, m, why))
        report.row(set=name, point=c.key, frames_per_s=m.get("frames_per_s_node"),
                   effective_1=m.get("shuffle_effective_batch"), effective_10=m.get("shuffle_effective_window"),
                   effective_fps=effective_fps(m), distinct=m.get("shuffle_distinct_frames"),
                   pss_mb=m.get("peak_pss_mb"), meets=why or "yes")  # fmt: skip
    ok = [(k, m) for k, m, why in sweep if not why]
    best = max(ok, key=lambda t: effective_fps(t[1]), default=None)
    mine = next(m for k, m, _ in sweep if k == answer.key)
    if best and mine:
        share = effective_fps(mine) / effective_fps(best[1])
        cheapest = a.step_ms and (w.get("au") or 0) >= AU_TARGET  # then the cheapest there, not the fastest
        report.goal(f"{name}: the answer >= 90% of the sweep's best at the floor, in effective frames/s", share >= 0.9
                    or bool(cheapest), f"{effective_fps(mine):,.0f} effective frames/s, {share:.0%} of {best[0]}'s "
                    f"{effective_fps(best[1]):,.0f}" + (" (the cheapest at 90% AU)" if cheapest else ""))  # fmt: skip
    lerobot = measure(root, work / f"sweep-{name}", "lerobot_stream", {"num_workers": 2}, a.mode, a.batch_size,
                      100.0, spec, deltas)  # fmt: skip
    if lerobot.get("status") == "ok" and mine:
        ratio = effective_fps(mine) / max(effective_fps(lerobot), 1e-9)
        report.goal(f"{name}: >= 1.5x LeRobot's stream at its defaults (buffer_size 1000, 2 workers), in effective "
                    "frames/s", ratio >= 1.5, f"{ratio:.2f}x: {lerobot['frames_per_s_node']:,.0f} frames/s, effective "
                    f"{lerobot.get('shuffle_effective_batch') or 0:.2f}")  # fmt: skip
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
    ap.add_argument("--step-sd-ms", type=float, default=None, help="the step's spread: each held step drawn around it")
    ap.add_argument("--gpus", type=int, default=1, help="GPUs a node the step feeds")
    ap.add_argument("--no-sweep", action="store_true", help="tune alone (its AU checked), no sweep")
    ap.add_argument("--from-config", action="store_true",
                    help="tune from a train_config.json of --policy and --batch-size (LeRobot's own, written in the "
                         "peer environment) in place of --policy")  # fmt: skip
    ap.add_argument("--roots", nargs="*", default=[], metavar="PATH", help="also these v3.0 datasets, as they are")
    ap.add_argument("--scale", nargs="*", type=int, default=[], metavar="EPISODES",
                    help="tune sets of small frames, alike but for these numbers of episodes")  # fmt: skip
    a = ap.parse_args(argv)
    work = Path(a.workdir).absolute()
    from dlbench.config import defaults

    report = Report(a, ["set", "point", "frames_per_s", "effective_1", "effective_10", "effective_fps", "distinct",
                        "pss_mb", "meets"], "tune")  # fmt: skip
    report.line(f"floor {defaults('shuffle_floor')}")
    au_rows: list[dict] = []
    for name in a.sets:
        against_sweep(name, str(model.dataset(work, name)), a, work, report, au_rows=au_rows)
    for root in a.roots:  # a dataset of the user's own, as it is
        against_sweep(Path(root).name, str(Path(root).absolute()), a, work, report, au_rows=au_rows)
    if a.s3:
        local = {f"s3://dlbench-tune/{name}": model.dataset(work, name) for name in a.s3}
        with loopback_s3(work / "s3", local, a.latency_ms) as endpoint:
            for name, url in zip(a.s3, local):
                against_sweep(f"{name}-s3-{a.latency_ms:g}ms", url, a, work, report, endpoint, au_rows)
    if a.scale:
        scaling(a, work, report)
    if au_rows:  # the trainer's terms, per set: AU stated against AU measured (again, and in LeRobot's loop)
        report.table(AU_COLUMNS)
        for r in au_rows:
            report.row(**r)
    report.close()


if __name__ == "__main__":
    main()
