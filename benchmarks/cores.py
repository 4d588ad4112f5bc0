"""Predictions for another core count: calibrate on k cores, predict and measure on others.

    python -m benchmarks.cores [--workdir /tmp/perf] [--sets quick realistic] [--held-out N] [--pairs 1:2 2:1]
                               [--loaders dlbench_map dlbench_stream] [--modes single sarm] [--workers 1 2 auto]

A job's cores are its CPU affinity (SLURM sets it; here `os.sched_setaffinity` on the command's process). For each
set and each pair FROM:TO, `dlbench calibrate` runs on the first FROM cores, every run is predicted for TO cores from
that calibration alone (`predict_run(..., cores=TO)`), then measured on the first TO cores (`dlbench bench-run`,
frames checked). One row per run; then the median and largest absolute error per pair and over all. The sets are
benchmarks.model's (`--held-out N`: its held-out sets, drawn from the calibration's code).
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from benchmarks.common import Report, bench_run, dlbench, parser
from benchmarks.model import SETS, dataset, held_out, window_s
from dlbench.model.calibration import Calibration
from dlbench.model.table import predict_run


def main(argv=None) -> None:
    ap = parser(__doc__, sets=["quick"], choices=list(SETS))
    ap.add_argument("--held-out", type=int, default=0, metavar="N")
    ap.add_argument("--pairs", nargs="+", default=["1:2", "2:1"], help="FROM:TO core counts")
    ap.add_argument("--loaders", nargs="+", default=["dlbench_map", "dlbench_stream"])
    ap.add_argument("--modes", nargs="+", default=["single", "sarm"])
    ap.add_argument("--workers", nargs="+", default=["1", "2", "auto"])
    ap.add_argument("--duration-s", type=float, default=5.0, help="a run's window, at least (model.window_s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup-s", type=float, default=1.0)
    a = ap.parse_args(argv)
    pairs = [tuple(int(x) for x in p.split(":")) for p in a.pairs]
    have = len(os.sched_getaffinity(0))
    if max(max(p) for p in pairs) > have:
        raise SystemExit(f"this job has {have} cores; pairs {a.pairs} ask for more")
    work = Path(a.workdir)
    drawn = held_out(a.held_out) if a.held_out else {}
    rows = []
    report = Report(a, ["set", "from", "to", "loader", "mode", "workers", "measured", "predicted", "error", "bound"],
                    "cores")  # fmt: skip
    for name in [*a.sets, *drawn]:
        root = dataset(work, name, drawn.get(name))
        cals = {}
        for k in sorted({p[0] for p in pairs}):
            path = work / f"model-{name}" / f"calibration-{k}cores.json"
            dlbench("calibrate", "--root", str(root), "--loader", ",".join(a.loaders), "--mode", ",".join(a.modes),
                    "--warmup-s", str(a.warmup_s), "--duration-s", str(a.duration_s), "--repeats", str(a.repeats),
                    "--out", str(path), cpus=k)  # fmt: skip
            cals[k] = Calibration.read(path)
            assert cals[k].cores == k, f"calibrated on {cals[k].cores} cores, not {k}"
        for to in sorted({p[1] for p in pairs}):
            for loader in a.loaders:
                for mode in a.modes:
                    for w in a.workers:
                        out = work / f"model-{name}" / "cores" / f"{loader}-{mode}-w{w}-c{to}"
                        window = window_s(cals[min(cals)], loader, mode, w, a)  # the slowest calibration's
                        timing = dict(duration_s=window, warmup_s=a.warmup_s, repeats=a.repeats, probe_samples=0)
                        rec = bench_run(out, root=root, loader=loader, mode=mode, num_workers=w, cpus=to, **timing)
                        measured = rec["metrics"]["frames_per_s_node"]
                        run = {**rec["config"], "num_workers": w if w == "auto" else int(w)}
                        for frm in [p[0] for p in pairs if p[1] == to]:
                            p = predict_run(run, cals[frm], cores=to)
                            where = {"set": name, "from": frm, "to": to, "loader": loader, "mode": mode,
                                     "workers": w, "measured": measured}  # fmt: skip
                            if isinstance(p, str):
                                report.row(**where, bound=f"no prediction: {p}")
                                continue
                            err = (p.frames_per_s_node - measured) / measured
                            rows.append((f"{frm}->{to}", err))
                            report.row(**where, predicted=p.frames_per_s_node, error=f"{err:+.0%}", bound=p.bound)
    for pair in [*sorted({r[0] for r in rows}), "all"]:
        errs = [abs(e) for p, e in rows if pair in (p, "all")]
        if errs:
            report.line(f"{pair}: median |error| {statistics.median(errs):.1%}, largest {max(errs):.1%} over "
                        f"{len(errs)} runs; over 30%: {sum(e > 0.30 for e in errs)}")  # fmt: skip
    report.close()


if __name__ == "__main__":
    main()
