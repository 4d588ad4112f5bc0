"""The workflow on a real one-node SLURM cluster (scripts/slurm-up.sh), through profiles/slurm."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dlbench.loopback import routable_address

from .test_workflow import REPO, SNAKEMAKE, TINY, measuring_windows, with_buckets

SCRIPTS = REPO / "scripts"


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root to start munged, slurmctld and slurmd"
    if not (shutil.which("slurmctld") or shutil.which("apt-get")):
        return "SLURM is not installed and there is no apt-get to install it"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]

SLURM_TINY = {
    **TINY,
    "bench": {
        "defaults": {**TINY["bench"]["defaults"], "warmup_s": 0, "num_batches": 6, "buffer_size": 8},
        "scenarios": {
            "mmap_local": {},
            # 1 + 3 windows x 2 batches: both ranks stay inside their first epoch
            "stream_2rank": {"loader": "dlbench_stream", "ranks": 2, "num_batches": 2},
        },
    },
}


def _profile_resources() -> list[str]:
    """profiles/slurm's set-resources as CLI values (a CLI --set-resources replaces the profile's whole key), with
    bench jobs fitted to the test node's 2 CPUs."""
    profile = yaml.safe_load((REPO / "profiles/slurm/config.yaml").read_text())["set-resources"]
    profile["bench"]["cpus_per_task"] = 1
    return [f"{rule}:{key}={value}" for rule, res in profile.items() for key, value in res.items()]


FIT_NODE = [
    "--slurm-init-seconds-before-status-checks",
    "2",
    "--set-threads",
    "synth=2",
    "--set-resources",
    *_profile_resources(),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "DLBENCH_SLURM_DIR": str(state)}
    up = subprocess.run([str(SCRIPTS / "slurm-up.sh")], env=env, capture_output=True, text=True, timeout=600)
    if up.returncode != 0:
        pytest.fail(f"slurm-up.sh failed:\n{up.stdout}\n{up.stderr}")
    env["SLURM_CONF"] = str(state / "slurm.conf")
    yield env
    subprocess.run([str(SCRIPTS / "slurm-down.sh")], env=env, capture_output=True, timeout=120)


def snakemake_slurm(workdir: Path, config: dict, env: dict, *args: str, timeout: float = 900):
    (workdir / "tiny.yaml").write_text(json.dumps(config))
    return subprocess.run(
        [
            *SNAKEMAKE,
            "-d",
            str(workdir),
            "--configfile",
            str(workdir / "tiny.yaml"),
            "--profile",
            str(REPO / "profiles/slurm"),
            *args,
            *FIT_NODE,
        ],  # FIT_NODE ends in nargs="+"
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# compute nodes reach the S3 server by the submit host's routable address; without one the bucket scenario cannot run
BUCKETS = ("bucket",) if routable_address() else ()


def test_workflow_end_to_end_on_slurm(cluster, tmp_path):
    config = with_buckets(SLURM_TINY, scenarios=BUCKETS)
    proc = snakemake_slurm(tmp_path, config, cluster)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = pd.read_csv(tmp_path / "results/summary.csv")
    assert set(summary["scenario"]) == {"mmap_local", "stream_2rank", *(f"stream_{b}" for b in BUCKETS)}
    assert (summary["status"] == "ok").all() and (summary["frames_wrong"] == 0).all()
    assert (summary["frames_per_s_node"] > 0).all()
    # the jobs really went through SLURM: one sbatch log per job
    slurm_logs = list((tmp_path / "results/logs/slurm").rglob("*.log"))
    rules = {part for p in slurm_logs for part in p.parts if part.startswith("rule_")}
    assert rules >= {"rule_synth", "rule_convert_work", "rule_bench"}
    if BUCKETS:  # the bucket run read the S3 server that the submit host started, at the address in its state file
        assert "rule_stage_source" in rules
        bucket = summary.set_index("scenario").loc["stream_bucket"]
        assert bucket["status"] == "ok" and bucket["frames_wrong"] == 0 and bucket["hosts"]
        staged = (tmp_path / "results/logs/sources/stage-bucket-synthetic.log").read_text()
        assert "s3://dlbench/bucket/synthetic" in staged
    windows = measuring_windows(tmp_path / "results")
    assert len(windows) == 2 + len(BUCKETS) + 2  # bench runs, conversion timings
    for (_, end, first), (start, _, second) in zip(windows, windows[1:]):
        assert end <= start, f"{first} overlaps {second}"
    assert not rules & {"rule_run_spec", "rule_aggregate", "rule_plots"}  # glue runs where Snakemake runs
    assert len(list((tmp_path / "results/logs/slurm/rule_convert_work").rglob("*.log"))) == 2
    run_dir = tmp_path / "results/runs/stream_2rank/synthetic-dlbench_stream-single-b4-w1-cpu"
    assert json.loads((run_dir / "run.json").read_text())["launcher"] == "srun"
    recs = [json.loads((run_dir / f"rank{r}of2.json").read_text()) for r in range(2)]
    m0, m1 = recs[0]["metrics"], recs[1]["metrics"]
    assert m0["window_start_unix"] < m1["window_end_unix"] and m1["window_start_unix"] < m0["window_end_unix"]
    a, b = (set(np.load(run_dir / f"rank{r}of2.samples.npy").tolist()) for r in range(2))
    assert a and b and not a & b


def _job_running(rule: str, env: dict, timeout: float = 180) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run(["squeue", "-h", "-o", "%i|%k|%T"], env=env, capture_output=True, text=True).stdout
        for line in out.splitlines():
            jobid, comment, state = line.split("|")
            if comment.startswith(f"rule_{rule}") and state == "RUNNING":
                return jobid
        time.sleep(0.5)
    raise AssertionError(f"no running {rule} job appeared")


def test_scancel_a_convert_worker_then_rerun_completes(cluster, tmp_path):
    env = {**cluster, "DLBENCH_CONVERT_PAUSE_S": "4"}  # units take a while: time to cancel one mid-unit
    config = {
        **SLURM_TINY,
        "convert": {
            "workers": 2,
            "episodes_per_batch": 100,
            "data_file_size_in_mb": 0.004,
            "video_file_size_in_mb": 0.004,
        },
    }
    target = "results/validate/synthetic.json"
    (tmp_path / "tiny.yaml").write_text(json.dumps(config))
    first = subprocess.Popen(
        [
            *SNAKEMAKE,
            "-d",
            str(tmp_path),
            "--configfile",
            str(tmp_path / "tiny.yaml"),
            "--profile",
            str(REPO / "profiles/slurm"),
            *FIT_NODE,
            "--retries",
            "0",
            target,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    jobid = _job_running("convert_work", env)
    work = tmp_path / "results/convert/synthetic/work"
    deadline = time.time() + 120
    while not list((work / "leases").glob("*.lease")) and time.time() < deadline:
        time.sleep(0.2)
    subprocess.run(["scancel", jobid], env=env, check=True)
    out, err = first.communicate(timeout=900)
    assert first.returncode != 0, "a cancelled job must fail the run"
    assert "results/logs/convert/synthetic/work-" in err and "results/logs/slurm/rule_convert_work" in err
    manifest = json.loads((work / "manifest.json").read_text())
    # the other worker may have taken over the cancelled unit (its owner is dead); either way the rerun finishes

    again = snakemake_slurm(tmp_path, config, env, target)
    assert again.returncode == 0, again.stderr[-4000:]
    assert "rule convert_work" in again.stdout + again.stderr  # the cancelled job was submitted again
    assert len(list((work / "done").glob("*.json"))) == manifest["units"]
    report = json.loads((tmp_path / target).read_text())
    assert report["ok"] and report["frames_wrong"] == 0


def test_a_server_compute_nodes_cannot_reach_stops_before_submitting(cluster, tmp_path):
    config = with_buckets(SLURM_TINY, scenarios=("bucket",))
    config["loopback_server"]["host"] = "127.0.0.1"
    proc = snakemake_slurm(
        tmp_path, config, cluster, "results/runs/stream_bucket/synthetic-dlbench_stream-single-b4-w1-cpu"
    )
    assert proc.returncode != 0
    assert "loopback_server.host is 127.0.0.1, which compute nodes cannot reach" in proc.stderr
    assert not (tmp_path / "results/logs/slurm").exists() and not (tmp_path / "results/datasets").exists()
