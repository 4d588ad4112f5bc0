"""How far a prediction can miss only because the host moved between its calibration and its run.

    python -m benchmarks.drift [--workdir /tmp/perf] [--sets quick realistic] [--rounds 5]
                               [--loaders dlbench_map lerobot_stream] [--mode single] [--workers 2]

A calibration is measured once, and the runs it predicts come minutes later (in `make run`, up to 15). Each round
calibrates the set (`dlbench calibrate`, the loaders given) and then measures each loader's run (`dlbench bench-run`,
the matrix's windows, frames checked), so rounds repeat the same calibration and the same runs a few minutes apart.
Every run is predicted from every round's calibration:
- adjacent: from the calibration of its own round, measured a minute or two before it;
- across rounds: from the other rounds' calibrations, as `make run` predicts a run from a calibration made earlier.

Then the runs' own spread: the largest over the smallest measured frames/s of one loader's identical runs. Where
that spread is s, no prediction made once is within (s - 1) / (s + 1) of both. Prints one row per run, then the
median and largest |error| of each group.
"""

from __future__ import annotations

import itertools
import statistics
import time
from pathlib import Path

from benchmarks.common import Report, bench_run, dlbench, parser
from benchmarks.model import SETS, dataset
from dlbench.model.calibration import Calibration
from dlbench.model.table import predict_run


def main(argv=None) -> None:
    ap = parser(__doc__, sets=["quick", "realistic"], choices=list(SETS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--loaders", nargs="+", default=["dlbench_map", "lerobot_stream"])
    ap.add_argument("--mode", default="single")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--duration-s", type=float, default=5.0, help="the matrix's window")
    ap.add_argument("--repeats", type=int, default=3, help="the matrix's windows")
    ap.add_argument("--warmup-s", type=float, default=1.0)
    a = ap.parse_args(argv)
    if a.rounds < 2:
        raise SystemExit("--rounds: at least 2 (a prediction across rounds needs another round's calibration)")
    work = Path(a.workdir)
    timing = dict(duration_s=a.duration_s, warmup_s=a.warmup_s, repeats=a.repeats)
    groups: dict[str, list[float]] = {"adjacent": [], "across rounds": []}
    spreads = []
    t_start = time.time()
    report = Report(a, ["set", "loader", "round", "frames_per_s", "error by calibration round"], "drift")
    for name in a.sets:
        root = dataset(work, name)
        cals, runs = [], {loader: [] for loader in a.loaders}  # runs: (round, its config, measured frames/s)
        for k in range(a.rounds):
            path = work / f"model-{name}" / "drift" / f"calibration-{k}.json"
            dlbench("calibrate", "--root", str(root), "--loader", ",".join(a.loaders), "--mode", a.mode,
                    "--out", str(path), *flag_args(timing))  # fmt: skip
            cals.append(Calibration.read(path))
            for loader in a.loaders:
                out = work / f"model-{name}" / "drift" / f"{loader}-{k}"
                rec = bench_run(out, root=root, loader=loader, mode=a.mode, num_workers=a.workers, probe_samples=0,
                                **timing)  # fmt: skip
                measured = rec["metrics"]["frames_per_s_node"]
                runs[loader].append((k, rec["config"], measured))
        for loader, measured_runs in runs.items():
            for k, config, measured in measured_runs:
                cells = []
                for j, cal in enumerate(cals):
                    p = predict_run(config, cal)
                    if isinstance(p, str):
                        cells.append("  n/a")
                        continue
                    err = (p.frames_per_s_node - measured) / measured
                    groups["adjacent" if j == k else "across rounds"].append(abs(err))
                    cells.append(f"{err:+6.0%}{'*' if j == k else ' '}")
                report.row(**{"set": name, "loader": loader, "round": k, "frames_per_s": measured,
                              "error by calibration round": " ".join(cells)})  # fmt: skip
            rates = [m for *_, m in measured_runs]
            spread = max(rates) / min(rates)
            spreads.append(spread)
            report.line(f"{name} {loader}: identical runs {min(rates):.0f} to {max(rates):.0f} frames/s "
                        f"(x{spread:.2f}): one prediction misses one of them by >= "
                        f"{(spread - 1) / (spread + 1):.0%}")  # fmt: skip
    report.line(f"{a.rounds} rounds, {time.time() - t_start:.0f} s in all; * marks the calibration of the run's round")
    for group, errs in groups.items():
        if errs:
            report.line(f"{group}: median |error| {statistics.median(errs):.1%}, largest {max(errs):.1%} over "
                        f"{len(errs)} predictions; over 25%: {sum(e > 0.25 for e in errs)}")  # fmt: skip
    if spreads:
        report.line(f"identical runs: largest over smallest up to x{max(spreads):.2f}")
    report.close()


def flag_args(timing: dict) -> list[str]:
    """`dlbench calibrate` options for the runs' timing (its passes take the warm-up rules from them)."""
    return list(itertools.chain.from_iterable((f"--{k.replace('_', '-')}", str(v)) for k, v in timing.items()))


if __name__ == "__main__":
    main()
