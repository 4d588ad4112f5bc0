"""Harness overhead: the benchmark harness against the same DataLoader loop without instrumentation, in one run.

    python -m benchmarks.overhead [--dataset V30] [--loaders dlbench_stream dlbench_map] [--workers 2]
                                   [--batch-size 16] [--duration-s 8] [--repeats 3]

For each loader it alternates, `repeats` times:
  - bare: the loader's dataset in a plain DataLoader (same batch size, workers, prefetch, warm-up and window),
    batches pulled and counted, nothing else;
  - harness: `bench.runner.measure_rank` without frame verification (per-sample timing, cache counters, RSS sampler, the
    device copy): the instrumentation every record carries;
  - harness+verify: the same with barcode checks of every frame, as the workflow runs on synthetic data.
It prints the median decoded frames/s of each and the cost of the harness relative to the bare loop.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

import torch

from benchmarks.common import Report, parser
from dlbench.bench.adapters import make_adapter
from dlbench.bench.runner import measure_rank
from dlbench.loader import DataLoader
from dlbench.run.spec import RunSpec


def bare(run: RunSpec) -> float:
    """Decoded frames/s of the plain loop over the same window as the harness."""
    adapter = make_adapter(run)
    kwargs = dict(
        batch_size=run.batch_size,
        num_workers=run.num_workers,
        persistent_workers=run.num_workers > 0,
        prefetch_factor=run.prefetch_factor if run.num_workers else None,
        in_order=run.in_order,
    )
    if not adapter.iterable:
        kwargs.update(shuffle=True, generator=torch.Generator().manual_seed(run.seed + 1000003 * run.rank))
    loader = DataLoader(adapter.dataset, collate_fn=adapter.collate, **kwargs)  # batches as the loader's users get
    it = iter(loader)

    def next_batch():
        nonlocal it
        try:
            return next(it)
        except StopIteration:
            it = iter(loader)
            return next(it)

    t0 = time.perf_counter()
    next_batch()
    first = time.perf_counter() - t0
    while time.perf_counter() - t0 - first < run.warmup_s:
        next_batch()
    samples, w0 = 0, time.perf_counter()
    while time.perf_counter() - w0 < run.duration_s:
        samples += len(next_batch()["index"])
    return samples * adapter.frames_per_item / (time.perf_counter() - w0)


def main(argv=None) -> None:
    ap = parser(__doc__, workdir=False)
    ap.add_argument("--dataset", default="results/datasets/synthetic/v30")
    ap.add_argument("--loaders", nargs="+", default=["dlbench_stream", "dlbench_map"])
    ap.add_argument("--mode", default="single")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--duration-s", type=float, default=8.0)
    ap.add_argument("--warmup-s", type=float, default=1.5)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)

    report = Report(a, ["loader", "bare", "harness", "h+verify", "harness cost", "with verify", "runs"], "overhead")
    report.line(f"dataset {a.dataset}, mode {a.mode}, batch {a.batch_size}, {a.workers} workers, {a.duration_s:g} s "
                f"windows, {a.repeats} interleaved repeats; decoded frames/s")  # fmt: skip
    worst = 0.0
    for loader in a.loaders:
        run = RunSpec(
            root=a.dataset,
            loader=loader,
            mode=a.mode,
            batch_size=a.batch_size,
            repeats=1,
            num_workers=a.workers,
            duration_s=a.duration_s,
            warmup_s=a.warmup_s,
            probe_samples=1,
        )
        figures: dict[str, list[float]] = {"bare": [], "harness": [], "verify": []}
        for _ in range(a.repeats):
            figures["bare"].append(bare(run))
            figures["harness"].append(measure_rank(replace(run, verify=False))["metrics"]["frames_per_s_node"])
            figures["verify"].append(measure_rank(run)["metrics"]["frames_per_s_node"])
        med = {k: statistics.median(v) for k, v in figures.items()}
        cost = 1 - med["harness"] / med["bare"]
        cost_v = 1 - med["verify"] / med["bare"]
        worst = max(worst, cost)
        runs = "; ".join(f"{k} {', '.join(str(round(v)) for v in vs)}" for k, vs in figures.items())
        report.row(**{"loader": loader, "bare": med["bare"], "harness": med["harness"], "h+verify": med["verify"],
                      "harness cost": f"{cost:.1%}", "with verify": f"{cost_v:.1%}", "runs": runs})  # fmt: skip
    report.goal("harness cost < 3% of the bare loop's throughput", worst < 0.03, f"largest {worst:.1%}")
    report.close()


if __name__ == "__main__":
    main()
