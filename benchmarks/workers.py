"""Worker-count sweep: `num_workers: auto` against every fixed count, side by side in one run.

    python -m benchmarks.workers [--dataset V30 | --realistic] [--loader dlbench_map] [--counts 1 2 3 4]
                                 [--duration-s 5] [--repeats 3]

Each repeat runs every count and `auto` once, in turn (so drift on a noisy machine hits them alike), each through
`dlbench bench-run` in its own process, frames unchecked. It prints each count's median decoded frames/s and its
spread, the best count, and whether `auto` is within noise of it: the best median less auto's at most the larger
of their two spreads (max - min over the repeats).
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path

from benchmarks import datasets
from benchmarks.common import Report, bench_run, parser
from dlbench.run.loaders import DLBENCH_LOADERS


def measure(root: str, a, workers: str, out: Path) -> tuple[float, int]:
    """Decoded frames/s of one bench-run window, and the worker count it ran with."""
    rec = bench_run(out, root=root, loader=a.loader, mode=a.mode, batch_size=a.batch_size, num_workers=workers,
                    duration_s=a.duration_s, warmup_s=a.warmup_s, repeats=1, verify=False)  # fmt: skip
    return rec["metrics"]["frames_per_s_node"], rec["config"]["num_workers"]


def main(argv=None) -> None:
    ap = parser(__doc__, workdir=None)
    ap.add_argument("--dataset", default=None, help="a v3.0 dataset (default: synthesize and convert one)")
    ap.add_argument("--realistic", action="store_true", help="the realistic dataset (480x640 AV1) instead of 96x128")
    ap.add_argument(
        "--episodes", type=int, default=None, help="episodes to synthesize (default: 24 quick, 10 realistic)"
    )
    ap.add_argument("--loader", default="dlbench_map", choices=DLBENCH_LOADERS)
    ap.add_argument("--mode", default="single")
    ap.add_argument("--batch-size", type=int, default=16)
    cores = len(os.sched_getaffinity(0))
    ap.add_argument("--counts", type=int, nargs="+", default=list(range(1, 2 * cores + 1)), help="fixed counts")
    ap.add_argument("--duration-s", type=float, default=5.0)
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="dlbench-perf-workers-"))
    root = a.dataset or str(datasets.v30(work, a.realistic, a.episodes))
    report = Report(a, ["workers", "median", "min", "max"], "workers")
    report.line(f"dataset {root}; {a.loader} {a.mode}, batch {a.batch_size}, {cores} cores, {a.duration_s:g} s windows")

    names = [str(n) for n in a.counts] + ["auto"]
    runs: dict[str, list[float]] = {n: [] for n in names}
    auto_count = None
    for r in range(a.repeats):
        for n in names:
            fps, used = measure(root, a, n, work / f"run-{n}-{r}")
            runs[n].append(fps)
            auto_count = used if n == "auto" else auto_count
    med = {n: statistics.median(v) for n, v in runs.items()}
    spread = {n: max(v) - min(v) for n, v in runs.items()}
    for n in names:
        label = f"auto (= {auto_count})" if n == "auto" else n
        report.row(workers=label, median=med[n], min=min(runs[n]), max=max(runs[n]))
    best = max(names[:-1], key=med.get)
    gap, noise = med[best] - med["auto"], max(spread[best], spread["auto"])
    report.goal("auto within noise of the best fixed count", gap <= noise,
                f"best {best}: {med[best]:.0f}; auto {med['auto']:.0f} ({med['auto'] / med[best]:.2f}x), gap "
                f"{gap:.0f}, noise {noise:.0f} frames/s")  # fmt: skip
    report.close()


if __name__ == "__main__":
    main()
