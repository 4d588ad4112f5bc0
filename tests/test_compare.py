"""`dlbench compare`: the verdict rules on hand-made summaries, then real runs (a run against itself; a long-GOP
re-encode) and the workflow's `compare_to`."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dlbench.cli import main
from dlbench.convert.run import run as convert_run
from dlbench.report.compare import KEY, METRICS, compare, judge, permutation_p

from .helpers import synth_cached, tiny_config

pytestmark = pytest.mark.unit

FPS = METRICS[0]
ENV = {"dlbench": "0.1.0", "torch": "2.11.0", "torchcodec": "0.11.1", "ffmpeg": "5.1", "python": "3.12.1"}


def summary_row(windows, scenario="s", loader="dlbench_map", env=None, **kw) -> dict:
    """A summary.csv row as `dlbench aggregate` writes it, with frames/s windows `windows`."""
    w = np.asarray(windows, dtype=float)
    return {
        "scenario": scenario,
        "run_id": f"d-{loader}-single-b8-w0-cpu",
        "dataset": "d",
        "source": "local",
        "loader": loader,
        "mode": "single",
        "batch_size": 8,
        "num_workers": 0,
        "decode_device": "cpu",
        "step_ms": 0,
        "world_size": 1,
        "nodes": 1,
        "hosts": "vm",
        "status": "ok",
        "repeats": len(w),
        "frames_per_s_node": float(np.median(w)),
        "frames_per_s_min": w.min(),
        "frames_per_s_max": w.max(),
        "window_frames_per_s": json.dumps(list(w)),
        "window_data_wait_frac": json.dumps([0.5] * len(w)),
        "data_wait_frac": 0.5,
        "latency_p50_ms": 1.0,
        "latency_p95_ms": 2.0,
        "latency_p99_ms": 4.0,
        "first_batch_latency_s": 1.0,
        "peak_pss_mb": 300.0,
        "remote_requests_per_kframe": float("nan"),
        "frames_wrong": 0,
        "environment": json.dumps(env or ENV),
        **kw,
    }


def write(path: Path, *rows: dict) -> Path:
    pd.DataFrame(list(rows)).to_csv(path, index=False)
    return path


def test_permutation_p_is_exact_at_three_windows_a_side():
    assert permutation_p(np.array([10.0, 11, 12]), np.array([7.0, 8, 9]), new_lower=True) == pytest.approx(1 / 20)
    assert permutation_p(np.array([10.0, 11, 12]), np.array([9.0, 10.5, 13]), new_lower=True) > 0.05


@pytest.mark.parametrize(
    "base, new, verdict",
    [
        ([100, 105, 110], [80, 82, 85], "regression"),  # -22%, every window below every base window
        ([100, 105, 110], [120, 125, 130], "improvement"),
        ([100, 105, 110], [70, 102, 140], "within noise"),  # the same median band: overlapping windows
        ([100, 105, 110], [95, 96, 97], "within noise"),  # separated, but -9% is under the 10% threshold
    ],
)
def test_frames_per_s_verdict_needs_the_threshold_and_separated_windows(base, new, verdict):
    b, n = np.array(base, float), np.array(new, float)
    got = judge(FPS, np.median(b), np.median(n), b, n, machine_noise=float("nan"), threshold=0.1)
    assert got["verdict"] == verdict and "permutation" in got["test"]


def test_one_value_metrics_need_more_than_the_machine_noise_and_their_floor():
    p99 = next(m for m in METRICS if m.name == "latency_p99_ms")
    flagged = judge(p99, 4.0, 6.0, None, None, machine_noise=0.2, threshold=0.1)
    assert flagged["verdict"] == "regression" and flagged["noise"] == 0.2 and "spread" in flagged["test"]
    assert judge(p99, 4.0, 4.6, None, None, machine_noise=0.2, threshold=0.1)["verdict"] == "within noise"
    assert judge(p99, 0.01, 0.05, None, None, machine_noise=0.0, threshold=0.1)["verdict"] == "within noise"  # floor


def test_latency_windows_put_a_tail_change_against_its_own_noise(tmp_path):
    """A p99 that rose 51% from run to run (as a rerun on a loaded 2-core machine did) is within noise when the
    windows' p99s overlap, and a regression when every new window lies above every base window."""
    base = summary_row([100, 105, 110], latency_p99_ms=1.08, window_latency_p99_ms=json.dumps([0.95, 1.08, 1.7]))
    for windows, verdict in (([1.0, 1.2, 1.64], "within noise"), ([1.75, 1.8, 1.64 * 1.2], "regression")):
        new = summary_row([100, 105, 110], latency_p99_ms=1.64, window_latency_p99_ms=json.dumps(windows))
        table = compare(write(tmp_path / "b.csv", base), write(tmp_path / "n.csv", new))
        row = table.set_index("metric").loc["latency_p99_ms"]
        assert row["verdict"] == verdict and "permutation" in row["test"], row.to_dict()


def test_runs_on_one_side_failures_and_environment_are_listed(tmp_path, capsys):
    base = write(
        tmp_path / "base.csv",
        summary_row([100, 105, 110]),
        summary_row([50, 52, 54], scenario="gone"),
        summary_row([50, 52, 54], loader="dlbench_stream"),
    )
    env = {**ENV, "torchcodec": "0.12.0"}
    new = write(
        tmp_path / "new.csv",
        summary_row([80, 82, 85], env=env),
        summary_row([50, 52, 54], scenario="added", env=env),
        summary_row([50, 52, 54], loader="dlbench_stream", status="failed", env=env),
    )
    table = compare(base, new, tmp_path / "compare.csv", tmp_path / "compare.png")
    assert list(pd.read_csv(tmp_path / "compare.csv").columns[: len(KEY)]) == KEY
    assert (tmp_path / "compare.png").stat().st_size > 0
    verdict = {(r["scenario"], r["loader"], r["metric"]): r["verdict"] for _, r in table.iterrows()}
    assert verdict[("s", "dlbench_map", "frames_per_s_node")] == "regression"
    assert verdict[("s", "dlbench_stream", "status")] == "regression"  # ok in base, failed in new
    assert (
        verdict[("gone", "dlbench_map", "")] == "only in base"
        and verdict[("added", "dlbench_map", "")] == "only in new"
    )
    env = table[table["metric"] == "env:torchcodec"].iloc[0]
    assert (env["base"], env["new"], env["verdict"]) == ("0.11.1", "0.12.0", "differs")
    assert not (table["metric"] == "remote_requests_per_kframe").any()  # measured on neither side

    assert main(["compare", str(base), str(new)]) == 0  # a report, not a gate...
    assert main(["compare", str(base), str(new), "--fail-on-regression"]) == 1  # ...unless asked
    out = capsys.readouterr().out
    assert "only in base: gone" in out and "environment differs: torchcodec 0.11.1 -> 0.12.0" in out
    assert main(["compare", str(base), str(base), "--fail-on-regression"]) == 0


def test_a_summary_from_before_the_window_columns_uses_min_median_max(tmp_path):
    old = {k: v for k, v in summary_row([100, 105, 110]).items() if not k.startswith("window_")}
    new = summary_row([80, 82, 85])
    table = compare(write(tmp_path / "b.csv", old), write(tmp_path / "n.csv", new))
    row = table[table["metric"] == "frames_per_s_node"].iloc[0]
    assert row["verdict"] == "regression" and row["p_value"] == pytest.approx(0.05)


def test_bad_input_is_one_line_naming_the_path(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "nope"), str(tmp_path / "nope")]) == 2
    assert "nope: no such file or directory" in capsys.readouterr().err
    write(tmp_path / "x.csv", {"a": 1})
    assert main(["compare", str(tmp_path / "x.csv"), str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert "x.csv: lacks the columns" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(tmp_path / "empty"), str(tmp_path / "x.csv")]) == 2
    assert "no run directories" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "x.csv"), str(tmp_path / "x.csv"), "--metric-threshold", "fps=0.1"]) == 2
    assert "not a compared metric" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ real runs
def bench(root: Path, out: Path) -> Path:
    """A short dlbench_map run (3 windows of 1.5 s) under the dataset name `d`, so re-encodes match by key; in its
    own process, as the workflow runs it (a second run in one process would open its first batch warm)."""
    args = ["-q", "bench-run", "--root", str(root), "--dataset", "d", "--out-dir", str(out), "--loader", "dlbench_map"]
    args += ["--num-workers", "0", "--batch-size", "8", "--duration-s", "1.5", "--warmup-s", "0.5", "--repeats", "3"]
    proc = subprocess.run(
        [sys.executable, "-m", "dlbench", *args, "--probe-samples", "0"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def gop_datasets(tmp_path_factory):
    """The same episodes encoded with a keyframe every 2 frames and with one per episode (GOP 200): random access
    into the second decodes from the episode's start, ~90 frames on average (4-5x slower here, so the verdict stands
    above the 27-53% that a rerun moves on a busy 2-core machine)."""
    out = {}
    for gop in (2, 200):
        tmp = tmp_path_factory.mktemp(f"gop{gop}")
        v21 = synth_cached(tiny_config(length_min=150, length_max=200, gop=gop), tmp / "v21")
        out[gop] = convert_run(str(v21), tmp / "v30", workers=2, progress=False)
    return out


@pytest.mark.slow
@pytest.mark.timing  # compares measured speeds: `make test` runs it after the parallel tests, alone
def test_a_run_is_unchanged_against_itself_and_a_long_gop_is_a_map_style_regression(gop_datasets, tmp_path, capsys):
    base = bench(gop_datasets[2], tmp_path / "base" / "runs" / "adhoc" / "r")
    # a rerun is no fixed point: on a busy 2-core machine one moved by 53% (docs/compare.md, "Windows
    # of one run"); the same run read as a results directory and as a run directory is
    table = compare(tmp_path / "base", base)
    metrics = table[table["metric"].isin([m.name for m in METRICS])]
    assert len(metrics) == 7 and set(metrics["verdict"]) == {"within noise"}, metrics.to_string()
    assert (metrics["change"] == 0).all() and (metrics["base"] > 0).all(), metrics.to_string()
    latencies = metrics[metrics["metric"].str.startswith("latency_")]  # tested against their own windows
    assert len(latencies) == 3 and latencies["test"].str.startswith("permutation").all(), latencies.to_string()
    assert (table["metric"] == "").sum() == 0 and not table["metric"].str.startswith("env:").any()

    long_gop = bench(gop_datasets[200], tmp_path / "long")
    argv = ["compare", str(base), str(long_gop), "--out", str(tmp_path / "c.csv"), "--plot", str(tmp_path / "c.png")]
    assert main([*argv, "--threshold", "0.3", "--fail-on-regression"]) == 1
    table = pd.read_csv(tmp_path / "c.csv")
    fps = table[table["metric"] == "frames_per_s_node"].iloc[0]
    assert fps["verdict"] == "regression" and fps["change"] < -0.3 and fps["p_value"] <= 0.05
    assert table.set_index("metric").loc["latency_p99_ms", "verdict"] == "regression"
    assert f"{fps['change']:+.1%}" in capsys.readouterr().out


@pytest.mark.slow
def test_compare_to_adds_the_comparison_to_the_workflow(tmp_path, v30_h264):
    """The workflow on a one-run matrix, then again with `compare_to` naming a copy of its results: compare.csv (the
    same records: no change) and compare.png, in the report too."""
    config = {
        "datasets": {"d": {"v30": str(v30_h264)}},  # read where it is: no synth or conversion jobs
        "convert": {"scaling_workers": []},
        "bench": {
            "defaults": {"batch_size": 4, "num_workers": 0, "duration_s": 1, "warmup_s": 0.2, "probe_samples": 0},
            "scenarios": {"map": {"loader": "dlbench_map"}},
        },
        "calibration": {"once": True},
    }
    snakemake = [sys.executable, "-m", "snakemake", "-s", str(Path(__file__).resolve().parents[1] / "Snakefile")]

    def run(*args):
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
        cmd = [*snakemake, "-d", str(tmp_path), "--configfile", str(tmp_path / "c.yaml"), "-c", "2", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=900)

    proc = run("results/summary.csv")
    assert proc.returncode == 0, proc.stderr[-3000:]
    shutil.copytree(tmp_path / "results", tmp_path / "old")
    config["compare_to"] = str(tmp_path / "nowhere")
    proc = run("-n")
    assert proc.returncode != 0 and "compare_to: " in proc.stderr and "does not exist" in proc.stderr
    config["compare_to"] = str(tmp_path / "old")
    proc = run("results/compare.csv", "results/plots/compare.png")
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = pd.read_csv(tmp_path / "results" / "compare.csv")
    assert set(table["verdict"]) == {"within noise"} and (table["change"] == 0).all()
    proc = run("results/compare.csv", "--report", str(tmp_path / "report.zip"))
    assert proc.returncode == 0, proc.stderr[-3000:]
