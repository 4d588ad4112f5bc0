"""The workflow on a real two-node SLURM cluster (scripts/slurm-up.sh --nodes 2): each compute node a host of its
own (network and UTS namespace, own slurmd and core), the submit host running slurmctld, Snakemake and the S3 server;
and what happens when a node dies or cannot reach the server."""

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dlbench.loopback import routable_address

from .helpers import REPO, SNAKEMAKE, TINY, converted, measuring_windows, tree_bytes, with_buckets

SCRIPTS = REPO / "scripts"
SUBNET = "10.231.7"  # slurm-up.sh's bridge: the submit host is .1, node K is .1K
NODES = {"node1", "node2"}


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root to start munged, slurmctld and slurmd and the nodes' network namespaces"
    if not (shutil.which("slurmctld") or shutil.which("apt-get")):
        return "SLURM is not installed and there is no apt-get to install it"
    if not shutil.which("ip"):
        return "needs iproute2's `ip` for the nodes' network namespaces"
    return None


pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]

# many small output files: units enough for both nodes' conversion workers
SMALL_UNITS = {"data_file_size_in_mb": 0.004, "video_file_size_in_mb": 0.004}
SLURM_TINY = {
    **TINY,
    "convert": {**TINY["convert"], **SMALL_UNITS, "scaling_workers": [1], "lease_timeout_s": 10},
    "bench": {
        "defaults": {**TINY["bench"]["defaults"], "warmup_s": 0, "num_batches": 6, "buffer_size": 8},
        "scenarios": {
            "mmap_local": {},
            # one rank on each node; 1 + 3 windows x 2 batches: both ranks stay inside their first epoch
            "stream_2rank": {"loader": "dlbench_stream", "ranks": 2, "nodes": 2, "num_batches": 2},
        },
    },
}


def _profile_resources() -> list[str]:
    """profiles/slurm's set-resources as CLI values (a CLI --set-resources replaces the profile's whole key), with
    the measuring jobs fitted to the test nodes' one CPU each."""
    profile = yaml.safe_load((REPO / "profiles/slurm/config.yaml").read_text())["set-resources"]
    for rule in ("bench", "calibrate", "advice_verify"):
        profile[rule]["cpus_per_task"] = 1
    return [f"{rule}:{key}={value}" for rule, res in profile.items() for key, value in res.items()]


FIT_NODE = [
    "--slurm-init-seconds-before-status-checks",
    "2",
    "--seconds-between-status-checks",  # a finished job is seen within 2 s, not 10: each workflow here runs ~8 in turn
    "2",
    "--set-threads",
    "synth=1",
    "--set-resources",
    *_profile_resources(),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "DLBENCH_SLURM_DIR": str(state), "DLBENCH_SLURM_SUBNET": SUBNET}
    up = subprocess.run(
        [str(SCRIPTS / "slurm-up.sh"), "--nodes", "2"], env=env, capture_output=True, text=True, timeout=600
    )
    if up.returncode != 0:
        subprocess.run([str(SCRIPTS / "slurm-down.sh")], env=env, capture_output=True, timeout=120)
        pytest.fail(f"slurm-up.sh failed:\n{up.stdout}\n{up.stderr}")
    env["SLURM_CONF"] = str(state / "slurm.conf")
    yield env
    subprocess.run([str(SCRIPTS / "slurm-down.sh")], env=env, capture_output=True, timeout=120)


def snakemake_slurm(workdir: Path, config: dict, env: dict, *args: str, profile: Path = REPO / "profiles/slurm"):
    return subprocess.run(
        _command(workdir, config, profile, *args), env=env, capture_output=True, text=True, timeout=900
    )


def _command(workdir: Path, config: dict, profile: Path, *args: str) -> list[str]:
    """The workflow on the cluster; no advice verifying legs (tests/helpers.py's `snakemake` says why)."""
    (workdir / "tiny.yaml").write_text(json.dumps({"advice": {"verify": 0}, **config}))
    # FIT_NODE ends in nargs="+"
    return [
        *SNAKEMAKE,
        "-d",
        str(workdir),
        "--configfile",
        str(workdir / "tiny.yaml"),
        "--profile",
        str(profile),
        *args,
        *FIT_NODE,
    ]


def _server_on_submit_host(config: dict) -> dict:
    """Compute nodes reach the S3 server by the submit host's address: its default-route one where it has one
    (`auto`), else its address on the cluster's bridge."""
    config["loopback_server"]["host"] = "auto" if routable_address() else f"{SUBNET}.1"
    return config


def _windows_by_host(results: Path) -> dict[str, list[tuple[float, float, str]]]:
    """Every measuring window, under each host it measured on."""
    by_host: dict[str, list] = {}
    for start, end, what in measuring_windows(results):
        path = Path(what)
        if path.is_dir():  # a bench run: the hosts of its ranks
            hosts = {json.loads(p.read_text())["host"] for p in path.glob("rank*of*.json")}
        else:
            hosts = {json.loads(path.read_text())["host"]}
        for host in hosts:
            by_host.setdefault(host, []).append((start, end, what))
    return by_host


def test_workflow_end_to_end_on_two_hosts(cluster, tmp_path):
    # one remote source, the warm one: its staging, prewarm gate and run from compute nodes (the cold bucket's proxy
    # and its calibration are test_workflow's default DAG, on one host)
    config = _server_on_submit_host(with_buckets(SLURM_TINY, scenarios=("warm",)))
    # the two work jobs are then the only jobs ready after the plan (a scaling run, exclusive, could hold one node
    # until the other node's worker had done every unit), and units last long enough for both nodes to take some
    config["convert"] = {**config["convert"], "scaling_workers": []}
    env = {**cluster, "DLBENCH_CONVERT_PAUSE_S": "0.6"}
    proc = snakemake_slurm(tmp_path, config, env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = tmp_path / "results"
    summary = pd.read_csv(results / "summary.csv").set_index("scenario")
    assert set(summary.index) == {"mmap_local", "stream_2rank", "stream_warm"}
    assert (summary["status"] == "ok").all() and (summary["frames_wrong"] == 0).all()

    # every measurement ran on a compute node, never on the submit host
    records = [json.loads(p.read_text()) for p in results.glob("runs/*/*/rank*of*.json")]
    assert len(records) == 4 and {r["host"] for r in records} <= NODES
    assert socket.gethostname() not in NODES
    # the two-node run: one rank on each node, started by srun in one allocation; per node = total / 2
    two = summary.loc["stream_2rank"]
    assert two["hosts"] == "node1;node2" and two["nodes_used"] == 2
    assert two["frames_per_s_node"] == pytest.approx(two["frames_per_s_total"] / 2)
    run_dir = results / "runs/stream_2rank/synthetic-dlbench_stream-single-b4-w1-cpu"
    assert json.loads((run_dir / "run.json").read_text())["launcher"] == "srun"
    recs = [json.loads((run_dir / f"rank{r}of2.json").read_text()) for r in range(2)]
    assert [r["host"] for r in recs] == ["node1", "node2"]
    m0, m1 = recs[0]["metrics"], recs[1]["metrics"]
    assert m0["window_start_unix"] < m1["window_end_unix"] and m1["window_start_unix"] < m0["window_end_unix"]
    a, b = (set(np.load(run_dir / f"rank{r}of2.samples.npy").tolist()) for r in range(2))
    assert a and b and not a & b
    _predicted_from_one_hosts_calibration(results, two.to_dict(), run_dir.name)

    # the warm run and the prewarm check read the server on the submit host from compute nodes
    warm = json.loads((results / "prewarm/warm/synthetic.json").read_text())
    assert warm["host"] in NODES and warm["verdict"]
    staged = (results / "logs/sources/stage-warm-synthetic.log").read_text()
    assert "s3://dlbench/warm/synthetic" in staged

    # conversion: a work job on each node, leasing units from one WORK; output = a one-worker conversion's bytes
    work = results / "convert/synthetic/work"
    manifest = json.loads((work / "manifest.json").read_text())
    done = [json.loads(p.read_text()) for p in (work / "done").glob("*.json")]
    assert len(done) == manifest["units"] and {d["host"] for d in done} == NODES
    _same_as_one_worker(results, tmp_path)

    # jobs went through SLURM (glue ran where Snakemake runs), and no two measurements overlapped on one host
    slurm_logs = list((results / "logs/slurm").rglob("*.log"))
    rules = {part for p in slurm_logs for part in p.parts if part.startswith("rule_")}
    assert rules >= {"rule_synth", "rule_convert_work", "rule_bench", "rule_stage_source", "rule_prewarm_check"}
    assert not rules & {"rule_run_spec", "rule_aggregate", "rule_plots"}
    by_host = _windows_by_host(results)
    assert set(by_host) <= NODES and sum(map(len, by_host.values())) >= 4
    for windows in by_host.values():
        for (_, end, first), (start, _, second) in zip(windows, windows[1:]):
            assert end <= start, f"{first} overlaps {second}"


def _predicted_from_one_hosts_calibration(results: Path, two: dict, run_id: str) -> None:
    """The 2-node run was predicted from a calibration made on one node (a job of its own, one core), for two hosts:
    predictions.csv, summary.csv and the advice's model agree, and summary.csv's error is that prediction against
    what both hosts measured."""
    from dlbench.advice.prescribe import hosts
    from dlbench.model.calibration import Calibration
    from dlbench.model.table import predict_run

    cal = Calibration.read(results / "calibration/synthetic/local.json")
    assert cal.host in NODES and cal.cores == 1
    spec = json.loads((results / "specs/stream_2rank" / f"{run_id}.json").read_text())
    advised = predict_run(spec, cal, hosts=hosts(two))
    predicted = pd.read_csv(results / "predictions.csv").set_index(["scenario", "run_id"]).loc[("stream_2rank", run_id)]
    assert advised.frames_per_s_node == pytest.approx(predicted["predicted_frames_per_s_node"])
    assert advised.frames_per_s_node == pytest.approx(two["predicted_frames_per_s_node"])
    print(f"2-node run predicted from node {cal.host}'s calibration: {advised.frames_per_s_node:.0f} frames/s per "
          f"node against {two['frames_per_s_node']:.0f} measured ({two['prediction_error']:+.0%})")  # fmt: skip
    # no bound on the error here: the cluster's runs share two cores with the parallel tests, so what they measure
    # says how busy the suite was (docs/model.md quotes the error of this run alone: `-k end_to_end -s`)
    measured = two["frames_per_s_node"]
    assert measured > 0 and two["prediction_error"] == pytest.approx((advised.frames_per_s_node - measured) / measured)


def _job_running(comment: str, env: dict, timeout: float = 300) -> tuple[str, str]:
    """(job id, node) of the first running job whose comment (rule_<rule>_wildcards_<...>) starts with `comment`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run(["squeue", "-h", "-o", "%i|%k|%T|%N"], env=env, capture_output=True, text=True).stdout
        for line in out.splitlines():
            jobid, job_comment, state, node = line.split("|")
            if job_comment.startswith(comment) and state == "RUNNING":
                return jobid, node
        time.sleep(0.5)
    raise AssertionError(f"no running {comment} job appeared")


def kill_node(node: str, env: dict) -> None:
    """The node dies as a host would: its slurmd and every process of its jobs, at once."""
    subprocess.run([str(SCRIPTS / "slurm-down.sh"), "--node", node.removeprefix("node")], env=env, check=True)


def revive_node(node: str, env: dict) -> None:
    subprocess.run(
        [str(SCRIPTS / "slurm-up.sh"), "--node", node.removeprefix("node")], env=env, check=True, timeout=120
    )


def _same_as_one_worker(results: Path, tmp_path: Path) -> None:
    """The workflow's v3.0 output is byte for byte what one local worker makes of the same v2.1 dataset."""
    alone = subprocess.run(
        [str(Path(SNAKEMAKE[0]).parent / "dlbench"), "convert", "run", str(results / "datasets/synthetic/v21"),
         str(tmp_path / "alone"), "--work", str(tmp_path / "alone-work"), "--workers", "1",
         "--episodes-per-batch", "2", "--data-file-size-in-mb", "0.004", "--video-file-size-in-mb", "0.004"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    made = tree_bytes(results / "datasets/synthetic/v30")
    made.pop(".snakemake_timestamp", None)  # Snakemake's mark on a directory output
    assert made == tree_bytes(tmp_path / "alone")


def test_a_node_dying_under_a_conversion_worker_then_a_rerun_gives_identical_output(cluster, tmp_path):
    env = {**cluster, "DLBENCH_CONVERT_PAUSE_S": "2"}  # each file takes 2 s: the node dies mid-unit
    config = {**SLURM_TINY, "convert": {**SLURM_TINY["convert"], "scaling_workers": []}}
    target = "results/validate/synthetic.json"
    first = subprocess.Popen(
        _command(tmp_path, config, REPO / "profiles/slurm", "--retries", "0", target),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    node = None  # the node killed, while it is down
    try:
        _, node = _job_running("rule_convert_work", env)
        leases = tmp_path / "results/convert/synthetic/work/leases"
        held = None
        deadline = time.time() + 120
        while held is None and time.time() < deadline:
            for lease in leases.glob("*.lease"):
                try:
                    owner = json.loads(lease.read_text())
                except (OSError, ValueError):
                    continue  # being written, or released meanwhile
                if owner["host"] == node:
                    held = lease
            time.sleep(0.1)
        assert held is not None, f"{node} never held a unit"
        kill_node(node, env)
        unit, gen, _ = held.name.rsplit(".", 2)
        deadline = time.time() + 300
        while not (takeovers := _takeovers(leases, unit, int(gen))) and time.time() < deadline:
            time.sleep(0.5)
        assert takeovers, f"nobody took over {held.name} from the dead {node}"
        # the rest of the first run (the survivor's units at 2 s a file) is not what is tested: stopped as a user
        # would (Ctrl-C: Snakemake cancels its jobs), so the rerun also finds units a cancelled job held
        # the node comes back first: cancelling the job SLURM still counts on a down node waits for that node, so
        # Ctrl-C could outlast any timeout while the node stayed down (a fresh-clone run waited past 120 s)
        revive_node(node, env)
        node = None
        first.send_signal(signal.SIGINT)
        try:
            first.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            # Ctrl-C still cancelling after 120 s (under the suite's load, twice in fresh-clone runs): stopped as a
            # user then would, its jobs cancelled by hand
            first.kill()
            first.communicate()
            _cancel_all(env)
            # a killed Snakemake leaves its lock: what `snakemake --unlock` removes, as the user then runs
            shutil.rmtree(tmp_path / ".snakemake" / "locks", ignore_errors=True)
    finally:
        if first.poll() is None:
            first.kill()
        if node is not None:
            revive_node(node, env)

    again = snakemake_slurm(tmp_path, config, cluster, target)  # no pause: the rerun only has to finish the units
    assert again.returncode == 0, again.stderr[-4000:]
    assert json.loads((tmp_path / target).read_text())["ok"]
    _same_as_one_worker(tmp_path / "results", tmp_path)


def _cancel_all(env: dict, wait_s: float = 120.0) -> None:
    """Cancel every job of the test cluster and wait until none is left (its tests run one at a time)."""
    deadline = time.time() + wait_s
    while time.time() < deadline:
        ids = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True).stdout.split()
        if not ids:
            return
        subprocess.run(["scancel", *ids], env=env, capture_output=True)
        time.sleep(1.0)
    raise AssertionError(f"jobs left on the cluster after {wait_s:.0f} s: {ids}")


def _takeovers(leases: Path, unit: str, gen: int) -> list[Path]:
    """Leases of `unit` of a later generation than `gen`: another worker took the unit over."""
    return [p for p in leases.glob(f"{unit}.*") if int(p.name.rsplit(".", 2)[1]) > gen]


def test_ray_data_reads_on_a_ray_cluster_across_both_hosts(cluster, tmp_path, v30_h264):
    """ray_data's 2-node run: its job starts a Ray head on its first node and a worker on the other (srun), each
    rank a driver on that cluster reading its own episodes; every frame right, and no Ray process left after it."""
    from dlbench import peer
    from dlbench.report.aggregate import aggregate

    if peer.peer_python() is None:
        pytest.skip(f"LeRobot peer environment (with Ray Data) missing; create it with {peer.CREATE_COMMAND}")
    ray_run = {"loader": "ray_data", "ranks": 2, "nodes": 2, "num_batches": 2}
    config = {**converted(v30_h264, SLURM_TINY), "bench": {**SLURM_TINY["bench"], "scenarios": {"ray_2node": ray_run}}}
    run_dir = tmp_path / "results/runs/ray_2node/synthetic-ray_data-single-b4-w1-cpu"
    # the run alone: the summary's calibrations and predictions are test_workflow_end_to_end_on_two_hosts's
    proc = snakemake_slurm(tmp_path, config, cluster, str(run_dir.relative_to(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-4000:]
    row = aggregate([run_dir], None).iloc[0]
    assert row["status"] == "ok" and row["frames_wrong"] == 0 and row["frames_verified"] > 0, row.get("reason")
    assert row["hosts"] == "node1;node2" and row["nodes_used"] == 2
    assert json.loads((run_dir / "run.json").read_text())["launcher"] == "srun"
    log = (run_dir / "ray.log").read_text()
    assert "Ray runtime started" in log and log.count("Ray runtime started") == 2  # the head and node2's worker
    a, b = (set(np.load(run_dir / f"rank{r}of2.samples.npy").tolist()) for r in range(2))
    assert a and b and not a & b
    # each host's Ray workers, no rank's children, count as its rank's worker CPU (they decode every frame)
    for r in range(2):
        metrics = json.loads((run_dir / f"rank{r}of2.json").read_text())["metrics"]
        assert metrics["worker_cpu_ms_per_sample"] > 0.1, (r, metrics["worker_cpu_ms_per_sample"])
    # this job's raylets only (their sockets under the job's /tmp/ray-PORT-NODE); other tests run local Ray instances
    # at the same time. A raylet that is still exiting gets a few seconds.
    ours = ["pgrep", "-f", r"raylet/raylet .*/tmp/ray-[0-9]+-node[0-9]+/"]
    for _ in range(20):
        left = subprocess.run(ours, capture_output=True, text=True).stdout.split()
        if not left:
            break
        time.sleep(0.5)
    assert not left, f"a Ray process of the job outlived it: {left}"


def test_daft_reads_on_both_hosts_each_rank_its_own_runner(cluster, tmp_path, v30_h264):
    """daft_data's 2-node run: Daft's native runner in each rank (its runner is a process's own: no cluster to
    join, unlike Ray's), each reading its own episodes on its host; every frame right, both hosts used."""
    from dlbench import peer
    from dlbench.report.aggregate import aggregate

    if peer.peer_python() is None:
        pytest.skip(f"LeRobot peer environment (with Daft) missing; create it with {peer.CREATE_COMMAND}")
    daft_run = {"loader": "daft_data", "ranks": 2, "nodes": 2, "num_batches": 2}
    bench = {**SLURM_TINY["bench"], "scenarios": {"daft_2node": daft_run}}
    config = {**converted(v30_h264, SLURM_TINY), "bench": bench}
    run_dir = tmp_path / "results/runs/daft_2node/synthetic-daft_data-single-b4-w1-cpu"
    proc = snakemake_slurm(tmp_path, config, cluster, str(run_dir.relative_to(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-4000:]
    row = aggregate([run_dir], None).iloc[0]
    assert row["status"] == "ok" and row["frames_wrong"] == 0 and row["frames_verified"] > 0, row.get("reason")
    assert row["hosts"] == "node1;node2" and row["nodes_used"] == 2
    assert json.loads((run_dir / "run.json").read_text())["launcher"] == "srun"
    a, b = (set(np.load(run_dir / f"rank{r}of2.samples.npy").tolist()) for r in range(2))
    assert a and b and not a & b


def test_a_node_dying_under_a_bench_run_records_it_failed_and_a_rerun_redoes_only_it(cluster, tmp_path, v30_h264):
    # no second chance from SLURM or Snakemake: the run must fail
    profile = yaml.safe_load((REPO / "profiles/slurm/config.yaml").read_text())
    profile.pop("slurm-requeue")
    profile["slurm-no-requeue"] = True  # SLURM requeues batch jobs of a failed node by default (JobRequeue=1)
    profile["retries"] = 0
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile/config.yaml").write_text(yaml.safe_dump(profile))
    long_run = {"loader": "dlbench_stream", "duration_s": 12, "repeats": 1, "num_batches": 1000000}
    config = {
        **converted(v30_h264, SLURM_TINY),
        "bench": {**SLURM_TINY["bench"], "scenarios": {"mmap_local": {}, "long": long_run}},
    }
    rid = "synthetic-dlbench_stream-single-b4-w1-cpu"
    first = subprocess.Popen(
        _command(tmp_path, config, tmp_path / "profile"), env=cluster, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        jobid, node = _job_running(f"rule_bench_wildcards_long_{rid}", cluster)
        time.sleep(3)
        kill_node(node, cluster)
        _, err = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
        revive_node(node, cluster)
    assert first.returncode != 0
    assert "1 bench run(s) failed; results/failed/summary.csv lists them" in err
    results = tmp_path / "results"
    assert not (results / "summary.csv").exists()  # it would stop Snakemake from redoing the failed run
    summary = pd.read_csv(results / "failed/summary.csv").set_index("scenario")
    assert summary.loc["mmap_local", "status"] == "ok"  # the rest of the matrix finished
    assert summary.loc["long", "status"] == "failed"
    assert summary.loc["long", "reason"].startswith(f"SLURM job {jobid} on {node}: ")
    assert (results / f"failed/long/{rid}.json").exists()

    kept = (results / "runs/mmap_local/synthetic-dlbench_map-single-b4-w1-cpu/run.json").stat().st_mtime_ns
    again = snakemake_slurm(tmp_path, config, cluster, profile=tmp_path / "profile")
    assert again.returncode == 0, again.stderr[-4000:]
    summary = pd.read_csv(results / "summary.csv").set_index("scenario")
    assert (summary["status"] == "ok").all()
    assert (results / "runs/mmap_local/synthetic-dlbench_map-single-b4-w1-cpu/run.json").stat().st_mtime_ns == kept
    assert len(list((results / "logs/slurm/rule_bench").glob("mmap_local_*/*.log"))) == 1  # not redone
    assert len(list((results / "logs/slurm/rule_bench").glob(f"long_{rid}/*.log"))) == 2
    assert not (results / f"failed/long/{rid}.json").exists() and not (results / "failed/summary.csv").exists()


def test_a_node_that_cannot_reach_the_s3_server_fails_with_one_line(cluster, tmp_path, v30_h264):
    address = routable_address()
    if address is None:
        pytest.skip("the submit host has no default-route address to cut the nodes off from")
    config = with_buckets(converted(v30_h264, SLURM_TINY), ("bucket",))
    port = config["sources"]["bucket"]["loopback"]["port"]
    routes = [["ip", "-n", f"dlbench-node{k}", "route", "{}", "default", "via", f"{SUBNET}.1"] for k in (1, 2)]
    for route in routes:  # the nodes still reach the controller on the bridge, but not the submit host's address
        subprocess.run([part.format("del") for part in route], check=True)
    try:
        # the bucket's run alone: staging it is what fails (the rest of the matrix would only add jobs)
        target = "results/runs/stream_bucket/synthetic-dlbench_stream-single-b4-w1-cpu"
        proc = snakemake_slurm(tmp_path, config, cluster, "--retries", "0", target)
    finally:
        for route in routes:
            subprocess.run([part.format("add") for part in route], check=True)
    assert proc.returncode != 0
    log = (tmp_path / "results/logs/sources/stage-bucket-synthetic.log").read_text().strip().splitlines()
    assert len(log) == 1 and log[0].startswith("dlbench stage: error: ")
    assert f"{address}:{port}" in log[0] and "unreachable" in log[0]


def test_a_server_compute_nodes_cannot_reach_stops_before_submitting(cluster, tmp_path):
    config = with_buckets(SLURM_TINY, scenarios=("bucket",))
    config["loopback_server"]["host"] = "127.0.0.1"
    proc = snakemake_slurm(
        tmp_path, config, cluster, "results/runs/stream_bucket/synthetic-dlbench_stream-single-b4-w1-cpu"
    )
    assert proc.returncode != 0
    assert "loopback_server.host is 127.0.0.1, which compute nodes cannot reach" in proc.stderr
    assert not (tmp_path / "results/logs/slurm").exists() and not (tmp_path / "results/datasets").exists()
