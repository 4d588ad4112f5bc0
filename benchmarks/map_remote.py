"""Remote map-style benchmark: dlbench_map from local disk, the loopback S3 server and the loopback Hub, in one run.

    python -m benchmarks.map_remote --dataset results/datasets/synthetic/v30 [--mode single] [--repeats 2]

Starts SeaweedFS and the loopback Hub, each behind a shaping proxy (`--latency-ms`, `--bandwidth-mbps`: remote
storage), stages the dataset on both, then alternates bench runs of dlbench_map (same mode, batch size, workers) over
local disk, S3 and the Hub, `repeats` times; every run checks every frame's barcode (synthetic data) and reads remote
files through its own metering proxy. Prints, per source, the median frames/s (and its share of local disk's),
requests and MB per 1,000 frames, read amplification and wrong frames; `--json FILE` keeps every run's figures.
Runs go through this interpreter: to compare two trees, run it with each on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from dlbench import loopback
from dlbench.sources import LOOPBACK_CREDENTIALS

METRICS = (
    "frames_per_s_node",
    "remote_requests_per_kframe",
    "remote_mb_per_kframe",
    "remote_read_amplification",
    "frames_wrong",
    "frames_verified",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dlbench(work: Path, *args: str) -> subprocess.CompletedProcess:
    """The dlbench command run in `work`, where results/sources/ holds the loopback servers' state."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FSSPEC_"))}
    env.update(LOOPBACK_CREDENTIALS, HF_HUB_DISABLE_TELEMETRY="1", HF_HOME=str(work / "hf-home"))
    run = subprocess.run(
        [sys.executable, "-m", "dlbench", "-q", *args], cwd=work, env=env, capture_output=True, text=True
    )
    if run.returncode:
        raise SystemExit(f"dlbench {' '.join(args[:3])} failed:\n{run.stderr[-3000:]}")
    return run


def _bench(work: Path, root: str, endpoint: str | None, out: Path, a) -> dict:
    """One bench run's figures (`METRICS`)."""
    cmd = ["bench-run", "--root", root, "--out-dir", str(out), "--loader", "dlbench_map", "--mode", a.mode]
    cmd += ["--batch-size", str(a.batch_size), "--num-workers", str(a.workers), "--duration-s", str(a.duration_s)]
    cmd += ["--warmup-s", str(a.warmup_s), "--repeats", "1"]
    if endpoint:
        cmd += ["--endpoint-url", endpoint]
    _dlbench(work, *cmd)
    metrics = json.loads((out / "rank0of1.json").read_text())["metrics"]
    return {k: metrics.get(k) for k in METRICS}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True, help="a local synthetic v3.0 dataset (its barcodes are checked)")
    ap.add_argument("--mode", default="single")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--duration-s", type=float, default=10.0)
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--latency-ms", type=float, default=20.0, help="added to every response of both servers")
    ap.add_argument("--bandwidth-mbps", type=float, default=1000.0, help="each server's bandwidth cap")
    ap.add_argument("--sources", default="local,s3,hub", help="comma-separated: local, s3, hub")
    ap.add_argument("--json", help="write every run's figures here")
    a = ap.parse_args(argv)
    dataset = str(Path(a.dataset).absolute())
    work = Path(tempfile.mkdtemp(prefix="dlbench-map-remote-"))
    port, hub_port, s3_shaped, hub_shaped = (_free_port() for _ in range(4))
    os.chdir(work)  # the Hub serves results/sources/ under the working directory, where `stage` links datasets
    state = work / loopback.STATE
    shape = (a.latency_ms, a.bandwidth_mbps)
    loopback.start(
        port,
        [(s3_shaped, *shape)],
        state,
        work / "logs",
        data_dir=work / "seaweedfs",
        hub_port=hub_port,
        hub_proxies=[(hub_shaped, *shape)],
    )
    try:
        name = Path(dataset).name
        contenders = {
            "local": (dataset, None),
            "s3": (f"s3://dlbench-map/{name}", f"loopback:{s3_shaped}"),
            "hub": (f"hf://datasets/dlbench/{name}@v3.0", f"loopback-hub:{hub_shaped}"),
        }
        contenders = {k: v for k, v in contenders.items() if k in a.sources.split(",")}
        staged = {"s3": "loopback", "hub": "loopback-hub"}
        for key, (root, _) in contenders.items():
            if key in staged:
                _dlbench(
                    work, "stage", dataset, root, "--marker", str(work / f"{key}.json"), "--endpoint-url", staged[key]
                )
        runs: dict[str, list[dict]] = {k: [] for k in contenders}
        for r in range(a.repeats):  # interleaved, so drift on a noisy machine hits every source alike
            for key, (root, endpoint) in contenders.items():
                runs[key].append(_bench(work, root, endpoint, work / f"run{r}-{key}", a))
                print(f"{key} run {r}: {json.dumps(runs[key][-1])}", flush=True)
        print(
            f"\ndlbench_map, mode {a.mode}, batch {a.batch_size}, {a.workers} workers, {a.duration_s:g} s windows, "
            f"remote +{a.latency_ms:g} ms, {a.bandwidth_mbps:g} Mbit/s; median of {a.repeats}:"
        )
        local = statistics.median(r["frames_per_s_node"] for r in runs["local"]) if "local" in runs else None
        for key, rs in runs.items():
            med = {k: statistics.median(r[k] for r in rs) if rs[0][k] is not None else None for k in METRICS}
            share = f"{100 * med['frames_per_s_node'] / local:5.1f}% of local" if local else ""
            remote = (
                f"{med['remote_requests_per_kframe']:8.1f} req/kframe {med['remote_mb_per_kframe']:7.2f} MB/kframe "
                f"amplification {med['remote_read_amplification']:.2f}"
                if med["remote_requests_per_kframe"] is not None
                else ""
            )
            wrong = sum(r["frames_wrong"] or 0 for r in rs)
            verified = sum(r["frames_verified"] or 0 for r in rs)
            print(
                f"  {key:<6} {med['frames_per_s_node']:8.1f} frames/s {share:>16}  {remote}  "
                f"frames wrong {wrong} of {verified} checked"
            )
        if a.json:
            Path(a.json).write_text(json.dumps(runs, indent=1))
    finally:
        loopback.stop(state)


if __name__ == "__main__":
    main()
