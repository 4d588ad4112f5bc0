"""The whole Snakemake workflow on a tiny config, in a temporary working directory."""

import contextlib
import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
import torch

from .helpers import REPO, SNAKEMAKE, TINY, converted, free_port, measuring_windows, snakemake, with_buckets

pytestmark = pytest.mark.slow  # Snakemake in a subprocess, each parse a few seconds


@pytest.mark.slow
def test_default_dag_end_to_end(tmp_path):
    config = with_buckets({**TINY, "calibration": {"once": False}})
    dry = snakemake(tmp_path, config, "-n", "-c", "2")
    assert dry.returncode == 0, dry.stderr
    for rule in (
        "synth",
        "convert_plan",
        "convert_work",
        "convert_finalize",
        "validate_dataset",
        "bench",
        "bench_cuda",
        "stage_source",
        "prewarm_check",
        "aggregate",
        "plots",
    ):
        assert rule in dry.stdout
    proc = snakemake(tmp_path, config, "-c", "64")  # more cores than the machine has: measurements still queue
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = pd.read_csv(tmp_path / "results/summary.csv")
    assert sorted(zip(summary["scenario"], summary["run_id"])) == [
        ("gpu", "synthetic-dlbench_stream-single-b4-w1-cuda"),
        ("mmap_local", "synthetic-dlbench_map-sarm-b4-w1-cpu"),
        ("mmap_local", "synthetic-dlbench_map-single-b4-w1-cpu"),
        ("stream_2rank", "synthetic-dlbench_stream-single-b4-w1-cpu"),
        ("stream_bucket", "synthetic-dlbench_stream-single-b4-w1-cpu"),
        ("stream_warm", "synthetic-dlbench_stream-single-b4-w1-cpu"),
    ]
    assert set(summary["dataset"]) == {"synthetic"}
    for col in (
        "frames_per_s_node",
        "samples_per_s_node",
        "latency_p99_ms",
        "peak_pss_mb",
        "pass",
        "frames_per_s_min",
        "frames_per_s_max",
        "batch_interval_p99_ms",
        "hosts",
    ):
        assert col in summary.columns
    ok = summary[summary["status"] == "ok"]
    gpu_runs = int(torch.cuda.is_available())  # the cuda run measures where there is a GPU
    assert len(ok) == 5 + gpu_runs and (ok["frames_per_s_node"] > 0).all() and (ok["repeats"] == 3).all()
    assert (ok["frames_per_s_min"] <= ok["frames_per_s_node"]).all()
    assert (ok["frames_per_s_node"] <= ok["frames_per_s_max"]).all()
    assert (ok["frames_verified"] > 0).all() and (ok["frames_wrong"] == 0).all()
    assert summary.set_index("scenario").loc["stream_warm", "source_verdict"] in ("warm", "cold")
    # one measurement at a time: no two measuring windows (bench runs, conversion timings, prewarm checks) overlap
    windows = measuring_windows(tmp_path / "results")
    assert len(windows) == 5 + gpu_runs + 2 + 1
    for (_, end, first), (start, _, second) in zip(windows, windows[1:]):
        assert end <= start, f"{first} overlaps {second}"
    assert not (tmp_path / "results/sources/loopback.json").exists()  # the server stopped with the run
    gpu = summary[summary["scenario"] == "gpu"].iloc[0]
    if not torch.cuda.is_available():
        assert gpu["status"] == "skipped" and "no CUDA device" in gpu["reason"]
    assert (ok["frames_barcode_checked"] > 0).all() and (ok["frames_decode_checked"] >= 32).all()
    check_two_ranks(tmp_path / "results/runs/stream_2rank/synthetic-dlbench_stream-single-b4-w1-cpu")
    # every run predicted before it ran, from its (dataset, source) calibration; the GPU run says why not
    predictions = pd.read_csv(tmp_path / "results/predictions.csv")
    assert sorted(zip(predictions["scenario"], predictions["run_id"])) == sorted(
        zip(summary["scenario"], summary["run_id"])
    )
    cpu = summary[summary["decode_device"] == "cpu"]
    assert (cpu["predicted_frames_per_s_node"] > 0).all() and cpu["bound"].notna().all()
    assert cpu["prediction_error"].notna().all()
    assert predictions.set_index("scenario").loc["gpu", "prediction_note"] == "decoding on the GPU is not calibrated"
    advice_agrees_with_predictions(tmp_path / "results", cpu)
    calibrated_sources = ("local", "bucket", "warm")
    for source in calibrated_sources:
        cal = json.loads((tmp_path / f"results/calibration/synthetic/{source}.json").read_text())
        assert cal["costs"] and all(c["worker_s"] > 0 and c["handover_s"] > 0 for c in cal["costs"]), cal
        assert all(c["repeat_diff"] is not None for c in cal["costs"]), "the one-worker pass is measured twice"
        # a remote source measures its one-worker passes and takes the full-width one from the local calibration
        lent = [c for c in cal["costs"] if "contention from the local calibration" in c["note"]]
        assert len(lent) == (len(cal["costs"]) if source != "local" and cal["cores"] > 1 else 0), cal["costs"]
    # each pair's runs come right after its calibration (job priorities): no other pair is calibrated in between
    calibrated = {s: (tmp_path / f"results/calibration/synthetic/{s}.json").stat().st_mtime for s in calibrated_sources}
    for _, run in cpu.iterrows():
        own = calibrated[run["source"]]
        between = [s for s, t in calibrated.items() if own < t < run["window_start_unix"]]
        assert own < run["window_start_unix"] and not between, (run["scenario"], run["source"], between)
    for png in (
        "throughput",
        "latency",
        "decode_device",
        "cache_vs_p99",
        "conversion",
        "prediction",
    ):
        assert (tmp_path / f"results/plots/{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every run takes one worker and no step, and the 2-rank run has no 1-rank twin: those plots would be placeholders
    assert not (tmp_path / "results/plots/workers.png").exists()
    assert not (tmp_path / "results/plots/nodes.png").exists()
    assert not (tmp_path / "results/plots/data_wait.png").exists()
    conversion = pd.read_csv(tmp_path / "results/tables/conversion.csv")
    assert conversion["workers"].tolist() == [1, 2] and (conversion["episodes"] == 8).all()
    assert conversion["speedup_vs_1_worker"].iloc[0] == 1.0 and (conversion["peak_pss_mb"] > 0).all()
    report = snakemake(tmp_path, TINY, "--report", "report.html")
    assert report.returncode == 0, report.stderr[-2000:]
    html = (tmp_path / "report.html").read_text()
    assert "summary.csv" in html and "summary.html" in html and "conversion.csv" in html and "cache_vs_p99.png" in html
    for log in ("synth/synthetic.log", "convert/synthetic/finalize.log", "aggregate.log"):
        assert (tmp_path / "results/logs" / log).exists()
    for col in ("shuffle_effective_batch", "shuffle_effective_window", "shuffle_distinct_frames"):
        assert col in summary.columns and (ok[col].dropna() > 0).all()
    # a run removed by hand is measured again, and the summary remade; the old one kept aside
    shutil.rmtree(tmp_path / "results/runs/mmap_local")
    again = snakemake(tmp_path, config, "-n", "-c", "2", "results/summary.csv")
    assert again.returncode == 0 and "bench" in again.stdout and "aggregate" in again.stdout, again.stdout[-2000:]
    assert (tmp_path / "results/summary.stale.csv").exists()


def check_two_ranks(run_dir: Path) -> None:
    """Both rank files exist, ran at the same time, read disjoint samples, and every metric is sane."""
    records = [json.loads((run_dir / f"rank{r}of2.json").read_text()) for r in range(2)]
    assert [r["rank"] for r in records] == [0, 1] and {r["world_size"] for r in records} == {2}
    assert len({r["config_digest"] for r in records}) == 1
    samples = [set(np.load(run_dir / f"rank{r}of2.samples.npy").tolist()) for r in range(2)]
    assert samples[0] and samples[1] and not samples[0] & samples[1]
    m0, m1 = (r["metrics"] for r in records)
    assert m0["window_start_unix"] < m1["window_end_unix"] and m1["window_start_unix"] < m0["window_end_unix"]
    for m in (m0, m1):
        assert (
            m["frames_wrong"] == 0
            and m["frames_barcode_checked"] == (m["samples"] + m["warmup_samples"]) * m["frames_per_sample"] > 0
        )
        assert 0 <= m["latency_p50_ms"] <= m["latency_p95_ms"] <= m["latency_p99_ms"]
        assert 0.0 <= m["cache_hit_rate"] <= 1.0 and m["cache_hits"] + m["cache_misses"] > 0
        assert m["peak_pss_mb"] > 0 and m["first_batch_latency_s"] > 0 and m["samples_per_s"] > 0
        assert m["shuffle_randomness"] > 0.2 and m["repeats"] >= 1 and m["num_cameras"] == 1 and m["fps"] == 30
        assert m["probe_samples_per_s"] > 0 and m["probe_decode_ms"] >= 0
        assert m["worker_start_method"] == "fork"  # a local source leaves no thread running before the workers start
    for r in range(2):
        assert (run_dir / f"rank{r}of2.csv").read_text().startswith("schema_version,")


@pytest.mark.slow
def test_killed_bench_job_leaves_no_result_and_rerun_produces_it(tmp_path, v30_h264):
    config = {**converted(v30_h264), "bench": {"defaults": {**TINY["bench"]["defaults"], "duration_s": 30},
                                               "scenarios": {"long": {}}}}  # fmt: skip
    proc = snakemake(tmp_path, config, "-c", "2", "results/validate/synthetic.json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    target = "results/runs/long/synthetic-dlbench_map-single-b4-w1-cpu"
    run_dir = tmp_path / target
    cfg = tmp_path / "tiny.yaml"
    job = subprocess.Popen(
        [*SNAKEMAKE, "-d", str(tmp_path), "--configfile", str(cfg), "-c", "2", target],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while not run_dir.exists() and time.time() < deadline:  # the launcher creates it as the job starts
        time.sleep(0.2)
    time.sleep(8)  # start-up and warm-up done: inside the 30 s steady window
    bench = [p for p in psutil.Process(job.pid).children(recursive=True) if "bench-run" in " ".join(p.cmdline())]
    assert bench, "the bench job should be running"
    for p in bench[0].children(recursive=True) + bench:  # the job dies as if OOM-killed
        with contextlib.suppress(psutil.NoSuchProcess):  # a short-lived child may end between listing and kill
            p.kill()
    assert job.wait(timeout=120) != 0  # Snakemake reports the failed job
    assert not (run_dir / "rank0of1.json").exists() and not (run_dir / "run.json").exists()
    proc = snakemake(
        tmp_path,
        {**config, "bench": {**config["bench"], "defaults": {**config["bench"]["defaults"], "duration_s": 2}}},
        "-c",
        "2",
        "--rerun-incomplete",
        target,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (run_dir / "rank0of1.json").exists() and (run_dir / "run.json").exists()


def test_a_loopback_server_that_cannot_start_stops_the_run_before_any_job(tmp_path):
    config = with_buckets(TINY)
    port = config["loopback_server"]["port"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        proc = snakemake(
            tmp_path, config, "-c", "2", "results/runs/stream_bucket/synthetic-dlbench_stream-single-b4-w1-cpu"
        )
    assert proc.returncode != 0
    assert f"port {port} on 127.0.0.1 is taken; pick another port in config.yaml" in proc.stderr
    assert not (tmp_path / "results/datasets").exists() and not (tmp_path / "results/specs").exists()


@pytest.mark.parametrize(
    "bad, message",
    [
        (
            {"bench": {"scenarios": {"s": {"mode": "fast"}}}},
            r"bench.scenarios.s.mode: 'fast' is neither single, sarm nor a key of modes: \[\]; define it under modes:",
        ),
        ({"convert": {"wrokers": 2}}, r"convert: unknown key\(s\) \['wrokers'\]; allowed keys: .*workers"),
        ({"datasets": {"d": {"synth": {"codec": "vp9"}}}}, r"datasets.d.synth.codec: 'vp9' is not allowed"),
        ({"dataset": {"synth": {}}}, r"dataset: replaced by `datasets:`"),
        (
            {"datasets": {"d": {"synth": {}, "v21": "/x"}}},
            r"datasets.d: give exactly one of synth, v21, v30, reencode \(found synth, v21\)",
        ),
        ({"datasets": {"d": {"v30": "/no/such/dataset"}}}, r"datasets.d.v30: /no/such/dataset does not exist"),
        (
            {"bench": {"scenarios": {"s": {"dataset": "nope"}}}},
            r"bench.scenarios.s.dataset: 'nope' is not a configured dataset",
        ),
        (
            {"sources": {"local": {"type": "local", "url": "/data/mine"}}},
            r"sources.local.url: a local source does not use url \(it reads each dataset where it lives; "
            r"to benchmark your own",
        ),
        (
            {"sources": {"hub": {"type": "hub", "repo_id": "a/b"}}},
            r"sources.hub.repo_id: a hub source does not use repo_id \(it is the loopback Hub .* a repo on the real "
            r"Hub is a dataset",
        ),
        (
            {"bench": {"scenarios": {"s": {"loader": "torch_magic"}}}},
            r"bench.scenarios.s.loader: 'torch_magic' is not allowed",
        ),
        (
            {"bench": {"scenarios": {"s": {"source": "ftp"}}}},
            r"bench.scenarios.s.source: 'ftp' is not a configured source",
        ),
        (
            {"bench": {"scenarios": {"s": {"loader": "lerobot_map", "decode_device": "cuda"}}}},
            r"bench.scenarios.s: loader lerobot_map decodes on the CPU only",
        ),
        (
            {"bench": {"scenarios": {"s": {"ranks": 2, "nodes": 3}}}},
            r"bench.scenarios.s: nodes \(3\) must not exceed ranks",
        ),
    ],
)
def test_invalid_config_names_the_key(tmp_path, bad, message):
    import re

    proc = snakemake(tmp_path, bad, "-n", "-c", "1")
    assert proc.returncode != 0
    assert re.search(message, proc.stderr + proc.stdout), proc.stderr


def test_lint_is_clean():
    proc = subprocess.run([*SNAKEMAKE, "--lint", "-d", str(REPO)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "configfiles",
    [
        ["config.yaml"],
        ["config/full.yaml"],
        ["config/realistic.yaml"],
        ["config/realistic.yaml", "config/lerobot-versions.yaml"],
    ],  # fmt: skip
    ids=["default", "full", "realistic", "realistic+lerobot-versions"],
)
def test_the_shipped_configs_plan_every_rule_they_need(tmp_path, configfiles):
    """`snakemake -n` on each config the repository ships plans every rule they need, without a traceback (the Lance
    copy's staging marker also matched the v3.0 staging rule, whose input function then printed a KeyError)."""
    files = [str(REPO / f) for f in configfiles]
    cmd = [*SNAKEMAKE, "-d", str(tmp_path), "-n", "-c", "2", "--configfile", *files, "--replace-workflow-config"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    for rule in ("synth", "lance_convert", "stage_lance", "stage_source", "bench", "aggregate"):
        assert f"rule {rule}:" in proc.stdout or f"localrule {rule}:" in proc.stdout, rule


def test_calibration_once_reaches_every_calibration_and_the_default_measures_twice(tmp_path):
    """config `calibration: {once: true}` passes --once to the calibration of each source; the schema's default does
    not (each one-worker pass measured again, for drift)."""
    targets = ["results/calibration/synthetic/local.json", "results/calibration/synthetic/bucket.json"]
    config = {key: value for key, value in with_buckets(TINY, scenarios=("bucket",)).items() if key != "calibration"}
    for once in (True, False):
        given = {**config, "calibration": {"once": True}} if once else config
        proc = snakemake(tmp_path, given, "-n", "-p", "-c", "1", *targets)
        assert proc.returncode == 0, proc.stderr[-3000:]
        calls = [line for line in proc.stdout.splitlines() if "dlbench -q calibrate" in line]
        assert len(calls) == 2 and {"--source local" in c for c in calls} == {True, False}, proc.stdout[-3000:]
        assert all(("--once" in c) == once for c in calls)


def test_a_specific_target_plans_only_what_it_needs(tmp_path):
    proc = snakemake(tmp_path, TINY, "-n", "-c", "2", "results/plots/throughput.png")
    assert proc.returncode == 0, proc.stderr
    assert "rule bench:" in proc.stdout and "rule aggregate:" in proc.stdout
    assert "convert_scaling" not in proc.stdout and "plot_conversion" not in proc.stdout
    proc = snakemake(tmp_path, TINY, "-n", "-c", "2", "results/tables/conversion.csv")
    assert proc.returncode == 0, proc.stderr
    assert "convert_scaling" in proc.stdout and "rule bench:" not in proc.stdout


@pytest.mark.parametrize(
    "kind, fixture, message",
    [
        ("v21", "v30_h264", r"datasets.mine.v21: .* holds a 'v3.0' dataset, not v2.1; list it as v30: "),
        ("v30", "v21_h264", r"datasets.mine.v30: .* holds a 'v2.1' dataset, not v3.0; list it as v21: "),
    ],
)
def test_a_dataset_of_the_wrong_version_names_the_key(tmp_path, request, kind, fixture, message):
    import re

    path = str(request.getfixturevalue(fixture))
    proc = snakemake(tmp_path, {"datasets": {"mine": {kind: path}}}, "-n", "-c", "1")
    assert proc.returncode != 0 and re.search(message, proc.stderr + proc.stdout), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_your_own_datasets_through_the_dag(tmp_path, v21_h264, lerobot_recorded_v30):
    """A v2.1 dataset on disk is converted and a v3.0 dataset written by LeRobot's own recorder is read where it
    is; both are benchmarked beside LeRobot's loader, every run checked against an independent decode, and no
    synthetic dataset is made."""
    import shutil

    from dlbench.format import meta

    v21 = tmp_path / "their_v21"
    shutil.copytree(v21_h264, v21)  # not marked synthetic: only the independent check can verify it
    meta.write_info(v21, {**meta.read_info(str(v21)), "robot_type": "their_robot"})
    config = {
        "datasets": {"mine21": {"v21": str(v21)}, "recorded": {"v30": str(lerobot_recorded_v30)}},
        "convert": {"workers": 1, "episodes_per_batch": 4},
        "bench": {
            "defaults": {
                "batch_size": 4,
                "num_workers": 1,
                "duration_s": 1,
                "warmup_s": 0.3,
                "repeats": 1,  # what is checked is each run's frames, not its spread
                "probe_samples": 2,
                "check_frames": 8,
            },
            "scenarios": {"mine": {"dataset": ["mine21", "recorded"], "loader": ["dlbench_map", "lerobot_map"]}},
        },
    }
    from dlbench.report.aggregate import aggregate

    (tmp_path / "wd").mkdir()
    # the bench jobs and what they need (conversion, validation), summarised by the function the aggregate rule
    # runs: calibrating a dataset and predicting its runs is test_default_dag_end_to_end's
    proc = snakemake(tmp_path / "wd", config, "-c", "2", "--until", "bench")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "wd/results/calibration").exists()
    summary = aggregate(sorted((tmp_path / "wd/results/runs").glob("*/*")), None)
    assert sorted(summary["run_id"]) == [
        "mine21-dlbench_map-single-b4-w1-cpu",
        "mine21-lerobot_map-single-b4-w1-cpu",
        "recorded-dlbench_map-single-b4-w1-cpu",
        "recorded-lerobot_map-single-b4-w1-cpu",
    ]
    assert (summary["status"] == "ok").all(), summary[["run_id", "status", "reason"]]
    assert (summary["frames_decode_checked"] >= 16).all() and (summary["frames_barcode_checked"] == 0).all()
    assert (summary["frames_wrong"] == 0).all()
    ratio = summary.set_index("run_id")["ratio_to_baseline"]  # by default against LeRobot's loader of the same kind
    assert ratio["recorded-lerobot_map-single-b4-w1-cpu"] == 1.0 and ratio["recorded-dlbench_map-single-b4-w1-cpu"] > 0
    assert meta.read_info(str(tmp_path / "wd/results/datasets/mine21/v30"))["codebase_version"] == "v3.0"
    assert not (tmp_path / "wd/results/datasets/synthetic").exists()
    assert not (tmp_path / "wd/results/datasets/recorded").exists()  # read where it is, nothing copied
    valid = json.loads((tmp_path / "wd/results/validate/recorded.json").read_text())
    assert valid["ok"] and valid["frames_decoded"] > 0


def _few(episodes: int, cameras: int) -> dict:
    """A synthetic dataset of a handful of short episodes (what a user tries first)."""
    cams = [{"key": f"observation.images.cam{k}", "height": 32, "width": 32} for k in range(cameras)]
    return {"synth": {"episodes": episodes, "length_min": 10, "length_max": 20, "cameras": cams}}


FEW = {
    "datasets": {"few3": _few(3, 1), "few6": _few(6, 2)},
    "convert": {"workers": 1, "episodes_per_batch": 2},
    "bench": {
        # 8 batches of 4 cross an epoch on every rank: a rank that runs out starts its next epoch (one window: what
        # is checked here is each run's end, not its spread)
        "defaults": {
            "batch_size": 4,
            "num_batches": 8,
            "duration_s": 5,
            "warmup_s": 0,
            "repeats": 1,
            "probe_samples": 0,
        },
        "scenarios": {
            # one camera, more workers than episodes: every loader
            "few_1rank": {
                "dataset": "few3",
                "loader": ["dlbench_stream", "dlbench_map", "lerobot_stream", "lerobot_map"],
                "num_workers": 4,
            },
            # two cameras (LeRobot's loaders read several cameras in test_lerobot_interop)
            "few_1rank_2cam": {"dataset": "few6", "loader": ["dlbench_stream", "dlbench_map"], "num_workers": 4},
            "few_2rank": {
                "dataset": "few3",
                "loader": ["dlbench_stream", "dlbench_map"],
                "num_workers": [0, 4],
                "ranks": 2,
            },
            # LeRobot's map loader over 2 ranks x 4 workers (its own loader splits the 3 episodes' frames)
            "few_2rank_lerobot": {"dataset": "few3", "loader": "lerobot_map", "num_workers": 4, "ranks": 2},
            # the case that died in warm-up: 6 episodes, 2 ranks, batch 8, 1 worker
            "few_2rank_b8": {
                "dataset": "few6",
                "loader": "dlbench_stream",
                "batch_size": 8,
                "num_workers": 1,
                "ranks": 2,
            },
        },
    },
}


@pytest.mark.slow
def test_a_handful_of_episodes_runs_every_loader_with_more_workers_than_episodes(tmp_path):
    """3 and 6 episodes, one camera and two, ranks 1-2, workers 0-4: every run ends with its frames verified, and a
    stream with more ranks x workers than episodes says how many workers have work. The bench jobs only (`--until
    bench`): calibrating sets this small is test_your_own_datasets_through_the_dag's."""
    from dlbench import peer
    from dlbench.report.aggregate import aggregate

    config = FEW
    if peer.peer_python() is None:  # without LeRobot's environment its runs are recorded as skipped, with the reason
        config = json.loads(json.dumps(FEW))
        config["bench"]["scenarios"]["few_1rank"]["loader"] = ["dlbench_stream", "dlbench_map"]
        del config["bench"]["scenarios"]["few_2rank_lerobot"]
    proc = snakemake(tmp_path, config, "-c", "2", "--until", "bench")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "results/calibration").exists()
    summary = aggregate(sorted((tmp_path / "results/runs").glob("*/*")), None)
    scenarios = config["bench"]["scenarios"]
    assert len(summary) == len(scenarios["few_1rank"]["loader"]) + 2 + 2 * 2 + 1 + ("few_2rank_lerobot" in scenarios)
    assert (summary["status"] == "ok").all(), summary[["run_id", "status", "reason"]].to_string()
    assert (summary["frames_verified"] > 0).all() and (summary["frames_wrong"] == 0).all()
    stream = summary[summary["loader"] == "dlbench_stream"].set_index(["scenario", "num_workers"])
    # 3 episodes over 2 ranks x 4 workers: 2 + 1 workers have one each; said in notes
    assert stream.loc[("few_2rank", 4), "busy_workers"] == 3
    assert all(f"{n} of 4 DataLoader workers" in stream.loc[("few_2rank", 4), "notes"] for n in (1, 2))
    assert stream.loc[("few_2rank", 0), "busy_workers"] == 2 and "DataLoader workers have" not in str(
        stream.loc[("few_2rank", 0), "notes"]
    )
    assert stream.loc[("few_2rank_b8", 1), "busy_workers"] == 2


def with_hf_buckets(config: dict) -> dict:
    """`config` plus the default config's bucket legs, on the loopback Hub: a cold HF storage bucket behind a shaping
    proxy, a warm one gated on the prewarm check, and the cold one at 2 nodes; each read by dlbench's stream and
    LeRobot's (repo_type="bucket")."""
    sources = {
        "local": {"type": "local"},
        "bucket": {
            "type": "bucket",
            "bucket": "dlbench/cold",
            "stage": True,
            "loopback": {"port": free_port(), "latency_ms": 5, "bandwidth_mbps": 400},
        },
        "warmed_bucket": {
            "type": "bucket",
            "bucket": "dlbench/warm",
            "stage": True,
            "loopback": {},
            "require_warm": True,
            "prewarm": {"files": 4, "range_mb": 1, "ttfb_ms_max": 50, "mbps_min": 50},
        },
    }
    stream = {"loader": ["dlbench_stream", "lerobot_stream"], "num_batches": 6, "buffer_size": 8}
    scenarios = {
        "stream_bucket": {**stream, "source": "bucket"},
        "stream_warmed_bucket": {**stream, "source": "warmed_bucket"},
        "stream_bucket_2node": {**stream, "source": "bucket", "ranks": 2, "nodes": 2},
    }
    return {
        **config,
        "loopback_server": {"port": free_port(), "hub_port": free_port()},
        "sources": sources,
        "bench": {**config["bench"], "scenarios": scenarios},
    }


@pytest.mark.slow
def test_bucket_legs_on_the_loopback_hub_with_lerobot_beside_dlbench(tmp_path, v30_h264_one_file):
    """The default config's bucket, warmed-bucket and 2-node legs as HF storage buckets on the loopback Hub: one row
    per loader and leg, LeRobot's streaming loader beside dlbench's, each with its ratio to LeRobot's and its remote
    cost; the warm bucket measured warm."""
    from dlbench import peer

    if peer.peer_python() is None:
        pytest.skip(f"LeRobot peer environment missing; create it with {peer.CREATE_COMMAND}")
    from dlbench.report.aggregate import aggregate
    from dlbench.report.plots import plot_remote_cost

    # the bench jobs only (`--until bench`): the remote calibrations, summary.csv and the plot rules are
    # test_default_dag_end_to_end's; here what the legs give is summarised and plotted by the same functions
    proc = snakemake(tmp_path, with_hf_buckets(converted(v30_h264_one_file)), "-c", "2", "--until", "bench")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "results/calibration").exists()
    prewarm = {"warmed_bucket/synthetic": tmp_path / "results/prewarm/warmed_bucket/synthetic.json"}
    summary = aggregate(sorted((tmp_path / "results/runs").glob("*/*")), None, prewarm=prewarm)
    (tmp_path / "results/plots").mkdir()
    plot_remote_cost(summary, tmp_path / "results/plots/remote_cost.png")
    assert sorted(zip(summary["scenario"], summary["loader"])) == [
        (scenario, loader)
        for scenario in ("stream_bucket", "stream_bucket_2node", "stream_warmed_bucket")
        for loader in ("dlbench_stream", "lerobot_stream")
    ]
    assert (summary["status"] == "ok").all(), summary[["scenario", "loader", "status", "reason"]]
    assert (summary["frames_wrong"] == 0).all() and (summary["frames_verified"] > 0).all()
    assert (summary["remote_requests_per_kframe"] > 0).all() and (summary["remote_mb_per_kframe"] > 0).all()
    ours = summary[summary["loader"] == "dlbench_stream"]
    assert (ours["ratio_to_baseline"] > 0).all() and ours["baseline_run"].str.contains("lerobot_stream").all()
    theirs = summary[summary["loader"] == "lerobot_stream"]
    assert theirs["notes"].str.contains("meta/ placed in LeRobot's bucket cache").all()
    assert summary.set_index(["scenario", "loader"]).loc[("stream_bucket_2node", "lerobot_stream"), "world_size"] == 2
    assert (summary.set_index("scenario").loc["stream_warmed_bucket", "source_verdict"] == "warm").all()
    assert (tmp_path / "results/plots/remote_cost.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "results/sources/loopback.json").exists()  # the servers stopped with the run


def test_a_reencoded_dataset_is_benchmarked_beside_its_source_and_its_encoding_measured(tmp_path):
    """A `reencode` dataset of a synthetic one: made by the DAG, validated, benchmarked with every delivered frame's
    barcode checked, and set beside its source in encodings.csv (quality, bytes, decode rates) and its plot."""
    config = {
        "datasets": {
            "tiny": {"synth": {"episodes": 3, "length_min": 30, "length_max": 40}},
            "tiny_hevc": {"reencode": {"from": "tiny", "codec": "hevc", "gop": 5, "crf": 20}},
        },
        "convert": {"workers": 1, "scaling_workers": []},
        "bench": {
            "defaults": {
                "batch_size": 4,
                "num_workers": 1,
                "duration_s": 1,
                "warmup_s": 0.3,
                "repeats": 1,
                "probe_samples": 0,
                "check_frames": 8,
            },  # fmt: skip
            "scenarios": {"enc": {"dataset": ["tiny", "tiny_hevc"], "loader": ["dlbench_map"], "num_workers": 0}},
        },
        "advice": {"verify": 1, "legs": 1, "leg_s": 0.5},
        "calibration": {"once": True},
    }
    proc = snakemake(tmp_path, config, "-c", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = pd.read_csv(tmp_path / "results/summary.csv").set_index("dataset")
    assert (summary["status"] == "ok").all() and (summary["frames_wrong"] == 0).all()
    run = tmp_path / "results/runs/enc/tiny_hevc-dlbench_map-single-b4-w0-cpu/rank0of1.json"
    m = json.loads(run.read_text())["metrics"]
    assert m["frames_barcode_checked"] == (m["samples"] + m["warmup_samples"]) * m["frames_per_sample"] > 0
    table = pd.read_csv(tmp_path / "results/tables/encodings.csv").set_index("dataset")
    assert sorted(table.index) == ["tiny", "tiny_hevc"]
    assert table.loc["tiny_hevc", "codec"] == "hevc" and table.loc["tiny_hevc", "keyframe_interval"] <= 5
    assert table.loc["tiny_hevc", "psnr_db"] > 35 and table.loc["tiny_hevc", "bytes_vs_source"] > 0
    assert (tmp_path / "results/plots/encodings.png").stat().st_size > 10_000
    advice = (tmp_path / "results/advice.md").read_text()  # a section per run: its time split, bound and changes
    assert advice.count("\n## ") == 2 and advice.count("a worker's ") == 2
    # one process for all: its workers prescribed, the largest predicted gain run beside it on this machine
    verified = pd.read_csv(tmp_path / "results/advice/verified.csv")
    # the largest predicted gain: more workers, or the re-encoded set where it measured faster still
    assert len(verified) == 1 and verified.iloc[0]["change"].startswith(("num_workers: ", "dataset: tiny_hevc"))
    assert verified.iloc[0]["verdict"] in advice and "1 alternating legs each" in advice


def advice_agrees_with_predictions(results, runs: pd.DataFrame) -> None:
    """The advice's model of each run (its spec, its calibration, the hosts it ran on) is predictions.csv's."""
    from dlbench.advice.prescribe import _run, hosts
    from dlbench.model.calibration import Calibration
    from dlbench.model.table import predict_run

    for r in runs.to_dict("records"):
        spec = json.loads((results / f"specs/{r['scenario']}/{r['run_id']}.json").read_text())
        cal = Calibration.read(results / f"calibration/{r['dataset']}/{r['source']}.json")
        advised = predict_run(_run(r, spec), cal, hosts=hosts(r))
        assert advised.frames_per_s_node == pytest.approx(r["predicted_frames_per_s_node"]), r["run_id"]
