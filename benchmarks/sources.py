"""Source benchmark: streaming from a loopback S3 server against streaming from local disk, in one run.

    python -m benchmarks.sources --dataset results/datasets/synthetic/v30 [--repeats 3] [--duration-s 8]

Starts a real S3-compatible server on loopback (SeaweedFS, read through s3fs), plain and behind the shaping proxy
(`--latency-ms`, `--bandwidth-mbps`: remote, cold-looking storage), stages the dataset there, then alternates bench
runs of the same scenario (dlbench_stream, same mode, batch size and workers) over local disk, the plain server and
the shaped one, `repeats` times. Prints median decoded frames/s of each, the S3/local ratio (target >= 80%), and
the prewarm check's verdict and cost in seconds against both endpoints.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import Report, bench_run, free_port, parser
from dlbench import loopback, prewarm
from dlbench.sources import LOOPBACK_CREDENTIALS, apply_env


def _bench(url: str, spec: dict | None, out: Path, a) -> float:
    """Decoded frames/s of one bench run (its own process, as in the workflow)."""
    endpoint = [] if spec is None else ["--endpoint-url", spec["endpoint_url"]]
    rec = bench_run(out, *endpoint, root=url, loader="dlbench_stream", mode=a.mode, batch_size=a.batch_size,
                    num_workers=a.workers, duration_s=a.duration_s, warmup_s=a.warmup_s, repeats=1,
                    verify=False)  # fmt: skip
    return rec["metrics"]["frames_per_s_node"]


def main(argv=None) -> None:
    ap = parser(__doc__, workdir=False)
    ap.add_argument("--dataset", required=True, help="a local v3.0 dataset (e.g. results/datasets/synthetic/v30)")
    ap.add_argument("--mode", default="single")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--duration-s", type=float, default=8.0)
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--latency-ms", type=float, default=20.0, help="the shaped endpoint's added latency")
    ap.add_argument("--bandwidth-mbps", type=float, default=1000.0, help="the shaped endpoint's bandwidth cap")
    ap.add_argument("--ttfb-ms-max", type=float, default=50.0, help="prewarm threshold (config.yaml's warmed_bucket)")
    ap.add_argument("--mbps-min", type=float, default=400.0, help="prewarm threshold (config.yaml's warmed_bucket)")
    a = ap.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="dlbench-perf-sources-"))
    port, shaped_port = free_port(), free_port()
    state = home / "loopback.json"
    loopback.start(port, [(shaped_port, a.latency_ms, a.bandwidth_mbps)], state, home / "logs", data_dir=home / "data")
    try:
        url = "s3://dlbench-perf/v30"
        for key, value in LOOPBACK_CREDENTIALS.items():  # the loopback server accepts any key; children inherit it
            os.environ.setdefault(key, value)
        plain = {"type": "s3", "url": url, "endpoint_url": f"http://127.0.0.1:{port}", "loopback": {}}
        shaped = {**plain, "endpoint_url": f"http://127.0.0.1:{shaped_port}"}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "dlbench",
                "-q",
                "stage",
                a.dataset,
                url,
                "--marker",
                str(home / "staged.json"),
                "--endpoint-url",
                plain["endpoint_url"],
            ],
            check=True,
        )
        contenders = {
            "local disk": (a.dataset, None),
            "loopback S3": (url, plain),
            f"loopback S3 +{a.latency_ms:g} ms, {a.bandwidth_mbps:g} Mbit/s": (url, shaped),
        }
        fps: dict[str, list[float]] = {name: [] for name in contenders}
        for r in range(a.repeats):  # interleaved, so drift on a noisy machine hits every contender alike
            for k, (name, (u, spec)) in enumerate(contenders.items()):
                fps[name].append(_bench(u, spec, home / f"run{r}-{k}", a))
        report = Report(a, ["source", "frames/s", "of local", "runs"], "sources")
        report.line(f"dlbench_stream, mode {a.mode}, batch {a.batch_size}, {a.workers} workers, {a.duration_s:g} s "
                    f"windows, median of {a.repeats}")  # fmt: skip
        local = statistics.median(fps["local disk"])
        for name, values in fps.items():
            med = statistics.median(values)
            report.row(**{"source": name, "frames/s": med, "of local": f"{med / local:.1%}",
                          "runs": ", ".join(f"{v:.0f}" for v in values)})  # fmt: skip
        plain_share = statistics.median(fps["loopback S3"]) / local
        report.goal("loopback S3 >= 80% of local disk", plain_share >= 0.8, f"{plain_share:.1%}")
        report.line(f"prewarm check (8 files, 4 MB ranges; warm: TTFB p50 <= {a.ttfb_ms_max:g} ms, "
                    f">= {a.mbps_min:g} Mbit/s):")  # fmt: skip
        for name, spec in (("loopback S3", plain), ("shaped", shaped)):
            apply_env(spec)
            t0 = time.perf_counter()
            verdict = prewarm.check(
                url, files=8, range_mb=4, ttfb_p50_ms_max=a.ttfb_ms_max, throughput_mbps_min=a.mbps_min
            )
            report.line(f"  {name:<12} {prewarm.explain(verdict)}; took {time.perf_counter() - t0:.2f} s")
        report.close()
    finally:
        loopback.stop(state)


if __name__ == "__main__":
    main()
