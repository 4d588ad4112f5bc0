"""Remote sources against a real S3-compatible server on loopback (SeaweedFS, read through s3fs), plain and
behind a shaping proxy that makes it look like cold, far storage."""

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from dlbench import loopback
from dlbench.errors import UserError
from dlbench.loader import DataLoader
from dlbench.loader.stream import LeRobotStreamingDataset
from dlbench.sources import apply_env, endpoint_option, spec_from_endpoint

from .helpers import BUCKET_URL, check_item, dlbench, free_port, isolate_s3_env, plain_http_server, unbatch

pytestmark = pytest.mark.server  # the loopback S3 server (SeaweedFS)


def _ray_marks(test):
    """test_ray's marks (peer environment with Ray Data, else skipped saying why), on a test of this module."""
    from .test_ray import RAY_MARKS

    for mark in RAY_MARKS:
        test = mark(test)
    return test


def prewarm(spec: dict, out: Path) -> subprocess.CompletedProcess:
    return dlbench(
        "prewarm-check",
        spec["url"],
        "--out",
        str(out),
        "--files",
        "4",
        "--range-mb",
        "1",
        "--ttfb-ms-max",
        "50",
        "--mbps-min",
        "1",
        spec=spec,
    )


def test_prewarm_check_says_cold_when_slow_and_warm_when_fast(s3, tmp_path):
    assert s3["staged"]["files"] > 10  # several parquet and mp4 files per stream
    for name, verdict in (("slow", "cold"), ("fast", "warm")):
        proc = prewarm(s3[name], tmp_path / f"{name}.json")
        assert proc.returncode == 0, proc.stderr
        report = json.loads((tmp_path / f"{name}.json").read_text())
        assert report["verdict"] == verdict, report["first"]
        assert f"measured {verdict}" in proc.stdout
        rows = report["evidence"]["first"]
        assert len(rows) == report["files"] == 4
        assert {Path(r["path"]).suffix for r in rows} == {".parquet", ".mp4"}
        assert report["first"]["ttfb_p50_ms"] <= report["first"]["ttfb_p95_ms"]
        assert report["check_seconds"] > 0
    slow = json.loads((tmp_path / "slow.json").read_text())
    assert slow["first"]["ttfb_p50_ms"] >= 150  # the proxy's delay is really on the wire


def test_cold_verdict_stops_a_warmed_run_and_warn_lets_it_measure(s3, tmp_path):
    report = tmp_path / "slow.json"
    assert prewarm(s3["slow"], report).returncode == 0
    out = tmp_path / "run"
    args = [
        "bench-run",
        "--root",
        BUCKET_URL,
        "--out-dir",
        str(out),
        "--require-warm",
        str(report),
        "--loader",
        "dlbench_stream",
        "--num-workers",
        "1",
        "--batch-size",
        "4",
        "--num-batches",
        "2",
        "--duration-s",
        "5",
        "--warmup-s",
        "0",
        "--probe-samples",
        "2",
        "--buffer-size",
        "4",
    ]
    stopped = dlbench(*args, spec=s3["slow"])
    assert stopped.returncode != 0
    assert "measured cold" in stopped.stderr and "on_cold: warn" in stopped.stderr
    assert not out.exists() or not list(out.iterdir())
    warned = dlbench(*args, "--on-cold", "warn", spec=s3["slow"])
    assert warned.returncode == 0, warned.stderr
    assert "warning:" in warned.stderr
    record = json.loads((out / "rank0of1.json").read_text())
    m = record["metrics"]
    assert record["status"] == "ok" and m["frames_wrong"] == 0
    # the metadata read through s3fs left its I/O thread running: the worker started from the fork server, whose
    # own start (a new interpreter importing torch and the decoder) is part of the first batch's latency
    assert m["worker_start_method"] == "forkserver"
    assert 0 < m["workers_start_s"] < m["first_batch_latency_s"]
    # from remote storage the warm-up (0 s asked) lasts as long again as the first batch: its readers open the rest
    # of their episodes after it, and a window in that opening would measure it
    before_windows = m["wallclock_s"] - (m["window_end_unix"] - m["window_start_unix"])
    assert before_windows >= 1.9 * m["first_batch_latency_s"]


def test_streaming_from_loopback_s3_verifies_every_frame(s3, monkeypatch):
    isolate_s3_env(monkeypatch)
    apply_env(s3["fast"])
    ds = LeRobotStreamingDataset(BUCKET_URL, return_uint8=True, pool_size=2, buffer_size=8)
    seen = []
    # reading the metadata through s3fs left its I/O loop thread running here: forking now is unsafe (a fork beside
    # a thread once left a worker stuck in Python's after-fork code), so the workers start from the fork server,
    # and the batch ring's memory crosses to them
    loader = DataLoader(ds, batch_size=4, num_workers=2)
    for batch in loader:
        for item in unbatch(batch):
            check_item(ds, item)
            seen.append(int(item["index"]))
    assert sorted(seen) == list(range(ds.meta.num_frames))
    assert loader.multiprocessing_context.get_start_method() == "forkserver"


def test_fetched_episodes_read_every_frame_right_in_one_request_per_group_and_file(
    s3, v30_h264_one_file, tmp_path, monkeypatch
):
    """Fetching episodes ahead (`fetch_episodes`: one ranged GET per video file for a group of consecutive episodes,
    spilled to local disk) delivers every frame right, makes one fetch per group and camera file, so larger groups
    make fewer requests, and leaves nothing in the spill directory. (Its cost against block reads on real video is a
    benchmark's: docs/benchmarks.md "Remote cost"; these files are smaller than one of FFmpeg's reads.)"""
    from dlbench.loopback.meter import MeterProcess

    isolate_s3_env(monkeypatch)
    url = BUCKET_URL + "-one-file"  # every episode of a camera in one video file, as in real datasets
    staged = dlbench("stage", str(v30_h264_one_file), url, "--marker", str(tmp_path / "staged.json"), spec=s3["fast"])
    assert staged.returncode == 0, staged.stderr
    spill = tmp_path / "spill"
    spill.mkdir()
    requests = {}
    with MeterProcess(s3["fast"]["endpoint_url"]) as meter:
        apply_env({**s3["fast"], "endpoint_url": meter.url})
        for fetch in (1, 4):
            ds = LeRobotStreamingDataset(
                url, return_uint8=True, virtual_shards=1, fetch_episodes=fetch, spill_dir=str(spill)
            )
            before, seen = meter.counts()["requests"], []
            for item in ds:
                check_item(ds, item)
                seen.append(int(item["index"]))
            requests[fetch] = meter.counts()["requests"] - before
            assert sorted(seen) == list(range(ds.meta.num_frames))
            groups = -(-ds.meta.num_episodes // fetch)
            assert ds.builder.fetcher.requests == groups * len(ds.meta.cameras)
            assert not list(spill.iterdir())  # spill files are unlinked as soon as they are made
        assert requests[4] < requests[1], requests
        # resumed mid-epoch (the replay decodes what was in the buffer, fetching its groups): exactly the rest
        kw = dict(return_uint8=True, virtual_shards=2, fetch_episodes=2, spill_dir=str(spill))
        ds = LeRobotStreamingDataset(url, **kw)
        items = iter(ds)
        first = [int(next(items)["index"]) for _ in range(ds.meta.num_frames // 3)]
        again = LeRobotStreamingDataset(url, **kw)
        again.load_state_dict(ds.state_dict())
        rest = []
        for item in again:
            check_item(again, item)
            rest.append(int(item["index"]))
        assert sorted(first + rest) == list(range(ds.meta.num_frames))


@pytest.mark.parametrize("block_size", [4 * 2**20, 1024])
def test_decoders_of_one_remote_file_share_what_they_read(s3, v30_h264, monkeypatch, block_size):
    """The open decoders of a remote file read through their process's `SharedReads`: a second decoder of the file
    (another pool cursor) asks storage for nothing the first one read, a file no larger than a block is fetched whole
    in one request, the frames are the local file's, and what is kept stays within its bound."""
    import torch

    from dlbench.decode.cache import VideoDecoderCache
    from dlbench.loopback.meter import MeterProcess

    isolate_s3_env(monkeypatch)
    video = max((v30_h264 / "videos").rglob("*.mp4"), key=lambda p: p.stat().st_size)
    url = f"{BUCKET_URL}/{video.relative_to(v30_h264).as_posix()}"
    times = [0.0, 0.5, 1.0]
    expected = VideoDecoderCache(1).decode(str(video), times, 30)
    with MeterProcess(s3["fast"]["endpoint_url"]) as meter:
        apply_env({**s3["fast"], "endpoint_url": meter.url})
        cache = VideoDecoderCache(4, block_size=block_size)
        start = meter.counts()["requests"]
        assert torch.equal(cache.decode(url, times, 30, cursor=0), expected)
        first = meter.counts()["requests"] - start
        assert torch.equal(cache.decode(url, times, 30, cursor=1), expected)
        assert meter.counts()["requests"] - start == first  # the second decoder's reads were all kept
    assert len(cache._entries) == 2
    if video.stat().st_size <= block_size:
        assert first == 2  # its size, then the whole file
    assert cache.shared.bytes <= max(4 * block_size, video.stat().st_size + 2**16)  # a read and a block at most


def _clean_aws_env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FSSPEC_"))}
    env.update(
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_MAX_ATTEMPTS="1",
    )
    return env


@pytest.mark.parametrize(
    "case, expected",
    [
        ("unreachable", "unreachable"),
        ("missing_bucket", "not found"),
        ("no_credentials", "no credentials"),
    ],
)
def test_bad_sources_give_one_clear_error_and_no_result(s3, tmp_path, case, expected):
    spec = dict(s3["fast"])
    if case == "unreachable":
        spec["endpoint_url"] = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    elif case == "missing_bucket":
        spec["url"] = "s3://no-such-bucket/v30"
    else:
        del spec["loopback"]  # a real bucket: credentials must come from the environment, and there are none
    env = _clean_aws_env(tmp_path)
    out = tmp_path / "report.json"
    proc = dlbench("prewarm-check", spec["url"], "--out", str(out), spec=spec, env=env)
    assert proc.returncode != 0 and not out.exists()
    assert expected in proc.stderr and spec["url"] in proc.stderr and "Traceback" not in proc.stderr
    run = tmp_path / "run"
    proc = dlbench(
        "bench-run", "--root", spec["url"], "--out-dir", str(run), "--loader", "dlbench_stream", spec=spec, env=env
    )
    assert proc.returncode != 0 and expected in proc.stderr
    assert not run.exists() or not list(run.iterdir())
    if case == "unreachable":  # a source marked on_unreachable: skip (the Hub on an offline machine) is recorded
        proc = dlbench(
            "bench-run",
            "--root",
            spec["url"],
            "--out-dir",
            str(run),
            "--loader",
            "dlbench_stream",
            "--on-unreachable",
            "skip",
            spec=spec,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
        rec = json.loads((run / "rank0of1.json").read_text())
        assert rec["status"] == "skipped" and "not reachable" in rec["reason"] and spec["url"] in rec["reason"]


def test_bandwidth_cap_holds_across_all_connections_of_a_source(s3):
    """Two downloads at once through the 16 Mbit/s proxy share the cap: together they take as long as their total
    size at 16 Mbit/s, not half that (a per-connection cap would give each its own 16 Mbit/s)."""
    import s3fs

    blob = os.urandom(1 << 20)
    fast = s3fs.S3FileSystem(endpoint_url=s3["fast"]["endpoint_url"], key="dlbench", secret="dlbench")
    fast.pipe(f"{BUCKET_URL}/blob.bin", blob)
    slow = s3fs.S3FileSystem(
        endpoint_url=s3["slow"]["endpoint_url"], key="dlbench", secret="dlbench", skip_instance_cache=True
    )
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda _: slow.cat_file(f"{BUCKET_URL}/blob.bin"), range(2)))
    elapsed = time.perf_counter() - t0
    assert got == [blob, blob]
    assert elapsed >= 0.9 * 2 * len(blob) * 8 / 16e6  # 2 MiB at 16 Mbit/s: 1.05 s


def test_the_server_listens_where_jobs_reach_it():
    assert loopback.server_host("auto", local=True) == "127.0.0.1"
    with pytest.raises(UserError, match="loopback_server.host is 127.0.0.1, which compute nodes cannot reach"):
        loopback.server_host("127.0.0.1", local=False)
    routable = loopback.routable_address()
    if routable is not None:
        assert loopback.server_host("auto", local=False) == routable and not routable.startswith("127.")
    assert loopback.server_host("10.1.2.3", local=False) == "10.1.2.3"
    with pytest.raises(UserError, match="give the one address jobs reach this machine by"):
        loopback.server_host("0.0.0.0", local=False)


def test_jobs_find_the_server_in_its_state_file(tmp_path):
    state = tmp_path / "loopback.json"
    state.write_text(json.dumps({"host": "10.1.2.3", "port": 9770}))
    assert loopback.endpoint({}, state) == "http://10.1.2.3:9770"
    assert loopback.endpoint({"port": 9771, "latency_ms": 20}, state) == "http://10.1.2.3:9771"
    with pytest.raises(UserError, match="the loopback server's address is missing"):
        loopback.endpoint({}, tmp_path / "none.json")


def test_endpoint_option_names_a_source_in_one_plain_value(tmp_path, monkeypatch):
    assert endpoint_option({"type": "s3", "endpoint_url": "http://h:9000"}) == "http://h:9000"
    assert endpoint_option({"type": "s3", "loopback": {"port": 9771, "latency_ms": 20}}) == "loopback:9771"
    assert endpoint_option({"type": "s3", "loopback": {}}) == "loopback"
    assert endpoint_option({"type": "local"}) is None
    assert spec_from_endpoint("http://h:9000") == {"type": "s3", "endpoint_url": "http://h:9000"}
    state = tmp_path / "loopback.json"
    state.write_text(json.dumps({"host": "10.0.0.5", "port": 8333}))
    monkeypatch.setattr(loopback, "STATE", state)  # the running server's address, as the workflow records it
    monkeypatch.setattr(loopback.address, "__defaults__", (None, state))
    assert spec_from_endpoint("loopback")["endpoint_url"] == "http://10.0.0.5:8333"
    assert spec_from_endpoint("loopback:9771")["endpoint_url"] == "http://10.0.0.5:9771"
    # HF storage buckets: a loopback bucket by the Hub itself or by its shaping proxy; a real one by the environment
    assert endpoint_option({"type": "bucket", "bucket": "o/n", "loopback": {}}) == "loopback-hub"
    assert endpoint_option({"type": "bucket", "loopback": {"port": 9771, "latency_ms": 20}}) == "loopback-hub:9771"
    assert endpoint_option({"type": "bucket", "bucket": "o/n"}) is None
    assert spec_from_endpoint("loopback-hub:9771") == {"type": "bucket", "hf_endpoint": "http://10.0.0.5:9771"}
    for bad in ("loopback:x", "h:9000", "loopback-hub:x"):
        with pytest.raises(UserError, match=f"--endpoint-url {bad}"):
            spec_from_endpoint(bad)


def test_loaders_name_a_server_without_range_requests(v30_h264, tmp_path):
    """MP4 indexes (and parquet footers) are read by seeking: from a server that ignores Range headers a file larger
    than one read fails with one line naming it, not fsspec's traceback. A file read whole still works."""
    from dlbench.decode.cache import VideoDecoderCache

    small = v30_h264 / "videos/observation.images.front/chunk-000/file-000.mp4"
    data = small.read_bytes()
    ftyp = int.from_bytes(data[:4], "big")
    padding = 2**20  # a 1 MB `free` box after ftyp: the demuxer must seek past it
    (tmp_path / "big.mp4").write_bytes(
        data[:ftyp] + (8 + padding).to_bytes(4, "big") + b"free" + bytes(padding) + data[ftyp:]
    )
    (tmp_path / "small.mp4").write_bytes(data)
    with plain_http_server(tmp_path) as url:
        assert VideoDecoderCache(1).decode(f"{url}/small.mp4", [0.0], 30).shape[0] == 1
        with pytest.raises(UserError, match=r"big.mp4: the server does not answer HTTP range requests"):
            VideoDecoderCache(1, block_size=4096).decode(f"{url}/big.mp4", [0.0], 30)


def _bench_args(out: Path, loader: str = "dlbench_stream", *extra: str) -> list[str]:
    return [
        "bench-run", "--root", BUCKET_URL, "--out-dir", str(out), "--loader", loader, "--num-workers", "1",
        "--batch-size", "4", "--duration-s", "3", "--warmup-s", "0", "--probe-samples", "0", *extra,
    ]  # fmt: skip


def test_max_requests_per_s_is_honoured_and_429_answers_are_retried(s3, tmp_path):
    """A server that refuses (429) over 20 requests a second, and a client that never retries by itself
    (AWS_MAX_ATTEMPTS=1): unpaced, the run still delivers every frame right because its rank's proxy sent the
    refused requests again; paced at 15 requests a second, nothing is refused and no window held more."""
    from dlbench.loopback.meter import MeterProcess

    env = {**os.environ, "AWS_MAX_ATTEMPTS": "1"}
    # episodes fetched whole, a request per file each epoch: the stream goes on requesting in its windows (reading as
    # the decoders ask, it holds the tiny set's every byte after a warm-up as long as its first batch)
    small = ("--fetch-episodes", "1")
    with MeterProcess(s3["fast"]["endpoint_url"], throttle_rps=20) as server:
        spec = {**s3["fast"], "endpoint_url": server.url}
        run = dlbench(*_bench_args(tmp_path / "run", "dlbench_stream"), *small, spec=spec, env=env)
        refused = server.counts()["throttled"]
        assert run.returncode == 0, run.stderr
        m = json.loads((tmp_path / "run" / "rank0of1.json").read_text())["metrics"]
        assert m["frames_wrong"] == 0 and refused > 0  # the server did refuse, and the proxy's resends got through
        # every request of the run went through the rank's metering proxy: requests and bytes per 1,000 delivered
        # frames, and the read amplification (bytes read over what an ideal reader needs)
        assert m["remote_requests"] >= refused and m["remote_bytes_read"] > 0 and m["remote_requests_window"] > 0
        assert m["remote_frames"] >= m["samples"] * m["frames_per_sample"]  # the run's: warm-up and windows
        assert m["remote_requests_per_kframe"] == pytest.approx(m["remote_requests"] * 1000 / m["remote_frames"])
        # a streaming reader decodes whole episodes: it reads the staged files at least once over the run and not
        # many times what an ideal reader fetches (the set is tiny: a worker keeps each file's bytes across epochs,
        # where the ideal reader fetches it again each epoch)
        assert m["remote_bytes_read"] >= 0.3 * s3["staged"]["bytes"], (m["remote_bytes_read"], s3["staged"])
        assert m["remote_read_amplification"] < 5, m["remote_read_amplification"]
        paced = dlbench(
            *_bench_args(tmp_path / "paced", "dlbench_stream"), *small, "--max-requests-per-s", "15", spec=spec, env=env
        )
        assert paced.returncode == 0, paced.stderr
        assert server.counts()["throttled"] == refused  # paced under the server's limit: nothing more refused
        m = json.loads((tmp_path / "paced" / "rank0of1.json").read_text())["metrics"]
        assert m["frames_wrong"] == 0 and m["remote_requests"] > 0 and m["remote_throttled"] == 0
        window = m["window_end_unix"] - m["window_start_unix"]
        assert m["remote_requests_window"] <= 15 * window + 1, (m["remote_requests_window"], window)


def test_seaweedfs_starts_again_when_another_process_took_one_of_its_ports(tmp_path, monkeypatch):
    """SeaweedFS's internal ports are picked free just before it starts; a process that binds one first makes it
    exit, and the server is started again on other ports instead of failing the workflow."""
    from dlbench.loopback import server

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        first = iter([taken.getsockname()[1]])  # the first internal port handed out is one another process holds
        real = server._free_port
        monkeypatch.setattr(server, "_free_port", lambda host: next(first, None) or real(host))
        state = tmp_path / "state.json"
        try:
            server.start(free_port(), [], state, tmp_path / "logs", data_dir=tmp_path / "data")
            assert "address already in use" in (tmp_path / "logs" / "seaweedfs.log").read_text()
            assert len(json.loads(state.read_text())["pids"]) == 1  # the failed start is not recorded
        finally:
            server.stop(state)


def test_a_stopped_server_started_again_on_its_data_serves_every_object(tmp_path):
    """`stop` does not wait out SeaweedFS's own 15 s shutdown (its filer waits on the S3 gateway's stream): what was
    uploaded before it is served again, byte for byte, by a server started on the same data directory."""
    import s3fs

    state, port = tmp_path / "state.json", free_port()
    data = os.urandom(3_000_000)

    def started() -> s3fs.S3FileSystem:
        loopback.start(port, [], state, tmp_path / "logs", data_dir=tmp_path / "data")
        endpoint = {"endpoint_url": f"http://127.0.0.1:{port}"}
        return s3fs.S3FileSystem(key="k", secret="s", client_kwargs=endpoint, skip_instance_cache=True)

    try:
        fs = started()
        fs.mkdir("dlbench")
        for i in range(3):
            fs.pipe(f"dlbench/o{i}", data)
        loopback.stop(state)
        assert not state.exists()
        fs = started()
        assert sorted(fs.ls("dlbench")) == [f"dlbench/o{i}" for i in range(3)]
        assert all(fs.cat(f"dlbench/o{i}") == data for i in range(3))
    finally:
        loopback.stop(state)


def test_staging_to_an_endpoint_nothing_listens_on_is_one_line_at_once(tmp_path, v30_h264):
    """Before any upload, the endpoint is tried once (botocore would retry a refused connection for 40 s): one line
    naming the URL and the endpoint, and no marker."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    spec = {"type": "s3", "url": BUCKET_URL, "endpoint_url": endpoint, "loopback": {}}
    marker = tmp_path / "staged.json"
    proc = dlbench("stage", str(v30_h264), BUCKET_URL, "--marker", str(marker), spec=spec)
    assert proc.returncode == 2 and not marker.exists() and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("dlbench stage: error: ") and f"unreachable (cannot connect to {endpoint}" in line


@_ray_marks
def test_ray_data_reads_loopback_s3_every_frame_right(s3, tmp_path):
    from .test_ray import bench, verified

    # a LeRobot delta_timestamps mode (2 instants of each of 2 cameras): Ray's read_lerobot takes it as its own
    deltas = tmp_path / "deltas.json"
    deltas.write_text(json.dumps({"cameras": [-0.1, 0.0], "action": [0.0, 0.1, 0.2]}))
    (rec,) = bench(BUCKET_URL, tmp_path / "run", "--mode", "chunk", "--delta-timestamps", str(deltas), spec=s3["fast"])
    verified(rec["metrics"], 4)
    assert rec["metrics"]["remote_requests"] > 0  # through the rank's metering proxy
