"""Predictions for a run of two hosts from one host's calibration, the hosts being disjoint cores of this machine.

    python -m benchmarks.hosts [--workdir /tmp/perf] [--sets quick] [--held-out N] [--cores-per-host 1]
                               [--loaders dlbench_map dlbench_stream] [--modes single sarm] [--workers 1 2]

A host here is a set of cores (CPU affinity, as SLURM gives a job its cores): `dlbench calibrate` runs on the first
host's cores alone; each run is `ranks: 2, nodes: 2`, one rank a host, each rank's process (and its DataLoader
workers) held to its host's cores, started as the bench job starts ranks without srun (`RANK`, `WORLD_SIZE`, the
ranks meeting at one barrier). Each run is predicted for two hosts from that calibration alone (`predict_run(...,
hosts=2)`) and measured as summary.csv counts a run of two nodes: both ranks' frames/s over two. What two real hosts
would not share, these do: memory bandwidth, the last-level cache, the page cache the data is read from.
"""

from __future__ import annotations

import os
import statistics
import subprocess
from pathlib import Path

from benchmarks.common import Report, dlbench, parser
from benchmarks.model import SETS, dataset, held_out, window_s
from dlbench.bench.launch import finish, rank_command
from dlbench.model.calibration import Calibration
from dlbench.model.table import predict_run
from dlbench.report.aggregate import aggregate
from dlbench.run import spec as runspec

HOSTS = 2


def two_hosts(spec: runspec.RunSpec, out: Path, per_host: int) -> float:
    """Run `spec` (two ranks) with rank r held to cores [r * per_host, (r + 1) * per_host); frames/s per node."""
    out.mkdir(parents=True, exist_ok=True)
    runspec.write(spec, out / "spec.json")
    cmd, env = rank_command(spec.loader, spec.root)
    procs = []
    for r in range(HOSTS):
        cores = range(r * per_host, (r + 1) * per_host)
        pin = lambda c=cores: os.sched_setaffinity(0, c)  # noqa: E731
        env_r = {**env, "RANK": str(r), "WORLD_SIZE": str(HOSTS)}
        args = [*cmd, "--spec", str(out / "spec.json"), "--out-dir", str(out)]
        with open(out / f"rank{r}.log", "w") as log:  # each rank's lines and warnings, out of the table
            procs.append(subprocess.Popen(args, env=env_r, preexec_fn=pin, stdout=log, stderr=subprocess.STDOUT))
    if any(codes := [p.wait() for p in procs]):
        raise SystemExit(f"{out}: a rank failed (exit codes {codes})")
    finish(out, HOSTS, "local")
    row = aggregate([out], None).iloc[0]
    if row["status"] != "ok":
        raise SystemExit(f"{out}: {row['status']}: {row.get('reason')}")
    return float(row["frames_per_s_total"]) / HOSTS


def main(argv=None) -> None:
    ap = parser(__doc__, sets=["quick"], choices=list(SETS))
    ap.add_argument("--held-out", type=int, default=0, metavar="N")
    ap.add_argument("--cores-per-host", type=int, default=1)
    ap.add_argument("--loaders", nargs="+", default=["dlbench_map", "dlbench_stream"])
    ap.add_argument("--modes", nargs="+", default=["single", "sarm"])
    ap.add_argument("--workers", nargs="+", default=["1", "2"])
    ap.add_argument("--duration-s", type=float, default=5.0, help="a run's window, at least (model.window_s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup-s", type=float, default=1.0)
    a = ap.parse_args(argv)
    if HOSTS * a.cores_per_host > len(os.sched_getaffinity(0)):
        raise SystemExit(f"{HOSTS} hosts of {a.cores_per_host} cores need more than this job's cores")
    work = Path(a.workdir)
    drawn = held_out(a.held_out) if a.held_out else {}
    errors = []
    report = Report(a, ["set", "loader", "mode", "workers", "measured", "predicted", "error", "bound"], "hosts")
    for name in [*a.sets, *drawn]:
        root = dataset(work, name, drawn.get(name))
        path = work / f"model-{name}" / f"calibration-host-{a.cores_per_host}cores.json"
        dlbench("calibrate", "--root", str(root), "--loader", ",".join(a.loaders), "--mode", ",".join(a.modes),
                "--warmup-s", str(a.warmup_s), "--duration-s", str(a.duration_s), "--repeats", str(a.repeats),
                "--out", str(path), cpus=a.cores_per_host)  # fmt: skip
        cal = Calibration.read(path)
        for loader in a.loaders:
            for mode in a.modes:
                for w in a.workers:
                    spec = runspec.make_run({
                        "root": str(root), "dataset": name, "loader": loader, "mode": mode, "num_workers": int(w),
                        "ranks": HOSTS, "nodes": HOSTS, "duration_s": window_s(cal, loader, mode, w, a),
                        "warmup_s": a.warmup_s, "repeats": a.repeats, "probe_samples": 0,
                    }, scenario="hosts")  # fmt: skip
                    measured = two_hosts(spec, work / f"model-{name}" / "hosts" / spec.run_id, a.cores_per_host)
                    p = predict_run(spec.to_dict(), cal, hosts=HOSTS)
                    where = {"set": name, "loader": loader, "mode": mode, "workers": w, "measured": measured}
                    if isinstance(p, str):
                        report.row(**where, bound=f"no prediction: {p}")
                        continue
                    errors.append((p.frames_per_s_node - measured) / measured)
                    report.row(**where, predicted=p.frames_per_s_node, error=f"{errors[-1]:+.0%}", bound=p.bound)
    if errors:
        errs = [abs(e) for e in errors]
        report.line(f"2 hosts of {a.cores_per_host} core(s) from one's calibration: median |error| "
                    f"{statistics.median(errs):.1%}, largest {max(errs):.1%} over {len(errs)} runs; over 30%: "
                    f"{sum(e > 0.30 for e in errs)}")  # fmt: skip
    report.close()


if __name__ == "__main__":
    main()
