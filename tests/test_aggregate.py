"""Aggregation, tables and plots on constructed records with known numbers."""

import json

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlbench.bench import record as recordmod
from dlbench.errors import UserError
from dlbench.report import aggregate as agg
from dlbench.report import plots

pytestmark = pytest.mark.unit


def metrics(fps, p99=10.0, hit=0.99, wrong=0, verified=100, effective=0.95, window=None, frames=1.0):
    return {
        "shuffle_effective_batch": effective,
        "shuffle_effective_window": effective if window is None else window,
        "shuffle_distinct_frames": frames,
        "shuffle_randomness": 0.9,
        "shuffle_spread": 0.8,
        "frames_per_s_node": fps,
        "samples_per_s": fps / 2,
        "first_batch_latency_s": 0.5,
        "latency_p50_ms": p99 / 4,
        "latency_p95_ms": p99 / 2,
        "latency_p99_ms": p99,
        "peak_pss_mb": 100.0 + fps,
        "cache_hit_rate": hit,
        "frames_verified": verified,
        "frames_wrong": wrong,
        "frames_barcode_checked": verified - 32 if verified else 0,
        "frames_decode_checked": 32 if verified else 0,
    }


def write_run(
    root,
    scenario,
    loader,
    fps_by_rank,
    mode="single",
    source="local",
    workers=2,
    device="cpu",
    status="ok",
    nodes=None,
    hosts=None,
    step_ms=0,
    waits=None,
    **kw,
):
    """A run directory as bench-run writes it: rank records and run.json. Rank r runs on host `hosts[r]` (default:
    the configured `nodes` hosts, one rank per node unless `nodes` is smaller)."""
    world = len(fps_by_rank)
    cfg = {
        "scenario": scenario,
        "dataset": "synthetic",
        "root": "results/datasets/synthetic/v30",
        "source": source,
        "loader": loader,
        "mode": mode,
        "batch_size": 8,
        "num_workers": workers,
        "decode_device": device,
        "ranks": world,
        "nodes": nodes or world,
        **({"step_ms": step_ms} if step_ms else {}),  # records of free-running runs may predate the key
    }
    cfg["run_id"] = agg.run_id(cfg)
    run = root / scenario / cfg["run_id"]
    run.mkdir(parents=True)
    names = []
    for rank, fps in enumerate(fps_by_rank):
        rec = recordmod.make_record(
            {**cfg, "rank": rank},
            metrics(fps, **kw) if status == "ok" else {},
            status=status if kw.get("verified", 1) else "unverified",
            reason="" if status == "ok" else "no CUDA device",
        )
        rec["host"] = hosts[rank] if hosts else f"node{rank % (nodes or world)}"
        if waits:
            rec["metrics"]["data_wait_frac"] = waits[rank]
        recordmod.write(rec, run / f"rank{rank}of{world}.json")
        names.append(f"rank{rank}of{world}.json")
    (run / "run.json").write_text(json.dumps({"ranks": names}))
    return run


@pytest.fixture
def summary(tmp_path):
    runs = [
        write_run(tmp_path, "stream_local", "dlbench_stream", [300.0]),
        write_run(tmp_path, "stream_local_2rank", "dlbench_stream", [280.0, 260.0]),  # mean 270 -> 0.9 of 300
        write_run(tmp_path, "one_node_2rank", "dlbench_stream", [280.0, 260.0], nodes=1),  # 540 on one node
        # configured for 2 nodes, but both ranks ran on one host: per node is the host's 540, and notes say so
        write_run(tmp_path, "short_of_nodes", "dlbench_stream", [280.0, 260.0], nodes=2, hosts=["vm", "vm"]),
        write_run(tmp_path, "stream_local", "lerobot_stream", [100.0]),
        write_run(tmp_path, "stream_local", "dlbench_stream", [200.0], mode="sarm"),  # below the 320 target
        write_run(tmp_path, "mmap_local", "dlbench_map", [150.0], p99=400.0, hit=0.2),  # thrash
        write_run(tmp_path, "mmap_local", "dlbench_map", [500.0], workers=4, wrong=3),  # fast but wrong frames
        write_run(tmp_path, "gpu", "dlbench_stream", [0.0], device="cuda", status="skipped"),
        write_run(tmp_path, "unchecked", "dlbench_map", [900.0], verified=0),  # fast, but nothing was checked
    ]
    return agg.aggregate(runs, tmp_path / "summary.csv", thrash={"hit_rate_below": 0.5, "p99_ms_above": 100})


def row(df, scenario, run_id_prefix, mode="single"):
    hit = df[
        (df["scenario"] == scenario) & df["run_id"].str.startswith(f"synthetic-{run_id_prefix}") & (df["mode"] == mode)
    ]
    assert len(hit) == 1
    return hit.iloc[0]


def test_per_node_means_totals_and_scaling(summary):
    two = row(summary, "stream_local_2rank", "dlbench_stream")
    assert two["frames_per_s_node"] == 270.0 and two["frames_per_s_total"] == 540.0
    assert two["samples_per_s_node"] == 135.0 and two["ranks"] == two["world_size"] == 2
    assert two["peak_pss_mb"] == 380.0  # the largest rank
    assert two["scaling_efficiency"] == pytest.approx(0.9)
    assert row(summary, "stream_local", "dlbench_stream")["scaling_efficiency"] == 1.0
    shared = row(summary, "one_node_2rank", "dlbench_stream")  # two ranks on one node: the node does both
    assert shared["nodes"] == 1 and shared["frames_per_s_node"] == shared["frames_per_s_total"] == 540.0
    assert shared["scaling_efficiency"] == pytest.approx(1.8)
    assert two["hosts"] == "node0;node1" and two["nodes_used"] == 2 and "host" not in two["notes"]
    short = row(summary, "short_of_nodes", "dlbench_stream")
    assert short["nodes"] == 2 and short["nodes_used"] == 1 and short["hosts"] == "vm"
    assert short["frames_per_s_node"] == 540.0 and short["scaling_efficiency"] == pytest.approx(1.8)
    assert "ran on 1 host(s), not the 2 nodes configured" in short["notes"]


@pytest.mark.parametrize("latencies", [True, False])
def test_repeats_give_the_median_window_and_its_spread(tmp_path, latencies):
    run = write_run(tmp_path, "stream_local", "dlbench_stream", [0.0, 0.0])  # two ranks, two hosts
    for rank, rates in enumerate(([100.0, 300.0, 200.0], [110.0, 90.0, 100.0])):  # samples/s per window
        path = run / f"rank{rank}of2.json"
        rec = json.loads(path.read_text())
        rec["metrics"].update(
            frames_per_sample=2,
            windows=[
                {
                    "start_unix": 10.0 * i,
                    "end_unix": 10.0 * i + 2,
                    "samples": int(r * 2),
                    "seconds": 2.0,
                    **({"latency_p50_ms": r / 100, "latency_p99_ms": r / 10} if latencies else {}),
                }
                for i, r in enumerate(rates)
            ],
        )
        recordmod.write(rec, path)
    df = agg.aggregate([run], tmp_path / "summary.csv")
    # per window, frames/s summed over ranks: 420, 780, 600; over 2 hosts: 210, 390, 300
    assert df.iloc[0]["frames_per_s_node"] == 300.0 and df.iloc[0]["repeats"] == 3
    assert df.iloc[0]["frames_per_s_min"] == 210.0 and df.iloc[0]["frames_per_s_max"] == 390.0
    if latencies:  # per window: p99 the slowest rank's, p50 the ranks' mean
        assert json.loads(df.iloc[0]["window_latency_p99_ms"]) == [11.0, 30.0, 20.0]
        assert json.loads(df.iloc[0]["window_latency_p50_ms"]) == [1.05, 1.95, 1.5]
    else:  # records without them (from before they were kept): empty, so compare falls back to the machine noise
        assert df.iloc[0]["window_latency_p99_ms"] == "" and df.iloc[0]["window_frames_per_s"]


def test_ratio_to_baseline_pass_fail_and_thrash(summary):
    stream = row(summary, "stream_local", "dlbench_stream")
    assert stream["ratio_to_baseline"] == pytest.approx(3.0)
    assert stream["baseline_run"] == "stream_local/synthetic-lerobot_stream-single-b8-w2-cpu"
    assert stream["pass"] and not stream["decoder_thrash"] and stream["notes"] == ""
    sarm = row(summary, "stream_local", "dlbench_stream", mode="sarm")
    assert not sarm["pass"] and "below target (200 < 320" in sarm["notes"]
    assert sarm["ratio_to_baseline"] != sarm["ratio_to_baseline"]  # NaN: no LeRobot sarm run on this source
    thrash = row(summary, "mmap_local", "dlbench_map-single-b8-w2")
    assert thrash["decoder_thrash"] and "decoder thrash" in thrash["notes"] and thrash["pass"]
    wrong = row(summary, "mmap_local", "dlbench_map-single-b8-w4")
    assert not wrong["pass"] and "3 wrong frames" in wrong["notes"]
    gpu = row(summary, "gpu", "dlbench_stream")
    assert gpu["status"] == "skipped" and not gpu["pass"] and "no CUDA device" in gpu["notes"]
    unchecked = row(summary, "unchecked", "dlbench_map")  # above target, yet nothing says its frames were right
    assert unchecked["status"] == "unverified" and not unchecked["pass"] and "unverified" in unchecked["notes"]
    assert unchecked["frames_verified"] == 0 and stream["frames_decode_checked"] == 32


def test_worker_bound_and_cold_source_notes(tmp_path):
    busy = write_run(tmp_path, "stream_bucket", "dlbench_stream", [300.0], source="bucket")  # 150 samples/s
    idle = write_run(tmp_path, "stream_local", "dlbench_stream", [300.0])
    for run, probe in ((busy, 80.0), (idle, 500.0)):  # 2 workers x 80 = 160: busy; 2 x 500: far from it
        rec = json.loads((run / "rank0of1.json").read_text())
        rec["metrics"]["probe_samples_per_s"] = probe
        (run / "rank0of1.json").write_text(json.dumps(rec))
    report = tmp_path / "bucket.json"
    report.write_text(json.dumps({"verdict": "cold"}))
    df = agg.aggregate([busy, idle], tmp_path / "summary.csv", prewarm={"bucket/synthetic": report})
    b, i = row(df, "stream_bucket", "dlbench_stream"), row(df, "stream_local", "dlbench_stream")
    assert b["worker_bound"] and not i["worker_bound"]
    assert b["source_verdict"] == "cold" and "cold source" in b["notes"] and "worker-bound" in b["notes"]
    assert not i["source_verdict"] and "cold" not in i["notes"]


def test_a_missing_or_malformed_rank_file_is_named(tmp_path):
    run = write_run(tmp_path, "s", "dlbench_stream", [100.0, 100.0])
    (run / "rank1of2.json").unlink()
    with pytest.raises(UserError, match=r"rank1of2.json: rank record missing"):
        agg.aggregate([run], tmp_path / "summary.csv")
    rec = json.loads((run / "rank0of2.json").read_text())
    rec["metrics"]["cache_hit_rate"] = 1.5
    (run / "rank1of2.json").write_text(json.dumps(rec))
    with pytest.raises(UserError, match=r"rank1of2.json: metrics/cache_hit_rate: 1.5 is greater than the maximum"):
        agg.aggregate([run], tmp_path / "summary.csv")
    del rec["metrics"]["latency_p99_ms"]
    (run / "rank1of2.json").write_text(json.dumps(rec))
    with pytest.raises(UserError, match=r"rank1of2.json: metrics: 'latency_p99_ms' is a required property"):
        agg.aggregate([run], tmp_path / "summary.csv")
    (run / "rank1of2.json").write_text("{not json")
    with pytest.raises(UserError, match=r"rank1of2.json: not a valid record"):
        agg.aggregate([run], tmp_path / "summary.csv")
    (run / "run.json").write_text('{"ranks": ')  # the run's manifest itself cut short
    with pytest.raises(UserError, match=r"run.json: malformed .*rerun its bench job"):
        agg.aggregate([run], tmp_path / "summary.csv")
    assert not (tmp_path / "summary.csv").exists()  # nothing half-written


def test_conversion_table(tmp_path):
    recs = []
    for workers, seconds in ((1, 10.0), (2, 6.0), (4, 4.0)):
        recs.append(tmp_path / f"w{workers}.json")
        recs[-1].write_text(
            json.dumps(
                {
                    "dataset": "d",
                    "workers": workers,
                    "seconds": seconds,
                    "episodes": 10,
                    "input_bytes": 40 * 2**20,
                    "output_bytes": 39 * 2**20,
                    "peak_pss_mb": 100.0 * workers,
                }
            )
        )
    table = agg.conversion_table(recs, tmp_path / "conversion.csv")
    assert table["speedup_vs_1_worker"].tolist() == [1.0, pytest.approx(1.667), 2.5]
    assert table["input_mb_per_s"].tolist() == [4.0, pytest.approx(6.667), 10.0]
    recs[0].write_text(json.dumps({"workers": 1}))
    with pytest.raises(UserError, match=r"w1.json: conversion record lacks \['seconds'"):
        agg.conversion_table(recs, tmp_path / "conversion.csv")


def test_every_plot_is_written_and_opens_as_an_image(summary, tmp_path):
    table = tmp_path / "conversion.csv"
    table.write_text("dataset,workers,seconds,speedup_vs_1_worker\nd,1,10,1.0\nd,2,6,1.667\n")
    written = plots.plot_all(tmp_path / "summary.csv", tmp_path / "plots", conversion=table)
    assert sorted(p.name for p in written) == sorted([*plots.PLOTS, "conversion.png"])
    for png in written:
        image = matplotlib.image.imread(png)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_a_plot_comparing_one_axis_is_drawn_only_where_the_matrix_varies_it(summary, tmp_path):
    """The default matrix's workers are all 2 and its steps 0: no workers or data-wait page of placeholder text;
    a scenario at another worker count brings the workers plot back, and `--only` draws what it names."""
    from dlbench.report.outputs import PLOT_NAMES, plots_for
    from dlbench.run.spec import RunSpec

    base = RunSpec(dataset="d", loader="dlbench_map")
    names = plots_for([base, RunSpec(dataset="d", loader="dlbench_stream", num_workers=4)])
    assert "workers.png" not in names and "data_wait.png" not in names and "nodes.png" not in names
    assert len(names) == len(PLOT_NAMES) - 3
    assert "workers.png" in plots_for([base, RunSpec(dataset="d", loader="dlbench_map", num_workers=4)])
    assert "data_wait.png" in plots_for([base, RunSpec(dataset="d", loader="dlbench_map", step_ms=50)])
    # two ranks at one worker beside one rank at four: neither varies alone
    mixed = [base, RunSpec(dataset="d", loader="dlbench_map", num_workers=4, ranks=2)]
    assert "workers.png" not in plots_for(mixed) and "nodes.png" in plots_for(mixed)
    written = plots.plot_all(tmp_path / "summary.csv", tmp_path / "only", only=["shuffle.png", "nodes.png"])
    assert sorted(p.name for p in written) == ["nodes.png", "shuffle.png"]
    with pytest.raises(UserError, match="--only nope.png: no such plot"):
        plots.plot_all(tmp_path / "summary.csv", tmp_path / "only", only=["nope.png"])


def test_each_run_is_compared_with_lerobot_of_its_own_kind_in_the_summary_and_the_plot(tmp_path):
    runs = [
        write_run(tmp_path, "mmap_local", "dlbench_map", [300.0]),
        write_run(tmp_path, "mmap_local", "lerobot_map", [150.0]),
        write_run(tmp_path, "stream_local", "dlbench_stream", [900.0]),
        write_run(tmp_path, "stream_local", "lerobot_stream", [100.0]),
    ]
    df = agg.aggregate(runs, tmp_path / "summary.csv")
    mapped = row(df, "mmap_local", "dlbench_map")
    assert mapped["ratio_to_baseline"] == pytest.approx(2.0)  # over lerobot_map's 150, not lerobot_stream's 100
    assert mapped["baseline_run"] == "mmap_local/synthetic-lerobot_map-single-b8-w2-cpu"
    assert row(df, "stream_local", "dlbench_stream")["ratio_to_baseline"] == pytest.approx(9.0)
    table = plots.against_baseline(df)
    assert sorted(table["ratio"].tolist()) == [pytest.approx(2.0), pytest.approx(9.0)]
    # one loader named as the baseline: every run against it
    fixed = agg.aggregate(runs, tmp_path / "fixed.csv", baseline="lerobot_stream")
    assert row(fixed, "mmap_local", "dlbench_map")["ratio_to_baseline"] == pytest.approx(3.0)
    assert sorted(plots.against_baseline(fixed)["ratio"].tolist()) == [pytest.approx(3.0), pytest.approx(9.0)]


def test_throughput_plot_lists_the_runs_it_leaves_off(summary):
    missing = sorted(plots._not_run(summary))
    assert len(missing) == 2
    assert missing[0].startswith("gpu") and "skipped" in missing[0]
    assert missing[1].startswith("unchecked") and "unverified" in missing[1]


def test_cli_prewarm_without_a_report_says_what_it_expects(tmp_path, capsys):
    from dlbench.cli import main

    run = write_run(tmp_path, "s", "dlbench_stream", [100.0])
    with pytest.raises(SystemExit) as exc:
        main(["aggregate", str(run), "--out", str(tmp_path / "summary.csv"), "--prewarm", "bucket"])
    assert exc.value.code == 2
    assert "--prewarm 'bucket': expected SOURCE=REPORT" in capsys.readouterr().err
    assert not (tmp_path / "summary.csv").exists()


def test_data_wait_of_the_slowest_rank_a_target_from_the_step_and_the_step_it_is_fed_from(tmp_path):
    """A run at a training step is judged at 90% accelerator utilization: its target is a step's batch of frames a
    node each step / 0.9, not the mode's fixed frames/s."""
    runs = [
        write_run(tmp_path, "stream_local", "dlbench_stream", [900.0], waits=[0.9]),
        write_run(tmp_path, "train_step", "dlbench_stream", [300.0, 300.0], step_ms=20, waits=[0.30, 0.10]),
        write_run(tmp_path, "train_step", "dlbench_stream", [300.0], step_ms=50, waits=[0.04]),
        write_run(tmp_path, "train_step", "lerobot_stream", [200.0], step_ms=50, waits=[0.5]),
    ]
    df = agg.aggregate(runs, tmp_path / "summary.csv")
    step = row(df, "train_step", "dlbench_stream-single-b8-w2-s20-cpu")
    assert step["step_ms"] == 20 and step["run_id"].endswith("-w2-s20-cpu")
    assert step["data_wait_frac"] == pytest.approx(0.30) and step["data_wait_frac_median"] == pytest.approx(0.20)
    # one rank a node, 8 samples of 2 frames a step of 20 ms: 800 frames/s keeps the GPU busy, 720 keeps it 90% busy
    assert step["target_frames_per_s_node"] == pytest.approx(720) and not step["pass"]
    assert "20 ms training step: 70% accelerator utilization" in step["notes"] and "below target" in step["notes"]
    assert row(df, "stream_local", "dlbench_stream")["step_ms"] == 0  # a record without the key: free-running
    at50 = row(df, "train_step", "dlbench_stream-single-b8-w2-s50-cpu")
    assert at50["ratio_to_baseline"] == pytest.approx(1.5)  # against LeRobot at the same step, not free-running
    assert at50["target_frames_per_s_node"] == pytest.approx(288) and at50["pass"]  # 300 >= 16 x 20 x 0.9
    assert "96% accelerator utilization" in at50["notes"] and "below target" not in at50["notes"]
    fed = plots.fed_from(df).set_index("loader")["fed_from_step_ms"]
    assert fed["dlbench_stream"] == 50 and "lerobot_stream" not in fed  # one step time only: no curve
    assert plots.plot_data_wait(df, tmp_path / "data_wait.png").stat().st_size > 10_000


def test_remote_cost_sums_requests_and_bytes_over_ranks_before_dividing(tmp_path):
    remote = [
        # over each rank's run: rank 0 delivered 200 frames with 50 requests, 4 MB read of 2 MB needed; rank 1: 600
        # frames, 30, 4 MB of 6 MB (the windows' samples are not what counts: fetching ahead moves requests out)
        {"samples": 50, "frames_per_sample": 2, "remote_frames": 200, "remote_requests": 50, "remote_bytes_read": 4e6,
         "remote_bytes_needed": 2e6, "remote_throttled": 1},
        {"samples": 250, "frames_per_sample": 2, "remote_frames": 600, "remote_requests": 30, "remote_bytes_read": 4e6,
         "remote_bytes_needed": 6e6, "remote_throttled": 0},
    ]  # fmt: skip
    runs = [
        write_run(tmp_path, "bucket", "dlbench_stream", [300.0, 300.0], source="bucket"),
        write_run(tmp_path, "stream_local", "dlbench_stream", [300.0]),  # not metered: empty columns
    ]
    for rank, extra in enumerate(remote):
        path = runs[0] / f"rank{rank}of2.json"
        rec = json.loads(path.read_text())
        rec["metrics"].update(extra)
        path.write_text(json.dumps(rec))
    df = agg.aggregate(runs, tmp_path / "summary.csv")
    bucket = row(df, "bucket", "dlbench_stream")
    assert bucket["remote_requests_per_kframe"] == pytest.approx(80 / 0.8)  # 80 requests over 800 frames
    assert bucket["remote_mb_per_kframe"] == pytest.approx(8 / 0.8)
    assert bucket["read_amplification"] == pytest.approx(1.0) and bucket["remote_throttled"] == 1
    assert pd.isna(row(df, "stream_local", "dlbench_stream")["remote_requests_per_kframe"])
    assert plots.plot_remote_cost(df, tmp_path / "remote_cost.png").stat().st_size > 10_000


def test_a_nodes_memory_is_its_ranks_peaks_summed_and_the_run_gives_its_largest_node(tmp_path):
    """peak_pss_mb is the largest rank's; peak_pss_node_mb sums the ranks that shared a host (they ran at once)."""
    run = write_run(tmp_path, "bucket_2node", "dlbench_stream", [300.0, 300.0, 300.0])
    for rank, (host, mb) in enumerate([("a", 700.0), ("a", 500.0), ("b", 900.0)]):
        path = run / f"rank{rank}of3.json"
        rec = json.loads(path.read_text())
        rec["host"] = host
        rec["metrics"]["peak_pss_mb"] = mb
        path.write_text(json.dumps(rec))
    got = row(agg.aggregate([run], tmp_path / "summary.csv"), "bucket_2node", "dlbench_stream")
    assert got["peak_pss_mb"] == 900.0 and got["peak_pss_node_mb"] == 1200.0


def test_remote_cost_labels_name_the_scenario_only_where_two_runs_would_share_one():
    rows = [("bucket", "bucket", "dlbench_map", 1), ("bucket_in_order", "bucket", "dlbench_map", 1)]
    rows += [("hub", "hub", "dlbench_map", 1), ("bucket", "bucket", "dlbench_map", 2)]
    df = pd.DataFrame(rows, columns=["scenario", "source", "loader", "world_size"]).assign(batch_size=16, num_workers=2)
    assert plots._remote_labels(df) == [
        "bucket · dlbench_map · b16 w2 [bucket]",
        "bucket · dlbench_map · b16 w2 [bucket_in_order]",
        "hub · dlbench_map · b16 w2",
        "bucket · dlbench_map · b16 w2 · 2 ranks",
    ]


def test_no_plot_gives_two_runs_one_label(tmp_path, monkeypatch):
    """Runs a plot's label would not tell apart (the 2-node run beside the 1-node one; auto workers resolved to the
    same count as another scenario's; two scenarios apart only in a field no label shows) read differently on every
    plot: each axis's tick labels, and each legend, name each run or group once."""
    runs = [
        write_run(tmp_path, "stream_local", "dlbench_stream", [300.0]),
        write_run(tmp_path, "stream_local_2node", "dlbench_stream", [280.0, 290.0]),
        write_run(tmp_path, "lerobot_stream", "lerobot_stream", [150.0]),
        write_run(tmp_path, "lerobot_stream_2node", "lerobot_stream", [140.0, 150.0]),
        write_run(tmp_path, "mmap_local", "dlbench_map", [400.0]),
        write_run(tmp_path, "mmap_local_maxworkers", "dlbench_map", [410.0]),  # auto, resolved to 2 workers
        write_run(tmp_path, "mmap_in_order", "dlbench_map", [390.0]),  # apart in a field the labels omit
        write_run(tmp_path, "lerobot_map", "lerobot_map", [200.0]),
        write_run(tmp_path, "mmap_w1", "dlbench_map", [250.0], workers=1),
        write_run(tmp_path, "bucket", "dlbench_map", [100.0], source="bucket"),
        write_run(tmp_path, "bucket_b", "dlbench_map", [110.0], source="bucket"),
    ]
    agg.aggregate(runs, tmp_path / "summary.csv")
    seen = {}

    def keep(fig, path):
        seen[path.name] = [
            ([t.get_text() for t in ax.get_yticklabels()], [t.get_text() for t in ax.get_legend().get_texts()])
            if ax.get_legend()
            else ([t.get_text() for t in ax.get_yticklabels()], [])
            for ax in fig.axes
        ]
        plots.plt.close(fig)
        return path

    monkeypatch.setattr(plots, "_save", keep)
    plots.plot_all(tmp_path / "summary.csv", tmp_path / "plots")
    assert set(seen) >= set(plots.PLOTS)
    for name, axes in seen.items():
        for ticks, legend in axes:
            ticks = [t for t in ticks if t]
            assert len(ticks) == len(set(ticks)), f"{name}: {ticks}"
            assert len(legend) == len(set(legend)), f"{name}: {legend}"
    baseline = [t for ticks, _ in seen["baseline.png"] for t in ticks if t]
    assert len(baseline) >= 5  # the dlbench runs beside their baselines, the 2-node ones included


def test_a_run_whose_job_died_is_listed_failed_with_its_reason_until_it_finishes(tmp_path, monkeypatch):
    from dlbench.report import failed

    # squeue knows no job: the logs speak (an empty config fails at once; a missing one is retried for 60 s)
    (tmp_path / "no-cluster.conf").touch()
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "no-cluster.conf"))

    results = tmp_path / "results"
    fine = write_run(results / "runs", "fine", "dlbench_map", [500.0])
    spec = {"scenario": "lost", "dataset": "synthetic", "root": "results/datasets/synthetic/v30", "source": "local"}
    spec |= {"loader": "dlbench_stream"}
    spec |= {"mode": "single", "batch_size": 8, "num_workers": 2, "decode_device": "cpu", "ranks": 2, "nodes": 2}
    rid = spec["run_id"] = agg.run_id(spec)
    (results / "specs/lost").mkdir(parents=True)
    (results / f"specs/lost/{rid}.json").write_text(json.dumps(spec))
    runs = [("fine", fine.name), ("lost", rid), ("never", "tried")]
    assert failed.record_missing(results, runs) == []  # no job of it left a log: not tried, not failed

    log = results / f"logs/bench/lost/{rid}.log"
    log.parent.mkdir(parents=True)
    log.write_text("rank 1: reading ...\nRuntimeError: decoder crashed\n\n")
    assert failed.record_missing(results, runs) == [results / f"failed/lost/{rid}.json"]
    rec = json.loads((results / f"failed/lost/{rid}.json").read_text())
    assert rec["status"] == "failed" and rec["reason"] == f"RuntimeError: decoder crashed; see {log}"
    slurm_log = results / f"logs/slurm/rule_bench/lost_{rid}/17.log"  # a SLURM job's log wins over the rule's
    slurm_log.parent.mkdir(parents=True)
    slurm_log.write_text("slurmstepd: error: *** JOB 17 ON node2 CANCELLED DUE TO TIME LIMIT ***\n")
    paths = failed.record_missing(results, runs)
    df = agg.aggregate([fine, *paths], tmp_path / "summary.csv").set_index("scenario")
    assert df.loc["fine", "status"] == "ok" and df.loc["lost", "status"] == "failed"
    assert df.loc["lost", "reason"] == (
        f"SLURM job 17: slurmstepd: error: *** JOB 17 ON node2 CANCELLED DUE TO TIME LIMIT ***; see {slurm_log}"
    )
    assert df.loc["lost", "world_size"] == 2

    (results / f"runs/lost/{rid}").mkdir(parents=True)  # the rerun finished it
    (results / f"runs/lost/{rid}/run.json").write_text("{}")
    (results / "failed/summary.csv").write_text("scenario\n")
    failed.clear_finished(results, runs)
    assert not paths[0].exists() and not (results / "failed/summary.csv").exists()
    assert not (results / "failed/lost").exists()


def test_a_run_below_the_shuffle_floor_does_not_pass_and_ratios_say_what_shuffle_differs(tmp_path):
    """A faster stream whose batches are worth a few items: it fails the floor (notes say which measure), and its
    ratio to the baseline says what it gave up; a stream worth as much as its baseline says nothing."""
    runs = [
        write_run(tmp_path, "s", "lerobot_stream", [100.0], effective=0.9, window=0.5),
        write_run(tmp_path, "s", "dlbench_stream", [900.0], effective=0.11, window=0.02),
        write_run(tmp_path, "t", "lerobot_stream", [100.0], effective=0.9, window=0.5),
        write_run(tmp_path, "t", "dlbench_stream", [900.0], effective=0.85, window=0.45, frames=0.95),
    ]
    floor = {"effective_batch": 0.5, "effective_window": 0.3, "distinct_frames": 0.8}
    df = agg.aggregate(runs, None, shuffle_floor=floor)
    low, fine = row(df, "s", "dlbench_stream"), row(df, "t", "dlbench_stream")
    assert not low["pass"] and fine["pass"]  # both beat the 120 target
    assert "shuffles below the floor (effective batch 0.11 < 0.5, effective window 0.02 < 0.3" in low["notes"]
    assert low["ratio_to_baseline"] == 9.0
    # in what training gets, the faster stream that shuffles less is 900 x 0.11 over 100 x 0.9: 1.1x, not 9x
    assert low["effective_frames_per_s_node"] == pytest.approx(99.0)
    assert low["effective_ratio_to_baseline"] == pytest.approx(1.1)
    assert fine["effective_ratio_to_baseline"] == pytest.approx(900 * 0.85 / 90)
    assert low["baseline_shuffle"] == "effective batch 0.11 against 0.90, effective window 0.02 against 0.50"
    assert "shuffle against its baseline" in low["notes"] and not fine["baseline_shuffle"]
    assert fine["shuffle_effective_window"] == pytest.approx(0.45) and fine["shuffle_distinct_frames"] == 0.95
    frames_floor = agg.aggregate(runs, None, shuffle_floor={**floor, "distinct_frames": 0.99})
    assert not row(frames_floor, "t", "dlbench_stream")["pass"]
    assert row(frames_floor, "t", "dlbench_stream")["notes"].count("distinct frames 0.95 < 0.99") == 1
    assert agg.aggregate(runs, None)["pass"].tolist() == df["pass"].tolist()  # the floor is on by default


def test_a_figure_too_short_to_tell_does_not_pass(tmp_path):
    """A run with too few batches for the ten-batch figure (NaN: not shown) fails the floor and says why."""
    runs = [write_run(tmp_path, "s", "dlbench_stream", [900.0], effective=0.9, window=float("nan"))]
    short = row(agg.aggregate(runs, None), "s", "dlbench_stream")
    assert not short["pass"] and "effective window not shown (too few batches)" in short["notes"]


def test_ranks_are_pooled_into_the_global_batch(tmp_path):
    """Two ranks whose batch means are each off the dataset's in opposite directions: each rank's own figure is
    low, the global batch (both ranks' batch i together) is worth its nominal size; the summary pools them."""
    import numpy as np

    rng = np.random.default_rng(0)
    base = rng.normal(size=(60, 3)) / np.sqrt(16)  # a uniform global batch of 16's projected means
    shift = np.tile([1.0, -1.0, 0.5], (60, 1))
    run = write_run(tmp_path, "r", "dlbench_stream", [100.0, 100.0], effective=0.1, window=0.05)
    for rank, sign in enumerate((1, -1)):
        path = run / f"rank{rank}of2.json"
        rec = json.loads(path.read_text())
        rec["metrics"].update(shuffle_batch_means={"numeric": (base + sign * shift).tolist()}, shuffle_batch_size=8)
        path.write_text(json.dumps(rec))
    pooled = row(agg.aggregate([run], None), "r", "dlbench_stream")
    assert pooled["shuffle_effective_batch"] == pytest.approx(1.0, abs=0.35)
    assert (
        pooled["shuffle_effective_batch_low"]
        < pooled["shuffle_effective_batch"]
        < pooled["shuffle_effective_batch_high"]
    )


def test_the_headline_table_has_a_row_a_run_rounded_with_its_verdict_and_first_reason(summary, tmp_path):
    """summary.md: one row a run in eleven columns, numbers rounded (no float's tail), a pass, a failure's first
    reason (a "; " inside parentheses kept in its note), a skipped run's reason once."""
    import re

    from dlbench.report import headline

    headline.write(summary, tmp_path / "summary.md")
    text = (tmp_path / "summary.md").read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| run ")]
    assert len(rows) == len(summary) and all(ln.count(" | ") == len(headline.COLUMNS) - 1 for ln in rows)
    assert not re.search(r"\d\.\d{3,}", text)  # rounded
    stream = next(ln for ln in rows if ln.startswith("| stream_local | dlbench_stream | ") and "| single |" in ln)
    assert "| pass |" in stream
    sarm = next(ln for ln in rows if ln.startswith("| stream_local | dlbench_stream |") and "| sarm |" in ln)
    assert "| fail: below target (200 < 320" in sarm
    gpu = next(ln for ln in rows if ln.startswith("| gpu |"))
    assert "skipped: " in gpu and "skipped: skipped" not in gpu and "no CUDA device" in gpu
    assert headline.first_reason("a (x; y); b") == "a (x; y)" and headline.first_reason("") == ""
    page = (tmp_path / "summary.html").read_text()  # the report's first entry: the same rows as HTML
    assert page.count("<tr>") == len(summary) + 1 and "no CUDA device" in page and "&lt;" not in headline.intro(summary)


def test_windows_of_two_kinds_give_what_they_delivered_in_all_and_the_row_says_what_an_item_holds(tmp_path):
    """Ray Data's windows alternate between an epoch read ahead and its restart: summary.csv's rate is what the
    windows delivered over their seconds (the rank's own record says the same), where the median would be one kind's."""
    run = write_run(tmp_path, "ray_local", "ray_data", [0.0])
    path = run / "rank0of1.json"
    rec = json.loads(path.read_text())
    kinds = [(2000, 1.0), (500, 5.0), (2000, 1.0), (500, 5.0), (2000, 1.0)]
    rec["metrics"].update(frames_per_sample=2, image_shape="96x128x3", windows=[
        {"start_unix": 10.0 * i, "end_unix": 10.0 * i + s, "samples": n, "seconds": s} for i, (n, s) in enumerate(kinds)
    ])  # fmt: skip
    recordmod.write(rec, path)
    row = agg.aggregate([run], tmp_path / "summary.csv").iloc[0]
    assert row["samples_per_s_node"] == pytest.approx(7000 / 13) and row["frames_per_s_node"] == pytest.approx(
        14000 / 13
    )
    assert row["frames_per_s_min"] == 200.0 and row["frames_per_s_max"] == 4000.0
    # what an item holds reaches summary.csv, where the advice sizes a shuffle buffer's memory from it
    from dlbench.advice.prescribe import item_bytes

    assert item_bytes(pd.read_csv(tmp_path / "summary.csv").iloc[0].to_dict()) == 96 * 128 * 3 * 2


@settings(max_examples=200, deadline=None)
@given(
    windows=st.lists(
        st.lists(st.tuples(st.floats(1.0, 5000.0), st.floats(0.2, 10.0)), min_size=3, max_size=5),
        min_size=1,
        max_size=4,
    )
)
def test_a_runs_rate_over_its_ranks_lies_within_its_windows_totals(windows):
    """However the ranks' windows differ in rate and length, the run's rate is within the range summary.csv gives
    (the windows' totals over the ranks), and for one rank it is what its windows delivered over their seconds."""
    from dlbench.bench.rates import ranks_rate, run_rate

    per_rank = [[{"samples": r * s, "seconds": s} for r, s in rank] for rank in windows]
    n = min(len(w) for w in per_rank)
    totals = np.sum([[w["samples"] / w["seconds"] for w in rank[:n]] for rank in per_rank], axis=0)
    rate = ranks_rate(per_rank, 0.05)
    assert totals.min() * (1 - 1e-9) <= rate <= totals.max() * (1 + 1e-9)
    if len(per_rank) == 1:
        assert rate == pytest.approx(run_rate(per_rank[0], 0.05))


@given(rate=st.floats(0, 1e5), effective=st.one_of(st.none(), st.just(float("nan")), st.floats(0, 3)))
def test_an_effective_rate_counts_at_most_the_nominal_batch_and_nothing_for_a_figure_not_shown(rate, effective):
    """The benchmarks' effective rate (`effective_rate`) is summary.csv's `worth` applied: capped at the nominal batch,
    and a figure not shown proves nothing."""
    got = agg.effective_rate(rate, effective)
    if effective is None or effective != effective:
        assert got == 0.0
    else:
        assert got == pytest.approx(rate * min(effective, 1.0)) and got <= rate
