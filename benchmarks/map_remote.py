"""Remote map-style benchmark: dlbench_map from local disk, the loopback S3 server and the loopback Hub, in one run.

    python -m benchmarks.map_remote --dataset results/datasets/synthetic/v30 [--mode single] [--repeats 2]
        [--lance results/datasets/synthetic/lance]

Starts SeaweedFS and the loopback Hub, each behind a shaping proxy (`--latency-ms`, `--bandwidth-mbps`: remote
storage), stages the dataset on both, then alternates bench runs of dlbench_map (same mode, batch size, workers) over
local disk, S3 and the Hub, `repeats` times; every run checks every frame's barcode (synthetic data) and reads remote
files through its own metering proxy. Prints, per source, the median frames/s (and its share of local disk's),
requests and MB per 1,000 frames, read amplification, wrong frames, and the CPU the loopback servers and proxies
took during the run (they share the machine's cores with the loader); `--json FILE` keeps every run's figures.

The bounds, in the same run: the source `s3-bare` is the same S3 server without its shaping proxy (no added latency
or bandwidth cap), so `s3-bare` against `local` is what the remote path itself costs on these cores, and `s3` against
`s3-bare` what the latency costs. The last lines put each remote source's frames/s against two ceilings: the share
of the cores the loopback storage (servers and metering proxy) left to the decoders, and that share less the
client's own CPU per request, measured alone (batches planned and fetched as dlbench_map does, nothing decoded) at
the run's requests per frame and local disk's frame rate. And the requests a batch needs at least on this layout:
one per video file and frame (v3.0 keeps each camera in its own file), none merged across a gap, none held.
Runs go through this interpreter: to compare two trees, run it with each on PYTHONPATH.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

from benchmarks.common import Report, bench_run, dlbench, free_port, parser
from dlbench import loopback
from dlbench.decode.batch_fetch import BatchFetcher
from dlbench.loader.dataset_meta import DatasetMeta
from dlbench.sources import LOOPBACK_CREDENTIALS, apply_env, spec_from_endpoint

METRICS = (
    "frames_per_s_node",
    "remote_requests_per_kframe",
    "remote_mb_per_kframe",
    "remote_read_amplification",
    "frames_wrong",
    "frames_verified",
)


def _env(work: Path) -> dict[str, str]:
    """This environment for a child reading the loopback servers: their credentials, no Hub or fsspec settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FSSPEC_"))}
    env.update(LOOPBACK_CREDENTIALS, HF_HUB_DISABLE_TELEMETRY="1", HF_HOME=str(work / "hf-home"))
    return env


def _client(work: Path, function: str, *args: str) -> subprocess.CompletedProcess:
    """This module's `function(*args)` in a fresh process, in the loopback servers' environment (`_env`); its JSON
    on stdout."""
    env = _env(work)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    code = f"import json, sys; from benchmarks.map_remote import {function} as f; print(json.dumps(f(*sys.argv[1:])))"
    run = subprocess.run([sys.executable, "-c", code, *args], cwd=work, env=env, capture_output=True, text=True)
    if run.returncode:
        raise SystemExit(f"{function} failed:\n{run.stderr[-3000:]}")
    return run


def _server_cpu_s(state: Path) -> float:
    """CPU seconds used so far by the loopback servers and proxies (their processes and children)."""
    total = 0.0
    for pid in json.loads(state.read_text())["pids"]:
        try:
            proc = psutil.Process(pid)
            for p in [proc, *proc.children(recursive=True)]:
                t = p.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            continue
    return total


class _MeterCpu(threading.Thread):
    """CPU seconds of the metering proxies (`dlbench.loopback.meter`) that live during a run, sampled twice a second
    (each lives only as long as its rank)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            for proc in psutil.process_iter(["cmdline"]):
                if "dlbench.loopback.meter" in (proc.info["cmdline"] or []):
                    with contextlib.suppress(psutil.Error):
                        t = proc.cpu_times()
                        self.seen[proc.pid] = t.user + t.system

    def total(self) -> float:
        self.stop.set()
        self.join()
        return sum(self.seen.values())


def _bench(work: Path, root: str, endpoint: str | None, lance: str | None, out: Path, a, *extra: str) -> dict:
    """One bench run's figures (`METRICS`), and the cores the loopback servers (`server_cores`) and the metering
    proxy (`meter_cores`) kept busy over the run. With `lance` (its Lance copy), the run is lance_map's; `extra`:
    more bench-run options."""
    state = work / loopback.STATE
    meter = _MeterCpu()
    cpu0, t0 = _server_cpu_s(state), time.monotonic()
    extra = (*extra, *(["--endpoint-url", endpoint] if endpoint else []))
    loader = "lance_map" if lance else "dlbench_map"
    record = bench_run(out, *extra, cwd=work, env=_env(work), root=root, loader=loader, lance_root=lance,
                       mode=a.mode, batch_size=a.batch_size, num_workers=a.workers, duration_s=a.duration_s,
                       warmup_s=a.warmup_s, repeats=1, in_order=a.in_order or None)  # fmt: skip
    metrics = record["metrics"]
    elapsed = time.monotonic() - t0
    server_cores, meter_cores = (_server_cpu_s(state) - cpu0) / elapsed, meter.total() / elapsed
    return {**{k: metrics.get(k) for k in METRICS}, "server_cores": server_cores, "meter_cores": meter_cores}


def fetch_cost(root: str, endpoint: str, batches: int | str, batch_size: int | str, seed: int = 0) -> dict:
    """The client's side of remote reads alone, in this process: `BatchFetcher.prefetch` of random batches as
    dlbench_map plans them (every camera's frames of `batch_size` random rows), nothing decoded. CPU time of the
    process (its fetch threads and fsspec's I/O loop included) per request made, wall time per batch."""
    batches, batch_size = int(batches), int(batch_size)
    apply_env(spec_from_endpoint(endpoint))
    dmeta = DatasetMeta.load(root)
    fetcher, rng = BatchFetcher(), np.random.default_rng(seed)

    def batch() -> list[tuple[str, np.ndarray]]:
        rows = rng.integers(0, dmeta.num_frames, batch_size)
        eps = np.searchsorted(dmeta.ep_to, rows, side="right")
        frame = lambda cam, row, ep: round(dmeta.video_from[cam][ep] * dmeta.fps) + row - dmeta.ep_from[ep]  # noqa: E731
        return [
            (dmeta.video_url(cam, ep), np.array([frame(cam, row, ep) / dmeta.fps]))
            for cam in dmeta.cameras
            for row, ep in zip(rows.tolist(), eps.tolist())
        ]

    for url in {dmeta.video_url(cam, ep) for cam in dmeta.cameras for ep in range(len(dmeta.ep_to))}:
        fetcher.indexes.get(url)  # every file's index first: opening files is not a batch's cost
    plans = [batch() for _ in range(batches)]
    cpu0, t0, r0 = time.process_time(), time.perf_counter(), fetcher.requests
    for requests in plans:
        fetcher.prefetch(requests, dmeta.fps)
    cpu, wall, made = time.process_time() - cpu0, time.perf_counter() - t0, fetcher.requests - r0
    # the layout's floor: one range per file and frame run, none merged across a gap, nothing held from before
    # (plans only: nothing is fetched, so nothing is held)
    floor = BatchFetcher(gap=0)
    floor.indexes = fetcher.indexes
    ranges = sum(len(r) for requests in plans for r in floor.plan(requests, dmeta.fps).values())
    frames = sum(len(times) for requests in plans for _, times in requests)
    return {
        "cpu_ms_per_request": 1000 * cpu / max(made, 1),
        "wall_ms_per_batch": 1000 * wall / batches,
        "floor_requests_per_kframe": 1000 * ranges / frames,
    }


def _bounds(report: Report, runs: dict[str, list[dict]], local: float, contenders: dict, a) -> None:
    """Per remote source, where its frames/s is bounded on this machine: the cores the loopback storage took from
    the decoders, and the client's own CPU per request (measured alone, `fetch_cost`) at one run's request rate."""
    cores = len(os.sched_getaffinity(0))
    report.line(f"bounds on these {cores} cores (frames/s as a share of local disk's):")
    for key, rs in runs.items():
        root, endpoint, lance = contenders[key]
        if endpoint is None or lance:  # dlbench_map's remote sources only
            continue
        cost = json.loads(_client(Path.cwd(), "fetch_cost", root, endpoint, "40", str(a.batch_size)).stdout)
        busy = statistics.median(r["server_cores"] + r["meter_cores"] for r in rs)
        per_frame = statistics.median(r["remote_requests_per_kframe"] for r in rs) / 1000
        client = cost["cpu_ms_per_request"] / 1000 * per_frame * local  # cores at local's frame rate
        report.line(
            f"  {key:<15} storage on these cores: {100 * (1 - busy / cores):5.1f}%;  client fetch alone "
            f"{cost['cpu_ms_per_request']:.2f} ms CPU a request, {cost['wall_ms_per_batch']:.0f} ms a batch, "
            f"{client:.2f} cores at local's rate: {100 * (1 - (busy + client) / cores):5.1f}% with both"
        )
        report.line(
            f"  {key:<15} requests: {cost['floor_requests_per_kframe']:.0f} per 1,000 frames at least, for any reader"
            f" of this layout that fetches only the GOPs a batch needs (one per file and frame, none held)"
        )


def _args(argv):
    ap = parser(__doc__, workdir=False)
    ap.add_argument("--dataset", required=True, help="a local synthetic v3.0 dataset (its barcodes are checked)")
    ap.add_argument("--mode", default="single")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--duration-s", type=float, default=10.0)
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--latency-ms", type=float, default=20.0, help="added to every response of both servers")
    ap.add_argument("--bandwidth-mbps", type=float, default=1000.0, help="each server's bandwidth cap")
    ap.add_argument(
        "--sources",
        default="local,s3,s3-no-lookahead,s3-bare,hub",
        help="comma-separated: local, s3, s3-no-lookahead (each worker's next batch not fetched during this one), "
        "s3-bare, hub",
    )
    ap.add_argument("--in-order", action="store_true", help="every run's DataLoader delivers batches in order")
    ap.add_argument("--lance", help="the dataset's Lance copy (dlbench lance-convert): adds lance_map, local and S3")
    return ap.parse_args(argv)


def _stage(work: Path, dataset: str, a, s3_shaped: int, hub_shaped: int) -> dict:
    """The sources to read (key: (dataset root, endpoint, Lance copy for lance_map)), staged on the servers."""
    name = Path(dataset).name
    s3_root, lance_url = f"s3://dlbench-map/{name}", f"s3://dlbench-map/{name}.lance"
    contenders = {
        "local": (dataset, None, None),
        "s3": (s3_root, f"loopback:{s3_shaped}", None),
        "s3-no-lookahead": (s3_root, f"loopback:{s3_shaped}", None),
        "s3-bare": (s3_root, "loopback", None),  # no shaping proxy
        "hub": (f"hf://datasets/dlbench/{name}@v3.0", f"loopback-hub:{hub_shaped}", None),
    }
    contenders = {k: v for k, v in contenders.items() if k in a.sources.split(",")}
    if a.lance:  # lance_map reads Lance copies on local disk or S3 only
        lance = str(Path(a.lance).absolute())
        contenders["lance"] = (dataset, None, lance)
        contenders["s3-lance"] = (s3_root, f"loopback:{s3_shaped}", lance_url)
        marker = str(work / "lance.json")
        dlbench("stage", lance, lance_url, "--marker", marker, "--endpoint-url", "loopback", cwd=work, env=_env(work))
    staged = dict.fromkeys(("s3", "s3-no-lookahead", "s3-bare", "s3-lance"), "loopback") | {"hub": "loopback-hub"}
    done = set()
    for key, (root, _, _) in contenders.items():
        if key in staged and root not in done:
            done.add(root)
            marker = str(work / f"{key}.json")
            dlbench("stage", dataset, root, "--marker", marker, "--endpoint-url", staged[key], cwd=work, env=_env(work))
    return contenders


def _report(report: Report, runs: dict[str, list[dict]], contenders: dict, a) -> None:
    """Each source's medians, dlbench_map against lance_map, and the bounds of the remote runs."""
    report.line(f"dlbench_map (lance, s3-lance: lance_map), mode {a.mode}, batch {a.batch_size}, {a.workers} "
                f"workers, {a.duration_s:g} s windows, remote +{a.latency_ms:g} ms, {a.bandwidth_mbps:g} Mbit/s; "
                f"median of {a.repeats}")  # fmt: skip
    local = statistics.median(r["frames_per_s_node"] for r in runs["local"]) if "local" in runs else None
    for key, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) if rs[0][k] is not None else None for k in METRICS}
        wrong = sum(r["frames_wrong"] or 0 for r in rs)
        verified = sum(r["frames_verified"] or 0 for r in rs)
        cores, meter_cores = (statistics.median(r[k] for r in rs) for k in ("server_cores", "meter_cores"))
        report.row(**{"source": key, "frames/s": med["frames_per_s_node"],
                      "of local": f"{med['frames_per_s_node'] / local:.1%}" if local else None,
                      "req/kframe": med["remote_requests_per_kframe"], "MB/kframe": med["remote_mb_per_kframe"],
                      "amplification": med["remote_read_amplification"], "wrong / checked": f"{wrong} / {verified}",
                      "server cores": cores, "meter cores": meter_cores})  # fmt: skip
    for mine, theirs in (("local", "lance"), ("s3", "s3-lance")):
        if mine in runs and theirs in runs:
            ratio = statistics.median(r["frames_per_s_node"] for r in runs[mine]) / statistics.median(
                r["frames_per_s_node"] for r in runs[theirs]
            )
            report.line(f"dlbench_map over lance_map, {mine}: {ratio:.2f}x")
    if local:
        _bounds(report, runs, local, contenders, a)


def main(argv=None) -> None:
    a = _args(argv)
    dataset = str(Path(a.dataset).absolute())
    work = Path(tempfile.mkdtemp(prefix="dlbench-map-remote-"))
    port, hub_port, s3_shaped, hub_shaped = (free_port() for _ in range(4))
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
        contenders = _stage(work, dataset, a, s3_shaped, hub_shaped)
        runs: dict[str, list[dict]] = {k: [] for k in contenders}
        for r in range(a.repeats):  # interleaved, so drift on a noisy machine hits every source alike
            for key, (root, endpoint, lance) in contenders.items():
                extra = ["--no-lookahead"] if key.endswith("no-lookahead") else []
                runs[key].append(_bench(work, root, endpoint, lance, work / f"run{r}-{key}", a, *extra))
                print(f"{key} run {r}: {json.dumps(runs[key][-1])}", flush=True)
        report = Report(a, ["source", "frames/s", "of local", "req/kframe", "MB/kframe", "amplification",
                            "wrong / checked", "server cores", "meter cores"], "map_remote")  # fmt: skip
        _report(report, runs, contenders, a)
        report.close()
    finally:
        loopback.stop(state)


if __name__ == "__main__":
    main()
