"""Advice on misconfigured runs: does the top prescription, verified, recover what the best setting of its knob gives?

    python -m benchmarks.advice [--workdir /tmp/dlbench-model] [--cases workers0 oversubscribed cache1 gop60 ...]
                                [--legs 3] [--leg-s 3]

Each case is a run set up wrong on a dataset no test uses (the realistic 480x640 AV1 set, a 3-camera AV1 set, an
H.264 GOP-60 re-encoding of the realistic set, a long-GOP HEVC set), laid out as the workflow
leaves a results directory (its spec, its run, summary.csv, the dataset's calibration, encodings.csv where the case
has re-encodings). Then, in one go on this machine: `dlbench advise --verify` (the top prescription run beside the
run, alternating legs) and a sweep of the knob the case got wrong (each value as short legs of the same length).
Prints per case: the run's frames/s, the prescription, its predicted and measured gain, the knob's best value and
rate, the share of that best the prescription recovered and the share of its own predicted gain it measured.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

import pandas as pd

from benchmarks.common import Report, bench_run, dlbench, parser
from benchmarks.model import dataset as model_set
from benchmarks.model import held_out

# a long-GOP set no test uses, read at random: benchmarks.model's first held-out set under an earlier calibration
# (digest 87346018: HEVC GOP 60 CRF 28, one 400x600 camera, 15 fps), fixed here so that the case keeps its long GOP
# whatever later digests draw
LONGGOP = "longgop"
SETS = {LONGGOP: held_out(1, "87346018")["heldout-87346018-0"]}

CASES = {
    # name: (dataset, the run's settings, the knob, the values swept)
    "workers0": ("realistic", {"loader": "dlbench_map", "num_workers": 0}, "num_workers", [0, 1, 2, 3, 4]),
    "oversubscribed": ("realistic", {"loader": "dlbench_map", "num_workers": 8}, "num_workers", [1, 2, 3, 4, 8]),
    "cache1": (
        "av1_3cam",
        {"loader": "dlbench_stream", "num_workers": 2, "decoder_cache_size": 1},
        "decoder_cache_size",
        [1, 3, 6, None],
    ),
    "gop60": ("gop60", {"loader": "dlbench_map", "num_workers": 2}, "dataset", ["gop60", "gop60_g1"]),
    # the long-GOP set read at random, no re-encoding in the matrix: the advice probes one; the sweep re-encodes the
    # set at the probe's candidates
    "longgop_probe": (
        LONGGOP,
        {"loader": "dlbench_map", "num_workers": 2},
        "encoding",
        [LONGGOP, f"{LONGGOP}_g1", f"{LONGGOP}_g2"],
    ),
    # the realistic set on the loopback S3 server behind a proxy adding COLD_MS to every response
    "cold": (
        "realistic",
        {"loader": "dlbench_stream", "num_workers": 2, "source": "cold", "fetch_episodes": 0},
        "fetch_episodes",
        [0, 1, 2, 4],
    ),
    # LeRobot's stream gives each worker whole data files: one file, 4 workers, 3 idle
    "fewer_units": (
        "realistic",
        {"loader": "lerobot_stream", "num_workers": 4},
        "loader",
        ["lerobot_stream", "dlbench_stream"],
    ),
}
COLD_MS, COLD_MBPS = 20.0, 1000.0  # the cold bucket: time to first byte added, bandwidth
COLD_URL = "s3://dlbench-advice/realistic"
# re-encodings the gop60 case needs: name -> (made from, dlbench reencode options)
REENCODED = {
    "gop60": ("realistic", ["--codec", "h264", "--gop", "60", "--crf", "23"]),
    "gop60_g1": ("gop60", ["--codec", "h264", "--gop", "1", "--crf", "20", "--fast-decode"]),
    f"{LONGGOP}_g1": (LONGGOP, ["--codec", "h264", "--gop", "1", "--crf", "20", "--fast-decode"]),
    f"{LONGGOP}_g2": (LONGGOP, ["--codec", "h264", "--gop", "2", "--crf", "20", "--fast-decode"]),
}


def root_of(work: Path, name: str) -> Path:
    """A dataset of the cases, made once: a set of benchmarks.model, or a re-encoding of one."""
    if name not in REENCODED:
        return model_set(work, name, SETS.get(name))
    src, options = REENCODED[name]
    out = work / "advice" / "datasets" / name
    if not (out / "meta/info.json").exists():
        dlbench("reencode", str(root_of(work, src)), str(out), *options)
    return out


def encodings(work: Path, names: list[str]) -> Path:
    """encodings.csv of the datasets in `names`, each against what it was made from where that is one of them."""
    rows = []
    for name in names:
        row = work / "advice" / "datasets" / f"{name}.encoding.json"
        if not row.exists():
            src = REENCODED[name][0]
            ref = ["--reference", str(root_of(work, src))] if src in names else []
            dlbench("encoding", str(root_of(work, name)), "--name", name, *ref, "--out", str(row))
        rows.append(str(row))
    out = work / "advice" / "datasets" / "encodings.csv"
    dlbench("encodings-table", *rows, "--out", str(out))
    return out


@contextlib.contextmanager
def cold_bucket(work: Path):
    """The loopback S3 server (SeaweedFS) behind a shaping proxy, the realistic set staged on it; this process and
    its children run where its state is, with its credentials. Yields the source entry of runs reading it."""
    from dlbench import loopback
    from dlbench.sources import LOOPBACK_CREDENTIALS

    here, place = Path.cwd(), Path(tempfile.mkdtemp(prefix="dlbench-advice-"))
    os.chdir(place)
    os.environ.update(LOOPBACK_CREDENTIALS)
    port, shaped = free_port(), free_port()
    loopback.start(port, [(shaped, COLD_MS, COLD_MBPS)], place / loopback.STATE, place / "logs",
                   data_dir=place / "seaweedfs")  # fmt: skip
    try:
        dlbench("stage", str(root_of(work, "realistic")), COLD_URL, "--marker", str(place / "staged.json"),
                "--endpoint-url", "loopback")  # fmt: skip
        yield f"loopback:{shaped}"
    finally:
        loopback.stop(place / loopback.STATE)
        os.chdir(here)
        shutil.rmtree(place, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def results_of(work: Path, case: str, a, endpoint: str | None = None) -> Path:
    """The case laid out as the workflow's results: spec, run (and the variant's, for a dataset knob), summary,
    calibration."""
    from dlbench.report.aggregate import aggregate
    from dlbench.run import spec as runspec

    name, settings, knob, values = CASES[case]
    results = work / "advice" / case
    shutil.rmtree(results, ignore_errors=True)
    window = {"duration_s": a.leg_s, "warmup_s": 1.5, "repeats": a.legs, "mode": "single"}
    datasets = values if knob == "dataset" else [name]
    runs = []
    remote = {}
    if endpoint:
        from dlbench.sources import spec_from_endpoint

        remote = {"root": COLD_URL, "source_spec": spec_from_endpoint(endpoint)}
    for ds in datasets:
        given = {"root": str(root_of(work, ds)), "dataset": ds, **settings, **window, **remote}
        run = runspec.make_run(given, scenario=case)
        runspec.write(run, results / "specs" / case / f"{run.run_id}.json")
        bench_run(results / "runs" / case / run.run_id, "--spec", str(results / "specs" / case / f"{run.run_id}.json"))
        runs.append(results / "runs" / case / run.run_id)
    aggregate(runs, results / "summary.csv")
    source = settings.get("source", "local")
    cal = work / "advice" / "calibration" / f"{name}-{source}-{settings['loader']}.json"
    if not cal.exists() or endpoint:  # a cold source's calibration is made with its server, every time
        loaders = sorted({settings["loader"], *(values if knob == "loader" else [])})
        where = ["--root", COLD_URL, "--endpoint-url", endpoint] if endpoint else ["--root", str(root_of(work, name))]
        dlbench("calibrate", *where, "--dataset", name, "--source", source, "--loader", ",".join(loaders),
                "--mode", "single", "--out", str(cal))  # fmt: skip
    (results / "calibration" / name).mkdir(parents=True)
    shutil.copy(cal, results / "calibration" / name / f"{source}.json")
    if knob == "dataset":
        (results / "tables").mkdir()
        shutil.copy(encodings(work, values), results / "tables" / "encodings.csv")
        # the misconfigured run is the first; the variant's run is there only for the advice to find
    return results


def sweep(work: Path, results: Path, case: str, a) -> dict:
    """Each value of the case's knob as `legs` short legs, taking turns: value -> median frames/s per node."""
    from dlbench.advice.prove import leg_rate
    from dlbench.run import spec as runspec

    name, settings, knob, values = CASES[case]
    base = runspec.read(next((results / "specs" / case).glob(f"{name}-*.json")))
    short = {"duration_s": a.leg_s, "repeats": 1, "warmup_s": 1.5}
    rates: dict = {v: [] for v in values}
    for k in range(a.legs):
        for v in values if k % 2 == 0 else values[::-1]:
            if knob in ("dataset", "encoding"):
                run = replace(base, dataset=v, root=str(root_of(work, v)), **short)
            else:
                run = replace(base, **{knob: v}, **short)
            rates[v].append(leg_rate(run, work / "advice" / "sweep" / f"{case}-{v}-{k}")[0])  # frames/s
    shutil.rmtree(work / "advice" / "sweep", ignore_errors=True)
    return {v: statistics.median(r) for v, r in rates.items()}


def main(argv=None) -> None:
    ap = parser(__doc__)
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--legs", type=int, default=3, help="legs per setting, alternating")
    ap.add_argument("--leg-s", type=float, default=3.0, help="seconds measured per leg")
    a = ap.parse_args(argv)
    work = Path(a.workdir)
    table = []
    for case in a.cases:
        with cold_bucket(work) if CASES[case][1].get("source") == "cold" else contextlib.nullcontext() as endpoint:
            results = results_of(work, case, a, endpoint)
            out = results / "advice" / "verified.csv"
            dlbench("advise", str(results), "--verify", "1", "--legs", str(a.legs), "--leg-s", str(a.leg_s),
                    "--verified", str(out), "--out", str(results / "advice.md"))  # fmt: skip
            v = pd.read_csv(out)
            best = sweep(work, results, case, a)
        knob_best = max(best, key=best.get)
        row = {"case": case, "best": f"{CASES[case][2]}={knob_best}", "best_fps": best[knob_best], "sweep": best}
        if v.empty:
            row.update(prescription="(none)", verdict="nothing prescribed")
        else:
            r = v.iloc[0].to_dict()
            row.update(prescription=r["change"], verdict=r["verdict"], predicted_gain=r["predicted_gain"],
                       measured_gain=r.get("measured_gain"), before=r.get("before_frames_per_s_node"),
                       after=r.get("after_frames_per_s_node"), share=r.get("share_of_predicted_gain"))  # fmt: skip
        table.append(row)
    report = Report(a, ["case", "before", "prescription", "pred", "meas", "after", "best", "best fr/s", "recovered",
                        "of pred", "verdict", "sweep"], "advice")  # fmt: skip
    for r in table:
        after = r.get("after")
        recov = f"{after / r['best_fps']:.0%}" if after == after and after is not None else None
        share = r.get("share")
        report.row(**{"case": r["case"], "before": r.get("before"), "prescription": r["prescription"],
                      "pred": r.get("predicted_gain"), "meas": r.get("measured_gain"), "after": after,
                      "best": r["best"], "best fr/s": r["best_fps"], "recovered": recov,
                      "of pred": f"{share:.0%}" if share == share and share is not None else None,
                      "verdict": r["verdict"], "sweep": r["sweep"]})  # fmt: skip
    report.close()


if __name__ == "__main__":
    main()
